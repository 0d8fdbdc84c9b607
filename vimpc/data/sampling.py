"""Initial-condition sampling (uniform, Halton) and projection onto constraints.

Samples are drawn in a box ``low <= x <= high`` (units of the coordinates they
stand for: m, rad, m/s, rad/s). Constrained systems sample a box and then
project: positions onto the holonomic manifold ``g(q) = 0``, velocities onto the
null space of the constraint matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vimpc._checks import positive_int
from vimpc.errors import InputError, SolverError

__all__ = ["halton", "project_onto_constraints", "project_velocity", "uniform"]


def _generator(rng: Any) -> np.random.Generator:
    """A Generator from a Generator or an int seed; ``None`` is refused so data are reproducible."""
    if (
        rng is None
        or isinstance(rng, bool)
        or not isinstance(rng, (np.random.Generator, int, np.integer))
    ):
        raise InputError(
            f"rng must be a numpy.random.Generator or an int seed, got {rng!r}; pass a fixed "
            "seed so the data can be reproduced"
        )
    return np.random.default_rng(rng)


def _box(low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate box bounds: same length, finite, ``low <= high`` elementwise."""
    low = np.atleast_1d(np.asarray(low, dtype=np.float64))
    high = np.atleast_1d(np.asarray(high, dtype=np.float64))
    if low.ndim != 1 or high.ndim != 1 or low.shape != high.shape:
        raise InputError(
            f"low and high must be vectors of the same length, got shapes {low.shape} and "
            f"{high.shape}; give one bound per sampled coordinate"
        )
    for name, b in (("low", low), ("high", high)):
        if not np.all(np.isfinite(b)):
            raise InputError(f"{name} must be finite (no NaN or inf), got {b.tolist()}")
    bad = np.flatnonzero(low > high)
    if bad.size:
        i = int(bad[0])
        raise InputError(
            f"low must be <= high elementwise, but at index {i} low={float(low[i])!r} > "
            f"high={float(high[i])!r}; swap the bounds"
        )
    return low, high


def uniform(low: Any, high: Any, n: int, rng: np.random.Generator | int) -> np.ndarray:
    """Draw ``n`` points uniformly from the box ``[low, high]``.

    Parameters
    ----------
    low, high : array_like, shape (d,)
        Box bounds, in the units of the sampled coordinates; ``low <= high``.
    n : int
        Number of points (>= 1).
    rng : numpy.random.Generator or int
        Random generator, or a seed for a fresh one.

    Returns
    -------
    ndarray, shape (n, d), float64
    """
    low, high = _box(low, high)
    n = positive_int("n", n)
    rng = _generator(rng)
    return low + (high - low) * rng.random((n, low.size))


def halton(low: Any, high: Any, n: int, seed: int = 0, scramble: bool = True) -> np.ndarray:
    """Draw the first ``n`` points of a Halton sequence scaled to ``[low, high]``.

    Parameters
    ----------
    low, high : array_like, shape (d,)
        Box bounds, in the units of the sampled coordinates; ``low <= high``.
    n : int
        Number of points (>= 1).
    seed : int
        Seed of the scrambling; the output is a deterministic function of it.
        Ignored when ``scramble`` is False.
    scramble : bool
        If False, return the plain Halton sequence (bases 2, 3, 5, ...) without
        its first point 0, as in the LSI paper: base 2 gives 1/2, 1/4, 3/4, ...

    Returns
    -------
    ndarray, shape (n, d), float64
    """
    low, high = _box(low, high)
    n = positive_int("n", n)
    if scramble:
        _generator(seed)  # refuse None: the scrambling must be reproducible
    from scipy.stats import qmc  # scipy.stats takes a second to import; only Halton needs it

    engine = qmc.Halton(d=low.size, scramble=scramble, seed=seed)
    if not scramble:
        engine.fast_forward(1)  # the plain sequence starts at the corner 0
    unit = np.asarray(engine.random(n), dtype=np.float64)
    return low + (high - low) * unit


def _as_matrix(name: str, a: Any, n: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.shape[1] != n:
        raise InputError(f"{name} must have shape (m, {n}), got shape {a.shape}")
    return a


def project_onto_constraints(
    q: Any,
    constraint: Callable[[np.ndarray], Any],
    jacobian: Callable[[np.ndarray], Any],
    tol: float = 1e-12,
    max_iter: int = 50,
) -> np.ndarray:
    """Project ``q`` onto ``{q : g(q) = 0}`` by Gauss-Newton minimum-norm steps.

    Iterates ``q <- q - J^T (J J^T)^{-1} g(q)`` with ``J = dg/dq`` until
    ``max|g(q)| <= tol``.

    Parameters
    ----------
    q : array_like, shape (n,)
        Starting configuration (m, rad).
    constraint : callable
        ``g(q) -> (m,)`` holonomic constraint residual.
    jacobian : callable
        ``J(q) -> (m, n)`` its Jacobian.
    tol : float
        Tolerance on the max-norm of the residual.
    max_iter : int
        Maximum number of Gauss-Newton steps.

    Returns
    -------
    ndarray, shape (n,)

    Raises
    ------
    SolverError
        If the residual is still above ``tol`` after ``max_iter`` steps or
        ``J J^T`` is singular.
    """
    q = np.array(q, dtype=np.float64).reshape(-1)
    max_iter = positive_int("max_iter", max_iter)
    res = np.inf
    for _ in range(max_iter + 1):
        g = np.atleast_1d(np.asarray(constraint(q), dtype=np.float64)).reshape(-1)
        res = float(np.max(np.abs(g))) if g.size else 0.0
        if res <= tol:
            return q
        J = _as_matrix("jacobian(q)", jacobian(q), q.size)
        try:
            q = q - J.T @ np.linalg.solve(J @ J.T, g)
        except np.linalg.LinAlgError:
            raise SolverError(
                f"projection onto the constraints failed: J J^T is singular at q={q.tolist()} "
                f"(residual {res:.3e}); start from a configuration where the constraints are "
                "independent"
            ) from None
    raise SolverError(
        f"projection onto the constraints did not converge in {max_iter} steps: final residual "
        f"max|g(q)| = {res:.3e} > tol = {tol:.1e}; start closer to the constraint manifold or "
        "raise max_iter"
    )


def project_velocity(v: Any, jacobian_at_q: Any) -> np.ndarray:
    """Minimum-norm projection of ``v`` onto the null space of ``A``.

    Returns ``v - A^T (A A^T)^{-1} A v`` (computed as ``v - pinv(A) A v``, which
    also handles rank-deficient ``A``), so that ``A v = 0``. ``A`` is the
    holonomic Jacobian ``G(q)`` or the nonholonomic matrix ``a(q)``.

    Parameters
    ----------
    v : array_like, shape (n,)
        Generalized velocity (m/s, rad/s).
    jacobian_at_q : array_like, shape (m, n)
        Constraint matrix evaluated at the current configuration.

    Returns
    -------
    ndarray, shape (n,)
    """
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    A = _as_matrix("jacobian_at_q", jacobian_at_q, v.size)
    return v - np.linalg.lstsq(A, A @ v, rcond=None)[0]


def onto_constraints(system: Any, states: Any) -> np.ndarray:
    """Project sampled states ``(q, v)`` of ``system`` onto its constraints.

    Positions go onto ``g(q) = 0`` (:func:`project_onto_constraints`), then velocities onto
    the null space of the stacked holonomic Jacobian ``G(q)`` and nonholonomic ``A(q)``
    (:func:`project_velocity`); an unconstrained system's states come back unchanged.

    Parameters
    ----------
    system : vimpc.mechanics.MechanicalSystem
    states : array_like, shape (n, nq + nv)

    Returns
    -------
    ndarray, shape (n, nq + nv)
    """
    x = np.array(states, dtype=np.float64, ndmin=2)
    nq = system.nq
    if x.shape[1] != nq + system.nv:
        raise InputError(f"states must have {nq + system.nv} columns (q, v), got shape {x.shape}")
    if not (system.n_holonomic or system.n_nonholonomic):
        return x
    out = np.empty_like(x)
    for i, row in enumerate(x):
        q, v = row[:nq], row[nq:]
        rows = []
        if system.n_holonomic:
            q = project_onto_constraints(q, system.holonomic, system.holonomic_jacobian)
            rows.append(system.holonomic_jacobian(q))
        if system.n_nonholonomic:
            rows.append(system.nonholonomic(q))
        out[i] = np.concatenate([q, project_velocity(v, np.vstack(rows))])
    return out
