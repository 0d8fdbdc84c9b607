"""A tube that cannot be computed along the plan (a bound or a linearisation that is not
finite, a function that fails to evaluate): the controller names the stages and the cause,
takes the tightened set as empty and falls back, and solves normally once the model is
whole again."""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.mpc import MPC, Constraints, Cost, Status
from vimpc.mpc.tube import tube_failure_cause

DT = 0.1


# the double integrator (x_next = A x + B u) the tube tests use
A_DI = np.array([[1.0, DT], [0.0, 1.0]])
B_DI = np.array([[DT**2 / 2], [DT]])


def _broken_beyond(edge: float, *, bound: bool, w: float = 0.01) -> DiscreteModel:
    """The double integrator with a bound of ``w``, broken where ``s > edge``: its bound is
    NaN there (``bound=True``), or its residual's ``d r / d x_next`` is zero there, so the
    linearisation the tube takes from the residual is not finite (``bound=False``); its
    step stays the plain one."""
    x, u, p, xn = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0), ca.SX.sym("xn", 2)
    beyond = x[0] > edge
    w = ca.DM([w, w])
    gain = 1.0 if bound else ca.if_else(beyond, 0.0, 1.0)
    ident = ca.Function("id", [x], [x])
    return DiscreteModel(
        dt=DT,
        nx=2,
        nu=1,
        np=0,
        nobs=2,
        step=ca.Function("step", [x, u, p], [ca.mtimes(A_DI, x) + ca.mtimes(B_DI, u)]),
        residual=ca.Function(
            "res", [x, u, xn, p], [gain * (xn - ca.mtimes(A_DI, x) - ca.mtimes(B_DI, u))]
        ),
        bound=ca.Function(
            "bound", [x, u, p], [ca.if_else(beyond, np.nan, 1.0) * w if bound else w]
        ),
        delta=0.05,
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed"),
        from_obs=ident,
        to_obs=ident,
        state_names=("s", "v"),
        input_names=("f",),
    )


def _tube_controller(model: DiscreteModel, N: int, tube: str) -> MPC:
    """The tube tests' controller on a double integrator: |s| <= 2, |u| <= 1."""
    return MPC(
        model,
        N,
        Cost(Q=[1.0, 0.1], R=[0.1]),
        Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-2.0, -np.inf], obs_max=[2.0, np.inf]),
        transcription="step",
        tightening="tube",
        tube=tube,
    )


@pytest.mark.parametrize(
    "bound, tube, stages, cause",
    [
        (True, "open_loop", (1, 6), "stage 0: the model's bound is not finite there (w_0 = [nan"),
        (False, "open_loop", (2, 6), "stage 0: the step's linearisation (A_0, B_0) is not finite"),
        (True, "feedback", (1, 6), "stage 0: the model's bound is not finite there (w_0 = [nan"),
        # the feedback's input margin at stage 1 takes the gain K_1 of A_1, B_1
        (False, "feedback", (1, 6), "stage 0: the step's linearisation (A_0, B_0) is not finite"),
    ],
)
def test_a_tube_that_is_not_finite_is_named_by_stage_and_not_solved_with(
    bound, tube, stages, cause
):
    N = 6
    ctrl = _tube_controller(_broken_beyond(0.5, bound=bound), N, tube)
    good = ctrl(np.array([0.0, 0.0]))
    assert good.status.ok and good.failed_tube_stages == 0 and good.tube_failure == ""
    assert np.all(np.isfinite(good.tube)) and good.empty_tube_stages == 0
    # from s = 1 the guess (the measured state held: a cold start) is broken at every stage
    ctrl.reset()
    bad = ctrl(np.array([1.0, 0.0]))
    assert bad.status is Status.INFEASIBLE and bad.fallback and bad.iterations == 0
    np.testing.assert_array_equal(bad.u, [0.0])  # the safe input: there is no previous plan
    first, last = stages
    where = f"tube cannot be computed at stages {first}-{last} of the plan (of {N}): {cause}"
    assert where in bad.tube_failure, bad.tube_failure
    assert bad.failed_tube_stages == last - first + 1
    # those stages are taken as empty: infinite margins, counted with the empty ones
    obs_first = 1 if bound else 2  # the rows' margins at stage 1 take w_0 alone (e_1 = d_0)
    assert np.all(np.isinf(bad.tube[obs_first:])) and np.all(np.isfinite(bad.tube[:obs_first]))
    assert bad.empty_tube_stages == last - obs_first + 1  # input k counted with state k + 1
    if tube == "feedback":  # the inputs' margins come from the same ellipsoid
        assert np.all(np.isinf(bad.tube_inputs[first:])) and bad.tube_inputs[0, 0] == 0.0
    assert not np.any(np.isnan(bad.tube)) and not np.any(np.isnan(bad.tube_inputs))
    # back where the model is whole, the next solve is a normal one
    again = ctrl(np.array([0.0, 0.0]))
    assert again.status.ok and again.failed_tube_stages == 0


def test_a_feedback_tube_of_zero_margins_that_is_finite_is_solved_with():
    # a zero bound gives zero margins, as an ellipsoid that is not finite would: the check
    # along the guess finds every recursion finite and the problem is solved
    ctrl = _tube_controller(_broken_beyond(0.5, bound=True, w=0.0), 6, "feedback")
    result = ctrl(np.array([0.0, 0.0]))
    assert result.status.ok and result.failed_tube_stages == 0 and result.tube_failure == ""
    assert np.all(result.tube == 0.0) and result.empty_tube_stages == 0


def test_the_cause_of_a_tube_that_is_not_finite_is_found_along_the_recursions():
    N, I1 = 4, np.eye(1)
    W = [np.full(2, 0.01)] * N
    As, Bs, Qx = [A_DI] * N, [B_DI] * N, [np.eye(2)] * (N + 1)
    assert tube_failure_cause(W, As, Bs, Qx=Qx, R=I1) is None
    assert tube_failure_cause(W, As, Bs) is None
    assert tube_failure_cause(W, [], [], lipschitz=1.1) is None
    # a bound that is not finite at stage 2 comes first, whatever the tube
    W_bad = [*W[:2], np.array([0.01, np.inf]), W[3]]
    assert tube_failure_cause(W_bad, As, Bs).startswith("stage 2: the model's bound")
    assert tube_failure_cause(W_bad, [], [], lipschitz=2.0).startswith("stage 2: the model's")
    # a Lipschitz box that overflows
    assert tube_failure_cause(W, [], [], lipschitz=1e300).startswith(
        "stage 3: the Lipschitz box L max(e_k) + w_k overflows"
    )
    # at stage 1 a mode of eigenvalue 1e200 that the input cannot reach: the box overflows
    # open loop, and the LQR's cost-to-go overflows
    huge = np.array([[1e200, 0.0], [0.0, 1.0]])
    B_v = np.array([[0.0], [1.0]])
    A_bad, B_bad = [A_DI, huge, A_DI, A_DI], [B_DI, B_v, B_DI, B_DI]
    assert tube_failure_cause(W, A_bad, B_bad) is None  # e_2 = 1e198: large, finite
    assert tube_failure_cause(W, [A_DI, huge, huge, A_DI], B_bad).startswith(
        "stage 3: the open-loop box |A_k| e_k + w_k overflows (largest |A_2| entry 1e+200)"
    )
    cause = tube_failure_cause(W, A_bad, B_bad, Qx=Qx, R=I1)
    assert cause.startswith("stage 1: ") and "uncontrollable" in cause and "1e+200" in cause
    # the same size reached by the input is no uncontrollable mode
    reached = tube_failure_cause(W, A_bad, [B_DI, np.array([[1.0], [0.0]])] + Bs[2:], Qx=Qx, R=I1)
    assert reached.startswith("stage 1: ") and "uncontrollable" not in reached
    # an input weight that vanishes against B^T P B where B does not act: singular
    B_zero = [B_DI, np.zeros((2, 1)), B_DI, B_DI]
    cause = tube_failure_cause(W, As, B_zero, Qx=Qx, R=1e-300 * I1)
    assert cause.startswith("stage 1: R + B_k^T P B_k of the LQR is singular")
    assert "singular input weight" in cause
    # a linearisation that is not finite
    A_nan = [A_DI, A_DI, np.full((2, 2), np.nan), A_DI]
    assert tube_failure_cause(W, A_nan, Bs, Qx=Qx, R=I1).startswith(
        "stage 2: the step's linearisation (A_2, B_2) is not finite"
    )


class _BoundThatFails(ca.Callback):
    """A bound of 0.01 per entry that fails to evaluate (an error, not a NaN) where s > 0.5,
    as a model's function can (a linear solve on a singular matrix)."""

    def __init__(self) -> None:
        ca.Callback.__init__(self)
        self.construct("bound_that_fails", {})

    def get_n_in(self) -> int:
        return 3

    def get_sparsity_in(self, i: int) -> ca.Sparsity:
        return ca.Sparsity.dense((2, 1, 0)[i], 1)

    def get_sparsity_out(self, i: int) -> ca.Sparsity:
        return ca.Sparsity.dense(2, 1)

    def eval(self, arg):
        if float(arg[0][0]) > 0.5:
            raise RuntimeError("no bound here")
        return [ca.DM([0.01, 0.01])]


@pytest.mark.parametrize("tube", ["open_loop", "feedback"])
def test_a_tube_whose_functions_fail_to_evaluate_falls_back_and_says_so(tube):
    failing = _BoundThatFails()
    model = dataclasses.replace(_broken_beyond(0.5, bound=False), bound=failing)
    model = dataclasses.replace(model, residual=None)
    N = 6
    ctrl = _tube_controller(model, N, tube)
    good = ctrl(np.array([0.0, 0.0]))
    assert good.status.ok and good.failed_tube_stages == 0
    ctrl.reset()
    bad = ctrl(np.array([1.0, 0.0]))  # the guess holds s = 1 at every stage
    assert bad.status is Status.INFEASIBLE and bad.fallback and bad.iterations == 0
    assert bad.failed_tube_stages == N + 1 and np.all(np.isinf(bad.tube))
    assert "a function along the plan failed to evaluate (CasADi: " in bad.tube_failure
    again = ctrl(np.array([0.0, 0.0]))
    assert again.status.ok and again.failed_tube_stages == 0
