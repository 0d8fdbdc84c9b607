"""The ``vimpc`` command: ``run`` a scenario, ``fit`` its model, ``list`` scenarios, print the
``schema``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import numpy as np

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


PARTIAL = ".partial"


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
    cfg = scenario.load_scenario(find_scenario(args.scenario), args.set or [])
    if args.workers < 1:
        raise ConfigError(f"--workers must be a positive integer, got {args.workers}")
    root = Path(args.out)
    _usable_folder(root, "--out")
    name = cfg["scenario"]["name"]
    final_dir, stage_dir = _reserve_run_dir(root, name)
    try:
        _run(cfg, args, started, final_dir, stage_dir)
    except BaseException:
        # an interrupted or failed run leaves nothing that looks like a result
        shutil.rmtree(stage_dir, ignore_errors=True)
        raise
    return 0


def _run(cfg, args, started: float, final_dir: Path, stage_dir: Path) -> None:
    """The body of ``vimpc run``: results are staged in ``stage_dir``, renamed to
    ``final_dir`` when complete."""
    from tqdm import tqdm

    from vimpc import pipeline, report, scenario
    from vimpc.closedloop import summarize

    name = cfg["scenario"]["name"]
    print(f"vimpc run {name}: {cfg['scenario']['description']}".rstrip(": "))
    write_atomic(stage_dir / "config.resolved.toml", scenario.dump_toml(cfg))
    env = pipeline.build_env(cfg)
    source = _obtain_model(cfg, env, args, print)
    path = None if source.path is None else str(source.path)
    # the plots need a controller here; a serial run uses the same one for its episodes
    runner = None if args.workers > 1 and args.no_plots else pipeline.EpisodeRunner(cfg, path)
    ep = cfg["episodes"]
    seeds = [ep["seed"] + k for k in range(ep["count"])]
    with tqdm(
        total=ep["count"] * ep["steps"], desc="episodes", unit="step", disable=args.quiet
    ) as bar:
        results = pipeline.run_episodes(
            cfg,
            path,
            seeds,
            workers=args.workers,
            on_step=(lambda: bar.update()) if args.workers == 1 else None,
            on_episode=(lambda steps: bar.update(steps)) if args.workers > 1 else None,
            runner=runner,
        )
    trajectories = [traj for traj, _ in results]
    per_episode = [m for _, m in results]
    summary = summarize(per_episode, trajectories, env.safety_limits)

    write_atomic(stage_dir / "versions.json", json.dumps(_versions(), indent=2) + "\n")
    for k, traj in enumerate(trajectories):
        write_atomic(
            stage_dir / f"episode_{k:03d}.npz", lambda h, traj=traj: np.savez(h, **traj.arrays())
        )
    if not args.no_plots:
        report.run_figures(cfg, runner, trajectories, stage_dir)
    model_info = {
        "path": path,
        "fitted_now": source.report is not None and not source.reused,
        "reused_cached_fit": source.reused,
        "fit": source.report,
        "delta": source.model.delta,
    }
    metrics = {
        **summary,
        "model": model_info,
        "per_episode": per_episode,
        "seeds": seeds,
        "workers": args.workers,
        "wall_time_s": time.perf_counter() - started,
    }
    # metrics.json is written last: its presence marks a complete run
    write_atomic(stage_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    os.rename(stage_dir, final_dir)
    print(report.summary_table(summary, tracking=report.run_tracking(cfg, env, trajectories)))
    print(f"  wall time                     {metrics['wall_time_s']:.1f} s")
    print(f"results: {final_dir}")


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

    def scenario_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "scenario",
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

    run = sub.add_parser("run", help="run a scenario file")
    scenario_args(run)
    run.add_argument("--out", default="results/runs", help="results root (default: results/runs)")
    run.add_argument("--no-plots", action="store_true", help="skip the figures")
    run.add_argument(
        "--workers", type=int, default=1, help="episodes in parallel processes (same results)"
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
        except Exception:
            if interrupted():
                return _interrupted()
            raise


def _interrupted() -> int:
    print("vimpc: interrupted; no result was written as complete", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
