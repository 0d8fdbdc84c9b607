"""Chain of point masses in Cartesian coordinates with distance constraints."""

from __future__ import annotations

import numpy as np

from vimpc import _checks
from vimpc.errors import InputError
from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import NaturalSystem

# The constrained-NN paper's chain pendulums (masses and lengths 0.6 + 0.8 U(0, 1)
# with numpy seed 0), rounded to three decimals.
_CHNN = {
    1: ((1.039,), (1.172,)),
    2: ((1.172, 1.039), (1.036, 1.082)),
    3: ((1.082, 1.172, 1.039), (1.117, 0.939, 1.036)),
    5: ((0.939, 1.036, 1.082, 1.172, 1.039), (0.907, 1.371, 1.313, 0.950, 1.117)),
}


class NPendulum(NaturalSystem):
    """``n`` point masses in a vertical plane, the first tied to the origin.

    ``q = (x1, y1, ..., xn, yn)`` [m]; constraints ``|x1|^2 - l1^2 = 0`` and
    ``|x_i - x_{i-1}|^2 - l_i^2 = 0``; ``V = g sum m_i y_i``. Input: horizontal
    force on the first mass [N]. Parameters ``m1..mn``, ``l1..ln``, ``g``; for
    ``n`` in {1, 2, 3, 5} the defaults are the constrained-NN paper's values.
    """

    def __init__(self, n: int = 2, *, friction=None, **params: float) -> None:
        n = _checks.positive_int("n", n)
        masses, lengths = _CHNN.get(n, ((None,) * n, (None,) * n))
        self._n = n
        self.defaults = {
            **{f"m{i + 1}": masses[i] for i in range(n)},
            **{f"l{i + 1}": lengths[i] for i in range(n)},
            "g": 9.81,
        }
        self.inertial = tuple(f"m{i + 1}" for i in range(n))
        self.lengths = tuple(f"l{i + 1}" for i in range(n))
        super().__init__(friction=friction, **params)

    def _derive(self, values):
        missing = [k for k, v in values.items() if v is None]
        if missing:
            raise InputError(
                f"NPendulum(n={self._n}) has no default masses and lengths; pass {missing}"
            )
        return values

    def _extra_kwargs(self):
        return {"n": self._n}

    @property
    def coordinate_names(self):
        return tuple(f"{c}{i + 1}" for i in range(self._n) for c in ("x", "y"))

    @property
    def coordinate_units(self):
        return ("m",) * (2 * self._n)

    @property
    def input_names(self):
        return ("force",)

    @property
    def input_units(self):
        return ("N",)

    @property
    def n_holonomic(self) -> int:
        return self._n

    def mass_matrix(self, q):
        return ops.diag([self.params[f"m{i // 2 + 1}"] for i in range(2 * self._n)], like=q)

    def potential(self, q):
        g = self.params["g"]
        total = 0.0
        for i in range(self._n):
            total = total + self.params[f"m{i + 1}"] * g * q[2 * i + 1]
        return total

    def holonomic(self, q):
        rows = []
        for i in range(self._n):
            p = ops.vector([q[2 * i], q[2 * i + 1]])
            prev = (
                ops.vector([0.0 * q[0], 0.0 * q[0]])
                if i == 0
                else ops.vector([q[2 * i - 2], q[2 * i - 1]])
            )
            rows.append(ops.sumsqr(p - prev) - self.params[f"l{i + 1}"] ** 2)
        return ops.vector(rows)

    def input_map(self, q):
        B = ops.zeros(self.nv, 1, like=q)
        B[0, 0] = 1.0
        return B

    def from_angles(self, angles, rates) -> tuple[np.ndarray, np.ndarray]:
        """Cartesian ``(q, v)`` from link angles from the downward vertical and their rates."""
        angles = _checks.finite_vector("angles", angles, self._n)
        rates = _checks.finite_vector("rates", rates, self._n)
        q, v = np.zeros(2 * self._n), np.zeros(2 * self._n)
        pos, vel = np.zeros(2), np.zeros(2)
        for i in range(self._n):
            l = self.params[f"l{i + 1}"]
            pos = pos + l * np.array([np.sin(angles[i]), -np.cos(angles[i])])
            vel = vel + l * rates[i] * np.array([np.cos(angles[i]), np.sin(angles[i])])
            q[2 * i : 2 * i + 2], v[2 * i : 2 * i + 2] = pos, vel
        return q, v

    def sketch(self, q) -> list[np.ndarray]:
        points = np.vstack([np.zeros(2), np.asarray(q, dtype=np.float64).reshape(-1, 2)])
        return [points]
