"""Run every scenario over many seeds and tabulate their metrics with intervals.

    python tests/experiments/scenarios_summary.py [--episodes 50] [--workers 2] [--seed S]

Each row is ``vimpc run scenarios/<scenario>.toml --set episodes.count=<episodes>`` (reset
seeds from the scenario file's ``episodes.seed``, or from ``S``: seeds the scenarios were
not designed on). Writes results/scenarios/{summary.md, summary.csv} and each scenario's
figures (``<scenario>_episodes.png``, ``_states_inputs.png``, ``_mechanism.png``,
``_safety.png``). ``--quick --out DIR``: a smoke test into ``DIR``: two scenarios
(``QUICK_NAMES``), one episode of 3 steps each, in this process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from _quick import add_options, parse
from _tables import interval, write_table

from vimpc import cli

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "scenarios"
NAMES = (
    "pendulum_swingup",
    "cartpole_swingup",
    "cartpole_safe",
    "fourbar_tracking",
    "rollingdisk_parking",
)
FIGURES = ("episodes.png", "states_inputs.png", "mechanism.png", "safety.png")
# --quick: a scenario without and one with a bound (data, fit, tube), 3 steps each; its
# calibration set is the smallest split conformal takes at delta 0.05 (20 transitions)
QUICK_NAMES = ("pendulum_swingup", "cartpole_safe")
QUICK_SETS = ["episodes.steps=3"]
QUICK_SAFE = ["data.trajectories=4", "data.heldout_trajectories=8", "data.steps=5"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None, help="first reset seed of every row")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    out, names = args.out, QUICK_NAMES if args.quick else NAMES
    seed = [] if args.seed is None else ["--set", f"episodes.seed={args.seed}"]
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            quick = [*QUICK_SETS, *(QUICK_SAFE if name == "cartpole_safe" else [])]
            quick = [a for item in quick for a in ("--set", item)] if args.quick else []
            argv = [
                "run",
                str(ROOT / "scenarios" / f"{name}.toml"),
                "--out",
                tmp,
                "--quiet",
                "--workers",
                str(args.workers),
                "--set",
                f"episodes.count={args.episodes}",
                *seed,
                *quick,
            ]
            if cli.main(argv) != 0:
                raise SystemExit(f"vimpc run {' '.join(argv[1:])} failed")
            (run,) = [p for p in (Path(tmp) / name).iterdir() if p.is_dir()]
            m = json.loads((run / "metrics.json").read_text())
            rows.append(
                {
                    "scenario": name,
                    "episodes": m["episodes"],
                    "seeds": f"{m['seeds'][0]}-{m['seeds'][-1]}",
                    "success": m["success_rate"],
                    "success_ci95": interval(m["success_rate_ci95"]),
                    "safety_limits": "; ".join(x["name"] for x in m["safety_limits"]),
                    "episodes_with_violation": m["episodes_with_violation"],
                    "violation_ci95": interval(m["violation_rate_ci95"]),
                    "min_margin": m["min_margin"],
                    "mean_min_margin": m["min_margin_mean"],
                    "cost_mean": m["cost_mean"],
                    "cost_std": m["cost_std"],
                    "tracking_rmse_mean": m["tracking_rmse_mean"],
                    "max_constraint_residual": m["max_constraint_residual"],
                    "solve_median_ms": m["solve_time_median_ms"],
                    "solve_p95_ms": m["solve_time_p95_ms"],
                    "solves": m["solves"],
                    "failed_solves": m["failed_solves"],
                    "late_solves": m["late_solves"],
                    "iteration_limit_solves": m["iteration_limit_solves"],
                    "wall_time_s": m["wall_time_s"],
                }
            )
            for fig in FIGURES:
                if (run / fig).exists():
                    shutil.copy(run / fig, out / f"{name}_{fig}")
            print(rows[-1])
    for stale in out.glob("*.png"):
        if not any(stale.name == f"{n}_{f}" for n in names for f in FIGURES):
            stale.unlink()
    command = (
        f"python tests/experiments/scenarios_summary.py --episodes {args.episodes} "
        f"--workers {args.workers}" + ("" if args.seed is None else f" --seed {args.seed}")
    )
    intro = (
        f"Each row is `vimpc run scenarios/<scenario>.toml --set episodes.count={args.episodes}"
        + ("" if args.seed is None else f" --set episodes.seed={args.seed}")
        + "`. "
        "The true systems are perturbed (masses and inertias within 10 %, friction, "
        "observation noise 1e-3); the controller's model is the nominal system with the "
        "midpoint variational integrator (`cartpole_safe`: with a conformal bound and the "
        "tube). Rates with their 95 % Wilson interval over episodes. Safety, on the env's "
        "safety margin of the true state: episodes with a violation (any step with a negative "
        "margin), min margin (the smallest over all episodes: the margin the controller "
        "really had), mean of the episodes' minimum margins. Solve times in ms, wall time in "
        f"s (everything included); the episodes ran in {args.workers} worker processes sharing "
        "the machine's cores, so solve times are those of a loaded machine "
        "(results/benchmarks/ has them measured alone)."
    )
    figures = "\n".join(
        " ".join(f"![{name}]({name}_{f})" for f in FIGURES if (out / f"{name}_{f}").exists())
        for name in names
    )
    title = "The scenarios over many seeds"
    print(write_table(out, "summary", title, command, intro, rows, after=figures))


if __name__ == "__main__":
    main()
