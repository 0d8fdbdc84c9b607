"""The claims of ``results/``, re-checked at a smaller scale (``pytest -m slow``, minutes).

The committed tables come from ``tests/experiments/*.py``; these tests assert what those
tables say on other seeds, so a change that breaks a claim is caught without rerunning the
whole experiment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vimpc import pipeline, scenario
from vimpc.models import NominalModel, evaluation

ROOT = Path(__file__).parents[1]
SAFE = ROOT / "scenarios" / "cartpole_safe.toml"

pytestmark = pytest.mark.slow


def _episodes(overrides: list[str], seeds: range) -> list[dict]:
    cfg = scenario.load_scenario(SAFE, overrides)
    source = pipeline.obtain_model(cfg, pipeline.build_env(cfg), log=lambda _: None)
    results = pipeline.run_episodes(cfg, source.path, list(seeds), workers=2)
    return [metrics for _, metrics in results]


def test_the_tube_keeps_the_cart_on_the_rail():
    # results/safety: 0 of 100 episodes off the rail with the tube, 30 of 100 without;
    # here 30 other seeds: the tube keeps every one on the rail, and the same episodes
    # without it do leave the rail (so the check can fail)
    seeds = range(300, 330)
    tube = _episodes([], seeds)
    assert sum(m["violations"] > 0 for m in tube) == 0
    assert min(m["min_margin"] for m in tube) > 0.1
    # the bound held in closed loop about as often as it promised (delta = 0.05)
    assert np.mean([m["coverage"] for m in tube]) >= 0.93
    free = _episodes(['controller.tightening="none"'], seeds)
    assert sum(m["violations"] > 0 for m in free) >= 3


def test_conformal_bound_covers_fresh_trajectories():
    # results/conformal: coverage on fresh trajectories at least 1 - delta for exchangeable
    # transitions; here the cart-pole at delta = 0.1, 40 fresh trajectories, with a
    # tolerance of three binomial standard deviations of the test set
    delta = 0.1
    cfg = scenario.load_scenario(SAFE, [f"model.delta={delta}"])
    env = pipeline.build_env(cfg)
    train = pipeline.collect(cfg, env, "train")
    calibration, _ = pipeline.split_heldout(pipeline.collect(cfg, env, "heldout"))
    fresh = {**cfg, "data": {**cfg["data"], "heldout_seed": 7_000_000, "heldout_trajectories": 40}}
    test = pipeline.collect(fresh, env, "heldout")
    family = NominalModel(env.nominal_system, env.dt, bound="conformal", delta=delta)
    model = family.fit(train, calibration).discrete_model()
    coverage = evaluation.coverage(model, test)
    n = test.n_trajectories * test.n_steps
    assert coverage >= 1 - delta - 3 * np.sqrt(delta * (1 - delta) / n)
    assert coverage <= 1 - delta + 0.05  # and the bound is not trivially wide
