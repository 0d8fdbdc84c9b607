"""The GP-VI paper's Fig. 1a: energy error of the GP-VI without a prior model vs explicit Euler.

Section 4.1 of the paper: a GP-VI (eq. 10, no prior dynamics model) is trained on one 2 s
trajectory of the frictionless pendulum released at theta = pi/2, with 10 or 20 training
samples, and its energy error over 10 s and 100 min is compared with explicit Euler on the
true pendulum, both at dt = 0.01 s. Here in minimal coordinates (the paper used maximal
ones): ``GPVIModel(Pendulum(), 0.01, prior="zero", samples=n, seed=s)``, whose exported
step is ``v_{k+1} = GP(q_k, v_k)``, ``q_{k+1} = q_k + dt v_{k+1}``.

The table adds two diagnostics: the mean ``ln det`` of the one-step map's Jacobian over the
first 10 s (0 for an area-preserving map; below 0 the map contracts phase-space area and
loses energy), and eq. 10 with the exact velocity map of the pendulum in place of the GP
(what a perfect fit of the same targets would give), computed with the midpoint VI at
1e-3 s substeps (checked over 10 s against 1e-4 s substeps).

The second half of the table trains the same GP-VIs on the difference quotients
``w_k = (q_k - q_{k-1}) / dt`` in place of the sampled velocities (the same 2 s of positions,
199 transitions ``(q_k, w_k) -> w_{k+1}``): the velocity the position update
``q_{k+1} = q_k + dt w_{k+1}`` needs, so a perfect fit reproduces the sampled positions of the
true flow, a map in ``(q_{k-1}, q_k)`` that is the true flow's and keeps its energy. Its
oracle row, eq. 10 with the exact difference-quotient map (``q_{k-1} = q_k - dt w_k``, the
true trajectory through ``q_{k-1}`` and ``q_k`` found by Newton on the flow, ``q_{k+1}`` its
next sample), is what a perfect fit of these targets exports. A state ``(q_k, w_k)`` stands
for the midpoint ``(q_k - dt w_k / 2, w_k)`` of the step behind it (second order in dt), where
those rows' energy is evaluated; they start from ``(pi/2, (pi/2 - q(dt)) / dt)``, since the
trajectory released at rest is symmetric in time (``q(-dt) = q(dt)``).

    python tests/experiments/gp_vi_energy.py

writes results/gp_vi/{energy.csv, energy.md, energy.png}; ~10 minutes on one core (most of it
the exact difference-quotient map's 100 min, a Newton solve a step).
``--quick --out DIR``: a smoke test into ``DIR``: 100 steps (20 for the "10 s" columns,
whose labels keep the full run's durations), seed 0 only, the GP-VIs fitted from one start
of 5 optimiser steps (``QUICK_FIT``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import casadi as ca
import numpy as np
from _quick import add_options, parse
from _tables import write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tqdm import tqdm

from vimpc.data.dataset import Dataset
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.mechanics import Pendulum
from vimpc.models.families.gp_vi import GPVIModel

OUT = Path(__file__).parents[2] / "results" / "gp_vi"
COMMAND = "python tests/experiments/gp_vi_energy.py"
H = 0.01  # model step [s]
FINE = 1e-4  # substep of the true pendulum's data [s]
ORACLE_FINE = 1e-3  # substep of the exact velocity map over 100 min [s]
TRAIN_STEPS = 200  # 2 s of data
SHORT, LONG = 1_000, 600_000  # 10 s and 100 min
STOP = 1e3  # a run stops once its relative energy error passes this (or is not finite)
CHUNK = 10_000
X0 = np.array([np.pi / 2, 0.0])  # released from horizontal at rest: E0 = 0
#: the figure: colour by the number of samples, line style by the sample draw (seed)
COLOURS = {10: "tab:blue", 20: "tab:red"}
SEED_STYLES = ("-", "--", ":", "-.")
QUICK_FIT = {"restarts": 1, "iterations": 5}  # --quick: the GP-VIs' hyperparameter search


def training_data(system) -> Dataset:
    """One 2 s trajectory of the true pendulum from X0 (midpoint VI, substep FINE, no
    input), sampled every H."""
    n = round(TRAIN_STEPS * H / FINE)
    step = VariationalIntegrator(system, "midpoint").step_function(FINE)
    fine = np.asarray(step.mapaccum(n)(X0, np.zeros((1, n)), np.zeros((0, n)))).T
    xs = np.vstack([X0, fine])[:: round(H / FINE)]
    return Dataset(
        t=np.arange(TRAIN_STEPS + 1)[None] * H,
        obs=xs[None],
        states=xs[None],
        inputs=np.zeros((1, TRAIN_STEPS, 1)),
        dt=H,
        metadata={
            "system": system.name,
            "params": dict(system.params),
            "friction": system.friction.tolist(),
            "generator": f"midpoint VI, substep {FINE} s, sampled every {H} s",
            "x0": X0.tolist(),
        },
    )


def difference_quotients(data: Dataset) -> Dataset:
    """The same positions with the velocities their difference quotients ``(q_k - q_{k-1}) /
    dt`` (the first sample dropped)."""
    xs = data.states[0]
    w = np.diff(xs[:, 0]) / data.dt
    ws = np.column_stack([xs[1:, 0], w])
    return Dataset(
        t=data.t[:, 1:],
        obs=ws[None],
        states=ws[None],
        inputs=data.inputs[:, 1:],
        dt=data.dt,
        metadata={**data.metadata, "velocities": "difference quotients (q_k - q_(k-1)) / dt"},
    )


def discrete_start(data: Dataset) -> np.ndarray:
    """``(q_0, (q_0 - q(-dt)) / dt)`` with ``q(-dt) = q(dt)``: released at rest, the
    trajectory is symmetric in time."""
    q0, q1 = data.states[0, 0, 0], data.states[0, 1, 0]
    return np.array([q0, (q0 - q1) / data.dt])


def midpoints(xs: np.ndarray) -> np.ndarray:
    """The states ``(q_k - dt w_k / 2, w_k)`` a difference-quotient state ``(q_k, w_k)`` stands for."""
    return np.column_stack([xs[:, 0] - H * xs[:, 1] / 2, xs[:, 1]])


def energy_error(system, xs: np.ndarray) -> np.ndarray:
    """``(E - E0) / (m g l / 2)`` along the states ``xs (n, 2)``."""
    p = system.params
    scale = p["m"] * p["g"] * p["l"] / 2  # the swing energy: E0 - min E
    E = np.asarray(system.function("E").map(len(xs))(xs[:, :1].T, xs[:, 1:].T)).ravel()
    return (E - system.energy(X0[:1], X0[1:])) / scale


def rollout(
    system, step, n: int, chunk: int = CHUNK, x0: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """States and signed relative energy errors of ``n`` steps from X0 (or, for the
    difference-quotient models, from ``x0``, their energy at :func:`midpoints`) under zero
    input, in chunks; stops at the first state whose error passes STOP or is not finite."""
    at = (lambda b: b) if x0 is None else midpoints
    x = X0 if x0 is None else np.asarray(x0, dtype=np.float64)
    xs, errs = [x[None]], [energy_error(system, at(x[None]))]
    accumulate = {}
    done = 0
    while done < n:
        m = min(chunk, n - done)
        if m not in accumulate:
            accumulate[m] = step.mapaccum(m)
        with np.errstate(all="ignore"):
            block = np.asarray(accumulate[m](x, np.zeros((1, m)), np.zeros((0, m)))).T
            err = energy_error(system, at(block))
        bad = np.flatnonzero(~(np.abs(err) <= STOP))
        if bad.size:
            xs.append(block[: bad[0] + 1])
            errs.append(err[: bad[0] + 1])
            break
        xs.append(block)
        errs.append(err)
        x, done = block[-1], done + m
    return np.vstack(xs), np.concatenate(errs)


def mean_log_det(step, xs: np.ndarray) -> float:
    """Mean of ``ln |det d step / d x|`` over the states ``xs``: the area the map gains per
    step (0 for an area-preserving map)."""
    x = ca.MX.sym("x", 2)
    jac = ca.jacobian(step(x, ca.DM.zeros(1, 1), ca.DM.zeros(0, 1)), x)
    det = ca.Function("det", [x], [ca.det(jac)])
    return float(np.mean(np.log(np.abs(np.asarray(det.map(len(xs))(xs.T)).ravel()))))


def exact_velocity_step(system, fine: float) -> ca.Function:
    """Eq. 10 with the pendulum's exact next velocity in place of the GP mean: the model a
    perfect fit of the GP-VI's targets would export."""
    flow = VariationalIntegrator(system, "midpoint").flow(H, fine)
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    v_next = flow(x, u, ca.DM.zeros(0, 1))[1]
    return ca.Function(
        "exact_velocity_eq10", [x, u, p], [ca.vertcat(x[0] + H * v_next, v_next)],
        ["x", "u", "p"], ["x_next"],
    )  # fmt: skip


def exact_quotient_step(system, fine: float) -> ca.Function:
    """Eq. 10 with the exact map of difference quotients: from ``(q_k, w_k)``, the true
    trajectory through ``q_{k-1} = q_k - H w_k`` and ``q_k`` (its velocity at ``t_{k-1}`` by
    Newton on the flow, from ``w_k``), ``q_{k+1}`` its position a step later and ``w_{k+1} =
    (q_{k+1} - q_k) / H``: the model a perfect fit of the difference-quotient targets exports."""
    flow = VariationalIntegrator(system, "midpoint").flow(H, fine)
    zero_u, zero_p = ca.DM.zeros(1, 1), ca.DM.zeros(0, 1)
    v, prev, q = ca.MX.sym("v"), ca.MX.sym("q_prev"), ca.MX.sym("q")
    hits = ca.Function(
        "hits", [v, ca.vertcat(prev, q)], [flow(ca.vertcat(prev, v), zero_u, zero_p)[0] - q]
    )
    newton = ca.rootfinder("through", "newton", hits, {"abstol": 1e-13, "max_iter": 50})
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    q_prev = x[0] - H * x[1]
    v_prev = newton(x[1], ca.vertcat(q_prev, x[0]))
    at_k = flow(ca.vertcat(q_prev, v_prev), zero_u, zero_p)
    q_next = flow(at_k, zero_u, zero_p)[0]
    return ca.Function(
        "exact_quotient_eq10", [x, u, p], [ca.vertcat(q_next, (q_next - x[0]) / H)],
        ["x", "u", "p"], ["x_next"],
    )  # fmt: skip


def row(
    name, system, step, seed="-", samples="-", fit_time="-", nll="-", *, sizes=None,
    targets="-", x0=None,
):  # fmt: skip
    n_short, n_long = sizes or (SHORT, LONG)
    short_x, short = rollout(system, step, n_short, x0=x0)
    long_x, long = rollout(system, step, n_long, x0=x0)
    steps = len(long) - 1
    tenth = max(steps // 10, 1)
    first, last = np.max(np.abs(long[1 : tenth + 1])), np.max(np.abs(long[-tenth:]))
    stopped = steps < n_long
    return {
        "model": name,
        "velocity targets": targets,
        "seed": seed,
        "training pairs": samples,
        "fit time [s]": fit_time,
        "nll per sample": nll,
        "mean ln det J, 10 s": mean_log_det(step, short_x[:-1]),
        "max |err|, 10 s": float(np.max(np.abs(short))),
        "final err, 10 s": float(short[-1]),
        "steps run, 100 min": steps,
        "stopped": f"yes: |err| > {STOP:g} at t = {steps * H:.0f} s" if stopped else "no",
        "max |err|, 100 min": float(np.max(np.abs(long))),
        "final err, 100 min": float(long[-1]),
        "max |err|, first 10 %": float(first),
        "max |err|, last 10 %": float(last),
        "last / first": float(last / first),
        "bounded": "yes" if not stopped and last <= 1.1 * first else "no",
        "max |theta|, last 10 s [rad]": float(np.max(np.abs(long_x[-n_short:, 0]))),
    }, long


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", type=int, default=SHORT, help="steps of the '10 s' columns")
    parser.add_argument("--long", type=int, default=LONG, help="steps of the whole run")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=list(range(10)), help="GP-VI sample draws"
    )
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"short": 20, "long": 100, "seeds": [0]})
    out, short, sizes = args.out, args.short, (args.short, args.long)
    fit = QUICK_FIT if args.quick else {}
    out.mkdir(parents=True, exist_ok=True)
    system = Pendulum()  # m = 1 kg, l = 1 m, frictionless
    data = training_data(system)
    data_drift = float(np.max(np.abs(energy_error(system, data.states[0]))))

    rows, series = [], {}
    r, series["explicit Euler"] = row(
        "explicit Euler", system, ExplicitIntegrator(system, "euler").step_function(H), sizes=sizes
    )
    rows.append(r)
    quotients = difference_quotients(data)
    kinds = {  # velocity targets: (training data, rollout start or None for X0, label)
        "sampled v": (data, None, "GP-VI"),
        "difference quotient": (quotients, discrete_start(data), "GP-VI on difference quotients"),
    }
    for kind, (train, x0, label) in kinds.items():
        for seed in tqdm(args.seeds, desc=f"GP-VI fits and runs ({kind})", unit="seed"):
            for samples in (10, 20):
                family = GPVIModel(Pendulum(), H, prior="zero", samples=samples, seed=seed, **fit)
                family.fit(train)
                name = f"{label}, {samples} samples, seed {seed}"
                r, series[name] = row(
                    name, system, family.discrete_model().step, seed, samples,
                    family.fit_time_, float(family.posteriors_[0].hp.nll), sizes=sizes,
                    targets=kind, x0=x0,
                )  # fmt: skip
                rows.append(r)
    r, series["exact velocity map"] = row(
        "eq. 10 with the exact velocity map", system, exact_velocity_step(system, ORACLE_FINE),
        sizes=sizes, targets="sampled v",
    )  # fmt: skip
    rows.append(r)
    r, series["exact difference-quotient map"] = row(
        "eq. 10 with the exact difference-quotient map", system,
        exact_quotient_step(system, ORACLE_FINE), sizes=sizes, targets="difference quotient",
        x0=kinds["difference quotient"][1],
    )  # fmt: skip
    rows.append(r)
    # the exact velocity map at ORACLE_FINE substeps against the data's FINE, over 10 s
    check = [rollout(system, exact_velocity_step(system, f), short)[1] for f in (ORACLE_FINE, FINE)]
    oracle_check = float(np.max(np.abs(check[0] - check[1])))

    euler = rows[0]
    gp = [r for r in rows if r["model"].startswith("GP-VI")]
    by_kind = {k: [r for r in gp if r["velocity targets"] == k] for k in kinds}
    exact, exact_q = rows[-2], rows[-1]
    summary = summarise(by_kind)

    def spread(kind: str, key: str) -> str:
        values = [r[key] for r in by_kind[kind]]
        return f"{min(values):.3g} to {max(values):.3g}"

    n_seeds = len(args.seeds)
    reading = (
        f"Frictionless pendulum (m = 1 kg, l = 1 m), step {H} s, zero input, from theta = pi/2 at "
        "rest; err = (E - E0) / (m g l / 2), signed (below 0: energy lost), m g l / 2 = 4.905 J. "
        f"Training data: one 2 s trajectory of the true pendulum from the same state (midpoint VI, "
        f"substep {FINE} s, |err| <= {data_drift:.1e}), sampled every {H} s (200 transitions); "
        'each GP-VI (`GPVIModel(Pendulum(), 0.01, prior="zero", samples=n, seed=s)`, minimal '
        "coordinates, the paper's eq. 10 without prior) draws n of them, "
        f"{n_seeds} draws (seeds) for each n and each kind of velocity target. "
        "**Reading.** Explicit Euler gains energy without bound: "
        f"{euler['final err, 10 s']:.2f} after 10 s, {euler['final err, 100 min']:.0f} after "
        f"100 min ({'it never passed' if euler['stopped'] == 'no' else 'it passed'} the stop at "
        f"{STOP:g}). Trained on the sampled velocities (the paper's targets as vimpc read them), "
        "every GP-VI stays bounded but loses energy (final err after 100 min "
        f"{spread('sampled v', 'final err, 100 min')}; mean ln det J "
        f"{spread('sampled v', 'mean ln det J, 10 s')}, a map that contracts phase-space area), "
        "and so does eq. 10 with the pendulum's exact next velocity (a perfect fit of these "
        f"targets: final err {exact['final err, 100 min']:.4f}, at rest): the dissipation is the "
        "scheme's, not the fit's. The sampled velocity at t_(k+1) is not the velocity the "
        "position update q_(k+1) = q_k + h v_(k+1) needs; its difference quotient is. Trained "
        "on the difference quotients of the same positions, the GP-VIs end at final err "
        f"{spread('difference quotient', 'final err, 100 min')} (mean ln det J "
        f"{spread('difference quotient', 'mean ln det J, 10 s')}: still contracting, onto an "
        "invariant curve near the starting energy instead of down to rest; not area-preserving), "
        "and the exact "
        "difference-quotient map, a perfect fit of those targets, at "
        f"{exact_q['final err, 100 min']:.2g} with max |err| {exact_q['max |err|, 100 min']:.2g} "
        "over 100 min: the energy the paper's Fig. 1a shows conserved. The summary table "
        "counts the runs that stayed bounded and those that kept their energy."
    )
    after = (
        "err = (E - E0) / (m g l / 2); max |err| over the first and last 10 % of the 100 min run; "
        "bounded: the run finished and its last 10 % stayed within 1.1 times the first 10 %. "
        "Difference-quotient rows: energy at the step's midpoint state (see the script's "
        "docstring). Fit time: wall clock on a shared 2-core machine (the first fit includes "
        "importing gpytorch). nll per sample: the GP's negative log marginal likelihood at the "
        "fitted hyperparameters (gpytorch, divided by the number of samples). Mean ln det J: "
        "over the states of the first 10 s. The exact maps use midpoint VI substeps of "
        f"{ORACLE_FINE} s; over 10 s the exact velocity map's err differs from {FINE} s "
        f"substeps by at most {oracle_check:.1e}.\n\n"
        f"## Over the seeds\n\n{summary}\n\n![energy error](energy.png)"
    )
    table = write_table(
        out, "energy", "GP-VI energy error: the paper's Fig. 1a", COMMAND, reading, rows,
        after=after,
    )  # fmt: skip
    figure(out / "energy.png", series, by_kind, short)
    print(table)


#: |final err| after 100 min below this counts as energy kept (a tenth of the swing energy)
KEPT = 0.1


def summarise(by_kind: dict[str, list[dict]]) -> str:
    """A markdown table per kind of velocity target and number of samples over the seeds:
    runs bounded, runs whose |final err| after 100 min stayed below KEPT, the median and
    range of the final err."""
    lines = [
        f"| velocity targets | samples | runs | bounded | energy kept (abs final err < {KEPT:g}) "
        "| final err, 100 min: median | min | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, rs in by_kind.items():
        for samples in sorted({r["training pairs"] for r in rs}):
            sel = [r for r in rs if r["training pairs"] == samples]
            final = np.array([r["final err, 100 min"] for r in sel])
            bounded = sum(r["bounded"] == "yes" for r in sel)
            kept = int(np.sum(np.abs(final) < KEPT))
            lines.append(
                f"| {kind} | {samples} | {len(sel)} | {bounded} | {kept} | "
                f"{np.median(final):.3g} | {final.min():.3g} | {final.max():.3g} |"
            )
    return "\n".join(lines)


def figure(path: Path, series: dict, by_kind: dict[str, list[dict]], short: int) -> None:
    """Two rows (the velocity targets), two columns (10 s signed, 100 min envelope): every
    GP-VI run a thin line coloured by its number of samples, explicit Euler and the exact
    map of the row's targets in black."""
    fig = Figure(figsize=(10, 7))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    exact = {
        "sampled v": "exact velocity map",
        "difference quotient": "exact difference-quotient map",
    }
    for (kind, rs), (short_ax, long_ax) in zip(by_kind.items(), axes, strict=True):
        lines = [("explicit Euler", "grey", "-", 1.2, "explicit Euler")]
        lines += [(exact[kind], "black", "--", 1.2, f"eq. 10, {exact[kind]} (a perfect fit)")]
        seen = set()
        for r in rs:
            n = r["training pairs"]
            label = None if n in seen else f"GP-VI, {n} samples (each line a seed)"
            seen.add(n)
            lines.append((r["model"], COLOURS[n], "-", 0.7, label))
        for name, colour, style, width, label in lines:
            err = series[name]
            t = np.arange(min(short + 1, len(err))) * H
            short_ax.plot(t, err[: len(t)], color=colour, ls=style, linewidth=width, label=label)
            # 100 min: the largest |err| in each of 400 log-spaced time bins (the envelope)
            edges = np.unique(np.geomspace(1, len(err), 400).astype(int))
            envelope = np.maximum.reduceat(np.abs(err), edges[:-1])
            long_ax.plot(edges[1:] * H, np.maximum(envelope, 1e-17), color=colour, ls=style,
                         linewidth=width)  # fmt: skip
        short_ax.axhline(0.0, color="grey", linewidth=0.5)
        short_ax.set_ylim(-1.1, 1.1)
        short_ax.set_xlabel("time [s]")
        short_ax.set_ylabel("(E - E0) / (m g l / 2)")
        short_ax.set_title(f"targets: {kind}; first 10 s (signed)", fontsize=10)
        short_ax.legend(fontsize=7, loc="lower left")
        long_ax.set_xscale("log")
        long_ax.set_yscale("log")
        long_ax.set_xlabel("time [s]")
        long_ax.set_ylabel("max |E - E0| / (m g l / 2) per bin")
        long_ax.set_title(f"targets: {kind}; 100 min (envelope, log-log)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
