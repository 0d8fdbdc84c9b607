"""Solver presets from the CasADi wheel."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc.errors import InputError

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


# -- solver options -------------------------------------------------------------------------
# Option tables passed on to the solver itself, checked key by key on a one-variable NLP.
_PLUGIN_TABLES = {"ipopt": "ipopt", "fatrop": "fatrop"}
_OPTION_DOCS = {
    "ipopt": "https://coin-or.github.io/Ipopt/OPTIONS.html",
    "fatrop": "casadi.doc_nlpsol('fatrop') and fatrop's documentation",
}
_UNKNOWN = (
    re.compile(r"Unknown option: (\S+)"),
    re.compile(r"No such IPOPT option: (\S+)"),
    re.compile(r"Fatrop option not supported: (\S+)"),
)
_WRONG_TYPE = re.compile(r"Illegal type for (\S+): (\S+) cannot be cast to (\S+)")


def checked_options(solver: str, options: Any) -> dict[str, Any]:
    """``options`` checked as a table of CasADi options: string keys, and the tables the
    solver hands on to IPOPT or fatrop checked key by key against the solver itself (fatrop
    reads its table only when it solves, so an unknown key would otherwise surface as a
    failed solve at every step)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InputError(
            f"solver_options must be a dict of CasADi nlpsol options for solver {solver!r}, "
            f"got {type(options).__name__}"
        )
    given = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise InputError(f"solver_options keys must be option names (str), got {key!r}")
        given[key] = dict(value) if isinstance(value, Mapping) else value
    table = _PLUGIN_TABLES.get(solver)
    if table is not None and table in given:
        entries = given[table]
        if not isinstance(entries, dict):
            raise InputError(
                f"solver_options[{table!r}] must be a dict of {table} options for solver "
                f"{solver!r}, got {entries!r}"
            )
        for key, value in entries.items():
            _probe(solver, table, key, value)
    return given


def _probe(solver: str, table: str, key: Any, value: Any) -> None:
    """Build (and for fatrop, run) the plugin on ``min x^2`` with the one option
    ``{table: {key: value}}``; an option the plugin refuses raises an InputError."""
    where = f"solver_options[{table!r}][{key!r}]"
    if not isinstance(key, str):
        raise InputError(f"{where}: {table} option names are strings, got {key!r}")
    if table == "fatrop" and key == "print_level":
        # a known option; checked here, since a probe with it would print its output
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"{where} must be an int (fatrop's print level), got {value!r}")
        return
    entries = {key: value}
    options: dict[str, Any] = {"print_time": False}
    if table == "fatrop":
        entries.setdefault("print_level", 0)
        options["structure_detection"] = "none"
    x = ca.SX.sym("x")
    try:
        probe = ca.nlpsol("options_probe", table, {"x": x, "f": x * x}, {**options, table: entries})
        if table == "fatrop":
            probe(x0=0.0)
    except RuntimeError as exc:
        text = str(exc)
        if any(pattern.search(text) for pattern in _UNKNOWN):
            raise _unknown(solver, [table], key, _OPTION_DOCS[table]) from exc
        if "type mismatch" in text or _WRONG_TYPE.search(text):
            raise InputError(
                f"{where} = {value!r} has the wrong type: solver {solver!r} cannot use it "
                f"(see {_OPTION_DOCS[table]} for the option's type)"
            ) from exc
        raise


def option_error(solver: str, plugin: str, qpsol: str, given: dict, text: str) -> InputError | None:
    """An InputError for a CasADi error about a key of ``given`` (the user's
    ``solver_options``), or None when the error is about something else."""
    for pattern in _UNKNOWN:
        match = pattern.search(text)
        if match:
            key = match.group(1).strip("'\"")
            path = _locate(given, key)
            if path is None:
                return None
            candidates = re.findall(r'^> "(\w+)"', text, flags=re.MULTILINE)
            if not path:
                candidates += ca.nlpsol_options(plugin)
            return _unknown(solver, path, key, _docs(plugin, qpsol, path), candidates)
    match = _WRONG_TYPE.search(text)
    if match:
        key, got, expected = (group.rstrip(".") for group in match.groups())
        path = _locate(given, key)
        if path is None:
            return None
        where = "solver_options" + "".join(f"[{k!r}]" for k in path)
        return InputError(
            f"{where}[{key!r}] has the wrong type for solver {solver!r}: CasADi expects "
            f"{expected.removeprefix('OT_').lower()}, got {got.removeprefix('OT_').lower()} "
            f"{_value(given, path, key)!r}"
        )
    return None


def _locate(given: dict, key: str) -> list[str] | None:
    """The path of tables in ``given`` that holds ``key``: ``[]`` at the top, ``["ipopt"]``
    inside ``given["ipopt"]``; None when ``key`` is not among the user's options."""
    if key in given:
        return []
    for name, value in given.items():
        if isinstance(value, dict):
            inner = _locate(value, key)
            if inner is not None:
                return [name, *inner]
    return None


def _value(given: dict, path: list[str], key: str) -> Any:
    for name in path:
        given = given[name]
    return given[key]


def _docs(plugin: str, qpsol: str, path: list[str]) -> str:
    if path and path[0] in _OPTION_DOCS:
        return _OPTION_DOCS[path[0]]
    if path and path[0] == "qpsol_options":
        return f"casadi.doc_conic({qpsol!r})"
    return f"casadi.doc_nlpsol({plugin!r})"


def _unknown(
    solver: str, path: list[str], key: str, docs: str, candidates: Sequence[str] = ()
) -> InputError:
    where = "solver_options" + "".join(f"[{k!r}]" for k in path)
    table = f" in its {path[-1]!r} table" if path else ""
    close = difflib.get_close_matches(key, list(dict.fromkeys(candidates)), n=3)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return InputError(
        f"{where} has an unknown key {key!r}: solver {solver!r} has no such option{table}"
        f"{hint}; the options it takes: {docs}"
    )
