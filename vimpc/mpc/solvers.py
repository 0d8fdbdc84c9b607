"""Solver presets from the CasADi wheel."""

from __future__ import annotations

import difflib
import re
import time
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
    the same with one iteration per call, the preset of ``sqpmethod`` that the controller
    uses for it only where :class:`RealTimeIteration` does not apply.
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


# -- time budget ----------------------------------------------------------------------------
#: how each solver keeps a time budget: ipopt's own wall-clock limit; sqpmethod (and rti)
#: through CasADi's ``iteration_callback``, which stops the solve at the first iteration
#: past the deadline; fatrop has neither (in CasADi 3.8 it takes no time option and never
#: calls the iteration callback)
TIME_BUDGET_MECHANISM = {
    "ipopt": "ipopt's max_wall_time",
    "sqpmethod": "an iteration callback that stops the solve past the deadline",
    "rti": "an iteration callback that stops the solve past the deadline",
}


class Deadline(ca.Callback):
    """CasADi ``iteration_callback`` that asks the solver to stop once the wall clock passes
    :attr:`deadline` (``time.perf_counter()`` seconds); :attr:`stopped` says whether it did
    in the current solve. Checked once per iteration, so a solve ends at most one iteration
    past the deadline."""

    def __init__(self, nx: int, ng: int, np_: int) -> None:
        ca.Callback.__init__(self)
        self._sizes = {"x": nx, "lam_x": nx, "g": ng, "lam_g": ng, "lam_p": np_, "f": 1}
        self.deadline = float("inf")
        self.stopped = False
        self.construct("time_budget", {})

    def arm(self, budget: float) -> None:
        """Start the clock of one solve: stop it ``budget`` seconds from now."""
        self.deadline = time.perf_counter() + budget
        self.stopped = False

    def get_n_in(self) -> int:
        return ca.nlpsol_n_out()

    def get_n_out(self) -> int:
        return 1

    def get_name_in(self, i: int) -> str:
        return ca.nlpsol_out(i)

    def get_name_out(self, i: int) -> str:
        return "stop"

    def get_sparsity_in(self, i: int) -> ca.Sparsity:
        n = self._sizes.get(ca.nlpsol_out(i), 0)
        return ca.Sparsity.dense(n) if n else ca.Sparsity(0, 0)

    def eval(self, arg):  # noqa: ARG002 (the iterate is not read)
        if time.perf_counter() > self.deadline:
            self.stopped = True
            return [1]
        return [0]


def check_timed(
    solver: str, budget: float | None, error: type[Exception] = InputError, prefix: str = ""
) -> None:
    """Refuse a time budget ``budget`` (None: none) that ``solver`` cannot keep; ``prefix``
    names the keys' table in the message (``"controller."``)."""
    if budget is not None and solver not in TIME_BUDGET_MECHANISM:
        raise error(
            f"{prefix}time_budget = {budget!r} s cannot be kept by {prefix}solver = {solver!r}: "
            f"in CasADi {ca.__version__} it has no wall-time option and does not call an "
            "iteration callback; use solver 'ipopt' or 'sqpmethod' with a time budget, or "
            f"bound {solver}'s solves by max_iter and set {prefix}time_budget = 0 (none)"
        )


def check_time_budget(solver: str, budget: float | None, given: Mapping[str, Any]) -> None:
    """Refuse a time budget ``budget`` (None: none) that ``solver`` cannot keep, or that
    ``given`` (the user's ``solver_options``) would override with its own limit."""
    check_timed(solver, budget)
    if budget is None:
        return
    if solver == "ipopt" and "max_wall_time" in (given.get("ipopt") or {}):
        raise InputError(
            f"solver_options['ipopt']['max_wall_time'] = {given['ipopt']['max_wall_time']!r} "
            f"and time_budget = {budget!r} both set ipopt's wall-time limit; give only "
            "time_budget"
        )
    if solver != "ipopt" and "iteration_callback" in given:
        raise InputError(
            f"solver_options['iteration_callback'] cannot be given with time_budget = "
            f"{budget!r} and solver={solver!r}: the budget is kept by an iteration callback; "
            "drop one of them"
        )


def time_budget_options(
    solver: str, budget: float, given: Mapping[str, Any], sizes: tuple[int, int, int]
) -> tuple[dict[str, Any], Deadline | None]:
    """The nlpsol options that make ``solver`` keep ``budget`` seconds of wall time, and
    the :class:`Deadline` to arm before each solve (None for ipopt, which keeps its own
    clock); ``sizes`` are the NLP's ``(nx, ng, np)``. Refused as by
    :func:`check_time_budget`."""
    check_time_budget(solver, budget, given)
    if solver == "ipopt":
        return {"ipopt": {"max_wall_time": budget}}, None
    deadline = Deadline(*sizes)
    return {"iteration_callback": deadline}, deadline


class RealTimeIteration:
    """One Gauss–Newton SQP step per call, called like a CasADi ``nlpsol``: ``(x0, p, lbx,
    ubx, lbg, ubg[, lam_x0, lam_g0]) -> {x, f, g, lam_x, lam_g}`` and :meth:`stats`.

    At the guess ``x0`` it evaluates the cost, its gradient, the constraints, their Jacobian
    and the Gauss–Newton Hessian ``gauss_newton`` in one function, then solves the QP

        min_d  1/2 d^T H d + grad_f^T d
        s.t.   lbg - g <= J d <= ubg - g,   lbx - x0 <= d <= ubx - x0

    with ``qpsol`` and returns ``x0 + d`` (the linearised constraints ``g + J d``). That is the
    real-time iteration of Diehl et al. (2005): each sample takes exactly one linearisation
    (the constraint Jacobian is evaluated once; CasADi's ``sqpmethod`` stopped after one
    iteration evaluates it again at the new iterate for its convergence test) and one QP.
    Never converged by design: ``stats()["success"]`` is False, ``return_status`` says whether
    the QP was solved; a QP that failed returns NaN (the caller's fallback acts).
    ``stats()`` also gives the times of the two parts (``t_wall_linearization``,
    ``t_wall_qp``)."""

    def __init__(
        self,
        nlp: Mapping[str, Any],
        gauss_newton: ca.Function,
        qpsol: str,
        qp_options: Mapping[str, Any],
        expand: bool,
        function_options: Mapping[str, Any] | None = None,
    ) -> None:
        w, p, f, g = nlp["x"], nlp["p"], nlp["f"], nlp["g"]
        H = gauss_newton(w, p, 1.0, ca.DM.zeros(g.numel()))
        J = ca.jacobian(g, w)
        lin = ca.Function(
            "rti_linearization", [w, p], [f, ca.gradient(f, w), g, J, H],
            ["x", "p"], ["f", "grad_f", "g", "jac_g", "hess"], dict(function_options or {}),
        )  # fmt: skip
        self._lin = lin.expand() if expand else lin
        self._qp = ca.conic(
            "rti_qp", qpsol, {"h": H.sparsity(), "a": J.sparsity()}, dict(qp_options)
        )
        self._stats: dict[str, Any] = {}

    def __call__(self, *, x0, p, lbx, ubx, lbg, ubg, lam_x0=None, lam_g0=None) -> dict:
        start = time.perf_counter()
        f, grad, g, J, H = self._lin(x0, p)
        linearized = time.perf_counter()
        args = dict(h=H, g=grad, a=J, lba=lbg - g, uba=ubg - g, lbx=lbx - x0, ubx=ubx - x0)
        if lam_x0 is not None:
            args.update(lam_x0=lam_x0, lam_a0=lam_g0)
        try:
            qp = self._qp(**args)
            qp_stats = self._qp.stats()
            solved, why = bool(qp_stats.get("success", False)), qp_stats.get("return_status")
        except RuntimeError as exc:  # an ill-posed QP (crossed bounds) raises
            n, m = self._qp.size1_in(0), self._qp.size1_in(3)
            qp = {"x": ca.DM.nan(n), "lam_x": ca.DM.nan(n), "lam_a": ca.DM.nan(m)}
            solved, why = False, str(exc).strip().splitlines()[-1]
        d = qp["x"] if solved else ca.DM.nan(self._qp.size1_in(0))
        self._stats = {
            "success": False,  # one iteration: never converged by design
            "return_status": "one real-time iteration" if solved else f"QP failed: {why}",
            "iter_count": 1,
            "t_wall_linearization": linearized - start,
            "t_wall_qp": time.perf_counter() - linearized,
        }
        return {
            "x": ca.DM(x0) + d,
            "f": f + ca.dot(grad, d) + 0.5 * ca.bilin(H, d, d),
            "g": g + ca.mtimes(J, d),
            "lam_x": qp["lam_x"],
            "lam_g": qp["lam_a"],
        }

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)
