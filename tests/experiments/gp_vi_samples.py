"""Fig. 2 of the GP-VI paper: 20-step position error against the number of training samples.

    python tests/experiments/gp_vi_samples.py [--repeats 7] [--restarts 1] [--first 0]
    python tests/experiments/gp_vi_samples.py --replot   # table and figure again, no fits
    python tests/experiments/gp_vi_samples.py --first 3 --repeats 2 --append   # more of them
    python tests/experiments/gp_vi_samples.py --plot-from results/gp_vi/samples.csv  # figure

For each dataset realisation ``r`` (``--first`` .. ``--first + --repeats - 1``) and system,
the true system is the catalog system with masses and inertias scaled by ``U(0.9, 1.1)``
and viscous joint friction drawn from the paper's ranges (both from ``param_seed = r``),
integrated by the midpoint variational integrator at 1e-4 s and observed every 0.01 s with
noise of standard deviation 1e-3 on every entry: the package's envs for the pendulum and the
cart-pole, the same machinery (:class:`vimpc_envs._base.MechanicalEnv`) for the double
pendulum and the parallelogram four-bar.
Data as the paper (section 4): 200 training trajectories of 2 s with zero input from
configurations drawn uniformly at rest, and 100 test trajectories from the same
distribution with other seeds. ``GPVIModel(nominal, 0.01, samples=n, seed=r, ...)`` is
fitted on the noisy training pairs (``n`` drawn at random among the 40 000); the nominal
system is the catalog one (unperturbed, frictionless). In maximal coordinates the nominal
system is its ``.maximal()`` (each body's ``x, y, phi``, the joints as constraints) and the
data are the same trajectories mapped by ``to_maximal`` (noise enters through the joint
coordinates, so noisy states lie on the constraints, as in the authors' data); its errors
are read on the joint angles recovered from the bodies' angles (:class:`Readout`), so every
curve of a system is scored alike. The metric is the paper's 20-step
prediction MSE in the positions: from 500 start states drawn from the noise-free test
trajectories, the model is rolled 20 steps (zero input) and its joint coordinates are
compared with the ground truth (angle errors wrapped to [-pi, pi]), the square error
averaged over start states and coordinates. The baseline is the nominal integrator with
no learning (the midpoint VI, and the first-order VI in the paper's forward-difference form
where that is a prior); the table adds the same integrators with the true parameters and
friction (the integrator's own error at 0.01 s). A fit whose every start fails is repeated
once with 3 starts; if that fails too it scores inf (the authors' code scores NaN as inf),
as does a fitted model one of whose 500 rollouts fails (a projection's Newton that does not
converge); the table counts both.

A system is one line of ``SYSTEMS`` (in ``_gp_vi_systems.py``, with the metric) and a
curve one line of ``CASES``. Every fit's result is kept in ``$VIMPC_CACHE/gp_vi_samples_records.json`` (outside the repository) for
``--replot``.

Writes ``results/gp_vi/{samples.csv, samples.md, samples.png}``. ``--plot-from CSV`` draws
``samples.png`` alone from a table this script wrote (its medians and 10th/90th percentiles,
the numbers of the table exactly) and writes the figure's record
``samples.png.provenance.json`` with that command; no fit, no table. ``--quick --out DIR``: a
smoke test into ``DIR`` (its records there too, not in the cache): one realisation, the
curves, sizes, data and fits of ``QUICK`` (one of each kind of curve: a prior in minimal
coordinates, the first-order prior with sin/cos inputs, maximal coordinates on a true
system without a package env).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _gp_vi_systems import (
    DT,
    HORIZON,
    NOISE,
    STEPS,
    SUBSTEP,
    SYSTEMS,
    TEST,
    TRAIN,
    Readout,
    data_cfg,
    position_mse,
    to_maximal,
    windows_of,
)
from _quick import add_options, parse
from _quick import command as command_line
from _tables import record, write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc import pipeline
from vimpc.errors import InputError
from vimpc.models import NominalModel

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
TEST_STARTS = 500
SIZES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
TARGET_SIZE, TARGET_RATIO = 256, 10.0
FALLBACK_RESTARTS = 3


# (system, coordinates, prior): one curve each. Coordinates "minimal" and "sincos" are
# GPVIModel's (the model's state is the joint coordinates); "maximal" is GPVIModel on the
# system's `.maximal()` (each body's x, y, phi, its joints as constraints) with the data
# mapped by `to_maximal`, scored on the joint angles recovered from the bodies (Readout).
CASES = (
    ("pendulum", "minimal", "midpoint"),
    ("pendulum", "sincos", "midpoint"),
    ("pendulum", "minimal", "first_order"),
    ("pendulum", "sincos", "first_order"),
    ("cartpole", "minimal", "midpoint"),
    ("cartpole", "sincos", "midpoint"),
    ("cartpole", "minimal", "first_order"),
    ("cartpole", "sincos", "first_order"),
    ("double_pendulum", "minimal", "zero"),
    ("double_pendulum", "sincos", "zero"),
    ("double_pendulum", "maximal", "zero"),
    ("fourbar", "minimal", "zero"),
    ("fourbar", "sincos", "zero"),
    ("fourbar", "maximal", "zero"),
)

# the nominal integrator (no learning) of each prior; "zero" is compared with the midpoint VI
NOMINAL = {"midpoint": ("midpoint", "position_momentum"), "first_order": ("first_order", "del")}
BASELINE_OF = {"midpoint": "midpoint", "first_order": "first_order", "zero": "midpoint"}
# the nominal midpoint VI in maximal coordinates (systems with a maximal curve): reported
# beside the joint-coordinate baseline the ratios use
MAXIMAL_BASELINE = "nominal midpoint, maximal coordinates"


@dataclass(frozen=True)
class Plan:
    """What a run covers: the curves, the sample sizes, the size the target is judged at,
    the test start states, the training and test trajectories and their steps, and the
    GP-VI's optimiser steps per start (None: GPVIModel's default)."""

    cases: tuple = CASES
    sizes: tuple = SIZES
    target: int = TARGET_SIZE
    starts: int = TEST_STARTS
    train: int = TRAIN
    test: int = TEST
    steps: int = STEPS
    iterations: int | None = None


FULL = Plan()
QUICK = Plan(
    cases=(
        ("pendulum", "minimal", "midpoint"),
        ("pendulum", "sincos", "first_order"),
        ("double_pendulum", "maximal", "zero"),
    ),
    sizes=(2, 4),
    target=4,
    starts=10,
    train=3,
    test=3,
    steps=HORIZON + 5,
    iterations=5,
)


def fit_gp(
    nominal, n: int, r: int, coordinates: str, prior: str, restarts: int, train, iterations=None
):
    """The fitted model and ``(fit seconds, status)``: ``ok``, ``retried`` (every start
    failed, then the fit with 3 starts worked) or ``failed``. ``coordinates`` is
    GPVIModel's (``nominal`` is in maximal coordinates for the maximal curves)."""
    from vimpc.models.families.gp_vi import GPVIModel

    start = time.perf_counter()
    status = "ok"
    for attempt in (restarts, max(restarts, FALLBACK_RESTARTS)):
        family = GPVIModel(
            nominal, DT, samples=n, seed=r, prior=prior, coordinates=coordinates,
            restarts=attempt, **({} if iterations is None else {"iterations": iterations}),
        )  # fmt: skip
        try:
            model = family.fit(train).discrete_model()
            return model, time.perf_counter() - start, status
        except InputError:  # every start's Cholesky failed (vimpc.models._gp), or the
            # projection onto the constraints did not converge from a training state
            if attempt >= FALLBACK_RESTARTS:
                break
            status = "retried"
    return None, time.perf_counter() - start, "failed"


# -- the run ------------------------------------------------------------------------------------


def run(repeats: int, first: int, restarts: int, progress, plan: Plan = FULL) -> list[dict]:
    """One record per (realisation, system, model, n)."""
    records = []
    systems = list(dict.fromkeys(system for system, _, _ in plan.cases))
    for r in range(first, first + repeats):
        for name in systems:
            spec = SYSTEMS[name]
            env = spec.make_env(r)
            cfg = data_cfg(spec, r, plan.train, plan.test, plan.steps)
            progress.set_postfix_str(f"r={r} {name}: collecting")
            train = pipeline.collect(cfg, env, "train")
            windows = windows_of(pipeline.collect(cfg, env, "heldout"), plan.starts, seed=r)
            nominal = env.nominal_system
            readout = Readout.joint(nominal)
            # per coordinates of the cases: the nominal system, training data, windows, readout
            views = {"joint": (nominal, train, windows, readout)}
            if any(s == name and c == "maximal" for s, c, _ in plan.cases):
                progress.set_postfix_str(f"r={r} {name}: to maximal coordinates")
                views["maximal"] = (
                    nominal.maximal(), to_maximal(nominal, train), to_maximal(nominal, windows),
                    Readout.maximal(nominal),
                )  # fmt: skip
            base = {"realisation": r, "system": name}
            # the nominal integrators, and the same with the true parameters and friction
            # (the integrator's own error at DT: what a perfect correction would leave)
            for prior in dict.fromkeys(BASELINE_OF[p] for s, _, p in plan.cases if s == name):
                integrator, form = NOMINAL[prior]
                for which, system in (("nominal", nominal), ("true-parameter", env.true_system)):
                    model = NominalModel(system, DT, integrator=integrator, form=form)
                    mse = position_mse(model.discrete_model(), windows, readout)
                    records.append({**base, "model": f"{which} {prior}", "mse": mse})
            if "maximal" in views:  # the maximal curves' baseline in their own coordinates
                system_m, _, windows_m, readout_m = views["maximal"]
                integrator, form = NOMINAL["midpoint"]
                model = NominalModel(system_m, DT, integrator=integrator, form=form)
                mse = position_mse(model.discrete_model(), windows_m, readout_m)
                records.append(
                    {**base, "model": MAXIMAL_BASELINE, "mse": mse, "nq": system_m.nq,
                     "constraints": system_m.n_holonomic}
                )  # fmt: skip
            for system, coordinates, prior in plan.cases:
                if system != name:
                    continue
                maximal = coordinates == "maximal"
                system_c, train_c, windows_c, readout_c = views["maximal" if maximal else "joint"]
                features = "minimal" if maximal else coordinates
                for n in plan.sizes:
                    progress.set_postfix_str(f"r={r} {name} {coordinates} {prior} n={n}")
                    model, seconds, status = fit_gp(
                        system_c, n, r, features, prior, restarts, train_c, plan.iterations
                    )
                    mse = math.inf if model is None else position_mse(model, windows_c, readout_c)
                    records.append(
                        {
                            **base,
                            "model": "gp_vi",
                            "coordinates": coordinates,
                            "prior": prior,
                            "samples": n,
                            "mse": mse,
                            "fit_s": seconds,
                            "status": status,
                        }
                    )
                    progress.update()
    return records


def _curve(rows: list[dict[str, Any]], coordinates: str, prior: str) -> list[dict[str, Any]]:
    """The GP-VI entries of ``rows`` (records or table rows) of one curve."""
    return [
        r for r in rows
        if r["model"] == "gp_vi" and r["coordinates"] == coordinates and r["prior"] == prior
    ]  # fmt: skip


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile (numpy's linear interpolation); one between a finite
    value and a failed fit's inf is inf, one that falls on a finite value is that value
    (numpy gives NaN for both: it weighs the inf by 0)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    out = []
    for q in (50, 10, 90):
        pos = q / 100 * (len(v) - 1)
        lo = math.floor(pos)
        if pos == lo:
            p = v[lo]
        else:  # sorted: an inf above is inf, not inf - inf
            p = v[lo] + (pos - lo) * (v[lo + 1] - v[lo]) if np.isfinite(v[lo + 1]) else math.inf
        out.append(float(p))
    return out[0], out[1], out[2]


def summarise(records: list[dict[str, Any]], plan: Plan = FULL) -> tuple[list[dict], list[dict]]:
    """The figure's table (median and 10/90 percentiles per curve and size, baselines
    first) and the ratios nominal / GP per curve at 128 and ``plan.target`` samples."""
    rows, ratios = [], []
    for name in dict.fromkeys(r["system"] for r in records):
        mine = [x for x in records if x["system"] == name]
        baselines = {}
        for model in dict.fromkeys(x["model"] for x in mine if x["model"] != "gp_vi"):
            per = {x["realisation"]: x["mse"] for x in mine if x["model"] == model}
            baselines[model] = per
            median, p10, p90 = _percentiles(list(per.values()))
            rows.append(
                {
                    "system": name, "model": model, "coordinates": "-", "prior": "-",
                    "samples": "-", "realisations": len(per), "median_mse": median,
                    "p10_mse": p10, "p90_mse": p90, "failed_fits": "-", "retried_fits": "-",
                    "inf_mse": sum(not math.isfinite(v) for v in per.values()),
                    "median_fit_s": "-",
                }
            )  # fmt: skip
        for _, coordinates, prior in [c for c in plan.cases if c[0] == name]:
            curve = _curve(mine, coordinates, prior)
            if not curve:
                continue
            for n in plan.sizes:
                cell = [x for x in curve if x["samples"] == n]
                median, p10, p90 = _percentiles([x["mse"] for x in cell])
                rows.append(
                    {
                        "system": name, "model": "gp_vi", "coordinates": coordinates,
                        "prior": prior, "samples": n, "realisations": len(cell),
                        "median_mse": median, "p10_mse": p10, "p90_mse": p90,
                        "failed_fits": sum(x["status"] == "failed" for x in cell),
                        "retried_fits": sum(x["status"] == "retried" for x in cell),
                        "inf_mse": sum(not math.isfinite(x["mse"]) for x in cell),
                        "median_fit_s": float(np.median([x["fit_s"] for x in cell])),
                    }
                )  # fmt: skip
            baseline_name = f"nominal {BASELINE_OF[prior]}"
            baseline = baselines[baseline_name]
            for n in [m for m in (128, plan.target) if m in plan.sizes]:
                cell = {x["realisation"]: x["mse"] for x in curve if x["samples"] == n}
                paired = [baseline[r] / cell[r] for r in cell]
                gp_median = float(np.median(list(cell.values())))
                ratio = float(np.median(list(baseline.values()))) / gp_median
                with_prior = prior != "zero"
                ratios.append(
                    {
                        "system": name, "coordinates": coordinates, "prior": prior,
                        "samples": n, "baseline": baseline_name,
                        "ratio_of_medians": ratio,
                        "paired_ratio_median": float(np.median(paired)),
                        "paired_ratio_min": float(np.min(paired)),
                        "target": f">= {TARGET_RATIO:g}" if with_prior and n == plan.target
                        else "-",
                        "met": ("yes" if ratio >= TARGET_RATIO else "no")
                        if with_prior and n == plan.target else "-",
                    }
                )  # fmt: skip
    return rows, ratios


def _median(rows: list[dict[str, Any]], curve: dict[str, Any], n: int | None) -> float:
    """The median MSE of ``curve``'s GP at ``n`` samples, of its prior's integrator with the
    true parameters (``None``), or of its nominal baseline (0)."""
    for r in rows:
        if r["system"] != curve["system"]:
            continue
        if n is None and r["model"] == f"true-parameter {curve['prior']}":
            return r["median_mse"]
        if n == 0 and r["model"] == f"nominal {BASELINE_OF[curve['prior']]}":
            return r["median_mse"]
        if n and r["model"] == "gp_vi" and r["samples"] == n:
            if (r["coordinates"], r["prior"]) == (curve["coordinates"], curve["prior"]):
                return r["median_mse"]
    return math.nan


def plot(rows: list[dict[str, Any]], path: Path, plan: Plan = FULL) -> None:
    names = list(dict.fromkeys(r["system"] for r in rows))
    fig = Figure(figsize=(4.2 * len(names), 3.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    colours = {"minimal": "C0", "sincos": "C3", "maximal": "C2"}
    styles = {"midpoint": ("-", "o"), "first_order": (":", "s"), "zero": ("-", "o")}
    baseline_style = {"nominal midpoint": "k", "nominal first_order": "0.55"}
    legends = []
    for ax, name in zip(axes, names, strict=True):
        mine = [r for r in rows if r["system"] == name]
        for r in [r for r in mine if r["model"] in baseline_style]:
            ax.axhline(
                r["median_mse"], color=baseline_style[r["model"]], linestyle="--",
                linewidth=1.2, label=f"{r['model']} (median)",
            )  # fmt: skip
        for _, coordinates, prior in [c for c in plan.cases if c[0] == name]:
            curve = _curve(mine, coordinates, prior)
            if not curve:
                continue
            n = [r["samples"] for r in curve]
            line, marker = styles[prior]
            colour = colours[coordinates]
            ax.fill_between(
                n, [r["p10_mse"] for r in curve], [r["p90_mse"] for r in curve],
                color=colour, alpha=0.12 if prior == "first_order" else 0.2, linewidth=0,
            )  # fmt: skip
            ax.plot(
                n, [r["median_mse"] for r in curve], linestyle=line, marker=marker,
                markersize=3.5, color=colour, label=f"{coordinates}, prior {prior}: median",
            )  # fmt: skip
        counts = sorted({int(r["realisations"]) for r in mine if r["model"] == "gp_vi"})
        if counts:  # one entry for the bands: each is its curve's colour
            shown = "/".join(str(c) for c in counts)
            ax.fill_between([], [], [], color="0.6", alpha=0.4, linewidth=0,
                            label=f"band: 10th-90th percentile over {shown} realisations")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("training samples")
        free = all(prior == "zero" for system, _, prior in plan.cases if system == name)
        ax.set_title(SYSTEMS[name].label + (" (no prior)" if free else ""))
        ax.grid(True, which="major", alpha=0.3)
        # below the axes, off the bands; left out of tight_layout, kept in savefig's box
        legends.append(ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2)))
        legends[-1].set_in_layout(False)
    axes[0].set_ylabel(f"{HORIZON}-step position MSE [rad², m²]")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=legends)


def read_table(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``samples.csv`` this script wrote, with the columns :func:`plot` reads
    as numbers (``-`` stays ``-``)."""
    import csv

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    needed = {"system", "model", "coordinates", "prior", "samples", "realisations",
              "median_mse", "p10_mse", "p90_mse"}  # fmt: skip
    if not rows or not needed <= set(rows[0]):
        raise InputError(
            f"--plot-from {path}: expected a samples.csv written by this script, with the "
            f"columns {', '.join(sorted(needed))}; got {', '.join(rows[0]) if rows else 'no rows'}"
        )
    for r in rows:
        r["samples"] = int(r["samples"]) if r["samples"] != "-" else "-"
        r["realisations"] = int(r["realisations"])
        for k in ("median_mse", "p10_mse", "p90_mse"):
            r[k] = float(r[k])
    return rows


def _command(repeats: int, first: int, restarts: int) -> str:
    return (
        f"python tests/experiments/gp_vi_samples.py --repeats {repeats} --first {first} "
        f"--restarts {restarts}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="dataset realisations")
    parser.add_argument("--first", type=int, default=0, help="first realisation (param_seed)")
    parser.add_argument("--restarts", type=int, default=1, help="GPVIModel restarts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--replot", action="store_true",
        help="rewrite the table and figure from the records of the last run (no fits)",
    )  # fmt: skip
    parser.add_argument(
        "--append", action="store_true",
        help="add realisations --first .. to the records of the last run (which must end "
        "just before --first, with the same --restarts): the table of all of them, the "
        "same as one run over them (each realisation has its own seeds)",
    )  # fmt: skip
    parser.add_argument(
        "--plot-from", type=Path, default=None, metavar="CSV",
        help="only draw samples.png (and its record) from this table, e.g. "
        "results/gp_vi/samples.csv: no fits, no table",
    )  # fmt: skip
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"repeats": 1})
    out, plan = args.out, QUICK if args.quick else FULL
    if args.plot_from is not None:
        if not args.plot_from.is_file():
            parser.error(f"--plot-from {args.plot_from}: no such file; give a samples.csv")
        out.mkdir(parents=True, exist_ok=True)
        plot(read_table(args.plot_from), out / "samples.png", plan)
        record(out / "samples.png", command_line(__file__, args.argv))
        print(f"wrote {out / 'samples.png'} from {args.plot_from}")
        return
    this = _command(args.repeats, args.first, args.restarts) + (" --append" if args.append else "")
    # every fit's result, outside the repository, so the outputs can be rewritten without
    # fitting again (a quick run's in its --out)
    raw = (out if args.quick else pipeline.cache_dir()) / "gp_vi_samples_records.json"
    saved = None
    if args.replot or args.append:
        saved = json.loads(raw.read_text())
        for x in saved["records"]:  # JSON has no inf
            x["mse"] = math.inf if x["mse"] is None else x["mse"]
        last = saved["args"]  # records of an older script name no command: their arguments
        saved.setdefault("commands", [_command(last["repeats"], last["first"], last["restarts"])])
    if args.replot:
        args = argparse.Namespace(**{**vars(args), **saved["args"]})
        records, minutes, commands = saved["records"], saved["minutes"], saved["commands"]
    else:
        import torch
        from tqdm import tqdm

        records, minutes, commands = [], 0.0, []
        if saved is not None:  # --append
            if (last["first"] + last["repeats"], last["restarts"]) != (args.first, args.restarts):
                parser.error(
                    f"--append continues the last run (realisations {last['first']}.."
                    f"{last['first'] + last['repeats'] - 1}, --restarts {last['restarts']}): "
                    f"give --first {last['first'] + last['repeats']} --restarts "
                    f"{last['restarts']}"
                )
            records, minutes, commands = saved["records"], saved["minutes"], saved["commands"]
        torch.set_num_threads(args.threads)
        start = time.perf_counter()
        total = args.repeats * len(plan.cases) * len(plan.sizes)
        with tqdm(total=total, desc="fits", unit="fit") as progress:
            records = records + run(args.repeats, args.first, args.restarts, progress, plan)
        minutes += (time.perf_counter() - start) / 60
        commands = [*commands, this]
        if saved is not None:
            args.repeats += args.first - saved["args"]["first"]
            args.first = saved["args"]["first"]
        raw.parent.mkdir(parents=True, exist_ok=True)
        finite = [{**x, "mse": x["mse"] if math.isfinite(x["mse"]) else None} for x in records]
        kept = {
            k: v
            for k, v in vars(args).items()
            if k not in ("replot", "append", "quick", "out", "argv")
        }
        raw.write_text(
            json.dumps({"args": kept, "minutes": minutes, "commands": commands, "records": finite})
        )
    total = sum(x["model"] == "gp_vi" for x in records)
    rows, ratios = summarise(records, plan)
    out.mkdir(parents=True, exist_ok=True)
    plot(rows, out / "samples.png", plan)

    command = " then ".join(commands)  # the run(s) that made the records
    target = [x for x in ratios if x["met"] != "-"]
    met = [x for x in target if x["met"] == "yes"]
    failed = sum(x["status"] == "failed" for x in records if x["model"] == "gp_vi")
    retried = sum(x["status"] == "retried" for x in records if x["model"] == "gp_vi")
    reading = (
        f"**Target (with the prior model, median MSE at {plan.target} samples at least "
        f"{TARGET_RATIO:g}x below the nominal integrator's): met by {len(met)} of {len(target)} "
        "curves** ("
        + "; ".join(
            f"{x['system']} {x['coordinates']} {x['prior']}: {x['ratio_of_medians']:.3g}x, "
            f"smallest paired {x['paired_ratio_min']:.3g}x ({x['met']})"
            for x in target
        )
        + ")."
    )
    floors = "; ".join(
        f"{x['system']} {x['coordinates']} {x['prior']} {_median(rows, x, plan.target):.2g} "
        f"(true-parameter {x['prior']} VI {_median(rows, x, None):.2g})"
        for x in target
    )
    reading += (
        f" Median MSE at {plan.target} samples and, in brackets, that of the prior's integrator "
        f"with the true parameters and friction (the integrator's own error at dt = {DT:g} s): "
        f"{floors}."
    )
    free = [x for x in ratios if x["prior"] == "zero" and x["samples"] == plan.target]
    if free:
        reading += (
            f" Without a prior, median MSE at {plan.target} and {plan.sizes[-1]} samples against "
            "the "
            "nominal midpoint VI: "
            + "; ".join(
                f"{x['system']} {x['coordinates']} {_median(rows, x, plan.target):.2g} and "
                f"{_median(rows, x, plan.sizes[-1]):.2g} (nominal {_median(rows, x, 0):.2g})"
                for x in free
            )
            + "."
        )
    fits = [x for x in records if x["model"] == "gp_vi"]
    slowest = max(fits, key=lambda x: x["fit_s"])
    fewer = (
        f" (fewer than the script's default 7: the slowest fit of this run, "
        f"{slowest['system']} {slowest['coordinates']} at {slowest['samples']} samples, took "
        f"{slowest['fit_s']:.3g} s; "
        + (
            f"with {args.repeats} values the 10/90 percentiles lie between the extremes and "
            "the median)"
            if args.repeats > 1
            else "with one value the median and the 10/90 percentiles are that value)"
        )
        if args.repeats < 7
        else ""
    )
    from vimpc.models.families.gp_vi import GPVIModel

    iterations = plan.iterations or GPVIModel.settings["iterations"].default
    in_maximal = {x["system"]: x for x in records if x["model"] == MAXIMAL_BASELINE}
    maximal_sizes = ", ".join(
        f"{SYSTEMS[name].label.lower()} {x['nq']} coordinates and {x['constraints']} constraints"
        for name, x in in_maximal.items()
    )
    maximal_baseline = []
    for name in in_maximal:
        per = {
            which: {
                x["realisation"]: x["mse"]
                for x in records
                if x["system"] == name and x["model"] == which
            }
            for which in (MAXIMAL_BASELINE, "nominal midpoint")
        }
        diffs = [
            abs(per[MAXIMAL_BASELINE][r] / per["nominal midpoint"][r] - 1)
            for r in per[MAXIMAL_BASELINE]
        ]
        medians = {
            r["model"]: r["median_mse"] for r in rows if r["system"] == name and r["model"] in per
        }
        maximal_baseline.append(
            f"{name} median {medians['nominal midpoint']:.4g} in joint and "
            f"{medians[MAXIMAL_BASELINE]:.4g} in maximal coordinates, per realisation "
            f"{min(diffs):.2%} to {max(diffs):.2%} apart"
        )
    maximal_text = (
        "; the same integrator in maximal coordinates, measured on the same windows "
        f"(row `{MAXIMAL_BASELINE}`): " + "; ".join(maximal_baseline)
        if maximal_baseline
        else ""
    )
    intro = f"""
{reading}

Setting: {args.repeats} dataset realisation{"s" if args.repeats != 1 else ""}{fewer} (param_seed {args.first}..{args.first + args.repeats - 1};
the paper used 100), GPVIModel restarts = {args.restarts} (the paper: 100 initial guesses;
a fit whose every start failed was repeated once with {FALLBACK_RESTARTS} starts: {retried}
such fits, {failed} failed also then and score inf), iterations = {iterations}, exact posterior.
Per realisation and system: true system = catalog system, masses and inertias x U(0.9, 1.1),
viscous joint friction U(0, c_max) (pendulum 1; cart-pole 1 on the cart, 0.5 on the pole;
double pendulum 2 and 0.5; four-bar 2 at the pivot of link 1, 0.5 between links 1 and 2, 2
between links 3 and 4, 0.5 between links 2 and 4, none at the pivot of link 3, the authors'
rand(4) .* [2, 0.5, 2, 0.5] on their joints), midpoint VI at {SUBSTEP:g} s, observation noise
{NOISE:g} on every entry; {TRAIN} training and {TEST} test trajectories of {STEPS * DT:g} s,
zero input, start at rest from uniform configurations (pendulum and pole angle U(-pi, pi),
cart U(-0.5, 0.5) m, double pendulum theta1 U(-pi/2, pi/2), theta2 U(-pi, pi), four-bar
theta1 and theta2 U(-pi/2, pi/2), the authors' ranges). The models step {DT:g} s and know
the nominal (unperturbed, frictionless) system. Coordinates: `minimal` and `sincos` are
GPVIModel's on the joint coordinates (`sincos`: angles enter the GPs as sine and cosine);
`maximal` is GPVIModel on the system's maximal coordinates (each body's x, y, phi;
{maximal_sizes}) with the projection of eq. 10e,
the GP inputs the raw body states, trained on the same noisy trajectories mapped body by
body. MSE: {HORIZON}-step prediction from {plan.starts} noise-free test states, squared error
of the joint coordinates (angles wrapped) averaged over start states and coordinates
(cart-pole: m² and rad² together); for `maximal` the joint angles' errors are recovered from
the bodies' angle errors (phi = A q + c with constant A; pinv(A), exact on the constraints,
which the model keeps), so its curve is comparable with the others (the authors scored the
bodies' positions). Percentiles over realisations; `inf_mse` counts the fits that score inf
(failed fits, or a rollout whose Newton solve failed). Baselines: the nominal midpoint VI in
joint coordinates and, for the first-order prior, the nominal first-order VI in forward-
difference form; the prior `zero` (double pendulum, four-bar) is compared with the midpoint
VI in joint coordinates, for every coordinates{maximal_text}. The four-bar's hanging rest, where all its links align
(theta1 = theta2), is a branch point of its maximal coordinates (the constraint Jacobian loses
rank); every start at rest swings through it (theta1 - theta2 oscillates about 0), so no
start box avoids it, and the projection's step test is scaled to the round-off there
(`GPVIModel._newton`). The ratio table pairs the GP and its baseline on the same
realisation. Run time {minutes:.0f} min on one core (torch threads = {args.threads}).
"""
    ratio_table = "\n".join(
        [
            "| " + " | ".join(ratios[0]) + " |",
            "|" + "---|" * len(ratios[0]),
            *[
                "| "
                + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in x.values())
                + " |"
                for x in ratios
            ],
        ]
    )
    after = (
        "## Ratio nominal / GP (median MSE of the baseline over the GP's; paired: per "
        f"realisation)\n\n{ratio_table}\n\n![samples](samples.png)"
    )
    title = "GP-VI: 20-step position error against the number of training samples (Fig. 2)"
    write_table(out, "samples", title, command, intro, rows, after=after)
    print(ratio_table)
    print(f"\n{reading}\n{total} fits in {minutes:.1f} min; {retried} retried, {failed} failed")
    print(f"wrote {out / 'samples.md'}, samples.csv, samples.png")


if __name__ == "__main__":
    main()
