"""Transcription of the optimal control problem into one CasADi NLP.

Decision variables are laid out stage by stage, ``w = (x_0, u_0, s_0, x_1, u_1,
s_1, ..., x_N, s_N)`` (``s`` the slacks of soft constraints), and constraints
likewise: for each stage the dynamics gap, then the initial condition at stage 0,
then the stage's path constraints. Structure-exploiting solvers (FATROP) read the
stages off this layout.

``"step"``: the gap is ``x_{k+1} - step(x_k, u_k)``.

``"implicit"``: each stage also carries a copy ``z_k`` of the next state,
``w = (x_0, u_0, z_0, s_0, x_1, ...)``; the gap is the linear ``x_{k+1} - z_k`` and
the integrator's equations ``residual(x_k, u_k, z_k) = 0`` are a stage
constraint. Without the copy the residual would couple neighbouring stages in
the Hessian of the Lagrangian, which then has no block structure for SQP
convexification or for FATROP's Riccati recursion. The terminal stage's path
constraints are written on ``z_{N-1}`` and its slacks sit with stage ``N-1``,
``w = (..., x_{N-1}, u_{N-1}, z_{N-1}, s_{N-1}, s_N, x_N)``: the terminal stage is its
states alone, the form HPIPM takes.

The NLP parameter vector is ``(x_init, reference_0..N, u_prev, p)``, followed with
``tightened=True`` by the tightening ``t_k`` of the safety rows at stages ``1..N``
(``m x N``, column by column): each safety row ``h_j(obs_k) >= 0`` becomes
``h_j(obs_k) >= t_{k,j}``. Without tightening the NLP has no such parameters. With
``soft_input_tube=True`` (a feedback tube with soft bounds) the tightening ``t_u`` of the
inputs follows (``nu x N``, column by column): at stages ``1..N-1`` each finite input bound
gets the soft row ``u_k - u_min >= t_u`` (``u_max - u_k >= t_u``), one slack per input entry
penalised like the observation bounds, inside the hard input bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc.problem import Constraints, SafetyRows, _ResolvedCost
from vimpc.mpc.tube import expanded_or_none, keeps_mx, residual_function

TRANSCRIPTIONS = ("step", "implicit")
#: the quadratic penalty ``SLACK_QUADRATIC * s^2`` each slack adds to its exact L1 penalty:
#: it keeps the Hessian regular in the slacks
SLACK_QUADRATIC = 1e-3


@dataclass(frozen=True)
class Layout:
    """Where each stage's variables sit in ``w``."""

    x: np.ndarray  # (N + 1, nx) indices
    u: np.ndarray  # (N, nu) indices
    z: np.ndarray  # (N, nx) indices of the next-state copies ("implicit"), else (N, 0)
    s: np.ndarray  # (N + 1, ns) indices
    n_w: int
    #: constraint rows of each stage besides its dynamics gap (the initial condition, the
    #: integrator's residual, path constraints), in the order of ``g``
    stage_rows: tuple[int, ...] = ()

    def ocp_structure(self) -> dict[str, int | list[int]]:
        """The stage sizes of the NLP's QP as a structured QP solver reads them (HPIPM's
        ``N, nx, nu, ng``): the states of each stage, everything else of the stage (inputs,
        next-state copies, slacks) as its controls, the non-gap rows as its constraints."""
        N, n = self.u.shape[0], self.x.shape[1]
        starts = [*self.x[:, 0].tolist(), self.n_w]
        nu = [starts[k + 1] - starts[k] - n for k in range(N + 1)]
        return {"N": N, "nx": [n] * (N + 1), "nu": nu, "ng": list(self.stage_rows)}


@dataclass(frozen=True)
class Transcription:
    nlp: dict
    layout: Layout
    lbw: np.ndarray
    ubw: np.ndarray
    lbg: np.ndarray
    ubg: np.ndarray
    expandable: bool
    n_tube: int  # tightening parameters at the end of the NLP's ``p`` (0 without tightening)
    gauss_newton: ca.Function  # (x, p, lam_f, lam_g) -> Gauss–Newton Hessian of the Lagrangian
    soft_input_tube: bool = False  # the inputs' tightening ends the tube parameters, soft rows
    #: the inequality rows of ``g`` alone (the rows whose bounds differ, in their order in
    #: ``g``), an expression in the NLP's ``x`` and ``p``: the path constraints of the states,
    #: the inputs' soft tightened rows
    inequality: ca.MX | None = None
    #: each slack's L1 weight, per stage (``ns``)
    slack_weights: np.ndarray | None = None


def _soft_bounds(safety: SafetyRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft observation bounds: the entries that have a finite bound (one slack each, shared
    by their lower and upper rows), and the entries with a finite lower / upper bound."""
    if not safety.constraints.soft_bounds:
        empty = np.zeros(0, int)
        return empty, empty, empty
    return np.union1d(safety.lower, safety.upper), safety.lower, safety.upper


def _soft_inputs(cons: Constraints, soft_input_tube: bool) -> tuple[np.ndarray, ...]:
    """The input entries with a soft tightened bound (a finite bound, soft bounds and a soft
    input tube), and those with a finite lower / upper bound."""
    if not (soft_input_tube and cons.soft_bounds):
        empty = np.zeros(0, int)
        return empty, empty, empty
    lo, hi = np.isfinite(cons.u_min), np.isfinite(cons.u_max)
    return np.flatnonzero(lo | hi), np.flatnonzero(lo), np.flatnonzero(hi)


class Transcriber:
    """The abstract transcription strategy: how the model's steps enter the NLP (the
    ``transcription`` option, :data:`TRANSCRIBERS`); :func:`transcribe` builds it."""

    #: the option's value
    NAME: ClassVar[str] = ""
    #: whether the next states are decision variables tied by the model's residual
    IMPLICIT: ClassVar[bool] = False

    @classmethod
    def check(cls, model: DiscreteModel) -> None:
        """Refuse a model this transcription cannot be built on."""


class StepTranscription(Transcriber):
    """``"step"``: multiple shooting on ``model.step``."""

    NAME = "step"


class ImplicitTranscription(Transcriber):
    """``"implicit"``: the model's residual as equality constraints (a variational model
    with one substep per dt)."""

    NAME, IMPLICIT = "implicit", True

    @classmethod
    def check(cls, model: DiscreteModel) -> None:
        if model.residual is None:
            raise InputError(
                "transcription='implicit' needs a model with a residual (a variational model "
                "with one substep per dt); use transcription='step' for this model"
            )


#: the transcription strategy of each value of the ``transcription`` option
TRANSCRIBERS: dict[str, type[Transcriber]] = {
    "step": StepTranscription,
    "implicit": ImplicitTranscription,
}


def transcriber_for(name: str, model: DiscreteModel) -> type[Transcriber]:
    """The transcription ``name`` (checked) for ``model``: ``"auto"`` is ``"implicit"`` when
    the model has a residual, else ``"step"``."""
    if name == "auto":
        name = "implicit" if model.residual is not None else "step"
    chosen = TRANSCRIBERS[name]
    chosen.check(model)
    return chosen


def n_slacks(safety: SafetyRows, soft_input_tube: bool = False) -> int:
    """The slacks per stage: one per softly bounded observation entry, one per soft path
    row, and with ``soft_input_tube`` one per bounded input entry."""
    soft_entries, _, _ = _soft_bounds(safety)
    n_path = sum(1 for r in safety.rows if r.soft and r.kind == "path")
    return len(soft_entries) + n_path + len(_soft_inputs(safety.constraints, soft_input_tube)[0])


def transcribe(
    model: DiscreteModel,
    horizon: int,
    cost: _ResolvedCost,
    safety: SafetyRows,
    transcription: str,
    tightened: bool = False,
    soft_input_tube: bool = False,
) -> Transcription:
    N = _checks.positive_int("horizon", horizon)
    _checks.one_of("transcription", transcription, TRANSCRIPTIONS)
    TRANSCRIBERS[transcription].check(model)
    nx, nu, nobs = model.nx, model.nu, model.nobs
    cons = safety.constraints
    soft_entries, soft_lo, soft_hi = _soft_bounds(safety)
    hard_lo, hard_hi = (
        (safety.lower, safety.upper) if not cons.soft_bounds else (np.zeros(0, int),) * 2
    )
    soft_path = [c for c in cons.path if c.soft]
    n_soft_path = sum(1 for r in safety.rows if r.soft and r.kind == "path")
    u_soft, u_lo, u_hi = _soft_inputs(cons, soft_input_tube)
    ns_obs = len(soft_entries) + n_soft_path
    ns = ns_obs + len(u_soft)
    # rows of the soft constraints -> their slacks: a bounded entry's two rows share one slack
    slack_of_row = [int(np.searchsorted(soft_entries, i)) for i in (*soft_lo, *soft_hi)]
    slack_of_row += list(range(len(soft_entries), ns_obs))
    slack_map = np.zeros((len(slack_of_row), ns_obs))
    slack_map[np.arange(len(slack_of_row)), slack_of_row] = 1.0
    slack_weights = (
        np.concatenate(
            [
                np.full(len(soft_entries), cons.bound_weight),
                *[np.full(c.function.numel_out(0), c.weight) for c in soft_path],
                np.full(len(u_soft), cons.bound_weight),
            ]
        )
        if ns
        else np.zeros(0)
    )

    x_init = ca.MX.sym("x_init", nx)
    refs = ca.MX.sym("reference", nobs, N + 1)
    u_prev = ca.MX.sym("u_prev", nu)
    p = ca.MX.sym("p", model.np)
    tube = ca.MX.sym("tube", len(safety), N) if tightened else None
    tube_u = ca.MX.sym("tube_u", nu, N) if len(u_soft) else None
    # the input rows' slacks: a bounded input's two rows share one
    u_slack_map = np.zeros((len(u_lo) + len(u_hi), ns))
    for r, i in enumerate((*u_lo, *u_hi)):
        u_slack_map[r, ns_obs + int(np.searchsorted(u_soft, i))] = 1.0
    # the safety rows (SafetyRows order) of each group of stage constraints
    hard_path = [(c, r) for c, r in zip(cons.path, safety.path, strict=True) if not c.soft]

    def tight(expr, k, rows, sign=-1.0):
        """``expr + sign * t_k[rows]``: lower rows move up by ``t``, upper rows down."""
        if tube is None or len(rows) == 0:
            return expr
        return ca.vec(expr) + sign * tube[rows.tolist(), k - 1]

    w, lbw, ubw, g, lbg, ubg = [], [], [], [], [], []
    idx_x, idx_u, idx_z, idx_s = [], [], [], []
    stage_rows = []
    implicit = TRANSCRIBERS[transcription].IMPLICIT
    count = 0

    def add(sym, lo, hi, store):
        nonlocal count
        w.append(sym)
        lbw.append(lo)
        ubw.append(hi)
        store.append(np.arange(count, count + sym.numel()))
        count += sym.numel()

    X = [ca.MX.sym(f"x{k}", nx) for k in range(N + 1)]
    U = [ca.MX.sym(f"u{k}", nu) for k in range(N)]
    Z = [ca.MX.sym(f"z{k}", nx) for k in range(N)]
    S = [ca.MX.sym(f"s{k}", ns) for k in range(N + 1)]
    residual = residual_function(model) if implicit else None
    residuals, J, inequality = [], 0, []
    # the stage whose block holds the terminal stage's path rows and slacks: implicit, stage
    # N-1 (its rows on the copy z_{N-1} = x_N by the linear gap), so that the terminal stage
    # is its states alone, as structured QP solvers (HPIPM) take it
    last = N - 1 if implicit else N
    for k in range(N + 1):
        add(X[k], np.full(nx, -np.inf), np.full(nx, np.inf), idx_x)
        if k < N:
            add(U[k], cons.u_min, cons.u_max, idx_u)
            if implicit:
                add(Z[k], np.full(nx, -np.inf), np.full(nx, np.inf), idx_z)
        if k < N:
            add(S[k], np.zeros(ns), np.full(ns, np.inf), idx_s)
        if k == last:
            add(S[N], np.zeros(ns), np.full(ns, np.inf), idx_s)

    def path_rows(obs, k, rows_g, rows_lb, rows_ub):
        """The path constraints of stage ``k >= 1`` on its observation ``obs``."""
        if hard_lo.size or hard_hi.size:
            rows_g.append(
                ca.vertcat(
                    tight(obs[hard_lo.tolist()], k, safety.lower_rows),
                    tight(obs[hard_hi.tolist()], k, safety.upper_rows, +1.0),
                )
            )
            rows_lb.append(np.concatenate([cons.obs_min[hard_lo], np.full(hard_hi.size, -np.inf)]))
            rows_ub.append(np.concatenate([np.full(hard_lo.size, np.inf), cons.obs_max[hard_hi]]))
        for c, rows in hard_path:
            rows_g.append(tight(c.function(obs), k, rows))
            rows_lb.append(np.zeros(c.function.numel_out(0)))
            rows_ub.append(np.full(c.function.numel_out(0), np.inf))
        if ns_obs:
            soft = [
                obs[soft_lo.tolist()] - cons.obs_min[soft_lo],
                cons.obs_max[soft_hi] - obs[soft_hi.tolist()],
            ]
            soft += [c.function(obs) for c in soft_path]
            rows_g.append(
                tight(ca.vertcat(*soft) + ca.mtimes(slack_map, S[k][:ns_obs]), k, safety.soft_rows)
            )
            rows_lb.append(np.zeros(len(slack_of_row)))
            rows_ub.append(np.full(len(slack_of_row), np.inf))

    for k in range(N + 1):
        obs = model.to_obs(X[k])
        rows_g, rows_lb, rows_ub = [], [], []
        if k < N:
            rows_g.append(X[k + 1] - (Z[k] if implicit else model.step(X[k], U[k], p)))
            rows_lb.append(np.zeros(nx))
            rows_ub.append(np.zeros(nx))
        if k == 0:
            rows_g.append(X[0] - x_init)
            rows_lb.append(np.zeros(nx))
            rows_ub.append(np.zeros(nx))
        if implicit and k < N:
            rows_g.append(residual(X[k], U[k], Z[k], p))
            rows_lb.append(np.zeros(nx))
            rows_ub.append(np.zeros(nx))
        if 0 < k < N:  # the initial state is given: no path constraints on it
            path_rows(obs, k, rows_g, rows_lb, rows_ub)
        if tube_u is not None and 0 < k < N:  # the feedback's share of the inputs, soft
            t = tube_u[:, k]
            rows_g.append(
                ca.vertcat(
                    U[k][u_lo.tolist()] - cons.u_min[u_lo] - t[u_lo.tolist()],
                    cons.u_max[u_hi] - U[k][u_hi.tolist()] - t[u_hi.tolist()],
                )
                + ca.mtimes(u_slack_map, S[k])
            )
            rows_lb.append(np.zeros(len(u_lo) + len(u_hi)))
            rows_ub.append(np.full(len(u_lo) + len(u_hi), np.inf))
        if k == last:
            path_rows(model.to_obs(Z[k]) if implicit else obs, N, rows_g, rows_lb, rows_ub)
        if ns:
            # exact L1 penalty plus a small quadratic that keeps the Hessian regular
            J += ca.dot(slack_weights, S[k])
            residuals.append(np.sqrt(SLACK_QUADRATIC) * S[k])
        energy = model.energy(X[k], p) if cost.energy is not None else None
        if k < N:
            residuals.append(
                cost.stage_residual(
                    obs, refs[:, k], U[k], u_prev if k == 0 else U[k - 1], energy=energy
                )
            )
        else:
            residuals.append(cost.terminal_residual(obs, refs[:, k], energy=energy))
        stage_rows.append(sum(len(lb) for lb in rows_lb) - (nx if k < N else 0))
        rows = zip(rows_g, rows_lb, rows_ub, strict=True)
        inequality.extend(r for r, lo, hi in rows if np.any(lo != hi))
        g.extend(rows_g)
        lbg.extend(rows_lb)
        ubg.extend(rows_ub)

    P = ca.vertcat(
        x_init,
        ca.vec(refs),
        u_prev,
        p,
        *([] if tube is None else [ca.vec(tube)]),
        *([] if tube_u is None else [ca.vec(tube_u)]),
    )
    W = ca.vertcat(*w)
    rho = ca.vertcat(*residuals)
    nlp = {"x": W, "p": P, "f": J + ca.sumsqr(rho), "g": ca.vertcat(*g)}
    # Gauss–Newton Hessian 2 J_rho^T J_rho: positive semidefinite and stage-structured,
    # it ignores the curvature of the constraints (acados' default for tracking costs)
    J_rho = ca.jacobian(rho, W)
    lam_f, lam_g = ca.MX.sym("lam_f"), ca.MX.sym("lam_g", nlp["g"].numel())
    gauss_newton = ca.Function(
        "gauss_newton",
        [W, P, lam_f, lam_g],
        [2 * lam_f * ca.mtimes(J_rho.T, J_rho)],
        ["x", "p", "lam_f", "lam_g"],
        ["hess_gamma_x_x"],
    )
    layout = Layout(
        x=np.array(idx_x),
        u=np.array(idx_u),
        z=np.array(idx_z) if implicit else np.zeros((N, 0), int),
        s=np.array(idx_s) if ns else np.zeros((N + 1, 0), int),
        n_w=count,
        stage_rows=tuple(stage_rows),
    )
    used = [model.residual if implicit else model.step, model.to_obs]
    if cost.energy is not None:
        used.append(model.energy)
    # the solvers differentiate them: a function whose own nodes expand can still have
    # derivatives that do not (a rootfinder's forward derivatives solve with a linear solver
    # that has no SX form), so its Jacobian must expand too
    expandable = not keeps_mx(model) and all(
        expanded_or_none(f) is not None for fn in used for f in (fn, fn.jacobian())
    )
    return Transcription(
        nlp=nlp,
        layout=layout,
        lbw=np.concatenate(lbw),
        ubw=np.concatenate(ubw),
        lbg=np.concatenate(lbg),
        ubg=np.concatenate(ubg),
        expandable=expandable,
        n_tube=(0 if tube is None else tube.numel()) + (0 if tube_u is None else tube_u.numel()),
        gauss_newton=gauss_newton.expand() if expandable else gauss_newton,
        soft_input_tube=tube_u is not None,
        inequality=ca.vertcat(*inequality) if inequality else None,
        slack_weights=slack_weights,
    )


class SlackCover:
    """The slacks a guess needs for every soft row of the NLP to hold at it: each slack the
    least value >= 0 (and at least its guess) at which each row it enters, ``lbg <= g <=
    ubg``, holds where the slack alone can make it hold. A guess whose slacks are 0 at a state
    outside the tightened soft bounds (a cold start beside a wide tube) is far from feasible
    in those rows; an interior-point solver then starts in its restoration phase, where
    fatrop 1.1.8's inertia correction can grow without end (a solve that never returns, seen
    on a cart-pole whose tube margins reached 4e5 m). Covered, the soft rows hold from the
    first iterate and the solve starts from a point the L1 penalty prices. The soft rows are
    among the transcription's ``inequality`` rows, cheap functions of the stage variables: no
    model call."""

    def __init__(self, tr: Transcription):
        self.slacks = np.asarray(tr.layout.s, dtype=int).reshape(-1)
        self._ineq = tr.lbg != tr.ubg
        w, p = tr.nlp["x"], tr.nlp["p"]
        rows = ca.Function("soft_rows", [w, p], [tr.inequality])
        self._g = expanded_or_none(rows) or rows
        # the slacks enter the rows linearly: their coefficients, once
        jac = ca.Function("soft_jacobian", [w, p], [ca.jacobian(tr.inequality, w)])
        zeros = (ca.DM.zeros(w.sparsity()), ca.DM.zeros(p.sparsity()))
        coef = np.asarray(ca.densify(jac(*zeros)).full())[:, self.slacks]
        self._rows, self._cols = np.nonzero(coef)
        self._coef = coef[self._rows, self._cols]

    def __call__(self, w0: np.ndarray, P, lbg, ubg) -> np.ndarray:
        """``w0`` with its slacks raised to cover the soft rows at ``P`` (parameters) and
        the row bounds ``lbg``, ``ubg`` (of all of ``g``); ``w0`` itself where no row needs
        more."""
        w = np.asarray(w0, dtype=np.float64).reshape(-1)
        s = w[self.slacks]
        base = w.copy()
        base[self.slacks] = 0.0
        g = np.asarray(self._g(base, P)).reshape(-1)[self._rows]
        lo, hi = (np.asarray(b, dtype=np.float64).reshape(-1)[self._ineq][self._rows]
                  for b in (lbg, ubg))  # fmt: skip
        c = self._coef
        with np.errstate(invalid="ignore"):  # an infinite bound needs nothing
            need = np.where(c > 0, (lo - g) / c, (hi - g) / c)
        cover = np.zeros_like(s)
        np.maximum.at(cover, self._cols, np.where(np.isfinite(need), need, 0.0))
        if np.all(cover <= s):
            return w
        base[self.slacks] = np.maximum(s, cover)
        return base
