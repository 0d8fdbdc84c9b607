"""The optimal control problem: costs and constraints written on the observation ``(q, v)``.

Costs and constraints reach a model's state through its ``to_obs``, so one
problem serves every model of the same environment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc.errors import InputError


def _weights(name: str, value: Any, size: int) -> np.ndarray:
    """A weight vector (diagonal) or a symmetric PSD matrix of the given size."""
    w = np.asarray(value, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(size, float(w))
    if w.shape == (size,):
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise InputError(f"{name} must be finite and >= 0, got {w.tolist()}")
        return np.diag(w)
    if w.shape != (size, size):
        raise InputError(
            f"{name} must be a scalar, a vector of {size} or a {size}x{size} matrix, got shape {w.shape}"
        )
    if (
        not np.all(np.isfinite(w))
        or not np.allclose(w, w.T)
        or np.linalg.eigvalsh(w).min() < -1e-12
    ):
        raise InputError(f"{name} must be a finite symmetric positive semidefinite matrix")
    return w


@dataclass(frozen=True)
class EnergyShaping:
    """Penalty ``weight * (E(obs) - target)^2`` that drives a swing-up by pumping energy.

    ``energy`` is a CasADi function of the observation (e.g. a system's ``E``
    function composed with the observation split).
    """

    energy: ca.Function
    target: float
    weight: float = 1.0


@dataclass(frozen=True)
class Cost:
    """Quadratic tracking of an observation reference plus optional terms.

    Stage cost ``e^T Q e + (u - u_ref)^T R (u - u_ref) + du^T R_rate du`` with
    ``e = obs - reference(t)``, terminal ``e_N^T Q_terminal e_N``. Entries listed in
    ``periodic`` are angles: their error enters as ``2 (1 - cos e)``, equal to
    ``e^2`` near zero but without preferring one turn over another.

    ``reference`` is a constant observation or a callable ``t -> obs`` [SI units].
    """

    Q: Any
    R: Any
    Q_terminal: Any = None
    reference: Any = None
    u_reference: Any = None
    R_rate: Any = None
    periodic: tuple[int, ...] = ()
    energy: EnergyShaping | None = None

    def resolved(self, nobs: int, nu: int) -> _ResolvedCost:
        Q = _weights("cost.Q", self.Q, nobs)
        R = _weights("cost.R", self.R, nu)
        QN = Q if self.Q_terminal is None else _weights("cost.Q_terminal", self.Q_terminal, nobs)
        R_rate = None if self.R_rate is None else _weights("cost.R_rate", self.R_rate, nu)
        for i in self.periodic:
            if not (isinstance(i, (int, np.integer)) and 0 <= i < nobs):
                raise InputError(
                    f"cost.periodic entries must be observation indices in [0, {nobs}), got {i!r}"
                )
            if np.any(Q[i, np.arange(nobs) != i]) or np.any(QN[i, np.arange(nobs) != i]):
                raise InputError(
                    f"cost.periodic index {i} must have no cross weights in Q and Q_terminal"
                )
        if callable(self.reference):
            reference = self.reference
            probe = np.asarray(reference(0.0), dtype=np.float64)
            if probe.shape != (nobs,):
                raise InputError(
                    f"cost.reference(t) must return shape ({nobs},), got {probe.shape}"
                )
        else:
            value = (
                np.zeros(nobs)
                if self.reference is None
                else _checks.finite_vector("cost.reference", self.reference, nobs)
            )
            reference = lambda t, value=value: value  # noqa: E731
        u_ref = (
            np.zeros(nu)
            if self.u_reference is None
            else _checks.finite_vector("cost.u_reference", self.u_reference, nu)
        )
        if self.energy is not None:
            if (
                not isinstance(self.energy.energy, ca.Function)
                or self.energy.energy.numel_in(0) != nobs
            ):
                raise InputError(
                    f"cost.energy.energy must be a casadi.Function of the {nobs} observations"
                )
            _checks.nonnegative("cost.energy.weight", self.energy.weight)
        return _ResolvedCost(Q, R, QN, reference, u_ref, R_rate, tuple(self.periodic), self.energy)


@dataclass(frozen=True)
class _ResolvedCost:
    Q: np.ndarray
    R: np.ndarray
    Q_terminal: np.ndarray
    reference: Callable[[float], np.ndarray]
    u_reference: np.ndarray
    R_rate: np.ndarray | None
    periodic: tuple[int, ...]
    energy: EnergyShaping | None

    def error(self, obs, ref):
        e = obs - ref
        if not self.periodic:
            return e
        # 2 sin(e/2) has square 2 (1 - cos e): periodic and equal to e to second order
        parts = [2 * ca.sin(e[i] / 2) if i in self.periodic else e[i] for i in range(e.numel())]
        return ca.vertcat(*parts)

    def stage_residual(self, obs, ref, u, u_prev):
        """``rho`` with stage cost ``rho^T rho`` (least squares, for Gauss–Newton)."""
        parts = [
            ca.mtimes(_sqrt_psd(self.Q), self.error(obs, ref)),
            ca.mtimes(_sqrt_psd(self.R), u - self.u_reference),
        ]
        if self.R_rate is not None:
            parts.append(ca.mtimes(_sqrt_psd(self.R_rate), u - u_prev))
        if self.energy is not None:
            parts.append(
                np.sqrt(self.energy.weight) * (self.energy.energy(obs) - self.energy.target)
            )
        return ca.vertcat(*parts)

    def terminal_residual(self, obs, ref):
        parts = [ca.mtimes(_sqrt_psd(self.Q_terminal), self.error(obs, ref))]
        if self.energy is not None:
            parts.append(
                np.sqrt(self.energy.weight) * (self.energy.energy(obs) - self.energy.target)
            )
        return ca.vertcat(*parts)


def _sqrt_psd(W: np.ndarray) -> np.ndarray:
    """``L`` with ``L^T L = W`` for a symmetric PSD ``W`` (diagonal stays diagonal)."""
    if np.count_nonzero(W - np.diag(np.diag(W))) == 0:
        return np.diag(np.sqrt(np.diag(W)))
    lam, V = np.linalg.eigh(W)
    return np.diag(np.sqrt(np.clip(lam, 0.0, None))) @ V.T


@dataclass(frozen=True)
class PathConstraint:
    """A nonlinear constraint ``h(obs) >= 0`` on every predicted observation.

    ``function`` maps the observation to ``h`` (any length). ``soft`` constraints
    get nonnegative slacks with an exact (L1) penalty ``weight * slack``, which
    leaves the solution unchanged whenever the hard problem is feasible and the
    weight exceeds the multipliers.
    """

    name: str
    function: ca.Function
    soft: bool = False
    weight: float = 1e3


@dataclass(frozen=True)
class Constraints:
    """Input bounds (hard), observation bounds and path constraints (hard or soft).

    Bounds are arrays (``+-inf`` for none) in the observation's and the input's
    units. ``soft_bounds`` makes the observation bounds soft with ``bound_weight``.
    """

    u_min: Any = None
    u_max: Any = None
    obs_min: Any = None
    obs_max: Any = None
    soft_bounds: bool = False
    bound_weight: float = 1e3
    path: Sequence[PathConstraint] = field(default_factory=tuple)

    def resolved(self, nobs: int, nu: int) -> Constraints:
        def bounds(name_lo, lo, name_hi, hi, size):
            lo = (
                np.full(size, -np.inf)
                if lo is None
                else np.asarray(lo, dtype=np.float64).reshape(-1)
            )
            hi = (
                np.full(size, np.inf)
                if hi is None
                else np.asarray(hi, dtype=np.float64).reshape(-1)
            )
            for name, b in ((name_lo, lo), (name_hi, hi)):
                if b.shape != (size,) or np.any(np.isnan(b)):
                    raise InputError(
                        f"constraints.{name} must be {size} numbers (inf allowed), got {b.tolist()}"
                    )
            bad = np.flatnonzero(lo > hi)
            if bad.size:
                i = int(bad[0])
                raise InputError(
                    f"constraints.{name_lo}[{i}] = {lo[i]} exceeds constraints.{name_hi}[{i}] = {hi[i]}: "
                    "lower bounds must not exceed upper bounds"
                )
            return lo, hi

        u_min, u_max = bounds("u_min", self.u_min, "u_max", self.u_max, nu)
        obs_min, obs_max = bounds("obs_min", self.obs_min, "obs_max", self.obs_max, nobs)
        for c in self.path:
            if not isinstance(c, PathConstraint):
                raise InputError(
                    f"constraints.path entries must be PathConstraint, got {type(c).__name__}"
                )
            if c.function.numel_in(0) != nobs:
                raise InputError(f"path constraint {c.name!r} must take the {nobs} observations")
            _checks.positive(f"path constraint {c.name!r} weight", c.weight)
        _checks.positive("constraints.bound_weight", self.bound_weight)
        return Constraints(
            u_min, u_max, obs_min, obs_max, self.soft_bounds, self.bound_weight, tuple(self.path)
        )
