"""A sweep from Python: :func:`run_sweep` runs one scenario under many override sets, as
``vimpc sweep SWEEP.toml`` does.

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
:mod:`vimpc.runs.store`; ``<id>.partial/`` while unfinished, resumable on its own with
``vimpc run --resume``) and ``<id>.log`` (what its run printed). Once complete:
``summary.csv``, ``summary.md`` and ``summary.png`` compare the configurations. A Ctrl-C
stops the runs, keeps their finished episodes and leaves the ``.partial`` name;
``vimpc sweep --resume FOLDER`` runs only what is missing.

The configurations go in their order, in batches of at least as many configurations and as
many distinct fits as there are workers: first the batch's models are obtained, in the sweep's process one at a time
(configurations that share a fit reuse the cached one; with ``--backend ray`` the distinct
fits the cache lacks first run at once as Ray tasks), then its runs go to a backend
(:class:`vimpc.runs.backends.Backend`): local worker processes run one configuration each
at a time, its episodes in turn; Ray makes every missing episode a Ray task and keeps each
in its run folder here (:mod:`vimpc.runs.ray`). So a long sweep finishes configurations as
it goes, from the first, rather than fitting every model before any episode: what a stop
leaves is whole configurations, and a summary of the folder can be read at any time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vimpc._files import write_atomic
from vimpc.errors import ConfigError
from vimpc.runs import store
from vimpc.runs.backends import backend_for
from vimpc.runs.session import Options
from vimpc.runs.store import (
    DEFAULT_SWEEP_OUT,
    PARTIAL,
    SUMMARY_CSV,
    SUMMARY_MD,
    SUMMARY_PNG,
    SWEEP_FILE,
    summary_csv,
    summary_figure,
    summary_markdown,
    summary_rows,
    toml_value,
)
from vimpc.runs.tasks import Outcome, Task, obtain_models_first

__all__ = ["Plan", "SweepResult", "read_sweep", "run_sweep"]

MANIFEST = store.SWEEP_MANIFEST
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
    from vimpc.scenario.load import anchor_paths

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

    # a file a sweep file names (an MJCF) is relative to the sweep file, as a scenario's is
    base = anchor_paths(store.flat(_table(raw, "set", path)), path.parent)
    for item in cli_sets:
        keys, value = scenario.parse_override(item)
        base[".".join(keys)] = value  # the command line wins over [set]
    grid = anchor_paths(store.flat(_table(raw, "grid", path)), path.parent)
    for key, values in grid.items():
        if not isinstance(values, list):
            raise ConfigError(
                f"{path}: grid.{key} must be a list of the values to try, got {values!r:.80}; "
                f"write {key} = [{toml_value(values)}] or move it to [set]"
            )
        if not values:
            raise ConfigError(
                f"{path}: grid.{key} = [] gives no configuration; list at least one value "
                "or remove the key"
            )
        shown = [toml_value(v) for v in values]
        if len(set(shown)) != len(shown):
            twice = next(s for s in shown if shown.count(s) > 1)
            raise ConfigError(
                f"{path}: grid.{key} lists {twice} twice ({key} = {toml_value(values)}); "
                "each value once"
            )
        if key in base:
            raise ConfigError(
                f"{path}: {key} is both in the grid ({toml_value(values)}) and set for every "
                f"configuration ({toml_value(base[key])}, [set] or --set); keep one"
            )
    runs = raw.get("runs", [{}])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ConfigError(
            f"{path}: runs must be a list of tables ([[runs]] blocks of overrides), got "
            f"{runs!r:.80}"
        )
    if not runs:
        raise ConfigError(f"{path}: runs = [] gives no configuration; remove it or add a run")
    runs = [anchor_paths(store.flat(r), path.parent) for r in runs]
    for i, run in enumerate(runs):
        for key, value in run.items():
            where = (
                "in the grid"
                if key in grid
                else ("set for every configuration" if key in base else None)
            )
            if where is not None:
                raise ConfigError(
                    f"{path}: runs[{i}] sets {key} = {toml_value(value)}, which is also "
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
            f"{MAX_CONFIGURATIONS} one sweep holds (vimpc.runs.sweep.MAX_CONFIGURATIONS): "
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
            sets = tuple(f"{k}={toml_value(v)}" for k, v in {**base, **over}.items())
            try:
                cfg = scenario.load_scenario(scenario_file, list(sets))
            except ConfigError as exc:
                shown = (
                    ", ".join(f"{k} = {toml_value(v)}" for k, v in over.items()) or "no overrides"
                )
                raise ConfigError(
                    f"{path}: configuration {cid} ({shown}) is not a valid scenario: {exc}"
                ) from None
            digest = store.text_digest(scenario.dump_toml(cfg))
            if digest in seen:
                raise ConfigError(
                    f"{path}: configurations {seen[digest]} and {cid} resolve to the same "
                    f"configuration ({', '.join(f'{k} = {toml_value(v)}' for k, v in over.items())}"
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


@dataclass(frozen=True)
class SweepResult:
    """What a sweep ended with: its folder (the ``.partial`` one while incomplete), the
    summary's rows (``None`` while incomplete), the configurations that failed
    (``{id: error}``) and the exit status (0 complete, 2 configurations failed)."""

    folder: Path
    rows: list[dict[str, Any]] | None
    failed: dict[str, str]
    exit_status: int


def run_sweep(
    sweep: str | os.PathLike[str] | None,
    *,
    overrides: Sequence[str] = (),
    out: str | os.PathLike[str] | None = None,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    refit: bool = False,
    plots: bool = True,
    progress: bool = True,
    resume: str | os.PathLike[str] | None = None,
) -> SweepResult:
    """Run every configuration of a sweep file, as ``vimpc sweep`` does, and compare them.

    ``sweep``: a sweep ``.toml`` file (the format is this module's text) or the name of a
    shipped one (``None`` with ``resume``); ``overrides``: ``"key.sub=value"`` strings set
    in every configuration (they win over the file's ``[set]``). Every configuration is
    checked before any work; each runs as :func:`vimpc.runs.run_scenario` would in
    ``out/<sweep.name>/<id>/`` (``out`` defaults to the file's ``sweep.out``), then
    ``summary.csv``, ``summary.md`` and ``summary.png`` are written. ``workers``:
    configurations at once in local processes, or episodes at once as Ray tasks
    (``backend="ray"``, ``address`` as for :func:`vimpc.runs.run_scenario`). ``resume``:
    finish an unfinished sweep folder (``out`` and ``refit`` do not apply then).

    Returns a :class:`SweepResult`; bad input raises :class:`vimpc.ConfigError` before
    any work.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {workers!r}")
    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides must be a list of KEY.SUB=VALUE strings, got the string {overrides!r}; "
            f"write [{overrides!r}]"
        )
    chosen = backend_for(backend, address)
    options = Options(workers=workers, refit=refit, plots=plots, progress=progress)
    overrides = list(overrides)
    if resume is not None:
        return _resume(sweep, overrides, out, resume, chosen, options)
    if sweep is None:
        raise ConfigError(
            "vimpc sweep needs a sweep file (SWEEP.toml), or --resume FOLDER to finish an "
            "unfinished sweep"
        )
    plan = read_sweep(sweep, overrides, progress=progress)
    root = Path(out if out is not None else plan.out)
    store.usable_folder(root, "--out" if out is not None else "sweep.out")
    final, stage = root / plan.name, root / (plan.name + PARTIAL)
    for folder in (final, stage):
        if folder.exists():
            raise ConfigError(_taken(folder, plan.name))
    with chosen.connected(workers):  # the Ray cluster, before any folder is made
        return _new_sweep(chosen, options, plan, final, stage)


def _new_sweep(backend, options: Options, plan: Plan, final: Path, stage: Path) -> SweepResult:
    from vimpc import __version__

    try:
        stage.mkdir()
    except FileExistsError:  # another sweep took the name this instant
        raise ConfigError(_taken(stage, plan.name)) from None
    lock = store.SweepLock(stage)
    try:
        write_atomic(stage / SWEEP_FILE, plan.text)
        entries = [
            {
                "id": c.id,
                "overrides": c.varying,
                "sets": list(c.sets),
                "config_sha256": store.cfg_digest(cfg),
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
            "resume": store.sweep_resume_command(stage),
        }
        store.write_sweep_manifest(stage, manifest)
        print(
            f"vimpc sweep {plan.name}: {len(entries)} configurations of {plan.scenario.name} "
            f"in {stage}"
        )
    except BaseException:
        lock.release()
        import shutil

        shutil.rmtree(stage, ignore_errors=True)
        raise
    return _session(backend, options, final, stage, manifest, list(plan.configs), lock)


def _taken(folder: Path, name: str) -> str:
    what = "an unfinished sweep" if folder.name.endswith(PARTIAL) else "a sweep"
    fix = (
        f"resume it with {store.sweep_resume_command(folder)}"
        if folder.name.endswith(PARTIAL)
        else "move it away"
    )
    return (
        f"the sweep folder {str(folder)!r} holds {what} already (sweep.name = {name!r}); two "
        f"sweeps cannot share a folder: {fix}, or give another sweep.name or --out"
    )


def _prepare(stage: Path, entry: dict[str, Any], cfg: dict[str, Any], scenario_file: str) -> None:
    """Create a configuration's run folder as a new run does before its episodes."""
    run_stage = stage / (entry["id"] + PARTIAL)
    run_stage.mkdir()
    store.begin_run(run_stage, cfg, scenario_file, entry["sets"])


def _resume(sweep, overrides, out, resume, backend, options) -> SweepResult:
    if out is not None:
        raise ConfigError(
            f"--out does not apply with --resume: the sweep goes on in {str(resume)!r}; leave "
            "out --out"
        )
    if options.refit:
        raise ConfigError(
            "--refit cannot be combined with --resume: the finished episodes used the models "
            "the runs recorded; start a new sweep to fit again"
        )
    if overrides and sweep is None:
        raise ConfigError(
            "--set with --resume needs the sweep file too (to check the configurations are "
            "the recorded ones); leave out --set, or give SWEEP.toml with the same --set"
        )
    path = Path(resume).resolve()
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
            f"--resume: {str(resume)!r} is no unfinished sweep folder (no {str(stage)!r}); "
            "give the folder vimpc sweep printed"
        )
    if final.exists():
        raise ConfigError(
            f"--resume: {str(final)!r} exists beside {str(stage)!r}; the sweep cannot be "
            "finished under its name. Move one of them away first"
        )
    with backend.connected(options.workers):  # the Ray cluster, before the sweep is touched
        return _resume_in(sweep, overrides, backend, options, final, stage)


def _resume_in(sweep, overrides, backend, options, final: Path, stage: Path) -> SweepResult:
    from vimpc import scenario

    lock = store.SweepLock(stage)
    try:
        try:
            manifest = json.loads((stage / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"--resume: {str(stage / MANIFEST)!r} cannot be read ({exc}); the folder is "
                "not a sweep that can be resumed"
            ) from None
        entries = manifest["configurations"]
        if sweep is not None:
            plan = read_sweep(sweep, overrides, progress=options.progress)
            given = [(c.id, list(c.sets)) for c in plan.configurations]
            if given != [(e["id"], e["sets"]) for e in entries]:
                raise ConfigError(
                    f"--resume: {str(sweep)!r} (with its --set) gives other configurations "
                    f"than the sweep in {str(stage)!r} recorded; resume without the sweep "
                    "file (its own record is used) or start a new sweep"
                )
        configs = []
        for e in entries:
            # a configuration not begun is loaded again, and must be what was recorded
            if store.status(stage, e["id"]) != "not begun":
                configs.append(None)
                continue
            cfg = scenario.load_scenario(manifest["scenario_file"], e["sets"])
            if store.cfg_digest(cfg) != e["config_sha256"]:
                raise ConfigError(
                    f"--resume: configuration {e['id']} of {str(stage)!r} resolves to another "
                    f"configuration than recorded ({manifest['scenario_file']!r} changed "
                    "since the sweep began?); restore it or start a new sweep"
                )
            configs.append(cfg)
        done = sum(store.status(stage, e["id"]) == "complete" for e in entries)
        print(
            f"resuming {stage}: {done} of {len(entries)} configurations complete, running the "
            f"{len(entries) - done} missing"
        )
    except BaseException:
        lock.release()
        raise
    return _session(backend, options, final, stage, manifest, configs, lock)


def _session(backend, options: Options, final: Path, stage: Path, manifest, configs, lock):
    """Run the sweep's missing configurations, then write its summary and rename it."""
    from tqdm import tqdm

    from vimpc._processes import usable_cores

    started = time.perf_counter()
    entries = manifest["configurations"]
    session: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds")}
    manifest["sessions"].append(session)
    failures: dict[str, str] = {}
    bar = None
    try:
        for e, cfg in zip(entries, configs, strict=True):
            if store.status(stage, e["id"]) == "not begun":
                _prepare(stage, e, cfg, manifest["scenario_file"])
        todo = [e["id"] for e in entries if store.status(stage, e["id"]) != "complete"]
        workers = backend.sweep_workers(options.workers, len(todo))
        session.update(backend.describe())
        session.update(workers_requested=options.workers, processes=workers, cores=usable_cores())
        bar = tqdm(
            total=len(entries),
            initial=len(entries) - len(todo),
            desc="configurations",
            unit="run",
            disable=not options.progress,
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

        refitted: set[str] = set()
        for batch in _batches(stage, todo, workers):
            # the batch's models first, here and one at a time: configurations that share a
            # fit (other seeds, controller settings) reuse the cached one instead of fitting
            # it at once in several workers
            fresh, failed = backend.fit_models(
                stage, batch, options.refit, refitted, options.workers
            )
            for cid, error in failed.items():
                done(Outcome(cid, None, error))
            for cid in batch:
                if cid in failures:
                    continue
                outcome = obtain_models_first(stage, cid, options.refit, refitted, fresh)
                if outcome.error is not None:
                    done(outcome)
            tasks = [
                Task(
                    id=cid,
                    stage=str(stage / (cid + PARTIAL)),
                    log=str(stage / f"{cid}.log"),
                    refit=False,
                    plots=options.plots,
                )
                for cid in batch
                if cid not in failures
            ]
            backend.run_configurations(tasks, workers, done, session, episode_kept)
        bar.close()
        if failures:
            session["ended"] = f"{len(failures)} configurations failed"
            _record(stage, manifest, failures)
            lines = "\n  ".join(f"{cid}: {why:.300}" for cid, why in failures.items())
            print(
                f"vimpc: {len(failures)} of {len(entries)} configurations failed:\n  {lines}\n"
                f"the sweep in {stage} stays incomplete (each failed run's log is "
                f"<id>.log there); fix the cause and run only what is missing: "
                f"{store.sweep_resume_command(stage)}",
                file=sys.stderr,
            )
            return SweepResult(stage, None, dict(failures), 2)
        rows = summary_rows(stage, manifest)
        write_atomic(stage / SUMMARY_CSV, summary_csv(rows, manifest["keys"]), overwrite=True)
        write_atomic(stage / SUMMARY_MD, summary_markdown(rows, manifest), overwrite=True)
        if options.plots:
            summary_figure(rows, stage / SUMMARY_PNG, manifest)
        session["ended"] = "complete"
        session["wall_time_s"] = time.perf_counter() - started
        manifest["complete"] = True
        manifest.pop("resume", None)
        manifest["missing"], manifest["failed"] = [], {}
        store.write_sweep_manifest(stage, manifest)
        (stage / store.LOCK).unlink()
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
                "the missing configurations); to run only those: "
                f"{store.sweep_resume_command(stage)}",
                file=sys.stderr,
            )
        raise
    finally:
        lock.release()
    print((final / SUMMARY_MD).read_text(encoding="utf-8"), end="")
    print(f"results: {final}")
    return SweepResult(final, rows, {}, 0)


def _batches(stage: Path, todo: Sequence[str], workers: int) -> list[list[str]]:
    """``todo`` in order, cut into batches that are each fitted, then run, before the next:
    each holds at least ``workers`` (at least one) configurations and as many models of
    different settings (fit cache keys), so that its fits too can run ``workers`` at once
    (configurations that differ only in their episodes share a fit)."""
    from vimpc import pipeline, scenario

    size = max(1, workers)
    batches: list[list[str]] = []
    batch: list[str] = []
    keys: set[str] = set()
    for cid in todo:
        cfg = scenario.load_scenario(stage / (cid + PARTIAL) / store.CONFIG)
        keys |= {pipeline.cache_key(pipeline.fit_config(cfg, k)) for k in range(cfg.data.fits)}
        batch.append(cid)
        if len(batch) >= size and len(keys) >= size:
            batches.append(batch)
            batch, keys = [], set()
    return [*batches, batch] if batch else batches


def _record(stage: Path, manifest: dict[str, Any], failures: dict[str, str]) -> None:
    entries = manifest["configurations"]
    manifest["missing"] = [e["id"] for e in entries if store.status(stage, e["id"]) != "complete"]
    manifest["failed"] = dict(failures)
    store.write_sweep_manifest(stage, manifest)
