"""The constrained network families (``clnn``, ``chnn``) against the constrained-NN paper's
baselines on its chain pendulums (Finzi, Wang & Wilson 2020, Fig. 3: chains of ``N`` point
masses in Cartesian coordinates, ``NPendulum(N)`` with the paper's masses and lengths).

    python tests/experiments/clnn_chain.py [--n 2] [--train 200] [--test 20] [--epochs 500]
        [--hidden 128 128 128] [--seed 0] [--families clnn chnn node hnn delan]

Data as the authors' ``ChainPendulum``: angles and angular velocities ~ N(0, 1) mapped to
Cartesian coordinates, positions moved by 0.2 N(0, 1) and velocities replaced by
``3 (0.5 v + 0.4 N(0, 1))``, then projected onto the constraints (positions by Gauss-Newton,
velocities onto the null space of ``G``; a start whose projection fails is drawn again);
unforced trajectories of 3 s at dt = 0.03 s from the midpoint variational integrator of the
true system with 10 substeps (the authors: dopri5 at rtol 1e-7). Training: one random window
of 6 snapshots (5 steps) per training trajectory, as the authors; test trajectories from
another seed. Models: the families' training (5-step RK4 rollouts, L1, AdamW lr 3e-3 with a
cosine schedule, batch 200; ``--lr`` another initial learning rate for every model), ``--hidden`` (the authors: 3 x 256; 128 in the committed tables,
chosen when the exported step expanded the network into SX, 30 ms per step at 3 x 128 against
135 ms at 3 x 256; the families now export on MX by default, ``export = "mx"``, the same
steps to round-off: results/benchmarks/clnn.md), ``--epochs`` (the authors: 2000) and
``--train`` trajectories (the authors: 800), ``--init`` the initial weights of every
network (``uniform``, the families' default, or ``orthogonal``, the authors'). Baselines (``node``, ``hnn``, ``delan``;
``tests/experiments/_clnn_baselines.py``): the authors' Neural ODE, HNN and DeLaN in the
chain's link angles (cos/sin features), the same windows converted to angles, the same
network sizes, epochs, optimiser, schedule and loss; their predictions (RK4 on the learned
field, one step per dt) are mapped back to Cartesian coordinates for the metric. ``--n``
runs several chains (the paper: 1, 2, 3, 5), each with its own data from the same seeds.

Metric (the authors'): ``rel_err(t) = |z_pred - z_true| / (|z_pred| + |z_true|)`` over all
positions and velocities, its geometric mean over the 100 steps after the start
(``exp(mean log(rel_err + 1e-8))``; ``--metric trapezoid``: the authors' trapezoid rule from
``t = 0``, see :func:`geometric_error`), then the geometric mean over test trajectories. The
test trajectories start where the training trajectories do (``--test-starts initial``) or, as
the authors' test set, at the first state of a random window of ``--chunk`` steps of a 3 s
trajectory from such a start (``chunk``); ``--chunk`` is also the training windows' length
(default 5 steps; the authors' ``chunk_len = 5`` snapshots are 4 steps).
Predictions by the exported model (the constrained midpoint variational integrator of the
learned Lagrangian, one step per dt: what a controller gets) and by RK4 on the learned
vector field (one step per dt: what was trained); the "pert" row is the true system started
1e-4 away (after projection), the chaos floor, and the true Lagrangian through the exported
integrator (``--substeps`` midpoint steps per dt, as the exported models), the floor its
discretisation sets. Also the largest
constraint residual of the exported model's predicted states.

Writes ``results/clnn/<table>.{md,csv}`` (``--table``, default ``chain``) and, for the
ratios, ``<table>_ratios.{md,csv}``: per chain, each baseline's error over the better
constrained family's (both by RK4 on the learned field), and ``<table>_invariants.{csv,png}``:
each model's true energy error (median over test trajectories) and holonomic constraint
residual (largest) over time, the constrained families also by RK4 with the authors'
projection onto the constraints after every step. ``--quick --out DIR``: the same
path on 12 trajectories, a 1 x 8 network, 3 epochs, 2 test trajectories of 8 steps.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import warnings
from pathlib import Path

import _clnn_baselines as baselines
import casadi as ca
import numpy as np
from _quick import add_options, command, parse
from _tables import write_table

from vimpc.data import rollout_model
from vimpc.data.dataset import Dataset
from vimpc.data.sampling import onto_constraints
from vimpc.errors import FitWarning, InputError, SolverError
from vimpc.mechanics import catalog
from vimpc.models import NominalModel
from vimpc.models._training import checkpoints
from vimpc.models.families.clnn import CHNNModel, CLNNModel

OUT = Path(__file__).parents[2] / "results" / "clnn"
DT = 0.03
SUBSTEPS = 10
PERTURBATION = 1e-4
#: AdamW's initial learning rate (the paper's, the families' default)
LR = 3e-3
# the paper's 1e-8 inside the logarithm of the geometric mean
FLOOR = 1e-8
#: RK4 steps per dt of the "fine" evaluation of a learned field, in place of the authors'
#: dopri5 at rtol 1e-7 (the true field: 3.9e-5 at 10 against 1.6e-4 at 1, on 20 test
#: trajectories of the 2-pendulum)
FINE = 10
#: how the tables name the test starts and the metrics (``--test-starts``, ``--metric``)
STARTS = {
    "initial": "starts drawn as the training trajectories' starts",
    "chunk": "each from the first state of a random window of a trajectory from such a start, "
    "as the authors' test set",
}
METRICS = {
    "steps": "over the steps after the start",
    "trapezoid": "the authors' trapezoid rule over t = 0 .. T - dt, the start included, "
    "divided by T",
}
FAMILIES = {"clnn": CLNNModel, "chnn": CHNNModel}
MODELS = (*FAMILIES, *baselines.KINDS)


def chain(n: int = 2):
    return catalog.make_system("NPendulum", n=n, friction=[0.0] * (2 * n))


def initial_conditions(system, n: int, rng: np.random.Generator) -> np.ndarray:
    """The authors' ``ChainPendulum.sample_initial_conditions``, projected with vimpc's
    ``onto_constraints``; a draw whose projection fails is replaced."""
    out = []
    k = system.nq // 2
    while len(out) < n:
        q, v = system.from_angles(rng.normal(size=k), rng.normal(size=k))
        q = q + 0.2 * rng.normal(size=q.shape)
        v = 3.0 * (0.5 * v + 0.4 * rng.normal(size=v.shape))
        try:
            out.append(onto_constraints(system, np.concatenate([q, v])[None])[0])
        except SolverError:
            continue
    return np.array(out)


def trajectories(system, x0: np.ndarray, steps: int) -> np.ndarray:
    truth = NominalModel(system, DT, substeps=SUBSTEPS).discrete_model()
    return rollout_model(truth, x0, np.zeros((len(x0), steps, 1)))


def training_set(system, n: int, steps: int, chunk: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    X = trajectories(system, initial_conditions(system, n, rng), steps)
    starts = rng.integers(0, steps - chunk + 1, size=n)
    W = np.stack([X[i, s : s + chunk + 1] for i, s in enumerate(starts)])
    t = np.tile(np.arange(chunk + 1) * DT, (n, 1))
    return Dataset(t, W, W, np.zeros((n, chunk, 1)), DT, {"system": system.name})


def geometric_error(pred: np.ndarray, true: np.ndarray, metric: str = "steps") -> np.ndarray:
    """Per trajectory: the geometric mean of the relative error over time (the authors'
    metric). ``"steps"``: over the steps after the start, ``exp(mean log(rel + 1e-8))``;
    ``"trapezoid"``: as the authors' ``pl_trainer.py`` computes it, the trapezoid rule's
    integral of ``log(rel + 1e-8)`` over their time grid ``arange(0, T, dt)`` (the start,
    where ``rel = 0``, included; the last step left out) divided by ``T = steps dt``. A
    predicted state that is not finite (a failed step, a rollout that blew up) counts at the
    metric's largest value, 1."""
    p, t = (pred[:, 1:], true[:, 1:]) if metric == "steps" else (pred[:, :-1], true[:, :-1])
    ok = np.all(np.isfinite(p), axis=2)
    p = np.where(ok[..., None], p, 0.0)
    num = np.linalg.norm(p - t, axis=2)
    den = np.linalg.norm(p, axis=2) + np.linalg.norm(t, axis=2)
    with np.errstate(invalid="ignore"):
        rel = np.where(ok, num / np.where(den > 0, den, 1.0), 1.0)
    # a rollout so far off that its norm overflows has blown up too (rel -> 1 as |p| grows)
    rel = np.where(np.isfinite(rel), rel, 1.0)
    if metric == "steps":
        return np.exp(np.mean(np.log(rel + FLOOR), axis=1))
    integral = np.trapezoid(np.log(rel + FLOOR), dx=DT, axis=1)
    return np.exp(integral / (DT * (true.shape[1] - 1)))


def rk4_rollout(
    field: ca.Function, y0: np.ndarray, steps: int, project=None, substeps: int = 1
) -> np.ndarray:
    """RK4 of ``field`` from the rows of ``y0``, ``substeps`` steps of ``DT / substeps`` per
    DT; ``project`` (rows -> rows) after every DT, the authors' projection onto the
    constraints, where given."""
    y, u, h = ca.MX.sym("y", y0.shape[1]), ca.DM.zeros(1), DT / substeps
    z = y
    for _ in range(substeps):
        k1 = field(z, u)
        k2 = field(z + 0.5 * h * k1, u)
        k3 = field(z + 0.5 * h * k2, u)
        k4 = field(z + h * k3, u)
        z = z + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    step = ca.Function("rk4", [y], [z]).map(len(y0))
    out = [y0.T]
    for _ in range(steps):
        nxt = np.asarray(step(out[-1]))
        out.append(nxt if project is None else project(nxt.T).T)
    return np.stack(out, 0).transpose(2, 0, 1)


def invariants(system, pred: np.ndarray, true: np.ndarray) -> dict[str, np.ndarray]:
    """Over time: the median over trajectories of the true system's energy error
    ``|E(x_pred(t)) - E(x(0))|`` [J] and the largest holonomic constraint residual
    ``max |Phi(x_pred(t))|`` over the trajectories (failed predictions left out)."""
    n = system.nq
    N, T1, _ = pred.shape
    flat = pred.reshape(-1, 2 * n)
    ok = np.all(np.isfinite(flat), axis=1)
    safe = np.where(ok[:, None], flat, 0.0)
    E = np.asarray(system.function("E").map(len(flat))(safe[:, :n].T, safe[:, n:].T)).ravel()
    E0 = np.asarray(system.function("E").map(N)(true[:, 0, :n].T, true[:, 0, n:].T)).ravel()
    g = np.abs(np.asarray(system.function("g").map(len(flat))(safe[:, :n].T))).max(axis=0)
    err = np.where(ok, np.abs(E - np.repeat(E0, T1)), np.nan).reshape(N, T1)
    g = np.where(ok, g, np.nan).reshape(N, T1)
    return {"energy": np.nanmedian(err, axis=0), "constraint": np.nanmax(g, axis=0)}


def projector(fam):
    """The authors' projection after each RK4 step, on the family's (x, x') or (x, p) rows:
    onto the constraints in the learned mass metric (:meth:`CLNNModel.project`; a state it
    refuses, too far off, becomes NaN)."""
    n = fam.layout.n
    m = np.diag(fam.mass_matrix())

    def project(rows: np.ndarray) -> np.ndarray:
        y = rows.copy()
        if fam.formulation == "hamiltonian":
            y[:, n:] /= m
        out = np.full_like(y, np.nan)
        ok = np.all(np.isfinite(y), axis=1)
        try:  # every row at once; row by row only when one of them is refused
            out[ok] = fam.project(y[ok])[0]
        except InputError:
            for i in np.flatnonzero(ok):
                try:
                    out[i] = fam.project(y[i][None])[0][0]
                except InputError:
                    pass
        if fam.formulation == "hamiltonian":
            out[:, n:] *= m
        return out

    return project


def gmean(values: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(values))))


def _reference_row(
    system,
    label: str,
    pred: np.ndarray,
    true: np.ndarray,
    metric: str,
    column: str = "vi_error",
) -> dict:
    """A row of a prediction that learned nothing, its error in ``column``."""
    err = geometric_error(pred, true, metric)
    row = {"system": f"{system.nq // 2}-pendulum", "model": label, "hidden": "-",
           "epochs": "-", "train_s": "-", "final_loss": "-", "vi_error": "-",
           "rk4_error": "-", "fine_error": "-", "vi_error_worst": "-", "max_constraint": "-",
           "step_ms": "-"}  # fmt: skip
    row[column] = gmean(err)
    if column == "vi_error":
        row["vi_error_worst"] = float(np.max(err))
    return row


def family_row(system, cls, data, true, args, chunk: int, series: dict | None = None) -> dict:
    """A constrained family's row: the exported variational integrator and RK4 on its field."""
    n = system.nq
    fam = cls(system, DT, hidden=list(args.hidden), epochs=args.epochs, chunk=chunk,
              substeps=args.substeps, seed=args.seed, init=args.init, lr=args.lr)  # fmt: skip
    with warnings.catch_warnings():
        # unforced data, as the paper's: the Lagrangian's scale is not identified
        warnings.filterwarnings("ignore", "(clnn|chnn): the data have no inputs", FitWarning)
        fam.fit(data)
    model = fam.discrete_model()
    steps = true.shape[1] - 1
    start = time.perf_counter()
    pred = rollout_model(model, true[:, 0], np.zeros((len(true), steps, 1)))
    step_ms = 1e3 * (time.perf_counter() - start) / (len(true) * steps)
    y0 = true[:, 0].copy()
    if cls is CHNNModel:
        y0[:, n:] *= np.diag(fam.mass_matrix())
    rk4 = rk4_rollout(fam.vector_field(), y0, steps)
    fine = rk4_rollout(fam.vector_field(), y0, steps, substeps=FINE)
    projected = rk4_rollout(fam.vector_field(), y0, steps, projector(fam))
    if cls is CHNNModel:
        for p in (rk4, fine, projected):
            p[:, :, n:] /= np.diag(fam.mass_matrix())
    if series is not None:
        series[f"{fam.name}, exported VI"] = invariants(system, pred, true)
        series[f"{fam.name}, RK4"] = invariants(system, rk4, true)
        series[f"{fam.name}, RK4 + projection"] = invariants(system, projected, true)
    finite = np.all(np.isfinite(pred), axis=(1, 2))
    g = np.asarray(model.constraint.map(pred[finite].shape[0] * (steps + 1))(
        pred[finite].reshape(-1, 2 * n).T))  # fmt: skip
    vi = geometric_error(pred, true, args.metric)
    row = {
        "system": f"{n // 2}-pendulum",
        "model": fam.name,
        "hidden": "x".join(map(str, args.hidden)),
        "epochs": fam.training_.epochs,
        # the training's own wall time, summed over the runs that resumed it from a checkpoint
        "train_s": round(fam.training_.wall_time_s, 1),
        "final_loss": fam.training_.loss[-1],
        "vi_error": gmean(vi),
        "rk4_error": gmean(geometric_error(rk4, true, args.metric)),
        "fine_error": gmean(geometric_error(fine, true, args.metric)),
        "vi_error_worst": float(np.max(vi)),
        "max_constraint": float(np.abs(g).max()) if g.size else float("nan"),
        "step_ms": round(step_ms, 2),
    }
    if not np.all(finite):
        row["model"] += f" ({int(np.sum(~finite))} rollouts failed: NaN)"
    return row


def baseline_row(system, kind: str, data, true, args, series: dict | None = None) -> dict:
    """A baseline's row: RK4 on its learned field in the link angles, mapped to Cartesian
    coordinates."""
    windows = baselines.to_angles(system, data.states)
    fitted = baselines.fit(kind, windows, DT, hidden=list(args.hidden), epochs=args.epochs,
                           seed=args.seed, init=args.init, lr=args.lr)  # fmt: skip
    y0 = baselines.to_angles(system, true[:, :1])[:, 0]
    pred = baselines.to_cartesian(system, fitted.rollout(y0, true.shape[1] - 1, DT))
    fine = baselines.to_cartesian(system, fitted.rollout(y0, true.shape[1] - 1, DT, FINE))
    if series is not None:
        series[f"{kind}, RK4 (angles)"] = invariants(system, pred, true)
    finite = np.all(np.isfinite(pred), axis=(1, 2))
    err = geometric_error(pred, true, args.metric)
    row = {
        "system": f"{system.nq // 2}-pendulum",
        "model": kind,
        "hidden": "x".join(map(str, args.hidden)),
        "epochs": fitted.record.epochs,
        "train_s": round(fitted.train_s, 1),
        "final_loss": fitted.record.loss[-1],
        "vi_error": "-",
        "rk4_error": gmean(err),
        "fine_error": gmean(geometric_error(fine, true, args.metric)),
        "vi_error_worst": "-",
        "max_constraint": "-",
        "step_ms": "-",
    }
    if not np.all(finite):
        row["model"] += f" ({int(np.sum(~finite))} rollouts failed: NaN)"
    return row


def test_starts(system, args, rng: np.random.Generator) -> np.ndarray:
    """The test trajectories' first states: drawn as the training starts are
    (``--test-starts initial``), or, as the authors' test set, the first state of one
    random window of ``--chunk`` steps of a trajectory from such a start (``chunk``)."""
    z0 = initial_conditions(system, args.test, rng)
    if args.test_starts == "initial":
        return z0
    X = trajectories(system, z0, args.steps)
    starts = rng.integers(0, args.steps - args.chunk + 1, size=args.test)
    return X[np.arange(args.test), starts]


def chain_rows(n_links: int, n_train: int, args, series: dict | None = None) -> list[dict]:
    """The rows of one chain and training-set size; ``series`` (a dict) receives each
    model's energy error and constraint residual over time (:func:`invariants`)."""
    system, chunk = chain(n_links), args.chunk
    data = training_set(system, n_train, args.steps, chunk, args.seed)
    rng = np.random.default_rng(args.seed + 2)
    z0 = test_starts(system, args, rng)
    true = trajectories(system, z0, args.steps)
    kick = PERTURBATION * rng.normal(size=z0.shape)
    pert = trajectories(system, onto_constraints(system, z0 + kick), args.steps)
    one_step = NominalModel(system, DT, substeps=args.substeps).discrete_model()
    exact = rollout_model(one_step, true[:, 0], np.zeros((args.test, args.steps, 1)))
    rows = [
        _reference_row(system, "pert (true system, 1e-4 off)", pert, true, args.metric),
        _reference_row(system, f"true Lagrangian, exported integrator ({args.substeps} "
                       "midpoint steps per dt)", exact, true, args.metric),
    ]  # fmt: skip
    # the true vector field through the two explicit evaluations: the floor each sets
    zero = np.zeros((args.test, args.steps, 1))
    for substeps, column in ((1, "rk4_error"), (FINE, "fine_error")):
        field = NominalModel(system, DT, integrator="rk4", substeps=substeps).discrete_model()
        rows.append(_reference_row(system, f"true vector field, RK4 ({substeps} per dt)",
                                   rollout_model(field, true[:, 0], zero), true, args.metric,
                                   column))  # fmt: skip
    if series is not None:
        series["true Lagrangian, exported integrator"] = invariants(system, exact, true)
    for name in args.families:
        print(f"{n_links}-pendulum, {n_train} trajectories: {name}", flush=True)
        saving = contextlib.nullcontext()
        if args.checkpoints is not None:  # the same command resumes a stopped training
            hidden = "x".join(map(str, args.hidden))
            key = (f"n{n_links}-train{n_train}-{name}-seed{args.seed}-epochs{args.epochs}-"
                   f"hidden{hidden}-chunk{chunk}-steps{args.steps}"
                   + ("" if args.init == "uniform" else f"-{args.init}")
                   + ("" if args.lr == LR else f"-lr{args.lr:g}"))  # fmt: skip
            saving = checkpoints(args.checkpoints, key, every=50)
        with saving:
            if name in FAMILIES:
                rows.append(family_row(system, FAMILIES[name], data, true, args, chunk, series))
            else:
                rows.append(baseline_row(system, name, data, true, args, series))
    return [{"system": r["system"], "train": n_train, **r} for r in rows]


def write_invariants(folder: Path, table: str, series: dict) -> None:
    """``<table>_invariants.csv`` (every model's energy error and constraint residual at
    every step) and ``<table>_invariants.png`` (a row of two panels per chain and training
    size)."""
    import csv

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{table}_invariants.csv", "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["system", "train", "model", "t_s", "energy_error_J", "constraint_max"])
        for (n_links, n_train), models in series.items():
            for model, s in models.items():
                for k, (e, g) in enumerate(zip(s["energy"], s["constraint"], strict=True)):
                    out.writerow([f"{n_links}-pendulum", n_train, model, k * DT, e, g])
    fig = Figure(figsize=(11, 3.6 * len(series)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(series), 2, squeeze=False)
    for row, ((n_links, n_train), models) in zip(axes, series.items(), strict=True):
        for model, s in models.items():
            t = DT * np.arange(len(s["energy"]))
            style = "--" if "true" in model else "-"
            row[0].semilogy(t[1:], np.maximum(s["energy"][1:], 1e-16), style, label=model)
            row[1].semilogy(t[1:], np.maximum(s["constraint"][1:], 1e-16), style, label=model)
        row[0].set_title(f"{n_links}-pendulum, {n_train} trajectories: true energy error")
        row[0].set_ylabel("median |E(t) - E(0)| [J]")
        row[1].set_title("holonomic constraint residual")
        row[1].set_ylabel("max |Phi(x(t))| [m^2]")
        for ax in row:
            ax.set_xlabel("t [s]")
        row[1].legend(fontsize=7, loc="center right")
    fig.savefig(folder / f"{table}_invariants.png", dpi=110)


def ratio_rows(rows: list[dict]) -> list[dict]:
    """Per chain, training set size and baseline: its RK4 error over the better constrained
    family's, one RK4 step per dt and :data:`FINE` (the authors' accurate integration)."""
    out = []
    for system, train in dict.fromkeys((r["system"], r["train"]) for r in rows):
        mine = [r for r in rows if (r["system"], r["train"]) == (system, train)]
        ours = [r for r in mine if r["model"].split(" ")[0] in FAMILIES]
        if not ours:
            continue
        for column, how in (("rk4_error", "RK4, 1 step per dt"),
                            ("fine_error", f"RK4, {FINE} steps per dt")):  # fmt: skip
            best = min(ours, key=lambda r: r[column])
            for r in mine:
                if r["model"].split(" ")[0] in baselines.KINDS:
                    out.append({
                        "system": system, "train": train, "evaluation": how,
                        "baseline": r["model"], "baseline_error": r[column],
                        "constrained": best["model"], "constrained_error": best[column],
                        "ratio": r[column] / best[column],
                    })  # fmt: skip
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[2], help="chain lengths")
    parser.add_argument(
        "--train", type=int, nargs="+", default=[200], help="training trajectories (one or more)"
    )
    parser.add_argument("--test", type=int, default=20, help="test trajectories")
    parser.add_argument("--steps", type=int, default=100, help="steps per trajectory (3 s)")
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 128, 128])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--init", choices=("uniform", "orthogonal"), default="uniform",
        help="the networks' initial weights (every model's; the authors: orthogonal)",
    )  # fmt: skip
    parser.add_argument(
        "--lr", type=float, default=LR,
        help="AdamW's initial learning rate, every model's (the paper: 3e-3; the default of "
             "the authors' pl_trainer.py: 1e-2)",
    )  # fmt: skip
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=MODELS)
    parser.add_argument("--table", default="chain", help="name of the table files")
    parser.add_argument(
        "--chunk", type=int, default=5,
        help="steps of each training window (the authors: 4, chunk_len = 5 snapshots)",
    )  # fmt: skip
    parser.add_argument(
        "--test-starts", choices=("initial", "chunk"), default="initial",
        help="the test trajectories' first states: drawn as the training starts, or the "
             "first state of a random window of a trajectory from one (the authors')",
    )  # fmt: skip
    parser.add_argument(
        "--metric", choices=("steps", "trapezoid"), default="steps",
        help="the geometric mean over the steps after the start, or the authors' "
             "trapezoid rule from t = 0 (see geometric_error)",
    )  # fmt: skip
    parser.add_argument(
        "--substeps", type=int, default=1, help="midpoint steps per dt of the exported models"
    )
    parser.add_argument(
        "--checkpoints", type=Path, default=None,
        help="folder for the trainings' checkpoints (every 50 epochs): the same command run "
             "again resumes a stopped one",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(
        parser, argv, OUT,
        {"train": [12], "test": 2, "steps": 8, "epochs": 3, "hidden": [8], "families": list(MODELS)},
    )  # fmt: skip
    rows, series = [], {}
    for n_links in args.n:
        for n_train in args.train:
            mine = series[(n_links, n_train)] = {}
            rows += chain_rows(n_links, n_train, args, mine)
    write_invariants(args.out, args.table, series)
    sizes = ", ".join(map(str, args.train))
    chains = ", ".join(f"{n}-pendulum" for n in args.n)
    intro = f"""
Chains of point masses ({chains}; NPendulum(N), the paper's masses and lengths), dt = {DT} s,
{sizes} training trajectories (column 'train'; one window of {args.chunk} steps each), {args.test} test
trajectories of {args.steps} steps from seed {args.seed + 2} ({STARTS[args.test_starts]}),
networks of {args.hidden} tanh units ({args.init} initial weights) trained for {args.epochs}
epochs with the same optimiser (initial learning rate {args.lr:g}), schedule and loss (see the
script's docstring). Errors:
geometric means over test trajectories of each trajectory's geometric-mean relative error in
Cartesian positions and velocities ({METRICS[args.metric]}); "vi": the exported
constrained variational integrator ({args.substeps} midpoint steps per dt) of a constrained
family, "rk4": RK4 on the learned vector field (one step per dt; the baselines' Neural ODE,
HNN and DeLaN in the link angles, mapped to Cartesian coordinates), "fine": the same with
{FINE} RK4 steps per dt (in place of the authors' dopri5 at rtol 1e-7); the "true vector
field" rows are the floors these two evaluations set; constraint residual over
every predicted state of an exported model. The paper's figures (800 trajectories,
3 x 256, 2000 epochs, float32) for CHNN / CLNN / HNN / DeLaN / Neural ODE: 2-pendulum
1.17e-4 / 1.14e-4 / 1.91e-3 / 1.25e-3 / 6.45e-2, 3-pendulum 3.43e-4 / 3.26e-4 / 4.66e-2 /
4.09e-2 / 0.268 (chaos floor 3.6e-5 to 1.4e-4 over their 1- to 5-pendulums).
"""
    title = "CLNN / CHNN and the angular baselines on the chain pendulums"
    write_table(args.out, args.table, title, command(__file__, args.argv), intro, rows)
    ratios = ratio_rows(rows)
    if ratios:
        write_table(args.out, f"{args.table}_ratios", "Each baseline against the better "
                    "constrained family (RK4 errors)", command(__file__, args.argv),
                    "Ratio: the baseline's error over the constrained family's; the paper "
                    "reports about 16x (2-pendulum) and 136x (3-pendulum) for HNN over CHNN.",
                    ratios)  # fmt: skip
    print((args.out / f"{args.table}.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
