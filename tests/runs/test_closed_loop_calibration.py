"""Conformal bounds calibrated on the controller's own closed-loop episodes
(``data.calibration = "closed_loop"``, :func:`vimpc.pipeline.calibrate_closed_loop`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vimpc import pipeline, save_model, scenario
from vimpc.closedloop.metrics import bootstrap_interval
from vimpc.errors import ConfigError
from vimpc.models.calibration import calibrate, residual_scale
from vimpc.scenario.specs import FIT_SEED_STRIDE

ROOT = Path(__file__).parents[2]
SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
# a small safe cart-pole whose controller does not use the bound (no tightening): the
# calibration episodes and the scenario's episodes then run the same controller, so their
# windows are exchangeable and the guarantee applies exactly
SMALL = [
    "data.trajectories=10",
    "data.heldout_trajectories=40",
    "controller.horizon=8",
    'controller.tightening="none"',
    "model.delta=0.1",
    "model.bound_horizon=8",
    "data.calibration_episodes=30",
    "episodes.steps=30",
    "episodes.count=40",
]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The small scenario's configuration, env and model (bound calibrated closed loop)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VIMPC_CACHE", str(folder))
        cfg = scenario.load_scenario(SAFE, SMALL)
        env = pipeline.build_env(cfg)
        source = pipeline.obtain_model(cfg, env, log=lambda _: None)
    return cfg, env, source


def test_the_bound_is_calibrated_on_the_calibration_episodes_of_the_first_bound(
    calibrated, tmp_path
):
    # done again by hand: fit, a per-step bound on the first half of the held-out data,
    # 30 episodes of the controller on that model from seeds 2000000.., the horizon-level
    # bound on their transitions: the same quantile, to the last bit
    cfg, env, source = calibrated
    d = cfg["data"]
    family = scenario.build_family(
        cfg.replace(model={"bound_level": "step", "bound_horizon": 0}),
        env.nominal_system,
    )
    train = pipeline.collect(cfg, env, "train")
    calibration, _ = pipeline.split_heldout(pipeline.collect(cfg, env, "heldout"))
    family.fit(train, calibration)
    first = family.discrete_model()
    assert first.bound_info.level == "step" and first.bound_info.calibrated_on == "heldout"
    path = tmp_path / "first.vimpc"
    save_model(first, path)
    seeds = range(d["calibration_seed"], d["calibration_seed"] + d["calibration_episodes"])
    episodes = [traj for traj, _ in pipeline.run_episodes(cfg, path, list(seeds))]
    closed = pipeline.trajectories_dataset(episodes, {})
    assert closed.n_trajectories == 30 and closed.n_steps == cfg["episodes"]["steps"]
    bound = calibrate(
        first, closed, 0.1, scale=residual_scale(first, train), level="horizon", horizon=8,
        method="windows",
    )  # fmt: skip
    typed = source.model.bound_info
    assert (typed.level, typed.horizon, typed.calibrated_on) == ("horizon", 8, "closed_loop")
    record = typed.extra
    assert record["windows"] == 30 * (30 - 8 + 1) and record["window_trajectories"] == 30
    assert record["quantile"] == bound.quantile, (record, bound.describe())
    assert source.report["calibration_transitions"] == 30 * 30
    # the calibration episodes' states are part of the box the model reports
    box = source.model.info["data_box"]
    states = closed.states.reshape(-1, 4)
    assert np.all(np.asarray(box["high"]) >= states.max(axis=0))
    assert np.all(np.asarray(box["low"]) <= states.min(axis=0))


def test_fresh_episodes_of_the_same_controller_are_covered_per_horizon(calibrated):
    # 40 fresh episodes (seeds 0-39, none a calibration seed): the mean share of their
    # 8-step windows with every error inside the bound is at least 1 - delta = 0.9 in
    # expectation (conformal risk control over the 30 calibration episodes' windows, the
    # same controller); the slack is the mean's own bootstrap interval over episodes plus
    # 3 standard deviations of the conditional coverage a calibration set of 30 episodes
    # gives (at most sqrt(0.09 / 30) = 0.055, the spread of one window per episode)
    cfg, _, source = calibrated
    results = pipeline.run_episodes(cfg, source.path, list(range(40)))
    per_episode = np.array([m["horizon_coverage"] for _, m in results])
    low, _ = bootstrap_interval(per_episode)
    assert low >= 0.9 - 3 * math.sqrt(0.09 / 30), (per_episode.mean(), low)


def test_the_cache_key_follows_the_controller_only_for_a_closed_loop_calibration():
    closed = scenario.load_scenario(SAFE, SMALL)
    other = scenario.load_scenario(SAFE, [*SMALL, "controller.cost.R=[0.02]"])
    assert pipeline.cache_key(closed) != pipeline.cache_key(other)
    held = ['data.calibration="heldout"', 'model.bound_level="step"', "model.bound_horizon=0"]
    small = [o for o in SMALL if not o.startswith(("data.calibration_", "model.bound_horizon"))]
    a = scenario.load_scenario(SAFE, [*small, *held])
    b = scenario.load_scenario(SAFE, [*small, *held, "controller.cost.R=[0.02]"])
    assert pipeline.cache_key(a) == pipeline.cache_key(b)
    # the calibration keys cannot act with a held-out calibration: refused, not keyed
    with pytest.raises(ConfigError, match="data.calibration_seed = 5000000 applies only to"):
        scenario.load_scenario(SAFE, [*small, *held, "data.calibration_seed=5000000"])
    # per-episode plants change what the calibration episodes see
    d = scenario.load_scenario(SAFE, [*SMALL, 'env.plant="per_episode"'])
    assert pipeline.cache_key(closed) != pipeline.cache_key(d)


def test_fit_k_shifts_the_calibration_seed():
    cfg = scenario.load_scenario(SAFE, [*SMALL, "data.fits=3"])
    for k in range(3):
        assert pipeline.fit_config(cfg, k)["data"]["calibration_seed"] == (
            2_000_000 + k * FIT_SEED_STRIDE
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [
                'model.bound="none"',
                'controller.tightening="none"',
                'model.bound_level="step"',
                "model.bound_horizon=0",
            ],
            "data.calibration = 'closed_loop' calibrates a conformal bound on the controller's "
            "own episodes, but model.family = 'nominal' with these settings is not fitted",
        ),
        (
            ["data.calibration_episodes=10"],
            "data.calibration_episodes = 10 of episodes.steps = 160 steps is too small a "
            "calibration set for model.delta = 0.05: it needs 19 episodes of at least "
            "model.bound_horizon = 20 steps",
        ),
        (
            ["episodes.seed=1999990"],
            "fit 0's calibration episodes (seeds 2000000 to 2000099) overlap the episodes' seeds "
            "(1999990 to 2000089)",
        ),
        (
            ["data.calibration_seed=4294967290"],
            "data.calibration_seed = 4294967290 with data.calibration_episodes = 100 uses seeds "
            "up to",
        ),
        (['data.calibration="open_loop"'], "data.calibration"),
        (["data.calibration_episodes=0"], "data.calibration_episodes"),
    ],
)
def test_bad_closed_loop_calibration_settings_are_refused_before_any_work(
    overrides, message, tmp_path, monkeypatch, capsys
):
    from test_pipeline import refused_before_any_work

    refused_before_any_work(overrides, message, tmp_path, monkeypatch, capsys)


def test_the_cache_key_follows_the_controllers_code_only_for_a_closed_loop_calibration(
    monkeypatch,
):
    # a bound calibrated on the episodes of another version of the controller (its fallback,
    # its recovery after a failed solve) is not this controller's: such a fit is not reused
    closed = scenario.load_scenario(SAFE, SMALL)
    held = ['data.calibration="heldout"', 'model.bound_level="step"', "model.bound_horizon=0"]
    small = [o for o in SMALL if not o.startswith(("data.calibration_", "model.bound_horizon"))]
    heldout = scenario.load_scenario(SAFE, [*small, *held])
    before = pipeline.cache_key(closed), pipeline.cache_key(heldout)
    monkeypatch.setattr(pipeline, "closed_loop_code_digest", lambda: "another version")
    assert pipeline.cache_key(closed) != before[0]
    assert pipeline.cache_key(heldout) == before[1]


def test_the_closed_loop_code_digest_reads_the_controllers_sources(tmp_path, monkeypatch):
    import vimpc.pipeline as module

    root = tmp_path / "vimpc"
    for folder in ("mpc", "closedloop"):
        (root / folder).mkdir(parents=True)
        (root / folder / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(module, "__file__", str(root / "pipeline.py"))
    first = pipeline.closed_loop_code_digest()
    (root / "mpc" / "a.py").write_text("x = 2\n")
    assert pipeline.closed_loop_code_digest() != first


def test_vimpc_fit_runs_the_calibration_episodes_in_workers_with_the_same_model(
    tmp_path, monkeypatch, capsys
):
    # vimpc fit had no --workers: the calibration episodes ran one after another

    from vimpc import cli, load_model

    tiny = [*SMALL, "data.calibration_episodes=20", "episodes.steps=20"]
    sets = [a for s in tiny for a in ("--set", s)]
    models = []
    for workers in (1, 2):
        monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / f"cache{workers}"))
        out = tmp_path / f"w{workers}.vimpc"
        args = ["fit", SAFE, *sets, "-o", str(out), "--workers", str(workers), "--quiet"]
        assert cli.main(args) == 0
        said = capsys.readouterr().out
        where = "in this process" if workers == 1 else "in 2 worker processes"
        assert "calibrating the bound on 20 closed-loop episodes of 20 steps" in said
        assert where in said
        models.append(load_model(out))
    one, two = models
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, u = rng.normal(size=one.nx), rng.normal(size=one.nu)
        p = np.zeros(one.np)
        assert np.array_equal(np.asarray(one.bound(x, u, p)), np.asarray(two.bound(x, u, p)))
    assert cli.main(["fit", SAFE, "-o", str(tmp_path / "x.vimpc"), "--workers", "0"]) == 2
    assert "--workers must be a positive integer, got 0" in capsys.readouterr().err
