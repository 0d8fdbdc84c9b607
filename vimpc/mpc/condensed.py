"""A Gauss–Newton SQP on the implicit transcription, condensed onto the inputs and slacks
(``solver = "condensed"``).

It solves the controller's own NLP (:func:`~vimpc.mpc.transcription.transcribe`: the same
variables, rows, bounds and parameters, the tube's tightening included) with the
Gauss–Newton Hessian of ``sqpmethod``, to convergence, and eliminates the states from each
QP. One CasADi call per iteration evaluates the objective, its gradient, the rows, their
sparse Jacobian, the Gauss–Newton Hessian and the model's holonomic constraints at the
predicted states. The equality rows (the dynamics gaps, the initial state and the model's
step equations ``residual(x_k, u_k, z_k) = 0``) are solved for the steps of the states and
next-state copies by one sparse LU factorisation: ``dy = T dv + t`` in the steps ``dv`` of
the inputs and slacks. The QP in ``dv`` alone, dense (``nu N`` inputs and the slacks), with
the inequality rows (soft and hard observation bounds, path constraints, the inputs'
tightened rows) and the variables' bounds, is solved by daqp (dense; qpOASES, exact to
round-off on well-posed QPs, failed in its factorisation on the soft rail's degenerate
rows). The step is taken in full.

Converged when the last step of the inputs and slacks is within ``tol`` (max norm; at
least :data:`QP_ACCURACY`, daqp's accuracy on these QPs), the
equality rows hold to :data:`RESIDUAL_TOL`, the inequality rows to :data:`ROW_TOL` and the
model's holonomic constraints to :data:`CONSTRAINT_TOL` at every predicted state.

Warm starts only (its full steps have no globalisation: from rest, the cart-pole CLNN's
first steps left the model's step equations nearly singular): the controller's shifted plan
with the last state extrapolated linearly. The controller solves a cold start, and any
call that does not converge within ``max_iter`` iterations (or meets a non-finite value, a singular linearisation of the step
equations, or a QP daqp does not solve), with CasADi's ``sqpmethod`` instead.

Needs the implicit transcription (its next-state copies make the step equations a square
system in the states) and the Gauss–Newton Hessian.
"""

from __future__ import annotations

import time
from typing import Any

import casadi as ca
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from vimpc.errors import InputError

#: the equality rows (the model's step equations, gaps, initial state) every solve reaches
RESIDUAL_TOL = 1e-8
#: the violation of an inequality row a converged solve may keep
ROW_TOL = 1e-8
#: the holonomic constraints ``|constraint(x_k)|`` every predicted state must reach
CONSTRAINT_TOL = 1e-11
#: a step of the inputs and slacks within this counts as converged whatever ``tol``: daqp's
#: steps on the ill-conditioned condensed QPs scatter at ~1e-7 about the optimum
QP_ACCURACY = 1e-6


class _Sparse:
    """A sparsity pattern and the index maps of its row/column blocks, so that a block of a
    matrix given by its nonzeros is built without slicing."""

    def __init__(self, sp: ca.Sparsity) -> None:
        self.shape = (sp.size1(), sp.size2())
        self.indptr = np.asarray(sp.colind(), dtype=np.int64)
        self.indices = np.asarray(sp.row(), dtype=np.int64)

    def matrix(self, nz: np.ndarray) -> scipy.sparse.csc_matrix:
        return scipy.sparse.csc_matrix((nz, self.indices, self.indptr), shape=self.shape)

    def block(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, Any]:
        """Which nonzeros make the block ``[rows, cols]``, and its empty csc matrix."""
        tagged = self.matrix(np.arange(1, len(self.indices) + 1, dtype=np.float64))
        sub = tagged[rows][:, cols].tocsc()
        sub.sort_indices()
        return sub.data.astype(np.int64) - 1, sub


class CondensedSQP:
    """The condensed Gauss–Newton SQP of a transcription (see the module): called as a
    CasADi ``nlpsol`` is, ``solve(x0=..., p=..., lbx=..., ubx=..., lbg=..., ubg=...)``, it
    returns the solution's ``x, f, g`` (multipliers zero) or None when it did not converge
    (:meth:`stats` says why)."""

    def __init__(self, tr: Any, model: Any, *, max_iter: int, tol: float) -> None:
        nlp, L = tr.nlp, tr.layout
        self.max_iter, self.tol, self.layout = max_iter, tol, L
        w, p = nlp["x"], nlp["p"]
        g = nlp["g"]
        self.eq = np.flatnonzero(tr.lbg == tr.ubg)
        self.ineq = np.flatnonzero(tr.lbg != tr.ubg)
        self.y = np.sort(np.concatenate([L.x.ravel(), L.z.ravel()]))  # eliminated
        self.v = np.sort(np.concatenate([L.u.ravel(), L.s.ravel()]))  # kept
        if self.eq.size != self.y.size or np.isfinite(np.r_[tr.lbw[self.y], tr.ubw[self.y]]).any():
            raise InputError(
                "solver='condensed' cannot solve this problem: it eliminates the states by "
                f"the equality rows, which must be as many as the states ({self.y.size}, got "
                f"{self.eq.size}), and takes no bounds on the states"
            )
        lam_g = ca.MX.zeros(g.numel())
        H = tr.gauss_newton(w, p, 1.0, lam_g)
        J = ca.jacobian(g, w)
        X = ca.reshape(w[L.x[1:].ravel().tolist()], model.nx, L.x.shape[0] - 1)
        phi = (
            ca.vec(model.constraint.map(X.shape[1])(X))
            if model.constraint is not None
            else ca.MX(0, 1)
        )
        outs = [nlp["f"], ca.gradient(nlp["f"], w), g, J, H, phi]
        fn = ca.Function("condensed_linearization", [w, p], outs)
        if tr.expandable:
            fn = fn.expand()
        self._fn = fn
        self._buffer, self._evaluate = fn.buffer()
        self._args = [np.zeros(fn.nnz_in(i)) for i in range(fn.n_in())]
        self._res = [np.zeros(fn.nnz_out(i)) for i in range(fn.n_out())]
        for i, a in enumerate(self._args):
            self._buffer.set_arg(i, memoryview(a))
        for i, r in enumerate(self._res):
            self._buffer.set_res(i, memoryview(r))
        self._J, self._H = _Sparse(fn.sparsity_out(3)), _Sparse(fn.sparsity_out(4))
        self._grad_sp = fn.sparsity_out(1)
        self._Ey, self._Ey_sp = self._J.block(self.eq, self.y)
        self._Ev, self._Ev_sp = self._J.block(self.eq, self.v)
        self._I, self._I_sp = self._J.block(self.ineq, np.arange(self._J.shape[1]))
        n_v, n_i = self.v.size, self.ineq.size
        self._qp = ca.conic(
            "condensed_qp", "daqp",
            {"h": ca.Sparsity.dense(n_v, n_v), "a": ca.Sparsity.dense(n_i, n_v)},
            {"error_on_fail": False},
        )  # fmt: skip
        self._stats: dict[str, Any] = {}

    def _linearize(self, w: np.ndarray, p: np.ndarray) -> list[np.ndarray]:
        self._args[0][:] = w
        self._args[1][:] = p
        self._evaluate()
        f, grad, g, J, H, phi = (r.copy() for r in self._res)
        full = np.zeros(self._grad_sp.size1())  # the gradient's structural zeros
        full[np.asarray(self._grad_sp.row(), dtype=np.int64)] = grad
        return [f, full, g, J, H, phi]

    def _step(self, w, lin, lbx, ubx, lbg, ubg) -> np.ndarray:
        """The full Gauss–Newton step ``dw`` of the condensed QP at ``w``."""
        _, grad, g, J, Hnz, _ = lin
        y, v = self.y, self.v
        Ey = self._Ey_sp.copy()
        Ey.data = J[self._Ey]
        Ev = self._Ev_sp.copy()
        Ev.data = J[self._Ev]
        lu = scipy.sparse.linalg.splu(Ey)
        c = g[self.eq] - lbg[self.eq]
        rhs = np.column_stack([c, Ev.toarray()])
        sol = -lu.solve(rhs)
        Z = np.zeros((w.size, v.size))  # dw = Z dv + z
        Z[y] = sol[:, 1:]
        Z[v, np.arange(v.size)] = 1.0
        z = np.zeros(w.size)
        z[y] = sol[:, 0]
        H = self._H.matrix(Hnz)
        HZ = H @ Z
        h = Z.T @ HZ
        q = Z.T @ (grad + H @ z)
        A = self._I_sp.copy()
        A.data = J[self._I]
        AZ = A @ Z
        Az = A @ z
        gi = g[self.ineq]
        out = self._qp(
            h=0.5 * (h + h.T), g=q, a=AZ,
            lba=lbg[self.ineq] - gi - Az, uba=ubg[self.ineq] - gi - Az,
            lbx=lbx[v] - w[v], ubx=ubx[v] - w[v],
        )  # fmt: skip
        if not self._qp.stats().get("success", False):
            raise np.linalg.LinAlgError(
                f"the condensed QP failed ({self._qp.stats().get('return_status')})"
            )
        dv = np.asarray(out["x"]).ravel()
        return Z @ dv + z

    def _warm(self, w: np.ndarray) -> np.ndarray:
        """The shifted plan with its last state extrapolated linearly (the shift repeats
        it), the next-state copy of the last stage with it."""
        L = self.layout
        w = w.copy()
        if L.x.shape[0] > 2:
            last = 2 * w[L.x[-2]] - w[L.x[-3]]
            w[L.x[-1]] = last
            w[L.z[-1]] = last
        return w

    def solve(self, x0, p, lbx, ubx, lbg, ubg, **_) -> dict | None:
        start = time.perf_counter()
        dense = (np.asarray(a, dtype=np.float64).ravel() for a in (x0, p, lbx, ubx, lbg, ubg))
        w, p, lbx, ubx, lbg, ubg = dense
        w = self._warm(w)
        status = f"no convergence in {self.max_iter} iterations"
        step = np.inf
        for it in range(self.max_iter + 1):
            lin = self._linearize(w, p)
            f, _, g, _, _, phi = lin
            if not (np.all(np.isfinite(g)) and np.all(np.isfinite(lin[3]))):
                status = "a non-finite row or Jacobian"
                break
            if step <= max(self.tol, QP_ACCURACY) and self._converged(g, phi, lbg, ubg):
                self._stats = {
                    "success": True, "return_status": "Solve_Succeeded", "iter_count": it,
                    "t_wall_total": time.perf_counter() - start,
                }  # fmt: skip
                return {"x": w, "f": float(f[0]), "g": g, "lam_g": np.zeros(g.size),
                        "lam_x": np.zeros(w.size)}  # fmt: skip
            if it == self.max_iter:
                break
            try:
                dw = self._step(w, lin, lbx, ubx, lbg, ubg)
            except (np.linalg.LinAlgError, RuntimeError) as exc:
                status = f"a failed step ({exc})"
                break
            if not np.all(np.isfinite(dw)):
                status = "a non-finite step"
                break
            w = w + dw
            step = float(np.abs(dw[self.v]).max(initial=0.0))
        self._stats = {
            "success": False, "return_status": status, "iter_count": it,
            "t_wall_total": time.perf_counter() - start,
        }  # fmt: skip
        return None

    def _converged(self, g, phi, lbg, ubg) -> bool:
        eq = np.abs(g[self.eq] - lbg[self.eq]).max(initial=0.0)
        gi = g[self.ineq]
        over = np.maximum(lbg[self.ineq] - gi, gi - ubg[self.ineq]).max(initial=0.0)
        return bool(
            eq <= RESIDUAL_TOL
            and over <= ROW_TOL
            and np.abs(phi).max(initial=0.0) <= CONSTRAINT_TOL
        )

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)


def condensing_refusal(transcription: str, hessian: str) -> str | None:
    """Why ``solver = "condensed"`` cannot solve this problem, or None."""
    if hessian != "gauss-newton":
        return f"it uses the Gauss–Newton Hessian (hessian='gauss-newton'), got {hessian!r}"
    if transcription != "implicit":
        return f"it needs transcription='implicit', got {transcription!r}"
    return None
