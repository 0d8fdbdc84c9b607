"""The ``vimpc`` command: ``run`` a scenario, ``fit`` its model, ``list`` scenarios, print the
``schema``."""

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
from vimpc._interrupt import interrupt_latch, interrupted
from vimpc.errors import ConfigError, VimpcError


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

    source = pipeline.obtain_model(cfg, env, refit=args.refit, progress=not args.quiet, log=log)
    if source.report is not None and not source.reused:
        log("fit summary (held-out validation data):")
        log(report.fit_table(source.report, list(env.obs_names), env.nominal_system.state_units))
    return source


def cmd_run(args: argparse.Namespace) -> int:
    from vimpc import scenario
    from vimpc.scenario.catalog import find_scenario

    started = time.perf_counter()
    if args.workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {args.workers}")
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
    from vimpc import pipeline, scenario
    from vimpc.scenario.catalog import find_scenario

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
        _run_dir.check_episodes(stage_dir, _run_dir.finished(stage_dir, count))
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
    model = manifest.get("model")
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
        source = _obtain_model(cfg, env, args, print)
        path = None if source.path is None else str(source.path)
        model_info = {
            "path": path,
            "sha256": None if path is None else pipeline.file_digest(path),
            "fitted_now": source.report is not None and not source.reused,
            "reused_cached_fit": source.reused,
            "fit": source.report,
            "delta": source.model.delta,
        }
        manifest["model"] = model_info
        _run_dir.write_manifest(stage_dir, manifest)
    path = model_info["path"]
    count, steps = manifest["episodes"], cfg["episodes"]["steps"]
    seeds = manifest["seeds"]
    missing = sorted(set(range(count)) - set(_run_dir.finished(stage_dir, count)))
    workers, why = pipeline.worker_count(args.workers, len(missing))
    cores = pipeline.usable_cores()
    if why is not None and missing:
        shared = ": more processes would share the cores and slow every solve"
        print(
            f"--workers {args.workers} capped to {workers} ({why})"
            + (shared if workers == cores else "")
        )
    session.update(workers_requested=args.workers, processes=workers, cores=cores)
    # what else ran on the machine meanwhile: the 1-minute load average, before and after
    session["load_average"] = [_load_average()]
    session["episodes_run"] = 0
    # the plots need a controller here; a serial run uses the same one for its episodes
    plots = not args.no_plots
    runner = pipeline.EpisodeRunner(cfg, path) if plots or (workers == 1 and missing) else None
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
            pipeline.run_episodes(
                cfg,
                path,
                [seeds[k] for k in missing],
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

    write_atomic(
        stage_dir / "versions.json", json.dumps(_versions(), indent=2) + "\n", overwrite=True
    )
    if plots:
        report.run_figures(cfg, runner, trajectories, stage_dir)
    sessions = manifest["sessions"]
    ran = [s for s in sessions if s.get("episodes_run")] or [session]
    processes = max(s["processes"] for s in ran)
    session["ended"] = "complete"
    session["load_average"].append(_load_average())
    session["wall_time_s"] = time.perf_counter() - started
    all_failed = summary["solves"] > 0 and summary["failed_solves"] == summary["solves"]
    metrics = {
        **summary,
        "outcome": "all solves failed" if all_failed else "complete",
        "model": model_info,
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
    table = report.summary_table(summary, tracking=report.run_tracking(cfg, env, trajectories))
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


def cmd_fit(args: argparse.Namespace) -> int:
    from vimpc import pipeline, scenario
    from vimpc.model_file import FILE_SUFFIX, save
    from vimpc.scenario.catalog import find_scenario

    cfg = scenario.load_scenario(find_scenario(args.scenario), args.set or [])
    out = Path(args.output)
    if out.suffix != FILE_SUFFIX:
        raise ConfigError(f"--output must end in {FILE_SUFFIX}, got {str(out)!r}")
    if out.is_dir():
        raise ConfigError(f"--output {str(out)!r} is a folder; give a file name ending in .vimpc")
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{str(out)!r} exists; choose another path or pass --overwrite")
    if not out.parent.is_dir():
        raise ConfigError(f"--output {str(out)!r}: the folder {str(out.parent)!r} does not exist")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--output {str(out)!r}: the folder {str(out.parent)!r} is not writable")
    env = pipeline.build_env(cfg)
    source = _obtain_model(cfg, env, args, print)
    model = source.model
    try:
        path = save(model, out, overwrite=args.overwrite)
    except FileExistsError:
        raise ConfigError(
            f"{str(out)!r} appeared while the model was being built; choose another --output "
            "or pass --overwrite (a cached fit is reused)"
        ) from None
    parts = [f"residual: {'yes' if model.implicit else 'no'}"]
    if model.bound is not None:
        parts.append(f"bound with delta = {model.delta}")
    print(
        f"wrote {path}: {model.info.get('system', '?')} model ({model.info.get('model', '?')}), "
        f"dt = {model.dt} s, nx = {model.nx}, nu = {model.nu}, " + ", ".join(parts)
    )
    print(
        "use it with model.path in a scenario, vimpc.load_model(path), or read the JSON and "
        "casadi.Function.deserialize"
    )
    return 0


def _description(path: Path) -> str:
    """The ``scenario.description`` of a file for the listing, or why it was skipped."""
    from vimpc.scenario import read_toml

    try:
        table = read_toml(path).get("scenario", {})
        desc = table.get("description", "") if isinstance(table, dict) else ""
        return desc if isinstance(desc, str) else ""
    except ConfigError as exc:
        return f"(skipped: {exc})"


def cmd_list(args: argparse.Namespace) -> int:
    import gymnasium

    import vimpc  # noqa: F401
    from vimpc.scenario.catalog import shipped_folder, shipped_scenarios

    if args.dir is None:
        # the shipped scenarios, by the name that runs them from any folder
        entries = shipped_scenarios()
        folder = shipped_folder()
    else:
        folder = Path(args.dir)
        if not folder.is_dir():
            raise ConfigError(f"--dir {str(folder)!r} is not a folder")
        entries = {f.name: f for f in sorted(folder.glob("*.toml"))}
    if not entries:
        print(f"no scenarios in {folder}")
    width = max((len(name) for name in entries), default=0)
    for name, path in entries.items():
        print(f"{name:<{width}}  {_description(path)}")
    if args.dir is None and entries:
        example = "pendulum_swingup" if "pendulum_swingup" in entries else next(iter(entries))
        print(
            f"run one by name from any folder: vimpc run {example} (the file "
            f"{entries[example]}; copy it to start your own and run it by its path)"
        )
    else:
        print(f"({folder}; run one by its path)")
    print("environments: " + ", ".join(k for k in gymnasium.registry if k.startswith("vimpc/")))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from vimpc.scenario import schema_markdown

    print(schema_markdown(), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vimpc import __version__

    parser = argparse.ArgumentParser(
        prog="vimpc",
        description="Learning-based model-predictive control of mechanical systems: run a "
        "scenario, fit and export its model, list scenarios, print the scenario schema.",
    )
    parser.add_argument("--version", action="version", version=f"vimpc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def scenario_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
        p.add_argument(
            "scenario",
            nargs="?" if optional else None,
            help="a scenario .toml file, or the name of a shipped one (vimpc list); an existing "
            "file wins over a shipped name",
        )
        p.add_argument(
            "--set", action="append", metavar="KEY.SUB=VALUE", help="override one key (repeatable)"
        )
        p.add_argument(
            "--refit", action="store_true", help="fit again instead of reusing a cached fit"
        )
        p.add_argument("--quiet", action="store_true", help="no progress bars")

    run = sub.add_parser(
        "run",
        help="run a scenario file",
        description="Run a scenario's episodes in closed loop. Results go to "
        "OUT/<scenario>/<UTC timestamp>/; while the run goes on the folder is named "
        "<timestamp>.partial, holds every episode finished so far and a run.json that lists "
        "the missing ones, and metrics.json is written last, when the run is complete.",
        epilog="exit codes: 0 complete; 2 an error vimpc explains (bad input is refused before "
        "any work; a run that fails later keeps its finished episodes for --resume); "
        f"{EXIT_ALL_SOLVES_FAILED} complete, but every solve failed (results written, "
        'metrics.json says "outcome": "all solves failed"); 130 interrupted (the finished '
        "episodes are kept and the command that resumes them is printed); 1 an unexpected "
        "error (finished episodes kept as on an interrupt). A killed run leaves its .partial "
        "folder: --resume finishes it, and the next run of the scenario names it.",
    )
    scenario_args(run, optional=True)
    run.add_argument(
        "--out", default=None, help=f"results root (default: {DEFAULT_OUT}; not with --resume)"
    )
    run.add_argument("--no-plots", action="store_true", help="skip the figures")
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="episodes in parallel processes (same results); at most one per episode and one "
        "per usable core",
    )
    run.add_argument(
        "--resume",
        metavar="FOLDER",
        default=None,
        help="finish an unfinished run (its .partial folder): run only its missing episodes, "
        "with the configuration and model of its finished ones (a scenario and --set given "
        "too must match them)",
    )
    run.set_defaults(func=cmd_run)
    for name, text in (
        ("fit", "collect data, fit the scenario's model and write it to a .vimpc file"),
        ("export", "the same as fit (for models with nothing to fit: build and write)"),
    ):
        fit = sub.add_parser(name, help=text)
        scenario_args(fit)
        fit.add_argument("-o", "--output", required=True, help="the .vimpc file to write")
        fit.add_argument("--overwrite", action="store_true", help="replace an existing file")
        fit.set_defaults(func=cmd_fit)
    lst = sub.add_parser("list", help="list scenario files and environments")
    lst.add_argument(
        "--dir", default=None, help="folder of scenario files (default: the shipped scenarios)"
    )
    lst.set_defaults(func=cmd_list)
    schema = sub.add_parser("schema", help="print the scenario schema (markdown tables)")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):  # lines appear as they are printed, also in a pipe
        sys.stdout.reconfigure(line_buffering=True)
    with interrupt_latch():
        try:
            return args.func(args)
        except KeyboardInterrupt:
            return _interrupted()
        except VimpcError as exc:
            if interrupted():  # an error a Ctrl-C caused inside CasADi
                return _interrupted()
            print(f"vimpc: error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            if interrupted():
                return _interrupted()
            # the file system said no (a name too long, a read-only or full disk, ...):
            # finished episodes are kept as on any error
            where = f": {str(exc.filename)[:200]!r}" if exc.filename else ""
            print(f"vimpc: error: {exc.strerror or exc}{where}", file=sys.stderr)
            return 2
        except Exception:
            if interrupted():
                return _interrupted()
            raise


def _interrupted() -> int:
    print("vimpc: interrupted; no result was written as complete", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
