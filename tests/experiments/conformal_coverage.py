"""Does the conformal bound cover what it promises? Coverage on fresh held-out trajectories.

    python tests/experiments/conformal_coverage.py

For each environment (the true system of a scenario file) the nominal midpoint model is
calibrated by split conformal prediction (constant per-entry scale from the training
errors) on the scenario's held-out calibration trajectories, for several ``delta``; then
100 fresh trajectories of the same true system, collected with the same excitation from
new reset seeds, measure the coverage: the fraction of one-step transitions whose error
lies within the bound in every entry at once. Transitions inside a trajectory are not
independent, so the interval is a trajectory bootstrap (2000 resamples of whole
trajectories).

Writes ``results/conformal/{coverage.md, coverage.csv, coverage.png}``. ``--quick --out
DIR``: a smoke test into ``DIR``, on a few trajectories (``QUICK_SETS``, 3 test ones).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _quick import add_options, parse
from _tables import write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc import pipeline, scenario
from vimpc.models import NominalModel, evaluation

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "conformal"
SCENARIOS = ("pendulum_swingup", "cartpole_safe", "fourbar_tracking", "rollingdisk_parking")
DELTAS = (0.01, 0.05, 0.1, 0.2)
TEST_TRAJECTORIES = 100
TEST_SEED = 5_000_000
# --quick: 2 training and 8 held-out trajectories of 25 steps (100 calibration transitions,
# the fewest split conformal takes at delta 0.01)
QUICK_SETS = ["data.trajectories=2", "data.heldout_trajectories=8", "data.steps=25"]


def _bootstrap(inside: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    """95 % interval of the mean of ``inside`` (trajectories x steps) over resampled
    trajectories."""
    per = inside.mean(axis=1)
    draws = rng.integers(0, len(per), size=(n, len(per)))
    means = per[draws].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test-trajectories", type=int, default=TEST_TRAJECTORIES)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"test_trajectories": 3})
    out, test_trajectories = args.out, args.test_trajectories
    sets = QUICK_SETS if args.quick else []
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = []
    for name in SCENARIOS:
        cfg = scenario.load_scenario(
            ROOT / "scenarios" / f"{name}.toml", ['model.bound="conformal"', *sets]
        )
        env = pipeline.build_env(cfg)
        train = pipeline.collect(cfg, env, "train")
        calibration, _ = pipeline.split_heldout(pipeline.collect(cfg, env, "heldout"))
        test_cfg = {
            **cfg,
            "data": {
                **cfg["data"],
                "heldout_seed": TEST_SEED,
                "heldout_trajectories": test_trajectories,
            },
        }
        test = pipeline.collect(test_cfg, env, "heldout")
        for delta in DELTAS:
            family = NominalModel(env.nominal_system, env.dt, bound="conformal", delta=delta)
            model = family.fit(train, calibration).discrete_model()
            X, U, _ = evaluation.transitions(model, test)
            errors = np.abs(evaluation.one_step_errors(model, test))
            inside = np.all(errors <= evaluation.bound_values(model, X, U), axis=1)
            inside = inside.reshape(test.n_trajectories, test.n_steps)
            lo, hi = _bootstrap(inside, rng)
            rows.append(
                {
                    "scenario": name,
                    "system": env.true_system.name,
                    "delta": delta,
                    "promised": 1 - delta,
                    "calibration_trajectories": calibration.n_trajectories,
                    "calibration_transitions": family.calibration_.n_calibration,
                    "quantile": family.calibration_.quantile,
                    "coverage": float(inside.mean()),
                    "ci95_low": lo,
                    "ci95_high": hi,
                    "test_transitions": int(inside.size),
                    "coverage >= 1 - delta": "yes" if inside.mean() >= 1 - delta else "no",
                    "1 - delta in interval": "yes" if lo <= 1 - delta <= hi else "no",
                }
            )
            print(rows[-1])
    fig = Figure(figsize=(6, 5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([0.75, 1.0], [0.75, 1.0], "k--", linewidth=1, label="coverage = 1 - delta")
    for i, name in enumerate(SCENARIOS):
        mine = [r for r in rows if r["scenario"] == name]
        x = [r["promised"] for r in mine]
        y = [r["coverage"] for r in mine]
        err = [
            [r["coverage"] - r["ci95_low"] for r in mine],
            [r["ci95_high"] - r["coverage"] for r in mine],
        ]
        ax.errorbar(x, y, yerr=err, fmt="o-", color=f"C{i}", capsize=3, label=mine[0]["system"])
    ax.set_xlabel("promised coverage 1 - delta")
    ax.set_ylabel("coverage on fresh trajectories")
    ax.legend(fontsize=8)
    fig.savefig(out / "coverage.png", dpi=110, bbox_inches="tight")

    intro = (
        "Model: the nominal midpoint model of each scenario's env (nominal parameters; the "
        "true system has perturbed masses and inertias, friction and observation noise). "
        "Bound: split conformal, constant per-entry scale (RMS of the training errors), "
        "calibrated on the first half of the scenario's held-out trajectories ([data] of the "
        "scenario file; defaults where it has none). Coverage: the fraction of the one-step "
        f"transitions of {test_trajectories} fresh trajectories (reset seeds from {TEST_SEED}, "
        "same excitation) whose error lies within the bound in every entry at once; 95 % "
        "interval by a bootstrap over whole trajectories. Split conformal promises at least "
        "1 - delta on average over calibration sets of exchangeable transitions; transitions "
        "of one trajectory are dependent, so the calibration set is worth about as many "
        "independent samples as it has trajectories, and one calibration set with few "
        "trajectories can land below the promise."
    )
    command = "python tests/experiments/conformal_coverage.py"
    title = "Conformal bounds: coverage on fresh held-out trajectories"
    print(
        write_table(out, "coverage", title, command, intro, rows, after="![coverage](coverage.png)")
    )


if __name__ == "__main__":
    main()
