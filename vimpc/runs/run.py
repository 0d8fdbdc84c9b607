"""A run of a scenario from Python: :func:`run_scenario` reserves the run folder (or reopens
an unfinished one, after checking it is the same run), obtains the model, runs the missing
episodes on the backend asked for and keeps each as it ends, then writes the metrics and
figures and renames the folder complete (:mod:`vimpc.runs.session`). ``vimpc run`` calls
it; the folder's layout and files are :mod:`vimpc.runs.store`'s."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vimpc.errors import ConfigError
from vimpc.runs import store
from vimpc.runs.backends import backend_for
from vimpc.runs.session import EXIT_ALL_SOLVES_FAILED, Options, run_session

__all__ = ["EXIT_ALL_SOLVES_FAILED", "RunResult", "run_scenario"]


@dataclass(frozen=True)
class RunResult:
    """What a run ended with: its folder, its ``metrics.json`` (``None`` if the folder is not
    complete) and its exit status (0 complete, :data:`EXIT_ALL_SOLVES_FAILED` complete but
    every solve failed)."""

    folder: Path
    metrics: dict[str, Any] | None
    exit_status: int


def run_scenario(
    scenario: str | os.PathLike[str] | None,
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
) -> RunResult:
    """Run a scenario's episodes in closed loop, as ``vimpc run`` does, and return the result.

    ``scenario``: a scenario ``.toml`` file or the name of a shipped one (``None`` with
    ``resume``: the folder's own configuration); ``overrides``: ``"key.sub=value"``
    strings, as ``--set``. The results go to ``out/<scenario>/<UTC timestamp>/`` (``out``
    defaults to ``results/runs``), named ``<timestamp>.partial`` while the run goes on; the
    finished episodes are kept as each ends, so a run stopped by an error or a Ctrl-C can be
    finished with ``resume=<its folder>`` (``out`` and ``refit`` do not apply then).
    ``workers``: episodes at once in worker processes (``backend="local"``) or Ray tasks
    (``backend="ray"``, on a local cluster started here or the one at ``address``), the
    same results. ``refit``: fit again instead of using a cached fit; ``plots``: the
    figures; ``progress``: progress bars. What the command prints is printed.

    Returns a :class:`RunResult`. Bad input raises :class:`vimpc.ConfigError` before any
    work; an error or interrupt later is raised with the finished episodes kept.

    >>> result = run_scenario("pendulum_swingup", overrides=["episodes.count=2"])  # doctest: +SKIP
    >>> result.metrics["per_episode"][0]["success"]  # doctest: +SKIP
    """
    from vimpc import scenario as scenarios
    from vimpc.scenario.catalog import find_scenario

    started = time.perf_counter()
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
        return _resume(scenario, overrides, out, resume, chosen, options, started)
    if scenario is None:
        raise ConfigError(
            "vimpc run needs a scenario (a .toml file or a shipped name), or --resume FOLDER "
            "to finish an unfinished run"
        )
    cfg = scenarios.load_scenario(find_scenario(scenario), overrides)
    root = Path(store.DEFAULT_OUT if out is None else out)
    store.usable_folder(root, "--out")
    name = cfg.scenario.name
    store.mention_unfinished(root, name, cfg)
    with chosen.connected(workers):
        final_dir, stage_dir = store.reserve_run_dir(root, name)
        lock = store.Lock(stage_dir, wait=True)
        try:
            manifest = store.begin_run(stage_dir, cfg, str(scenario), overrides)
        except BaseException:
            lock.release()
            shutil.rmtree(stage_dir, ignore_errors=True)
            raise
        code = run_session(
            cfg, chosen, options, started, final_dir, stage_dir, manifest, lock, new=True
        )
    return _result(final_dir, code)


def _result(final_dir: Path, code: int) -> RunResult:
    path = final_dir / store.METRICS
    metrics = json.loads(path.read_text()) if path.is_file() else None
    return RunResult(final_dir, metrics, code)


def _resume(scenario, overrides, out, resume, backend, options, started) -> RunResult:
    """``vimpc run --resume FOLDER``: run the episodes an unfinished run is missing."""
    if options.refit:
        raise ConfigError(
            "--refit cannot be combined with --resume: the finished episodes used the model "
            "the run recorded, and the rest must use it too; start a new run to fit again"
        )
    if out is not None:
        raise ConfigError(
            f"--out does not apply with --resume: the run goes on in its own folder "
            f"{str(resume)!r}; leave out --out"
        )
    final_dir, stage_dir = store.resolve(resume)
    if not stage_dir.is_dir():
        if (final_dir / store.METRICS).is_file():
            raise ConfigError(
                f"--resume: {str(final_dir)!r} is a complete run (it has metrics.json); there "
                "is nothing to resume. Start a new run with vimpc run SCENARIO"
            )
        if final_dir.is_dir():
            raise ConfigError(
                f"--resume: {str(final_dir)!r} is not an unfinished vimpc run (no "
                f"{stage_dir.name} folder beside it, no {store.MANIFEST} in it)"
            )
        raise ConfigError(
            f"--resume: there is no run folder {str(resume)!r} (neither {str(stage_dir)!r} "
            "nor the finished name exists); give a folder vimpc run printed"
        )
    if final_dir.exists():
        raise ConfigError(
            f"--resume: {str(final_dir)!r} exists beside {str(stage_dir)!r}; the run cannot be "
            "finished under its name. Move one of them away first"
        )
    with backend.connected(options.workers):
        code = _resume_in(scenario, overrides, backend, options, started, final_dir, stage_dir)
    return _result(final_dir, code)


def _resume_in(scenario, overrides, backend, options, started, final_dir, stage_dir) -> int:
    from vimpc import scenario as scenarios
    from vimpc.scenario.catalog import find_scenario

    lock = store.Lock(stage_dir, wait=False)
    try:
        if (stage_dir / store.METRICS).is_file():
            # complete, but its process ended before the rename
            (stage_dir / store.MANIFEST).unlink(missing_ok=True)
            lock.release(remove=True)
            os.rename(stage_dir, final_dir)
            print(
                f"{stage_dir} was complete (it has metrics.json) but not yet renamed: now "
                f"{final_dir}; nothing was run"
            )
            return 0
        manifest = store.read_manifest(stage_dir)
        if manifest is None:
            raise ConfigError(
                f"--resume: {str(stage_dir)!r} has no {store.MANIFEST}: its run stopped "
                "before its first episode began, so there is nothing to resume; remove the "
                "folder and start a new run"
            )
        source = find_scenario(scenario) if scenario is not None else stage_dir / store.CONFIG
        cfg = scenarios.load_scenario(source, overrides)
        store.check_same_run(stage_dir, manifest, cfg)
        count = manifest["episodes"]
        store.tidy(stage_dir, count)
        store.check_episodes(stage_dir, store.finished(stage_dir, count), manifest["seeds"])
        done = len(store.finished(stage_dir, count))
        print(
            f"resuming {stage_dir}: {done} of {count} episodes finished, running the "
            f"{count - done} missing"
        )
    except BaseException:
        lock.release()
        raise
    return run_session(
        cfg, backend, options, started, final_dir, stage_dir, manifest, lock, new=False
    )
