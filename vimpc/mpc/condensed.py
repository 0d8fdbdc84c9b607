"""A Gauss–Newton SQP on the implicit transcription, condensed onto the inputs and slacks
(``solver = "condensed"``).

Each iteration evaluates, in one CasADi call, the model's residual and its Jacobian at
every stage (the model's closed-form ``residual_jacobian`` where it has one, else CasADi's
derivative of ``residual``), the holonomic constraints at every predicted state
and the least-squares cost's residuals with their Jacobians; it then eliminates the states
(``dx_{k+1} = A_k dx_k + B_k du_k + c_k`` with ``[A_k B_k c_k] = -J_z^-1 [J_x J_u r_k]``, the
implicit transcription's next-state copy being the next state) and forms the dense
Gauss–Newton QP in the ``nu N`` input steps. Without inequality rows it is solved with the
input bounds by a primal active-set method on the box. With them (observation bounds, path
constraints, the tube's tightening, the inputs' soft tightened rows: the transcription's
``inequality``, cheap functions of the stage variables, evaluated with their Jacobian in a
second call) the slacks join the inputs as variables, their exact L1 penalty and its small
quadratic (:data:`~vimpc.mpc.transcription.SLACK_QUADRATIC`) as in the NLP, and the rows are
condensed onto the same variables; the QP is solved by DAQP (a dual active-set method for
dense QPs). The step is taken in full. This is the same QP as CasADi's ``sqpmethod`` solves
on the implicit transcription with the Gauss–Newton Hessian (there with ``N (2 nx + nu)``
variables and the residual as equality rows), in a fraction of the time: on the four-bar
CLNN (18 states, 8 holonomic constraints, horizon 20) one HPIPM QP of ``sqpmethod`` took
~1.9 ms and its Jacobian ~1.3 ms, one condensed iteration here ~1.1 ms.

Converged when the last input and slack step is within ``tol`` (max norm), the residual of
the model's step equations within :data:`RESIDUAL_TOL` and the holonomic constraints within
:data:`CONSTRAINT_TOL` at every predicted state; once the step is small
(:data:`CHECK_STEP`) the test first evaluates the residual alone, without its Jacobian. A
time budget stops it before an iteration that would end past it (by the longest iteration
so far); an iteration budget (the controller's ``warm_max_iter``), after that many
iterations, the same on every computer.

Warm starts only: the previous plan shifted by one stage. The controller solves a cold
start (no plan) with its ``condensed_start`` solver, and a warm solve that does not
converge within ``max_iter`` iterations (or meets a non-finite value, a singular ``J_z``
or a QP that fails) too, from the same guess (with a tube, after a second try with the
last solved call's margins: ``MPC._condensed_step``); where that solver does not finish it
either, the call gives the fallback input and the next call is a cold start. With a time
or an iteration budget such a solve goes instead, in the rest of the budget, to
:meth:`CondensedSQP.descend`:
the same QP in single shooting (every iterate's states simulated by the model's step) with
Levenberg–Marquardt damping and a ratio test on a merit, so that no iterate is worse than
its start; its last iterate is the call's plan where the tightened rows hold without slack,
and otherwise the call gives the fallback input and the next call starts from the plan
shifted once more. The full steps of :meth:`CondensedSQP.solve` are not globalised: a line
search with an exact penalty (the step equations' multipliers recovered by a backward
recursion) and a filter's acceptance with one entry solved none of the CLNN cart-pole's
cold starts on its short rail (seeds 1000-1009: no decrease along the step, or the
iteration limit), and the same damping with a ratio test on the multiple-shooting iterates
(their states not simulated) stalled there: even the undamped limit, a Newton step of the
step equations alone, raised their residual.

Needs: the implicit transcription and no energy shaping.
"""

from __future__ import annotations

import time
from typing import Any

import casadi as ca
import numpy as np

from vimpc import _jit
from vimpc.dynamics import DiscreteModel
from vimpc.mpc.solvers import qp_options
from vimpc.mpc.transcription import SLACK_QUADRATIC, Transcription
from vimpc.mpc.tube import expanded_or_none, residual_jacobian

#: the residual of the model's step equations every predicted stage must reach
RESIDUAL_TOL = 1e-8
#: the holonomic constraints ``|constraint(x_k)|`` every predicted state must reach
CONSTRAINT_TOL = 1e-11
#: the largest state step (max norm) after which convergence is tested on the residual
#: alone: the residual then is quadratic in the step, ~1e-12 on the four-bar CLNN
CHECK_STEP = 1e-4
#: the status of a solve stopped by its time budget
BUDGET_STATUS = "time budget"
#: the status of a solve stopped by its iteration budget (the controller's warm_max_iter)
ITERATION_BUDGET_STATUS = "iteration budget"
#: the status of :meth:`CondensedSQP.descend`'s last accepted iterate, unconverged
DESCENT_STATUS = "the descent's last accepted iterate"
#: the descent's merit weighs the rows' violation by this many times the slacks' largest
#: weight (at least 1): above the NLP's own exact penalty, so the merit does not trade a
#: violation for a lower objective the NLP would not
MERIT_FACTOR = 10.0
#: a step is accepted where the merit falls by at least this fraction of the predicted fall
RATIO_ACCEPT = 1e-4
#: above this ratio the damping is relaxed (divided by DAMPING_DOWN, or dropped), below
#: RATIO_POOR raised (times DAMPING_UP, from DAMPING_START) as after a rejected step
RATIO_GOOD, RATIO_POOR = 0.75, 0.25
DAMPING_START, DAMPING_UP, DAMPING_DOWN = 1e-3, 4.0, 10.0
#: a predicted fall of the merit below this fraction of it is round-off: the step is
#: accepted where the merit does not rise by more (near a solution, with a tight ``tol``)
ROUNDOFF = 1e-12
#: the solver of the condensed QP with inequality rows (dense: a dual active-set method)
QP_SOLVER = "daqp"
#: the exit flags of a DAQP solve that failed in its setup (the Cholesky factor of the
#: Hessian): CasADi then leaves the last solve's flag, 1 (optimal), or 0 before any
DAQP_SETUP_FLAGS = (0, 1)
#: its primal feasibility tolerance (DAQP's default 1e-6 left rows of the double integrator
#: with a tube violated by 1.2e-5)
QP_PRIMAL_TOL = 1e-9


def qp_failure(stats: dict[str, Any]) -> str:
    """Why the condensed QP failed, from the DAQP solver's ``stats``."""
    flag = stats.get("return_status")
    if flag in DAQP_SETUP_FLAGS:
        return (
            "the condensed QP failed in DAQP's setup: its Hessian is not numerically positive "
            "definite"
        )
    return f"the condensed QP failed (DAQP exit flag {flag})"


class _Buffered:
    """A CasADi function evaluated on preallocated numpy buffers (dense inputs and
    outputs; a function with a sparse output is wrapped to densify it): numpy -> DM
    conversions cost ~1 ms for the Jacobian's 13,000 entries, ~0.8 ms for the condensed
    QP's. With ``compile``, run as C from the compile cache (:func:`vimpc._jit.compiled_now`;
    where that fails, interpreted)."""

    def __init__(self, fn: ca.Function, compile: bool = False) -> None:
        self.fn = fn
        if not all(fn.sparsity_out(i).is_dense() for i in range(fn.n_out())):
            ins = fn.mx_in()
            outs = [ca.densify(o) for o in fn.call(ins)]
            self.fn = ca.Function(fn.name(), ins, outs, fn.name_in(), fn.name_out())
        self._index = {name: i for i, name in enumerate(self.fn.name_in())}
        if compile:
            self.fn = _jit.compiled_now(self.fn, f"condensed SQP's {fn.name()}") or self.fn
        self._buffer, self._evaluate = self.fn.buffer()
        self.args = [np.zeros(self.fn.nnz_in(i)) for i in range(self.fn.n_in())]
        self.res = [np.zeros(self.fn.nnz_out(i)) for i in range(self.fn.n_out())]
        for i, a in enumerate(self.args):
            self._buffer.set_arg(i, memoryview(a))
        for i, r in enumerate(self.res):
            self._buffer.set_res(i, memoryview(r))

    def __call__(self, *args) -> list[np.ndarray]:
        for buf, value in zip(self.args, args, strict=True):
            buf[:] = np.ravel(value)  # column-major: an (N, n) array is the (n, N) matrix
        return self._outputs()

    def named(self, **values) -> list[np.ndarray]:
        """The outputs with the inputs named set (the others as last set; zero at first)."""
        for name, value in values.items():
            self.args[self._index[name]][:] = np.ravel(value)
        return self._outputs()

    def _outputs(self) -> list[np.ndarray]:
        self._evaluate()
        return [r.copy() for r in self.res]

    def stats(self) -> dict[str, Any]:
        """The function's statistics of the last evaluation."""
        return self._buffer.stats()


def box_qp(
    H: np.ndarray, g: np.ndarray, lb: np.ndarray, ub: np.ndarray, max_iter: int = 100
) -> tuple[np.ndarray, bool]:
    """``min 1/2 d^T H d + g^T d`` s.t. ``lb <= d <= ub`` (``H`` positive definite) by a
    primal active-set method: ``(d, converged)``."""
    n = g.size
    d = np.zeros(n)
    fixed = np.zeros(n, bool)
    at = np.zeros(n)
    for _ in range(max_iter):
        free = ~fixed
        d[fixed] = at[fixed]
        if free.any():
            rhs = -(g[free] + H[np.ix_(free, fixed)] @ d[fixed])
            d[free] = np.linalg.solve(H[np.ix_(free, free)], rhs)
        low, high = free & (d < lb), free & (d > ub)
        if low.any() or high.any():
            at[low], at[high] = lb[low], ub[high]
            fixed |= low | high
            continue
        grad = H @ d + g
        wrong = fixed & (((at == lb) & (grad < 0)) | ((at == ub) & (grad > 0)))
        if not wrong.any():
            return d, True
        fixed[np.flatnonzero(wrong)[np.argmax(np.abs(grad[wrong]))]] = False
    return np.clip(d, lb, ub), False


class CondensedSQP:
    """The condensed Gauss–Newton SQP of a transcription ``tr`` (implicit) of a model, horizon
    and resolved cost (see the module). :meth:`solve` from a guess; :meth:`stats` as CasADi's."""

    def __init__(
        self,
        model: DiscreteModel,
        horizon: int,
        cost: Any,
        tr: Transcription,
        *,
        max_iter: int,
        tol: float,
        compile: bool = False,
    ) -> None:
        m, N, L = model, horizon, tr.layout
        nx, nu = m.nx, m.nu
        self.nx, self.nu, self.N, self.ns = nx, nu, N, L.s.shape[1]
        self.layout = L
        self.max_iter, self.tol = max_iter, tol
        X, U = ca.MX.sym("X", nx, N + 1), ca.MX.sym("U", nu, N)
        u_prev, R = ca.MX.sym("u_prev", nu), ca.MX.sym("R", m.nobs, N + 1)
        P = ca.MX.sym("p", m.np)
        x, u, u1 = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("u_prev", nu)
        ref = ca.SX.sym("ref", m.nobs)
        obs = m.to_obs(x)
        rho = cost.stage_residual(obs, ref, u, u1)
        rho_N = cost.terminal_residual(obs, ref)
        self.n_rho = rho.numel()
        stage = ca.Function(
            "stage", [x, u, u1, ref],
            [rho, ca.jacobian(rho, x), ca.jacobian(rho, u), ca.jacobian(rho, u1)],
        ).map(N)  # fmt: skip
        terminal = ca.Function("terminal", [x, ref], [rho_N, ca.jacobian(rho_N, x)])
        U_prev = ca.horzcat(u_prev, U[:, :-1])
        r, J = residual_jacobian(m).map(N)(X[:, :-1], U, X[:, 1:], P)
        # the predicted states only: the measured one need not be on the constraints (a model
        # whose from_obs does not project a noisy observation onto them)
        constraint = m.constraint.map(N)(X[:, 1:]) if m.constraint is not None else ca.MX(1, N)
        rh, Rx, Ru, Rp = stage(X[:, :-1], U, U_prev, R[:, :N])
        rN, RxN = terminal(X[:, N], R[:, N])
        cost_value = ca.sumsqr(rh) + ca.sumsqr(rN)
        self._linearization = _Buffered(ca.Function(
            "condensed_linearization", [X, U, u_prev, R, P],
            [r, constraint, J, rh, Rx, Ru, Rp, rN, RxN, cost_value],
        ), compile)  # fmt: skip
        r_alone = m.residual.map(N)(X[:, :-1], U, X[:, 1:], P)
        self._check = _Buffered(ca.Function(
            "condensed_check", [X, U, u_prev, R, P], [r_alone, constraint, cost_value]
        ), compile)  # fmt: skip
        #: the variables of the condensed QP: the inputs and the slacks
        self._free = np.concatenate([L.u.ravel(), L.s.ravel()])
        # the equality rows hold to the tolerances at a solution: their values are their bounds
        self._lbg, self._ineq = tr.lbg, tr.lbg != tr.ubg
        # the slacks' exact L1 penalty and its regularising quadratic (the transcription's)
        self._slack_weights = np.tile(tr.slack_weights, N + 1) if self.ns else np.zeros(0)
        # the inequality rows, cheap functions of the stage variables (no model call)
        self._rows = None
        if tr.inequality is not None:
            W, Pn = tr.nlp["x"], tr.nlp["p"]
            rows = ca.Function(
                "condensed_rows", [W, Pn], [tr.inequality, ca.jacobian(tr.inequality, W)]
            )
            self._rows = _Buffered(expanded_or_none(rows) or rows, compile)
            self._lba, self._uba = tr.lbg[self._ineq], tr.ubg[self._ineq]
            n_i, n_f = int(self._ineq.sum()), self._free.size
            self._qp = _Buffered(ca.conic(
                "condensed_qp", QP_SOLVER,
                {"h": ca.Sparsity.dense(n_f, n_f), "a": ca.Sparsity.dense(n_i, n_f)},
                {**qp_options(QP_SOLVER), "daqp": {"primal_tol": QP_PRIMAL_TOL}},
            ))  # fmt: skip
        self._stats: dict[str, Any] = {}
        self._step_fn = m.step
        self._simulate: _Buffered | None = None  # built at the first descent
        #: the last iterate of the last :meth:`solve` that did not converge
        self.last_iterate: np.ndarray | None = None
        # the merit's weight of the rows' violation: above the slacks' own (exact) penalty
        self._penalty = MERIT_FACTOR * max(1.0, float(self._slack_weights.max(initial=0.0)))

    def _step(
        self, w, P, lbw, ubw, out, damping: float = 0.0, rows=None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The Gauss–Newton step ``(dX, dU, dS, predicted)`` from the guess ``w`` at the
        linearisation ``out`` (with the NLP's parameters ``P`` and variable bounds; ``rows``
        the inequality rows' values and Jacobian at ``w`` where already evaluated), the
        inputs' block of the Hessian plus ``damping`` times its mean diagonal
        (Levenberg–Marquardt); ``predicted``: the objective the linear model predicts after
        the step (the step equations and the rows then met)."""
        N, nx, nu, nr, L = self.N, self.nx, self.nu, self.n_rho, self.layout
        r, _, J, rho, Rx, Ru, Rp, rN, RxN, _ = out
        r = r.reshape(N, nx)
        J = J.reshape(N, 2 * nx + nu, nx).transpose(0, 2, 1)
        rhs = np.concatenate([J[:, :, : nx + nu], r[:, :, None]], axis=2)
        sol = -np.linalg.solve(J[:, :, nx + nu :], rhs)
        A = sol[:, :, :nx]
        # dX_k = S_k dU + s_k, with [S_k s_k] one array: [S_k+1 s_k+1] = A_k [S_k s_k] + [B_k c_k]
        # (B_k in the columns of du_k)
        Ss = np.zeros((N + 1, nx, N * nu + 1))
        for k in range(N):
            np.matmul(A[k], Ss[k], out=Ss[k + 1])
            Ss[k + 1, :, k * nu : (k + 1) * nu] += sol[k, :, nx : nx + nu]
            Ss[k + 1, :, -1] += sol[k, :, -1]
        S, s = Ss[:, :, :-1], Ss[:, :, -1]
        Rx = Rx.reshape(N, nx, nr).transpose(0, 2, 1)
        Ru = Ru.reshape(N, nu, nr).transpose(0, 2, 1)
        Rp = Rp.reshape(N, nu, nr).transpose(0, 2, 1)
        Gh = Rx @ Ss[:N]
        G = np.ascontiguousarray(Gh[:, :, :-1])
        blocks, k = G.reshape(N, nr, N, nu), np.arange(N)  # a view of G
        blocks[k, :, k, :] += Ru  # each stage's own input and the one before it (rate costs)
        blocks[k[1:], :, k[:-1], :] += Rp[1:]
        h = rho.reshape(N, nr) + Gh[:, :, -1]
        RxN = RxN.reshape(nx, -1).T
        G = np.concatenate([G.reshape(-1, N * nu), RxN @ S[N]])
        h = np.concatenate([h.reshape(-1), rN + RxN @ s[N]])
        free = self._free
        lbd, ubd = lbw[free] - w[free], ubw[free] - w[free]
        H_u = G.T @ G
        if damping:
            H_u[np.diag_indices_from(H_u)] += damping * np.mean(np.diag(H_u))
        if self._rows is None:
            d, converged = box_qp(H_u, G.T @ h, lbd, ubd)
            if not converged:
                raise np.linalg.LinAlgError("the box QP did not converge")
        else:
            d = self._row_qp(
                w, H_u, G.T @ h, Ss, lbd, ubd, rows if rows is not None else self._rows(w, P)
            )
        du, ds = d[: N * nu], d[N * nu :]
        dX = S @ du + s
        predicted = float(np.sum((G @ du + h) ** 2)) + self._slack_terms(w[L.s.ravel()] + ds)
        return dX, du.reshape(N, nu), ds.reshape(N + 1, self.ns), predicted

    def _row_qp(self, w, H_u, g_u, Ss, lbd, ubd, rows) -> np.ndarray:
        """The condensed QP with the inequality rows (``Ss``: each predicted state step
        ``[S_k s_k]`` by the input steps; ``rows``: the rows' values and Jacobian at ``w``):
        its solution, the input and slack steps."""
        L, n_u = self.layout, H_u.shape[0]
        ns_all = L.s.size
        g_rows, jac = rows
        jac = jac.reshape(-1, g_rows.size).T  # (rows, n_w)
        Jx = jac[:, L.x]  # (rows, N + 1, nx)
        Jz = jac[:, L.z]  # (rows, N, nx) (the next-state copies are the next states)
        rows = jac.shape[0]
        # the rows' dependence on every predicted state, through the inputs (one product)
        Ss = Ss.reshape(-1, n_u + 1)
        Aa = Jx.reshape(rows, -1) @ Ss
        if Jz.size:
            Aa += Jz.reshape(rows, -1) @ Ss[self.nx :]  # the next states x_1 ... x_N
        A_u, a0 = Aa[:, :n_u] + jac[:, L.u.ravel()], Aa[:, n_u]
        A = np.hstack([A_u, jac[:, L.s.ravel()]])
        H = np.zeros((n_u + ns_all, n_u + ns_all))
        H[:n_u, :n_u] = H_u
        H[n_u:, n_u:] = SLACK_QUADRATIC * np.eye(ns_all)
        g = np.concatenate([g_u, self._slack_weights / 2 + SLACK_QUADRATIC * w[L.s.ravel()]])
        shift = g_rows + a0
        # column-major: A's transpose
        x = self._qp.named(
            h=H, g=g, a=A.T, lba=self._lba - shift, uba=self._uba - shift, lbx=lbd, ubx=ubd
        )[0]
        stats = self._qp.stats()
        if not stats.get("success", False):
            raise np.linalg.LinAlgError(qp_failure(stats))
        return x

    def solve(
        self,
        w: np.ndarray,
        P: np.ndarray,
        lbw: np.ndarray,
        ubw: np.ndarray,
        refs: np.ndarray,
        u_prev: np.ndarray,
        p: np.ndarray,
        budget: float = np.inf,
        iterations: int | None = None,
    ) -> tuple[np.ndarray, float, np.ndarray] | None:
        """From the guess ``w`` (the NLP's variables: the previous plan shifted, the measured
        initial state in it), the NLP's parameters ``P`` and variable bounds, the references
        ``refs (N + 1, nobs)``, the input applied last ``u_prev`` and the model's parameters
        ``p``: ``(w, cost, the NLP's constraint values g)``, or None when it did not converge
        (:meth:`stats` says why). No iteration begins that would end past ``budget``
        seconds from the call, by the longest one so far (its status then
        :data:`BUDGET_STATUS`), nor after ``iterations`` steps (at most ``max_iter``; its
        status then :data:`ITERATION_BUDGET_STATUS`)."""
        start = time.perf_counter()
        L = self.layout
        w = self._assembled(np.array(w, dtype=np.float64).reshape(-1))
        P = np.asarray(P, dtype=np.float64).reshape(-1)
        lbw, ubw = np.asarray(lbw, np.float64).reshape(-1), np.asarray(ubw, np.float64).reshape(-1)
        args = (u_prev, refs, p)
        du = dx = np.inf
        limit = self.max_iter if iterations is None else min(self.max_iter, iterations)
        status = f"no convergence in {self.max_iter} iterations"
        evaluations, longest, begun = 0, 0.0, start
        for it in range(limit + 1):
            now = time.perf_counter()
            longest = max(longest, now - begun) if it else 0.0
            if it and now + longest > start + budget:  # the first iteration always runs
                status = BUDGET_STATUS
                break
            begun = now
            if du <= self.tol and dx <= CHECK_STEP:  # the residual alone is enough to stop
                r, phi, f = self._check(w[L.x], w[L.u], *args)
                evaluations += 1
                if self._converged(r, phi):
                    return self._done(w, P, f, it, start, evaluations)
            out = self._linearization(w[L.x], w[L.u], *args)
            evaluations += 1
            r, phi, f = out[0], out[1], out[-1]
            if not (np.all(np.isfinite(r)) and np.all(np.isfinite(phi))):
                status = "a non-finite residual"
                break
            if du <= self.tol and self._converged(r, phi):
                return self._done(w, P, f, it, start, evaluations)
            if it == limit:
                status = status if limit == self.max_iter else ITERATION_BUDGET_STATUS
                break
            try:
                dX, dU, dS, _ = self._step(w, P, lbw, ubw, out)
            except (np.linalg.LinAlgError, RuntimeError) as exc:
                status = f"a failed step ({str(exc).strip().splitlines()[-1]})"
                break
            if not (np.all(np.isfinite(dX)) and np.all(np.isfinite(dU))):
                status = "a non-finite step"
                break
            w[L.x] += dX
            w[L.u] += dU
            w[L.s] += dS
            w = self._assembled(w)
            du = max(np.abs(dU).max(initial=0.0), np.abs(dS).max(initial=0.0))
            dx = float(np.abs(dX).max())
        self._stats = {
            "success": False, "return_status": status, "iter_count": it,
            "evaluations": evaluations, "t_wall_total": time.perf_counter() - start,
        }  # fmt: skip
        self.last_iterate = w
        return None

    def descend(
        self,
        w: np.ndarray | list[np.ndarray],
        P: np.ndarray,
        lbw: np.ndarray,
        ubw: np.ndarray,
        refs: np.ndarray,
        u_prev: np.ndarray,
        p: np.ndarray,
        budget: float = np.inf,
        iterations: int | None = None,
    ) -> tuple[np.ndarray, float, np.ndarray] | None:
        """The same problem as :meth:`solve` (the same arguments) by single shooting: every
        iterate's states are the model's ``step`` from the measured state under its inputs,
        and each step is the condensed QP's with Levenberg–Marquardt damping, accepted where
        the merit (the objective plus the rows' violation times the slacks' largest weight
        times :data:`MERIT_FACTOR`) falls by at least :data:`RATIO_ACCEPT` of what the
        linear model predicts, and damped more and tried again from the same iterate where
        it does not (the damping relaxed after steps the model predicted well). So every
        iterate meets the model's step equations and none is worse than the last: where
        :meth:`solve`'s full steps diverge (the CLNN cart-pole's first swing-up steps), this
        still descends, if slowly (each iteration simulates the horizon). ``w`` may be a
        list of guesses (the last iterates of :meth:`solve`'s tries that did not finish,
        :attr:`last_iterate`, and the shifted plan): it starts
        from the one whose inputs simulate to the lowest merit, of those evaluated within
        ``budget`` (the first always). Returns ``(w, cost, g)``
        (:meth:`solve`'s) when converged, and otherwise, when stopped by ``budget``,
        ``iterations`` (at most ``max_iter``; the guesses' evaluations not counted) or
        ``max_iter``, the last accepted iterate (its ``stats()``: ``success`` false, the
        status :data:`DESCENT_STATUS`; in both, the merits of the start and of every
        accepted iterate in ``merits``); None where no guess's inputs simulate (a
        non-finite state). No iteration begins that would end past ``budget``, by the
        longest so far (the first by the longest evaluation of a guess): where none fits,
        the start is the iterate returned."""
        start = time.perf_counter()
        L = self.layout
        if self._simulate is None:  # interpreted: compiled, the CLNN cart-pole's 20 stages
            # took 2.4 ms against 2.1 ms (its step is a rootfinder)
            self._simulate = _Buffered(self._step_fn.mapaccum("simulate", self.N))
        P = np.asarray(P, dtype=np.float64).reshape(-1)
        lbw, ubw = np.asarray(lbw, np.float64).reshape(-1), np.asarray(ubw, np.float64).reshape(-1)
        args = (u_prev, refs, p)
        evaluated, longest = [], 0.0
        for guess in w if isinstance(w, list) else [w]:
            begun = time.perf_counter()
            if evaluated and begun + longest > start + budget:
                break
            guess = np.array(guess, dtype=np.float64).reshape(-1)
            simulated = self._simulated(guess, p) if np.all(np.isfinite(guess)) else None
            if simulated is not None:
                evaluated.append((simulated, *self._evaluated(simulated, P, args)))
                # an iteration: one such evaluation and a QP
                longest = max(longest, time.perf_counter() - begun)
        if not evaluated:
            self._stats = {
                "success": False, "return_status": "no guess's inputs simulate",
                "iter_count": 0, "t_wall_total": time.perf_counter() - start,
            }  # fmt: skip
            return None
        w, out, rows, merit = min(evaluated, key=lambda e: e[3])
        merits, damping, evaluations = [merit], 0.0, len(evaluated)
        begun, tried = start, 0
        limit = self.max_iter if iterations is None else min(self.max_iter, iterations)
        for it in range(limit):
            now = time.perf_counter()
            longest = max(longest, now - begun) if it else longest
            if now + longest > start + budget:
                break
            begun, tried = now, it + 1
            try:
                _, dU, dS, predicted = self._step(w, P, lbw, ubw, out, damping, rows)
                trial = w.copy()
                trial[L.u] += dU
                trial[L.s] += dS
                trial = self._simulated(trial, p)
            except (np.linalg.LinAlgError, RuntimeError):
                trial = None
            if trial is None:  # a failed QP or a trial that does not simulate: damped more
                damping = max(damping * DAMPING_UP, DAMPING_START)
                continue
            out_t, rows_t, merit_t = self._evaluated(trial, P, args)
            evaluations += 1
            decrease = merit - predicted
            ratio = (merit - merit_t) / decrease if decrease > 0 else -np.inf
            level = ROUNDOFF * max(1.0, abs(merit))
            if decrease <= level and merit_t <= merit + level:  # a change at round-off
                ratio = 1.0
            if not ratio >= RATIO_ACCEPT:
                damping = max(damping * DAMPING_UP, DAMPING_START)
                continue
            step = max(np.abs(dU).max(initial=0.0), np.abs(dS).max(initial=0.0))
            converged = not damping and step <= self.tol and self._converged(out_t[0], out_t[1])
            w, out, rows, merit = trial, out_t, rows_t, merit_t
            merits.append(merit)
            if converged:
                found = self._done(w, P, out[-1], tried, start, evaluations)
                self._stats["merits"] = merits
                return found
            if ratio > RATIO_GOOD:
                damping = damping / DAMPING_DOWN if damping > DAMPING_START else 0.0
            elif ratio < RATIO_POOR:
                damping = max(damping * DAMPING_UP, DAMPING_START)
        found = self._done(w, P, out[-1], tried, start, evaluations)
        self._stats.update(success=False, return_status=DESCENT_STATUS, merits=merits)
        return found

    def _simulated(self, w: np.ndarray, p: np.ndarray) -> np.ndarray | None:
        """``w`` with its states the model's step from its initial state under its inputs
        (and the next-state copies set), or None where a state is not finite."""
        L = self.layout
        X = self._simulate(w[L.x[0]], w[L.u], p)[0]  # (nx, N), column-major
        if not np.all(np.isfinite(X)):
            return None
        w[L.x[1:]] = X.reshape(self.N, self.nx)
        return self._assembled(w)

    def _evaluated(self, w, P, args) -> tuple[list[np.ndarray], Any, float]:
        """The linearisation at ``w``, the rows' values and Jacobian (or None), and the
        merit (see :meth:`descend`)."""
        L = self.layout
        out = self._linearization(w[L.x], w[L.u], *args)
        merit = float(out[-1][0]) + self._slack_terms(w[L.s.ravel()])
        rows = None
        if self._rows is not None:
            rows = self._rows(w, P)
            g = rows[0]
            violation = np.maximum(self._lba - g, 0).sum() + np.maximum(g - self._uba, 0).sum()
            merit += self._penalty * float(violation)
        return out, rows, merit

    def _assembled(self, w: np.ndarray) -> np.ndarray:
        """``w`` with its next-state copies set to the next states."""
        L = self.layout
        if L.z.size:
            w[L.z] = w[L.x[1:]]
        return w

    @staticmethod
    def _converged(r: np.ndarray, phi: np.ndarray) -> bool:
        return bool(np.abs(r).max() <= RESIDUAL_TOL and np.abs(phi).max() <= CONSTRAINT_TOL)

    def _done(self, w, P, f, it, start, evaluations):
        self._stats = {
            "success": True, "return_status": "Solve_Succeeded", "iter_count": it,
            "evaluations": evaluations, "t_wall_total": time.perf_counter() - start,
        }  # fmt: skip
        g = self._lbg.copy()
        if self._rows is not None:
            g[self._ineq] = self._rows(w, P)[0]
        return w, float(f[0]) + self._slack_terms(w[self.layout.s.ravel()]), g

    def _slack_terms(self, S: np.ndarray) -> float:
        """The slacks' terms of the objective: their exact L1 penalty and its quadratic."""
        return float(self._slack_weights @ S) + SLACK_QUADRATIC * float(S @ S)

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)


def condensing_refusal(transcription: str, cost: Any, hessian: str) -> str | None:
    """Why ``solver = "condensed"`` cannot solve this problem, or None."""
    if hessian != "gauss-newton":
        return f"it uses the Gauss–Newton Hessian (hessian='gauss-newton'), got {hessian!r}"
    if transcription != "implicit":
        return f"it needs transcription='implicit', got {transcription!r}"
    if cost.energy is not None:
        return "it does not take energy shaping"
    return None
