"""Closed loop with the forced LSI model against the nominal model: the pendulum swing-up.

    python tests/experiments/lsi_closed_loop.py [--seed 1000] [--episodes 50] [--workers 2]

``vimpc run scenarios/pendulum_lsi_swingup.toml`` twice on the same episodes (reset seeds
``seed .. seed + episodes - 1``, disjoint from the seed the scenario was written on): as
written (the LSI model, learned from excited position snapshots of the true, frictionless
pendulum whose mass and inertia are up to 10 % off the nominal ones) and with its
``[model]`` table replaced by the nominal midpoint model (everything else, the controller
and its compiled residual included, unchanged). Writes ``results/lsi/closed_loop.{csv,md}``
and one figure of the episodes per run. ``--quick --out DIR``: a smoke test into ``DIR``:
one episode of 3 steps per run, in this process, LSI fitted on a few short trajectories,
the residual not compiled (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _quick import add_options, parse
from _tables import CLOSED_LOOP_HEADERS, closed_loop_row, nominal_variant, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "lsi"
SCENARIO = "pendulum_lsi_swingup"
# --quick: both runs on 20 trajectories of 10 steps, 3 control steps, the residual not
# compiled to C (its compile alone takes seconds); LSI with 50 centres
QUICK_SETS = [
    "data.trajectories=20",
    "data.steps=10",
    "episodes.steps=3",
    'controller.jit="none"',
]
QUICK_MODEL = ["model.centres=50"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    out = args.out
    sets = {"LSI": [*QUICK_SETS, *QUICK_MODEL], "nominal": QUICK_SETS} if args.quick else {}
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = ROOT / "scenarios" / f"{SCENARIO}.toml"
        for label, path in (("LSI", source), ("nominal", nominal_variant(source, Path(tmp)))):
            m, folder = vimpc_run(
                path, Path(tmp) / label, episodes=args.episodes, seed=args.seed,
                workers=args.workers, sets=sets.get(label, []),
            )  # fmt: skip
            shutil.copy(folder / "episodes.png", out / f"closed_loop_{label}.png")
            rows.append(closed_loop_row(SCENARIO, label, m))
            print(rows[-1])
    command = (
        "python tests/experiments/lsi_closed_loop.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    intro = (
        f"Both rows run `scenarios/{SCENARIO}.toml` on the same episodes (reset seeds "
        f"{args.seed}-{args.seed + args.episodes - 1}): with the forced LSI model it names and "
        "with its `[model]` table replaced by the nominal midpoint model. The true pendulum "
        "is frictionless, its mass and inertia drawn within 10 % of the nominal ones; the "
        "torque limit (2 N m) forces pumping."
    )
    after = "\n".join(f"![{label}](closed_loop_{label}.png)" for label in ("LSI", "nominal"))
    print(
        write_table(
            out,
            "closed_loop",
            "Forced LSI against the nominal model in closed loop",
            command,
            intro,
            rows,
            CLOSED_LOOP_HEADERS,
            after,
        )  # fmt: skip
    )


if __name__ == "__main__":
    main()
