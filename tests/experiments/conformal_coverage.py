"""Does the conformal bound cover what it promises, per step and per horizon? Coverage on
fresh held-out trajectories, and the bound's width by shape and level.

    python tests/experiments/conformal_coverage.py

For each environment (the true system of a scenario file) the nominal midpoint model is
calibrated by split conformal prediction on the scenario's held-out calibration
trajectories; then ``TEST_TRAJECTORIES`` fresh trajectories of the same true system,
collected with the same excitation from new reset seeds, measure

- the coverage per step: the fraction of one-step transitions whose error lies within the
  bound in every entry at once (what a step-level bound promises with ``1 - delta``);
- the coverage per horizon: the fraction of windows of ``N`` consecutive transitions
  (``N`` the scenario's ``controller.horizon``; every start in every test trajectory) in
  which every one of the ``N`` errors lies within the bound (what a horizon-level bound
  promises with ``1 - delta``, and what a plan's tube needs along its horizon).

Transitions and windows inside a trajectory are not independent, so the intervals are a
trajectory bootstrap (2000 resamples of whole trajectories).

``coverage``: the step-level bound with a constant per-entry scale for several ``delta``.
``levels``: at ``delta = LEVEL_DELTA``, every scale (constant; state-dependent ``state``;
for the GP-VI model of ``cartpole_gpvi_safe`` also its posterior ``spread``) at both levels
(``step``; ``horizon``: windows or Bonferroni, the tighter one measured on the training
data), with the mean width of the bound and its width at equal coverage (each shape's
quantile set on the test data so that its coverage, per step or per horizon as the level
says, is exactly ``1 - delta``), both relative to the constant scale's.

Writes ``results/conformal/{coverage.md, coverage.csv, coverage.png, levels.md, levels.csv,
levels.png}``. ``--quick --out DIR``: a smoke test into ``DIR``, on a few trajectories
(``QUICK_SETS``, 3 test ones, horizon ``QUICK_HORIZON``, delta ``QUICK_LEVEL_DELTA``, a GP
on ``QUICK_GP_SETS``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from _quick import add_options, parse
from _tables import write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc import pipeline, scenario
from vimpc.models import NominalModel, evaluation
from vimpc.models.calibration import windows_inside

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "conformal"
SCENARIOS = ("pendulum_swingup", "cartpole_safe", "fourbar_tracking", "rollingdisk_parking")
GP_SCENARIO = "cartpole_gpvi_safe"
DELTAS = (0.01, 0.05, 0.1, 0.2)
LEVEL_DELTA = 0.05
TEST_TRAJECTORIES = 400
TEST_SEED = 5_000_000
# --quick: 2 training and 8 held-out trajectories of 25 steps (100 calibration transitions,
# the fewest split conformal takes at delta 0.01); horizon-level bounds over 5 steps at
# delta 0.2 (4 calibration trajectories are the fewest windows take); a small GP
QUICK_SETS = ["data.trajectories=2", "data.heldout_trajectories=8", "data.steps=25"]
QUICK_HORIZON = 5
QUICK_LEVEL_DELTA = 0.2
EQUAL_WIDTH = "width at equal coverage / constant's"
QUICK_GP_SETS = ["model.samples=32", "model.support_points=0", "model.restarts=1"]


def _bootstrap(per: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    """95 % interval of the mean of ``per`` (one value per trajectory) over resampled
    trajectories."""
    draws = rng.integers(0, len(per), size=(n, len(per)))
    means = per[draws].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


class Measured:
    """A bounded model on the test trajectories: errors, bound, steps and windows inside."""

    def __init__(self, model, test, horizon: int) -> None:
        X, U, _ = evaluation.transitions(model, test)
        shape = (test.n_trajectories, test.n_steps)
        self.errors = np.abs(evaluation.one_step_errors(model, test))
        self.bound = evaluation.bound_values(model, X, U)
        inside = np.all(self.errors <= self.bound, axis=1).reshape(shape)
        self.step_inside = inside
        self.horizon = horizon
        self.window_inside = windows_inside(inside, horizon)  # (trajectories, windows)
        self.shape = shape

    def coverage(self, rng: np.random.Generator) -> dict[str, Any]:
        per_step = self.step_inside.mean(axis=1)
        per_window = self.window_inside.mean(axis=1)
        lo, hi = _bootstrap(per_step, rng)
        hlo, hhi = _bootstrap(per_window, rng)
        return {
            "coverage_step": float(self.step_inside.mean()),
            "step_ci95": f"{lo:.3f}-{hi:.3f}",
            "coverage_horizon": float(self.window_inside.mean()),
            "horizon_ci95": f"{hlo:.3f}-{hhi:.3f}",
            "_step_ci": (lo, hi),
            "_horizon_ci": (hlo, hhi),
        }

    def width_at_equal_coverage(self, quantile: float, level: str, delta: float) -> np.ndarray:
        """Mean width per entry with the quantile that makes this bound's test coverage (per
        step, or per horizon for ``level = "horizon"``) exactly ``1 - delta``."""
        shape = self.bound / quantile
        scores = np.max(self.errors / shape, axis=1).reshape(self.shape)
        if level == "horizon":
            h, T = self.horizon, self.shape[1]
            scores = np.stack([scores[:, s : s + h].max(axis=1) for s in range(T - h + 1)], 1)
        q = float(np.quantile(scores.ravel(), 1.0 - delta, method="inverted_cdf"))
        return q * shape.mean(axis=0)


def _data(cfg: dict[str, Any], test_trajectories: int, cache: dict[str, Any]):
    """Training, calibration and test trajectories of a scenario (shared between scenarios
    with the same env and data)."""
    key = json.dumps({"env": cfg["env"], "data": cfg["data"]}, sort_keys=True, default=str)
    if key not in cache:
        env = pipeline.build_env(cfg)
        train = pipeline.collect(cfg, env, "train")
        calibration, _ = pipeline.split_heldout(pipeline.collect(cfg, env, "heldout"))
        data = {"heldout_seed": TEST_SEED, "heldout_trajectories": test_trajectories}
        test = pipeline.collect(cfg.replace(data=data), env, "heldout")
        cache[key] = (env, train, calibration, test)
    return cache[key]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test-trajectories", type=int, default=TEST_TRAJECTORIES)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"test_trajectories": 3})
    out, test_trajectories = args.out, args.test_trajectories
    sets = QUICK_SETS if args.quick else []
    level_delta = QUICK_LEVEL_DELTA if args.quick else LEVEL_DELTA
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    cache: dict[str, Any] = {}
    rows, level_rows = [], []
    for name in (*SCENARIOS, GP_SCENARIO):
        path = ROOT / "scenarios" / f"{name}.toml"
        extra = QUICK_GP_SETS if (args.quick and name == GP_SCENARIO) else []
        # the levels are this experiment's (``_level_rows``), not the scenario's
        base = ['model.bound="conformal"', 'model.bound_level="step"', "model.bound_horizon=0"]
        cfg = scenario.load_scenario(path, [*base, *sets, *extra])
        env, train, calibration, test = _data(cfg, test_trajectories, cache)
        horizon = cfg["controller"]["horizon"]
        if args.quick:
            horizon = min(horizon, QUICK_HORIZON)
        if name != GP_SCENARIO:
            rows += _per_step_rows(name, env, train, calibration, test, horizon, rng)
        level_rows += _level_rows(name, cfg, env, train, calibration, test, horizon, level_delta)
    _coverage_outputs(out, rows, test_trajectories)
    _level_outputs(out, level_rows, level_delta, test_trajectories)


def _per_step_rows(name, env, train, calibration, test, horizon, rng) -> list[dict[str, Any]]:
    rows = []
    for delta in DELTAS:
        family = NominalModel(env.nominal_system, env.dt, bound="conformal", delta=delta)
        model = family.fit(train, calibration).discrete_model()
        m = Measured(model, test, horizon)
        cov = m.coverage(rng)
        lo, hi = cov["_step_ci"]
        rows.append(
            {
                "scenario": name,
                "system": env.true_system.name,
                "delta": delta,
                "promised": 1 - delta,
                "calibration_trajectories": calibration.n_trajectories,
                "calibration_transitions": family.calibration_.n_calibration,
                "quantile": family.calibration_.quantile,
                "coverage": cov["coverage_step"],
                "ci95_low": lo,
                "ci95_high": hi,
                "test_transitions": int(m.step_inside.size),
                "coverage >= 1 - delta": "yes" if cov["coverage_step"] >= 1 - delta else "no",
                "1 - delta in interval": "yes" if lo <= 1 - delta <= hi else "no",
                "horizon": horizon,
                "coverage per horizon": cov["coverage_horizon"],
                "horizon ci95": cov["horizon_ci95"],
            }
        )
        print({k: v for k, v in rows[-1].items() if not k.startswith("_")})
    return rows


def _level_rows(name, cfg, env, train, calibration, test, horizon, delta) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    if name == GP_SCENARIO:
        family = scenario.build_family(cfg, env.nominal_system)
        family.fit(train, calibration)
        model_name, scales = "gp_vi", ("constant", "spread", "state", "auto")
    else:
        family = NominalModel(env.nominal_system, env.dt, bound="conformal", delta=delta)
        family.fit(train, calibration)
        model_name, scales = "nominal", ("constant", "state", "auto")
    rows = []
    for level in ("step", "horizon"):
        reference: dict[str, np.ndarray] = {}
        for scale in scales:
            family.recalibrate(
                train,
                calibration,
                delta=delta,
                conformal_scale=scale,
                bound_level=level,
                bound_horizon=horizon if level == "horizon" else 0,
            )
            model = family.discrete_model()
            bound = family.calibration_
            m = Measured(model, test, horizon)
            cov = m.coverage(rng)
            width = m.bound.mean(axis=0)
            equal = m.width_at_equal_coverage(bound.quantile, level, delta)
            if scale == "constant":
                reference = {"width": width, "equal": equal}
            rows.append(
                {
                    "scenario": name,
                    "model": model_name,
                    "scale": scale,
                    "chosen": bound.figures.get("scale_chosen", scale),
                    "level": level,
                    "horizon": horizon,
                    "delta": delta,
                    "calibrated by": bound.figures.get("horizon_method", "steps"),
                    "quantile": bound.quantile,
                    "coverage per step": cov["coverage_step"],
                    "step ci95": cov["step_ci95"],
                    "coverage per horizon": cov["coverage_horizon"],
                    "horizon ci95": cov["horizon_ci95"],
                    "mean width": " ".join(f"{w:.3g}" for w in width),
                    "width / constant's": float(np.mean(width / reference["width"])),
                    EQUAL_WIDTH: float(np.mean(equal / reference["equal"])),
                }
            )
            print(rows[-1])
    return rows


def _coverage_outputs(out: Path, rows: list[dict[str, Any]], test_trajectories: int) -> None:
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
        ax.plot(x, [r["coverage per horizon"] for r in mine], "x:", color=f"C{i}")
    ax.plot([], [], "kx:", label="the same bounds, per horizon")
    ax.set_xlabel("promised coverage 1 - delta")
    ax.set_ylabel("coverage on fresh trajectories")
    ax.legend(fontsize=8)
    fig.savefig(out / "coverage.png", dpi=110, bbox_inches="tight")

    intro = (
        "Model: the nominal midpoint model of each scenario's env (nominal parameters; the "
        "true system has perturbed masses and inertias, friction and observation noise). "
        "Bound: split conformal per step, constant per-entry scale (RMS of the training "
        "errors), calibrated on the first half of the scenario's held-out trajectories "
        "([data] of the scenario file; defaults where it has none). Coverage: the fraction "
        f"of the one-step transitions of {test_trajectories} fresh trajectories (reset seeds "
        f"from {TEST_SEED}, same excitation) whose error lies within the bound in every entry "
        "at once; 95 % interval by a bootstrap over whole trajectories. Split conformal "
        "promises at least 1 - delta on average over calibration sets of exchangeable "
        "transitions; transitions of one trajectory are dependent, so the calibration set is "
        "worth about as many independent samples as it has trajectories, and one calibration "
        "set with few trajectories can land below the promise. Coverage per horizon: the "
        "fraction of windows of `horizon` (the scenario's controller.horizon) consecutive "
        "test transitions, every start, with all their errors inside the same step-level "
        "bound: far below 1 - delta, which is why a plan's tube needs the horizon-level "
        "bound of [levels.md](levels.md)."
    )
    command = "python tests/experiments/conformal_coverage.py"
    title = "Conformal bounds: coverage on fresh held-out trajectories"
    print(
        write_table(out, "coverage", title, command, intro, rows, after="![coverage](coverage.png)")
    )


def _level_outputs(
    out: Path, rows: list[dict[str, Any]], delta: float, test_trajectories: int
) -> None:
    fig = Figure(figsize=(11, 4.5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    labels = [_label(r) for r in rows if r["scale"] == "constant"]
    labels = list(dict.fromkeys(labels))
    x = np.arange(len(labels))
    for j, (level, marker) in enumerate((("step", "o"), ("horizon", "s"))):
        mine = [r for r in rows if r["scale"] == "constant" and r["level"] == level]
        y = [r["coverage per horizon"] for r in mine]
        err = np.array([[float(v) for v in r["horizon ci95"].split("-")] for r in mine]).T
        left.errorbar(
            x + 0.15 * (2 * j - 1),
            y,
            yerr=[np.array(y) - err[0], err[1] - np.array(y)],
            fmt=marker,
            capsize=3,
            color=f"C{j}",
            label=f"{level}-level bound",
        )
    left.axhline(1 - delta, color="k", linestyle="--", linewidth=1, label="1 - delta")
    left.set_xticks(x, labels, fontsize=7, rotation=30)
    left.set_ylabel("coverage per horizon (fresh trajectories)")
    left.set_title("constant scale", fontsize=9)
    left.legend(fontsize=8)
    others = [r for r in rows if r["scale"] != "constant"]
    names = [f"{_label(r)}\n{r['scale']}" for r in others if r["level"] == "step"]
    xs = np.arange(len(names))
    for j, level in enumerate(("step", "horizon")):
        y = [r[EQUAL_WIDTH] for r in others if r["level"] == level]
        right.bar(xs + 0.2 * (2 * j - 1), y, width=0.4, color=f"C{j}", label=f"{level} level")
    right.axhline(1.0, color="k", linewidth=1)
    right.set_xticks(xs, names, fontsize=7, rotation=30)
    right.set_ylabel("mean width at equal coverage / constant scale's")
    right.legend(fontsize=8)
    fig.savefig(out / "levels.png", dpi=110, bbox_inches="tight")

    shipped = ", the shipped scenarios' value" if delta == LEVEL_DELTA else ""
    intro = (
        f"delta = {delta}{shipped}. Each scenario's model is calibrated "
        "on the first half of its held-out trajectories with each bound scale: `constant` "
        "(per-entry RMS of the training errors), `state` (max(a + b abs(v) + c abs(u), "
        "floor) per entry by non-negative least squares on the training errors, floor 0.1 "
        "times the entry's mean absolute training error) and, for the GP-VI model, "
        "`spread` (its posterior standard deviation), and `auto`, the narrowest of these at "
        "equal coverage measured on the training data (`chosen`); at each level: `step` (delta per "
        "transition) and `horizon` (delta for all `horizon` consecutive errors at once; "
        "`calibrated by` names the calibration chosen on the training scores: `windows`, "
        "the largest normalised error over every window of `horizon` steps of every "
        "calibration trajectory, by conformal risk control over the trajectories, or "
        "`bonferroni`, delta/horizon per step). "
        f"Coverage on {test_trajectories} fresh trajectories (reset seeds from {TEST_SEED}) "
        "per step and per horizon (every window of `horizon` consecutive transitions), 95 % "
        "intervals by a bootstrap over trajectories. `mean width`: the bound per state entry "
        "averaged over the test transitions; `width / constant's`: its ratio to the "
        "constant scale's at the same level, averaged over entries; `width at equal "
        "coverage`: the same ratio with each shape's quantile set on the test data so that "
        "its coverage at its level is exactly 1 - delta (the comparison of shapes free of "
        "calibration noise). The intervals are those of the test data only: one calibration "
        "set of n windows (one per calibration trajectory) leaves the conditional coverage "
        "a spread of about sqrt(delta (1 - delta) / n) around its mean, 0.03 for n = 50, so "
        "a single calibration can land below 1 - delta although the promise holds on "
        "average over calibration sets."
    )
    after = _level_summary(rows, delta) + "\n\n![levels](levels.png)"
    command = "python tests/experiments/conformal_coverage.py"
    title = "Conformal bounds per step and per horizon, constant and state-dependent scale"
    print(write_table(out, "levels", title, command, intro, rows, after=after))


def _label(row: dict[str, Any]) -> str:
    """A short tick label: the scenario's first word and the model."""
    return f"{row['scenario'].split('_')[0]} {row['model']}"


def _level_summary(rows: list[dict[str, Any]], delta: float) -> str:
    """What the table shows, in numbers read from it."""

    def span(values: list[float]) -> str:
        return f"{min(values):.3f}-{max(values):.3f}"

    lines = []
    for level in ("step", "horizon"):
        mine = [r for r in rows if r["level"] == level]
        below = [
            f"{r['scenario']} {r['model']} {r['scale']} ({r['coverage per horizon']:.3f}, "
            f"interval {r['horizon ci95']})"
            for r in mine
            if float(r["horizon ci95"].split("-")[1]) < 1 - delta
        ]
        lines.append(
            f"- {level}-level bounds: coverage per horizon "
            f"{span([r['coverage per horizon'] for r in mine])} (promised 1 - delta = "
            f"{1 - delta:g} {'per horizon' if level == 'horizon' else 'per step only'}); "
            f"interval below 1 - delta: {len(below)} of {len(mine)}"
            + (f" ({'; '.join(below)})" if level == "horizon" and below else "")
        )
    for level in ("step", "horizon"):
        ratios = [
            f"{r['scenario']} {r['model']} {r['scale']} {r[EQUAL_WIDTH]:.2f}"
            for r in rows
            if r["level"] == level and r["scale"] != "constant"
        ]
        lines.append(
            f"- width at equal coverage per {level} relative to the constant scale: "
            + ", ".join(ratios)
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
