"""Tracking a crank reference on the four-bar with a constrained Lagrangian network (family
``clnn``, learned in maximal coordinates) against the nominal model, over many episodes.

    python tests/experiments/clnn_control.py [--seed 1000] [--episodes 50]

Both rows run ``scenarios/fourbar_clnn_tracking.toml`` on the same episodes (reset seeds
``seed .. seed + episodes - 1``: the env's random crank starts; the scenario was designed on
seeds 0-9, its data's torque range on 0-3) against its true four-bar (masses and inertias within 10 %, joint friction drawn
from ``param_seed`` 0, observation noise 1e-3): as written (the CLNN fitted on the
scenario's ``[data]``: every body's ``x, y, phi``, the four joints as eight holonomic
constraints, the joint friction learned with it, the MX export) and with its ``[model]``
table replaced by the nominal midpoint
model (joint angles, the loop closure's two constraints, nominal masses, no friction:
:data:`NOMINAL_MODEL`). Everything else (controller, episodes, success test) is the
scenario's. The episodes run in this process, one at a time, through the pipeline's env,
model (fitted or taken from the fit cache) and controller; the controller is wrapped to read
every plan it returns: the model's holonomic constraint residual ``|Phi(x_k)|`` at every
predicted state ``k = 1..H`` of every solved plan (and at the plan's start ``x_0 =
from_obs(obs)``, which the CLNN's ``from_obs`` projects onto the constraints), measured after
the run from the recorded plans.

Writes ``results/clnn_control/{summary.md, summary.csv}`` and ``tracking.png`` (every
episode's crank-angle error, per model). ``--quick --out DIR``: one episode of 3 steps per
model, the CLNN fitted for 2 epochs on 4 short trajectories (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import _tables
import numpy as np
from _quick import add_options, command, parse
from _tables import interval, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "clnn_control"
SCENARIO = ROOT / "scenarios" / "fourbar_clnn_tracking.toml"
NOMINAL_MODEL = '[model]\nfamily = "nominal"\nintegrator = "midpoint"\n\n'
QUICK_SETS = [
    "data.trajectories=4",
    "data.steps=8",
    "data.heldout_trajectories=4",
    "episodes.steps=3",
    "controller.max_iter=5",
]
QUICK_CLNN = ["model.hidden=[8]", "model.epochs=2"]
#: the predicted constraint residual every stage of every plan must stay within
PLAN_CONSTRAINT_TARGET = 1e-10
#: the speed target of the learned model's median solve (horizon 20)
SOLVE_TARGET_MS = 5.0
BOOTSTRAP, BOOTSTRAP_SEED = 2000, 0


class PlanRecorder:
    """The controller as the episode sees it, keeping every plan's predicted states."""

    def __init__(self, controller) -> None:
        self.inner = controller
        self.plans: list[np.ndarray] = []
        self.fallback: list[bool] = []

    def __getattr__(self, name):  # cost, reset, period, safety_function, ...
        return getattr(self.inner, name)

    def __call__(self, obs, t=0.0):
        result = self.inner(obs, t)
        self.plans.append(np.array(result.x, dtype=np.float64))
        self.fallback.append(bool(result.fallback))
        return result


def plan_residuals(model, plans: list[np.ndarray], fallback: list[bool]) -> dict:
    """The largest ``|Phi|`` at the plans' start and over their predicted stages, over the
    plans the solver returned (not the fallbacks), and how many stages exceed
    :data:`PLAN_CONSTRAINT_TARGET`."""
    solved = [p for p, f in zip(plans, fallback, strict=True) if not f]
    if not solved or model.constraint is None:
        return {"start": float("nan"), "stages": float("nan"), "above": 0, "checked": 0}
    X = np.concatenate(solved)
    H1 = solved[0].shape[0]
    g = np.abs(np.asarray(model.constraint.map(len(X))(X.T))).max(axis=0).reshape(-1, H1)
    return {
        "start": float(g[:, 0].max()),
        "stages": float(g[:, 1:].max()),
        "above": int(np.sum(g[:, 1:] > PLAN_CONSTRAINT_TARGET)),
        "checked": int(g[:, 1:].size),
    }


_WORKER: dict = {}


def _start(cfg: dict, model_path) -> None:
    """Build a process's env, model and plan-recording controller (once per process)."""
    import warnings

    from vimpc import pipeline
    from vimpc.errors import FitWarning

    warnings.simplefilter("ignore", FitWarning)
    runner = pipeline.EpisodeRunner(cfg, model_path)
    _WORKER.update(cfg=cfg, runner=runner, recorder=PlanRecorder(runner.controller))


def _episode(seed: int):
    """One episode in this process: ``(trajectory, metrics, plan residuals)``."""
    from vimpc.closedloop import episode_metrics, run_episode

    cfg, runner, recorder = _WORKER["cfg"], _WORKER["runner"], _WORKER["recorder"]
    model, controller = runner.model, runner.controller
    recorder.plans.clear()
    recorder.fallback.clear()
    cost = cfg["controller"]["cost"]
    traj = run_episode(runner.env, recorder, cfg["episodes"]["steps"], seed)
    m = episode_metrics(
        traj, success=runner.success, periodic=tuple(cost["periodic"]),
        tracked=np.flatnonzero(np.diag(controller.cost.Q)).tolist(), model=model,
        safety=controller.safety_function, data_box=model.info.get("data_box"),
    )  # fmt: skip
    return traj, m, plan_residuals(model, recorder.plans, recorder.fallback), model.nx


def run_model(
    cfg: dict, seeds: list[int], refit: bool = False, workers: int = 1
) -> tuple[dict, list, dict]:
    """The scenario's model (fitted, or from the fit cache) in closed loop on ``seeds``, in
    ``workers`` processes (each builds its env, model and controller from the model file):
    ``(summary, trajectories, plan residuals)``."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from vimpc import pipeline
    from vimpc.closedloop.metrics import summarize

    env = pipeline.build_env(cfg)
    source = pipeline.obtain_model(cfg, env, refit=refit, log=lambda s: print(s, flush=True))
    path = None if source.path is None else str(source.path)
    if workers > 1:
        pool = ProcessPoolExecutor(workers, get_context("spawn"), _start, (cfg, path))
        results = pool.map(_episode, seeds)
    else:
        pool = None
        _start(cfg, path)
        results = map(_episode, seeds)
    per_episode, trajs, plans, sizes = [], [], [], set()
    for seed, (traj, m, plan, nx) in zip(seeds, results, strict=True):
        sizes.add(nx)
        per_episode.append(m)
        trajs.append(traj)
        plans.append(plan)
        print(f"seed {seed}: success {m['success']}, tracking {m['tracking_rmse']:.4g}, "
              f"plan residual {plan['stages']:.3g}", flush=True)  # fmt: skip
    if pool is not None:
        pool.shutdown()
    summary = summarize(per_episode, trajs)
    summary["fit"] = source.report or {}
    summary["fit_reused"] = bool(source.reused)
    (summary["nx"],) = sizes
    summary["per_episode"] = per_episode
    index = cfg["metrics"]["success_index"]  # resolved to a position on load
    summary["crank_index"] = int(np.ravel([index])[0])
    merged = {
        "start": max(p["start"] for p in plans),
        "stages": max(p["stages"] for p in plans),
        "above": sum(p["above"] for p in plans),
        "checked": sum(p["checked"] for p in plans),
    }
    return summary, trajs, merged


def crank_errors(trajs: list, index: int) -> list[np.ndarray]:
    """Per episode: the true crank angle minus its reference, wrapped [rad]."""
    return [np.angle(np.exp(1j * (t.states[:, index] - t.reference[:, index]))) for t in trajs]


def mean_interval(values: np.ndarray) -> tuple[float, float]:
    """Percentile-bootstrap 95 % interval of the mean (:data:`BOOTSTRAP` resamples)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = values[rng.integers(0, len(values), (BOOTSTRAP, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def figure(errors: dict[str, list[np.ndarray]], dt: float, tolerance: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0 * len(errors), 3.4), layout="constrained")
    axes = fig.subplots(1, len(errors), squeeze=False, sharey=True)[0]
    for ax, (label, errs) in zip(axes, errors.items(), strict=True):
        for e in errs:
            ax.plot(np.arange(len(e)) * dt, e, color="C0", lw=0.6, alpha=0.5)
        ax.axhline(tolerance, color="k", ls=":", lw=0.8)
        ax.axhline(-tolerance, color="k", ls=":", lw=0.8)
        ax.set_ylim(-0.5, 0.5)
        ax.set_title(f"{label}: {len(errs)} episodes")
        ax.set_xlabel("t [s]")
    axes[0].set_ylabel("crank angle - reference [rad]")
    fig.suptitle("Four-bar crank tracking (true states; dotted: success tolerance)")
    return fig


HEADERS = {
    "model": "model",
    "state_size": "state size",
    "episodes": "episodes",
    "success": "success",
    "success_ci95": "success 95% CI (Wilson)",
    "tracking_rmse_mean": "tracking RMSE, mean [rad, rad/s]",
    "tracking_rmse_ci95": "its 95% CI",
    "final_crank_error_mean_rad": "crank error over the last 2 s, mean abs [rad]",
    "plan_start_residual": "max abs(Phi) at a plan's start",
    "plan_stage_residual": "max abs(Phi) at a predicted stage",
    "plan_stages_above_1e-10": "predicted stages above 1e-10",
    "plan_stages_checked": "predicted stages checked",
    "fit_time_s": "fit [s]",
    "fit_reused": "fit from the cache",
    "solve_median_ms": "solve median [ms]",
    "solve_p95_ms": "solve p95 [ms]",
    "solves": "solves",
    "failed_solves": "failed solves",
    "iteration_limit_solves": "iteration-limit solves",
    "handed_over_solves": "solves handed to sqpmethod",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--set", action="append", default=[], help="scenario overrides")
    parser.add_argument("--refit", action="store_true", help="fit again, not from the cache")
    parser.add_argument("--workers", type=int, default=1, help="episode processes")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1})
    folder = args.out
    folder.mkdir(parents=True, exist_ok=True)
    from vimpc.scenario import load_scenario

    quick = [*(QUICK_SETS if args.quick else []), *args.set]
    seeds = list(range(args.seed, args.seed + args.episodes))
    rows, errors = [], {}
    load_before = os.getloadavg()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        # --set model.* reaches the clnn row only (the nominal model has other settings)
        models = [s for s in args.set if s.startswith("model.")]
        shared = [s for s in quick if s not in models]
        scenarios = {
            "clnn": (SCENARIO, [*(QUICK_CLNN if args.quick else []), *models]),
            "nominal": (_tables.nominal_variant(SCENARIO, Path(tmp), NOMINAL_MODEL), []),
        }
        for label, (path, extra) in scenarios.items():
            cfg = load_scenario(path, [*shared, *extra])
            m, trajs, plans = run_model(cfg, seeds, args.refit, args.workers)
            met = cfg["metrics"]
            errs = crank_errors(trajs, m["crank_index"])
            errors[label] = errs
            window = int(round(met["success_window"] / cfg["env"]["dt"]))
            last = np.array([np.abs(e[-window:]).mean() for e in errs])
            track = np.array([e["tracking_rmse"] for e in m["per_episode"]])
            fit = m["fit"]
            rows.append({
                "model": label, "state_size": m["nx"], "episodes": m["episodes"],
                "success": m["success_rate"], "success_ci95": interval(m["success_rate_ci95"]),
                "tracking_rmse_mean": m["tracking_rmse_mean"],
                "tracking_rmse_ci95": interval(mean_interval(track)),
                "final_crank_error_mean_rad": float(last.mean()),
                "plan_start_residual": plans["start"], "plan_stage_residual": plans["stages"],
                "plan_stages_above_1e-10": plans["above"],
                "plan_stages_checked": plans["checked"],
                "fit_time_s": fit.get("fit_time_s", float("nan")),
                "fit_reused": m["fit_reused"],
                "solve_median_ms": m["solve_time_median_ms"], "solve_p95_ms": m["solve_time_p95_ms"],
                "solves": m["solves"], "failed_solves": m["failed_solves"],
                "iteration_limit_solves": m["iteration_limit_solves"],
                "handed_over_solves": m.get("handed_over_solves", 0),
            })  # fmt: skip
            print(rows[-1], flush=True)
            dt, tol = cfg["env"]["dt"], met["success_tolerance"]
    load_after = os.getloadavg()
    fig = figure(errors, dt, float(np.ravel([tol])[0]))
    fig.savefig(folder / "tracking.png", dpi=110)
    cfg = load_scenario(SCENARIO, quick)  # the clnn row's configuration
    kw, mc, cc = cfg["env"]["kwargs"], cfg["model"], cfg["controller"]
    intro = (
        "Each row is `scenarios/fourbar_clnn_tracking.toml` (clnn) or the same file with its "
        "`[model]` table replaced by the nominal midpoint model (joint angles, the loop "
        "closure's two constraints, nominal masses, no friction), on the same "
        f"{args.episodes} episodes of {cfg['episodes']['steps']} steps (reset seeds "
        f"{seeds[0]}-{seeds[-1]}; the scenario was designed on seeds 0-9, its data's torque "
        "range on seeds 0-3) against the true "
        f"four-bar (masses and inertias within {kw['perturbation']:.0%}, joint friction drawn "
        f"from param_seed {kw['param_seed']}, observation noise {kw['obs_noise']:g}). CLNN: "
        f"potential {mc['hidden']} ({mc['activation']}), {mc['epochs']} epochs on "
        f"{cfg['data']['trajectories']} trajectories of {cfg['data']['steps']} steps, noisy "
        f"data projected onto the constraints (data_tolerance {mc['data_tolerance']:g}), "
        + (
            "a viscous friction coefficient per joint learned with the network (damping = "
            "'learned'); "
            if mc["damping"] == "learned"
            else "no friction; "
        )
        + "exported on MX (state: every body's x, y, phi and rates, 18 entries; 8 constraints). "
        f"Controller (both rows): horizon {cc['horizon']}, {cc['solver']} on the "
        f"{cc['transcription']} transcription, at most {cc['max_iter']} iterations, tol "
        f"{cc['tol']:g}"
        + (
            " (solver 'condensed': the Gauss-Newton SQP with the states eliminated, from the "
            "shifted plan, until its input step is within tol, the model's step equations "
            "within 1e-8 and its holonomic constraints within 1e-11 at every predicted "
            "state; the cold starts and any solve it does not finish are handed to "
            "sqpmethod with HPIPM to tol 1e-6, counted in the table)"
            if cc["solver"] == "condensed"
            else ""
        )
        + "; a failed "
        "solve (the iteration limit included) applies the fallback input. Success: the crank "
        f"angle within {cfg['metrics']['success_tolerance']:g} rad of its reference over the "
        f"last {cfg['metrics']['success_window']:g} s (true state), Wilson 95 % intervals; "
        "tracking RMSE per episode over the tracked entries, its mean with a "
        f"percentile-bootstrap 95 % interval ({BOOTSTRAP} resamples). Plan residuals: the "
        "model's holonomic constraints at every state of every plan the solver returned "
        "(fallbacks left out), read from the plans after the run; a plan's start is "
        "`from_obs` of the noisy observation (the CLNN projects it onto its constraints, the "
        "nominal model does not). Solve times: the NLP solver call, episodes in "
        f"{args.workers} process(es) on a shared 2-core machine; load average "
        f"{load_before[0]:.1f} at the start and {load_after[0]:.1f} at the end "
        f"({(time.time() - start) / 60:.0f} min)."
    )
    clnn, nominal = rows[0], rows[1]
    plan_ok = clnn["plan_stage_residual"] <= PLAN_CONSTRAINT_TARGET
    solve_ok = clnn["solve_median_ms"] <= SOLVE_TARGET_MS
    after = (
        f"CLNN predicted constraint residual: largest {clnn['plan_stage_residual']:.2g} over "
        f"{clnn['plan_stages_checked']} predicted stages (target <= "
        f"{PLAN_CONSTRAINT_TARGET:g}: {'met' if plan_ok else 'NOT met'}). Median solve with "
        f"the CLNN {clnn['solve_median_ms']:.2f} ms against the nominal model's "
        f"{nominal['solve_median_ms']:.2f} ms in the same run (target <= {SOLVE_TARGET_MS:g} "
        f"ms: {'met' if solve_ok else 'NOT met'}).\n\nEvery episode's crank-angle error, per "
        "model:\n\n![tracking](tracking.png)"
    )
    cmd = command(__file__, args.argv)
    title = "Four-bar crank tracking: a CLNN in maximal coordinates against the nominal model"
    print(write_table(folder, "summary", title, cmd, intro, rows, HEADERS, after))


if __name__ == "__main__":
    main()
