"""Time from building the MPC to its first solved step, per scenario and solver.

Run from the repository root::

    python tests/benchmarks/bench_mpc_setup.py [--reps 20]

For the cart-pole and pendulum swing-up scenarios and each solver configuration, every
repetition builds a fresh nominal model (not timed: the model exists before the
controller), then times ``build_controller`` (``MPC(...)`` construction; the Cost and
Constraints records it also makes cost microseconds) and the first call
``controller(obs, 0.0)`` from ``env.reset(seed=rep)``, cold (no warm start). Repetitions
are interleaved over the configurations; the first repetition of each configuration is
also reported alone ("cold"), as it pays one-time costs of the process (loading a solver
plugin). Issue target: construction + first call <= 0.5 s.

``--quick --out DIR``: one repetition, into ``DIR`` (a smoke test).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import CARTPOLE, OUT, PENDULUM, SOLVER_CONFIGS, add_options, met, parse, write_results

from vimpc.pipeline import build_controller, build_env, build_model
from vimpc.scenario import load_scenario

TARGET_S = 0.5


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"reps": 1})

    cases = {}
    for scenario in (CARTPOLE, PENDULUM):
        for label, overrides in SOLVER_CONFIGS.items():
            cfg = load_scenario(scenario, overrides)
            cases[(cfg["scenario"]["name"], label)] = (cfg, build_env(cfg))
    times = {key: {"model": [], "build": [], "first": [], "failed": 0} for key in cases}
    for rep in range(args.reps):
        for key, (cfg, env) in cases.items():
            t0 = time.perf_counter()
            model = build_model(cfg, env)
            t1 = time.perf_counter()
            controller = build_controller(cfg, model, env)
            t2 = time.perf_counter()
            obs, _ = env.reset(seed=rep)
            t3 = time.perf_counter()
            result = controller(obs, 0.0)
            t4 = time.perf_counter()
            rec = times[key]
            rec["model"].append(t1 - t0)
            rec["build"].append(t2 - t1)
            rec["first"].append(t4 - t3)
            rec["failed"] += not result.status.ok
        print(f"repetition {rep + 1}/{args.reps} done")

    rows = []
    for (scenario, label), rec in times.items():
        total = np.add(rec["build"], rec["first"])
        cfg = cases[(scenario, label)][0]
        rows.append(
            {
                "scenario": scenario,
                "horizon": cfg["controller"]["horizon"],
                "config": label,
                "build_median_s": float(np.median(rec["build"])),
                "first_call_median_s": float(np.median(rec["first"])),
                "total_median_s": float(np.median(total)),
                "total_p95_s": float(np.percentile(total, 95)),
                "total_cold_s": float(total[0]),
                "model_median_s": float(np.median(rec["model"])),
                "first_not_ok": f"{rec['failed']}/{args.reps}",
                "target": met(float(np.percentile(total, 95)) <= TARGET_S),
            }
        )
    columns = [
        ("scenario", "scenario", "s"),
        ("horizon", "N", "d"),
        ("config", "solver / transcription", "s"),
        ("build_median_s", "MPC(...) median [s]", ".3f"),
        ("first_call_median_s", "first call median [s]", ".3f"),
        ("total_median_s", "total median [s]", ".3f"),
        ("total_p95_s", "total p95 [s]", ".3f"),
        ("total_cold_s", "total, cold [s]", ".3f"),
        ("model_median_s", "(model build) [s]", ".3f"),
        ("first_not_ok", "first solve not ok", "s"),
        ("target", "p95 <= 0.5 s", "s"),
    ]
    notes = f"""
Time to first solved step = `MPC(...)` construction (through `vimpc.pipeline.build_controller`,
which also creates the Cost/Constraints records) + the first `controller(obs, 0.0)` call (cold,
no warm start) on `env.reset(seed=rep)`. {args.reps} repetitions per row, interleaved over the
rows; each builds a fresh nominal midpoint model first (its time shown in brackets, not
included). "cold" is the first repetition in the process (it would include one-time costs such as
loading a solver plugin).
Scenarios as in `scenarios/*.toml` (cart-pole N = 20, max_iter 100; pendulum N = 40 with
energy shaping, max_iter 30); only the solver and transcription are overridden.
"first solve not ok": first calls whose status was FAILED or INFEASIBLE (fallback input); for
those the time is to a failed first step, not a solved one (the pendulum scenario's max_iter 30
is too few for a cold fatrop/ipopt solve).
Issue target: construction + first call <= {TARGET_S} s (judged on the p95).
"""
    write_results(
        "mpc_setup",
        "MPC construction to first solved step",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
