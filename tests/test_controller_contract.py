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

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.mpc import Constraints, Cost
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
