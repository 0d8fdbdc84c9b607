"""The optimal control problem: costs and constraints written on the observation ``(q, v)``.

Costs and constraints reach a model's state through its ``to_obs``, so one
problem serves every model of the same environment.
"""

from __future__ import annotations

import dataclasses
import math
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

    ``circle`` is ``((i, j), (cx, cy), r)`` for a keep-out circle
    (:meth:`keep_out`: ``h = (obs_i - cx)^2 + (obs_j - cy)^2 - r^2``), which lets
    :class:`SafetyRows` write ``h`` out for reports; None for any other function.
    """

    name: str
    function: ca.Function
    soft: bool = False
    weight: float = 1e3
    circle: tuple[tuple[int, int], tuple[float, float], float] | None = None

    @classmethod
    def keep_out(
        cls,
        name: str,
        nobs: int,
        indices: Sequence[int],
        center: Sequence[float],
        radius: float,
        *,
        soft: bool = False,
        weight: float = 1e3,
    ) -> PathConstraint:
        """Keep the observation entries ``indices = (i, j)`` out of the circle of ``center``
        and ``radius``: ``h = (obs_i - cx)^2 + (obs_j - cy)^2 - r^2 >= 0``."""
        (i, j), (cx, cy), r = circle = _circle(name, (indices, center, radius), nobs)
        obs = ca.SX.sym("obs", nobs)
        h = ca.Function(name, [obs], [(obs[i] - cx) ** 2 + (obs[j] - cy) ** 2 - r**2])
        return cls(name, h, soft=soft, weight=weight, circle=circle)


def _circle(name: str, value: Any, nobs: int) -> tuple[tuple[int, int], tuple[float, float], float]:
    """A keep-out circle ``((i, j), (cx, cy), r)`` checked against ``nobs`` observations."""
    what = (
        f"path constraint {name!r}: circle must be ((i, j), (cx, cy), r) with i != j "
        f"observation indices in [0, {nobs}), a finite centre and a radius > 0"
    )
    try:
        indices, center, radius = value
        i, j = (int(k) for k in indices)
        cx, cy = (float(c) for c in center)
        r = float(radius)
    except (TypeError, ValueError):
        raise InputError(f"{what}, got {value!r:.80}") from None
    if (
        any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in indices)
        or not (0 <= i < nobs and 0 <= j < nobs and i != j)
        or not np.isfinite([cx, cy, r]).all()
        or r <= 0
    ):
        raise InputError(f"{what}, got {value!r:.80}")
    return (i, j), (cx, cy), r


def _check_circle(c: PathConstraint, nobs: int) -> None:
    """Refuse a ``circle`` that is not ``c.function``'s (a report would write out another
    ``h`` than the one constrained): both are compared on three fixed observations."""
    (i, j), (cx, cy), r = c.circle
    for obs in (np.zeros(nobs), np.ones(nobs), np.arange(1.0, nobs + 1.0)):
        h = float(np.asarray(c.function(obs), dtype=np.float64).ravel()[0])
        expected = (obs[i] - cx) ** 2 + (obs[j] - cy) ** 2 - r**2
        if not abs(h - expected) <= 1e-9 * max(1.0, abs(expected)):
            raise InputError(
                f"path constraint {c.name!r}: circle = {c.circle} gives h = {expected:.6g} at "
                f"obs = {obs.tolist()}, but its function gives {h:.6g}; give the circle's "
                "function (PathConstraint.keep_out builds both) or drop circle"
            )


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
        path = list(self.path)
        for k, c in enumerate(self.path):
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
            if c.circle is not None:
                # as numbers, so the rows can write the circle out
                path[k] = dataclasses.replace(c, circle=_circle(c.name, c.circle, nobs))
                if c.function.numel_out(0) != 1:
                    raise InputError(
                        f"path constraint {c.name!r}: a circle has one row, but its function "
                        f"gives {c.function.numel_out(0)}; drop circle or give the circle's h"
                    )
                _check_circle(path[k], nobs)
        _checks.positive("constraints.bound_weight", self.bound_weight)
        return Constraints(
            u_min, u_max, obs_min, obs_max, self.soft_bounds, self.bound_weight, tuple(path)
        )


def _plus(name: str, value: float) -> str:
    """``name + value`` written without a double sign (``s + 1``, ``s - 0.5``)."""
    if value == 0:
        return name
    return f"{name} + {value:g}" if value > 0 else f"{name} - {-value:g}"


def _squared(name: str, center: float) -> str:
    """``(name - center)^2`` (``name^2`` about zero)."""
    return f"{name}^2" if center == 0 else f"({_plus(name, -center)})^2"


#: the kinds of safety row, in the order they are stacked
ROW_KINDS = ("lower", "upper", "path")


@dataclass(frozen=True)
class SafetyRow:
    """One safety row ``h(obs) >= 0``: what it is and where it comes from.

    ``kind`` is ``"lower"`` (``h = obs[entry] - bound``), ``"upper"``
    (``h = bound - obs[entry]``) or ``"path"`` (row ``component`` of the path constraint
    ``constraint``, an index into ``Constraints.path``). ``label`` states the constraint
    (``s >= -1``, ``|(x, y) - (1, 0)| >= 0.35``), ``formula`` writes ``h`` out (``s + 1``,
    ``(x - 1)^2 + y^2 - 0.35^2``; a path constraint that is not a circle as
    ``name(obs)[i]``). ``h`` has the unit of observation entry ``entries[0]`` to the power
    ``power`` (0: unknown).
    """

    name: str
    kind: str
    soft: bool
    label: str
    formula: str
    entry: int | None = None
    bound: float = math.nan
    constraint: int | None = None
    component: int = 0
    entries: tuple[int, ...] = ()
    power: int = 0


@dataclass(frozen=True, eq=False)
class SafetyRows:
    """The safety rows ``h(obs) >= 0`` of resolved :class:`Constraints`, the rows a tube
    tightens, built once by :meth:`of` and read by the transcription, the controller, its
    tube and the reports.

    Rows are stacked as: the observation entries with a finite lower bound (``lower``, rows
    ``0 .. n_lo - 1``), those with a finite upper bound (``upper``, the next ``n_hi``
    rows), then the rows of every path constraint in order (``path[c]`` the row indices of
    constraint ``c``). ``function`` is ``obs -> h``; ``paired`` the rows of the entries
    bounded on both sides, ``(lower rows, upper rows, obs_max - obs_min)``, whose margins
    cannot together exceed the range (:meth:`empty_stages`).
    """

    constraints: Constraints
    obs_names: tuple[str, ...]
    rows: tuple[SafetyRow, ...]
    function: ca.Function
    lower: np.ndarray
    upper: np.ndarray
    path: tuple[np.ndarray, ...]
    paired: tuple[np.ndarray, np.ndarray, np.ndarray]

    @classmethod
    def of(cls, constraints: Constraints, obs_names: Sequence[str]) -> SafetyRows:
        """The safety rows of ``constraints`` (resolved: :meth:`Constraints.resolved`) on an
        observation whose entries are called ``obs_names``."""
        if isinstance(obs_names, str) or not all(isinstance(n, str) for n in obs_names):
            raise InputError(f"obs_names must be a sequence of strings, got {obs_names!r:.80}")
        names = tuple(obs_names)
        c = constraints
        if not (
            isinstance(c, Constraints)
            and isinstance(c.obs_min, np.ndarray)
            and isinstance(c.obs_max, np.ndarray)
        ):
            raise InputError(
                "SafetyRows.of needs resolved constraints (Constraints.resolved(nobs, nu)), "
                f"got {c!r:.80}"
            )
        if c.obs_min.shape != (len(names),):
            raise InputError(
                f"obs_names must be {c.obs_min.size} names (one per observation entry of the "
                f"constraints), got {len(names)}: {names!r:.80}"
            )
        lo = np.flatnonzero(np.isfinite(c.obs_min))
        hi = np.flatnonzero(np.isfinite(c.obs_max))
        soft = bool(c.soft_bounds)
        rows = [
            SafetyRow(
                name=f"{names[i]} >= {c.obs_min[i]:g}",
                kind="lower",
                soft=soft,
                label=f"{names[i]} >= {c.obs_min[i]:g}",
                formula=_plus(names[i], -float(c.obs_min[i])),
                entry=int(i),
                bound=float(c.obs_min[i]),
                entries=(int(i),),
                power=1,
            )
            for i in lo
        ]
        rows += [
            SafetyRow(
                name=f"{names[i]} <= {c.obs_max[i]:g}",
                kind="upper",
                soft=soft,
                label=f"{names[i]} <= {c.obs_max[i]:g}",
                formula=f"{c.obs_max[i]:g} - {names[i]}",
                entry=int(i),
                bound=float(c.obs_max[i]),
                entries=(int(i),),
                power=1,
            )
            for i in hi
        ]
        obs = ca.MX.sym("obs", len(names))
        h = [obs[i] - c.obs_min[i] for i in lo] + [c.obs_max[i] - obs[i] for i in hi]
        path = []
        for k, pc in enumerate(c.path):
            n = pc.function.numel_out(0)
            path.append(np.arange(len(rows), len(rows) + n))
            h.append(ca.vec(pc.function(obs)))
            for i in range(n):
                name = pc.name if n == 1 else f"{pc.name}[{i}]"
                row = dict(name=name, kind="path", soft=bool(pc.soft), constraint=k, component=i)
                if pc.circle is not None:
                    (ix, iy), (cx, cy), r = pc.circle
                    label = f"|({names[ix]}, {names[iy]}) - ({cx:g}, {cy:g})| >= {r:g}"
                    formula = f"{_squared(names[ix], cx)} + {_squared(names[iy], cy)} - {r:g}^2"
                    rows.append(
                        SafetyRow(**row, label=label, formula=formula, entries=(ix, iy), power=2)
                    )
                else:
                    formula = f"{pc.name}(obs)" + ("" if n == 1 else f"[{i}]")
                    rows.append(SafetyRow(**row, label=name, formula=formula))
        fn = ca.Function("safety", [obs], [ca.vertcat(*h) if h else ca.MX(0, 1)], ["obs"], ["h"])
        try:
            fn = fn.expand()
        except RuntimeError:  # a path constraint with a non-expandable node stays MX
            pass
        both = np.intersect1d(lo, hi)
        paired = (
            np.searchsorted(lo, both),
            lo.size + np.searchsorted(hi, both),
            c.obs_max[both] - c.obs_min[both],
        )
        return cls(c, names, tuple(rows), fn, lo, hi, tuple(path), paired)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def names(self) -> tuple[str, ...]:
        """Each row's name: ``s >= -1``, ``s <= 1``, a path constraint's name (``wall[i]``
        for a constraint of several rows)."""
        return tuple(r.name for r in self.rows)

    @property
    def lower_rows(self) -> np.ndarray:
        """The rows of the lower bounds (the entries ``lower``, in order)."""
        return np.arange(self.lower.size)

    @property
    def upper_rows(self) -> np.ndarray:
        """The rows of the upper bounds (the entries ``upper``, in order)."""
        return np.arange(self.lower.size, self.lower.size + self.upper.size)

    @property
    def soft(self) -> np.ndarray:
        """Per row, whether it is soft (a slack may relax it)."""
        return np.array([r.soft for r in self.rows], dtype=bool)

    @property
    def soft_rows(self) -> np.ndarray:
        """The soft rows in order: the bounds' with ``soft_bounds``, then the soft path
        constraints'."""
        return np.flatnonzero(self.soft)

    def empty_stages(self, tube: Any) -> np.ndarray:
        """Per stage (row of ``tube``, shape ``(stages, len(self))``: the margins of each
        safety row), whether its tightened set is empty: an entry bounded on both sides whose
        lower and upper margins together exceed its range ``obs_max - obs_min``."""
        t = np.asarray(tube, dtype=np.float64)
        if t.ndim != 2 or t.shape[1] != len(self):
            raise InputError(
                f"tube must be margins of shape (stages, {len(self)}) (one column per safety "
                f"row), got shape {t.shape}"
            )
        lo, hi, span = self.paired
        return np.any(t[:, lo] + t[:, hi] > span, axis=1)
