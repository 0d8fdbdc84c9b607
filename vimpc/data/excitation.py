"""Excitation inputs for data collection.

Each signal is a pure function of its arguments (and of the seed of ``rng``) and
returns an array of shape ``(n_steps, nu)``: row ``k`` is the input held over
``[k dt, (k + 1) dt)``, in the units of the system's inputs (N, N m).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vimpc._checks import known_keys, nonnegative, one_of, positive, positive_int
from vimpc.data.sampling import _generator
from vimpc.errors import InputError

__all__ = ["EXCITATION_KINDS", "chirp", "make_excitation", "random_steps", "zero"]


def _per_channel(name: str, value: Any, nu: int) -> np.ndarray:
    """A scalar or a length-``nu`` vector, broadcast to shape ``(nu,)``."""
    x = np.asarray(value, dtype=np.float64)
    if x.ndim == 0:
        x = np.full(nu, float(x))
    if x.shape != (nu,):
        raise InputError(f"{name} must be a scalar or have shape ({nu},), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise InputError(f"{name} must be finite, got {x.tolist()}")
    return x


def zero(n_steps: int, nu: int) -> np.ndarray:
    """No input: zeros of shape ``(n_steps, nu)``."""
    return np.zeros((positive_int("n_steps", n_steps), positive_int("nu", nu)))


def random_steps(
    n_steps: int,
    nu: int,
    low: Any,
    high: Any,
    hold: int,
    rng: np.random.Generator | int,
) -> np.ndarray:
    """Piecewise-constant random input.

    A new level, uniform in ``[low, high]`` and independent per channel, is drawn
    every ``hold`` steps (the last level may be held for fewer steps).

    Parameters
    ----------
    n_steps, nu : int
        Number of control steps and of input channels.
    low, high : float or array_like, shape (nu,)
        Bounds of the levels, in input units; ``low <= high``.
    hold : int
        Number of steps each level is held (>= 1).
    rng : numpy.random.Generator or int
        Random generator, or a seed for a fresh one.

    Returns
    -------
    ndarray, shape (n_steps, nu)
    """
    n_steps, nu = positive_int("n_steps", n_steps), positive_int("nu", nu)
    hold = positive_int("hold", hold)
    low, high = _per_channel("low", low, nu), _per_channel("high", high, nu)
    bad = np.flatnonzero(low > high)
    if bad.size:
        i = int(bad[0])
        raise InputError(
            f"low must be <= high, but on channel {i} low={float(low[i])!r} > "
            f"high={float(high[i])!r}; swap the bounds"
        )
    n_levels = -(-n_steps // hold)
    levels = low + (high - low) * _generator(rng).random((n_levels, nu))
    return np.repeat(levels, hold, axis=0)[:n_steps]


def chirp(
    n_steps: int,
    nu: int,
    dt: float,
    amplitude: Any = 1.0,
    f0: float = 0.1,
    f1: float = 1.0,
    phase_shift: bool = False,
) -> np.ndarray:
    """Linear frequency sweep ``u(t) = a sin(2 pi (f0 t + (f1 - f0) t^2 / (2 T)) + phi)``.

    The instantaneous frequency goes linearly from ``f0`` at ``t = 0`` to ``f1``
    at ``t = T = n_steps dt``; the signal is sampled at ``t = k dt``.

    Parameters
    ----------
    n_steps, nu : int
        Number of control steps and of input channels.
    dt : float
        Control step, s.
    amplitude : float or array_like, shape (nu,)
        Amplitude per channel, in input units.
    f0, f1 : float
        Start and end frequencies, Hz; both below the Nyquist frequency ``1 / (2 dt)``.
    phase_shift : bool
        If True channel ``j`` is shifted by ``phi = 2 pi j / nu`` so channels
        differ; otherwise every channel carries the same signal (``phi = 0``).

    Returns
    -------
    ndarray, shape (n_steps, nu)
    """
    n_steps, nu = positive_int("n_steps", n_steps), positive_int("nu", nu)
    dt = positive("dt", dt)
    amplitude = _per_channel("amplitude", amplitude, nu)
    f0, f1 = nonnegative("f0", f0), nonnegative("f1", f1)
    nyquist = 0.5 / dt
    if max(f0, f1) >= nyquist:
        raise InputError(
            f"chirp frequencies must be below the Nyquist frequency 1/(2 dt) = {nyquist:g} Hz, "
            f"got f0={f0:g} Hz and f1={f1:g} Hz; lower them or use a smaller dt"
        )
    t = np.arange(n_steps) * dt
    horizon = n_steps * dt
    phase = 2.0 * np.pi * (f0 * t + 0.5 * (f1 - f0) * t**2 / horizon)
    shift = 2.0 * np.pi * np.arange(nu) / nu if phase_shift else np.zeros(nu)
    return amplitude * np.sin(phase[:, None] + shift)


#: Excitation kinds accepted by :func:`make_excitation` and their options with defaults.
EXCITATION_KINDS: dict[str, dict[str, Any]] = {
    "zero": {},
    "random_steps": {"low": -1.0, "high": 1.0, "hold": 10},
    "chirp": {"amplitude": 1.0, "f0": 0.1, "f1": 1.0, "phase_shift": False},
}


def make_excitation(
    kind: str,
    n_steps: int,
    nu: int,
    dt: float,
    rng: np.random.Generator | int,
    **options: Any,
) -> np.ndarray:
    """Build an excitation of the named ``kind`` (see :data:`EXCITATION_KINDS` for options).

    Parameters
    ----------
    kind : {"zero", "random_steps", "chirp"}
    n_steps, nu : int
        Number of control steps and of input channels.
    dt : float
        Control step, s.
    rng : numpy.random.Generator or int
        Randomness for the random kinds.
    **options
        Options of the kind; unknown keys are rejected.

    Returns
    -------
    ndarray, shape (n_steps, nu)
    """
    kind = one_of("excitation kind", kind, EXCITATION_KINDS)
    known_keys(f"excitation {kind!r}", options, EXCITATION_KINDS[kind])
    opts = {**EXCITATION_KINDS[kind], **options}
    if kind == "zero":
        positive("dt", dt)
        return zero(n_steps, nu)
    if kind == "random_steps":
        positive("dt", dt)
        return random_steps(n_steps, nu, rng=rng, **opts)
    return chirp(n_steps, nu, dt, **opts)
