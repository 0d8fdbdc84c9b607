"""``vimpc/FourBar-v0``: crank-angle tracking on a closed-loop four-bar linkage."""

from __future__ import annotations

import math
from typing import Any, final

import numpy as np

from vimpc import _checks
from vimpc.mechanics import FourBar

from ._base import MechanicalEnv, finite_number
from ._render import GROUND_COLOR, TASK_COLOR


@final
class FourBarEnv(MechanicalEnv):
    """Drive the crank of a four-bar linkage along a reference angle.

    ## Description
    A Grashof crank-rocker of uniform rods in a vertical plane
    (:class:`vimpc.mechanics.FourBar`: ground pivots ``A = (0, 0)``, ``D = (1.3, 0)``
    m; crank ``AB = 0.5`` m, coupler ``BC = 1.2`` m, rocker ``DC = 1.0`` m; 1 kg per
    rod). The three absolute link angles are tied by the two loop-closure equations
    ``g(q) = 0``, which the variational integrator enforces at every substep. The
    true system has the rod mass scaled by ``U(1 - perturbation, 1 + perturbation)``
    and viscous joint friction drawn from ``U(0, [2.0, 0.5, 0.5, 2.0])`` N m s at
    joints (A, B, C, D): ground pivots high, moving joints low (the GP-VI paper's
    ranges), both from ``param_seed``.

    The task: the crank angle ``theta1`` follows :meth:`reference`,
    ``theta1_ref(t) = theta1(0) + reference_speed t`` from the crank angle at reset
    (default ``2 pi / 3`` rad/s, one turn in 3 s). The torque limit 20 N m covers the
    worst case: holding exactly ``2 pi / 3`` rad/s with +10 % mass and the largest
    friction draw takes up to 16.8 N m (holding the crank against gravity: up to
    7.3 N m, 8.1 N m with +10 % mass).

    ## Action Space
    ``Box(-20.0, 20.0, (1,), float64)``; values outside are clipped.

    | Num | Action                  | Min   | Max  | Unit |
    |-----|-------------------------|-------|------|------|
    | 0   | crank torque at joint A | -20.0 | 20.0 | N m  |

    ## Observation Space
    ``Box(-bound, bound, (6,), float64)``: the state plus ``N(0, obs_noise^2)`` noise.
    Angles are absolute from the ``+x`` axis, counter-clockwise, continuous (never
    wrapped). The bounds are generous, not limits: the state is never clipped; a
    start state given to ``reset`` must lie inside them.

    | Num | Observation                  | Min  | Max | Unit  |
    |-----|------------------------------|------|-----|-------|
    | 0   | theta1: crank angle          | -1e4 | 1e4 | rad   |
    | 1   | theta2: coupler angle        | -1e4 | 1e4 | rad   |
    | 2   | theta3: rocker angle         | -1e4 | 1e4 | rad   |
    | 3   | theta1_dot                   | -1e3 | 1e3 | rad/s |
    | 4   | theta2_dot                   | -1e3 | 1e3 | rad/s |
    | 5   | theta3_dot                   | -1e3 | 1e3 | rad/s |

    ## Rewards
    ``reward = -stage_cost(x_next, u, t_next)`` on the noise-free state after the
    step, with ``stage_cost = (theta1 - theta1_ref(t))^2
    + 0.01 (theta1_dot - reference_speed)^2 + 1e-4 u^2``. Safety margin (``info``):
    ``[max_crank_speed - theta1_dot, max_crank_speed + theta1_dot]``.
    ``info["constraint_residual"]`` is ``||g(q)||`` [m], the loop-closure residual.

    ## Starting State
    ``theta1 ~ U(-pi, pi)`` rad, ``theta1_dot ~ U(-0.1, 0.1)`` rad/s, the other
    links assembled on branch +1 (``C`` above the line ``BD``) with consistent
    rates (:meth:`vimpc.mechanics.FourBar.assemble`). ``options={"state": x}`` sets
    the exact start; it must satisfy ``||g(q)|| <= 1e-8`` and ``||G(q) v|| <= 1e-8``.

    ## Episode End
    Never by itself (``terminated = truncated = False``); the user or the scenario
    chooses a time limit.

    ## Arguments
    - ``dt=0.01``: control step [s], a positive multiple of ``substep``.
    - ``substep=1e-4``: integrator substep [s].
    - ``perturbation=0.1``: relative spread of the mass factor.
    - ``friction=None``: joint friction ``[A, B, C, D]`` [N m s] instead of the draw.
    - ``obs_noise=1e-3``: observation noise std [rad, rad/s].
    - ``param_seed=0``: seed of the perturbation and friction draws.
    - ``params=None``: nominal parameters ``a, b, c, d, m, g`` to override.
    - ``reference_speed=2 pi / 3``: crank speed of the reference [rad/s].
    - ``max_crank_speed=8.0``: safety bound on ``|theta1_dot|`` [rad/s].
    - ``jit=True``: compile the integrator to C (CasADi JIT, ~0.3 s once per process
      and true system; bit-identical results; interpreted if no C compiler is found).
    - ``render_mode=None`` or ``"rgb_array"``.

    ## Version History
    - v0: first version.
    """

    system_type = FourBar
    friction_max = (2.0, 0.5, 0.5, 2.0)
    friction_rates = ("A", "B", "C", "D")
    action_limit = (20.0,)
    observation_limit = (1e4, 1e4, 1e4, 1e3, 1e3, 1e3)

    def __init__(
        self,
        *,
        reference_speed: float = 2.0 * math.pi / 3.0,
        max_crank_speed: float = 8.0,
        **common: Any,
    ) -> None:
        self.reference_speed = finite_number("reference_speed", reference_speed)
        self.max_crank_speed = _checks.positive("max_crank_speed", max_crank_speed)
        self._crank_start = 0.0
        # the arguments every env shares (dt, substep, perturbation, friction, ...)
        super().__init__(**common)

    def reference(self, t: Any) -> Any:
        """Reference crank angle [rad] at time ``t`` [s] since reset (array-friendly)."""
        return self._crank_start + self.reference_speed * t

    def stage_cost(self, obs: Any, u: Any, t: float = 0.0) -> float:
        """``(theta1 - theta1_ref(t))^2 + 0.01 (theta1_dot - reference_speed)^2 + 1e-4 u^2``;
        ``t`` is the time since reset [s]."""
        error = float(obs[0]) - self.reference(float(t))
        rate_error = float(obs[3]) - self.reference_speed
        torque = float(np.asarray(u).reshape(-1)[0])
        return error * error + 0.01 * rate_error * rate_error + 1e-4 * torque * torque

    def safety_margin(self, obs: Any) -> np.ndarray:
        """``[max_crank_speed - theta1_dot, max_crank_speed + theta1_dot]`` [rad/s]."""
        rate = float(obs[3])
        return np.array([self.max_crank_speed - rate, self.max_crank_speed + rate])

    @property
    def safety_limits(self):
        """``|theta1_dot| <= max_crank_speed`` [rad/s]."""
        return (self._bound(3, -self.max_crank_speed, self.max_crank_speed, rows=(0, 1)),)

    def _sample_state(self) -> np.ndarray:
        crank = self.np_random.uniform(-math.pi, math.pi)
        rate = self.np_random.uniform(-0.1, 0.1)
        q, v = self._true.assemble(crank, rate, branch=1)
        return np.concatenate([q, v])

    def _on_reset(self) -> None:
        self._crank_start = float(self._x[0])

    def _consistent_state_hint(self) -> str:
        return "build it with env.true_system.assemble(crank_angle, crank_rate)"

    def _task_metadata(self) -> dict[str, Any]:
        return {
            "goal": "track theta1_ref(t) = theta1(0) + reference_speed t",
            "reference_speed": self.reference_speed,
            "max_crank_speed": self.max_crank_speed,
        }

    def _view(self):
        a, c, d = (self._true.params[k] for k in "acd")
        reach = max(a, c) + 0.2
        return (min(-a, d - c) - 0.2, max(a, d + c) + 0.2), (-reach, reach)

    def _decorate(self, ax, state):
        a, d = self._true.params["a"], self._true.params["d"]
        ref = self.reference(self.time)
        ax.plot([0.0, a * math.cos(ref)], [0.0, a * math.sin(ref)], "--", color=TASK_COLOR)
        ax.plot([0.0, d], [0.0, 0.0], "s", color=GROUND_COLOR, markersize=8)
