"""Integrators: convergence order, structure preservation and the equations themselves.

Long runs use ``step.mapaccum(N)``, which evaluates N steps in one CasADi call, so
10^5 steps of a pendulum take well under a second.
"""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest

from vimpc.errors import InputError
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator, acceleration
from vimpc.mechanics import (
    CartPendulum,
    CartPole,
    DoublePendulum,
    FourBar,
    HenonHeiles,
    Kepler,
    NPendulum,
    Pendulum,
    RollingDisk,
)
from vimpc.models import NominalModel, integrator_model

RULES = ("first_order", "midpoint", "trapezoidal")
FORMS = ("position_momentum", "del")


def rollout(integrator, h, x0, inputs):
    """States ``x_0..x_N`` as columns of an ``(nx, N + 1)`` array; ``inputs`` is ``(nu, N)``."""
    inputs = np.atleast_2d(np.asarray(inputs, dtype=np.float64))
    step = integrator.step_function(h)
    n = inputs.shape[1]
    xs = np.asarray(step.mapaccum(n)(x0, inputs, np.zeros((0, n))))  # no theta
    return np.hstack([np.asarray(x0, dtype=np.float64).reshape(-1, 1), xs])


def held(u, n):
    """A constant input held for ``n`` steps, as ``(nu, n)``."""
    return np.tile(np.asarray(u, dtype=np.float64).reshape(-1, 1), (1, n))


def mapped(system, name, n):
    """``system.function(name)`` mapped over ``n`` columns."""
    return system.function(name).map(n)


def slope(hs, errors):
    """Least-squares slope of ``log error`` against ``log h``: the measured order."""
    return float(np.polyfit(np.log(hs), np.log(errors), 1)[0])


# -- convergence order ----------------------------------------------------------------------

# Cart-pole with friction on both joints under a constant 2 N push, from a state where
# every method is in its asymptotic regime for h <= 0.01 (checked: local slopes between
# consecutive halvings all within 0.05 of the order).
CARTPOLE = CartPole(friction=[0.3, 0.05])
X0 = np.array([0.2, -0.8, -0.3, 0.4])
U0 = np.array([2.0])
T = 1.0


def _exact_cartpole():
    # RK4 with h = 1e-4 on the acceleration of vimpc.integrators.acceleration: its
    # global error C h^4 is ~1e-15 here (from the RK4 errors measured below, C ~ 0.02),
    # far below every error measured against it.
    n = round(T / 1e-4)
    return rollout(ExplicitIntegrator(CARTPOLE, "rk4"), T / n, X0, held(U0, n))[:, -1]


EXACT = None


def exact_cartpole():
    global EXACT
    if EXACT is None:
        EXACT = _exact_cartpole()
    return EXACT


def test_fine_midpoint_agrees_with_rk4_reference():
    # Two independent routes to the same forced, damped motion: the discrete
    # Lagrange-d'Alembert equations (derivatives of L_d, discrete forces) and the
    # Euler-Lagrange acceleration solved explicitly. Midpoint error at h = 1e-4 is
    # C h^2 with C ~ 3 (measured below), so they agree to ~1e-7.
    n = round(T / 1e-4)
    fine = rollout(VariationalIntegrator(CARTPOLE, "midpoint"), T / n, X0, held(U0, n))[:, -1]
    np.testing.assert_allclose(fine, exact_cartpole(), atol=1e-6)
    # the push and the friction matter: the frictionless, unforced motion ends elsewhere
    free = rollout(ExplicitIntegrator(CartPole(), "rk4"), 0.01, X0, held([0.0], 100))[:, -1]
    assert np.linalg.norm(free - exact_cartpole()) > 0.1


@pytest.mark.parametrize(
    ("rule", "order"), [("midpoint", 2), ("trapezoidal", 2), ("first_order", 1)]
)
def test_variational_order(rule, order):
    integ = VariationalIntegrator(CARTPOLE, rule, "position_momentum")
    hs = np.array([0.01, 0.005, 0.0025, 0.00125])
    errors = [
        np.linalg.norm(rollout(integ, h, X0, held(U0, round(T / h)))[:, -1] - exact_cartpole())
        for h in hs
    ]
    p = slope(hs, errors)
    assert order - 0.1 <= p <= order + 0.1, f"{rule}: measured order {p:.3f}, errors {errors}"


@pytest.mark.parametrize(
    ("rule", "order"), [("midpoint", 2), ("trapezoidal", 2), ("first_order", 1)]
)
def test_del_form_order_from_consistent_start(rule, order):
    # In the del form the state's v is the forward difference (q_1 - q_0)/h. Started
    # from the exact q(h), the position sequence has the rule's order (the form only
    # changes the state, not the discrete flow on positions).
    integ = VariationalIntegrator(CARTPOLE, rule, "del")
    rk4 = ExplicitIntegrator(CARTPOLE, "rk4")
    hs = np.array([0.01, 0.005, 0.0025, 0.00125])
    errors = []
    for h in hs:
        q1 = rollout(rk4, h / 50, X0, held(U0, 50))[:2, -1]  # exact to ~1e-18
        x0 = np.concatenate([X0[:2], (q1 - X0[:2]) / h])
        qT = rollout(integ, h, x0, held(U0, round(T / h)))[:2, -1]
        errors.append(np.linalg.norm(qT - exact_cartpole()[:2]))
    p = slope(hs, errors)
    assert order - 0.1 <= p <= order + 0.1, f"{rule} (del): measured order {p:.3f}"


@pytest.mark.parametrize(("method", "order"), [("rk4", 4), ("euler", 1), ("symplectic_euler", 1)])
def test_explicit_order(method, order):
    integ = ExplicitIntegrator(CARTPOLE, method)
    hs = (
        np.array([0.01, 0.005, 0.0025, 0.00125])
        if order == 1
        else np.array([0.02, 0.01, 0.005, 0.0025])
    )
    errors = [
        np.linalg.norm(rollout(integ, h, X0, held(U0, round(T / h)))[:, -1] - exact_cartpole())
        for h in hs
    ]
    p = slope(hs, errors)
    assert order - 0.1 <= p <= order + 0.1, f"{method}: measured order {p:.3f}, errors {errors}"


# -- energy (GP-VI paper, Fig. 1a) ------------------------------------------------------------


def _pendulum_energy_run(integrator, N=100_000, h=0.01):
    s = Pendulum()  # m = l = 1, frictionless
    x0 = np.array([math.pi / 2, 0.0])  # released from horizontal: E = -m g l/2 cos(pi/2) = 0
    xs = rollout(integrator(s), h, x0, np.zeros((1, N)))
    q, v = xs[:1], xs[1:]
    return s, q, v


def _halves(dE):
    n = dE.size // 2
    return float(np.max(dE[:n])), float(np.max(dE[n:]))


def test_midpoint_energy_bounded():
    s, q, v = _pendulum_energy_run(lambda s: VariationalIntegrator(s, "midpoint"))
    E = np.asarray(mapped(s, "E", q.shape[1])(q, v)).ravel()
    dE = np.abs(E - E[0])
    first, second = _halves(dE)
    # m g l/2 = 4.9 J sets the energy scale; the midpoint rule's modified energy is
    # O(h^2) away, here 3e-4 J, and does not grow over 1000 s (about 600 periods)
    assert first < 1e-3 and second < 1e-3
    assert second <= 1.5 * first
    assert np.all(np.isfinite(E))


def test_first_order_del_energy_bounded():
    # The GP-VI paper's integrator (eq. 6). Its state velocity is the forward difference,
    # an O(h) estimate of q'(t_k); the mean of the two differences around q_k is O(h^2),
    # so the energy is evaluated with it.
    s, q, v = _pendulum_energy_run(lambda s: VariationalIntegrator(s, "first_order", "del"))
    v_node = 0.5 * (v[:, 1:] + v[:, :-1])
    E = np.asarray(mapped(s, "E", v_node.shape[1])(q[:, 1:], v_node)).ravel()
    dE = np.abs(E - E[0])
    first, second = _halves(dE)
    assert first < 5e-3 and second < 5e-3
    assert second <= 1.5 * first


def test_explicit_euler_energy_grows():
    s, q, v = _pendulum_energy_run(lambda s: ExplicitIntegrator(s, "euler"))
    E = np.asarray(mapped(s, "E", q.shape[1])(q, v)).ravel()
    # Euler multiplies the amplitude of each oscillation mode by sqrt(1 + h^2 w^2) per
    # step: the energy error grows without bound; block maxima increase monotonically.
    blocks = np.max(np.abs(E[1:] - E[0]).reshape(10, -1), axis=1)
    assert np.all(np.diff(blocks) > 0), blocks
    assert blocks[-1] > 100.0  # far beyond the 4.9 J of the swing


# -- holonomic constraints (GP-VI paper, Fig. 1b) -----------------------------------------------


def _constrained_cases():
    fb = FourBar()
    q, v = fb.assemble(0.3, 2.0)
    dp = DoublePendulum()  # m = l = 1 rods, as in the paper
    chain = NPendulum(3)
    return {
        "FourBarMaximal": (fb.maximal(), np.concatenate(fb.to_maximal(q, v))),
        "DoublePendulumMaximal": (
            dp.maximal(),
            np.concatenate(dp.to_maximal(np.array([math.pi / 2, 0.0]), np.zeros(2))),
        ),
        "NPendulum3": (
            chain,
            np.concatenate(chain.from_angles([math.pi / 2, 0.0, 0.3], [0.0] * 3)),
        ),
    }


def _constraint_residuals(system, xs):
    """Max-norm of ``g(q_k)`` and ``G(q_k) v_k`` for each column of ``xs``."""
    n = xs.shape[1]
    q, v = xs[: system.nq], xs[system.nq :]
    qs, vs = ca.SX.sym("q", system.nq), ca.SX.sym("v", system.nv)
    Gv = ca.Function("Gv", [qs, vs], [ca.mtimes(system.function("G")(qs), vs)]).map(n)
    g = np.max(np.abs(np.asarray(mapped(system, "g", n)(q))), axis=0)
    gv = np.max(np.abs(np.asarray(Gv(q, v))), axis=0)
    return g, gv


@pytest.mark.parametrize("case", ["FourBarMaximal", "DoublePendulumMaximal", "NPendulum3"])
def test_constrained_midpoint_keeps_constraints(case):
    system, x0 = _constrained_cases()[case]
    g, gv = _constraint_residuals(system, x0.reshape(-1, 1))
    assert g.max() < 1e-12 and gv.max() < 1e-12  # the start is on the manifold
    N = 10_000
    xs = rollout(VariationalIntegrator(system, "midpoint"), 0.01, x0, np.zeros((system.nu, N)))
    g, gv = _constraint_residuals(system, xs)
    assert g.max() <= 1e-10, f"position constraint drifted to {g.max():.3g}"
    assert gv.max() <= 1e-10, f"velocity constraint drifted to {gv.max():.3g}"
    # the motion is nontrivial: the mechanism actually moves
    assert np.ptp(xs[: system.nq], axis=1).max() > 0.5
    # RK4 on the index-1 equations holds the constraint only at acceleration level:
    # after 100 steps it has left the manifold and keeps drifting away
    xs_rk4 = rollout(ExplicitIntegrator(system, "rk4"), 0.01, x0, np.zeros((system.nu, 1000)))
    g_rk4, _ = _constraint_residuals(system, xs_rk4)
    assert g_rk4[100] > 1e-8
    assert g_rk4[1000] > 1e-4 and g_rk4[1000] > 10 * g_rk4[100]
    xs_euler = rollout(ExplicitIntegrator(system, "euler"), 0.01, x0, np.zeros((system.nu, 100)))
    assert _constraint_residuals(system, xs_euler)[0][100] > 1e-3


def test_first_order_del_projection_keeps_constraints():
    # The GP-VI paper's integrator (10) with projection, on its double pendulum in maximal
    # coordinates: g(q_{k+2}) = 0 is one of the step equations (eq. 6c). The start is a
    # consistent del state, q_1 = q_0 + h v_0 on the manifold.
    dp = DoublePendulum()
    system = dp.maximal()
    h, N = 0.01, 10_000
    theta0, rate0 = np.array([math.pi / 2, 0.0]), np.array([0.5, -1.0])
    z0, _ = dp.to_maximal(theta0, rate0)
    z1, _ = dp.to_maximal(theta0 + h * rate0, rate0)
    x0 = np.concatenate([z0, (z1 - z0) / h])
    xs = rollout(VariationalIntegrator(system, "first_order", "del"), h, x0, np.zeros((2, N)))
    g = np.max(np.abs(np.asarray(mapped(system, "g", N + 1)(xs[: system.nq]))), axis=0)
    assert g.max() <= 1e-10
    assert np.ptp(xs[: system.nq], axis=1).max() > 0.5


# -- discrete Noether theorem ----------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_kepler_angular_momentum(rule):
    # L and every L_d here are invariant under rotations q -> R q, so the discrete
    # momentum map m (x p_y - y p_x) is conserved (Marsden & West 2001, thm 1.3.3). In
    # the position-momentum form the state's p = dL/dv(q, v) is the discrete momentum at
    # the nodes, so the conserved quantity is computed from the state exactly.
    s = Kepler(k=0.4004)
    x0 = np.array([1.0, 0.0, 0.0, 0.45])  # eccentric orbit, perihelion ~0.34
    xs = rollout(VariationalIntegrator(s, rule), 0.01, x0, np.zeros((2, 10_000)))
    Lz = s.angular_momentum(xs[:2], xs[2:])
    rel = np.max(np.abs(Lz - Lz[0])) / abs(Lz[0])
    assert rel <= 1e-10
    r = np.hypot(xs[0], xs[1])
    assert r.min() < 0.4 and r.max() > 0.99  # several passes through the perihelion


@pytest.mark.parametrize("rule", RULES)
def test_cart_pendulum_cart_momentum(rule):
    # L does not depend on s: translation symmetry, so dL/ds' is conserved without input.
    # With a constant push u the discrete momentum balance is exact: the left and right
    # discrete forces add up to h u on s in every step, so P_k = P_0 + k h u.
    s = CartPendulum()
    x0 = np.array([0.0, 0.3, 0.5, -1.0])  # falls from near upright and swings over
    h, N = 0.01, 10_000
    integ = VariationalIntegrator(s, rule)
    for u in (0.0, 0.7):
        xs = rollout(integ, h, x0, np.full((1, N), u))
        P = np.asarray(mapped(s, "p", N + 1)(xs[:2], xs[2:]))[0]
        expected = P[0] + h * u * np.arange(N + 1)
        assert np.max(np.abs(P - expected)) <= 1e-10
        assert np.ptp(xs[1]) > math.pi  # the pendulum goes over the top
    # the check can fail: friction on the cart dissipates the momentum
    damped = VariationalIntegrator(s.with_params(friction=[0.2, 0.0]), rule)
    xs = rollout(damped, h, x0, np.zeros((1, 1000)))
    P = np.asarray(mapped(s, "p", 1001)(xs[:2], xs[2:]))[0]
    assert abs(P[-1] - P[0]) > 1e-3


# -- symplecticity ---------------------------------------------------------------------------

OMEGA = {n: np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]]) for n in (2,)}


def one_step_jacobian(system, integrator, h):
    """CasADi function ``(z, u) -> d z_1 / d z_0`` of the one-step map in ``z = (q, p)``.

    The chain ``(q0, p0) -> (q0, v0) -> step -> (q1, v1) -> (q1, p1)``: the first map is
    the inverse Legendre transform ``v = M(q)^{-1} p`` (natural systems), the last is
    ``p = dL/dv``; CasADi differentiates through the Newton solve by the implicit
    function theorem.
    """
    n = system.nq
    z, u = ca.MX.sym("z", 2 * n), ca.MX.sym("u", system.nu)
    q0, p0 = z[:n], z[n:]
    v0 = ca.solve(system.function("M")(q0), p0)
    x1 = integrator.step_function(h)(ca.vertcat(q0, v0), u, ca.DM(0, 1))
    z1 = ca.vertcat(x1[:n], system.function("p")(x1[:n], x1[n:]))
    return ca.Function("J", [z, u], [ca.jacobian(z1, z)])


def symplectic_defect(system, integrator, h, rng, u_scale, count=5):
    J = one_step_jacobian(system, integrator, h)
    n = system.nq
    defects, dets = [], []
    for _ in range(count):
        z = rng.uniform(-1.0, 1.0, 2 * n)
        u = u_scale * rng.normal(size=system.nu)
        Jn = np.asarray(J(z, u))
        defects.append(np.max(np.abs(Jn.T @ OMEGA[n] @ Jn - OMEGA[n])))
        dets.append(np.linalg.det(Jn))
    return max(defects), np.array(dets)


@pytest.mark.parametrize(
    "system", [DoublePendulum(), HenonHeiles()], ids=["DoublePendulum", "HenonHeiles"]
)
@pytest.mark.parametrize("rule", ["midpoint", "trapezoidal"])
def test_one_step_map_is_symplectic(system, rule):
    rng = np.random.default_rng(10)
    integ = VariationalIntegrator(system, rule)
    # unforced
    defect, dets = symplectic_defect(system, integ, 0.05, rng, u_scale=0.0)
    assert defect <= 1e-9
    np.testing.assert_allclose(dets, 1.0, atol=1e-9)
    # a constant input with constant B is the gradient of -u.q, a conservative force:
    # still symplectic
    defect, _ = symplectic_defect(system, integ, 0.05, rng, u_scale=1.0)
    assert defect <= 1e-9


@pytest.mark.parametrize("rule", ["midpoint", "trapezoidal"])
def test_frictional_map_is_not_symplectic(rule):
    # Viscous friction contracts phase-space volume: det J < 1 and J^T Omega J != Omega.
    s = DoublePendulum(friction=[0.3, 0.2])
    defect, dets = symplectic_defect(
        s, VariationalIntegrator(s, rule), 0.05, np.random.default_rng(11), 1.0
    )
    assert defect > 1e-3
    assert np.all(dets < 1.0 - 1e-3)


def test_rk4_is_not_symplectic():
    s = DoublePendulum()
    defect, _ = symplectic_defect(
        s, ExplicitIntegrator(s, "rk4"), 0.05, np.random.default_rng(12), 0.0
    )
    assert defect > 1e-9


def test_step_far_from_the_origin():
    # Regression: Newton's absolute tolerances sat below the residual's round-off floor
    # (~ M ulp(q) / h) once |q| reached a few hundred, so a disk rolled to theta ~ 300 rad
    # (its env allows 1e4) or a cart 400 m down the rail made the step raise. The
    # physics gives the answer: L of the disk does not depend on theta, x, y and L of the
    # cart-pendulum not on s, so the step commutes with shifting those coordinates, up
    # to the round-off of the shifted numbers (ulp(1e4) = 1.8e-12 on q, / h on v).
    disk, cart = RollingDisk(friction=[0.1, 0.2]), CartPendulum(friction=[0.0, 0.1])
    q = np.array([0.3, 0.4, 0.5, -0.2])
    cases = [
        (
            disk,
            np.concatenate([q, disk.consistent_velocity(q, 5.0, 1.0)]),
            [0.3, -0.1],
            [1e4, 0, 1e3, -1e3],
        ),
        (cart, np.array([0.2, 2.0, 30.0, -1.0]), [0.7], [1e4, 0.0]),
    ]
    for system, x, u, shift in cases:
        shift = np.concatenate([shift, np.zeros(system.nv)])
        for rule in ("midpoint", "first_order"):
            for h in (0.01, 1e-4):
                step = VariationalIntegrator(system, rule).step_function(h)
                near = np.asarray(step(x, u, [])).ravel()
                far = np.asarray(step(x + shift, u, [])).ravel() - shift
                n = system.nq
                np.testing.assert_allclose(far[:n], near[:n], atol=1e-10)
                np.testing.assert_allclose(far[n:], near[n:], atol=1e-9 / (h / 1e-3))


# -- the step solves the residual ------------------------------------------------------------


def _consistency_cases():
    rng = np.random.default_rng(13)
    fb = FourBar(friction=[0.1, 0.2, 0.05, 0.1])
    dp = DoublePendulum(friction=[0.2, 0.1]).maximal()
    disk = RollingDisk(friction=[0.1, 0.3])

    def pendulum_state():
        return rng.uniform([-3.0, -2.0], [3.0, 2.0])

    def fourbar_state():
        return np.concatenate(fb.assemble(rng.uniform(-math.pi, math.pi), rng.normal()))

    def dp_state():
        return np.concatenate(
            DoublePendulum().to_maximal(rng.uniform(-2, 2, 2), rng.normal(size=2))
        )

    def disk_state():
        q = rng.uniform(-1.0, 1.0, 4)
        return np.concatenate([q, disk.consistent_velocity(q, rng.normal(), rng.normal())])

    return {
        "Pendulum": (Pendulum(friction=[0.3]), pendulum_state),
        "FourBar": (fb, fourbar_state),
        "DoublePendulumMaximal": (dp, dp_state),
        "RollingDisk": (disk, disk_state),
    }


@pytest.mark.parametrize("case", ["Pendulum", "FourBar", "DoublePendulumMaximal", "RollingDisk"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rule", RULES)
def test_step_solves_residual(case, rule, form):
    system, sample = _consistency_cases()[case]
    rng = np.random.default_rng(14)
    integ = VariationalIntegrator(system, rule, form)
    h = 0.02
    step, residual = integ.step_function(h), integ.residual_function(h)
    for _ in range(4):
        x, u = sample(), rng.normal(size=system.nu)
        xn = np.asarray(step(x, u, [])).ravel()
        assert np.all(np.isfinite(xn))
        assert np.max(np.abs(np.asarray(residual(x, u, xn, [])))) <= 1e-10
        # the residual pins the step: another x_next does not solve it
        moved = xn + 1e-4 * rng.normal(size=xn.size)
        assert np.max(np.abs(np.asarray(residual(x, u, moved, [])))) > 1e-8


def test_first_order_del_is_gp_vi_equation_6():
    # GP-VI paper eq. 6a-6c without constraints, for a rod pendulum (inertia about the
    # pivot I = m l^2/3, V = -m g l/2 cos q) with torque tau and friction c. With
    # L_d = h L(q_k, v_k), v_k = (q_{k+1} - q_k)/h and f- = h F(q_k, v_k, u), f+ = 0, the
    # DEL equation at q_{k+1} reads
    #   I v_k - I v_{k+1} - h dV/dq(q_{k+1}) + h (tau - c v_{k+1}) = 0,
    # i.e. x_{k+1} = x_k + h v_k and (I + h c) v_{k+1} = I v_k - h dV/dq(x_{k+1}) + h tau.
    m, l, g, c, h = 1.2, 0.8, 9.81, 0.15, 0.01
    s = Pendulum(m=m, l=l, g=g, friction=[c])
    I = m * l * l / 3
    rng = np.random.default_rng(15)
    taus = rng.uniform(-2.0, 2.0, 200)
    x = np.array([2.0, -0.5])
    expected = [x]
    for tau in taus:
        q1 = x[0] + h * x[1]
        dV = m * g * l / 2 * math.sin(q1)
        v1 = (I * x[1] - h * dV + h * tau) / (I + h * c)
        x = np.array([q1, v1])
        expected.append(x)
    got = rollout(VariationalIntegrator(s, "first_order", "del"), h, expected[0], taus[None, :])
    np.testing.assert_allclose(got.T, np.array(expected), rtol=0, atol=1e-12)


def test_acceleration_reference():
    # Rod pendulum: I q'' = tau - c q' - m g l/2 sin q with I = m l^2/3, so for the
    # frictionless unit rod q'' = -1.5 g/l sin q (Brudigam's energy.jl).
    m, l, g, c = 1.2, 0.8, 9.81, 0.15
    acc = acceleration(Pendulum(m=m, l=l, g=g, friction=[c]))
    for q, v, tau in [(0.3, 1.0, 0.5), (2.0, -0.4, -1.0)]:
        ref = (tau - c * v - m * g * l / 2 * math.sin(q)) / (m * l * l / 3)
        assert float(acc([q], [v], [tau], [])) == pytest.approx(ref, rel=1e-13)
    unit = acceleration(Pendulum())
    assert float(unit([0.7], [0.0], [0.0], [])) == pytest.approx(
        -1.5 * 9.81 * math.sin(0.7), rel=1e-13
    )


# -- nonholonomic: the rolling disk ------------------------------------------------------------


def test_rolling_disk_constraints_with_random_inputs():
    s = RollingDisk()
    h, N = 0.01, 1000
    rng = np.random.default_rng(16)
    q0 = np.array([0.1, 0.4, 0.5, -0.2])
    x0 = np.concatenate([q0, s.consistent_velocity(q0, 0.7, 0.3)])
    us = rng.uniform(-1.0, 1.0, (2, N))
    qs, ws = ca.SX.sym("q", 4), ca.SX.sym("w", 4)
    Aw = ca.Function("Aw", [qs, ws], [ca.mtimes(s.function("A")(qs), ws)])  # A(q) w
    for rule in ("midpoint", "trapezoidal"):
        xs = rollout(VariationalIntegrator(s, rule), h, x0, us)
        q, v = xs[:4], xs[4:]
        assert np.max(np.abs(np.asarray(Aw.map(N + 1)(q, v)))) <= 1e-10
        # discrete constraint A((q0 + q1)/2)(q1 - q0) = 0 (discrete Lagrange-d'Alembert)
        q_mid = 0.5 * (q[:, 1:] + q[:, :-1])
        assert np.max(np.abs(np.asarray(Aw.map(N)(q_mid, np.diff(q, axis=1))))) <= 1e-10
        assert np.ptp(q[2]) > 0.1 and np.ptp(q[1]) > 0.1  # it rolls and turns


def test_rolling_disk_reduced_dynamics():
    # On the constraint, theta and phi decouple: (I + m R^2) theta'' = u_drive and
    # J phi'' = u_steer. Under constant torques both accelerations are constant, and the
    # midpoint rule integrates constant accelerations exactly (its discrete Lagrangian
    # is exact for a quadratic L with linear forcing).
    s = RollingDisk(I=0.8, J=1.3, m=2.0, R=0.3)
    I, J, m, R = (s.params[k] for k in ("I", "J", "m", "R"))
    Ieff = I + m * R * R
    h, N = 0.01, 1000
    t = h * np.arange(N + 1)
    q0 = np.array([0.1, 0.4, 0.5, -0.2])
    integ = VariationalIntegrator(s, "midpoint")
    # straight rolling (no steering): the whole state is exact; the contact point moves
    # along the heading by R (theta - theta0)
    u = np.array([0.8, 0.0])
    x0 = np.concatenate([q0, s.consistent_velocity(q0, 0.7, 0.0)])
    xs = rollout(integ, h, x0, held(u, N))
    theta = q0[0] + 0.7 * t + u[0] * t**2 / (2 * Ieff)
    np.testing.assert_allclose(xs[0], theta, atol=1e-9)
    np.testing.assert_allclose(xs[4], 0.7 + u[0] * t / Ieff, atol=1e-9)
    np.testing.assert_allclose(xs[2], q0[2] + R * math.cos(q0[1]) * (theta - q0[0]), atol=1e-9)
    np.testing.assert_allclose(xs[3], q0[3] + R * math.sin(q0[1]) * (theta - q0[0]), atol=1e-9)
    # rolling and steering: phi, phi' and theta' stay exact. theta itself is not: the
    # discrete constraint makes each step's contact displacement the chord R dtheta
    # along the mid-step heading, which shortens the rolled angle by a factor
    # cos(dphi/2) per step (a local O(h^3), global O(h^2) error).
    u = np.array([0.8, -0.5])
    x0 = np.concatenate([q0, s.consistent_velocity(q0, 0.7, 0.3)])
    errors = []
    for hh, n in ((h, N), (h / 2, 2 * N)):
        xs = rollout(integ, hh, x0, held(u, n))
        tt = hh * np.arange(n + 1)
        np.testing.assert_allclose(xs[1], q0[1] + 0.3 * tt + u[1] * tt**2 / (2 * J), atol=1e-9)
        np.testing.assert_allclose(xs[5], 0.3 + u[1] * tt / J, atol=1e-9)
        np.testing.assert_allclose(xs[4], 0.7 + u[0] * tt / Ieff, atol=1e-9)
        theta = q0[0] + 0.7 * tt + u[0] * tt**2 / (2 * Ieff)
        errors.append(abs(xs[0, -1] - theta[-1]))
    assert 3.8 < errors[0] / errors[1] < 4.2
    # the explicit acceleration gives the same reduced equations
    acc = acceleration(s)
    a = np.asarray(acc(x0[:4], x0[4:], u, [])).ravel()
    np.testing.assert_allclose(a[:2], [u[0] / Ieff, u[1] / J], rtol=1e-12)


# -- bad input ----------------------------------------------------------------------------


def test_bad_integrator_arguments():
    s = Pendulum()
    with pytest.raises(
        InputError, match="rule must be one of .* got 'midpiont'; did you mean 'midpoint'"
    ):
        VariationalIntegrator(s, rule="midpiont")
    with pytest.raises(InputError, match="form .*did you mean 'del'"):
        VariationalIntegrator(s, form="dell")
    with pytest.raises(InputError, match="method .*did you mean 'rk4'"):
        ExplicitIntegrator(s, "rk5")
    integ = VariationalIntegrator(s)
    with pytest.raises(
        InputError, match=r"dt must be a positive integer multiple of the substep 0\.01, got 0\.015"
    ):
        integ.flow(dt=0.015, h=0.01)
    with pytest.raises(InputError, match=r"h must be a positive finite number, got -0\.01"):
        integ.step_function(-0.01)
    with pytest.raises(InputError, match=r"h must be a positive"):
        integ.residual_function(0.0)
    with pytest.raises(InputError, match=r"h must be a positive"):
        ExplicitIntegrator(s).step_function(float("nan"))
    with pytest.raises(InputError, match="substep"):
        integ.flow(dt=0.02, h=-0.01)
    with pytest.raises(TypeError, match="MechanicalSystem"):
        VariationalIntegrator("Pendulum")


def test_flow_is_substeps_of_step():
    s = CartPole(friction=[0.1, 0.1])
    integ = VariationalIntegrator(s, "midpoint")
    x0, u = np.array([0.1, 0.5, 0.0, 1.0]), np.array([0.3])
    flow = integ.flow(0.05, 0.01)
    np.testing.assert_allclose(
        np.asarray(flow(x0, u, [])).ravel(), rollout(integ, 0.01, x0, held(u, 5))[:, -1], atol=1e-14
    )


def test_nominal_model_rejects_unknown_integrator():
    with pytest.raises(
        InputError, match="integrator must be one of .*got 'midpiont'; did you mean 'midpoint'"
    ):
        NominalModel(Pendulum(), 0.02, integrator="midpiont")
    with pytest.raises(InputError, match="dt must be a positive"):
        NominalModel(Pendulum(), -0.02)
    with pytest.raises(InputError, match="substeps must be a positive integer, got 0"):
        NominalModel(Pendulum(), 0.02, substeps=0)


# -- a Lagrangian L(q, v, theta) given as a callable ---------------------------------------------
#
# The catalog Pendulum is a uniform rod pivoted at one end: its centre moves on a circle of
# radius l/2, so L = 1/2 (J + m l^2/4) theta'^2 + m g (l/2) cos(theta). The same Lagrangian
# with theta = (J + m l^2/4, m g l/2) is written below by hand; the cart-pole's adds the
# cart: the pole's centre is at (s + l/2 sin th, -l/2 cos th), so
# L = 1/2 (mc + m) s'^2 + m (l/2) cos(th) s' th' + 1/2 (J + m l^2/4) th'^2 + m g (l/2) cos(th).


def rod_lagrangian(q, v, theta):
    return 0.5 * theta[0] * v[0] ** 2 + theta[1] * ca.cos(q[0])


def rod_theta(s):
    m, l, J, g = (s.params[k] for k in ("m", "l", "J", "g"))
    return np.array([J + m * l * l / 4, m * g * l / 2])


def cartpole_lagrangian(q, v, theta):
    c = ca.cos(q[1])
    return (
        0.5 * theta[0] * v[0] ** 2
        + theta[1] * c * v[0] * v[1]
        + 0.5 * theta[2] * v[1] ** 2
        + theta[3] * c
    )


def cartpole_theta(s):
    mc, m, l, J, g = (s.params[k] for k in ("mc", "m", "l", "J", "g"))
    return np.array([mc + m, m * l / 2, J + m * l * l / 4, m * g * l / 2])


ROD = Pendulum(m=1.3, l=0.7, J=0.09, g=9.81)
ROD_STATES = [np.array([2.0, -1.3]), np.array([-0.4, 3.0]), np.array([0.9, 0.2])]
ROD_INPUTS = [np.array([0.7]), np.array([-2.0]), np.array([0.0])]


def _num(fn, *args):
    return np.asarray(fn(*args), dtype=np.float64).ravel()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rule", RULES)
def test_given_lagrangian_reproduces_catalog_pendulum(rule, form):
    h = 0.05
    catalog = VariationalIntegrator(ROD, rule, form).step_function(h)
    given = VariationalIntegrator(ROD, rule, form, lagrangian=rod_lagrangian, n_theta=2)
    step = given.step_function(h)
    for x, u in zip(ROD_STATES, ROD_INPUTS, strict=True):
        expected = _num(catalog, x, u, [])
        np.testing.assert_allclose(_num(step, x, u, rod_theta(ROD)), expected, rtol=1e-14)
        assert np.linalg.norm(expected - x) > 1e-2  # the step moves
    residual = given.residual_function(h)
    xn = _num(step, ROD_STATES[0], ROD_INPUTS[0], rod_theta(ROD))
    assert np.max(np.abs(_num(residual, ROD_STATES[0], ROD_INPUTS[0], xn, rod_theta(ROD)))) < 1e-10


@pytest.mark.parametrize("method", ["rk4", "euler", "symplectic_euler"])
def test_given_lagrangian_reproduces_catalog_pendulum_explicit(method):
    h = 0.05
    catalog = ExplicitIntegrator(ROD, method).step_function(h)
    step = ExplicitIntegrator(ROD, method, lagrangian=rod_lagrangian, n_theta=2).step_function(h)
    for x, u in zip(ROD_STATES, ROD_INPUTS, strict=True):
        np.testing.assert_allclose(
            _num(step, x, u, rod_theta(ROD)), _num(catalog, x, u, []), rtol=1e-14
        )


def test_given_lagrangian_reproduces_catalog_cartpole():
    # two coordinates, a configuration-dependent mass matrix and friction from the system
    s = CartPole(mc=1.3, m=0.7, l=0.6, friction=[0.2, 0.05])
    theta = cartpole_theta(s)
    rng = np.random.default_rng(30)
    for integrator, given in (
        (
            VariationalIntegrator(s),
            VariationalIntegrator(s, lagrangian=cartpole_lagrangian, n_theta=4),
        ),
        (ExplicitIntegrator(s), ExplicitIntegrator(s, lagrangian=cartpole_lagrangian, n_theta=4)),
    ):
        catalog, step = integrator.step_function(0.05), given.step_function(0.05)
        for _ in range(3):
            x, u = rng.uniform(-2.0, 2.0, 4), rng.uniform(-5.0, 5.0, 1)
            np.testing.assert_allclose(
                _num(step, x, u, theta), _num(catalog, x, u, []), rtol=1e-13, atol=1e-14
            )


def test_energy_and_momentum_by_automatic_differentiation():
    # E = v . dL/dv - L and p = dL/dv of the given Lagrangian against the systems' own
    # energy and momentum (written out, not differentiated, in vimpc.mechanics)
    rng = np.random.default_rng(31)
    cartpole = CartPole(mc=1.3, m=0.7, l=0.6)
    cases = [
        (ROD, rod_lagrangian, rod_theta(ROD)),
        (cartpole, cartpole_lagrangian, cartpole_theta(cartpole)),
    ]
    for s, L, theta in cases:
        given = VariationalIntegrator(s, lagrangian=L, n_theta=theta.size)
        catalog = ExplicitIntegrator(s)
        for _ in range(5):
            x = rng.uniform(-3.0, 3.0, 2 * s.nq)
            q, v = x[: s.nq], x[s.nq :]
            E, p = float(s.energy(q, v)), np.asarray(s.momentum(q, v)).ravel()
            assert float(given.energy_function()(x, theta)) == pytest.approx(E, rel=1e-13)
            np.testing.assert_allclose(_num(given.momentum_function(), x, theta), p, rtol=1e-13)
            assert float(catalog.energy_function()(x, [])) == pytest.approx(E, rel=1e-13)
            np.testing.assert_allclose(_num(catalog.momentum_function(), x, []), p, rtol=1e-13)
    # the rod's energy by hand: 1/2 I v^2 - m g l/2 cos(q) with I = J + m l^2/4
    I, mgl2 = rod_theta(ROD)
    given = ExplicitIntegrator(ROD, lagrangian=rod_lagrangian, n_theta=2)
    assert float(given.energy_function()([0.3, 2.0], [I, mgl2])) == pytest.approx(
        0.5 * I * 4.0 - mgl2 * math.cos(0.3), rel=1e-14
    )


@pytest.mark.parametrize("substeps", [1, 2])
@pytest.mark.parametrize("integrator", ["midpoint", "del", "rk4"])
def test_theta_as_constants_or_parameters(integrator, substeps):
    # the same numbers whether theta is baked in or passed as the model's p
    if integrator == "rk4":
        integ = ExplicitIntegrator(ROD, lagrangian=rod_lagrangian, n_theta=2)
    else:
        form = "del" if integrator == "del" else "position_momentum"
        integ = VariationalIntegrator(ROD, "midpoint", form, lagrangian=rod_lagrangian, n_theta=2)
    theta = rod_theta(ROD)
    fixed = integrator_model(integ, 0.04, substeps=substeps, theta=theta)
    exposed = integrator_model(
        integ,
        0.04,
        substeps=substeps,
        theta=theta,
        theta_as_parameters=True,
        theta_names=("I", "k"),
    )
    assert (fixed.np, exposed.np) == (0, 2)
    assert exposed.param_names == ("I", "k")
    np.testing.assert_array_equal(exposed.p_default, theta)
    for x, u in zip(ROD_STATES, ROD_INPUTS, strict=True):
        a, b = _num(fixed.step, x, u, []), _num(exposed.step, x, u, theta)
        np.testing.assert_allclose(b, a, rtol=1e-15, atol=1e-15)
        assert float(fixed.energy(x, [])) == pytest.approx(
            float(exposed.energy(x, theta)), rel=1e-15
        )
        if fixed.residual is not None:
            moved = a + 1e-3
            np.testing.assert_allclose(
                _num(exposed.residual, x, u, moved, theta),
                _num(fixed.residual, x, u, moved, []),
                rtol=1e-15,
                atol=1e-15,
            )
    assert (
        (fixed.residual is None)
        == (exposed.residual is None)
        == (integrator == "rk4" or substeps > 1)
    )


def _zero_crossings_period(xs, h):
    """Mean period from the upward zero crossings of the angle (linear interpolation)."""
    q = xs[0]
    idx = np.flatnonzero((q[:-1] < 0) & (q[1:] >= 0))
    t = (idx + q[idx] / (q[idx] - q[idx + 1])) * h
    return float(np.mean(np.diff(t)))


def test_parameters_change_the_motion():
    # Small swings of L = 1/2 I v^2 + k cos(q) have the period 2 pi sqrt(I / k)
    # (1 + q0^2/16 + ...: 6e-4 at q0 = 0.1) up to the midpoint rule's O((h w)^2 / 12).
    # With theta as p, a larger inertia I (a heavier bob at the same k) swings slower.
    integ = VariationalIntegrator(ROD, lagrangian=rod_lagrangian, n_theta=2)
    model = integrator_model(integ, 0.01, theta=rod_theta(ROD), theta_as_parameters=True)
    step = model.step.mapaccum(4000)
    x0 = np.array([0.1, 0.0])
    periods = []
    for I in (0.2, 0.8):
        p = np.array([I, 3.0])
        xs = np.asarray(step(x0, np.zeros((1, 4000)), np.tile(p[:, None], (1, 4000))))
        periods.append(_zero_crossings_period(np.hstack([x0[:, None], xs]), 0.01))
        assert periods[-1] == pytest.approx(2 * math.pi * math.sqrt(I / 3.0), rel=2e-3)
    assert periods[1] > 1.9 * periods[0]  # sqrt(4) = 2
    # one step from rest at q0 > 0: the angle falls by about h^2/2 (k/I) sin q0, less for a
    # larger I; without input only k / I matters, with a torque it does not
    x, h = np.array([0.5, 0.0]), 0.01
    light, heavy = (_num(model.step, x, [0.0], [I, 3.0]) for I in (0.2, 0.8))
    assert 0 > heavy[0] - x[0] > light[0] - x[0]
    assert heavy[0] - x[0] == pytest.approx(-(h * h / 2) * 3.0 / 0.8 * math.sin(0.5), rel=1e-2)
    np.testing.assert_allclose(
        _num(model.step, x, [0.0], [0.4, 6.0]), _num(model.step, x, [0.0], [0.2, 3.0]), rtol=1e-13
    )
    forced = [_num(model.step, x, [1.0], p) for p in ([0.4, 6.0], [0.2, 3.0])]
    assert np.linalg.norm(forced[0] - forced[1]) > 1e-5


def test_given_lagrangian_midpoint_energy_bounded():
    # as test_midpoint_energy_bounded, for the model of the given Lagrangian over 10^4
    # steps of 0.01 s (about 60 periods): no drift, and the same motion as the catalog's
    s = Pendulum()
    theta = rod_theta(s)
    given = integrator_model(
        VariationalIntegrator(s, lagrangian=rod_lagrangian, n_theta=2),
        0.01,
        theta=theta,
        theta_as_parameters=True,
    )
    catalog = NominalModel(s, 0.01).discrete_model()
    N = 10_000
    x0 = np.array([math.pi / 2, 0.0])  # E = 0
    xs = np.asarray(given.step.mapaccum(N)(x0, np.zeros((1, N)), np.tile(theta[:, None], (1, N))))
    E = _num(given.energy.map(N), xs, np.tile(theta[:, None], (1, N)))
    E_catalog = np.asarray(mapped(s, "E", N)(xs[:1], xs[1:])).ravel()
    np.testing.assert_allclose(E, E_catalog, atol=1e-12)
    first, second = _halves(np.abs(E))
    assert first < 1e-3 and second < 1e-3 and second <= 1.5 * first
    assert first > 1e-6  # the energy error of the midpoint rule is seen, O(h^2)
    ref = np.asarray(catalog.step.mapaccum(N)(x0, np.zeros((1, N)), np.zeros((0, N))))
    np.testing.assert_allclose(xs, ref, atol=1e-8)


def _viscous_discrete_force(rule, h):
    """The rule's discrete forces of a viscous torque -c q' (c = theta[2]), v01 = (q1 - q0)/h."""

    def force(q0, q1, u, theta):
        f = -theta[2] * (q1 - q0) / h  # F(q, v01) = -c v01 at every quadrature point
        if rule == "first_order":
            return h * f, 0 * f
        return 0.5 * h * f, 0.5 * h * f

    return force


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("rule", RULES)
def test_discrete_force_reproduces_friction(rule, form):
    # A learned discrete force equal to the rule's discrete viscous friction (midpoint:
    # h/2 F(q_mid, v01, u) on each side) on the frictionless rod gives the rod with that
    # friction; the coefficient is a parameter, so theta = (I, k, c) can learn it.
    h, c = 0.02, 0.4
    integ = VariationalIntegrator(
        ROD,
        rule,
        form,
        lagrangian=lambda q, v, th: rod_lagrangian(q, v, th[:2]),
        n_theta=3,
        discrete_force=_viscous_discrete_force(rule, h),
    )
    damped = VariationalIntegrator(ROD.with_params(friction=[c]), rule, form).step_function(h)
    free = VariationalIntegrator(ROD, rule, form).step_function(h)
    theta = np.concatenate([rod_theta(ROD), [c]])
    step = integ.step_function(h)
    for x, u in zip(ROD_STATES, ROD_INPUTS, strict=True):
        expected = _num(damped, x, u, [])
        np.testing.assert_allclose(_num(step, x, u, theta), expected, rtol=1e-13, atol=1e-14)
        # friction matters at this state: the frictionless step is elsewhere
        assert np.linalg.norm(_num(free, x, u, []) - expected) > 1e-4
    # the discrete momenta include the learned force: p1 - p0 = sum of both forces
    q0, q1 = np.array([0.3]), np.array([0.35])
    p0, p1 = integ.discrete_momentum(h)(q0, q1, [0.0], theta)
    p0f, p1f = VariationalIntegrator(ROD, rule, form).discrete_momentum(h)(q0, q1, [0.0], [])
    total = float(p1 - p1f) - float(p0 - p0f)  # f+ + f- = -h c v01
    assert total == pytest.approx(-h * c * (0.05 / h), rel=1e-12)


def test_bad_lagrangian_and_discrete_force():
    s = Pendulum()
    with pytest.raises(
        InputError, match="lagrangian must be a callable L\\(q, v, theta\\), got str"
    ):
        VariationalIntegrator(s, lagrangian="L", n_theta=2)
    with pytest.raises(InputError, match="n_theta = 2 needs a lagrangian"):
        VariationalIntegrator(s, n_theta=2)
    with pytest.raises(InputError, match="n_theta = 1 needs a lagrangian"):
        ExplicitIntegrator(s, n_theta=1)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(InputError, match="n_theta must be a non-negative int"):
            VariationalIntegrator(s, lagrangian=rod_lagrangian, n_theta=bad)
    scalar = "must return a scalar CasADi expression of the SX symbols it is given, got"
    with pytest.raises(InputError, match=rf"{scalar} SX of shape \(2, 1\)"):
        VariationalIntegrator(s, lagrangian=lambda q, v, th: ca.vertcat(v, q), n_theta=0)
    with pytest.raises(InputError, match=rf"{scalar} list$"):
        ExplicitIntegrator(s, lagrangian=lambda q, v, th: [0.0], n_theta=0)
    with pytest.raises(InputError, match=rf"{scalar} ndarray of shape \(1, 1\)"):
        ExplicitIntegrator(s, lagrangian=lambda q, v, th: np.ones((1, 1)))
    # MX cannot mix with the SX symbols; CasADi's own error would not say so
    with pytest.raises(InputError, match=rf"{scalar} MX of shape \(1, 1\)"):
        VariationalIntegrator(s, lagrangian=lambda q, v, th: ca.MX(1.0) * 2)

    def raising(q, v, th):
        raise ZeroDivisionError("no")

    with pytest.raises(
        InputError,
        match=r"lagrangian\(q, v, theta\) failed on CasADi SX symbols of sizes \(1, 1, 2\): "
        "ZeroDivisionError: no",
    ):
        VariationalIntegrator(s, lagrangian=raising, n_theta=2)
    # theta[1] of a one-parameter Lagrangian: CasADi's index error, reported as such
    with pytest.raises(InputError, match=r"sizes \(1, 1, 1\)"):
        ExplicitIntegrator(s, lagrangian=rod_lagrangian, n_theta=1)
    with pytest.raises(InputError, match="discrete_force must be a callable .* got int"):
        VariationalIntegrator(s, discrete_force=3)
    with pytest.raises(InputError, match=r"pair .* of shape \(1, 1\) each, got shapes \[\(2, 1\)"):
        VariationalIntegrator(s, discrete_force=lambda q0, q1, u, th: (ca.vertcat(q0, q1), q1))
    with pytest.raises(InputError, match=r"calling it failed: (TypeError|ValueError)"):
        VariationalIntegrator(s, discrete_force=lambda q0, q1, u, th: q0 - q1)
    with pytest.raises(InputError, match=r"got shapes \[\(1, 1\), \(1, 1\), \(1, 1\)\]"):
        VariationalIntegrator(s, discrete_force=lambda q0, q1, u, th: (q0, q1, u))
    with pytest.raises(InputError, match="calling it failed: ZeroDivisionError: no"):
        VariationalIntegrator(s, discrete_force=lambda q0, q1, u, th: raising(q0, q1, th))
    # a good force on the system's own Lagrangian is accepted and acts
    ok = VariationalIntegrator(s, discrete_force=lambda q0, q1, u, th: (0.01 + 0 * q0, 0 * q0))
    moved = _num(ok.step_function(0.05), [0.2, 0.0], [0.0], [])
    plain = _num(VariationalIntegrator(s).step_function(0.05), [0.2, 0.0], [0.0], [])
    assert np.linalg.norm(moved - plain) > 1e-4


def test_integrator_model_checks_theta():
    integ = VariationalIntegrator(ROD, lagrangian=rod_lagrangian, n_theta=2)
    for bad in (None, [1.0], [1.0, 2.0, 3.0], [1.0, np.nan], [np.inf, 1.0]):
        with pytest.raises(InputError, match="theta must be 2 finite numbers"):
            integrator_model(integ, 0.05, theta=bad)
    with pytest.raises(InputError, match="theta_names must have 2 entries"):
        integrator_model(integ, 0.05, theta=[1.0, 2.0], theta_names=("a",))
    with pytest.raises(InputError, match="theta must be 0 finite numbers"):
        integrator_model(VariationalIntegrator(ROD), 0.05, theta=[1.0])
