"""Conservative test problems: Kepler and Hénon–Heiles."""

from __future__ import annotations

from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import NaturalSystem


class Kepler(NaturalSystem):
    """Planar Kepler problem: ``L = 1/2 m |q'|^2 + k m / |q|``.

    ``q = (x, y)`` [m]; inputs: force ``(fx, fy)`` [N]. Rotational symmetry makes the
    angular momentum ``m (x y' - y x')`` a conserved quantity without input.
    Defaults ``m = 1``, ``k = 1``; the discrete-Lagrangian paper uses ``k = 0.4004``.
    """

    defaults = {"m": 1.0, "k": 1.0}
    inertial = ("m",)
    lengths = ("k",)

    @property
    def coordinate_names(self):
        return ("x", "y")

    @property
    def input_names(self):
        return ("fx", "fy")

    @property
    def coordinate_units(self):
        return ("m", "m")

    @property
    def input_units(self):
        return ("N", "N")

    def mass_matrix(self, q):
        m = self.params["m"]
        return ops.diag([m, m], like=q)

    def potential(self, q):
        return -self.params["k"] * self.params["m"] / ops.sqrt(q[0] ** 2 + q[1] ** 2)

    def input_map(self, q):
        return ops.eye(2, like=q)

    def angular_momentum(self, q, v):
        return self.params["m"] * (q[0] * v[1] - q[1] * v[0])


class HenonHeiles(NaturalSystem):
    """Hénon–Heiles: ``V = 1/2 (x^2 + y^2) + alpha (x^2 y - y^3 / 3)``, unit mass.

    ``q = (x, y)``; inputs: forces ``(fx, fy)``. Default ``alpha = 0.8`` (the LSI
    paper's value).
    """

    defaults = {"alpha": 0.8}

    @property
    def coordinate_names(self):
        return ("x", "y")

    @property
    def input_names(self):
        return ("fx", "fy")

    @property
    def coordinate_units(self):
        return ("", "")  # a nondimensional test problem

    @property
    def input_units(self):
        return ("", "")

    def mass_matrix(self, q):
        return ops.eye(2, like=q)

    def potential(self, q):
        x, y = q[0], q[1]
        return 0.5 * (x * x + y * y) + self.params["alpha"] * (x * x * y - y**3 / 3.0)

    def input_map(self, q):
        return ops.eye(2, like=q)
