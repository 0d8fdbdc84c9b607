"""Where a fatrop controller's call goes: fatrop's own timers per solve (the Lagrangian's
Hessian, the constraints' Jacobian, the other function evaluations, its search directions,
its initialisation) and the call's work around the solve (the tube; the rest: Python and
conversions), with the iterations by phase of the episode.

Run from the repository root::

    python tests/benchmarks/bench_fatrop_breakdown.py [--scenarios NAME ...] [--seeds 1000 1001 1002]

Each scenario (default: the two Hamel rolling-disk parkings, the shipped scenarios whose
calls' p95 is above a sixth of their period in ``results/benchmarks/scenarios.md``) runs
closed loop at its defaults (its fit from the fit cache or made first, not timed;
``run_episode``, each episode's first plan before the clock, not counted) from each reset
seed. Per call: the wall time of the whole call (``MPCResult.call_time``), of the solve
(``solve_time``), fatrop's iterations and its timers (``solver_stats()["fatrop"]``:
``eval_hess_time``, ``eval_jac_time``, ``compute_sd_time``, ``initialization_time``, the
constraint, gradient and objective evaluations together, and the rest of its
``time_total``), the tube's (``MPCResult.tube_time``: its compiled function along the
guess and the margins) and the rest of the call outside the solve. Medians and p95 over the
calls, pooled over the seeds; the iterations' median and p95 over the episode's first
``--early`` steps (the approach) and the rest, and the share of the period's sixth: how far
the call's p95 is from ``dt / 6``. Times are this machine's under its load (the load average
is in the header); the shares between the parts are what the table is for.

``--quick --out DIR``: a smoke test into ``DIR``: one seed of 3 steps of
``rollingdisk_hamel_parking``, its network fitted for one epoch on a few trajectories,
horizon 3, nothing compiled.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import OUT, ROOT, RecordedController, add_options, parse, write_results

from vimpc.closedloop import run_episode
from vimpc.pipeline import build_controller, build_env, obtain_model
from vimpc.scenario import load_scenario

SCENARIOS = ("rollingdisk_hamel_parking", "mujoco_rollingdisk_hamel_parking")
#: fatrop's timers, by the column they go to
TIMERS = {
    "hessian": ("eval_hess_time",),
    "jacobian": ("eval_jac_time",),
    "other_functions": ("eval_cv_time", "eval_grad_time", "eval_obj_time"),
    "search_direction": ("compute_sd_time",),
    "initialization": ("initialization_time",),
}
QUICK_SETS = [
    "model.epochs=1",
    "data.trajectories=10",
    "data.heldout_trajectories=40",
    "controller.horizon=3",
    'controller.jit="none"',
]


def _fatrop_timers(result, stats: dict) -> tuple:
    """A call's result and fatrop's timers of its solve."""
    return result, dict(stats.get("fatrop", {}))


def _row(name: str, dt: float, calls: list, steps: list[int], early: int) -> dict:
    call = np.array([r.call_time for r, _ in calls]) * 1e3
    solve = np.array([r.solve_time for r, _ in calls]) * 1e3
    iters = np.array([r.iterations for r, _ in calls], dtype=float)
    phase = np.array(steps) < early
    parts = {
        key: np.array([sum(float(t.get(k, np.nan)) for k in keys) for _, t in calls]) * 1e3
        for key, keys in TIMERS.items()
    }
    total = np.array([float(t.get("time_total", np.nan)) for _, t in calls]) * 1e3
    parts["fatrop_rest"] = total - sum(parts.values())
    parts["tube"] = np.array([r.tube_time for r, _ in calls]) * 1e3
    parts["rest_of_call"] = call - solve - parts["tube"]
    row = {
        "scenario": name,
        "dt_ms": 1e3 * dt,
        "calls": len(calls),
        "call_median_ms": float(np.median(call)),
        "call_p95_ms": float(np.percentile(call, 95)),
        "sixth_ms": 1e3 * dt / 6,
        "p95_over_sixth": float(np.percentile(call, 95) / (1e3 * dt / 6)),
        "solve_median_ms": float(np.median(solve)),
        "solve_p95_ms": float(np.percentile(solve, 95)),
    }
    for key, values in parts.items():
        row[f"{key}_median_ms"] = float(np.nanmedian(values))
        row[f"{key}_p95_ms"] = float(np.nanpercentile(values, 95))
        row[f"{key}_share"] = float(np.nansum(values) / call.sum())
    for label, mask in (("early", phase), ("late", ~phase)):
        picked = iters[mask] if mask.any() else np.array([np.nan])
        row[f"iterations_{label}_median"] = float(np.nanmedian(picked))
        row[f"iterations_{label}_p95"] = float(np.nanpercentile(picked, 95))
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002])
    parser.add_argument("--early", type=int, default=40, help="steps counted as the approach")
    add_options(parser, OUT)
    args = parse(
        parser, argv, OUT,
        quick={"scenarios": [SCENARIOS[0]], "seeds": [1000], "early": 2},
    )  # fmt: skip
    sets = QUICK_SETS if args.quick else []
    rows = []
    for name in args.scenarios:
        cfg = load_scenario(ROOT / "scenarios" / f"{name}.toml", overrides=sets)
        if cfg["controller"]["solver"] != "fatrop":
            raise SystemExit(f"--scenarios: {name} does not use fatrop")
        env = build_env(cfg)
        model = obtain_model(cfg, env, log=lambda text: None).model
        ctrl = RecordedController(build_controller(cfg, model, env), _fatrop_timers)
        n_steps = 3 if args.quick else cfg["episodes"]["steps"]
        steps: list[int] = []
        for seed in args.seeds:
            run_episode(env, ctrl, n_steps, seed)
            steps += list(range(n_steps))
            print(f"{name}: seed {seed} done", flush=True)
        env.close()
        assert len(ctrl.calls) == len(steps), "one recorded call per step"
        rows.append(_row(name, float(cfg["env"]["dt"]), ctrl.calls, steps, args.early))
    columns = [
        ("scenario", "scenario", ""),
        ("calls", "calls", ""),
        ("call_median_ms", "call median [ms]", ".3g"),
        ("call_p95_ms", "call p95 [ms]", ".3g"),
        ("sixth_ms", "dt/6 [ms]", ".3g"),
        ("p95_over_sixth", "call p95 / (dt/6)", ".2f"),
        ("solve_median_ms", "solve median [ms]", ".3g"),
        ("solve_p95_ms", "solve p95 [ms]", ".3g"),
    ]
    for key, label in (
        ("hessian", "Hessian"),
        ("jacobian", "Jacobian"),
        ("other_functions", "other functions"),
        ("search_direction", "search directions"),
        ("initialization", "initialisation"),
        ("fatrop_rest", "fatrop's rest"),
        ("tube", "the tube (its compiled function along the guess, the margins)"),
        ("rest_of_call", "the rest of the call (Python, conversions)"),
    ):
        columns += [
            (f"{key}_shown", f"{label}: median / p95 [ms]", ""),
            (f"{key}_share", f"{label}: share of all call time", ".2f"),
        ]
    columns += [
        ("iterations_early_median", f"iterations, first {args.early} steps: median", ".0f"),
        ("iterations_early_p95", f"iterations, first {args.early} steps: p95", ".0f"),
        ("iterations_late_median", "iterations, later: median", ".0f"),
        ("iterations_late_p95", "iterations, later: p95", ".0f"),
    ]
    for r in rows:  # one column per part: "median / p95"
        for key in (*TIMERS, "fatrop_rest", "tube", "rest_of_call"):
            r[f"{key}_shown"] = f"{r[f'{key}_median_ms']:.3g} / {r[f'{key}_p95_ms']:.3g}"
    write_results(
        "fatrop_breakdown",
        "Where a fatrop controller's call goes",
        rows,
        columns,
        notes=__doc__.split("\n\n", 2)[2],
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
