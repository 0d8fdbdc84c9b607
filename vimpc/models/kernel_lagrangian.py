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
:func:`vimpc.models.bea` recovers energies from it. Shadow integration
(:mod:`vimpc.models.lsi`) collocates the discrete Euler–Lagrange equations on position
triples; the Lagrangian GP baseline collocates the continuous ones on finite-difference
velocities and accelerations.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import casadi as ca
import numpy as np

from vimpc.errors import InputError


@dataclass(frozen=True)
class KernelBasis:
    """The kernels ``k_j(q, v) = scale exp(-|(phi(q, v) - centres_j) / length|^2)``.

    ``phi`` embeds the tangent space: every coordinate listed in ``angles`` enters as its
    sine and cosine (so the kernels are periodic in it), the others and the velocities as
    they are.

    Attributes:
        centres: ``(M, d)`` points in the embedded space (``d = 2 n`` plus one per angle).
        scale: the kernel's ``c``.
        length: ``e``: one length, or one per embedded entry ``(d,)``.
        nq: the number of coordinates ``n``.
        angles: indices of the coordinates embedded as sine and cosine.
    """

    centres: np.ndarray
    scale: float
    length: float | np.ndarray
    nq: int
    angles: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return self.centres.shape[0]

    def _inverse_lengths(self) -> np.ndarray:
        d = self.centres.shape[1]
        return 1.0 / np.broadcast_to(np.asarray(self.length, dtype=np.float64), (d,))

    def embed(self, X: np.ndarray) -> np.ndarray:
        """``phi`` of the rows ``(q, v)`` of ``X``, ``(N, d)``."""
        return embed(X, self.nq, self.angles)

    def features(self, X: np.ndarray) -> np.ndarray:
        """``k_j(X_i)``, ``(N, M)``, for rows ``(q, v)``."""
        inv = self._inverse_lengths()
        P, C = self.embed(X) * inv, self.centres * inv
        d2 = np.sum(P * P, axis=1)[:, None] + np.sum(C * C, axis=1)[None, :] - 2.0 * P @ C.T
        return self.scale * np.exp(-np.maximum(d2, 0.0))

    def gradients(self, X: np.ndarray) -> np.ndarray:
        """``d k_j(X_i) / d (q, v)``, ``(N, 2 n, M)``."""
        k = self.features(X)
        inv2 = (self._inverse_lengths() ** 2)[None, :, None]
        G = -2.0 * inv2 * (self.embed(X)[:, :, None] - self.centres.T[None]) * k[:, None, :]
        if not self.angles:
            return G
        out, col = [], 0  # the chain rule through (sin q_i, cos q_i)
        for i in range(self.nq):
            if i in self.angles:
                q = X[:, i][:, None]
                out.append(G[:, col] * np.cos(q) - G[:, col + 1] * np.sin(q))
                col += 2
            else:
                out.append(G[:, col])
                col += 1
        return np.concatenate([np.stack(out, axis=1), G[:, col:]], axis=1)

    def hessians(self, X: np.ndarray) -> np.ndarray:
        """``d^2 k_j(X_i) / d (q, v)^2``, ``(N, 2 n, 2 n, M)`` (without angles)."""
        if self.angles:
            raise InputError("kernel Hessians are offered without an angle embedding only")
        k = self.features(X)
        inv2 = self._inverse_lengths() ** 2
        w = inv2[None, :, None] * (X[:, :, None] - self.centres.T[None])
        outer = 4.0 * w[:, :, None, :] * w[:, None, :, :]
        return (outer - 2.0 * np.diag(inv2)[None, :, :, None]) * k[:, None, None, :]

    def casadi(self, q, v) -> ca.SX:
        """The ``M`` kernels at ``(q, v)`` as a CasADi column."""
        parts = []
        for i in range(self.nq):
            parts += [ca.sin(q[i]), ca.cos(q[i])] if i in self.angles else [q[i]]
        inv = self._inverse_lengths()
        z = ca.vertcat(*parts, v) * ca.DM(inv)
        d = ca.DM(self.centres * inv) - ca.repmat(z.T, self.size, 1)
        return self.scale * ca.exp(-ca.sum2(d * d))

    def nontriviality_row(self) -> np.ndarray:
        """The row of eq. 15: the mean over the corners of ``[0, 1]^(2n)`` (in ``(q, v)``)
        of ``sum_i dk/dv_i``."""
        n = self.nq
        corners = np.array(list(itertools.product((0.0, 1.0), repeat=2 * n)))
        return self.gradients(corners)[:, n:, :].sum(axis=1).mean(axis=0)

    def peak_slope(self) -> float:
        """An upper bound of a kernel's slope in ``(q, v)``: ``scale sqrt(2 / e) / e_min``."""
        return float(self.scale * np.sqrt(2.0 / np.e) * np.max(self._inverse_lengths()))


def embed(X: np.ndarray, nq: int, angles: tuple[int, ...] = ()) -> np.ndarray:
    """The rows ``(q, v)`` of ``X`` with every coordinate in ``angles`` as its sine and
    cosine, ``(N, d)``."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if not angles:
        return X
    parts = []
    for i in range(nq):
        parts += [np.sin(X[:, i]), np.cos(X[:, i])] if i in angles else [X[:, i]]
    return np.column_stack([*parts, X[:, nq:]])


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
) -> Collocation:
    """The kernel Lagrangian on ``basis`` whose weights solve ``rows alpha = rhs`` together
    with the non-triviality row (with ``volume``; None: omitted, the forcing in ``rhs``
    fixes the scale) and the normalisation ``L(0) = 0``, in the minimum-norm least-squares
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
        extra_rows.insert(0, basis.nontriviality_row())
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
