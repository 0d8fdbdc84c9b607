"""The nonholonomic variational integrators on the rolling disk: the velocity constraint
and its discrete Lagrange-d'Alembert form hold to round-off, and the reduced dynamics are
integrated as the midpoint rule integrates them exactly."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
from test_integrators import held, rollout

from vimpc.integrators import VariationalIntegrator, acceleration
from vimpc.mechanics import RollingDisk


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
