"""Where the CLNN cart-pole controller's time goes: its solves, and for fatrop each of the
NLP's functions, interpreted and compiled, with the condensed Gauss-Newton SQP beside them.

Run from the repository root::

    python tests/benchmarks/bench_clnn_mpc.py [--seeds 1000 1001 1002] [--steps 160]

The scenario ``scenarios/cartpole_clnn_safe.toml`` (a constrained Lagrangian network in the
cart's and the pole's Cartesian coordinates, 12 states, four holonomic constraints; horizon
20, dt 0.05 s, the feedback tube on a 0.7 m rail; its fit from the fit cache or made first,
not timed) runs closed loop (``run_episode``, each episode's first plan before the clock)
from each reset seed, for each row: fatrop alone (``solver = "fatrop"``, ``tol = 1e-6``) with
the NLP interpreted (``jit = "none"``) and compiled (``"nlp"``, what ``"auto"`` chooses where
CasADi ships its OpenBLAS: the dense products and their derivatives on it), and the
scenario's condensed SQP (``solver = "condensed"``, ``condensed_start = "fatrop"``, ``tol =
1e-3``, ``max_iter = 100``, compiled). Episodes are interleaved seed by seed so machine-load
drift hits every row alike. Per solve (``MPC.solver_stats()`` after each call): the wall time
(``MPCResult.solve_time``), fatrop's iterations, and the wall time in each NLP function
(the Lagrangian's Hessian ``hess_l``, the constraints' Jacobian ``jac_g``, the others
together) and the rest (fatrop's own linear algebra and the calls around it); medians over
the solves, pooled over the seeds. A solve of the condensed SQP's own spends nothing in the
NLP functions; its solves handed to fatrop are counted. Goal (issue): median <= dt/10 =
5 ms. Success is the scenario's test over these few episodes, an anecdote:
``results/safety/cartpole_clnn*.md`` has the 100-episode safety runs.

``--quick --out DIR``: a smoke test into ``DIR``: one seed of 3 steps, the network fitted
for one epoch on a few short trajectories, every row interpreted (nothing compiled).
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import OUT, ROOT, RecordedController, add_options, ms_stats, parse, write_results

from vimpc.closedloop import episode_metrics, run_episode
from vimpc.pipeline import build_controller, build_env, obtain_model, success_test
from vimpc.scenario import load_scenario

# fatrop alone's overrides of the safety table's rows (tests/experiments, on the path)
from safety_cartpole import FATROP  # noqa: E402  isort: skip

SCENARIO = ROOT / "scenarios" / "cartpole_clnn_safe.toml"
#: row -> scenario overrides
ROWS = {
    "fatrop, interpreted": [*FATROP, 'controller.jit="none"'],
    "fatrop, compiled (auto)": [*FATROP, 'controller.jit="nlp"'],
    "condensed SQP, compiled (auto; the scenario)": [],
}
#: a network trained for one epoch on a few trajectories, horizon 3 (the smoke test's)
QUICK_SETS = [
    "model.epochs=1",
    "data.trajectories=10",
    "data.heldout_trajectories=40",
    "controller.horizon=3",
]
FUNCTIONS = ("hess_l", "jac_g")


def _per_solve(stats: dict) -> dict[str, float]:
    """The wall times [s] of one solve's NLP functions: each of ``FUNCTIONS`` and the
    others together (NaN for a solver that reports none)."""
    times = {k[len("t_wall_nlp_") :]: v for k, v in stats.items() if k.startswith("t_wall_nlp_")}
    if not times:
        return {**{f: np.nan for f in FUNCTIONS}, "other": np.nan}
    out = {f: float(times.pop(f, 0.0)) for f in FUNCTIONS}
    out["other"] = float(sum(times.values()))
    return out


def _recorded(result, stats: dict) -> tuple:
    """A call's iterations and its NLP functions' wall times."""
    return stats.get("iter_count", np.nan), _per_solve(stats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002])
    parser.add_argument("--steps", type=int, default=160)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [1000], "steps": 3})
    sets = QUICK_SETS if args.quick else []
    base = load_scenario(SCENARIO, overrides=sets)
    env = build_env(base)
    model = obtain_model(base, env, log=lambda text: None).model
    success = success_test(base)
    if args.quick:  # no compiling (seconds a row): every row interpreted
        rows = {row: [*o, 'controller.jit="none"'] for row, o in ROWS.items()}
    else:
        rows = ROWS
    ctrls = {
        row: RecordedController(
            build_controller(load_scenario(SCENARIO, [*sets, *o]), model, env), _recorded
        )
        for row, o in rows.items()
    }
    runs: dict[str, list] = {row: [] for row in ROWS}
    for seed in args.seeds:
        for row, ctrl in ctrls.items():
            traj = run_episode(env, ctrl, args.steps, seed)
            runs[row].append((traj, episode_metrics(traj, success)))
        print(f"seed {seed} done", flush=True)
    env.close()
    rows = []
    for row, eps in runs.items():
        ctrl = ctrls[row]
        times = np.concatenate([t.solve_times for t, _ in eps])
        calls = ctrl.calls
        assert len(calls) == len(times), "one recorded call per solve"
        # a solve without NLP functions (the condensed SQP's own) spent no time in them
        nlp = np.array([np.isfinite(c[1]["hess_l"]) for c in calls])
        parts = {
            k: np.nan_to_num(np.array([c[1][k] for c in calls])) * 1e3
            for k in (*FUNCTIONS, "other")
        }
        iters = np.array([c[0] for c in calls], dtype=float)
        rest = times * 1e3 - sum(parts.values())
        wins = int(sum(bool(m["success"]) for _, m in eps))
        rows.append(
            {
                "row": row,
                "jit": ctrl.jit,
                "solves": len(times),
                **ms_stats(times),
                "goal": "met" if np.median(times) <= 0.1 * base["env"]["dt"] else "NOT met",
                "iterations_median": float(np.nanmedian(iters)) if np.isfinite(iters).any() else np.nan,
                **{f"{k}_ms": float(np.median(v)) for k, v in parts.items()},
                "rest_ms": float(np.median(rest)),
                "nlp_solves": int(nlp.sum()),
                "hess_share": float(parts["hess_l"].sum() / (times.sum() * 1e3)),
                "late": int(sum(int(np.sum(t.late)) for t, _ in eps)),
                "success": f"{wins} of {len(eps)}",
            }
        )  # fmt: skip
    write_results(
        "clnn_mpc",
        "The CLNN cart-pole controller: solves and the NLP's functions",
        rows,
        [
            ("row", "controller", ""),
            ("jit", "jit", ""),
            ("solves", "solves", ""),
            ("median_ms", "solve median [ms]", ".3g"),
            ("p95_ms", "solve p95 [ms]", ".3g"),
            ("max_ms", "solve max [ms]", ".3g"),
            ("goal", "median <= dt/10", ""),
            ("iterations_median", "iterations median", ".0f"),
            ("hess_l_ms", "Hessian hess_l per solve, median [ms]", ".3g"),
            ("jac_g_ms", "Jacobian jac_g per solve, median [ms]", ".3g"),
            ("other_ms", "other NLP functions per solve, median [ms]", ".3g"),
            ("rest_ms", "the rest (linear algebra, calls) per solve, median [ms]", ".3g"),
            ("nlp_solves", "solves by the NLP solver (fatrop)", ""),
            ("hess_share", "Hessian's share of all solve time", ".2f"),
            ("late", "late calls", ""),
            ("success", "success (anecdote)", ""),
        ],
        notes=__doc__.split("\n\n", 2)[2],
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
