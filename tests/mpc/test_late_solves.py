"""Late solves are visible and handled: the controller knows its sampling period, marks a call
that takes longer as late, keeps a time budget through the solver and falls back when the
budget stops a solve; the closed loop counts late calls and the summary prints them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_controller_options import MINIMAL as SCENARIO
from vimpc_envs.pendulum import PendulumEnv

import vimpc.mpc.controller as controller_module
from vimpc import report, scenario
from vimpc.closedloop import Trajectory, episode_metrics, run_episode, summarize
from vimpc.closedloop.metrics import late_steps
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import CartPole, Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost, Status

PENDULUM_COST = Cost(Q=[1.0, 0.1], R=[0.01], reference=[np.pi, 0.0])


@pytest.fixture(scope="module")
def env():
    env = PendulumEnv(jit=False)
    yield env
    env.close()


@pytest.fixture(scope="module")
def pendulum(env):
    return NominalModel(Pendulum(), env.dt).discrete_model()


def _episode(env, mpc, steps=6):
    return run_episode(env, mpc, steps=steps, seed=3)


# -- the period ------------------------------------------------------------------------------


def test_a_call_longer_than_the_period_is_late_and_counted(env, pendulum):
    # 1 ns: no call of a CasADi solve is that fast, so every call is late
    tiny = MPC(pendulum, 8, PENDULUM_COST, period=1e-9)
    assert tiny.period == 1e-9
    traj = _episode(env, tiny)
    assert traj.late.dtype == bool and traj.late.shape == traj.status.shape
    assert traj.late.all()
    assert float(traj.period) == 1e-9
    # the whole call is timed: never shorter than the solve inside it
    assert np.all(traj.call_times >= traj.solve_times) and np.all(traj.call_times > 1e-9)
    m = episode_metrics(traj)
    assert m["late_solves"] == m["steps"] == 6 and m["late_solve_fraction"] == 1.0
    assert m["period_ms"] == pytest.approx(1e-6)
    assert m["call_time_max_ms"] == pytest.approx(traj.call_times.max() * 1e3)

    # the default period is the model's dt, and a 1000 s period is never missed
    relaxed = MPC(pendulum, 8, PENDULUM_COST, period=1e3)
    assert MPC(pendulum, 8, PENDULUM_COST).period == pendulum.dt
    calm = _episode(env, relaxed)
    assert not calm.late.any() and episode_metrics(calm)["late_solves"] == 0

    # pooled over both episodes, with the share and the period the summary names
    summary = summarize([m, episode_metrics(calm)], [traj, calm])
    assert summary["late_solves"] == 6 and summary["solves"] == 12
    assert summary["late_solve_fraction"] == pytest.approx(0.5)
    assert summary["period_ms"] == pytest.approx(1e6)  # the largest where episodes differ
    calls = np.concatenate([traj.call_times, calm.call_times]) * 1e3
    assert summary["call_time_median_ms"] == pytest.approx(np.median(calls))
    assert summary["call_time_p95_ms"] == pytest.approx(np.percentile(calls, 95))
    table = report.summary_table(summary)
    assert "12: 0 failed, 6 late, 0 at the iteration limit" in table
    (row,) = [line for line in table.splitlines() if "late calls" in line]
    assert "6 of 12 (50.0%) took longer than the period 1e+06 ms" in row


def test_each_result_says_late_exactly_when_its_call_outlasts_the_period(pendulum):
    mpc = MPC(pendulum, 8, PENDULUM_COST, period=2e-3)
    for theta in np.linspace(0.0, 3.0, 8):
        result = mpc(np.array([theta, 0.0]))
        assert result.call_time >= result.solve_time > 0.0
        assert result.late == (result.call_time > 2e-3)


def test_a_record_made_before_late_existed_counts_the_late_status(env, pendulum):
    traj = _episode(env, MPC(pendulum, 4, PENDULUM_COST), steps=4)
    old = Trajectory(
        **{
            **traj.arrays(),
            "late": np.zeros(0, dtype=bool),
            "call_times": np.zeros(0),
            "period": np.array(math.nan),
            "status": np.array(["SOLVED", "LATE", "LATE", "FAILED"]),
        },
        seed=traj.seed,
    )
    assert late_steps(old).tolist() == [False, True, True, False]
    m = episode_metrics(old)
    assert m["late_solves"] == 2 and math.isnan(m["period_ms"])
    assert math.isnan(m["call_time_max_ms"])
    assert math.isnan(summarize([m], [old])["call_time_median_ms"])
    # no period recorded: the summary has no row that would name one
    assert "late calls" not in report.summary_table(summarize([m], [old]))


# -- the time budget -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole():
    return NominalModel(CartPole(), 0.05).discrete_model()


#: a swing-up from rest at the bottom over 150 stages: ipopt needs about a second and over
#: 40 iterations cold, sqpmethod hits its 200 iterations after several seconds
SWING_UP = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0])
BOTTOM, TOP = np.array([0.0, 0.3, 0.0, 0.0]), np.array([0.0, np.pi, 0.0, 0.0])


@pytest.mark.parametrize("solver", ["ipopt", "sqpmethod"])
def test_a_time_budget_stops_a_slow_solve_and_the_fallback_is_applied(cartpole, solver):
    options = dict(
        horizon=150,
        cost=SWING_UP,
        constraints=Constraints(u_min=[-20.0], u_max=[20.0]),
        solver=solver,
        max_iter=200,
        safe_input=[1.5],
    )
    # the same solve without a budget, in this process: the slow thing the budget is held to.
    # The budget is a third of it and the period all of it, so that a quiet machine (ipopt's
    # solve in 0.76 s) and a busy one (an iteration of sqpmethod in 0.4 s alone) stop it alike
    unbudgeted = MPC(cartpole, **options)(BOTTOM)
    budget = unbudgeted.solve_time / 3
    assert unbudgeted.iterations >= 20, "the reference solve is too quick to stop"
    mpc = MPC(cartpole, **options, time_budget=budget, period=unbudgeted.solve_time)
    # no previous plan: the safe input
    first = mpc(BOTTOM)
    assert first.status is Status.TIME_LIMIT and not first.status.ok
    assert first.fallback and first.u.tolist() == [1.5]
    # the solver ran until the budget and was stopped there, well before the unbudgeted end
    assert budget <= first.solve_time < unbudgeted.solve_time
    assert first.iterations < unbudgeted.iterations
    assert not first.late  # at most one iteration past a third of the period
    # at the target the solve is quick (about 10-30 ms against 0.76 s) and used ...
    held = mpc(TOP)
    assert held.status in (Status.SOLVED, Status.ITERATION_LIMIT) and not held.fallback
    assert held.solve_time < budget
    # ... and a solve the budget stops next applies that plan's next input, shifted
    stopped = mpc(BOTTOM)
    assert stopped.status is Status.TIME_LIMIT and stopped.fallback
    assert budget <= stopped.solve_time < unbudgeted.solve_time
    assert stopped.iterations < unbudgeted.iterations
    assert np.array_equal(stopped.u, np.clip(held.u_plan[1], -20.0, 20.0))
    assert stopped.u.tolist() != [1.5]


def test_the_budget_reaches_ipopt_as_its_wall_time_limit(cartpole, monkeypatch):
    seen = {}
    original = controller_module.ca.nlpsol

    def spy(name, plugin, nlp, opts):
        seen.update(plugin=plugin, opts=opts)
        return original(name, plugin, nlp, opts)

    monkeypatch.setattr(controller_module.ca, "nlpsol", spy)
    MPC(cartpole, 5, SWING_UP, solver="ipopt", time_budget=0.02)
    assert seen["plugin"] == "ipopt" and seen["opts"]["ipopt"]["max_wall_time"] == 0.02
    assert seen["opts"]["ipopt"]["max_iter"] == 50  # the preset's options are kept
    # with the user's own ipopt options beside it
    MPC(cartpole, 5, SWING_UP, solver="ipopt", time_budget=0.02, solver_options=MU)
    assert seen["opts"]["ipopt"]["max_wall_time"] == 0.02
    assert seen["opts"]["ipopt"]["mu_init"] == 0.01
    MPC(cartpole, 5, SWING_UP, solver="ipopt", time_budget=None)
    assert "max_wall_time" not in seen["opts"]["ipopt"]


MU = {"ipopt": {"mu_init": 0.01}}


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"period": 0.0}, "period must be a positive finite number, got 0.0"),
        ({"period": -0.05}, "period must be a positive finite number, got -0.05"),
        ({"period": math.nan}, "period must be a positive finite number, got nan"),
        ({"period": "0.05"}, "period must be a positive number, got '0.05'"),
        ({"time_budget": -0.01}, "time_budget must be a positive number: the finite wall"),
        (
            {"time_budget": 0.0},
            'take, got 0.0; leave time_budget unset (None), or "none", for no budget',
        ),
        ({"time_budget": math.nan}, "the finite wall time [s] a solve may take, got nan"),
        ({"time_budget": math.inf}, "may take, got inf"),
        ({"time_budget": True}, "may take, got True"),
        (
            {"time_budget": 0.06},
            "time_budget = 0.06 s exceeds the sampling period 0.05 s (model.dt)",
        ),
        (
            {"time_budget": 0.2, "period": 0.1},
            "time_budget = 0.2 s exceeds the sampling period 0.1 s (period)",
        ),
        (
            {"time_budget": 0.01, "solver": "fatrop"},
            "time_budget = 0.01 s cannot be kept by solver = 'fatrop'",
        ),
        (
            {
                "time_budget": 0.01,
                "solver": "ipopt",
                "solver_options": {"ipopt": {"max_wall_time": 1.0}},
            },
            "solver_options['ipopt']['max_wall_time'] = 1.0 and time_budget = 0.01 both set",
        ),
        (
            {"time_budget": 0.01, "solver_options": {"iteration_callback": None}},
            "solver_options['iteration_callback'] cannot be given with time_budget = 0.01",
        ),
    ],
)
def test_bad_timing_is_refused_naming_the_argument_before_building(
    cartpole, kwargs, message, monkeypatch
):
    def no_build(*args, **kw):
        raise AssertionError("the NLP was built before the argument was checked")

    # the period, the budget and the options that clash with it: before the NLP is transcribed
    monkeypatch.setattr(controller_module, "transcribe", no_build)
    with pytest.raises(InputError) as err:
        MPC(cartpole, 5, SWING_UP, **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["controller.time_budget=0.08"],
            "controller.time_budget = 0.08 s exceeds the sampling period 0.05 s (env.dt)",
        ),
        (
            ["controller.time_budget=0.3", "controller.period=0.2"],
            "controller.time_budget = 0.3 s exceeds the sampling period 0.2 s (controller.period)",
        ),
        (
            ["controller.time_budget=0.01", 'controller.solver="fatrop"'],
            "controller.time_budget = 0.01 s cannot be kept by controller.solver = 'fatrop'",
        ),
        (["controller.time_budget=-1.0"], "controller.time_budget must be a positive number"),
        (["controller.period=0.0"], "controller.period must be a positive number, got 0.0"),
    ],
)
def test_a_scenario_with_bad_timing_is_refused_on_load(tmp_path, overrides, message):
    path = tmp_path / "timing.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path, overrides)
    assert message in str(err.value)
    # a period that leaves room for the budget loads; no budget is the key left out, and a
    # budget of 0 s is refused rather than read as none
    ok = scenario.load_scenario(path, ["controller.time_budget=0.08", "controller.period=0.1"])
    assert (ok["controller"]["time_budget"], ok["controller"]["period"]) == (0.08, 0.1)
    with pytest.raises(ConfigError, match="controller.time_budget must be a positive number"):
        scenario.load_scenario(path, ["controller.time_budget=0"])


def test_none_unsets_a_scenarios_time_budget(tmp_path):
    """TOML has no null: ``--set controller.time_budget="none"`` takes a scenario's budget
    away (so fatrop, which cannot keep one, can be set with it), another word is refused."""
    path = tmp_path / "timing.toml"
    text = SCENARIO.replace("horizon = 5", "horizon = 5\ntime_budget = 0.01")
    path.write_text(text, encoding="utf-8")
    budgeted = scenario.load_scenario(path)
    assert budgeted["controller"]["time_budget"] == 0.01
    unset = ['controller.time_budget="none"', 'controller.solver="fatrop"']
    assert scenario.load_scenario(path, unset)["controller"].get("time_budget") is None
    with pytest.raises(ConfigError, match="controller.time_budget must be a number"):
        scenario.load_scenario(path, ['controller.time_budget="never"'])


def test_none_unsets_a_scenarios_warm_max_iter(tmp_path):
    """``--set controller.warm_max_iter="none"`` takes a scenario's iteration budget of warm
    solves away (they then run to ``max_iter``), another word is refused."""
    path = tmp_path / "budget.toml"
    text = SCENARIO.replace("horizon = 5", 'horizon = 5\nsolver = "fatrop"\nwarm_max_iter = 7')
    path.write_text(text, encoding="utf-8")
    assert scenario.load_scenario(path)["controller"]["warm_max_iter"] == 7
    unset = scenario.load_scenario(path, ['controller.warm_max_iter="none"'])
    assert unset["controller"].get("warm_max_iter") is None
    with pytest.raises(ConfigError, match="controller.warm_max_iter must be an integer"):
        scenario.load_scenario(path, ['controller.warm_max_iter="never"'])


# -- the first plan, before the clock --------------------------------------------------------

#: 40 stages to the top from 0.75 rad below it: a cold start takes several iterations
TILTED = np.array([0.0, np.pi - 0.75, 0.0, 0.0])
FIRST_PLAN = dict(horizon=40, cost=SWING_UP, constraints=Constraints(u_min=[-20.0], u_max=[20.0]))


@pytest.mark.parametrize(
    "solver, transcription",
    [("sqpmethod", "step"), ("fatrop", "implicit"), ("rti", "step"), ("condensed", "implicit")],
)
def test_the_first_plan_is_the_warm_start_of_the_call_at_the_same_state(
    cartpole, solver, transcription
):
    mpc = MPC(cartpole, **FIRST_PLAN, solver=solver, transcription=transcription)
    cold = mpc(TILTED)
    first = mpc.start(TILTED)
    assert first.status.ok and np.isfinite(first.call_time)
    assert first.iterations == cold.iterations  # start forgets the plan of the call before
    if solver == "rti":  # the first call is prepared before the clock too
        assert mpc._solving.solver.prepared
    # the call at that state and time starts from that plan, unshifted: it is already solved
    # (the SQPs in one iteration at most; fatrop's interior point restarts its barrier, and
    # the real-time iteration has made one iteration from a cold start either way)
    call = mpc(TILTED)
    assert call.status.ok and not call.handed_over
    if solver in ("sqpmethod", "condensed"):
        assert call.iterations <= 1 < cold.iterations
    elif solver == "fatrop":
        assert call.iterations < cold.iterations
    if solver != "rti":  # solved to convergence twice: the same plan
        assert call.u == pytest.approx(first.u, abs=1e-6)
        assert call.u_plan == pytest.approx(first.u_plan, abs=1e-5)
    # the next call shifts as usual: without a solve (a failure) it applies the plan's next
    # input, and so does a call after start that fails
    assert mpc._fallback() == pytest.approx(np.clip(call.u_plan[1], -20.0, 20.0))
    mpc.start(TILTED)
    assert mpc._fallback() == pytest.approx(first.u)


def test_the_first_plan_is_made_without_the_time_budget(cartpole):
    mpc = MPC(cartpole, **FIRST_PLAN, solver="sqpmethod", time_budget=1e-4)
    cold = mpc(TILTED)  # ~8 iterations: stopped by the budget after the first
    assert cold.status is Status.TIME_LIMIT and cold.fallback
    first = mpc.start(TILTED)
    assert first.status is Status.SOLVED and not first.fallback
    assert first.solve_time > 1e-4 and first.iterations > cold.iterations
    # the budget holds again for the calls that follow (a swing-up from the bottom needs
    # many iterations from that plan)
    assert mpc(BOTTOM).status is Status.TIME_LIMIT


def test_run_episode_makes_the_first_plan_before_the_clock_unless_told_not_to(env, pendulum):
    mpc = MPC(pendulum, 30, PENDULUM_COST, solver="sqpmethod")
    planned = run_episode(env, mpc, steps=3, seed=3)
    assert float(planned.start_time) > 0.0
    cold = run_episode(env, mpc, steps=3, seed=3, initial_plan=False)
    assert np.isnan(cold.start_time)
    # the first call of the loop found its problem solved; without the first plan it solves
    # it from a cold start
    assert planned.iterations[0] <= 1 < cold.iterations[0]
    assert planned.inputs[0] == pytest.approx(cold.inputs[0], abs=1e-5)
    # its time is recorded apart from the loop's, and the summary names it
    first_ms = float(planned.start_time) * 1e3
    metrics = [episode_metrics(planned), episode_metrics(cold)]
    assert metrics[0]["first_plan_time_ms"] == pytest.approx(first_ms)
    assert math.isnan(metrics[1]["first_plan_time_ms"])
    summary = summarize(metrics, [planned, cold])
    assert summary["first_plan_time_median_ms"] == summary["first_plan_time_max_ms"] == first_ms
    assert f"slowest {first_ms:.2f} ms" in report.summary_table(summary)
    assert "first plans" not in report.summary_table(summarize(metrics[1:], [cold]))
    # sqpmethod prepares nothing between samples: no preparation is summarised
    assert np.all(planned.preparation_times == 0.0) and math.isnan(
        summary["preparation_time_median_ms"]
    )
    assert "preparations" not in report.summary_table(summary)
    # a controller without start() (a function) plans in its first call
    plain = run_episode(env, lambda obs, t: mpc(obs, t), steps=2, seed=3)
    assert np.isnan(plain.start_time)
    with pytest.raises(InputError, match="initial_plan must be True or False, got 'yes'"):
        run_episode(env, mpc, steps=2, seed=3, initial_plan="yes")
