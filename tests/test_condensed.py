"""``solver = "condensed"``: the Gauss–Newton SQP of the implicit transcription with the
states eliminated (vimpc.mpc.condensed)."""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics import CartPole
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost

DT = 0.1


def _linear_model() -> tuple[DiscreteModel, np.ndarray, np.ndarray]:
    """A damped double integrator, exactly discretised, with an implicit residual and no
    residual Jacobian (the solver differentiates the residual itself)."""
    M = scipy.linalg.expm(np.array([[0, 1, 0], [0, -0.2, 1], [0, 0, 0]]) * DT)
    A, B = M[:2, :2], M[:2, 2:]
    x, u, p, xn = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0), ca.SX.sym("xn", 2)
    ident = ca.Function("id", [x], [x])
    model = DiscreteModel(
        dt=DT, nx=2, nu=1, np=0, nobs=2,
        step=ca.Function("step", [x, u, p], [A @ x + B @ u]),
        residual=ca.Function("res", [x, u, xn, p], [xn - A @ x - B @ u]),
        from_obs=ident, to_obs=ident, state_names=("s", "v"), input_names=("f",),
    )  # fmt: skip
    return model, A, B


def test_it_reproduces_lqr_with_a_riccati_terminal_cost():
    """Linear model, quadratic cost, the DARE's P as terminal cost: every solve after the
    first (a cold start, handed to sqpmethod) is the condensed SQP's, and all give the
    infinite-horizon LQR input -K x to 1e-8."""
    model, A, B = _linear_model()
    Q, R = np.diag([2.0, 0.5]), np.array([[0.3]])
    P = scipy.linalg.solve_discrete_are(A, B, Q, R)
    K = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
    ctrl = MPC(model, 8, Cost(Q=Q, R=R, Q_terminal=P), solver="condensed", tol=1e-10)
    x = np.array([1.0, -0.5])
    for k in range(6):
        result = ctrl(x)
        assert result.status.ok
        assert result.handed_over == (k == 0)
        np.testing.assert_allclose(result.u, -K @ x, atol=1e-8)
        x = A @ x + B @ result.u + np.array([0.05, -0.02])  # off the plan: a new problem


def test_it_finds_sqpmethods_plan_on_a_swing_up_with_the_input_bounds_active():
    """The nominal cart-pole's variational model (nonlinear, implicit): along a swing-up
    driven by sqpmethod, the condensed SQP (from its own previous plans; the first state's
    cold start handed to sqpmethod) finds sqpmethod's plan at each state (inputs within
    1e-5 N, the bounds active at some stages), and every predicted state solves the
    model's step equations to 1e-8."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(
        Q=[10, 20, 0.1, 0.1], R=[0.01], Q_terminal=[50, 100, 5, 5],
        reference=[0, np.pi, 0, 0], periodic=(1,),
    )  # fmt: skip
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    options = dict(transcription="implicit", tol=1e-9, max_iter=100)
    reference = MPC(model, 20, cost, bounds, **options)
    condensed = MPC(model, 20, cost, bounds, solver="condensed", **options)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    active, used = 0, 0
    for _ in range(25):
        want = reference(x)
        got = condensed(x)
        assert want.status.ok and got.status.ok
        used += not got.handed_over
        np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-5)
        active += int(np.any(np.abs(got.u_plan) >= 20.0 - 1e-9))
        for k in range(20):
            r = model.residual(got.x[k], got.u_plan[k], got.x[k + 1], model.p_default)
            assert np.abs(np.asarray(r)).max() <= 1e-8
        x = np.asarray(model.step(x, want.u, model.p_default)).ravel()
    assert used == 24 and active > 0, (used, active)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"transcription": "step"}, "transcription='implicit'"),
        ({"hessian": "exact"}, "Gauss–Newton"),
        ({"time_budget": 0.05}, "time_budget = 0.05 s cannot be kept by solver = 'condensed'"),
    ],
)
def test_what_it_cannot_solve_is_refused_with_the_reason(options, named):
    model, _, _ = _linear_model()
    with pytest.raises(InputError, match="condensed") as err:
        MPC(model, 8, Cost(Q=[1.0, 1.0], R=[0.1]), solver="condensed", **options)
    assert named in str(err.value)


def test_a_measured_state_off_the_constraints_is_solved_and_the_plans_keep_them():
    """The nominal four-bar (joint angles, the loop closure's two constraints): measured
    states 1e-3 rad off the loop closure (noise the model's from_obs does not remove) are
    solved by the condensed SQP (after the cold start, handed over), and its predicted
    states keep the
    constraints (the result's plan_constraint) to 1e-10; sqpmethod's plans from the same
    states agree with them to 1e-4."""
    from vimpc.mechanics import FourBar

    model = NominalModel(FourBar(), 0.02).discrete_model()
    cost = Cost(Q=[100.0, 0, 0, 1.0, 0, 0], R=[1e-3], reference=[0.5, 0, 0, 0, 0, 0])
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    condensed = MPC(model, 20, cost, bounds, solver="condensed", tol=1e-8)
    reference = MPC(model, 20, cost, bounds, tol=1e-8)
    rng = np.random.default_rng(0)
    x = np.concatenate(FourBar().assemble(0.2))
    handed = []
    for _ in range(10):
        noisy = x + np.r_[rng.normal(0, 1e-3, 3), np.zeros(3)]
        assert np.abs(np.asarray(model.constraint(noisy))).max() > 1e-5
        got, want = condensed(noisy), reference(noisy)
        assert got.status.ok and want.status.ok
        handed.append(got.handed_over)
        assert got.plan_constraint <= 1e-10
        np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-4)
        x = np.asarray(model.step(x, got.u, model.p_default)).ravel()
    assert handed == [True] + [False] * 9


def _bounded_double_integrator() -> DiscreteModel:
    """The double integrator with a constant one-step bound of 0.01 in each entry."""
    model, _, _ = _linear_model()
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0)
    bound = ca.Function("bound", [x, u, p], [ca.DM([0.01, 0.01])])
    return dataclasses.replace(model, bound=bound, delta=0.05)


@pytest.mark.parametrize(
    "tightening, tube, soft",
    [("none", "open_loop", True), ("tube", "open_loop", True), ("tube", "feedback", True),
     ("tube", "open_loop", False)],
)  # fmt: skip
def test_it_finds_sqpmethods_plan_with_the_rail_and_the_tube(tightening, tube, soft):
    """A cart driven to 1 m past a rail at 0.6 m (soft, an exact penalty, or hard), with
    the tube of a bound or without: the rows, slacks and tightening are the transcription's
    own, so the condensed SQP's plans are sqpmethod's (inputs within 1e-5) at every step,
    none handed over after the cold start, with the rail active."""
    model = _bounded_double_integrator()
    cost = Cost(Q=[10.0, 0.1], R=[1e-3], reference=[1.0, 0.0])
    cons = Constraints(u_min=[-0.5], u_max=[0.5], obs_max=[0.6, np.inf], soft_bounds=soft)
    options = dict(tol=1e-9, tightening=tightening, tube=tube, max_iter=50)
    condensed = MPC(model, 20, cost, cons, solver="condensed", **options)
    reference = MPC(model, 20, cost, cons, **options)
    x, active = np.array([0.0, 0.3]), 0
    for k in range(15):
        got, want = condensed(x), reference(x)
        assert got.status.ok and want.status.ok
        assert got.handed_over == (k == 0)
        np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-5)
        np.testing.assert_allclose(got.tube, want.tube, atol=1e-6)
        active += int(np.any(got.obs[1:, 0] - 0.6 + got.tube[1:, 0] > -1e-6))
        x = np.asarray(model.step(x, got.u, model.p_default)).ravel()
    assert active > 0
