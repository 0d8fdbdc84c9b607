"""An integrator of a (possibly learned) Lagrangian as a :class:`DiscreteModel`.

Every family whose model is an integrator (the nominal model; later the Lagrangian ones)
builds its DiscreteModel here, so that the parameters ``theta`` of a learned Lagrangian
are either fixed constants or the model's parameter vector ``p`` (then a controller can
change them at every solve), with the same numbers either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.integrators import ImplicitIntegrator, Integrator, VariationalIntegrator


def integrator_model(
    integrator: Integrator,
    dt: float,
    *,
    substeps: int = 1,
    theta: Any = None,
    theta_as_parameters: bool = False,
    theta_names: Sequence[str] | None = None,
    info: Mapping[str, Any] | None = None,
) -> DiscreteModel:
    """The DiscreteModel of ``integrator`` over ``dt`` in ``substeps`` steps.

    Args:
        integrator: the one-step map (with its Lagrangian's ``n_theta`` parameters).
        dt: the model step [s].
        substeps: integrator steps per ``dt``; the model carries the integrator's
            ``residual`` (for the controller's implicit transcription) only when it is 1.
        theta: the Lagrangian's parameter values, ``(n_theta,)``.
        theta_as_parameters: expose ``theta`` as the model's ``p`` (``p_default = theta``)
            instead of fixing it as constants.
        theta_names: names of the entries of ``p`` (default ``theta0, theta1, ...``).
        info: provenance to record.

    The state is ``x = (q, v)``, the observation itself, so ``from_obs`` and ``to_obs``
    are identities. The model's ``energy`` is the integrator's (the system's, or
    ``v . dL/dv - L`` of a given Lagrangian); ``constraint`` and ``velocity_constraint``
    are the system's holonomic ``g(q)`` and nonholonomic ``A(q) v`` where it has them.
    """
    s = integrator.system
    dt = _checks.positive("dt", dt)
    substeps = _checks.positive_int("substeps", substeps)
    n_theta = integrator.n_theta
    theta = np.zeros(0) if theta is None else np.asarray(theta, dtype=np.float64).reshape(-1)
    if theta.shape != (n_theta,) or not np.all(np.isfinite(theta)):
        raise InputError(
            f"theta must be {n_theta} finite numbers (the Lagrangian's parameters), got "
            f"{theta.tolist()}"
        )
    if theta_names is None:
        theta_names = tuple(f"theta{i}" for i in range(n_theta))
    if len(theta_names) != n_theta:
        raise InputError(f"theta_names must have {n_theta} entries, got {list(theta_names)}")
    nx = integrator.nx
    x, u, xn = ca.MX.sym("x", nx), ca.MX.sym("u", s.nu), ca.MX.sym("x_next", nx)
    if theta_as_parameters:
        p = ca.MX.sym("p", n_theta)
        th = p
    else:
        p = ca.MX.sym("p", 0)
        th = ca.MX(ca.DM(theta))
    flow = integrator.flow(dt, dt / substeps, error_on_fail=False)
    step = ca.Function("step", [x, u, p], [flow(x, u, th)], ["x", "u", "p"], ["x_next"])
    residual = None
    if isinstance(integrator, ImplicitIntegrator) and substeps == 1:
        r = integrator.residual_function(dt)
        residual = ca.Function(
            "residual", [x, u, xn, p], [r(x, u, xn, th)], ["x", "u", "x_next", "p"], ["r"]
        )
    energy = ca.Function("energy", [x, p], [integrator.energy_function()(x, th)], ["x", "p"], ["E"])
    q, v = x[: s.nq], x[s.nq :]
    constraint = velocity_constraint = None
    if s.n_holonomic:
        constraint = ca.Function("constraint", [x], [s.function("g")(q)], ["x"], ["g"])
    if s.n_nonholonomic:
        velocity_constraint = ca.Function(
            "velocity_constraint", [x], [ca.mtimes(s.function("A")(q), v)], ["x"], ["Av"]
        )
    info = dict(info or {})
    if isinstance(integrator, VariationalIntegrator):
        # a step whose root fails this test is NaN: the threshold travels with the model
        info["step_acceptance"] = integrator.acceptance()
    obs = ca.MX.sym("obs", nx)
    return DiscreteModel(
        dt=dt,
        nx=nx,
        nu=s.nu,
        np=n_theta if theta_as_parameters else 0,
        nobs=nx,
        step=step,
        residual=residual,
        energy=energy,
        from_obs=ca.Function("from_obs", [obs], [obs], ["obs"], ["x"]),
        to_obs=ca.Function("to_obs", [x], [x], ["x"], ["obs"]),
        constraint=constraint,
        velocity_constraint=velocity_constraint,
        state_names=integrator.state_names,
        input_names=s.input_names,
        param_names=tuple(theta_names) if theta_as_parameters else (),
        p_default=theta if theta_as_parameters else np.zeros(0),
        info=info,
    )
