"""Does the cart stay on its rail? The safe cart-pole with and without the tube, over fresh
seeds, plants and fits.

    python tests/experiments/safety_cartpole.py [--seed 100] [--episodes 100] [--fits 3]
        [--workers 1] [--runs DIR] [--rows TEXT ...] [--table NAME] [--report-only]

Every row is ``vimpc run`` of one of three scenarios with ``env.plant = "per_episode"`` (the
true cart-pole drawn per episode within the scenario's perturbation: masses and inertias
within 10 %, friction [0.3, 0.1], observation noise 1e-3; its ``param_seed`` recorded) and
``data.fits = 3`` (three fits on shifted data seeds, episode i uses fit i mod 3), over reset
seeds ``seed .. seed + episodes - 1``, disjoint from the seeds 0-49 the scenarios were
designed on:

- ``scenarios/cartpole_safe.toml``: the nominal midpoint model with a horizon-level bound
  calibrated by split conformal prediction on the controller's own closed-loop episodes;
  without tightening, with the open-loop box tube, and with the gaussian feedback tube (the
  scenario); the same tube with the bound calibrated on held-out open-loop trajectories
  instead, at the horizon and at the step level;
- ``scenarios/cartpole_gpvi_safe.toml`` (a 0.7 m rail): the GP-VI model; the gaussian
  feedback tube with the horizon-level conformal bound shaped by the GPs' spread (the
  scenario), the same with a step-level bound, without tightening, and the feedback tube
  with the Theorem 1 bound (``model.bound = "theorem1"``);
- ``scenarios/cartpole_clnn_safe.toml`` (a 0.7 m rail): a constrained Lagrangian network in
  Cartesian coordinates with a per-step conformal bound; the gaussian feedback tube (the
  scenario) and no tightening.

Each row's run goes to ``--runs DIR/<row>/`` and is kept there: a row whose complete run is
in ``DIR`` is not run again, so rows can be run one at a time (``--rows``: the table then
has those rows only) and the table of all rows written from those done so far (``--report-only``: nothing is run; a row whose run is
unfinished is reported on its finished episodes and says so, a row with none is listed as
not run). Writes ``results/safety/{NAME.md, NAME.csv}`` (``--table``, default
``cartpole``) and figures. ``--quick --out DIR``: a smoke test into ``DIR``: the three
scenario rows of ``QUICK_ROWS``, one episode of 3 steps each on the env's one plant, without
the runs' own figures, in this process, the models fitted on a few short trajectories
(``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

import numpy as np
from _quick import add_options, parse
from _tables import clopper_pearson, interval, read_run, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "safety"
NOMINAL, GPVI, CLNN = "cartpole_safe", "cartpole_gpvi_safe", "cartpole_clnn_safe"
NO_TUBE = 'controller.tightening="none"'
STEP_LEVEL = ['model.bound_level="step"', "model.bound_horizon=0"]
HELDOUT = 'data.calibration="heldout"'
# the CLNN scenario's warm solves without their iteration budget
NO_WARM_LIMIT = 'controller.warm_max_iter="none"'
# fatrop alone in the CLNN scenario, to convergence in every call (~47 ms a solve against
# the scenario's condensed SQP's ~3)
FATROP = ['controller.solver="fatrop"', "controller.tol=1e-6", NO_WARM_LIMIT]
# the GP-VI scenario row first among the GP-VI rows: it is the one the README quotes
ROWS = {
    "nominal, no tightening": (NOMINAL, [NO_TUBE]),
    "nominal, open-loop tube (box)": (NOMINAL, ['controller.tube="open_loop"']),
    # a horizon-level bound calibrated on the controller's own closed-loop episodes
    "nominal, feedback tube, gaussian (scenario)": (NOMINAL, []),
    # fatrop's iteration cap before the scenario's 500: the hardest swing-up solves stop
    # unconverged (the fallback input, then a solve from scratch)
    "nominal, feedback tube, gaussian, max_iter 100": (NOMINAL, ["controller.max_iter=100"]),
    # the solves from the previous plan bounded at 100 iterations (about 25 ms here), a
    # stopped one continued in the next call; the solve from scratch keeps max_iter
    "nominal, feedback tube, gaussian, warm_max_iter 100": (
        NOMINAL,
        ["controller.warm_max_iter=100"],
    ),
    # the same bound calibrated on the held-out open-loop trajectories instead
    "nominal, feedback tube, gaussian, held-out calibration": (NOMINAL, [HELDOUT]),
    # a step-level bound on the held-out open-loop trajectories
    "nominal, feedback tube, gaussian, step-level bound, held-out calibration": (
        NOMINAL,
        [HELDOUT, *STEP_LEVEL],
    ),
    "GP-VI, feedback tube, gaussian, horizon-level bound (scenario)": (GPVI, []),
    # delta read over one step instead of the controller's horizon
    "GP-VI, feedback tube, gaussian, step-level bound": (GPVI, STEP_LEVEL),
    "GP-VI, no tightening": (GPVI, [NO_TUBE]),
    "GP-VI, feedback tube, gaussian, Theorem 1 bound": (
        GPVI,
        ['model.bound="theorem1"', *STEP_LEVEL],
    ),
    "CLNN, feedback tube, gaussian (scenario)": (CLNN, []),
    "CLNN, no tightening": (CLNN, [NO_TUBE]),
    "CLNN, feedback tube, gaussian, fatrop alone": (CLNN, FATROP),
    # no iteration budget: the warm solves the condensed SQP does not finish go to fatrop
    "CLNN, feedback tube, gaussian, no iteration budget (unfinished solves to fatrop)": (
        CLNN,
        [NO_WARM_LIMIT],
    ),
    # a smaller iteration budget: less for the tries and the descent
    "CLNN, feedback tube, gaussian, warm_max_iter 10": (CLNN, ["controller.warm_max_iter=10"]),
    # a time budget in its place (the scenario's bound before): 25 ms on this machine, and
    # 15 ms, what 25 ms leaves on a machine ~1.7 times as slow
    "CLNN, feedback tube, gaussian, 25 ms time budget": (
        CLNN,
        [NO_WARM_LIMIT, "controller.time_budget=0.025"],
    ),
    "CLNN, feedback tube, gaussian, 15 ms time budget": (
        CLNN,
        [NO_WARM_LIMIT, "controller.time_budget=0.015"],
    ),
    # the tube along the plan widened towards the previous call's
    "CLNN, feedback tube, gaussian, tube memory 0.8": (CLNN, ["controller.tube_memory=0.8"]),
}
# figures copied from a complete row's run folder, under the name prefix given
FIGURES = {
    "nominal, no tightening": ("none", ("episodes.png",)),
    "nominal, feedback tube, gaussian (scenario)": (
        "tube",
        ("episodes.png", "safety.png", "coverage_fit0.png", "outside_data.png"),
    ),
    "GP-VI, no tightening": ("gpvi_none", ("episodes.png",)),
    "GP-VI, feedback tube, gaussian, Theorem 1 bound": ("gpvi_theorem1", ("episodes.png",)),
    "GP-VI, feedback tube, gaussian, horizon-level bound (scenario)": (
        "gpvi_tube",
        ("episodes.png", "coverage_fit0.png", "outside_data.png"),
    ),
    "CLNN, feedback tube, gaussian (scenario)": (
        "clnn_tube",
        ("episodes.png", "safety.png", "coverage_fit0.png"),
    ),
    "CLNN, no tightening": ("clnn_none", ("episodes.png",)),
}
CAPTIONS = (
    "every episode's cart position against the rail (episodes.png); where copied, the tube "
    "of one episode with the plans made every second over their horizon (safety.png), fit 0's "
    "one-step errors against its bound (coverage_fit0.png) and the share of steps "
    "outside the training box (outside_data.png)"
)
# what each kind of tube assumes of the model's errors (the table names it per row)
ASSUMES = {
    "none": "no tightening: the rail is a soft bound on the model's prediction",
    "open_loop": "open-loop box tube: bound boxes propagated through the plan without feedback",
    "feedback box": "feedback tube, box errors: the bound's box holds every step, LQR feedback",
    "feedback gaussian": "feedback tube, gaussian errors: the bound read as the 1 - delta "
    "quantile of independent Gaussian errors, chance constraints along the plan under LQR "
    "feedback (stage 1 holds the whole box)",
}


# --quick: 4 training and 8 held-out trajectories of 5 steps (20 calibration transitions,
# the fewest split conformal takes at delta 0.05), 3 control steps, a horizon of 5; the
# GP-VI with 16 samples, 8 support points, one start of 5 optimiser steps, and its
# horizon-level bound calibrated on 19 held-out trajectories of 5 steps (the fewest windows
# it takes)
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
    "controller.horizon=5",
]
QUICK_GPVI = ["model.samples=16", "model.support_points=8", "model.restarts=1",
              "model.iterations=5", "data.heldout_trajectories=38", "model.bound_horizon=5"]  # fmt: skip
# the nominal scenario's closed-loop calibration: 19 episodes of 5 steps (the fewest windows
# a 5-step horizon takes at delta 0.05)
QUICK_NOMINAL = ["data.calibration_episodes=19", "episodes.steps=5", "model.bound_horizon=5"]
# the CLNN: a one-layer potential of 8 trained for 2 epochs
QUICK_CLNN = ["model.hidden=[8]", "model.epochs=2"]
QUICK_ROWS = (
    "nominal, feedback tube, gaussian (scenario)",
    "GP-VI, feedback tube, gaussian, horizon-level bound (scenario)",
    "CLNN, feedback tube, gaussian (scenario)",
)
QUICK_EXTRA = {NOMINAL: QUICK_NOMINAL, GPVI: QUICK_GPVI, CLNN: QUICK_CLNN}


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def settings(folder: Path) -> dict:
    """The caps, fallbacks and thresholds in effect in a run, from its resolved config."""
    cfg = tomllib.loads((folder / "config.resolved.toml").read_text())
    ctrl, model = cfg["controller"], cfg["model"]
    cons = ctrl.get("constraints", {})
    tightening = ctrl.get("tightening", "none")
    if tightening == "none":
        kind = "none"
    elif ctrl.get("tube", "open_loop") == "open_loop":
        kind = "open_loop"
    else:
        kind = f"feedback {ctrl.get('tube_errors', 'box')}"
    return {
        "tube": kind,
        "assumes": ASSUMES.get(kind, kind),
        "bound": model.get("bound", "none"),
        "bound_level": model.get("bound_level", "step"),
        "calibrated_on": (
            "closed-loop episodes"
            if cfg.get("data", {}).get("calibration") == "closed_loop"
            else "held-out open-loop data"
        ),
        "delta": float(model.get("delta", float("nan"))),
        "soft_bounds": bool(cons.get("soft_bounds", False)),
        "bound_weight": cons.get("bound_weight", float("nan")),
        "max_iter": ctrl.get("max_iter"),
        "warm_max_iter": ctrl.get("warm_max_iter") or "max_iter",
        "time_budget": ctrl.get("time_budget"),
        "tube_memory": ctrl.get("tube_memory", 0.0) if tightening == "tube" else "",
        "warm_barrier": ctrl.get("warm_barrier") or "solver's own",
        "fits": cfg.get("data", {}).get("fits", 1),
        "plant": cfg.get("env", {}).get("plant", "fixed"),
        "rail": cfg["env"]["kwargs"].get("s_max", 1.0),
    }


def meets(ci: list[float], target: float) -> str:
    """Whether a coverage's interval reaches ``target``: ``yes`` (the whole interval is at or
    above it), ``within`` (the interval contains it), ``no`` (the interval is below it)."""
    if not np.all(np.isfinite(ci)):
        return "n/a"
    return "yes" if ci[0] >= target else ("within" if ci[1] >= target else "no")


def bound_quantiles(m: dict) -> str:
    """Each fit's conformal quantile (the bound in units of its scale), from the run's model
    records (or, for a run that did not record its bound, the model files)."""
    from vimpc.model_file import load

    out = []
    for record in m.get("fits") or [m["model"]]:
        bound = record.get("bound")
        if bound is None and record.get("path") and Path(record["path"]).exists():
            info = load(record["path"]).bound_info
            bound = None if info is None else info.as_dict()
        q = (bound or {}).get("quantile")
        out.append("n/a" if q is None else f"{q:.3g}")
    return " / ".join(out)


def row_of(label: str, m: dict, folder: Path, complete: bool) -> dict:
    s = settings(folder)
    n, off = m["episodes"], m["episodes_with_violation"]
    per_fit = m.get("per_fit", [])
    spread = m.get("between_fit_std", {})
    target = 1.0 - s["delta"]
    cov_ci = m.get("coverage_mean_ci95", [float("nan")] * 2)
    hcov_ci = m.get("horizon_coverage_mean_ci95", [float("nan")] * 2)
    requested = m.get("episodes_requested", n)
    return {
        "row": label,
        "episodes": n if complete else f"{n} of {requested} (unfinished run)",
        "plants": m.get("plants", 1),
        "fits": m.get("fit_count", 1),
        "rail": s["rail"],
        "tube": s["tube"],
        "bound": f"{s['bound']} ({s['bound_level']}), delta {s['delta']:g}",
        "calibrated_on": s["calibrated_on"] if s["bound"] == "conformal" else "",
        "quantile_per_fit": bound_quantiles(m) if s["bound"] == "conformal" else "",
        "off_rail": off,
        "off_rail_rate": m["violation_rate"],
        "off_rail_wilson95": interval(m["violation_rate_ci95"]),
        "off_rail_cp95": interval(clopper_pearson(off, n)),
        "success": m["success_rate"],
        "success_wilson95": interval(m["success_rate_ci95"]),
        "success_per_fit": " / ".join(
            f"{r.get('success_rate', float('nan')):.2f}" for r in per_fit
        ),
        "success_between_fit_std": spread.get("success_rate", float("nan")),
        "off_rail_per_fit": " / ".join(f"{r['violation_rate']:.2f}" for r in per_fit),
        "off_rail_between_fit_std": spread.get("violation_rate", float("nan")),
        "max_violation_m": m["max_violation"],
        "min_margin_m": m["min_margin"],
        "mean_min_margin_m": m["min_margin_mean"],
        "mean_min_margin_boot95": interval(m.get("min_margin_mean_ci95", [float("nan")] * 2)),
        "promised_coverage": target,
        "coverage_step_mean": m.get("coverage_mean", float("nan")),
        "coverage_step_boot95": f"{cov_ci[0]:.3f}-{cov_ci[1]:.3f}",
        "coverage_step_meets": meets(cov_ci, target),
        "coverage_horizon_steps": m.get("coverage_horizon", 0),
        "coverage_horizon_mean": m.get("horizon_coverage_mean", float("nan")),
        "coverage_horizon_boot95": f"{hcov_ci[0]:.3f}-{hcov_ci[1]:.3f}",
        "coverage_horizon_meets": meets(hcov_ci, target),
        "empty_tube_fraction": m.get("empty_tube_fraction", float("nan")),
        "outside_data_share": m.get("outside_data_share", float("nan")),
        "solve_median_ms": m["solve_time_median_ms"],
        "solve_p95_ms": m["solve_time_p95_ms"],
        "failed_solves": m["failed_solves"],
        "late_solves": m.get("late_solves", float("nan")),
        "handed_over_solves": m.get("handed_over_solves", 0),
        "tube_kept_solves": m.get("tube_kept_solves", 0),
        "descended_solves": m.get("descended_solves", 0),
        "descended_iterates": m.get("descended_iterates", 0),
        "time_budget_ms": 1e3 * s["time_budget"] if s["time_budget"] else "none",
        "solves": m["solves"],
        "plan_constraint_max": m.get("max_plan_constraint_residual", float("nan")),
        "soft_bound_weight": s["bound_weight"] if s["soft_bounds"] else "hard bound",
        "max_iter": s["max_iter"],
        "warm_max_iter": s["warm_max_iter"],
        "tube_memory": s["tube_memory"],
        "warm_barrier": s["warm_barrier"],
        "assumes": s["assumes"],
    }


HEADERS = {
    "row": "controller",
    "episodes": "episodes",
    "plants": "plants",
    "fits": "fits",
    "rail": "rail |s| <= [m]",
    "tube": "tube",
    "bound": "bound (level), delta",
    "calibrated_on": "calibrated on",
    "quantile_per_fit": "conformal quantile per fit (bound / its scale)",
    "off_rail": "episodes off the rail",
    "off_rail_rate": "off-rail rate",
    "off_rail_wilson95": "off-rail Wilson 95%",
    "off_rail_cp95": "off-rail Clopper-Pearson 95%",
    "success": "success",
    "success_wilson95": "success Wilson 95%",
    "success_per_fit": "success per fit",
    "success_between_fit_std": "success std across fits",
    "off_rail_per_fit": "off-rail rate per fit",
    "off_rail_between_fit_std": "off-rail std across fits",
    "max_violation_m": "largest excursion past the rail [m]",
    "min_margin_m": "min margin [m]",
    "mean_min_margin_m": "mean episode-min margin [m]",
    "mean_min_margin_boot95": "its bootstrap 95%",
    "promised_coverage": "1 - delta",
    "coverage_step_mean": "coverage per step (mean over episodes)",
    "coverage_step_boot95": "its bootstrap 95%",
    "coverage_step_meets": "per step reaches 1 - delta",
    "coverage_horizon_steps": "horizon [steps]",
    "coverage_horizon_mean": "coverage per horizon (mean)",
    "coverage_horizon_boot95": "its bootstrap 95%",
    "coverage_horizon_meets": "per horizon reaches 1 - delta",
    "empty_tube_fraction": "steps with an empty tightened stage",
    "outside_data_share": "steps outside the training box",
    "solve_median_ms": "solve median [ms]",
    "solve_p95_ms": "solve p95 [ms]",
    "failed_solves": "failed solves",
    "late_solves": "late calls (over the 50 ms period)",
    "handed_over_solves": "condensed SQP: calls handed to condensed_start",
    "tube_kept_solves": "condensed SQP: calls solved with the last solved call's tube",
    "descended_solves": "condensed SQP: calls by its descent (in the budget's rest)",
    "descended_iterates": "of them, its last iterate unconverged",
    "time_budget_ms": "time budget [ms]",
    "solves": "solves",
    "plan_constraint_max": "model's constraint residual over the plans (max)",
    "soft_bound_weight": "soft-bound weight",
    "max_iter": "solver iteration cap",
    "warm_max_iter": "iteration cap of solves from the previous plan",
    "tube_memory": "tube memory",
    "warm_barrier": "warm solves' barrier start",
    "assumes": "what the tube assumes",
}


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
    ax.set_xlabel("episode minimum margin to the rail [m] (< 0: off the rail)")
    fig.suptitle("Safe cart-pole: per-episode minimum margin (black: median)")
    return fig


def shown(path: Path) -> str:
    """``path`` as the command line gives it: inside the repository, relative to it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--fits", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--runs", type=Path, default=ROOT / "results" / "runs" / "safety",
        help="where each row's run is kept (git-ignored by default); complete runs are reused",
    )  # fmt: skip
    parser.add_argument(
        "--rows", nargs="*", default=None,
        help="only the rows whose label contains one of these texts, run and in the table",
    )  # fmt: skip
    parser.add_argument(
        "--table", default="cartpole", help="name of the table files and the margins figure"
    )
    parser.add_argument(
        "--report-only", action="store_true",
        help="run nothing: write the table from the runs in --runs",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1, "fits": 2})
    if args.episodes < 1 or args.fits < 1:
        parser.error(f"--episodes and --fits must be >= 1, got {args.episodes}, {args.fits}")
    # --quick keeps the env's one plant: each plant's true step is compiled once (~0.3 s),
    # most of the smoke test's time with a plant per calibration episode
    plants = [] if args.quick else ['env.plant="per_episode"']
    variation = [*plants, f"data.fits={args.fits}"]
    folder, rows_all = args.out, ROWS
    tmp = None
    if args.quick:
        rows_all = {
            label: (
                scenario,
                [*QUICK_SETS, *QUICK_EXTRA[scenario], *sets],
            )
            for label, (scenario, sets) in ROWS.items()
            if label in QUICK_ROWS
        }
        tmp = tempfile.TemporaryDirectory()
        args.runs = Path(tmp.name)
    unknown = [t for t in args.rows or [] if not any(t in label for label in rows_all)]
    if unknown:
        parser.error(f"--rows {unknown} match no row; the rows are {list(rows_all)}")
    folder.mkdir(parents=True, exist_ok=True)
    rows, margins, copied = [], {}, {}
    for label, (scenario, sets) in rows_all.items():
        out = args.runs / slug(label)
        found = read_run(out)
        if args.rows is not None and not any(t in label for t in args.rows):
            continue
        if not args.report_only and (found is None or not found[2]):
            if found is not None:
                raise SystemExit(
                    f"{label}: {found[1]} is an unfinished run; finish it with vimpc run "
                    f"--resume {found[1]}, or report it as it is with --report-only"
                )
            vimpc_run(
                ROOT / "scenarios" / f"{scenario}.toml", out, episodes=args.episodes,
                seed=args.seed, workers=args.workers, sets=[*variation, *sets],
                plots=not args.quick,
            )  # fmt: skip
            found = read_run(out)
        if found is None:
            print(f"{label}: not run")
            continue
        m, run, complete = found
        rows.append(row_of(label, m, run, complete))
        margins[label] = [e["min_margin"] for e in m["per_episode"]]
        prefix, figures = FIGURES.get(label, ("", ()))
        for fig in figures if complete else ():
            if (run / fig).exists():
                shutil.copy(run / fig, folder / f"cartpole_{prefix}_{fig}")
                copied.setdefault(label, []).append(f"cartpole_{prefix}_{fig}")
        print(f"{label}: {rows[-1]}")
    if not rows:
        raise SystemExit(f"no row has a run in {args.runs}; run some rows first")
    missing = [
        label
        for label in rows_all
        if label not in margins and (args.rows is None or any(t in label for t in args.rows))
    ]
    fig = margins_figure(margins)
    fig.savefig(folder / f"{args.table}_margins.png", dpi=120)
    intro = (
        "Each row is `vimpc run scenarios/cartpole_safe.toml` (nominal rows), `vimpc run "
        "scenarios/cartpole_gpvi_safe.toml` (GP-VI rows) or `vimpc run "
        'scenarios/cartpole_clnn_safe.toml` (CLNN rows) with `env.plant="per_episode"`, '
        f"`data.fits={args.fits}` and the overrides the row names, over the same "
        f"{args.episodes} episodes (reset seeds {args.seed}-{args.seed + args.episodes - 1}; "
        "the nominal and GP-VI scenarios were designed on seeds 0-49, the CLNN one on 0-9). "
        "Each episode draws its own true "
        "cart-pole within the scenario's perturbation (masses and inertias within 10 %, "
        "friction [0.3, 0.1], observation noise 1e-3; its plant seed recorded) and uses fit "
        f"i mod {args.fits} (fits on data seeds shifted by 10^7). The rail is |s| <= 1 m in the nominal "
        "scenario and |s| <= 0.7 m in the GP-VI and CLNN ones (column 'rail'); an episode is off the rail when the true cart position leaves it at any step. Nominal "
        "rows: the nominal midpoint model, its bound calibrated by split conformal prediction "
        "(column 'calibrated on'): in the scenario at the horizon level (all 20 one-step errors "
        "of a window inside at once with probability >= 1 - delta, conformal risk control over "
        "every window) on 100 closed-loop episodes of the row's own controller (reset seeds "
        "2000000-2000099 plus 10^7 per fit, plants drawn per episode as in the row, the "
        "controller's model first bounded per step on the held-out data), or on held-out "
        "open-loop trajectories. GP-VI rows: Gaussian processes on the next "
        "velocities over the nominal midpoint integrator (sin/cos inputs, 512 samples, 100 "
        "support points), with the conformal bound shaped by the GPs' posterior spread (at the "
        "horizon level in the scenario: all 20 one-step errors of a window inside at once "
        "with probability >= 1 - delta) or the Theorem 1 bound (each GP's uniform error bound on the box of its training inputs). "
        "CLNN rows: a constrained Lagrangian network in Cartesian coordinates (the cart's "
        "and the pole's x, y, phi and rates; the rail and the pin as four holonomic "
        "constraints the exported variational step keeps; a 2 x 64 potential, constant "
        "masses and a viscous friction per joint rate learned from the scenario's 100 "
        "trajectories), its conformal bound per step on the 12 state entries, calibrated on "
        "held-out open-loop trajectories, reaching the rail through to_obs; the condensed "
        "Gauss-Newton SQP on the implicit transcription to an input step of 1e-3 from the "
        "previous plan, within an iteration budget (column 'iteration cap of solves from the "
        "previous plan', 20 in the scenario): a warm solve that does not converge in 40 % of "
        "it is tried again with the last solved call's tube until 80 %, and the rest goes to "
        "the single-shooting descent, whose last iterate is used where it meets the rows "
        "(else the fallback input); rows with a time budget (column 'time budget') share "
        "the time the same way instead; a row with neither hands the unfinished warm solves "
        "to fatrop; the cold starts by fatrop to tol 1e-6, or (row 'fatrop alone') fatrop to "
        "tol 1e-6 in every call. The "
        "model's constraint residual over the plans: "
        "the largest |Phi| at any predicted state of any plan the solver returned. "
        "Intervals: off-rail and success rates with the Wilson and (off rail) the exact "
        "Clopper-Pearson 95 % interval over episodes; per-fit rates and their standard "
        "deviation across fits; percentile-bootstrap 95 % intervals (2000 resamples of "
        "episodes, seed 0) of the mean episode-minimum margin and of the mean closed-loop "
        "coverage, so across plants, initial states and fits. Coverage per step: the share of "
        "steps whose realised one-step error lies inside the bound in every entry; per "
        "horizon: the share of windows of `horizon` consecutive steps all inside. 'reaches "
        "1 - delta': yes when the whole interval is at or above 1 - delta, within when the "
        "interval contains it, no when it lies below. Caps and thresholds in effect are "
        "columns: the tube and what it assumes, the soft-bound weight (the rail is an exact "
        "penalty: a state pushed past the tightened limit is not infeasible, it pays this "
        "weight), the solver's iteration cap and that of its solves from the previous plan "
        "(`warm_max_iter`; a stopped one is continued in the next call), the tube's memory "
        "of the previous call's wider "
        "margins (`tube_memory`) and the barrier parameter fatrop's solves from the previous "
        "plan start at (`warm_barrier`); empty tightened stages are counted, never "
        "capped. Late calls: controller calls (tube, solve and Python work) longer than the "
        "50 ms period, with the episodes run two at a time on the 2-core machine. Steps outside the training box: the share of steps whose true state lies "
        "outside the box of the fit's training and calibration states (a Theorem 1 bound is "
        "known to hold only inside it)."
    )
    if missing:
        intro += f" Rows not run yet (no run in the runs folder): {', '.join(missing)}."
    if any("unfinished" in str(r["episodes"]) for r in rows):
        intro += (
            " A row marked 'unfinished run' is summarised on the episodes its run had "
            "finished when the table was written (the first ones of the seed range, fits in "
            "turn); its figures are not copied."
        )
    # only the figures this run copied: a row without a complete run shows none
    lines = ["Every episode's smallest margin to the rail, per row:", "",
             f"![margins]({args.table}_margins.png)", ""]  # fmt: skip
    if copied:
        lines += [f"Per row with a complete run: {CAPTIONS}.", ""]
    for label, names in copied.items():
        lines += [f"{label}:", "", " ".join(f"![{n}]({n})" for n in names), ""]
    after = "\n".join(lines)
    command = (
        "python tests/experiments/safety_cartpole.py "
        f"--seed {args.seed} --episodes {args.episodes} --fits {args.fits} "
        f"--workers {args.workers}"
        + (f" --rows {' '.join(repr(t) for t in args.rows)}" if args.rows else "")
        + (f" --table {args.table}" if args.table != "cartpole" else "")
        + (f" --out {shown(folder)}" if folder.resolve() != OUT.resolve() else "")
    )
    title = "Safe cart-pole: the rail with and without the tube, over plants and fits"
    figures = [f"{args.table}_margins.png", *(n for names in copied.values() for n in names)]
    print(write_table(folder, args.table, title, command, intro, rows, HEADERS, after, figures))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
