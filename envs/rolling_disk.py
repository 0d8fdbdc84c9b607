"""``vimpc/RollingDisk-v0``: drive a rolling disk to a target pose around an obstacle."""

from __future__ import annotations

import math
from typing import Any, final

import numpy as np

from vimpc import _checks
from vimpc.errors import InputError
from vimpc.mechanics import RollingDisk

from ._base import KeepOutCircle, MechanicalEnv, angle_cost
from ._render import GROUND_COLOR, TASK_COLOR


@final
class RollingDiskEnv(MechanicalEnv):
    """Steer a vertical disk rolling without slipping to a target pose past an obstacle.

    ## Description
    A vertical disk (``R = 0.3`` m, ``m = I = J = 1``) rolls without slipping on the
    plane (:class:`vimpc.mechanics.RollingDisk`): the contact point can only move
    along the heading, ``x' = R cos(phi) theta'``, ``y' = R sin(phi) theta'``, two
    nonholonomic constraints ``A(q) v = 0`` that the variational integrator keeps
    at every substep (discrete Lagrange-d'Alembert). The true system has masses and
    inertias scaled by ``U(1 - perturbation, 1 + perturbation)`` from
    ``param_seed``; there is no friction unless ``friction`` is given (the Hamel
    paper's disk has none).

    The task: from the origin heading along ``+x``, reach ``target = (x, y, phi)``
    (default ``(2, 0, 0)``) while the contact point stays outside the circle of
    radius ``obstacle_radius`` (0.3 m) about ``obstacle_center`` ((1, 0) m), which
    sits on the straight line to the target.

    ## Action Space
    ``Box([-2, -1], [2, 1], (2,), float64)``; values outside are clipped.

    | Num | Action                              | Min  | Max | Unit |
    |-----|-------------------------------------|------|-----|------|
    | 0   | drive torque (on the rolling angle) | -2.0 | 2.0 | N m  |
    | 1   | steering torque (on the heading)    | -1.0 | 1.0 | N m  |

    ## Observation Space
    ``Box(-bound, bound, (8,), float64)``: the state plus ``N(0, obs_noise^2)`` noise.
    Angles are continuous (never wrapped). The bounds are generous, not limits: the
    state is never clipped; a start state given to ``reset`` must lie inside them.

    | Num | Observation                          | Min  | Max | Unit  |
    |-----|--------------------------------------|------|-----|-------|
    | 0   | theta: rolling angle                 | -1e4 | 1e4 | rad   |
    | 1   | phi: heading from +x, ccw            | -1e4 | 1e4 | rad   |
    | 2   | x: contact point                     | -1e4 | 1e4 | m     |
    | 3   | y: contact point                     | -1e4 | 1e4 | m     |
    | 4   | theta_dot                            | -1e3 | 1e3 | rad/s |
    | 5   | phi_dot                              | -1e3 | 1e3 | rad/s |
    | 6   | x_dot                                | -1e3 | 1e3 | m/s   |
    | 7   | y_dot                                | -1e3 | 1e3 | m/s   |

    ## Rewards
    ``reward = -stage_cost(x_next, u)`` on the noise-free state after the step, with
    ``stage_cost = (x - x*)^2 + (y - y*)^2 + 0.2 (1 - cos(phi - phi*))
    + 1e-3 (theta_dot^2 + phi_dot^2) + 1e-3 |u|^2``. Safety margin (``info``):
    ``[|(x, y) - obstacle_center| - obstacle_radius]`` [m].
    ``info["constraint_residual"]`` is ``||A(q) v||`` [m/s].

    ## Starting State
    ``theta ~ U(-0.1, 0.1)`` rad, ``phi ~ U(-0.1, 0.1)`` rad, ``x, y ~ U(-0.05, 0.05)``
    m, rolling and turning rates ``~ U(-0.1, 0.1)`` rad/s, with the consistent
    velocity (:meth:`vimpc.mechanics.RollingDisk.consistent_velocity`).
    ``options={"state": x}`` sets the exact start; it must satisfy
    ``||A(q) v|| <= 1e-8``.

    ## Episode End
    Never by itself (``terminated = truncated = False``), also not on hitting the
    obstacle (the margin goes negative); the user or the scenario chooses a time
    limit.

    ## Arguments
    - ``dt=0.01``: control step [s], a positive multiple of ``substep``.
    - ``substep=1e-4``: integrator substep [s].
    - ``perturbation=0.1``: relative spread of the mass and inertia factors.
    - ``friction=None``: ``[theta_dot, phi_dot]`` coefficients [N m s]; default none.
    - ``obs_noise=1e-3``: observation noise std [rad, m, rad/s, m/s].
    - ``param_seed=0``: seed of the perturbation draw.
    - ``params=None``: nominal parameters ``I, J, m, R`` to override.
    - ``target=(2.0, 0.0, 0.0)``: target pose ``(x [m], y [m], phi [rad])``.
    - ``obstacle_center=(1.0, 0.0)`` [m] and ``obstacle_radius=0.3`` [m]; the start
      region must lie more than 0.1 m outside the obstacle, the target outside it.
    - ``jit=True``: compile the integrator to C (CasADi JIT, ~0.3 s once per process
      and true system; bit-identical results; interpreted if no C compiler is found).
    - ``render_mode=None`` or ``"rgb_array"``.

    ## Version History
    - v0: first version.
    """

    system_type = RollingDisk
    friction_max = (0.0, 0.0)
    friction_rates = ("theta_dot", "phi_dot")
    action_limit = (2.0, 1.0)
    observation_limit = (1e4, 1e4, 1e4, 1e4, 1e3, 1e3, 1e3, 1e3)

    def __init__(
        self,
        *,
        target: Any = (2.0, 0.0, 0.0),
        obstacle_center: Any = (1.0, 0.0),
        obstacle_radius: float = 0.3,
        **common: Any,
    ) -> None:
        self.target = _checks.finite_vector("target", target, 3)
        self.obstacle_center = _checks.finite_vector("obstacle_center", obstacle_center, 2)
        self.obstacle_radius = _checks.positive("obstacle_radius", obstacle_radius)
        start_gap = float(np.hypot(*self.obstacle_center)) - self.obstacle_radius
        if start_gap <= 0.1:
            raise InputError(
                f"the obstacle (centre {self.obstacle_center.tolist()}, radius "
                f"{self.obstacle_radius:g}) must stay more than 0.1 m from the start (0, 0), "
                f"got a gap of {start_gap:.3g} m; move obstacle_center or shrink obstacle_radius"
            )
        if self._margin(self.target[0], self.target[1]) <= 0.0:
            raise InputError(
                f"target {self.target.tolist()} must lie outside the obstacle (centre "
                f"{self.obstacle_center.tolist()}, radius {self.obstacle_radius:g})"
            )
        # the arguments every env shares (dt, substep, perturbation, friction, ...)
        super().__init__(**common)

    def _margin(self, x: float, y: float) -> float:
        cx, cy = self.obstacle_center
        return math.hypot(x - cx, y - cy) - self.obstacle_radius

    def stage_cost(self, obs: Any, u: Any, t: float = 0.0) -> float:
        """``|p - p*|^2 + 0.1 * 2 (1 - cos(phi - phi*)) + 1e-3 (theta_dot^2 + phi_dot^2)
        + 1e-3 |u|^2`` (time-invariant)."""
        tx, ty, tphi = self.target
        dx, dy = float(obs[2]) - tx, float(obs[3]) - ty
        rolling, turning = float(obs[4]), float(obs[5])
        torques = np.asarray(u, dtype=np.float64).reshape(-1)
        return (
            dx * dx
            + dy * dy
            + 0.1 * angle_cost(float(obs[1]), tphi)
            + 1e-3 * (rolling * rolling + turning * turning)
            + 1e-3 * float(torques @ torques)
        )

    def safety_margin(self, obs: Any) -> np.ndarray:
        """``[|(x, y) - obstacle_center| - obstacle_radius]`` [m]."""
        return np.array([self._margin(float(obs[2]), float(obs[3]))])

    @property
    def safety_limits(self):
        """The obstacle: the contact point ``(x, y)`` stays ``obstacle_radius`` [m] or more
        from ``obstacle_center``."""
        names, units = self.obs_names, self._true.state_units
        return (
            KeepOutCircle(
                (2, 3),
                (names[2], names[3]),
                units[2],
                (float(self.obstacle_center[0]), float(self.obstacle_center[1])),
                self.obstacle_radius,
                rows=(0,),
            ),
        )

    def _sample_state(self) -> np.ndarray:
        rng = self.np_random
        theta, phi = rng.uniform(-0.1, 0.1, size=2)
        x, y = rng.uniform(-0.05, 0.05, size=2)
        rolling, turning = rng.uniform(-0.1, 0.1, size=2)
        q = np.array([theta, phi, x, y])
        return np.concatenate([q, self._true.consistent_velocity(q, rolling, turning)])

    def _consistent_state_hint(self) -> str:
        return "build v with env.true_system.consistent_velocity(q, theta_rate, phi_rate)"

    def _task_metadata(self) -> dict[str, Any]:
        return {
            "goal": "reach the target pose outside the obstacle",
            "target": self.target.tolist(),
            "obstacle_center": self.obstacle_center.tolist(),
            "obstacle_radius": self.obstacle_radius,
        }

    def _view(self):
        cx, cy = self.obstacle_center
        r = self.obstacle_radius
        xs = [0.0, self.target[0], cx - r, cx + r]
        ys = [0.0, self.target[1], cy - r, cy + r]
        return (min(xs) - 0.5, max(xs) + 0.5), (min(ys) - 0.5, max(ys) + 0.5)

    def _decorate(self, ax, state):
        from matplotlib.patches import Circle

        ax.add_patch(Circle(tuple(self.obstacle_center), self.obstacle_radius, color=GROUND_COLOR))
        tx, ty, tphi = self.target
        ax.plot([tx], [ty], "x", color=TASK_COLOR, markersize=10)
        ax.plot([tx, tx + 0.2 * math.cos(tphi)], [ty, ty + 0.2 * math.sin(tphi)], color=TASK_COLOR)
        ax.plot([state[2]], [state[3]], "o", color=TASK_COLOR, markersize=4)
