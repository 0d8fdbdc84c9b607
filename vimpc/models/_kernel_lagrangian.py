"""Lagrangians as kernel expansions, learned by collocation of their equations of motion.

``L(q, v) = sum_j alpha_j c exp(-|(phi(q, v) - Z_j) / e|^2)``: squared-exponential kernels
of scale ``c`` and lengths ``e`` centred at points ``Z_j`` of the tangent space, embedded by
``phi`` (angles as their sine and cosine, :class:`KernelBasis`). The equations of motion
of such a Lagrangian are linear in ``alpha``, so learning one from data is a linear
least-squares problem: each datum gives rows of kernel derivatives, and two more
rows remove the freedom every Lagrangian has (Ober-Blöbaum & Offen, sec. 2.4-2.5):

- non-triviality (eq. 15): the mean over the corners of the unit hypercube of
  ``sum_i dL/dv_i`` equals ``volume``, which fixes the scale (a constant Lagrangian fits any
  data) where no known force in the data fixes it;
- normalisation: ``L(0) = 0``, which fixes the additive constant.

The system is solved for its minimum-norm least-squares solution (no inverse of the
kernel matrix is formed): it is rank-deficient by nature, since a smooth kernel's
features are numerically dependent and total derivatives ``d/dt xi(q)`` do not change the
motion. :class:`Collocation` reports the rank.

:class:`KernelLagrangian` evaluates the result in numpy and as CasADi expressions;
:mod:`vimpc.models._bea` recovers energies from it, and :class:`LagrangianDynamics` runs
its variational integrator from ``(q0, qdot0)`` with momenta and energies of its modified
Lagrangians. Shadow integration (:mod:`vimpc.models.families.lsi`) collocates the discrete
Euler–Lagrange equations on position triples; the Lagrangian GP baseline of its paper
(``tests/experiments/_lsi_baselines.py``) collocates the continuous ones on
finite-difference velocities and accelerations.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import casadi as ca
import numpy as np

from vimpc.errors import FitWarning, InputError
from vimpc.integrators import _newton, discrete_lagrangian
from vimpc.models import _bea as bea
from vimpc.models._features import sincos, sincos_gradient

#: the largest temporary a kernel evaluation makes at once [bytes]: the points are taken
#: in chunks below it (the values are the same), so that the derivatives of N points on M
#: kernels take memory for their result, not for several N x d x M intermediates
CHUNK_BYTES = 2**27
#: the share of the machine's physical memory a collocation system may take: the dense
#: system, the copy the least-squares solver overwrites and its result
DENSE_SHARE = 0.5


def in_chunks(X: np.ndarray, width: int, evaluate: Callable[[np.ndarray], np.ndarray]):
    """``evaluate(X)``, by chunks of rows whose largest temporary (``width`` floats a
    row) stays within :data:`CHUNK_BYTES`; rows are independent, so the result is the
    same."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    chunk = max(1, CHUNK_BYTES // (8 * max(width, 1)))
    if len(X) <= chunk:
        return evaluate(X)
    return np.concatenate([evaluate(X[i : i + chunk]) for i in range(0, len(X), chunk)])


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.0f} MiB"


def check_dense_size(what: str, n_rows: int, n_columns: int, advice: str) -> None:
    """Refuse a dense least-squares system of ``n_rows x n_columns`` whose solve (the
    system, the copy the solver overwrites and the rows kept for the residual: three
    times its size) would take more than :data:`DENSE_SHARE` of the physical memory,
    before it is built, instead of a process the operating system kills later.

    Raises:
        InputError: naming the size, the memory and ``advice`` (what makes it smaller).
    """
    memory = physical_memory()
    need = 3 * 8 * n_rows * n_columns
    if memory is not None and need > DENSE_SHARE * memory:
        raise InputError(
            f"{what}: the collocation system would have {n_rows} equations in {n_columns} "
            f"kernel weights, whose least-squares solve takes about {_size(need)}, more "
            f"than {DENSE_SHARE:.0%} of this machine's {_size(memory)} of memory; {advice}"
        )


@dataclass(frozen=True)
class KernelBasis:
    """The kernels ``k_j(q, v) = scale exp(-|(phi(q, v) - centres_j) / length|^2)``.

    ``phi`` embeds the tangent space: every coordinate listed in ``angles`` enters as its
    sine and cosine (so the kernels are periodic in it), the others and the velocities as
    they are. A ``reversible`` basis holds ``k_j(q, v) + k_j(q, -v)`` instead: every
    Lagrangian in its span is even in the velocities (time-reversible motion, as without
    gyroscopic or magnetic forces), so no total derivative ``xi'(q) v`` is in it.

    Attributes:
        centres: ``(M, d)`` points in the embedded space (``d = 2 n`` plus one per angle).
        scale: the kernel's ``c``.
        length: ``e``: one length, or one per embedded entry ``(d,)``.
        nq: the number of coordinates ``n``.
        angles: indices of the coordinates embedded as sine and cosine.
        reversible: each kernel summed with its mirror image in the velocities.
    """

    centres: np.ndarray
    scale: float
    length: float | np.ndarray
    nq: int
    angles: tuple[int, ...] = ()
    reversible: bool = False

    @property
    def size(self) -> int:
        return self.centres.shape[0]

    def _inverse_lengths(self) -> np.ndarray:
        d = self.centres.shape[1]
        return 1.0 / np.broadcast_to(np.asarray(self.length, dtype=np.float64), (d,))

    def _signs(self) -> tuple[float, ...]:
        """The velocities' signs the kernels are summed over."""
        return (1.0, -1.0) if self.reversible else (1.0,)

    def _mirrored(self, X: np.ndarray, sign: float) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        return X if sign > 0 else np.concatenate([X[:, : self.nq], -X[:, self.nq :]], axis=1)

    def embed(self, X: np.ndarray) -> np.ndarray:
        """``phi`` of the rows ``(q, v)`` of ``X``, ``(N, d)``."""
        return embed(X, self.nq, self.angles)

    def _features(self, X: np.ndarray) -> np.ndarray:
        inv = self._inverse_lengths()
        P, C = self.embed(X) * inv, self.centres * inv
        d2 = np.sum(P * P, axis=1)[:, None] + np.sum(C * C, axis=1)[None, :] - 2.0 * P @ C.T
        return self.scale * np.exp(-np.maximum(d2, 0.0))

    def features(self, X: np.ndarray) -> np.ndarray:
        """``k_j(X_i)``, ``(N, M)``, for rows ``(q, v)``."""
        return in_chunks(X, 3 * self.size, self._features_all)

    def _features_all(self, X: np.ndarray) -> np.ndarray:
        return sum(self._features(self._mirrored(X, s)) for s in self._signs())

    def _gradients(self, X: np.ndarray) -> np.ndarray:
        k = self._features(X)
        inv2 = (self._inverse_lengths() ** 2)[None, :, None]
        G = -2.0 * inv2 * (self.embed(X)[:, :, None] - self.centres.T[None]) * k[:, None, :]
        return sincos_gradient(G, X[:, : self.nq], self.angles)

    def _flip(self, sign: float) -> np.ndarray:
        """``d (q, s v) / d (q, v)``'s diagonal."""
        return np.concatenate([np.ones(self.nq), np.full(self.nq, sign)])

    def gradients(self, X: np.ndarray) -> np.ndarray:
        """``d k_j(X_i) / d (q, v)``, ``(N, 2 n, M)``."""
        width = 3 * self.centres.shape[1] * self.size
        return in_chunks(X, width, self._gradients_all)

    def _gradients_all(self, X: np.ndarray) -> np.ndarray:
        return sum(
            self._flip(s)[None, :, None] * self._gradients(self._mirrored(X, s))
            for s in self._signs()
        )

    def hessians(self, X: np.ndarray) -> np.ndarray:
        """``d^2 k_j(X_i) / d (q, v)^2``, ``(N, 2 n, 2 n, M)`` (without angles)."""
        if self.angles:
            raise InputError("kernel Hessians are offered without an angle embedding only")
        width = 3 * self.centres.shape[1] ** 2 * self.size
        return in_chunks(X, width, self._hessians_all)

    def _hessians_all(self, X: np.ndarray) -> np.ndarray:
        inv2 = self._inverse_lengths() ** 2
        out = 0.0
        for s in self._signs():
            Xs = self._mirrored(X, s)
            w = inv2[None, :, None] * (Xs[:, :, None] - self.centres.T[None])
            outer = 4.0 * w[:, :, None, :] * w[:, None, :, :]
            H = (outer - 2.0 * np.diag(inv2)[None, :, :, None]) * self._features(Xs)[:, None, None]
            f = self._flip(s)
            out = out + f[None, :, None, None] * f[None, None, :, None] * H
        return out

    def casadi(self, q, v) -> ca.SX:
        """The ``M`` kernels at ``(q, v)`` as a CasADi column."""
        embedded = sincos(q, self.angles)
        inv = self._inverse_lengths()
        C = ca.DM(self.centres * inv)
        total = 0
        for s in self._signs():
            z = ca.vertcat(embedded, s * v) * ca.DM(inv)
            d = C - ca.repmat(z.T, self.size, 1)
            total += self.scale * ca.exp(-ca.sum2(d * d))
        return total

    def nontriviality_row(self, kind: str = "momentum") -> np.ndarray:
        """The non-triviality row: the mean over the corners of ``[0, 1]^(2n)`` (in
        ``(q, v)``) of ``sum_i dk/dv_i`` (``"momentum"``, eq. 15), or of ``sum_i
        d^2k/dv_i^2`` (``"mass"``: a total derivative ``xi'(q) v`` has no mass, so it
        cannot carry the scale)."""
        n = self.nq
        corners = np.array(list(itertools.product((0.0, 1.0), repeat=2 * n)))
        if kind == "momentum":
            return self.gradients(corners)[:, n:, :].sum(axis=1).mean(axis=0)
        # the velocities are the embedding's last n entries, never embedded themselves;
        # d^2/dv^2 of k(q, -v) is d^2k/dv^2 at (q, -v)
        inv2 = (self._inverse_lengths() ** 2)[-n:]
        row = 0.0
        for s in self._signs():
            C = self._mirrored(corners, s)
            w = inv2[None, :, None] * (C[:, n:, None] - self.centres[:, -n:].T[None])
            d2 = (4.0 * w * w - 2.0 * inv2[None, :, None]) * self._features(C)[:, None, :]
            row = row + d2.sum(axis=1).mean(axis=0)
        return row

    def peak_slope(self) -> float:
        """An upper bound of a kernel's slope in ``(q, v)``: ``scale sqrt(2 / e) / e_min``
        (twice that for a reversible pair)."""
        one = self.scale * np.sqrt(2.0 / np.e) * np.max(self._inverse_lengths())
        return float(len(self._signs()) * one)


def embed(X: np.ndarray, nq: int, angles: tuple[int, ...] = ()) -> np.ndarray:
    """The rows ``(q, v)`` of ``X`` with every coordinate in ``angles`` as its sine and
    cosine, ``(N, d)``."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if not angles:
        return X
    return np.column_stack([sincos(X[:, :nq], angles), X[:, nq:]])


@dataclass(frozen=True)
class KernelLagrangian:
    """``L(q, v) = sum_j alpha_j k_j(q, v)`` on a :class:`KernelBasis`."""

    basis: KernelBasis
    alpha: np.ndarray

    @property
    def nq(self) -> int:
        return self.basis.nq

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """``L`` at the rows ``(q, v)`` of ``X``, ``(N,)``."""
        return self.basis.features(np.atleast_2d(X)) @ self.alpha

    def casadi(self, q, v) -> ca.SX:
        """``L(q, v)`` as a CasADi expression of column vectors ``q``, ``v``."""
        return ca.dot(ca.DM(self.alpha), self.basis.casadi(q, v))

    def slope_roundoff(self) -> float:
        """The round-off of a first derivative of ``L``: ``eps`` times the sum of the
        terms' largest slopes (the minimum-norm weights of a smooth kernel are large and
        cancel, so this sits far above ``eps``)."""
        return float(np.finfo(float).eps * np.sum(np.abs(self.alpha)) * self.basis.peak_slope())


@dataclass(frozen=True)
class Collocation:
    """The minimum-norm least-squares solution of a collocation system and what it says.

    Attributes:
        lagrangian: the fitted :class:`KernelLagrangian`.
        rank: the numerical rank of the system (numpy's default cut-off,
            ``eps * max(shape)`` times the largest singular value).
        n_equations, n_centres: its size.
        data_rank: the rank of the data rows alone (without non-triviality and
            normalisation) where it is at most ``2 n``, else a lower bound above ``2 n``.
        residual: the RMS of the data rows' residual at the solution.
        condition_residual: the residual of the non-triviality row (0 without it); far
            from 0, the data admit only a trivial Lagrangian in the kernel's span.
    """

    lagrangian: KernelLagrangian
    rank: int
    n_equations: int
    n_centres: int
    data_rank: int
    residual: float
    condition_residual: float

    def describe(self) -> str:
        return (
            f"{self.n_equations} equations in {self.n_centres} kernel weights, rank "
            f"{self.rank}; minimum-norm least-squares "
            f"solution, data residual RMS {self.residual:.2e}"
        )


def solve(
    rows: np.ndarray,
    rhs: np.ndarray,
    basis: KernelBasis,
    volume: float | None,
    what: str,
    rcond: float | None = None,
    nontriviality: str = "momentum",
) -> Collocation:
    """The kernel Lagrangian on ``basis`` whose weights solve ``rows alpha = rhs`` together
    with the non-triviality row of kind ``nontriviality`` (with ``volume``; None: omitted,
    the forcing in ``rhs`` fixes the scale) and the normalisation ``L(0) = 0``, in the minimum-norm least-squares
    sense: singular values below ``rcond`` times the largest are dropped (None: numpy's
    round-off cut-off, ``eps`` times the larger size), which regularises a fit to noisy
    data.

    Raises:
        InputError: data rows of rank 0 (the data say nothing about the motion: at rest,
            or every datum the same).
    """
    extra_rows = [basis.features(np.zeros((1, 2 * basis.nq)))[0]]
    extra_rhs = [0.0]
    if volume is not None:
        extra_rows.insert(0, basis.nontriviality_row(nontriviality))
        extra_rhs.insert(0, volume)
    A = np.vstack([rows, *extra_rows])
    b = np.concatenate([rhs, extra_rhs])
    alpha, _, rank, sv = np.linalg.lstsq(A, b, rcond=rcond)
    # rank(A) <= rank(rows) + len(extra_rows): the data rows' own rank is computed (one more
    # SVD) only when it may be small
    data_rank = int(rank) - len(extra_rows)
    if data_rank <= 2 * basis.nq:
        relative = np.finfo(float).eps * max(A.shape) if rcond is None else rcond
        cutoff = relative * (sv[0] if sv.size else 0.0)
        data_sv = np.linalg.svd(rows, compute_uv=False) if rows.size else np.zeros(0)
        data_rank = int(np.sum(data_sv > max(cutoff, np.finfo(float).tiny)))
    if data_rank == 0:
        raise InputError(
            f"{what}: the data rows have rank 0 ({rows.shape[0]} equations in "
            f"{rows.shape[1]} kernel weights): the data carry no information about the "
            "motion (every snapshot the same, or at rest where every kernel's slope vanishes)"
        )
    residual = float(np.sqrt(np.mean((rows @ alpha - rhs) ** 2)))
    # the additive constant (normalisation) never matters to the motion; the scale does
    condition = abs(float(extra_rows[0] @ alpha) - volume) if volume is not None else 0.0
    return Collocation(
        KernelLagrangian(basis, alpha),
        int(rank),
        A.shape[0],
        A.shape[1],
        data_rank,
        residual,
        condition,
    )


#: relative regularity (bea.degenerate) below which the BEA formula is flagged
_DEGENERATE = 1e-6
#: Newton's residual tests, in units of the Lagrangian's slope round-off
#: (KernelLagrangian.slope_roundoff, a pessimistic estimate: converged iterates wander
#: at about a tenth of it); looser tests stop one iterate early, with an error of one sign
#: that adds up over thousands of steps
NEWTON_LEVEL = 0.1


# -- a learned Lagrangian in motion ----------------------------------------------------------
class LagrangianDynamics:
    """The variational integrator (``rule``, step ``h``) of a kernel Lagrangian, with momenta
    and energies of its modified Lagrangians (:mod:`vimpc.models._bea`).

    Args:
        lagrangian: the Lagrangian of the discrete equations.
        rule: ``"midpoint"`` or ``"trapezoidal"``.
        h: the step.
        momentum_order: the BEA order of the Lagrangian whose ``dL/dv`` maps velocities to
            momenta (2 for an inverse modified Lagrangian, 0 for a Lagrangian meant as the
            true one).
        points: rows ``(q, v)`` of the data, where the Lagrangian's regularity is taken as
            the reference of :func:`vimpc.models._bea.degenerate`.
    """

    def __init__(
        self,
        lagrangian: KernelLagrangian,
        rule: str,
        h: float,
        momentum_order: int,
        points: np.ndarray,
    ):
        self.kernel = lagrangian
        self.rule, self.h, self.momentum_order = rule, float(h), momentum_order
        self.nq = lagrangian.nq
        self._functions = {
            order: bea.functions(lagrangian.casadi, self.nq, rule, self.h, order)
            for order in bea.ORDERS
        }
        n = self.nq
        self.regularity_on_data = self._evaluate(0, "regularity", points[:, :n], points[:, n:])
        self.reference_regularity = float(np.median(self.regularity_on_data))
        self._steps: dict[str, Callable] = {}
        self._gradients: dict[int, ca.Function] = {}
        #: the Newton residual test of the discrete equations (divided by h)
        self.del_tolerance = max(
            _newton.ABSTOL, NEWTON_LEVEL * lagrangian.slope_roundoff() * (1.0 + 2.0 / self.h)
        )

    # -- functions of (q, qdot) --------------------------------------------------------------
    def _evaluate(self, order: int, output: str, q, qdot) -> np.ndarray:
        fn = self._gradient_function(order) if output == "grad" else self._functions[order]
        q, qdot = np.asarray(q, dtype=np.float64), np.asarray(qdot, dtype=np.float64)
        shape = np.broadcast_shapes(q.shape, qdot.shape)
        n = self.nq
        if n == 1:
            lead = shape
        else:
            if shape[-1:] != (n,):
                raise InputError(
                    f"q and qdot must end in a dimension of {n} (the coordinates), got shapes "
                    f"{q.shape} and {qdot.shape}"
                )
            lead = shape[:-1]
        Q = np.broadcast_to(q, shape).reshape(-1, n)
        V = np.broadcast_to(qdot, shape).reshape(-1, n)
        out = fn.map(len(Q)).call([Q.T, V.T])[fn.index_out(output)]
        out = np.asarray(out, dtype=np.float64)
        if output == "p":
            return out.T.reshape(*lead, n) if n > 1 else out.reshape(lead)
        if output == "grad":
            return out.T.reshape(*lead, 2 * n)
        return out.reshape(lead)

    def _gradient_function(self, order: int) -> ca.Function:
        """``(q, v) -> dH^[[order]]/d(q, v)`` by automatic differentiation, built once."""
        if order not in self._gradients:
            n = self.nq
            q, v = ca.SX.sym("q", n), ca.SX.sym("v", n)
            Lk = bea.modified(self.kernel.casadi, n, self.rule, self.h, order)(q, v)
            grad = ca.gradient(bea.energy(Lk, v), ca.vertcat(q, v))
            self._gradients[order] = ca.Function(
                f"dH_{order}", [q, v], [grad], ["q", "v"], ["grad"]
            )
        return self._gradients[order]

    def _checked(self, order: int, output: str, q, qdot) -> np.ndarray:
        values = self._evaluate(order, output, q, qdot)
        if order:
            regularity = self._evaluate(0, "regularity", q, qdot)
            bad = bea.degenerate(regularity, self.reference_regularity, _DEGENERATE)
            if np.any(bad):
                warnings.warn(
                    f"the learned Lagrangian is degenerate (its d^2L/dv^2 nearly singular, "
                    f"below {_DEGENERATE:g} of its median on the data) at {int(bad.sum())} "
                    f"of {bad.size} points: the order-{order} correction divides by it there "
                    "and is not meaningful (points far from the data?)",
                    FitWarning,
                    stacklevel=3,
                )
        return values

    def lagrangian(self, q, qdot, order: int = 2) -> np.ndarray:
        """``L^[[order]](q, qdot)``, vectorised over leading dimensions."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "L", q, qdot)

    def hamiltonian(self, q, qdot, order: int = 2) -> np.ndarray:
        """``H^[[order]](q, qdot) = qdot . dL^[[order]]/dqdot - L^[[order]]``."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "H", q, qdot)

    def hamiltonian_gradient(self, q, qdot, order: int = 2) -> np.ndarray:
        """``dH^[[order]]/d(q, qdot)`` by automatic differentiation (finite differences of
        the kernel sums lose digits to cancellation), ``(..., 2 n)``: the ``q`` entries,
        then the ``qdot`` ones."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "grad", q, qdot)

    def momentum(self, q, qdot, order: int | None = None) -> np.ndarray:
        """``dL^[[order]]/dqdot`` (default order: ``momentum_order``)."""
        order = self.momentum_order if order is None else order
        bea.check(self.rule, order, self.h)
        return self._checked(order, "p", q, qdot)

    # -- trajectories ------------------------------------------------------------------------
    def _discrete(self):
        n, h = self.nq, self.h
        qa, qb = ca.SX.sym("qa", n), ca.SX.sym("qb", n)
        Ld = discrete_lagrangian(self.rule, self.kernel.casadi, qa, qb, h)
        D1 = ca.Function("D1", [qa, qb], [ca.gradient(Ld, qa)])
        D2 = ca.Function("D2", [qa, qb], [ca.gradient(Ld, qb)])
        return D1, D2

    def _step_functions(self):
        """``first(q0, p0) -> q1``, ``step((q_{k-1}, q_k)) -> (q_k, q_{k+1})``, the DEL residual
        and the velocity solve, built once."""
        if self._steps:
            return self._steps
        n = self.nq
        D1, D2 = self._discrete()
        z, q0, q1, p = (ca.SX.sym(k, n) for k in ("z", "q0", "q1", "p"))
        scale = ca.sqrt(1.0 + ca.sumsqr(q1))
        tol = self.del_tolerance
        first = _newton.solve(
            "lsi_first", ca.Function("r0", [z, q1, p], [(p + D1(q1, scale * z)) / self.h]),
            False, tol,
        )  # fmt: skip
        q_first = scale * first(q1 / scale, q1, p)
        self._steps["first"] = ca.Function(
            "first", [q1, p], [q_first, ca.norm_inf(p + D1(q1, q_first)) / self.h]
        )
        pair = ca.SX.sym("pair", 2 * n)
        qm, qk = pair[:n], pair[n:]
        sk = ca.sqrt(1.0 + ca.sumsqr(qk))
        r = ca.Function("r", [z, pair], [(D2(qm, qk) + D1(qk, sk * z)) / self.h])
        root = _newton.solve("lsi_del", r, False, tol)
        q_next = sk * root((2 * qk - qm) / sk, pair)
        self._steps["step"] = ca.Function("step", [pair], [ca.vertcat(qk, q_next)])
        q2 = ca.SX.sym("q2", n)
        self._steps["residual"] = ca.Function(
            "del", [q0, q1, q2], [ca.norm_inf(D2(q0, q1) + D1(q1, q2)) / self.h]
        )
        # velocity from p = dL^[[m]]/dv (q, v)
        v = ca.SX.sym("v", n)
        Lm = bea.modified(self.kernel.casadi, n, self.rule, self.h, self.momentum_order)
        rv = ca.Function("rv", [v, q1, p], [(ca.gradient(Lm(q1, v), v) - p) / self.h])
        solve_v = _newton.solve("lsi_velocity", rv, False, tol)
        solved = solve_v(v, q1, p)
        self._steps["velocity"] = ca.Function(
            "velocity", [q1, p, v], [solved, ca.norm_inf(rv(solved, q1, p))]
        )
        self._steps["momentum_right"] = D2
        return self._steps

    def positions(
        self,
        q0,
        qdot0,
        steps: int,
        *,
        until: Callable[[np.ndarray], np.ndarray] | None = None,
        chunk: int = 2000,
        tolerance: float | None = None,
    ) -> np.ndarray:
        """The snapshots ``q_0 ... q_steps`` from ``(q0, qdot0)``, ``(steps + 1, n)``.

        ``p0 = dL^[[m]]/dv (q0, qdot0)`` (``m = momentum_order``), ``q1`` from ``p0 + D1
        L_d(q0, q1) = 0``, then the discrete Euler–Lagrange equations. The run stops early
        (and returns what it has) at the first snapshot where ``until(q)`` (on an array of
        snapshots, returning booleans) is true, or where Newton leaves a discrete
        equation's residual (divided by ``h``) above ``tolerance`` (default: 100 times
        Newton's own test, :attr:`del_tolerance`), the first step's included (then only
        ``q0`` is returned).
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InputError(f"steps must be a positive int, got {steps!r}")
        fn = self._step_functions()
        tolerance = 100.0 * self.del_tolerance if tolerance is None else tolerance
        n = self.nq
        q0 = np.asarray(q0, dtype=np.float64).reshape(n)
        qdot0 = np.asarray(qdot0, dtype=np.float64).reshape(n)
        p0 = self.momentum(q0[None] if n > 1 else q0, qdot0[None] if n > 1 else qdot0)
        q1, res1 = fn["first"](q0, np.reshape(p0, n))
        q1 = np.asarray(q1, dtype=np.float64).reshape(n)
        if not (float(res1) <= tolerance and np.all(np.isfinite(q1))):
            return q0[None]  # the first step's Newton solve failed: its guess is no snapshot
        out = [q0[None], q1[None]]
        done = 1
        state = np.concatenate([q0, q1])
        rollout = fn["step"].mapaccum("lsi_rollout", min(chunk, steps))
        stopped = bool(until is not None and np.any(until(np.vstack(out))))
        while done < steps and not stopped:
            k = min(chunk, steps - done)
            roll = rollout if k == min(chunk, steps) else fn["step"].mapaccum("lsi_tail", k)
            Z = np.asarray(roll(state), dtype=np.float64)
            new = Z[n:].T  # (k, n): q_{done+1} ... q_{done+k}
            prev = np.vstack([state.reshape(2, n), new])
            res = np.asarray(fn["residual"].map(k)(prev[:-2].T, prev[1:-1].T, prev[2:].T)).reshape(
                -1
            )
            bad = ~(np.isfinite(res) & (res <= tolerance)) | ~np.all(np.isfinite(new), axis=1)
            if until is not None:
                bad = bad | np.asarray(until(new), dtype=bool)
            if np.any(bad):
                cut = int(np.argmax(bad))
                out.append(new[: cut + 1])
                stopped = True
            else:
                out.append(new)
                state = Z[:, -1]
            done += k
        return np.vstack(out)

    def velocities(self, positions: np.ndarray, qdot0=None) -> np.ndarray:
        """The velocities at the snapshots ``positions`` ``(K + 1, n)``: at ``k >= 1`` the
        solution of ``dL^[[m]]/dv (q_k, v) = D2 L_d(q_{k-1}, q_k)``; at ``k = 0`` ``qdot0``
        (NaN if not given). Where Newton leaves that equation's residual (divided by ``h``)
        above 100 times :attr:`del_tolerance` (the momentum map does not invert there), or
        ends where ``d^2L/dv^2`` is degenerate (every kernel vanished), the velocity is NaN.
        Returns ``(K + 1, n)``."""
        fn = self._step_functions()
        Q = np.asarray(positions, dtype=np.float64).reshape(len(positions), self.nq)
        K = len(Q) - 1
        P = np.asarray(fn["momentum_right"].map(K)(Q[:-1].T, Q[1:].T), dtype=np.float64)
        guess = np.gradient(Q, self.h, axis=0)[1:].T
        V, res = fn["velocity"].map(K)(Q[1:].T, P, guess)
        V = np.asarray(V, dtype=np.float64).T
        res = np.asarray(res, dtype=np.float64).reshape(K)
        with np.errstate(all="ignore"):  # a diverged solve's v is inf or NaN
            regularity = self._evaluate(0, "regularity", Q[1:], V).reshape(K)
        # a root where every kernel has vanished (|v| -> inf) is no velocity
        failed = ~(res <= 100.0 * self.del_tolerance) | bea.degenerate(
            regularity, self.reference_regularity, _DEGENERATE
        )
        V[failed] = np.nan
        first = np.full((1, self.nq), np.nan) if qdot0 is None else np.reshape(qdot0, (1, self.nq))
        return np.vstack([first, V])


def check_regularity(dynamics: LagrangianDynamics, what: str) -> None:
    """Refuse a Lagrangian degenerate on its data; warn where it is degenerate at some data
    points (the BEA formula divides by its ``d^2L/dv^2``)."""
    if not dynamics.reference_regularity > 0:
        raise InputError(
            f"{what}: the learned Lagrangian is degenerate on the data (its d^2L/dv^2 is "
            "singular at most data points): backward error analysis would divide by zero"
        )
    r = dynamics.regularity_on_data
    bad = bea.degenerate(r, dynamics.reference_regularity, _DEGENERATE)
    if np.any(bad):
        warnings.warn(
            f"{what}: the learned Lagrangian is degenerate at {int(bad.sum())} of {bad.size} "
            f"data points (d^2L/dv^2 below {_DEGENERATE:g} of its median): the BEA "
            "correction is not meaningful there",
            FitWarning,
            stacklevel=4,
        )
