"""Balancing the cart-pole on its rail with a learned discrete Lagrangian (DLNN) against the
nominal model, over many episodes and true plants.

    python tests/experiments/dlnn_closed_loop.py [--seed 100] [--episodes 50] [--plants 0]
        [--workers 1]

Every row is ``vimpc run scenarios/cartpole_dlnn_balance.toml`` on the same episodes (reset
seeds ``seed .. seed + episodes - 1``, from near upright; the scenario was designed on seeds
0-49) against a true cart-pole drawn by ``env.kwargs.param_seed`` (masses and inertias within
10 %, friction [0.3, 0.1], observation noise 1e-4): as written (the DLNN model fitted on the
scenario's forced ``[data]``, a conformal bound, the tube on the rail) and with its
``[model]`` table replaced by the nominal midpoint model with the same conformal bound
(:data:`NOMINAL_MODEL`; everything else unchanged). One fit per model and plant: the data are
collected from that plant.

Writes ``results/dlnn_control/{summary.md, summary.csv}`` and ``episodes.png``: every
episode's cart position against the rail and pole angle, per model (the first plant).
``--quick --out DIR``: a smoke test into ``DIR``: one episode of 3 steps per model, in this
process, the DLNN fitted for a few epochs on a few short trajectories (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _tables
import numpy as np
from _quick import add_options, command, parse
from _tables import interval, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "dlnn_control"
SCENARIO = ROOT / "scenarios" / "cartpole_dlnn_balance.toml"
#: the nominal rows' ``[model]`` table: the nominal midpoint model, calibrated like the DLNN
NOMINAL_MODEL = (
    '[model]\nfamily = "nominal"\nintegrator = "midpoint"\nbound = "conformal"\ndelta = 0.05\n\n'
)
# --quick: 4 training and 8 held-out trajectories of 5 steps (20 calibration transitions,
# the fewest split conformal takes at delta 0.05), 3 control steps of at most 5 solver
# iterations. The DLNN 2x8, 20 epochs, without bound and tube: a network this short-trained
# has no root of its step equations on some transitions, and a conformal bound refuses to
# calibrate on those
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
    "controller.max_iter=5",
]
QUICK_DLNN = [
    "model.hidden=[8, 8]",
    "model.epochs=20",
    'model.bound="none"',
    'controller.tightening="none"',
    'controller.tube="open_loop"',  # the default, the only one without tightening
]


def nominal_variant(folder: Path) -> Path:
    """The scenario with its ``[model]`` table replaced by :data:`NOMINAL_MODEL`."""
    return _tables.nominal_variant(SCENARIO, folder, NOMINAL_MODEL)


def _episodes(run: Path) -> list[dict[str, np.ndarray]]:
    files = sorted(run.glob("episode_*.npz"))
    out = []
    for f in files:
        with np.load(f) as z:
            out.append({"t": z["t"], "states": z["states"]})
    return out


def episodes_figure(runs: dict[str, Path], s_max: float, tolerance: float, window: float):
    """Per model (a column): every episode's true cart position against the rail, and the
    pole angle from upright (wrapped), with the success band over the end window."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0 * len(runs), 6.0), layout="constrained")
    axes = fig.subplots(2, len(runs), squeeze=False, sharex=True)
    for j, (label, run) in enumerate(runs.items()):
        episodes = _episodes(run)
        top, bottom = axes[0, j], axes[1, j]
        for e in episodes:
            s = e["states"][:, 0]
            off = np.any(np.abs(s) > s_max)
            top.plot(e["t"], s, color="C3" if off else "C0", lw=0.7, alpha=0.6)
            angle = np.angle(np.exp(1j * (e["states"][:, 1] - np.pi)))
            bottom.plot(e["t"], angle, color="C0", lw=0.7, alpha=0.6)
        for sign in (-1.0, 1.0):
            top.axhline(sign * s_max, color="k", lw=1.2)
            bottom.axhline(sign * tolerance, color="C2", lw=1.0, ls="--")
        if episodes:
            end = episodes[0]["t"][-1]
            bottom.axvspan(end - window, end, color="C2", alpha=0.1)
        top.set_title(f"{label}: {len(episodes)} episodes (red: off the rail)")
        top.set_ylabel("cart position s [m]")
        bottom.set_ylabel("pole angle from upright [rad]")
        bottom.set_xlabel("time [s]")
    fig.suptitle("Cart-pole balance on the rail |s| <= 1 m (true states)")
    return fig


def row(model: str, plant: int, m: dict) -> dict:
    fit, delta = m["model"]["fit"] or {}, m["model"]["delta"]
    return {
        "model": model,
        "plant": plant,
        "episodes": m["episodes"],
        "success": m["success_rate"],
        "success_ci95": interval(m["success_rate_ci95"]),
        "off_rail": m["episodes_with_violation"],
        "off_rail_ci95": interval(m["violation_rate_ci95"]),
        "min_margin_m": m["min_margin"],
        "prediction_rmse": m.get("prediction_rmse_mean", float("nan")),
        "failed_model_steps": m.get("failed_model_steps", 0),
        "validation_one_step_rmse": _norm(fit.get("one_step_rmse")),
        "promised_coverage": float("nan") if delta is None else 1 - delta,
        "validation_coverage": fit.get("validation_coverage", float("nan")),
        "closed_loop_coverage_mean": m.get("coverage_mean", float("nan")),
        "closed_loop_coverage_min": m.get("coverage_min", float("nan")),
        "fit_time_s": fit.get("fit_time_s", float("nan")),
        "solve_median_ms": m["solve_time_median_ms"],
        "solve_p95_ms": m["solve_time_p95_ms"],
        "solves": m["solves"],
        "failed_solves": m["failed_solves"],
        "iteration_limit_solves": m["iteration_limit_solves"],
    }


def _norm(rmse) -> float:
    """The RMS over the state entries of a per-entry RMS list (NaN when missing)."""
    if not rmse or any(v is None for v in rmse):
        return float("nan")
    return float(np.sqrt(np.mean(np.square(rmse))))


HEADERS = {
    "model": "model",
    "plant": "plant (param_seed)",
    "episodes": "episodes",
    "success": "success",
    "success_ci95": "success 95% CI",
    "off_rail": "episodes off the rail",
    "off_rail_ci95": "off-rail rate 95% CI",
    "min_margin_m": "min rail margin [m]",
    "prediction_rmse": "one-step error RMS, closed loop",
    "failed_model_steps": "failed model steps, closed loop",
    "validation_one_step_rmse": "one-step error RMS, held-out",
    "promised_coverage": "1 - delta",
    "validation_coverage": "coverage, held-out",
    "closed_loop_coverage_mean": "coverage, closed loop (mean)",
    "closed_loop_coverage_min": "coverage, closed loop (worst episode)",
    "fit_time_s": "fit [s]",
    "solve_median_ms": "solve median [ms]",
    "solve_p95_ms": "solve p95 [ms]",
    "solves": "solves",
    "failed_solves": "failed solves",
    "iteration_limit_solves": "iteration-limit solves",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--plants", type=int, nargs="+", default=[0])
    parser.add_argument("--workers", type=int, default=1)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    folder = args.out
    folder.mkdir(parents=True, exist_ok=True)
    rows, figure_runs = [], {}
    from vimpc.scenario import load_scenario

    cfg = load_scenario(SCENARIO)
    kw, met = cfg["env"]["kwargs"], cfg["metrics"]
    window, steps = met["success_window"], cfg["episodes"]["steps"]
    with tempfile.TemporaryDirectory() as tmp:
        scenarios = {"DLNN": SCENARIO, "nominal": nominal_variant(Path(tmp))}
        for plant in args.plants:
            for label, path in scenarios.items():
                sets = [f"env.kwargs.param_seed={plant}"]
                if args.quick:
                    sets += [*QUICK_SETS, *(QUICK_DLNN if label == "DLNN" else [])]
                out = Path(tmp) / f"{label}_{plant}"
                m, run = vimpc_run(
                    path, out, episodes=args.episodes, seed=args.seed, workers=args.workers,
                    sets=sets, accept=(0, 3), plots=not args.quick,
                )  # fmt: skip
                rows.append(row(label, plant, m))
                if plant == args.plants[0]:
                    figure_runs[label] = run
                print(rows[-1], flush=True)
        fig = episodes_figure(figure_runs, kw["s_max"], met["success_tolerance"], window)
        fig.savefig(folder / "episodes.png", dpi=110)
    intro = (
        "Each row is `vimpc run scenarios/cartpole_dlnn_balance.toml` (DLNN rows) or the same "
        "file with its `[model]` table replaced by the nominal midpoint model with the same "
        f"conformal bound (nominal rows), over the same {args.episodes} episodes of {steps} "
        f"steps (reset seeds {args.seed}-{args.seed + args.episodes - 1}, starts near upright: "
        "s, theta - pi, s_dot, theta_dot each U(-0.2, 0.2); the scenario was designed on seeds "
        "0-49) against the true cart-pole of the row's `param_seed` (masses and inertias "
        f"within {kw['perturbation']:.0%}, friction {kw['friction']} the models lack, "
        f"observation noise {kw['obs_noise']:g}). Each model is fitted and calibrated on data "
        "collected from that plant by the scenario's `[data]`. Success: |theta - pi| < "
        f"{met['success_tolerance']:g} rad over the last {window:g} s (true state). Off the "
        f"rail: the true |s| exceeded {kw['s_max']:g} m at some step. Intervals: Wilson 95 %. "
        "One-step error RMS: over every entry of the model's one-step prediction error from "
        "the measured state under the applied input, along the closed loop (mean over "
        "episodes; steps where the model's Newton solve failed are counted apart), and on the "
        "held-out validation trajectories. Coverage: the share of one-step errors inside the "
        "conformal bound in every entry. Solve times: the NLP solver call, pooled over all "
        "steps; failed solves applied the controller's fallback input."
    )
    after = "Every episode's cart position and pole angle, per model:\n\n![episodes](episodes.png)"
    cmd = command(__file__, args.argv)
    title = "Cart-pole balance on the rail: DLNN against the nominal model"
    print(write_table(folder, "summary", title, cmd, intro, rows, HEADERS, after))


if __name__ == "__main__":
    main()
