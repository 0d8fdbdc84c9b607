"""Why DLNN's predictions of the noisy Kepler orbit fail (Lishkova et al., Figs. 6-7): the
learned discrete Lagrangian, or the solver that steps it?

    python tests/experiments/dlnn_noisy_kepler.py [--seeds 0 1] [--epochs 4000 20000]

Data: the paper's Kepler trajectory (``_dlnn_systems``: 50 steps at h = 0.1 s), clean and
with N(0, 0.001^2) on the observed positions (the authors' code; one noise draw, seed 0).
Model: DLNN (``dlnn``, ``symmetries = 0``) on 3x128 softplus, the family's training (Adam,
lr 3e-3, cosine schedule to 0, degeneracy weight 1), for each of ``--epochs`` and
``--seeds``. Reported per fit:

- the DEL residual on the training triples relative to its terms (``del_relative_``) beside
  the same number for the true Lagrangian on the same (noisy) triples: the floor the noise
  sets for a fit of the true dynamics; a fit below it fits the noise;
- the learned ``D12 L_d`` on the training pairs (the true one is ``-m2 / h`` times the
  identity, symmetric and definite): how many of the 50 have a definite symmetric part, and
  the median of ``|D12 - D12^T| / |D12|``;
- the predictions from the observed ``(q0, q1)`` and from the test start, stepped by Newton
  on the DEL equations (as ``dlnn_reproduction.py``) and by scipy's ``hybr`` (the authors'
  solver, Powell's hybrid method with a trust region): the first step whose solve fails
  (empty: none in 200), and the RMS position error of the recreation up to it.

``--validation``, ``--patience``, ``--weight-decay``: the family's early stopping (the share of
the triples held out, the best validation loss's weights kept; it watches the DEL residual in
either phase of a SymDLNN fit) and Adam's weight decay, set alike for every fit.

``--model SymDLNN``: the same fits with one learned symmetry (``symmetries = 1``), its terms
weighted 2 (the authors' noisy Kepler weight) after a warm-up of ``--warmup-share`` of the
epochs (the paper's 5 %), its generator starting at ``--symmetry-start`` (the family's
``random`` or ``dynamics``); the rows add the learned generator's angle to the rotation
``(0, 1, -1, 0) / sqrt 2`` (``vec M``, in degrees; the paper's fit 10.4) and the family's
verdict on it. Writes ``results/dlnn/<--table>.{md,csv}`` (default ``noisy_kepler``).
``--quick --out DIR``: a 1x8 network, 20 epochs, 20 steps.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
from _dlnn_systems import KEPLER, NOISE, dataset, kepler_system, truth
from _quick import add_options, command, parse
from _tables import write_table
from dlnn_reproduction import (
    ROTATION,
    del_solver,
    generator_goal,
    ld_function,
    predict,
    rms,
    true_ld,
)
from tqdm import tqdm

from vimpc.errors import FitWarning
from vimpc.models.families.dlnn import DLNNModel

OUT = Path(__file__).parents[2] / "results" / "dlnn"
warnings.filterwarnings("ignore", message=".*the data have no inputs", category=FitWarning)


def predict_hybr(F: ca.Function, q0, q1, steps: int) -> tuple[np.ndarray, int | None]:
    """As :func:`dlnn_reproduction.predict`, each step solved by scipy's ``hybr`` from the
    same guess ``2 q_k - q_{k-1}``; a step fails where hybr does or where its root or its
    residual there is not finite (a network whose outputs are NaN)."""
    from scipy.optimize import root

    n = len(q0)
    Q = np.full((steps + 1, n), np.nan)
    Q[0], Q[1] = q0, q1
    for k in range(1, steps):
        a, b = Q[k - 1], Q[k]
        sol = root(lambda x, a=a, b=b: np.asarray(F(a, b, x)[0]).ravel(), 2 * b - a,
                   jac=lambda x, a=a, b=b: np.asarray(F(a, b, x)[1]), method="hybr")  # fmt: skip
        if not sol.success or not np.all(np.isfinite(sol.x)) or not np.all(np.isfinite(sol.fun)):
            return Q, k + 1
        Q[k + 1] = sol.x
    return Q, None


def relative_del(Ld: ca.Function, Q: np.ndarray, h: float) -> float:
    """RMS of ``(D2 L_d(q0, q1) + D1 L_d(q1, q2)) / h`` over the triples of ``Q`` relative to
    the RMS of its two terms (``DLNNModel.del_relative_`` for an unforced fit)."""
    n = Q.shape[1]
    a, b = ca.MX.sym("a", n), ca.MX.sym("b", n)
    D = ca.Function("D", [a, b], [ca.gradient(Ld(a, b), a), ca.gradient(Ld(a, b), b)])
    D = D.map(len(Q) - 1)
    D1, D2 = (np.asarray(v).T for v in D(Q[:-1].T, Q[1:].T))
    r = (D2[:-1] + D1[1:]) / h
    size = np.sqrt(np.mean(np.sum((np.abs(D2[:-1]) + np.abs(D1[1:])) ** 2 / h**2, 1)))
    return float(np.sqrt(np.mean(np.sum(r**2, 1))) / size)


def mixed_hessians(Ld: ca.Function, Q: np.ndarray) -> np.ndarray:
    n = Q.shape[1]
    a, b = ca.MX.sym("a", n), ca.MX.sym("b", n)
    f = ca.Function("D12", [a, b], [ca.jacobian(ca.gradient(Ld(a, b), a), b)])
    return np.array([np.asarray(f(Q[k], Q[k + 1])) for k in range(len(Q) - 1)])


def fit_one(noise: float, epochs: int, seed: int, args) -> dict:
    system, h = kepler_system(), KEPLER["h"]
    n = system.nq
    steps, pred = (20, 30) if args.quick else (KEPLER["steps"], 200)
    X = truth(system, h, KEPLER["x0"], pred)
    Xt = truth(system, h, KEPLER["test_x0"], pred)
    data = dataset(system, h, X[: steps + 1], noise=noise, seed=0)
    symmetric = {}
    if args.model == "SymDLNN":
        warmup = min(max(1, round(epochs * args.warmup_share)), epochs - 1)
        symmetric = dict(symmetries=1, warmup=warmup, symmetry_weight=2.0,
                         symmetry_start=args.symmetry_start)  # fmt: skip
    model = DLNNModel(system, h, order=0, hidden=args.hidden, epochs=epochs, time_budget=0,
                      seed=seed, progress=False, validation=args.validation,
                      patience=args.patience, weight_decay=args.weight_decay,
                      **symmetric)  # fmt: skip
    model.fit(data)
    Ld = ld_function(model, "DLNN", n, h)
    F = del_solver(Ld, n)
    Q = data.obs[0, :, :n]
    S = mixed_hessians(Ld, Q)
    sym = 0.5 * (S + np.transpose(S, (0, 2, 1)))
    eig = np.linalg.eigvalsh(sym)
    definite = int(np.sum(np.all(eig < 0, 1) | np.all(eig > 0, 1)))
    asym = np.linalg.norm(S - np.transpose(S, (0, 2, 1)), axis=(1, 2)) / np.linalg.norm(
        S, axis=(1, 2)
    )
    row = {"model": args.model, "noise": noise, "epochs": epochs, "seed": seed,
           "validation": args.validation, "patience": args.patience,
           "weight_decay": args.weight_decay,
           "epochs_run": sum(r.epochs for r in (model.training_ if isinstance(model.training_, tuple) else (model.training_,))),
           "del_relative": model.del_relative_,
           "true_del_relative": relative_del(true_ld(system, n, h), Q, h),
           "definite_d12": f"{definite} of {len(S)}", "d12_asymmetry": float(np.median(asym))}  # fmt: skip
    if args.model == "SymDLNN":
        g = model.symmetries_[0]
        gen = np.concatenate([np.asarray(g["w"]), np.asarray(g["M"]).ravel()])
        gen = gen / np.linalg.norm(gen) * (1.0 if gen[n:] @ ROTATION >= 0 else -1.0)
        row.update(angle_deg=generator_goal("kepler", gen, n)["angle_deg"],
                   status=g["status"], status_invariance=g["status_invariance"])  # fmt: skip
    for name, step in (("newton", lambda a, b: predict(F, a, b, pred)),
                       ("hybr", lambda a, b: predict_hybr(F, a, b, pred))):  # fmt: skip
        P, fail = step(Q[0], Q[1])
        _, fail_t = step(Xt[0, :n], Xt[1, :n])
        stop = min(steps + 1, fail if fail is not None else steps + 1)
        row[f"{name}_failed_at"] = "" if fail is None else fail
        row[f"{name}_test_failed_at"] = "" if fail_t is None else fail_t
        row[f"{name}_recreation_rmse"] = rms((P - X[:, :n])[1:stop])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, nargs="+", default=[4000, 20000])
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 128, 128])
    parser.add_argument(
        "--validation",
        type=float,
        default=0.0,
        help="share of the triples held out for early stopping (the family's)",
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=0,
        help="epochs without a better validation loss before stopping",
    )
    parser.add_argument("--weight-decay", type=float, default=0.0, help="Adam's L2 weight decay")
    parser.add_argument("--model", choices=("DLNN", "SymDLNN"), default="DLNN")
    parser.add_argument(
        "--warmup-share", type=float, default=0.05, help="SymDLNN's network-only share of epochs"
    )
    parser.add_argument("--symmetry-start", choices=("random", "dynamics"), default="random")
    parser.add_argument("--no-clean", action="store_true", help="leave out the clean fits")
    parser.add_argument("--table", default="noisy_kepler", help="the table's name")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": [0], "epochs": [20], "hidden": [8]})
    cmd = command(__file__, args.argv)
    jobs = [] if args.no_clean else [(0.0, args.epochs[0], s) for s in args.seeds]
    jobs += [(NOISE, e, s) for e in args.epochs for s in args.seeds]
    bar = tqdm(jobs, desc="noisy Kepler fits", unit="fit")
    rows = [fit_one(noise, epochs, seed, args) for noise, epochs, seed in bar]
    intro = __doc__.split("\n\n", 2)[2].split("Writes ")[0].strip()
    write_table(args.out, args.table, f"{args.model} on the noisy Kepler orbit: the model or the solver",
                cmd, intro, rows)  # fmt: skip
    failed = sum(r["newton_failed_at"] != "" for r in rows if r["noise"] > 0)
    hybr = sum(r["hybr_failed_at"] != "" for r in rows if r["noise"] > 0)
    noisy = sum(r["noise"] > 0 for r in rows)
    print(f"noisy fits whose prediction fails: Newton {failed} of {noisy}, hybr {hybr} of "
          f"{noisy}; table {args.out / (args.table + '.md')}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
