"""Does the cart stay on its rail? The safe cart-pole with and without the tube, over many seeds.

    python tests/experiments/safety_cartpole.py [--seed 100] [--episodes 100] [--workers 2]

Every row is ``vimpc run`` of one of two scenarios on the same episodes (reset seeds
``seed .. seed + episodes - 1``, disjoint from the seeds 0-49 the scenarios were designed
on) against the same true system (the one of ``cartpole_swingup.toml``: masses and inertias
within 10 %, friction, observation noise):

- ``scenarios/cartpole_safe.toml``: the nominal midpoint model with a bound calibrated by
  split conformal prediction on held-out open-loop trajectories; without tightening, and
  with the tube at ``delta`` 0.05 (the scenario), 0.01 and 0.2;
- ``scenarios/cartpole_gpvi_safe.toml``: the GP-VI model; without tightening, with the tube
  from the Theorem 1 bound (``model.bound = "theorem1"``), and with the tube from the
  conformal bound shaped by the GPs' spread (the scenario).

Writes ``results/safety/{cartpole.md, cartpole.csv}`` and figures: every episode's cart
position against the rail for each row, the tube of one episode, and the model's one-step
errors against its bound. ``--quick --out DIR``: a smoke test into ``DIR``: the two tube rows
of ``QUICK_ROWS`` (each run writes its figures, a few seconds), one episode of 3 steps
each, in this process, the models fitted on a few short trajectories (``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from _quick import add_options, parse
from _tables import interval, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "safety"
NOMINAL, GPVI = "cartpole_safe", "cartpole_gpvi_safe"
NO_TUBE = 'controller.tightening="none"'
ROWS = {
    "nominal, no tightening": (NOMINAL, [NO_TUBE]),
    "nominal, conformal bound, tube, delta = 0.05": (NOMINAL, []),
    "nominal, conformal bound, tube, delta = 0.01": (NOMINAL, ["model.delta=0.01"]),
    "nominal, conformal bound, tube, delta = 0.2": (NOMINAL, ["model.delta=0.2"]),
    "GP-VI, no tightening": (GPVI, [NO_TUBE]),
    "GP-VI, Theorem 1 bound, tube, delta = 0.05": (GPVI, ['model.bound="theorem1"']),
    "GP-VI, conformal bound, tube, delta = 0.05": (GPVI, []),
}
# figures copied from a row's run folder, under the name prefix given
FIGURES = {
    "nominal, no tightening": ("none", ("episodes.png",)),
    "nominal, conformal bound, tube, delta = 0.05": (
        "tube",
        ("episodes.png", "safety.png", "coverage.png"),
    ),
    "GP-VI, no tightening": ("gpvi_none", ("episodes.png",)),
    "GP-VI, Theorem 1 bound, tube, delta = 0.05": ("gpvi_theorem1", ("episodes.png",)),
    "GP-VI, conformal bound, tube, delta = 0.05": ("gpvi_tube", ("episodes.png", "coverage.png")),
}


# --quick: 4 training and 8 held-out trajectories of 5 steps (20 calibration transitions,
# the fewest split conformal takes at delta 0.05), 3 control steps; the GP-VI with 16
# samples, 8 support points, one start of 5 optimiser steps
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
]
QUICK_GPVI = ["model.samples=16", "model.support_points=8", "model.restarts=1",
              "model.iterations=5"]  # fmt: skip
# one row per scenario, between them every kind of figure copied
QUICK_ROWS = (
    "nominal, conformal bound, tube, delta = 0.05",
    "GP-VI, conformal bound, tube, delta = 0.05",
)


def margins_figure(margins: dict[str, list[float]]):
    """Every episode's smallest margin to the rail, one row of dots per controller."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 0.55 * len(margins) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)
    for i, values in enumerate(margins.values()):
        y = i + rng.uniform(-0.2, 0.2, len(values))
        ax.plot(values, y, "o", ms=3, alpha=0.6, color="C3" if min(values) < 0 else "C0")
        ax.plot([np.median(values)] * 2, [i - 0.3, i + 0.3], "k-", lw=2)
    ax.axvline(0.0, color="k", lw=1)
    ax.set_yticks(range(len(margins)), list(margins))
    ax.invert_yaxis()
    ax.set_xlabel("smallest margin to the rail in the episode [m] (< 0: off the rail)")
    fig.suptitle("Safe cart-pole: per-episode minimum margin (black: median)")
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    folder, rows_run = args.out, ROWS
    if args.quick:
        rows_run = {
            label: (scenario, [*QUICK_SETS, *(QUICK_GPVI if scenario == GPVI else []), *sets])
            for label, (scenario, sets) in ROWS.items()
            if label in QUICK_ROWS
        }
    folder.mkdir(parents=True, exist_ok=True)
    rows, margins = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (scenario, sets) in rows_run.items():
            out = Path(tmp) / label.replace(" ", "_").replace(",", "").replace("=", "")
            m, run = vimpc_run(
                ROOT / "scenarios" / f"{scenario}.toml", out, episodes=args.episodes,
                seed=args.seed, workers=args.workers, sets=sets,
            )  # fmt: skip
            fit = m["model"]["fit"] or {}
            margins[label] = [e["min_margin"] for e in m["per_episode"]]
            rows.append(
                {
                    "row": label,
                    "episodes": m["episodes"],
                    "off_rail": m["episodes_with_violation"],
                    "off_rail_rate_ci95": interval(m["violation_rate_ci95"]),
                    "max_violation_m": m["max_violation"],
                    "min_margin_m": m["min_margin"],
                    "mean_min_margin_m": m["min_margin_mean"],
                    "median_min_margin_m": float(np.median(margins[label])),
                    "success": m["success_rate"],
                    "success_ci95": interval(m["success_rate_ci95"]),
                    "promised_coverage": 1 - m["model"]["delta"],
                    "validation_coverage": fit.get("validation_coverage", float("nan")),
                    "closed_loop_coverage_mean": m.get("coverage_mean", float("nan")),
                    "closed_loop_coverage_min": m.get("coverage_min", float("nan")),
                    "solve_median_ms": m["solve_time_median_ms"],
                    "solve_p95_ms": m["solve_time_p95_ms"],
                    "failed_solves": m["failed_solves"],
                }
            )
            prefix, figures = FIGURES.get(label, ("", ()))
            for fig in figures:
                shutil.copy(run / fig, folder / f"cartpole_{prefix}_{fig}")
            print(f"{label}: {rows[-1]}")
    headers = {
        "row": "controller",
        "episodes": "episodes",
        "off_rail": "episodes off the rail",
        "off_rail_rate_ci95": "rate 95% CI",
        "max_violation_m": "largest excursion past the rail [m]",
        "min_margin_m": "min margin [m]",
        "mean_min_margin_m": "mean of episode min margins [m]",
        "median_min_margin_m": "median of episode min margins [m]",
        "success": "success",
        "success_ci95": "success 95% CI",
        "promised_coverage": "1 - delta",
        "validation_coverage": "coverage, held-out open loop",
        "closed_loop_coverage_mean": "coverage, closed loop (mean)",
        "closed_loop_coverage_min": "coverage, closed loop (worst episode)",
        "solve_median_ms": "solve median [ms]",
        "solve_p95_ms": "solve p95 [ms]",
        "failed_solves": "failed solves",
    }
    fig = margins_figure(margins)
    fig.savefig(folder / "cartpole_margins.png", dpi=120)
    intro = (
        "Each row is `vimpc run scenarios/cartpole_safe.toml` (nominal rows) or `vimpc run "
        "scenarios/cartpole_gpvi_safe.toml` (GP-VI rows) with the overrides the row names, "
        f"over the same {args.episodes} episodes (reset seeds {args.seed}-"
        f"{args.seed + args.episodes - 1}; the scenarios were designed on seeds 0-49) against "
        "the same true cart-pole (masses and inertias within 10 %, friction [0.3, 0.1], "
        "observation noise 1e-3). The rail is |s| <= 1 m; an episode is off the rail when "
        "the true cart position leaves it at any step. Nominal rows: the nominal midpoint "
        "model, its bound calibrated by split conformal prediction on held-out open-loop "
        "trajectories (states spread over the region a swing-up visits, random forces up to "
        "the actuator limit). GP-VI rows: Gaussian processes on the next velocities over the "
        "nominal midpoint integrator (sin/cos inputs, 512 samples, 100 support points), with "
        "the Theorem 1 bound (each GP's uniform error bound of Lederer et al. 2019 on the box "
        "of its training inputs, plus the noise quantiles) or the conformal bound shaped by "
        "the GPs' posterior spread. Coverage: the fraction of one-step errors inside the "
        "bound in every entry, on the held-out validation trajectories and along the "
        "closed-loop episodes (the realised one-step error against the bound)."
    )
    after = """
Every episode's smallest margin to the rail, per row:

![margins](cartpole_margins.png)

Every episode's cart position against the rail, nominal model without and with the tube
(delta = 0.05), and GP-VI without tightening, with the Theorem 1 tube and with the
conformal tube:

![none](cartpole_none_episodes.png) ![tube](cartpole_tube_episodes.png)

![gpvi none](cartpole_gpvi_none_episodes.png) ![gpvi theorem 1](cartpole_gpvi_theorem1_episodes.png)
![gpvi tube](cartpole_gpvi_tube_episodes.png)

The tube of one episode (delta = 0.05): the rail rows `s >= -1` and `s <= 1` as realized on
the true state, with the plans made every second drawn over their horizon with their
tubes; and the model's one-step errors against its bound:

![safety](cartpole_tube_safety.png) ![coverage](cartpole_tube_coverage.png)
"""
    command = (
        "python tests/experiments/safety_cartpole.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    title = "Safe cart-pole: the rail with and without the tube, nominal and GP-VI models"
    print(write_table(folder, "cartpole", title, command, intro, rows, headers, after))


if __name__ == "__main__":
    main()
