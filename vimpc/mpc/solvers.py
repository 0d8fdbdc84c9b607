"""Solver presets from the CasADi wheel."""

from __future__ import annotations

from typing import Any

from vimpc import _checks

SOLVERS = ("sqpmethod", "fatrop", "ipopt", "rti")
HESSIANS = ("gauss-newton", "exact")
QP_SOLVERS = ("qrqp", "osqp", "daqp", "hpipm", "qpoases")


def nlpsol_options(
    solver: str,
    *,
    max_iter: int,
    tol: float,
    qpsol: str = "qrqp",
    expand: bool = True,
    equality: list[bool] | None = None,
    hessian: str = "gauss-newton",
    gauss_newton: Any = None,
) -> tuple[str, dict[str, Any]]:
    """CasADi plugin name and options for a solver preset.

    ``sqpmethod`` uses the Gauss–Newton Hessian ``gauss_newton`` of the
    least-squares cost (positive semidefinite, so no convexification is needed)
    or, with ``hessian="exact"``, the exact Hessian made positive definite by
    eigenvalue reflection; a backtracking line search globalises it. ``rti`` is
    the same with one iteration per call (real-time iteration).
    ``fatrop`` detects the stage structure from the stage-wise variable layout;
    it needs ``equality``, one flag per constraint row.
    """
    _checks.one_of("solver", solver, SOLVERS)
    _checks.one_of("qpsol", qpsol, QP_SOLVERS)
    common: dict[str, Any] = {"expand": expand, "print_time": False, "error_on_fail": False}
    if solver in ("sqpmethod", "rti"):
        qp_opts: dict[str, Any] = {"error_on_fail": False}
        if qpsol == "qrqp":
            qp_opts.update(print_iter=False, print_header=False, print_info=False)
        elif qpsol == "osqp":
            qp_opts.update(osqp={"verbose": False})
        elif qpsol == "qpoases":
            qp_opts.update(printLevel="none")
        elif qpsol == "hpipm":
            qp_opts.update(hpipm={"warm_start": True})
        _checks.one_of("hessian", hessian, HESSIANS)
        curvature: dict[str, Any] = (
            {"hess_lag": gauss_newton}
            if hessian == "gauss-newton"
            else {"convexify_strategy": "eigen-reflect", "max_iter_eig": 1000}
        )
        return "sqpmethod", {
            **common,
            **curvature,
            "qpsol": qpsol,
            "qpsol_options": qp_opts,
            "max_iter": 1 if solver == "rti" else max_iter,
            "max_iter_ls": 0 if solver == "rti" else 8,
            "tol_pr": tol,
            "tol_du": tol,
            "print_header": False,
            "print_iteration": False,
            "print_status": False,
        }
    if solver == "fatrop":
        return "fatrop", {
            **common,
            "structure_detection": "auto",
            "equality": equality,
            "fatrop": {"print_level": 0, "max_iter": max_iter, "tol": tol},
        }
    return "ipopt", {
        **common,
        "ipopt": {
            "print_level": 0,
            "max_iter": max_iter,
            "tol": tol,
            "sb": "yes",
            "warm_start_init_point": "yes",
            "warm_start_bound_push": 1e-6,
            "warm_start_mult_bound_push": 1e-6,
        },
    }
