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
import shutil
import tempfile
import tomllib
from pathlib import Path

from _tables import CLOSED_LOOP_HEADERS, closed_loop_row, nominal_variant, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
SCENARIOS = ("pendulum_gpvi_swingup", "fourbar_gpvi_tracking")


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
                rows.append(closed_loop_row(name, label, m))
                print(rows[-1])
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
            CLOSED_LOOP_HEADERS,
            after,
        )  # fmt: skip
    )


if __name__ == "__main__":
    main()
