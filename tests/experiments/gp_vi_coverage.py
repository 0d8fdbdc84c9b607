"""Coverage and tightness of the GP-VI model's two bounds on held-out data.

For each scenario below, the GP-VI model is fitted once on the scenario's training data;
then, for each delta, its bound is derived again (``recalibrate``, no refit) as

- ``theorem1``: each GP's uniform error bound (Lederer et al. 2019) on the box of its
  training inputs, through the projection's Lipschitz constant (Theorem 1 of the GP-VI
  paper), with the observation noise's quantile added;
- ``conformal``: split conformal calibration of the GPs' posterior spread
  (``conformal_scale = "spread"``) on the first half of the held-out trajectories;
- ``conformal log_state``: the same calibration of the spread times a power-law correction
  ``exp(w0 + w1 |v| + w2 v^2 + w3 |u|)`` per entry, fitted to the log of the training
  errors (``conformal_scale = "log_state"``): the spread alone does not grow with speed as
  the errors do, so its bound is wide where the errors are small,

and measured on the second half (trajectories neither the fit nor the calibration saw):
coverage (the fraction of transitions whose error lies within the bound in every entry at
once; the bound promises at least 1 - delta) and tightness (median bound / median
realised error, per state entry).

That split is one draw, and the transitions of a trajectory are correlated, so its
conformal coverage scatters about 1 - delta by about as much as the trajectory count
allows. The conformal rows therefore also give the coverage over ``SPLITS`` random
trajectory-level splits of the held-out set into halves of the same sizes (calibrating
on one, measuring on the other): its mean is what the calibration promises in
expectation.

    python tests/experiments/gp_vi_coverage.py

writes results/gp_vi/coverage.{csv,md} (each scenario's model is fitted with the settings
of its file) and results/gp_vi/coverage_limits.{csv,md}: how tight a joint box can be on
the same validation data (:func:`limit_row`). ``--quick --out DIR``: a smoke test into ``DIR``: the first scenario, its
GP-VI fitted on a few short trajectories (``QUICK_SETS``), 10 splits.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _quick import add_options, parse  # noqa: E402
from _tables import write_table  # noqa: E402

from vimpc import pipeline  # noqa: E402
from vimpc.models.calibration import _scale_values  # noqa: E402
from vimpc.models.evaluation import bound_values, one_step_errors, transitions  # noqa: E402
from vimpc.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
SCENARIOS = ("pendulum_gpvi_swingup", "cartpole_gpvi_safe", "fourbar_gpvi_tracking")
DELTAS = (0.01, 0.05, 0.1)
# per-transition bounds (a scenario's horizon-level setting is not this experiment's)
STEP = {"bound_level": "step", "bound_horizon": 0}
METHODS = {
    "theorem1": {"bound": "theorem1", **STEP},
    "conformal": {"bound": "conformal", "conformal_scale": "spread", **STEP},
    "conformal log_state": {"bound": "conformal", "conformal_scale": "log_state", **STEP},
}
SPLITS, SPLIT_SEED = 200, 0
SPLIT_COLUMNS = (
    "splits, mean coverage",
    "splits, 5th percentile",
    "splits, share >= 1 - delta",
    "splits, median worst-entry tightness",
)
# --quick: 4 training and 8 held-out trajectories of 25 steps (100 calibration transitions,
# the fewest split conformal takes at delta 0.01); 16 samples, 8 support points, one start
# of 5 optimiser steps
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=25",
    "model.samples=16",
    "model.support_points=8",
    "model.restarts=1",
    "model.iterations=5",
]


def split_coverage(model, heldout, delta: float, splits: int = SPLITS) -> dict[str, float]:
    """Mean, 5th percentile and share >= 1 - delta of the coverage, and the median
    worst-entry tightness, over ``splits`` random trajectory-level splits of ``heldout``
    into a calibration and a validation half.

    ``model`` carries a conformal bound; calibrating it on other data only rescales that
    bound, by the ``k``-th smallest ratio ``max_j error_j / bound_j`` of the calibration
    half (``k`` as in ``conformal.calibrate``)."""
    X, U, _ = transitions(model, heldout)
    errors = np.abs(one_step_errors(model, heldout))
    bound = bound_values(model, X, U)
    ratios = np.max(errors / bound, axis=1).reshape(heldout.n_trajectories, -1)
    steps = ratios.shape[1]
    n = len(ratios) // 2  # the calibration half's size, as in pipeline.split_heldout
    rng = np.random.default_rng(SPLIT_SEED)
    covered, tightness = [], []
    for _ in range(splits):
        order = rng.permutation(len(ratios))
        calibration, validation = ratios[order[:n]].ravel(), ratios[order[n:]].ravel()
        k = math.ceil((calibration.size + 1) * (1.0 - delta) - 1e-12)
        c = np.sort(calibration)[k - 1]
        covered.append(np.mean(validation <= c))
        rows = (order[n:, None] * steps + np.arange(steps)).ravel()
        typical = np.median(errors[rows], axis=0)
        tightness.append(np.max(np.median(c * bound[rows], axis=0) / typical))
    covered = np.array(covered)
    summary = (
        np.mean(covered),
        np.percentile(covered, 5),
        np.mean(covered >= 1.0 - delta),
        np.median(tightness),
    )
    return dict(zip(SPLIT_COLUMNS, map(float, summary), strict=True))


def gaussian_floor(delta: float, entries: int) -> float:
    """The worst-entry tightness of the narrowest joint box for errors that are
    independent Gaussians of exactly known scale: ``c / z_0.75`` with
    ``(2 Phi(c) - 1)^entries = 1 - delta``."""
    from scipy.stats import norm

    c = norm.ppf((1.0 + (1.0 - delta) ** (1.0 / entries)) / 2.0)
    return float(c / norm.ppf(0.75))


def oracle_tightness(errors, spread, X, nq: int, U, delta: float) -> float:
    """The worst-entry tightness of a joint box whose shape is the spread times
    ``exp(w . phi)`` with ``phi`` richer than ``log_state``'s (1, |v|, v^2, |u|, u^2,
    sin q, cos q, |v_i v_j|), ``w`` fitted to the log of the validation errors themselves
    and the quantile taken on them too: what that shape could reach if it knew the data
    it is judged on."""
    q, v = X[:, :nq], X[:, nq:]
    F = np.hstack(
        [
            np.ones((len(X), 1)),
            np.abs(v),
            v**2,
            np.abs(U),
            U**2,
            np.sin(q),
            np.cos(q),
            np.abs(v[:, :, None] * v[:, None, :]).reshape(len(X), -1),
        ]
    )
    w, *_ = np.linalg.lstsq(F, np.log(np.maximum(errors, 1e-300) / spread), rcond=None)
    shape = spread * np.exp(F @ w)
    c = np.quantile(np.max(errors / shape, axis=1), 1.0 - delta)
    return float(np.max(np.median(c * shape, axis=0) / np.median(errors, axis=0)))


def measure(name: str, sets: list[str] = (), splits: int = SPLITS) -> list[dict]:
    cfg = load_scenario(ROOT / "scenarios" / f"{name}.toml", list(sets))
    env = pipeline.build_env(cfg)
    train = pipeline.collect(cfg, env, "train", progress=True)
    heldout = pipeline.collect(cfg, env, "heldout", progress=True)
    calibration, validation = pipeline.split_heldout(heldout)
    family = pipeline.build_family(cfg, env.nominal_system)
    family.fit(train, calibration if family.bound != "none" else None)
    print(f"{name}: fitted in {family.fit_time_:.1f} s")
    names = family.discrete_model().state_names
    nq = family.system.nq
    rows, limits = [], []
    for method, settings in METHODS.items():
        for delta in DELTAS:
            family.recalibrate(train, calibration, delta=delta, **settings)
            model = family.discrete_model()
            X, U, _ = transitions(model, validation)
            errors = np.abs(one_step_errors(model, validation))
            bound = bound_values(model, X, U)
            inside = errors <= bound
            row = {
                "scenario": name,
                "bound": method,
                "delta": delta,
                "promised": 1.0 - delta,
                "coverage": float(np.mean(np.all(inside, axis=1))),
                "coverage (positions)": float(np.mean(np.all(inside[:, :nq], axis=1))),
                "coverage (velocities)": float(np.mean(np.all(inside[:, nq:], axis=1))),
                "n_validation": len(errors),
            }
            if method.startswith("conformal"):
                row.update(split_coverage(model, heldout, delta, splits))
            else:  # theorem1 is not calibrated on held-out data
                row.update(dict.fromkeys(SPLIT_COLUMNS, ""))
            tight = np.median(bound, axis=0) / np.maximum(np.median(errors, axis=0), 1e-300)
            row["worst-entry tightness"] = float(np.max(tight))
            row["tightness"] = ", ".join(f"{n} {t:.3g}" for n, t in zip(names, tight, strict=True))
            rows.append(row)
            print(f"  {method} delta = {delta}: coverage {row['coverage']:.3f}")
            if method == "conformal log_state":
                limits.append(limit_row(family, model, validation, name, delta))
    return rows, limits


def limit_row(family, model, validation, name: str, delta: float) -> dict:
    """How tight a joint box over the state entries can be on ``validation``: the log_state
    shape with its quantile taken on the validation half itself (no calibration slack),
    a richer shape fitted on it (:func:`oracle_tightness`), and independent Gaussian
    errors of known scale (:func:`gaussian_floor`)."""
    X, U, _ = transitions(model, validation)
    errors = np.abs(one_step_errors(model, validation))
    shape = bound_values(model, X, U)
    c = np.quantile(np.max(errors / shape, axis=1), 1.0 - delta)
    spread = _scale_values(model, None, family._spread(), X, U, "validation")
    nq = family.system.nq
    return {
        "scenario": name,
        "delta": delta,
        "entries": model.nx,
        "log_state, quantile on the validation half": float(
            np.max(np.median(c * shape, axis=0) / np.median(errors, axis=0))
        ),
        "richer shape fitted on the validation half": oracle_tightness(
            errors, spread, X, nq, U, delta
        ),
        "independent Gaussian entries of known scale": gaussian_floor(delta, model.nx),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=SPLITS, help="random held-out splits")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"splits": 10})
    scenarios, sets = (SCENARIOS[:1], QUICK_SETS) if args.quick else (SCENARIOS, [])
    os.environ.setdefault("VIMPC_CACHE", tempfile.mkdtemp(prefix="vimpc-coverage-"))
    measured = [measure(name, sets, args.splits) for name in scenarios]
    rows = [row for part, _ in measured for row in part]
    limits = [row for _, part in measured for row in part]
    write_table(
        args.out,
        "coverage",
        "GP-VI bound coverage and tightness on held-out data",
        "python tests/experiments/gp_vi_coverage.py",
        "Coverage: the fraction of held-out validation transitions whose one-step error "
        "lies within the bound in every state entry at once (promised: at least "
        "1 - delta), on the pipeline's split (calibration: the first half of the held-out "
        "trajectories, validation: the rest). That split is one draw and a trajectory's "
        "transitions are correlated, so the conformal rows also give the coverage over "
        f"{args.splits} random trajectory-level splits into halves of the same sizes (seed "
        f"{SPLIT_SEED}): its mean, 5th percentile and the share of splits that reach "
        "1 - delta; the mean is what the calibration promises in expectation. Tightness "
        "(pipeline split): median bound / median realised error, per entry (1 would be a "
        "bound as small as a typical error), and its largest value over the entries (the "
        "splits' median of it beside). Bounds: `theorem1` (the GPs' uniform error bound "
        "through the projection, Theorem 1), `conformal` (split conformal on the GPs' "
        "posterior spread), `conformal log_state` (the same on the spread times "
        "exp(w0 + w1 |v| + w2 v^2 + w3 |u|) per entry, w fitted to the log of the training "
        "errors, |v| and |u| clipped at the training data's largest values).",
        rows,
        paper="GP-VI paper, Theorem 1: the uniform error bound's coverage and width",
    )
    write_table(
        args.out,
        "coverage_limits",
        "How tight a joint bound on the GP-VI's one-step error can be",
        "python tests/experiments/gp_vi_coverage.py",
        "The worst-entry tightness (median bound / median realised error, largest over the "
        "state entries) of a box that holds every entry at once for 1 - delta of the "
        "validation transitions of `coverage.md`, where nothing is calibrated: the "
        "log_state shape with its quantile taken on the validation half itself; a richer "
        "shape (the spread times exp(w . phi), phi = 1, |v|, v^2, |u|, u^2, sin q, cos q, "
        "|v_i v_j|) fitted by least squares to the log of the validation errors "
        "themselves, its quantile on them too; and errors that are independent Gaussians "
        "of exactly known scale, c / z_0.75 with (2 Phi(c) - 1)^entries = 1 - delta. The "
        "first two use the data they are judged on, so no valid bound calibrated on other "
        "data should be expected below them.",
        limits,
        paper="GP-VI paper, Theorem 1: the uniform error bound's coverage and width",
    )


if __name__ == "__main__":
    main()
