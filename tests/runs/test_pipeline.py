"""From data to a fitted model in the pipeline: fit, cache, saved models, workers, and the
bad input that must be refused before any work."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from _binomial import fewest_covered

from vimpc import cli, pipeline, scenario
from vimpc.errors import ConfigError
from vimpc.mechanics import Pendulum
from vimpc.model_file import load, save
from vimpc.models import NominalModel

ROOT = Path(__file__).parents[2]
SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
# a small version of the safe cart-pole: little data, short episodes
# the bound calibrated per step on the held-out trajectories (the scenario's closed-loop
# calibration has tests of its own, test_closed_loop_calibration.py)
HELDOUT = ['data.calibration="heldout"', 'model.bound_level="step"', "model.bound_horizon=0"]
SMALL = [
    "data.trajectories=10",
    "data.heldout_trajectories=20",
    "controller.horizon=10",
    "episodes.count=3",
    "episodes.steps=20",
    *HELDOUT,
]


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The small safe cart-pole's model, fitted by ``vimpc fit`` into a file."""
    out = tmp_path_factory.mktemp("fit") / "cartpole.vimpc"
    assert cli.main(["fit", SAFE, "-o", str(out), "--quiet", *_sets(SMALL)]) == 0
    return out


def test_fit_exports_the_model_with_its_bound_and_summary(fitted, capsys):
    model = load(fitted)
    assert model.bound is not None and model.delta == 0.05
    report = model.info["fit"]
    assert report["train_transitions"] == 10 * 20
    assert report["calibration_transitions"] == 10 * 20
    assert report["validation_transitions"] == 10 * 20
    assert len(report["one_step_rmse"]) == 4 and report["multi_step"] == 20
    # a 20-step open-loop prediction is worse than a one-step one in every entry
    assert all(
        m > o for o, m in zip(report["one_step_rmse"], report["multi_step_rmse"], strict=True)
    )
    # the conformal bound covers the held-out transitions as often as 1 - delta promises,
    # within an exact binomial test's slack (level 1e-3; tests/_binomial.py)
    n = report["validation_transitions"]
    assert round(report["validation_coverage"] * n) >= fewest_covered(n, model.delta)
    assert report["fit_time_s"] > 0


def test_a_second_fit_reuses_the_cache(fitted, tmp_path, capsys):
    out = tmp_path / "again.vimpc"
    assert cli.main(["fit", SAFE, "-o", str(out), "--quiet", *_sets(SMALL)]) == 0
    printed = capsys.readouterr().out
    assert "reused the fit cached at" in printed and "fit summary" not in printed
    first, again = load(fitted), load(out)
    x, u = np.array([0.1, 2.0, -0.3, 1.0]), np.array([3.0])
    np.testing.assert_array_equal(
        np.asarray(first.bound(x, u, [])), np.asarray(again.bound(x, u, []))
    )
    # another setting is another fit
    assert (
        cli.main(
            [
                "fit",
                SAFE,
                "-o",
                str(tmp_path / "b.vimpc"),
                "--quiet",
                *_sets([*SMALL, "model.delta=0.1"]),
            ]
        )
        == 0
    )
    assert "fit summary" in capsys.readouterr().out
    assert load(tmp_path / "b.vimpc").delta == 0.1


def test_refit_fits_again_and_replaces_the_cached_fit(fitted, tmp_path, capsys):
    out = tmp_path / "refit.vimpc"
    args = ["fit", SAFE, "-o", str(out), "--quiet", "--refit", *_sets(SMALL)]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "fit summary" in printed and "reused" not in printed
    first, again = load(fitted), load(out)
    assert again.info["fit"]["fit_time_s"] != first.info["fit"]["fit_time_s"]  # a new fit
    # the cache now holds the new fit: the next run reuses it
    assert (
        cli.main(["fit", SAFE, "-o", str(tmp_path / "next.vimpc"), "--quiet", *_sets(SMALL)]) == 0
    )
    assert "reused the fit cached at" in capsys.readouterr().out
    assert load(tmp_path / "next.vimpc").info["fit"] == again.info["fit"]


def test_run_uses_a_saved_model_and_reports_coverage(fitted, tmp_path):
    code = cli.main(
        [
            "run",
            SAFE,
            "--out",
            str(tmp_path),
            "--quiet",
            *_sets([*SMALL, f'model.path="{fitted}"']),
        ]
    )
    assert code == 0
    run = next(p for p in (tmp_path / "cartpole_safe").iterdir())
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["model"]["path"] == str(fitted) and metrics["model"]["delta"] == 0.05
    # the bound holds in closed loop as often as promised (binomial slack, all episodes'
    # steps pooled; a failed model step counts as outside)
    episodes = metrics["per_episode"]
    assert all(e["max_tube"] > 0 for e in episodes)
    steps = sum(e["steps"] for e in episodes)
    covered = sum(round(e["coverage"] * e["steps"]) for e in episodes)
    assert covered >= fewest_covered(steps, metrics["model"]["delta"]), (covered, steps)
    assert len(metrics["success_rate_ci95"]) == 2
    for name in ("safety.png", "coverage.png", "episode_000.npz"):
        assert (run / name).stat().st_size > 0
    episode = np.load(run / "episode_000.npz")
    assert episode["tube"].shape == (20, 11, 2) and episode["plan_obs"].shape == (20, 11, 4)


def test_workers_give_the_same_episodes_as_a_serial_run(fitted):
    cfg = scenario.load_scenario(SAFE, [*SMALL, f'model.path="{fitted}"'])
    seeds = [5, 6, 7]
    serial = pipeline.run_episodes(cfg, fitted, seeds, workers=1)
    parallel = pipeline.run_episodes(cfg, fitted, seeds, workers=2)
    for (a, ma), (b, mb) in zip(serial, parallel, strict=True):
        for name in ("states", "inputs", "obs", "tube", "plan_obs"):
            assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name

        # wall-clock figures (solve and call times, late calls) depend on the machine's load
        def measured(m):
            return {k: v for k, v in m.items() if "time" not in k and "late" not in k}

        assert measured(ma) == measured(mb)


def test_a_model_without_anything_to_fit_is_not_cached(tmp_path, monkeypatch):
    cfg = scenario.load_scenario(PENDULUM)
    # the env compiles its ground truth into the cache's compiled/ folder (when this process
    # has not done so already): made first, so that the cache below sees obtain_model alone
    env = pipeline.build_env(cfg)
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / "cache"))
    source = pipeline.obtain_model(cfg, env)
    assert source.path is None and source.report is None
    assert not (tmp_path / "cache").exists()


# -- refused before any work -----------------------------------------------------------------


def _pendulum_model_file(tmp_path, dt=0.05, **changes) -> Path:
    from vimpc.mechanics import Pendulum

    model = NominalModel(Pendulum(), dt).discrete_model()
    if changes:
        model = dataclasses.replace(model, **changes)
    return save(model, tmp_path / "pendulum.vimpc")


def _cartpole_dataset(tmp_path, dt: float) -> Path:
    cfg = scenario.load_scenario(
        SAFE,
        [f"env.dt={dt}", "data.trajectories=2", "data.steps=3", "model.delta=0.1"],
    )
    data = pipeline.collect(cfg, pipeline.build_env(cfg), "train")
    return data.save(tmp_path / f"cartpole_{dt}.npz")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ['controller.tightening="tube"', 'model.bound="none"'],
            "controller.tightening = 'tube' needs a model with a bound",
        ),
        (["model.delta=1.5"], "model.delta must be a number in (0, 1), got 1.5"),
        (["model.delta=0.0"], "model.delta must be a number in (0, 1), got 0.0"),
        (
            ["model.delta=0.001", "data.heldout_trajectories=4", "data.steps=20"],
            "too small for model.delta = 0.001: split conformal needs at least 1/delta - 1 = 999",
        ),
        (
            ['model.family="nominl"'],
            "model.family must be one of ['chnn', 'clnn', 'dlnn', 'gp_residual', 'gp_vi', 'hamel', 'lnn', 'lsi', 'mlp_residual', 'nominal'], got 'nominl'; did you mean 'nominal'?",
        ),
        (['model.integrater="rk4"'], "unknown key 'model.integrater'; did you mean 'integrator'?"),
        (['model.integrator="rk5"'], "model.integrator must be one of"),
        (
            ['model.integrator="rk4"', 'controller.transcription="implicit"'],
            "controller.transcription = 'implicit' needs a model with the integrator's residual",
        ),
        (["controller.tube_lipschitz=-1.0"], "controller.tube_lipschitz must be a positive number"),
        (['controller.tightening="tubes"'], "did you mean 'tube'"),
        (["data.heldout_seed=5"], "overlapping reset seeds"),
        (['data.initial_state="halten"'], "did you mean 'halton'"),
        (["data.low=[0.0, 0.0]"], "data.low must have 4 entries"),
        (
            ["data.excitation_options={holdd = 2}"],
            "unknown key 'data.excitation_options.holdd'; did you mean 'hold'?",
        ),
        (
            ['controller.cost.Q=["a", 1.0, 1.0, 1.0]'],
            "controller.cost.Q[0] must be a number, got 'a'",
        ),
        (["controller.cost.Q=[1.0, 1.0]"], "controller.cost.Q must have 4 entries"),
        (["metrics.success_index=7"], "metrics.success_index = 7 is not an observation index"),
        (
            ["controller.cost.periodic=[4]"],
            "controller.cost.periodic[0] = 4 is not an observation index",
        ),
    ],
)
def test_bad_input_is_refused_before_any_work(overrides, message, tmp_path, monkeypatch, capsys):
    refused_before_any_work([*HELDOUT, *overrides], message, tmp_path, monkeypatch, capsys)


def refused_before_any_work(overrides, message, tmp_path, monkeypatch, capsys) -> None:
    """The safe cart-pole with ``overrides`` is refused with ``message`` on loading and by
    ``vimpc run`` (exit code 2, nothing written), before any environment is built."""

    def no_env(*args, **kwargs):
        raise AssertionError("an environment was built before the scenario was refused")

    monkeypatch.setattr(pipeline, "build_env", no_env)
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(SAFE, overrides)
    assert message in str(err.value)
    assert cli.main(["run", SAFE, "--out", str(tmp_path), *_sets(overrides)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_saved_models_of_another_step_size_or_system_are_refused(tmp_path):
    other_dt = _pendulum_model_file(tmp_path, dt=0.02)
    with pytest.raises(ConfigError, match=r"it steps dt = 0.02 s, env.dt is 0.05 s"):
        scenario.load_scenario(PENDULUM, [f'model.path="{other_dt}"'])
    (tmp_path / "b").mkdir()
    pendulum = _pendulum_model_file(tmp_path / "b")
    with pytest.raises(ConfigError, match="it models a Pendulum, the env is a CartPole"):
        scenario.load_scenario(SAFE, [f'model.path="{pendulum}"'])
    with pytest.raises(ConfigError, match="model.path = .* no such file"):
        scenario.load_scenario(PENDULUM, [f'model.path="{tmp_path / "none.vimpc"}"'])
    # the scenario's model settings must agree with those the saved model records
    with pytest.raises(
        ConfigError,
        match="model.integrator = 'rk4', but the saved model has integrator = 'midpoint'",
    ):
        scenario.load_scenario(PENDULUM, [f'model.path="{pendulum}"', 'model.integrator="rk4"'])
    with pytest.raises(ConfigError, match="model.params overrides the system"):
        scenario.load_scenario(PENDULUM, [f'model.path="{pendulum}"', "model.params={m = 2.0}"])


def test_energy_shaping_needs_a_model_with_energy(tmp_path):
    no_energy = _pendulum_model_file(tmp_path, energy=None)
    with pytest.raises(
        ConfigError, match="controller.cost.energy_weight = 1.0 needs a model with an energy"
    ):
        scenario.load_scenario(PENDULUM, [f'model.path="{no_energy}"'])
    # without energy shaping the same model is fine
    cfg = scenario.load_scenario(
        PENDULUM, [f'model.path="{no_energy}"', "controller.cost.energy_weight=0.0"]
    )
    assert cfg["model"]["path"] == str(no_energy)


def test_datasets_of_another_step_size_or_system_are_refused(tmp_path):
    data = _cartpole_dataset(tmp_path, 0.02)
    with pytest.raises(ConfigError, match="holds data sampled every 0.02 s, but env.dt is 0.05 s"):
        scenario.load_scenario(SAFE, [f'data.path="{data}"'])
    with pytest.raises(ConfigError, match="holds data of a CartPole, but the env is a Pendulum"):
        scenario.load_scenario(
            PENDULUM,
            ['model.bound="conformal"', f'data.path="{_cartpole_dataset(tmp_path, 0.05)}"'],
        )


def test_a_saved_dataset_feeds_the_fit(tmp_path, capsys):
    data = _cartpole_dataset(tmp_path, 0.05)
    out = tmp_path / "m.vimpc"
    assert (
        cli.main(["fit", SAFE, "-o", str(out), "--quiet", *_sets([*SMALL, f'data.path="{data}"'])])
        == 0
    )
    assert load(out).info["fit"]["train_transitions"] == 2 * 3


def test_the_fit_summary_records_the_models_long_unforced_rollouts(fitted):
    from vimpc import report as report_module

    # the nominal cart-pole's midpoint VI (cartpole_safe's model, frictionless) from the
    # validation starts: its own energy, kept within the midpoint rule's error
    report = load(fitted).info["fit"]["long_rollout"]
    assert report["rollout_steps"] == 500 and report["rollouts"] == 10
    assert report["energy_source"] == "model" and report["rollout_failed"] == 0
    assert len(report["energy_drift"]) == 10
    assert 0 <= report["energy_drift_median"] <= report["energy_drift_max"] < 0.05
    assert "holonomic_residual" not in report  # the cart-pole has no constraint
    text = report_module.fit_table(load(fitted).info["fit"], ["s", "theta", "s_dot", "theta_dot"])
    assert "10 unforced rollouts of 500 steps: 0 failed" in text


def test_the_fit_report_counts_failed_predictions_and_stays_json(monkeypatch):
    # a learned model's step can fail far from its data (NaN): the report's RMSE is over the
    # predictions that exist, the failures are counted, and the report stays JSON
    from vimpc import report
    from vimpc.data.dataset import Dataset
    from vimpc.models import evaluation

    errors = np.array([[0.1, 0.2], [np.nan, np.nan], [0.3, 0.4]])
    monkeypatch.setattr(evaluation, "prediction_errors", lambda model, data, steps: errors)
    obs = np.zeros((2, 4, 2))
    data = Dataset(np.tile(np.arange(4.0), (2, 1)), obs, obs, np.zeros((2, 3, 1)), 1.0)
    model = NominalModel(Pendulum(), 1.0).discrete_model()
    out = pipeline.fit_report(model, data, data, data, 1.0)
    assert out["failed_predictions"] == {"one_step": 1, "multi_step": 1}
    assert out["one_step_rmse"] == pytest.approx([np.sqrt(0.05), np.sqrt(0.1)])
    json.dumps(out, allow_nan=False)
    assert "failed predictions (not in the RMSE): 1 one-step" in report.fit_table(out, ["a", "b"])


def test_a_fit_cached_by_another_generation_of_the_code_is_not_reused(monkeypatch):
    """The cache key follows FIT_GENERATION, so fits exported by older code (whose steps, for
    example, returned unchecked Newton roots) are fitted again, not reused."""
    cfg = scenario.load_scenario(SAFE, SMALL)
    key = pipeline.cache_key(cfg)
    assert pipeline.cache_key(cfg) == key  # deterministic
    monkeypatch.setattr(pipeline, "FIT_GENERATION", pipeline.FIT_GENERATION - 1)
    assert pipeline.cache_key(cfg) != key
