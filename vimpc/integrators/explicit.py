"""Explicit baselines: Euler, symplectic (semi-implicit) Euler and RK4.

They integrate the Euler–Lagrange equations solved for the acceleration. With
constraints the acceleration comes from the index-1 system

    [M  C^T] [a  ]   [F + dL/dq - (d^2L/dv dq) v]
    [C  0  ] [lam] = [-(d(C v)/dq) v            ]

with ``C = G`` (holonomic, differentiated twice) or ``C = A`` (nonholonomic), so
the constraints hold only at the acceleration level and drift (the GP-VI paper's
Fig. 1b baseline).
"""

from __future__ import annotations

import casadi as ca

from vimpc import _checks
from vimpc.integrators.base import Integrator, LagrangianFn
from vimpc.mechanics.system import MechanicalSystem

METHODS = {"euler": 1, "symplectic_euler": 1, "rk4": 4}


def acceleration(
    system: MechanicalSystem, lagrangian: LagrangianFn | None = None, n_theta: int = 0
) -> ca.Function:
    """``(q, v, u, theta) -> a``: the forced, constrained Euler–Lagrange acceleration of
    ``system``, or of the Lagrangian ``lagrangian(q, v, theta)`` on its structure."""
    s = system
    q, v, u = ca.SX.sym("q", s.nq), ca.SX.sym("v", s.nv), ca.SX.sym("u", s.nu)
    th = ca.SX.sym("theta", n_theta)
    L = s.lagrangian(q, v) if lagrangian is None else lagrangian(q, v, th)
    dLdv = ca.gradient(L, v)
    M = ca.jacobian(dLdv, v)
    rhs = s.generalized_force(q, v, u) + ca.gradient(L, q) - ca.mtimes(ca.jacobian(dLdv, q), v)
    rows = []
    if s.n_holonomic:
        rows.append(ca.jacobian(s.holonomic(q), q))
    if s.n_nonholonomic:
        rows.append(s.nonholonomic(q))
    if rows:
        C = ca.vertcat(*rows)
        drift = -ca.mtimes(ca.jacobian(ca.mtimes(C, v), q), v)
        K = ca.blockcat([[M, C.T], [C, ca.SX.zeros(C.size1(), C.size1())]])
        a = ca.solve(K, ca.vertcat(rhs, drift))[: s.nv]
    else:
        a = ca.solve(M, rhs)
    return ca.Function(
        f"{s.name}_acceleration", [q, v, u, th], [a], ["q", "v", "u", "theta"], ["a"]
    )


class ExplicitIntegrator(Integrator):
    """Explicit one-step method on ``x = (q, v)``: ``"euler"``, ``"symplectic_euler"``
    (velocity first, then position with the new velocity) or ``"rk4"``. ``lagrangian`` and
    ``n_theta`` as in :class:`~vimpc.integrators.base.Integrator`."""

    def __init__(
        self,
        system: MechanicalSystem,
        method: str = "rk4",
        *,
        lagrangian: LagrangianFn | None = None,
        n_theta: int = 0,
    ) -> None:
        super().__init__(system, lagrangian=lagrangian, n_theta=n_theta)
        self.method = _checks.one_of("method", method, METHODS)
        self.order = METHODS[method]
        self._acc = acceleration(system, lagrangian, n_theta)
        self._cache: dict[float, ca.Function] = {}

    def _rhs(self, x, u, th):
        n = self.system.nq
        return ca.vertcat(x[n:], self._acc(x[:n], x[n:], u, th))

    def step_function(self, h: float, *, error_on_fail: bool = True) -> ca.Function:
        h = _checks.positive("h", h)
        if h not in self._cache:
            n = self.system.nq
            x, u = ca.SX.sym("x", self.nx), ca.SX.sym("u", self.system.nu)
            th = ca.SX.sym("theta", self.n_theta)
            if self.method == "euler":
                xn = x + h * self._rhs(x, u, th)
            elif self.method == "symplectic_euler":
                v1 = x[n:] + h * self._acc(x[:n], x[n:], u, th)
                xn = ca.vertcat(x[:n] + h * v1, v1)
            else:
                k1 = self._rhs(x, u, th)
                k2 = self._rhs(x + h / 2 * k1, u, th)
                k3 = self._rhs(x + h / 2 * k2, u, th)
                k4 = self._rhs(x + h * k3, u, th)
                xn = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            self._cache[h] = ca.Function(
                f"{self.system.name}_{self.method}_step",
                [x, u, th],
                [xn],
                ["x", "u", "theta"],
                ["x_next"],
            )
        return self._cache[h]

    def __repr__(self) -> str:
        return f"ExplicitIntegrator({self.system!r}, method={self.method!r})"
