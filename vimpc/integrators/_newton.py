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
"""

from __future__ import annotations

import casadi as ca

# Residuals near the origin are momenta of order one; 1e-12 leaves room above round-off.
ABSTOL = 1e-12
# On the scaled unknowns: 1e-14 relative, a few tens of ulps.
STEP_TOL = 1e-14
MAX_ITER = 30


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
