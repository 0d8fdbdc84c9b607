"""Closed loop with the learned GP-VI model against the nominal model, on true systems with
large friction the nominal model lacks.

    python tests/experiments/gp_vi_closed_loop.py [--seed 1000] [--episodes 50] [--workers 2]

For each scenario below, ``vimpc run`` twice on the same episodes (reset seeds ``seed ..
seed + episodes - 1``, disjoint from the seeds the scenarios were written on): as written
(the GP-VI model) and with its ``[model]`` table replaced by the nominal midpoint model
(everything else, the controller included, unchanged). Writes
``results/gp_vi/closed_loop.{csv,md}`` and one figure of the episodes per run.
``--quick --out DIR``: a smoke test into ``DIR``: the first scenario only (each run writes
its figures, a second or more), one episode of 3 steps per run, in this process, the GP-VI
fitted on a few short trajectories (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import tomllib
from pathlib import Path

from _quick import add_options, parse
from _tables import CLOSED_LOOP_HEADERS, closed_loop_row, nominal_variant, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
SCENARIOS = ("pendulum_gpvi_swingup", "fourbar_gpvi_tracking")
# --quick: every run on 4 trajectories of 5 steps and 3 control steps; the GP-VI with 16
# samples, 8 support points, one start of 5 optimiser steps
QUICK_SETS = ["data.trajectories=4", "data.steps=5", "episodes.steps=3"]
QUICK_MODEL = ["model.samples=16", "model.support_points=8", "model.restarts=1",
               "model.iterations=5"]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    out = args.out
    sets = {"GP-VI": [*QUICK_SETS, *QUICK_MODEL], "nominal": QUICK_SETS} if args.quick else {}
    scenarios = SCENARIOS[:1] if args.quick else SCENARIOS
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in scenarios:
            source = ROOT / "scenarios" / f"{name}.toml"
            variants = {
                "GP-VI": source,
                "nominal": nominal_variant(source, Path(tmp)),
            }
            for label, path in variants.items():
                m, folder = vimpc_run(
                    path, Path(tmp) / f"{name}-{label}", episodes=args.episodes,
                    seed=args.seed, workers=args.workers, sets=sets.get(label, []),
                )  # fmt: skip
                shutil.copy(folder / "episodes.png", out / f"closed_loop_{name}_{label}.png")
                rows.append(closed_loop_row(name, label, m))
                print(rows[-1])
    command = (
        "python tests/experiments/gp_vi_closed_loop.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    frictions = "; ".join(
        f"{name}: {tomllib.loads((ROOT / 'scenarios' / f'{name}.toml').read_text())['env']['kwargs']['friction']}"
        for name in scenarios
    )
    intro = (
        "Each pair of rows runs one scenario on the same episodes (reset seeds "
        f"{args.seed}-{args.seed + args.episodes - 1}) with the GP-VI model it names and with "
        "its `[model]` table replaced by the nominal midpoint model; the true system has "
        f"viscous friction the nominal model lacks ({frictions}; N m s per joint)."
    )
    after = "\n".join(
        f"![{name} {label}](closed_loop_{name}_{label}.png)"
        for name in scenarios
        for label in ("GP-VI", "nominal")
    )
    print(
        write_table(
            out,
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
