"""Vertical disk rolling without slipping on the plane (nonholonomic)."""

from __future__ import annotations

import numpy as np

from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import NaturalSystem


class RollingDisk(NaturalSystem):
    """Vertical disk of radius ``R`` rolling without slipping.

    ``q = (theta, phi, x, y)``: rolling angle [rad], heading [rad], contact point [m].
    ``L = 1/2 I theta'^2 + 1/2 J phi'^2 + 1/2 m (x'^2 + y'^2)`` and the nonholonomic
    constraints ``x' = R cos(phi) theta'``, ``y' = R sin(phi) theta'``, written
    ``A(q) v = 0`` with ``A = [[-R cos phi, 0, 1, 0], [-R sin phi, 0, 0, 1]]``.
    Inputs: drive torque on ``theta`` and steering torque on ``phi`` [N m]. On the
    constraint the reduced motion is ``(I + m R^2) theta'' = u_drive``,
    ``J phi'' = u_steer``. Friction: coefficients on the rates ``theta'`` and
    ``phi'`` [N m s]. Defaults ``I = J = m = 1``, ``R = 0.3``.
    """

    defaults = {"I": 1.0, "J": 1.0, "m": 1.0, "R": 0.3}
    inertial = ("I", "J", "m")
    lengths = ("R",)

    @property
    def coordinate_names(self):
        return ("theta", "phi", "x", "y")

    @property
    def coordinate_units(self):
        return ("rad", "rad", "m", "m")

    @property
    def input_names(self):
        return ("drive_torque", "steer_torque")

    @property
    def input_units(self):
        return ("N m", "N m")

    @property
    def n_nonholonomic(self) -> int:
        return 2

    @property
    def n_rates(self) -> int:
        return 2

    def mass_matrix(self, q):
        p = self.params
        return ops.diag([p["I"], p["J"], p["m"], p["m"]], like=q)

    def potential(self, q):
        return 0.0 * q[0]

    def nonholonomic(self, q):
        R, phi = self.params["R"], q[1]
        return ops.matrix(
            [[-R * ops.cos(phi), 0.0, 1.0, 0.0], [-R * ops.sin(phi), 0.0, 0.0, 1.0]], like=q
        )

    def input_map(self, q):
        return ops.matrix([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]], like=q)

    def rate_map(self, q):
        return ops.matrix([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], like=q)

    def consistent_velocity(self, q, theta_rate: float, phi_rate: float) -> np.ndarray:
        """The velocity with the given rolling and turning rates that meets the constraints."""
        R, phi = self.params["R"], float(q[1])
        return np.array(
            [theta_rate, phi_rate, R * np.cos(phi) * theta_rate, R * np.sin(phi) * theta_rate]
        )

    def marker(self, q) -> np.ndarray:
        """The contact point ``(x, y)``."""
        return np.array([float(q[2]), float(q[3])])

    def sketch(self, q) -> list[np.ndarray]:
        R, phi = self.params["R"], float(q[1])
        x, y = float(q[2]), float(q[3])
        direction = np.array([np.cos(phi), np.sin(phi)])
        # seen from above the disk is a segment of length 2R along its heading
        return [np.array([[x, y] - R * direction, [x, y] + R * direction])]
