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
