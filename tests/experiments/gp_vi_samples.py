"""Fig. 2 of the GP-VI paper: 20-step position error against the number of training samples.

    python tests/experiments/gp_vi_samples.py [--repeats 7] [--restarts 1] [--first 0]
    python tests/experiments/gp_vi_samples.py --replot   # table and figure again, no fits

For each dataset realisation ``r`` (``--first`` .. ``--first + --repeats - 1``) and system,
the true system is the catalog system with masses and inertias scaled by ``U(0.9, 1.1)``
and viscous joint friction drawn from the paper's ranges (both from ``param_seed = r``),
integrated by the midpoint variational integrator at 1e-4 s and observed every 0.01 s with
noise of standard deviation 1e-3 on every entry: the package's envs for the pendulum and the
cart-pole, the same machinery (:class:`vimpc_envs._base.MechanicalEnv`) for the others.
Data as the paper (section 4): 200 training trajectories of 2 s with zero input from
configurations drawn uniformly at rest, and 100 test trajectories from the same
distribution with other seeds. ``GPVIModel(nominal, 0.01, samples=n, seed=r, ...)`` is
fitted on the noisy training pairs (``n`` drawn at random among the 40 000); the nominal
system is the catalog one (unperturbed, frictionless). The metric is the paper's 20-step
prediction MSE in the positions: from 500 start states drawn from the noise-free test
trajectories, the model is rolled 20 steps (zero input) and its joint coordinates are
compared with the ground truth (angle errors wrapped to [-pi, pi]), the square error
averaged over start states and coordinates. The baseline is the nominal integrator with
no learning (the midpoint VI, and the first-order VI in the paper's forward-difference form
where that is a prior); the table adds the same integrators with the true parameters and
friction (the integrator's own error at 0.01 s). A fit whose every start fails is repeated
once with 3 starts; if that fails too it scores inf (the authors' code scores NaN as inf).

A system is one line of ``SYSTEMS`` and a curve one line of ``CASES``. Every fit's result
is kept in ``$VIMPC_CACHE/gp_vi_samples_records.json`` (outside the repository) for
``--replot``.

Writes ``results/gp_vi/{samples.csv, samples.md, samples.png}``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _tables import write_table
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc import pipeline
from vimpc.data import Dataset
from vimpc.errors import InputError
from vimpc.mechanics import DoublePendulum
from vimpc.models import NominalModel, evaluation

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
DT = 0.01
SUBSTEP = 1e-4
NOISE = 1e-3
PERTURBATION = 0.1
TRAIN, TEST, STEPS = 200, 100, 200  # trajectories of 2 s
HORIZON = 20
TEST_STARTS = 500
SIZES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
TARGET_SIZE, TARGET_RATIO = 256, 10.0
FALLBACK_RESTARTS = 3
PI = math.pi


# -- the true systems -----------------------------------------------------------------------


def _env_by_id(env_id: str) -> Callable[[int], Any]:
    def make(param_seed: int):
        import gymnasium

        import vimpc  # noqa: F401  (registers the environment ids)

        return gymnasium.make(
            env_id,
            dt=DT,
            substep=SUBSTEP,
            perturbation=PERTURBATION,
            obs_noise=NOISE,
            param_seed=param_seed,
        ).unwrapped

    return make


def _truth_env(system_type: type, friction_max: tuple[float, ...]) -> Callable[[int], Any]:
    """A true system without a package env: a task-free :class:`MechanicalEnv` of
    ``system_type`` (same perturbation, friction draw, integrator, noise as the envs)."""

    def make(param_seed: int):
        from vimpc_envs._base import MechanicalEnv

        class Truth(MechanicalEnv):
            def stage_cost(self, obs, u, t=0.0):
                return 0.0

            def safety_margin(self, obs):
                return np.zeros(0)

            def _sample_state(self):
                raise NotImplementedError("start states are given to reset")

            def _view(self):
                return (-2.0, 2.0), (-2.0, 2.0)

        nx = 2 * system_type().nq
        Truth.system_type = system_type
        Truth.friction_max = friction_max
        Truth.friction_rates = tuple(f"joint{i + 1}" for i in range(len(friction_max)))
        Truth.action_limit = (1e3,) * system_type().nu
        Truth.observation_limit = (1e4,) * (nx // 2) + (1e3,) * (nx // 2)
        Truth.__name__ = f"{system_type.__name__}Truth"
        return Truth(
            dt=DT,
            substep=SUBSTEP,
            perturbation=PERTURBATION,
            obs_noise=NOISE,
            param_seed=param_seed,
        )

    return make


@dataclass(frozen=True)
class SystemSpec:
    """A system of the figure: its true system (by ``param_seed``) and the box of start
    states ``(q, v)`` (velocities 0: at rest)."""

    label: str
    make_env: Callable[[int], Any]
    low: tuple[float, ...]
    high: tuple[float, ...]


# start boxes and friction ranges of implementations.md section 1 (the paper's Fig. 2)
SYSTEMS = {
    "pendulum": SystemSpec("Pendulum", _env_by_id("vimpc/Pendulum-v0"), (-PI, 0.0), (PI, 0.0)),
    "cartpole": SystemSpec(
        "Cart-pole", _env_by_id("vimpc/CartPole-v0"), (-0.5, -PI, 0, 0), (0.5, PI, 0, 0)
    ),
    "double_pendulum": SystemSpec(
        "Double pendulum",
        _truth_env(DoublePendulum, (2.0, 0.5)),
        (-PI / 2, -PI, 0, 0),
        (PI / 2, PI, 0, 0),
    ),
}

# (system, GPVIModel coordinates, prior): one curve each. The four-bar in joint angles is
# one SYSTEMS line (_truth_env(ParallelogramFourBar, <friction per joint>)) and its CASES
# lines; maximal coordinates (a `.maximal()` nominal system) also need the data mapped by
# `to_maximal` and the metric taken on the joint angles or the bodies' positions.
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
)

# the nominal integrator (no learning) of each prior; "zero" is compared with the midpoint VI
NOMINAL = {"midpoint": ("midpoint", "position_momentum"), "first_order": ("first_order", "del")}
BASELINE_OF = {"midpoint": "midpoint", "first_order": "first_order", "zero": "midpoint"}


# -- data and metric ----------------------------------------------------------------------------


def _data_cfg(spec: SystemSpec, r: int) -> dict[str, Any]:
    """The ``[data]`` of a scenario for :func:`vimpc.pipeline.collect`: zero input, uniform
    starts at rest, seeds apart by realisation and part."""
    return {
        "data": {
            "trajectories": TRAIN,
            "seed": 1_000_000 + 1000 * r,
            "heldout_trajectories": TEST,
            "heldout_seed": 2_000_000 + 1000 * r,
            "steps": STEPS,
            "excitation": "zero",
            "excitation_options": {},
            "initial_state": "uniform",
            "low": list(spec.low),
            "high": list(spec.high),
            "obs_noise": None,  # the env's own, NOISE
        }
    }


def _windows(test: Dataset, n: int, seed: int) -> Dataset:
    """``n`` noise-free windows of ``HORIZON`` steps drawn from the test trajectories, as a
    dataset of ``n`` short trajectories (``obs`` = the ground truth)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, test.n_trajectories, n)[:, None]
    k = rng.integers(0, test.n_steps - HORIZON + 1, n)[:, None] + np.arange(HORIZON + 1)
    states = test.states[i, k]
    return Dataset(test.t[i, k], states, states, test.inputs[i, k[:, :-1]], test.dt, test.metadata)


def position_mse(model, windows: Dataset, angles: np.ndarray) -> float:
    """Mean square ``HORIZON``-step error of the joint coordinates (angles wrapped); inf if
    the prediction is not finite."""
    try:
        error = evaluation.prediction_errors(model, windows, HORIZON)[:, : len(angles)]
    except RuntimeError:  # a Newton solve CasADi could not finish
        return math.inf
    error = np.where(angles, np.angle(np.exp(1j * error)), error)
    value = float(np.mean(error**2))
    return value if np.isfinite(value) else math.inf


def fit_gp(nominal, n: int, r: int, coordinates: str, prior: str, restarts: int, train):
    """The fitted model and ``(fit seconds, status)``: ``ok``, ``retried`` (every start
    failed, then the fit with 3 starts worked) or ``failed``."""
    from vimpc.models.gp_vi import GPVIModel

    start = time.perf_counter()
    status = "ok"
    for attempt in (restarts, max(restarts, FALLBACK_RESTARTS)):
        family = GPVIModel(
            nominal, DT, samples=n, seed=r, prior=prior, coordinates=coordinates,
            restarts=attempt,
        )  # fmt: skip
        try:
            model = family.fit(train).discrete_model()
            return model, time.perf_counter() - start, status
        except InputError:  # every start's Cholesky failed (vimpc.models.gp)
            if attempt >= FALLBACK_RESTARTS:
                break
            status = "retried"
    return None, time.perf_counter() - start, "failed"


# -- the run ------------------------------------------------------------------------------------


def run(repeats: int, first: int, restarts: int, progress) -> list[dict[str, Any]]:
    """One record per (realisation, system, model, n)."""
    records = []
    systems = list(dict.fromkeys(system for system, _, _ in CASES))
    for r in range(first, first + repeats):
        for name in systems:
            spec = SYSTEMS[name]
            env = spec.make_env(r)
            cfg = _data_cfg(spec, r)
            progress.set_postfix_str(f"r={r} {name}: collecting")
            train = pipeline.collect(cfg, env, "train")
            windows = _windows(pipeline.collect(cfg, env, "heldout"), TEST_STARTS, seed=r)
            nominal = env.nominal_system
            angles = np.array([u == "rad" for u in nominal.coordinate_units])
            base = {"realisation": r, "system": name}
            # the nominal integrators, and the same with the true parameters and friction
            # (the integrator's own error at DT: what a perfect correction would leave)
            for prior in dict.fromkeys(BASELINE_OF[p] for s, _, p in CASES if s == name):
                integrator, form = NOMINAL[prior]
                for which, system in (("nominal", nominal), ("true-parameter", env.true_system)):
                    model = NominalModel(system, DT, integrator=integrator, form=form)
                    mse = position_mse(model.discrete_model(), windows, angles)
                    records.append({**base, "model": f"{which} {prior}", "mse": mse})
            for system, coordinates, prior in CASES:
                if system != name:
                    continue
                for n in SIZES:
                    progress.set_postfix_str(f"r={r} {name} {coordinates} {prior} n={n}")
                    model, seconds, status = fit_gp(
                        nominal, n, r, coordinates, prior, restarts, train
                    )
                    mse = math.inf if model is None else position_mse(model, windows, angles)
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


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile; a percentile between a finite value and a failed
    fit's inf is inf (numpy's interpolation gives NaN there)."""
    p = np.percentile(np.asarray(values, dtype=np.float64), [50, 10, 90])
    p50, p10, p90 = np.nan_to_num(p, nan=np.inf, posinf=np.inf)
    return float(p50), float(p10), float(p90)


def summarise(records: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """The figure's table (median and 10/90 percentiles per curve and size, baselines
    first) and the ratios nominal / GP per curve at 128 and ``TARGET_SIZE`` samples."""
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
                    "median_fit_s": "-",
                }
            )  # fmt: skip
        for _, coordinates, prior in [c for c in CASES if c[0] == name]:
            curve = [
                x for x in mine
                if x["model"] == "gp_vi" and x["coordinates"] == coordinates and x["prior"] == prior
            ]  # fmt: skip
            if not curve:
                continue
            for n in SIZES:
                cell = [x for x in curve if x["samples"] == n]
                median, p10, p90 = _percentiles([x["mse"] for x in cell])
                rows.append(
                    {
                        "system": name, "model": "gp_vi", "coordinates": coordinates,
                        "prior": prior, "samples": n, "realisations": len(cell),
                        "median_mse": median, "p10_mse": p10, "p90_mse": p90,
                        "failed_fits": sum(x["status"] == "failed" for x in cell),
                        "retried_fits": sum(x["status"] == "retried" for x in cell),
                        "median_fit_s": float(np.median([x["fit_s"] for x in cell])),
                    }
                )  # fmt: skip
            baseline_name = f"nominal {BASELINE_OF[prior]}"
            baseline = baselines[baseline_name]
            for n in [m for m in (128, TARGET_SIZE) if m in SIZES]:
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
                        "target": f">= {TARGET_RATIO:g}" if with_prior and n == TARGET_SIZE
                        else "-",
                        "met": ("yes" if ratio >= TARGET_RATIO else "no")
                        if with_prior and n == TARGET_SIZE else "-",
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


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    names = list(dict.fromkeys(r["system"] for r in rows))
    fig = Figure(figsize=(4.2 * len(names), 3.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    colours = {"minimal": "C0", "sincos": "C3", "maximal": "C2"}
    styles = {"midpoint": ("-", "o"), "first_order": (":", "s"), "zero": ("-", "o")}
    baseline_style = {"nominal midpoint": "k", "nominal first_order": "0.55"}
    for ax, name in zip(axes, names, strict=True):
        mine = [r for r in rows if r["system"] == name]
        for r in [r for r in mine if r["model"] in baseline_style]:
            ax.axhline(
                r["median_mse"], color=baseline_style[r["model"]], linestyle="--",
                linewidth=1.2, label=f"{r['model']} (median)",
            )  # fmt: skip
        for _, coordinates, prior in [c for c in CASES if c[0] == name]:
            curve = [
                r for r in mine
                if r["model"] == "gp_vi" and r["coordinates"] == coordinates and r["prior"] == prior
            ]  # fmt: skip
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
                markersize=3.5, color=colour, label=f"{coordinates}, prior {prior}",
            )  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("training samples")
        ax.set_title(SYSTEMS[name].label + (" (no prior)" if name == "double_pendulum" else ""))
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(f"{HORIZON}-step position MSE [rad², m²]")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="dataset realisations")
    parser.add_argument("--first", type=int, default=0, help="first realisation (param_seed)")
    parser.add_argument("--restarts", type=int, default=1, help="GPVIModel restarts")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--replot", action="store_true",
        help="rewrite the table and figure from the records of the last run (no fits)",
    )  # fmt: skip
    args = parser.parse_args()
    # every fit's result, outside the repository, so the outputs can be rewritten without
    # fitting again
    raw = pipeline.cache_dir() / "gp_vi_samples_records.json"
    if args.replot:
        saved = json.loads(raw.read_text())
        args = argparse.Namespace(**saved["args"])
        records, minutes, total = saved["records"], saved["minutes"], len(saved["records"])
        for x in records:  # JSON has no inf
            x["mse"] = math.inf if x["mse"] is None else x["mse"]
    else:
        import torch
        from tqdm import tqdm

        torch.set_num_threads(args.threads)
        start = time.perf_counter()
        total = args.repeats * len(CASES) * len(SIZES)
        with tqdm(total=total, desc="fits", unit="fit") as progress:
            records = run(args.repeats, args.first, args.restarts, progress)
        minutes = (time.perf_counter() - start) / 60
        raw.parent.mkdir(parents=True, exist_ok=True)
        finite = [{**x, "mse": x["mse"] if math.isfinite(x["mse"]) else None} for x in records]
        kept = {k: v for k, v in vars(args).items() if k != "replot"}
        raw.write_text(json.dumps({"args": kept, "minutes": minutes, "records": finite}))
    total = sum(x["model"] == "gp_vi" for x in records)
    rows, ratios = summarise(records)
    OUT.mkdir(parents=True, exist_ok=True)
    plot(rows, OUT / "samples.png")

    command = "python tests/experiments/gp_vi_samples.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if k not in ("threads", "replot")
    )
    target = [x for x in ratios if x["met"] != "-"]
    met = [x for x in target if x["met"] == "yes"]
    failed = sum(x["status"] == "failed" for x in records if x["model"] == "gp_vi")
    retried = sum(x["status"] == "retried" for x in records if x["model"] == "gp_vi")
    reading = (
        f"**Target (with the prior model, median MSE at {TARGET_SIZE} samples at least "
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
        f"{x['system']} {x['coordinates']} {x['prior']} {_median(rows, x, TARGET_SIZE):.2g} "
        f"(true-parameter {x['prior']} VI {_median(rows, x, None):.2g})"
        for x in target
    )
    reading += (
        f" Median MSE at {TARGET_SIZE} samples and, in brackets, that of the prior's integrator "
        f"with the true parameters and friction (the integrator's own error at dt = {DT:g} s): "
        f"{floors}."
    )
    free = [x for x in ratios if x["prior"] == "zero" and x["samples"] == TARGET_SIZE]
    if free:
        reading += (
            f" Without a prior, median MSE at {TARGET_SIZE} and {SIZES[-1]} samples against the "
            "nominal midpoint VI: "
            + "; ".join(
                f"{x['system']} {x['coordinates']} {_median(rows, x, TARGET_SIZE):.2g} and "
                f"{_median(rows, x, SIZES[-1]):.2g} (nominal {_median(rows, x, 0):.2g})"
                for x in free
            )
            + "."
        )
    intro = f"""
{reading}

Setting: {args.repeats} dataset realisations (param_seed {args.first}..{args.first + args.repeats - 1};
the paper used 100), GPVIModel restarts = {args.restarts} (the paper: 100 initial guesses;
a fit whose every start failed was repeated once with {FALLBACK_RESTARTS} starts: {retried}
such fits, {failed} failed also then and score inf), iterations = 150, exact posterior.
Per realisation and system: true system = catalog system, masses and inertias x U(0.9, 1.1),
viscous joint friction U(0, c_max) (pendulum 1; cart-pole 1 on the cart, 0.5 on the pole;
double pendulum 2 and 0.5), midpoint VI at {SUBSTEP:g} s, observation noise {NOISE:g} on
every entry; {TRAIN} training and {TEST} test trajectories of {STEPS * DT:g} s, zero input,
start at rest from uniform configurations (pendulum and pole angle U(-pi, pi), cart
U(-0.5, 0.5) m, double pendulum theta1 U(-pi/2, pi/2), theta2 U(-pi, pi)). The models step
{DT:g} s and know the nominal (unperturbed, frictionless) system. MSE: {HORIZON}-step
prediction from {TEST_STARTS} noise-free test states, squared error of the joint
coordinates (angles wrapped) averaged over start states and coordinates (cart-pole: m² and
rad² together). Percentiles over realisations. Baselines: the nominal midpoint VI and, for
the first-order prior, the nominal first-order VI in forward-difference form; the prior
`zero` (double pendulum) is compared with the midpoint VI. The ratio table pairs the GP and
its baseline on the same realisation. Run time {minutes:.0f} min on one
core (torch threads = {args.threads}).
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
    write_table(OUT, "samples", title, command, intro, rows, after=after)
    print(ratio_table)
    print(f"\n{reading}\n{total} fits in {minutes:.1f} min; {retried} retried, {failed} failed")
    print(f"wrote {OUT / 'samples.md'}, samples.csv, samples.png")


if __name__ == "__main__":
    main()
