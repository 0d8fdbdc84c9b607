"""Argument checks shared across vimpc; each raises :class:`InputError` naming the argument."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from vimpc.errors import InputError


def positive(name: str, value: Any) -> float:
    """Return ``value`` as a float after checking it is finite and > 0."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise InputError(f"{name} must be a positive number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a positive number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0.0:
        raise InputError(f"{name} must be a positive finite number, got {value!r}")
    return x


def nonnegative(name: str, value: Any) -> float:
    """Return ``value`` as a float after checking it is finite and >= 0."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise InputError(f"{name} must be a non-negative number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a non-negative number, got {value!r}") from None
    if not math.isfinite(x) or x < 0.0:
        raise InputError(f"{name} must be a non-negative finite number, got {value!r}")
    return x


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int after checking it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def finite_vector(name: str, value: Any, size: int, names: Sequence[str] = ()) -> np.ndarray:
    """Return ``value`` as a float64 vector of length ``size`` with no NaN or inf; the
    error names the first entry that is not finite (by index, and by ``names[i]``)."""
    try:
        x = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(
            f"{name} must be a numeric vector of length {size}, got {value!r}"
        ) from None
    if x.ndim > 1 and x.size == size:
        x = x.reshape(size)
    if x.shape != (size,):
        raise InputError(f"{name} must have shape ({size},), got shape {x.shape}")
    if not np.all(np.isfinite(x)):  # the common case costs one pass; the message, more
        bad = np.flatnonzero(~np.isfinite(x))
        i = int(bad[0])
        label = f" ({names[i]})" if i < len(names) else ""
        more = f" and {bad.size - 1} more" if bad.size > 1 else ""
        raise InputError(
            f"{name} must be finite (no NaN or inf) in every entry: {name}[{i}]{label} is "
            f"{float(x[i])!r}{more}; got {x.tolist()}"
        )
    return x


def finite_number(name: str, value: Any, expected: str) -> float:
    """Return ``value`` as a finite float; the error says what was ``expected``."""
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be {expected}, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be {expected}, got {value!r}") from None
    if not math.isfinite(x):
        raise InputError(f"{name} must be {expected}, got {x!r}")
    return x


def steps_per(name: str, dt: float, h: float) -> int:
    """Number of substeps ``h`` in ``dt``; ``dt`` must be a positive integer multiple of ``h``."""
    dt = positive(name, dt)
    h = positive("substep", h)
    k = round(dt / h)
    if k < 1 or abs(k * h - dt) > 1e-9 * max(dt, 1.0):
        raise InputError(
            f"{name} must be a positive integer multiple of the substep {h!r}, got {dt!r} "
            f"(ratio {dt / h:.6g})"
        )
    return int(k)


def one_of(name: str, value: Any, choices: Iterable[str]) -> str:
    """Check ``value`` is one of ``choices``; suggest the closest on a miss."""
    choices = list(choices)
    if value in choices:
        return value
    hint = difflib.get_close_matches(str(value), choices, n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    raise InputError(f"{name} must be one of {choices}, got {value!r}{extra}")


def known_keys(name: str, given: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Reject keys of ``given`` not in ``allowed``, with a 'did you mean'."""
    allowed = list(allowed)
    for key in given:
        if key not in allowed:
            hint = difflib.get_close_matches(key, allowed, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise InputError(
                f"{name} got an unknown key {key!r}; expected one of {sorted(allowed)}{extra}"
            )
