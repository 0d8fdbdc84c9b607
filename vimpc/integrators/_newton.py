"""Newton solves of implicit steps as CasADi rootfinders."""

from __future__ import annotations

import casadi as ca

# Residuals are momenta of order one; 1e-12 leaves room above round-off.
ABSTOL = 1e-12
MAX_ITER = 30


def solve(name: str, residual: ca.Function, error_on_fail: bool) -> ca.Function:
    """A rootfinder for ``residual(z, *params) = 0`` in its first argument.

    ``fast_newton`` is a plain Newton iteration with a dense LU, cheap for the
    small systems here and differentiable by the implicit function theorem.
    With ``error_on_fail=False`` a non-converged solve returns its last iterate
    (inside an NLP the solver then sees the residual and recovers).
    """
    return ca.rootfinder(
        name,
        "fast_newton",
        residual,
        {
            "abstol": ABSTOL,
            "abstolStep": 1e-14,
            "max_iter": MAX_ITER,
            "error_on_fail": error_on_fail,
        },
    )
