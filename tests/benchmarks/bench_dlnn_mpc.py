"""Solve times of the cart-pole balancing MPC on the learned DLNN model and on the nominal
model, in the same run.

Run from the repository root::

    python tests/benchmarks/bench_dlnn_mpc.py [--seeds 100 101 102 103 104] [--steps 20]

The scenario ``scenarios/cartpole_dlnn_balance.toml`` (horizon 20, dt 0.05 s, the tube of
a conformal bound on the rail, true perturbed cart-pole with friction and observation
noise, starts near upright) is built through ``vimpc.scenario`` twice: as written (the DLNN
model, fitted once by the scenario's ``[data]`` and cached like ``vimpc fit`` does) and with
``model.family = "nominal"`` (the nominal midpoint model with the same conformal bound). Each
solver configuration runs ``run_episode`` from each reset seed for ``--steps`` steps
(closed loop, warm-started from the shifted last solution as in use); episodes are
interleaved (seed by seed, every row) so machine-load drift hits all rows alike. Times are
``MPCResult.solve_time`` (the wall time of the NLP solver call), pooled over the seeds; the
build time is the controller's construction (and, with ``jit = "model"``, the C compile of
the model's residual). Target: median <= 5 ms for the scenario's configuration on the
DLNN model.

``--quick --out DIR``: a smoke test into ``DIR``: one seed of 3 steps, the scenario's
configuration only, the DLNN fitted for a few epochs on a few short trajectories.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _common import OUT, ROOT, TimedController, add_options, met, ms_stats, parse, write_results

from vimpc.closedloop import episode_metrics, run_episode
from vimpc.pipeline import build_controller, build_env, obtain_model, success_test
from vimpc.scenario import load_scenario

sys.path.insert(0, str(ROOT / "tests" / "experiments"))
from dlnn_closed_loop import QUICK_DLNN, QUICK_SETS, nominal_variant  # noqa: E402

SCENARIO = ROOT / "scenarios" / "cartpole_dlnn_balance.toml"
SCENARIO_ROW = "rti (qrqp, GN) / implicit (scenario)"
SQP = 'controller.solver="sqpmethod"'
# solver rows: label -> scenario overrides (the scenario's configuration first)
CONFIGS = {
    SCENARIO_ROW: [],
    "sqpmethod+qrqp GN / implicit": [SQP],
    "fatrop / implicit": ['controller.solver="fatrop"', "controller.max_iter=100"],
    "ipopt / implicit": ['controller.solver="ipopt"', "controller.max_iter=100"],
    "fatrop / step": [
        'controller.solver="fatrop"',
        'controller.transcription="step"',
        "controller.max_iter=100",
    ],
    # opt-in rows (--configs): osqp stopped at its iteration limit on every solve of a
    # trial, and the C compile of jit = "model" (the residual's derivatives up to the
    # Hessian's) did not finish in 12 minutes on 2x64 (see the notes)
    "sqpmethod+osqp GN / implicit": [SQP, 'controller.qpsol="osqp"'],
    "sqpmethod+qrqp GN / implicit, jit model": [SQP, 'controller.jit="model"'],
}
DEFAULT_CONFIGS = list(CONFIGS)[:5]
# the scenario's row once more on the DLNN without its closed-form residual Jacobian
AD_ROW = "DLNN, AD Jacobian"
MEDIAN_MS = 5.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    parser.add_argument("--steps", type=int, default=20, help="closed-loop steps per seed")
    parser.add_argument(
        "--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS), metavar="CONFIG",
        help=f"solver rows to time (default: the first five of {list(CONFIGS)})",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [100], "steps": 3, "configs": [SCENARIO_ROW]})
    args.out.mkdir(parents=True, exist_ok=True)
    quick = {"DLNN": [*QUICK_SETS, *QUICK_DLNN], "nominal": QUICK_SETS} if args.quick else {}
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"DLNN": SCENARIO, "nominal": nominal_variant(Path(tmp))}
        base = {name: load_scenario(path, quick.get(name, [])) for name, path in sources.items()}
        env = build_env(base["DLNN"])
        models, fits = {}, {}
        for name, cfg in base.items():
            source = obtain_model(cfg, env, log=lambda text: print(text, flush=True))
            models[name], fits[name] = source.model, source.report or {}
        controllers, builds, compiled = {}, {}, {}
        for label in args.configs:
            for name, path in sources.items():
                cfg = load_scenario(path, [*CONFIGS[label], *quick.get(name, [])])
                t0 = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", RuntimeWarning)
                    ctl = build_controller(cfg, models[name], env)
                builds[(label, name)] = time.perf_counter() - t0
                failed = any("not compiled" in str(w.message) for w in caught)
                jit = cfg["controller"]["jit"]
                compiled[(label, name)] = (
                    "none"
                    if jit == "none"
                    else f"{jit}: {'NOT compiled' if failed else 'compiled'}"
                )
                controllers[(label, name)] = TimedController(ctl)
        if SCENARIO_ROW in args.configs:  # the same DLNN differentiated by CasADi's AD
            cfg = load_scenario(SCENARIO, quick.get("DLNN", []))
            plain = dataclasses.replace(models["DLNN"], residual_jacobian=None)
            key = (SCENARIO_ROW, AD_ROW)
            t0 = time.perf_counter()
            controllers[key] = TimedController(build_controller(cfg, plain, env))
            builds[key], compiled[key] = time.perf_counter() - t0, "none"
    steps, success = args.steps, success_test(base["DLNN"])
    runs: dict[tuple[str, str], list] = {key: [] for key in controllers}
    for seed in args.seeds:
        for key, ctl in controllers.items():
            traj = run_episode(env, ctl, steps, seed)
            runs[key].append((traj, episode_metrics(traj, success, periodic=(1,))))
            print(f"seed {seed} {key}: {runs[key][-1][1]['solve_time_median_ms']:.2f} ms median")
    rows = []
    for (label, name), episodes in runs.items():
        trajs = [t for t, _ in episodes]
        mets = [m for _, m in episodes]
        status = np.concatenate([t.status for t in trajs])
        solve = ms_stats(np.concatenate([t.solve_times for t in trajs]))
        overhead = np.asarray(controllers[(label, name)].call_times) - np.concatenate(
            [t.solve_times for t in trajs]
        )
        failed = sum(m["failed_solves"] for m in mets)
        rows.append(
            {
                "config": label,
                "model": name,
                "solves": int(status.size),
                **solve,
                "overhead_median_ms": float(np.median(overhead)) * 1e3,
                "iter_median": float(np.median(np.concatenate([t.iterations for t in trajs]))),
                "failed": failed,
                "iter_limit": int(np.count_nonzero(status == "ITERATION_LIMIT")),
                "build_s": builds[(label, name)],
                "jit": compiled[(label, name)],
                "upright_at_end": f"{sum(int(m['success']) for m in mets)}/{len(mets)}",
                "median_target": met(solve["median_ms"] <= MEDIAN_MS),
            }
        )
    columns = [
        ("config", "solver / transcription", "s"),
        ("model", "model", "s"),
        ("solves", "solves", "d"),
        ("median_ms", "median [ms]", ".2f"),
        ("p95_ms", "p95 [ms]", ".2f"),
        ("max_ms", "max [ms]", ".1f"),
        ("overhead_median_ms", "call overhead [ms]", ".2f"),
        ("iter_median", "iters (median)", ".0f"),
        ("failed", "failed solves", "d"),
        ("iter_limit", "iter-limit solves", "d"),
        ("build_s", "build [s]", ".2f"),
        ("jit", "jit", "s"),
        ("upright_at_end", "upright at the end", "s"),
        ("median_target", f"median <= {MEDIAN_MS:g} ms", "s"),
    ]
    dl = models["DLNN"].info.get("settings") or {}
    fit = fits["DLNN"]
    notes = f"""
Cart-pole balance, `scenarios/cartpole_dlnn_balance.toml`: horizon 20, dt 0.05 s, the rail
|s| <= 1 m as a soft constraint tightened by the tube of the model's conformal bound
(delta 0.05), the real-time iteration ("rti": one Gauss-Newton linearisation and one qrqp QP
per sample; the sqpmethod rows iterate to tol 1e-4, max_iter 30, 100 for fatrop and ipopt); true `vimpc/CartPole-v0` (param_seed 0) with 10 %
mass/inertia perturbation, friction [0.3, 0.1] and observation noise 1e-4, starts near
upright (reset seeds {args.seeds}). DLNN model: the scenario's `[model]`
({_settings_text(dl)}), fitted in {fit.get("fit_time_s", float("nan")):.0f} s (reused from
the fit cache when it was there); nominal model: the nominal midpoint model with the same
conformal bound. Only the controller keys of the row's label change between rows
("implicit": the integrator's residual as equality constraints, no Newton solve inside the
NLP; "step": multiple shooting on the model's Newton-solved step; "jit model": the model's
residual compiled to C when the controller is built, its compile inside "build"). The DLNN
differentiates its residual by the Jacobian it exports in closed form
(`DiscreteModel.residual_jacobian`); the row "{AD_ROW}" is the same model without it (CasADi's
automatic differentiation of the residual), in the same run.
{steps} closed-loop steps per seed, {len(args.seeds)} seeds, pooled
({len(args.seeds) * steps} solves per row); episodes interleaved across rows. Times are
`MPCResult.solve_time` (wall time of the NLP solver call); "call overhead" is the median of
(wall time of the whole `controller(obs, t)` call - solve_time): the tube's propagation and
the controller's Python work. Failed solves: status FAILED or INFEASIBLE (the fallback input
applied); iter-limit solves stopped at the iteration limit and were used. "Upright at the
end": episodes with |theta - pi| < 0.1 rad over their last 1 s (short episodes: a
sanity check, not the success rate; that is in `results/dlnn_control/summary.md`).
Target (issue): median <= {MEDIAN_MS:g} ms on the DLNN model with the scenario's controller.
"rti" evaluates the constraint Jacobian once per sample (`vimpc.mpc.solvers.RealTimeIteration`;
every such solve is counted as an iteration-limit solve: never converged by design). Not in the
default rows:
sqpmethod with hpipm (CasADi refuses the structure at build: "HPIPM: specified structure of A
does not correspond to what the interface can handle"), with osqp (a 20-step trial: every
solve stopped at the iteration limit, median 4.6 s) and `jit = "model"` (its C compile of
the 2x64 residual with derivatives did not finish in 12 minutes); `--configs` runs them.
"""
    write_results(
        "dlnn_mpc",
        "Cart-pole balance: MPC solve times on the DLNN and the nominal model",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


def _settings_text(settings: dict) -> str:
    keys = ("hidden", "epochs", "order", "degeneracy_weight")
    return ", ".join(f"{k} = {settings[k]}" for k in keys if k in settings) or "settings unknown"


if __name__ == "__main__":
    main()
