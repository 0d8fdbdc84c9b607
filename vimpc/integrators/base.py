"""Integrator bases: one step ``(x, u, theta) -> x_next`` of a mechanical system as CasADi.

Every integrator integrates a Lagrangian ``L(q, v, theta)``: by default the system's own
``L(q, v)`` (then ``theta`` is empty), or any CasADi-expression callable given as
``lagrangian`` with ``n_theta`` parameters, e.g. a learned one. The system still gives the
structure: coordinates, constraints, the input map and dissipation. ``theta`` is an input
of every function an integrator builds, so a model can bind it to constants or expose it as
the controller's parameter vector ``p``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import casadi as ca

from vimpc import _checks
from vimpc.errors import InputError
from vimpc.mechanics.system import MechanicalSystem

#: ``L(q, v, theta) -> scalar`` on CasADi SX column vectors.
LagrangianFn = Callable[[ca.SX, ca.SX, ca.SX], ca.SX]


class Integrator(abc.ABC):
    """Abstract one-step map of a :class:`MechanicalSystem` with state ``x = (q, v)``.

    Args:
        system: the mechanics (coordinates, constraints, forces; its Lagrangian unless
            ``lagrangian`` is given).
        lagrangian: ``L(q, v, theta)`` returning a scalar CasADi expression of SX
            symbols, replacing ``system.lagrangian``.
        n_theta: the number of parameters ``theta`` of ``lagrangian``.
    """

    order: int

    def __init__(
        self,
        system: MechanicalSystem,
        *,
        lagrangian: LagrangianFn | None = None,
        n_theta: int = 0,
    ) -> None:
        if not isinstance(system, MechanicalSystem):
            raise TypeError(f"system must be a MechanicalSystem, got {type(system).__name__}")
        self.system = system
        if isinstance(n_theta, bool) or not isinstance(n_theta, int) or n_theta < 0:
            raise InputError(f"n_theta must be a non-negative int, got {n_theta!r}")
        self.n_theta = n_theta
        if lagrangian is not None and not callable(lagrangian):
            raise InputError(
                f"lagrangian must be a callable L(q, v, theta), got {type(lagrangian).__name__}"
            )
        if lagrangian is None and n_theta:
            raise InputError(f"n_theta = {n_theta} needs a lagrangian(q, v, theta) that uses it")
        self._lagrangian = lagrangian
        if lagrangian is not None:
            self._check_lagrangian()

    def _check_lagrangian(self) -> None:
        s = self.system
        q, v, th = ca.SX.sym("q", s.nq), ca.SX.sym("v", s.nv), ca.SX.sym("theta", self.n_theta)
        try:
            L = self._lagrangian(q, v, th)
        except Exception as exc:  # a user callable: report what it raised
            raise InputError(
                f"lagrangian(q, v, theta) failed on CasADi SX symbols of sizes "
                f"({s.nq}, {s.nv}, {self.n_theta}): {type(exc).__name__}: {exc}"
            ) from exc
        # an MX (or anything else) cannot enter the SX functions built from L
        if not isinstance(L, (ca.SX, ca.DM, float, int)) or ca.SX(L).shape != (1, 1):
            shape = getattr(L, "shape", None)
            got = type(L).__name__ + ("" if shape is None else f" of shape {tuple(shape)}")
            raise InputError(
                "lagrangian(q, v, theta) must return a scalar CasADi expression of the SX "
                f"symbols it is given, got {got}"
            )

    # -- the Lagrangian and what follows from it -------------------------------------------
    def lagrangian(self, q, v, theta):
        """``L(q, v, theta)`` on CasADi symbols."""
        if self._lagrangian is None:
            return self.system.lagrangian(q, v)
        return self._lagrangian(q, v, theta)

    def _momentum_lagrangian(self) -> LagrangianFn | None:
        """The Lagrangian ``L(q, v, theta)`` of the state's momentum ``dL/dv`` and energy
        (None: the system's own)."""
        return self._lagrangian

    def _state_function(self, name: str, out: str, given, derived) -> ca.Function:
        """``(x, theta) -> given(q, v)`` for the system's own Lagrangian, else
        ``derived(L, v)`` by automatic differentiation of the given one."""
        s = self.system
        x, th = ca.SX.sym("x", s.nq + s.nv), ca.SX.sym("theta", self.n_theta)
        q, v = x[: s.nq], x[s.nq :]
        L = self._momentum_lagrangian()
        if L is None:
            value = given(q, v)
        else:
            value = derived(L(q, v, th), v)
        return ca.Function(name, [x, th], [value], ["x", "theta"], [out])

    def energy_function(self) -> ca.Function:
        """``(x, theta) -> E`` [J]: the system's energy, or ``v . dL/dv - L`` by automatic
        differentiation of a given Lagrangian."""
        return self._state_function(
            "energy", "E", self.system.energy, lambda L, v: ca.dot(v, ca.gradient(L, v)) - L
        )

    def momentum_function(self) -> ca.Function:
        """``(x, theta) -> p = dL/dv``: the system's momentum, or by automatic
        differentiation of a given Lagrangian."""
        return self._state_function(
            "momentum", "p", self.system.momentum, lambda L, v: ca.gradient(L, v)
        )

    # -- sizes ---------------------------------------------------------------------------
    @property
    def nx(self) -> int:
        return self.system.nq + self.system.nv

    @property
    def state_names(self) -> tuple[str, ...]:
        names = self.system.coordinate_names
        return (*names, *(f"{n}_dot" for n in names))

    # -- steps ---------------------------------------------------------------------------
    @abc.abstractmethod
    def step_function(self, h: float, *, error_on_fail: bool = True) -> ca.Function:
        """``(x, u, theta) -> x_next`` over one step ``h`` [s]."""

    def flow(self, dt: float, h: float, *, error_on_fail: bool = True) -> ca.Function:
        """``(x, u, theta) -> x(dt)`` by ``dt / h`` substeps of size ``h`` under a held input."""
        k = _checks.steps_per("dt", dt, h)
        step = self.step_function(h, error_on_fail=error_on_fail)
        if k == 1:
            return step
        x = ca.MX.sym("x", self.nx)
        u = ca.MX.sym("u", self.system.nu)
        th = ca.MX.sym("theta", self.n_theta)
        xs = step.mapaccum(f"{step.name()}_x{k}", k, [0], [0])(
            x, ca.repmat(u, 1, k), ca.repmat(th, 1, k)
        )
        return ca.Function(
            f"{step.name()}_dt", [x, u, th], [xs[:, -1]], ["x", "u", "theta"], ["x_next"]
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.system!r})"


class ImplicitIntegrator(Integrator):
    """Abstract integrator defined by equations ``residual(x, u, x_next, theta) = 0``."""

    @abc.abstractmethod
    def residual_function(self, h: float) -> ca.Function:
        """``(x, u, x_next, theta) -> r`` with ``r = 0`` exactly on the integrator's step."""
