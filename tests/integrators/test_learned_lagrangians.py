"""Learned parts inside the integrators: a Lagrangian ``L(q, v, theta)`` given as a callable,
its parameters as constants or as the model's ``p``, energy and momentum by automatic
differentiation, and an additive learned discrete force."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest

from vimpc.errors import InputError
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.mechanics import CartPole, Pendulum
from vimpc.models import NominalModel, integrator_model
from vimpc.testing import DiscreteModelContract

RULES = ("first_order", "midpoint", "trapezoidal")
FORMS = ("position_momentum", "del")


def _max_of_halves(dE):
    """Largest energy error in the first and in the second half of a run."""
    n = dE.size // 2
    return float(np.max(dE[:n])), float(np.max(dE[n:]))


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
    E_catalog = np.asarray(s.function("E").map(N)(xs[:1], xs[1:])).ravel()
    np.testing.assert_allclose(E, E_catalog, atol=1e-12)
    first, second = _max_of_halves(np.abs(E))
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


class TestLagrangianParametersCartPole(DiscreteModelContract):
    # a Lagrangian with parameters exposed as p (the form a learned Lagrangian takes)
    def make_model(self):
        s = CartPole(friction=[0.2, 0.05])
        integ = VariationalIntegrator(s, lagrangian=cartpole_lagrangian, n_theta=4)
        return integrator_model(integ, 0.05, theta=cartpole_theta(s), theta_as_parameters=True)

    def sample_states(self, rng, n):
        return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))

    def sample_inputs(self, rng, n):
        return rng.uniform(-10.0, 10.0, size=(n, 1))
