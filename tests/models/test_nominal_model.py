"""NominalModel: the shipped DiscreteModel contract, and what the model adds on top of it."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest

from vimpc.dynamics import DiscreteModel
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.mechanics import CartPole, FourBar, Pendulum, RollingDisk
from vimpc.models import NominalModel
from vimpc.testing import DiscreteModelContract

DT = 0.02

PENDULUM = Pendulum(friction=[0.1])
CARTPOLE = CartPole(friction=[0.2, 0.05])
FOURBAR = FourBar(friction=[0.05, 0.02, 0.02, 0.05])
DISK = RollingDisk(friction=[0.05, 0.1])


class TestPendulumMidpoint(DiscreteModelContract):
    def make_model(self):
        return NominalModel(PENDULUM, DT, integrator="midpoint").discrete_model()

    def sample_states(self, rng, n):
        return rng.uniform([-math.pi, -3.0], [math.pi, 3.0], size=(n, 2))

    def sample_inputs(self, rng, n):
        return rng.uniform(-2.0, 2.0, size=(n, 1))


class TestCartPoleMidpoint(DiscreteModelContract):
    def make_model(self):
        return NominalModel(CARTPOLE, DT, integrator="midpoint").discrete_model()

    def sample_states(self, rng, n):
        return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))

    def sample_inputs(self, rng, n):
        return rng.uniform(-10.0, 10.0, size=(n, 1))


class TestFourBarMidpoint(DiscreteModelContract):
    # joint coordinates with the two loop-closure equations: the constrained midpoint
    # rule puts g(q_next) = 0 among its equations
    constraint_preserving = True

    def make_model(self):
        return NominalModel(FOURBAR, DT, integrator="midpoint").discrete_model()

    def sample_states(self, rng, n):
        return np.array(
            [
                np.concatenate(
                    FOURBAR.assemble(rng.uniform(-math.pi, math.pi), rng.uniform(-3.0, 3.0))
                )
                for _ in range(n)
            ]
        )

    def sample_inputs(self, rng, n):
        return rng.uniform(-5.0, 5.0, size=(n, 1))


class TestRollingDiskMidpoint(DiscreteModelContract):
    def make_model(self):
        return NominalModel(DISK, DT, integrator="midpoint").discrete_model()

    def sample_states(self, rng, n):
        qs = rng.uniform([-3.0, -math.pi, -1.0, -1.0], [3.0, math.pi, 1.0, 1.0], size=(n, 4))
        return np.array(
            [
                np.concatenate([q, DISK.consistent_velocity(q, *rng.uniform(-3.0, 3.0, 2))])
                for q in qs
            ]
        )

    def sample_inputs(self, rng, n):
        return rng.uniform(-1.0, 1.0, size=(n, 2))

    def test_step_keeps_rolling_without_slipping(self):
        # the nonholonomic constraint A(q) v = 0 is not a holonomic `constraint`, so the
        # contract does not see it; the variational step keeps it at the new node
        m = self._model()
        for x, u in self._samples():
            xn = np.asarray(m.step(x, u, m.p_default)).ravel()
            assert np.max(np.abs(DISK.nonholonomic(xn[:4]) @ xn[4:])) <= 1e-10
            assert np.linalg.norm(xn[4:] - x[4:]) > 1e-4  # the inputs do something


class TestCartPoleRK4(DiscreteModelContract):
    def make_model(self):
        return NominalModel(CARTPOLE, DT, integrator="rk4").discrete_model()

    def sample_states(self, rng, n):
        return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))

    def sample_inputs(self, rng, n):
        return rng.uniform(-10.0, 10.0, size=(n, 1))


# -- the model's own properties ------------------------------------------------------------


def test_fields_and_provenance():
    m = NominalModel(CARTPOLE, DT, integrator="midpoint").discrete_model()
    assert isinstance(m, DiscreteModel)
    assert (m.dt, m.nx, m.nu, m.np, m.nobs) == (DT, 4, 1, 0, 4)
    assert m.implicit and m.bound is None and m.constraint is None
    assert m.state_names == ("s", "theta", "s_dot", "theta_dot")
    assert m.input_names == ("force",)
    assert m.info["system"] == "CartPole" and m.info["settings"]["integrator"] == "midpoint"
    assert m.info["friction"] == [0.2, 0.05]
    fb = NominalModel(FOURBAR, DT).discrete_model()
    q, v = FOURBAR.assemble(0.4, 1.0)
    np.testing.assert_allclose(
        np.asarray(fb.constraint(np.concatenate([q, v]))).ravel(), 0, atol=1e-14
    )
    rk4 = NominalModel(CARTPOLE, DT, integrator="rk4").discrete_model()
    assert not rk4.implicit


def test_step_is_the_integrator_flow():
    rng = np.random.default_rng(20)
    x, u = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 1)
    for integrator, substeps, reference in [
        ("midpoint", 1, VariationalIntegrator(CARTPOLE, "midpoint").step_function(DT)),
        ("midpoint", 4, VariationalIntegrator(CARTPOLE, "midpoint").flow(DT, DT / 4)),
        ("rk4", 2, ExplicitIntegrator(CARTPOLE, "rk4").flow(DT, DT / 2)),
    ]:
        m = NominalModel(CARTPOLE, DT, integrator=integrator, substeps=substeps).discrete_model()
        np.testing.assert_allclose(
            np.asarray(m.step(x, u, [])).ravel(),
            np.asarray(reference(x, u, [])).ravel(),
            atol=1e-14,
        )
        # the residual (for the implicit transcription) exists only for one substep
        assert m.implicit == (integrator == "midpoint" and substeps == 1)


def test_substeps_converge_to_the_true_motion():
    # Midpoint is second order: splitting dt into k substeps divides the one-step
    # error by ~k^2 (local error O(h^3) per substep, k substeps: k (dt/k)^3).
    x, u = np.array([0.1, 2.0, 0.5, -1.0]), np.array([3.0])
    exact = ExplicitIntegrator(CARTPOLE, "rk4").flow(DT, DT / 200)(x, u, [])
    errors = [
        np.linalg.norm(
            np.asarray(
                NominalModel(CARTPOLE, DT, substeps=k).discrete_model().step(x, u, []) - exact
            )
        )
        for k in (1, 2, 4)
    ]
    assert errors[0] / errors[1] == pytest.approx(4.0, rel=0.1)
    assert errors[1] / errors[2] == pytest.approx(4.0, rel=0.1)


def test_model_differentiates_through_the_newton_solve():
    # CasADi differentiates the rootfinder by the implicit function theorem: for the
    # constrained four-bar, d x_next / d x maps tangent vectors of the manifold to
    # tangent vectors (G(q_next) dq_next = 0), a check finite differences alone miss.
    m = NominalModel(FOURBAR, DT).discrete_model()
    xs, us = ca.MX.sym("x", 6), ca.MX.sym("u", 1)
    J = ca.Function("J", [xs, us], [ca.jacobian(m.step(xs, us, ca.MX(0, 1)), xs)])
    q, v = FOURBAR.assemble(0.7, 1.5)
    x = np.concatenate([q, v])
    xn = np.asarray(m.step(x, [1.0], [])).ravel()
    # a tangent direction at x: d/ds of assemble(0.7 + s, 1.5)
    eps = 1e-7
    qp, vp = FOURBAR.assemble(0.7 + eps, 1.5)
    qm, vm = FOURBAR.assemble(0.7 - eps, 1.5)
    tangent = np.concatenate([qp - qm, vp - vm]) / (2 * eps)
    dxn = np.asarray(J(x, [1.0])) @ tangent
    G = FOURBAR.holonomic_jacobian(xn[:3])
    assert np.max(np.abs(G @ dxn[:3])) < 1e-6
    assert np.linalg.norm(dxn[:3]) > 0.1


def test_rejects_bad_arguments():
    from vimpc.errors import InputError

    with pytest.raises(
        InputError, match="integrator must be one of .*got 'rk5'; did you mean 'rk4'"
    ):
        NominalModel(PENDULUM, DT, integrator="rk5")
    with pytest.raises(InputError, match="form must be one of .*got 'pm'"):
        NominalModel(PENDULUM, DT, form="pm")
    with pytest.raises(InputError, match="dt must be a positive finite number, got 0"):
        NominalModel(PENDULUM, 0)
    with pytest.raises(InputError, match="MechanicalSystem"):
        NominalModel("Pendulum", DT)
