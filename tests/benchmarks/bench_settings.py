"""Controller settings that trade solve time against robustness, each on the shipped
scenarios it applies to, value by value in the same run.

Run from the repository root::

    python tests/benchmarks/bench_settings.py --study warm_barrier [--episodes 20]
        [--seed 1000] [--values ...] [--only NAME ...]
    python tests/benchmarks/bench_settings.py --study tube_memory ...
    python tests/benchmarks/bench_settings.py --study jit ...
    python tests/benchmarks/bench_settings.py --study horizon ...
    python tests/benchmarks/bench_settings.py --study warm_max_iter ...
    python tests/benchmarks/bench_settings.py --study tol ...

``warm_barrier`` (the scenarios whose controller is ``fatrop``; values none, 1e-2, 1e-3,
1e-4): ``none``: every solve starts at fatrop's own barrier parameter 0.1 and bound push
1e-2; a value: the solves from the previous plan start at it, with bound push 1e-6
(``WARM_BOUND_PUSH``); the first plan (``MPC.start``, before the clock) and a solve after a
failed one start at fatrop's own. ``tube_memory`` (the scenarios with a tube; values 0,
0.5, 0.8): each margin is the tube along the guess plus the value times what the previous
call's margin at the same stage had in excess of it. ``jit`` (the scenarios whose model keeps
a network's dense products, with an NLP solver; values none, nlp): the NLP interpreted, or
compiled to C with the dense products on CasADi's OpenBLAS (what ``"auto"`` chooses where
CasADi ships it, marked). ``horizon`` (the scenarios solved by the condensed SQP or by
fatrop, whose solve time grows with it; values 5, 8, 10, 20): the prediction horizon in
steps.
``warm_max_iter`` (the scenarios whose controller is ``fatrop``; values none, 15, 25, 40): the
iteration limit of the solves from the previous plan (``none``: ``max_iter``); a solve it
stops uses its iterate where that meets the constraints, else the fallback input.
``tol`` (the scenarios whose controller is ``fatrop``; values 1e-4, 1e-3, 1e-2): fatrop's
convergence tolerance, every solve's.

Each scenario runs closed loop at its settings but the study's (the scenario's own value
among the rows, marked), once per value, over the same episodes (reset seeds from
``--seed``; episodes interleaved seed by seed so machine-load drift hits every value alike;
one process, the NLP compiled as ``jit = "auto"`` chooses but in the jit study). Solve times
and iterations pooled over every call; not SOLVED: calls whose status is not ``SOLVED`` (iteration limit
and failures, each applying what the status says); late: calls longer than the period;
slowest call: the longest controller call (tube, solve and the Python around them);
success: the scenario's success test, with its Wilson 95 % interval; violation: the
largest violation of the scenario's safety rows by the true state (0: none); min margin:
the smallest distance of the true state inside them; the tracking RMSE of the success test's
entries (wrapped where the cost's angles are), mean over episodes.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np
from _common import OUT, ROOT, add_options, ms_stats, parse, write_results

from vimpc import pipeline
from vimpc.closedloop import episode_metrics, run_episode
from vimpc.closedloop.metrics import wilson_interval
from vimpc.mpc.options import NLPSOL_SOLVERS
from vimpc.scenario import load_scenario

SCENARIOS = ROOT / "scenarios"
#: the families whose export keeps a network's dense products (``info["dense_products"]``)
DENSE_FAMILIES = ("clnn",)


def _number(text: str) -> float | None:
    """A numeric study's value: ``none`` or a number >= 0."""
    if text == "none":
        return None
    number = float(text)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(text)
    return number


def _steps(text: str) -> int:
    """A horizon: a whole number >= 1."""
    steps = int(text)
    if steps < 1:
        raise ValueError(text)
    return steps


def _iterations(text: str) -> int | None:
    """An iteration limit: ``none`` or a whole number >= 1."""
    return None if text == "none" else _steps(text)


def _tolerance(text: str) -> float:
    """A convergence tolerance: a number > 0."""
    number = float(text)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(text)
    return number


def _jit(text: str) -> str:
    if text not in ("none", "nlp", "model"):
        raise ValueError(text)
    return text


#: per study: the scenarios it applies to (from the scenario's configuration), its default
#: values, its title, its --quick scenario and values, and the parser of a value
STUDIES = {
    "warm_barrier": (
        lambda cfg: cfg["controller"]["solver"] == "fatrop",
        ["none", "1e-2", "1e-3", "1e-4"],
        "fatrop's solves from the previous plan: the barrier parameter they start at",
        ("cartpole_swingup", ["none", "1e-3"]),
        _number,
    ),
    "tube_memory": (
        lambda cfg: cfg["controller"]["tightening"] == "tube",
        ["0", "0.5", "0.8"],
        "The tube along the previous plan, widened towards the previous call's",
        ("cartpole_safe", ["0", "0.5"]),
        _number,
    ),
    "jit": (
        lambda cfg: (
            cfg["controller"]["solver"] in NLPSOL_SOLVERS
            and cfg["model"]["family"] in DENSE_FAMILIES
        ),
        ["none", "nlp"],
        "A network model's NLP interpreted or compiled (dense products on CasADi's OpenBLAS)",
        ("pendulum_swingup", ["none", "nlp"]),
        _jit,
    ),
    "horizon": (
        lambda cfg: cfg["controller"]["solver"] in ("condensed", "fatrop"),
        ["5", "8", "10", "20"],
        "The prediction horizon of the condensed SQP's and fatrop's scenarios",
        ("pendulum_swingup", ["5", "10"]),
        _steps,
    ),
    "warm_max_iter": (
        lambda cfg: cfg["controller"]["solver"] == "fatrop",
        ["none", "15", "25", "40"],
        "fatrop's solves from the previous plan: their iteration limit",
        ("cartpole_swingup", ["none", "3"]),
        _iterations,
    ),
    "tol": (
        lambda cfg: cfg["controller"]["solver"] == "fatrop",
        ["1e-4", "1e-3", "1e-2"],
        "fatrop's convergence tolerance",
        ("cartpole_swingup", ["1e-4", "1e-2"]),
        _tolerance,
    ),
}
#: what each study's values must be, for the message of a wrong one
EXPECTED = {
    "jit": "'none', 'nlp' or 'model'",
    "horizon": "a whole number >= 1",
    "warm_max_iter": "'none' or a whole number >= 1",
    "tol": "a number > 0",
}
QUICK = {"episodes": 1}
#: the smoke test's overrides of a quick scenario: the safe cart-pole's bound calibrated on
#: held-out data, not on 100 closed-loop episodes (~95 s)
QUICK_SETS = {"cartpole_safe": ['data.calibration="heldout"']}


def scenarios(study: str, only: list[str] | None, quick: bool = False) -> list[str]:
    """The shipped scenarios ``study`` applies to (or those of them named in ``only``; in
    ``quick`` mode the named ones: the jit study's own need a fit)."""
    applies = STUDIES[study][0]
    found = [
        path.stem
        for path in sorted(SCENARIOS.glob("*.toml"))
        if (not only or path.stem in only) and (quick or applies(load_scenario(path)))
    ]
    missing = set(only or ()) - set(found)
    if missing:
        raise SystemExit(f"--only: {study} does not apply to {sorted(missing)}")
    return found


def run(
    name: str,
    study: str,
    values: list[str],
    episodes: int,
    seed: int,
    steps: int | None,
    sets: Sequence[str] = (),
) -> list[dict]:
    path = SCENARIOS / f"{name}.toml"
    base = load_scenario(path, sets)
    env = pipeline.build_env(base)
    model = pipeline.build_model(base, env)
    success = pipeline.success_test(base)
    index = base["metrics"]["success_index"]  # one observation entry or several
    tracked = list(index) if isinstance(index, list) else [index]
    periodic = tuple(base["controller"]["cost"]["periodic"])
    parse_value = STUDIES[study][4]
    own = base["controller"][study]
    if study == "jit":  # the scenario's own is what "auto" chooses
        own = pipeline.build_controller(base, model, env).jit
    steps = steps or base["episodes"]["steps"]
    ctrls = {}
    for value in values:
        cfg = base.replace(controller={study: parse_value(value)})
        ctrls[value] = pipeline.build_controller(cfg, model, env)
    runs: dict[str, list] = {v: [] for v in values}
    for s in range(seed, seed + episodes):
        for value, ctrl in ctrls.items():
            traj = run_episode(env, ctrl, steps, s)
            metrics = episode_metrics(traj, success, periodic=periodic, tracked=tracked)
            runs[value].append((traj, metrics))
        print(f"{name}: seed {s} done", flush=True)
    env.close()
    rows = []
    for value, eps in runs.items():
        times = np.concatenate([t.solve_times for t, _ in eps])
        its = np.concatenate([t.iterations for t, _ in eps])
        status = np.concatenate([t.status for t, _ in eps])
        wins = int(sum(bool(m["success"]) for _, m in eps))
        lo, hi = wilson_interval(wins, len(eps))
        rows.append(
            {
                "scenario": name,
                study: value + (" (scenario)" if parse_value(value) == own else ""),
                "episodes": len(eps),
                "solves": len(times),
                **ms_stats(times),
                "call_max_ms": 1e3
                * float(np.nanmax(np.concatenate([t.call_times for t, _ in eps]))),
                "iterations_median": float(np.median(its)),
                "iterations_p95": float(np.percentile(its, 95)),
                "iterations_max": int(its.max()),
                "failed": int(np.sum(status != "SOLVED")),
                "late": int(sum(int(np.sum(t.late)) for t, _ in eps)),
                "success": wins / len(eps),
                "success_ci95": f"{lo:.2f}-{hi:.2f}",
                "max_violation": float(max(m["max_violation"] for _, m in eps)),
                "min_margin": float(min(m.get("min_margin", np.nan) for _, m in eps)),
                "tracked": ", ".join(env.obs_names[i] for i in tracked),
                "tracking_rmse": float(np.mean([m["tracking_rmse"] for _, m in eps])),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study", choices=sorted(STUDIES), nargs="+", default=sorted(STUDIES))
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--values", nargs="+", default=None, help="default: the study's")
    parser.add_argument("--only", nargs="+", default=None)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick=QUICK)
    for study in args.study:
        _, defaults, title, (quick_scenario, quick_values), parse_value = STUDIES[study]
        values = args.values or (quick_values if args.quick else defaults)
        for value in values:
            try:
                parse_value(value)
            except ValueError:
                expected = EXPECTED.get(study, "'none' or a number >= 0")
                parser.error(f"--values: each {study} must be {expected}, got {value!r}")
        only = [quick_scenario] if args.quick else args.only
        rows = []
        for name in scenarios(study, only, args.quick):
            steps = 3 if args.quick else None
            sets = QUICK_SETS.get(name, []) if args.quick else []
            rows += run(name, study, values, args.episodes, args.seed, steps, sets)
        write_results(
            study,
            title,
            rows,
            [
                ("scenario", "scenario", ""),
                (study, study, ""),
                ("episodes", "episodes", ""),
                ("solves", "solves", ""),
                ("median_ms", "median [ms]", ".3g"),
                ("p95_ms", "p95 [ms]", ".3g"),
                ("max_ms", "max [ms]", ".3g"),
                ("call_max_ms", "slowest call [ms]", ".3g"),
                ("iterations_median", "iterations median", ".0f"),
                ("iterations_p95", "iterations p95", ".0f"),
                ("iterations_max", "iterations max", ""),
                ("failed", "not SOLVED", ""),
                ("late", "late", ""),
                ("success", "success", ".2f"),
                ("success_ci95", "success Wilson 95%", ""),
                ("max_violation", "largest safety-row violation", ".3g"),
                ("min_margin", "min margin", ".3g"),
                ("tracked", "tracked (the success test's entries)", ""),
                ("tracking_rmse", "its tracking RMSE, mean over episodes", ".4g"),
            ],
            notes=__doc__.split("\n\n", 2)[2],
            out=args.out,
            script=__file__,
            argv=args.argv,
        )


if __name__ == "__main__":
    main()
