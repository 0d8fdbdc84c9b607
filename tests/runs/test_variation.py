"""Variation a user would face: the true plant drawn per episode, repeated data collection
and fits, intervals across them, and the share of closed-loop steps outside the model's data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc import cli, pipeline, report, scenario
from vimpc.closedloop import Trajectory, episode_metrics
from vimpc.closedloop.metrics import (
    bootstrap_interval,
    outside_box,
    variation_summary,
)
from vimpc.errors import ConfigError
from vimpc.scenario.specs import FIT_SEED_STRIDE, plant_seed

ROOT = Path(__file__).parents[2]
SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
SMALL = [
    "data.trajectories=10",
    "data.heldout_trajectories=20",
    "controller.horizon=8",
    "episodes.count=3",
    "episodes.steps=8",
    # the scenario's horizon-level bound over the controller's 8 steps, calibrated on 19
    # closed-loop episodes (the fewest its windows take at delta = 0.05)
    "model.bound_horizon=8",
    "data.calibration_episodes=19",
]
VARIED = [*SMALL, 'env.plant="per_episode"', "data.fits=2"]


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def varied_run(tmp_path_factory):
    """A small safe cart-pole run with a plant per episode and two fits."""
    out = tmp_path_factory.mktemp("runs")
    assert cli.main(["run", SAFE, "--out", str(out), "--quiet", "--no-plots", *_sets(VARIED)]) == 0
    run = next((out / "cartpole_safe").iterdir())
    return run, json.loads((run / "metrics.json").read_text())


def test_plants_per_episode_differ_and_are_recorded(varied_run):
    _, metrics = varied_run
    episodes = metrics["per_episode"]
    recorded = [e["plant_seed"] for e in episodes]
    assert recorded == [plant_seed(0, s) for s in metrics["seeds"]]
    assert len(set(recorded)) == len(recorded) and metrics["plants"] == len(recorded)
    assert 0 not in recorded  # the data's plant (env.kwargs.param_seed = 0) is not reused


def test_a_plant_per_episode_is_the_env_built_with_its_seed():
    import gymnasium

    import vimpc  # noqa: F401

    make = dict(dt=0.05, perturbation=0.1, jit=False)
    env = gymnasium.make("vimpc/CartPole-v0", **make).unwrapped
    base = dict(env.true_system.params)
    seed = plant_seed(0, 7)
    env.set_plant(seed)
    fresh = gymnasium.make("vimpc/CartPole-v0", param_seed=seed, **make).unwrapped
    assert env.true_system.params == fresh.true_system.params
    assert env.true_system.params != base
    assert np.array_equal(env.true_system.friction, fresh.true_system.friction)
    x0 = np.array([0.1, 0.2, 0.0, 0.0])
    a = env.reset(seed=3, options={"state": x0})[0]
    b = fresh.reset(seed=3, options={"state": x0})[0]
    assert np.array_equal(a, b)
    assert np.array_equal(env.step([5.0])[0], fresh.step([5.0])[0])
    with pytest.raises(Exception, match="param_seed must be a non-negative int, got -1"):
        env.set_plant(-1)
    assert env.draws_plants
    rigid = dict(make, perturbation=0.0, friction=[0.3, 0.1])
    assert not gymnasium.make("vimpc/CartPole-v0", **rigid).unwrapped.draws_plants


def test_two_fits_give_two_models_with_their_data_seeds_recorded(varied_run):
    run, metrics = varied_run
    fits = metrics["fits"]
    assert [f["data_seed"] for f in fits] == [0, FIT_SEED_STRIDE]
    assert [f["heldout_seed"] for f in fits] == [1_000_000, 1_000_000 + FIT_SEED_STRIDE]
    assert fits[0]["sha256"] != fits[1]["sha256"] and fits[0]["path"] != fits[1]["path"]
    assert fits[0]["data_box"] != fits[1]["data_box"]
    assert [e["fit"] for e in metrics["per_episode"]] == [0, 1, 0]
    assert [r["episodes"] for r in metrics["per_fit"]] == [2, 1]
    assert metrics["fit_count"] == 2 and "violation_rate" in metrics["between_fit_std"]
    # the summary's pooled share is the steps outside over all steps
    outside = sum(e["outside_data_steps"] for e in metrics["per_episode"])
    assert metrics["outside_data_share"] == outside / sum(
        e["steps"] for e in metrics["per_episode"]
    )


def test_an_episode_of_a_varied_run_is_reproduced_from_its_record(varied_run):
    run, metrics = varied_run
    cfg = scenario.load_scenario(SAFE, VARIED)
    paths = [f["path"] for f in metrics["fits"]]
    (traj, again), *_ = pipeline.run_episodes(cfg, paths, [metrics["seeds"][1]], fits=[1])
    kept = np.load(run / "episode_001.npz")
    assert traj.states.tobytes() == kept["states"].tobytes()
    assert again["plant_seed"] == metrics["per_episode"][1]["plant_seed"]
    # the same episode on the fixed plant ends elsewhere: the plants differ
    fixed = scenario.load_scenario(SAFE, [*SMALL, "data.fits=2"])
    (other, _), *_ = pipeline.run_episodes(fixed, paths, [metrics["seeds"][1]], fits=[1])
    assert not np.array_equal(other.states[-1], traj.states[-1])


def test_plant_and_fits_keys_leave_the_fit_cache_key_alone():
    # a bound calibrated on held-out data: the episodes' plants do not enter the fit (a
    # closed-loop calibration's do: test_closed_loop_calibration.py)
    held = ['data.calibration="heldout"']

    def heldout(overrides):  # without the closed-loop calibration's keys, which cannot act
        return [o for o in overrides if not o.startswith("data.calibration_")] + held

    cfg = scenario.load_scenario(SAFE, heldout(SMALL))
    varied = scenario.load_scenario(SAFE, heldout(VARIED))
    assert pipeline.cache_key(cfg) == pipeline.cache_key(pipeline.fit_config(varied, 0))
    assert pipeline.cache_key(cfg) != pipeline.cache_key(pipeline.fit_config(varied, 1))


def _trajectory(states: np.ndarray) -> Trajectory:
    T = len(states) - 1
    nx = states.shape[1]
    return Trajectory(
        t=np.arange(T + 1) * 0.1,
        obs=states.copy(),
        states=states,
        inputs=np.zeros((T, 1)),
        rewards=np.zeros(T),
        solve_times=np.full(T, 1e-3),
        iterations=np.ones(T, dtype=int),
        status=np.array(["SUCCESS"] * T),
        safety_margin=np.ones((T + 1, 1)),
        constraint_residual=np.zeros(T + 1),
        reference=np.zeros((T + 1, nx)),
        slack=np.zeros(T),
        plan_obs=np.zeros((T, 2, nx)),
        tube=np.zeros((T, 2, 1)),
        seed=0,
    )


def test_steps_outside_the_data_box_are_counted_exactly():
    box = {"low": [-1.0, -2.0], "high": [1.0, 2.0]}
    states = np.array(
        [
            [0.0, 0.0],  # inside
            [1.0, -2.0],  # on the corner: inside
            [1.0 + 1e-12, 0.0],  # just past the first entry's high end
            [0.0, -2.5],  # past the second entry's low end
            [5.0, 5.0],  # the last state starts no step: not counted
        ]
    )
    traj = _trajectory(states)
    assert outside_box(traj, box).tolist() == [False, False, True, True]
    metrics = episode_metrics(traj, data_box=box)
    assert metrics["outside_data_steps"] == 2 and metrics["outside_data_share"] == 0.5
    assert "outside_data_share" not in episode_metrics(traj)
    with pytest.raises(Exception, match="the data box has 3 low and 3 high entries"):
        outside_box(traj, {"low": [0, 0, 0], "high": [1, 1, 1]})


def test_the_data_box_is_the_range_of_the_training_and_calibration_states():
    from vimpc.data import Dataset

    rng = np.random.default_rng(0)
    parts = []
    for shift in (0.0, 3.0):
        states = rng.normal(shift, 1.0, size=(2, 5, 2))
        t = np.tile(np.arange(5) * 0.1, (2, 1))
        parts.append(Dataset(t, states, states, np.zeros((2, 4, 1)), 0.1, {}))
    box = pipeline.data_box(*parts)
    both = np.concatenate([p.states.reshape(-1, 2) for p in parts])
    assert box["low"] == both.min(axis=0).tolist() and box["high"] == both.max(axis=0).tolist()


def test_a_bound_that_holds_only_on_its_training_box_is_warned_about():
    from vimpc.dynamics import BoundInfo

    box = {"domain_low": [0.0], "domain_high": [1.0]}
    theorem = BoundInfo(0.1, "step", None, "theorem1", "training", box)
    assert report.bound_holds_only_on(theorem) == "training box"
    # the same figures from a conformal calibration: its promise is over the data, no region
    conformal = BoundInfo(0.1, "step", None, "conformal", "heldout", box)
    assert report.bound_holds_only_on(conformal) is None
    assert report.bound_holds_only_on(None) is None
    named = BoundInfo(0.1, "step", None, "conformal", "heldout", {"holds_only_on": "data hull"})
    assert report.bound_holds_only_on(named) == "data hull"
    records = [{"bound_holds_only_on": "training box"}]
    summary = {"outside_data_share": 0.125, "episodes_outside_data": 3, "episodes_with_data_box": 4}
    flags = report.data_region_flags(summary, records)
    assert flags["bound_holds_only_on"] == "training box"
    assert "12.5% of the steps (3 of 4 episodes)" in flags["warnings"][0]
    assert "warnings" not in report.data_region_flags(
        {**summary, "outside_data_share": 0.0}, records
    )
    unknown = report.data_region_flags({}, records)["warnings"][0]
    assert "records no data box" in unknown
    assert report.data_region_flags(summary, [{"bound_holds_only_on": None}]) == {}


def _episode(fit, success, violations, margin, coverage, outside, steps=10):
    return {
        "fit": fit,
        "plant_seed": 100 + len(str(margin)),
        "success": success,
        "violations": violations,
        "min_margin": margin,
        "coverage": coverage,
        "outside_data_steps": outside,
        "outside_data_share": outside / steps,
        "steps": steps,
    }


def test_variation_summary_gives_rates_per_fit_and_their_spread():
    episodes = [
        _episode(0, 1.0, 0, 0.5, 1.0, 0),
        _episode(1, 0.0, 2, -0.1, 0.8, 4),
        _episode(0, 1.0, 0, 0.3, 0.9, 1),
        _episode(1, 1.0, 0, 0.2, 0.9, 0),
    ]
    out = variation_summary(episodes)
    rows = {r["fit"]: r for r in out["per_fit"]}
    assert rows[0]["success_rate"] == 1.0 and rows[1]["success_rate"] == 0.5
    assert rows[0]["violation_rate"] == 0.0 and rows[1]["violation_rate"] == 0.5
    assert math.isclose(out["between_fit_std"]["success_rate"], np.std([1.0, 0.5], ddof=1))
    assert math.isclose(rows[1]["min_margin_mean"], 0.05)
    assert out["outside_data_share"] == 5 / 40 and out["outside_data_share_max"] == 0.4
    assert out["episodes_outside_data"] == 2
    low, high = out["min_margin_mean_ci95"]
    assert -0.1 <= low <= np.mean([0.5, -0.1, 0.3, 0.2]) <= high <= 0.5
    assert "percentile" in out["bootstrap"]


def test_the_bootstrap_interval_is_deterministic_and_narrows_with_more_episodes():
    rng = np.random.default_rng(1)
    few, many = rng.normal(0.0, 1.0, 10), rng.normal(0.0, 1.0, 400)
    assert bootstrap_interval(few) == bootstrap_interval(list(few))
    a, b = bootstrap_interval(few)
    c, d = bootstrap_interval(many)
    assert a < few.mean() < b and c < many.mean() < d and d - c < b - a
    assert all(math.isnan(v) for v in bootstrap_interval([1.0]))


def test_the_outside_data_figure_has_one_bar_per_episode():
    from vimpc.plotting.data_region import outside_data_figure

    episodes = [_episode(k % 2, 1.0, 0, 0.1, 1.0, k) for k in range(5)]
    fig = outside_data_figure(episodes, seeds=list(range(5)), holds_only_on="training box")
    bars = [p for p in fig.axes[0].patches]
    assert sorted(round(b.get_height(), 12) for b in bars) == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert "training box" in fig.axes[0].get_title()
    assert outside_data_figure([{"steps": 3}]) is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [
                'env.plant="per_episode"',
                "env.kwargs.perturbation=0.0",
                "env.kwargs.friction=[0.3, 0.1]",
            ],
            "env.plant = 'per_episode' needs an env that draws plants, but vimpc/CartPole-v0 "
            "with env.kwargs.perturbation = 0.0 cannot",
        ),
        (['env.plant="sometimes"'], "env.plant"),
        (["data.fits=0"], "data.fits"),
        (
            [
                "data.fits=2",
                'model.bound="none"',
                'data.calibration="heldout"',
                'model.bound_level="step"',
                "model.bound_horizon=0",
            ],
            "data.fits = 2 repeats the data collection and the fit, but model.family = 'nominal'",
        ),
        (
            ["data.fits=3", "data.heldout_seed=5"],
            "data.fits = 3: fit 0's training data (seeds 0 to 99) and fit 0's held-out (from "
            "seed 5) overlap",
        ),
        (
            ["data.fits=2", "data.seed=4294967000"],
            "data.fits = 2 uses seeds up to",
        ),
    ],
)
def test_bad_variation_settings_are_refused_before_any_work(
    overrides, message, tmp_path, monkeypatch, capsys
):
    from test_pipeline import refused_before_any_work

    refused_before_any_work(overrides, message, tmp_path, monkeypatch, capsys)


def test_fits_with_saved_data_are_refused(tmp_path):
    data = tmp_path / "d.npz"
    data.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"data.fits = 2 collects new data for each fit, but "):
        scenario.load_scenario(SAFE, ["data.fits=2", f'data.path="{data}"'])


def test_an_interrupted_varied_run_resumes_to_the_same_episodes(
    varied_run, tmp_path, monkeypatch, capsys
):
    from vimpc.runs import store

    reference, theirs = varied_run
    real, calls = store.save_episode, []

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(store, "save_episode", save_then_interrupt)
    args = ["run", SAFE, "--out", str(tmp_path), "--quiet", "--no-plots", *_sets(VARIED)]
    assert cli.main(args) == 130
    monkeypatch.undo()
    (stage,) = (tmp_path / "cartpole_safe").iterdir()
    manifest = json.loads((stage / "run.json").read_text())
    assert [f["data_seed"] for f in manifest["fits"]] == [0, FIT_SEED_STRIDE]
    assert cli.main(["run", "--resume", str(stage), "--quiet", "--no-plots"]) == 0
    capsys.readouterr()
    final = stage.with_name(stage.name.removesuffix(".partial"))
    ours = json.loads((final / "metrics.json").read_text())
    for k in range(3):
        a, b = np.load(final / f"episode_{k:03d}.npz"), np.load(reference / f"episode_{k:03d}.npz")
        assert a["states"].tobytes() == b["states"].tobytes(), k
    for mine, other in zip(ours["per_episode"], theirs["per_episode"], strict=True):
        assert (mine["fit"], mine["plant_seed"]) == (other["fit"], other["plant_seed"])
    assert ours["per_fit"] == theirs["per_fit"]


def test_vimpc_fit_refuses_several_fits(tmp_path, capsys):
    out = tmp_path / "m.vimpc"
    assert cli.main(["fit", SAFE, "-o", str(out), "--set", "data.fits=2"]) == 2
    assert "data.fits = 2: vimpc fit writes one model" in capsys.readouterr().err
    assert not out.exists()


def test_worker_processes_run_the_fits_and_plants_of_a_serial_run(varied_run):
    run, metrics = varied_run
    cfg = scenario.load_scenario(SAFE, VARIED)
    paths = [f["path"] for f in metrics["fits"]]
    seeds = metrics["seeds"][:2]
    results = pipeline.run_episodes(cfg, paths, seeds, fits=[0, 1], workers=2)
    for k, (traj, episode) in enumerate(results):
        kept = np.load(run / f"episode_{k:03d}.npz")
        assert traj.states.tobytes() == kept["states"].tobytes(), k
        assert (episode["fit"], episode["plant_seed"]) == (
            k,
            metrics["per_episode"][k]["plant_seed"],
        )


def test_a_run_of_several_fits_plots_each_fit_against_its_own_bound(varied_run, tmp_path):
    from vimpc.runs import store

    run, metrics = varied_run
    cfg = scenario.load_scenario(SAFE, VARIED)
    sources = pipeline.obtain_models(cfg, pipeline.build_env(cfg), log=lambda _: None)
    paths = [str(s.path) for s in sources]
    assert paths == [f["path"] for f in metrics["fits"]]  # the cached fits, not new ones
    runner = pipeline.EpisodeRunner(cfg, paths)
    kept = [store.load_episode(run, k) for k in range(3)]
    report.run_figures(
        cfg,
        runner,
        [t for t, _ in kept],
        tmp_path,
        per_episode=[m for _, m in kept],
        seeds=metrics["seeds"],
    )
    written = sorted(p.stem for p in tmp_path.glob("*.png"))
    assert {"coverage_fit0", "coverage_fit1", "outside_data"} <= set(written)
    assert "coverage" not in written
