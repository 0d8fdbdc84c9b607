"""The body of ``vimpc sweep SWEEP.toml``: one scenario run under many override sets.

A sweep file is TOML::

    scenario = "pendulum_swingup"     # a path (relative to the sweep file) or a shipped name

    [sweep]
    name = "pendulum_tightening"      # the folder's name (default: the sweep file's name)
    out = "results/sweeps"            # the results root (default; --out wins)

    [set]                             # overrides of every configuration
    episodes.count = 20

    [grid]                            # key -> the values to try: the Cartesian product
    controller.tightening = ["none", "tube"]
    model.delta = [0.01, 0.05]

    [[runs]]                          # explicit override sets, each crossed with the grid
    model.family = "gp_vi"

Every configuration (a run's override set crossed with a point of the grid; without
``[[runs]]`` the grid alone, without ``[grid]`` the runs alone) is loaded and checked as a
scenario before any folder is made. A key may come from one of ``[set]`` (or ``--set``,
which wins over ``[set]``), ``[grid]`` and ``[[runs]]`` only.

The sweep writes ``<out>/<name>.partial/`` and renames it ``<out>/<name>/`` once every
configuration is complete. Inside: ``sweep.toml`` (the sweep file as given), ``sweep.json``
(the configurations, their overrides and the digests of their configurations; which are
missing or failed), and per configuration ``<id>/``: a ``vimpc run`` folder (see
:mod:`vimpc._run_dir`; ``<id>.partial/`` while unfinished, resumable on its own with
``vimpc run --resume``) and ``<id>.log`` (what its run printed). Once complete:
``summary.csv``, ``summary.md`` and ``summary.png`` compare the configurations. A Ctrl-C
stops the runs, keeps their finished episodes and leaves the ``.partial`` name;
``vimpc sweep --resume FOLDER`` runs only what is missing.

The models of the configurations are obtained first, in the sweep's process one at a time
(configurations that share a fit reuse the cached one; with ``--backend ray`` the distinct
fits the cache lacks first run at once as Ray tasks). Then the configurations' runs go to
a backend (:data:`BACKENDS`): a function of the tasks, the number of processes and a callback
for each outcome. :func:`run_local` runs them in local worker processes, one configuration
each at a time, its episodes in turn; :func:`run_ray` makes every missing episode a Ray task
and keeps each in its run folder here (:mod:`vimpc._ray_backend`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import math
import os
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vimpc import _run_dir
from vimpc._files import write_atomic
from vimpc.errors import ConfigError

try:
    import fcntl
except ImportError:  # not POSIX: no lock, two processes could resume one sweep
    fcntl = None

DEFAULT_SWEEP_OUT = "results/sweeps"
PARTIAL = _run_dir.PARTIAL
MANIFEST = "sweep.json"
SWEEP_FILE = "sweep.toml"
SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG = "summary.csv", "summary.md", "summary.png"
LOCK = ".lock"
TOP_KEYS = ("scenario", "sweep", "set", "grid", "runs")
#: The most configurations one sweep holds: each is checked as a scenario before any work
#: (about 10 ms each), then fitted or loaded and run, and gets its own results folder;
#: a grid of 10^6 checked for minutes without a word.
MAX_CONFIGURATIONS = 10_000
#: from this many configurations on, the checks show a progress bar
PROGRESS_FROM = 100
SWEEP_KEYS = ("name", "out")


# -- the sweep file ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration:
    """One configuration: its id, the overrides that tell it apart (``varying``) and every
    override it is loaded with, as ``key=value`` strings (``sets``)."""

    id: str
    varying: dict[str, Any]
    sets: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """A read and validated sweep file."""

    path: Path
    text: str
    scenario: Path
    name: str
    out: str
    keys: tuple[str, ...]  # the varying keys, in order
    configurations: tuple[Configuration, ...]
    configs: tuple[dict[str, Any], ...]  # the resolved configurations, in the same order


def _toml_value(v: Any) -> str:
    """A TOML value that :func:`vimpc.scenario.parse_override` reads back as ``v``."""
    from vimpc.scenario.schema import toml_value

    try:
        return toml_value(v)
    except TypeError:
        raise ConfigError(
            f"cannot use a {type(v).__name__} value as an override, got {v!r}"
        ) from None


def _table(raw: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(
            f"{path}: {key} must be a table ([{key}]), got {value!r:.80}; see the sweep "
            "file format in vimpc sweep -h"
        )
    return value


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        if path.is_dir():
            raise ConfigError(f"sweep file {str(path)!r} is a folder, not a sweep file")
        if not path.is_file():
            raise ConfigError(f"sweep file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"sweep file {str(path)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"sweep file {str(path)!r} cannot be read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"sweep file {str(path)!r} is not valid TOML: {exc}") from None


def _scenario_path(value: Any, path: Path) -> Path:
    from vimpc.scenario.catalog import find_scenario

    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{path}: scenario must be the path of a scenario file (relative to the sweep "
            f"file) or the name of a shipped scenario, got {value!r:.80}"
        )
    beside = path.parent / value
    if beside.is_file():
        return beside.resolve()
    return find_scenario(value).resolve()


def read_sweep(path: str | Path, cli_sets: Sequence[str] = (), progress: bool = False) -> Plan:
    """Read a sweep file and validate every configuration as a scenario (module text);
    a :class:`ConfigError` naming the key and the value otherwise, and for more than
    :data:`MAX_CONFIGURATIONS` before any is checked. Nothing is written. ``progress``: a
    progress bar on stderr while many configurations are checked."""
    from vimpc import scenario
    from vimpc._settings import unknown_key
    from vimpc.scenario.catalog import find_sweep
    from vimpc.scenario.checks import _NAME

    path = find_sweep(path)
    text, raw = _read(path)
    for key in raw:
        if key not in TOP_KEYS:
            raise ConfigError(f"{path}: " + str(unknown_key("", key, TOP_KEYS)))
    if "scenario" not in raw:
        raise ConfigError(
            f'{path}: scenario is missing; write scenario = "pendulum_swingup" (a shipped '
            "name) or the path of a scenario file"
        )
    scenario_file = _scenario_path(raw["scenario"], path)
    options = _table(raw, "sweep", path)
    for key in options:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"{path}: " + str(unknown_key("sweep.", key, SWEEP_KEYS)))
    name = options.get("name", path.stem)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: sweep.name must be a string, got {name!r:.80}")
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{path}: sweep.name = {name!r} must be one folder name: letters, digits, '-', '_' "
            "and '.', not '.' or '..' (the sweep is written to <out>/<sweep.name>/)"
        )
    out = options.get("out", DEFAULT_SWEEP_OUT)
    if not isinstance(out, str) or not out.strip():
        raise ConfigError(f"{path}: sweep.out must be a folder path, got {out!r:.80}")

    base = _run_dir.flat(_table(raw, "set", path))
    for item in cli_sets:
        keys, value = scenario.parse_override(item)
        base[".".join(keys)] = value  # the command line wins over [set]
    grid = _run_dir.flat(_table(raw, "grid", path))
    for key, values in grid.items():
        if not isinstance(values, list):
            raise ConfigError(
                f"{path}: grid.{key} must be a list of the values to try, got {values!r:.80}; "
                f"write {key} = [{_toml_value(values)}] or move it to [set]"
            )
        if not values:
            raise ConfigError(
                f"{path}: grid.{key} = [] gives no configuration; list at least one value "
                "or remove the key"
            )
        shown = [_toml_value(v) for v in values]
        if len(set(shown)) != len(shown):
            twice = next(s for s in shown if shown.count(s) > 1)
            raise ConfigError(
                f"{path}: grid.{key} lists {twice} twice ({key} = {_toml_value(values)}); "
                "each value once"
            )
        if key in base:
            raise ConfigError(
                f"{path}: {key} is both in the grid ({_toml_value(values)}) and set for every "
                f"configuration ({_toml_value(base[key])}, [set] or --set); keep one"
            )
    runs = raw.get("runs", [{}])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ConfigError(
            f"{path}: runs must be a list of tables ([[runs]] blocks of overrides), got "
            f"{runs!r:.80}"
        )
    if not runs:
        raise ConfigError(f"{path}: runs = [] gives no configuration; remove it or add a run")
    runs = [_run_dir.flat(r) for r in runs]
    for i, run in enumerate(runs):
        for key, value in run.items():
            where = (
                "in the grid"
                if key in grid
                else ("set for every configuration" if key in base else None)
            )
            if where is not None:
                raise ConfigError(
                    f"{path}: runs[{i}] sets {key} = {_toml_value(value)}, which is also "
                    f"{where}; keep one"
                )
    keys: list[str] = []
    for key in [k for r in runs for k in r] + list(grid):
        if key not in keys:
            keys.append(key)

    total = len(runs) * math.prod(len(values) for values in grid.values())
    if total > MAX_CONFIGURATIONS:
        sizes = " x ".join(
            [f"{len(runs)} runs"] * (len(runs) > 1)
            + [f"{len(v)} values of {k}" for k, v in grid.items()]
        )
        raise ConfigError(
            f"{path}: the sweep has {total} configurations ({sizes}), more than the "
            f"{MAX_CONFIGURATIONS} one sweep holds (vimpc._sweep_command.MAX_CONFIGURATIONS): "
            "each is checked, run and written apart; list fewer values, or split it into "
            "several sweeps"
        )
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    varying = [{**run, **combo} for run in runs for combo in combos]
    width = max(2, len(str(len(varying) - 1)))
    seen: dict[str, str] = {}
    configurations, configs = [], []
    bar = None
    if progress and total >= PROGRESS_FROM:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="checking configurations", unit="cfg", file=sys.stderr)
    try:
        for i, over in enumerate(varying):
            if bar is not None:
                bar.update(1)
            cid = f"c{i:0{width}d}"
            sets = tuple(f"{k}={_toml_value(v)}" for k, v in {**base, **over}.items())
            try:
                cfg = scenario.load_scenario(scenario_file, list(sets))
            except ConfigError as exc:
                shown = (
                    ", ".join(f"{k} = {_toml_value(v)}" for k, v in over.items()) or "no overrides"
                )
                raise ConfigError(
                    f"{path}: configuration {cid} ({shown}) is not a valid scenario: {exc}"
                ) from None
            digest = _run_dir.text_digest(scenario.dump_toml(cfg))
            if digest in seen:
                raise ConfigError(
                    f"{path}: configurations {seen[digest]} and {cid} resolve to the same "
                    f"configuration ({', '.join(f'{k} = {_toml_value(v)}' for k, v in over.items())}"
                    "); remove the duplicate run or grid value"
                )
            seen[digest] = cid
            configurations.append(Configuration(cid, over, sets))
            configs.append(cfg)
    finally:
        if bar is not None:
            bar.close()
    return Plan(
        path=path,
        text=text,
        scenario=scenario_file,
        name=name,
        out=out,
        keys=tuple(keys),
        configurations=tuple(configurations),
        configs=tuple(configs),
    )


# -- the local backend ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One configuration's run: its folder (the ``.partial`` one) and how to run it."""

    id: str
    stage: str
    log: str
    refit: bool
    plots: bool


@dataclass(frozen=True)
class Outcome:
    """What a task ended with: the run's exit code, or the error that stopped it."""

    id: str
    code: int | None
    error: str | None


def run_task(task: Task) -> Outcome:
    """Run (or finish) one configuration's run folder, as ``vimpc run --resume`` does; its
    printed output goes to ``task.log``. An error is returned, not raised (a Ctrl-C is)."""
    # line by line, so a worker ended by a Ctrl-C keeps what its run printed
    with open(task.log, "a", encoding="utf-8", buffering=1) as log:
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                code = _finish_run(Path(task.stage), task)
            return Outcome(task.id, code, None)
        except Exception as exc:
            from vimpc._interrupt import interrupted

            if interrupted():  # an error a Ctrl-C caused inside CasADi
                raise KeyboardInterrupt from None
            print(f"error: {type(exc).__name__}: {exc}", file=log)
            return Outcome(task.id, None, f"{type(exc).__name__}: {exc}")


def _open_run(stage: Path) -> tuple[dict[str, Any], dict[str, Any], Any] | None:
    """``(cfg, manifest, lock)`` of a configuration's unfinished run folder, locked and
    checked as ``vimpc run --resume`` checks it; ``None`` when the run is complete (a
    complete folder not yet renamed is renamed here)."""
    from vimpc import pipeline, scenario
    from vimpc._run_command import _check_same_run

    final = stage.with_name(stage.name[: -len(PARTIAL)])
    if (final / _run_dir.METRICS).is_file():
        return None
    lock = _run_dir.Lock(stage, wait=False)
    try:
        if (stage / _run_dir.METRICS).is_file():  # complete, but not yet renamed
            (stage / _run_dir.MANIFEST).unlink(missing_ok=True)
            lock.release(remove=True)
            os.rename(stage, final)
            return None
        manifest = _run_dir.read_manifest(stage)
        if manifest is None:
            raise ConfigError(f"{str(stage)!r} has no {_run_dir.MANIFEST}; remove the folder")
        cfg = scenario.load_scenario(stage / _run_dir.CONFIG)
        _check_same_run(stage, manifest, cfg, pipeline)
        count = manifest["episodes"]
        _run_dir.tidy(stage, count)
        _run_dir.check_episodes(stage, _run_dir.finished(stage, count), manifest["seeds"])
    except BaseException:
        lock.release()
        raise
    return cfg, manifest, lock


def _finish_run(stage: Path, task: Task) -> int:
    from vimpc._run_command import _session

    opened = _open_run(stage)
    if opened is None:
        return 0
    cfg, manifest, lock = opened
    final = stage.with_name(stage.name[: -len(PARTIAL)])
    args = argparse.Namespace(
        refit=task.refit and manifest["model"] is None,
        quiet=True,
        no_plots=not task.plots,
        workers=1,
    )
    return _session(cfg, args, time.perf_counter(), final, stage, manifest, lock, new=False)


def _obtain_models_first(
    stage: Path, cid: str, refit: bool, refitted: set[str], fresh: set[str] | None = None
) -> Outcome:
    """Obtain (load, build, take from the cache or fit) the models of configuration ``cid``
    whose run has none yet and record them in its manifest, as its run would; ``--refit``
    fits each cache entry once per sweep (``refitted``). ``fresh``: the cached files this
    sweep has just fitted elsewhere (Ray tasks), recorded as fitted now by the first
    configuration that uses each. An error is returned, not raised."""
    from vimpc import pipeline, scenario
    from vimpc._run_command import _obtain_models

    run_stage = stage / (cid + PARTIAL)
    if not run_stage.is_dir() or (run_stage / _run_dir.METRICS).is_file():
        return Outcome(cid, None, None)
    with open(stage / f"{cid}.log", "a", encoding="utf-8", buffering=1) as log:
        lock = None
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                lock = _run_dir.Lock(run_stage, wait=False)
                manifest = _run_dir.read_manifest(run_stage)
                if manifest is None or manifest.get("model") is not None:
                    return Outcome(cid, None, None)
                cfg = scenario.load_scenario(run_stage / _run_dir.CONFIG)
                key = pipeline.cache_key(pipeline.fit_config(cfg, 0))
                again = refit and key not in refitted
                refitted.add(key)
                args = argparse.Namespace(refit=again, quiet=True)
                records = _obtain_models(cfg, pipeline.build_env(cfg), args, print)
                for record in records:
                    if fresh is not None and record["path"] in fresh:
                        fresh.discard(record["path"])
                        print(f"(fitted as a Ray task: {record['path']})")
                        record.update(fitted_now=True, reused_cached_fit=False)
                manifest["model"] = records[0]
                if len(records) > 1:
                    manifest["fits"] = records
                _run_dir.write_manifest(run_stage, manifest)
            return Outcome(cid, None, None)
        except Exception as exc:
            from vimpc._interrupt import interrupted

            if interrupted():
                raise KeyboardInterrupt from None
            print(f"error: {type(exc).__name__}: {exc}", file=log)
            return Outcome(cid, None, f"{type(exc).__name__}: {exc}")
        finally:
            if lock is not None:
                lock.release()


def _init_worker() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the workers


def run_local(
    tasks: Sequence[Task],
    workers: int,
    on_done: Callable[[Outcome], None],
    session: dict[str, Any] | None = None,
    on_episode: Callable[[], None] | None = None,
) -> list[Outcome]:
    """Run ``tasks`` in this process (``workers == 1``) or in ``workers`` spawned processes;
    ``on_done`` gets each outcome in this process as it comes. A Ctrl-C or an error in this
    process ends the workers at once (their runs keep what they finished). ``session`` and
    ``on_episode`` are not used: each run keeps its episodes in its own process."""
    from vimpc.pipeline import in_processes

    outcomes: list[Outcome] = []
    if workers <= 1:
        for task in tasks:
            outcomes.append(run_task(task))
            on_done(outcomes[-1])
        return outcomes

    def done(outcome: Outcome) -> None:
        outcomes.append(outcome)
        on_done(outcome)

    in_processes(run_task, tasks, workers, done, "configuration", initializer=_init_worker)
    return outcomes


def run_ray(
    tasks: Sequence[Task],
    workers: int,
    on_done: Callable[[Outcome], None],
    session: dict[str, Any] | None = None,
    on_episode: Callable[[], None] | None = None,
) -> list[Outcome]:
    """Run ``tasks`` on the open Ray cluster (:mod:`vimpc._ray_backend`), one Ray task per
    missing episode, at most ``workers`` at once (the count used goes to ``session``;
    ``on_episode()`` after each episode kept); see :func:`vimpc._ray_backend.run_sweep`."""
    from vimpc._ray_backend import run_sweep

    return run_sweep(tasks, workers, on_done, session, on_episode)


#: the backends by name: ``backend(tasks, workers, on_done, session, on_episode=) -> outcomes``
BACKENDS: dict[str, Callable[..., list[Outcome]]] = {
    "local": run_local,
    "ray": run_ray,
}


# -- the sweep folder ----------------------------------------------------------------------------


class _Lock:
    """The sweep folder's ``flock``, held while a process runs the sweep."""

    def __init__(self, stage: Path) -> None:
        self._handle = open(stage / LOCK, "a+b")  # noqa: SIM115  (held for the sweep's life)
        if fcntl is not None:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._handle.close()
                raise ConfigError(
                    f"the sweep in {str(stage)!r} is being run by another vimpc process right "
                    "now; wait for it to end (or stop it)"
                ) from None

    def release(self) -> None:
        self._handle.close()


def _write_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    write_atomic(stage / MANIFEST, json.dumps(manifest, indent=2) + "\n", overwrite=True)


def _prepare(stage: Path, entry: dict[str, Any], cfg: dict[str, Any], scenario_file: str) -> None:
    """Create a configuration's run folder as ``vimpc run`` does before its episodes."""
    from vimpc import scenario
    from vimpc._run_command import _seeds, _vimpc_version

    run_stage = stage / (entry["id"] + PARTIAL)
    run_stage.mkdir()
    text = scenario.dump_toml(cfg)
    write_atomic(run_stage / _run_dir.CONFIG, text)
    count = cfg["episodes"]["count"]
    _run_dir.write_manifest(
        run_stage,
        {
            "complete": False,
            "scenario": cfg["scenario"]["name"],
            "config_sha256": _run_dir.text_digest(text),
            "scenario_file": scenario_file,
            "overrides": list(entry["sets"]),
            "episodes": count,
            "seeds": _seeds(cfg),
            "finished": 0,
            "missing": list(range(count)),
            "model": None,
            "vimpc": _vimpc_version(),
            "sessions": [],
            "resume": _run_dir.resume_command(run_stage),
        },
    )


def _status(stage: Path, cid: str) -> str:
    if (stage / cid / _run_dir.METRICS).is_file():
        return "complete"
    if (stage / (cid + PARTIAL)).is_dir():
        return "unfinished"
    return "not begun"


def resume_command(stage: Path) -> str:
    return f"vimpc sweep --resume {stage}"


def cmd_sweep(args: argparse.Namespace) -> int:
    from vimpc._run_command import _check_backend, _usable_folder

    if args.workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {args.workers}")
    _check_backend(args)
    if args.resume is not None:
        return _resume(args)
    if args.sweep is None:
        raise ConfigError(
            "vimpc sweep needs a sweep file (SWEEP.toml), or --resume FOLDER to finish an "
            "unfinished sweep"
        )
    plan = read_sweep(args.sweep, args.set or [], progress=not args.quiet)
    root = Path(args.out if args.out is not None else plan.out)
    _usable_folder(root, "--out" if args.out is not None else "sweep.out")
    final, stage = root / plan.name, root / (plan.name + PARTIAL)
    for folder in (final, stage):
        if folder.exists():
            raise ConfigError(_taken(folder, plan.name))
    with _backend(args):  # the Ray cluster, before any folder is made
        return _new_sweep(args, plan, final, stage)


def _new_sweep(args: argparse.Namespace, plan: Plan, final: Path, stage: Path) -> int:
    from vimpc import __version__

    try:
        stage.mkdir()
    except FileExistsError:  # another sweep took the name this instant
        raise ConfigError(_taken(stage, plan.name)) from None
    lock = _Lock(stage)
    try:
        write_atomic(stage / SWEEP_FILE, plan.text)
        entries = [
            {
                "id": c.id,
                "overrides": c.varying,
                "sets": list(c.sets),
                "config_sha256": _config_digest(cfg),
            }
            for c, cfg in zip(plan.configurations, plan.configs, strict=True)
        ]
        manifest = {
            "complete": False,
            "sweep_file": str(plan.path),
            "scenario_file": str(plan.scenario),
            "keys": list(plan.keys),
            "configurations": entries,
            "vimpc": __version__,
            "sessions": [],
            "resume": resume_command(stage),
        }
        _write_manifest(stage, manifest)
        print(
            f"vimpc sweep {plan.name}: {len(entries)} configurations of {plan.scenario.name} "
            f"in {stage}"
        )
    except BaseException:
        lock.release()
        import shutil

        shutil.rmtree(stage, ignore_errors=True)
        raise
    return _session(args, final, stage, manifest, list(plan.configs), lock)


def _taken(folder: Path, name: str) -> str:
    what = "an unfinished sweep" if folder.name.endswith(PARTIAL) else "a sweep"
    fix = (
        f"resume it with {resume_command(folder)}"
        if folder.name.endswith(PARTIAL)
        else "move it away"
    )
    return (
        f"the sweep folder {str(folder)!r} holds {what} already (sweep.name = {name!r}); two "
        f"sweeps cannot share a folder: {fix}, or give another sweep.name or --out"
    )


def _config_digest(cfg: dict[str, Any]) -> str:
    from vimpc import scenario

    return _run_dir.text_digest(scenario.dump_toml(cfg))


def _resume(args: argparse.Namespace) -> int:
    if args.out is not None:
        raise ConfigError(
            f"--out does not apply with --resume: the sweep goes on in {args.resume!r}; leave "
            "out --out"
        )
    if args.refit:
        raise ConfigError(
            "--refit cannot be combined with --resume: the finished episodes used the models "
            "the runs recorded; start a new sweep to fit again"
        )
    if args.set and args.sweep is None:
        raise ConfigError(
            "--set with --resume needs the sweep file too (to check the configurations are "
            "the recorded ones); leave out --set, or give SWEEP.toml with the same --set"
        )
    path = Path(args.resume).resolve()
    if path.name.endswith(PARTIAL):
        final, stage = path.with_name(path.name[: -len(PARTIAL)]), path
    else:
        final, stage = path, path.with_name(path.name + PARTIAL)
    if not stage.is_dir():
        if (final / SUMMARY_CSV).is_file():
            raise ConfigError(
                f"--resume: {str(final)!r} is a complete sweep (it has {SUMMARY_CSV}); there "
                "is nothing to resume"
            )
        raise ConfigError(
            f"--resume: {args.resume!r} is no unfinished sweep folder (no {str(stage)!r}); "
            "give the folder vimpc sweep printed"
        )
    if final.exists():
        raise ConfigError(
            f"--resume: {str(final)!r} exists beside {str(stage)!r}; the sweep cannot be "
            "finished under its name. Move one of them away first"
        )
    with _backend(args):  # the Ray cluster, before the sweep is touched
        return _resume_in(args, final, stage)


def _backend(args: argparse.Namespace):
    from vimpc._run_command import _backend

    return _backend(args)


def _resume_in(args: argparse.Namespace, final: Path, stage: Path) -> int:
    from vimpc import scenario

    lock = _Lock(stage)
    try:
        try:
            manifest = json.loads((stage / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"--resume: {str(stage / MANIFEST)!r} cannot be read ({exc}); the folder is "
                "not a sweep that can be resumed"
            ) from None
        entries = manifest["configurations"]
        if args.sweep is not None:
            plan = read_sweep(args.sweep, args.set or [], progress=not args.quiet)
            given = [(c.id, list(c.sets)) for c in plan.configurations]
            if given != [(e["id"], e["sets"]) for e in entries]:
                raise ConfigError(
                    f"--resume: {args.sweep!r} (with its --set) gives other configurations "
                    f"than the sweep in {str(stage)!r} recorded; resume without the sweep "
                    "file (its own record is used) or start a new sweep"
                )
        configs = []
        for e in entries:
            # a configuration not begun is loaded again, and must be what was recorded
            if _status(stage, e["id"]) != "not begun":
                configs.append(None)
                continue
            cfg = scenario.load_scenario(manifest["scenario_file"], e["sets"])
            if _config_digest(cfg) != e["config_sha256"]:
                raise ConfigError(
                    f"--resume: configuration {e['id']} of {str(stage)!r} resolves to another "
                    f"configuration than recorded ({manifest['scenario_file']!r} changed "
                    "since the sweep began?); restore it or start a new sweep"
                )
            configs.append(cfg)
        done = sum(_status(stage, e["id"]) == "complete" for e in entries)
        print(
            f"resuming {stage}: {done} of {len(entries)} configurations complete, running the "
            f"{len(entries) - done} missing"
        )
    except BaseException:
        lock.release()
        raise
    return _session(args, final, stage, manifest, configs, lock)


def _session(args, final: Path, stage: Path, manifest, configs, lock) -> int:
    """Run the sweep's missing configurations, then write its summary and rename it."""
    from tqdm import tqdm

    from vimpc.pipeline import usable_cores, worker_count

    started = time.perf_counter()
    entries = manifest["configurations"]
    session: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds")}
    manifest["sessions"].append(session)
    failures: dict[str, str] = {}
    bar = None
    try:
        for e, cfg in zip(entries, configs, strict=True):
            if _status(stage, e["id"]) == "not begun":
                _prepare(stage, e, cfg, manifest["scenario_file"])
        todo = [e["id"] for e in entries if _status(stage, e["id"]) != "complete"]
        backend = getattr(args, "backend", "local")
        if backend == "ray":  # Ray tasks are episodes and fits; their count is capped there
            from vimpc import _ray_backend

            workers = args.workers
            session.update(backend="ray", ray_cluster=_ray_backend.describe())
        else:
            workers, why = worker_count(args.workers, len(todo))
            if todo and why is not None:
                # the count is of configurations here, where worker_count says episodes
                print(
                    f"--workers {args.workers} capped to {workers} ({why})".replace(
                        "episode", "run"
                    )
                )
        session.update(workers_requested=args.workers, processes=workers, cores=usable_cores())
        bar = tqdm(
            total=len(entries),
            initial=len(entries) - len(todo),
            desc="configurations",
            unit="run",
            disable=args.quiet,
        )

        kept: dict[str, int] = {}  # with Ray: the episodes kept so far, on the bar

        def episode_kept() -> None:
            kept["episodes"] = kept.get("episodes", 0) + 1
            bar.set_postfix(failed=len(failures), **kept)

        def done(outcome: Outcome) -> None:
            if outcome.error is not None:
                failures[outcome.id] = outcome.error
            bar.update()
            bar.set_postfix(failed=len(failures), **kept)
            _record(stage, manifest, failures)

        # the models first, here and one at a time: configurations that share a fit (other
        # seeds, controller settings) reuse the cached one instead of fitting it at once
        # in several workers
        refitted: set[str] = set()
        fresh: set[str] = set()
        if backend == "ray":  # the fits of different settings at once, as Ray tasks
            from vimpc import _ray_backend

            fresh, failed = _ray_backend.fit_sweep(
                stage, todo, bool(args.refit), refitted, args.workers
            )
            for cid, error in failed.items():
                done(Outcome(cid, None, error))
        for cid in todo:
            if cid in failures:
                continue
            outcome = _obtain_models_first(stage, cid, bool(args.refit), refitted, fresh)
            if outcome.error is not None:
                done(outcome)
        tasks = [
            Task(
                id=cid,
                stage=str(stage / (cid + PARTIAL)),
                log=str(stage / f"{cid}.log"),
                refit=False,
                plots=not args.no_plots,
            )
            for cid in todo
            if cid not in failures
        ]
        BACKENDS[backend](tasks, workers, done, session, on_episode=episode_kept)
        bar.close()
        if failures:
            session["ended"] = f"{len(failures)} configurations failed"
            _record(stage, manifest, failures)
            lines = "\n  ".join(f"{cid}: {why:.300}" for cid, why in failures.items())
            print(
                f"vimpc: {len(failures)} of {len(entries)} configurations failed:\n  {lines}\n"
                f"the sweep in {stage} stays incomplete (each failed run's log is "
                f"<id>.log there); fix the cause and run only what is missing: "
                f"{resume_command(stage)}",
                file=sys.stderr,
            )
            return 2
        rows = summary_rows(stage, manifest)
        write_atomic(stage / SUMMARY_CSV, summary_csv(rows, manifest["keys"]), overwrite=True)
        write_atomic(stage / SUMMARY_MD, summary_markdown(rows, manifest), overwrite=True)
        if not args.no_plots:
            summary_figure(rows, stage / SUMMARY_PNG, manifest)
        session["ended"] = "complete"
        session["wall_time_s"] = time.perf_counter() - started
        manifest["complete"] = True
        manifest.pop("resume", None)
        manifest["missing"], manifest["failed"] = [], {}
        _write_manifest(stage, manifest)
        (stage / LOCK).unlink()
        os.rename(stage, final)
    except BaseException as exc:
        if bar is not None:
            bar.close()
        if not final.exists():
            session["ended"] = (
                "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc!r:.300}"
            )
            session["wall_time_s"] = time.perf_counter() - started
            with contextlib.suppress(Exception):
                _record(stage, manifest, failures)
            print(
                f"vimpc: the sweep in {stage} is kept, marked incomplete ({MANIFEST} lists "
                f"the missing configurations); to run only those: {resume_command(stage)}",
                file=sys.stderr,
            )
        raise
    finally:
        lock.release()
    print((final / SUMMARY_MD).read_text(encoding="utf-8"), end="")
    print(f"results: {final}")
    return 0


def _record(stage: Path, manifest: dict[str, Any], failures: dict[str, str]) -> None:
    entries = manifest["configurations"]
    manifest["missing"] = [e["id"] for e in entries if _status(stage, e["id"]) != "complete"]
    manifest["failed"] = dict(failures)
    _write_manifest(stage, manifest)


# -- the summary ---------------------------------------------------------------------------------

#: the summary's figures: (column, its 95 % interval column or None, heading)
FIGURES = (
    ("success_rate", "success_rate_ci95", "success rate"),
    ("violation_rate", "violation_rate_ci95", "episodes with a violation"),
    ("min_margin_mean", "min_margin_mean_ci95", "mean episode minimum margin"),
    ("cost_mean", "cost_mean_ci95", "mean episode cost"),
    ("solve_time_median_ms", None, "median solve time [ms]"),
    ("failed_solves", None, "failed solves"),
    ("late_solves", None, "late solves"),
)


def summary_rows(folder: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per configuration from its run's ``metrics.json``: its overrides, episodes,
    outcome and :data:`FIGURES` with their 95 % intervals (Wilson for rates, percentile
    bootstrap over episodes for means)."""
    from vimpc.closedloop.metrics import bootstrap_interval

    rows = []
    for e in manifest["configurations"]:
        metrics = json.loads((folder / e["id"] / _run_dir.METRICS).read_text())
        row: dict[str, Any] = {"configuration": e["id"], **e["overrides"]}
        row["episodes"] = metrics["episodes"]
        row["outcome"] = metrics["outcome"]
        costs = [m["cost"] for m in metrics["per_episode"] if "cost" in m]
        metrics["cost_mean_ci95"] = bootstrap_interval(costs)
        for key, ci, _ in FIGURES:
            row[key] = metrics.get(key, math.nan)
            if ci is not None:
                row[ci] = metrics.get(ci, [math.nan, math.nan])
        rows.append(row)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _toml_value(value) if isinstance(value, (list, dict)) else str(value)
    if isinstance(value, int):
        return str(value)
    return "nan" if math.isnan(value) else f"{value:.4g}"


def summary_csv(rows: list[dict[str, Any]], keys: Sequence[str]) -> str:
    """The rows as CSV: each interval as ``<name>_ci95_low`` and ``_high`` columns."""
    header = ["configuration", *keys, "episodes", "outcome"]
    for key, ci, _ in FIGURES:
        header.append(key)
        if ci is not None:
            header += [f"{ci}_low", f"{ci}_high"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        line = [row["configuration"], *[_fmt(row.get(k, "")) for k in keys]]
        line += [row["episodes"], row["outcome"]]
        for key, ci, _ in FIGURES:
            value = row[key]
            line.append(value if isinstance(value, int) else repr(float(value)))
            if ci is not None:
                line += [repr(float(row[ci][0])), repr(float(row[ci][1]))]
        writer.writerow(line)
    return buffer.getvalue()


def summary_markdown(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> str:
    keys = manifest["keys"]
    header = ["configuration", *keys, "episodes", "outcome"] + [h for _, _, h in FIGURES]
    lines = [
        f"Sweep of {Path(manifest['scenario_file']).name} ({len(rows)} configurations); "
        "[95 % intervals]: Wilson for rates, percentile bootstrap over episodes for means.",
        _sharing(manifest),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells = [row["configuration"], *[_fmt(row.get(k, "")) for k in keys]]
        cells += [str(row["episodes"]), row["outcome"]]
        for key, ci, _ in FIGURES:
            text = _fmt(row[key])
            if ci is not None and not math.isnan(row[ci][0]):
                text += f" [{_fmt(row[ci][0])}, {_fmt(row[ci][1])}]"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _sharing(manifest: dict[str, Any]) -> str:
    """How many configurations ran at once while the solve times were measured."""
    ran = [s for s in manifest["sessions"] if "processes" in s]
    counts = sorted({s["processes"] for s in ran}) or [1]
    cores = max((s.get("cores", 1) for s in ran), default=1)
    what = "configuration"
    if any(s.get("backend") == "ray" for s in ran):
        what = "configuration or Ray episode" if any("backend" not in s for s in ran) else "Ray"
    return (
        f"Solve times were measured with {' or '.join(map(str, counts))} {what} "
        f"process{'es' if counts[-1] > 1 else ''} at once on {cores} usable "
        f"core{'s' if cores != 1 else ''} (vimpc sweep --workers)."
    )


def summary_figure(rows: list[dict[str, Any]], path: Path, manifest: dict[str, Any]) -> None:
    """The configurations side by side: each figure with an interval, as a point and bar."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [f for f in FIGURES if f[1] is not None]
    fig = Figure(figsize=(3.2 * len(panels), 3.4 + 0.12 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    labels = [
        r["configuration"]
        + ("\n" + ", ".join(f"{k}={_fmt(r[k])}" for k in manifest["keys"] if k in r))
        for r in rows
    ]
    y = np.arange(len(rows))
    for ax, (key, ci, heading) in zip(axes, panels, strict=True):
        value = np.array([float(r[key]) for r in rows])
        low = np.array([float(r[ci][0]) for r in rows])
        high = np.array([float(r[ci][1]) for r in rows])
        has = np.isfinite(low) & np.isfinite(value)
        err = np.vstack([value - low, high - value])
        ax.errorbar(value[has], y[has], xerr=err[:, has], fmt="o", color="C0", capsize=3)
        ax.plot(value[~has], y[~has], "o", color="C0", mfc="none")
        if not np.any(np.isfinite(value)):
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(heading, fontsize=9)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if ax is axes[0] else [], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.ticklabel_format(axis="x", useOffset=False)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(
        f"{Path(manifest['scenario_file']).stem}: {len(rows)} configurations, 95 % intervals "
        "(open: no interval)",
        fontsize=10,
    )
    write_atomic(path, lambda h: fig.savefig(h, format="png", dpi=110), overwrite=True)
