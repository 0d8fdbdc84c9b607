"""Run every shipped scenario over many seeds and tabulate their metrics with intervals.

    python tests/experiments/scenarios_summary.py [--episodes 50] [--workers 1] [--seed S]
        [--episodes-for NAME=N ...] [--runs DIR] [--scenarios NAME ...] [--report-only]

The rows are every ``scenarios/*.toml`` (nominal and learned models alike), each ``vimpc run
scenarios/<scenario>.toml --set episodes.count=<episodes>`` with the scenario's own env,
data, model and controller settings (reset seeds from the scenario file's
``episodes.seed``, or from ``S``: seeds the scenarios were not designed on). A learned model
is fitted as ``vimpc run`` fits it: the cached fit is reused when there is one (same data and
settings), so the table says where each model came from. ``--episodes-for NAME=N`` runs one
scenario with ``N`` episodes instead (one too slow for the budget); the table says which.

Each row's run is kept in ``--runs DIR/<scenario>-<episodes>ep-seed<S>/`` (git-ignored by
default): a complete run there is reused, not run again, so scenarios can be run one at a
time (``--scenarios``) and the table written from the runs done so far (``--report-only``:
nothing is run; a scenario with no complete run is listed as not run). Writes
results/scenarios/{summary.md, summary.csv} and each scenario's figures
(``<scenario>_episodes.png``, ``_states_inputs.png``, ``_mechanism.png``, ``_safety.png``).
``--quick --out DIR``: a smoke test into ``DIR``: two scenarios (``QUICK_NAMES``), one
episode of 3 steps each, in this process, runs in a temporary folder.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from _quick import add_options, parse
from _tables import interval, read_run, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "scenarios"
SCENARIOS = ROOT / "scenarios"
#: every shipped scenario, in name order (so a system's nominal and learned rows sit together)
NAMES = tuple(sorted(p.stem for p in SCENARIOS.glob("*.toml")))
FIGURES = ("episodes.png", "states_inputs.png", "mechanism.png", "safety.png")
# --quick: a scenario without and one with a bound (data, fit, tube), 3 steps each; its
# calibration set is the smallest split conformal takes at delta 0.05 (20 transitions)
QUICK_NAMES = ("pendulum_swingup", "cartpole_safe")
QUICK_SETS = ["episodes.steps=3"]
QUICK_SAFE = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    'data.calibration="heldout"',
    'model.bound_level="step"',
    "model.bound_horizon=0",
]
# the setting that names a model's integrator, per family (the first one a family has)
INTEGRATOR_KEYS = ("integrator", "prior", "rule")


def episode_counts(items: list[str], episodes: int, names: tuple[str, ...]) -> dict[str, int]:
    """Each scenario's episode count: ``episodes``, or ``N`` for a ``NAME=N`` of ``items``."""
    counts = dict.fromkeys(names, episodes)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in counts or not value.isdigit() or int(value) < 1:
            raise SystemExit(
                f"--episodes-for takes NAME=N with NAME a scenario ({', '.join(names)}) and N "
                f"a positive integer, got {item!r}"
            )
        counts[name] = int(value)
    return counts


def model_label(cfg: dict) -> str:
    """The controller's model in a few words: family, integrator, bound."""
    m = cfg["model"]
    if m["path"] is not None:
        return f"file {m['path']}"
    rule = next((m[k] for k in INTEGRATOR_KEYS if k in m), None)
    text = m["family"] + (f" ({rule})" if rule else "")
    bound = m.get("bound", "none")
    if bound != "none":
        scale = m.get("conformal_scale", "constant")
        shaped = f", {scale}" if bound == "conformal" and scale != "constant" else ""
        text += f", {bound} bound{shaped} at delta {m['delta']:g}"
    return text


def provenance(record: dict) -> str:
    """Where the run's model came from (the run's ``metrics.json`` ``model`` record)."""
    if record["path"] is None:
        return "built from the scenario (nothing to fit)"
    name = Path(record["path"]).name
    if record["reused_cached_fit"]:
        return f"fit reused from the cache ({name})"
    if record["fitted_now"]:
        return f"fitted by this run, then cached ({name})"
    return f"model file {record['path']}"


def over_dt(run: Path, episodes: int, dt: float) -> tuple[int, int]:
    """``(solves that took longer than dt, solves)`` over the run's recorded episodes."""
    from vimpc.runs import store

    times = np.concatenate([store.load_episode(run, k)[0].solve_times for k in range(episodes)])
    return int(np.count_nonzero(times > dt)), int(times.size)


def row_of(name: str, cfg: dict, m: dict, run: Path) -> dict:
    """One table row from a complete run's metrics ``m`` (``cfg``: the scenario's
    configuration)."""
    dt = float(cfg["env"]["dt"])
    late, solves = over_dt(run, m["episodes"], dt)
    loads = [x for s in m["sessions"] for x in s.get("load_average", []) if x is not None]
    optional = {  # metrics only some models have: "-" where a model has none
        "coverage_mean": m.get("coverage_mean", "-"),
        "episodes_outside_data": m.get("episodes_outside_data", "-"),
    }
    return {
        "scenario": name,
        "model": model_label(cfg),
        "provenance": provenance(m["model"]),
        "episodes": m["episodes"],
        "seeds": f"{m['seeds'][0]}-{m['seeds'][-1]}",
        "steps": m["per_episode"][0]["steps"],
        "dt_s": dt,
        "success": m["success_rate"],
        "success_ci95": interval(m["success_rate_ci95"]),
        "safety_limits": "; ".join(x["name"] for x in m["safety_limits"]),
        "episodes_off_limits": m["episodes_with_violation"],
        "off_limits_ci95": interval(m["violation_rate_ci95"]),
        "min_margin": m["min_margin"],
        "mean_min_margin": m["min_margin_mean"],
        "cost_mean": m["cost_mean"],
        "tracking_rmse_mean": m["tracking_rmse_mean"],
        "max_constraint_residual": m["max_constraint_residual"],
        **optional,
        "solve_median_ms": m["solve_time_median_ms"],
        "solve_p95_ms": m["solve_time_p95_ms"],
        "solves": m["solves"],
        "solves_over_dt": late,
        "solves_over_dt_share": late / max(solves, 1),
        "failed_solves": m["failed_solves"],
        "iteration_limit_solves": m["iteration_limit_solves"],
        "processes": m["workers"],
        "load_1min": "-" if not loads else f"{min(loads):.2f}-{max(loads):.2f}",
        "wall_time_s": m["wall_time_s"],
    }


def main(argv: list[str] | None = None) -> None:
    from vimpc.scenario import load_scenario

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument(
        "--episodes-for", action="append", default=[], metavar="NAME=N",
        help="run scenario NAME with N episodes instead of --episodes (repeatable)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="first reset seed of every row")
    parser.add_argument(
        "--runs", type=Path, default=ROOT / "results" / "runs" / "scenarios_summary",
        help="where each scenario's run is kept (git-ignored by default); complete runs are "
        "reused",
    )  # fmt: skip
    parser.add_argument(
        "--scenarios", nargs="*", default=None, metavar="NAME",
        help="run only these scenarios (the table still lists every scenario with a run)",
    )  # fmt: skip
    parser.add_argument(
        "--report-only", action="store_true",
        help="run nothing: write the table from the runs in --runs",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    if args.episodes < 1 or args.workers < 1:
        parser.error(f"--episodes and --workers must be >= 1, got {args.episodes}, {args.workers}")
    names = QUICK_NAMES if args.quick else NAMES
    unknown = sorted(set(args.scenarios or ()) - set(names))
    if unknown:
        parser.error(f"--scenarios {unknown}: no such scenario; the scenarios are {names}")
    counts = episode_counts(args.episodes_for, args.episodes, names)
    tmp = tempfile.TemporaryDirectory() if args.quick else None
    runs = Path(tmp.name) if tmp is not None else args.runs
    # every scenario validated before any run
    configs = {name: load_scenario(SCENARIOS / f"{name}.toml") for name in names}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rows, missing = [], []
    for name in names:
        cfg = configs[name]
        seed = cfg["episodes"]["seed"] if args.seed is None else args.seed
        folder = runs / f"{name}-{counts[name]}ep-seed{seed}"
        found = read_run(folder)
        chosen = args.scenarios is None or name in args.scenarios
        if not args.report_only and chosen and (found is None or not found[2]):
            if found is not None:
                raise SystemExit(
                    f"{name}: {found[1]} is an unfinished run; finish it with vimpc run "
                    f"--resume {found[1]}, or remove it to start again"
                )
            quick = [*QUICK_SETS, *(QUICK_SAFE if name == "cartpole_safe" else [])]
            vimpc_run(
                SCENARIOS / f"{name}.toml", folder, episodes=counts[name], seed=seed,
                workers=args.workers, sets=quick if args.quick else [],
            )  # fmt: skip
            found = read_run(folder)
        if found is None or not found[2]:
            print(f"{name}: no complete run in {folder}")
            missing.append(name)
            continue
        m, run, _ = found
        rows.append(row_of(name, cfg, m, run))
        for fig in FIGURES:
            if (run / fig).exists():
                shutil.copy(run / fig, out / f"{name}_{fig}")
        print(rows[-1])
    if not rows:
        raise SystemExit(f"no scenario has a complete run in {runs}; run some first")
    shown = [r["scenario"] for r in rows]
    for stale in out.glob("*.png"):
        if not any(stale.name == f"{n}_{f}" for n in shown for f in FIGURES):
            stale.unlink()
    command = (
        f"python tests/experiments/scenarios_summary.py --episodes {args.episodes} "
        f"--workers {args.workers}"
        + ("" if args.seed is None else f" --seed {args.seed}")
        + "".join(f" --episodes-for {item}" for item in args.episodes_for)
    )
    print(write_table(out, "summary", "The scenarios over many seeds", command,
                      intro(args, names, counts, configs, rows, missing), rows,
                      after=figures(out, shown)))  # fmt: skip
    if tmp is not None:
        tmp.cleanup()


def intro(args, names, counts, configs, rows, missing) -> str:
    """The text above the table: what each row is and what each column counts."""
    seeds = (
        "its reset seeds from the scenario file's `episodes.seed`"
        if args.seed is None
        else f"reset seeds from {args.seed} (`--set episodes.seed={args.seed}`; the scenarios "
        "were designed on seeds from 0)"
    )
    capped = [
        f"{r['scenario']} ({r['episodes']} episodes, {r['wall_time_s'] / r['episodes']:.0f} s "
        "per episode)"
        for r in rows
        if r["episodes"] < args.episodes
    ]
    budgets = [n for n in names if configs[n]["controller"]["time_budget"] is not None]
    text = (
        f"Every scenario of `scenarios/` ({len(names)} files), the learned models included: "
        f"each row is `vimpc run scenarios/<scenario>.toml --set episodes.count=<episodes>` "
        f"with the scenario's own env, data, model and controller settings and {seeds}. "
        + (
            f"Episodes per scenario: {args.episodes}. "
            if not capped
            else f"{args.episodes} episodes each, except (too slow for the time budget, "
            f"`--episodes-for`): {'; '.join(capped)}. "
        )
        + "The true systems are each env's perturbed system (masses and inertias within "
        "10 %, friction where the scenario sets it, observation noise), one plant per "
        "scenario. Model: the controller's model family, its integrator and its bound. "
        "Provenance: built from the scenario (the nominal model, nothing to fit), a fit "
        "reused from the cache of `vimpc fit` / `vimpc run` (the file named; it was fitted on "
        "the scenario's own data and settings, which its name hashes), fitted by this run, or "
        "a model file. Rates with their 95 % Wilson interval over episodes. Safety, on the "
        "env's safety limits of the true state: episodes off limits (any step with a negative "
        "margin), min margin (the smallest over all episodes: the margin the controller really "
        "had), mean of the episodes' minimum margins. Coverage (models with a bound): mean "
        "over episodes of the share of steps whose one-step error lay inside the bound; "
        "episodes outside data: episodes whose true state left the box of the fit's training "
        "and calibration states at some step ('-': the model has no bound / no data). Solve "
        "times in ms over every step of every episode; solves over dt: solves that took "
        "longer than the control step dt (recorded solve times; the loop waits for them, a "
        "real-time controller would have been late), "
        + (
            "no scenario sets `controller.time_budget`, so none fell back for lateness. "
            if not budgets
            else f"Scenarios with a `controller.time_budget`: {', '.join(budgets)}. "
        )
        + "processes: the episode processes of the scenario's run (the scenarios ran one at a "
        "time) on a machine shared with other work (load_1min: the 1-minute load average at "
        "the start and end of the run), so solve times are those of a loaded machine "
        "(results/benchmarks/ has them measured alone). Wall time in s, everything included "
        "(fit or model loading, controller building, figures)."
    )
    if missing:
        text += f" Not run yet (no complete run in the runs folder): {', '.join(missing)}."
    return text


def figures(out: Path, shown: list[str]) -> str:
    return "\n".join(
        " ".join(f"![{name}]({name}_{f})" for f in FIGURES if (out / f"{name}_{f}").exists())
        for name in shown
    )


if __name__ == "__main__":
    main()
