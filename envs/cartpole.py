"""``vimpc/CartPole-v0``: swing-up and balance of a pole on a cart with a short rail."""

from __future__ import annotations

import math
from typing import Any, final

import numpy as np

from vimpc import _checks
from vimpc.mechanics import CartPole

from ._base import MechanicalEnv, angle_cost
from ._render import GROUND_COLOR, TASK_COLOR


@final
class CartPoleEnv(MechanicalEnv):
    """Swing a pole up from hanging and balance it, keeping the cart on its rail.

    ## Description
    A cart (``mc = 1`` kg) on a horizontal rail carries a uniform pole (``m = 1`` kg,
    ``l = 0.5`` m) pinned at its top end (:class:`vimpc.mechanics.CartPole`). The
    true system has masses and inertias scaled by ``U(1 - perturbation,
    1 + perturbation)`` and viscous friction drawn from ``U(0, 1.0)`` N s/m on the
    cart and ``U(0, 0.5)`` N m s on the pole pivot (the GP-VI paper's ranges), both
    from ``param_seed``; it is integrated by the midpoint variational integrator.

    ## Action Space
    ``Box(-30.0, 30.0, (1,), float64)``; values outside are clipped.

    | Num | Action                   | Min   | Max  | Unit |
    |-----|--------------------------|-------|------|------|
    | 0   | force on the cart (+x)   | -30.0 | 30.0 | N    |

    ## Observation Space
    ``Box(-bound, bound, (4,), float64)``: the state plus ``N(0, obs_noise^2)`` noise.
    Angles are continuous (never wrapped). The bounds are generous, not limits: the
    state is never clipped; a start state given to ``reset`` must lie inside them.

    | Num | Observation                                 | Min  | Max | Unit  |
    |-----|---------------------------------------------|------|-----|-------|
    | 0   | s: cart position along the rail             | -1e4 | 1e4 | m     |
    | 1   | theta: pole angle from hanging, ccw         | -1e4 | 1e4 | rad   |
    | 2   | s_dot                                       | -1e3 | 1e3 | m/s   |
    | 3   | theta_dot                                   | -1e3 | 1e3 | rad/s |

    ``theta = 0`` hangs down, ``theta = pi`` (or any odd multiple) is upright.

    ## Rewards
    ``reward = -stage_cost(x_next, u)`` on the noise-free state after the step, with
    ``stage_cost = 2 (1 + cos theta) + 0.5 s^2 + 0.01 (s_dot^2 + theta_dot^2) + 1e-4 u^2``
    (0 balanced upright at ``s = 0``). Safety margin (``info``): the rail,
    ``[s_max - s, s_max + s]``, i.e. ``|s| <= s_max``.

    ## Starting State
    Hanging near the rail centre: ``s, theta ~ U(-0.1, 0.1)`` [m, rad],
    ``s_dot, theta_dot ~ U(-0.1, 0.1)`` [m/s, rad/s], from the ``reset`` seed; with
    ``start="upright"`` near upright instead: ``s ~ U(-0.2, 0.2)``, ``theta ~ pi +
    U(-0.2, 0.2)``, ``s_dot, theta_dot ~ U(-0.2, 0.2)`` (a balancing task);
    ``options={"state": x}`` sets the exact start.

    ## Episode End
    Never by itself (``terminated = truncated = False``), also not when the cart
    leaves the rail (the margin goes negative and ``info["constraint_violation"]``
    reports by how much); the user or the scenario chooses a time limit.

    ## Arguments
    - ``dt=0.01``: control step [s], a positive multiple of ``substep``.
    - ``substep=1e-4``: integrator substep [s].
    - ``perturbation=0.1``: relative spread of the mass and inertia factors.
    - ``friction=None``: ``[cart N s/m, pole pivot N m s]`` instead of the random draw.
    - ``obs_noise=1e-3``: observation noise std [m, rad, m/s, rad/s].
    - ``param_seed=0``: seed of the perturbation and friction draws.
    - ``params=None``: nominal parameters ``mc, Jc, m, l, J, g`` to override.
    - ``s_max=1.0``: half-length of the rail [m].
    - ``start="hanging"``: the start distribution, ``"hanging"`` or ``"upright"``.
    - ``jit=True``: compile the integrator to C (CasADi JIT, ~0.3 s once per process
      and true system; bit-identical results; interpreted if no C compiler is found).
    - ``render_mode=None`` or ``"rgb_array"``.

    ## Version History
    - v0: first version.
    """

    system_type = CartPole
    friction_max = (1.0, 0.5)
    friction_rates = ("cart", "pole_pivot")
    action_limit = (30.0,)
    observation_limit = (1e4, 1e4, 1e3, 1e3)

    def __init__(
        self,
        *,
        s_max: float = 1.0,
        start: str = "hanging",
        **common: Any,
    ) -> None:
        self.s_max = _checks.positive("s_max", s_max)
        self.start = _checks.one_of("start", start, ("hanging", "upright"))
        # the arguments every env shares (dt, substep, perturbation, friction, ...)
        super().__init__(**common)

    def stage_cost(self, obs: Any, u: Any, t: float = 0.0) -> float:
        """``2 (1 + cos theta) + 0.5 s^2 + 0.01 (s_dot^2 + theta_dot^2) + 1e-4 u^2``."""
        s, theta, s_rate, rate = (float(obs[i]) for i in range(4))
        force = float(np.asarray(u).reshape(-1)[0])
        return (
            angle_cost(theta, math.pi)
            + 0.5 * s * s
            + 0.01 * (s_rate * s_rate + rate * rate)
            + 1e-4 * force * force
        )

    def safety_margin(self, obs: Any) -> np.ndarray:
        """``[s_max - s, s_max + s]`` [m]."""
        s = float(obs[0])
        return np.array([self.s_max - s, self.s_max + s])

    @property
    def safety_limits(self):
        """The rail, ``|s| <= s_max`` [m]."""
        return (self._bound(0, -self.s_max, self.s_max, rows=(0, 1)),)

    def _sample_state(self) -> np.ndarray:
        if self.start == "upright":
            return np.array([0.0, math.pi, 0.0, 0.0]) + self.np_random.uniform(-0.2, 0.2, 4)
        return self.np_random.uniform(-0.1, 0.1, size=4)

    def _task_metadata(self) -> dict[str, Any]:
        return {"goal": "swing-up and balance at theta = pi, s = 0", "s_max": self.s_max}

    def _view(self):
        reach = self.s_max + 1.3 * self._true.params["l"]
        return (-reach, reach), (-0.6 * reach, 0.6 * reach)

    def _decorate(self, ax, state):
        ax.plot([-self.s_max, self.s_max], [0.0, 0.0], "-", color=GROUND_COLOR, linewidth=1)
        for end in (-self.s_max, self.s_max):
            ax.plot([end, end], [-0.1, 0.1], "-", color=TASK_COLOR, linewidth=2)
