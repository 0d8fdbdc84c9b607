"""Variational backward error analysis (BEA) to second order, in any dimension.

A variational integrator with discrete Lagrangian ``L_d`` (midpoint or trapezoidal rule,
step ``h``) applied to a Lagrangian ``L`` moves exactly, up to ``O(h^4)``, along the motions
of the *modified* Lagrangian

    L_mod = L + h^2 / 24 (a^T M a + c vdot^T L_qq vdot) + O(h^4),

with ``M = d^2L/dv^2``, ``L_qq = d^2L/dq^2``, ``a = M^-1 (dL/dq - d^2L/(dv dq) v)`` the
acceleration of ``L``'s Euler–Lagrange equations, and ``c = -1`` (midpoint) or ``c = 2``
(trapezoidal). In one dimension this is eq. 11 of Ober-Blöbaum & Offen (the term
``(L10 - L11 v)^2 / L02 = L02 a^2``) and its trapezoidal analogue. Shadow integration runs it
the other way: the *inverse modified* Lagrangian ``L_invmod`` learned from snapshots is the
one whose discrete motions are the true motions, so the true Lagrangian is recovered as the
modified Lagrangian of ``L_invmod``, the same formula applied to it. Truncation ``order`` 0
is ``L`` itself, 2 the corrected one; ``H^[[k]] = v . dL^[[k]]/dv - L^[[k]]`` is the energy
the integrator's motions keep.

Everything is built by automatic differentiation on CasADi SX symbols, so any Lagrangian
given as a CasADi expression callable ``L(q, v)`` works (learned or analytic). The formula
divides by ``M``: where the Lagrangian is degenerate the correction is meaningless, and
:func:`degenerate` says where.
"""

from __future__ import annotations

from collections.abc import Callable

import casadi as ca
import numpy as np

from vimpc.errors import InputError

#: rules with a second-order BEA formula -> the coefficient ``c`` of ``v^T L_qq v``
RULES: dict[str, float] = {"midpoint": -1.0, "trapezoidal": 2.0}
#: truncation orders offered
ORDERS = (0, 2)

LagrangianFn = Callable[[ca.SX, ca.SX], ca.SX]


def check(rule: str, order: int, h: float) -> None:
    """Refuse a rule without a BEA formula, an order other than 0 or 2, a step <= 0."""
    if rule not in RULES:
        raise InputError(
            f"rule must be one of {sorted(RULES)} for backward error analysis, got {rule!r}"
        )
    if isinstance(order, bool) or order not in ORDERS:
        raise InputError(f"order must be one of {ORDERS}, got {order!r}")
    if not (isinstance(h, (int, float)) and h > 0):
        raise InputError(f"h must be a positive step, got {h!r}")


def acceleration(L: ca.SX, q: ca.SX, v: ca.SX) -> ca.SX:
    """``a = M^-1 (dL/dq - d^2L/(dv dq) v)``: the acceleration of the Euler–Lagrange
    equations of the expression ``L`` of the symbols ``q``, ``v``."""
    p = ca.gradient(L, v)
    M = ca.jacobian(p, v)
    return ca.solve(M, ca.gradient(L, q) - ca.mtimes(ca.jacobian(p, q), v))


def correction(L: ca.SX, q: ca.SX, v: ca.SX, rule: str, h: float) -> ca.SX:
    """``h^2 / 24 (a^T M a + c v^T L_qq v)``: the second-order term of the modified
    Lagrangian of ``L`` under ``rule`` (the module's docstring); ``q``, ``v`` are SX
    symbols."""
    p = ca.gradient(L, v)
    M = ca.jacobian(p, v)
    force = ca.gradient(L, q) - ca.mtimes(ca.jacobian(p, q), v)
    a = ca.solve(M, force)
    Lqq = ca.hessian(L, q)[0]
    return h * h / 24.0 * (ca.dot(a, force) + RULES[rule] * ca.mtimes([v.T, Lqq, v]))


def modified(L: LagrangianFn, nq: int, rule: str, h: float, order: int = 2) -> LagrangianFn:
    """``L^[[order]]``: the modified Lagrangian of ``L`` (of ``nq`` coordinates) under
    ``rule`` with step ``h``, truncated after ``h^order``; for a learned ``L_invmod`` the
    recovered Lagrangian. Callable on any CasADi expressions."""
    check(rule, order, h)
    if order == 0:
        return L
    q, v = ca.SX.sym("q", nq), ca.SX.sym("v", nq)
    base = L(q, v)
    fn = ca.Function("L_mod", [q, v], [base + correction(base, q, v, rule, h)])
    return lambda q_, v_: fn(q_, v_)


def energy(L: ca.SX, v: ca.SX) -> ca.SX:
    """``H = v . dL/dv - L`` of the expression ``L``."""
    return ca.dot(v, ca.gradient(L, v)) - L


def functions(L: LagrangianFn, nq: int, rule: str, h: float, order: int) -> ca.Function:
    """``(q, v) -> (L^[[order]], H^[[order]], p, |det M|^(1/n))``: the modified Lagrangian,
    its energy and momentum, and the regularity of ``L`` itself (the geometric mean of the
    absolute eigenvalues of its ``M``; see :func:`degenerate`), as one SX function."""
    q, v = ca.SX.sym("q", nq), ca.SX.sym("v", nq)
    Lk = modified(L, nq, rule, h, order)(q, v)
    M = ca.hessian(L(q, v), v)[0]
    regularity = ca.fabs(ca.det(M)) ** (1.0 / nq)
    return ca.Function(
        f"bea_{rule}_{order}",
        [q, v],
        [Lk, energy(Lk, v), ca.gradient(Lk, v), regularity],
        ["q", "v"],
        ["L", "H", "p", "regularity"],
    )


def degenerate(regularity, reference: float, tolerance: float = 1e-6) -> np.ndarray:
    """Where the Lagrangian is degenerate for the BEA formula: its regularity
    ``|det M|^(1/n)`` (:func:`functions`) below ``tolerance`` times ``reference`` (its
    median on the training data), so ``M^-1`` multiplies round-off. A boolean mask."""
    r = np.asarray(regularity, dtype=np.float64)
    return ~(r > tolerance * reference)
