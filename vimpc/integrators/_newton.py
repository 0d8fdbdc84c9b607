"""Newton solves of implicit steps as CasADi rootfinders.

``fast_newton`` stops on either of two tests. The step test carries convergence at every
state: the step functions hand it unknowns scaled to the state's size (relative to ``|q|``
and ``|q| / h``, with an absolute floor), so ``STEP_TOL`` is a relative tolerance. The
residual test is absolute on purpose and serves only as an early exit near the origin: the
residual's round-off level grows like ``eps ||M|| |q| / h`` (see
:meth:`~vimpc.integrators.VariationalIntegrator.residual_level`), and a residual test
relative to that level would accept the first Newton iterate, whose error is systematic
(the same sign step after step), where the step test takes one more step down to
round-off. Measured on the cart-pole over 10^4 substeps of 1e-4 s: 5e-8 from a fully
converged reference with a test at four times the level, 8e-11 with these tests.

Inside a CasADi function the rootfinder's status cannot be read, and ``fast_newton``
returns its initial guess when it is fed NaN (even with ``error_on_fail=True``) and its
last iterate when it stops without converging. So every step built on :func:`solve`
judges its result afterwards (:func:`accepted`): the root is kept only where it is finite
and its residual lies within ``ACCEPT_FACTOR`` times Newton's residual test plus
``ACCEPT_RTOL`` times the residual's round-off level; anything else becomes NaN.
"""

from __future__ import annotations

import sys

import casadi as ca

# Residuals near the origin are momenta of order one; 1e-12 leaves room above round-off.
ABSTOL = 1e-12
# On the scaled unknowns: 1e-14 relative, a few tens of ulps.
STEP_TOL = 1e-14
MAX_ITER = 30
# A returned root is accepted when every residual row is below ACCEPT_FACTOR * abstol +
# ACCEPT_RTOL * level (level: the row's round-off level). Converged solves end below abstol
# or within a few eps * level (the step test); a solve that stopped without converging is
# orders of magnitude above. The same numbers as the environments' check on their ground
# truth (1e-8 = 1e4 * ABSTOL, 1e3 eps).
ACCEPT_FACTOR = 1e4
ACCEPT_RTOL = 1e3 * sys.float_info.epsilon
# the largest finite float64: |x| <= FINITE is false for NaN and +-inf
FINITE = sys.float_info.max


def solve(
    name: str, residual: ca.Function, error_on_fail: bool, abstol: float = ABSTOL
) -> ca.Function:
    """A rootfinder for ``residual(z, *params) = 0`` in its first argument.

    ``fast_newton`` is a plain Newton iteration with a dense LU, cheap for the
    small systems here and differentiable by the implicit function theorem.
    ``z`` should be scaled to the size of the state (the step test is on ``z``).
    With ``error_on_fail=False`` a non-converged solve returns its last iterate
    (inside an NLP the solver then sees the residual and recovers). ``abstol`` replaces
    the residual test's tolerance where the residual's round-off is far above ``ABSTOL``
    (a learned Lagrangian whose weights cancel).
    """
    return ca.rootfinder(
        name,
        "fast_newton",
        residual,
        {
            "abstol": abstol,
            "abstolStep": STEP_TOL,
            "max_iter": MAX_ITER,
            "error_on_fail": error_on_fail,
        },
    )


def state_scale(q, v, h: float):
    """The scale of the unknowns ``(q_next, v_next)`` of a step from ``(q, v)``: ``q_next``
    is known to ~ulp(|q|), ``v_next`` (a difference quotient) to ~ulp(|q|) / h, so Newton on
    ``x_next / scale`` has a step test relative to the round-off floor."""
    return ca.vertcat(
        ca.repmat(ca.sqrt(1.0 + ca.sumsqr(q)), q.shape[0], 1),
        ca.sqrt(1.0 + v * v + ca.sumsqr(q) / h**2),
    )


def all_finite(x):
    """1 where every entry of ``x`` is finite (not NaN, not +-inf), else 0."""
    return ca.mmin(ca.fabs(ca.vec(x)) <= FINITE) if x.numel() else 1


def within(r, tolerance):
    """1 where ``|r_i| <= tolerance_i`` for every row (0 for a NaN row), else 0."""
    return ca.mmin(ca.fabs(ca.vec(r)) <= ca.vec(tolerance)) if r.numel() else 1


def linear_solve(A, b):
    """``A \\ b`` that gives inf or NaN where ``A`` is singular, never an error.

    CasADi's MX solve (its ``qr`` plugin) raises "Evaluation failed" wherever a diagonal
    entry of R falls below ``eps = 1e-12``, an absolute test: a constraint Gram matrix
    at a state off the manifold (a four-bar's bodies all at the origin) stopped the step
    with CasADi's error instead of NaN. ``eps = 0`` keeps the same factorisation, and its
    values bit for bit, and lets a zero pivot give inf or NaN, which the step's
    acceptance test turns into a failed step. SX's solve is symbolic and never raises."""
    if isinstance(A, ca.MX) or isinstance(b, ca.MX):
        return ca.solve(A, b, "qr", {"eps": 0.0})
    return ca.solve(A, b)


def accepted(value, ok):
    """``value`` where ``ok`` is 1, NaN elsewhere, NaN-safe in both branches (CasADi's
    ``if_else`` never multiplies the branch it does not take, so a NaN there does not leak
    and the value and derivatives of the taken branch are unchanged)."""
    return ca.if_else(ok, value, ca.DM.nan(*value.shape))
