"""The GP-VI paper's Fig. 1b: constraint drift of the double pendulum in maximal coordinates.

Section 4.1 of the paper: a GP-VI without a prior model (eq. 10 with the projection 10e) is
trained on one 2 s trajectory of the frictionless double pendulum (links m = 1 kg, l = 1 m)
released at rest from (theta1, theta2) = (pi/2, 0), and its constraint residual is compared
with explicit Euler on the true system, both at dt = 0.01 s. Here
``GPVIModel(DoublePendulum().maximal(), 0.01, prior="zero", samples=n, seed=s)`` for n = 10,
20 and 50 and the sample draws s = 0 and 1 (``--seeds``): 12 states (x, y, phi of each link and their rates), 4 joint constraints
``g(q) = 0``, its step a Newton solve of the projection's KKT conditions. The baselines,
explicit Euler and RK4, integrate the index-1 DAE (constraints differentiated twice), as in
``structure_preservation.py``.

Every model runs 600,000 steps (100 min) from the training start: a GP-VI step (a Newton
solve) costs 0.2-0.3 ms, so a long run takes 2-3 minutes. A GP-VI step whose Newton solve
does not converge raises; the run stops there, the table gives the step and the reading
says why the solve stalled.

The table adds one diagnostic for the GP-VI: the constraint residual its projection leaves by
construction. The projection solves ``e = G^T (G G^T + eps I)^-1 (G e - g / dt)`` with
``e = v_{k+1} - dv`` and ``eps = 1e-10``, whose solution has ``g = -dt eps (G G^T)^-1 G e``
exactly, so the residual is not at round-off but proportional to the velocity correction
the projection makes.

    python tests/experiments/gp_vi_constraints.py

writes results/gp_vi/{constraints.csv, constraints.md, constraints.png}; about 7 minutes on
one core of a shared 2-core machine. ``--quick --out DIR``: a smoke test into ``DIR``: 100
steps (20 for the "10 s" columns, whose labels keep the full run's durations), the GP-VI
with 10 samples only, fitted from one start of 5 optimiser steps (``QUICK_FIT``).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import casadi as ca
import numpy as np
from _quick import add_options, parse
from _tables import write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc.data.dataset import Dataset
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.integrators._newton import ABSTOL, STEP_TOL
from vimpc.integrators._newton import solve as newton_solve
from vimpc.mechanics import DoublePendulum
from vimpc.models.families.gp_vi import _REGULARISATION, GPVIModel

OUT = Path(__file__).parents[2] / "results" / "gp_vi"
COMMAND = "python tests/experiments/gp_vi_constraints.py"
H = 0.01  # model step [s]
FINE = 1e-4  # substep of the true double pendulum's data [s]
TRAIN_STEPS = 200  # 2 s of data
SHORT, LONG = 1_000, 600_000  # 10 s and 100 min
CHUNK = 10_000
TARGET = 1e-10  # the project's bound on a structure-preserving model's |g| [m]
THETA0 = np.array([np.pi / 2, 0.0])  # the paper's start: first link horizontal, at rest
SAMPLES = (10, 20, 50)
COLOURS = {"explicit Euler": "black", "RK4": "grey"}
GP_COLOURS = ("tab:blue", "tab:red", "tab:green")
SEED_STYLES = ("-", "--", ":", "-.")  # the figure's line style per sample draw
QUICK_FIT = {"restarts": 1, "iterations": 5}  # --quick: the GP-VI's hyperparameter search


def rounded_up(x: float, digits: int = 2) -> str:
    """``x`` in ``digits`` significant figures, rounded up: a bound quoted as ``<=`` must
    not be smaller than what it bounds (1.2455e-11 -> "1.3e-11")."""
    if not np.isfinite(x) or x <= 0:
        return f"{x:g}"
    exponent = math.floor(math.log10(x)) - (digits - 1)
    value = math.ceil(x / 10.0**exponent - 1e-9) * 10.0**exponent
    return f"{value:.{digits - 1}e}"


def start(joint) -> np.ndarray:
    """The training start in maximal coordinates."""
    return np.concatenate(joint.to_maximal(THETA0, np.zeros(2)))


def training_data(joint, maximal) -> Dataset:
    """One 2 s trajectory of the true double pendulum from THETA0 at rest (midpoint VI in
    joint coordinates, substep FINE, no input), sampled every H and mapped to maximal
    coordinates."""
    n = round(TRAIN_STEPS * H / FINE)
    x0 = np.concatenate([THETA0, np.zeros(2)])
    step = VariationalIntegrator(joint, "midpoint").step_function(FINE)
    fine = np.asarray(step.mapaccum(n)(x0, np.zeros((joint.nu, n)), np.zeros((0, n)))).T
    xs = np.vstack([x0, fine])[:: round(H / FINE)]
    states = joint.states_to_maximal(xs)
    return Dataset(
        t=np.arange(TRAIN_STEPS + 1)[None] * H,
        obs=states[None],
        states=states[None],
        inputs=np.zeros((1, TRAIN_STEPS, maximal.nu)),
        dt=H,
        metadata={
            "system": maximal.name,
            "params": dict(maximal.params),
            "friction": maximal.friction.tolist(),
            "generator": f"midpoint VI in joint coordinates, substep {FINE} s, sampled every "
            f"{H} s, mapped to maximal coordinates",
            "theta0": THETA0.tolist(),
        },
    )


def residual(maximal, xs: np.ndarray) -> np.ndarray:
    """``max |g(q)|`` over the 4 joint constraints [m] at each state of ``xs (n, 12)``."""
    g = maximal.function("g").map(len(xs))
    with np.errstate(all="ignore"):
        res = np.abs(np.asarray(g(xs[:, : maximal.nq].T))).max(axis=0)
    return np.where(np.isfinite(res), res, np.inf)


def energy(maximal, xs: np.ndarray) -> np.ndarray:
    """The total energy [J] at each state of ``xs``."""
    nq = maximal.nq
    return np.asarray(maximal.function("E").map(len(xs))(xs[:, :nq].T, xs[:, nq:].T)).ravel()


@dataclass
class Run:
    """One rollout: per state ``|g|`` [m], energy [J] and the largest ``|phi|`` [rad]; the
    step that failed (None: none did), its message and the state it started from."""

    res: np.ndarray
    E: np.ndarray
    phi: np.ndarray
    failed: int | None
    message: str
    last: np.ndarray


def rollout(maximal, step, x0: np.ndarray, n: int, chunk: int = CHUNK) -> Run:
    """``n`` steps from ``x0`` under zero input, in chunks. A step that raises (a Newton
    solve that did not converge) or leaves the floating-point range ends the run."""
    nu, no_p = maximal.nu, np.zeros((0, 1))
    angles = [i for i, unit in enumerate(maximal.coordinate_units) if unit == "rad"]
    parts, x, done = [x0[None]], x0, 0

    def run(failed=None, message=""):
        xs = np.vstack(parts)
        phi = np.max(np.abs(xs[:, angles]), axis=1)
        return Run(residual(maximal, xs), energy(maximal, xs), phi, failed, message, x)

    accumulate = {}
    while done < n:
        m = min(chunk, n - done)
        if m not in accumulate:
            accumulate[m] = step.mapaccum(m)
        try:
            with np.errstate(all="ignore"):
                block = np.asarray(accumulate[m](x, np.zeros((nu, m)), np.zeros((0, m)))).T
        except RuntimeError:
            # replay the chunk one step at a time to find the step that fails
            for k in range(m):
                try:
                    y = np.asarray(step(x, np.zeros(nu), no_p), dtype=np.float64).ravel()
                except RuntimeError as error:
                    return run(done + k + 1, str(error))
                parts.append(y[None])
                x = y
            raise  # the chunk failed but no single step did: report it, do not hide it
        parts.append(block)
        bad = np.flatnonzero(~np.all(np.isfinite(block), axis=1))
        if bad.size:
            return run(done + bad[0] + 1, "not finite")
        x, done = block[-1], done + m
    return run()


def stalled_newton(family, maximal, x: np.ndarray) -> dict:
    """At a state whose GP-VI step raised: the projection's KKT residual where its Newton
    stops when it is allowed to fail, and the same solve (same GP correction ``dv``) with
    every angle wrapped into (-pi, pi], which leaves ``g``, ``G`` and the physics unchanged.
    Reads the model's private builders: the exported step hides the projection."""
    nq, nu = maximal.nq, maximal.nu
    u = np.zeros(nu)
    dv = np.asarray(family._build_correction()(x, u), dtype=np.float64).ravel()
    xm, um = ca.MX.sym("x", 2 * nq), ca.MX.sym("u", nu)
    xn, dvm = ca.MX.sym("x_next", 2 * nq), ca.MX.sym("dv", nq)
    _, r = family._dynamics(xm, um, xn, dvm)
    kkt = ca.Function("kkt", [xn, xm, um, dvm], [r])
    soft = newton_solve("soft", kkt, error_on_fail=False)
    angles = [i for i, unit in enumerate(maximal.coordinate_units) if unit == "rad"]
    wrapped = x.copy()
    wrapped[angles] = np.angle(np.exp(1j * x[angles]))
    out = {"phi": float(np.max(np.abs(x[angles])))}
    for label, state in (("raw", x), ("wrapped", wrapped)):
        guess = np.concatenate([state[:nq] + H * dv, dv])  # the projection's own guess
        z = np.asarray(soft(guess, state, u, dv), dtype=np.float64).ravel()
        out[label] = float(np.max(np.abs(np.asarray(kkt(z, state, u, dv)))))
    try:
        guess = np.concatenate([wrapped[:nq] + H * dv, dv])
        newton_solve("strict", kkt, error_on_fail=True)(guess, wrapped, u, dv)
        out["wrapped converges"] = True
    except RuntimeError:
        out["wrapped converges"] = False
    return out


def regularisation_floor(family, maximal, x0: np.ndarray, short: int = SHORT) -> float:
    """The largest ``|dt eps (G G^T)^-1 G e|`` over the first ``short`` steps: the residual the
    regularised projection leaves, from the GP mean ``dv`` (the model's correction, read from
    its private builder: the exported step does not expose it)."""
    nq, nu = maximal.nq, maximal.nu
    step = family.discrete_model().step
    xs = np.asarray(step.mapaccum(short)(x0, np.zeros((nu, short)), np.zeros((0, short)))).T
    xs = np.vstack([x0, xs])
    dv = np.asarray(family._build_correction().map(short)(xs[:-1].T, np.zeros((nu, short)))).T
    G = maximal.function("G")
    floor = 0.0
    for x_next, d in zip(xs[1:], dv, strict=True):
        Gq = np.asarray(G(x_next[:nq]), dtype=np.float64)
        bias = H * _REGULARISATION * np.linalg.solve(Gq @ Gq.T, Gq @ (x_next[nq:] - d))
        floor = max(floor, float(np.max(np.abs(bias))))
    return floor


def step_time(maximal, step, x0: np.ndarray, short: int = SHORT) -> float:
    """Wall clock of one step [ms], from ``short`` steps in one call."""
    nu = maximal.nu
    accumulate = step.mapaccum(short)
    began = time.perf_counter()
    accumulate(x0, np.zeros((nu, short)), np.zeros((0, short)))
    return 1e3 * (time.perf_counter() - began) / short


def row(
    name, maximal, step, x0, E0, swing, samples="-", fit_time="-", floor="-", *, sizes=None,
    seed="-",
):  # fmt: skip
    short, long = sizes or (SHORT, LONG)
    run = rollout(maximal, step, x0, long)
    res, E = run.res, run.E
    steps = len(res) - 1
    finite = np.isfinite(E)
    failed = run.failed
    return (
        {
            "model": name,
            "seed": seed,
            "training pairs": samples,
            "fit time [s]": fit_time,
            "step time [ms]": step_time(maximal, step, x0, short),
            "steps run": steps,
            "failed at step": "-" if failed is None else f"{failed} (t = {failed * H:.2f} s)",
            "max |g|, 10 s [m]": float(np.max(res[: short + 1])),
            "max |g|, 100 min [m]": float(np.max(res)),
            "final |g| [m]": float(res[-1]),
            f"max |g| <= {TARGET:g}": "yes" if np.max(res) <= TARGET and failed is None else "no",
            "(E - E0) / E_swing, 10 s": float((E[min(short, steps)] - E0) / swing),
            "(E - E0) / E_swing, end": float((E[finite][-1] - E0) / swing),
            "max |phi| [rad]": float(np.max(run.phi)),
            "regularisation floor, 10 s [m]": floor,
        },
        run,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--short", type=int, default=SHORT, help="steps of the '10 s' columns")
    parser.add_argument("--long", type=int, default=LONG, help="steps of the whole run")
    parser.add_argument("--samples", type=int, nargs="+", default=list(SAMPLES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="GP-VI sample draws")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"short": 20, "long": 100, "samples": [10], "seeds": [0]})
    out, short, long, sizes = args.out, args.short, args.long, (args.short, args.long)
    fit = QUICK_FIT if args.quick else {}
    out.mkdir(parents=True, exist_ok=True)
    joint = DoublePendulum()  # m = 1 kg, l = 1 m per link, frictionless
    maximal = joint.maximal()
    x0 = start(joint)
    data = training_data(joint, maximal)
    data_res = float(np.max(residual(maximal, data.states[0])))
    E0 = float(energy(maximal, x0[None])[0])  # 0 J: both links level with the pivot
    bottom = np.concatenate(joint.to_maximal(np.zeros(2), np.zeros(2)))
    swing = E0 - float(energy(maximal, bottom[None])[0])  # 2 m g l = 19.62 J

    angles = [i for i, unit in enumerate(maximal.coordinate_units) if unit == "rad"]
    data_phi = float(np.max(np.abs(data.states[0][:, angles])))

    began = time.perf_counter()
    rows, runs, stalls = [], {}, {}
    for name, method in (("explicit Euler", "euler"), ("RK4", "rk4")):
        step = ExplicitIntegrator(maximal, method).step_function(H)
        r, runs[name] = row(name, maximal, step, x0, E0, swing, sizes=sizes)
        rows.append(r)
    styles = {name: (colour, "-") for name, colour in COLOURS.items()}
    for s, seed in enumerate(args.seeds):
        for n, samples in enumerate(args.samples):
            family = GPVIModel(
                DoublePendulum().maximal(), H, prior="zero", samples=samples, seed=seed, **fit
            )
            family.fit(data)
            name = f"GP-VI, {samples} samples, seed {seed}"
            r, runs[name] = row(
                name, maximal, family.discrete_model().step, x0, E0, swing, samples,
                family.fit_time_, regularisation_floor(family, maximal, x0, short), sizes=sizes,
                seed=seed,
            )  # fmt: skip
            rows.append(r)
            styles[name] = (GP_COLOURS[n % len(GP_COLOURS)], SEED_STYLES[s % len(SEED_STYLES)])
            if runs[name].failed is not None:
                stalls[name] = stalled_newton(family, maximal, runs[name].last)
    total = time.perf_counter() - began

    euler, rk4 = rows[0], rows[1]
    gp = rows[2:]
    gp_max = max(r["max |g|, 100 min [m]"] for r in gp)
    floor_match = max(
        abs(r["regularisation floor, 10 s [m]"] / r["max |g|, 10 s [m]"] - 1) for r in gp
    )
    held = [r for r in gp if r[f"max |g| <= {TARGET:g}"] == "yes"]
    failures = []
    for r in gp:
        if r["model"] not in stalls:
            continue
        d = stalls[r["model"]]
        failures.append(
            f"with {r['training pairs']} samples (seed {r['seed']}) the projection's Newton raised at step "
            f"{r['failed at step']}, after "
            f"max |g| = {r['max |g|, 100 min [m]']:.1e} m up to there. By then a link had "
            f"spun to |phi| = {d['phi']:.1f} rad (the training data span |phi| <= "
            f"{data_phi:.1f} rad; maximal angles are not wrapped and enter the GP as they "
            f"are). The Newton stalls at |r| = {d['raw']:.2e}, just above its absolute "
            f"tolerance {ABSTOL:g}, taking steps below the spacing of doubles there "
            f"({np.spacing(d['phi']):.1e} rad) but above its step tolerance {STEP_TOL:g}: "
            "the KKT residual carries g / dt, so the round-off of sin and cos at that angle "
            "is amplified 100 times. With every angle wrapped into (-pi, pi] and the same GP "
            f"correction the same solve reaches |r| = {d['wrapped']:.1e}"
            + (" and converges" if d["wrapped converges"] else " but still fails")
            + ". So this failure is the projection's absolute Newton tolerances meeting an "
            "unwrapped angle, not a singular configuration (G of this chain in maximal "
            "coordinates has full rank everywhere)"
        )
    reading = (
        "Frictionless double pendulum in maximal coordinates (links m = 1 kg, l = 1 m; 12 "
        f"states, 4 joint constraints g(q) = 0 in m), step {H} s, zero input, from (theta1, "
        f"theta2) = (pi/2, 0) at rest, the paper's start, for {long:,} steps ({long * H / 60:.0f} "
        "min). Training data: one 2 s trajectory of the true double pendulum from the same "
        f"state (midpoint VI in joint coordinates, substep {FINE} s, sampled every {H} s, 200 "
        f"transitions, mapped to maximal coordinates: max |g| = {data_res:.1e} m); each GP-VI "
        '(`GPVIModel(DoublePendulum().maximal(), 0.01, prior="zero", samples=n, seed=s)`, the '
        "paper's eq. 10 with the projection 10e and no prior) draws n of them, "
        f"n = {', '.join(map(str, args.samples))}, sample draws s = "
        f"{', '.join(map(str, args.seeds))}. "
        "**Reading.** Explicit Euler on the index-1 DAE drifts off the constraints as in the "
        f"paper's Fig. 1b: max |g| = {euler['max |g|, 10 s [m]']:.2f} m within 10 s and "
        f"{euler['final |g| [m]']:.1e} m after 100 min (its energy grows without bound); RK4 "
        f"drifts too, more slowly ({rk4['max |g|, 10 s [m]']:.1e} m in 10 s, "
        f"{rk4['final |g| [m]']:.0f} m after 100 min). The GP-VI does not drift: every run "
        f"kept max |g| <= {rounded_up(gp_max)} m for as long as "
        f"it ran, {'below' if gp_max <= TARGET else 'above'} the target {TARGET:g} m, and "
        f"{len(held)} of {len(gp)} ran all {long:,} steps. "
        + ("But " + "; ".join(failures) + ". " if failures else "")
        + "The residual is not at round-off, though, but near 1e-12 m: the projection's "
        f"regularisation eps = {_REGULARISATION:g} leaves g = -dt eps (G G^T)^-1 G e by "
        "construction (e the velocity correction the projection makes), and that expression "
        "along the first 10 s (last column) matches the measured max |g| there within "
        f"{100 * floor_match:.1f} %. It would reach 1e-10 m only for corrections of order "
        "100 m/s. The projection keeps the constraints, not the energy: the GP-VIs' energy "
        "errors are in the (E - E0) / E_swing columns (E_swing = 2 m g l, what the pendulum "
        "released here can lose), and their links spin far outside the training data (max "
        "|phi| column)."
    )
    after = (
        "g: the 4 joint constraints (x and y of each revolute joint) [m]; max |g| over the "
        "first 10 s, over the whole run (up to a failure), and at its last state. Failed at "
        "step: the step whose Newton solve raised (RuntimeError), counted from the start; the "
        "run stops there. Step time: one call of "
        f"{short} steps from the start, per step; fit time: wall clock of the fit (the first "
        "includes importing gpytorch); both on a shared 2-core machine. "
        f"E_swing = E0 - E(hanging) = {swing:.2f} J, E0 = {E0:.1e} J. max |phi|: the largest "
        "absolute link angle over the run. Regularisation floor: max |dt eps (G G^T)^-1 G "
        f"(v_(k+1) - dv)| over the first {short} steps, with the GP mean dv. Whole script: "
        f"{total:.0f} s after the data.\n\n"
        "![constraint residual](constraints.png)"
    )
    table = write_table(
        out, "constraints", "GP-VI constraint drift: the paper's Fig. 1b", COMMAND, reading,
        rows, after=after,
    )  # fmt: skip

    fig = Figure(figsize=(10, 3.8))
    FigureCanvasAgg(fig)
    short_ax, long_ax = fig.subplots(1, 2)
    for name, run in runs.items():
        res, (colour, style) = run.res, styles[name]
        t = np.arange(min(len(res), short + 1)) * H
        short_ax.plot(
            t, np.maximum(res[: len(t)], 1e-17), color=colour, ls=style, linewidth=1, label=name
        )
        # the whole run: the largest |g| in each of 400 log-spaced time bins (the envelope)
        edges = np.unique(np.geomspace(1, len(res), 400).astype(int))
        envelope = np.maximum.reduceat(res, edges[:-1])
        long_ax.plot(edges[1:] * H, np.maximum(envelope, 1e-17), color=colour, ls=style,
                     linewidth=1)  # fmt: skip
        if run.failed is not None:  # where the run stopped
            long_ax.plot(run.failed * H, res[-1], "x", color=colour, markersize=8)
    for ax in (short_ax, long_ax):
        ax.axhline(TARGET, color="tab:purple", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("time [s]")
    short_ax.lines[-1].set_label(f"target {TARGET:g} m")
    short_ax.set_ylabel("max |g(q)| [m]")
    short_ax.set_title("10 s", fontsize=10)
    long_ax.set_xscale("log")
    long_ax.set_ylabel("max |g(q)| per log-spaced bin [m]")
    long_ax.set_title(f"{long * H / 60:.0f} min", fontsize=10)
    entries = len(runs) + 1  # and the target
    fig.legend(loc="upper center", ncol=min(entries, 5), fontsize=8,
               bbox_to_anchor=(0.5, 1.04 + 0.045 * ((entries - 1) // 5)))  # fmt: skip
    fig.tight_layout()
    fig.savefig(out / "constraints.png", dpi=110, bbox_inches="tight")
    print(table)
    for name, run in runs.items():
        if run.message:
            print(f"{name}: {run.message}")


if __name__ == "__main__":
    main()
