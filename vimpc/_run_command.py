"""The body of ``vimpc run``: reserve the run folder (or reopen an unfinished one with
``--resume`` after checking it is the same run), obtain the model, run the missing episodes
and keep each as it ends, then write the metrics and figures and rename the folder complete.

The folder's layout and files are :mod:`vimpc._run_dir`'s; the argument parsing and the other
commands are :mod:`vimpc.cli`'s."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from vimpc import _run_dir
from vimpc._files import write_atomic
from vimpc.errors import ConfigError


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("vimpc", "numpy", "scipy", "casadi", "gymnasium", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


PARTIAL = _run_dir.PARTIAL
DEFAULT_OUT = "results/runs"
#: exit code of a run whose every solve failed (its results are written all the same)
EXIT_ALL_SOLVES_FAILED = 3


def _reserve_run_dir(root: Path, name: str) -> tuple[Path, Path]:
    """``(final, staging)`` for a new run: ``root/name/<UTC timestamp>[-k]`` and its
    ``.partial`` twin, which is created here. Creation is exclusive, so runs started at
    the same moment get folders of their own: a name is taken when its staging folder is
    created by this process and no finished folder of that name exists."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = root / name
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: cannot create {str(base)!r}: {exc.strerror}") from None
    for k in range(10_000):
        final = base / (stamp if k == 0 else f"{stamp}-{k}")
        stage = final.with_name(final.name + PARTIAL)
        try:
            stage.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"--out: cannot write in {str(base)!r}: {exc.strerror}") from None
        if final.exists():  # finished by another run since this name was free
            stage.rmdir()
            continue
        return final, stage
    raise ConfigError(f"--out: no free run folder for {stamp} in {str(base)!r}")


def _usable_folder(path: Path, what: str) -> None:
    """Refuse an output location that is a file or cannot be written, before any work."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be created: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(path)!r} is not writable")


def _obtain_model(cfg, env, args, log):
    from vimpc import pipeline, report

    workers, _ = pipeline.worker_count(
        getattr(args, "workers", 1), cfg["data"]["calibration_episodes"]
    )
    source = pipeline.obtain_model(
        cfg, env, refit=args.refit, progress=not args.quiet, log=log, workers=workers
    )
    if source.report is not None and not source.reused:
        log("fit summary (held-out validation data):")
        log(report.fit_table(source.report, list(env.obs_names), env.nominal_system.state_units))
    return source


def _model_record(source, pipeline, fit_cfg) -> dict:
    """What the run records of one fit's model (the manifest's ``model``, ``fits``)."""
    from vimpc import report

    path = None if source.path is None else str(source.path)
    info, bound = source.model.info, source.model.bound_info
    return {
        "path": path,
        "sha256": None if path is None else pipeline.file_digest(path),
        "fitted_now": source.report is not None and not source.reused,
        "reused_cached_fit": source.reused,
        "fit": source.report,
        "delta": source.model.delta,
        "data_seed": fit_cfg["data"]["seed"],
        "heldout_seed": fit_cfg["data"]["heldout_seed"],
        "data_box": info.get("data_box"),
        "bound": None if bound is None else bound.as_dict(),
        "bound_holds_only_on": report.bound_holds_only_on(bound),
    }


def _obtain_models(cfg, env, args, log) -> list[dict]:
    """The records of the run's ``data.fits`` models, each obtained (and its fit summary
    printed) as :func:`_obtain_model` does."""
    from vimpc import pipeline

    fits = cfg["data"]["fits"]
    out = []
    for k in range(fits):
        fit_cfg = pipeline.fit_config(cfg, k)
        if fits > 1:
            log(
                f"fit {k} of {fits} (data.seed = {fit_cfg['data']['seed']}, "
                f"data.heldout_seed = {fit_cfg['data']['heldout_seed']}):"
            )
        out.append(_model_record(_obtain_model(fit_cfg, env, args, log), pipeline, fit_cfg))
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from vimpc import scenario
    from vimpc.scenario.catalog import find_scenario

    started = time.perf_counter()
    if args.workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {args.workers}")
    _check_backend(args)
    if args.resume is not None:
        return _resume(args, started)
    if args.scenario is None:
        raise ConfigError(
            "vimpc run needs a scenario (a .toml file or a shipped name), or --resume FOLDER "
            "to finish an unfinished run"
        )
    cfg = scenario.load_scenario(find_scenario(args.scenario), args.set or [])
    root = Path(DEFAULT_OUT if args.out is None else args.out)
    _usable_folder(root, "--out")
    name = cfg["scenario"]["name"]
    _mention_unfinished(root, name, cfg)
    with _backend(args):
        return _new_run(cfg, args, started, root, name)


def _new_run(cfg, args, started, root: Path, name: str) -> int:
    from vimpc import scenario

    final_dir, stage_dir = _reserve_run_dir(root, name)
    lock = _run_dir.Lock(stage_dir, wait=True)
    try:
        count = cfg["episodes"]["count"]
        config_text = scenario.dump_toml(cfg)
        write_atomic(stage_dir / _run_dir.CONFIG, config_text)
        manifest = {
            "complete": False,
            "scenario": name,
            "config_sha256": _run_dir.text_digest(config_text),
            "scenario_file": str(args.scenario),
            "overrides": list(args.set or []),
            "episodes": count,
            "seeds": _seeds(cfg),
            "finished": 0,
            "missing": list(range(count)),
            "model": None,  # recorded once the model is built, loaded or fitted
            "vimpc": _vimpc_version(),
            "sessions": [],
            "resume": _run_dir.resume_command(stage_dir),
        }
        _run_dir.write_manifest(stage_dir, manifest)
    except BaseException:
        lock.release()
        shutil.rmtree(stage_dir, ignore_errors=True)
        raise
    return _session(cfg, args, started, final_dir, stage_dir, manifest, lock, new=True)


def _check_backend(args: argparse.Namespace) -> None:
    """Refuse a ``--backend``/``--address`` pair that cannot work (without importing Ray)."""
    from vimpc._ray_backend import check_options

    check_options(getattr(args, "backend", "local"), getattr(args, "address", None))


def _backend(args: argparse.Namespace):
    """The context the run's episodes need: for ``--backend ray`` the Ray cluster (started
    or connected to here, before any folder is made; stopped after if started here)."""
    if getattr(args, "backend", "local") != "ray":
        return contextlib.nullcontext()
    from vimpc._ray_backend import connected

    return connected(getattr(args, "address", None), args.workers)


def _seeds(cfg) -> list[int]:
    ep = cfg["episodes"]
    return [ep["seed"] + k for k in range(ep["count"])]


def _vimpc_version() -> str:
    from vimpc import __version__

    return __version__


def _mention_unfinished(root: Path, name: str, cfg) -> None:
    """Say where unfinished runs of this scenario are and how to finish them."""
    unfinished = _run_dir.unfinished_runs(root, name)
    if len(unfinished) > 5:
        print(
            f"note: {len(unfinished)} unfinished runs of {name} are in {root / name}; the last 5:"
        )
    for stage, manifest in unfinished[-5:]:
        if manifest is None:
            print(
                f"note: {stage} was left by a run that stopped before it began its episodes; "
                "it holds nothing to resume (remove it)"
            )
            continue
        done = len(_run_dir.finished(stage, manifest.get("episodes", 0)))
        try:
            same = not _run_dir.config_differences(stage, cfg)
        except ConfigError:
            same = False
        print(
            f"note: an unfinished run of {name} is in {stage} ({done} of "
            f"{manifest.get('episodes', '?')} episodes done, "
            f"{'the same configuration as this run' if same else 'another configuration'}); "
            f"this run starts afresh. To finish that one instead: "
            f"{_run_dir.resume_command(stage)}"
        )


def _resume(args: argparse.Namespace, started: float) -> int:
    """``vimpc run --resume FOLDER``: run the episodes an unfinished run is missing."""
    if args.refit:
        raise ConfigError(
            "--refit cannot be combined with --resume: the finished episodes used the model "
            "the run recorded, and the rest must use it too; start a new run to fit again"
        )
    if args.out is not None:
        raise ConfigError(
            f"--out does not apply with --resume: the run goes on in its own folder "
            f"{args.resume!r}; leave out --out"
        )
    final_dir, stage_dir = _run_dir.resolve(args.resume)
    if not stage_dir.is_dir():
        if (final_dir / _run_dir.METRICS).is_file():
            raise ConfigError(
                f"--resume: {str(final_dir)!r} is a complete run (it has metrics.json); there "
                "is nothing to resume. Start a new run with vimpc run SCENARIO"
            )
        if final_dir.is_dir():
            raise ConfigError(
                f"--resume: {str(final_dir)!r} is not an unfinished vimpc run (no "
                f"{stage_dir.name} folder beside it, no {_run_dir.MANIFEST} in it)"
            )
        raise ConfigError(
            f"--resume: there is no run folder {str(args.resume)!r} (neither {str(stage_dir)!r} "
            "nor the finished name exists); give a folder vimpc run printed"
        )
    if final_dir.exists():
        raise ConfigError(
            f"--resume: {str(final_dir)!r} exists beside {str(stage_dir)!r}; the run cannot be "
            "finished under its name. Move one of them away first"
        )
    with _backend(args):
        return _resume_in(args, started, final_dir, stage_dir)


def _resume_in(args: argparse.Namespace, started: float, final_dir: Path, stage_dir: Path) -> int:
    from vimpc import pipeline, scenario
    from vimpc.scenario.catalog import find_scenario

    lock = _run_dir.Lock(stage_dir, wait=False)
    try:
        if (stage_dir / _run_dir.METRICS).is_file():
            # complete, but its process ended before the rename
            (stage_dir / _run_dir.MANIFEST).unlink(missing_ok=True)
            lock.release(remove=True)
            os.rename(stage_dir, final_dir)
            print(
                f"{stage_dir} was complete (it has metrics.json) but not yet renamed: now "
                f"{final_dir}; nothing was run"
            )
            return 0
        manifest = _run_dir.read_manifest(stage_dir)
        if manifest is None:
            raise ConfigError(
                f"--resume: {str(stage_dir)!r} has no {_run_dir.MANIFEST}: its run stopped "
                "before its first episode began, so there is nothing to resume; remove the "
                "folder and start a new run"
            )
        source = (
            find_scenario(args.scenario)
            if args.scenario is not None
            else stage_dir / _run_dir.CONFIG
        )
        cfg = scenario.load_scenario(source, args.set or [])
        _check_same_run(stage_dir, manifest, cfg, pipeline)
        count = manifest["episodes"]
        _run_dir.tidy(stage_dir, count)
        _run_dir.check_episodes(
            stage_dir, _run_dir.finished(stage_dir, count), manifest["seeds"]
        )
        done = len(_run_dir.finished(stage_dir, count))
        print(
            f"resuming {stage_dir}: {done} of {count} episodes finished, running the "
            f"{count - done} missing"
        )
    except BaseException:
        lock.release()
        raise
    return _session(cfg, args, started, final_dir, stage_dir, manifest, lock, new=False)


def _check_same_run(stage: Path, manifest: dict, cfg, pipeline) -> None:
    """Refuse a resume whose remaining episodes would not match the finished ones: another
    scenario, other settings, another vimpc version, another model file."""
    there = manifest.get("scenario")
    here = cfg["scenario"]["name"]
    if there != here:
        raise ConfigError(
            f"--resume: {str(stage)!r} is a run of scenario {there!r}, not {here!r}; give "
            f"that scenario (or none: the folder's configuration is used)"
        )
    recorded = manifest.get("config_sha256")  # absent in runs begun by older versions
    if recorded is not None and _run_dir.config_digest(stage) != recorded:
        raise ConfigError(
            f"--resume: {str(stage / _run_dir.CONFIG)!r} changed since the run began (its "
            f"digest is not the one {_run_dir.MANIFEST} recorded): the finished episodes ran "
            "with another configuration, so the folder cannot be resumed; start a new run"
        )
    differences = _run_dir.config_differences(stage, cfg)
    if differences:
        shown = "\n  ".join(differences[:12])
        more = f"\n  ... and {len(differences) - 12} more" if len(differences) > 12 else ""
        raise ConfigError(
            f"--resume: the run in {str(stage)!r} was made with another configuration, so the "
            f"remaining episodes would not match the finished ones:\n  {shown}{more}\n"
            "resume with the same scenario and --set overrides (or with none: the folder's "
            "own configuration is used), or start a new run"
        )
    if manifest.get("vimpc") != _vimpc_version():
        raise ConfigError(
            f"--resume: the run in {str(stage)!r} was made with vimpc {manifest.get('vimpc')}, "
            f"this is vimpc {_vimpc_version()}; its remaining episodes could differ. Finish it "
            "with that version or start a new run"
        )
    if manifest.get("seeds") != _seeds(cfg):
        raise ConfigError(
            f"--resume: the seeds recorded in {str(stage / _run_dir.MANIFEST)!r} do not "
            "follow from its configuration (episodes.seed, episodes.count); the folder was "
            "edited, so it cannot be resumed"
        )
    for model in manifest.get("fits") or [manifest.get("model")]:
        _check_same_model(model, pipeline)


def _check_same_model(model, pipeline) -> None:
    if model is not None and model.get("path") is not None:
        path = Path(model["path"])
        if not path.is_file():
            raise ConfigError(
                f"--resume: the model file {str(path)!r} the finished episodes used is gone "
                "(a cleared cache?); the remaining episodes would use another model. Start "
                "a new run"
            )
        if pipeline.file_digest(path) != model.get("sha256"):
            raise ConfigError(
                f"--resume: the model file {str(path)!r} changed since the finished episodes "
                "used it (a refit, or another file there); the remaining episodes would use "
                "another model. Start a new run"
            )


def _session(cfg, args, started, final_dir, stage_dir, manifest, lock, *, new: bool) -> int:
    """Run what the run folder is missing; on any exit before completion the finished
    episodes stay in ``stage_dir`` with the manifest saying what is missing."""
    session: dict = {"started": datetime.now(UTC).isoformat(timespec="seconds")}
    manifest["sessions"].append(session)
    count = manifest["episodes"]
    before = len(_run_dir.finished(stage_dir, count))
    try:
        return _run(cfg, args, started, final_dir, stage_dir, manifest, session, lock)
    except BaseException as exc:
        if (final_dir / _run_dir.METRICS).is_file():
            raise  # complete and renamed: what failed came after (printing the summary)
        finished = _run_dir.finished(stage_dir, count)
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
            _run_dir.write_manifest(stage_dir, manifest)
        print(
            f"vimpc: {done} of {count} episodes are kept in {stage_dir}, marked incomplete "
            f"({_run_dir.MANIFEST} lists the missing ones); to run only those: "
            f"{_run_dir.resume_command(stage_dir)}",
            file=sys.stderr,
        )
        raise
    finally:
        lock.release()


def _run(cfg, args, started, final_dir, stage_dir, manifest, session, lock) -> int:
    """The body of ``vimpc run``: every finished episode is kept in ``stage_dir`` as it
    ends; the folder is renamed to ``final_dir`` once complete. Returns the exit code."""
    from tqdm import tqdm

    from vimpc import pipeline, report
    from vimpc.closedloop import summarize

    name = cfg["scenario"]["name"]
    print(f"vimpc run {name}: {cfg['scenario']['description']}".rstrip(": "))
    env = pipeline.build_env(cfg)
    model_info = manifest["model"]
    if model_info is None:
        records = _obtain_models(cfg, env, args, print)
        model_info = records[0]
        manifest["model"] = model_info
        if len(records) > 1:
            manifest["fits"] = records
        _run_dir.write_manifest(stage_dir, manifest)
    records = manifest.get("fits") or [model_info]
    # one model file per fit; episode k uses fit k mod data.fits
    path = [r["path"] for r in records] if len(records) > 1 else model_info["path"]
    count, steps = manifest["episodes"], cfg["episodes"]["steps"]
    seeds = manifest["seeds"]
    missing = sorted(set(range(count)) - set(_run_dir.finished(stage_dir, count)))
    ray = getattr(args, "backend", "local") == "ray"
    if ray:
        from vimpc import _ray_backend

        workers, why = _ray_backend.worker_count(args.workers, len(missing))
        cluster = _ray_backend.current()  # the machine's cores for a local cluster
        cores = pipeline.usable_cores() if cluster.owned else cluster.cpus
        session.update(backend="ray", ray_cluster=_ray_backend.describe())
    else:
        workers, why = pipeline.worker_count(args.workers, len(missing))
        cores = pipeline.usable_cores()
    if why is not None and missing:
        shared = ": more processes would share the cores and slow every solve"
        print(
            f"--workers {args.workers} capped to {workers} ({why})"
            + (shared if workers == cores and not ray else "")
        )
    session.update(workers_requested=args.workers, processes=workers, cores=cores)
    # what else ran on the machine meanwhile: the 1-minute load average, before and after
    session["load_average"] = [_load_average()]
    session["episodes_run"] = 0
    # the plots need a controller here; a serial run uses the same one for its episodes
    plots = not args.no_plots
    serial = workers == 1 and missing and not ray
    runner = pipeline.EpisodeRunner(cfg, path) if plots or serial else None
    left = set(missing)

    def keep(i: int, result) -> None:
        k = missing[i]
        traj, metrics = result
        _run_dir.save_episode(stage_dir, k, seeds[k], traj, metrics)
        left.discard(k)
        session["episodes_run"] += 1
        manifest["finished"], manifest["missing"] = count - len(left), sorted(left)
        _run_dir.write_manifest(stage_dir, manifest)

    if missing:
        with tqdm(
            total=len(missing) * steps, desc="episodes", unit="step", disable=args.quiet
        ) as bar:
            if ray:  # one Ray task per episode, the model sent as its file's bytes
                _ray_backend.run_episodes(
                    cfg,
                    path,
                    [seeds[k] for k in missing],
                    fits=[k % len(records) for k in missing],
                    workers=workers,
                    on_episode=lambda steps: bar.update(steps),
                    on_result=keep,
                )
            else:
                pipeline.run_episodes(
                    cfg,
                    path,
                    [seeds[k] for k in missing],
                    fits=[k % len(records) for k in missing],
                    workers=workers,
                    on_step=(lambda: bar.update()) if workers == 1 else None,
                    on_episode=(lambda steps: bar.update(steps)) if workers > 1 else None,
                    on_result=keep,
                    runner=runner,
                )
    # the summary is made from the kept files, whichever session ran each episode
    kept = [_run_dir.load_episode(stage_dir, k) for k in range(count)]
    trajectories = [traj for traj, _ in kept]
    per_episode = [m for _, m in kept]
    summary = summarize(per_episode, trajectories, env.safety_limits)
    summary.update(report.data_region_flags(summary, records))

    write_atomic(
        stage_dir / "versions.json", json.dumps(_versions(), indent=2) + "\n", overwrite=True
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
    session["load_average"].append(_load_average())
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
        "workers_requested": args.workers,
        "cores": cores,
        "sessions": sessions,
        "wall_time_s": sum(s.get("wall_time_s", 0.0) for s in sessions),
    }
    # metrics.json is written last: its presence marks a complete run
    write_atomic(stage_dir / _run_dir.METRICS, json.dumps(metrics, indent=2) + "\n")
    (stage_dir / _run_dir.MANIFEST).unlink()
    (stage_dir / _run_dir.LOCK).unlink()  # the lock itself is held until the rename is done
    os.rename(stage_dir, final_dir)
    lock.release()
    # the solve-time lines say how many episode processes shared the cores meanwhile
    note = _sharing_note(ran, cores)
    table = report.summary_table(
        summary,
        tracking=report.run_tracking(cfg, env, trajectories),
        tube=cfg["controller"]["tightening"] == "tube",
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


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not every system has one
        return None


def _sharing_note(sessions: list[dict], cores: int) -> str:
    """How many episode processes shared the cores while the solve times were measured."""
    counts = sorted({s["processes"] for s in sessions})
    text = " or ".join(str(c) for c in counts)
    plural = "es" if counts[-1] > 1 else ""
    return (
        f" ({text} episode process{plural} at once on {cores} usable "
        f"core{'s' if cores != 1 else ''})"
    )
