"""A Gauss–Newton SQP on the implicit transcription, condensed onto the inputs
(``solver = "condensed"``).

Each iteration evaluates, in one CasADi call, the model's residual and its Jacobian at
every stage (the model's closed-form ``residual_jacobian`` where it has one, else CasADi's
derivative of ``residual``), the holonomic constraints at every predicted state
and the least-squares cost's residuals with their Jacobians; it then eliminates the states
(``dx_{k+1} = A_k dx_k + B_k du_k + c_k`` with ``[A_k B_k c_k] = -J_z^-1 [J_x J_u r_k]``, the
implicit transcription's next-state copy being the next state), forms the dense Gauss–Newton
QP in the ``nu N`` input steps and solves it with the input bounds (a primal active-set
method on the box). The step is taken in full. This is the same QP as CasADi's
``sqpmethod`` solves on the implicit transcription with the Gauss–Newton Hessian (there
with ``N (2 nx + nu)`` variables and the residual as equality rows), in a fraction of the
time: on the four-bar CLNN (18 states, 8 holonomic constraints, horizon 20) one HPIPM QP of
``sqpmethod`` took ~1.9 ms and its Jacobian ~1.3 ms, one condensed iteration here ~1.1 ms.

Converged when the last input step is within ``tol`` (max norm), the residual of the
model's step equations within :data:`RESIDUAL_TOL` and the holonomic constraints within
:data:`CONSTRAINT_TOL` at every predicted state; once the step is small
(:data:`CHECK_STEP`) the test first evaluates the residual alone, without its Jacobian.

Warm starts only: the previous plan shifted by one stage, the last state extrapolated
linearly. The controller solves a cold start, and any solve that does not converge within
``max_iter`` iterations (or meets a non-finite value, a singular ``J_z`` or a box QP that
does not converge), with CasADi's ``sqpmethod`` instead.

Needs: the implicit transcription and input bounds only: no observation bounds or path
constraints (their slacks and rows would make the condensed QP a general one), no tube
tightening, no energy shaping (and, as checked with the other options, no time budget).
"""

from __future__ import annotations

import time
from typing import Any

import casadi as ca
import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.mpc.tube import residual_jacobian

#: the residual of the model's step equations every predicted stage must reach
RESIDUAL_TOL = 1e-8
#: the holonomic constraints ``|constraint(x_k)|`` every predicted state must reach
CONSTRAINT_TOL = 1e-11
#: the largest state step (max norm) after which convergence is tested on the residual
#: alone: the residual then is quadratic in the step, ~1e-12 on the four-bar CLNN
CHECK_STEP = 1e-4


class _Buffered:
    """A CasADi function evaluated on preallocated numpy buffers (dense inputs and
    outputs): numpy -> DM conversions cost ~1 ms for the Jacobian's 13,000 entries."""

    def __init__(self, fn: ca.Function) -> None:
        ins = fn.mx_in()
        self.fn = ca.Function(fn.name(), ins, [ca.densify(o) for o in fn.call(ins)])
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
        self._evaluate()
        return [r.copy() for r in self.res]


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
    """The condensed Gauss–Newton SQP of a model, horizon, resolved cost and input bounds
    (see the module). :meth:`solve` from a previous plan; :meth:`stats` as CasADi's."""

    def __init__(
        self,
        model: DiscreteModel,
        horizon: int,
        cost: Any,
        u_min: np.ndarray,
        u_max: np.ndarray,
        *,
        max_iter: int,
        tol: float,
    ) -> None:
        m, N = model, horizon
        nx, nu = m.nx, m.nu
        self.nx, self.nu, self.N = nx, nu, N
        self.max_iter, self.tol = max_iter, tol
        self.lb, self.ub = np.tile(u_min, N), np.tile(u_max, N)
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
        ))  # fmt: skip
        r_alone = m.residual.map(N)(X[:, :-1], U, X[:, 1:], P)
        self._check = _Buffered(ca.Function(
            "condensed_check", [X, U, u_prev, R, P], [r_alone, constraint, cost_value]
        ))  # fmt: skip
        self._stats: dict[str, Any] = {}

    def _step(self, U: np.ndarray, out: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The full Gauss–Newton step ``(dX, dU)`` at the linearisation ``out``."""
        N, nx, nu, nr = self.N, self.nx, self.nu, self.n_rho
        r, _, J, rho, Rx, Ru, Rp, rN, RxN, _ = out
        r = r.reshape(N, nx)
        J = J.reshape(N, 2 * nx + nu, nx).transpose(0, 2, 1)
        rhs = np.concatenate([J[:, :, : nx + nu], r[:, :, None]], axis=2)
        sol = -np.linalg.solve(J[:, :, nx + nu :], rhs)
        A, B, c = sol[:, :, :nx], sol[:, :, nx : nx + nu], sol[:, :, -1]
        # dX_k = S_k dU + s_k
        S, s = np.zeros((N + 1, nx, N * nu)), np.zeros((N + 1, nx))
        for k in range(N):
            S[k + 1] = A[k] @ S[k]
            S[k + 1][:, k * nu : (k + 1) * nu] += B[k]
            s[k + 1] = A[k] @ s[k] + c[k]
        Rx = Rx.reshape(N, nx, nr).transpose(0, 2, 1)
        Ru = Ru.reshape(N, nu, nr).transpose(0, 2, 1)
        Rp = Rp.reshape(N, nu, nr).transpose(0, 2, 1)
        G = Rx @ S[:N]
        for k in range(N):
            G[k][:, k * nu : (k + 1) * nu] += Ru[k]
            if k > 0:
                G[k][:, (k - 1) * nu : k * nu] += Rp[k]
        h = rho.reshape(N, nr) + np.einsum("kij,kj->ki", Rx, s[:N])
        RxN = RxN.reshape(nx, -1).T
        G = np.concatenate([G.reshape(-1, N * nu), RxN @ S[N]])
        h = np.concatenate([h.reshape(-1), rN + RxN @ s[N]])
        Uf = U.reshape(-1)
        d, converged = box_qp(G.T @ G, G.T @ h, self.lb - Uf, self.ub - Uf)
        if not converged:
            raise np.linalg.LinAlgError("the box QP did not converge")
        return np.einsum("kij,j->ki", S, d) + s, d.reshape(N, nu)

    def solve(
        self,
        X_prev: np.ndarray,
        U_prev: np.ndarray,
        x0: np.ndarray,
        refs: np.ndarray,
        u_prev: np.ndarray,
        p: np.ndarray,
        shift: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, float] | None:
        """From the previous plan ``(X_prev (N + 1, nx), U_prev (N, nu))`` shifted by one
        stage (as it is with ``shift = False``: a plan made for this call), the initial
        state ``x0``, the references ``refs (N + 1, nobs)``, the input applied last
        ``u_prev`` and parameters ``p``: ``(X, U, cost)``, or None when it did not converge
        (:meth:`stats` says why)."""
        start = time.perf_counter()
        if shift:
            X = np.vstack([X_prev[1:], 2 * X_prev[-1:] - X_prev[-2:-1]])
            U = np.vstack([U_prev[1:], U_prev[-1:]])
        else:
            X, U = np.array(X_prev, dtype=np.float64), np.array(U_prev, dtype=np.float64)
        X[0] = x0
        args = (u_prev, refs, p)
        du = dx = np.inf
        status = f"no convergence in {self.max_iter} iterations"
        evaluations = 0
        for it in range(self.max_iter + 1):
            small = du <= self.tol and dx <= CHECK_STEP
            if small:  # the residual alone is enough to stop
                r, phi, f = self._check(X, U, *args)
                evaluations += 1
                if self._converged(r, phi):
                    return self._done(X, U, f, it, start, evaluations)
            out = self._linearization(X, U, *args)
            evaluations += 1
            r, phi, f = out[0], out[1], out[-1]
            if not (np.all(np.isfinite(r)) and np.all(np.isfinite(phi))):
                status = "a non-finite residual"
                break
            if du <= self.tol and self._converged(r, phi):
                return self._done(X, U, f, it, start, evaluations)
            if it == self.max_iter:
                break
            try:
                dX, dU = self._step(U, out)
            except np.linalg.LinAlgError as exc:
                status = f"a failed step ({exc})"
                break
            if not (np.all(np.isfinite(dX)) and np.all(np.isfinite(dU))):
                status = "a non-finite step"
                break
            X, U = X + dX, U + dU
            du, dx = float(np.abs(dU).max()), float(np.abs(dX).max())
        self._stats = {
            "success": False, "return_status": status, "iter_count": it,
            "evaluations": evaluations, "t_wall_total": time.perf_counter() - start,
        }  # fmt: skip
        return None

    @staticmethod
    def _converged(r: np.ndarray, phi: np.ndarray) -> bool:
        return bool(np.abs(r).max() <= RESIDUAL_TOL and np.abs(phi).max() <= CONSTRAINT_TOL)

    def _done(self, X, U, f, it, start, evaluations):
        self._stats = {
            "success": True, "return_status": "Solve_Succeeded", "iter_count": it,
            "evaluations": evaluations, "t_wall_total": time.perf_counter() - start,
        }  # fmt: skip
        return X, U, float(f[0])

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)


def condensing_refusal(transcription: str, n_safety: int, cost: Any, hessian: str) -> str | None:
    """Why ``solver = "condensed"`` cannot solve this problem, or None (``n_safety``: the
    safety rows of observation bounds and path constraints, which bring the slacks and the
    tube's tightening with them)."""
    if hessian != "gauss-newton":
        return f"it uses the Gauss–Newton Hessian (hessian='gauss-newton'), got {hessian!r}"
    if transcription != "implicit":
        return f"it needs transcription='implicit', got {transcription!r}"
    if n_safety:
        return "it takes input bounds only (no observation bounds, path constraints or tube)"
    if cost.energy is not None:
        return "it does not take energy shaping"
    return None
