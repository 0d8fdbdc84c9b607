"""vimpc against do-mpc on the cart-pole swing-up, with the same vimpc model, in one run.

Run from the repository root (needs the optional extra ``pip install "do-mpc>=5.0"``)::

    python tests/benchmarks/bench_dompc.py [--seeds 0 1 2]

``--without-dompc`` runs the vimpc rows alone (do-mpc not needed); ``--quick --out DIR``
runs one seed of 3 steps into ``DIR`` (a smoke test of this script).

Both sides predict with the SAME model: the nominal midpoint variational model built by
``vimpc.pipeline.build_model`` from ``scenarios/cartpole_swingup.toml``. do-mpc gets it as a
``Model('discrete', symvar_type='MX')`` whose right-hand side is ``model.step(x, u, p)``
(the explicit step with CasADi's Newton rootfinder inside); vimpc uses the same step
("step" transcription) or the same integrator's residual ("implicit", the scenario's
default). Same cost (quadratic, pole angle error 2 sin(e/2)), input bounds +-30 N, rail
bound |s| <= 0.9 m on x_1..x_N, horizon 20, dt 0.05 s. do-mpc always solves with IPOPT
(MUMPS); it runs once with its defaults and once with vimpc's IPOPT options. All run in
closed loop on the same true env (``vimpc/CartPole-v0``, scenario kwargs) from the same
seeds, interleaved, with a fresh controller per episode. vimpc's rows run at the default
``jit = "auto"``: their NLPs are compiled to C once (from the compile cache after the first
build; the build is the "setup" column), do-mpc's is interpreted as do-mpc builds it.
"""

from __future__ import annotations

import argparse
import time
import warnings
from types import SimpleNamespace

import casadi as ca
import numpy as np
from _common import CARTPOLE, OUT, TimedController, add_options, ms_stats, parse, write_results

from vimpc.closedloop import episode_metrics, run_episode
from vimpc.mpc import Status
from vimpc.mpc.solvers import nlpsol_options
from vimpc.pipeline import build_controller, build_env, build_model, success_test
from vimpc.scenario import load_scenario

VIMPC = {  # label -> scenario overrides
    "vimpc fatrop / implicit (default: NLP compiled)": [
        "controller.solver=fatrop",
        "controller.transcription=implicit",
    ],
    "vimpc ipopt / implicit": ["controller.solver=ipopt", "controller.transcription=implicit"],
    "vimpc ipopt / step": ["controller.solver=ipopt", "controller.transcription=step"],
}


def import_dompc():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optional ONNX / OPC UA features not installed
            import do_mpc
    except ImportError:
        raise SystemExit(
            'bench_dompc needs do-mpc, an optional extra: pip install "do-mpc>=5.0" '
            '(or pip install -e ".[bench]")'
        ) from None
    return do_mpc


class _TimedSolver:
    """Stands in for do-mpc's ``mpc.S`` (the nlpsol Function) and times each call."""

    def __init__(self, solver) -> None:
        self.solver, self.time = solver, 0.0

    def __call__(self, **kwargs):
        t0 = time.perf_counter()
        r = self.solver(**kwargs)
        self.time = time.perf_counter() - t0
        return r

    def stats(self):
        return self.solver.stats()


class DoMPC:
    """do-mpc's MPC on a vimpc DiscreteModel, callable like a vimpc controller."""

    def __init__(self, do_mpc, model, cfg: dict, nlpsol_opts: dict) -> None:
        ccfg = cfg["controller"]
        cost, cons = ccfg["cost"], ccfg["constraints"]
        m = do_mpc.model.Model("discrete", symvar_type="MX")
        x = m.set_variable("_x", "x", (model.nx, 1))
        u = m.set_variable("_u", "u", (model.nu, 1))
        m.set_rhs("x", model.step(x, u, ca.DM.zeros(model.np, 1)))
        m.setup()

        def weighted(W, x):  # e^T diag(W) e, periodic entries as 2 sin(e/2) like vimpc's Cost
            e = x - ca.DM(cost["reference"])
            e = ca.vertcat(
                *[2 * ca.sin(e[i] / 2) if i in cost["periodic"] else e[i] for i in range(model.nx)]
            )
            return ca.dot(ca.DM(W), e**2)

        mpc = do_mpc.controller.MPC(m)
        mpc.settings.n_horizon = ccfg["horizon"]
        mpc.settings.t_step = cfg["env"]["dt"]
        mpc.settings.store_full_solution = False
        mpc.settings.nlpsol_opts.update(nlpsol_opts)
        u_cost = ca.dot(ca.DM(cost["R"]), u**2)
        mpc.set_objective(
            lterm=weighted(cost["Q"], x) + u_cost, mterm=weighted(cost["Q_terminal"], x)
        )
        mpc.set_rterm(u=0.0)
        mpc.bounds["lower", "_u", "u"] = -30.0
        mpc.bounds["upper", "_u", "u"] = 30.0
        mpc.bounds["lower", "_x", "x"] = np.array(cons["obs_min"], dtype=float)
        mpc.bounds["upper", "_x", "x"] = np.array(cons["obs_max"], dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # casadi numpy notice inside do-mpc
            mpc.setup()
        self.mpc, self.solver = mpc, _TimedSolver(mpc.S)
        mpc.S = self.solver
        self.first = True

    def __call__(self, obs, t=0.0):
        mpc = self.mpc
        if self.first:
            mpc.x0 = obs
            mpc.set_initial_guess()
            self.first = False
        u = np.asarray(mpc.make_step(np.asarray(obs, dtype=float))).reshape(-1)
        stats = self.solver.stats()
        g = np.asarray(mpc.opt_g_num).reshape(-1)
        lbg, ubg = np.asarray(mpc.nlp_cons_lb).reshape(-1), np.asarray(mpc.nlp_cons_ub).reshape(-1)
        violation = float(np.max(np.maximum(lbg - g, g - ubg), initial=0.0))
        # classified like vimpc's MPC; do-mpc itself applies the returned iterate regardless
        if "nfeasib" in stats["return_status"]:
            status = Status.INFEASIBLE
        elif stats["success"]:
            status = Status.SOLVED
        else:
            status = Status.ITERATION_LIMIT if violation <= 1e-6 else Status.FAILED
        # the fields of vimpc's MPCResult that run_episode and TimedController read
        return SimpleNamespace(
            u=u,
            status=status,
            solve_time=self.solver.time,
            iterations=int(stats["iter_count"]),
            slack=0.0,
            tube_time=0.0,  # do-mpc computes no tube
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--steps", type=int, default=None, help="steps per episode (default: the scenario's)"
    )
    parser.add_argument(
        "--without-dompc",
        action="store_true",
        help="only the vimpc controllers (do-mpc not needed)",
    )
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [0], "steps": 3})
    do_mpc = None if args.without_dompc else import_dompc()

    base = load_scenario(CARTPOLE, [] if args.steps is None else [f"episodes.steps={args.steps}"])
    env = build_env(base)
    model = build_model(base, env)
    steps, success = base["episodes"]["steps"], success_test(base)
    quiet = {"ipopt.print_level": 0, "ipopt.sb": "yes", "print_time": False}
    _, vimpc_ipopt = nlpsol_options(
        "ipopt", max_iter=base["controller"]["max_iter"], tol=base["controller"]["tol"]
    )
    cfgs = {label: load_scenario(CARTPOLE, overrides) for label, overrides in VIMPC.items()}
    makers = {
        label: (lambda cfg=cfg: build_controller(cfg, model, env)) for label, cfg in cfgs.items()
    }
    if do_mpc is not None:
        makers["do-mpc, IPOPT defaults"] = lambda: DoMPC(do_mpc, model, base, quiet)
        makers["do-mpc, vimpc's IPOPT options"] = lambda: DoMPC(
            do_mpc,
            model,
            base,
            {**quiet, **{f"ipopt.{k}": v for k, v in vimpc_ipopt["ipopt"].items()}},
        )

    runs = {label: {"setup": [], "call": [], "trajs": [], "metrics": []} for label in makers}
    for seed in args.seeds:
        for label, make in makers.items():
            t0 = time.perf_counter()
            ctl = TimedController(make())
            runs[label]["setup"].append(time.perf_counter() - t0)
            traj = run_episode(env, ctl, steps, seed)
            runs[label]["call"] += ctl.call_times
            runs[label]["trajs"].append(traj)
            runs[label]["metrics"].append(episode_metrics(traj, success, periodic=(1,)))
            print(f"seed {seed} {label}: {np.median(traj.solve_times) * 1e3:.2f} ms median solve")

    rows = []
    for label, run in runs.items():
        solve = ms_stats(np.concatenate([t.solve_times for t in run["trajs"]]))
        call = ms_stats(run["call"])
        status = np.concatenate([t.status for t in run["trajs"]])
        mets = run["metrics"]
        rows.append(
            {
                "controller": label,
                "solve_median_ms": solve["median_ms"],
                "solve_p95_ms": solve["p95_ms"],
                "solve_max_ms": solve["max_ms"],
                "call_median_ms": call["median_ms"],
                "call_p95_ms": call["p95_ms"],
                "iter_median": float(
                    np.median(np.concatenate([t.iterations for t in run["trajs"]]))
                ),
                "failed": sum(m["failed_solves"] for m in mets),
                "iter_limit": int(np.count_nonzero(status == "ITERATION_LIMIT")),
                "success": f"{sum(int(m['success']) for m in mets)}/{len(mets)}",
                "violations": sum(m["violations"] for m in mets),
                "mean_cost": float(np.mean([m["cost"] for m in mets])),
                "setup_median_s": float(np.median(run["setup"])),
            }
        )
    columns = [
        ("controller", "controller", "s"),
        ("solve_median_ms", "solve median [ms]", ".2f"),
        ("solve_p95_ms", "solve p95 [ms]", ".2f"),
        ("solve_max_ms", "solve max [ms]", ".1f"),
        ("call_median_ms", "call median [ms]", ".2f"),
        ("call_p95_ms", "call p95 [ms]", ".2f"),
        ("iter_median", "iters (median)", ".0f"),
        ("failed", "failed solves", "d"),
        ("iter_limit", "iter-limit solves", "d"),
        ("success", "success", "s"),
        ("violations", "rail violations [steps]", "d"),
        ("mean_cost", "episode cost (mean)", ".1f"),
        ("setup_median_s", "setup [s]", ".3f"),
    ]
    ours = [r for r in rows if r["controller"].startswith("vimpc")]
    ratio_lines = [
        "| do-mpc / vimpc | " + " | ".join(r["controller"] for r in ours) + " |",
        "|---|" + "---|" * len(ours),
    ]
    for d in (r for r in rows if r["controller"].startswith("do-mpc")):
        q = {
            k: [f"{d[k] / v[k]:.1f}" for v in ours]
            for k in ("solve_median_ms", "solve_p95_ms", "call_median_ms", "call_p95_ms")
        }
        cells = [f"{a} / {b} ({c} / {e})" for a, b, c, e in zip(*q.values(), strict=True)]
        ratio_lines.append(f"| {d['controller']} | " + " | ".join(cells) + " |")
    ratios = "\n".join(ratio_lines)
    version = do_mpc.__version__ if do_mpc else "(not run: --without-dompc)"
    notes = f"""
Cart-pole swing-up of `scenarios/cartpole_swingup.toml` ({steps} steps, seeds {args.seeds}, solve
times pooled, episodes interleaved, a fresh controller per episode; "setup" = building it).
**Model, both sides:** vimpc's nominal midpoint variational model (`build_model`, position-
momentum form): do-mpc's discrete rhs and vimpc's "step" rows call its `step` Function (a
CasADi Newton rootfinder inside; do-mpc builds an MX NLP with `expand` off, vimpc expands to SX
with the rootfinder as an embedded call); vimpc's "implicit" rows put the same integrator's
`residual` into the NLP. do-mpc handled the rootfinder step directly (no fallback).
**Problem, both sides:** stage cost e^T Q e + u^T R u (Q = diag(10, 20, 0.1, 0.1), R = 0.01),
terminal e^T Q_N e (Q_N = diag(50, 100, 5, 5)), pole-angle error 2 sin(e/2); |u| <= 30 N;
|s| <= 0.9 m on x_1..x_N (do-mpc: a hard bound; vimpc: the scenario's exact penalty, weight 1e4); N = 20, dt = 0.05 s.
**Solvers:** do-mpc {version} always uses IPOPT (MUMPS). "IPOPT defaults": do-mpc's
settings (IPOPT's tol 1e-8 and max_iter 3000; warm start from the unshifted previous solution
and multipliers). "vimpc's IPOPT options": those of vimpc's `ipopt` preset, read from
`vimpc.mpc.solvers.nlpsol_options` in this run: `{vimpc_ipopt["ipopt"]}`. vimpc warm-starts from
the shifted previous solution.
**Times:** "solve" = wall time of the CasADi `nlpsol` call (vimpc `MPCResult.solve_time`; for
do-mpc the same call, timed by wrapping `mpc.S`); "call" = the whole `controller(obs, t)` /
`mpc.make_step(x0)`. Failed solves: FAILED or INFEASIBLE, do-mpc classified by vimpc's rule
(not converged and constraint violation > 1e-6); note that do-mpc applies its returned iterate
anyway, vimpc applies a fallback input. Success: |wrap(theta - pi)| < 0.1 over the last 2 s.
"""
    extra = (
        "\nRatios do-mpc / vimpc, measured in this run: solve median / solve p95 "
        f"(call median / call p95):\n\n{ratios}\n"
    )
    write_results(
        "dompc",
        "vimpc vs do-mpc: cart-pole swing-up, same model",
        rows,
        columns,
        notes,
        extra,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
