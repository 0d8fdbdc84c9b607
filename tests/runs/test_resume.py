"""Runs that keep what they finished: an interrupted or killed run keeps its finished
episodes in a folder marked incomplete, ``vimpc run --resume`` runs only the missing ones
and gives what an uninterrupted run gives, and a run never looks complete or successful
when it is not (workers capped and said, all solves failed, unwritable cache)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from vimpc import _processes, cli, pipeline
from vimpc.closedloop.episode import WALL_CLOCK
from vimpc.runs import store

ROOT = Path(__file__).parents[2]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
CARTPOLE = str(ROOT / "scenarios" / "cartpole_swingup.toml")
SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
# its bound calibrated per step on the held-out data, not on closed-loop episodes
HELDOUT = ['data.calibration="heldout"', 'model.bound_level="step"', "model.bound_horizon=0"]
SETS = ["episodes.steps=3", "controller.horizon=5", "episodes.count=4"]
SHORT = [a for s in SETS for a in ("--set", s)] + ["--no-plots", "--quiet"]


def _only(folder: Path) -> Path:
    (run,) = [p for p in (folder / "pendulum_swingup").iterdir()]
    return run


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The folder of an uninterrupted run of the short pendulum (four episodes)."""
    out = tmp_path_factory.mktemp("reference")
    assert cli.main(["run", PENDULUM, "--out", str(out), *SHORT]) == 0
    return _only(out)


def _interrupt_after(monkeypatch, kept: int) -> None:
    """A Ctrl-C in this process right after the ``kept``-th episode was written."""
    real = store.save_episode
    calls = []

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == kept:
            raise KeyboardInterrupt

    monkeypatch.setattr(store, "save_episode", save_then_interrupt)


def _same_episodes(run: Path, reference: Path, count: int = 4) -> None:
    """Every episode's arrays and metrics are those of the reference run, bit for bit (the
    wall-clock solve times excepted), and so is the summary."""
    for k in range(count):
        a, b = np.load(run / f"episode_{k:03d}.npz"), np.load(reference / f"episode_{k:03d}.npz")
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            if name not in WALL_CLOCK:
                assert a[name].tobytes() == b[name].tobytes(), (k, name)
                assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape
    ours, theirs = (json.loads((r / "metrics.json").read_text()) for r in (run, reference))
    assert ours["seeds"] == theirs["seeds"] == [0, 1, 2, 3]

    def timeless(d):
        return {k: v for k, v in d.items() if "time" not in k and not k.startswith("late_")}

    assert [timeless(m) for m in ours["per_episode"]] == [
        timeless(m) for m in theirs["per_episode"]
    ]
    skip = {"per_episode", "sessions", "wall_time_s", "workers", "workers_requested"}
    assert {k: v for k, v in timeless(ours).items() if k not in skip} == {
        k: v for k, v in timeless(theirs).items() if k not in skip
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_an_interrupted_run_keeps_its_episodes_and_resumes_to_the_same_results(
    workers, reference, tmp_path, monkeypatch, capsys
):
    _interrupt_after(monkeypatch, 2)
    args = ["run", PENDULUM, "--out", str(tmp_path), *SHORT, "--workers", str(workers)]
    assert cli.main(args) == 130
    err = capsys.readouterr().err
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    assert stage.name.endswith(".partial")
    assert f"vimpc run --resume {stage}" in err and "2 of 4 episodes are kept" in err
    manifest = json.loads((stage / "run.json").read_text())
    assert manifest["complete"] is False and manifest["finished"] == 2
    assert len(manifest["missing"]) == 2
    assert sorted(store.finished(stage, 4)) == sorted(set(range(4)) - set(manifest["missing"]))
    assert not (stage / "metrics.json").exists()
    monkeypatch.undo()

    assert cli.main(["run", "--resume", str(stage), "--quiet", "--workers", str(workers)]) == 0
    out = capsys.readouterr().out
    assert "2 of 4 episodes finished, running the 2 missing" in out
    final = stage.with_name(stage.name.removesuffix(".partial"))
    assert not stage.exists() and final.is_dir()
    assert not (final / "run.json").exists() and not (final / ".lock").exists()
    metrics = json.loads((final / "metrics.json").read_text())
    assert [s["ended"] for s in metrics["sessions"]] == ["interrupted", "complete"]
    assert [s["episodes_run"] for s in metrics["sessions"]] == [2, 2]
    assert metrics["outcome"] == "complete"
    _same_episodes(final, reference)


def test_resume_refuses_a_complete_run_another_scenario_and_other_settings(
    reference, tmp_path, monkeypatch, capsys
):
    _interrupt_after(monkeypatch, 1)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), *SHORT]) == 130
    monkeypatch.undo()
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    capsys.readouterr()
    cases = [
        (["--resume", str(reference)], "is a complete run"),
        (["--resume", str(reference) + ".partial"], "is a complete run"),
        ([CARTPOLE, "--resume", str(stage)], "is a run of scenario 'pendulum_swingup'"),
        (
            [PENDULUM, *SHORT, "--set", "episodes.steps=4", "--resume", str(stage)],
            "episodes.steps = 3 there, 4 here",
        ),
        ([PENDULUM, "--resume", str(stage)], "episodes.count = 4 there, 1 here"),
        (["--resume", str(stage), "--set", "controller.horizon=6"], "controller.horizon = 5"),
        (["--resume", str(stage), "--refit"], "--refit cannot be combined with --resume"),
        (["--resume", str(stage), "--out", str(tmp_path)], "--out does not apply"),
        (["--resume", str(tmp_path / "nowhere")], "there is no run folder"),
        (["--resume", ""], "got an empty path"),
        (["--resume", "/"], "is the root folder"),
    ]
    for extra, message in cases:
        assert cli.main(["run", *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
    # nothing was run: the folder is as the interruption left it, and still resumable
    assert len(store.finished(stage, 4)) == 1 and (stage / "run.json").exists()
    assert cli.main(["run", PENDULUM, *SHORT, "--resume", str(stage)]) == 0
    _same_episodes(stage.with_name(stage.name.removesuffix(".partial")), reference)


def test_resume_refuses_episodes_of_another_seed_or_edited_by_hand(
    reference, tmp_path, monkeypatch, capsys
):
    # a kept episode went into metrics.json as it was found: one copied in from another
    # seed, or a cost edited by hand
    _interrupt_after(monkeypatch, 2)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), *SHORT]) == 130
    monkeypatch.undo()
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    kept = sorted(store.finished(stage, 4))
    a, b = kept
    files = [store.episode_files(stage, k) for k in kept]
    originals = [(p.read_bytes(), q.read_bytes()) for p, q in files]
    capsys.readouterr()

    # episode a replaced by episode b (another seed), both files
    for src, dst in zip(files[1], files[0], strict=True):
        dst.write_bytes(src.read_bytes())
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"episode {a}: seed {b}, but the run's episode {a} has seed {a}" in err
    assert "are not this run's" in err and f"delete episode_{a:03d}.npz" in err

    # a cost edited in the record (valid JSON, the same seed)
    files[0][0].write_bytes(originals[0][0])
    record = json.loads(originals[0][1])
    record["metrics"]["cost"] = record["metrics"]["cost"] / 2
    files[0][1].write_text(json.dumps(record, indent=2) + "\n")
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 2
    assert "do not match the SHA-256 recorded" in capsys.readouterr().err

    # the arrays edited, the record as written
    files[0][1].write_bytes(originals[0][1])
    with np.load(files[0][0]) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["inputs"] = arrays["inputs"] + 1.0
    with open(files[0][0], "wb") as handle:
        np.savez(handle, **arrays)
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 2
    assert "do not match the SHA-256 recorded" in capsys.readouterr().err
    assert not (stage / "metrics.json").exists()

    # as written: the resume takes them and gives the reference's results
    files[0][0].write_bytes(originals[0][0])
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 0
    _same_episodes(stage.with_name(stage.name.removesuffix(".partial")), reference)


def test_resume_refuses_a_model_file_that_changed(tmp_path, monkeypatch, capsys):
    from vimpc.mechanics import Pendulum
    from vimpc.model_file import save
    from vimpc.models import NominalModel

    model = save(NominalModel(Pendulum(), 0.05).discrete_model(), tmp_path / "p.vimpc")
    sets = [*SHORT, "--set", f'model.path="{model}"']
    _interrupt_after(monkeypatch, 1)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path / "runs"), *sets]) == 130
    monkeypatch.undo()
    (stage,) = (tmp_path / "runs" / "pendulum_swingup").iterdir()
    model.write_text(model.read_text() + " ")  # another file under the same name
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(stage)]) == 2
    assert "changed since the finished episodes used it" in capsys.readouterr().err
    model.unlink()
    assert cli.main(["run", "--resume", str(stage)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_resume_refuses_when_the_cached_fit_is_gone(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / "cache"))
    small = ["data.trajectories=3", "data.heldout_trajectories=40", "data.steps=10"]
    small += ["episodes.count=2", "episodes.steps=2", "controller.horizon=4", *HELDOUT]
    args = [a for s in small for a in ("--set", s)] + ["--no-plots", "--quiet"]
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        assert cli.main(["run", SAFE, "--out", str(tmp_path / "runs"), *args]) == 130
    (stage,) = (tmp_path / "runs" / "cartpole_safe").iterdir()
    manifest = json.loads((stage / "run.json").read_text())
    assert manifest["model"]["fitted_now"] and len(manifest["model"]["sha256"]) == 64
    (cached,) = (tmp_path / "cache").glob("*.vimpc")
    assert manifest["model"]["path"] == str(cached)
    cached.unlink()  # a cleared cache: a new fit need not give the same model
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(stage)]) == 2
    assert "is gone (a cleared cache?)" in capsys.readouterr().err


def test_a_folder_another_process_is_running_is_neither_reported_nor_resumed(
    tmp_path, monkeypatch, capsys
):
    _interrupt_after(monkeypatch, 1)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), *SHORT]) == 130
    monkeypatch.undo()
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    held = store.Lock(stage, wait=False)  # as a live run holds it
    try:
        assert store.unfinished_runs(tmp_path, "pendulum_swingup") == []
        capsys.readouterr()
        assert cli.main(["run", "--resume", str(stage)]) == 2
        assert "is being run by another vimpc process" in capsys.readouterr().err
    finally:
        held.release()
    assert [s for s, _ in store.unfinished_runs(tmp_path, "pendulum_swingup")] == [stage]


KILLED_AFTER_TWO = """
import os, signal, sys
from vimpc import cli
from vimpc.runs import store
real, calls = store.save_episode, []
def save_then_die(*args, **kwargs):
    real(*args, **kwargs)
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # no handler, no clean-up: as kill -9
store.save_episode = save_then_die
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_killed_run_is_found_by_the_next_run_and_resumed(reference, tmp_path, capsys):
    args = ["run", PENDULUM, "--out", str(tmp_path), *SHORT]
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED_AFTER_TWO), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    assert stage.name.endswith(".partial") and len(store.finished(stage, 4)) == 2
    # the next run of the scenario says so, and how to finish it
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert f"an unfinished run of pendulum_swingup is in {stage}" in out
    assert "2 of 4 episodes done, the same configuration as this run" in out
    assert f"vimpc run --resume {stage}" in out
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 0
    final = stage.with_name(stage.name.removesuffix(".partial"))
    _same_episodes(final, reference)
    sessions = json.loads((final / "metrics.json").read_text())["sessions"]
    assert "ended" not in sessions[0] and sessions[1]["ended"] == "complete"  # killed


def test_a_failed_run_keeps_its_episodes_and_one_that_finished_none_leaves_nothing(
    tmp_path, monkeypatch, capsys
):
    import vimpc.closedloop as closedloop
    from vimpc.errors import SolverError

    real, calls = closedloop.run_episode, []

    def fail_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise SolverError("the true system's Newton solve failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(closedloop, "run_episode", fail_third)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path / "a"), *SHORT]) == 2
    (stage,) = (tmp_path / "a" / "pendulum_swingup").iterdir()
    assert store.finished(stage, 4) == [0, 1] and not (stage / "metrics.json").exists()
    assert "vimpc run --resume" in capsys.readouterr().err
    calls.clear()
    calls.extend([1, 1])  # the next episode fails at once
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path / "b"), *SHORT]) == 2
    assert [p.name for p in (tmp_path / "b").rglob("*")] == ["pendulum_swingup"]


# -- workers --------------------------------------------------------------------------------


def test_worker_count_is_capped_by_episodes_and_cores(monkeypatch):
    monkeypatch.setattr(_processes, "usable_cores", lambda: 2)
    assert _processes.worker_count(64, 100) == (2, "2 usable cores")
    assert _processes.worker_count(64, 1) == (1, "1 episode to run")
    assert _processes.worker_count(3, 2) == (2, "2 episodes to run and 2 usable cores")
    assert _processes.worker_count(2, 10) == (2, None)
    assert _processes.worker_count(1, 0) == (1, None)
    monkeypatch.setattr(_processes, "usable_cores", lambda: 4)
    assert _processes.worker_count(8, 3) == (3, "3 episodes to run")
    assert _processes.worker_count(8, 30) == (4, "4 usable cores")
    monkeypatch.undo()
    assert 1 <= _processes.usable_cores() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("workers", [0, -2, "2", 1.5, True])
def test_run_episodes_names_a_bad_worker_count(workers, monkeypatch):
    from vimpc import scenario
    from vimpc.errors import InputError

    def no_runner(*args, **kwargs):
        raise AssertionError("episodes were set up before the bad worker count was refused")

    monkeypatch.setattr(pipeline, "EpisodeRunner", no_runner)
    cfg = scenario.load_scenario(PENDULUM)
    with pytest.raises(InputError, match=f"workers must be a positive integer, got {workers!r}"):
        pipeline.run_episodes(cfg, None, [0, 1], workers=workers)


def test_a_capped_run_says_so_and_records_the_processes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_processes, "usable_cores", lambda: 2)
    sets = ["--set", "episodes.steps=3", "--set", "controller.horizon=5", "--quiet"]
    args = ["run", PENDULUM, "--out", str(tmp_path), *sets, "--no-plots", "--workers", "64"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "--workers 64 capped to 1 (1 episode to run)" in out
    (solve_line,) = [line for line in out.splitlines() if "solve time" in line]
    assert solve_line.endswith("(1 episode process at once on 2 usable cores)")
    metrics = json.loads((_only(tmp_path) / "metrics.json").read_text())
    assert metrics["workers"] == 1 and metrics["workers_requested"] == 64
    assert metrics["cores"] == 2
    (session,) = metrics["sessions"]
    assert session["processes"] == 1 and len(session["load_average"]) == 2
    # on one core, three episodes run in one process: the cores are what caps them
    monkeypatch.setattr(_processes, "usable_cores", lambda: 1)
    more = ["--set", "episodes.count=3", "--out", str(tmp_path / "one")]
    assert cli.main([*args, *more]) == 0
    out = capsys.readouterr().out
    assert "--workers 64 capped to 1 (1 usable core): more processes would share the cores" in out
    assert "(1 episode process at once on 1 usable core)" in out


@pytest.mark.parametrize(("value", "message"), [("0", "positive integer"), ("-3", "got -3")])
def test_bad_worker_counts_are_refused_before_any_work(value, message, tmp_path, capsys):
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), "--workers", value]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    with pytest.raises(SystemExit) as done:
        cli.main(["run", PENDULUM, "--workers", "abc"])
    assert done.value.code == 2
    assert "invalid int value: 'abc'" in capsys.readouterr().err


def test_run_needs_a_scenario_or_a_folder_to_resume(capsys):
    assert cli.main(["run"]) == 2
    assert "needs a scenario" in capsys.readouterr().err


# -- outcomes -------------------------------------------------------------------------------


def test_a_run_whose_solves_all_failed_exits_3_with_its_results_marked(
    tmp_path, monkeypatch, capsys
):
    import dataclasses

    import vimpc.closedloop as closedloop
    from vimpc.mpc import Status

    real = closedloop.run_episode

    def failing(env, controller, *args, **kwargs):
        class Failing:  # the same controller, every solve reported failed
            def __getattr__(self, name):
                return getattr(controller, name)

            def __call__(self, obs, t):
                return dataclasses.replace(controller(obs, t), status=Status.FAILED)

        return real(env, Failing(), *args, **kwargs)

    monkeypatch.setattr(closedloop, "run_episode", failing)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), *SHORT]) == 3
    captured = capsys.readouterr()
    assert "all 12 solves failed" in captured.err and "exit code 3" in captured.err
    metrics = json.loads((_only(tmp_path) / "metrics.json").read_text())
    assert metrics["outcome"] == "all solves failed" and metrics["failed_solves"] == 12
    # one solve that worked is enough for a normal exit
    monkeypatch.undo()
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path / "ok"), *SHORT]) == 0
    assert "exit codes" in cli.build_parser()._subparsers._group_actions[0].choices[
        "run"
    ].format_help() and "3 complete, but every solve failed" in " ".join(
        cli.build_parser()._subparsers._group_actions[0].choices["run"].format_help().split()
    )


# -- the cache, checked before the data and the fit ------------------------------------------


def test_an_unwritable_cache_is_found_before_the_data_and_the_fit(tmp_path, monkeypatch, capsys):
    # Tests run as root, whom permission bits do not stop; a cache path below a regular
    # file cannot be created by anyone, so it stands for a cache that cannot be written.
    blocker = tmp_path / "a_file"
    blocker.write_text("")

    def no_data(*args, **kwargs):
        raise AssertionError("data were collected before the cache was checked")

    monkeypatch.setattr(pipeline, "collect", no_data)
    small = ["--set", "data.trajectories=2", "--set", "data.heldout_trajectories=20", "--quiet"]
    for cache, message in (
        (blocker / "cache", "cannot be written"),
        (blocker, "is a file, not a folder"),
    ):
        monkeypatch.setenv("VIMPC_CACHE", str(cache))
        assert cli.main(["fit", SAFE, "-o", str(tmp_path / "m.vimpc"), *small]) == 2
        err = capsys.readouterr().err
        assert f"VIMPC_CACHE {str(cache)!r}" in err and message in err
        assert cli.main(["run", SAFE, "--out", str(tmp_path / "runs"), *small]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "m.vimpc").exists()
    assert not list((tmp_path / "runs").rglob("*.npz"))  # and no run folder kept
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["cartpole_safe"]


def test_the_cache_check_writes_a_file_not_just_permissions(tmp_path, monkeypatch):
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / "new" / "cache"))
    assert pipeline.check_cache_writable() == tmp_path / "new" / "cache"
    assert (tmp_path / "new" / "cache").is_dir()
    assert not list((tmp_path / "new" / "cache").iterdir())  # the probe is gone


def test_a_worker_killed_mid_run_ends_the_run_with_its_episodes_kept(tmp_path, monkeypatch, capsys):
    # a multiprocessing.Pool replaced the dead worker and waited for its episode for ever
    import multiprocessing

    real, calls = store.save_episode, []

    def save_then_kill_a_worker(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            victim = multiprocessing.active_children()[0]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(timeout=10)

    monkeypatch.setattr(store, "save_episode", save_then_kill_a_worker)
    # episodes long enough (60 steps) that the others are still running at the kill
    sets = [*SHORT, "--set", "episodes.steps=60", "--set", "episodes.count=6"]
    args = ["run", PENDULUM, "--out", str(tmp_path), *sets, "--workers", "2"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "a worker process ended before its episode did" in err
    (stage,) = (tmp_path / "pendulum_swingup").iterdir()
    assert 1 <= len(store.finished(stage, 6)) < 6 and "vimpc run --resume" in err
    assert not multiprocessing.active_children()  # the other worker was ended too
    monkeypatch.undo()
    assert cli.main(["run", "--resume", str(stage), "--quiet"]) == 0
    final = stage.with_name(stage.name.removesuffix(".partial"))
    assert json.loads((final / "metrics.json").read_text())["episodes"] == 6
