"""GP-VI MPC solve times against the nominal model's in the same run, and the GP-VI fit time.

Run from the repository root::

    python tests/benchmarks/bench_gpvi.py [--seeds 0 1 2] [--fits 3]

The scenario ``scenarios/cartpole_gpvi_safe.toml`` (cart-pole swing-up, horizon 20,
dt 0.05 s, GP-VI model with 100 support points) runs closed loop for 160 steps from each
seed, without the tube, once per configuration: the GP-VI model and the nominal midpoint
model under the same controller settings, each with the solver and transcription below
("NLP compiled": ``jit = "auto"``, the whole NLP compiled to C once and loaded from the
compile cache; "interpreted": ``jit = "none"``; "jit model": the model's residual and its
derivatives compiled to C, the NLP around it interpreted; compiles happen when the
controller is built, before the timed solves); and the GP-VI model once more as the
scenario ships it, with its feedback tube. Episodes are interleaved seed by
seed so machine-load drift hits every configuration alike; solve times
(``MPCResult.solve_time``) are pooled over the seeds.

The fit: the scenario's 512-sample GP-VI model (two GPs, the scenario's restarts and
iterations) fitted ``--fits`` times on the scenario's training data, wall time of
``fit`` (hyperparameters, posteriors, support points, bound).

Issue targets: median solve <= 5 ms with 100 support points; fit <= 60 s.

``--quick --out DIR``: a smoke test into ``DIR``: one seed of 3 steps, one fit, on a tiny
model (``QUICK_SETS``) without the "jit model" row (its C compile alone takes seconds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import OUT, ROOT, TimedController, add_options, met, ms_stats, parse, write_results

from vimpc import pipeline
from vimpc.closedloop import episode_metrics, run_episode
from vimpc.models import NominalModel
from vimpc.scenario import load_scenario

SCENARIO = ROOT / "scenarios" / "cartpole_gpvi_safe.toml"
BASE = ["controller.tightening=none"]
FATROP = ["controller.solver=fatrop", "controller.transcription=implicit"]
SOLVERS = {
    "fatrop / implicit (default: NLP compiled)": FATROP,
    "fatrop / implicit, interpreted": [*FATROP, "controller.jit=none"],
    "fatrop / step, interpreted": [
        "controller.solver=fatrop",
        "controller.transcription=step",
        "controller.jit=none",
    ],
    "sqpmethod GN / implicit (NLP compiled)": [
        "controller.solver=sqpmethod",
        "controller.transcription=implicit",
        "controller.qpsol=qrqp",
        "controller.hessian=gauss-newton",
    ],
    "sqpmethod GN / implicit, jit model": [
        "controller.solver=sqpmethod",
        "controller.transcription=implicit",
        "controller.qpsol=qrqp",
        "controller.hessian=gauss-newton",
        "controller.jit=model",
    ],
}
#: the GP-VI model alone, as the scenario ships: its feedback tube on (the nominal model has
#: no bound to tighten by)
TUBE = "fatrop / implicit (default: NLP compiled), the scenario's feedback tube"
MEDIAN_MS, FIT_S = 5.0, 60.0
# --quick: a tiny GP-VI (4 + 38 held-out trajectories of 20 steps: the 19 calibration windows
# its horizon-level bound needs at least; 16 samples, 8 support points, one start of 5
# optimiser steps) and 3 control steps
QUICK_SETS = [
    "data.trajectories=4",
    "data.steps=20",
    "data.heldout_trajectories=38",
    "model.samples=16",
    "model.support_points=8",
    "model.restarts=1",
    "model.iterations=5",
    "episodes.steps=3",
]


def solve_times(seeds: list[int], sets: list[str] = (), solvers: dict = SOLVERS) -> list[dict]:
    base = load_scenario(SCENARIO, [*BASE, *sets])
    env = pipeline.build_env(base)
    models = {
        "GP-VI (100 support points)": pipeline.build_model(base, env),
        "nominal midpoint": NominalModel(env.nominal_system, env.dt).discrete_model(),
    }
    cfgs = {label: load_scenario(SCENARIO, [*BASE, *sets, *ov]) for label, ov in solvers.items()}
    controllers = {
        (model_label, solver_label): TimedController(pipeline.build_controller(cfg, model, env))
        for model_label, model in models.items()
        for solver_label, cfg in cfgs.items()
    }
    gp = "GP-VI (100 support points)"
    shipped = load_scenario(SCENARIO, list(sets))
    controllers[(gp, TUBE)] = TimedController(pipeline.build_controller(shipped, models[gp], env))
    steps, success = base["episodes"]["steps"], pipeline.success_test(base)
    runs: dict = {key: [] for key in controllers}
    for seed in seeds:
        for key, ctl in controllers.items():
            traj = run_episode(env, ctl, steps, seed)
            runs[key].append((traj, episode_metrics(traj, success, periodic=(1,))))
            print(
                f"seed {seed} {key[0]} / {key[1]}: "
                f"{runs[key][-1][1]['solve_time_median_ms']:.2f} ms median"
            )
    rows = []
    for (model_label, solver_label), episodes in runs.items():
        times = np.concatenate([t.solve_times for t, _ in episodes])
        statuses = np.concatenate([t.status for t, _ in episodes])
        rows.append(
            {
                "model": model_label,
                "solver": solver_label,
                **ms_stats(times),
                "solves": len(times),
                "failed": int(np.sum(~np.isin(statuses, ["SOLVED", "ITERATION_LIMIT", "LATE"]))),
                "success": float(np.mean([m["success"] for _, m in episodes])),
            }
        )
    return rows


def fit_times(n: int, sets: list[str] = ()) -> list[float]:
    unbounded = ['model.bound="none"', 'model.bound_level="step"', "model.bound_horizon=0"]
    cfg = load_scenario(SCENARIO, [*BASE, *sets, *unbounded])
    env = pipeline.build_env(cfg)
    train = pipeline.collect(cfg, env, "train")
    out = []
    for _ in range(n):
        family = pipeline.build_family(cfg, env.nominal_system)
        t0 = time.perf_counter()
        family.fit(train)
        out.append(time.perf_counter() - t0)
        print(f"fit: {out[-1]:.1f} s")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fits", type=int, default=3)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [0], "fits": 1})
    sets, solvers = [], SOLVERS
    if args.quick:
        sets = QUICK_SETS
        solvers = {k: v for k, v in SOLVERS.items() if "controller.jit=model" not in v}
    rows = solve_times(args.seeds, sets, solvers)
    fits = fit_times(args.fits, sets)
    gp = min(r["median_ms"] for r in rows if r["model"].startswith("GP-VI"))
    tube = next(r["median_ms"] for r in rows if r["solver"] == TUBE)
    extra = (
        f"\nFit of the 512-sample GP-VI cart-pole (2 GPs, restarts and iterations of the "
        f"scenario), {len(fits)} fits: median {np.median(fits):.1f} s, max {max(fits):.1f} s "
        f"(target <= {FIT_S:.0f} s: {met(max(fits) <= FIT_S)}).\n\n"
        f"Fastest GP-VI configuration: median solve {gp:.2f} ms (target <= {MEDIAN_MS:.0f} ms: "
        f"{met(gp <= MEDIAN_MS)}).\n\n"
        f"GP-VI as the scenario ships it (the feedback tube on): median solve {tube:.2f} ms "
        f"(target <= {MEDIAN_MS:.0f} ms: {met(tube <= MEDIAN_MS)}).\n"
    )
    write_results(
        "gpvi",
        "GP-VI MPC on the cart-pole: solve times beside the nominal model's, and the fit",
        rows,
        [
            ("model", "model", ""),
            ("solver", "solver / transcription", ""),
            ("median_ms", "median [ms]", ".2f"),
            ("p95_ms", "p95 [ms]", ".2f"),
            ("max_ms", "max [ms]", ".1f"),
            ("solves", "solves", ""),
            ("failed", "failed", ""),
            ("success", "success", ".2f"),
        ],
        notes=__doc__.split("\n\n", 2)[2].split("Issue targets")[0],
        extra=extra,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
