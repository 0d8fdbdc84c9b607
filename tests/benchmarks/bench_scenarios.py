"""Every shipped scenario at its default settings: solve times against its sampling period,
and late solves, over many seeds.

Run from the repository root::

    python tests/benchmarks/bench_scenarios.py [--episodes 50] [--seed 1000] [--workers 1]
        [--only NAME ...]

Each ``scenarios/*.toml`` runs as a user runs it, ``vimpc run <scenario>`` with only the
number of episodes and the first seed set (``episodes.count``, ``episodes.seed``), into a
temporary folder; its ``metrics.json`` gives the solve times (``MPCResult.solve_time``,
pooled over every step of every episode), the late solves (a call, tube and solve and the
Python around them, longer than the period) and the failed ones. As ``vimpc run`` does, each
episode's first plan is made before its first step, outside the loop's clock
(:meth:`vimpc.mpc.MPC.start`); its time is a column of its own. A fit the scenario needs
comes from the fit cache or is made first (not timed). The controller is then built once
more in this process from the cached model, to record what ``jit = "auto"`` chose
(``nlp``: the whole NLP compiled, ``none``: interpreted) and the build time with a warm
compile cache. Goals (issue): median <= dt/10, p95 <= dt/2, no late solve (MuJoCo
scenarios: late calls <= 0.5 %), and for every scenario the calls' p95 <= dt/6 (a 3x slower
computer within the period).

Each scenario's table goes to ``results/benchmarks/scenarios/<name>.md`` and ``.csv``, all
of them to ``results/benchmarks/scenarios.md`` (rebuilt from the per-scenario tables, so
``--only`` re-measures some and keeps the others, each row dated). ``--quick --out DIR``:
the pendulum swing-up, 2 episodes of its default length.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from _common import OUT, ROOT, add_options, met, parse, vimpc_run, write_results

from vimpc import pipeline
from vimpc.scenario import load_scenario

COLUMNS = [
    ("scenario", "scenario", ""),
    ("solver", "solver / transcription", ""),
    ("jit", "jit (auto chose)", ""),
    ("dt_ms", "dt [ms]", ".0f"),
    ("episodes", "episodes", "d"),
    ("solves", "solves", "d"),
    ("median_ms", "median [ms]", ".3g"),
    ("p95_ms", "p95 [ms]", ".3g"),
    ("max_ms", "max [ms]", ".3g"),
    ("call_ms", "calls (tube, solve, Python): median / p95 [ms]", ""),
    ("call_max_ms", "slowest call [ms]", ".3g"),
    ("late", "late solves", "d"),
    ("failed", "failed solves", "d"),
    ("success", "success (Wilson 95%)", ""),
    ("first_ms", "first plan, before the clock: median / max [ms]", ""),
    ("prep_ms", "rti preparation between samples: median / max [ms]", ""),
    ("workers", "episode processes", "d"),
    ("load", "load average (start, end)", ""),
    ("build_s", "controller build, warm cache [s]", ".3f"),
    ("median_goal", "median <= dt/10", ""),
    ("p95_goal", "p95 <= dt/2", ""),
    ("late_goal", "no late solve", ""),
    ("late_share_goal", "late calls <= 0.5 %", ""),
    ("slow_goal", "call p95 <= dt/6 (a 3x slower computer within the period)", ""),
    ("off_limits", "episodes off the safety limits (Wilson 95%)", ""),
]


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def measure(path: Path, episodes: int, seed: int, workers: int) -> dict:
    """Run one scenario through the CLI and read its metrics; build its controller again."""
    name = path.stem
    with tempfile.TemporaryDirectory(prefix="vimpc_bench_") as out:
        load_start = _load()
        cmd = vimpc_run(
            path, out, f"episodes.count={episodes}", f"episodes.seed={seed}", workers=workers
        )
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode not in (0, 3):
            raise RuntimeError(f"{name}: vimpc run failed ({done.returncode}):\n{done.stderr}")
        (run,) = (Path(out) / name).iterdir()
        metrics = json.loads((run / "metrics.json").read_text())
        load_end = _load()
    cfg = load_scenario(path)
    env = pipeline.build_env(cfg)
    model = pipeline.obtain_model(cfg, env, log=lambda s: None).model
    t0 = time.perf_counter()
    ctrl = pipeline.build_controller(cfg, model, env)
    build = time.perf_counter() - t0
    dt_ms = 1e3 * model.dt
    ccfg = cfg["controller"]
    jit = ctrl.jit + (" (compiled)" if ctrl.nlp_compiled or ctrl.model_compiled else "")
    median, p95 = metrics["solve_time_median_ms"], metrics["solve_time_p95_ms"]
    return {
        "scenario": name,
        "solver": f"{ccfg['solver']} / {ctrl.transcription}",
        "jit": jit,
        "dt_ms": dt_ms,
        "episodes": metrics["episodes"],
        "solves": metrics["solves"],
        "median_ms": median,
        "p95_ms": p95,
        "max_ms": metrics["solve_time_max_ms"],
        "call_ms": "{:.3g} / {:.3g}".format(
            metrics["call_time_median_ms"], metrics["call_time_p95_ms"]
        ),
        "call_max_ms": metrics["call_time_max_ms"],
        "late": metrics["late_solves"],
        "failed": metrics["failed_solves"],
        "success": "{:.2f} ({:.2f}-{:.2f})".format(
            metrics["success_rate"], *metrics["success_rate_ci95"]
        ),
        "first_ms": "{:.3g} / {:.3g}".format(
            metrics["first_plan_time_median_ms"], metrics["first_plan_time_max_ms"]
        ),
        "prep_ms": "{:.3g} / {:.3g}".format(
            metrics["preparation_time_median_ms"], metrics["preparation_time_max_ms"]
        ),
        "workers": metrics["workers"],
        "load": f"{load_start}, {load_end}",
        "build_s": build,
        "median_goal": met(median <= dt_ms / 10),
        "p95_goal": met(p95 <= dt_ms / 2),
        "late_goal": met(metrics["late_solves"] == 0),
        "late_share_goal": met(metrics["late_solves"] <= 0.005 * metrics["solves"]),
        "slow_goal": met(metrics["call_time_p95_ms"] <= dt_ms / 6),
        "off_limits": "{} of {} ({:.2f}-{:.2f})".format(
            metrics["episodes_with_violation"], metrics["episodes"], *metrics["violation_rate_ci95"]
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="scenario names")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 2, "only": ["pendulum_swingup"]})
    paths = sorted((ROOT / "scenarios").glob("*.toml"))
    if args.only:
        unknown = set(args.only) - {p.stem for p in paths}
        if unknown:
            parser.error(f"--only: no shipped scenario named {sorted(unknown)}")
        paths = [p for p in paths if p.stem in args.only]
    notes = (
        f"`vimpc run <scenario>` at the scenario's defaults, {args.episodes} episodes from seed "
        f"{args.seed} ({args.workers} episode process(es) at once on this 2-core machine), "
        "solve times pooled over every step; late: calls longer than the period; each "
        "episode's first plan made before its first step, outside the loop's clock (`MPC.start`"
        ", as `vimpc run` does), and timed apart; `rti`: the median is the feedback phase, the "
        "preparation between samples a column of its own, and a sample whose call and "
        "preparation outlast the period is late; goals "
        "(issue): median <= dt/10, p95 <= dt/2, no late solve; for the MuJoCo scenarios late "
        "calls <= 0.5 %; for every scenario the calls' p95 <= dt/6, so that a computer 3x "
        'slower keeps the period. `jit`: what `jit = "auto"` '
        "chose (`nlp (compiled)`: the whole NLP compiled once and cached; `none`: the "
        "real-time iteration and the condensed SQP, interpreted)."
    )
    rows = []
    for path in paths:
        print(f"{path.stem}: {args.episodes} episodes ...", flush=True)
        row = measure(path, args.episodes, args.seed, args.workers)
        rows.append(row)
        write_results(
            row["scenario"], f"{row['scenario']}: solve times at the default settings", [row],
            COLUMNS, notes, out=Path(args.out or OUT) / "scenarios",
        )  # fmt: skip
    summary(Path(args.out or OUT), notes)


def summary(out: Path, notes: str) -> None:
    """``<out>/scenarios.md`` and ``.csv`` from every per-scenario table in
    ``<out>/scenarios/``, each row with the date and sources of the run that measured it
    (``--only`` re-measures some scenarios and keeps the others' rows)."""
    rows = []
    for table in sorted((out / "scenarios").glob("*.csv")):
        lines = table.read_text().splitlines()
        meta = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
        row = next(csv.DictReader([line for line in lines if not line.startswith("#")]))
        for key, _, spec in COLUMNS:
            if key not in row:  # a column added after that run
                row[key] = "not recorded by that run"
            elif spec.endswith("f") or spec.endswith("g"):
                row[key] = float(row[key])
            elif spec == "d":
                row[key] = int(row[key])
        row["measured"] = meta["date"]
        row["sources"] = meta["machine"].rsplit("sources sha256 ", 1)[-1]
        rows.append(row)
    write_results(
        "scenarios", "Every shipped scenario: solve times at the default settings", rows,
        [*COLUMNS, ("measured", "measured", ""), ("sources", "vimpc sources", "")],
        notes + " Each row comes from its scenario's table in `scenarios/` (the date and the "
        "sources' hash of the run that measured it).",
        out=out,
    )  # fmt: skip


if __name__ == "__main__":
    main()
