"""The structure benchmark: structure-preserving learned models against black boxes in closed
loop, one table from the benchmark sweeps.

    python tests/experiments/structure_benchmark.py [SWEEP_FOLDER ...] [--out DIR]

Reads finished or unfinished sweep folders (``vimpc sweep scenarios/sweeps/benchmark_<system>
.toml`` writes ``results/sweeps/benchmark_<system>[.partial]/``; by default every such folder
there) and writes ``structure_benchmark.{csv,md}`` and ``structure_benchmark_<system>.png``
into ``--out`` (default ``results/structure_benchmark/``).

A row per configuration: system, world (``vimpc``: vimpc's own envs; ``mujoco``: a gymnasium
env through the adapter), family, data budget (``data.trajectories``) and plant
(``env.kwargs.param_seed``), over the episodes finished so far (``episodes`` says how many
of how many) and the fits that have a fit summary; ``note``: why a configuration that
``vimpc sweep`` recorded as failed stopped (:func:`failure_note`). Figures and their 95 %
intervals:

- rates over episodes with their Wilson interval: ``success`` (the scenario's success
  criterion), ``off_limits`` (the share of episodes whose true state left a safety limit);
- over episodes, the mean with a percentile bootstrap interval (2000 resamples, seed 0,
  :func:`vimpc.closedloop.metrics.bootstrap_interval`): ``tracking`` (tracking RMSE),
  ``coverage_closed_loop`` (the share of steps whose one-step error lay inside the bound),
  ``solve_median`` and ``solve_p95`` (each episode's median and 95th percentile solve time
  divided by the sampling period: 1 is a solve as long as the period);
- over the independent fits (``data.fits``), the mean with a Student t interval (none for
  one fit): ``one_step`` and ``multi_step`` (the fit summary's RMS prediction errors on the
  validation data, 1 and 20 steps, as the root mean square over the observation's entries,
  in their mixed SI units), ``energy_drift`` (the median over the fit's long unforced model
  rollouts of ``max |E_k - E_0|`` relative to the energy's range on the validation data,
  :func:`vimpc.models.evaluation.long_rollout_metrics`), ``constraint_residual`` (the
  largest holonomic, else nonholonomic, residual of the nominal system along those rollouts;
  empty for an unconstrained system), ``rollout_failed`` (the share of rollouts that
  failed), ``coverage_validation`` (the bound's coverage of the validation transitions).
  These intervals are cut to the figure's range (:data:`NONNEGATIVE`: errors at 0, shares
  at 0 and 1).

The verdict paragraph under the table is generated from its rows: in each system, data
budget and plant, every structure-preserving family (:data:`STRUCTURE`) is compared per
metric of :data:`VERDICT_METRICS` with the best black box (:data:`BLACK_BOX`: the black box
whose figure is best there): it *wins* where its interval lies wholly on the better side of
the black box's, *loses* where wholly on the worse side, and *ties* where they overlap (a
missing interval is no verdict). The coverages are not scored (a wider bound covers more:
they check the bound's promise), nor is ``nominal`` (the baseline, in the table).

The section after it sets the two worlds side by side (:func:`worlds_text`): for each system
and family run both on vimpc's own env and on the MuJoCo one, at each data budget as a
multiple of its scenario's, the success rate and the share of episodes off the safety limits
over the finished episodes of both plants, with their Wilson intervals.

``--keep TABLE``: the rows of an earlier ``structure_benchmark.csv`` for the configurations
the folders lack (or hold with no finished episode; a kept row without one never hides a
failure the folders note), so that a table summarised from sweep folders that no longer
exist grows by the configurations run since; the table says how many rows it kept, from
which file and commit (:func:`kept_rows`).

``--quick --out DIR``: a synthetic sweep folder of two systems (made by
:func:`synthetic_sweep`, its numbers invented), summarised end to end.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _quick import add_options, command, parse
from _tables import write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "structure_benchmark"
SWEEPS = ROOT / "results" / "sweeps"
NAME = "structure_benchmark"

#: the structure-preserving families, and the black boxes they are measured against
STRUCTURE = ("gp_vi", "lsi", "dlnn", "lnn", "clnn", "chnn", "hamel")
BLACK_BOX = ("gp_residual", "mlp_residual")
#: the families in the order the table and the figures show them
FAMILY_ORDER = ("nominal", *STRUCTURE, *BLACK_BOX)

#: metric -> (heading, better: "higher" or "lower")
METRICS: dict[str, tuple[str, str]] = {
    "success": ("success rate", "higher"),
    "off_limits": ("episodes off the safety limits", "lower"),
    "tracking": ("tracking RMSE", "lower"),
    "one_step": ("1-step prediction RMSE", "lower"),
    "multi_step": ("20-step prediction RMSE", "lower"),
    "energy_drift": ("energy drift (relative)", "lower"),
    "constraint_residual": ("constraint residual", "lower"),
    "rollout_failed": ("failed long rollouts", "lower"),
    "coverage_validation": ("bound coverage, validation", "higher"),
    "coverage_closed_loop": ("bound coverage, closed loop", "higher"),
    "solve_median": ("solve median / period", "lower"),
    "solve_p95": ("solve p95 / period", "lower"),
}
#: the metrics the verdict scores
VERDICT_METRICS = (
    "success",
    "off_limits",
    "tracking",
    "one_step",
    "multi_step",
    "energy_drift",
    "constraint_residual",
    "solve_p95",
)
#: the metrics drawn in each system's figure
FIGURE_METRICS = ("success", "off_limits", "tracking", "multi_step", "energy_drift", "solve_p95")


# -- intervals -------------------------------------------------------------------------------------


def wilson(successes: int, n: int) -> tuple[float, float, float]:
    """``(rate, low, high)``: a rate with its 95 % Wilson interval (NaN for ``n = 0``)."""
    from vimpc.closedloop.metrics import wilson_interval

    if n <= 0:
        return (math.nan, math.nan, math.nan)
    low, high = wilson_interval(successes, n)
    return (successes / n, low, high)


def bootstrap(values: Iterable[float]) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite ``values``: the percentile bootstrap interval of
    the mean (NaN for fewer than two values; the mean alone for one)."""
    from vimpc.closedloop.metrics import bootstrap_interval

    v = [float(x) for x in values if x is not None and np.isfinite(x)]
    if not v:
        return (math.nan, math.nan, math.nan)
    low, high = bootstrap_interval(v)
    return (float(np.mean(v)), low, high)


#: the figures over the fits that cannot leave ``[0, top]``: their Student t interval (symmetric,
#: so with three fits of very different errors its lower end can fall below 0) is cut there
NONNEGATIVE = {
    "one_step": math.inf,
    "multi_step": math.inf,
    "energy_drift": math.inf,
    "constraint_residual": math.inf,
    "rollout_failed": 1.0,
    "coverage_validation": 1.0,
}


def t_interval(values: Iterable[float]) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite ``values`` with the Student t 95 % interval of the
    mean (NaN ends for fewer than two values)."""
    from scipy.stats import t

    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(v.mean())
    if v.size < 2:
        return (mean, math.nan, math.nan)
    half = float(t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return (mean, mean - half, mean + half)


# -- reading the sweeps ------------------------------------------------------------------------------


def find_sweeps(root: Path = SWEEPS) -> list[Path]:
    """The benchmark sweep folders under ``root``: ``benchmark_*`` and ``benchmark_*.partial``
    (a finished one where both exist)."""
    found: dict[str, Path] = {}
    for path in sorted(root.glob("benchmark_*")):
        if not path.is_dir():
            continue
        name = path.name.removesuffix(".partial")
        if name not in found or not path.name.endswith(".partial"):
            found[name] = path
    return list(found.values())


def _configuration_folder(sweep: Path, cid: str) -> tuple[Path | None, bool]:
    """A configuration's run folder and whether it is complete (None: not begun)."""
    if (sweep / cid / "metrics.json").is_file():
        return sweep / cid, True
    if (sweep / f"{cid}.partial").is_dir():
        return sweep / f"{cid}.partial", False
    return None, False


def system_of(env: dict[str, Any]) -> tuple[str, str]:
    """``(system, world)`` of a resolved ``[env]`` table: ``"vimpc/CartPole-v0"`` ->
    ``("cartpole", "vimpc")``; a foreign env behind ``[env.adapter]`` (MuJoCo) is of the
    ``mujoco`` world, its system the adapter's catalog system."""
    adapter = env.get("adapter")
    if adapter:
        return str(adapter["system"]).lower(), "mujoco"
    name = env["id"].split("/")[-1].split(":")[-1]
    return name.rsplit("-v", 1)[0].lower(), "vimpc"


def where(row: dict[str, Any]) -> str:
    """The system a row belongs to in the verdict and the figures, its world told apart:
    ``"cartpole"`` (vimpc's own env), ``"cartpole (MuJoCo)"``."""
    return row["system"] if row["world"] == "vimpc" else f"{row['system']} (MuJoCo)"


def plant_of(env: dict[str, Any]) -> int | str:
    """The true plant of a resolved ``[env]`` table: vimpc's own env's ``param_seed``, or a
    MuJoCo env's MJCF file by name (``"cartpole_variant"``)."""
    kwargs = env.get("kwargs", {})
    if kwargs.get("xml_file"):
        return Path(kwargs["xml_file"]).stem
    return int(kwargs.get("param_seed", 0))


def failure_note(error: str | None) -> str:
    """The ``note`` of a configuration: ``""`` (none), else ``"failed: "``, the error's type
    and the last line of what ``vimpc sweep`` recorded of it (CasADi's cause ends there),
    cut to 160 characters."""
    lines = [line.strip() for line in str(error or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    kind, _, first = lines[0].partition(": ")
    text = f"{kind}: {lines[-1] if len(lines) > 1 else first}" if first else lines[0]
    return "failed: " + (text if len(text) <= 160 else text[:159] + "…")


def read_configuration(
    sweep: Path, entry: dict[str, Any], error: str | None = None
) -> dict[str, Any] | None:
    """One configuration of a sweep: its settings, per-episode metrics and fit records
    (None when it has not begun); ``error``: what ``vimpc sweep`` recorded of its failure."""
    folder, complete = _configuration_folder(sweep, entry["id"])
    if folder is None:
        return None
    cfg = tomllib.loads((folder / "config.resolved.toml").read_text(encoding="utf-8"))
    requested = int(cfg["episodes"]["count"])
    if complete:
        metrics = json.loads((folder / "metrics.json").read_text())
        fits = metrics.get("fits") or [metrics.get("model")]
    else:
        manifest = json.loads((folder / "run.json").read_text())
        fits = manifest.get("fits") or [manifest.get("model")]
    episodes = []
    for k in range(requested):
        record = folder / f"episode_{k:03d}.json"
        if record.is_file() and (folder / f"episode_{k:03d}.npz").is_file():
            episodes.append(json.loads(record.read_text())["metrics"])
    system, world = system_of(cfg["env"])
    return {
        "sweep": sweep.name.removesuffix(".partial"),
        "id": entry["id"],
        "system": system,
        "world": world,
        "family": cfg["model"]["family"],
        "budget": int(cfg["data"]["trajectories"]),
        "plant": plant_of(cfg["env"]),
        "requested": requested,
        "complete": complete,
        "episodes": episodes,
        "fits": [f.get("fit") for f in fits if f is not None and f.get("fit")],
        "note": failure_note(error) if not complete else "",
    }


CELL = ("system", "world", "family", "budget", "plant")


def read_sweeps(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Every begun configuration of the sweep ``folders``, one per cell (system, world,
    family, budget, plant): where folders share a cell (a configuration run again in a sweep
    of its own after it failed), the one with the most finished episodes, the later folder's
    on a tie."""
    cells: dict[tuple, dict[str, Any]] = {}
    for sweep in folders:
        manifest = json.loads((sweep / "sweep.json").read_text())
        failed = manifest.get("failed") or {}
        for entry in manifest["configurations"]:
            found = read_configuration(sweep, entry, failed.get(entry["id"]))
            if found is None:
                continue
            key = tuple(found[k] for k in CELL)
            if key not in cells or len(found["episodes"]) >= len(cells[key]["episodes"]):
                cells[key] = found
    return list(cells.values())


# -- the table ---------------------------------------------------------------------------------------


def _rms(values: Sequence[float | None] | None) -> float:
    """The root mean square over a fit report's per-entry RMSEs (NaN where one is missing)."""
    if not values or any(v is None for v in values):
        return math.nan
    return float(np.sqrt(np.mean(np.square(values))))


def _fit_figure(fit: dict[str, Any], metric: str) -> float:
    rollout = fit.get("long_rollout") or {}
    value: Any
    if metric == "one_step":
        return _rms(fit.get("one_step_rmse"))
    if metric == "multi_step":
        return _rms(fit.get("multi_step_rmse"))
    if metric == "energy_drift":
        value = rollout.get("energy_drift_median")
    elif metric == "constraint_residual":
        value = rollout.get("holonomic_residual_max", rollout.get("nonholonomic_residual_max"))
    elif metric == "rollout_failed":
        value = rollout.get("rollout_failed_share")
    elif metric == "coverage_validation":
        value = fit.get("validation_coverage")
    else:
        raise KeyError(metric)
    return math.nan if value is None else float(value)


def row_of(c: dict[str, Any]) -> dict[str, Any]:
    """A configuration's row: its keys, then each metric as ``<metric>``, ``<metric>_lo`` and
    ``<metric>_hi``."""
    eps = c["episodes"]
    row: dict[str, Any] = {
        "system": c["system"],
        "world": c["world"],
        "family": c["family"],
        "budget": c["budget"],
        "plant": c["plant"],
        "episodes": f"{len(eps)}/{c['requested']}",
        "fits": len(c["fits"]),
        "note": c.get("note", ""),
    }
    figures: dict[str, tuple[float, float, float]] = {}
    success = [m["success"] for m in eps if not math.isnan(m.get("success", math.nan))]
    figures["success"] = wilson(int(sum(success)), len(success))
    figures["off_limits"] = wilson(sum(m["violations"] > 0 for m in eps), len(eps))
    figures["tracking"] = bootstrap(m.get("tracking_rmse") for m in eps)
    figures["coverage_closed_loop"] = bootstrap(m.get("coverage") for m in eps)
    for key, field in (
        ("solve_median", "solve_time_median_ms"),
        ("solve_p95", "solve_time_p95_ms"),
    ):
        figures[key] = bootstrap(m[field] / m["period_ms"] for m in eps)
    for key in (
        "one_step",
        "multi_step",
        "energy_drift",
        "constraint_residual",
        "rollout_failed",
        "coverage_validation",
    ):
        figures[key] = t_interval(_fit_figure(f, key) for f in c["fits"])
    for key, top in NONNEGATIVE.items():  # the t interval cut to the figure's range
        value, low, high = figures[key]
        figures[key] = (value, max(low, 0.0), min(high, top)) if np.isfinite(low) else figures[key]
    for key in METRICS:
        value, low, high = figures[key]
        row[key], row[f"{key}_lo"], row[f"{key}_hi"] = value, low, high
    return row


def table_rows(configurations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows, ordered by system, budget, plant and family."""
    return [row_of(c) for c in sorted(configurations, key=_order)]


def _order(row: dict[str, Any]):
    """A row's (or a configuration's) place in the table."""
    family = row["family"]
    rank = FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)
    return (row["world"], row["system"], row["budget"], str(row["plant"]), rank, family)


KEY = ("system", "world", "family", "budget", "plant")


def cell_of(row: dict[str, Any]) -> tuple[str, ...]:
    """A row's configuration (:data:`KEY`), as text: a row read back from a CSV compares
    equal to the one it was written from."""
    return tuple(str(row[k]) for k in KEY)


def kept_rows(table: Path, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the CSV ``table`` (a ``structure_benchmark.csv``) whose configuration
    (:data:`KEY`) is not among ``rows`` with a finished episode, read back to their types; a
    kept row without a finished episode does not replace a row of ``rows`` that says why its
    configuration failed."""
    import csv

    have = {cell_of(r) for r in rows if not r["episodes"].startswith("0/")}
    failed = {cell_of(r) for r in rows if r["note"]}
    with open(table, newline="", encoding="utf-8") as f:
        found = list(csv.DictReader(f))
    for r in found:  # a table made before the note column: no failure was noted
        r.setdefault("note", "")
    if not found or set(found[0]) != set(rows[0] if rows else found[0]):
        missing = sorted(set(rows[0]) - set(found[0])) if rows and found else []
        raise SystemExit(f"--keep {table}: not a structure benchmark table (columns {missing})")
    out = []
    for r in found:
        if cell_of(r) in have or (cell_of(r) in failed and r["episodes"].startswith("0/")):
            continue
        row: dict[str, Any] = dict(r)
        row["budget"], row["fits"] = int(r["budget"]), int(r["fits"])
        row["plant"] = int(r["plant"]) if r["plant"].lstrip("-").isdigit() else r["plant"]
        for key in METRICS:
            for col in (key, f"{key}_lo", f"{key}_hi"):
                row[col] = float(r[col]) if r[col] not in ("", "nan") else math.nan
        out.append(row)
    return out


def _relative(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _commit_of(path: Path) -> str:
    """The commit that last changed ``path`` (``"uncommitted"`` where it differs from it)."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("log", "-1", "--format=%h", "--", str(path.resolve()))
    dirty = git("status", "--porcelain", "--", str(path.resolve()))
    return "uncommitted" if not commit or dirty else commit


# -- the verdict -------------------------------------------------------------------------------------


def compare(row: dict[str, Any], other: dict[str, Any], metric: str) -> str | None:
    """``"wins"``, ``"ties"`` or ``"loses"``: where ``row``'s interval of ``metric`` lies
    against ``other``'s (wholly on the better side, overlapping, wholly on the worse side);
    None where either interval is missing."""
    lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
    olo, ohi = other[f"{metric}_lo"], other[f"{metric}_hi"]
    if not all(np.isfinite(x) for x in (lo, hi, olo, ohi)):
        return None
    higher = METRICS[metric][1] == "higher"
    if (lo > ohi) if higher else (hi < olo):
        return "wins"
    if (hi < olo) if higher else (lo > ohi):
        return "loses"
    return "ties"


def best_black_box(rows: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The black-box row of ``rows`` with the best finite figure of ``metric``."""
    boxes = [r for r in rows if r["family"] in BLACK_BOX and np.isfinite(r[metric])]
    if not boxes:
        return None
    sign = -1.0 if METRICS[metric][1] == "higher" else 1.0
    return min(boxes, key=lambda r: sign * r[metric])


def verdicts(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, int]]:
    """``{(system, metric, family): {"wins": n, "ties": n, "loses": n}}`` over the system's
    cells (data budget and plant), each structure-preserving family against the best black
    box of the cell."""
    cells: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((where(r), r["budget"], r["plant"]), []).append(r)
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    for (system, _, _), members in cells.items():
        for metric in VERDICT_METRICS:
            best = best_black_box(members, metric)
            if best is None:
                continue
            for r in members:
                if r["family"] not in STRUCTURE:
                    continue
                outcome = compare(r, best, metric)
                if outcome is None:
                    continue
                counts = out.setdefault(
                    (system, metric, r["family"]), {"wins": 0, "ties": 0, "loses": 0}
                )
                counts[outcome] += 1
    return out


def verdict_text(rows: Sequence[dict[str, Any]]) -> str:
    """The summary paragraph, generated from the table's rows."""
    found = verdicts(rows)
    systems = list(dict.fromkeys(where(r) for r in rows))
    lines = [
        "## Verdict",
        "",
        "Generated from the table: per system and metric, each structure-preserving family "
        "against the best black box of every data budget and plant (wins: its 95 % interval "
        "wholly on the better side; ties: the intervals overlap; loses: wholly on the worse "
        "side; cells without both intervals are not counted).",
        "",
    ]
    for system in systems:
        mine = [r for r in rows if where(r) == system]
        if not any(r["family"] in BLACK_BOX for r in mine):
            present = ", ".join(dict.fromkeys(r["family"] for r in mine))
            lines.append(
                f"- **{system}**: no black-box family in its sweep yet ({present}): no verdict."
            )
            continue
        parts = []
        for metric in VERDICT_METRICS:
            per_family = [
                (family, found[(system, metric, family)])
                for family in STRUCTURE
                if (system, metric, family) in found
            ]
            if not per_family:
                continue
            said = "; ".join(
                f"{family} {c['wins']} won, {c['ties']} tied, {c['loses']} lost"
                for family, c in per_family
            )
            parts.append(f"{METRICS[metric][0]}: {said}")
        text = ". ".join(parts) if parts else "no metric with intervals on both sides"
        lines.append(f"- **{system}** (of {len(_cells(mine))} budget x plant cells): {text}.")
        failed = failures(mine)
        if failed:
            lines.append(f"  Configurations that failed (no verdict): {failed}.")
        absent = [f for f in STRUCTURE if f not in {r["family"] for r in mine}]
        if absent:
            lines.append(
                f"  Not run here: {', '.join(absent)} (the sweep files say which the system "
                "refuses and why)."
            )
    return "\n".join(lines)


def failures(rows: Sequence[dict[str, Any]]) -> str:
    """The configurations of ``rows`` that failed, by family: how many of the family's cells,
    how many of them before a single finished episode, and each distinct cause once
    (``""``: none failed)."""
    said = []
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        failed = [r for r in mine if r["note"].startswith("failed")]
        if not failed:
            continue
        empty = sum(r["episodes"].startswith("0/") for r in failed)
        causes = "; ".join(dict.fromkeys(r["note"].removeprefix("failed: ") for r in failed))
        said.append(f"{family} {len(failed)} of {len(mine)} ({empty} before an episode: {causes})")
    return ", ".join(said)


def _cells(rows: Sequence[dict[str, Any]]) -> set[tuple[int, int]]:
    return {(r["budget"], r["plant"]) for r in rows}


#: the data budgets of a system's sweep, smallest first, as multiples of its scenario's own
BUDGET_MULTIPLES = ("x0.25", "x1", "x4")
#: the rates :func:`worlds_text` pools over a cell's plants
WORLD_RATES = ("success", "off_limits")


def pooled_rate(rows: Sequence[dict[str, Any]], metric: str) -> tuple[float, float, float, int]:
    """``(rate, low, high, n)``: the rate ``metric`` over every finished episode of ``rows``
    (each row's rate times its finished episodes, ``episodes = "k/n"``), with its Wilson
    interval; NaN where no row has a finished episode with the rate."""
    hits, n = 0, 0
    for r in rows:
        done = int(str(r["episodes"]).split("/")[0])
        if done and np.isfinite(r[metric]):
            hits += round(r[metric] * done)
            n += done
    return (*wilson(hits, n), n)


def worlds_text(rows: Sequence[dict[str, Any]]) -> str:
    """The section that sets the two worlds side by side: for every system and family run in
    both (vimpc's own env and the MuJoCo one), at each data budget as a multiple of its
    scenario's (:data:`BUDGET_MULTIPLES`; the worlds' trajectory counts differ), each rate of
    :data:`WORLD_RATES` pooled over the plants (``""``: no system in both worlds yet)."""
    budgets: dict[tuple[str, str], set[int]] = {}
    for r in rows:
        budgets.setdefault((r["system"], r["world"]), set()).add(int(r["budget"]))
    multiples = {
        (*where, budget): multiple
        for where, sizes in budgets.items()
        if len(sizes) == len(BUDGET_MULTIPLES)
        for budget, multiple in zip(sorted(sizes), BUDGET_MULTIPLES, strict=True)
    }
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        multiple = multiples.get((r["system"], r["world"], int(r["budget"])))
        if multiple is not None:
            by.setdefault((r["system"], r["family"], multiple), []).append(r)
    table = []
    systems = dict.fromkeys(r["system"] for r in rows)
    for system in systems:
        for family in FAMILY_ORDER:
            for multiple in BUDGET_MULTIPLES:
                mine = by.get((system, family, multiple), [])
                own = [r for r in mine if r["world"] == "vimpc"]
                foreign = [r for r in mine if r["world"] == "mujoco"]
                if not (own and foreign):
                    continue
                cells = [
                    f"{system} | {family} | {multiple} ({own[0]['budget']} / "
                    f"{foreign[0]['budget']})"
                ]
                for metric in WORLD_RATES:
                    for world in (own, foreign):
                        rate, low, high, n = pooled_rate(world, metric)
                        cells.append(
                            f"{_shown(rate, low, high)} (n {n})" if n else "- (no episode)"
                        )
                table.append(f"| {' | '.join(cells)} |")
    if not table:
        return ""
    heads = [f"{METRICS[m][0]}, {world}" for m in WORLD_RATES for world in ("own env", "MuJoCo")]
    return "\n".join(
        [
            "## The two worlds",
            "",
            "Every system and family run on vimpc's own env and on the MuJoCo one, at each "
            "data budget as a multiple of its scenario's (the trajectory counts, own / "
            "MuJoCo, in brackets): each rate over the finished episodes of both plants "
            "together, with its Wilson 95 % interval (n: episodes).",
            "",
            f"| system | family | budget | {' | '.join(heads)} |",
            "|" + "---|" * (3 + len(heads)),
            *table,
        ]
    )


# -- writing -----------------------------------------------------------------------------------------


def _shown(value: float, low: float, high: float) -> str:
    if not np.isfinite(value):
        return "-"
    if not (np.isfinite(low) and np.isfinite(high)):
        return f"{value:.3g}"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]"


def markdown_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the markdown table shows them: each figure with its interval in one cell."""
    keys = ("system", "world", "family", "budget", "plant", "episodes", "fits")
    return [
        {
            **{k: r[k] for k in keys},
            **{m: _shown(r[m], r[f"{m}_lo"], r[f"{m}_hi"]) for m in METRICS},
            "note": r["note"].replace("|", "/"),
        }
        for r in rows
    ]


def figure(rows: Sequence[dict[str, Any]], system: str, path: Path) -> None:
    """One system's figure: a panel per metric of :data:`FIGURE_METRICS`, the data budgets on
    the x axis, the families side by side, each plant its own marker, intervals drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if where(r) == system]
    budgets = sorted({r["budget"] for r in mine})
    families = [f for f in FAMILY_ORDER if any(r["family"] == f for r in mine)]
    families += sorted({r["family"] for r in mine} - set(families))
    plants = sorted({r["plant"] for r in mine}, key=str)
    width = 0.8 / max(len(families), 1)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), squeeze=False)
    colours = plt.get_cmap("tab10")
    markers = "osD^v"
    for ax, metric in zip(axes.flat, FIGURE_METRICS, strict=True):
        for i, family in enumerate(families):
            for j, plant in enumerate(plants):
                pts = [r for r in mine if r["family"] == family and r["plant"] == plant]
                if not pts:
                    continue
                x = np.array([budgets.index(r["budget"]) for r in pts], dtype=float)
                x += -0.4 + width * (i + 0.5) + (j - (len(plants) - 1) / 2) * width * 0.3
                y = np.array([r[metric] for r in pts])
                lo = np.array([r[f"{metric}_lo"] for r in pts])
                hi = np.array([r[f"{metric}_hi"] for r in pts])
                err = np.vstack(
                    [np.where(np.isfinite(lo), y - lo, 0), np.where(np.isfinite(hi), hi - y, 0)]
                )
                ax.errorbar(
                    x, y, yerr=np.maximum(err, 0), fmt=markers[j % len(markers)],
                    color=colours(i % 10), capsize=2, ms=4,
                )  # fmt: skip
        ax.set_xticks(range(len(budgets)), [str(b) for b in budgets])
        ax.set_xlabel("training trajectories (data budget)")
        ax.set_title(f"{METRICS[metric][0]} ({METRICS[metric][1]} is better)", fontsize=10)
        if metric in ("tracking", "multi_step", "energy_drift"):
            finite = [r[metric] for r in mine if np.isfinite(r[metric]) and r[metric] > 0]
            if finite:
                ax.set_yscale("log")
        ax.grid(alpha=0.3)
    # one legend entry per family (its colour) and per plant (its marker), not per pair
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=colours(i % 10), marker="o", linestyle="", label=family)
        for i, family in enumerate(families)
    ] + [
        Line2D([], [], color="0.3", marker=markers[j % len(markers)], linestyle="",
               label=f"plant {plant}")
        for j, plant in enumerate(plants)
    ]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=9)
    fig.suptitle(f"structure benchmark, {system}: 95 % intervals (Wilson, bootstrap, t)")
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def summarise(
    folders: Sequence[Path], out: Path, cmd: str, keep: Path | None = None
) -> list[dict[str, Any]]:
    """Read the sweep ``folders`` (and the rows of ``keep`` they lack, :func:`kept_rows`),
    write the table, the figures and the verdict into ``out``; returns the table's rows (CSV
    columns)."""
    configurations = read_sweeps(folders)
    if not configurations:
        raise SystemExit(
            f"no configuration with results in {', '.join(str(f) for f in folders) or '-'}; "
            "run vimpc sweep scenarios/sweeps/benchmark_<system>.toml first"
        )
    rows = table_rows(configurations)
    kept = kept_rows(keep, rows) if keep is not None else []
    if kept:
        have = {cell_of(k) for k in kept}
        rows = [r for r in rows if cell_of(r) not in have]
        rows = sorted([*rows, *kept], key=_order)
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for system in dict.fromkeys(where(r) for r in rows):
        path = out / f"{NAME}_{system.replace(' (MuJoCo)', '_mujoco')}.png"
        figure(rows, system, path)
        figures.append(path.name)
    sources = ", ".join(f"`{f.name}`" for f in folders)
    kept_text = (
        f" {len(kept)} rows (configurations those folders lack) are kept from "
        f"`{_relative(keep)}` at commit {_commit_of(keep)}, summarised from earlier folders."
        if kept
        else ""
    )
    intro = (
        f"From the sweep folders {sources}.{kept_text} A row per system, family, data budget "
        "(training trajectories) and plant (param_seed of vimpc's own env, the MJCF file of a "
        "MuJoCo one): each figure with its 95 % interval "
        "(rates: Wilson over episodes; tracking, closed-loop coverage and solve times over "
        "the period: bootstrap over episodes; prediction errors, energy drift, constraint "
        "residual, failed rollouts and validation coverage: Student t over the fits, cut at "
        "0 and, for the shares, at 1). The note says why a configuration the sweep recorded "
        "as failed stopped (its error's last line). "
        "The definitions are in the script's docstring."
    )
    headers = {**{m: METRICS[m][0] for m in METRICS}, "note": "note"}
    write_table(
        out, NAME, "Structure benchmark: structure-preserving models against black boxes",
        cmd, intro, markdown_rows(rows), headers=headers,
        after="\n\n".join(t for t in (verdict_text(rows), worlds_text(rows)) if t),
        outputs=figures,
    )  # fmt: skip
    # write_table's CSV has the markdown's cells: the CSV keeps every interval end instead
    write_csv_rows(out, rows)
    return rows


def write_csv_rows(out: Path, rows: Sequence[dict[str, Any]]) -> None:
    """``out/structure_benchmark.csv``: every column at full precision."""
    import csv

    with open(out / f"{NAME}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


# -- a synthetic sweep (the quick mode and the tests) ------------------------------------------------


def synthetic_sweep(
    folder: Path,
    name: str,
    env_id: str,
    configurations: Sequence[dict[str, Any]],
) -> Path:
    """Write a sweep folder ``folder/name.partial`` in the layout ``vimpc sweep`` writes, with
    invented numbers: each configuration a dict with ``family``, ``budget``, ``plant``,
    ``episodes`` (per-episode metrics: ``success``, ``violations``, ``tracking_rmse``,
    ``solve_time_median_ms``, ``solve_time_p95_ms``, ``period_ms``, optionally ``coverage``),
    ``fits`` (fit summaries), ``requested`` (episodes asked for; default: as many as given),
    ``complete`` (a finished run folder, or an unfinished one) and ``error`` (what the sweep
    records of a configuration that failed)."""
    sweep = folder / f"{name}.partial"
    sweep.mkdir(parents=True)
    entries, failed = [], {}
    for i, c in enumerate(configurations):
        cid = f"c{i:02d}"
        entries.append({"id": cid, "overrides": {"model.family": c["family"]}})
        if c.get("error"):
            failed[cid] = c["error"]
        complete = c.get("complete", True)
        run = sweep / (cid if complete else f"{cid}.partial")
        run.mkdir()
        requested = c.get("requested", len(c["episodes"]))
        (run / "config.resolved.toml").write_text(
            f'[env]\nid = "{env_id}"\nkwargs = {{ param_seed = {c["plant"]} }}\n'
            f'[data]\ntrajectories = {c["budget"]}\n[model]\nfamily = "{c["family"]}"\n'
            f"[episodes]\ncount = {requested}\n"
        )
        fits = [{"fit": f} for f in c["fits"]]
        record = {"model": fits[0] if fits else None, "fits": fits}
        (run / ("metrics.json" if complete else "run.json")).write_text(json.dumps(record))
        for k, m in enumerate(c["episodes"]):
            (run / f"episode_{k:03d}.json").write_text(json.dumps({"seed": k, "metrics": m}))
            (run / f"episode_{k:03d}.npz").write_bytes(b"")
    (sweep / "sweep.json").write_text(json.dumps({"configurations": entries, "failed": failed}))
    return sweep


def synthetic_episodes(
    rng: np.random.Generator, n: int, success: float, tracking: float, solve_ms: float
) -> list[dict[str, Any]]:
    """``n`` invented episodes: successes with probability ``success``, tracking RMSEs and
    solve times around ``tracking`` and ``solve_ms`` (a 50 ms period), one violation in
    four failures."""
    out = []
    for _ in range(n):
        ok = bool(rng.random() < success)
        median = solve_ms * rng.uniform(0.8, 1.2)
        out.append(
            {
                "success": float(ok),
                "violations": int((not ok) and rng.random() < 0.25),
                "tracking_rmse": tracking * rng.uniform(0.8, 1.2),
                "solve_time_median_ms": median,
                "solve_time_p95_ms": 2 * median,
                "period_ms": 50.0,
                "coverage": rng.uniform(0.9, 1.0),
            }
        )
    return out


def synthetic_fit(rng: np.random.Generator, error: float, drift: float) -> dict[str, Any]:
    """An invented fit summary with prediction errors around ``error`` and energy drift
    around ``drift``."""
    return {
        "one_step_rmse": (error * rng.uniform(0.9, 1.1, 2)).tolist(),
        "multi_step_rmse": (10 * error * rng.uniform(0.9, 1.1, 2)).tolist(),
        "validation_coverage": rng.uniform(0.94, 0.96),
        "long_rollout": {
            "energy_drift_median": drift * rng.uniform(0.9, 1.1),
            "rollout_failed_share": 0.0,
        },
    }


def quick_sweeps(folder: Path) -> list[Path]:
    """Two invented sweeps: a pendulum with a black box (a structured family better in
    closed loop) and a rolling disk without one."""
    rng = np.random.default_rng(0)
    pendulum = []
    for budget in (10, 40):
        for family, success, error in (("nominal", 0.3, 0.1), ("gp_vi", 0.9, 0.01),
                                       ("mlp_residual", 0.5, 0.02)):  # fmt: skip
            pendulum.append(
                {
                    "family": family, "budget": budget, "plant": 0,
                    "episodes": synthetic_episodes(rng, 6, success, 0.1 / success, 3.0),
                    "fits": [synthetic_fit(rng, error, 1e-3) for _ in range(2)],
                }
            )  # fmt: skip
    disk = [
        {
            "family": family, "budget": 75, "plant": 0, "requested": 6, "complete": False,
            "episodes": synthetic_episodes(rng, 3, 0.8, 0.05, 5.0),
            "fits": [synthetic_fit(rng, 0.01, 1e-4)],
        }
        for family in ("nominal", "hamel")
    ]  # fmt: skip
    return [
        synthetic_sweep(folder, "benchmark_pendulum", "vimpc/Pendulum-v0", pendulum),
        synthetic_sweep(folder, "benchmark_rollingdisk", "vimpc/RollingDisk-v0", disk),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "sweeps",
        nargs="*",
        type=Path,
        help="sweep folders (default: results/sweeps/benchmark_*, finished or not)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="an earlier structure_benchmark.csv: its rows for the configurations the "
        "folders lack are kept",
    )
    add_options(parser, OUT)
    args = parse(parser, argv, OUT)
    if args.keep is not None and not args.keep.is_file():
        parser.error(f"--keep: no such table {args.keep}")
    cmd = command(__file__, args.argv)
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            rows = summarise(quick_sweeps(Path(tmp)), args.out, cmd)
    else:
        rows = summarise(args.sweeps or find_sweeps(), args.out, cmd, keep=args.keep)
    print((args.out / f"{NAME}.md").read_text())
    print(f"{len(rows)} rows: {args.out / NAME}.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
