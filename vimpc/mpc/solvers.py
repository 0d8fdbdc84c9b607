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

SOLVERS = ("sqpmethod", "fatrop", "ipopt", "rti", "condensed")
HESSIANS = ("gauss-newton", "exact")
QP_SOLVERS = ("auto", "qrqp", "osqp", "daqp", "hpipm", "qpoases")
#: what ``qpsol = "auto"`` means: qrqp for sqpmethod's sparse QPs, daqp (a dual active-set
#: solver for dense QPs) for the real-time iteration's condensed QP, where qrqp took ~17 ms
#: and 48 iterations against daqp's 0.15 ms on the cart-pole swing-up's (41 variables)
AUTO_QPSOL = {"sqpmethod": "qrqp", "rti": "daqp"}
#: the tolerance of the solver of ``solver = "condensed"``'s cold starts (at most)
CONDENSED_FALLBACK_TOL = 1e-6


def qp_solver(qpsol: str, condensed: bool = False) -> str:
    """The QP solver ``qpsol`` names: ``"auto"`` is :data:`AUTO_QPSOL`'s, for the real-time
    iteration's ``condensed`` QP or for ``sqpmethod``."""
    _checks.one_of("qpsol", qpsol, QP_SOLVERS)
    if qpsol != "auto":
        return qpsol
    return AUTO_QPSOL["rti" if condensed else "sqpmethod"]


#: HPIPM's interior point: its ``robust`` mode, to residuals (equality, bounds, dual,
#: complementarity) of 1e-6 each. At HPIPM's own tolerances (1e-8), a real-time QP of
#: cartpole_clnn_safe ended at the iteration limit in every mode and at every limit tried
#: (15, 50, 200), also where its iterate was within 6e-9 of qrqp's answer; at 1e-6
#: ``robust`` converged in 16 iterations, within 6e-9 of it.
HPIPM_OPTIONS = {
    "mode": "robust",
    "res_g_max": 1e-6,
    "res_b_max": 1e-6,
    "res_d_max": 1e-6,
    "res_m_max": 1e-6,
}


def qp_options(qpsol: str) -> dict[str, Any]:
    """Quiet, non-raising options of the CasADi conic ``qpsol`` (not ``"auto"``)."""
    qp_opts: dict[str, Any] = {"error_on_fail": False}
    if qpsol == "qrqp":
        qp_opts.update(print_iter=False, print_header=False, print_info=False)
    elif qpsol == "osqp":
        qp_opts.update(osqp={"verbose": False})
    elif qpsol == "qpoases":
        qp_opts.update(printLevel="none")
    elif qpsol == "hpipm":
        qp_opts.update(hpipm={**HPIPM_OPTIONS, "warm_start": True})
    return qp_opts


def nlpsol_options(
    solver: str,
    *,
    max_iter: int,
    tol: float,
    qpsol: str = "auto",
    expand: bool = True,
    equality: list[bool] | None = None,
    hessian: str = "gauss-newton",
    gauss_newton: Any = None,
    structure: dict[str, Any] | None = None,
    condensed_start: str = "sqpmethod",
) -> tuple[str, dict[str, Any]]:
    """CasADi plugin name and options for a solver preset.

    ``sqpmethod`` uses the Gauss–Newton Hessian ``gauss_newton`` of the
    least-squares cost (positive semidefinite, so no convexification is needed)
    or, with ``hessian="exact"``, the exact Hessian made positive definite by
    eigenvalue reflection; a backtracking line search globalises it. ``rti`` is
    the same with one iteration per call, the preset of ``sqpmethod`` that the controller
    uses for it only where :class:`RealTimeIteration` does not apply.
    ``fatrop`` detects the stage structure from the stage-wise variable layout;
    it needs ``equality``, one flag per constraint row. HPIPM is given the stage sizes
    ``structure`` (:meth:`~vimpc.mpc.transcription.Layout.ocp_structure`) rather than
    left to CasADi's detection from the sparsity; since CasADi's interface has no variables
    but the states at the terminal stage, a problem with terminal slacks (soft constraints
    on the ``step`` transcription; the ``implicit`` one lays them out with stage ``N-1``)
    is refused for HPIPM.
    """
    _checks.one_of("solver", solver, SOLVERS)
    if solver == "condensed":
        # its cold starts go to condensed_start, to convergence: the condensed SQP's tol is
        # its step, and it tests the model's residual and constraints itself
        # (vimpc.mpc.condensed)
        solver, tol = condensed_start, min(tol, CONDENSED_FALLBACK_TOL)
    qpsol = qp_solver(qpsol)
    common: dict[str, Any] = {"expand": expand, "print_time": False, "error_on_fail": False}
    if solver in ("sqpmethod", "rti"):
        qp_opts = qp_options(qpsol)
        if qpsol == "hpipm" and structure is not None:
            if structure["nu"][-1]:
                raise InputError(
                    "qpsol='hpipm' cannot solve this problem: it has soft constraints at the "
                    f"terminal stage ({structure['nu'][-1]} slacks), and CasADi's HPIPM "
                    "interface takes no variables besides the states there; use "
                    "transcription='implicit' (it lays them out with the stage before), "
                    "qpsol='qrqp', solver='fatrop', or hard bounds (soft_bounds=false)"
                )
            qp_opts.update(structure)
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


#: the interior-point solvers, whose solves from a previous plan ``warm_barrier`` starts
#: and ``warm_max_iter`` limits
INTERIOR_POINT = ("fatrop", "ipopt")
#: fatrop's ``bound_push`` for the solves that ``warm_barrier`` starts: how far (relative) the
#: previous plan's variables are pushed into the interior of their bounds (fatrop's own is
#: 1e-2, which moves a plan on its bounds away from them); ipopt's warm start already uses
#: this (``warm_start_bound_push``)
WARM_BOUND_PUSH = 1e-6


def warm_options(
    plugin: str, opts: dict[str, Any], mu: float | None, max_iter: int | None = None
) -> dict[str, Any] | None:
    """The options ``opts`` of an interior-point ``plugin`` (``fatrop``, ``ipopt``) for
    its solves from a previous plan: the barrier parameter starting at ``mu`` (``mu_init``),
    and for fatrop the bounds' push at :data:`WARM_BOUND_PUSH` (at most ``mu``'s own push
    where ``opts`` sets a smaller one); the iteration limit ``max_iter``. None when both are
    None or ``plugin`` is none of them (the preset check refuses ``warm_barrier`` and
    ``warm_max_iter`` with other solvers before this)."""
    if (mu is None and max_iter is None) or plugin not in INTERIOR_POINT:
        return None
    table = dict(opts.get(plugin, {}))
    if mu is not None:
        table["mu_init"] = mu
        if plugin == "fatrop":
            table["bound_push"] = min(WARM_BOUND_PUSH, table.get("bound_push", WARM_BOUND_PUSH))
    if max_iter is not None:
        table["max_iter"] = max_iter
    return {**opts, plugin: table}


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
    "condensed": "its own clock: no iteration begins that would end past the deadline",
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
            f"bound {solver}'s solves from the previous plan by {prefix}warm_max_iter and "
            f"leave {prefix}time_budget unset"
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


def condensing_obstacle(
    nlp: Mapping[str, Any],
    free: np.ndarray,
    equality: np.ndarray,
    lbw: np.ndarray,
    ubw: np.ndarray,
    n_init: int,
) -> str | None:
    """Why :class:`RealTimeIteration` cannot condense this NLP onto the ``free`` variables
    (``equality`` flags the constraint rows with ``lbg == ubg``; ``lbw``, ``ubw`` the
    variables' bounds; the initial state the first ``n_init`` parameters), or None when it
    can: as many equality rows as other variables, no finite bound on those, and a cost
    that does not read the initial state."""
    n_dep = nlp["x"].numel() - np.asarray(free).size
    n_eq = int(np.count_nonzero(equality))
    if n_eq != n_dep:
        return f"{n_eq} equality rows for {n_dep} state variables (they must be as many)"
    dep = np.setdiff1d(np.arange(nlp["x"].numel()), np.asarray(free, int).reshape(-1))
    if np.isfinite(lbw[dep]).any() or np.isfinite(ubw[dep]).any():
        return "a state variable has a finite bound"
    reads = ca.jacobian_sparsity(nlp["f"], nlp["p"]).get_col()
    if any(j < n_init for j in reads):
        return "the cost reads the initial state"
    return None


class RealTimeIteration:
    """The real-time iteration of Diehl et al. (2005): one Gauss–Newton SQP step per sample,
    split into a :meth:`prepare` phase before the state is measured and a short
    :meth:`feedback` phase after.

    :meth:`prepare` ``(x0, p, lbx, ubx, lbg, ubg)`` linearises the NLP at the guess ``x0``
    (the previous plan shifted by one stage) with the parameters ``p`` (their first
    ``n_init`` entries, the initial state, set to the guess's own initial state): cost,
    gradient, constraints, their Jacobian and the Gauss–Newton Hessian ``gauss_newton``
    (plus ``regularization`` times the identity: Levenberg–Marquardt), in one function. It
    then condenses the QP

        min_d  1/2 d^T H d + grad_f^T d
        s.t.   J_E d = lbg_E - g_E,   lbg_I - g_I <= J_I d <= ubg_I - g_I,
               lbx - x0 <= d <= ubx - x0

    onto the ``free`` variables (the inputs and slacks): the equality rows ``E`` (dynamics,
    the integrator's residual, the initial condition) are solved for the other variables,
    ``d = T d_F + t_0 + M dx``, with ``dx`` the difference between the measured initial
    state and the one prepared with. The initial state enters the NLP only through the
    initial-value rows ``x_0 - x_init = 0`` (the initial-value embedding), so everything
    but ``dx`` is known before the state arrives.

    :meth:`feedback` ``(x_init)`` forms ``dx``, shifts the condensed QP's gradient and row
    bounds by it (a few small products) and solves the dense QP (``nu N + ns (N + 1)``
    variables) with ``qpsol``; the first input is ready then. ``__call__`` is the two
    phases in one, called like a CasADi ``nlpsol``: ``(x0, p, lbx, ubx, lbg, ubg[, lam_x0,
    lam_g0]) -> {x, f, g, lam_x, lam_g}``, with :meth:`stats`.

    Never converged by design: ``stats()["success"]`` is False, ``return_status`` says
    whether the QP was solved; a QP that failed, or a linearisation that could not be
    condensed (its equality Jacobian singular or not finite at the guess), returns NaN (the
    caller's fallback acts). ``stats()`` gives the phases' wall times
    (``t_wall_preparation``, ``t_wall_feedback``).
    The multipliers of the equality rows are not computed (NaN; the Gauss–Newton Hessian
    does not need them).

    Needs: the equality rows as many as the non-free variables and solvable for them, no
    finite bound on a non-free variable, a cost that does not depend on the initial state,
    the initial state entering the constraints linearly. :func:`condensing_obstacle` says
    whether an NLP meets them."""

    def __init__(
        self,
        nlp: Mapping[str, Any],
        gauss_newton: ca.Function,
        qpsol: str,
        qp_options: Mapping[str, Any],
        expand: bool,
        *,
        free: np.ndarray,
        equality: np.ndarray,
        n_init: int,
        regularization: float = 0.0,
        function_options: Mapping[str, Any] | None = None,
    ) -> None:
        w, p, f, g = nlp["x"], nlp["p"], nlp["f"], nlp["g"]
        n_w, n_g, n_p = w.numel(), g.numel(), p.numel()
        H = gauss_newton(w, p, 1.0, ca.DM.zeros(n_g))
        J = ca.jacobian(g, w)
        # the initial state's entries of p enter g linearly (x_0 - x_init): a constant Jacobian
        J_init = ca.jacobian(g, p)[:, :n_init]
        lin = ca.Function(
            "rti_linearization", [w, p], [f, ca.gradient(f, w), g, J, H],
            ["x", "p"], ["f", "grad_f", "g", "jac_g", "hess"], dict(function_options or {}),
        )  # fmt: skip
        lin = lin.expand() if expand else lin
        Jinit = ca.Function("rti_init_jacobian", [w, p], [J_init])(np.zeros(n_w), np.zeros(n_p))
        self._free = F = np.asarray(free, int).reshape(-1)
        self._dep = D = np.setdiff1d(np.arange(n_w), F)
        equality = np.asarray(equality, bool).reshape(-1)
        self._eq, self._ineq = E, I = np.flatnonzero(equality), np.flatnonzero(~equality)
        self._n_init, self._n_g = n_init, n_g
        self.regularization = float(regularization)
        nF, nI, nD = F.size, I.size, D.size
        # the condensing, as one CasADi function (sparse LU of the equality rows' Jacobian in
        # the state variables; no multithreaded BLAS, whose threads contend on a busy machine)
        W, Pp = ca.MX.sym("w", n_w), ca.MX.sym("p", n_p)
        lbg, ubg, lbx, ubx = (ca.MX.sym(name, n) for name, n in (
            ("lbg", n_g), ("ubg", n_g), ("lbx", n_w), ("ubx", n_w)))  # fmt: skip
        f_, grad_, g_, J_, H_ = lin(W, Pp)
        if self.regularization:
            H_reg = H_ + self.regularization * ca.DM.eye(n_w)
        else:
            H_reg = H_
        J_E = J_[E.tolist(), :]
        rhs = ca.horzcat(J_E[:, F.tolist()], lbg[E.tolist()] - g_[E.tolist()], Jinit[E.tolist(), :])
        sol = ca.solve(J_E[:, D.tolist()], rhs, "csparse")
        scatter_D = ca.DM(ca.Sparsity.triplet(n_w, nD, D.tolist(), list(range(nD))), 1.0)
        scatter_F = ca.DM(ca.Sparsity.triplet(n_w, nF, F.tolist(), list(range(nF))), 1.0)
        T = scatter_F - ca.mtimes(scatter_D, sol[:, :nF])
        t0 = ca.mtimes(scatter_D, sol[:, nF])
        M = -ca.mtimes(scatter_D, sol[:, nF + 1 :])
        HT = ca.mtimes(H_reg, T)
        J_I = J_[I.tolist(), :]
        shift = g_[I.tolist()] + ca.mtimes(J_I, t0)
        outputs = {
            "f": f_, "grad": grad_, "g": g_, "J": J_, "H": H_,
            "T": T, "t0": t0, "M": M,
            "h": ca.densify(ca.mtimes(T.T, HT)),
            "c0": ca.densify(ca.mtimes(T.T, ca.mtimes(H_reg, t0) + grad_)),
            "Cx": ca.densify(ca.mtimes(HT.T, M)),
            "a": ca.densify(ca.mtimes(J_I, T)),
            "lba": lbg[I.tolist()] - shift, "uba": ubg[I.tolist()] - shift,
            "Ax": ca.densify(ca.mtimes(J_I, M) + Jinit[I.tolist(), :]),
            "lbd": lbx[F.tolist()] - W[F.tolist()], "ubd": ubx[F.tolist()] - W[F.tolist()],
        }  # fmt: skip
        self._names = list(outputs)
        dx, c0, Cx = ca.SX.sym("dx", n_init), ca.SX.sym("c0", nF), ca.SX.sym("Cx", nF, n_init)
        lba, uba, Ax = ca.SX.sym("lba", nI), ca.SX.sym("uba", nI), ca.SX.sym("Ax", nI, n_init)
        shift_ = ca.mtimes(Ax, dx)
        self._shift = ca.Function(
            "rti_feedback_data", [dx, c0, Cx, lba, uba, Ax],
            [c0 + ca.mtimes(Cx, dx), lba - shift_, uba - shift_],
        )  # fmt: skip
        # what the linearisation predicts at the step's end, on the prepared data as they
        # are (sparse): a dense Jacobian and Hessian made NumPy arrays took 5.5 of a 9.7 ms
        # preparation on the GP-VI four-bar (266 variables)
        d, step_dx = ca.SX.sym("d", n_w), ca.SX.sym("dx", n_init)
        data = {
            name: ca.SX.sym(name, out.sparsity())
            for name, out in zip(("f", "grad", "g", "J", "H"), (f_, grad_, g_, J_, H_), strict=True)
        }  # fmt: skip
        self._predicted = list(data)
        self._prediction = ca.Function(
            "rti_prediction", [d, step_dx, *data.values()],
            [data["f"] + ca.dot(data["grad"], d) + 0.5 * ca.bilin(data["H"], d, d),
             data["g"] + ca.mtimes(data["J"], d) + ca.mtimes(Jinit, step_dx)],
        )  # fmt: skip
        self._condense = ca.Function(
            "rti_condensing", [W, Pp, lbg, ubg, lbx, ubx], list(outputs.values()),
            ["w", "p", "lbg", "ubg", "lbx", "ubx"], self._names,
        )  # fmt: skip
        self._qp = ca.conic(
            "rti_qp",
            qpsol,
            {"h": ca.Sparsity.dense(nF, nF), "a": ca.Sparsity.dense(nI, nF)},
            dict(qp_options),
        )
        self._prepared: dict[str, Any] | None = None
        self._stats: dict[str, Any] = {}

    @property
    def prepared(self) -> bool:
        """Whether :meth:`prepare` has run since the last :meth:`feedback`."""
        return self._prepared is not None

    def prepare(self, *, x0, p, lbx, ubx, lbg, ubg) -> float:
        """Linearise at the guess ``x0`` with parameters ``p`` and condense the QP; returns
        the wall time it took [s]."""
        start = time.perf_counter()
        try:
            out = self._condense(x0, p, lbg, ubg, lbx, ubx)
        except RuntimeError as exc:  # the guess's equality Jacobian singular or not finite
            q = {"failed": str(exc).strip().splitlines()[-1]}
        else:
            # the data stay DMs: a NumPy conversion costs ~10-30 us a vector, milliseconds
            # a dense matrix
            q = dict(zip(self._names, out, strict=True))
            for name in ("T", "t0", "M"):  # the step's, as NumPy arrays
                q[name] = q[name].full()
        q["w"] = np.asarray(x0, float).reshape(-1)
        q["x_init"] = np.asarray(p, float).reshape(-1)[: self._n_init].copy()
        self._prepared = q
        elapsed = time.perf_counter() - start
        self._stats = {"t_wall_preparation": elapsed}
        return elapsed

    def feedback(self, x_init) -> dict:
        """Solve the prepared QP from the measured initial state ``x_init``: the step, as
        :meth:`__call__` returns it. Consumes the preparation."""
        if self._prepared is None:
            raise RuntimeError("RealTimeIteration.feedback needs a prepare() first")
        start = time.perf_counter()
        q, self._prepared = self._prepared, None
        if "failed" in q:  # no QP to solve: NaN, and the caller's fallback acts
            self._feedback_stats(f"linearisation failed: {q['failed']}", start)
            nan_w, nan_g = np.full((q["w"].size, 1), np.nan), np.full((self._n_g, 1), np.nan)
            return {"x": nan_w, "f": float("nan"), "g": nan_g, "lam_x": nan_w, "lam_g": nan_g}
        dx = np.asarray(x_init, float).reshape(-1) - q["x_init"]
        g, lba, uba = self._shift(dx, q["c0"], q["Cx"], q["lba"], q["uba"], q["Ax"])
        args = {"h": q["h"], "g": g, "a": q["a"], "lba": lba, "uba": uba}
        try:
            qp = self._qp.call({**args, "lbx": q["lbd"], "ubx": q["ubd"]})
            qp_stats = self._qp.stats()
            solved, why = bool(qp_stats.get("success", False)), qp_stats.get("return_status")
        except RuntimeError as exc:  # an ill-posed QP (crossed bounds) raises
            qp, solved, why = None, False, str(exc).strip().splitlines()[-1]
        n_w, n_g = q["w"].size, q["g"].numel()
        if solved:
            d = (q["T"] @ qp["x"].full() + q["t0"] + q["M"] @ dx[:, None]).reshape(-1)
            solved = bool(np.all(np.isfinite(d)))
            why = why if solved else "the condensed step is not finite"
        if not solved:
            d = np.full(n_w, np.nan)
        # the step (the whole plan) is known: the feedback phase ends; the rest is bookkeeping
        self._feedback_stats("one real-time iteration" if solved else f"QP failed: {why}", start)
        f, g = self._prediction(d, dx, *(q[name] for name in self._predicted))
        lam_x, lam_g = np.full(n_w, np.nan), np.full(n_g, np.nan)
        if solved:
            lam_x[self._free] = qp["lam_x"].full().reshape(-1)
            lam_g[self._ineq] = qp["lam_a"].full().reshape(-1)
        # column vectors, shaped as nlpsol's DMs read by np.asarray (no DM conversion)
        return {
            "x": (q["w"] + d)[:, None],
            "f": float(f),
            "g": g.full(),
            "lam_x": lam_x[:, None],
            "lam_g": lam_g[:, None],
        }

    def _feedback_stats(self, status: str, start: float) -> None:
        """The feedback phase's :meth:`stats`, its wall time from ``start`` (the preparation's
        kept)."""
        self._stats = {
            "success": False,  # one iteration: never converged by design
            "return_status": status,
            "iter_count": 1,
            "t_wall_preparation": self._stats.get("t_wall_preparation", float("nan")),
            "t_wall_feedback": time.perf_counter() - start,
        }

    def __call__(self, *, x0, p, lbx, ubx, lbg, ubg, lam_x0=None, lam_g0=None) -> dict:
        """Both phases at once: linearise at ``x0`` and solve from the initial state in
        ``p`` (the multipliers' guesses are not used: the Gauss–Newton Hessian needs none).
        The step does not depend on the initial state the preparation was given: it enters
        linearly, and :meth:`feedback` adds the difference."""
        del lam_x0, lam_g0
        self.prepare(x0=x0, p=p, lbx=lbx, ubx=ubx, lbg=lbg, ubg=ubg)
        return self.feedback(self._prepared["x_init"])

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)


class SparseRealTimeIteration:
    """One Gauss–Newton SQP step per call on the sparse (uncondensed) QP, both phases at
    once, called like a CasADi ``nlpsol``: ``(x0, p, lbx, ubx, lbg, ubg[, lam_x0, lam_g0])
    -> {x, f, g, lam_x, lam_g}`` and :meth:`stats`. The real-time iteration where the
    linearisation must wait for the measured state (a tube computed from it): condensing,
    which pays off only when prepared ahead, would be on the critical path.

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
        regularization: float = 0.0,
    ) -> None:
        w, p, f, g = nlp["x"], nlp["p"], nlp["f"], nlp["g"]
        H = gauss_newton(w, p, 1.0, ca.DM.zeros(g.numel()))
        self.regularization = float(regularization)
        if self.regularization:  # Levenberg–Marquardt, as RealTimeIteration's
            H = H + self.regularization * ca.DM.eye(w.numel())
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
