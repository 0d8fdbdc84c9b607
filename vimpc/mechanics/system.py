"""Mechanical systems declared once, evaluated on numpy arrays or CasADi symbols.

A system is a Lagrangian ``L(q, v)`` with optional holonomic constraints
``g(q) = 0``, nonholonomic constraints ``A(q) v = 0``, an input map ``B(q)`` and
Rayleigh dissipation ``R(q, v) = 1/2 sum_k c_k (w_k(q) v)^2`` (viscous friction on
the rates ``W(q) v``). Every method takes ``q`` and ``v`` as 1-D numpy arrays
(returns numpy) or as CasADi column vectors (returns CasADi expressions).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc.errors import InputError
from vimpc.mechanics import _ops as ops


class MechanicalSystem(abc.ABC):
    """Abstract forced mechanical system.

    Subclasses declare:
        defaults: scalar physical parameters and their default values; a default
            of ``None`` is derived by :meth:`_derive` (e.g. ``J = m l^2 / 12``).
        inertial: parameters that are masses or inertias (perturbed by
            :meth:`perturbed`); these and ``lengths`` must be > 0.
        lengths: geometric parameters that must be > 0.
    """

    defaults: ClassVar[Mapping[str, float | None]] = {}
    inertial: ClassVar[tuple[str, ...]] = ()
    lengths: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, friction: Any = None, **params: float) -> None:
        _checks.known_keys(f"{type(self).__name__} parameters", params, self.defaults)
        values: dict[str, float | None] = dict(self.defaults)
        values.update(params)
        for name in (*self.inertial, *self.lengths):
            if values.get(name) is not None:
                values[name] = _checks.positive(f"{type(self).__name__}.{name}", values[name])
        for name, value in values.items():
            if value is not None and name not in self.inertial and name not in self.lengths:
                try:
                    values[name] = float(value)
                except (TypeError, ValueError):
                    raise InputError(
                        f"{type(self).__name__}.{name} must be a number, got {value!r}"
                    ) from None
                if not np.isfinite(values[name]):
                    raise InputError(f"{type(self).__name__}.{name} must be finite, got {value!r}")
        values = self._derive(values)
        self._params = MappingProxyType({k: float(v) for k, v in values.items()})
        self._validate()
        n_rates = self.n_rates
        if friction is None:
            friction = np.zeros(n_rates)
        friction = _checks.finite_vector(f"{type(self).__name__}.friction", friction, n_rates)
        if np.any(friction < 0):
            raise InputError(
                f"{type(self).__name__}.friction must be >= 0 (viscous coefficients), "
                f"got {friction.tolist()}"
            )
        self._friction = friction
        self._functions: dict[str, ca.Function] = {}

    # -- parameters -------------------------------------------------------------
    def _derive(self, values: dict[str, float | None]) -> dict[str, float]:
        """Fill parameters whose default is ``None``; override in subclasses."""
        missing = [k for k, v in values.items() if v is None]
        if missing:
            raise InputError(f"{type(self).__name__} needs values for {missing}")
        return values  # type: ignore[return-value]

    def _validate(self) -> None:  # noqa: B027  (an optional hook)
        """Check relations between parameters; override where a geometry needs it."""

    @property
    def params(self) -> Mapping[str, float]:
        """The physical parameters (SI units)."""
        return self._params

    @property
    def friction(self) -> np.ndarray:
        """Viscous coefficients ``c_k`` of the dissipation rates ``W(q) v``."""
        return self._friction.copy()

    def _extra_kwargs(self) -> dict[str, Any]:
        """Constructor arguments that are not physical parameters."""
        return {}

    def with_params(self, *, friction: Any = None, **changes: float) -> MechanicalSystem:
        """A copy with some parameters (and optionally the friction) replaced."""
        _checks.known_keys(f"{type(self).__name__} parameters", changes, self.defaults)
        values = dict(self._params)
        values.update(changes)
        kwargs = {k: v for k, v in values.items() if k in self.defaults}
        return type(self)(
            friction=self._friction if friction is None else friction,
            **self._extra_kwargs(),
            **kwargs,
        )

    def perturbed(self, spread: float, rng: np.random.Generator) -> MechanicalSystem:
        """A copy whose masses and inertias are scaled by factors drawn from
        ``U(1 - spread, 1 + spread)`` (the GP-VI paper's experiments use 0.1)."""
        spread = _checks.nonnegative("spread", spread)
        if spread >= 1.0:
            raise InputError(f"spread must be < 1 so masses stay positive, got {spread!r}")
        factors = rng.uniform(1.0 - spread, 1.0 + spread, size=len(self.inertial))
        changes = {k: self._params[k] * f for k, f in zip(self.inertial, factors, strict=True)}
        return self.with_params(**changes)

    # -- sizes and names ---------------------------------------------------------
    @property
    @abc.abstractmethod
    def coordinate_names(self) -> tuple[str, ...]:
        """Names of the generalized coordinates ``q``."""

    @property
    @abc.abstractmethod
    def input_names(self) -> tuple[str, ...]:
        """Names of the inputs ``u``."""

    @property
    @abc.abstractmethod
    def coordinate_units(self) -> tuple[str, ...]:
        """SI units of the coordinates ``q`` (``"rad"``, ``"m"``; ``""`` when dimensionless)."""

    @property
    @abc.abstractmethod
    def input_units(self) -> tuple[str, ...]:
        """SI units of the inputs ``u`` (``"N"`` for a force, ``"N m"`` for a torque)."""

    @property
    def velocity_units(self) -> tuple[str, ...]:
        """Units of the generalized velocities ``v``: those of ``q`` per second."""
        return tuple(f"{u}/s" if u else "1/s" for u in self.coordinate_units)

    @property
    def state_units(self) -> tuple[str, ...]:
        """Units of the state ``(q, v)``, entry by entry."""
        return (*self.coordinate_units, *self.velocity_units)

    @property
    def nq(self) -> int:
        return len(self.coordinate_names)

    @property
    def nv(self) -> int:
        return self.nq

    @property
    def nu(self) -> int:
        return len(self.input_names)

    @property
    def n_holonomic(self) -> int:
        return 0

    @property
    def n_nonholonomic(self) -> int:
        return 0

    @property
    def n_rates(self) -> int:
        """Number of dissipation rates (rows of :meth:`rate_map`)."""
        return self.nv

    @property
    def name(self) -> str:
        return type(self).__name__

    # -- the mechanics -----------------------------------------------------------
    @abc.abstractmethod
    def lagrangian(self, q, v):
        """``L(q, v)`` in joules."""

    @abc.abstractmethod
    def energy(self, q, v):
        """Total mechanical energy in joules."""

    @abc.abstractmethod
    def momentum(self, q, v):
        """Conjugate momentum ``dL/dv``."""

    @abc.abstractmethod
    def input_map(self, q):
        """``B(q)``, shape ``(nv, nu)``: the generalized force of input ``u`` is ``B u``."""

    def holonomic(self, q):
        """``g(q)``, shape ``(n_holonomic,)``; empty for unconstrained systems."""
        return ops.zeros(0, like=q)

    def nonholonomic(self, q):
        """``A(q)``, shape ``(n_nonholonomic, nv)``: the constraint is ``A(q) v = 0``."""
        return ops.zeros(0, self.nv, like=q)

    def rate_map(self, q):
        """``W(q)``, shape ``(n_rates, nv)``: the rates that viscous friction acts on."""
        return ops.eye(self.nv, like=q)

    def dissipation(self, q, v):
        """Rayleigh dissipation ``R = 1/2 sum_k c_k (W v)_k^2`` in watts / 2."""
        w = ops.matvec(self.rate_map(q), v)
        return 0.5 * ops.quad(ops.diag(list(self._friction), like=w), w)

    def generalized_force(self, q, v, u):
        """Non-conservative generalized force ``B(q) u - dR/dv``."""
        W = self.rate_map(q)
        damping = ops.matvec(
            W.T, ops.matvec(ops.diag(list(self._friction), like=v), ops.matvec(W, v))
        )
        return ops.matvec(self.input_map(q), u) - damping

    def holonomic_jacobian(self, q):
        """``G(q) = dg/dq``, by automatic differentiation of :meth:`holonomic`."""
        return self._evaluate("G", q)

    def mass_matrix(self, q):
        """``d^2 L / dv^2``, by automatic differentiation unless a subclass gives it."""
        return self._evaluate("M", q)

    def sketch(self, q) -> list[np.ndarray]:
        """Polylines (arrays of shape ``(k, 2)``, metres) that draw the mechanism at ``q``."""
        return []

    # -- CasADi functions ----------------------------------------------------------
    def marker(self, q) -> np.ndarray:
        """The point whose path plots follow: the end of the last sketched line [m]."""
        return self.sketch(q)[-1][-1]

    def function(self, name: str) -> ca.Function:
        """A cached CasADi function of the system, on SX symbols.

        Names: ``L(q,v)``, ``E(q,v)``, ``p(q,v)``, ``M(q)``, ``B(q)``, ``F(q,v,u)``,
        ``g(q)``, ``G(q)``, ``A(q)``, ``W(q)``.
        """
        if name not in self._functions:
            self._functions[name] = self._build(name)
        return self._functions[name]

    def _build(self, name: str) -> ca.Function:
        q = ca.SX.sym("q", self.nq)
        v = ca.SX.sym("v", self.nv)
        u = ca.SX.sym("u", self.nu)
        L = self.lagrangian(q, v)
        table = {
            "L": ([q, v], lambda: L),
            "E": ([q, v], lambda: self.energy(q, v)),
            "p": ([q, v], lambda: self.momentum(q, v)),
            "M": ([q], lambda: ca.substitute(ca.hessian(L, v)[0], v, ca.DM.zeros(self.nv))),
            "B": ([q], lambda: self.input_map(q)),
            "F": ([q, v, u], lambda: self.generalized_force(q, v, u)),
            "g": ([q], lambda: self.holonomic(q)),
            "G": ([q], lambda: ca.jacobian(self.holonomic(q), q)),
            "A": ([q], lambda: self.nonholonomic(q)),
            "W": ([q], lambda: self.rate_map(q)),
        }
        if name not in table:
            _checks.one_of("function name", name, table)
        args, expr = table[name]
        return ca.Function(f"{self.name}_{name}", args, [expr()])

    def _evaluate(self, name: str, q):
        """A matrix function of ``q``: CasADi on symbols, a 2-D float64 array on numbers."""
        fn = self.function(name)
        if ops.symbolic(q):
            return fn(q)
        return np.asarray(fn(np.asarray(q, dtype=np.float64)), dtype=np.float64)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v:.6g}" for k, v in self._params.items())
        return f"{type(self).__name__}({params})"


class NaturalSystem(MechanicalSystem):
    """Abstract system with ``L = 1/2 v^T M(q) v - V(q)``."""

    @abc.abstractmethod
    def mass_matrix(self, q):
        """``M(q)``, symmetric positive definite, shape ``(nv, nv)``."""

    @abc.abstractmethod
    def potential(self, q):
        """``V(q)`` in joules."""

    def lagrangian(self, q, v):
        return 0.5 * ops.quad(self.mass_matrix(q), v) - self.potential(q)

    def energy(self, q, v):
        return 0.5 * ops.quad(self.mass_matrix(q), v) + self.potential(q)

    def momentum(self, q, v):
        return ops.matvec(self.mass_matrix(q), v)
