"""The controller's contract suite on a double integrator: every valid combination of
transcription, solver and tightening, the invalid ones refused.

The model is a cart of mass 2 pushed by a force (a linear double integrator, discretised
exactly under a zero-order hold), with its residual written as a momentum balance and a
constant one-step bound, so that every strategy applies; a tube then has the same margins
along every plan.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.mpc import MPC, Constraints, Cost, Status
from vimpc.testing import ControllerContract

DT, MASS = 0.1, 2.0


def double_integrator(bound: float = 1e-2) -> DiscreteModel:
    """A cart of mass ``MASS`` (the parameter), state ``(q, v)``, input the force."""
    x, u, m = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("m", 1)
    x_next, obs = ca.MX.sym("x_next", 2), ca.MX.sym("obs", 2)
    q, v = x[0], x[1]
    step = ca.vertcat(q + DT * v + DT**2 / (2 * m) * u, v + DT / m * u)
    residual = ca.vertcat(
        x_next[0] - q - DT * v - DT**2 / (2 * m) * u, m * (x_next[1] - v) - DT * u
    )
    return DiscreteModel(
        dt=DT,
        nx=2,
        nu=1,
        np=1,
        nobs=2,
        step=ca.Function("step", [x, u, m], [step]),
        residual=ca.Function("residual", [x, u, x_next, m], [residual]),
        bound=ca.Function("bound", [x, u, m], [bound * ca.DM.ones(2)]),
        delta=0.05,
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed"),
        from_obs=ca.Function("from_obs", [obs], [obs]),
        to_obs=ca.Function("to_obs", [x], [x]),
        state_names=("q", "v"),
        input_names=("u",),
        param_names=("m",),
        p_default=np.array([MASS]),
    )


class TestDoubleIntegratorContract(ControllerContract):
    def make_model(self) -> DiscreteModel:
        return double_integrator()

    def make_cost(self) -> Cost:
        return Cost(Q=[10.0, 1.0], R=0.1, reference=[1.0, 0.0])

    def make_constraints(self) -> Constraints:
        # the velocity bound is active on the way to the reference: the tube moves the plan
        return Constraints(u_min=-2.0, u_max=2.0, obs_min=[-2.0, -0.4], obs_max=[2.0, 0.4])

    def initial_obs(self) -> np.ndarray:
        return np.array([0.0, 0.0])


# -- the one LQR equivalence --------------------------------------------------------------------

LQR_SOLVERS = [
    (transcription, solver)
    for transcription in ("step", "implicit")
    for solver in ("sqpmethod", "ipopt", "fatrop", "rti", "condensed")
    if not (solver == "condensed" and transcription == "step")
]
#: the largest |u + K x| of each solver: the Gauss-Newton steps of sqpmethod, rti and the
#: condensed SQP are exact on a linear-quadratic problem; the interior-point solvers stop at
#: their tolerance
LQR_ATOL = {"sqpmethod": 1e-8, "rti": 1e-9, "condensed": 1e-8, "ipopt": 1e-6, "fatrop": 1e-6}


@pytest.mark.parametrize("transcription, solver", LQR_SOLVERS)
def test_every_solver_is_the_lqr_law_with_the_riccati_terminal_cost(transcription, solver):
    """Linear model, quadratic cost, no constraint, the discrete algebraic Riccati equation's
    P as terminal cost: the finite-horizon optimum is the infinite-horizon LQR law u = -K x
    (Bellman: the cost-to-go beyond the horizon is exactly x'Px), for every solver and
    transcription, from states off the previous plan (a disturbance after each input), so
    that warm starts, the condensed SQP's warm solves and the real-time iteration's feedback
    from a state its preparation never saw are all checked against it."""
    model = double_integrator()
    A = np.array([[1.0, DT], [0.0, 1.0]])
    B = np.array([[DT**2 / (2 * MASS)], [DT / MASS]])
    Q, R = np.diag([2.0, 0.5]), np.array([[0.3]])
    P = scipy.linalg.solve_discrete_are(A, B, Q, R)
    K = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
    options = {"rti_start": "none"} if solver == "rti" else {}
    ctrl = MPC(
        model,
        8,
        Cost(Q=Q, R=R, Q_terminal=P),
        solver=solver,
        transcription=transcription,
        tol=1e-10,
        jit="none",
        **options,
    )
    rng = np.random.default_rng(3)
    x = np.array([1.0, -0.5])
    for k in range(6):
        result = ctrl(x, k * DT)
        if solver == "rti":  # one Gauss-Newton step, the exact optimum here
            assert result.status is Status.ITERATION_LIMIT and result.iterations == 1
        else:
            assert result.status is Status.SOLVED, result.status.value
        if solver == "condensed":  # its first call is a cold start, solved by sqpmethod
            assert ("evaluations" in ctrl._solving.stats()) == (k > 0)
        np.testing.assert_allclose(result.u, -K @ x, atol=LQR_ATOL[solver])
        x = A @ x + B @ result.u + rng.normal(scale=0.2, size=2)
