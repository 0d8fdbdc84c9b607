"""GP-augmented variational integrator (family ``"gp_vi"``): Gaussian processes learn the
next velocity on top of a nominal variational integrator (Brüdigam et al., eqs. 7, 9-10).

Training pairs ``z_k = (q_k, v_k, u_k) -> v_{k+1}`` come from measured transitions. The
prior model is a nominal variational integrator of the given system (whose parameters
may be wrong): the midpoint one (the default; it stays accurate at larger steps), the
paper's first-order one, or none. One GP per velocity component learns the correction
``dv`` the prior misses (ARD squared-exponential kernel, hyperparameters by maximising
the marginal likelihood from several starts). Inputs that are constant in the data are
dropped; with ``coordinates = "sincos"`` every angle (a coordinate in rad) enters as its
sine and cosine.

The correction enters the positions as the prior's own kinematics says:

- midpoint prior: ``x_{k+1} = prior(x_k, u_k) + (dt dv / 2, dv)``, since its positions
  follow ``q_{k+1} - q_k = dt (v_k + v_{k+1}) / 2`` (exactly for a constant mass matrix);
- first-order prior (the paper's eq. 10): ``v_{k+1} = v_prior + dv``, ``q_{k+1} = q_k +
  dt v_{k+1}``;
- none: ``v_{k+1} = dv``, ``q_{k+1} = q_k + dt v_{k+1}``.

With holonomic constraints the next state is projected onto them (see
:meth:`GPVIModel._constrained_dynamics`), so they hold to round-off after every step.

The exported model carries the GP means as CasADi expressions (the exact posterior on every
training sample, or its DTC approximation on ``support_points`` samples spread over the
data, so a controller's cost grows with the support points only) and a ``residual`` that
holds the prior's discrete equations, the correction and the projection's conditions,
so a controller's implicit transcription runs no Newton loop. Bounds on the one-step
error: ``bound = "theorem1"`` (the GPs' uniform error bound through the projection,
:meth:`GPVIModel._own_bound`), or ``bound = "conformal"`` with ``conformal_scale =
"spread"``, which calibrates the GPs' posterior spread on held-out data.
"""

from __future__ import annotations

from statistics import NormalDist

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.integrators import VariationalIntegrator, _newton
from vimpc.integrators._newton import solve as newton_solve
from vimpc.integrators._newton import state_scale
from vimpc.models import _features
from vimpc.models._gp import draw_samples, fitted_state, uniform_error_bound, varying_columns
from vimpc.models.base import SpreadFamily
from vimpc.models.calibration import Bound
from vimpc.models.families.nominal import NominalModel

# added to G G^T in the projection, so redundant constraints keep it solvable
_REGULARISATION = 1e-10
# training states whose projection fails and whose |g(q)| exceeds this are refused as off
# the constraints (the environments keep their states on them to round-off)
OFF_MANIFOLD = 1e-6


class GPVIModel(SpreadFamily):
    """Gaussian processes on the next velocity, on top of a nominal variational integrator.

    Args:
        system: the system of the prior model (its parameters may be wrong) and of the
            structure (coordinates, inputs).
        dt: the model step [s].
        prior, coordinates, samples, support_points, restarts, iterations, seed, and the
            bound settings: see :attr:`settings`.

    Fitted attributes: ``posteriors_`` (one :class:`~vimpc.models._gp.Posterior` per
    velocity component), ``inputs_`` (the indices of ``(features, u)`` the GPs take),
    ``n_samples_``, ``domain_`` (the box of the training inputs, where the Theorem 1 bound
    holds), ``median_std_`` (each GP's median posterior standard deviation there),
    ``position_rms_`` (RMS of the positions' one-step residuals on the training pairs) and
    ``lipschitz_`` (the projection's Lipschitz estimate; 1 without constraints).
    """

    name = "gp_vi"
    bound_methods = {
        "theorem1": "the GP's uniform error bound (Lederer et al. 2019) through the "
        "projection's Lipschitz constant (Theorem 1 of the GP-VI paper)",
    }
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
            choices=_features.COORDINATES,
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
        "seed": Setting(
            int, 0, "seed of the sample draw, the starts and the support points", rule=SEED
        ),
    }

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        s = self.system
        if s.n_nonholonomic:
            raise InputError(
                f"gp_vi takes holonomic constraints only; {s.name} has {s.n_nonholonomic} "
                "nonholonomic ones"
            )
        if s.n_holonomic and self.prior == "first_order":
            raise InputError(
                f"gp_vi with constraints ({s.name}) takes prior = 'midpoint' or 'zero', got "
                "prior = 'first_order'"
            )
        if s.nq != s.nv:
            raise InputError(f"gp_vi needs as many velocities as coordinates; {s.name} has not")
        form = "del" if self.prior == "first_order" else "position_momentum"
        integrator = "first_order" if self.prior == "first_order" else "midpoint"
        self._prior = NominalModel(s, dt, integrator=integrator, form=form).discrete_model()

    # -- features -------------------------------------------------------------------------------
    def _embedded(self, q, v, u):
        """``(q or its sines and cosines, v, u)``: a column of CasADi or rows of numpy."""
        return _features.embed(self.system, self.coordinates, q, v, u)

    def _prior_velocity(self, X: np.ndarray, U: np.ndarray) -> np.ndarray:
        nq = self.system.nq
        if self.prior == "zero":
            return np.zeros((len(X), nq))
        step = self._prior.step.map(len(X))
        return np.asarray(step(X.T, U.T, ca.DM.zeros(0, len(X)))).T[:, nq:]

    # -- the family's hooks ---------------------------------------------------------------------
    def _provides(self) -> set[str]:
        fields = {"energy"}
        if self.system.n_holonomic:
            fields |= {"constraint", "residual"}
        elif self.prior != "zero":
            fields.add("residual")
        return fields

    def _fit(self, data: Dataset | None) -> None:
        nq = self.system.nq
        X, U, Xn = data.pairs("obs")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(U)) and np.all(np.isfinite(Xn))):
            raise InputError("the training data contain NaN or inf")
        pick, notes = draw_samples(len(X), self.samples, self.seed)
        self.fit_notes_ += notes
        X, U, Xn = X[pick], U[pick], Xn[pick]
        if len(X) < 2:
            raise InputError(f"gp_vi needs at least 2 training pairs, the data hold {len(X)}")
        Z = self._embedded(X[:, :nq], X[:, nq:], U)
        keep = varying_columns(Z)
        Z = Z[:, keep]
        prior_velocity = self._prior_velocity(X, U)
        self._refuse_failed(prior_velocity, pick, data, "the prior's")
        targets = Xn[:, nq:] - prior_velocity
        state, notes = fitted_state(
            Z, targets, restarts=self.restarts, iterations=self.iterations, seed=self.seed,
            support=self.support_points,
        )  # fmt: skip
        self.fit_notes_ += notes
        self.inputs_ = keep
        vars(self).update(state)
        # the positions' one-step residuals on the training pairs: their measurement noise,
        # which the velocity GPs do not see, and the prior's position error
        predicted = self._build().step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))
        predicted = np.asarray(predicted).T
        self._refuse_off_manifold(predicted, X)
        self._refuse_failed(predicted, pick, data, "the fitted model's")
        self.position_rms_ = np.sqrt(np.mean((Xn[:, :nq] - predicted[:, :nq]) ** 2, axis=0))
        self.lipschitz_ = self._projection_lipschitz(X, U)

    def _refuse_off_manifold(self, predicted: np.ndarray, X: np.ndarray) -> None:
        """Refuse training states far from the constraints where the projection failed."""
        failed = ~np.all(np.isfinite(predicted), axis=1)
        if not self.system.n_holonomic or not failed.any():
            return
        nq = self.system.nq
        g = np.asarray(self.system.function("g").map(int(failed.sum()))(X[failed, :nq].T))
        worst = float(np.max(np.abs(g)))
        if worst > OFF_MANIFOLD:
            raise InputError(
                f"the projection onto {self.system.name}'s constraints does not converge from "
                f"{int(failed.sum())} of {len(X)} training states: the data lie far from the "
                f"constraint manifold (|g(q)| up to {worst:.3g} there; check the "
                "observations' coordinates against the system's)"
            )

    def _refuse_failed(self, values: np.ndarray, pick: np.ndarray, data: Dataset, whose: str):
        """Refuse training transitions where a step returned NaN (its Newton solve failed or
        found a spurious root), naming them by trajectory and step."""
        rows = np.flatnonzero(~np.all(np.isfinite(values), axis=1))
        if rows.size == 0:
            return
        named = ", ".join(
            f"trajectory {int(i) // data.n_steps} step {int(i) % data.n_steps}"
            for i in pick[rows[:5]]
        )
        raise InputError(
            f"{whose} step failed (NaN: its Newton solve did not converge or found a spurious "
            f"root) on {rows.size} of {len(values)} training transitions: {named}"
            f"{', ...' if rows.size > 5 else ''}; the data lie where the model cannot step "
            "(drop those trajectories, or check the observations' coordinates)"
        )

    def _gp_input(self, x, u):
        nq = self.system.nq
        z = self._embedded(x[:nq], x[nq:], u)
        return ca.vertcat(*[z[int(i)] for i in self.inputs_])

    def _build_correction(self) -> ca.Function:
        """``(x, u) -> dv``: the GPs' posterior means."""
        nq = self.system.nq
        x, u = ca.SX.sym("x", 2 * nq), ca.SX.sym("u", self.system.nu)
        z = self._gp_input(x, u)
        means = [post.casadi_mean(z) for post in self.posteriors_]
        return ca.Function("gp", [x, u], [ca.vertcat(*means)], ["x", "u"], ["dv"])

    def _build(self) -> DiscreteModel:
        s, nq = self.system, self.system.nq
        correction = self._build_correction()
        xm, um, pm = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", s.nu), ca.MX.sym("p", 0)
        xn, dv = ca.MX.sym("x_next", 2 * nq), ca.MX.sym("dv", s.nv)
        x_next, r = self._dynamics(xm, um, xn, dv)
        gp = correction(xm, um)
        step = ca.Function(
            "step", [xm, um, pm], [ca.Function("f", [xm, um, dv], [x_next])(xm, um, gp)],
            ["x", "u", "p"], ["x_next"],
        )  # fmt: skip
        residual = None
        if r is not None:
            r = ca.Function("r", [xm, um, xn, dv], [r])(xm, um, xn, gp)
            residual = ca.Function(
                "residual", [xm, um, xn, pm], [r], ["x", "u", "x_next", "p"], ["r"]
            )
        info = {**self.info(), "n_samples": int(self.n_samples_)}
        info["support_points"] = [len(post.support) for post in self.posteriors_]
        return DiscreteModel(
            dt=self.dt,
            nx=2 * nq,
            nu=s.nu,
            np=0,
            nobs=2 * nq,
            step=step,
            residual=residual,
            energy=self._prior.energy,
            constraint=self._prior.constraint,
            from_obs=self._prior.from_obs,
            to_obs=self._prior.to_obs,
            state_names=self._prior.state_names,
            input_names=s.input_names,
            info=info,
        )

    def _dynamics(self, x, u, x_next, dv):
        """The next state and the residual (None: explicit) of the step that adds the GP
        correction ``dv`` to the prior, as MX expressions of ``x``, ``u``, the residual's
        unknown ``x_next`` and ``dv``."""
        nq, h = self.system.nq, self.dt
        no_p = ca.DM.zeros(0, 1)
        q, v = x[:nq], x[nq:]
        Q, V = x_next[:nq], x_next[nq:]
        if self.system.n_holonomic:
            return self._constrained_dynamics(x, u, x_next, dv)
        if self.prior == "zero":
            return ca.vertcat(q + h * dv, dv), None
        if self.prior == "first_order":
            # the paper's eq. 10: v_{k+1} = v_prior + dv, q_{k+1} = q_k + dt v_{k+1}; the
            # prior's discrete equations (forward-difference form) fix v_prior
            v_next = self._prior.step(x, u, no_p)[nq:] + dv
            r = ca.vertcat(
                Q - q - h * V,
                self._prior.residual(x, u, ca.vertcat(q + h * v, V - dv), no_p)[nq:],
            )
            return ca.vertcat(q + h * v_next, v_next), r
        # midpoint: the prior's step shifted; its discrete equations at the next state less
        # the shift vanish exactly at that state, with no Newton loop inside
        shift = ca.vertcat(0.5 * h * dv, dv)
        r = self._prior.residual(x, u, x_next - shift, no_p)
        return self._prior.step(x, u, no_p) + shift, r

    def _constrained_dynamics(self, x, u, x_next, dv):
        """With holonomic constraints ``g(q) = 0``, the step solves its residual by Newton.

        - No prior (the paper's eq. 10e): ``v_{k+1}`` is the point nearest ``dv`` with
          ``g(q_k + dt v_{k+1}) = 0``; the KKT conditions with the multipliers eliminated,
          ``r = e - G^T (G G^T + eps I)^-1 (G e - g / dt)`` with ``e = v_{k+1} - dv`` and
          ``G``, ``g`` at ``q_{k+1}``, vanish exactly when ``e`` lies in the range of
          ``G^T`` and ``g = 0``. ``eps = 1e-10`` keeps redundant constraints (the
          parallelogram four-bar's closed loop) solvable.
        - Midpoint prior: the correction enters the prior's constrained discrete equations
          as the discrete force that makes it, ``f- = f+ = M(q_mid) dv / 2`` (without
          constraints and with a constant mass matrix exactly the shifted step), so the
          constraint reactions project it onto the manifold in the kinetic-energy metric.
        """
        s, nq, h = self.system, self.system.nq, self.dt
        q, v = x[:nq], x[nq:]
        Q, V = x_next[:nq], x_next[nq:]
        integrator = self._corrected_integrator()
        if integrator is None:
            G = s.function("G")(Q)
            e = V - dv
            gram = ca.mtimes(G, G.T) + _REGULARISATION * ca.DM.eye(s.n_holonomic)
            r = ca.vertcat(
                Q - q - h * V,
                e
                - ca.mtimes(
                    G.T, _newton.linear_solve(gram, ca.mtimes(G, e) - s.function("g")(Q) / h)
                ),
            )
            guess = ca.vertcat(q + h * dv, dv)
        else:
            r = integrator.residual_function(h)(x, u, x_next, dv)
            guess = ca.vertcat(q + h * v, v + dv)
        return self._newton(x, u, dv, x_next, r, guess), r

    def _corrected_integrator(self):
        """The midpoint prior with the GP correction as a discrete force of its parameter
        ``theta = dv`` (None without a prior)."""
        if self.prior == "zero":
            return None
        s = self.system

        def force(q0, q1, u, theta):
            half = 0.5 * ca.mtimes(s.mass_matrix(0.5 * (q0 + q1)), theta)
            return half, half

        def lagrangian(q, v, theta):  # the system's; theta enters through the force only
            return s.lagrangian(q, v)

        return VariationalIntegrator(
            s, "midpoint", lagrangian=lagrangian, n_theta=s.nv, discrete_force=force
        )

    def _newton(self, x, u, dv, x_next_symbol, r, guess):
        """``x_next`` with ``r(x_next) = 0`` by Newton from ``guess``; a solve that does not
        converge gives NaN, as the nominal models' steps do (inside a controller: a failed
        solve with its status; in a closed loop: a failed model step).

        Newton runs on ``x_next / scale`` with the integrators' scaling (``|q|`` for the
        positions, ``|q| / dt`` for the velocities), so its step test is relative to the
        round-off of large coordinates (a link spun to 270 rad) rather than absolute. The
        scale is multiplied by ``|G|_F |(G G^T + eps I)^-1 G|_F`` at ``q_k`` (``>= 1``, about
        ``1 / sigma_min(G)``): near a configuration where ``G`` loses rank (the parallelogram
        four-bar with its links aligned, its hanging rest) the projection divides the
        constraint's round-off by ``sigma_min``, and Newton, converged, wandered at 1e-10 and
        failed the unscaled test."""
        s, nq = self.system, self.system.nq
        G = s.function("G")(x[:nq])
        gram = ca.mtimes(G, G.T) + _REGULARISATION * ca.DM.eye(s.n_holonomic)
        amplification = ca.norm_fro(G) * ca.norm_fro(_newton.linear_solve(gram, G))
        scale = state_scale(x[:nq], x[nq:], self.dt) * amplification
        z = ca.MX.sym("z", x_next_symbol.shape[0])
        scaled = ca.substitute(r, x_next_symbol, scale * z)
        implicit = ca.Function("projection", [z, x, u, dv], [scaled])
        root = newton_solve("gp_vi_projection", implicit, error_on_fail=False)
        x_next = scale * root(guess / scale, x, u, dv)
        # a NaN input leaves fast_newton at its guess without an error, and compiled code
        # ignores error_on_fail: the root is kept only where it is finite and solves the
        # equations to the integrators' acceptance test (rows of size ~|x| / dt)
        level = (ca.norm_inf(x) + ca.norm_inf(x_next)) * (1.0 + 1.0 / self.dt) * amplification
        tolerance = _newton.ACCEPT_FACTOR * _newton.ABSTOL + _newton.ACCEPT_RTOL * level
        # and where the state and input are finite: a kernel at u = inf is 0, and the
        # projection from there was a finite step under an infinite torque
        ok = _newton.all_finite(ca.vertcat(x, u, x_next)) * _newton.within(
            ca.substitute(r, x_next_symbol, x_next), ca.repmat(tolerance, r.shape[0], 1)
        )
        return _newton.accepted(x_next, ok)

    def _position_factor(self) -> float:
        """How much of ``dt`` times a velocity correction moves the next positions."""
        return 0.5 if self.prior == "midpoint" else 1.0

    def _projection_lipschitz(self, X: np.ndarray, U: np.ndarray) -> float:
        """The Lipschitz constant ``L`` of the map from the GP's velocity correction to the
        next velocity: 1 without constraints (there it is the identity); with constraints
        the largest spectral norm of its Jacobian over up to 200 of the training states (the
        sampling the paper suggests).

        Raises:
            InputError: a Jacobian that is not finite there (the projection's Newton did not
                converge, or the constraints are singular).
        """
        s, nq = self.system, self.system.nq
        if not s.n_holonomic:
            return 1.0
        x, u = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", s.nu)
        xn, dv = ca.MX.sym("x_next", 2 * nq), ca.MX.sym("dv", s.nv)
        x_next, _ = self._dynamics(x, u, xn, dv)
        # with the step: a failed step (NaN) has a zero, finite derivative
        jac = ca.Function("J", [x, u, dv], [ca.jacobian(x_next[nq:], dv), x_next])
        gp = self._build_correction()
        pick = np.linspace(0, len(X) - 1, min(len(X), 200)).astype(int)
        norms = []
        for i in pick:
            try:
                J, y = (np.asarray(a, dtype=np.float64) for a in jac(X[i], U[i], gp(X[i], U[i])))
                J = J if np.all(np.isfinite(y)) else np.full((s.nv, s.nv), np.nan)
            except RuntimeError:
                J = np.full((s.nv, s.nv), np.nan)
            norms.append(np.linalg.norm(J, 2) if np.all(np.isfinite(J)) else np.inf)
        lipschitz = float(np.max(norms))
        if not np.isfinite(lipschitz):
            bad = int(np.sum(~np.isfinite(norms)))
            raise InputError(
                f"the projection's Lipschitz estimate is not finite: its Jacobian is not "
                f"finite at {bad} of {len(pick)} training states (the projection's Newton "
                "does not converge there, or the constraints are singular)"
            )
        return lipschitz

    def _own_bound(self) -> Bound:
        """Theorem 1: each GP's uniform error bound on the box of its training inputs,
        ``delta / 2`` split evenly over the velocity components; through the projection
        (Lipschitz constant ``L``) every velocity's error is at most ``L |e|_2``, and the
        positions move by ``c dt`` times it. The other ``delta / 2`` goes, split evenly
        over the state entries, to Gaussian noise: the GPs' noise variances on the
        velocities, and on the positions the RMS of their training residuals (the
        measurement noise of positions, which the GPs do not see)."""
        nq, nv = self.system.nq, self.system.nv
        low, high = self.domain_
        bounds = [
            uniform_error_bound(post, low, high, self.delta / (2 * nv), std_ref=ref)
            for post, ref in zip(self.posteriors_, self.median_std_, strict=True)
        ]
        noise_quantile = NormalDist().inv_cdf(1.0 - self.delta / (4 * (nq + nv)))
        lipschitz = self.lipschitz_
        x, u, p = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", self.system.nu), ca.MX.sym("p", 0)
        z = self._gp_input(x, u)
        e = ca.vertcat(
            *[
                np.sqrt(b.beta) * ca.sqrt(post.casadi_var(z)) + b.gamma
                for b, post in zip(bounds, self.posteriors_, strict=True)
            ]
        )
        if self.system.n_holonomic:
            e = lipschitz * ca.norm_2(e) * ca.DM.ones(nv)
        noise_v = ca.DM([np.sqrt(post.hp.noise_var) for post in self.posteriors_])
        e_q = self._position_factor() * self.dt * e + noise_quantile * ca.DM(self.position_rms_)
        e_v = e + noise_quantile * noise_v
        function = ca.Function("bound", [x, u, p], [ca.vertcat(e_q, e_v)], ["x", "u", "p"], ["e"])
        figures = {
            "sqrt_beta": [float(np.sqrt(b.beta)) for b in bounds],
            "gamma": [b.gamma for b in bounds],
            "tau": [b.tau for b in bounds],
            "lipschitz_f": [b.lipschitz_f for b in bounds],
            "noise_quantile": noise_quantile,
            "projection_lipschitz": lipschitz,
            "position_noise": self.position_rms_.tolist(),
            "domain_low": low.tolist(),
            "domain_high": high.tolist(),
        }
        method = "GP uniform error bound (Lederer et al. 2019) through the projection"
        return Bound(function, self.delta, "theorem", method, figures)

    def _spread(self) -> ca.Function:
        """The posterior standard deviation of each next velocity (noise included); for a
        position, ``c dt`` times its velocity's and the RMS of the training positions'
        residuals (their measurement noise) in quadrature."""
        nq = self.system.nq
        x, u, p = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", self.system.nu), ca.MX.sym("p", 0)
        z = self._gp_input(x, u)
        std = ca.vertcat(
            *[ca.sqrt(post.casadi_var(z) + post.hp.noise_var) for post in self.posteriors_]
        )
        position = ca.sqrt(
            (self._position_factor() * self.dt * std) ** 2 + ca.DM(self.position_rms_) ** 2
        )
        return ca.Function("spread", [x, u, p], [ca.vertcat(position, std)], ["x", "u", "p"], ["s"])
