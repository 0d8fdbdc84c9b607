"""CLNN: the exported constrained midpoint step on MX (dense products, closed-form network
derivatives) against the SX export (the constrained ``VariationalIntegrator`` with the
network expanded into scalar operations), on the four-bar in maximal coordinates.

Run from the repository root::

    python tests/benchmarks/bench_clnn.py [--hidden 64,64 128,128,128 256,256,256]
        [--epochs 20] [--calls 200]

Data: the four-bar (``vimpc/FourBar-v0``, dt 0.02 s, joint friction [0.5, 0.1, 0.1, 0.5],
no observation noise), 8 trajectories of 20 steps from starts assembled onto the loop closure
(Halton over the crank's circle and rates within 6 rad/s), random torques up to 2 N m. For
each potential size (tanh, ``--epochs`` epochs of the family's training, seed 0) one fit,
exported twice (``export = "mx"`` and ``"sx"``, the same network and masses). Reported per
export: the build time (``discrete_model()`` and the first call), and the median and p95 of
``--calls`` calls of ``step`` (``casadi.Function(model.step)``, no argument check) cycling
over 10 states on the constraints (assembled crank angles and rates within 4 rad/s, input
0.5 N m), of ``residual_jacobian`` (MX: the closed form; SX: CasADi's Jacobian of the
residual, what the controller would differentiate) at those states and their steps; the
largest difference between the two exports' steps and the largest constraint residual
``|Phi|`` of a step's result. ``--quick --out DIR``: a smoke test (one 8 x 8 network,
1 epoch, 3 calls).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import vimpc_envs  # noqa: F401  (registers the environment ids)

sys.path.insert(0, str(Path(__file__).parent))
from _common import OUT, add_options, ms_stats, parse, write_results  # noqa: E402

DT = 0.02
FRICTION = [0.5, 0.1, 0.1, 0.5]
STATES = 10


def data():
    import gymnasium

    from vimpc.data import make_excitation, onto_constraints, rollout_env
    from vimpc.data.sampling import halton

    env = gymnasium.make("vimpc/FourBar-v0", dt=DT, obs_noise=0.0, friction=FRICTION).unwrapped
    rng = np.random.default_rng(0)
    n, steps = 8, 20
    inputs = np.stack(
        [make_excitation("random_steps", steps, 1, DT, rng, low=[-2.0], high=[2.0]) for _ in
         range(n)]
    )  # fmt: skip
    box = ((-np.pi, -np.pi, -np.pi, -6.0, -6.0, -6.0), (np.pi, np.pi, np.pi, 6.0, 6.0, 6.0))
    initial = onto_constraints(env.true_system, halton(*box, n, seed=0))
    return env.nominal_system, rollout_env(env, n, steps, inputs, 0, initial_states=initial)


def states(fam, model) -> np.ndarray:
    rng = np.random.default_rng(1)
    system = fam.layout.source
    obs = np.array([np.concatenate(system.assemble(a, r)) for a, r in
                    zip(rng.uniform(-np.pi, np.pi, STATES), rng.uniform(-4, 4, STATES),
                        strict=True)])  # fmt: skip
    return np.asarray(model.from_obs.map(STATES)(obs.T)).T


def timed(fn, args_list, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        args = args_list[i % len(args_list)]
        t = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", nargs="+", default=["64,64", "128,128,128", "256,256,256"])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"hidden": ["8,8"], "epochs": 1, "calls": 3})
    from vimpc.errors import FitWarning
    from vimpc.models.families.clnn import CLNNModel

    system, dataset = data()
    rows = []
    for spec in args.hidden:
        hidden = [int(w) for w in spec.split(",")]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitWarning)  # large networks on little data
            fam = CLNNModel(system, DT, hidden=hidden, epochs=args.epochs).fit(dataset)
        results = {}
        for export in ("mx", "sx"):
            fam.export = export
            t = time.perf_counter()
            model = fam.discrete_model()
            X = states(fam, model)
            step = ca.Function(model.step)
            step(X[0], [0.5], [])
            build = time.perf_counter() - t
            nxt = [np.asarray(step(x, [0.5], [])).ravel() for x in X]
            if export == "mx":
                jac = ca.Function(model.residual_jacobian)
            else:
                x, u, z = (ca.MX.sym(k, n) for k, n in (("x", model.nx), ("u", 1),
                                                        ("z", model.nx)))  # fmt: skip
                r = model.residual(x, u, z, ca.MX(0, 1))
                jac = ca.Function("J", [x, u, z, ca.MX.sym("p", 0)],
                                  [r, ca.jacobian(r, ca.vertcat(x, u, z))])  # fmt: skip
            jac(X[0], [0.5], nxt[0], [])
            step_t = timed(step, [(x, [0.5], []) for x in X], args.calls)
            jac_t = timed(jac, [(x, [0.5], z, []) for x, z in zip(X, nxt, strict=True)],
                          args.calls)  # fmt: skip
            g = np.asarray(model.constraint.map(STATES)(np.array(nxt).T))
            results[export] = (build, ms_stats(step_t), ms_stats(jac_t), np.array(nxt), g)
        diff = float(np.abs(results["mx"][3] - results["sx"][3]).max())
        for export, (build, st, jt, _, g) in results.items():
            rows.append({
                "hidden": "x".join(map(str, hidden)), "export": export, "build_s": build,
                "step_median_ms": st["median_ms"], "step_p95_ms": st["p95_ms"],
                "jacobian_median_ms": jt["median_ms"], "jacobian_p95_ms": jt["p95_ms"],
                "speedup_step": results["sx"][1]["median_ms"] / st["median_ms"],
                "max_step_difference": diff, "max_constraint_residual": float(np.abs(g).max()),
            })  # fmt: skip
            print(rows[-1], flush=True)
    columns = [
        ("hidden", "potential", "s"),
        ("export", "export", "s"),
        ("build_s", "build [s]", ".2f"),
        ("step_median_ms", "step median [ms]", ".3f"),
        ("step_p95_ms", "step p95 [ms]", ".3f"),
        ("jacobian_median_ms", "residual Jacobian median [ms]", ".3f"),
        ("jacobian_p95_ms", "residual Jacobian p95 [ms]", ".3f"),
        ("speedup_step", "SX median / this median", ".1f"),
        ("max_step_difference", "max abs(step_mx - step_sx)", ".2e"),
        ("max_constraint_residual", "max abs(Phi) of a step", ".2e"),
    ]
    notes = "Data:" + __doc__.split("Data:", 1)[1].split("``--quick")[0]
    write_results("clnn", "CLNN four-bar step: MX export against SX export", rows, columns,
                  notes, out=args.out, argv=args.argv)  # fmt: skip


if __name__ == "__main__":
    main()
