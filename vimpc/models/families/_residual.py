"""The explicit nominal step of the black-box residual families (``gp_residual``,
``mlp_residual``) and the model they export: the nominal step plus a learned correction.

The state is the observation ``x = (q, v)``. The nominal step integrates the nominal
system's ODE, the forced Euler–Lagrange equations solved for the acceleration (with
holonomic and nonholonomic constraints imposed at the acceleration level, as
:func:`vimpc.integrators.acceleration` does, so they drift), by an explicit method
(:class:`vimpc.integrators.ExplicitIntegrator`) in ``substeps`` steps per ``dt``. A learned
map ``d(x, u)`` corrects it on the one-step residual of the data (Hewing et al. 2020's
GP-MPC, safe-control-gym's ``gp_mpc``):

    x_next = f_nom(x, u) + d(x, u),        d ~ x_next_data - f_nom(x_data, u_data).

Nothing of the mechanics survives the correction: the exported model is an explicit
``step`` with neither ``residual`` (it is not an implicit model) nor ``energy``,
``constraint`` or ``velocity_constraint``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import SUBSTEPS, Setting
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.integrators import METHODS
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _features
from vimpc.models.families.nominal import NominalModel

#: The settings of the nominal step, declared once for both residual families.
NOMINAL_SETTINGS: dict[str, Setting] = {
    "integrator": Setting(
        str,
        "rk4",
        "explicit method of the nominal step (the ODE with constraints at acceleration level)",
        choices=("rk4", *(m for m in METHODS if m != "rk4")),
    ),
    "substeps": Setting(int, 1, "explicit steps of the nominal step per dt", rule=SUBSTEPS),
}


def coordinates_setting(what: str) -> Setting:
    """The ``coordinates`` setting of a family whose ``what`` take ``(q, v, u)``."""
    return Setting(
        str,
        "minimal",
        f"{what}: `(q, v, u)`, or with every angle as its sine and cosine",
        choices=_features.COORDINATES,
    )


class ExplicitNominal:
    """The nominal step of ``system`` over ``dt``: ``method`` in ``substeps`` steps.

    Args:
        system: the nominal system (its parameters may be wrong).
        dt: the model step [s].
        method: ``"rk4"``, ``"euler"`` or ``"symplectic_euler"``.
        substeps: explicit steps per ``dt``.
    """

    def __init__(self, system: MechanicalSystem, dt: float, method: str, substeps: int) -> None:
        self.system = system
        self.model = NominalModel(system, dt, integrator=method, substeps=substeps).discrete_model()

    @property
    def nx(self) -> int:
        return self.system.nq + self.system.nv

    def inputs(self, coordinates: str, x, u):
        """The learned map's inputs ``(q or its sines and cosines, v, u)`` of the states
        ``x`` and inputs ``u``: rows of numpy, or one CasADi column."""
        nq = self.system.nq
        if isinstance(x, np.ndarray):
            return _features.embed(self.system, coordinates, x[:, :nq], x[:, nq:], u)
        return _features.embed(self.system, coordinates, x[:nq], x[nq:], u)

    def predict(self, X: np.ndarray, U: np.ndarray) -> np.ndarray:
        """The nominal next states of the rows ``X (n, nx)``, ``U (n, nu)``."""
        step = self.model.step.map(len(X))
        return np.asarray(step(X.T, U.T, np.zeros((0, len(X))))).T

    def residuals(self, family: str, X: np.ndarray, U: np.ndarray, Xn: np.ndarray) -> np.ndarray:
        """``Xn - f_nom(X, U)``, the one-step residuals the correction learns.

        Raises:
            InputError: data that are not finite, or a nominal step that is not finite at
                some training transitions (named by row).
        """
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(U)) and np.all(np.isfinite(Xn))):
            raise InputError(f"{family}: the training data contain NaN or inf")
        targets = Xn - self.predict(X, U)
        bad = np.flatnonzero(~np.all(np.isfinite(targets), axis=1))
        if bad.size:
            raise InputError(
                f"{family}: the nominal {self.model.info['settings']['integrator']} step is not "
                f"finite at {bad.size} of {len(X)} training transitions (first: x = "
                f"{X[bad[0]].tolist()}, u = {U[bad[0]].tolist()}); the data lie where the "
                "nominal ODE is singular or overflows (check the observations' coordinates, "
                "or use more substeps)"
            )
        return targets

    def corrected(
        self,
        correction: ca.Function,
        info: Mapping[str, Any],
        p_default: np.ndarray,
        param_names: tuple[str, ...],
    ) -> DiscreteModel:
        """The exported model ``x_next = f_nom(x, u) + correction(x, u, p)``: the correction's
        learned numbers are the model's parameters ``p`` (``p_default``, named
        ``param_names``), so that a controller compiled for one fit serves every fit of the
        same shape."""
        s, nx = self.system, self.nx
        p_default = np.asarray(p_default, np.float64)
        x, u, p = ca.MX.sym("x", nx), ca.MX.sym("u", s.nu), ca.MX.sym("p", p_default.size)
        x_next = self.model.step(x, u, ca.MX(0, 1)) + correction(x, u, p)
        step = ca.Function("step", [x, u, p], [x_next], ["x", "u", "p"], ["x_next"])
        return DiscreteModel(
            dt=self.model.dt,
            nx=nx,
            nu=s.nu,
            np=p_default.size,
            nobs=nx,
            step=step,
            from_obs=self.model.from_obs,
            to_obs=self.model.to_obs,
            state_names=self.model.state_names,
            input_names=s.input_names,
            param_names=tuple(param_names),
            p_default=p_default,
            info=dict(info),
        )
