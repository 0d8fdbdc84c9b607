"""The ``vimpc`` command: ``run`` a scenario, ``list`` scenarios, ``export`` a model."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from vimpc.errors import ConfigError, VimpcError


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("vimpc", "numpy", "scipy", "casadi", "gymnasium", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_dir(root: Path, name: str) -> tuple[Path, Path]:
    """A new ``root/name/<UTC timestamp>`` (never an existing one) and its staging twin."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = root / name
    final = base / stamp
    k = 1
    while final.exists() or final.with_name(final.name + ".partial").exists():
        final = base / f"{stamp}-{k}"
        k += 1
    return final, final.with_name(final.name + ".partial")


def _summary_table(summary: dict[str, Any]) -> str:
    rows = [
        ("episodes", f"{summary['episodes']}"),
        ("success rate", f"{summary['success_rate']:.2f}"),
        ("mean cost", f"{summary['mean_cost']:.4g}"),
        ("tracking RMSE", f"{summary['tracking_rmse']:.4g}"),
        ("safety violations", f"{summary['violations']} (max {summary['max_violation']:.3g})"),
        ("min safety slack", f"{summary['min_slack']:.4g}"),
        ("constraint residual (max)", f"{summary['max_constraint_residual']:.2e}"),
        (
            "solve time median / p95 / max",
            f"{summary['solve_time_median_ms']:.2f} / "
            f"{summary['solve_time_p95_ms']:.2f} / {summary['solve_time_max_ms']:.2f} ms",
        ),
        ("failed solves", f"{summary['failed_solves']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from vimpc import plotting, scenario
    from vimpc.closedloop import episode_metrics, run_episode, summarize

    started = time.perf_counter()
    cfg = scenario.load_scenario(args.scenario, args.set or [])
    name = cfg["scenario"]["name"]
    final_dir, stage_dir = _run_dir(Path(args.out), name)
    print(f"vimpc run {name}: {cfg['scenario']['description']}".rstrip(": "))

    env = scenario.build_env(cfg)
    model = scenario.build_model(cfg, env)
    controller = scenario.build_controller(cfg, model, env)
    success = scenario.success_test(cfg)
    periodic = tuple(cfg["controller"]["cost"]["periodic"])
    tracked = np.flatnonzero(np.diag(controller.cost.Q)).tolist()
    ep = cfg["episodes"]
    trajectories, per_episode = [], []
    with tqdm(
        total=ep["count"] * ep["steps"], desc="episodes", unit="step", disable=args.quiet
    ) as bar:
        for k in range(ep["count"]):
            traj = run_episode(
                env, controller, ep["steps"], ep["seed"] + k, on_step=lambda _: bar.update()
            )
            trajectories.append(traj)
            per_episode.append(episode_metrics(traj, success, periodic, tracked))
    summary = summarize(per_episode, trajectories)

    stage_dir.mkdir(parents=True)
    _write_text(stage_dir / "config.resolved.toml", scenario.dump_toml(cfg))
    _write_text(stage_dir / "versions.json", json.dumps(_versions(), indent=2) + "\n")
    for k, traj in enumerate(trajectories):
        np.savez(stage_dir / f"episode_{k:03d}.npz", **traj.arrays())
    if not args.no_plots:
        names = [
            *env.nominal_system.coordinate_names,
            *(f"{n}_dot" for n in env.nominal_system.coordinate_names),
        ]
        cons = controller.constraints
        plotting.plot_states_inputs(
            trajectories[0],
            names,
            env.nominal_system.input_names,
            cons.u_min,
            cons.u_max,
            stage_dir / "states_inputs.png",
            cons.obs_min,
            cons.obs_max,
            periodic,
        )
        plotting.plot_solve_times(trajectories, stage_dir / "solve_times.png")
        plotting.plot_mechanism(
            trajectories[0],
            env.nominal_system,
            stage_dir / "mechanism.png",
            circles=[
                (c["center"], c["radius"]) for c in cfg["controller"]["constraints"]["circles"]
            ],
        )
    metrics = {**summary, "per_episode": per_episode, "wall_time_s": time.perf_counter() - started}
    # metrics.json is written last: its presence marks a complete run
    _write_text(stage_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    os.replace(stage_dir, final_dir)
    print(_summary_table(summary))
    print(f"  wall time                     {metrics['wall_time_s']:.1f} s")
    print(f"results: {final_dir}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    import tomllib

    import gymnasium

    import vimpc  # noqa: F401

    folder = Path(args.dir)
    files = sorted(folder.glob("*.toml"))
    if not files:
        print(f"no scenarios in {folder}")
    for f in files:
        try:
            desc = tomllib.loads(f.read_text()).get("scenario", {}).get("description", "")
        except tomllib.TOMLDecodeError:
            desc = "(invalid TOML)"
        print(f"{str(f):<40} {desc}")
    print("environments: " + ", ".join(k for k in gymnasium.registry if k.startswith("vimpc/")))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vimpc import scenario

    cfg = scenario.load_scenario(args.scenario, args.set or [])
    out = Path(args.output)
    if out.suffix != ".vimpc":
        raise ConfigError(f"--output must end in .vimpc, got {str(out)!r}")
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{str(out)!r} exists; choose another path or pass --overwrite")
    env = scenario.build_env(cfg)
    model = scenario.build_model(cfg, env)
    from vimpc.model_file import save

    path = save(model, out, overwrite=args.overwrite)
    print(
        f"wrote {path}: {model.info.get('system', '?')} model, dt = {model.dt} s, "
        f"nx = {model.nx}, nu = {model.nu}, residual: {'yes' if model.implicit else 'no'}"
    )
    print(
        "load it with vimpc.DiscreteModel.load(path), or read the JSON and casadi.Function.deserialize"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vimpc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario file")
    run.add_argument("scenario", help="path to a scenario .toml file")
    run.add_argument(
        "--set", action="append", metavar="KEY.SUB=VALUE", help="override one key (repeatable)"
    )
    run.add_argument("--out", default="results/runs", help="results root (default: results/runs)")
    run.add_argument("--no-plots", action="store_true", help="skip the figures")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_run)
    exp = sub.add_parser("export", help="save a scenario's model to a .vimpc file")
    exp.add_argument("scenario", help="path to a scenario .toml file")
    exp.add_argument("-o", "--output", required=True, help="the .vimpc file to write")
    exp.add_argument("--set", action="append", metavar="KEY.SUB=VALUE", help="override one key")
    exp.add_argument("--overwrite", action="store_true", help="replace an existing file")
    exp.set_defaults(func=cmd_export)
    lst = sub.add_parser("list", help="list scenario files and environments")
    lst.add_argument("--dir", default="scenarios", help="folder of scenario files")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except VimpcError as exc:
        print(f"vimpc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vimpc: interrupted; no result was written as complete", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
