"""Discrete Lagrangians ``L_d(q0, q1) ~ integral of L over one step`` and the
matching left and right discrete forces ``f-``, ``f+`` of the discrete
Lagrange–d'Alembert principle (Marsden & West 2001, sec. 3.2).

Each rule evaluates ``L`` and the generalized force ``F`` at its quadrature points
with the difference velocity ``v01 = (q1 - q0) / h``:

| rule          | ``L_d``                                 | ``f-``, ``f+``                          | order |
|---------------|-----------------------------------------|-----------------------------------------|-------|
| first_order   | ``h L(q0, v01)`` (GP-VI paper, eq. 3)   | ``h F(q0, v01, u)``, ``0``              | 1     |
| midpoint      | ``h L((q0 + q1)/2, v01)``               | ``h/2 F(q_mid, v01, u)`` each           | 2     |
| trapezoidal   | ``h/2 (L(q0, v01) + L(q1, v01))``       | ``h/2 F(q0, ...)``, ``h/2 F(q1, ...)``  | 2     |
"""

from __future__ import annotations

from collections.abc import Callable

RULES = ("first_order", "midpoint", "trapezoidal")
ORDER = {"first_order": 1, "midpoint": 2, "trapezoidal": 2}


def discrete_lagrangian(rule: str, L: Callable, q0, q1, h: float):
    """``L_d(q0, q1)`` for the given quadrature ``rule``."""
    v01 = (q1 - q0) / h
    if rule == "first_order":
        return h * L(q0, v01)
    if rule == "midpoint":
        return h * L(0.5 * (q0 + q1), v01)
    if rule == "trapezoidal":
        return 0.5 * h * (L(q0, v01) + L(q1, v01))
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def discrete_forces(rule: str, F: Callable, q0, q1, u, h: float):
    """Left and right discrete forces ``(f-, f+)`` of one step under input ``u``."""
    v01 = (q1 - q0) / h
    if rule == "first_order":
        return h * F(q0, v01, u), 0.0 * q0
    if rule == "midpoint":
        f = 0.5 * h * F(0.5 * (q0 + q1), v01, u)
        return f, f
    if rule == "trapezoidal":
        return 0.5 * h * F(q0, v01, u), 0.5 * h * F(q1, v01, u)
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
