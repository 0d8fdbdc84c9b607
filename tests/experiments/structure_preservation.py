"""Energy and constraint behaviour of the variational integrators against explicit baselines.

The GP-VI paper's Fig. 1 baselines: (a) energy error of the frictionless pendulum
over 10^5 steps, midpoint and first-order (del form) variational integrators vs
explicit Euler and RK4; (b) constraint residual of the four-bar in maximal
coordinates, constrained midpoint vs explicit Euler and RK4 on the index-1 DAE.

    python tests/experiments/structure_preservation.py

writes results/structure_preservation/{summary.md, summary.csv, energy.png, constraints.png}.
``--quick --out DIR``: 200 and 100 steps, into ``DIR`` (a smoke test).
"""

from __future__ import annotations

import argparse
import csv
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from _quick import add_options, parse
from _tables import record
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.mechanics import FourBar, Pendulum

OUT = Path(__file__).parents[2] / "results" / "structure_preservation"
H = 0.01


def rollout(step, x0, n, nu):
    xs = np.asarray(step.mapaccum(n)(x0, np.zeros((nu, n)), np.zeros((0, n)))).T
    return np.vstack([x0, xs])


def energy_runs(n=100_000):
    system = Pendulum()
    x0 = np.array([np.pi / 2, 0.0])
    E0 = system.energy(x0[:1], x0[1:])  # 0 J: the centre of mass starts level with the pivot
    scale = system.params["m"] * system.params["g"] * system.params["l"] / 2  # swing energy
    E = system.function("E")
    runs = {
        "midpoint VI": VariationalIntegrator(system, "midpoint").step_function(H),
        "first-order VI (GP-VI eq. 6)": VariationalIntegrator(
            system, "first_order", "del"
        ).step_function(H),
        "RK4": ExplicitIntegrator(system, "rk4").step_function(H),
        "explicit Euler": ExplicitIntegrator(system, "euler").step_function(H),
    }
    out = {}
    for name, step in runs.items():
        n_run = n if name != "explicit Euler" else min(n, 20_000)  # Euler's energy explodes
        xs = rollout(step, x0, n_run, 1)
        out[name] = (
            np.abs(np.asarray(E.map(len(xs))(xs[:, :1].T, xs[:, 1:].T)).ravel() - E0) / scale
        )
    return out


def constraint_runs(n=10_000):
    base = FourBar()
    system = base.maximal()
    z, w = base.to_maximal(*base.assemble(0.4, 2.0))
    x0 = np.concatenate([z, w])
    g = system.function("g")
    runs = {
        "constrained midpoint VI": VariationalIntegrator(system, "midpoint").step_function(H),
        "RK4 (index-1 DAE)": ExplicitIntegrator(system, "rk4").step_function(H),
        "explicit Euler (index-1 DAE)": ExplicitIntegrator(system, "euler").step_function(H),
    }
    out = {}
    for name, step in runs.items():
        xs = rollout(step, x0, n, 1)
        with np.errstate(invalid="ignore", over="ignore"):
            res = np.abs(np.asarray(g.map(len(xs))(xs[:, : system.nq].T))).max(axis=0)
        out[name] = np.where(np.isfinite(res), res, np.inf)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--energy-steps", type=int, default=100_000, help="pendulum steps")
    parser.add_argument("--constraint-steps", type=int, default=10_000, help="four-bar steps")
    add_options(parser, OUT)
    quick = {"energy_steps": 200, "constraint_steps": 100}
    args = parse(parser, argv, OUT, quick=quick)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    energy, cons = energy_runs(args.energy_steps), constraint_runs(args.constraint_steps)
    rows = []
    for name, err in energy.items():
        half = len(err) // 2
        rows.append(
            (
                "pendulum energy error / (m g l / 2)",
                name,
                len(err) - 1,
                float(np.nanmax(err[:half])),
                float(np.nanmax(err[half:])),
            )
        )
    for name, res in cons.items():
        half = len(res) // 2
        rows.append(
            (
                "four-bar (maximal) max abs g(q) [m]",
                name,
                len(res) - 1,
                float(np.nanmax(res[:half])),
                float(np.nanmax(res[half:])),
            )
        )
    header = ("quantity", "integrator", "steps", "max over first half", "max over second half")
    with open(out / "summary.csv", "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    lines = [
        "# Structure preservation: energy and constraints",
        "",
        f"Made by `python tests/experiments/structure_preservation.py` on {datetime.now(UTC):%Y-%m-%d}. "
        f"Step h = {H} s, zero input, no friction. Pendulum from theta = pi/2 at rest; four-bar in "
        "maximal coordinates (9 coordinates, 8 joint constraints) from crank angle 0.4 rad, 2 rad/s. "
        "inf marks a run that left the floating-point range.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *[f"| {q} | {n} | {s} | {a:.3g} | {b:.3g} |" for q, n, s, a, b in rows],
        "",
        "![energy](energy.png) ![constraints](constraints.png)",
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")

    for fname, data, ylabel in (
        ("energy.png", energy, "|E - E0| / (m g l / 2)"),
        ("constraints.png", cons, "max |g(q)| [m]"),
    ):
        fig = Figure(figsize=(7, 3.5))
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for name, series in data.items():
            t = np.arange(len(series)) * H
            ax.plot(t, np.maximum(series, 1e-17), label=name, linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("time [s]")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        fig.savefig(out / fname, dpi=110, bbox_inches="tight")
    record(
        out / "summary.md",
        "python tests/experiments/structure_preservation.py",
        ["summary.csv", "energy.png", "constraints.png"],
    )
    print("\n".join(lines[4:-2]))


if __name__ == "__main__":
    main()
