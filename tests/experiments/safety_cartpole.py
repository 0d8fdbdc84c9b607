"""Does the cart stay on its rail? The safe cart-pole with and without the tube, over many seeds.

    python tests/experiments/safety_cartpole.py [--seed 100] [--episodes 100] [--workers 2]

Every row is ``vimpc run scenarios/cartpole_safe.toml`` on the same episodes (reset seeds
``seed .. seed + episodes - 1``, disjoint from the seeds 0-49 the scenario was designed on)
against the same true system (the one of ``cartpole_swingup.toml``: masses and inertias
within 10 %, friction, observation noise). The model is the nominal midpoint model, with a
bound calibrated by split conformal prediction on held-out open-loop trajectories; rows:

- ``none``: ``--set 'controller.tightening="none"'`` (the bound is not used);
- ``tube, delta = d``: the scenario (``d = 0.05``) and the same with other ``model.delta``.

Writes ``results/safety/{cartpole.md, cartpole.csv}`` and figures: every episode's cart
position against the rail for each row, the tube of one episode, and the model's one-step
errors against its bound.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from _tables import interval, write_table

from vimpc import cli

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "safety"
SCENARIO = ROOT / "scenarios" / "cartpole_safe.toml"
ROWS = {
    "none": ['controller.tightening="none"'],
    "tube, delta = 0.05": [],
    "tube, delta = 0.01": ["model.delta=0.01"],
    "tube, delta = 0.2": ["model.delta=0.2"],
}
FIGURES = {
    "none": ("episodes.png",),
    "tube, delta = 0.05": ("episodes.png", "safety.png", "coverage.png"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, sets in ROWS.items():
            out = Path(tmp) / label.replace(" ", "_").replace(",", "").replace("=", "")
            argv = [
                "run",
                str(SCENARIO),
                "--out",
                str(out),
                "--quiet",
                "--workers",
                str(args.workers),
                "--set",
                f"episodes.count={args.episodes}",
                "--set",
                f"episodes.seed={args.seed}",
            ]
            for item in sets:
                argv += ["--set", item]
            assert cli.main(argv) == 0, label
            (run,) = [p for p in (out / "cartpole_safe").iterdir() if p.is_dir()]
            m = json.loads((run / "metrics.json").read_text())
            fit = m["model"]["fit"] or {}
            rows.append(
                {
                    "row": label,
                    "episodes": m["episodes"],
                    "off_rail": m["episodes_with_violation"],
                    "off_rail_rate_ci95": interval(m["violation_rate_ci95"]),
                    "max_violation_m": m["max_violation"],
                    "min_margin_m": m["min_margin"],
                    "mean_min_margin_m": m["min_margin_mean"],
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
            for fig in FIGURES.get(label, ()):
                name = label.split(",")[0].replace(" ", "")
                shutil.copy(run / fig, OUT / f"cartpole_{name}_{fig}")
            print(f"{label}: {rows[-1]}")
    headers = {
        "row": "controller",
        "episodes": "episodes",
        "off_rail": "episodes off the rail",
        "off_rail_rate_ci95": "rate 95% CI",
        "max_violation_m": "largest excursion past the rail [m]",
        "min_margin_m": "min margin [m]",
        "mean_min_margin_m": "mean of episode min margins [m]",
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
    intro = (
        f"Each row is `vimpc run scenarios/cartpole_safe.toml` with the overrides named, over "
        f"the same {args.episodes} episodes (reset seeds {args.seed}-{args.seed + args.episodes - 1}; "
        "the scenario was designed on seeds 0-49) against the same true cart-pole (masses and "
        "inertias within 10 %, friction [0.3, 0.1], observation noise 1e-3). The rail is "
        "|s| <= 1 m; an episode is off the rail when the true cart position leaves it at any "
        "step. The model is the nominal midpoint model; its bound is calibrated by split "
        "conformal prediction on held-out open-loop trajectories (states spread over the "
        "region a swing-up visits, random forces up to the actuator limit). Coverage: the "
        "fraction of one-step errors inside the bound in every entry, on the held-out "
        "validation trajectories and along the closed-loop episodes."
    )
    after = """
Every episode's cart position against the rail, without and with the tube (delta = 0.05):

![none](cartpole_none_episodes.png) ![tube](cartpole_tube_episodes.png)

The tube of one episode (delta = 0.05): the rail rows `s >= -1` and `s <= 1` as realized on
the true state, with the plans made every second drawn over their horizon with their
tubes; and the model's one-step errors against its bound:

![safety](cartpole_tube_safety.png) ![coverage](cartpole_tube_coverage.png)
"""
    command = (
        "python tests/experiments/safety_cartpole.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    title = "Safe cart-pole: the rail with and without the tube"
    print(write_table(OUT, "cartpole", title, command, intro, rows, headers, after))


if __name__ == "__main__":
    main()
