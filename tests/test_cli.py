"""The command line as a person uses it: interrupts, concurrent runs, output locations
checked before any work, the listing, version and help."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc import cli, pipeline, scenario
from vimpc.errors import ConfigError
from vimpc.runs import store

ROOT = Path(__file__).parents[1]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
CARTPOLE = str(ROOT / "scenarios" / "cartpole_swingup.toml")
SHORT = ["--set", "episodes.steps=3", "--set", "controller.horizon=5", "--no-plots", "--quiet"]
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _default_sigint() -> None:
    """A child started from a shell's background job inherits SIGINT ignored; these tests
    need the default, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _vimpc(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vimpc.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
        **kwargs,
    )


@pytest.fixture
def no_env(monkeypatch):
    """Fail the test if an env is built: the checks must come before any work."""

    def refuse(*args, **kwargs):
        raise AssertionError("an env was built before the bad input was refused")

    monkeypatch.setattr(pipeline, "build_env", refuse)


# -- Ctrl-C ----------------------------------------------------------------------------------


def _interrupt_a_run(out: Path, *extra: str) -> tuple[float, int, str]:
    """Start a long cart-pole run, send one SIGINT once it has been running for a while,
    and return (seconds from the signal to the exit, exit code, stderr)."""
    proc = _vimpc(
        "run", CARTPOLE, "--out", str(out), "--quiet", "--no-plots",
        "--set", "episodes.count=200", *extra,
    )  # fmt: skip
    first = proc.stdout.readline()  # printed once the scenario is valid
    assert first.startswith("vimpc run"), first + proc.stderr.read()
    time.sleep(2.5)  # env and model built, episodes (and their solves) running
    assert proc.poll() is None, "the run ended before it could be interrupted"
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("one SIGINT did not stop the run within 30 s") from None
    return time.perf_counter() - sent, code, proc.stderr.read()


def _nothing_looks_complete(out: Path, err: str) -> None:
    """After an interrupt: no metrics.json anywhere; a kept folder is a ``.partial`` one
    with its manifest, and the message says how to resume it."""
    assert not list(out.rglob("metrics.json"))
    for stage in out.rglob("*.partial"):
        manifest = json.loads((stage / "run.json").read_text())
        assert manifest["complete"] is False and manifest["missing"]
        assert f"vimpc run --resume {stage}" in err
    folders = [p for p in (out / "cartpole_swingup").iterdir()]
    assert all(p.name.endswith(".partial") for p in folders)


@pytest.mark.parametrize("solver", ["sqpmethod", "fatrop", "ipopt"])
def test_one_sigint_stops_a_run_inside_the_solver_and_leaves_nothing_that_looks_complete(
    solver, tmp_path
):
    # The solves take most of each step, so the signal lands inside one almost always;
    # CasADi's solvers used to swallow it and the run went on to the end.
    latency, code, err = _interrupt_a_run(tmp_path, "--set", f'controller.solver="{solver}"')
    assert code == 130, err
    assert "interrupted" in err
    # a second is the promise; the margin is for a loaded machine
    assert latency < 3.0
    _nothing_looks_complete(tmp_path, err)


def test_one_sigint_stops_a_run_with_workers(tmp_path):
    latency, code, err = _interrupt_a_run(tmp_path, "--workers", "2")
    assert code == 130, err
    assert latency < 3.0
    _nothing_looks_complete(tmp_path, err)


def test_a_run_interrupted_before_its_first_episode_ends_leaves_no_folder(tmp_path, monkeypatch):
    # nothing finished, nothing to keep (runs that finished episodes keep them:
    # tests/runs/test_resume.py)
    import vimpc.closedloop as closedloop

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(closedloop, "run_episode", interrupted)
    assert cli.main(["run", PENDULUM, "--out", str(tmp_path), *SHORT]) == 130
    assert [p.name for p in tmp_path.rglob("*")] == ["pendulum_swingup"]


def _swallowing_controller(env):
    """A controller whose first call receives a SIGINT and swallows the KeyboardInterrupt,
    as CasADi does inside a call; it then returns a valid result."""
    from types import SimpleNamespace

    from vimpc.mpc import Status

    calls = []

    def controller(obs, t):
        calls.append(t)
        if len(calls) == 1:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # the handler runs here and raises
            except KeyboardInterrupt:
                pass  # swallowed
        u = np.zeros(env.action_space.shape)
        return SimpleNamespace(u=u, status=Status.SOLVED, solve_time=0.0, iterations=0, slack=0.0)

    return controller, calls


def test_a_swallowed_ctrl_c_is_raised_at_the_next_step_under_the_latch():
    import gymnasium

    from vimpc._interrupt import interrupt_latch
    from vimpc.closedloop import run_episode

    env = gymnasium.make("vimpc/Pendulum-v0").unwrapped
    controller, calls = _swallowing_controller(env)
    with interrupt_latch(), pytest.raises(KeyboardInterrupt):
        run_episode(env, controller, 5, seed=0)
    assert len(calls) == 1  # stopped after the step it arrived in
    # without the latch the same interrupt is lost and the episode runs to its end
    controller, calls = _swallowing_controller(env)
    run_episode(env, controller, 5, seed=0)
    assert len(calls) == 5


@pytest.mark.parametrize("plugin", ["ipopt", "sqpmethod", "fatrop"])
def test_a_ctrl_c_during_solves_is_raised_not_swallowed(plugin):
    # CasADi stops a solve at a SIGINT and reports a failed solve (or an error); the
    # interrupt itself must reach the caller
    import casadi as ca

    from vimpc._interrupt import kept_interrupts

    x = ca.MX.sym("x", 40)
    nlp = {"x": x, "f": ca.sumsqr(ca.sin(x) - 0.3) + ca.sum1(x**4), "g": ca.sum1(x)}
    opts = {
        "ipopt": {"ipopt": {"print_level": 0, "sb": "yes"}},
        "sqpmethod": {
            "print_header": False, "print_iteration": False, "print_status": False,
            "qpsol": "qrqp",
            "qpsol_options": {"print_iter": False, "print_header": False, "error_on_fail": False},
        },
        "fatrop": {"structure_detection": "none", "fatrop": {"print_level": 0}},
    }[plugin]  # fmt: skip
    solver = ca.nlpsol("s", plugin, nlp, {"print_time": False, **opts})
    timers = [threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))]
    for timer in timers:
        timer.start()
    begun = time.perf_counter()
    deadline = begun + 60
    try:
        with pytest.raises(KeyboardInterrupt):
            while time.perf_counter() < deadline:
                with kept_interrupts():
                    solver(x0=1.0, lbg=-10, ubg=10)
    finally:
        for timer in timers:
            timer.cancel()
    # raised at the signal (0.2 s in), not at the end of the minute of solves
    assert time.perf_counter() - begun < 10.0


def test_a_ctrl_c_before_the_body_leaves_no_handler_behind():
    # a SIGINT that lands inside __enter__, after the handler is in place, raises out of it
    # and __exit__ never runs: the handler must put the previous one back itself, or it
    # keeps (and CasADi swallows) every later SIGINT; it once made the fatrop case of the
    # test above fail after the sqpmethod case
    from vimpc._interrupt import kept_interrupts

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    kept = kept_interrupts()
    kept.__enter__()
    assert signal.getsignal(signal.SIGINT) == kept._record
    with pytest.raises(KeyboardInterrupt):
        kept._record(signal.SIGINT, None)  # as the signal would, before the body
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), kept_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)


def test_an_env_step_that_casadi_interrupted_raises_keyboard_interrupt():
    import gymnasium

    from vimpc.errors import SolverError

    env = gymnasium.make("vimpc/CartPole-v0").unwrapped
    env.reset(seed=0)

    def interrupted(x, u):
        raise RuntimeError("Error in Function::call for 'step' [Rootfinder]: KeyboardInterrupt")

    def failed(x, u):
        raise RuntimeError("Error in Function::call for 'step' [Rootfinder]: singular Jacobian")

    env._step_fn = interrupted
    with pytest.raises(KeyboardInterrupt):
        env.step([0.0])
    env._step_fn = failed
    with pytest.raises(SolverError, match="Newton solve"):
        env.step([0.0])


# -- concurrent runs -------------------------------------------------------------------------


def test_two_runs_started_together_both_keep_their_results(tmp_path):
    procs = [_vimpc("run", PENDULUM, "--out", str(tmp_path), *SHORT) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    runs = sorted((tmp_path / "pendulum_swingup").iterdir())
    assert len(runs) == 2, runs
    for run in runs:
        assert not run.name.endswith(".partial")
        assert json.loads((run / "metrics.json").read_text())["episodes"] == 1


def test_run_folders_are_reserved_exclusively(tmp_path):
    # many reservations in the same second, from threads racing each other
    got: list[Path] = []
    barrier = threading.Barrier(16)

    def reserve() -> None:
        barrier.wait()
        final, stage = store.reserve_run_dir(tmp_path, "x")
        got.append(final)
        stage.rename(final)

    threads = [threading.Thread(target=reserve) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 16
    assert len(list((tmp_path / "x").iterdir())) == 16


def test_a_name_whose_finished_folder_exists_is_not_taken(tmp_path, monkeypatch):
    from datetime import datetime as real

    class Frozen(real):
        @classmethod
        def now(cls, tz=None):
            return real(2026, 1, 1, tzinfo=tz)

    monkeypatch.setattr(store, "datetime", Frozen)
    (tmp_path / "x" / "20260101T000000Z").mkdir(parents=True)
    final, stage = store.reserve_run_dir(tmp_path, "x")
    assert final.name == "20260101T000000Z-1" and stage.is_dir()


# -- output locations ------------------------------------------------------------------------


def test_out_that_is_a_file_is_refused_before_any_work(tmp_path, no_env, capsys):
    target = tmp_path / "file"
    target.write_text("mine")
    for out in (target, target / "below"):
        assert cli.main(["run", PENDULUM, "--out", str(out), *SHORT]) == 2
        err = capsys.readouterr().err
        assert "--out" in err and str(target) in err
    assert target.read_text() == "mine"


@pytest.mark.skipif(AS_ROOT, reason="permissions do not bind root")
def test_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, no_env, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert cli.main(["run", PENDULUM, "--out", str(locked), *SHORT]) == 2
    assert "not writable" in capsys.readouterr().err
    assert cli.main(["fit", PENDULUM, "-o", str(locked / "m.vimpc")]) == 2
    assert "not writable" in capsys.readouterr().err


def test_out_that_the_user_may_not_write_is_refused_before_any_work(
    tmp_path, no_env, monkeypatch, capsys
):
    # the permission itself, as the operating system reports it (root may write anywhere)
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(cli.os, "access", lambda p, mode: Path(p) != locked and real(p, mode))
    assert cli.main(["run", PENDULUM, "--out", str(locked), *SHORT]) == 2
    assert f"--out {str(locked)!r} is not writable" in capsys.readouterr().err
    assert cli.main(["fit", PENDULUM, "-o", str(locked / "m.vimpc")]) == 2
    assert f"the folder {str(locked)!r} is not writable" in capsys.readouterr().err
    assert not list(locked.iterdir())


def test_export_into_a_missing_folder_or_onto_a_folder_is_refused_before_any_work(
    tmp_path, no_env, capsys
):
    (tmp_path / "m.vimpc").mkdir()
    cases = {
        str(tmp_path / "missing" / "m.vimpc"): "does not exist",
        str(tmp_path / "m.vimpc"): "is a folder",
        str(tmp_path / "m.txt"): "must end in .vimpc",
    }
    for out, message in cases.items():
        assert cli.main(["export", PENDULUM, "-o", out]) == 2
        err = capsys.readouterr().err
        assert message in err and out in err


def test_a_model_file_that_appears_during_the_fit_is_kept(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.vimpc"
    real = pipeline.obtain_model

    def someone_writes_meanwhile(*args, **kwargs):
        source = real(*args, **kwargs)
        out.write_text("theirs")
        return source

    monkeypatch.setattr(pipeline, "obtain_model", someone_writes_meanwhile)
    assert cli.main(["export", PENDULUM, "-o", str(out), "--quiet"]) == 2
    assert "appeared while the model was being built" in capsys.readouterr().err
    assert out.read_text() == "theirs"


# -- list, version, help ---------------------------------------------------------------------


def test_list_works_outside_the_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "pendulum_swingup.toml" in out and "vimpc/CartPole-v0" in out


def test_list_skips_unreadable_scenarios_and_refuses_a_missing_folder(tmp_path, capsys):
    (tmp_path / "binary.toml").write_bytes(bytes(range(256)))
    (tmp_path / "broken.toml").write_text("[scenario\n")
    (tmp_path / "odd.toml").write_text('scenario = 3\n[env]\nid = "x"\n')
    (tmp_path / "odder.toml").write_text("[scenario]\ndescription = 5\n")
    (tmp_path / "good.toml").write_text('[scenario]\ndescription = "fine"\n')
    assert cli.main(["list", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_name = {line.split()[0]: line for line in lines if line.split()[0].endswith(".toml")}
    assert set(by_name) == {"binary.toml", "broken.toml", "odd.toml", "odder.toml", "good.toml"}
    assert "skipped" in by_name["binary.toml"] and "UTF-8" in by_name["binary.toml"]
    assert "skipped" in by_name["broken.toml"] and "TOML" in by_name["broken.toml"]
    assert by_name["good.toml"].endswith("fine")
    assert cli.main(["list", "--dir", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_version_and_help_read_cleanly(capsys):
    from vimpc import __version__

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"vimpc {__version__}"
    parser = cli.build_parser()
    texts = [parser.format_help()]
    texts += [p.format_help() for p in parser._subparsers._group_actions[0].choices.values()]
    for text in texts:
        assert "``" not in text and ":func:" not in text


def test_reserving_fails_clearly_where_the_scenario_folder_is_a_file(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(ConfigError, match="cannot create"):
        store.reserve_run_dir(tmp_path, "x")


def test_an_unreadable_cached_fit_is_fitted_again(tmp_path, capsys):
    safe = str(ROOT / "scenarios" / "cartpole_safe.toml")
    small = ["--set", "data.trajectories=5", "--set", "data.heldout_trajectories=50"]
    # calibrated on the held-out trajectories, not on 100 closed-loop episodes per fit
    small += ["--set", "data.steps=20", "--set", 'data.calibration="heldout"', "--quiet"]
    assert cli.main(["fit", safe, "-o", str(tmp_path / "a.vimpc"), *small]) == 0
    cfg = scenario.load_scenario(safe, [small[k + 1] for k in range(0, 8, 2)])
    cached = pipeline.cache_dir() / f"cartpole_safe-{pipeline.cache_key(cfg)}.vimpc"
    text = cached.read_text()
    cached.write_text(text.replace('"dt"', '"dT"', 1))  # the checksum no longer matches
    capsys.readouterr()
    assert cli.main(["fit", safe, "-o", str(tmp_path / "b.vimpc"), *small]) == 0
    assert "is unreadable" in capsys.readouterr().out
    assert cached.read_text() != text.replace('"dt"', '"dT"', 1)  # replaced by the new fit


def test_quiet_silences_the_notes_an_earlier_command_in_the_process_turned_on(tmp_path, capsys):
    """The library's notes (a controller compiled, a library from the compile cache) go to
    stderr unless --quiet; a program calling cli.main twice gets each call's choice."""
    import logging

    note = logging.getLogger("vimpc")
    assert cli.main(["schema"]) == 0  # no --quiet: the notes are shown
    capsys.readouterr()
    note.info("a note")
    assert capsys.readouterr().err == "vimpc: a note\n"
    refused = ["run", PENDULUM, "--quiet", "--out", str(tmp_path), "--set", "episodes.count=0"]
    assert cli.main(refused) == 2
    capsys.readouterr()
    note.info("a note")
    assert capsys.readouterr().err == ""
