"""Interior-point warm starts: every shipped fatrop scenario with the solves from the previous
plan started at the solver's own barrier parameter and at smaller ones (``warm_barrier``).

Run from the repository root::

    python tests/benchmarks/bench_warm_barrier.py [--episodes 20] [--seed 1000]
        [--values none 1e-2 1e-3] [--only NAME ...]

Each scenario in ``scenarios/`` whose controller is ``fatrop`` runs closed loop at its
settings but ``warm_barrier`` (the scenario's own value among the rows, marked), once per
value, over the same episodes (reset seeds from ``--seed``; episodes interleaved seed by
seed so machine-load drift hits every value alike; one process, the NLP compiled as
``jit = "auto"`` chooses). ``none``: every solve starts at fatrop's own barrier parameter
0.1 and bound push 1e-2. A value: the solves from the previous plan start at it, with bound
push 1e-6 (``WARM_BOUND_PUSH``); the first plan (``MPC.start``, before the clock) and a
solve after a failed one start at fatrop's own. Solve times and iterations pooled over
every call; failed: calls whose status is not ``SOLVED`` (iteration limit and failures, each
applying what the status says); late: calls longer than the period; success: the
scenario's success test, with its Wilson 95 % interval; rail or obstacle: the largest
violation of the scenario's safety rows by the true state (0: none).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from _common import OUT, ROOT, add_options, ms_stats, parse, write_results

from vimpc import pipeline
from vimpc.closedloop import episode_metrics, run_episode
from vimpc.closedloop.metrics import wilson_interval
from vimpc.scenario import load_scenario

SCENARIOS = ROOT / "scenarios"
QUICK = {"episodes": 1, "values": ["none", "1e-3"], "only": ["cartpole_swingup"]}


def fatrop_scenarios(only: list[str] | None) -> dict[str, dict]:
    """The shipped scenarios whose controller is fatrop (or those named in ``only``)."""
    found = {}
    for path in sorted(SCENARIOS.glob("*.toml")):
        if only and path.stem not in only:
            continue
        cfg = load_scenario(path)
        if cfg["controller"]["solver"] == "fatrop":
            found[path.stem] = cfg
    missing = set(only or ()) - set(found)
    if missing:
        raise SystemExit(f"--only: no fatrop scenario named {sorted(missing)}")
    return found


def run(name: str, values: list[str], episodes: int, seed: int, steps: int | None) -> list[dict]:
    path = SCENARIOS / f"{name}.toml"
    base = load_scenario(path)
    env = pipeline.build_env(base)
    model = pipeline.build_model(base, env)
    success = pipeline.success_test(base)
    own = base["controller"]["warm_barrier"]
    steps = steps or base["episodes"]["steps"]
    ctrls = {}
    for value in values:
        cfg = load_scenario(path, [f"controller.warm_barrier={value}"] if value != "none" else [])
        if value == "none":
            cfg["controller"]["warm_barrier"] = None
        ctrls[value] = pipeline.build_controller(cfg, model, env)
    runs: dict[str, list] = {v: [] for v in values}
    for s in range(seed, seed + episodes):
        for value, ctrl in ctrls.items():
            traj = run_episode(env, ctrl, steps, s)
            runs[value].append((traj, episode_metrics(traj, success)))
        print(f"{name}: seed {s} done", flush=True)
    env.close()
    rows = []
    for value, eps in runs.items():
        times = np.concatenate([t.solve_times for t, _ in eps])
        its = np.concatenate([t.iterations for t, _ in eps])
        status = np.concatenate([t.status for t, _ in eps])
        wins = int(sum(bool(m["success"]) for _, m in eps))
        lo, hi = wilson_interval(wins, len(eps))
        own_value = value == "none" if own is None else (value != "none" and float(value) == own)
        rows.append(
            {
                "scenario": name,
                "warm_barrier": value + (" (scenario)" if own_value else ""),
                "episodes": len(eps),
                "solves": len(times),
                **ms_stats(times),
                "iterations_median": float(np.median(its)),
                "iterations_p95": float(np.percentile(its, 95)),
                "iterations_max": int(its.max()),
                "failed": int(np.sum(status != "SOLVED")),
                "late": int(sum(int(np.sum(t.late)) for t, _ in eps)),
                "success": wins / len(eps),
                "success_ci95": f"{lo:.2f}-{hi:.2f}",
                "max_violation": float(max(m["max_violation"] for _, m in eps)),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--values", nargs="+", default=["none", "1e-2", "1e-3"])
    parser.add_argument("--only", nargs="+", default=None)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick=QUICK)
    for value in args.values:
        if value != "none" and not (math.isfinite(float(value)) and float(value) > 0):
            parser.error(f"--values: each must be 'none' or a positive number, got {value!r}")
    rows = []
    for name in fatrop_scenarios(args.only):
        rows += run(name, args.values, args.episodes, args.seed, 3 if args.quick else None)
    write_results(
        "warm_barrier",
        "fatrop's solves from the previous plan: the barrier parameter they start at",
        rows,
        [
            ("scenario", "scenario", ""),
            ("warm_barrier", "warm_barrier", ""),
            ("episodes", "episodes", ""),
            ("solves", "solves", ""),
            ("median_ms", "median [ms]", ".3g"),
            ("p95_ms", "p95 [ms]", ".3g"),
            ("max_ms", "max [ms]", ".3g"),
            ("iterations_median", "iterations median", ".0f"),
            ("iterations_p95", "iterations p95", ".0f"),
            ("iterations_max", "iterations max", ""),
            ("failed", "not SOLVED", ""),
            ("late", "late", ""),
            ("success", "success", ".2f"),
            ("success_ci95", "success Wilson 95%", ""),
            ("max_violation", "largest safety-row violation", ".3g"),
        ],
        notes=__doc__.split("\n\n", 2)[2],
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
