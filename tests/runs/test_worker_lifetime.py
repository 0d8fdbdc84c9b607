"""Worker processes end with the command that started them, however it ends: after a
SIGKILL of ``vimpc run --workers 2`` or ``vimpc sweep --workers 2`` the workers lived on,
and a sweep's went on finishing configurations into its folder; after one of a
``--backend ray`` run, the local cluster's agents lived on."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vimpc import _processes

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from _common import descendants, process_title  # noqa: E402

ROOT = Path(__file__).parents[2]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
# long enough that the workers are still busy when the command is killed
LONG = ["--set", "episodes.steps=3000", "--no-plots", "--quiet"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _state(pid: int) -> str | None:
    """The process's state letter (``None``: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")  # a zombie has ended, whoever reaps it


def _workers(parent: int) -> list[int]:
    """The multiprocessing workers ``parent`` spawned (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")), "")
        if ppid == str(parent) and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def _poll(condition, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _kill_and_check(args: list[str], cwd: Path, count: int, find=_workers) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "vimpc.cli", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    workers: list[int] = []

    def started() -> bool:
        workers[:] = find(child.pid)
        return len(workers) >= count or child.poll() is not None

    try:
        # generous: imports, the fit or model and the workers' start share a busy machine
        _poll(started, 180)
        assert len(workers) >= count and child.poll() is None, (workers, child.poll())
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        assert _poll(lambda: not any(_alive(w) for w in workers), 30), [
            (w, _state(w)) for w in workers
        ]
    finally:
        if child.poll() is None:
            child.kill()
        for w in workers:  # a failed test leaves nothing behind
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        child.wait()
        child.stderr.close()


def test_the_workers_of_a_killed_run_end(tmp_path):
    args = ["run", PENDULUM, "--out", str(tmp_path), "--workers", "2"]
    _kill_and_check([*args, "--set", "episodes.count=4", *LONG], ROOT, 2)
    assert not list(tmp_path.glob("*/*/metrics.json"))


def test_the_workers_of_a_killed_sweep_end(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'scenario = "{PENDULUM}"\n\n[sweep]\nname = "long"\n\n[set]\nepisodes.count = 1\n'
        "episodes.steps = 3000\n\n[grid]\ncontroller.horizon = [4, 5]\n",
        encoding="utf-8",
    )
    args = ["sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "2"]
    _kill_and_check([*args, "--no-plots", "--quiet"], ROOT, 2)
    # nothing went on in the folder after the kill
    assert not list((tmp_path / "out").glob("**/metrics.json"))


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
def test_the_local_ray_cluster_of_a_killed_run_ends(tmp_path):
    def cluster(parent: int) -> list[int]:
        # every process below the run once its episodes run (the cluster's agents are
        # there by then)
        tree = descendants(parent)
        return tree if any(process_title(p).startswith("ray::episode") for p in tree) else []

    args = ["run", PENDULUM, "--backend", "ray", "--workers", "2", "--out", str(tmp_path)]
    _kill_and_check([*args, "--set", "episodes.count=4", *LONG], ROOT, 1, find=cluster)


def test_a_worker_whose_parent_is_gone_ends_by_itself(tmp_path):
    # the watch that covers what PR_SET_PDEATHSIG misses (other systems): the parent's id
    # changing is what an orphan sees
    code = (
        "import os, time, vimpc._processes as p\n"
        "p.PARENT_POLL_S = 0.05\n"
        "p.end_with_parent(os.getppid())\n"
        "os.getppid = lambda: 1\n"
        "time.sleep(60)\n"
        "raise SystemExit(0)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120)
    assert done.returncode == 1 and time.monotonic() - started < 60
    # and a parent that died before the worker asked to follow it
    code = "import vimpc._processes as p, time\np.end_with_parent(-1)\ntime.sleep(60)\n"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 1
    assert _processes.PARENT_POLL_S < 5  # an orphan does not work on for long
