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

    python tests/experiments/gp_vi_energy.py

writes results/gp_vi/{energy.csv, energy.md, energy.png}; 1-2 minutes on one core.
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


def energy_error(system, xs: np.ndarray) -> np.ndarray:
    """``(E - E0) / (m g l / 2)`` along the states ``xs (n, 2)``."""
    p = system.params
    scale = p["m"] * p["g"] * p["l"] / 2  # the swing energy: E0 - min E
    E = np.asarray(system.function("E").map(len(xs))(xs[:, :1].T, xs[:, 1:].T)).ravel()
    return (E - system.energy(X0[:1], X0[1:])) / scale


def rollout(system, step, n: int, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """States and signed relative energy errors of ``n`` steps from X0 under zero input, in
    chunks; stops at the first state whose error passes STOP or is not finite."""
    xs, errs, x = [X0[None]], [np.zeros(1)], X0
    accumulate = {}
    done = 0
    while done < n:
        m = min(chunk, n - done)
        if m not in accumulate:
            accumulate[m] = step.mapaccum(m)
        with np.errstate(all="ignore"):
            block = np.asarray(accumulate[m](x, np.zeros((1, m)), np.zeros((0, m)))).T
            err = energy_error(system, block)
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


def row(name, system, step, seed="-", samples="-", fit_time="-", nll="-", *, sizes=None):
    n_short, n_long = sizes or (SHORT, LONG)
    short_x, short = rollout(system, step, n_short)
    long_x, long = rollout(system, step, n_long)
    steps = len(long) - 1
    tenth = max(steps // 10, 1)
    first, last = np.max(np.abs(long[1 : tenth + 1])), np.max(np.abs(long[-tenth:]))
    stopped = steps < n_long
    return {
        "model": name,
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
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="GP-VI sample draws")
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
    for seed in args.seeds:
        for samples in (10, 20):
            family = GPVIModel(Pendulum(), H, prior="zero", samples=samples, seed=seed, **fit)
            family.fit(data)
            name = f"GP-VI, {samples} samples, seed {seed}"
            r, series[name] = row(
                name, system, family.discrete_model().step, seed, samples, family.fit_time_,
                float(family.posteriors_[0].hp.nll), sizes=sizes,
            )  # fmt: skip
            rows.append(r)
    r, _ = row(
        "eq. 10 with the exact velocity map",
        system,
        exact_velocity_step(system, ORACLE_FINE),
        sizes=sizes,
    )
    rows.append(r)
    # the exact velocity map at ORACLE_FINE substeps against the data's FINE, over 10 s
    check = [rollout(system, exact_velocity_step(system, f), short)[1] for f in (ORACLE_FINE, FINE)]
    oracle_check = float(np.max(np.abs(check[0] - check[1])))

    euler = rows[0]
    gp = [r for r in rows if r["model"].startswith("GP-VI")]
    exact = rows[-1]
    gp_final = [r["final err, 100 min"] for r in gp]
    reading = (
        f"Frictionless pendulum (m = 1 kg, l = 1 m), step {H} s, zero input, from theta = pi/2 at "
        "rest; err = (E - E0) / (m g l / 2), signed (below 0: energy lost), m g l / 2 = 4.905 J. "
        f"Training data: one 2 s trajectory of the true pendulum from the same state (midpoint VI, "
        f"substep {FINE} s, |err| <= {data_drift:.1e}), sampled every {H} s (200 transitions); "
        'each GP-VI (`GPVIModel(Pendulum(), 0.01, prior="zero", samples=n, seed=s)`, minimal '
        "coordinates, the paper's eq. 10 without prior) draws n of them. "
        "**Reading.** Explicit Euler gains energy without bound: "
        f"{euler['final err, 10 s']:.2f} after 10 s, {euler['final err, 100 min']:.0f} after "
        f"100 min ({'it never passed' if euler['stopped'] == 'no' else 'it passed'} the stop at "
        f"{STOP:g}); its Jacobian determinant 1 + h^2 (3g/2l) cos(theta) exceeds 1 in the lower "
        "half, and once err > 1 it goes over the top and rotates. The GP-VI's error does stay bounded, as in the paper's Fig. 1a, but "
        "not because energy is conserved: every GP-VI run loses energy (final err after 100 min "
        f"between {min(gp_final):.3f} and {max(gp_final):.3f}) and settles on a lower orbit; its "
        "map contracts phase-space area (mean ln det J < 0), and |err| cannot pass 1 by losing "
        "energy, since 1 is all a pendulum released at pi/2 has to lose. The plateau depends "
        "on the sample draw, and 20 samples lose more than 10 (the 20-sample pendulums end "
        "within "
        f"{max(r['max |theta|, last 10 s [rad]'] for r in gp if r['training pairs'] == 20):.2f} rad "
        "of the bottom), not less as the paper reports. The last row shows that this is the scheme, "
        "not the fit: eq. 10 with the pendulum's exact next velocity (a perfect GP) ends at "
        f"err = {exact['final err, 100 min']:.4f}, at rest. Its Jacobian determinant is "
        "dv_(k+1)/dv_k = 1 - (h^2/2)(3g/2l) cos(theta) + O(h^3) < 1, because the target is the "
        "sampled velocity at t_(k+1) while the position update q_(k+1) = q_k + h v_(k+1) needs "
        "the difference quotient. So in minimal coordinates with these targets the paper's "
        "bounded error is reproduced, its energy conservation is not."
    )
    after = (
        "err = (E - E0) / (m g l / 2); max |err| over the first and last 10 % of the 100 min run; "
        "bounded: the run finished and its last 10 % stayed within 1.1 times the first 10 %. "
        "Fit time: wall clock on a shared 2-core machine (the first fit includes importing "
        "gpytorch). nll per sample: the GP's negative log marginal likelihood at the fitted "
        "hyperparameters (gpytorch, divided by the number of samples). Mean ln det J: over the "
        "states of the first 10 s. The exact velocity map row uses midpoint VI substeps of "
        f"{ORACLE_FINE} s; over 10 s its err differs from {FINE} s substeps by at most "
        f"{oracle_check:.1e}.\n\n![energy error](energy.png)"
    )
    table = write_table(
        out, "energy", "GP-VI energy error: the paper's Fig. 1a", COMMAND, reading, rows,
        after=after,
    )  # fmt: skip

    fig = Figure(figsize=(10, 3.8))
    FigureCanvasAgg(fig)
    short_ax, long_ax = fig.subplots(1, 2)
    styles = {"explicit Euler": ("black", "-")}
    for r in gp:  # every sample draw of the table
        styles[r["model"]] = (
            COLOURS[r["training pairs"]], SEED_STYLES[args.seeds.index(r["seed"]) % len(SEED_STYLES)]
        )  # fmt: skip
    for name, (colour, style) in styles.items():
        err = series[name]
        t = np.arange(short + 1) * H
        short_ax.plot(t, err[: short + 1], color=colour, ls=style, linewidth=1, label=name)
        # 100 min: the largest |err| in each of 400 log-spaced time bins (the envelope)
        edges = np.unique(np.geomspace(1, len(err), 400).astype(int))
        envelope = np.maximum.reduceat(np.abs(err), edges[:-1])
        long_ax.plot(edges[1:] * H, np.maximum(envelope, 1e-17), color=colour, ls=style,
                     linewidth=1)  # fmt: skip
    short_ax.axhline(0.0, color="grey", linewidth=0.5)
    short_ax.set_xlabel("time [s]")
    short_ax.set_ylabel("(E - E0) / (m g l / 2)")
    short_ax.set_title("10 s", fontsize=10)
    long_ax.set_xscale("log")
    long_ax.set_yscale("log")
    long_ax.set_xlabel("time [s]")
    long_ax.set_ylabel("max |E - E0| / (m g l / 2) per log-spaced bin")
    long_ax.set_title("100 min", fontsize=10)
    fig.legend(loc="upper center", ncol=min(len(styles), 3), fontsize=8,
               bbox_to_anchor=(0.5, 1.04 + 0.045 * ((len(styles) - 1) // 3)))  # fmt: skip
    fig.tight_layout()
    fig.savefig(out / "energy.png", dpi=110, bbox_inches="tight")
    print(table)


if __name__ == "__main__":
    main()
