"""Helpers shared by the benchmark scripts: timing statistics, machine info, result tables.

Not a test module: the scripts in this folder are run by hand from the repository root,
``python tests/benchmarks/<name>.py``, and each writes ``results/benchmarks/<name>.md``
and ``.csv`` with the command, the date and the machine. Each also takes ``--quick`` and
``--out`` (``tests/experiments/_quick.py``); ``tests/test_scripts_quick.py`` runs every
script's quick mode.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "benchmarks"
sys.path.insert(0, str(ROOT / "tests" / "experiments"))
from _quick import add_options, parse  # noqa: E402,F401  (re-exported for the scripts)
from _tables import record  # noqa: E402

CARTPOLE = ROOT / "scenarios" / "cartpole_swingup.toml"
PENDULUM = ROOT / "scenarios" / "pendulum_swingup.toml"


def command(script: str | None = None, argv: Sequence[str] | None = None) -> str:
    """The command line that started this script, relative to the repository root:
    ``script`` (default ``sys.argv[0]``) with ``argv`` (default ``sys.argv[1:]``)."""
    script = os.path.relpath(os.path.abspath(script or sys.argv[0]), ROOT)
    return "python " + shlex.join([script, *(sys.argv[1:] if argv is None else argv)])


def stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> str:
    """nproc, CPU model, load, Python and solver-stack versions, as one line."""
    import casadi

    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"nproc {len(os.sched_getaffinity(0))}, {cpu}, load average {load}, "
        f"Python {platform.python_version()}, CasADi {casadi.__version__}, NumPy {np.__version__}; "
        f"vimpc + envs sources sha256 {_sources_note()}"
    )


def sources() -> str:
    """A fingerprint of the vimpc and env sources (other files change while benchmarks run)."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("vimpc/**/*.py"), *ROOT.glob("envs/*.py")]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


_SOURCES_AT_START = sources()


def _sources_note() -> str:
    now = sources()
    if now == _SOURCES_AT_START:
        return now
    return f"{now} (CHANGED during the run; {_SOURCES_AT_START} at the start)"


def vimpc_run(scenario: Path | str, out: Path | str, *sets: str, workers: int = 1) -> list[str]:
    """The command line of ``vimpc run <scenario>`` as a user runs it, without progress bars
    or plots, into ``out``, with ``--set`` overrides ``sets`` (``"episodes.count=1"``)."""
    cmd = [sys.executable, "-m", "vimpc.cli", "run", str(scenario), "--quiet", "--no-plots"]
    cmd += ["--out", str(out), "--workers", str(workers)]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def ms_stats(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p95 and max of durations given in seconds, in milliseconds."""
    t = np.asarray(seconds, dtype=float) * 1e3
    return {
        "median_ms": float(np.median(t)),
        "p95_ms": float(np.percentile(t, 95)),
        "max_ms": float(t.max()),
    }


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


class TimedController:
    """Wraps a controller for ``run_episode`` and records the wall time of each whole call
    (the solve plus the controller's own Python work before and after it)."""

    def __init__(self, controller: Any) -> None:
        self.inner = controller
        self.call_times: list[float] = []
        self.tube_times: list[float] = []
        if hasattr(controller, "reference"):
            self.reference = controller.reference

    def reset(self) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset()

    def __call__(self, obs, t=0.0):
        t0 = time.perf_counter()
        result = self.inner(obs, t)
        self.call_times.append(time.perf_counter() - t0)
        self.tube_times.append(result.tube_time)
        return result


class RecordedController:
    """The controller, keeping ``record(result, stats)`` of each call (its ``MPCResult``
    and ``solver_stats()`` after it) in ``calls``; everything else is the controller's."""

    def __init__(self, ctrl: Any, record: Any) -> None:
        self.ctrl, self.record, self.calls = ctrl, record, []

    def __getattr__(self, name):
        return getattr(self.ctrl, name)

    def __call__(self, obs, t=0.0, *args, **kwargs):
        result = self.ctrl(obs, t, *args, **kwargs)
        self.calls.append(self.record(result, self.ctrl.solver_stats()))
        return result


def _fmt(value: Any, spec: str) -> str:
    if isinstance(value, float):
        return format(value, spec) if np.isfinite(value) else str(value)
    return str(value)


def write_results(
    name: str,
    title: str,
    rows: list[dict[str, Any]],
    columns: list[tuple[str, str, str]],
    notes: str = "",
    extra: str = "",
    *,
    out: Path = OUT,
    script: str | None = None,
    argv: Sequence[str] | None = None,
) -> str:
    """Print the table and write ``<out>/<name>.md`` and ``.csv`` (``out`` defaults to
    ``results/benchmarks``).

    ``columns`` are ``(key, header, format spec)``; the CSV holds every key of the rows
    at full precision, with the command (``script`` and ``argv``, see :func:`command`),
    date and machine as ``#`` comment lines, and the table's provenance record
    (``_tables.record``). ``extra`` (markdown) follows the table in the
    ``.md`` and on screen.
    """
    folder = Path(out)
    cmd, when, where = command(script, argv), stamp(), machine()
    table = "\n".join(
        [
            "| " + " | ".join(h for _, h, _ in columns) + " |",
            "|" + "---|" * len(columns),
            *("| " + " | ".join(_fmt(r[k], f) for k, _, f in columns) + " |" for r in rows),
        ]
    )
    md = (
        f"# {title}\n\nMade by `{cmd}` on {when}.\n\nMachine: {where}.\n\n"
        f"{notes.strip()}\n\n{table}\n{extra}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(folder / f"{name}.md", md)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    tmp = folder / f"{name}.csv.tmp"
    with tmp.open("w", newline="") as f:
        f.write(f"# command: {cmd}\n# date: {when}\n# machine: {where}\n")
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    tmp.replace(folder / f"{name}.csv")
    record(folder / f"{name}.md", cmd, [f"{name}.csv"])
    print(f"{title}\n{where}\n\n{table}\n{extra}\nwrote {folder / name}.md and .csv")
    return table


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# solver configurations compared by the MPC benchmarks: label -> scenario overrides
SOLVER_CONFIGS = {
    "fatrop / implicit": ["controller.solver=fatrop", "controller.transcription=implicit"],
    "sqpmethod+qrqp GN / implicit": [
        "controller.solver=sqpmethod",
        "controller.transcription=implicit",
        "controller.qpsol=qrqp",
        "controller.hessian=gauss-newton",
    ],
    "rti (qrqp GN) / implicit": ["controller.solver=rti", "controller.transcription=implicit"],
    "ipopt / implicit": ["controller.solver=ipopt", "controller.transcription=implicit"],
    "fatrop / step": ["controller.solver=fatrop", "controller.transcription=step"],
    "ipopt / step": ["controller.solver=ipopt", "controller.transcription=step"],
}


# -- episodes and processes (the Ray benchmarks and tests) -----------------------------------------


def timeless(value):
    """An episode record (JSON) without its measured times (and its digest, which covers
    them): equal across backends."""
    if isinstance(value, dict):
        return {
            k: timeless(v)
            for k, v in value.items()
            if "time" not in k and "late" not in k and k != "sha256"
        }
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def descendants(root: int) -> list[int]:
    """The process ids below ``root`` (read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def process_title(pid: int) -> str:
    """A process's title (its command line's first word; Ray names its workers by task,
    ``ray::episode``), empty when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""
