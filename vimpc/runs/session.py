"""One session of a run folder: obtain the run's models (once), run its missing episodes on
a backend and keep each as it ends, then write the metrics and figures and rename the
folder complete. A new run, a resumed run and a sweep's configuration all go through
:func:`run_session`; the folder's files are :mod:`vimpc.runs.store`'s."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from vimpc._files import write_atomic
from vimpc.runs import store

#: exit code of a run whose every solve failed (its results are written all the same)
EXIT_ALL_SOLVES_FAILED = 3


@dataclass(frozen=True)
class Options:
    """How a session runs: the worker processes (or Ray tasks) asked for, fitting again
    instead of using a cached fit, the figures, the progress bars."""

    workers: int = 1
    refit: bool = False
    plots: bool = True
    progress: bool = True


def obtain_model(cfg, env, *, refit: bool, progress: bool, workers: int, log):
    """The model of one fit's configuration (built, loaded, taken from the cache or fitted);
    its fit summary is logged when it was fitted now."""
    from vimpc import _processes, pipeline, report

    workers, _ = _processes.worker_count(workers, cfg.data.calibration_episodes)
    source = pipeline.obtain_model(
        cfg, env, refit=refit, progress=progress, log=log, workers=workers
    )
    if source.report is not None and not source.reused:
        log("fit summary (held-out validation data):")
        log(report.fit_table(source.report, list(env.obs_names), env.nominal_system.state_units))
    return source


def model_record(source, fit_cfg) -> dict:
    """What the run records of one fit's model (the manifest's ``model``, ``fits``)."""
    from vimpc import pipeline, report

    path = None if source.path is None else str(source.path)
    info, bound = source.model.info, source.model.bound_info
    return {
        "path": path,
        "sha256": None if path is None else pipeline.file_digest(path),
        "fitted_now": source.report is not None and not source.reused,
        "reused_cached_fit": source.reused,
        "fit": source.report,
        "delta": source.model.delta,
        "data_seed": fit_cfg.data.seed,
        "heldout_seed": fit_cfg.data.heldout_seed,
        "data_box": info.get("data_box"),
        "bound": None if bound is None else bound.as_dict(),
        "bound_holds_only_on": report.bound_holds_only_on(bound),
    }


def obtain_models(cfg, env, options: Options, log) -> list[dict]:
    """The records of the run's ``data.fits`` models, each obtained (and its fit summary
    printed) as :func:`obtain_model` does."""
    from vimpc import pipeline

    fits = cfg.data.fits
    out = []
    for k in range(fits):
        fit_cfg = pipeline.fit_config(cfg, k)
        if fits > 1:
            log(
                f"fit {k} of {fits} (data.seed = {fit_cfg.data.seed}, "
                f"data.heldout_seed = {fit_cfg.data.heldout_seed}):"
            )
        source = obtain_model(
            fit_cfg,
            env,
            refit=options.refit,
            progress=options.progress,
            workers=options.workers,
            log=log,
        )
        out.append(model_record(source, fit_cfg))
    return out


def run_session(
    cfg, backend, options: Options, started, final_dir, stage_dir, manifest, lock, *, new: bool
) -> int:
    """Run what the run folder is missing; on any exit before completion the finished
    episodes stay in ``stage_dir`` with the manifest saying what is missing. ``backend``
    (:class:`vimpc.runs.backends.Backend`) runs the episodes; returns the exit code."""
    session: dict = {"started": datetime.now(UTC).isoformat(timespec="seconds")}
    manifest["sessions"].append(session)
    count = manifest["episodes"]
    before = len(store.finished(stage_dir, count))
    try:
        return _run(cfg, backend, options, started, final_dir, stage_dir, manifest, session, lock)
    except BaseException as exc:
        if (final_dir / store.METRICS).is_file():
            raise  # complete and renamed: what failed came after (printing the summary)
        finished = store.finished(stage_dir, count)
        done = len(finished)
        if new and done == 0:
            # nothing finished: nothing to keep, nothing that looks like a result
            shutil.rmtree(stage_dir, ignore_errors=True)
            raise
        session["ended"] = (
            "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc!r:.300}"
        )
        session["wall_time_s"] = time.perf_counter() - started
        # the files count: an episode written just before the interrupt is in them
        manifest["finished"] = done
        session["episodes_run"] = done - before
        manifest["missing"] = sorted(set(range(count)) - set(finished))
        with contextlib.suppress(Exception):
            store.write_manifest(stage_dir, manifest)
        print(
            f"vimpc: {done} of {count} episodes are kept in {stage_dir}, marked incomplete "
            f"({store.MANIFEST} lists the missing ones); to run only those: "
            f"{store.resume_command(stage_dir)}",
            file=sys.stderr,
        )
        raise
    finally:
        lock.release()


def _run(cfg, backend, options, started, final_dir, stage_dir, manifest, session, lock) -> int:
    """The session's work: every finished episode is kept in ``stage_dir`` as it
    ends; the folder is renamed to ``final_dir`` once complete. Returns the exit code."""
    from tqdm import tqdm

    from vimpc import pipeline, report
    from vimpc.closedloop import summarize

    name = cfg.scenario.name
    print(f"vimpc run {name}: {cfg.scenario.description}".rstrip(": "))
    env = pipeline.build_env(cfg)
    model_info = manifest["model"]
    if model_info is None:
        records = obtain_models(cfg, env, options, print)
        model_info = records[0]
        manifest["model"] = model_info
        if len(records) > 1:
            manifest["fits"] = records
        store.write_manifest(stage_dir, manifest)
    records = manifest.get("fits") or [model_info]
    # one model file per fit; episode k uses fit k mod data.fits
    path = [r["path"] for r in records] if len(records) > 1 else model_info["path"]
    count, steps = manifest["episodes"], cfg.episodes.steps
    seeds = manifest["seeds"]
    missing = sorted(set(range(count)) - set(store.finished(stage_dir, count)))
    workers, why = backend.worker_count(options.workers, len(missing))
    cores = backend.cores()
    session.update(backend.describe())
    if why is not None and missing:
        print(
            f"--workers {options.workers} capped to {workers} ({why})"
            + backend.capped_note(workers, cores)
        )
    session.update(workers_requested=options.workers, processes=workers, cores=cores)
    # what else ran on the machine meanwhile: the 1-minute load average, before and after
    session["load_average"] = [store.load_average()]
    session["episodes_run"] = 0
    # the plots need a controller here; a serial run uses the same one for its episodes
    plots = options.plots
    serial = missing and backend.in_this_process(workers)
    runner = pipeline.EpisodeRunner(cfg, path) if plots or serial else None
    left = set(missing)

    def keep(i: int, result) -> None:
        k = missing[i]
        traj, metrics = result
        store.save_episode(stage_dir, k, seeds[k], traj, metrics)
        left.discard(k)
        session["episodes_run"] += 1
        manifest["finished"], manifest["missing"] = count - len(left), sorted(left)
        store.write_manifest(stage_dir, manifest)

    if missing:
        with tqdm(
            total=len(missing) * steps, desc="episodes", unit="step", disable=not options.progress
        ) as bar:
            backend.run_episodes(
                cfg,
                path,
                [seeds[k] for k in missing],
                fits=[k % len(records) for k in missing],
                workers=workers,
                on_step=lambda: bar.update(),
                on_episode=lambda steps: bar.update(steps),
                on_result=keep,
                runner=runner,
            )
    # the summary is made from the kept files, whichever session ran each episode
    kept = [store.load_episode(stage_dir, k) for k in range(count)]
    trajectories = [traj for traj, _ in kept]
    per_episode = [m for _, m in kept]
    summary = summarize(per_episode, trajectories, env.safety_limits)
    summary.update(report.data_region_flags(summary, records))

    write_atomic(
        stage_dir / "versions.json", json.dumps(store.versions(), indent=2) + "\n", overwrite=True
    )
    if plots:
        report.run_figures(
            cfg,
            runner,
            trajectories,
            stage_dir,
            per_episode=per_episode,
            seeds=seeds,
            holds_only_on=summary.get("bound_holds_only_on"),
        )
    sessions = manifest["sessions"]
    ran = [s for s in sessions if s.get("episodes_run")] or [session]
    processes = max(s["processes"] for s in ran)
    session["ended"] = "complete"
    session["load_average"].append(store.load_average())
    session["wall_time_s"] = time.perf_counter() - started
    all_failed = summary["solves"] > 0 and summary["failed_solves"] == summary["solves"]
    window_note = report.success_window_note(cfg)
    summary = {**summary, **({"success_note": window_note} if window_note else {})}
    metrics = {
        **summary,
        "outcome": "all solves failed" if all_failed else "complete",
        "model": model_info,
        **({"fits": records} if len(records) > 1 else {}),
        "per_episode": per_episode,
        "seeds": seeds,
        # the solve times were measured with this many episode processes at once
        "workers": processes,
        "workers_requested": options.workers,
        "cores": cores,
        "sessions": sessions,
        "wall_time_s": sum(s.get("wall_time_s", 0.0) for s in sessions),
    }
    # metrics.json is written last: its presence marks a complete run
    write_atomic(stage_dir / store.METRICS, json.dumps(metrics, indent=2) + "\n")
    (stage_dir / store.MANIFEST).unlink()
    (stage_dir / store.LOCK).unlink()  # the lock itself is held until the rename is done
    os.rename(stage_dir, final_dir)
    lock.release()
    # the solve-time lines say how many episode processes shared the cores meanwhile
    note = sharing_note(ran, cores)
    table = report.summary_table(
        summary,
        tracking=report.run_tracking(cfg, env, trajectories),
        tube=cfg.controller.tightening == "tube",
    )
    print(
        "\n".join(
            t + note if t.lstrip().startswith("solve time") else t for t in table.splitlines()
        )
    )
    print(f"  wall time                     {metrics['wall_time_s']:.1f} s")
    print(f"results: {final_dir}")
    if all_failed:
        print(
            f"vimpc: all {summary['solves']} solves failed (infeasible or solver failure): "
            "every input applied was the controller's fallback. The results are written to "
            f'{final_dir} with "outcome": "all solves failed" in metrics.json; exit code '
            f"{EXIT_ALL_SOLVES_FAILED}",
            file=sys.stderr,
        )
        return EXIT_ALL_SOLVES_FAILED
    return 0


def sharing_note(sessions: list[dict], cores: int) -> str:
    """How many episode processes shared the cores while the solve times were measured."""
    counts = sorted({s["processes"] for s in sessions})
    text = " or ".join(str(c) for c in counts)
    plural = "es" if counts[-1] > 1 else ""
    return (
        f" ({text} episode process{plural} at once on {cores} usable "
        f"core{'s' if cores != 1 else ''})"
    )
