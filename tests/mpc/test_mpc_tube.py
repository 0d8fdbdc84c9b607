"""Tube tightening of the safety rows from the model's one-step error bound."""

from __future__ import annotations

import dataclasses
import re

import casadi as ca
import numpy as np
import pytest

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost, PathConstraint
from vimpc.mpc import tube as tube_module
from vimpc.mpc.problem import SafetyRows
from vimpc.mpc.tube import state_jacobian, tube_function

DT = 0.1
A = np.array([[1.0, DT], [0.0, 1.0]])
B = np.array([[DT**2 / 2], [DT]])
#: the record of a bound given by hand, per step, at delta 0.1
ASSUMED_10 = BoundInfo(0.1, "step", None, "assumed", "assumed")


def _double_integrator(
    w,
    *,
    implicit=True,
    to_obs=None,
    bound=True,
    A=A,
    B=B,  # noqa: N803
    state_names=("s", "v"),
) -> DiscreteModel:
    """``x_next = A x + B u`` (by default the double integrator; any size ``A``) with the
    constant bound ``w`` and observation ``M x``."""
    n = A.shape[0]
    M = np.eye(n) if to_obs is None else np.asarray(to_obs, dtype=float)
    x, u, p, xn = ca.SX.sym("x", n), ca.SX.sym("u", 1), ca.SX.sym("p", 0), ca.SX.sym("xn", n)
    obs = ca.SX.sym("obs", n)
    return DiscreteModel(
        dt=DT,
        nx=n,
        nu=1,
        np=0,
        nobs=n,
        step=ca.Function("step", [x, u, p], [ca.mtimes(A, x) + ca.mtimes(B, u)]),
        residual=(
            ca.Function("res", [x, u, xn, p], [xn - ca.mtimes(A, x) - ca.mtimes(B, u)])
            if implicit
            else None
        ),
        bound=ca.Function("bound", [x, u, p], [ca.DM(w)]) if bound else None,
        delta=0.05 if bound else None,
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed") if bound else None,
        from_obs=ca.Function("from_obs", [obs], [ca.mtimes(np.linalg.inv(M), obs)]),
        to_obs=ca.Function("to_obs", [x], [ca.mtimes(M, x)]),
        state_names=state_names,
        input_names=("f",),
    )


def _point_mass(w) -> DiscreteModel:
    """Planar double integrator, state ``(px, py, vx, vy)``, observed with velocities
    scaled by 2 (so ``d to_obs/dx`` is not the identity)."""
    Ax = np.kron(A, np.eye(2))
    Bx = np.kron(B, np.eye(2))
    M = np.diag([1.0, 1.0, 2.0, 2.0])
    x, u, p, obs = ca.SX.sym("x", 4), ca.SX.sym("u", 2), ca.SX.sym("p", 0), ca.SX.sym("obs", 4)
    return DiscreteModel(
        dt=DT,
        nx=4,
        nu=2,
        np=0,
        nobs=4,
        step=ca.Function("step", [x, u, p], [ca.mtimes(Ax, x) + ca.mtimes(Bx, u)]),
        bound=ca.Function("bound", [x, u, p], [ca.DM(w)]),
        delta=0.05,
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed"),
        from_obs=ca.Function("from_obs", [obs], [ca.mtimes(np.linalg.inv(M), obs)]),
        to_obs=ca.Function("to_obs", [x], [ca.mtimes(M, x)]),
        state_names=("px", "py", "vx", "vy"),
        input_names=("fx", "fy"),
    )


def _errors_by_hand(w, N, lipschitz=None):
    """``e_k = sum_{j<k} |A|^(k-1-j) w``, or ``e_{k+1} = L max(e_k) + w``."""
    w = np.asarray(w, dtype=float)
    if lipschitz is None:
        absA = np.abs(A)
        return [
            sum((np.linalg.matrix_power(absA, k - 1 - j) @ w for j in range(k)), np.zeros(2))
            for k in range(N + 1)
        ]
    e = [np.zeros(2)]
    for _ in range(N):
        e.append(lipschitz * e[-1].max() + w)
    return e


@pytest.mark.parametrize("lipschitz", [None, 1.1])  # 1 + DT: |A| in the infinity norm
@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_tube_of_bound_rows_matches_the_hand_recursion(transcription, lipschitz):
    w, N = np.array([2e-3, 1e-2]), 12
    M = np.array([[1.0, 0.0], [-0.5, 2.0]])  # observation (s, 2 v - s / 2)
    model = _double_integrator(w, implicit=transcription == "implicit", to_obs=M)
    ctrl = MPC(
        model,
        N,
        Cost(Q=[1.0, 0.1], R=[0.1]),
        Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-1.0, -np.inf], obs_max=[1.0, 3.0]),
        transcription=transcription,
        tightening="tube",
        tube_lipschitz=lipschitz,
    )
    assert ctrl.safety_names == ("s >= -1", "s <= 1", "v <= 3")
    e = np.array(_errors_by_hand(w, N, lipschitz))
    rows = np.abs(np.array([M[0], M[0], M[1]]))  # |C| of each bound row
    expected = e @ rows.T
    x = np.array([0.3, -0.2])
    for _ in range(3):  # cold start, then warm starts along the previous plans
        result = ctrl(M @ x)
        assert result.status.ok
        assert result.tube.shape == (N + 1, 3)
        np.testing.assert_allclose(result.tube, expected, rtol=1e-12, atol=1e-15)
        assert result.tube_time > 0.0
        x = A @ x + B @ result.u


@pytest.mark.parametrize("soft", [False, True])
def test_plan_keeps_the_tightened_bound_and_stays_away_from_the_limit(soft):
    w, N, limit = np.array([2e-3, 1e-2]), 15, 0.5
    model = _double_integrator(w, implicit=False)
    problem = dict(
        horizon=N,
        cost=Cost(Q=[10.0, 0.1], R=[1e-3], reference=[2.0, 0.0]),
        constraints=Constraints(
            u_min=[-1.0], u_max=[1.0], obs_max=[limit, np.inf], soft_bounds=soft
        ),
    )
    plain = MPC(model, **problem)
    tight = MPC(model, **problem, tightening="tube")
    x = np.array([0.0, 0.0])
    for _ in range(4):
        free, tube = plain(x), tight(x)
        assert free.status.ok and tube.status.ok
        np.testing.assert_array_equal(free.tube, np.zeros((N + 1, 1)))
        assert free.tube_time == 0.0
        assert tube.tube[0, 0] == 0.0 and np.all(np.diff(tube.tube[:, 0]) > 0)
        assert np.all(tube.obs[:, 0] <= limit - tube.tube[:, 0] + 1e-6)
        if soft:
            assert tube.slack < 1e-6
        # the untightened plan runs into the limit; the tightened one keeps its margin
        assert free.obs[:, 0].max() > limit - 1e-4
        assert free.obs[-1, 0] - tube.obs[-1, 0] > 0.9 * tube.tube[-1, 0] > 0.05
        x = A @ x + B @ tube.u


def test_circle_constraint_gets_the_gradient_times_the_error_bound():
    w, N = np.array([1e-3, 2e-3, 1e-2, 5e-3]), 10
    model = _point_mass(w)
    obs = ca.SX.sym("obs", 4)
    centre, radius = np.array([0.6, 0.05]), 0.2
    h = ca.Function(
        "circle0", [obs], [(obs[0] - centre[0]) ** 2 + (obs[1] - centre[1]) ** 2 - radius**2]
    )
    ctrl = MPC(
        model,
        N,
        Cost(Q=[10.0, 10.0, 0.1, 0.1], R=[1e-2, 1e-2], reference=[1.2, 0.0, 0.0, 0.0]),
        Constraints(
            u_min=[-2.0, -2.0],
            u_max=[2.0, 2.0],
            obs_max=[np.inf, 1.0, np.inf, np.inf],
            path=[PathConstraint("circle0", h, soft=True, weight=1e4)],
        ),
        tightening="tube",
    )
    assert ctrl.safety_names == ("py <= 1", "circle0")

    def gradient(x, eps=1e-6):  # central differences of h(to_obs(x)) in the state
        f = lambda x: float(h(model.to_obs(x)))  # noqa: E731
        return np.array([(f(x + eps * d) - f(x - eps * d)) / (2 * eps) for d in np.eye(4)])

    e = [np.zeros(4)]
    for _ in range(N):
        e.append(np.abs(np.kron(A, np.eye(2))) @ e[-1] + w)
    x0 = np.zeros(4)
    first = ctrl(model.to_obs(x0))
    assert first.status.ok
    # cold start: the tube is linearised along x0 held over the horizon
    for k in range(1, N + 1):
        np.testing.assert_allclose(first.tube[k, 1], np.abs(gradient(x0)) @ e[k], rtol=1e-6)
        np.testing.assert_allclose(first.tube[k, 0], e[k][1], rtol=1e-12)
    # warm start: along the previous plan shifted by one stage (its last state repeated)
    x1 = first.x[1]
    second = ctrl(np.asarray(model.to_obs(x1)).ravel())
    assert second.status.ok
    plan = np.vstack([x1, first.x[2:], first.x[-1:]])
    for k in range(1, N + 1):
        np.testing.assert_allclose(second.tube[k, 1], np.abs(gradient(plan[k])) @ e[k], rtol=1e-6)
    assert np.ptp(second.tube[1:, 1] / np.array([np.abs(e[k]).sum() for k in range(1, N + 1)])) > 0
    # the plan goes around the obstacle with the margin
    h_plan = np.array([float(h(o)) for o in second.obs])
    assert np.all(h_plan[1:] >= second.tube[1:, 1] - 1e-6)


def test_implicit_and_explicit_models_give_the_same_jacobian_on_a_consistent_plan():
    model = NominalModel(Pendulum(), 0.05).discrete_model()
    explicit = dataclasses.replace(model, residual=None)
    rng = np.random.default_rng(1)
    N = 8
    inputs = rng.uniform(-2.0, 2.0, (N, 1))
    xs = model.simulate([0.4, -1.0], inputs)
    implicit_A, explicit_A = state_jacobian(model), state_jacobian(explicit)
    for k in range(N):
        Ai = np.asarray(implicit_A(xs[k], inputs[k], xs[k + 1], []))
        Ae = np.asarray(explicit_A(xs[k], inputs[k], xs[k + 1], []))
        np.testing.assert_allclose(Ai, Ae, rtol=0, atol=1e-8)
        assert np.abs(Ai - np.eye(2)).max() > 1e-2  # a real Jacobian, not the identity
    # the whole tube too, on a state-dependent safety row
    w = np.array([1e-3, 5e-3])
    bound = ca.Function(
        "bound", [ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0)], [ca.DM(w)]
    )
    obs = ca.SX.sym("obs", 2)
    safety = ca.Function("safety", [obs], [ca.vertcat(1.0 - ca.cos(obs[0]), 8.0 - obs[1])])
    tubes = [
        np.asarray(
            tube_function(dataclasses.replace(m, bound=bound, bound_info=ASSUMED_10), N, safety)(
                xs.T, inputs.T, []
            )[0]
        )
        for m in (model, explicit)
    ]
    np.testing.assert_allclose(tubes[0], tubes[1], rtol=1e-8, atol=1e-12)


def test_tube_without_expandable_step_uses_mx_and_agrees():
    # implicit Euler of the double integrator: step solves a linear system (an MX node
    # with no SX form), the residual is plain SX
    w = np.array([2e-3, 1e-2])
    E = np.eye(2) - DT * np.array([[0.0, 1.0], [0.0, 0.0]])
    x, u, p, xn = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0), ca.MX.sym("xn", 2)
    base = _double_integrator(w)
    model = dataclasses.replace(
        base,
        step=ca.Function("step", [x, u, p], [ca.solve(ca.MX(E), x + DT * ca.vertcat(0, u))]),
        residual=ca.Function("res", [x, u, xn, p], [ca.mtimes(E, xn) - x - DT * ca.vertcat(0, u)]),
    )
    explicit = dataclasses.replace(model, residual=None)
    with pytest.raises(RuntimeError):
        explicit.step.expand()
    N = 6
    inputs = np.linspace(-1.0, 1.0, N).reshape(N, 1)
    xs = model.simulate([0.1, 0.2], inputs)
    safety = SafetyRows.of(Constraints(obs_max=[1.0, 1.0]).resolved(2, 1), ("s", "v")).function
    t_implicit = np.asarray(tube_function(model, N, safety)(xs.T, inputs.T, [])[0])
    t_explicit = np.asarray(tube_function(explicit, N, safety)(xs.T, inputs.T, [])[0])
    np.testing.assert_allclose(t_implicit, t_explicit, rtol=1e-10)
    Ainv = np.abs(np.linalg.inv(E))
    e = [np.zeros(2)]
    for _ in range(N):
        e.append(Ainv @ e[-1] + w)
    np.testing.assert_allclose(t_implicit.T, np.array(e), rtol=1e-10)
    # the feedback tube too: the MX step's A = E^-1, B = E^-1 (0, dt) against the residual's
    Q, R = np.diag([1.0, 0.5]), np.array([[0.3]])
    fb = [
        [
            np.asarray(v)
            for v in tube_function(m, N, safety, kind="feedback", Q=Q, R=R)(xs.T, inputs.T, [])
        ]
        for m in (model, explicit)
    ]
    for a, b in zip(fb[0], fb[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-15)
    Ad, Bd = np.linalg.inv(E), np.linalg.inv(E) @ np.array([[0.0], [DT]])
    gains, sigmas = _feedback_by_hand(w, N, Q, R, Ad, Bd)
    np.testing.assert_allclose(fb[0][0][1], [np.sqrt(S[1, 1]) for S in sigmas], rtol=1e-9)
    # the gains the tube assumes, side by side: the controller's fallback applies them
    np.testing.assert_allclose(fb[0][2], np.hstack(gains), rtol=1e-9)


@pytest.mark.parametrize("kind", ["open_loop", "feedback"])
def test_a_heavy_bound_stays_mx_and_gives_the_expanded_tube(kind, monkeypatch):
    # a state-dependent bound with dense products (a GP-like posterior spread over 60
    # centres, ~10^4 scalar operations): above CALL_LIMIT it is kept MX and mapped
    # outside the SX propagation; the margins and gains are those of the fully expanded tube
    rng = np.random.default_rng(3)
    centres, P = rng.standard_normal((60, 3)), np.tril(rng.standard_normal((60, 60))) / 60
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    z = ca.vertcat(x, u)
    k = ca.exp(-0.5 * ca.sum2((ca.DM(centres) - ca.repmat(z.T, 60, 1)) ** 2))
    spread = 1.0 + ca.sumsqr(ca.mtimes(ca.DM(P), k))
    bound = ca.Function("bound", [x, u, p], [ca.DM([2e-3, 1e-2]) * spread])
    assert bound.expand().n_instructions() > tube_module.CALL_LIMIT
    model = dataclasses.replace(_double_integrator([0.0, 0.0]), bound=bound)
    N = 6
    inputs = np.linspace(-1.0, 1.0, N).reshape(N, 1)
    xs = model.simulate([0.1, 0.2], inputs)
    safety = SafetyRows.of(Constraints(obs_max=[1.0, 1.0]).resolved(2, 1), ("s", "v")).function
    options = dict(kind=kind, Q=np.diag([1.0, 0.5]), R=0.3) if kind == "feedback" else {}
    kept = tube_function(model, N, safety, **options)
    monkeypatch.setattr(tube_module, "CALL_LIMIT", 10**7)
    expanded = tube_function(model, N, safety, **options)
    assert (kept.class_name(), expanded.class_name()) == ("MXFunction", "SXFunction")
    a, b = kept(xs.T, inputs.T, []), expanded(xs.T, inputs.T, [])
    assert float(ca.mmax(a[0])) > 0
    for ours, theirs in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "options",
    [{}, {"lipschitz": 1.5}, {"kind": "feedback", "Q": np.diag([1.0, 0.5]), "R": 0.3}],
    ids=["open_loop", "lipschitz", "feedback"],
)
def test_stage_functions_called_per_stage_give_the_inlined_tube(options, monkeypatch):
    # above CALL_LIMIT operations a stage, the bound and the step's Jacobians are mapped as
    # calls (one MX function) instead of inlined (one SX function): the same tube
    model = _double_integrator(np.array([2e-3, 1e-2]), A=np.array([[1.0, DT], [-0.3, 0.9]]))
    N = 5
    inputs = np.linspace(-1.0, 1.0, N).reshape(N, 1)
    xs = model.simulate([0.1, 0.2], inputs)
    safety = SafetyRows.of(Constraints(obs_max=[1.0, 1.0]).resolved(2, 1), ("s", "v")).function
    inlined = tube_function(model, N, safety, **options)
    monkeypatch.setattr(tube_module, "CALL_LIMIT", 0)
    called = tube_function(model, N, safety, **options)
    assert (inlined.class_name(), called.class_name()) == ("SXFunction", "MXFunction")
    for ours, theirs in zip(called(xs.T, inputs.T, []), inlined(xs.T, inputs.T, []), strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-13, atol=1e-16)


def test_failed_solve_still_reports_the_applied_tube():
    model = _double_integrator([1e-3, 1e-2], implicit=False)
    obs = ca.SX.sym("obs", 2)
    wall = ca.Function("wall", [obs], [ca.vertcat(1.0 - obs[0], 5.0 - obs[1])])
    ctrl = MPC(
        model,
        10,
        Cost(Q=[1.0, 0.1], R=[1e-2]),
        Constraints(u_min=[-0.1], u_max=[0.1], path=[PathConstraint("wall", wall)]),
        tightening="tube",
    )
    assert ctrl.safety_names == ("wall[0]", "wall[1]")
    result = ctrl(np.array([0.9, 2.0]))  # too fast to stop before the wall
    assert result.fallback
    assert result.tube.shape == (11, 2) and result.tube[-1, 0] > 0


def test_safety_function_and_default_names():
    model = _double_integrator([1e-3, 1e-3])
    ctrl = MPC(
        model,
        5,
        Cost(Q=[1.0, 1.0], R=[1.0]),
        Constraints(obs_min=[-1.0, -0.25], obs_max=[np.inf, 0.5]),
        obs_names=("position", "speed"),
    )
    assert ctrl.safety_names == ("position >= -1", "speed >= -0.25", "speed <= 0.5")
    np.testing.assert_allclose(
        np.asarray(ctrl.safety_function([0.5, 0.25])).ravel(), [1.5, 0.5, 0.25]
    )
    plain = MPC(model, 5, Cost(Q=[1.0, 1.0], R=[1.0]), tightening="tube")
    assert plain.safety_names == () and plain.safety_function.numel_out(0) == 0
    result = plain(np.array([0.1, 0.0]))
    assert result.tube.shape == (6, 0) and result.tube_time == 0.0
    with pytest.raises(InputError, match=r"obs_names must be 2 names .*got \('s',\)"):
        MPC(model, 5, Cost(Q=[1.0, 1.0], R=[1.0]), obs_names=("s",))


def test_tightening_errors_name_the_argument():
    cost = Cost(Q=[1.0, 1.0], R=[1.0])
    unbounded = _double_integrator([1e-3, 1e-3], bound=False)
    bounded = _double_integrator([1e-3, 1e-3])
    with pytest.raises(InputError, match=r"tightening='tube' .* the model has no bound"):
        MPC(unbounded, 5, cost, tightening="tube")
    with pytest.raises(InputError, match=r"tightening must be one of .*did you mean 'tube'"):
        MPC(bounded, 5, cost, tightening="tubes")
    with pytest.raises(InputError, match="tube_lipschitz must be a positive finite number, got 0"):
        MPC(bounded, 5, cost, tightening="tube", tube_lipschitz=0)
    with pytest.raises(InputError, match="tube_lipschitz must be a positive finite number"):
        MPC(bounded, 5, cost, tightening="tube", tube_lipschitz=float("inf"))
    with pytest.raises(
        InputError, match=r"tube_lipschitz = 2.0 only applies with tightening='tube'"
    ):
        MPC(bounded, 5, cost, tube_lipschitz=2.0)


def test_a_tube_wider_than_the_range_is_not_capped_and_the_empty_stages_are_reported():
    # |s| <= 0.05 while the position error grows by ~k^2 dt^2 w_v / 2: past a few stages the
    # tightened interval [-0.05 + t, 0.05 - t] is empty. The tube is reported as computed, the
    # empty stages are counted, and the exact penalty's slack says the tightened rows are not
    # met; the plan is pulled to the middle, s = 0, where the violation is least
    w, N = np.array([2e-3, 5e-2]), 15
    model = _double_integrator(w, implicit=False)
    ctrl = MPC(
        model,
        N,
        Cost(Q=[1.0, 0.1], R=[1e-3], reference=[0.04, 0.0]),
        Constraints(
            u_min=[-1.0],
            u_max=[1.0],
            obs_min=[-0.05, -np.inf],
            obs_max=[0.05, np.inf],
            soft_bounds=True,
            bound_weight=1e3,
        ),
        tightening="tube",
    )
    result = ctrl(np.array([0.0, 0.0]))
    assert result.status.ok
    e = np.array(_errors_by_hand(w, N))[:, 0]
    np.testing.assert_allclose(result.tube[:, 0], e, rtol=1e-12)
    np.testing.assert_array_equal(result.tube[:, 0], result.tube[:, 1])
    empty = e > 0.05  # lower plus upper margin wider than the range 0.1
    assert 0 < empty.sum() < N
    assert result.empty_tube_stages == empty.sum()
    assert result.slack == pytest.approx(e[-1] - 0.05, rel=1e-3)
    assert np.all(np.abs(result.obs[empty, 0]) < 1e-3)


def test_an_empty_tube_on_hard_rows_falls_back_and_says_so():
    w, N = np.array([2e-3, 5e-2]), 15
    ctrl = MPC(
        _double_integrator(w, implicit=False),
        N,
        Cost(Q=[1.0, 0.1], R=[1e-3]),
        Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-0.05, -np.inf], obs_max=[0.05, np.inf]),
        tightening="tube",
        solver="ipopt",
    )
    result = ctrl(np.array([0.0, 0.0]))
    assert result.empty_tube_stages > 0
    assert not result.status.ok and result.fallback
    np.testing.assert_array_equal(result.u, [0.0])


# -- the feedback tube ----------------------------------------------------------------------


def _feedback_by_hand(w, N, Qx, R, Ak=A, Bk=B):
    """The LQR of ``(A, B)`` over ``2 N`` stages ending in ``Qx`` (its first ``N`` gains), ``Sigma_{k+1} = (A + B K_k)
    Sigma_k (A + B K_k)^T + nx diag(w^2)``: the gains and the Sigmas of stages 0..N."""
    P, gains = Qx, []
    for _ in range(2 * N):  # N stages past the horizon, then the horizon's
        K = -np.linalg.solve(R + Bk.T @ P @ Bk, Bk.T @ P @ Ak)
        gains.append(K)
        P = Qx + Ak.T @ P @ (Ak + Bk @ K)
    gains = gains[::-1][:N]
    S, sigmas = np.zeros((len(w), len(w))), [np.zeros((len(w), len(w)))]
    for K in gains:
        Acl = Ak + Bk @ K
        S = Acl @ S @ Acl.T + len(w) * np.diag(np.asarray(w) ** 2)
        sigmas.append(S)
    return gains, sigmas


@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_feedback_tube_matches_the_hand_riccati_and_ellipsoid(transcription):
    w, N = np.array([2e-3, 1e-2]), 12
    M = np.array([[1.0, 0.0], [-0.5, 2.0]])  # observation (s, 2 v - s / 2)
    model = _double_integrator(w, implicit=transcription == "implicit", to_obs=M)
    Qobs, R = np.diag([4.0, 0.5]), np.array([[0.2]])
    ctrl = MPC(
        model,
        N,
        Cost(Q=[1.0, 0.1], R=[0.1]),
        Constraints(u_min=[-1.0], u_max=[2.0], obs_min=[-1.0, -np.inf], obs_max=[1.0, 3.0]),
        transcription=transcription,
        tightening="tube",
        tube="feedback",
        tube_Q=[4.0, 0.5],
        tube_R=0.2,
    )
    gains, sigmas = _feedback_by_hand(w, N, M.T @ Qobs @ M, R)
    rows = np.array([M[0], -M[0], -M[1]])  # gradients of s + 1, 1 - s, 3 - obs_1 by x
    expected = np.array([[np.sqrt(g @ S @ g) for g in rows] for S in sigmas])
    expected_u = np.array(
        [[0.0]]
        + [[np.sqrt(K @ S @ K.T).item()] for K, S in zip(gains[1:], sigmas[1:-1], strict=True)]
    )
    # stage 1 holds the box |d| <= w: the ellipsoid's margin is at least the box's worst case
    assert np.all(expected[1] >= np.abs(rows) @ w - 1e-15)
    x = np.array([0.3, -0.2])
    for _ in range(3):
        result = ctrl(M @ x)
        assert result.status.ok
        np.testing.assert_allclose(result.tube, expected, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(result.tube_inputs, expected_u, rtol=1e-10, atol=1e-15)
        # the plan's inputs keep the feedback's share inside the bounds
        assert np.all(result.u_plan[:, 0] <= 2.0 - result.tube_inputs[:, 0] + 1e-8)
        assert np.all(result.u_plan[:, 0] >= -1.0 + result.tube_inputs[:, 0] - 1e-8)
        assert result.empty_tube_stages == 0
        x = A @ x + B @ result.u


class _Failing:
    """A solver whose calls return a non-finite iterate (a failed solve)."""

    def __init__(self, solver) -> None:
        self.solver = solver

    def __call__(self, **args):
        sol = self.solver(**args)
        return {**sol, "x": ca.DM.nan(*sol["x"].shape)}

    def stats(self):
        return self.solver.stats()


@pytest.mark.parametrize("solver", ["sqpmethod", "fatrop"])
def test_with_the_feedback_tube_the_fallback_applies_the_tubes_feedback(solver):
    """A call that fails after a solve applies the plan's next input plus the LQR feedback
    the tube assumes (the hand Riccati's gain of stage 1) on the measured state's deviation
    from the plan's prediction; on the prediction itself, the plan's input alone; the plan
    shifted for the call after."""
    w, N = np.array([2e-3, 1e-2]), 12
    M = np.array([[1.0, 0.0], [-0.5, 2.0]])
    model = _double_integrator(w, to_obs=M)
    Qobs, R = np.diag([4.0, 0.5]), np.array([[0.2]])
    gains, _ = _feedback_by_hand(w, N, M.T @ Qobs @ M, R)
    cons = Constraints(u_min=[-1.0], u_max=[2.0], obs_min=[-1.0, -np.inf], obs_max=[1.0, 3.0])
    x, deviation = np.array([0.3, -0.2]), np.array([0.02, -0.05])
    for off in (np.zeros(2), deviation):
        ctrl = MPC(
            model, N, Cost(Q=[1.0, 0.1], R=[0.1]), cons, solver=solver, tightening="tube",
            tube="feedback", tube_Q=[4.0, 0.5], tube_R=0.2,
        )  # fmt: skip
        solved = ctrl(M @ x)
        assert solved.status.ok
        ctrl._solving.solver = _Failing(ctrl._solving.solver)
        failed = ctrl(M @ (solved.x[1] + off))
        assert failed.fallback
        want = solved.u_plan[1] + gains[1] @ off
        assert -1.0 < want[0] < 2.0  # inside the bounds: no clipping
        np.testing.assert_allclose(failed.u, want, rtol=1e-9, atol=1e-12)
        then = ctrl(M @ (solved.x[2] + off))
        np.testing.assert_allclose(then.u, solved.u_plan[2] + gains[1] @ off, atol=1e-9)


def _memory_controller(w, N, soft, memory):
    return MPC(
        _double_integrator(w),
        N,
        Cost(Q=[1.0, 0.1], R=[0.1]),
        Constraints(
            u_min=[-1.0], u_max=[2.0], obs_min=[-1.0, -np.inf], obs_max=[1.0, 3.0], soft_bounds=soft
        ),
        tightening="tube",
        tube="feedback",
        tube_memory=memory,
    )


@pytest.mark.parametrize("soft", [True, False], ids=["soft", "hard"])
def test_tube_memory_keeps_a_share_of_a_wider_previous_tube_and_leaves_a_steady_one(soft):
    w, N, a = np.array([2e-3, 1e-2]), 10, 0.4
    x = np.array([0.3, -0.2])
    plain = _memory_controller(w, N, soft, 0.0)(x)
    # a linear model with a constant bound has the same tube along every plan: remembered,
    # it stays as it is, call after call (start's tube included)
    ctrl = _memory_controller(w, N, soft, a)
    ctrl.start(x)
    for _ in range(3):
        result = ctrl(x)
        np.testing.assert_array_equal(result.tube, plain.tube)
        np.testing.assert_array_equal(result.tube_inputs, plain.tube_inputs)
    # a previous tube twice as wide: each margin keeps the share a of the excess
    ctrl._tightening._last = (2.0 * plain.tube, 2.0 * plain.tube_inputs)
    wider = ctrl(x)
    assert wider.status.ok
    np.testing.assert_allclose(wider.tube, (1.0 + a) * plain.tube, rtol=1e-14)
    np.testing.assert_allclose(wider.tube_inputs, (1.0 + a) * plain.tube_inputs, rtol=1e-14)
    # and the solve used them: the plan keeps the wider margins of the inputs and the rail
    u, s = wider.u_plan[:, 0], wider.obs[1:, 0]
    assert np.all(u <= 2.0 - wider.tube_inputs[:, 0] + 1e-7)
    assert np.all(u >= -1.0 + wider.tube_inputs[:, 0] - 1e-7)
    assert np.all(np.abs(s) <= 1.0 - wider.tube[1:, :2].max(axis=1) + 1e-7)
    # a previous tube narrower everywhere changes nothing
    ctrl._tightening._last = (0.5 * plain.tube, 0.5 * plain.tube_inputs)
    np.testing.assert_array_equal(ctrl(x).tube, plain.tube)


def test_tube_memory_needs_the_tube():
    with pytest.raises(InputError, match=r"tube_memory = 0.5 only applies with tightening='tube'"):
        MPC(
            _double_integrator(np.array([1e-3, 1e-3])),
            5,
            Cost(Q=[1.0, 0.1], R=[0.1]),
            tube_memory=0.5,
        )


def test_feedback_tube_stays_bounded_where_the_open_loop_box_grows_without_end():
    # an unstable plant: the open-loop box grows like 1.3^k, the LQR-closed ellipsoid settles
    Au = np.array([[1.3, 0.1], [0.0, 1.2]])
    Bu = np.array([[0.0], [0.1]])
    w, N = np.array([1e-3, 1e-3]), 30
    model = _double_integrator(w, implicit=False, A=Au, B=Bu)
    problem = dict(
        horizon=N,
        cost=Cost(Q=[1.0, 1.0], R=[1.0]),
        constraints=Constraints(
            u_min=[-50.0], u_max=[50.0], obs_min=[-1.0, -1.0], obs_max=[1.0, 1.0], soft_bounds=True
        ),
        tightening="tube",
    )
    box = MPC(model, **problem)(np.zeros(2))
    ellipsoid = MPC(model, **problem, tube="feedback")(np.zeros(2))
    assert box.tube[-1, 0] > 10.0 and box.empty_tube_stages > 0
    assert ellipsoid.tube[-1, 0] < 0.05 and ellipsoid.empty_tube_stages == 0
    # over the second half of the horizon the box grows 1.3^15-fold, the ellipsoid barely
    assert box.tube[-1, 0] / box.tube[15, 0] > 40.0
    assert np.all(ellipsoid.tube[1:].max(axis=0) / ellipsoid.tube[15] < 3.0)
    assert ellipsoid.status.ok and ellipsoid.slack < 1e-6


def test_an_empty_input_interval_is_not_solved_and_falls_back():
    # a bound so wide that the feedback's share exceeds the input range at stage 1
    w, N = np.array([0.5, 5.0]), 6
    ctrl = MPC(
        _double_integrator(w, implicit=False),
        N,
        Cost(Q=[1.0, 0.1], R=[1e-3]),
        Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-100.0, -np.inf], obs_max=[100.0, np.inf]),
        tightening="tube",
        tube="feedback",
        tube_R=1e-3,
    )
    result = ctrl(np.array([0.0, 0.0]))
    assert result.tube_inputs[1, 0] > 1.0  # the margins of both bounds exceed the range 2
    assert result.empty_tube_stages > 0
    assert result.status.name == "INFEASIBLE" and result.fallback
    assert result.iterations == 0
    np.testing.assert_array_equal(result.u, [0.0])


def test_feedback_tube_options_are_checked_before_anything_is_built():
    model = _double_integrator(np.array([1e-3, 1e-3]))
    cost = Cost(Q=[1.0, 1.0], R=[1.0])
    with pytest.raises(InputError, match=r"tube must be one of .*got 'closed'"):
        MPC(model, 5, cost, tightening="tube", tube="closed")
    with pytest.raises(InputError, match=r"tube = 'feedback' only applies with tightening='tube'"):
        MPC(model, 5, cost, tube="feedback")
    with pytest.raises(InputError, match=r"tube_R must be .*positive definite.*got \[\[0.0\]\]"):
        MPC(model, 5, cost, tightening="tube", tube="feedback", tube_R=0.0)
    with pytest.raises(InputError, match=r"tube_Q must be .*got shape \(3,\)"):
        MPC(model, 5, cost, tightening="tube", tube="feedback", tube_Q=[1.0, 2.0, 3.0])
    with pytest.raises(InputError, match=r"tube_Q must be .*got 'big'"):
        MPC(model, 5, cost, tightening="tube", tube="feedback", tube_Q="big")
    with pytest.raises(InputError, match=r"tube_Q = \[1.0, 1.0\] applies only to tube='feedback'"):
        MPC(model, 5, cost, tightening="tube", tube_Q=[1.0, 1.0])
    with pytest.raises(InputError, match=r"tube_lipschitz = 2.0 applies only to tube='open_loop'"):
        MPC(model, 5, cost, tightening="tube", tube="feedback", tube_lipschitz=2.0)
    with pytest.raises(InputError, match=r"tube_R \(by default the cost's R\) must be .*definite"):
        MPC(model, 5, Cost(Q=[1.0, 1.0], R=[0.0]), tightening="tube", tube="feedback")
    with pytest.raises(
        InputError, match="tightening='tube' needs the model's one-step error bound"
    ):
        MPC(_double_integrator(None, bound=False), 5, cost, tightening="tube", tube="feedback")


def test_feedback_tube_refuses_a_growing_mode_the_input_cannot_reach():
    # x_0 grows by 1.1 per step and no input reaches it
    Au = np.array([[1.1, 0.0], [0.0, 1.0]])
    model = _double_integrator([1e-3, 1e-3], implicit=False, A=Au, B=np.array([[0.0], [1.0]]))
    cost = Cost(Q=[1.0, 1.0], R=[1.0])
    with pytest.raises(InputError, match=r"tube='feedback'.*eigenvalue 1.1 .*not reachable"):
        MPC(model, 5, cost, tightening="tube", tube="feedback")
    MPC(model, 5, cost, tightening="tube")  # the open-loop tube has no gain to compute


# -- the tube in scenarios and metrics ------------------------------------------------------

SAFE = "scenarios/cartpole_safe.toml"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['controller.tube="closed"'], "controller.tube must be one of"),
        (["controller.tube_Q=[1.0, 1.0]"], "controller.tube_Q must have 4 entries"),
        (['controller.tube="feedback"', "controller.tube_R=[0.0]"], "controller.tube_R"),
        (
            ['controller.tube="feedback"', "controller.tube_lipschitz=2.0"],
            "controller.tube_lipschitz = 2.0 applies only to controller.tube = 'open_loop'",
        ),
    ],
)
def test_scenario_tube_keys_are_checked_on_load(overrides, message):
    from vimpc.scenario import load_scenario

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_scenario(SAFE, overrides)
    cfg = load_scenario(SAFE, ['controller.tube="feedback"', "controller.tube_R=[1.0]"])
    assert (cfg["controller"]["tube"], cfg["controller"]["tube_R"]) == ("feedback", [1.0])


def test_overrides_that_turn_the_feedback_tube_off_drop_the_files_settings_only():
    from vimpc.pipeline import _tube_options
    from vimpc.scenario import load_scenario

    feedback = ['controller.tube="feedback"', 'controller.tube_errors="gaussian"']
    feedback += ["controller.tube_R=[1.0]"]
    cfg = load_scenario(SAFE, feedback)
    assert _tube_options(cfg["controller"]) == {
        "tube": "feedback",
        "tube_memory": 0.0,
        "tube_Q": None,
        "tube_R": [1.0],
        "tube_errors": "gaussian",
    }
    # the file's feedback tube (tube, tube_errors) is dropped by the override that turns
    # it off; the same settings given by overrides themselves would be ignored: refused
    off = load_scenario(SAFE, ['controller.tightening="none"'])
    assert _tube_options(off["controller"]) == {}
    assert off["controller"]["tube_errors"] == "box"
    with pytest.raises(ConfigError, match="controller.tube = 'feedback' applies only to"):
        load_scenario(SAFE, [*feedback, 'controller.tightening="none"'])
    open_loop = load_scenario(SAFE, ['controller.tube="open_loop"'])
    assert _tube_options(open_loop["controller"]) == {"tube": "open_loop", "tube_memory": 0.0}
    with pytest.raises(ConfigError, match="controller.tube_R = \\[1.0\\] applies only to"):
        load_scenario(SAFE, [*feedback[1:], 'controller.tube="open_loop"'])


def test_empty_tube_steps_are_counted_per_episode_and_pooled():
    from vimpc.closedloop import episode_metrics, summarize
    from vimpc.closedloop.episode import Trajectory

    def traj(empty):
        T = len(empty)
        return Trajectory(
            t=0.1 * np.arange(T + 1),
            obs=np.zeros((T + 1, 2)),
            states=np.zeros((T + 1, 2)),
            inputs=np.zeros((T, 1)),
            rewards=np.zeros(T),
            solve_times=np.full(T, 1e-3),
            iterations=np.ones(T, dtype=np.int64),
            status=np.array(["SOLVED"] * T),
            safety_margin=np.ones((T + 1, 1)),
            constraint_residual=np.zeros(T + 1),
            reference=np.zeros((T + 1, 2)),
            slack=np.zeros(T),
            plan_obs=np.zeros((T, 2, 2)),
            tube=np.zeros((T, 2, 0)),
            seed=0,
            empty_tube=np.asarray(empty, dtype=np.int64),
        )

    runs = [traj([0, 3, 0, 1]), traj([0, 0, 0, 0, 0, 2])]
    per = [episode_metrics(t) for t in runs]
    assert [m["empty_tube_steps"] for m in per] == [2, 1]
    summary = summarize(per, runs)
    assert summary["empty_tube_steps"] == 3
    assert summary["empty_tube_fraction"] == pytest.approx(3 / 10)
    # a record made before the field existed has no count, and the summary claims none
    old = dataclasses.replace(runs[0], empty_tube=np.zeros(0))
    assert "empty_tube_steps" not in episode_metrics(old)
    assert "empty_tube_fraction" not in summarize([episode_metrics(old)], [old])


def test_with_soft_bounds_the_inputs_share_is_a_soft_row_whose_slack_reports_an_empty_set():
    N = 6
    problem = dict(
        horizon=N,
        cost=Cost(Q=[1.0, 0.1], R=[1e-3], reference=[0.5, 0.0]),
        constraints=Constraints(
            u_min=[-1.0], u_max=[1.0], obs_min=[-100.0, -np.inf], obs_max=[100.0, np.inf],
            soft_bounds=True,
        ),
        tightening="tube",
        tube="feedback",
        tube_R=1e-3,
    )  # fmt: skip
    # a small bound: the share fits, the plan keeps it and no slack is needed
    fits = MPC(_double_integrator(np.array([1e-4, 1e-3]), implicit=False), **problem)
    result = fits(np.array([0.0, 0.0]))
    share = result.tube_inputs[:, 0]
    assert result.status.ok and result.empty_tube_stages == 0 and result.slack < 1e-6
    assert 0.0 < share[1:].min() and share.max() < 1.0 and share[0] == 0.0
    assert np.all(np.abs(result.u_plan[1:, 0]) <= 1.0 - share[1:] + 1e-6)
    assert np.abs(result.u_plan[1:, 0]).max() > 0.5  # the tightened limit is active
    # a bound so wide that the share exceeds the range: solved anyway, the slack says so
    wide = MPC(_double_integrator(np.array([0.5, 5.0]), implicit=False), **problem)
    result = wide(np.array([0.0, 0.0]))
    assert result.status.ok and not result.fallback
    assert result.empty_tube_stages > 0
    assert result.slack == pytest.approx(result.tube_inputs[1:, 0].max() - 1.0, rel=1e-3)


def test_gaussian_errors_scale_the_box_ellipsoid_by_the_quantile_ratio():
    from statistics import NormalDist

    from vimpc.mpc.tube import gaussian_factors

    w, N, delta = np.array([2e-3, 1e-2]), 8, 0.05
    model = dataclasses.replace(_double_integrator(w, implicit=False), delta=delta)
    problem = dict(
        horizon=N,
        cost=Cost(Q=[1.0, 0.1], R=[0.1]),
        constraints=Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-1.0, -5.0], obs_max=[1.0, 5.0]),
        tightening="tube",
        tube="feedback",
    )  # fmt: skip
    box = MPC(model, **problem)(np.array([0.1, 0.0]))
    gauss = MPC(model, **problem, tube_errors="gaussian")(np.array([0.1, 0.0]))
    z_w, z_c = NormalDist().inv_cdf(1 - delta / 4), NormalDist().inv_cdf(1 - delta)
    assert gaussian_factors(delta, 2) == pytest.approx((1 / z_w**2, z_c), rel=1e-12)
    ratio = z_c / (z_w * np.sqrt(2))  # sigma = w / z_w against the box's sqrt(nx) w
    np.testing.assert_allclose(gauss.tube[2:], ratio * box.tube[2:], rtol=1e-9, atol=1e-15)
    # stage 1 holds the box: |g| . w for the rows s >= -1, v >= -5, s <= 1, v <= 5
    np.testing.assert_allclose(gauss.tube[1], [w[0], w[1], w[0], w[1]], rtol=1e-12)
    assert np.all(ratio * box.tube[1] < gauss.tube[1])
    np.testing.assert_allclose(gauss.tube_inputs, ratio * box.tube_inputs, rtol=1e-9, atol=1e-15)
    with pytest.raises(
        InputError, match=r"tube_errors = 'gaussian' applies only to tube='feedback'"
    ):
        MPC(model, **{**problem, "tube": "open_loop"}, tube_errors="gaussian")
    with pytest.raises(InputError, match=r"tube_errors must be one of .*got 'normal'"):
        MPC(model, **problem, tube_errors="normal")


def test_a_horizon_level_bound_is_read_as_quantiles_over_its_horizon():
    """The same Gaussian errors give the same ellipsoids whichever level the bound was
    calibrated at: a bound that holds all H steps at once is wider by z(delta / 2 nx H) over
    z(delta / 2 nx), and its ellipsoid after stage 1 is the step-level one's."""
    from statistics import NormalDist

    from vimpc.mpc.tube import bound_steps, gaussian_factors

    delta, nx, H, N = 0.05, 2, 20, 8
    z = [NormalDist().inv_cdf(1 - delta / (2 * nx * n)) for n in (1, H)]
    w = np.array([2e-3, 1e-2])
    step = dataclasses.replace(_double_integrator(w, implicit=False), delta=delta)
    wide = _double_integrator(w * z[1] / z[0], implicit=False)
    record = BoundInfo(delta, "horizon", H, "conformal", "heldout")
    horizon = dataclasses.replace(wide, bound_info=record)
    assert (bound_steps(step), bound_steps(horizon)) == (1, H)
    assert gaussian_factors(delta, nx, H)[0] == pytest.approx(1 / z[1] ** 2, rel=1e-12)
    problem = dict(
        horizon=N,
        cost=Cost(Q=[1.0, 0.1], R=[0.1]),
        constraints=Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-1.0, -5.0], obs_max=[1.0, 5.0]),
        tightening="tube",
        tube="feedback",
        tube_errors="gaussian",
    )  # fmt: skip
    a, b = (MPC(m, **problem)(np.array([0.1, 0.0])) for m in (step, horizon))
    np.testing.assert_allclose(b.tube[2:], a.tube[2:], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(b.tube_inputs, a.tube_inputs, rtol=1e-9, atol=1e-15)
    # stage 1 holds the wider box
    np.testing.assert_allclose(b.tube[1], a.tube[1] * z[1] / z[0], rtol=1e-12)


def test_a_cold_guess_covers_the_soft_rows_with_the_least_slacks():
    # the unstable plant's open-loop box outgrows the bounds +-1: the state held at the
    # measured state meets none of the late stages' tightened soft rows with its slacks at 0
    Au = np.array([[1.3, 0.1], [0.0, 1.2]])
    Bu = np.array([[0.0], [0.1]])
    model = _double_integrator(np.array([1e-3, 1e-3]), implicit=False, A=Au, B=Bu)
    ctrl = MPC(
        model,
        horizon=30,
        cost=Cost(Q=[1.0, 1.0], R=[1.0]),
        constraints=Constraints(
            u_min=[-50.0], u_max=[50.0], obs_min=[-1.0, -1.0], obs_max=[1.0, 1.0], soft_bounds=True
        ),
        tightening="tube",
        solver="fatrop",
    )
    x0 = np.array([0.5, -0.2])
    tr, cover = ctrl._tr, ctrl._cover
    w0 = ca.DM(ctrl._initial_guess(x0))
    refs = np.zeros((ctrl.horizon + 1) * 2)
    P = ca.DM(np.concatenate([x0, refs, [0.0]]))
    m = ctrl._tightening.margins(w0, P, np.zeros(0), ctrl._bounds, False)
    lbg, ubg = (np.asarray(m.bounds[k]).reshape(-1) for k in ("lbg", "ubg"))
    g = ca.Function("g", [tr.nlp["x"], tr.nlp["p"]], [tr.nlp["g"]])
    soft = np.flatnonzero(tr.lbg != tr.ubg)[np.unique(cover._rows)]  # the rows of g

    def violation(w):
        gv = np.asarray(g(w, m.P)).reshape(-1)[soft]
        return np.maximum(lbg[soft] - gv, 0) + np.maximum(gv - ubg[soft], 0)

    assert violation(w0.full()).max() > 5.0  # the late stages' margins exceed the bounds
    covered = cover(w0.full(), m.P, lbg, ubg)
    assert violation(covered).max() < 1e-9
    others = np.setdiff1d(np.arange(tr.layout.n_w), cover.slacks)
    np.testing.assert_array_equal(covered[others], w0.full().reshape(-1)[others])
    # the least such slacks: each raised one, 1e-6 lower, breaks a row it enters
    raised = cover.slacks[covered[cover.slacks] > 0]
    assert raised.size > 0
    for j in raised:
        lower = covered.copy()
        lower[j] -= 1e-6
        assert violation(lower).max() > 5e-7
    # slacks that cover already are kept, and a covered guess is returned as it is
    more = covered.copy()
    more[cover.slacks] += 1.0
    np.testing.assert_array_equal(cover(more, m.P, lbg, ubg), more)
    # fatrop's cold start solves from it (the soft rows' slacks at their least, >= 1 m)
    result = ctrl(x0)
    assert result.status.ok and result.slack > 0.0
