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
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError, VimpcError

#: The largest NLP the controller builds, in decision variables. Building costs about
#: BUILD_SECONDS_PER_VARIABLE per variable (the symbolic graph and the solver's sparsity
#: analysis: 0.19 ms measured with the pendulum's implicit midpoint step at horizons 100 to
#: 3200, 2 CPU cores), and every solve grows with it too, so 20 000 variables take ~4 s to
#: build; far larger problems (a horizon of 100 000 steps) ran for minutes without a word.
MAX_DECISION_VARIABLES = 20_000
BUILD_SECONDS_PER_VARIABLE = 2e-4


def decision_variables(nx: int, nu: int, horizon: int, implicit: bool, n_slack: int = 0) -> int:
    """The NLP's decision variables: per stage the state, the input, the next state's copy
    (implicit transcription) and the slacks, and the last stage's state and slacks."""
    return horizon * (nx + nu + (nx if implicit else 0) + n_slack) + nx + n_slack


def check_problem_size(
    horizon: int,
    nx: int,
    nu: int,
    implicit: bool,
    n_slack: int = 0,
    key: str = "horizon",
    error: type[VimpcError] = InputError,
) -> int:
    """The number of decision variables, or ``error`` naming ``key`` when it exceeds
    :data:`MAX_DECISION_VARIABLES`, with the build time it would take."""
    n = decision_variables(nx, nu, horizon, implicit, n_slack)
    if n > MAX_DECISION_VARIABLES:
        per = n // max(horizon, 1)
        longest = max((MAX_DECISION_VARIABLES - nx - n_slack) // max(per, 1), 1)
        raise error(
            f"{key} = {horizon} gives an NLP of {n} decision variables ({per} per stage: "
            f"nx = {nx}, nu = {nu}{', the implicit next state' if implicit else ''}"
            f"{f', {n_slack} slacks' if n_slack else ''}), above the limit of "
            f"{MAX_DECISION_VARIABLES} (vimpc.mpc.problem.MAX_DECISION_VARIABLES): building "
            f"it would take about {n * BUILD_SECONDS_PER_VARIABLE:.0f} s and every solve "
            f"longer; give a horizon of at most {longest} steps"
        )
    return n


def _weights(name: str, value: Any, size: int) -> np.ndarray:
    """A weight vector (diagonal) or a symmetric PSD matrix of the given size."""
    try:
        w = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(
            f"{name} must be numbers: a scalar, a vector of {size} or a {size}x{size} matrix, "
            f"got {value!r:.80}"
        ) from None
    if isinstance(value, (str, bytes)) or value is None:
        raise InputError(
            f"{name} must be numbers: a scalar, a vector of {size} or a {size}x{size} matrix, "
            f"got {value!r:.80}"
        )
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
    """Penalty ``weight * (E(x) - target)^2`` that drives a swing-up by pumping energy.

    ``E`` is the prediction model's ``energy(x, p)`` on its state, so the controller
    needs a model that has one. ``target=None`` is the model's energy of the cost's
    reference at ``t = 0``, ``energy(from_obs(reference(0)), p_default)``, fixed when
    the controller is built.
    """

    weight: float = 1.0
    target: float | None = None


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

    def resolved(self, model: DiscreteModel) -> _ResolvedCost:
        """Weights as matrices, the reference as a callable and the energy target as a
        number, checked against ``model``."""
        nobs, nu = model.nobs, model.nu
        Q = _weights("cost.Q", self.Q, nobs)
        R = _weights("cost.R", self.R, nu)
        QN = Q if self.Q_terminal is None else _weights("cost.Q_terminal", self.Q_terminal, nobs)
        R_rate = None if self.R_rate is None else _weights("cost.R_rate", self.R_rate, nu)
        if isinstance(self.periodic, (str, bytes)) or not isinstance(
            self.periodic, (tuple, list, np.ndarray, range)
        ):
            raise InputError(
                f"cost.periodic must be a sequence of observation indices in [0, {nobs}), got "
                f"{self.periodic!r}"
            )
        for i in self.periodic:
            if isinstance(i, bool) or not (isinstance(i, (int, np.integer)) and 0 <= i < nobs):
                raise InputError(
                    f"cost.periodic entries must be observation indices in [0, {nobs}), got {i!r}"
                )
            if np.any(Q[i, np.arange(nobs) != i]) or np.any(QN[i, np.arange(nobs) != i]):
                raise InputError(
                    f"cost.periodic index {i} must have no cross weights in Q and Q_terminal"
                )
        if callable(self.reference):
            reference = self.reference
            try:
                probe = reference(0.0)
            except Exception as exc:  # the user's function: say which call failed, and how
                raise InputError(
                    f"cost.reference(t) must return the observation to track at time t, but "
                    f"cost.reference(0.0) raised {type(exc).__name__}: {exc}"
                ) from exc
            _checks.finite_vector("cost.reference(0.0)", probe, nobs)
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
        energy = None if self.energy is None else _energy(self.energy, model, reference)
        return _ResolvedCost(Q, R, QN, reference, u_ref, R_rate, tuple(self.periodic), energy)


def _energy(shaping: Any, model: DiscreteModel, reference: Callable) -> EnergyShaping:
    """``shaping`` checked against ``model``, with its target as a number."""
    if not isinstance(shaping, EnergyShaping):
        raise InputError(
            f"cost.energy must be a vimpc.mpc.EnergyShaping, got {type(shaping).__name__}"
        )
    if model.energy is None:
        raise InputError(
            "cost.energy asks for energy shaping, which needs the model's energy, but the model "
            "has no energy (DiscreteModel.energy is None); use a model that provides "
            "energy(x, p) or drop cost.energy"
        )
    weight = _checks.nonnegative("cost.energy.weight", shaping.weight)
    if shaping.target is None:
        x_ref = model.from_obs(np.asarray(reference(0.0), dtype=np.float64))
        target = float(model.energy(x_ref, model.p_default))
        if not np.isfinite(target):
            raise InputError(
                f"cost.energy.target = None takes the model's energy of the reference at t = 0, "
                f"which is {target}; give a finite target"
            )
    else:
        try:
            target = float(shaping.target)
        except (TypeError, ValueError):
            target = float("nan")
        if not np.isfinite(target):
            raise InputError(
                f"cost.energy.target must be a finite number [J] or None, got {shaping.target!r}"
            )
    return EnergyShaping(weight=weight, target=target)


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

    def stage_residual(self, obs, ref, u, u_prev, energy=None):
        """``rho`` with stage cost ``rho^T rho`` (least squares, for Gauss–Newton);
        ``energy`` is the model's energy of the stage's state (needed with shaping)."""
        parts = [
            ca.mtimes(_sqrt_psd(self.Q), self.error(obs, ref)),
            ca.mtimes(_sqrt_psd(self.R), u - self.u_reference),
        ]
        if self.R_rate is not None:
            parts.append(ca.mtimes(_sqrt_psd(self.R_rate), u - u_prev))
        if self.energy is not None:
            parts.append(self._energy_residual(energy))
        return ca.vertcat(*parts)

    def terminal_residual(self, obs, ref, energy=None):
        parts = [ca.mtimes(_sqrt_psd(self.Q_terminal), self.error(obs, ref))]
        if self.energy is not None:
            parts.append(self._energy_residual(energy))
        return ca.vertcat(*parts)

    def _energy_residual(self, energy):
        if energy is None:
            raise ValueError("energy shaping needs the stage's model energy")
        return np.sqrt(self.energy.weight) * (energy - self.energy.target)


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
        def array(name, value, fill):
            if value is None:
                return np.full(size_of[name], fill)
            try:
                if isinstance(value, (str, bytes)):
                    raise ValueError
                return np.asarray(value, dtype=np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise InputError(
                    f"constraints.{name} must be {size_of[name]} numbers (inf allowed), got "
                    f"{value!r:.80}"
                ) from None

        size_of = {"u_min": nu, "u_max": nu, "obs_min": nobs, "obs_max": nobs}

        def bounds(name_lo, lo, name_hi, hi, size):
            lo = array(name_lo, lo, -np.inf)
            hi = array(name_hi, hi, np.inf)
            for name, b in ((name_lo, lo), (name_hi, hi)):
                if b.shape != (size,) or np.any(np.isnan(b)):
                    raise InputError(
                        f"constraints.{name} must be {size} numbers (inf allowed), got {b.tolist()}"
                    )
            # inf as a lower bound (or -inf as an upper one) excludes every value
            for name, b, wrong, none in (
                (name_lo, lo, np.inf, "-inf"),
                (name_hi, hi, -np.inf, "inf"),
            ):
                bad = np.flatnonzero(b == wrong)
                if bad.size:
                    i = int(bad[0])
                    raise InputError(
                        f"constraints.{name}[{i}] = {b[i]} excludes every value and can never be "
                        f"met; give a finite bound, or {none} for no bound"
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
        if not isinstance(self.soft_bounds, (bool, np.bool_)):
            raise InputError(
                f"constraints.soft_bounds must be True or False, got {self.soft_bounds!r}"
            )
        if isinstance(self.path, PathConstraint) or not isinstance(self.path, (list, tuple)):
            raise InputError(
                f"constraints.path must be a list of PathConstraint, got {self.path!r:.80}"
            )
        for c in self.path:
            if not isinstance(c, PathConstraint):
                raise InputError(
                    f"constraints.path entries must be PathConstraint, got {type(c).__name__}"
                )
            if not isinstance(c.name, str) or not c.name:
                raise InputError(f"path constraint names must be non-empty strings, got {c.name!r}")
            if not isinstance(c.function, ca.Function) or c.function.n_in() != 1:
                raise InputError(
                    f"path constraint {c.name!r}: function must be a casadi.Function of the "
                    f"observation alone, got {c.function!r:.80}"
                )
            if not isinstance(c.soft, (bool, np.bool_)):
                raise InputError(
                    f"path constraint {c.name!r}: soft must be True or False, got {c.soft!r}"
                )
            if c.function.numel_in(0) != nobs:
                raise InputError(f"path constraint {c.name!r} must take the {nobs} observations")
            _checks.positive(f"path constraint {c.name!r} weight", c.weight)
        _checks.positive("constraints.bound_weight", self.bound_weight)
        return Constraints(
            u_min, u_max, obs_min, obs_max, self.soft_bounds, self.bound_weight, tuple(self.path)
        )

    # -- the safety rows h(obs) >= 0 -------------------------------------------------------
    def safety_layout(self) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """Where the safety rows sit (resolved constraints only): the observation entries
        with a finite lower bound (rows ``0 .. n_lo - 1``), those with a finite upper bound
        (the next ``n_hi`` rows), then the row indices of each path constraint."""
        lo = np.flatnonzero(np.isfinite(self.obs_min))
        hi = np.flatnonzero(np.isfinite(self.obs_max))
        start, rows = lo.size + hi.size, []
        for c in self.path:
            n = c.function.numel_out(0)
            rows.append(np.arange(start, start + n))
            start += n
        return lo, hi, tuple(rows)

    def safety(self, obs_names: Sequence[str]) -> tuple[ca.Function, tuple[str, ...]]:
        """The safety rows as one function ``obs -> h`` (``h >= 0`` is safe) and their names
        (resolved constraints only): ``obs_i - obs_min_i``, ``obs_max_i - obs_i``, then the
        rows of every path constraint, hard or soft."""
        lo, hi, _ = self.safety_layout()
        obs = ca.MX.sym("obs", len(obs_names))
        rows = [obs[i] - self.obs_min[i] for i in lo] + [self.obs_max[i] - obs[i] for i in hi]
        names = [f"{obs_names[i]} >= {self.obs_min[i]:g}" for i in lo]
        names += [f"{obs_names[i]} <= {self.obs_max[i]:g}" for i in hi]
        for c in self.path:
            rows.append(ca.vec(c.function(obs)))
            n = c.function.numel_out(0)
            names += [c.name] if n == 1 else [f"{c.name}[{i}]" for i in range(n)]
        h = ca.vertcat(*rows) if rows else ca.MX(0, 1)
        fn = ca.Function("safety", [obs], [h], ["obs"], ["h"])
        try:
            fn = fn.expand()
        except RuntimeError:  # a path constraint with a non-expandable node stays MX
            pass
        return fn, tuple(names)
