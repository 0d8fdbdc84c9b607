"""Trajectory datasets, saved as ``.npz`` with JSON metadata."""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vimpc._checks import one_of
from vimpc._files import write_atomic
from vimpc.errors import InputError

__all__ = ["Dataset"]

_FORMAT = "vimpc.Dataset/1"
_KEYS = {"format", "t", "obs", "states", "inputs", "dt", "metadata"}


def _jsonable(x: Any) -> Any:
    """Turn numpy scalars and arrays into plain Python for ``json.dumps``."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"{type(x).__name__} is not JSON-serialisable")


def _frozen(name: str, value: Any, ndim: int) -> np.ndarray:
    try:
        a = np.array(value, dtype=np.float64)  # a copy, so freezing it is safe
    except (TypeError, ValueError):
        raise InputError(f"Dataset.{name} must be a numeric array, got {type(value)}") from None
    if a.ndim != ndim:
        raise InputError(f"Dataset.{name} must have {ndim} dimensions, got shape {a.shape}")
    a.flags.writeable = False
    return a


def _check_finite(name: str, a: np.ndarray) -> None:
    """Refuse a NaN or inf, naming the array, trajectory, step and entry of the first one
    and how many there are: a model fitted or calibrated on it would take the failed
    sample for a measurement."""
    bad = ~np.isfinite(a)
    if not bad.any():
        return
    where = np.argwhere(bad)
    first = tuple(int(i) for i in where[0])
    place = f"trajectory {first[0]}, step {first[1]}"
    if len(first) > 2:
        place += f", entry {first[2]}"
    raise InputError(
        f"Dataset.{name} must be finite, got {a[first]} at {place} ({len(where)} non-finite "
        f"value(s) in all, in trajectories {sorted({int(i) for i in where[:, 0]})[:10]}); a "
        "failed step or measurement is no sample: drop those trajectories or collect them "
        "again"
    )


@dataclass(frozen=True)
class Dataset:
    """Trajectories of a forced mechanical system, one row per trajectory.

    Attributes
    ----------
    t : ndarray, shape (N, T + 1)
        Sample times, s.
    obs : ndarray, shape (N, T + 1, nobs)
        Observations ``(q, v)`` as measured (with noise), SI units.
    states : ndarray, shape (N, T + 1, nobs)
        The same observations without noise (ground truth).
    inputs : ndarray, shape (N, T, nu)
        Inputs applied over ``[t_k, t_{k+1})``, input units (N, N m).
    dt : float
        Step between samples, s.
    metadata : dict
        JSON-serialisable provenance: system, parameters, dt, noise, seed,
        excitation, ... Stored as given after a JSON round trip (tuples become
        lists, numpy values plain numbers), so ``load(save(d)) == d`` exactly.

    Arrays are float64 copies and read-only, and every value is finite (a NaN or inf is
    refused with the array, trajectory and step that hold it).
    """

    t: np.ndarray
    obs: np.ndarray
    states: np.ndarray
    inputs: np.ndarray
    dt: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, ndim in (("t", 2), ("obs", 3), ("states", 3), ("inputs", 3)):
            object.__setattr__(self, name, _frozen(name, getattr(self, name), ndim))
        n, t1, nobs = self.obs.shape
        if n < 1 or t1 < 2 or nobs < 1:
            raise InputError(
                "Dataset.obs must have shape (N, T + 1, nobs) with N >= 1, T >= 1, nobs >= 1, "
                f"got {self.obs.shape}"
            )
        expected = {
            "t": (n, t1),
            "states": (n, t1, nobs),
            "inputs": (n, t1 - 1, self.inputs.shape[2]),
        }
        for name, shape in expected.items():
            got = getattr(self, name).shape
            if got != shape:
                raise InputError(
                    f"Dataset.{name} must have shape {shape} to match obs of shape "
                    f"{self.obs.shape} (N, T + 1, nobs), got {got}"
                )
        for name in ("t", "obs", "states", "inputs"):
            _check_finite(name, getattr(self, name))
        try:
            dt = float(self.dt)
        except (TypeError, ValueError):
            dt = float("nan")
        if not (np.isfinite(dt) and dt > 0):
            raise InputError(
                f"Dataset.dt must be a positive finite time step in s, got {self.dt!r}"
            )
        object.__setattr__(self, "dt", dt)
        # samples dt apart: a dt that is not the samples' step would make every fitted or
        # calibrated model step the wrong time
        steps = np.diff(self.t, axis=1)
        off = np.abs(steps - dt) > 1e-6 * dt + 8 * np.finfo(float).eps * np.abs(self.t[:, 1:])
        if np.any(off):
            i, k = (int(a[0]) for a in np.nonzero(off))
            raise InputError(
                f"Dataset.t must advance by a uniform step dt = {dt} s (Dataset.dt) in every "
                f"trajectory; trajectory {i} has a step of {steps[i, k]} s between samples {k} "
                f"and {k + 1} ({int(off.sum())} such steps in all); pass the samples' own step "
                "as dt, or t = t0 + dt * arange(T + 1)"
            )
        if not isinstance(self.metadata, Mapping):
            raise InputError(f"Dataset.metadata must be a dict, got {type(self.metadata)}")
        try:
            text = json.dumps(dict(self.metadata), default=_jsonable, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise InputError(
                f"Dataset.metadata must be JSON-serialisable ({err}); store plain numbers, "
                "strings, lists and dicts"
            ) from None
        object.__setattr__(self, "metadata", json.loads(text))

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """Number of trajectories (same as :attr:`n_trajectories`)."""
        return self.obs.shape[0]

    @property
    def n_trajectories(self) -> int:
        """Number of trajectories ``N``."""
        return self.obs.shape[0]

    @property
    def n_steps(self) -> int:
        """Number of steps ``T`` per trajectory (each has ``T + 1`` samples)."""
        return self.inputs.shape[1]

    @property
    def nobs(self) -> int:
        """Size of one observation."""
        return self.obs.shape[2]

    @property
    def nu(self) -> int:
        """Number of inputs."""
        return self.inputs.shape[2]

    # ------------------------------------------------------------- transitions
    def _source(self, source: str) -> np.ndarray:
        return self.obs if one_of("source", source, ("obs", "states")) == "obs" else self.states

    def pairs(self, source: str = "obs") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One-step transitions flattened over trajectories.

        Parameters
        ----------
        source : {"obs", "states"}
            Noisy observations or noise-free states.

        Returns
        -------
        X, U, Xnext : ndarray, shapes (N T, nobs), (N T, nu), (N T, nobs)
            Row ``i T + k`` is step ``k`` of trajectory ``i``.
        """
        x, m = self._source(source), self.n_trajectories * self.n_steps
        return (
            x[:, :-1].reshape(m, self.nobs),
            self.inputs.reshape(m, self.nu),
            x[:, 1:].reshape(m, self.nobs),
        )

    def triples(
        self, nq: int, source: str = "obs", with_inputs: bool = False
    ) -> tuple[np.ndarray, ...]:
        """Consecutive position triples ``(q_{k-1}, q_k, q_{k+1})`` for discrete Lagrangians.

        Parameters
        ----------
        nq : int
            Number of positions: the first ``nq`` entries of each observation.
        source : {"obs", "states"}
            Noisy observations or noise-free states.
        with_inputs : bool
            Also return ``(u_{k-1}, u_k)``, the inputs entering the forced
            discrete Euler-Lagrange equation at ``q_k``.

        Returns
        -------
        Q_prev, Q, Q_next : ndarray, shape (N (T - 1), nq)
            Row ``i (T - 1) + k - 1`` is time ``k = 1 .. T - 1`` of trajectory ``i``.
        U_prev, U : ndarray, shape (N (T - 1), nu)
            Only when ``with_inputs`` is True.
        """
        if (
            isinstance(nq, bool)
            or not isinstance(nq, (int, np.integer))
            or not 1 <= nq <= self.nobs
        ):
            raise InputError(f"nq must be an integer in [1, {self.nobs}] (nobs), got {nq!r}")
        if self.n_steps < 2:
            raise InputError(
                f"triples need trajectories of at least 2 steps, got T = {self.n_steps}; "
                "collect longer trajectories"
            )
        q, m = self._source(source)[:, :, :nq], self.n_trajectories * (self.n_steps - 1)
        out = tuple(q[:, s : s + self.n_steps - 1].reshape(m, nq) for s in range(3))
        if with_inputs:
            u = self.inputs
            out += (u[:, :-1].reshape(m, self.nu), u[:, 1:].reshape(m, self.nu))
        return out

    # ------------------------------------------------------------------ split
    def split(self, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
        """Split by trajectory into ``(train, test)``.

        Parameters
        ----------
        fraction : float
            Share of trajectories for training, in (0, 1); rounded, keeping at
            least one trajectory on each side.
        seed : int
            Seed of the random assignment.

        Returns
        -------
        train, test : Dataset
            Trajectories keep their original order; ``metadata["split"]`` records
            fraction, seed, part and the original indices.
        """
        n = self.n_trajectories
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction < 1.0):
            raise InputError(f"fraction must be a number in (0, 1), got {fraction!r}")
        if n < 2:
            raise InputError(f"split needs at least 2 trajectories, got {n}")
        n_train = min(max(round(fraction * n), 1), n - 1)
        perm = np.random.default_rng(seed).permutation(n)
        parts = []
        for part, idx in (("train", perm[:n_train]), ("test", perm[n_train:])):
            idx = np.sort(idx)
            meta = {
                **self.metadata,
                "split": {"fraction": fraction, "seed": seed, "part": part, "indices": idx},
            }
            parts.append(
                Dataset(
                    self.t[idx], self.obs[idx], self.states[idx], self.inputs[idx], self.dt, meta
                )
            )
        return parts[0], parts[1]

    def replace(self, **changes: Any) -> Dataset:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write the dataset to ``path`` (``.npz``) atomically.

        The file is written to a temporary file in the same directory and
        renamed, so a reader never sees a partial file.

        Raises
        ------
        FileExistsError
            If ``path`` exists and ``overwrite`` is False.
        """
        path = Path(path)
        if path.suffix != ".npz":
            raise InputError(f"dataset path must end in .npz, got {str(path)!r}")
        if path.exists() and not overwrite:
            raise FileExistsError(
                f"{str(path)!r} already exists; choose another path or pass overwrite=True"
            )
        arrays = {
            "format": np.array(_FORMAT),
            "t": self.t,
            "obs": self.obs,
            "states": self.states,
            "inputs": self.inputs,
            "dt": np.array(self.dt),
            "metadata": np.array(json.dumps(self.metadata, allow_nan=True)),
        }
        write_atomic(path, lambda handle: np.savez(handle, **arrays), overwrite=overwrite)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset written by :meth:`save`."""
        path = Path(path)
        not_ours = f"{str(path)!r} is not a vimpc dataset (a .npz written by Dataset.save)"
        try:
            z = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise InputError(f"{not_ours}: {err or type(err).__name__}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise InputError(f"{not_ours}: it holds a single array")
        with z:
            missing = sorted(_KEYS - set(z.files))
            if missing:
                raise InputError(f"{not_ours}: missing keys {missing}, found {sorted(z.files)}")
            try:
                fmt = str(z["format"])
                if fmt != _FORMAT:
                    raise InputError(f"{not_ours}: format {fmt!r}, expected {_FORMAT!r}")
                arrays = {k: z[k] for k in ("t", "obs", "states", "inputs")}
                dt = float(z["dt"])
                metadata = json.loads(str(z["metadata"]))
            except (
                ValueError,
                TypeError,
                OSError,
                EOFError,
                zipfile.BadZipFile,
                zlib.error,
            ) as err:
                # a truncated or damaged member; InputError is a ValueError and passes as is
                if isinstance(err, InputError):
                    raise
                raise InputError(f"{not_ours}: {err or type(err).__name__}") from None
        return cls(dt=dt, metadata=metadata, **arrays)
