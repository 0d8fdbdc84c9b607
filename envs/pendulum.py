"""``vimpc/Pendulum-v0``: torque-limited swing-up of a rod pendulum."""

from __future__ import annotations

import math
from typing import Any, final

import numpy as np

from vimpc import _checks
from vimpc.mechanics import Pendulum

from ._base import MechanicalEnv, angle_cost
from ._render import GROUND_COLOR, TASK_COLOR


@final
class PendulumEnv(MechanicalEnv):
    """Swing a uniform rod up from hanging to upright with a weak pivot motor.

    ## Description
    A uniform rod (``m = 1`` kg, ``l = 1`` m, ``J = m l^2 / 12``) turns about one end
    in a vertical plane (:class:`vimpc.mechanics.Pendulum`). The torque limit 2 N m
    is below the largest gravity torque ``m g l / 2 = 4.9`` N m, so the controller
    must pump energy to swing up. The true system has masses and inertias scaled by
    ``U(1 - perturbation, 1 + perturbation)`` and viscous pivot friction drawn from
    ``U(0, 1.0)`` N m s (the GP-VI paper's range), both from ``param_seed``; it is
    integrated by the midpoint variational integrator with step ``substep``.

    ## Action Space
    ``Box(-2.0, 2.0, (1,), float64)``; values outside are clipped.

    | Num | Action       | Min  | Max | Unit |
    |-----|--------------|------|-----|------|
    | 0   | pivot torque | -2.0 | 2.0 | N m  |

    ## Observation Space
    ``Box(-bound, bound, (2,), float64)``: the state plus ``N(0, obs_noise^2)`` noise.
    Angles are continuous (never wrapped). The bounds are generous, not limits: the
    state is never clipped; a start state given to ``reset`` must lie inside them.

    | Num | Observation                                    | Min  | Max | Unit  |
    |-----|------------------------------------------------|------|-----|-------|
    | 0   | theta: angle from hanging, counter-clockwise   | -1e4 | 1e4 | rad   |
    | 1   | theta_dot                                      | -1e3 | 1e3 | rad/s |

    ``theta = 0`` hangs down, ``theta = pi`` (or any odd multiple) is upright.

    ## Rewards
    ``reward = -stage_cost(x_next, u)`` on the noise-free state after the step, with
    ``stage_cost = 2 (1 + cos theta) + 0.01 theta_dot^2 + 0.001 u^2``
    (0 upright at rest, 4 hanging at rest). Safety margin (``info``):
    ``[max_speed - theta_dot, max_speed + theta_dot]``, i.e. ``|theta_dot| <= max_speed``.

    ## Starting State
    Hanging: ``theta ~ U(-0.1, 0.1)`` rad, ``theta_dot ~ U(-0.1, 0.1)`` rad/s, from the
    ``reset`` seed; ``options={"state": x}`` sets the exact start.

    ## Episode End
    Never by itself (``terminated = truncated = False``); the user or the scenario
    chooses a time limit (e.g. ``gymnasium.make(..., max_episode_steps=500)``).

    ## Arguments
    - ``dt=0.01``: control step [s], a positive multiple of ``substep``.
    - ``substep=1e-4``: integrator substep [s].
    - ``perturbation=0.1``: relative spread of the mass and inertia factors.
    - ``friction=None``: pivot friction ``[c]`` [N m s] instead of the random draw.
    - ``obs_noise=1e-3``: observation noise std [rad, rad/s].
    - ``param_seed=0``: seed of the perturbation and friction draws.
    - ``params=None``: nominal parameters ``m, l, J, g`` to override before perturbation.
    - ``max_speed=10.0``: safety bound on ``|theta_dot|`` [rad/s].
    - ``jit=True``: compile the integrator to C (CasADi JIT, ~0.3 s once per process
      and true system; bit-identical results; interpreted if no C compiler is found).
    - ``render_mode=None`` or ``"rgb_array"``.

    ## Version History
    - v0: first version.
    """

    system_type = Pendulum
    friction_max = (1.0,)
    friction_rates = ("pivot",)
    action_limit = (2.0,)
    observation_limit = (1e4, 1e3)

    def __init__(
        self,
        *,
        max_speed: float = 10.0,
        **common: Any,
    ) -> None:
        self.max_speed = _checks.positive("max_speed", max_speed)
        # the arguments every env shares (dt, substep, perturbation, friction, ...)
        super().__init__(**common)

    def stage_cost(self, obs: Any, u: Any, t: float = 0.0) -> float:
        """``2 (1 + cos theta) + 0.01 theta_dot^2 + 0.001 u^2`` (time-invariant)."""
        theta, rate = float(obs[0]), float(obs[1])
        torque = float(np.asarray(u).reshape(-1)[0])
        return angle_cost(theta, math.pi) + 0.01 * rate * rate + 0.001 * torque * torque

    def safety_margin(self, obs: Any) -> np.ndarray:
        """``[max_speed - theta_dot, max_speed + theta_dot]`` [rad/s]."""
        rate = float(obs[1])
        return np.array([self.max_speed - rate, self.max_speed + rate])

    @property
    def safety_limits(self):
        """``|theta_dot| <= max_speed`` [rad/s]."""
        return (self._bound(1, -self.max_speed, self.max_speed, rows=(0, 1)),)

    def _sample_state(self) -> np.ndarray:
        return self.np_random.uniform(-0.1, 0.1, size=2)

    def _task_metadata(self) -> dict[str, Any]:
        return {"goal": "swing-up to theta = pi", "max_speed": self.max_speed}

    def _view(self):
        reach = 1.2 * self._true.params["l"]
        return (-reach, reach), (-reach, reach)

    def _decorate(self, ax, state):
        l = self._true.params["l"]
        ax.plot([0.0, 0.0], [0.0, l], "--", color=TASK_COLOR, linewidth=1)
        ax.plot([0.0], [0.0], "s", color=GROUND_COLOR, markersize=8)
