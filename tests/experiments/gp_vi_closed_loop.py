"""Closed loop with the learned GP-VI model against the nominal model, on true systems with
large friction the nominal model lacks.

    python tests/experiments/gp_vi_closed_loop.py [--seed 1000] [--episodes 50] [--workers 2]

For each scenario below, ``vimpc run`` twice on the same episodes (reset seeds ``seed ..
seed + episodes - 1``, disjoint from the seeds the scenarios were written on): as written
(the GP-VI model) and with its ``[model]`` table replaced by the nominal midpoint model
(everything else, the controller included, unchanged). Writes
``results/gp_vi/closed_loop.{csv,md}`` and one figure of the episodes per run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

from _tables import interval, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
SCENARIOS = ("pendulum_gpvi_swingup", "fourbar_gpvi_tracking")
NOMINAL_MODEL = '[model]\nfamily = "nominal"\nintegrator = "midpoint"\n\n'


def nominal_variant(source: Path, folder: Path) -> Path:
    """The scenario with its ``[model]`` table replaced by the nominal midpoint model."""
    text = source.read_text(encoding="utf-8")
    replaced, n = re.subn(r"(?ms)^\[model\]\n.*?(?=^\[)", NOMINAL_MODEL, text)
    if n != 1:
        raise SystemExit(f"{source} has no single [model] table followed by another table")
    path = folder / source.name
    path.write_text(replaced, encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            source = ROOT / "scenarios" / f"{name}.toml"
            variants = {
                "GP-VI": source,
                "nominal": nominal_variant(source, Path(tmp)),
            }
            for label, path in variants.items():
                m, folder = vimpc_run(
                    path, Path(tmp) / f"{name}-{label}", episodes=args.episodes,
                    seed=args.seed, workers=args.workers,
                )  # fmt: skip
                shutil.copy(folder / "episodes.png", OUT / f"closed_loop_{name}_{label}.png")
                rows.append(
                    {
                        "scenario": name,
                        "model": label,
                        "episodes": m["episodes"],
                        "success": m["success_rate"],
                        "success_ci95": interval(m["success_rate_ci95"]),
                        "tracking_rmse": m["tracking_rmse_mean"],
                        "prediction_rmse": m.get("prediction_rmse_mean", float("nan")),
                        "solve_median_ms": m["solve_time_median_ms"],
                        "solve_p95_ms": m["solve_time_p95_ms"],
                        "failed_solves": m["failed_solves"],
                        "solves": m["solves"],
                        "max_constraint_residual": m["max_constraint_residual"],
                    }
                )
                print(rows[-1])
    headers = {
        "scenario": "scenario",
        "model": "model",
        "episodes": "episodes",
        "success": "success",
        "success_ci95": "success 95% CI",
        "tracking_rmse": "tracking RMSE (mean over episodes)",
        "prediction_rmse": "one-step prediction RMSE in closed loop",
        "solve_median_ms": "solve median [ms]",
        "solve_p95_ms": "solve p95 [ms]",
        "failed_solves": "failed solves",
        "solves": "solves",
        "max_constraint_residual": "largest constraint residual of a state",
    }
    command = (
        "python tests/experiments/gp_vi_closed_loop.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    frictions = "; ".join(
        f"{name}: {tomllib.loads((ROOT / 'scenarios' / f'{name}.toml').read_text())['env']['kwargs']['friction']}"
        for name in SCENARIOS
    )
    intro = (
        "Each pair of rows runs one scenario on the same episodes (reset seeds "
        f"{args.seed}-{args.seed + args.episodes - 1}) with the GP-VI model it names and with "
        "its `[model]` table replaced by the nominal midpoint model; the true system has "
        f"viscous friction the nominal model lacks ({frictions}; N m s per joint)."
    )
    after = "\n".join(
        f"![{name} {label}](closed_loop_{name}_{label}.png)"
        for name in SCENARIOS
        for label in ("GP-VI", "nominal")
    )
    print(
        write_table(
            OUT,
            "closed_loop",
            "GP-VI against the nominal model in closed loop",
            command,
            intro,
            rows,
            headers,
            after,
        )  # fmt: skip
    )


if __name__ == "__main__":
    main()
