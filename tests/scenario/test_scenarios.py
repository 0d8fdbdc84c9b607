"""Scenario files, the CLI and the results it writes."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc import cli, scenario
from vimpc.closedloop import run_episode
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import CartPole, Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Cost

ROOT = Path(__file__).parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
CARTPOLE = str(ROOT / "scenarios" / "cartpole_swingup.toml")
REQUIRED_METRICS = (
    "episodes",
    "success_rate",
    "success_rate_ci95",
    "violation_rate",
    "violation_rate_ci95",
    "cost_mean",
    "cost_std",
    "violations",
    "max_violation",
    "min_margin",
    "solve_time_median_ms",
    "solve_time_p95_ms",
    "failed_solves",
)


def _run(args: list[str]) -> int:
    return cli.main(["run", *args, "--quiet"])


def _only_run(root: Path) -> Path:
    runs = [p for p in root.glob("*/*") if p.is_dir()]
    assert len(runs) == 1
    return runs[0]


def test_the_four_scenarios_exist():
    names = {p.stem for p in SCENARIOS}
    assert {
        "pendulum_swingup",
        "cartpole_swingup",
        "fourbar_tracking",
        "rollingdisk_parking",
        "cartpole_safe",
    } <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_scenario_regression_short_run(path, tmp_path):
    # every scenario runs end to end with a short horizon and few steps (on ten trajectories
    # a learned model's fit may warn of its data: the LSI swing-up's distilled momentum map);
    # a network family trains a few epochs only (the run, not the fit's quality, is tested)
    model = tomllib.loads(path.read_text()).get("model", {})
    short = ["--set", "model.epochs=20"] if "epochs" in model else []
    # a horizon-level bound over the short horizon, calibrated on 20 windows (the fewest
    # at delta 0.05)
    heldout = 20
    if model.get("bound_level") == "horizon":
        short += ["--set", "model.bound_horizon=5"]
        heldout = 40
    code = _run(
        [
            str(path),
            *short,
            "--out",
            str(tmp_path),
            "--no-plots",
            "--set",
            "controller.horizon=5",
            "--set",
            "episodes.steps=8",
            "--set",
            "episodes.count=1",
            "--set",
            "data.trajectories=10",
            "--set",
            f"data.heldout_trajectories={heldout}",
        ]
    )
    assert code == 0
    run = _only_run(tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    for key in REQUIRED_METRICS:
        assert key in metrics
    assert metrics["episodes"] == 1 and len(metrics["per_episode"]) == 1
    resolved = tomllib.loads((run / "config.resolved.toml").read_text())
    assert resolved["controller"]["horizon"] == 5 and resolved["episodes"]["steps"] == 8
    episode = np.load(run / "episode_000.npz")
    assert episode["inputs"].shape[0] == 8 and np.all(np.isfinite(episode["states"]))


def test_main_job_swings_the_pendulum_up(tmp_path):
    # the README's main job, in full: it must succeed (and it takes about a second)
    assert _run([PENDULUM, "--out", str(tmp_path)]) == 0
    run = _only_run(tmp_path)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["success_rate"] == 1.0
    assert metrics["failed_solves"] == 0
    for name in ("states_inputs.png", "solve_times.png", "mechanism.png", "versions.json"):
        assert (run / name).stat().st_size > 0
    assert not list(tmp_path.glob("*/*.partial"))


def test_runs_never_overwrite_each_other(tmp_path):
    args = [
        PENDULUM,
        "--out",
        str(tmp_path),
        "--no-plots",
        "--set",
        "episodes.steps=3",
        "--set",
        "controller.horizon=5",
    ]
    assert _run(args) == 0 and _run(args) == 0
    runs = sorted(p for p in (tmp_path / "pendulum_swingup").iterdir())
    assert len(runs) == 2 and all((r / "metrics.json").exists() for r in runs)


def test_interrupted_run_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    import vimpc.closedloop as closedloop

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(closedloop, "run_episode", interrupted)
    code = _run([PENDULUM, "--out", str(tmp_path), "--set", "episodes.steps=3"])
    assert code == 130
    assert not list(tmp_path.rglob("metrics.json"))


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "controller.cost.Qq=[1.0]",
            "unknown key 'controller.cost.Qq'; did you mean 'Q'",
        ),
        ("controller.horizon=0", "controller.horizon must be a positive integer, got 0"),
        ("controller.horizon=2.5", "controller.horizon must be an integer, got 2.5"),
        ('env.dt="fast"', "env.dt must be a number, got 'fast'"),
        ("controller.constraints.u_min=[3.0]", None),  # checked below together with u_max
        ('controller.solver="fatrob"', "did you mean 'fatrop'"),
        ('env.id="vimpc/Pendulum-v1"', "did you mean 'vimpc/Pendulum-v0'"),
    ],
)
def test_bad_scenarios_are_named_before_any_work(override, message, tmp_path, capsys):
    sets = ["--set", override]
    if message is None:
        sets += ["--set", "controller.constraints.u_max=[1.0]"]
        message = (
            "controller.constraints.u_min[0] = 3.0 exceeds controller.constraints.u_max[0] = 1.0"
        )
    code = _run([PENDULUM, "--out", str(tmp_path), *sets])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.rglob("*"))


def test_missing_field_and_missing_file(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text(
        '[env]\nid = "vimpc/Pendulum-v0"\n[controller.cost]\nQ = [1.0, 1.0]\nR = [1.0]\n'
    )
    with pytest.raises(ConfigError, match="missing required key 'controller.horizon'"):
        scenario.load_scenario(broken)
    with pytest.raises(ConfigError, match="does not exist"):
        scenario.load_scenario(tmp_path / "nope.toml")


def test_model_with_another_dt_than_the_env_is_refused():
    import gymnasium

    env = gymnasium.make("vimpc/Pendulum-v0", dt=0.05).unwrapped
    model = NominalModel(Pendulum(), dt=0.02).discrete_model()
    ctrl = MPC(model, 5, Cost(Q=[1.0, 0.1], R=[0.01]))
    with pytest.raises(
        InputError, match="model steps dt = 0.02 s but the environment's control step is 0.05 s"
    ):
        run_episode(env, ctrl, 3, seed=0)


def test_resolved_config_round_trips(tmp_path):
    cfg = scenario.load_scenario(CARTPOLE)
    text = scenario.dump_toml(cfg)
    (tmp_path / "again.toml").write_text(text)
    again = scenario.load_scenario(tmp_path / "again.toml")
    assert again == cfg


def test_list_shows_scenarios(capsys):
    assert cli.main(["list", "--dir", str(ROOT / "scenarios")]) == 0
    out = capsys.readouterr().out
    assert "pendulum_swingup.toml" in out and "vimpc/RollingDisk-v0" in out


def test_schema_tables_in_the_readme_come_from_the_declarations():
    readme = (ROOT / "scenarios" / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- schema:start")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- schema:end -->")
    assert readme[start:end] == scenario.schema_markdown(), (
        "scenarios/README.md's schema tables differ from the declarations: replace them with "
        "the output of `vimpc schema`"
    )


def test_export_writes_a_loadable_model(tmp_path, capsys):
    from vimpc.model_file import load

    out = tmp_path / "cartpole.vimpc"
    assert cli.main(["export", CARTPOLE, "-o", str(out)]) == 0
    model = load(out)
    assert model.dt == 0.05 and model.implicit and model.info["system"] == "CartPole"
    x = np.array([0.1, 0.5, 0.0, -0.2])
    again = NominalModel(CartPole(), 0.05).discrete_model()
    np.testing.assert_array_equal(
        np.asarray(model.step(x, [1.0], [])), np.asarray(again.step(x, [1.0], []))
    )
    assert cli.main(["export", CARTPOLE, "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
