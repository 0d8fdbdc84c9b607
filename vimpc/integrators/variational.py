"""Forced, constrained variational integrators in two forms.

``form="position_momentum"`` (state ``x = (q, v)`` with ``v`` the continuous
velocity, momentum ``p = dL/dv``; Marsden & West 2001, eq. 3.5.2 with forcing):

    p0 + D1 L_d(q0, q1) + f-(q0, q1, u) = C(q0)^T lam,   c(q0, q1) = 0
    dL/dv(q1, v1) - D2 L_d(q0, q1) - f+(q0, q1, u) = C(q1)^T mu,   C(q1) v1 = 0

``form="del"`` (the GP-VI paper's eq. 6: state ``x_k = (q_k, v_k)`` with ``v_k`` the
forward difference, so ``q_{k+1} = q_k + h v_k``; unknown ``v_{k+1}``):

    D2 L_d(q_k, q_{k+1}) + D1 L_d(q_{k+1}, q_{k+2}) + f+ + f- = C(q_{k+1})^T lam,
    c(q_{k+1}, q_{k+2}) = 0,   q_{k+2} = q_{k+1} + h v_{k+1}.

Holonomic constraints ``g(q) = 0`` contribute ``G(q)`` rows to ``C`` and ``g(q1)``
to ``c``; nonholonomic ones ``A(q) v = 0`` contribute ``A(q)`` rows and the
discrete constraint ``A((q0 + q1)/2)(q1 - q0)/h`` (discrete Lagrange–d'Alembert).
In the ``del`` form the right force of the previous step is evaluated with the
current input (exact for the first-order rule, whose ``f+`` is zero).

The multipliers are eliminated by projection, so the residual is a square system
in ``x_next`` alone: with ``W = (C C^T)^{-1}``, an equation pair
``e = C^T lam, c = 0`` is written ``r = e - C^T W (C e - c)``, which vanishes
exactly when ``e`` lies in the range of ``C^T`` and ``c = 0`` (multiply by ``C``).
The same residual serves the Newton step and the controller's implicit
transcription. Far from the origin its round-off level grows with ``|q| / h``
(:meth:`VariationalIntegrator.residual_level`); tolerances on it scale with that level.

A step returns its Newton root only where the root is acceptable (NaN elsewhere, never
the rootfinder's guess or last iterate): finite, its residual within the Newton
tolerances, and, for the second-order rules in the position-momentum form, its energy
change explained by the work done on it and the energy it exchanges
(:meth:`VariationalIntegrator.energy_balance`, ``ENERGY_JUMP``). The equations of a large
step have spurious roots, found with residuals of 1e-12; the energy test refuses them.

Learned parts enter through two arguments: ``lagrangian(q, v, theta)`` replaces the
system's Lagrangian in ``L_d`` and in ``dL/dv`` (see
:class:`~vimpc.integrators.base.Integrator`), and ``discrete_force(q0, q1, u, theta)``
returns a pair ``(f-, f+)`` added to the rule's discrete forces, e.g. a learned friction
model. ``legendre(q, v, theta)``, where given, replaces the Lagrangian in the momentum
map ``p = dL/dv`` of the position-momentum form only: shadow integration drives the
discrete equations with a learned inverse modified Lagrangian and maps velocities to
momenta with the Lagrangian recovered from it (:mod:`vimpc.models.families.lsi`). Every function
takes ``theta`` as its last input.
"""

from __future__ import annotations

from collections.abc import Callable

import casadi as ca

from vimpc import _checks
from vimpc.errors import InputError
from vimpc.integrators import _newton
from vimpc.integrators.base import ImplicitIntegrator, LagrangianFn
from vimpc.integrators.discrete_lagrangians import (
    ORDER,
    RULES,
    discrete_forces,
    discrete_lagrangian,
)
from vimpc.mechanics.system import MechanicalSystem

FORMS = ("position_momentum", "del")
# A root is refused as spurious when its energy error exceeds ENERGY_JUMP times the energy
# the step exchanges (the kinetic energy it starts with, the work done on it and its
# potential change; see VariationalIntegrator.energy_balance). Measured on the cart-pole
# (scenarios/cartpole_safe.toml's data, midpoint, dt = 0.05 s, 63,000 steps of 20-step
# predictions): steps that agree with 20 substeps within 0.3 reach 0.61 (a pole at
# 65 rad/s, 3.3 rad per step); spurious roots (velocities 5-100x those of 20 substeps)
# start at 1.9 and reach 3e4. On the scenarios' training data (noisy states, near rest, off
# the constraints by the noise) the largest ratio of an accepted step is 0.73 (four-bar,
# fourbar_gpvi_tracking.toml), 0.50 (fourbar_tracking.toml), 0.07 (cart-pole), 0.003
# (rolling disk).
ENERGY_JUMP = 1.0


DiscreteForceFn = Callable[[ca.SX, ca.SX, ca.SX, ca.SX], tuple[ca.SX, ca.SX]]


class VariationalIntegrator(ImplicitIntegrator):
    """Variational integrator of a forced mechanical system.

    Args:
        system: the mechanics (Lagrangian, forces, constraints).
        rule: ``"first_order"``, ``"midpoint"`` or ``"trapezoidal"`` discrete Lagrangian.
        form: ``"position_momentum"`` (state ``(q, v)``, continuous velocity) or
            ``"del"`` (state ``(q_k, (q_{k+1} - q_k)/h)``, the GP-VI paper's form).
        lagrangian, n_theta: a Lagrangian ``L(q, v, theta)`` replacing the system's (see
            :class:`~vimpc.integrators.base.Integrator`).
        discrete_force: ``(q0, q1, u, theta) -> (f-, f+)``, CasADi expressions of shape
            ``(nq, 1)`` added to the left and right discrete forces of every step.
        legendre: ``L(q, v, theta)`` whose ``dL/dv`` is the momentum of the state's
            velocity (position-momentum form) and whose energy is the state's energy
            (default: the discrete equations' Lagrangian).
        residual_tolerance: the step's Newton residual test (absolute); raise it for a
            Lagrangian whose evaluation loses digits to cancellation (kernel expansions).
    """

    def __init__(
        self,
        system: MechanicalSystem,
        rule: str = "midpoint",
        form: str = "position_momentum",
        *,
        lagrangian: LagrangianFn | None = None,
        n_theta: int = 0,
        discrete_force: DiscreteForceFn | None = None,
        legendre: LagrangianFn | None = None,
        residual_tolerance: float = _newton.ABSTOL,
    ) -> None:
        super().__init__(system, lagrangian=lagrangian, n_theta=n_theta)
        if legendre is not None and not callable(legendre):
            raise InputError(
                f"legendre must be a callable L(q, v, theta), got {type(legendre).__name__}"
            )
        self._legendre = legendre
        self.residual_tolerance = _checks.positive("residual_tolerance", residual_tolerance)
        self.rule = _checks.one_of("rule", rule, RULES)
        self.form = _checks.one_of("form", form, FORMS)
        self.order = ORDER[rule]
        if discrete_force is not None and not callable(discrete_force):
            raise InputError(
                "discrete_force must be a callable (q0, q1, u, theta) -> (f_minus, f_plus), "
                f"got {type(discrete_force).__name__}"
            )
        self._discrete_force = discrete_force
        if discrete_force is not None:
            self._check_discrete_force()
        self._cache: dict[tuple, ca.Function] = {}

    def _check_discrete_force(self) -> None:
        s = self.system
        q0, q1 = ca.SX.sym("q0", s.nq), ca.SX.sym("q1", s.nq)
        u, th = ca.SX.sym("u", s.nu), ca.SX.sym("theta", self.n_theta)
        try:
            pair = self._discrete_force(q0, q1, u, th)
            shapes = [ca.SX(f).shape for f in pair]
        except Exception as exc:  # a user callable: report what it raised
            raise InputError(
                "discrete_force(q0, q1, u, theta) must return a pair (f_minus, f_plus) of "
                f"CasADi expressions of shape ({s.nq}, 1); calling it failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if shapes != [(s.nq, 1), (s.nq, 1)]:
            raise InputError(
                "discrete_force(q0, q1, u, theta) must return a pair (f_minus, f_plus) of "
                f"shape ({s.nq}, 1) each, got shapes {shapes}"
            )

    def _momentum_lagrangian(self) -> LagrangianFn | None:
        return self._legendre if self._legendre is not None else self._lagrangian

    # -- building blocks on SX ---------------------------------------------------------
    def _reactions(self, q):
        s = self.system
        blocks = []
        if s.n_holonomic:
            blocks.append(s.function("G")(q))
        if s.n_nonholonomic:
            blocks.append(s.nonholonomic(q))
        return ca.vertcat(*blocks) if blocks else None

    def _position_constraint(self, q0, q1, h):
        s = self.system
        parts = []
        if s.n_holonomic:
            parts.append(s.holonomic(q1))
        if s.n_nonholonomic:
            parts.append(ca.mtimes(s.nonholonomic(0.5 * (q0 + q1)), q1 - q0))
        return ca.vertcat(*parts) / h

    @staticmethod
    def _project(e, C, c):
        """``e - C^T (C C^T)^{-1} (C e - c)``; ``e`` unchanged without constraints."""
        if C is None:
            return e
        return e - ca.mtimes(C.T, ca.solve(ca.mtimes(C, C.T), ca.mtimes(C, e) - c))

    def _derivatives(self, h):
        """SX functions ``D1 L_d``, ``D2 L_d``, ``(f-, f+)`` and ``dL/dv``, each of ``theta``."""
        s = self.system
        qa, qb = ca.SX.sym("qa", s.nq), ca.SX.sym("qb", s.nq)
        q, v, u = ca.SX.sym("q", s.nq), ca.SX.sym("v", s.nv), ca.SX.sym("u", s.nu)
        th = ca.SX.sym("theta", self.n_theta)

        def L(q_, v_):
            return self.lagrangian(q_, v_, th)

        Ld = discrete_lagrangian(self.rule, L, qa, qb, h)
        fm, fp = discrete_forces(self.rule, s.generalized_force, qa, qb, u, h)
        if self._discrete_force is not None:
            gm, gp = self._discrete_force(qa, qb, u, th)
            fm, fp = fm + gm, fp + gp
        D1 = ca.Function("D1Ld", [qa, qb, th], [ca.gradient(Ld, qa)])
        D2 = ca.Function("D2Ld", [qa, qb, th], [ca.gradient(Ld, qb)])
        forces = ca.Function("fd", [qa, qb, u, th], [fm, fp])
        momentum = L(q, v) if self._legendre is None else self._legendre(q, v, th)
        dLdv = ca.Function("dLdv", [q, v, th], [ca.gradient(momentum, v)])
        return D1, D2, forces, dLdv

    def _residual_expr(self, x, u, xn, th, h):
        s = self.system
        n = s.nq
        D1, D2, forces, dLdv = self._derivatives(h)
        q0, v0 = x[:n], x[n:]
        q1, v1 = xn[:n], xn[n:]
        if self.form == "position_momentum":
            fm, fp = forces(q0, q1, u, th)
            e_q = dLdv(q0, v0, th) + D1(q0, q1, th) + fm
            r_q = self._project(e_q, self._reactions(q0), self._position_constraint(q0, q1, h))
            e_v = dLdv(q1, v1, th) - D2(q0, q1, th) - fp
            C1 = self._reactions(q1)
            r_v = self._project(e_v, C1, None if C1 is None else ca.mtimes(C1, v1))
            return ca.vertcat(r_q, r_v)
        # del form: q_{k+1} follows explicitly; the node equation at q_{k+1} fixes v_{k+1}
        qk1 = q0 + h * v0
        qk2 = qk1 + h * v1
        _, fp = forces(q0, qk1, u, th)
        fm, _ = forces(qk1, qk2, u, th)
        e = D2(q0, qk1, th) + D1(qk1, qk2, th) + fp + fm
        r = self._project(e, self._reactions(qk1), self._position_constraint(qk1, qk2, h))
        return ca.vertcat(q1 - qk1, r)

    # -- CasADi functions ----------------------------------------------------------------
    def residual_function(self, h: float) -> ca.Function:
        h = _checks.positive("h", h)
        key = ("residual", h)
        if key not in self._cache:
            s = self.system
            x, xn = ca.SX.sym("x", self.nx), ca.SX.sym("x_next", self.nx)
            u, th = ca.SX.sym("u", s.nu), ca.SX.sym("theta", self.n_theta)
            r = self._residual_expr(x, u, xn, th, h)
            self._cache[key] = ca.Function(
                f"{s.name}_{self.rule}_residual",
                [x, u, xn, th],
                [r],
                ["x", "u", "x_next", "theta"],
                ["r"],
            )
        return self._cache[key]

    def step_function(
        self, h: float, *, error_on_fail: bool = True, accept: bool = True
    ) -> ca.Function:
        """``(x, u, theta) -> x_next`` over one step ``h`` [s]: the Newton root where it
        passes :meth:`acceptance`, NaN elsewhere (a NaN input, a solve that did not
        converge, a spurious root). ``accept=False`` returns the rootfinder's answer as is
        (its initial guess for a NaN input, its last iterate when it did not converge), for
        callers that judge it themselves (the environments' ground truth checks its
        residual substep by substep and names a solve that did not converge)."""
        h = _checks.positive("h", h)
        key = ("step", h, error_on_fail, bool(accept))
        if key not in self._cache:
            s = self.system
            n = s.nq
            residual = self.residual_function(h)
            z, x, u = ca.SX.sym("z", self.nx), ca.SX.sym("x", self.nx), ca.SX.sym("u", s.nu)
            th = ca.SX.sym("theta", self.n_theta)
            # Newton runs on x_next / scale so that its step test is relative to the
            # round-off floor: q_next is known to ~ulp(|q|), v_next (a difference quotient)
            # to ~ulp(|q|) / h. Unscaled, the absolute tests fail once |q| is a few hundred
            # (a disk rolled to theta ~ 300 rad, a cart 400 m down the rail).
            scale = _newton.state_scale(x[:n], x[n:], h)
            implicit = ca.Function("G", [z, x, u, th], [residual(x, u, scale * z, th)])
            newton = _newton.solve(
                f"{s.name}_{self.rule}_newton", implicit, error_on_fail, self.residual_tolerance
            )
            guess = ca.vertcat(x[:n] + h * x[n:], x[n:]) / scale
            root = scale * newton(guess, x, u, th)
            if accept:
                root = _newton.accepted(root, self._acceptable(x, u, root, th, h))
            self._cache[key] = ca.Function(
                f"{s.name}_{self.rule}_step",
                [x, u, th],
                [root],
                ["x", "u", "theta"],
                ["x_next"],
            )
        return self._cache[key]

    def acceptance(self) -> dict:
        """The test a Newton root passes before a step returns it (else NaN), as recorded in
        an exported model's ``info["step_acceptance"]``."""
        out = {
            "residual": f"|r_i| <= {_newton.ACCEPT_FACTOR:g} * {self.residual_tolerance:g} + "
            f"{_newton.ACCEPT_RTOL:.3g} * round-off level_i",
            "finite": True,
        }
        if self._checks_energy():
            out["energy"] = (
                f"|E1 - E0 - W| <= {ENERGY_JUMP:g} * (|T0| + |W| + |V1 - V0|) (refuses "
                "spurious roots)"
            )
        return out

    def _checks_energy(self) -> bool:
        """Whether the step refuses roots by :meth:`energy_balance`: the second-order rules
        in the position-momentum form. In the ``del`` form the state's velocity is a forward
        difference, so its energy is O(h) off and moves by as much as the step exchanges
        near a turning point (the pendulum released from horizontal, h = 0.01 s: above the
        allowance at its first turn); the first-order rule's energy error is O(h) of the
        energy itself (0.9-0.99 of the allowance on the four-bar's, the rolling disk's and
        the cart-pole's scenario data, with accepted and refused steps alike 20-40 away
        from a fine solution on the cart-pole at 0.05 s). Neither separates spurious roots
        by energy."""
        return self.form == "position_momentum" and self.order == 2

    def _acceptable(self, x, u, xn, th, h):
        """1 where ``xn`` is a root of the step's equations that a step can return, else 0:
        finite, its residual within the Newton tolerances (``_newton.ACCEPT_FACTOR`` times
        the residual test plus ``_newton.ACCEPT_RTOL`` times :meth:`residual_level`), and
        its energy change explained (:meth:`energy_balance`, ``ENERGY_JUMP``)."""
        residual = self.residual_function(h)(x, u, xn, th)
        level = self.residual_level(h)(x, th)
        tolerance = _newton.ACCEPT_FACTOR * self.residual_tolerance + _newton.ACCEPT_RTOL * level
        ok = _newton.all_finite(xn) * _newton.within(residual, tolerance)
        if not self._checks_energy():
            return ok
        error, allowance = self.energy_balance(h)(x, u, xn, th)
        return ok * (error <= allowance)

    def energy_balance(self, h: float) -> ca.Function:
        """``(x, u, x_next, theta) -> (error, allowance)``: the step's energy error
        ``|E(x_next) - E(x) - W|`` (``W`` the work of the discrete forces, inputs and
        dissipation and any learned force, over the step's displacement) and what a root
        of the step's equations that approximates the flow may show,
        ``ENERGY_JUMP (|T(x)| + |W| + |V(q_far) - V(q)|)`` plus round-off (``T = v . M v / 2``
        with ``M = d^2L/dv^2``, ``V(q) = E(q, 0)``, ``q_far`` the next position, in the
        ``del`` form the one after it, ``q_{k+2}``, whose segment gives the next velocity).

        The step's equations can have spurious roots: the midpoint step of the cart-pole
        over 0.05 s from a pole spinning at 70 rad/s has a root with residual 1e-12 at
        3117 rad/s (energy 234 J -> 401,445 J). A variational step's energy error is a
        fraction of the energy it moves; a spurious root's is the new kinetic energy
        itself, far above the energy the step started with and the work done on it.
        """
        h = _checks.positive("h", h)
        key = ("energy_balance", h)
        if key not in self._cache:
            s = self.system
            n = s.nq
            x, xn = ca.SX.sym("x", self.nx), ca.SX.sym("x_next", self.nx)
            u, th = ca.SX.sym("u", s.nu), ca.SX.sym("theta", self.n_theta)
            _, _, forces, _ = self._derivatives(h)
            q0, v0, q1, v1 = x[:n], x[n:], xn[:n], xn[n:]
            energy, kinetic = self.energy_function(), self._kinetic_function()
            zero = ca.DM.zeros(s.nv, 1)
            if self.form == "position_momentum":
                fm, fp = forces(q0, q1, u, th)
                work = ca.dot(fm + fp, q1 - q0) / h
                far = q1
            else:
                # the node force at q_{k+1} over the displacement from mid-segment to
                # mid-segment; the next state's velocity is that of the segment to q_{k+2},
                # so the potential it can draw on is the one down to q_{k+2}
                qk1 = q0 + h * v0
                far = qk1 + h * v1
                _, fp = forces(q0, qk1, u, th)
                fm, _ = forces(qk1, far, u, th)
                work = ca.dot(fp + fm, 0.5 * (far - q0)) / h
            E0, E1 = energy(x, th), energy(xn, th)
            T0, T1 = kinetic(x, th), kinetic(xn, th)
            # V(q) = E(q, 0): the potential, whatever the Lagrangian's form
            potential = energy(ca.vertcat(far, zero), th) - energy(ca.vertcat(q0, zero), th)
            error = ca.fabs(E1 - E0 - work)
            exchanged = ca.fabs(T0) + ca.fabs(work) + ca.fabs(potential) + self._snap(x, th, h)
            roundoff = _newton.ACCEPT_RTOL * (
                ca.fabs(E0) + ca.fabs(E1) + ca.fabs(T0) + ca.fabs(T1) + ca.fabs(work)
            )
            self._cache[key] = ca.Function(
                f"{s.name}_{self.rule}_energy_balance",
                [x, u, xn, th],
                [error, ENERGY_JUMP * exchanged + roundoff],
                ["x", "u", "x_next", "theta"],
                ["error", "allowance"],
            )
        return self._cache[key]

    def _snap(self, x, th, h):
        """The kinetic energy a step may add or remove by pulling a state that is off its
        constraints (a measured one, with noise) back onto them: with ``C`` the constraint
        rows at ``q`` and ``c = (G v + g / h, A v)`` the rate at which the state leaves
        them, the step changes the velocity by about ``w = C^T (C C^T)^-1 c``, the kinetic
        energy by at most ``|v . M w| + w . M w / 2`` and the potential by ``h |dV/dq . w|``;
        zero on the constraints. (The four-bar from states 1e-3 rad off its loop closure,
        nearly at rest, at 0.02 s: energy errors up to 1.5 times the rest of the allowance
        without it.)"""
        s = self.system
        if not (s.n_holonomic or s.n_nonholonomic):
            return 0.0
        q, v = x[: s.nq], x[s.nq :]
        rates = []
        if s.n_holonomic:
            rates.append(ca.mtimes(s.function("G")(q), v) + s.holonomic(q) / h)
        if s.n_nonholonomic:
            rates.append(ca.mtimes(s.nonholonomic(q), v))
        C = self._reactions(q)
        w = ca.mtimes(C.T, ca.solve(ca.mtimes(C, C.T), ca.vertcat(*rates)))
        L = self._momentum_lagrangian()
        value = s.lagrangian(q, v) if L is None else L(q, v, th)
        M = ca.hessian(value, v)[0]
        # and the potential along the displacement h w that closes the constraints
        at_rest = self.energy_function()(ca.vertcat(q, ca.DM.zeros(s.nv, 1)), th)
        slope = ca.gradient(at_rest, q)
        return (
            ca.fabs(ca.bilin(M, v, w))
            + 0.5 * ca.fabs(ca.bilin(M, w, w))
            + h * ca.fabs(ca.dot(slope, w))
        )

    def _kinetic_function(self) -> ca.Function:
        """``(x, theta) -> v . M v / 2`` with ``M = d^2L/dv^2`` of the state's Lagrangian."""
        s = self.system
        x, th = ca.SX.sym("x", self.nx), ca.SX.sym("theta", self.n_theta)
        q, v = x[: s.nq], x[s.nq :]
        L = self._momentum_lagrangian()
        value = s.lagrangian(q, v) if L is None else L(q, v, th)
        M = ca.hessian(value, v)[0]
        return ca.Function("kinetic", [x, th], [0.5 * ca.bilin(M, v, v)], ["x", "theta"], ["T"])

    def residual_level(self, h: float) -> ca.Function:
        """``(x, theta) -> level``: the size, row by row, below which round-off hides the
        residual of a step from ``x`` (in the row's units, up to a factor of order one).

        The unknown ``q_next`` is known to ``ulp(|q|)`` and enters the residual through
        ``(q_next - q) / h`` times the mass matrix ``M = d^2L/dv^2``, so the momentum rows
        get ``||M||_inf (|q|_inf / h + |v|_inf)`` (a cart of 2 kg 1e4 m down its rail at
        ``h = 1e-4`` s: 2e8 kg m/s, so no residual below ``eps`` times that, 5e-8, can be
        promised in float64); the ``del`` form's position rows
        ``q_next - (q + h v)`` get ``|q|_inf + h |v|_inf``. Residual tolerances far from
        the origin scale with it (the environments' check on their ground truth).
        """
        h = _checks.positive("h", h)
        key = ("level", h)
        if key not in self._cache:
            s = self.system
            n = s.nq
            x, th = ca.SX.sym("x", self.nx), ca.SX.sym("theta", self.n_theta)
            q, v = x[:n], x[n:]
            M = ca.hessian(self.lagrangian(q, v, th), v)[0]
            q_size, v_size = ca.norm_inf(q), ca.norm_inf(v)
            momentum = ca.mmax(ca.sum2(ca.fabs(M))) * (q_size / h + v_size)
            if self.form == "position_momentum":
                level = ca.repmat(momentum, self.nx, 1)
            else:
                position = q_size + h * v_size
                level = ca.vertcat(ca.repmat(position, n, 1), ca.repmat(momentum, n, 1))
            self._cache[key] = ca.Function(
                f"{s.name}_{self.rule}_residual_level", [x, th], [level], ["x", "theta"], ["level"]
            )
        return self._cache[key]

    def discrete_momentum(self, h: float) -> ca.Function:
        """``(q0, q1, u, theta) -> (p0, p1)``: the discrete Legendre transforms
        ``p0 = -D1 L_d - f-`` and ``p1 = D2 L_d + f+`` (used by Noether checks)."""
        s = self.system
        D1, D2, forces, _ = self._derivatives(_checks.positive("h", h))
        q0, q1, u = ca.SX.sym("q0", s.nq), ca.SX.sym("q1", s.nq), ca.SX.sym("u", s.nu)
        th = ca.SX.sym("theta", self.n_theta)
        fm, fp = forces(q0, q1, u, th)
        return ca.Function(
            "discrete_momentum",
            [q0, q1, u, th],
            [-D1(q0, q1, th) - fm, D2(q0, q1, th) + fp],
        )

    def __repr__(self) -> str:
        return f"VariationalIntegrator({self.system!r}, rule={self.rule!r}, form={self.form!r})"
