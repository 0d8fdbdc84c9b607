"""The nominal model: an analytic system (possibly with wrong parameters) and an integrator."""

from __future__ import annotations

import casadi as ca

from vimpc import _checks
from vimpc.dynamics import DiscreteModel
from vimpc.integrators import (
    FORMS,
    METHODS,
    RULES,
    ExplicitIntegrator,
    ImplicitIntegrator,
    VariationalIntegrator,
)
from vimpc.mechanics.system import MechanicalSystem


class NominalModel:
    """A :class:`MechanicalSystem` integrated with a fixed method, as a :class:`DiscreteModel`.

    Args:
        system: the analytic system the model believes in.
        dt: the model (control) step [s].
        integrator: a variational rule (``"midpoint"``, ``"trapezoidal"``,
            ``"first_order"``) or an explicit method (``"euler"``,
            ``"symplectic_euler"``, ``"rk4"``).
        substeps: integrator steps per ``dt``; the model carries the integrator's
            residual (for the controller's implicit transcription) only when it is 1.
        form: ``"position_momentum"`` or ``"del"`` for variational rules (see
            :mod:`vimpc.integrators.variational`).

    The state is ``x = (q, v)``, the observation itself, so ``from_obs`` and
    ``to_obs`` are identities. In the ``"del"`` form ``v`` is the forward
    difference velocity, which the observed velocity approximates to ``O(dt)``.
    Nothing is learned: the model is ready at construction.
    """

    def __init__(
        self,
        system: MechanicalSystem,
        dt: float,
        integrator: str = "midpoint",
        substeps: int = 1,
        form: str = "position_momentum",
    ) -> None:
        if not isinstance(system, MechanicalSystem):
            raise TypeError(f"system must be a MechanicalSystem, got {type(system).__name__}")
        self.system = system
        self.dt = _checks.positive("dt", dt)
        self.integrator = _checks.one_of("integrator", integrator, (*RULES, *METHODS))
        self.substeps = _checks.positive_int("substeps", substeps)
        self.form = _checks.one_of("form", form, FORMS)

    def _integrator(self):
        if self.integrator in RULES:
            return VariationalIntegrator(self.system, self.integrator, self.form)
        return ExplicitIntegrator(self.system, self.integrator)

    def discrete_model(self, *, error_on_fail: bool = False) -> DiscreteModel:
        """The model as CasADi functions. A failed Newton solve returns its last
        iterate unless ``error_on_fail`` (the controller then sees the residual)."""
        s, integ = self.system, self._integrator()
        h = self.dt / self.substeps
        flow = integ.flow(self.dt, h, error_on_fail=error_on_fail)
        x, u, p, xn = (
            ca.MX.sym("x", integ.nx),
            ca.MX.sym("u", s.nu),
            ca.MX.sym("p", 0),
            ca.MX.sym("x_next", integ.nx),
        )
        step = ca.Function("step", [x, u, p], [flow(x, u)], ["x", "u", "p"], ["x_next"])
        residual = None
        if isinstance(integ, ImplicitIntegrator) and self.substeps == 1:
            r = integ.residual_function(h)
            residual = ca.Function(
                "residual", [x, u, xn, p], [r(x, u, xn)], ["x", "u", "x_next", "p"], ["r"]
            )
        obs = ca.MX.sym("obs", integ.nx)
        constraint = None
        if s.n_holonomic:
            constraint = ca.Function("constraint", [x], [s.function("g")(x[: s.nq])], ["x"], ["g"])
        return DiscreteModel(
            dt=self.dt,
            nx=integ.nx,
            nu=s.nu,
            np=0,
            nobs=integ.nx,
            step=step,
            residual=residual,
            from_obs=ca.Function("from_obs", [obs], [obs], ["obs"], ["x"]),
            to_obs=ca.Function("to_obs", [x], [x], ["x"], ["obs"]),
            constraint=constraint,
            state_names=integ.state_names,
            input_names=s.input_names,
            info={
                "model": "nominal",
                "system": s.name,
                "params": dict(s.params),
                "friction": s.friction.tolist(),
                "integrator": self.integrator,
                "form": self.form,
                "substeps": self.substeps,
            },
        )

    def __repr__(self) -> str:
        return (
            f"NominalModel({self.system!r}, dt={self.dt}, integrator={self.integrator!r}, "
            f"substeps={self.substeps})"
        )
