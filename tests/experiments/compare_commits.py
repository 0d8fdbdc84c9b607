"""Run every shipped scenario at two commits and compare their per-episode results.

    python tests/experiments/compare_commits.py BASE HEAD [--episodes N] [--seed S]
        [--only NAME ...] [--set KEY=VALUE ...] [--workers W] [--rtol R] [--atol A]
        [--out DIR]

A change that promises "every shipped scenario's per-episode results unchanged" is checked
here: each scenario (``scenarios/*.toml`` at HEAD, or the ``--only`` ones) runs at BASE and
at HEAD as ``vimpc run <that commit's scenario file> --set episodes.count=N --set
episodes.seed=S --no-plots --quiet`` (``--episodes`` and ``--seed`` default to the scenario
file's own; ``--set`` adds overrides to both runs). Each commit is checked out into a
detached temporary git worktree and runs its own code (``vimpc``, ``vimpc_envs`` and
``vimpc_scenarios`` from that worktree, checked before the first run) with its own, empty
model cache, so each commit fits its own model; the worktrees and caches are removed
afterwards, also after an error or Ctrl-C. The runs are kept in ``DIR/runs/`` with their
logs.

Both runs' files are read from disk (``metrics.json``: the summary, ``per_episode``, the
seeds; ``episode_NNN.npz``: the trajectories) and compared figure by figure: booleans,
integers and strings (success, violation and status counts, outcomes) must be equal, floats
equal within ``--rtol`` (default 1e-6) relative (plus ``--atol``, default 0), NaN equal to
NaN. Figures measured on the wall clock (:data:`TIMING`) and those describing the invocation
rather than the episodes (:data:`CONTEXT`) are not compared; they are listed by name at the
end. A progress line per scenario, then the table (``DIR/compare.md``, ``DIR/compare.csv``,
with the command, both commits' full hashes and the date). Exit code 0 when every scenario
is the same, 1 when one differs (or could not be run at one commit), 2 on bad input
(refused before any work), 130 on Ctrl-C.

``--quick --out DIR``: HEAD against itself on ``pendulum_swingup``, one episode of 3 steps.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import fnmatch
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _quick import add_options, command, parse

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "runs" / "compare"  # git-ignored: a check, not a committed table

#: figures measured on the wall clock, or decided by it (a call later than the sampling
#: period), which differ between two runs of the same episode: never compared. A pattern
#: matches a figure's name with its list indices dropped (``per_episode.solve_time_p95_ms``,
#: ``sessions.load_average``); a trajectory array is ``npz.<array>`` (the arrays of
#: ``vimpc.closedloop.episode.WALL_CLOCK``)
TIMING = (
    "*solve_time*",
    "*call_time*",
    "*first_plan_time*",
    "*preparation_time*",
    "*wall_time*",
    "*fit_time*",
    "*late_solve*",
    "sessions*",
    "npz.solve_times",
    "npz.call_times",
    "npz.late",
    "npz.start_time",
    "npz.preparation_times",
)
#: figures of the invocation, not of the episodes: the processes and cores, and where the
#: model file is (each commit has its own cache), its bytes' digest (the file holds the fit
#: time) and whether this run fitted it
CONTEXT = (
    "workers",
    "workers_requested",
    "cores",
    "model.path",
    "model.sha256",
    "model.fitted_now",
    "model.reused_cached_fit",
    "fits.path",
    "fits.sha256",
    "fits.fitted_now",
    "fits.reused_cached_fit",
)
#: floats compared exactly: a flag written as 0.0 or 1.0
EXACT = ("per_episode.success",)
#: the exit codes of a run that wrote its results (3: every solve failed)
WRITTEN = (0, 3)
SEED_MAX = 2**32 - 1


# -- comparing two run folders --------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One figure that differs: where, its two values and their relative difference (inf:
    not numbers, or one missing); for an array, its entry that differs most and ``count``,
    how many of its ``size`` entries differ."""

    where: str
    base: Any
    head: Any
    rel: float
    count: int = 1
    size: int = 1


@dataclass
class Comparison:
    """What :func:`compare_runs` found. ``figures``: values of ``metrics.json`` compared;
    ``array_values``: entries of the trajectories' arrays compared; ``largest`` and
    ``largest_where``: the largest relative difference among them; ``skipped``: the names
    not compared, ``{"timing": {...}, "context": {...}}``."""

    rtol: float
    atol: float
    expect: tuple[str, ...] = ()
    episodes: int = 0
    figures: int = 0
    array_values: int = 0
    largest: float = 0.0
    largest_where: str = "-"
    differences: list[Difference] = field(default_factory=list)
    expected: list[Difference] = field(default_factory=list)
    skipped: dict[str, set[str]] = field(
        default_factory=lambda: {"timing": set(), "context": set()}
    )

    @property
    def same(self) -> bool:
        return not self.differences

    def _seen(self, rel: float, where: str) -> None:
        if rel > self.largest:
            self.largest, self.largest_where = rel, where

    def _differ(
        self, where: str, base: Any, head: Any, rel: float = math.inf, count: int = 1, size: int = 1
    ) -> None:
        found = Difference(where, base, head, rel, count, size)
        if any(fnmatch.fnmatchcase(where, pattern) for pattern in self.expect):
            self.expected.append(found)  # declared by --expect: listed, not a difference
            return
        self.differences.append(found)
        self._seen(rel, where)


def skip_kind(name: str) -> str | None:
    """``"timing"`` or ``"context"`` when the figure ``name`` (indices dropped) is not
    compared, else None."""
    for kind, patterns in (("timing", TIMING), ("context", CONTEXT)):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return kind
    return None


def relative(a: float, b: float) -> float:
    """``|a - b| / max(|a|, |b|)``: 0 for equal values (inf and inf, NaN and NaN), inf for a
    NaN or an inf against another value."""
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if a == b:
        return 0.0
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def close(a: float, b: float, rtol: float, atol: float) -> bool:
    """Equal within ``atol + rtol * max(|a|, |b|)``; NaN equals NaN, inf only the same inf."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def _shown(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the whole file)"


def _name(path: tuple) -> str:
    return ".".join(p for p in path if isinstance(p, str))


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def compare_values(base: Any, head: Any, cmp: Comparison, path: tuple = ()) -> None:
    """Compare two values read from JSON, recursively, into ``cmp``."""
    name = _name(path)
    kind = skip_kind(name) if name else None
    if kind is not None:
        cmp.skipped[kind].add(name)
        return
    where = _shown(path)
    if isinstance(base, dict) and isinstance(head, dict):
        for key in [*base, *(k for k in head if k not in base)]:
            child = (*path, key)
            if key in base and key in head:
                compare_values(base[key], head[key], cmp, child)
            elif (kind := skip_kind(_name(child))) is not None:
                cmp.skipped[kind].add(_name(child))
            else:
                got = ("(missing)", head[key]) if key not in base else (base[key], "(missing)")
                cmp._differ(_shown(child), *got)
        return
    if isinstance(base, list) and isinstance(head, list):
        if len(base) != len(head):
            cmp._differ(f"{where} (length)", len(base), len(head))
        for k, (a, b) in enumerate(zip(base, head, strict=False)):
            compare_values(a, b, cmp, (*path, k))
        return
    cmp.figures += 1
    if _number(base) and _number(head):
        a, b = float(base), float(head)
        rel = relative(a, b)
        exact = (isinstance(base, int) and isinstance(head, int)) or name in EXACT
        if exact:
            same = a == b or (math.isnan(a) and math.isnan(b))
        else:
            same = close(a, b, cmp.rtol, cmp.atol)
        if same:
            cmp._seen(rel, where)
        else:
            cmp._differ(where, base, head, rel)
    elif type(base) is not type(head) or base != head:
        cmp._differ(where, base, head)


def compare_arrays(
    base: dict[str, np.ndarray], head: dict[str, np.ndarray], cmp: Comparison, label: str
) -> None:
    """Compare two trajectories' arrays (``label``: the file, for the names of differences):
    floats within the tolerance, NaN where NaN, the others exactly, shapes exactly."""
    for key in [*base, *(k for k in head if k not in base)]:
        where = f"{label}:{key}"
        kind = skip_kind(f"npz.{key}")
        if kind is not None:
            cmp.skipped[kind].add(f"npz.{key}")
            continue
        if key not in base or key not in head:
            got = ("(missing)", "present") if key not in base else ("present", "(missing)")
            cmp._differ(where, *got)
            continue
        a, b = np.asarray(base[key]), np.asarray(head[key])
        if a.shape != b.shape:
            cmp._differ(f"{where} (shape)", a.shape, b.shape)
            continue
        cmp.array_values += a.size
        if a.size == 0:
            continue
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            _float_arrays(a.astype(float), b.astype(float), cmp, where)
        elif not np.array_equal(a, b):
            k = np.unravel_index(int(np.argmax(a != b)), a.shape)
            rel = relative(float(a[k]), float(b[k])) if a.dtype.kind in "iub" else math.inf
            count = int(np.count_nonzero(a != b))
            cmp._differ(_at(where, k), a[k].item(), b[k].item(), rel, count, a.size)


def _at(where: str, index: tuple) -> str:
    """``states[2, 1]`` (a 0-d array: its name alone)."""
    return f"{where}[{', '.join(str(int(i)) for i in index)}]" if index else where


def _float_arrays(a: np.ndarray, b: np.ndarray, cmp: Comparison, where: str) -> None:
    both_nan = np.isnan(a) & np.isnan(b)
    equal = (a == b) | both_nan
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(equal, 0.0, np.abs(a - b) / scale)
        within = np.abs(a - b) <= cmp.atol + cmp.rtol * scale
    ok = equal | (np.isfinite(a) & np.isfinite(b) & within)
    rel = np.where(np.isnan(rel), np.inf, rel)  # NaN against a number, inf against another
    k = np.unravel_index(int(np.argmax(rel)), a.shape)
    at = _at(where, k)
    if ok.all():
        cmp._seen(float(rel[k]), at)
        return
    bad = np.unravel_index(int(np.argmax(np.where(ok, -1.0, rel))), a.shape)
    count = int(np.count_nonzero(~ok))
    cmp._differ(_at(where, bad), float(a[bad]), float(b[bad]), float(rel[bad]), count, a.size)


def _metrics(folder: Path) -> dict[str, Any]:
    path = folder / "metrics.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read as a complete run's metrics: {exc}") from None


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def compare_runs(
    base: Path, head: Path, rtol: float = 1e-6, atol: float = 0.0, expect: tuple[str, ...] = ()
) -> Comparison:
    """Compare two complete run folders of ``vimpc run`` as they are on disk: every figure
    of their ``metrics.json`` (the summary, ``per_episode``, ``seeds``, the model's record)
    and every array of their ``episode_NNN.npz``, apart from :data:`TIMING` and
    :data:`CONTEXT`. A difference at a figure that matches a pattern of ``expect`` (as
    ``fnmatch``: ``model.bound.*``) is a declared change: kept in ``expected``, not in
    ``differences``."""
    if not (rtol >= 0 and atol >= 0):
        raise ValueError(f"rtol and atol must be non-negative numbers, got {rtol}, {atol}")
    cmp = Comparison(rtol=rtol, atol=atol, expect=tuple(expect))
    a, b = _metrics(base), _metrics(head)
    cmp.episodes = max(len(a.get("per_episode", [])), len(b.get("per_episode", [])))
    compare_values(a, b, cmp)
    names = sorted({p.name for f in (base, head) for p in f.glob("episode_*.npz")})
    for name in names:
        there = [(f / name) for f in (base, head)]
        if not all(p.exists() for p in there):
            got = ("present", "(missing)") if there[0].exists() else ("(missing)", "present")
            cmp._differ(name, *got)
            continue
        compare_arrays(_arrays(there[0]), _arrays(there[1]), cmp, name)
    return cmp


def solve_times_ms(folder: Path) -> np.ndarray:
    """Every solve's wall-clock time of a run (``solve_times`` of its episodes), in ms."""
    times = [
        _arrays(path).get("solve_times", np.zeros(0))
        for path in sorted(folder.glob("episode_*.npz"))
    ]
    out = np.concatenate([np.ravel(t) for t in times]) if times else np.zeros(0)
    return 1e3 * out[np.isfinite(out)]


def timing_cells(base: Path, head: Path) -> dict[str, Any]:
    """The two runs' solve times side by side: median and 95th percentile [ms] and the
    ratio of the medians (HEAD / BASE), measured in the same comparison."""
    a, b = solve_times_ms(base), solve_times_ms(head)
    if not (a.size and b.size):
        return {"solve_median_ms": "", "solve_p95_ms": "", "median_ratio": ""}
    return {
        "solve_median_ms": f"{np.median(a):.3g} / {np.median(b):.3g}",
        "solve_p95_ms": f"{np.percentile(a, 95):.3g} / {np.percentile(b, 95):.3g}",
        "median_ratio": f"{np.median(b) / np.median(a):.2f}",
    }


# -- notes on a pair of runs ----------------------------------------------------------------------


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _config(folder: Path) -> dict[str, Any]:
    try:
        return _flat(tomllib.loads((folder / "config.resolved.toml").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def run_notes(base: Path, head: Path) -> list[str]:
    """What a reader of the verdict should know: the resolved configurations' differing
    keys, and settings that make the episodes depend on the wall clock."""
    a, b = _config(base), _config(head)
    notes = []
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "(unset)") != b.get(k, "(unset)")]
    if keys:
        shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        notes.append(f"resolved configuration differs: {shown}")
    budget = b.get("controller.time_budget", "none")
    if budget not in (None, "none"):
        notes.append(f"controller.time_budget = {budget} s: its solves stop on the wall clock")
    training = b.get("model.time_budget", 0.0)
    if isinstance(training, (int, float)) and training > 0:
        notes.append("model.time_budget > 0: its training stops on the wall clock")
    return notes


# -- the two commits ------------------------------------------------------------------------------


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def resolve_commit(what: str, rev: str) -> str:
    """The full hash of ``rev``; SystemExit(2) naming the argument when it is no commit."""
    done = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise BadInput(f"{what}: unknown commit {rev!r} (a commit, branch or tag of {ROOT})")
    return done.stdout.strip()


def shipped_scenarios(commit: str) -> list[str]:
    """The names of ``scenarios/*.toml`` at ``commit``."""
    done = git("ls-tree", "--name-only", commit, "scenarios/")
    names = [Path(p).stem for p in done.stdout.split() if p.endswith(".toml")]
    return sorted(n for n in names if "/" not in n)


class BadInput(Exception):
    """An argument refused before any work."""


@dataclass
class Checkout:
    """One commit checked out into a detached worktree, with its own import path and cache."""

    label: str
    rev: str
    sha: str
    root: Path

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIMPC_CACHE")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.tree), str(self.root / "path")])
        env["VIMPC_CACHE"] = str(self.cache)
        return env

    def create(self) -> None:
        self.root.mkdir(parents=True)
        done = git("worktree", "add", "--detach", str(self.tree), self.sha)
        if done.returncode != 0:
            raise RuntimeError(f"{self.label}: git worktree add failed: {done.stderr.strip()}")
        # the packages installed from envs/ and scenarios/, as this commit has them
        (self.root / "path").mkdir()
        for package, folder in (("vimpc_envs", "envs"), ("vimpc_scenarios", "scenarios")):
            if (self.tree / folder / "__init__.py").exists():
                (self.root / "path" / package).symlink_to(self.tree / folder)
        self.cache.mkdir()

    def remove(self) -> None:
        if self.tree.exists():
            done = git("worktree", "remove", "--force", str(self.tree))
            if done.returncode != 0:
                print(f"warning: {done.stderr.strip()}", file=sys.stderr)

    def preflight(self) -> None:
        """Check that this commit's own ``vimpc``, ``vimpc_envs`` and ``vimpc_scenarios``
        are the ones a run imports (not an installed checkout's)."""
        code = (
            "import importlib, json\n"
            "out = {}\n"
            "for n in ('vimpc', 'vimpc_envs', 'vimpc_scenarios'):\n"
            "    try:\n"
            "        out[n] = importlib.import_module(n).__file__\n"
            "    except ImportError:\n"
            "        out[n] = None\n"
            "print(json.dumps(out))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.tree, env=self.env(),
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
            raise RuntimeError(f"{self.label} {self.sha[:12]}: cannot import vimpc: {tail[0]}")
        files = json.loads(done.stdout.strip().splitlines()[-1])
        tree = self.tree.resolve()
        for name, where in files.items():
            if where is None and name == "vimpc_scenarios":
                continue  # a commit before the scenarios were a package: runs name the file
            if where is None or not Path(where).resolve().is_relative_to(tree):
                raise RuntimeError(
                    f"{self.label} {self.sha[:12]}: {name} is imported from {where}, not from "
                    f"its checkout {self.tree}"
                )

    def run(
        self, name: str, sets: list[str], workers: int, runs: Path
    ) -> tuple[Path | None, int, float, Path]:
        """``vimpc run`` of this commit's ``scenarios/<name>.toml``: ``(run folder or None,
        exit code, wall time [s], log)``."""
        out = runs / f"{self.label.lower()}-{self.sha[:12]}"
        log = out / f"{name}.log"
        out.mkdir(parents=True, exist_ok=True)
        before = set((out / name).glob("*")) if (out / name).exists() else set()
        cmd = [
            sys.executable, "-m", "vimpc.cli", "run", str(self.tree / "scenarios" / f"{name}.toml"),
            *(x for s in sets for x in ("--set", s)),
            "--no-plots", "--quiet", "--workers", str(workers), "--out", str(out),
        ]  # fmt: skip
        started = time.perf_counter()
        with open(log, "w") as handle:
            proc = subprocess.Popen(
                cmd, cwd=self.tree, env=self.env(), stdout=handle, stderr=subprocess.STDOUT
            )
            try:
                code = proc.wait()
            except BaseException:
                _stop(proc)
                raise
        seconds = time.perf_counter() - started
        new = [
            p for p in (out / name).glob("*") if p not in before and (p / "metrics.json").exists()
        ]
        folder = new[0] if code in WRITTEN and len(new) == 1 else None
        return folder, code, seconds, log


def _stop(proc: subprocess.Popen) -> None:
    """End a run this comparison was interrupted in: a Ctrl-C in the terminal reached it
    too, so give it time to tidy its folder; otherwise (SIGTERM) send it one."""
    for nudge, wait in ((None, 5), (signal.SIGINT, 30), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        if nudge is not None:
            proc.send_signal(nudge)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


# -- the command ----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="exit codes: 0 every scenario the same; 1 one differs or could not run; 2 bad "
        "input (before any work); 130 interrupted",
    )
    parser.add_argument("base", nargs="?", metavar="BASE", help="the commit compared against")
    parser.add_argument("head", nargs="?", metavar="HEAD", help="the commit checked")
    parser.add_argument(
        "--episodes", type=int, default=None,
        help="episodes per scenario (default: the scenario file's episodes.count)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=None,
        help="first episode seed (default: the scenario file's episodes.seed)",
    )  # fmt: skip
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="NAME",
        help="these shipped scenarios only (default: every scenarios/*.toml at HEAD)",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], dest="sets", metavar="KEY.SUB=VALUE",
        help="an override of both commits' runs (repeatable), as vimpc run --set",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="vimpc run --workers")
    parser.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a figure known to change between the commits (fnmatch on its name, e.g. "
        "'model.bound.*'; repeatable): listed in the report, not counted as a difference",
    )
    parser.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance of floats")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance of floats")
    add_options(parser, OUT)
    return parser


QUICK = {
    "base": "HEAD",
    "head": "HEAD",
    "only": ["pendulum_swingup"],
    "episodes": 1,
    "sets": ["episodes.steps=3"],
}


def check_arguments(args: argparse.Namespace) -> tuple[str, str, list[str]]:
    """``(BASE hash, HEAD hash, scenario names)``; BadInput naming the argument otherwise."""
    if args.base is None or args.head is None:
        raise BadInput("BASE and HEAD are required: two commits, e.g. HEAD~1 HEAD")
    if args.episodes is not None and args.episodes < 1:
        raise BadInput(f"--episodes must be a positive integer, got {args.episodes}")
    if args.seed is not None and not 0 <= args.seed <= SEED_MAX:
        raise BadInput(f"--seed must be an integer in [0, {SEED_MAX}], got {args.seed}")
    if args.workers < 1:
        raise BadInput(f"--workers must be a positive integer, got {args.workers}")
    for option in ("rtol", "atol"):
        value = getattr(args, option)
        if not (math.isfinite(value) and value >= 0):
            raise BadInput(f"--{option} must be a non-negative finite number, got {value}")
    for item in args.sets:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--set takes KEY.SUB=VALUE (as vimpc run --set), got {item!r}")
        if key.strip() in ("episodes.count", "episodes.seed"):
            raise BadInput(f"--set {item!r}: give {key.strip()} by --episodes or --seed")
    base = resolve_commit("BASE", args.base)
    head = resolve_commit("HEAD", args.head)
    shipped = shipped_scenarios(head)
    if not shipped:
        raise BadInput(f"HEAD: commit {args.head!r} has no scenarios/*.toml")
    names = shipped
    if args.only:
        names = []
        for given in args.only:
            name = given.removesuffix(".toml")
            if name not in shipped:
                close_ = difflib.get_close_matches(name, shipped, n=1)
                hint = f"; did you mean {close_[0]!r}?" if close_ else ""
                raise BadInput(
                    f"--only: unknown scenario {given!r} (the scenarios at HEAD: "
                    f"{', '.join(shipped)}){hint}"
                )
            if name not in names:
                names.append(name)
    return base, head, names


def _rel(x: float) -> str:
    return "0" if x == 0 else f"{x:.3g}"


def _value(x: Any) -> str:
    return f"{x:.17g}" if isinstance(x, float) else repr(x)


def compare_scenario(
    name: str, checkouts: list[Checkout], sets: list[str], args, runs: Path
) -> tuple[dict[str, Any], Comparison | None]:
    """Run ``name`` at both commits and compare: ``(row of the table, comparison)``."""
    folders, notes, times = [], [], []
    for co in checkouts:
        if not (co.tree / "scenarios" / f"{name}.toml").exists():
            folders.append(None)
            notes.append(f"no scenarios/{name}.toml at {co.label}")
            times.append(0.0)
            continue
        folder, code, seconds, log = co.run(name, sets, args.workers, runs)
        folders.append(folder)
        times.append(seconds)
        if folder is None:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            notes.append(f"vimpc run failed at {co.label} (exit code {code}; {log}): {last[0]}")
    row: dict[str, Any] = {
        "scenario": name, "episodes": 0, "figures": 0, "array_values": 0,
        "largest_rel_diff": "", "where": "", "verdict": "DIFFERENT",
        "base_s": round(times[0], 1), "head_s": round(times[1], 1),
        "solve_median_ms": "", "solve_p95_ms": "", "median_ratio": "", "notes": "",
    }  # fmt: skip
    cmp = None
    if all(folders):
        files = [co.tree / "scenarios" / f"{name}.toml" for co in checkouts]
        if files[0].read_bytes() != files[1].read_bytes():
            notes.append("the scenario file differs between the commits")
        cmp = compare_runs(folders[0], folders[1], args.rtol, args.atol, tuple(args.expect))
        notes += run_notes(folders[0], folders[1])
        if cmp.expected:
            notes.append(f"{len(cmp.expected)} declared change(s) (--expect), listed below")
        row.update(timing_cells(folders[0], folders[1]))
        row.update(
            episodes=cmp.episodes, figures=cmp.figures, array_values=cmp.array_values,
            largest_rel_diff=_rel(cmp.largest), where=cmp.largest_where,
            verdict="same" if cmp.same else "DIFFERENT",
        )  # fmt: skip
    row["notes"] = "; ".join(notes)
    return row, cmp


def write_report(
    out: Path,
    rows: list[dict[str, Any]],
    comparisons: dict[str, Comparison],
    cmd: str,
    commits: dict[str, str],
    tolerance: str,
) -> str:
    """``out/compare.md`` and ``out/compare.csv``; returns the markdown table."""
    out.mkdir(parents=True, exist_ok=True)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    with open(out / "compare.csv", "w", newline="") as f:
        extra = {"base_commit": commits["BASE"], "head_commit": commits["HEAD"]}
        extra |= {"date": date, "command": cmd}
        writer = csv.DictWriter(f, fieldnames=[*rows[0], *extra])
        writer.writeheader()
        writer.writerows({**r, **extra} for r in rows)
    headers = {
        "scenario": "scenario",
        "episodes": "episodes",
        "figures": "figures compared",
        "array_values": "trajectory values compared",
        "largest_rel_diff": "largest relative difference",
        "where": "where",
        "verdict": "verdict",
        "base_s": "BASE run [s]",
        "head_s": "HEAD run [s]",
        "solve_median_ms": "solve median BASE / HEAD [ms]",
        "solve_p95_ms": "solve p95 BASE / HEAD [ms]",
        "median_ratio": "median HEAD / BASE",
        "notes": "notes",
    }
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    table = "\n".join(
        [
            "| " + " | ".join(headers.values()) + " |",
            "|" + "---|" * len(headers),
            *["| " + " | ".join(cell(r[k]) for k in headers) + " |" for r in rows],
        ]
    )
    lines = [
        "# Per-episode results of two commits",
        "",
        f"Made by `{cmd}` on {date}.",
        "",
        f"- BASE: `{commits['BASE']}`",
        f"- HEAD: `{commits['HEAD']}`",
        f"- {tolerance}",
        "",
        table,
        "",
    ]
    for name, cmp in comparisons.items():
        if cmp.expected:
            lines.append(f"{name}: {len(cmp.expected)} declared change(s) (--expect)")
            for d in cmp.expected[:20]:
                lines.append(f"- `{d.where}`: BASE {_value(d.base)}, HEAD {_value(d.head)}")
            lines.append("")
        if cmp.differences:
            lines.append(f"{name}: {len(cmp.differences)} figure(s) differ")
            for d in cmp.differences[:20]:
                lines.append(
                    f"- `{d.where}`: BASE {_value(d.base)}, HEAD {_value(d.head)} "
                    f"(relative difference {_rel(d.rel)})"
                    + (f"; {d.count} of its {d.size} entries differ" if d.size > 1 else "")
                )
            lines.append("")
    lines += skipped_text(comparisons)
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    return table


def skipped_text(comparisons: dict[str, Comparison]) -> list[str]:
    """The figures not compared, by name, with the patterns that chose them."""
    lines = []
    for kind, patterns, why in (
        ("timing", TIMING, "measured on the wall clock"),
        ("context", CONTEXT, "of the invocation, not the episodes"),
    ):
        names = sorted({n for c in comparisons.values() for n in c.skipped[kind]})
        lines.append(f"Not compared, {why} ({kind}: {', '.join(patterns)}):")
        lines.append("  " + (", ".join(names) if names else "(none met)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parse(parser, argv, OUT, quick=QUICK)
    try:
        base, head, names = check_arguments(args)
    except BadInput as exc:
        parser.error(str(exc))
    sets = list(args.sets)
    if args.episodes is not None:
        sets.append(f"episodes.count={args.episodes}")
    if args.seed is not None:
        sets.append(f"episodes.seed={args.seed}")
    cmd = command(__file__, args.argv)
    runs = args.out / "runs"
    temp = Path(tempfile.mkdtemp(prefix="vimpc-compare-"))
    checkouts = [
        Checkout("BASE", args.base, base, temp / "base"),
        Checkout("HEAD", args.head, head, temp / "head"),
    ]
    previous = _terminate_as_interrupt()
    rows, comparisons = [], {}
    try:
        for co in checkouts:
            co.create()
            co.preflight()
            print(f"{co.label} {co.sha} ({co.rev}): vimpc from {co.tree}", flush=True)
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name} ...", end=" ", flush=True)
            row, cmp = compare_scenario(name, checkouts, sets, args, runs)
            rows.append(row)
            if cmp is not None:
                comparisons[name] = cmp
            told = (
                f"{row['episodes']} episodes, {row['figures']} figures and "
                f"{row['array_values']} trajectory values, largest relative difference "
                f"{row['largest_rel_diff']} at {row['where']}"
                if cmp is not None
                else row["notes"]
            )
            print(f"{row['verdict']}: {told} (BASE {row['base_s']} s, HEAD {row['head_s']} s)")
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: {len(rows)} of {len(names)} scenarios compared (the runs, an "
            f"unfinished one among them, are in {runs})",
            file=sys.stderr,
        )
        return 130
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        for co in checkouts:
            co.remove()
        shutil.rmtree(temp, ignore_errors=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    tolerance = f"floats within rtol {args.rtol:g}, atol {args.atol:g}; NaN equals NaN"
    table = write_report(args.out, rows, comparisons, cmd, {"BASE": base, "HEAD": head}, tolerance)
    print()
    print(table)
    for line in skipped_text(comparisons):
        print(line)
    print(f"written: {args.out / 'compare.md'}, {args.out / 'compare.csv'}")
    return 0 if all(r["verdict"] == "same" for r in rows) else 1


def _terminate_as_interrupt():
    """SIGTERM ends the comparison as Ctrl-C does (the worktrees removed); the handler
    before, or None where none can be set (not the main thread)."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
