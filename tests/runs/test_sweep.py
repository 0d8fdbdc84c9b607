"""``vimpc sweep``: a scenario under a grid or list of overrides, each configuration a
resumable run folder, a summary over configurations; bad input refused before any folder,
an interrupted sweep marked incomplete and resumed by running only what is missing."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import pytest

from vimpc import _processes, cli, pipeline
from vimpc.errors import ConfigError, SolverError
from vimpc.runs import store, sweep
from vimpc.runs.sweep import read_sweep

ROOT = Path(__file__).parents[2]
FAST = """
scenario = "pendulum_swingup"

[sweep]
name = "horizons"

[set]
episodes.count = 2
episodes.steps = 3
"""
GRID = (
    FAST
    + """
[grid]
controller.horizon = [4, 5]
episodes.seed = [7]
"""
)


def _sweep_file(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _sweep(tmp_path: Path, path: Path, *extra: str) -> int:
    return cli.main(
        ["sweep", str(path), "--out", str(tmp_path / "out"), "--no-plots", "--quiet", *extra]
    )


def _timeless(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    # without the wall-clock figures (solve and call times, late calls): the machine's load
    return [{k: v for k, v in r.items() if "time" not in k and "late" not in k} for r in rows]


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "summary.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The folder of an uninterrupted 2 x 1 sweep."""
    tmp = tmp_path_factory.mktemp("sweep_reference")
    assert _sweep(tmp, _sweep_file(tmp, GRID)) == 0
    return tmp / "out" / "horizons"


@pytest.fixture
def no_env(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an env was built before the bad input was refused")

    monkeypatch.setattr(pipeline, "build_env", refuse)


def test_a_2x1_grid_runs_two_configurations_with_their_overrides(reference):
    assert sorted(p.name for p in reference.parent.iterdir()) == ["horizons"]
    manifest = json.loads((reference / "sweep.json").read_text())
    assert manifest["complete"] is True and manifest["missing"] == []
    assert manifest["keys"] == ["controller.horizon", "episodes.seed"]
    for cid, horizon in (("c00", 4), ("c01", 5)):
        cfg = tomllib.loads((reference / cid / "config.resolved.toml").read_text())
        assert cfg["controller"]["horizon"] == horizon
        assert cfg["episodes"]["seed"] == 7 and cfg["episodes"]["count"] == 2
        assert cfg["episodes"]["steps"] == 3
        metrics = json.loads((reference / cid / "metrics.json").read_text())
        assert metrics["seeds"] == [7, 8] and metrics["outcome"] == "complete"
        assert len(metrics["per_episode"]) == 2
        assert not (reference / cid / "run.json").exists()
    rows = _rows(reference)
    assert [(r["configuration"], r["controller.horizon"], r["episodes.seed"]) for r in rows] == [
        ("c00", "4", "7"),
        ("c01", "5", "7"),
    ]
    for row in rows:
        low, value, high = (
            float(row[k])
            for k in ("success_rate_ci95_low", "success_rate", "success_rate_ci95_high")
        )
        assert 0.0 <= low <= value <= high <= 1.0
        assert float(row["min_margin_mean_ci95_low"]) <= float(row["min_margin_mean"])
        assert float(row["min_margin_mean"]) <= float(row["min_margin_mean_ci95_high"])
    md = (reference / "summary.md").read_text()
    assert md.count("\n| c0") == 2 and "Wilson" in md and "bootstrap" in md
    assert not list(reference.glob("*.partial")) and not (reference / ".lock").exists()


def test_runs_cross_the_grid_and_set_applies_to_all(tmp_path, no_env):
    text = (
        FAST
        + """
[grid]
controller.horizon = [4, 5]

[[runs]]
episodes.seed = 3

[[runs]]
episodes.seed = 11
controller.cost.R = [0.2]
"""
    )
    plan = read_sweep(_sweep_file(tmp_path, text), ["episodes.steps=4"])
    assert [c.id for c in plan.configurations] == ["c00", "c01", "c02", "c03"]
    got = [
        (cfg["episodes"]["seed"], cfg["controller"]["horizon"], cfg["episodes"]["steps"])
        for cfg in plan.configs
    ]
    assert got == [(3, 4, 4), (3, 5, 4), (11, 4, 4), (11, 5, 4)]
    assert plan.configs[2]["controller"]["cost"]["R"] == [0.2]
    assert plan.keys == ("episodes.seed", "controller.cost.R", "controller.horizon")
    assert not list(tmp_path.glob("out"))


@pytest.mark.parametrize(
    "text, message",
    [
        (FAST + "[grid]\ncontroller.horizonn = [4, 5]\n", "'controller.horizonn'"),
        (FAST + "[grid]\ncontroller.horizon = []\n", "grid.controller.horizon = [] gives no"),
        (FAST + "[grid]\ncontroller.horizon = 4\n", "grid.controller.horizon must be a list"),
        (FAST + "[grid]\ncontroller.horizon = [4, 4]\n", "lists 4 twice"),
        (
            FAST + "[grid]\ncontroller.horizon = [4, 0]\n",
            "configuration c01 (controller.horizon = 0)",
        ),
        (FAST + "[grid]\nepisodes.count = [1, 2]\n", "episodes.count is both in the grid"),
        (FAST + "[[runs]]\nepisodes.count = 1\n", "runs[0] sets episodes.count = 1"),
        ("runs = []\n" + FAST, "runs = [] gives no configuration"),
        (FAST + "[grids]\na = [1]\n", "unknown key 'grids'; did you mean 'grid'?"),
        (FAST.replace('name = "horizons"', 'nme = "x"'), "unknown key 'sweep.nme'"),
        (FAST.replace('name = "horizons"', 'name = "a/b"'), "sweep.name = 'a/b'"),
        (
            FAST.replace('"pendulum_swingup"', '"pendulum_swingpu"'),
            "did you mean 'pendulum_swingup'",
        ),
        ("[grid]\ncontroller.horizon = [4]\n", "scenario is missing"),
    ],
)
def test_bad_sweep_files_are_refused_before_any_work(text, message, tmp_path, capsys, no_env):
    assert _sweep(tmp_path, _sweep_file(tmp_path, text)) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_two_sweeps_into_one_folder_are_refused(reference, tmp_path, capsys, no_env):
    path = _sweep_file(tmp_path, GRID)
    out = str(reference.parent)
    assert cli.main(["sweep", str(path), "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"the sweep folder {str(reference)!r} holds a sweep already" in err
    assert "sweep.name = 'horizons'" in err
    stage = tmp_path / "horizons.partial"
    stage.mkdir()
    assert cli.main(["sweep", str(path), "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "holds an unfinished sweep" in err and f"vimpc sweep --resume {stage}" in err
    assert cli.main(["sweep", "--resume", str(reference)]) == 2
    assert "is a complete sweep" in capsys.readouterr().err


def _interrupt_after(monkeypatch, kept: int) -> list[int]:
    """A Ctrl-C right after the ``kept``-th episode was written; returns the call list."""
    real = store.save_episode
    calls: list[int] = []

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == kept:
            raise KeyboardInterrupt

    monkeypatch.setattr(store, "save_episode", save_then_interrupt)
    return calls


def test_an_interrupted_sweep_is_marked_incomplete_and_resumes_only_what_is_missing(
    reference, tmp_path, monkeypatch, capsys
):
    path = _sweep_file(tmp_path, GRID)
    _interrupt_after(monkeypatch, 3)  # c00 complete, c01 with one of its two episodes
    assert _sweep(tmp_path, path) == 130
    err = capsys.readouterr().err
    stage = tmp_path / "out" / "horizons.partial"
    assert f"vimpc sweep --resume {stage}" in err and "marked incomplete" in err
    assert not (tmp_path / "out" / "horizons").exists()
    assert not list((tmp_path / "out").rglob("summary.*"))
    manifest = json.loads((stage / "sweep.json").read_text())
    assert manifest["complete"] is False and manifest["missing"] == ["c01"]
    assert manifest["sessions"][0]["ended"] == "interrupted"
    assert (stage / "c00" / "metrics.json").is_file()
    assert store.finished(stage / "c01.partial", 2) == [0]
    before = (stage / "c00" / "metrics.json").stat().st_mtime_ns
    monkeypatch.undo()

    calls = _interrupt_after(monkeypatch, 100)  # counts the episodes the resume runs
    assert cli.main(["sweep", "--resume", str(stage), "--quiet", "--no-plots"]) == 0
    assert len(calls) == 1  # c01's missing episode, nothing else
    assert "1 of 2 configurations complete, running the 1 missing" in capsys.readouterr().out
    final = tmp_path / "out" / "horizons"
    assert not stage.exists() and final.is_dir()
    assert (final / "c00" / "metrics.json").stat().st_mtime_ns == before
    manifest = json.loads((final / "sweep.json").read_text())
    assert manifest["complete"] is True
    assert [s["ended"] for s in manifest["sessions"]] == ["interrupted", "complete"]
    assert _timeless(_rows(final)) == _timeless(_rows(reference))


def test_failed_configurations_are_counted_kept_and_resumed(tmp_path, monkeypatch, capsys):
    real = pipeline.EpisodeRunner.run

    def fail_at_horizon_5(self, *args, **kwargs):
        if self.cfg["controller"]["horizon"] == 5:
            raise SolverError("a solver gave up (test)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pipeline.EpisodeRunner, "run", fail_at_horizon_5)
    assert _sweep(tmp_path, _sweep_file(tmp_path, GRID)) == 2
    err = capsys.readouterr().err
    assert "1 of 2 configurations failed" in err and "c01: SolverError" in err
    stage = tmp_path / "out" / "horizons.partial"
    manifest = json.loads((stage / "sweep.json").read_text())
    assert manifest["missing"] == ["c01"] and "c01" in manifest["failed"]
    assert "a solver gave up (test)" in (stage / "c01.log").read_text()
    assert not list(stage.glob("summary.*"))
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="other configurations than the sweep"):
        sweep.run_sweep(
            tmp_path / "sweep.toml", overrides=["episodes.steps=4"], resume=stage, progress=False
        )
    assert cli.main(["sweep", "--resume", str(stage), "--quiet", "--no-plots"]) == 0
    assert len(_rows(tmp_path / "out" / "horizons")) == 2


def test_the_summary_figure_is_written(reference, tmp_path):
    manifest = json.loads((reference / "sweep.json").read_text())
    rows = store.summary_rows(reference, manifest)
    target = tmp_path / "summary.png"
    store.summary_figure(rows, target, manifest)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000


def test_two_workers_give_the_serial_results(reference, tmp_path):
    assert _sweep(tmp_path, _sweep_file(tmp_path, GRID), "--workers", "2") == 0
    final = tmp_path / "out" / "horizons"
    assert _timeless(_rows(final)) == _timeless(_rows(reference))
    manifest = json.loads((final / "sweep.json").read_text())
    processes = manifest["sessions"][0]["processes"]
    assert processes == min(2, _processes.usable_cores())
    md = (final / "summary.md").read_text()
    assert f"measured with {processes} configuration process" in md


def test_ctrl_c_stops_a_sweep_with_workers_and_leaves_it_incomplete(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    text = (
        FAST.replace('"pendulum_swingup"', '"cartpole_swingup"')
        .replace("episodes.count = 2", "episodes.count = 200")
        .replace("episodes.steps = 3", "episodes.steps = 50")
    )
    path = _sweep_file(tmp_path, text + "[grid]\ncontroller.horizon = [10, 12]\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vimpc.cli", "sweep", str(path), "--out", str(tmp_path / "out"),
         "--workers", "2", "--quiet", "--no-plots"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout.readline().startswith("vimpc sweep horizons")
    time.sleep(3.0)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("one SIGINT did not stop the sweep within 30 s") from None
    assert code == 130 and time.perf_counter() - sent < 10
    stage = tmp_path / "out" / "horizons.partial"
    assert f"vimpc sweep --resume {stage}" in proc.stderr.read()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["horizons.partial"]
    assert not list(stage.rglob("metrics.json")) and not list(stage.glob("summary.*"))
    manifest = json.loads((stage / "sweep.json").read_text())
    assert manifest["complete"] is False and manifest["missing"] == ["c00", "c01"]
    assert manifest["sessions"][0]["ended"] == "interrupted"


def test_the_example_sweep_file_is_valid(no_env):
    plan = read_sweep(ROOT / "scenarios" / "sweeps" / "cartpole_tightening.toml")
    assert [c.varying for c in plan.configurations] == [
        {"controller.tightening": t, "model.delta": d}
        for t in ("none", "tube")
        for d in (0.05, 0.2)
    ]
    assert all(cfg["episodes"]["count"] == 20 for cfg in plan.configs)


@pytest.mark.parametrize("refit", [False, True])
def test_configurations_sharing_a_fit_fit_it_once(tmp_path, refit):
    text = """
scenario = "cartpole_safe"

[sweep]
name = "seeds"

[set]
data.trajectories = 6
data.heldout_trajectories = 20
episodes.count = 1
episodes.steps = 2
controller.horizon = 5
data.calibration = "heldout"
model.bound_level = "step"
model.bound_horizon = 0

[grid]
episodes.seed = [0, 10, 20]
"""
    extra = ["--workers", "2"] + (["--refit"] if refit else [])
    assert _sweep(tmp_path, _sweep_file(tmp_path, text), *extra) == 0
    final = tmp_path / "out" / "seeds"
    models = [
        json.loads((final / c / "metrics.json").read_text())["model"] for c in ("c00", "c01", "c02")
    ]
    # one fit at most (another test may have cached it), never one per worker at once
    assert [m["fitted_now"] for m in models][1:] == [False, False]
    assert [m["reused_cached_fit"] for m in models][1:] == [True, True]
    if refit:  # --refit fits the shared entry once
        assert models[0]["fitted_now"] and not models[0]["reused_cached_fit"]
    assert len({m["sha256"] for m in models}) == 1


def test_a_configuration_whose_model_fails_is_counted_and_the_others_run(
    tmp_path, monkeypatch, capsys
):
    from vimpc.runs import session

    real = session.obtain_models

    def fail_at_horizon_4(cfg, *args, **kwargs):
        if cfg["controller"]["horizon"] == 4:
            raise ConfigError("fitting model.family = 'x': no data (test)")
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(session, "obtain_models", fail_at_horizon_4)
    assert _sweep(tmp_path, _sweep_file(tmp_path, GRID)) == 2
    assert "c00: ConfigError: fitting model.family" in capsys.readouterr().err
    stage = tmp_path / "out" / "horizons.partial"
    assert (stage / "c01" / "metrics.json").is_file()
    assert store.finished(stage / "c00.partial", 2) == []
    assert json.loads((stage / "sweep.json").read_text())["missing"] == ["c00"]


def test_a_shipped_sweep_is_found_by_name_from_any_folder(tmp_path, monkeypatch, capsys, no_env):
    from vimpc import cli
    from vimpc.errors import ConfigError
    from vimpc.scenario.catalog import shipped_sweeps

    monkeypatch.chdir(tmp_path)
    systems = ("cartpole", "fourbar", "pendulum", "rollingdisk")
    benchmarks = sorted(
        [f"benchmark_{s}" for s in systems] + [f"benchmark_mujoco_{s}" for s in systems]
    )
    assert sorted(shipped_sweeps()) == [*benchmarks, "cartpole_tightening"]
    by_name = read_sweep("cartpole_tightening")
    assert (
        by_name.path.read_bytes()
        == (ROOT / "scenarios/sweeps/cartpole_tightening.toml").read_bytes()
    )
    assert read_sweep("cartpole_tightening.toml").configurations == by_name.configurations
    with pytest.raises(ConfigError, match="did you mean 'cartpole_tightening'"):
        read_sweep("cartpole_tightenin")
    shipped = ", ".join([*benchmarks, "cartpole_tightening"])
    with pytest.raises(ConfigError, match=f"shipped sweeps, run by name: {shipped}$"):
        read_sweep("no/such/sweep.toml")
    assert cli.main(["list"]) == 0
    assert "vimpc sweep cartpole_tightening" in capsys.readouterr().out


def test_a_sweep_too_large_to_hold_is_refused_at_once_naming_its_size(tmp_path, capsys, no_env):
    import time

    seeds = list(range(1000))
    text = FAST + f"\n[grid]\nepisodes.seed = {seeds}\ncontroller.horizon = {seeds[1:]}\n"
    started = time.perf_counter()
    assert _sweep(tmp_path, _sweep_file(tmp_path, text)) == 2
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert "the sweep has 999000 configurations (1000 values of episodes.seed x 999 values" in err
    assert "more than the 10000 one sweep holds" in err
    assert elapsed < 10.0, elapsed  # refused before any configuration is checked
    assert not (tmp_path / "out").exists()


def test_checking_many_configurations_shows_progress(tmp_path, monkeypatch, capsys, no_env):
    monkeypatch.setattr(sweep, "PROGRESS_FROM", 3)
    text = FAST + "\n[grid]\nepisodes.seed = [1, 2, 3]\n"
    plan = read_sweep(_sweep_file(tmp_path, text), progress=True)
    assert len(plan.configurations) == 3
    assert "checking configurations" in capsys.readouterr().err
    read_sweep(_sweep_file(tmp_path, text), progress=False)
    assert "checking configurations" not in capsys.readouterr().err


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sweep_fits_and_runs_its_configurations_a_batch_at_a_time(tmp_path, monkeypatch, workers):
    """As many configurations as workers are fitted, then run, before the next batch's
    models are obtained: a long sweep finishes configurations as it goes."""
    from vimpc.runs import backends

    events: list[tuple[str, tuple[str, ...]]] = []
    obtain, run = sweep.obtain_models_first, backends.LocalBackend.run_configurations

    def obtaining(stage, cid, *args, **kwargs):
        events.append(("fit", (cid,)))
        return obtain(stage, cid, *args, **kwargs)

    def running(self, tasks, *args, **kwargs):
        events.append(("run", tuple(t.id for t in tasks)))
        return run(self, tasks, *args, **kwargs)

    monkeypatch.setattr(sweep, "obtain_models_first", obtaining)
    monkeypatch.setattr(backends.LocalBackend, "run_configurations", running)
    assert _sweep(tmp_path, _sweep_file(tmp_path, GRID), "--workers", str(workers)) == 0
    if workers == 1:
        assert events == [
            ("fit", ("c00",)), ("run", ("c00",)), ("fit", ("c01",)), ("run", ("c01",))
        ]  # fmt: skip
    else:
        assert events == [("fit", ("c00",)), ("fit", ("c01",)), ("run", ("c00", "c01"))]
    assert (tmp_path / "out" / "horizons" / "summary.csv").is_file()
