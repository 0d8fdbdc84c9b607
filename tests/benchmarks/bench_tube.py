"""What the tube costs per solve on the safe cart-pole, side by side with no tightening.

Run from the repository root::

    python tests/benchmarks/bench_tube.py [--seeds 0 1 2 3 4]

``scenarios/cartpole_safe.toml`` (horizon 20, dt 0.05 s, nominal midpoint model with a
conformal bound, fatrop, implicit transcription), its model fitted once (or taken from the
cache), three controllers on that one model, episodes interleaved seed by seed:

- ``none``: no tightening (the same NLP as without a bound);
- ``tube``: the scenario's tube;
- ``tube, bound x 1e-9``: the tube computed and passed to the NLP exactly as in ``tube``,
  but from the bound scaled by 1e-9, so the tightened problem is the untightened one: what
  the tube's computation and parameters cost at equal problem difficulty.

Times per control step: the NLP solve (``MPCResult.solve_time``), the tube computation
(``MPCResult.tube_time``), and the whole ``controller(obs, t)`` call. Issue target: the
tube adds at most 20 % to the median solve time (NLP + tube).

``--quick --out DIR``: a smoke test into ``DIR``: one seed of 3 steps, the model fitted on
a few short trajectories (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from _common import OUT, ROOT, TimedController, add_options, met, ms_stats, parse, write_results

from vimpc.closedloop import episode_metrics, run_episode
from vimpc.models.calibration import conformal_bound
from vimpc.pipeline import build_controller, build_env, build_model, success_test
from vimpc.scenario import load_scenario

SAFE = ROOT / "scenarios" / "cartpole_safe.toml"
TARGET = 1.2
# --quick: 4 training and 8 held-out trajectories of 5 steps (20 calibration transitions,
# the fewest split conformal takes at delta 0.05; the bound per step on them, not on
# closed-loop episodes) and 3 control steps
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
    'data.calibration="heldout"',
    'model.bound_level="step"',
    "model.bound_horizon=0",
]


def _scaled(model, factor: float):
    info = model.bound_info.extra
    bound = conformal_bound(
        model,
        model.bound_info.delta,
        info["quantile"] * factor,
        info["n_calibration"],
        scale=np.array(info["scale"]),
    )
    return dataclasses.replace(bound.apply(model), info=model.info)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [0]})
    sets = QUICK_SETS if args.quick else []

    cfg = load_scenario(SAFE, sets)
    none_cfg = load_scenario(SAFE, [*sets, 'controller.tightening="none"'])
    env = build_env(cfg)
    model = build_model(cfg, env)
    steps, success = cfg["episodes"]["steps"], success_test(cfg)
    controllers = {
        "none": TimedController(build_controller(none_cfg, model, env)),
        "tube": TimedController(build_controller(cfg, model, env)),
        "tube, bound x 1e-9": TimedController(build_controller(cfg, _scaled(model, 1e-9), env)),
    }
    runs: dict[str, list] = {label: [] for label in controllers}
    for seed in args.seeds:
        for label, ctl in controllers.items():
            traj = run_episode(env, ctl, steps, seed)
            tube_times = np.array(ctl.tube_times[-len(traj.inputs) :])
            runs[label].append((traj, episode_metrics(traj, success, periodic=(1,)), tube_times))
            print(f"seed {seed} {label}: {np.median(traj.solve_times) * 1e3:.2f} ms median solve")

    rows, base = [], None
    for label, episodes in runs.items():
        solve = np.concatenate([t.solve_times for t, _, _ in episodes])
        tube = np.concatenate([tt for _, _, tt in episodes])
        total = solve + tube
        call = np.asarray(controllers[label].call_times)
        iters = np.concatenate([t.iterations for t, _, _ in episodes])
        status = np.concatenate([t.status for t, _, _ in episodes])
        mets = [m for _, m, _ in episodes]
        stats = {
            "config": label,
            "steps": int(solve.size),
            **{f"solve_{k}": v for k, v in ms_stats(solve).items()},
            "tube_median_ms": float(np.median(tube)) * 1e3,
            **{f"total_{k}": v for k, v in ms_stats(total).items()},
            "call_median_ms": float(np.median(call)) * 1e3,
            "iter_median": float(np.median(iters)),
            "failed": int(np.count_nonzero(np.isin(status, ("FAILED", "INFEASIBLE")))),
            "success": f"{sum(int(m['success']) for m in mets)}/{len(mets)}",
            "off_rail": f"{sum(m['violations'] > 0 for m in mets)}/{len(mets)}",
        }
        base = base or stats
        stats["vs_none"] = stats["total_median_ms"] / base["total_median_ms"]
        stats["target"] = "-" if label == "none" else met(stats["vs_none"] <= TARGET)
        rows.append(stats)
    columns = [
        ("config", "tightening", "s"),
        ("solve_median_ms", "NLP median [ms]", ".2f"),
        ("solve_p95_ms", "NLP p95 [ms]", ".2f"),
        ("tube_median_ms", "tube median [ms]", ".3f"),
        ("total_median_ms", "NLP + tube median [ms]", ".2f"),
        ("total_p95_ms", "NLP + tube p95 [ms]", ".2f"),
        ("vs_none", "median / none", ".2f"),
        ("call_median_ms", "whole call median [ms]", ".2f"),
        ("iter_median", "iterations (median)", ".0f"),
        ("failed", "failed solves", "d"),
        ("success", "success", "s"),
        ("off_rail", "episodes off the rail", "s"),
        ("target", "<= 1.2 x none", "s"),
    ]
    notes = f"""
`scenarios/cartpole_safe.toml`, its fitted model (nominal midpoint, conformal bound, delta
{model.delta}), seeds {args.seeds}, {steps} steps each, episodes interleaved across the rows.
The scenario's tube: `tube = "{cfg["controller"]["tube"]}"`, `tube_errors =
"{cfg["controller"]["tube_errors"]}"` (for the feedback tube the tube's time includes the
LQR's Riccati recursion along the plan). Times are wall times on a shared machine: compare
rows of one table, made under the load average above.
"tube, bound x 1e-9" computes and passes the tube exactly as "tube" does, from a bound
scaled to nothing, so its NLP is the untightened one: the difference to "none" is the cost
of the tube's computation and parameters; the difference between "tube" and it is the
tightened problem being harder (more active constraints, more iterations). Target
(issue): the tube adds at most 20 % to the median solve time (NLP + tube), judged on the
"tube" row.
"""
    write_results(
        "tube",
        "Safe cart-pole: what the tube costs per solve",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
