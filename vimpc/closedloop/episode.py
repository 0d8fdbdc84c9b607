"""Running a controller on an environment and recording what happened."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium
import numpy as np

from vimpc import _checks
from vimpc._interrupt import check as check_interrupt
from vimpc.errors import InputError
from vimpc.mpc.result import MPCResult


@dataclass(frozen=True)
class Trajectory:
    """One closed-loop episode (``T`` steps).

    Arrays: ``t (T+1,)`` [s]; ``obs``, ``states`` ``(T+1, nobs)`` (observed and
    true); ``inputs (T, nu)`` (applied, after clipping); ``rewards (T,)``;
    ``solve_times (T,)`` [s]; ``iterations (T,)``; ``status (T,)`` (names of
    :class:`~vimpc.mpc.Status`); ``safety_margin (T+1, m)`` (>= 0 safe);
    ``constraint_residual (T+1,)``; ``reference (T+1, nobs)`` (the controller's
    reference, NaN when it has none); ``slack (T,)`` (largest slack of the soft
    constraints); ``plan_constraint (T,)``: the largest holonomic constraint residual of the
    model over each plan's predicted states (``MPCResult.plan_constraint``; NaN for a model
    without constraints, a fallback, or a record made before it existed); ``handed_over
    (T,)``: the calls ``solver = "condensed"`` handed to its ``condensed_start`` solver
    (``MPCResult.handed_over``; empty for a record made before it existed); ``tube_kept
    (T,)``: the calls the condensed SQP solved with the last solved call's tube
    (``MPCResult.tube_kept``; likewise); ``descended (T,)``: the calls whose solution came
    from the condensed SQP's single-shooting descent (``MPCResult.descended``; likewise);
    ``plan_obs (T,
    N + 1, nobs)``: the observations the plan of step ``k`` predicts for steps ``k .. k +
    N`` (NaN when the controller fell back); ``tube (T, N + 1, m)``: the tightening that
    plan applied to each of the controller's ``m`` safety rows at each stage (zeros without
    tightening). ``planned_obs`` and ``planned_tube`` give their stage 1: the prediction of
    the next step. ``empty_tube (T,)``: how many stages of each step's tightened set were
    empty (``MPCResult.empty_tube_stages``; empty for records made
    before it existed). ``call_times (T,)`` [s]: the wall time of each controller call
    (``MPCResult.call_time``: tube, solve and Python work; NaN where the controller does not
    say); ``late (T,)``: whether that call took longer than the controller's sampling
    period (``MPCResult.late``); ``period ()`` [s]: that period (``MPC.period``; NaN for a
    controller without one). The three are empty (``period`` NaN) for records made before
    they existed. ``start_time ()`` [s]: the wall time of the first plan, made before the
    first step and outside the loop's clock (``MPC.start``; NaN when there was none).
    ``terminated_at ()``, ``truncated_at ()``: the step after which the env first reported
    ``terminated`` (``truncated``), -1 if it never did; the episode ends there, unless the env
    goes on and says so in ``info["env_terminated"]`` (a foreign env with ``terminal =
    "continue"``, :mod:`vimpc_envs.adapter`). -1 for records made before they existed.
    """

    t: np.ndarray
    obs: np.ndarray
    states: np.ndarray
    inputs: np.ndarray
    rewards: np.ndarray
    solve_times: np.ndarray
    iterations: np.ndarray
    status: np.ndarray
    safety_margin: np.ndarray
    constraint_residual: np.ndarray
    reference: np.ndarray
    slack: np.ndarray
    plan_obs: np.ndarray
    tube: np.ndarray
    seed: int
    metadata: dict = field(default_factory=dict)
    empty_tube: np.ndarray = field(default_factory=lambda: np.zeros(0))
    call_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    period: np.ndarray = field(default_factory=lambda: np.array(np.nan))
    plan_constraint: np.ndarray = field(default_factory=lambda: np.zeros(0))
    handed_over: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    tube_kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    descended: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    start_time: np.ndarray = field(default_factory=lambda: np.array(np.nan))
    preparation_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    terminated_at: np.ndarray = field(default_factory=lambda: np.array(-1))
    truncated_at: np.ndarray = field(default_factory=lambda: np.array(-1))

    @property
    def planned_obs(self) -> np.ndarray:
        """``(T, nobs)``: the observation each plan predicted for the next step."""
        return self.plan_obs[:, 1] if self.plan_obs.shape[1] > 1 else self.plan_obs[:, 0]

    @property
    def planned_tube(self) -> np.ndarray:
        """``(T, m)``: the tightening each plan kept at the next step."""
        return self.tube[:, 1] if self.tube.shape[1] > 1 else self.tube[:, 0]

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays by name (for saving to ``.npz``)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("seed", "metadata")
        }


_INFO_KEYS = ("state", "safety_margin", "constraint_residual")

#: the Trajectory arrays that hold measured wall times, or what they decide (a call later than
#: the period): the only ones that differ between two runs of the same episode
WALL_CLOCK = ("solve_times", "call_times", "late", "start_time", "preparation_times")


def _env_dt(env) -> float:
    """The env's control step [s], or an InputError naming ``env``."""
    try:
        dt = env.get_wrapper_attr("dt") if hasattr(env, "get_wrapper_attr") else env.dt
        dt = float(dt)
    except (AttributeError, TypeError, ValueError):
        raise InputError(
            f"env must have a control step dt (seconds, a positive number); "
            f"{type(env).__name__} has none"
        ) from None
    if not np.isfinite(dt) or dt <= 0:
        raise InputError(f"env.dt must be a positive number of seconds, got {dt!r}")
    return dt


_RESULT_FIELDS = ("u", "status", "solve_time", "iterations", "slack")


def _check_result(result: Any, k: int) -> None:
    """Refuse what a controller returned unless it reads as an MPCResult (a bare input
    array, for one, has no status or solve time to record)."""
    missing = [name for name in _RESULT_FIELDS if not hasattr(result, name)]
    if missing:
        shape = getattr(result, "shape", None)
        got = f"{type(result).__name__}" + (f" of shape {shape}" if shape is not None else "")
        raise InputError(
            f"controller(obs, t) must return an MPCResult (or an object with "
            f"{', '.join(_RESULT_FIELDS)}), got {got} {result!r:.60} at step {k}, which has "
            f"no {', '.join(missing)}; a function that computes the input u can return "
            "SimpleNamespace(u=u, status=vimpc.mpc.Status.SOLVED, solve_time=0.0, "
            "iterations=0, slack=0.0)"
        )


def run_episode(
    env: gymnasium.Env,
    controller: Callable[..., MPCResult],
    steps: int,
    seed: int,
    *,
    reset_options: dict[str, Any] | None = None,
    on_step: Callable[[int], None] | None = None,
    initial_plan: bool = True,
) -> Trajectory:
    """Run ``controller`` on ``env`` for ``steps`` steps from ``env.reset(seed=seed)``.

    The controller is called as ``controller(obs, t)`` and must return an object
    with ``u``, ``status``, ``solve_time``, ``iterations`` and ``slack`` (an
    :class:`~vimpc.mpc.MPCResult`; its ``call_time`` and ``late`` are recorded where it
    has them), not the bare input: the trajectory records each call's status and times,
    and an :class:`~vimpc.errors.InputError` says so at the first call that returns
    anything else; a ``reset()`` method, if present, is called first. With ``initial_plan``, a
    ``start(obs, t)`` method, if present, makes the first plan from the reset observation
    before the first step (:meth:`vimpc.mpc.MPC.start`: outside the loop's clock, as a
    robot plans at its start; its time is ``Trajectory.start_time``); without it, the first
    call plans from a cold start. A ``prepare(t)`` method, if present, is called right
    after each input is applied, with the time of the next call (the real-time iteration's
    preparation phase, :meth:`vimpc.mpc.MPC.prepare`); its ``period`` (the sampling period
    ``late`` refers to) is recorded where it has one. ``on_step(k)`` is called after each
    step (progress bars).

    Every argument is checked before the environment is reset or stepped: an
    :class:`~vimpc.errors.InputError` names the argument that is wrong.
    """
    steps = _checks.positive_int("steps", steps)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer (a reset seed), got {seed!r}")
    if not callable(controller):
        raise InputError(
            "controller must be callable as controller(obs, t) and return an MPCResult (an "
            f"MPC, or a function), got {type(controller).__name__} {controller!r:.80}"
        )
    missing = [name for name in ("reset", "step") if not callable(getattr(env, name, None))]
    if missing:
        raise InputError(
            "env must be a gymnasium environment with reset(seed=...) and step(action); "
            f"got {type(env).__name__}, which has no {' or '.join(missing)}()"
        )
    if reset_options is not None and not isinstance(reset_options, dict):
        raise InputError(
            f"reset_options must be a dict or None, got {type(reset_options).__name__}"
        )
    if on_step is not None and not callable(on_step):
        raise InputError(f"on_step must be callable as on_step(k) or None, got {on_step!r:.80}")
    if not isinstance(initial_plan, (bool, np.bool_)):
        raise InputError(f"initial_plan must be True or False, got {initial_plan!r}")
    dt = _env_dt(env)
    if hasattr(controller, "reset"):
        controller.reset()
    reference = getattr(controller, "reference", None)
    model = getattr(controller, "model", None)
    if model is not None and abs(model.dt - dt) > 1e-12 * max(1.0, dt):
        raise InputError(
            f"the controller's model steps dt = {model.dt} s but the environment's control step "
            f"is {dt} s; build the model with the env's dt"
        )
    obs, info = env.reset(seed=int(seed), options=reset_options)
    absent = [key for key in _INFO_KEYS if key not in info]
    if absent:
        raise InputError(
            f"env: reset() must return (obs, info) with info holding {list(_INFO_KEYS)} (a "
            f"vimpc environment does); {type(env).__name__}'s info has no {absent}"
        )
    floats = (
        "obs",
        "states",
        "safety_margin",
        "constraint_residual",
        "reference",  # per state
        "inputs",
        "rewards",
        "solve_times",
        "slack",
        "plan_obs",
        "tube",
        "call_times",
        "preparation_times",
        "plan_constraint",  # per step
    )
    rec: dict[str, list] = {
        name: []
        for name in (
            *floats,
            "iterations",
            "status",
            "empty_tube",
            "late",
            "handed_over",
            "tube_kept",
            "descended",
        )
    }
    prepare = getattr(controller, "prepare", None)
    prepare = prepare if callable(prepare) else None
    period = getattr(controller, "period", None)
    period = float(period) if isinstance(period, (int, float, np.number)) else np.nan

    def record_state(obs, info, t):
        rec["obs"].append(obs)
        rec["states"].append(info["state"])
        rec["safety_margin"].append(info["safety_margin"])
        rec["constraint_residual"].append(info["constraint_residual"])
        rec["reference"].append(
            reference(t) if reference is not None else np.full(len(obs), np.nan)
        )

    record_state(obs, info, 0.0)
    start = getattr(controller, "start", None)
    start_time = np.nan
    if initial_plan and callable(start):
        first = start(obs, 0.0)
        start_time = float(getattr(first, "call_time", np.nan))
    terminated_at = truncated_at = -1
    for k in range(steps):
        t = k * dt
        result = controller(obs, t)
        _check_result(result, k)
        obs, reward, terminated, truncated, info = env.step(result.u)
        prepared = np.nan
        if prepare is not None and not (terminated or truncated):
            # the real-time iteration's preparation, after the input
            took = prepare((k + 1) * dt)
            prepared = float(took) if isinstance(took, (int, float, np.number)) else np.nan
        rec["inputs"].append(info.get("applied_action", result.u))
        rec["rewards"].append(reward)
        rec["solve_times"].append(result.solve_time)
        rec["iterations"].append(result.iterations)
        rec["status"].append(result.status.name)
        rec["slack"].append(result.slack)
        plan = np.atleast_2d(getattr(result, "obs", np.full((1, len(obs)), np.nan)))
        fell_back = getattr(result, "fallback", False)
        rec["plan_obs"].append(np.full(plan.shape, np.nan) if fell_back else plan)
        tube = getattr(result, "tube", None)
        rec["tube"].append(np.zeros((len(plan), 0)) if tube is None else tube)
        rec["empty_tube"].append(int(getattr(result, "empty_tube_stages", 0)))
        rec["call_times"].append(float(getattr(result, "call_time", np.nan)))
        rec["plan_constraint"].append(float(getattr(result, "plan_constraint", np.nan)))
        rec["handed_over"].append(bool(getattr(result, "handed_over", False)))
        rec["tube_kept"].append(bool(getattr(result, "tube_kept", False)))
        rec["descended"].append(bool(getattr(result, "descended", False)))
        rec["preparation_times"].append(prepared)
        # late: the input came after the next sample, or the next call's preparation ended
        # after it
        work = rec["call_times"][-1] + (prepared if np.isfinite(prepared) else 0.0)
        rec["late"].append(bool(getattr(result, "late", False)) or bool(work > period))
        record_state(obs, info, (k + 1) * dt)
        check_interrupt()  # a Ctrl-C that CasADi swallowed during the step
        if on_step is not None:
            on_step(k)
        if terminated or info.get("env_terminated", False):
            terminated_at = k + 1 if terminated_at < 0 else terminated_at
        if truncated:
            truncated_at = k + 1 if truncated_at < 0 else truncated_at
        if terminated or truncated:
            break
    return Trajectory(
        t=np.arange(len(rec["inputs"]) + 1) * dt,
        **{name: np.array(rec[name], dtype=np.float64) for name in floats},
        iterations=np.array(rec["iterations"], dtype=np.int64),
        empty_tube=np.array(rec["empty_tube"], dtype=np.int64),
        late=np.array(rec["late"], dtype=bool),
        handed_over=np.array(rec["handed_over"], dtype=bool),
        tube_kept=np.array(rec["tube_kept"], dtype=bool),
        descended=np.array(rec["descended"], dtype=bool),
        period=np.array(period, dtype=np.float64),
        start_time=np.array(start_time, dtype=np.float64),
        terminated_at=np.array(terminated_at, dtype=np.int64),
        truncated_at=np.array(truncated_at, dtype=np.int64),
        status=np.array(rec["status"], dtype=str),
        seed=int(seed),
    )
