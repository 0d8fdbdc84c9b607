"""The DLNN balancing scenario: the cart-pole's upright start, the scenario and its nominal
twin as the experiment builds it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc.errors import ConfigError, InputError
from vimpc.pipeline import build_env
from vimpc.scenario import load_scenario

ROOT = Path(__file__).parents[2]
SCENARIO = ROOT / "scenarios" / "cartpole_dlnn_balance.toml"


def _experiment():
    sys.path.insert(0, str(ROOT / "tests" / "experiments"))
    try:
        import dlnn_closed_loop
    finally:
        sys.path.pop(0)
    return dlnn_closed_loop


def test_upright_start_is_near_upright_and_seeded():
    env = gymnasium.make("vimpc/CartPole-v0", dt=0.05, start="upright", jit=False).unwrapped
    starts = np.array([env.reset(seed=k)[1]["state"] for k in range(40)])
    offset = starts - np.array([0.0, math.pi, 0.0, 0.0])
    assert np.all(np.abs(offset) <= 0.2)
    assert np.all(offset.std(axis=0) > 0.05)  # spread over the box, not one point
    again = np.array([env.reset(seed=k)[1]["state"] for k in range(40)])
    np.testing.assert_array_equal(starts, again)
    hanging = gymnasium.make("vimpc/CartPole-v0", dt=0.05, jit=False).unwrapped
    assert np.all(np.abs(hanging.reset(seed=0)[1]["state"]) <= 0.1)


def test_unknown_start_is_refused_by_name():
    message = r"start must be one of \['hanging', 'upright'\], got 'uprigth'; did you mean"
    with pytest.raises(InputError, match=message):
        gymnasium.make("vimpc/CartPole-v0", start="uprigth")


def test_scenario_and_its_nominal_twin_differ_only_in_the_model(tmp_path):
    dlnn = load_scenario(SCENARIO)
    nominal = load_scenario(_experiment().nominal_variant(tmp_path))
    assert dlnn["model"]["family"] == "dlnn" and nominal["model"]["family"] == "nominal"
    assert dlnn["env"]["kwargs"]["start"] == "upright"
    assert dlnn["controller"]["horizon"] == 20 and dlnn["controller"]["tightening"] == "tube"
    for key in ("bound", "delta"):
        assert dlnn["model"][key] == nominal["model"][key]
    for table in ("env", "data", "controller", "episodes", "metrics"):
        assert dlnn[table] == nominal[table], table


def test_a_bad_start_in_the_scenario_is_a_config_error_naming_it():
    cfg = load_scenario(SCENARIO, ['env.kwargs.start="sideways"'])
    with pytest.raises(ConfigError, match=r"env: start must be one of .*got 'sideways'"):
        build_env(cfg)
