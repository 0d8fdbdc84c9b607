"""GP-augmented variational integrator (family ``"gp_vi"``): Gaussian processes learn the
next velocity on top of a nominal variational integrator (Brüdigam et al., eqs. 7, 9-10).

Training pairs ``z_k = (q_k, v_k, u_k) -> v_{k+1}`` come from measured transitions. The
prior model is a nominal variational integrator of the given system (whose parameters
may be wrong): the paper's first-order one in its forward-difference form, or the
midpoint one, which stays accurate at larger steps; or there is none. One GP per velocity
component learns the correction ``dv`` the prior misses, and the step is
``x_{k+1} = prior(x_k, u_k) + (dt dv, dv)``: with the first-order prior exactly the
paper's ``v_{k+1} = v_prior + dv``, ``q_{k+1} = q_k + dt v_{k+1}``; with none,
``v_{k+1} = dv``, ``q_{k+1} = q_k + dt v_{k+1}``. Inputs that are constant in the data are dropped; with
``coordinates = "sincos"`` every angle (a coordinate in rad) enters as its sine and
cosine.

The exported model's ``step`` is the prior's step with the GP means added, as CasADi
expressions: the exact posterior on every training sample, or its DTC approximation on
``support_points`` samples spread over the data, so a controller's cost grows with the
support points only. The GPs' posterior standard deviations are the family's spread, so
``bound = "conformal"`` with ``conformal_scale = "spread"`` calibrates a state-dependent
bound.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.models.base import SpreadFamily
from vimpc.models.gp import Posterior, fit_hyperparameters, support_points
from vimpc.models.nominal import NominalModel


class GPVIModel(SpreadFamily):
    """Gaussian processes on the next velocity, on top of a nominal variational integrator.

    Args:
        system: the system of the prior model (its parameters may be wrong) and of the
            structure (coordinates, inputs).
        dt: the model step [s].
        prior, coordinates, samples, support_points, restarts, iterations, seed, and the
            bound settings: see :attr:`settings`.

    Fitted attributes: ``posteriors_`` (one :class:`~vimpc.models.gp.Posterior` per
    velocity component), ``inputs_`` (the indices of ``(features, u)`` the GPs take).
    """

    name = "gp_vi"
    settings = {
        "prior": Setting(
            str,
            "midpoint",
            "prior model: the nominal midpoint VI, the paper's first-order VI (forward-"
            "difference form), or none (`zero`)",
            choices=("midpoint", "first_order", "zero"),
        ),
        "coordinates": Setting(
            str,
            "minimal",
            "GP inputs: `(q, v, u)`, or with every angle as its sine and cosine",
            choices=("minimal", "sincos"),
        ),
        "samples": Setting(
            int, 512, "training pairs drawn from the data (0: all of them)", rule=NONNEGATIVE
        ),
        "support_points": Setting(
            int,
            0,
            "support points of the exported posterior (0: every sample, the exact GP)",
            rule=NONNEGATIVE,
        ),
        "restarts": Setting(
            int, 3, "hyperparameter optimisations from other starts", rule=POSITIVE
        ),
        "iterations": Setting(int, 150, "optimiser steps per start", rule=POSITIVE),
        "seed": Setting(int, 0, "seed of the sample draw, the starts and the support points"),
    }

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        s = self.system
        if s.n_holonomic or s.n_nonholonomic:
            raise InputError(
                f"gp_vi takes systems without constraints (minimal coordinates); {s.name} has "
                f"{s.n_holonomic} holonomic and {s.n_nonholonomic} nonholonomic constraints"
            )
        if s.nq != s.nv:
            raise InputError(f"gp_vi needs as many velocities as coordinates; {s.name} has not")
        form = "del" if self.prior == "first_order" else "position_momentum"
        integrator = "first_order" if self.prior == "first_order" else "midpoint"
        self._prior = NominalModel(s, dt, integrator=integrator, form=form).discrete_model()

    # -- features -------------------------------------------------------------------------------
    def _angles(self) -> list[int]:
        if self.coordinates == "minimal":
            return []
        return [i for i, unit in enumerate(self.system.coordinate_units) if unit == "rad"]

    def _features(self, q, v, u, lib):
        """``(q or its sines and cosines, v, u)`` as a column (CasADi) or rows (numpy)."""
        angles = set(self._angles())
        if lib is np:
            parts = []
            for i in range(q.shape[1]):
                parts += [np.sin(q[:, i]), np.cos(q[:, i])] if i in angles else [q[:, i]]
            return np.column_stack([*parts, v, u])
        parts = []
        for i in range(q.shape[0]):
            parts += [ca.sin(q[i]), ca.cos(q[i])] if i in angles else [q[i]]
        return ca.vertcat(*parts, v, u)

    def _prior_velocity(self, X: np.ndarray, U: np.ndarray) -> np.ndarray:
        nq = self.system.nq
        if self.prior == "zero":
            return np.zeros((len(X), nq))
        step = self._prior.step.map(len(X))
        return np.asarray(step(X.T, U.T, ca.DM.zeros(0, len(X)))).T[:, nq:]

    # -- the family's hooks ---------------------------------------------------------------------
    def _provides(self) -> set[str]:
        return {"energy"}

    def _fit(self, data: Dataset | None) -> None:
        nq = self.system.nq
        X, U, Xn = data.pairs("obs")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(U)) and np.all(np.isfinite(Xn))):
            raise InputError("the training data contain NaN or inf")
        rng = np.random.default_rng(self.seed)
        if 0 < self.samples < len(X):
            pick = np.sort(rng.choice(len(X), self.samples, replace=False))
            X, U, Xn = X[pick], U[pick], Xn[pick]
        if len(X) < 2:
            raise InputError(f"gp_vi needs at least 2 training pairs, the data hold {len(X)}")
        Z = self._features(X[:, :nq], X[:, nq:], U, np)
        keep = np.flatnonzero(np.ptp(Z, axis=0) > 0)
        if keep.size == 0:
            raise InputError("every GP input is constant in the training data")
        Z = Z[:, keep]
        targets = Xn[:, nq:] - self._prior_velocity(X, U)
        posteriors = []
        for j in range(nq):
            hp = fit_hyperparameters(
                Z, targets[:, j], restarts=self.restarts, iterations=self.iterations,
                seed=self.seed + 1000 * j,
            )  # fmt: skip
            if 0 < self.support_points < len(Z):
                chosen = support_points(Z, self.support_points, hp.lengthscales, self.seed + j)
                posteriors.append(Posterior.dtc(Z, targets[:, j], hp, chosen))
            else:
                posteriors.append(Posterior.exact(Z, targets[:, j], hp))
        self.inputs_ = keep
        self.posteriors_ = posteriors
        self.n_samples_ = len(Z)

    def _gp_input(self, x, u):
        nq = self.system.nq
        z = self._features(x[:nq], x[nq:], u, ca)
        return ca.vertcat(*[z[int(i)] for i in self.inputs_])

    def _build(self) -> DiscreteModel:
        s, nq = self.system, self.system.nq
        x, u, p = ca.SX.sym("x", 2 * nq), ca.SX.sym("u", s.nu), ca.SX.sym("p", 0)
        z = self._gp_input(x, u)
        correction = ca.vertcat(*[post.casadi_mean(z) for post in self.posteriors_])
        if self.prior == "zero":
            step = ca.Function(
                "step", [x, u, p], [ca.vertcat(x[:nq] + self.dt * correction, correction)],
                ["x", "u", "p"], ["x_next"],
            )  # fmt: skip
        else:
            xm, um, pm = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", s.nu), ca.MX.sym("p", 0)
            dv = ca.Function("gp", [x, u], [correction])(xm, um)
            prior = self._prior.step(xm, um, ca.DM.zeros(0, 1))
            step = ca.Function(
                "step", [xm, um, pm], [prior + ca.vertcat(self.dt * dv, dv)],
                ["x", "u", "p"], ["x_next"],
            )  # fmt: skip
        info = {**self.info(), "n_samples": int(self.n_samples_)}
        info["support_points"] = [len(post.support) for post in self.posteriors_]
        return DiscreteModel(
            dt=self.dt,
            nx=2 * nq,
            nu=s.nu,
            np=0,
            nobs=2 * nq,
            step=step,
            energy=self._prior.energy,
            from_obs=self._prior.from_obs,
            to_obs=self._prior.to_obs,
            state_names=self._prior.state_names,
            input_names=s.input_names,
            info=info,
        )

    def _spread(self) -> ca.Function:
        """The posterior standard deviation of each next velocity (noise included) and
        ``dt`` times it for the positions."""
        nq = self.system.nq
        x, u, p = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", self.system.nu), ca.MX.sym("p", 0)
        z = self._gp_input(x, u)
        std = ca.vertcat(
            *[ca.sqrt(post.casadi_var(z) + post.hp.noise_var) for post in self.posteriors_]
        )
        return ca.Function(
            "spread", [x, u, p], [ca.vertcat(self.dt * std, std)], ["x", "u", "p"], ["s"]
        )
