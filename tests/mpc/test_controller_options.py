"""The controller's options are declared once (vimpc.mpc.options.SETTINGS): MPC's keyword
defaults and checks, the scenario's [controller] table and the pipeline read that one table,
so they cannot drift apart."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest

import vimpc.mpc
from vimpc import pipeline, scenario
from vimpc._settings import REQUIRED
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Cost
from vimpc.mpc.options import SETTINGS
from vimpc.mpc.solvers import HESSIANS, QP_SOLVERS, SOLVERS
from vimpc.mpc.transcription import TRANSCRIPTIONS
from vimpc.mpc.tube import ERRORS, TUBES

#: a scenario that gives no controller option but the required horizon
MINIMAL = """\
[env]
id = "vimpc/Pendulum-v0"
dt = 0.05

[model]
family = "nominal"

[controller]
horizon = 5

[controller.cost]
Q = [1.0, 0.1]
R = [0.01]

[episodes]
steps = 10
"""


@pytest.fixture
def minimal(tmp_path) -> Path:
    path = tmp_path / "minimal.toml"
    path.write_text(MINIMAL, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def pendulum():
    return NominalModel(Pendulum(), 0.05).discrete_model()


def test_the_scenario_controller_table_is_the_controller_declaration():
    assert scenario.SCHEMA["controller"] is SETTINGS
    assert MPC.settings is SETTINGS
    # the `vimpc schema` output lists each option once, with the declared default
    markdown = scenario.schema_markdown()
    for key, setting in SETTINGS.items():
        rows = [r for r in markdown.splitlines() if r.startswith(f"| `controller.{key}` |")]
        assert len(rows) == 1, key
        assert f"| {setting.default_text()} |" in rows[0], (key, rows[0])


def test_every_option_is_a_keyword_of_mpc_with_the_declared_default():
    params = inspect.signature(MPC).parameters
    for key, setting in SETTINGS.items():
        assert key in params, f"option {key!r} is declared but MPC takes no such argument"
        default = params[key].default
        if setting.default is REQUIRED:
            assert default is inspect.Parameter.empty, key
        else:
            assert default == setting.default, (key, default, setting.default)
    # the arguments that are not options are Python objects no scenario key gives
    others = {k for k in params if k not in SETTINGS}
    assert others == {
        "model",
        "cost",
        "constraints",
        "safe_input",
        "solver_options",
        "obs_names",
        "unknown",
    }


def test_the_allowed_values_are_the_controllers_vocabularies():
    assert SETTINGS["solver"].choices == SOLVERS
    assert SETTINGS["qpsol"].choices == QP_SOLVERS
    assert SETTINGS["hessian"].choices == HESSIANS
    assert SETTINGS["tube_errors"].choices == ERRORS
    assert set(SETTINGS["tube"].choices) == set(TUBES)
    assert set(SETTINGS["transcription"].choices) == {"auto", *TRANSCRIPTIONS}


def test_a_scenario_without_options_builds_the_controller_of_the_defaults(minimal, pendulum):
    cfg = scenario.load_scenario(minimal)
    for key, setting in SETTINGS.items():
        if setting.default is not REQUIRED:
            assert cfg["controller"][key] == setting.default, key
    env = pipeline.build_env(cfg)
    try:
        built = pipeline.build_controller(cfg, pendulum, env)
    finally:
        env.close()
    direct = MPC(pendulum, 5, Cost(Q=[1.0, 0.1], R=[0.01]))
    for mpc in (built, direct):
        assert mpc.max_iter == SETTINGS["max_iter"].default == 50
        assert mpc.tol == SETTINGS["tol"].default
        assert mpc.solver_name == SETTINGS["solver"].default
        assert mpc.time_budget is None and mpc.tube_lipschitz is None
        # the sampling period: the env's dt from the scenario, the model's dt directly
        assert mpc.period == 0.05
        assert (mpc.jit, mpc.tightening, mpc.tube, mpc.tube_errors) == (
            "none",
            "none",
            "open_loop",
            "box",
        )
        assert mpc.transcription == "implicit"  # "auto" on a model with a residual


def test_every_option_of_the_scenario_reaches_mpc(minimal, pendulum, monkeypatch):
    overrides = {
        "horizon": 7,
        "solver": "ipopt",
        "transcription": "step",
        "max_iter": 12,
        "tol": 1e-6,
        "period": 0.2,
        "time_budget": 0.15,
        "jit": "none",
        "tightening": "tube",
        "tube": "feedback",
        "tube_Q": [2.0, 0.5],
        "tube_R": [0.25],
        "tube_errors": "gaussian",
    }
    given = ['model.bound="conformal"']
    for key, value in overrides.items():
        given.append(f"controller.{key}={value!r}".replace("'", '"'))
    cfg = scenario.load_scenario(minimal, given)
    received = {}

    class Recorder:
        settings = SETTINGS

        def __init__(self, model, **kwargs):
            received.update(kwargs)

    monkeypatch.setattr(vimpc.mpc, "MPC", Recorder)
    env = pipeline.build_env(cfg)
    try:
        pipeline.build_controller(cfg, pendulum, env)
    finally:
        env.close()
    # every declared option, with the scenario's value (qpsol, hessian at their defaults)
    assert set(SETTINGS) <= set(received)
    for key in SETTINGS:
        assert received[key] == cfg["controller"][key], key
    for key, value in overrides.items():
        assert received[key] == value, key
    # the open-loop tube's Lipschitz option is never dropped silently either
    assert received["tube_lipschitz"] is None


def test_without_a_period_the_controller_is_timed_against_the_envs_dt(minimal, pendulum):
    cfg = scenario.load_scenario(minimal, ["env.dt=0.1"])
    assert cfg["controller"]["period"] is None
    env = pipeline.build_env(cfg)
    try:
        model = NominalModel(Pendulum(), 0.1).discrete_model()
        assert pipeline.build_controller(cfg, model, env).period == 0.1
        cfg = scenario.load_scenario(minimal, ["env.dt=0.1", "controller.period=0.3"])
        assert pipeline.build_controller(cfg, model, env).period == 0.3
    finally:
        env.close()


# one bad value per option that takes a plain value, and the words of the rule it breaks
BAD = [
    ("horizon", 0, "positive integer"),
    ("solver", "ipopd", "one of"),
    ("transcription", "shooting", "one of"),
    ("qpsol", "qpx", "one of"),
    ("hessian", "newton", "one of"),
    ("rti_start", "fatropp", "one of"),
    ("condensed_start", "none", "one of"),
    ("warm_barrier", 0.0, "positive"),
    ("warm_max_iter", 0, "positive integer"),
    ("rti_regularization", -1.0, "non-negative"),
    ("max_iter", 0, "positive integer"),
    ("max_iter", 2.5, "integer"),
    ("tol", -1.0, "positive"),
    ("time_budget", -0.5, "positive"),
    ("time_budget", 0.0, "positive"),
    ("time_budget", float("nan"), "finite"),
    ("period", 0.0, "positive"),
    ("period", float("inf"), "finite"),
    ("jit", "all", "one of"),
    ("tightening", "tubes", "one of"),
    ("tube", "closed", "one of"),
    ("tube_errors", "normal", "one of"),
    ("tube_memory", 1.0, "in [0, 1)"),
    ("tube_lipschitz", -2.0, "positive"),
]


def test_every_option_with_a_plain_value_is_tested_here():
    assert {key for key, _, _ in BAD} == set(SETTINGS) - {"tube_Q", "tube_R"}


@pytest.mark.parametrize("key, value, rule", BAD)
def test_a_bad_value_is_refused_by_the_scenario_and_by_mpc_naming_key_and_value(
    key, value, rule, minimal, pendulum
):
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(minimal, [f"controller.{key}={value!r}".replace("'", '"')])
    message = str(err.value)
    assert f"controller.{key} must be" in message and rule in message, message
    assert repr(value) in message, message
    with pytest.raises(InputError) as err:
        MPC(pendulum, **{"horizon": 5, key: value}, cost=Cost(Q=[1.0, 0.1], R=[0.01]))
    message = str(err.value)
    assert f"{key} must be" in message and rule in message and repr(value) in message, message


def test_an_option_of_other_solvers_is_refused_by_the_scenario_naming_them(minimal):
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(
            minimal, ['controller.solver="sqpmethod"', "controller.warm_barrier=1e-3"]
        )
    assert (
        "controller.warm_barrier = 0.001 applies only to controller.solver = 'fatrop' or "
        "'ipopt', and would be ignored with controller.solver = 'sqpmethod'"
    ) in str(err.value)


def test_an_override_of_the_solver_drops_the_files_options_of_other_solvers(minimal):
    # the file's warm_barrier and qpsol do nothing with the new solver: dropped, as turning
    # the tube off leaves its settings unused
    text = minimal.read_text().replace(
        "horizon = 5\n", 'horizon = 5\nsolver = "fatrop"\nwarm_barrier = 0.01\n', 1
    )
    minimal.write_text(text)
    assert scenario.load_scenario(minimal)["controller"]["warm_barrier"] == 0.01
    ctrl = scenario.load_scenario(minimal, ['controller.solver="sqpmethod"'])["controller"]
    assert (ctrl["solver"], ctrl["warm_barrier"]) == ("sqpmethod", None)
    # kept where the new solver reads it
    assert (
        scenario.load_scenario(minimal, ['controller.solver="ipopt"'])["controller"]["warm_barrier"]
        == 0.01
    )
    # given by an override itself, it is still refused
    with pytest.raises(ConfigError, match="controller.warm_barrier = 0.02 applies only to"):
        scenario.load_scenario(
            minimal, ['controller.solver="sqpmethod"', "controller.warm_barrier=0.02"]
        )


@pytest.mark.parametrize("key, value", [("tube_Q", [-1.0, 1.0]), ("tube_R", [0.0])])
def test_bad_tube_weights_are_refused_by_the_scenario_naming_the_entry(key, value, minimal):
    with pytest.raises(ConfigError, match=rf"controller\.{key}\[0\] must be .*, got "):
        scenario.load_scenario(minimal, [f"controller.{key}={value}"])


def test_a_misspelt_option_gets_a_did_you_mean_on_both_sides(minimal, pendulum):
    with pytest.raises(ConfigError, match=r"unknown key 'controller.max_iters'.*'max_iter'"):
        scenario.load_scenario(minimal, ["controller.max_iters=3"])
    with pytest.raises(InputError, match=r"unknown keyword argument 'max_iters'.*'max_iter'"):
        MPC(pendulum, 5, Cost(Q=[1.0, 0.1], R=[0.01]), max_iters=3)


def test_mpc_keeps_its_python_forms_of_the_options(pendulum):
    cost = Cost(Q=[1.0, 0.1], R=[0.01])
    # numpy numbers, and transcription=None for "auto" (its default before it was declared)
    mpc = MPC(pendulum, np.int64(4), cost, max_iter=np.int32(3), tol=np.float64(1e-5))
    assert (mpc.horizon, mpc.max_iter, mpc.tol) == (4, 3, 1e-5)
    assert MPC(pendulum, 4, cost, transcription=None).transcription == "implicit"
    assert math.isclose(MPC(pendulum, 4, cost, period=3, time_budget=2).time_budget, 2.0)
    # no budget is None; a budget of 0 s or less is refused, not read as none
    assert MPC(pendulum, 4, cost, time_budget=None).time_budget is None
    for bad in (0, -0.01):
        with pytest.raises(InputError, match=rf"time_budget must be a positive .*got {bad};"):
            MPC(pendulum, 4, cost, time_budget=bad)
