"""The real-time iteration: its preparation/feedback split, the initial-value embedding, the
cold start and the options that only it reads."""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest
from test_mpc import DT, _linear_model  # the double integrator with drag

from vimpc import report
from vimpc.closedloop import episode_metrics, run_episode, summarize
from vimpc.dynamics import BoundInfo
from vimpc.errors import InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost, Status


def _pendulum_controller(**kwargs) -> MPC:
    model = NominalModel(Pendulum(), 0.05).discrete_model()
    cost = Cost(Q=[10.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
    return MPC(model, 15, cost, Constraints(u_min=[-2.0], u_max=[2.0]), solver="rti", **kwargs)


def test_preparing_before_the_call_gives_the_same_loop_bit_for_bit():
    # run_episode prepares after each input; a controller called without prepare() prepares
    # inside the call: the same linearisation point and parameters, so the same inputs
    env_steps = 25

    def loop(prepare: bool):
        ctrl = _pendulum_controller(rti_start="fatrop")
        x, rows = np.array([0.1, 0.0]), []
        step = ctrl.model.step
        for k in range(env_steps):
            result = ctrl(x, k * 0.05)
            rows.append((result.u.copy(), result.preparation_time, result.feedback_time))
            x = np.asarray(step(x, result.u, ctrl.model.p_default)).reshape(-1) + 1e-3
            if prepare:
                ctrl.prepare((k + 1) * 0.05)
        return rows

    with_prepare, without = loop(True), loop(False)
    assert [u.tobytes() for u, _, _ in with_prepare] == [u.tobytes() for u, _, _ in without]
    # the first call is the cold start (solved to convergence by rti_start): no phases
    assert np.isnan(with_prepare[0][1]) and np.isnan(with_prepare[0][2])
    assert all(np.isfinite(prep) and np.isfinite(fb) for _, prep, fb in with_prepare[1:])


def test_the_feedback_returns_the_linearisations_prediction_at_the_step():
    # the returned cost and constraints are the Gauss-Newton model's at the new iterate,
    # evaluated from the sparse data prepared: f + grad d + d'Hd/2 and g + J d + J_p dx (the
    # measured initial state moved by dx from the prepared one), recomputed here densely
    ctrl = _pendulum_controller()
    solver, nlp = ctrl._solving.solver, ctrl._tr.nlp
    w_sym, p_sym, n_init = nlp["x"], nlp["p"], ctrl.model.nx
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.3, size=w_sym.numel())
    p = np.concatenate([w[ctrl._layout.x[0]], rng.normal(size=p_sym.numel() - n_init)])
    solver.prepare(x0=w, p=p, **ctrl._bounds)
    x_init = p[:n_init] + np.array([0.05, -0.1])
    sol = solver.feedback(x_init)
    d = sol["x"].reshape(-1) - w
    assert np.all(np.isfinite(d)) and np.abs(d).max() > 1e-3  # a step was taken
    dense = ca.Function(
        "dense", [w_sym, p_sym],
        [nlp["f"], ca.gradient(nlp["f"], w_sym), nlp["g"], ca.jacobian(nlp["g"], w_sym),
         ca.jacobian(nlp["g"], p_sym)[:, :n_init],
         ctrl._tr.gauss_newton(w_sym, p_sym, 1.0, ca.DM.zeros(nlp["g"].numel()))],
    )  # fmt: skip
    f, grad, g, J, J_p, H = (np.asarray(v) for v in dense(w, p))
    grad, g = grad.reshape(-1), g.reshape(-1)
    expected_f = f.item() + grad @ d + 0.5 * d @ H @ d
    expected_g = g + J @ d + J_p @ (x_init - p[:n_init])
    np.testing.assert_allclose(sol["f"], expected_f, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sol["g"].reshape(-1), expected_g, rtol=1e-12, atol=1e-12)
    # the step meets the linearised equality rows (dynamics and initial value) exactly
    equality = ctrl._tr.lbg == ctrl._tr.ubg
    np.testing.assert_allclose(expected_g[equality], ctrl._tr.lbg[equality], atol=1e-10)


def test_the_cold_start_is_solved_to_convergence_then_one_iteration_per_call():
    ctrl = _pendulum_controller(rti_start="fatrop")
    first = ctrl(np.array([0.0, 0.0]))
    assert first.status is Status.SOLVED and first.iterations > 1
    assert np.isnan(first.feedback_time)
    second = ctrl(first.x[1])
    assert second.status is Status.ITERATION_LIMIT and second.iterations == 1
    assert second.feedback_time > 0 and second.preparation_time > 0
    # the plan of a converged start, shifted and re-solved from its own prediction, moves
    # by one Gauss-Newton step only: the first stages agree closely
    np.testing.assert_allclose(second.u_plan[:5, 0], first.u_plan[1:6, 0], atol=0.05)
    # without the start (the default), the first call is one iteration from the cold guess
    cold = _pendulum_controller()(np.array([0.0, 0.0]))
    assert cold.iterations == 1 and np.isfinite(cold.feedback_time)
    ctrl.reset()
    assert ctrl(np.array([0.0, 0.0])).iterations > 1  # reset: a cold start again


def test_other_solvers_report_no_phases_and_prepare_nothing():
    model, _, _ = _linear_model(implicit=True)
    ctrl = MPC(model, 8, Cost(Q=[1.0, 1.0], R=[0.1]), solver="fatrop")
    result = ctrl(np.array([1.0, 0.0]))
    assert np.isnan(result.preparation_time) and np.isnan(result.feedback_time)
    assert ctrl.prepare(DT) == 0.0


def test_regularisation_shortens_the_step():
    # Levenberg-Marquardt: H + lambda I penalises the step's length, so the first input
    # (the guess holds u = 0) shrinks as lambda grows; from the cold guess the linearised
    # dynamics still force a step in the states, so a large lambda does not stop it
    steps = []
    for lam in (0.0, 1e-2, 1.0, 1e6):
        ctrl = _pendulum_controller(rti_start="none", rti_regularization=lam)
        assert ctrl._solving.solver.regularization == lam
        steps.append(abs(float(ctrl(np.array([0.3, 0.0])).u[0])))
    assert steps[0] == 2.0  # the Gauss-Newton step saturates the input
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False)) and steps[-1] < 0.5


def test_run_episode_prepares_after_each_input_with_the_next_time():
    from vimpc_envs.pendulum import PendulumEnv

    env = PendulumEnv(dt=0.05)
    calls = []

    class Spy:
        def __init__(self, inner):
            self.inner, self.model, self.period = inner, inner.model, inner.period

        def reset(self):
            self.inner.reset()

        def prepare(self, t):
            calls.append(("prepare", t))
            return self.inner.prepare(t)

        def __call__(self, obs, t):
            calls.append(("call", t))
            return self.inner(obs, t)

    # a 10 s period: no call is late on a busy machine unless the test makes it so
    traj = run_episode(env, Spy(_pendulum_controller(period=10.0)), 4, seed=0)
    assert calls == [
        ("call", 0.0), ("prepare", 0.05), ("call", 0.05), ("prepare", 0.1),
        ("call", 0.1), ("prepare", 0.15000000000000002), ("call", 0.15000000000000002),
        ("prepare", 0.2),
    ]  # fmt: skip
    # each preparation's time is recorded with the step whose input it followed
    assert traj.preparation_times.shape == (4,) and np.all(traj.preparation_times > 0.0)
    assert not traj.late.any()
    # and summarised apart from the calls
    prepared_ms = np.sort(traj.preparation_times) * 1e3
    metrics = episode_metrics(traj)
    assert metrics["preparation_time_median_ms"] == pytest.approx(np.median(prepared_ms))
    summary = summarize([metrics], [traj])
    assert summary["preparation_time_max_ms"] == pytest.approx(prepared_ms[-1])
    assert f"slowest {prepared_ms[-1]:.2f} ms" in report.summary_table(summary)

    # a sample whose call and the preparation after it outlast the period is late, though
    # the call alone was quick
    class SlowPreparation(Spy):
        def prepare(self, t):
            self.inner.prepare(t)
            return self.period - 1e-9

    slow = run_episode(env, SlowPreparation(_pendulum_controller(period=10.0)), 3, seed=0)
    assert np.all(slow.call_times < 10.0) and slow.late.all()

    # a controller whose prepare() says nothing records NaN, and its calls alone count
    class Silent(Spy):
        def prepare(self, t):
            self.inner.prepare(t)

    quiet = run_episode(env, Silent(_pendulum_controller(period=10.0)), 2, seed=0)
    assert np.isnan(quiet.preparation_times).all() and not quiet.late.any()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (
            {"solver": "fatrop", "rti_start": "ipopt"},
            "rti_start='ipopt' applies only to solver='rti'",
        ),
        (
            {"solver": "sqpmethod", "rti_regularization": 1e-3},
            "rti_regularization=0.001 applies only to solver='rti'",
        ),
        ({"solver": "rti", "rti_start": "fatropp"}, "rti_start"),
        ({"solver": "rti", "rti_regularization": -1.0}, "rti_regularization"),
    ],
)
def test_rti_options_are_checked(kwargs, words):
    model, _, _ = _linear_model(implicit=True)
    with pytest.raises(InputError, match=words.replace("(", r"\(")):
        MPC(model, 5, Cost(Q=[1.0, 1.0], R=[0.1]), **kwargs)


def test_a_scenario_refuses_rti_options_with_another_solver(tmp_path):
    from vimpc.errors import ConfigError
    from vimpc.scenario import load_scenario

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    with pytest.raises(ConfigError, match="controller.rti_start = 'ipopt' applies only to"):
        load_scenario(
            root / "scenarios" / "cartpole_swingup.toml", ['controller.rti_start="ipopt"']
        )


def test_hpipm_runs_the_iteration_on_the_sparse_qp_and_agrees_with_the_condensed_one():
    # CasADi's HPIPM interface takes only stage-structured QPs (on the dense condensed QP it
    # crashed the process): with qpsol = "hpipm" the iteration solves the sparse QP in the
    # call, the same Gauss-Newton step as the condensed QP's (daqp) from the same guess
    from vimpc.mpc.solvers import SparseRealTimeIteration

    runs = {}
    for qpsol in ("auto", "hpipm"):
        ctrl = _pendulum_controller(qpsol=qpsol, rti_start="fatrop")
        x, us = np.array([0.1, 0.0]), []
        for k in range(10):
            result = ctrl(x, k * 0.05)
            assert result.status.ok, (qpsol, k, result.status)
            us.append(result.u.copy())
            x = np.asarray(ctrl.model.step(x, result.u, ctrl.model.p_default)).reshape(-1)
        runs[qpsol] = np.array(us)
        sparse = isinstance(ctrl._solving.solver, SparseRealTimeIteration)
        assert sparse == (qpsol == "hpipm")
        assert np.isnan(result.preparation_time) == sparse  # nothing prepared ahead
    np.testing.assert_allclose(runs["hpipm"], runs["auto"], atol=1e-5)


def test_with_a_tube_the_iteration_waits_for_the_state_on_the_sparse_qp():
    # the tube is computed from the measured state, so nothing can be prepared ahead: the
    # iteration is one Gauss-Newton step on the sparse QP in the call, reported unsplit
    from vimpc.mpc.solvers import SparseRealTimeIteration

    model = NominalModel(Pendulum(), 0.05).discrete_model()
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", model.np)
    bounded = dataclasses.replace(
        model,
        bound=ca.Function("bound", [x, u, p], [ca.DM([1e-3, 1e-3])]),
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed"),
    )
    cost = Cost(Q=[10.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
    cons = Constraints(u_min=[-2.0], u_max=[2.0], obs_min=[-np.inf, -8.0], obs_max=[np.inf, 8.0])
    ctrl = MPC(bounded, 10, cost, cons, solver="rti", tightening="tube")
    assert isinstance(ctrl._solving.solver, SparseRealTimeIteration)
    first = ctrl(np.array([0.2, 0.0]))
    assert first.status is Status.ITERATION_LIMIT and first.iterations == 1
    assert ctrl.prepare(0.05) == 0.0
    second = ctrl(first.x[1], 0.05)
    assert second.status.ok and np.isnan(second.feedback_time) and second.tube[1:].max() > 0


def test_the_condensed_step_is_the_sparse_qps_step_with_slacks_and_the_implicit_residual():
    # condensing eliminates the states and the integrator's next-state copies exactly: on a
    # nonlinear swing-up NLP with soft observation bounds (slacks) and input bounds, from a
    # random guess that meets no constraint, the condensed QP's step (daqp) equals the
    # sparse QP's step (qrqp) on the same linearisation
    from vimpc.mpc.solvers import SparseRealTimeIteration, qp_options

    cons = Constraints(
        u_min=[-2.0], u_max=[2.0], obs_min=[-np.inf, -3.0], obs_max=[np.inf, 3.0],
        soft_bounds=True,
    )  # fmt: skip
    model = NominalModel(Pendulum(), 0.05).discrete_model()
    cost = Cost(Q=[10.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
    ctrl = MPC(model, 12, cost, cons, solver="rti", transcription="implicit")
    tr, L = ctrl._tr, ctrl._tr.layout
    assert L.z.size and L.s.size
    sparse = SparseRealTimeIteration(
        tr.nlp, tr.gauss_newton, "qrqp", qp_options("qrqp"), expand=tr.expandable
    )
    rng = np.random.default_rng(7)
    w0 = rng.normal(scale=0.3, size=L.n_w)
    w0[L.s] = 0.1
    w0[L.u] = np.clip(w0[L.u], -2.0, 2.0)
    p = np.concatenate([[0.3, -0.2], np.tile([np.pi, 0.0], 13), [0.0], model.p_default])
    bounds = dict(lbx=tr.lbw, ubx=tr.ubw, lbg=tr.lbg, ubg=tr.ubg)
    mine = ctrl._solving.solver(x0=w0, p=p, **bounds)
    theirs = sparse(x0=ca.DM(w0), p=ca.DM(p), **{k: ca.DM(v) for k, v in bounds.items()})
    assert ctrl._solving.solver.stats()["return_status"] == "one real-time iteration"
    np.testing.assert_allclose(
        np.asarray(mine["x"]).ravel(), np.asarray(theirs["x"]).ravel(), atol=1e-7
    )
    assert np.abs(np.asarray(mine["x"]).ravel() - w0).max() > 1e-2  # a step was taken


def test_a_loaded_model_whose_derivatives_have_no_sx_form_runs_unexpanded(tmp_path):
    # a saved and loaded variational step (a rootfinder) expands, but its derivatives solve
    # with a linear solver that has no SX form: the controller keeps such an NLP MX instead
    # of failing to expand it, and plans as with the model it was saved from
    from vimpc import load_model, model_file
    from vimpc.mechanics import FourBar
    from vimpc.mpc.tube import expanded_or_none

    fresh = NominalModel(FourBar(), 0.02, integrator="midpoint").discrete_model()
    loaded = load_model(model_file.save(fresh, tmp_path / "fourbar.vimpc"))
    assert expanded_or_none(loaded.step) is not None
    assert expanded_or_none(loaded.step.jacobian()) is None
    cost = Cost(Q=[0, 0, 0, 10.0, 0, 0], R=[1e-3], reference=[0, 0, 0, 2.0, 0, 0])
    x = np.asarray(FourBar().assemble(0.3, 1.0), dtype=float).ravel()
    plans = []
    for model in (fresh, loaded):
        ctrl = MPC(model, 10, cost, solver="rti", transcription="step")
        assert ctrl._tr.expandable is (model is fresh)
        plans.append(ctrl(x).u_plan)
    assert np.all(np.isfinite(plans[1])) and np.any(plans[1] != 0)
    np.testing.assert_allclose(plans[1], plans[0], rtol=1e-8, atol=1e-10)


def test_a_guess_that_cannot_be_condensed_is_a_failed_call_not_an_error():
    # a plan with a non-finite entry (a learned model that left its range): the
    # condensing's sparse LU refuses it; the preparation keeps the failure, the call
    # reports it and falls back, and the next preparation, from the fallback's plan, solves
    ctrl = _pendulum_controller()
    x = np.array([0.1, 0.0])
    assert ctrl(x, 0.0).status.ok
    ctrl._w0[ctrl._layout.x[2]] = np.nan
    ctrl.prepare(0.05)
    failed = ctrl(x, 0.05)
    assert failed.status is Status.FAILED and failed.fallback
    assert ctrl._solving.solver.stats()["return_status"].startswith("linearisation failed")
    assert np.all(np.isfinite(failed.u)) and abs(failed.u[0]) <= 2.0
    ctrl.prepare(0.1)
    again = ctrl(x, 0.1)
    assert again.status.ok and not again.fallback and np.isfinite(again.feedback_time)
