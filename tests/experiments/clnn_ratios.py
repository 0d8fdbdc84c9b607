"""The constrained-NN paper's error ratio (a baseline's error over a constrained family's)
over training seeds, from committed ``clnn_chain.py`` tables, paired by seed.

    python tests/experiments/clnn_ratios.py [--baseline hnn A0.csv A1.csv ...]
        [--constrained clnn B0.csv B1.csv ...] [--paper-baseline 1.91e-3]
        [--paper-constrained 1.14e-4] [--system 2-pendulum] [--table NAME]

The defaults: HNN (3e-3, the paper's text) over CLNN (1e-2, the authors' code) on the
2-pendulum at the paper's budget, from the committed tables of seeds 0, 1 and 2, and the
paper's errors for them.

Each table is a ``clnn_chain.py`` CSV whose record (``<table>.md.provenance.json``) names
the ``--seed`` it was made with (the training and data seed); the i-th baseline table is
paired with the constrained table of the same seed (a seed that appears on one side only is
refused). Each family may come from its own settings (the tables' commands are listed), so
that each is taken at its own learning rate. Two ratios per seed:

- through the learned vector field, as the paper: both errors with 10 RK4 steps per dt
  (``fine_error``, in place of the authors' dopri5);
- through the model a controller uses: the constrained family's exported variational
  integrator (``vi_error``) against the baseline's field through one RK4 step per dt
  (``rk4_error``, the explicit step a user would export).

Over the seeds: the geometric mean of each ratio and its 95 % t interval on the log ratios
(none with one seed), beside the paper's ratio and half of it (the goal).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quick import add_options, command, parse  # noqa: E402
from _tables import write_table  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "results" / "clnn"
#: the defaults: the 2-pendulum at the paper's budget, each family at its own learning rate
BASELINE = [
    "hnn",
    str(OUT / "chain_paper_n2_seed0.csv"),
    *[str(OUT / f"chain_paper_n2_seed{s}_hnn.csv") for s in (1, 2)],
]
CONSTRAINED = ["clnn", *[str(OUT / f"chain_paper_n2_seed{s}_lr1e-2.csv") for s in (0, 1, 2)]]

#: the two ratios: name, the baseline's column, the constrained family's column
RATIOS = (
    ("learned field, RK4 10 per dt", "fine_error", "fine_error"),
    ("exported model (VI) against RK4 1 per dt", "rk4_error", "vi_error"),
)


def seed_of(table: Path) -> int:
    """The ``--seed`` of the command that made ``table`` (its record's), or 0 without one
    (the script's default)."""
    record = table.with_suffix(".md.provenance.json")
    if not record.exists():
        raise SystemExit(f"{table}: no record {record.name} beside it (a clnn_chain.py table?)")
    command = json.loads(record.read_text())["command"]
    match = re.search(r"--seed (\d+)", command)
    return int(match.group(1)) if match else 0


def error(table: Path, system: str, model: str, column: str) -> float:
    """``column`` of ``model``'s row for ``system`` in ``table`` (a model's row names the
    family first, as ``clnn`` or ``hnn (angles)``)."""
    with open(table, newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["system"] == system and r["model"].split(" ")[0] == model
        ]
    if len(rows) != 1:
        raise SystemExit(f"{table}: {len(rows)} rows of model {model!r} on {system!r}, expected 1")
    value = rows[0].get(column, "")
    try:
        return float(value)
    except ValueError:
        raise SystemExit(f"{table}: {model} has no {column} ({value!r})") from None


def paired(baselines: list[Path], constrained: list[Path]) -> list[tuple[int, Path, Path]]:
    """``(seed, baseline table, constrained table)`` per seed, in seed order."""
    left = {seed_of(t): t for t in baselines}
    right = {seed_of(t): t for t in constrained}
    if len(left) != len(baselines) or len(right) != len(constrained):
        raise SystemExit("two tables of one side were made with the same --seed")
    if set(left) != set(right):
        raise SystemExit(
            f"the seeds do not pair: baseline tables {sorted(left)}, constrained {sorted(right)}"
        )
    return [(s, left[s], right[s]) for s in sorted(left)]


def geometric_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` and its 95 % t interval (NaN ends with one)."""
    logs = np.log(ratios)
    mean = float(np.exp(logs.mean()))
    if len(logs) < 2:
        return mean, float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    return mean, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def verdict(mean: float, lo: float, goal: float) -> str:
    """Whether the ratio reaches ``goal``: by its interval, by its mean alone, or not."""
    if mean < goal:
        return "not met"
    if lo >= goal:
        return "met (the interval above it)"
    return "met by the mean, not by the interval's lower end"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--baseline", nargs="+", default=BASELINE, help="the baseline's model name, its tables"
    )
    parser.add_argument(
        "--constrained", nargs="+", default=CONSTRAINED,
        help="the constrained family's model name, its tables",
    )  # fmt: skip
    parser.add_argument("--system", default="2-pendulum")
    parser.add_argument(
        "--paper-baseline", type=float, default=1.91e-3, help="the paper's baseline error"
    )
    parser.add_argument(
        "--paper-constrained", type=float, default=1.14e-4, help="the paper's family's error"
    )
    parser.add_argument("--table", default="chain_ratios_seeds")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT)
    for name in ("baseline", "constrained"):
        if len(getattr(args, name)) < 2:
            parser.error(
                f"--{name}: a model name and at least one table, got {getattr(args, name)}"
            )
    base_model, base_tables = args.baseline[0], [Path(p) for p in args.baseline[1:]]
    ours_model, our_tables = args.constrained[0], [Path(p) for p in args.constrained[1:]]
    pairs = paired(base_tables, our_tables)
    paper = args.paper_baseline / args.paper_constrained
    rows, per_ratio = [], {name: [] for name, _, _ in RATIOS}
    for seed, b, c in pairs:
        for name, b_col, c_col in RATIOS:
            eb = error(b, args.system, base_model, b_col)
            ec = error(c, args.system, ours_model, c_col)
            per_ratio[name].append(eb / ec)
            rows.append({
                "seed": seed, "evaluation": name, f"{base_model}_error": eb,
                f"{ours_model}_error": ec, "ratio": eb / ec, "baseline_table": b.name,
                "constrained_table": c.name,
            })  # fmt: skip
    for name, _, _ in RATIOS:
        mean, lo, hi = geometric_interval(per_ratio[name])
        rows.append({
            "seed": f"geometric mean of {len(pairs)}", "evaluation": name,
            f"{base_model}_error": "", f"{ours_model}_error": "", "ratio": mean,
            "baseline_table": f"95 % t interval {lo:.3g}-{hi:.3g}",
            "constrained_table": f"paper {paper:.3g}, goal (half) {paper / 2:.3g}: "
                                 + verdict(mean, lo, paper / 2),
        })  # fmt: skip
    intro = (
        f"{base_model} over {ours_model} on the {args.system}, paired by training and data "
        f"seed ({', '.join(str(s) for s, _, _ in pairs)}), each family from its own tables "
        "(their commands are in them; each may have its own learning rate or initial "
        f"weights). The paper's ratio: {args.paper_baseline:g} / {args.paper_constrained:g} = "
        f"{paper:.3g}. Interval: 95 % t interval of the log ratios over the seeds."
    )
    title = f"{base_model} over {ours_model} over training seeds"
    print(write_table(args.out, args.table, title, command(__file__, args.argv), intro, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
