"""Gaussian processes on the one-step residual of an explicit nominal step (family
``"gp_residual"``): the black-box GP-MPC of Hewing et al. (2020) and safe-control-gym's
``gp_mpc``, for comparison with the structure-preserving families on the same data,
budgets, controller and calibration.

The nominal step ``f_nom`` integrates the nominal system's ODE by an explicit method (RK4
by default, :mod:`vimpc.models.families._residual`); one independent GP per state entry learns the
residual ``x_next - f_nom(x, u)`` of the measured transitions from the inputs ``(q, v, u)``
(with ``coordinates = "sincos"`` every angle as its sine and cosine; inputs constant in
the data are dropped). Kernels, the marginal-likelihood fit of the hyperparameters (several
starts) and the exact or sparse (DTC, ``support_points``) posterior are those of
:mod:`~vimpc.models.families.gp_vi` (:mod:`vimpc.models._gp`).

The exported model is mean-equivalent: ``step(x, u) = f_nom(x, u) + mean(x, u)``, an
explicit step with the posterior means as CasADi expressions. It is a black box: no
energy, no constraint (the four-bar's loop closure and the rolling disk's rolling drift
away under the step), no momentum conservation, hence no ``energy``, ``constraint``,
``velocity_constraint`` or ``residual`` field. Bounds on the one-step error: ``bound =
"conformal"`` (with ``conformal_scale = "spread"``: the GPs' posterior standard deviation,
noise included, calibrated on held-out data), or ``bound = "theorem1"``: each GP's uniform
error bound (Lederer et al. 2019) on the box of its training inputs plus a Gaussian
quantile of its noise, as gp_vi's Theorem 1 bound without a projection.
"""

from __future__ import annotations

from statistics import NormalDist

import casadi as ca
import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.models._gp import draw_samples, fitted_state, uniform_error_bound, varying_columns
from vimpc.models.base import SpreadFamily
from vimpc.models.calibration import Bound
from vimpc.models.families._residual import NOMINAL_SETTINGS, ExplicitNominal
from vimpc.models.families.gp_vi import GPVIModel

#: gp_vi's GP settings, declared there once
_GP_SETTINGS = ("coordinates", "samples", "support_points", "restarts", "iterations", "seed")


class GPResidualModel(SpreadFamily):
    """Independent GPs on the one-step residual of an explicit nominal step.

    Args:
        system: the nominal system (its parameters may be wrong) and the structure
            (coordinates, inputs).
        dt: the model step [s].
        integrator, substeps, coordinates, samples, support_points, restarts, iterations,
            seed, and the bound settings: see :attr:`settings`.

    Fitted attributes: ``posteriors_`` (one :class:`~vimpc.models._gp.Posterior` per state
    entry), ``inputs_`` (the indices of ``(features, u)`` the GPs take), ``n_samples_``,
    ``domain_`` (the box of the training inputs, where the Theorem 1 bound holds) and
    ``median_std_`` (each GP's median posterior standard deviation there).
    """

    name = "gp_residual"
    bound_methods = {
        "theorem1": "each GP's uniform error bound (Lederer et al. 2019) on the box of its "
        "training inputs, plus a Gaussian quantile of its noise",
    }
    settings = {
        **NOMINAL_SETTINGS,
        **{key: GPVIModel.settings[key] for key in _GP_SETTINGS},
    }

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        self._nominal = ExplicitNominal(self.system, self.dt, self.integrator, self.substeps)

    # -- the family's hooks ---------------------------------------------------------------------
    def _provides(self) -> set[str]:
        return set()

    def _fit(self, data: Dataset | None) -> None:
        X, U, Xn = data.pairs("obs")
        pick, notes = draw_samples(len(X), self.samples, self.seed)
        self.fit_notes_ += notes
        X, U, Xn = X[pick], U[pick], Xn[pick]
        if len(X) < 2:
            raise InputError(f"gp_residual needs at least 2 training pairs, the data hold {len(X)}")
        targets = self._nominal.residuals("gp_residual", X, U, Xn)
        Z = self._nominal.inputs(self.coordinates, X, U)
        keep = varying_columns(Z)
        Z = Z[:, keep]
        state, notes = fitted_state(
            Z, targets, restarts=self.restarts, iterations=self.iterations, seed=self.seed,
            support=self.support_points,
        )  # fmt: skip
        self.fit_notes_ += notes
        self.inputs_ = keep
        vars(self).update(state)

    def _gp_input(self, x, u):
        z = self._nominal.inputs(self.coordinates, x, u)
        return ca.vertcat(*[z[int(i)] for i in self.inputs_])

    def _symbols(self):
        """``x, u, p`` of the exported model's sizes (``p``: the posteriors' numbers)."""
        nx, n_p = self._nominal.nx, sum(post.mean_parameters().size for post in self.posteriors_)
        return ca.MX.sym("x", nx), ca.MX.sym("u", self.system.nu), ca.MX.sym("p", n_p)

    def correction(self) -> ca.Function:
        """``(x, u) -> d``: the GPs' posterior means, one per state entry (SX)."""
        self._require_fitted("correction()")
        return self._correction()

    def _correction(self) -> ca.Function:
        x, u = ca.SX.sym("x", self._nominal.nx), ca.SX.sym("u", self.system.nu)
        z = self._gp_input(x, u)
        means = ca.vertcat(*[post.casadi_mean(z) for post in self.posteriors_])
        return ca.Function("gp_mean", [x, u], [means], ["x", "u"], ["d"])

    def _build(self) -> DiscreteModel:
        info = {**self.info(), "n_samples": int(self.n_samples_)}
        info["support_points"] = [len(post.support) for post in self.posteriors_]
        # the posteriors' numbers are the model's parameters: one compiled controller serves
        # every fit with as many support points
        thetas = [post.mean_parameters() for post in self.posteriors_]
        x, u = ca.SX.sym("x", self._nominal.nx), ca.SX.sym("u", self.system.nu)
        theta = ca.SX.sym("theta", sum(t.size for t in thetas))
        z, means, at = self._gp_input(x, u), [], 0
        for post, t in zip(self.posteriors_, thetas, strict=True):
            means.append(post.casadi_mean_of(z, theta[at : at + t.size]))
            at += t.size
        correction = ca.Function(
            "gp_mean", [x, u, theta], [ca.vertcat(*means)], ["x", "u", "p"], ["d"]
        )
        names = tuple(f"gp{i}_{j}" for i, t in enumerate(thetas) for j in range(t.size))
        return self._nominal.corrected(correction, info, np.concatenate(thetas), names)

    def _spread(self) -> ca.Function:
        """Each state entry's posterior standard deviation, its GP's noise included."""
        x, u, p = self._symbols()
        z = self._gp_input(x, u)
        std = ca.vertcat(
            *[ca.sqrt(post.casadi_var(z) + post.hp.noise_var) for post in self.posteriors_]
        )
        return ca.Function("spread", [x, u, p], [std], ["x", "u", "p"], ["s"])

    def _own_bound(self) -> Bound:
        """Each GP's uniform error bound on the box of its training inputs at ``delta /
        (2 nx)``, plus its noise's two-sided Gaussian quantile at ``delta / (2 nx)``: the
        union over the ``nx`` entries and the two parts holds with ``1 - delta``. As gp_vi's
        Theorem 1 bound, it assumes the residual is a sample of the GP its hyperparameters
        describe; its coverage on real data is measured, not guaranteed."""
        nx = self._nominal.nx
        low, high = self.domain_
        bounds = [
            uniform_error_bound(post, low, high, self.delta / (2 * nx), std_ref=ref)
            for post, ref in zip(self.posteriors_, self.median_std_, strict=True)
        ]
        noise_quantile = NormalDist().inv_cdf(1.0 - self.delta / (4 * nx))
        x, u, p = self._symbols()
        z = self._gp_input(x, u)
        e = ca.vertcat(
            *[
                np.sqrt(b.beta) * ca.sqrt(post.casadi_var(z))
                + b.gamma
                + noise_quantile * np.sqrt(post.hp.noise_var)
                for b, post in zip(bounds, self.posteriors_, strict=True)
            ]
        )
        function = ca.Function("bound", [x, u, p], [e], ["x", "u", "p"], ["e"])
        figures = {
            "sqrt_beta": [float(np.sqrt(b.beta)) for b in bounds],
            "gamma": [b.gamma for b in bounds],
            "tau": [b.tau for b in bounds],
            "lipschitz_f": [b.lipschitz_f for b in bounds],
            "noise_quantile": noise_quantile,
            "domain_low": low.tolist(),
            "domain_high": high.tolist(),
        }
        method = "GP uniform error bound (Lederer et al. 2019) per state entry"
        return Bound(function, self.delta, "theorem", method, figures)
