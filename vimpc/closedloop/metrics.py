"""Metrics computed from recorded trajectories, never inside the loop that made them.

Words: a *margin* is a distance to a safety constraint (``>= 0`` safe); a *slack* is the
relaxation of a soft constraint in the controller's problem; the *tube* is the tightening
of the controller's safety rows by the model's propagated bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import casadi as ca
import numpy as np

from vimpc.closedloop.episode import Trajectory
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.models.calibration import windows_inside
from vimpc.mpc.result import Status

FAILED_STATUSES = ("FAILED", "INFEASIBLE", Status.TIME_LIMIT.name)
#: solves whose input was used although the solver did not finish cleanly
LATE_STATUS = Status.LATE.name
ITERATION_LIMIT_STATUS = Status.ITERATION_LIMIT.name
TIME_LIMIT_STATUS = Status.TIME_LIMIT.name


def late_steps(traj: Trajectory) -> np.ndarray:
    """``(T,)`` booleans: the steps whose controller call took longer than the sampling
    period (``Trajectory.late``). A record made before ``late`` was recorded knows lateness
    only from the status: there, the steps whose solve ran past the time budget (``LATE``)."""
    if traj.late.shape == traj.status.shape:
        return traj.late.astype(bool)
    return traj.status == LATE_STATUS


def _period_ms(trajectories: Sequence[Trajectory]) -> float:
    """The controllers' sampling period [ms] the ``late`` counts refer to (NaN where not
    recorded; the largest where episodes differ)."""
    periods = [float(t.period) for t in trajectories if np.isfinite(t.period)]
    return max(periods) * 1e3 if periods else math.nan


def wrapped_error(traj: Trajectory, periodic: Sequence[int] = ()) -> np.ndarray:
    """``states - reference`` with the entries in ``periodic`` (angles) wrapped to (-pi, pi]."""
    err = traj.states - traj.reference
    for i in periodic:
        err[:, i] = np.angle(np.exp(1j * err[:, i]))
    return err


def _rows(fn: ca.Function, X: np.ndarray) -> np.ndarray:
    """``fn`` applied to every row of ``X``; returns ``(len(X), n_out)``."""
    n = len(X)
    return np.asarray(fn.map(n)(X.T), dtype=np.float64).reshape(-1, n).T


def prediction_check(traj: Trajectory, model: DiscreteModel) -> dict[str, np.ndarray]:
    """The model's realized one-step errors along an episode and its bound there.

    ``error[k] = from_obs(obs[k+1]) - step(from_obs(obs[k]), u_k, p_default)`` (what the
    bound promises to cover), ``bound[k]`` (NaN without a bound); shapes ``(T, nx)``.
    """
    T = len(traj.inputs)
    X = _rows(model.from_obs, traj.obs)
    P = np.tile(model.p_default, (T, 1))
    pred = np.asarray(model.step.map(T)(X[:-1].T, traj.inputs.T, P.T)).reshape(-1, T).T
    out = {"error": X[1:] - pred, "bound": np.full((T, model.nx), np.nan)}
    if model.bound is not None:
        out["bound"] = np.asarray(model.bound.map(T)(X[:-1].T, traj.inputs.T, P.T)).reshape(-1, T).T
    return out


def _coverage_horizon(traj: Trajectory, horizon: int | None) -> int:
    """The horizon of the per-horizon coverage: ``horizon``, else the plans' length."""
    if horizon is None:
        return max(1, int(traj.plan_obs.shape[1]) - 1)
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise InputError(f"horizon must be a positive integer, got {horizon!r}")
    return int(horizon)


def nonfinite_plans(traj: Trajectory) -> np.ndarray:
    """``(T,)`` booleans: the steps whose plan predicts a NaN or inf although the controller
    did not fall back (a fallback's plan is NaN by definition)."""
    fell_back = np.isin(traj.status, FAILED_STATUSES)
    finite = np.all(np.isfinite(traj.plan_obs.reshape(len(traj.plan_obs), -1)), axis=1)
    return ~finite & ~fell_back


def safety_rows(traj: Trajectory, safety: ca.Function) -> dict[str, np.ndarray]:
    """The controller's safety rows ``h(obs) >= 0`` along an episode, shapes ``(T, m)``:
    ``realized`` on the true state after each step, ``planned`` on the plan's prediction of
    it, and ``tube`` the tightening the plan kept from the constraint."""
    m = safety.numel_out(0)
    T = len(traj.inputs)
    if m == 0:
        empty = np.zeros((T, 0))
        return {"realized": empty, "planned": empty, "tube": empty}
    planned = np.full((T, m), np.nan)
    ok = np.all(np.isfinite(traj.planned_obs), axis=1)
    if ok.any():
        planned[ok] = _rows(safety, traj.planned_obs[ok])
    tube = traj.planned_tube if traj.tube.shape[2] == m else np.zeros((T, m))
    return {"realized": _rows(safety, traj.states[1:]), "planned": planned, "tube": tube}


def _finite_max(values: np.ndarray) -> float:
    """The largest finite value, NaN when there is none."""
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else float("nan")


def _prepared(seconds: np.ndarray) -> np.ndarray:
    """The preparations that were made: positive times (0: nothing to prepare; NaN: a
    controller without a preparation phase)."""
    return seconds[seconds > 0]


def _finite_median(values: np.ndarray) -> float:
    """The median of the finite values, NaN when there is none."""
    return _finite_percentile(values, 50)


def _finite_percentile(values: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of the finite values, NaN when there is none."""
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else float("nan")


def episode_metrics(
    traj: Trajectory,
    success: Callable[[Trajectory], bool] | None = None,
    periodic: Sequence[int] = (),
    tracked: Sequence[int] | None = None,
    *,
    model: DiscreteModel | None = None,
    safety: ca.Function | None = None,
    horizon: int | None = None,
    data_box: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Per-episode metrics.

    ``cost``: sum of stage costs (minus the rewards). ``tracking_rmse``: RMS of
    ``states - reference`` over the finite reference entries of the ``tracked``
    observations (all by default), angles listed in ``periodic`` wrapped (NaN without a
    reference). Safety, on the env's safety margin of the true state: ``violations``
    (steps with a negative margin), ``max_violation`` (largest ``-margin``),
    ``min_margin`` (smallest margin over the episode: the margin the controller really
    had; ``inf`` if the task has no safety constraint). ``max_plan_constraint_residual``:
    the largest holonomic constraint residual of the controller's model over its plans'
    predicted states (absent for a model without constraints). Solve times in milliseconds;
    ``failed_solves`` (fell back: failed, infeasible or stopped at the time budget),
    ``time_limit_solves`` (stopped at the time budget, a share of ``failed_solves``),
    ``over_budget_solves`` (converged, but past the time budget) and
    ``iteration_limit_solves`` (stopped at the iteration limit) count steps by status.
    ``late_solves``: the steps whose controller call (tube, solve and Python work) took
    longer than the sampling period ``period_ms`` (:func:`late_steps`), with
    ``late_solve_fraction`` and ``call_time_max_ms`` (NaN where calls were not timed).
    ``first_plan_time_ms``: the first plan, made before the first step and outside the
    loop's clock (``Trajectory.start_time``; NaN where there was none).
    ``preparation_time_median_ms``: the real-time iteration's preparations between samples
    (the positive ``Trajectory.preparation_times``; NaN where none was made).

    ``nonfinite_plans``: steps whose plan predicts a NaN or inf without a fallback.

    With the controller's ``model``: ``failed_model_steps``, the steps where its ``step``
    from the measured state under the applied input is NaN (its Newton solve failed or
    found a spurious root, see :mod:`vimpc.integrators.variational`); ``prediction_rmse``
    of its other one-step errors and, when it has a bound, ``coverage`` (fraction of steps
    whose error lies within the bound in every entry; a failed step counts as outside) and
    ``max_error_over_bound`` (over the steps predicted), and per horizon
    ``horizon_coverage``: the share of the windows of ``coverage_horizon`` consecutive steps
    (every start along the episode; the controller's horizon, from the recorded plans,
    unless ``horizon`` is given) in which every step's error lay within the bound (NaN for
    an episode shorter than the horizon). With the controller's ``safety`` rows:
    ``min_planned_margin`` (smallest ``planned - tube``: how far inside the tightened
    constraint the plans stayed) and ``max_tube`` (largest finite tightening). ``empty_tube_steps``:
    the steps whose tightened set was empty at some stage of the plan (no cap hides it; a
    tube that could not be computed counts as empty; recorded trajectories only).

    With the model's ``data_box`` (``{"low", "high"}``: the box of the states it was trained
    and calibrated on, :func:`vimpc.pipeline.data_box`): ``outside_data_steps``, the steps
    whose true state lies outside the box in some entry (:func:`outside_box`), and
    ``outside_data_share`` of the steps.
    """
    margin = traj.safety_margin
    worst = margin.min(axis=1) if margin.shape[1] else np.full(len(traj.t), np.inf)
    err = wrapped_error(traj, periodic)
    if tracked is not None:
        err = err[:, list(tracked)]
    mask = np.isfinite(err)
    rmse = float(np.sqrt(np.mean(err[mask] ** 2))) if mask.any() else float("nan")
    times_ms = traj.solve_times * 1e3
    failed = np.isin(traj.status, FAILED_STATUSES)
    out = {
        "cost": float(-traj.rewards.sum()),
        "tracking_rmse": rmse,
        "success": float(success(traj)) if success is not None else float("nan"),
        "violations": int(np.count_nonzero(worst < 0)),
        "max_violation": float(max(0.0, -worst.min())),
        "min_margin": float(worst.min()),
        "max_constraint_residual": float(traj.constraint_residual.max()),
        "solve_time_median_ms": float(np.median(times_ms)),
        "solve_time_p95_ms": float(np.percentile(times_ms, 95)),
        "solve_time_max_ms": float(times_ms.max()),
        "failed_solves": int(np.count_nonzero(failed)),
        "failed_solve_fraction": float(failed.mean()),
        "late_solves": int(np.count_nonzero(late_steps(traj))),
        "late_solve_fraction": float(late_steps(traj).mean()) if len(traj.status) else 0.0,
        "period_ms": _period_ms([traj]),
        "call_time_max_ms": _max_ms(traj.call_times),
        "first_plan_time_ms": float(traj.start_time) * 1e3,
        "preparation_time_median_ms": _finite_median(_prepared(traj.preparation_times)) * 1e3,
        "time_limit_solves": int(np.count_nonzero(traj.status == TIME_LIMIT_STATUS)),
        "over_budget_solves": int(np.count_nonzero(traj.status == LATE_STATUS)),
        "iteration_limit_solves": int(np.count_nonzero(traj.status == ITERATION_LIMIT_STATUS)),
        "steps": int(len(traj.inputs)),
    }
    out["nonfinite_plans"] = int(np.count_nonzero(nonfinite_plans(traj)))
    for key in ("terminated_at", "truncated_at"):  # where the env said the episode was over
        if int(getattr(traj, key)) >= 0:
            out[key] = int(getattr(traj, key))
    if traj.empty_tube.shape == traj.status.shape:
        out["empty_tube_steps"] = int(np.count_nonzero(traj.empty_tube > 0))
    if model is not None:
        check = prediction_check(traj, model)
        predicted = np.all(np.isfinite(check["error"]), axis=1)
        out["failed_model_steps"] = int(np.count_nonzero(~predicted))
        errors = check["error"][predicted]
        out["prediction_rmse"] = float(np.sqrt(np.mean(errors**2))) if len(errors) else math.nan
        if model.bound is not None:
            # a failed step (NaN) is no prediction inside its bound: it counts as outside
            inside = np.all(np.abs(check["error"]) <= check["bound"], axis=1)
            ratio = np.abs(errors) / np.maximum(check["bound"][predicted], 1e-300)
            out["coverage"] = float(inside.mean())
            n = _coverage_horizon(traj, horizon)
            windows = windows_inside(inside, n)
            out["horizon_coverage"] = float(windows.mean()) if windows.size else math.nan
            out["coverage_horizon"] = n
            out["max_error_over_bound"] = float(ratio.max()) if ratio.size else math.nan
    if data_box is not None:
        outside = outside_box(traj, data_box)
        out["outside_data_steps"] = int(np.count_nonzero(outside))
        out["outside_data_share"] = float(outside.mean()) if outside.size else 0.0
    if safety is not None and safety.numel_out(0):
        rows = safety_rows(traj, safety)
        planned = rows["planned"] - rows["tube"]
        finite = np.isfinite(planned)
        out["min_planned_margin"] = float(planned[finite].min()) if finite.any() else math.nan
        tube = rows["tube"][np.isfinite(rows["tube"])]  # inf: a tube that was not computed
        out["max_tube"] = float(tube.max()) if tube.size else 0.0
    plan = _finite_max(traj.plan_constraint)
    if np.isfinite(plan):  # a model with holonomic constraints (NaN would not compare equal)
        out["max_plan_constraint_residual"] = plan
    return out


def _max_ms(seconds: np.ndarray) -> float:
    """The largest finite time in ``seconds``, in ms (NaN when none is)."""
    finite = seconds[np.isfinite(seconds)]
    return float(finite.max()) * 1e3 if finite.size else math.nan


def outside_box(traj: Trajectory, box: dict[str, Any]) -> np.ndarray:
    """``(T,)`` booleans: whether the true state at the start of each step (where the model
    predicts from) lies outside ``box`` (``low <= x <= high`` per entry) in some entry."""
    low = np.asarray(box["low"], dtype=np.float64)
    high = np.asarray(box["high"], dtype=np.float64)
    states = traj.states[: len(traj.inputs)]
    if low.shape != (states.shape[1],) or high.shape != low.shape:
        raise InputError(
            f"the data box has {low.size} low and {high.size} high entries; the trajectory's "
            f"states have {states.shape[1]}"
        )
    return np.any((states < low) | (states > high), axis=1)


#: resamples and seed of the bootstrap intervals of the summary (percentile method)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def bootstrap_interval(values: Sequence[float], level: float = 0.95) -> list[float]:
    """The percentile bootstrap interval of the mean of ``values`` (finite ones;
    :data:`BOOTSTRAP_RESAMPLES` resamples over the values, seed :data:`BOOTSTRAP_SEED`):
    ``[low, high]``, NaN for fewer than 2 values."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=np.float64)
    if v.size < 2:
        return [math.nan, math.nan]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = v[rng.integers(0, v.size, size=(BOOTSTRAP_RESAMPLES, v.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return [float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))]


def variation_summary(per_episode: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What varies across fits, plants and episodes.

    ``bootstrap``: the method of the ``*_ci95`` intervals below. ``min_margin_mean_ci95``
    and ``coverage_mean_ci95`` (and ``horizon_coverage_mean_ci95``): percentile bootstrap
    over episodes (:func:`bootstrap_interval`); with plants per episode each episode has its
    own plant, so these are intervals across plants and initial states. ``plants``: the
    distinct plant seeds. ``fit_count`` and, with more than one fit, ``per_fit`` (episodes, success
    and violation rates with their Wilson intervals, mean episode minimum margin, mean
    coverage, each fit's) and ``between_fit_std`` (the standard deviation of those figures
    across fits). With a data box: ``outside_data_share`` (pooled over all steps),
    ``outside_data_share_max`` (the worst episode) and ``episodes_outside_data``."""
    out: dict[str, Any] = {
        "bootstrap": f"percentile, {BOOTSTRAP_RESAMPLES} resamples of episodes, seed "
        f"{BOOTSTRAP_SEED}"
    }
    for key in ("min_margin", "coverage", "horizon_coverage"):
        values = [m[key] for m in per_episode if key in m]
        if values:
            out[f"{key}_mean_ci95"] = bootstrap_interval(values)
    plants = {m["plant_seed"] for m in per_episode if "plant_seed" in m}
    if plants:
        out["plants"] = len(plants)
    fits = sorted({int(m.get("fit", 0)) for m in per_episode})
    out["fit_count"] = len(fits)
    if len(fits) > 1:
        rows = []
        for k in fits:
            mine = [m for m in per_episode if int(m.get("fit", 0)) == k]
            n = len(mine)
            row: dict[str, Any] = {"fit": k, "episodes": n}
            success = [m["success"] for m in mine]
            if not any(math.isnan(x) for x in success):
                row["success_rate"] = float(np.mean(success))
                row["success_rate_ci95"] = list(wilson_interval(int(sum(success)), n))
            violated = sum(m["violations"] > 0 for m in mine)
            row["violation_rate"] = violated / n
            row["violation_rate_ci95"] = list(wilson_interval(violated, n))
            row["min_margin_mean"] = float(np.mean([m["min_margin"] for m in mine]))
            cov = [m["coverage"] for m in mine if "coverage" in m]
            if cov:
                row["coverage_mean"] = float(np.mean(cov))
            rows.append(row)
        out["per_fit"] = rows
        spread = {}
        for key in ("success_rate", "violation_rate", "min_margin_mean", "coverage_mean"):
            values = [r[key] for r in rows if key in r]
            if len(values) == len(rows):
                spread[key] = float(np.std(values, ddof=1))
        out["between_fit_std"] = spread
    shares = [m for m in per_episode if "outside_data_steps" in m]
    if shares:
        steps = sum(m["steps"] for m in shares)
        out["outside_data_share"] = sum(m["outside_data_steps"] for m in shares) / max(steps, 1)
        out["outside_data_share_max"] = float(max(m["outside_data_share"] for m in shares))
        out["episodes_outside_data"] = int(sum(m["outside_data_steps"] > 0 for m in shares))
        out["episodes_with_data_box"] = len(shares)
    return out


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a rate ``successes / n`` (95 % by default)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at a rate of 0 (of 1) the lower (upper) end is exactly 0 (1); computed, round-off put
    # it a few 1e-17 inside, above the rate itself
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return (low, high)


def _spread(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def summarize(
    per_episode: Sequence[dict[str, float]],
    trajectories: Sequence[Trajectory],
    safety_limits: Sequence[Any] = (),
) -> dict:
    """Aggregate over episodes.

    Rates (success, episodes with a violation) come with their 95 % Wilson interval
    (``*_ci95``); means with their standard deviation over episodes (``*_std``); the
    worst case where safety is concerned (``min_margin``, ``max_violation``). Per row of the
    env's safety margin, over all episodes: ``margin_row_violations`` (states with a
    negative margin) and ``margin_row_min`` (the smallest margin); with the env's
    ``safety_limits`` (records with ``name``, ``unit`` and the margin ``rows`` they own),
    ``safety_limits`` lists each by name with its ``states_outside`` and ``min_margin``.
    Solve-time statistics
    and the solve counts (``solves``, ``failed_solves``, ``time_limit_solves``,
    ``over_budget_solves``, ``iteration_limit_solves``; ``handed_over_solves``, the calls
    ``solver = "condensed"`` handed to its ``condensed_start`` solver; ``tube_kept_solves``,
    the calls it solved with the last solved call's tube; ``descended_solves``, the calls
    whose solution came from its single-shooting descent (a time budget), of which
    ``descended_iterates`` used its last accepted iterate unconverged; ``late_solves`` with
    ``late_solve_fraction`` of all steps against the sampling period ``period_ms``, and
    ``call_time_median_ms``, ``_p95_ms`` and ``_max_ms``: the whole controller calls, tube
    and Python included) pool all steps of all episodes, as do ``nonfinite_plans``,
    ``first_plan_time_median_ms`` and ``_max_ms`` (the plans made before each episode's
    first step, outside the loop's clock; NaN where none was made), and
    ``preparation_time_median_ms``, ``_p95_ms`` and ``_max_ms`` (the real-time iteration's
    preparations between samples; NaN where none was made); where the env reported an
    episode over (``Trajectory.terminated_at``, ``truncated_at``), ``terminated_episodes``
    (``truncated_episodes``) with its Wilson interval and the median step it came at;
    and (with a model) ``failed_model_steps``. With a bound: ``coverage_mean`` (per step)
    and ``horizon_coverage_mean`` (per window of ``coverage_horizon`` steps), each with its
    ``_std`` over episodes and ``_min`` (the worst episode). Intervals across episodes,
    plants and fits and the share of steps outside the model's data:
    :func:`variation_summary`.
    """
    if not per_episode:
        raise ValueError("summarize needs at least one episode")
    n = len(per_episode)
    times_ms = np.concatenate([t.solve_times for t in trajectories]) * 1e3
    status = np.concatenate([t.status for t in trajectories])
    success = np.array([m["success"] for m in per_episode])
    violated = int(sum(m["violations"] > 0 for m in per_episode))
    out: dict[str, Any] = {"episodes": n}
    if np.any(np.isnan(success)):
        out["success_rate"], out["success_rate_ci95"] = math.nan, [math.nan, math.nan]
    else:
        out["success_rate"] = float(success.mean())
        out["success_rate_ci95"] = list(wilson_interval(int(success.sum()), n))
    out["violation_rate"] = violated / n
    out["violation_rate_ci95"] = list(wilson_interval(violated, n))
    out["episodes_with_violation"] = violated
    out["violations"] = int(sum(m["violations"] for m in per_episode))
    out["max_violation"] = float(max(m["max_violation"] for m in per_episode))
    out["min_margin"] = float(min(m["min_margin"] for m in per_episode))
    margins = np.concatenate([t.safety_margin for t in trajectories])
    out["margin_row_violations"] = [int(n) for n in np.count_nonzero(margins < 0, axis=0)]
    out["margin_row_min"] = [float(v) for v in margins.min(axis=0)] if len(margins) else []
    out["safety_limits"] = [
        {
            "name": limit.name,
            "unit": limit.unit,
            "states_outside": sum(out["margin_row_violations"][r] for r in limit.rows),
            "min_margin": min(out["margin_row_min"][r] for r in limit.rows),
        }
        for limit in safety_limits
    ]
    for key, name in (
        ("cost", "cost"),
        ("tracking_rmse", "tracking_rmse"),
        ("min_margin", "min_margin"),
        ("coverage", "coverage"),
        ("horizon_coverage", "horizon_coverage"),
        ("prediction_rmse", "prediction_rmse"),
        ("min_planned_margin", "min_planned_margin"),
    ):
        values = [m[key] for m in per_episode if key in m]
        if values:
            out[f"{name}_mean"], out[f"{name}_std"] = _spread(values)
    coverages = [m["coverage"] for m in per_episode if "coverage" in m]
    if coverages:
        out["coverage_min"] = float(min(coverages))
    per_horizon = [m["horizon_coverage"] for m in per_episode if "horizon_coverage" in m]
    if per_horizon:
        out["coverage_horizon"] = int(max(m["coverage_horizon"] for m in per_episode))
        if np.any(np.isfinite(per_horizon)):  # NaN: every episode shorter than the horizon
            out["horizon_coverage_min"] = float(np.nanmin(per_horizon))
    for key, name in (("terminated_at", "terminated"), ("truncated_at", "truncated")):
        ended = sum(key in m for m in per_episode)
        if ended:  # the env reported it (a foreign env's task end, its time limit)
            out[f"{name}_episodes"] = ended
            out[f"{name}_rate_ci95"] = list(wilson_interval(ended, n))
            out[f"{name}_first_step_median"] = float(
                np.median([m[key] for m in per_episode if key in m])
            )
    out["max_constraint_residual"] = float(max(m["max_constraint_residual"] for m in per_episode))
    plan = _finite_max(
        np.array([m.get("max_plan_constraint_residual", np.nan) for m in per_episode])
    )
    if np.isfinite(plan):  # a model with holonomic constraints
        out["max_plan_constraint_residual"] = plan
    out["solve_time_median_ms"] = float(np.median(times_ms))
    out["solve_time_p95_ms"] = float(np.percentile(times_ms, 95))
    out["solve_time_max_ms"] = float(times_ms.max())
    out["solves"] = int(status.size)
    out["failed_solves"] = int(np.count_nonzero(np.isin(status, FAILED_STATUSES)))
    out["failed_solve_fraction"] = float(np.mean(np.isin(status, FAILED_STATUSES)))
    late = np.concatenate([late_steps(t) for t in trajectories])
    out["late_solves"] = int(np.count_nonzero(late))
    out["late_solve_fraction"] = float(late.mean()) if late.size else 0.0
    out["period_ms"] = _period_ms(trajectories)
    calls = np.concatenate([t.call_times for t in trajectories])
    out["call_time_median_ms"] = _finite_median(calls) * 1e3
    out["call_time_p95_ms"] = _finite_percentile(calls, 95) * 1e3
    out["call_time_max_ms"] = _max_ms(calls)
    first = np.array([float(t.start_time) for t in trajectories]) * 1e3
    out["first_plan_time_median_ms"] = _finite_median(first)
    out["first_plan_time_max_ms"] = _finite_max(first)
    prepared = _prepared(np.concatenate([t.preparation_times for t in trajectories])) * 1e3
    out["preparation_time_median_ms"] = _finite_median(prepared)
    out["preparation_time_p95_ms"] = (
        float(np.percentile(prepared, 95)) if prepared.size else math.nan
    )
    out["preparation_time_max_ms"] = _finite_max(prepared)
    out["time_limit_solves"] = int(np.count_nonzero(status == TIME_LIMIT_STATUS))
    out["over_budget_solves"] = int(np.count_nonzero(status == LATE_STATUS))
    out["iteration_limit_solves"] = int(np.count_nonzero(status == ITERATION_LIMIT_STATUS))
    out["handed_over_solves"] = int(sum(np.count_nonzero(t.handed_over) for t in trajectories))
    out["tube_kept_solves"] = int(sum(np.count_nonzero(t.tube_kept) for t in trajectories))
    out["descended_solves"] = int(sum(np.count_nonzero(t.descended) for t in trajectories))
    out["descended_iterates"] = int(
        sum(
            np.count_nonzero(t.descended & (t.status == ITERATION_LIMIT_STATUS))
            for t in trajectories
            if t.descended.size
        )
    )
    out["nonfinite_plans"] = int(sum(m.get("nonfinite_plans", 0) for m in per_episode))
    if all("empty_tube_steps" in m for m in per_episode):
        # the share of control steps whose tightened set was empty at some stage
        out["empty_tube_steps"] = int(sum(m["empty_tube_steps"] for m in per_episode))
        out["empty_tube_fraction"] = out["empty_tube_steps"] / max(out["solves"], 1)
    if any("failed_model_steps" in m for m in per_episode):
        out["failed_model_steps"] = int(sum(m.get("failed_model_steps", 0) for m in per_episode))
    out.update(variation_summary(per_episode))
    return out
