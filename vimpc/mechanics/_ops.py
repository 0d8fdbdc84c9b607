"""One set of maths for numpy (float64) and CasADi symbols.

Mechanics is written once against these functions; each picks numpy or CasADi
from the type of its arguments, so the same Lagrangian runs on numbers and on
symbols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import casadi as ca
import numpy as np

_SYM = (ca.SX, ca.MX, ca.DM)


def symbolic(*xs: Any) -> bool:
    """True when any argument is a CasADi object."""
    return any(isinstance(x, _SYM) for x in xs)


def sin(x):
    return ca.sin(x) if symbolic(x) else np.sin(x)


def cos(x):
    return ca.cos(x) if symbolic(x) else np.cos(x)


def sqrt(x):
    return ca.sqrt(x) if symbolic(x) else np.sqrt(x)


def vector(items: Sequence[Any]):
    """Stack scalars into a column (CasADi) or a 1-D array (numpy)."""
    if symbolic(*items):
        return ca.vertcat(*items)
    return np.array([float(np.asarray(i).reshape(())) for i in items], dtype=np.float64)


def concat(parts: Sequence[Any]):
    """Concatenate vectors."""
    if symbolic(*parts):
        return ca.vertcat(*parts)
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])


def matrix(rows: Sequence[Sequence[Any]], like: Any = None):
    """Build a matrix from nested rows of scalars."""
    flat = [e for row in rows for e in row]
    if symbolic(like, *flat):
        return ca.vertcat(*[ca.horzcat(*row) for row in rows])
    return np.array([[float(np.asarray(e).reshape(())) for e in row] for row in rows])


def stack_rows(blocks: Sequence[Any], ncols: int, like: Any = None):
    """Stack matrices vertically; an empty list gives a ``0 x ncols`` matrix."""
    if symbolic(like, *blocks):
        return ca.vertcat(*blocks) if blocks else ca.SX(0, ncols)
    if not blocks:
        return np.zeros((0, ncols))
    return np.vstack([np.atleast_2d(np.asarray(b, dtype=np.float64)) for b in blocks])


def zeros(n: int, m: int | None = None, like: Any = None):
    if symbolic(like):
        return ca.SX.zeros(n, 1 if m is None else m)
    return np.zeros(n if m is None else (n, m))


def eye(n: int, like: Any = None):
    return ca.SX.eye(n) if symbolic(like) else np.eye(n)


def diag(entries: Sequence[Any], like: Any = None):
    if symbolic(like, *entries):
        return ca.diag(ca.vertcat(*entries))
    return np.diag(np.array([float(np.asarray(e).reshape(())) for e in entries]))


def sumsqr(a):
    return ca.sumsqr(a) if symbolic(a) else float(np.sum(np.square(a)))


def quad(M, v):
    """``v^T M v``."""
    if symbolic(M, v):
        return ca.dot(v, ca.mtimes(M, v))
    v = np.asarray(v).reshape(-1)
    return float(v @ M @ v)


def matvec(M, v):
    if symbolic(M, v):
        return ca.mtimes(M, v)
    return np.asarray(M) @ np.asarray(v).reshape(-1)
