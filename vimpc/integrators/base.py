"""Integrator bases: one step ``(x, u) -> x_next`` of a mechanical system as CasADi."""

from __future__ import annotations

import abc

import casadi as ca

from vimpc import _checks
from vimpc.mechanics.system import MechanicalSystem


class Integrator(abc.ABC):
    """Abstract one-step map of a :class:`MechanicalSystem` with state ``x = (q, v)``."""

    order: int

    def __init__(self, system: MechanicalSystem) -> None:
        if not isinstance(system, MechanicalSystem):
            raise TypeError(f"system must be a MechanicalSystem, got {type(system).__name__}")
        self.system = system

    @property
    def nx(self) -> int:
        return self.system.nq + self.system.nv

    @property
    def state_names(self) -> tuple[str, ...]:
        names = self.system.coordinate_names
        return (*names, *(f"{n}_dot" for n in names))

    @abc.abstractmethod
    def step_function(self, h: float, *, error_on_fail: bool = True) -> ca.Function:
        """``(x, u) -> x_next`` over one step ``h`` [s]."""

    def flow(self, dt: float, h: float, *, error_on_fail: bool = True) -> ca.Function:
        """``(x, u) -> x(dt)`` by ``dt / h`` substeps of size ``h`` under a held input."""
        k = _checks.steps_per("dt", dt, h)
        step = self.step_function(h, error_on_fail=error_on_fail)
        if k == 1:
            return step
        x = ca.MX.sym("x", self.nx)
        u = ca.MX.sym("u", self.system.nu)
        xs = step.mapaccum(f"{step.name()}_x{k}", k)(x, ca.repmat(u, 1, k))
        return ca.Function(f"{step.name()}_dt", [x, u], [xs[:, -1]], ["x", "u"], ["x_next"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.system!r})"


class ImplicitIntegrator(Integrator):
    """Abstract integrator defined by equations ``residual(x, u, x_next) = 0``."""

    @abc.abstractmethod
    def residual_function(self, h: float) -> ca.Function:
        """``(x, u, x_next) -> r`` with ``r = 0`` exactly on the integrator's step."""
