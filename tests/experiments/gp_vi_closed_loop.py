"""Closed loop with the learned GP-VI model against the nominal model, on true systems with
large friction the nominal model lacks, and how its success depends on the success threshold.

    python tests/experiments/gp_vi_closed_loop.py [--seed 1000] [--episodes 50] [--workers 2]
    python tests/experiments/gp_vi_closed_loop.py --report-only

For each scenario below, ``vimpc run`` twice on the same episodes (reset seeds ``seed ..
seed + episodes - 1``, disjoint from the seeds the scenarios were written on): as written
(the GP-VI model) and with its ``[model]`` table replaced by the nominal midpoint model
(everything else, the controller included, unchanged).

Of every episode it keeps the error the scenario's success test decides on
(:func:`success_error`: the distance of the ``[metrics]`` success entry from its target or
reference at every step, the same quantity and window as
:func:`vimpc.pipeline.success_test`, checked against each episode's recorded success) in
``results/gp_vi/closed_loop_episodes.npz``, and from those errors writes:

- ``closed_loop.{csv,md}``: the run metrics per scenario and model, the error figures, the
  success-rate sweep tables and the sentences on how the ranking depends on the threshold;
- ``closed_loop_error_<scenario>.png``: the error over time, every episode, the median and
  the 10-90 % band per model, the threshold and the window it applies in;
- ``closed_loop_threshold.csv`` and ``closed_loop_threshold_<scenario>.png``: the success
  rate per model at :data:`SCALES` times the scenario's threshold (a tenth to ten times,
  log-spaced), with 95 % Wilson intervals.

``--report-only`` rewrites these from the stored errors without running anything.
``--quick --out DIR``: a smoke test into ``DIR``: the first scenario only, one episode of 3
steps per run, in this process, the GP-VI fitted on a few short trajectories
(``QUICK_SETS``).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import tomllib
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from _quick import add_options, parse
from _tables import CLOSED_LOOP_HEADERS, closed_loop_row, nominal_variant, vimpc_run, write_table

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "gp_vi"
SCENARIOS = ("pendulum_gpvi_swingup", "fourbar_gpvi_tracking")
MODELS = ("GP-VI", "nominal")
# --quick: every run on 4 trajectories of 5 steps and 3 control steps; the GP-VI with 16
# samples, 8 support points, one start of 5 optimiser steps
QUICK_SETS = ["data.trajectories=4", "data.steps=5", "episodes.steps=3"]
QUICK_MODEL = ["model.samples=16", "model.support_points=8", "model.restarts=1",
               "model.iterations=5"]  # fmt: skip
#: the thresholds of the sweep as multiples of the scenario's: 15 log-spaced from a tenth to
#: ten times, the middle one exactly the scenario's
SCALES = 10.0 ** (np.arange(-7, 8) / 7)
STORE = "closed_loop_episodes.npz"


# -- the success test's error --------------------------------------------------------------------


def success_error(traj, metrics: dict[str, Any]) -> tuple[np.ndarray, float]:
    """``(error, threshold)``: the error the success test of the ``[metrics]`` table
    ``metrics`` compares at every step of ``traj`` (``(T+1,)``), and the threshold it must
    stay within over the window. One success entry: its distance from the target (or the
    controller's reference), wrapped for an angle, and its tolerance. Several: the largest
    distance in units of each entry's tolerance, and 1."""
    index = np.atleast_1d(np.asarray(metrics["success_index"], dtype=int))
    tol = np.broadcast_to(np.asarray(metrics["success_tolerance"], np.float64), index.shape)
    periodic = np.broadcast_to(np.asarray(metrics["success_periodic"], bool), index.shape)
    if metrics["success_against_reference"]:
        goal = traj.reference[:, index]
    else:
        goal = np.broadcast_to(np.asarray(metrics["success_target"], np.float64), index.shape)
    diff = traj.states[:, index] - goal
    diff = np.abs(np.where(periodic, np.angle(np.exp(1j * diff)), diff))
    if index.size == 1:
        return diff[:, 0], float(tol[0])
    return (diff / tol).max(axis=1), 1.0


def kept_errors(folder: Path, episodes: int) -> dict[str, Any]:
    """The success test's errors of the ``episodes`` episodes kept in the run ``folder``,
    with what names them; each episode's success recomputed from its error must equal the
    one its run recorded and :func:`vimpc.pipeline.success_test`'s, or SystemExit."""
    from vimpc.pipeline import success_test
    from vimpc.plotting.success import window_worst
    from vimpc.runs import store
    from vimpc.scenario.specs import EnvSpec

    cfg = tomllib.loads((folder / "config.resolved.toml").read_text())
    m = cfg["metrics"]
    test = success_test(cfg)
    errors, seeds, recorded, t = [], [], [], None
    for k in range(episodes):
        traj, metrics = store.load_episode(folder, k)
        error, threshold = success_error(traj, m)
        if t is not None and not np.array_equal(traj.t, t):
            raise SystemExit(f"{folder}: episode {k} has other times than episode 0")
        t = traj.t
        mine = bool(window_worst(t, error[None], m["success_window"])[0] <= threshold)
        if not mine == bool(metrics["success"]) == test(traj):
            raise SystemExit(
                f"{folder}: episode {k} (seed {traj.seed}): success from the kept error "
                f"{mine}, recorded {metrics['success']}, success_test {test(traj)}"
            )
        errors.append(error)
        seeds.append(traj.seed)
        recorded.append(metrics["success"])
    env = EnvSpec(cfg)
    index = np.atleast_1d(np.asarray(m["success_index"], dtype=int))
    names = [env.obs_names[i] for i in index]
    if index.size == 1:
        name, unit = f"|{names[0]} error|", env.nominal.state_units[index[0]]
    else:
        name, unit = f"largest |error| / tolerance of {', '.join(names)}", ""
    return {
        "t": t,
        "error": np.array(errors),
        "seeds": np.array(seeds),
        "recorded_success": np.array(recorded, dtype=np.float64),
        "threshold": threshold,
        "window": float(m["success_window"]),
        "name": name,
        "unit": unit,
        "against": "its reference" if m["success_against_reference"] else "its target",
    }


# -- stored errors -------------------------------------------------------------------------------


def save_store(path: Path, meta: dict[str, Any], kept: dict[tuple[str, str], dict]) -> None:
    """The errors of every run (``kept``: (scenario, model) -> :func:`kept_errors`) and
    ``meta`` (command, date, rows, ...) in one ``.npz``."""
    arrays, runs = {}, {}
    for (scenario, model), k in kept.items():
        for key in ("t", "error", "seeds", "recorded_success"):
            arrays[f"{scenario}/{model}/{key}"] = k[key]
        runs.setdefault(scenario, {})[model] = {
            key: k[key] for key in ("threshold", "window", "name", "unit", "against")
        }
    arrays["meta"] = np.array(json.dumps({**meta, "runs": runs}))
    with open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)


def load_store(path: Path) -> tuple[dict[str, Any], dict[tuple[str, str], dict]]:
    """``(meta, kept)`` as :func:`save_store` wrote them."""
    if not path.exists():
        raise SystemExit(
            f"--report-only reads the stored errors {path}, which does not exist; run the "
            "script without --report-only first"
        )
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        kept = {}
        for scenario, models in meta["runs"].items():
            for model, info in models.items():
                arrays = {
                    key: data[f"{scenario}/{model}/{key}"]
                    for key in ("t", "error", "seeds", "recorded_success")
                }
                kept[scenario, model] = {**info, **arrays}
    return meta, kept


# -- the report ----------------------------------------------------------------------------------


def _g(x: float) -> str:
    return f"{x:.3g}"


def ranking_segments(worst: dict[str, np.ndarray], low: float, high: float) -> list[dict]:
    """The thresholds ``[low, high]`` cut where the order of the two models' success rates
    (``worst``: model -> each episode's :func:`~vimpc.plotting.success.window_worst`)
    changes: each segment ``{"from", "to", "order", "rates"}`` with ``order`` +1 (the
    first model's rate above the second's), 0 (equal) or -1, and the two rates at its
    start. Rates change only at the episodes' worst errors, so this is exact, not sampled."""
    (a, wa), (b, wb) = worst.items()
    cuts = np.unique(np.concatenate([wa, wb]))
    cuts = cuts[np.isfinite(cuts) & (cuts > low) & (cuts <= high)]
    starts = np.concatenate([[low], cuts])
    segments: list[dict] = []
    for i, s in enumerate(starts):
        ra, rb = float(np.mean(wa <= s)), float(np.mean(wb <= s))
        order = int(np.sign(ra - rb))
        end = starts[i + 1] if i + 1 < len(starts) else high
        if segments and segments[-1]["order"] == order and order != 0:
            segments[-1]["to"] = end
        elif (
            segments
            and order == 0
            and segments[-1]["order"] == 0
            and (segments[-1]["rates"] == (ra, rb))
        ):
            segments[-1]["to"] = end
        else:
            segments.append({"from": float(s), "to": float(end), "order": order, "rates": (ra, rb)})
    return segments


def ranking_text(scenario: str, kept: dict[tuple[str, str], dict]) -> str:
    """Sentences, computed from the stored errors, on how the two models' success depends
    on the threshold of ``scenario``."""
    from vimpc._text import count
    from vimpc.plotting.success import window_worst

    first = kept[scenario, MODELS[0]]
    tau, unit = first["threshold"], first["unit"]
    worst = {
        m: window_worst(kept[scenario, m]["t"], kept[scenario, m]["error"], first["window"])
        for m in MODELS
    }
    low, high = tau * SCALES[0], tau * SCALES[-1]

    def at(x: float) -> str:
        return f"{_g(x)} {unit} ({_g(x / tau)}x)".replace("  ", " ")

    lines = []
    for m, w in worst.items():
        finite = w[np.isfinite(w)]
        nan = w.size - finite.size
        lines.append(
            f"- {m}: over the last {first['window']:g} s the episodes' largest error is "
            f"{_g(finite.min())} {unit} at best, {_g(np.median(w))} {unit} in the median "
            f"episode and {_g(finite.max())} {unit} at worst"
            + (f" ({nan} episodes with a NaN error fail at every threshold)" if nan else "")
            + f"; every episode succeeds from {at(finite.max())} on"
            + (
                ", below the swept thresholds"
                if finite.max() < low
                else ", within the swept thresholds"
                if finite.max() <= high
                else ", above the swept thresholds"
            )
            + "."
        )
    a, b = MODELS

    def described(segments: list[dict]) -> str:
        parts = []
        for s in segments:
            span = f"from {at(s['from'])} to {at(s['to'])}"
            ra, rb = s["rates"]
            if s["order"] > 0:
                parts.append(f"{span}: {a} succeeds more often than {b}")
            elif s["order"] < 0:
                parts.append(f"{span}: {b} succeeds more often than {a}")
            elif ra == rb == 0:
                parts.append(f"{span}: neither succeeds in any episode")
            elif ra == rb == 1:
                parts.append(f"{span}: both succeed in every episode")
            else:
                parts.append(f"{span}: both succeed at the rate {ra:.2f}")
        return "; ".join(parts)

    lines.append(
        f"- Ranking over the swept thresholds (exact: the rates change only at the episodes' "
        f"largest errors; each range holds its start, not its end, the last one both; x: times "
        f"the scenario's {_g(tau)} {unit}): {described(ranking_segments(worst, low, high))}."
    )
    below = ranking_segments(worst, 0.0, low)
    differ = [s for s in below if s["order"] != 0]
    if len(below) <= 3 or not differ:
        lines.append(f"- Below the swept thresholds: {described(below)}.")
    else:  # many short ranges where the models' episodes end within each other's spread
        n = min(len(w) for w in worst.values())
        wa, wb = worst.values()
        cuts = [c for c in np.concatenate([wa, wb]) if c < low]  # where the rates change
        gap = max(abs(np.mean(wa <= c) - np.mean(wb <= c)) for c in cuts)
        changes = sum(x["order"] != y["order"] for x, y in pairwise(differ))
        lines.append(
            f"- Below the swept thresholds the rates differ only from {at(differ[0]['from'])} "
            f"to {at(differ[-1]['to'])}, by at most {round(gap * n)} of {n} episodes, the "
            f"order changing {count(changes, 'time')} ({a} ahead over "
            f"{sum(s['order'] > 0 for s in differ)} ranges, {b} over "
            f"{sum(s['order'] < 0 for s in differ)})."
        )
    return "\n".join(lines)


def sweep_rows(scenario: str, kept: dict[tuple[str, str], dict]) -> list[dict[str, Any]]:
    """Rows of the threshold sweep of ``scenario`` (one per model and threshold)."""
    from vimpc.plotting.success import success_sweep, window_worst

    first = kept[scenario, MODELS[0]]
    worst = {
        m: window_worst(kept[scenario, m]["t"], kept[scenario, m]["error"], first["window"])
        for m in MODELS
    }
    sweep = success_sweep(worst, first["threshold"] * SCALES)
    rows = []
    for m in MODELS:
        s = sweep[m]
        for j, scale in enumerate(SCALES):
            rows.append(
                {
                    "scenario": scenario,
                    "model": m,
                    "threshold": float(first["threshold"] * scale),
                    "unit": first["unit"],
                    "times_scenario_threshold": float(scale),
                    "successes": int(s["successes"][j]),
                    "episodes": int(s["episodes"][j]),
                    "success_rate": float(s["rate"][j]),
                    "ci95_low": float(s["low"][j]),
                    "ci95_high": float(s["high"][j]),
                }
            )
    return rows


def sweep_markdown(rows: list[dict[str, Any]]) -> str:
    """One scenario's sweep as a markdown table, a column pair per model; a threshold where
    the models' 95 % intervals are disjoint is marked."""
    by = {(r["model"], r["times_scenario_threshold"]): r for r in rows}
    unit = rows[0]["unit"]
    head = [f"threshold [{unit}]" if unit else "threshold", "x scenario's"]
    for m in MODELS:
        head += [f"{m} success", f"{m} 95% CI"]
    head.append("intervals disjoint")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scale in SCALES:
        a, b = (by[m, float(scale)] for m in MODELS)
        cells = [_g(a["threshold"]), f"{scale:.3g}" + (" (scenario's)" if scale == 1 else "")]
        for r in (a, b):
            cells += [
                f"{r['successes']}/{r['episodes']}",
                f"{r['ci95_low']:.2f}-{r['ci95_high']:.2f}",
            ]
        disjoint = a["ci95_low"] > b["ci95_high"] or b["ci95_low"] > a["ci95_high"]
        cells.append("yes" if disjoint else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def significance_text(rows: list[dict[str, Any]]) -> str:
    """Where on the grid the two models' 95 % Wilson intervals are disjoint."""
    by = {(r["model"], r["times_scenario_threshold"]): r for r in rows}
    marks = []
    for scale in SCALES:
        a, b = (by[m, float(scale)] for m in MODELS)
        if a["ci95_low"] > b["ci95_high"]:
            marks.append((scale, MODELS[0]))
        elif b["ci95_low"] > a["ci95_high"]:
            marks.append((scale, MODELS[1]))
    if not marks:
        return (
            f"- At none of the {len(SCALES)} swept thresholds are the two 95 % Wilson "
            "intervals disjoint."
        )
    text = ", ".join(f"{s:.3g}x ({m} higher)" for s, m in marks)
    return (
        f"- The two 95 % Wilson intervals are disjoint at {len(marks)} of the {len(SCALES)} "
        f"swept thresholds: {text}."
    )


def report(out: Path, meta: dict[str, Any], kept: dict[tuple[str, str], dict]) -> str:
    """Write the tables, figures and markdown from the stored errors; returns the run
    table."""
    from vimpc.plotting import save
    from vimpc.plotting.success import (
        success_error_figure,
        success_sweep,
        success_sweep_figure,
        window_worst,
    )

    scenarios = list(meta["runs"])
    sections, all_rows = [], []
    for name in scenarios:
        first = kept[name, MODELS[0]]
        tau, unit, window = first["threshold"], first["unit"], first["window"]
        for m in MODELS[1:]:
            other = kept[name, m]
            if other["threshold"] != tau or other["window"] != window:
                raise SystemExit(f"{name}: {m}'s success test differs from {MODELS[0]}'s")
        label = f"success threshold {_g(tau)} {unit}".rstrip()
        fig = success_error_figure(
            first["t"],
            {m: kept[name, m]["error"] for m in MODELS},
            threshold=tau,
            window=window,
            name=first["name"],
            unit=unit,
            threshold_label=f"{label} (metrics.success_tolerance)",
            title=f"{name}: the error the success test reads, against {first['against']}",
        )
        save(fig, out / f"closed_loop_error_{name}.png")
        rows = sweep_rows(name, kept)
        all_rows += rows
        worst = {
            m: window_worst(kept[name, m]["t"], kept[name, m]["error"], window) for m in MODELS
        }
        fig = success_sweep_figure(
            tau * SCALES,
            success_sweep(worst, tau * SCALES),
            threshold=tau,
            unit=unit,
            threshold_label=f"scenario's {label}",
            title=f"{name}: success rate against the threshold",
        )
        save(fig, out / f"closed_loop_threshold_{name}.png")
        sections.append(
            f"## {name}\n\n"
            f"Success: {first['name']} within {_g(tau)} {unit} of {first['against']} at every "
            f"step of the last {window:g} s (the scenario's `[metrics]`).\n\n"
            f"![{name}: error over time](closed_loop_error_{name}.png)\n\n"
            f"Success rate at {len(SCALES)} thresholds from a tenth to ten times the "
            f"scenario's, log-spaced, from the same episodes:\n\n"
            f"{sweep_markdown(rows)}\n\n"
            f"![{name}: success against the threshold](closed_loop_threshold_{name}.png)\n\n"
            f"{ranking_text(name, kept)}\n{significance_text(rows)}"
        )
    with open(out / "closed_loop_threshold.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        writer.writeheader()
        writer.writerows(all_rows)
    intro = (
        f"{meta['intro']} The episodes ran on {meta['date']}. Below the table, the error each "
        "scenario's success test reads, and the success rate as its threshold changes, are "
        f"computed from every episode's error stored in `{STORE}`; "
        "`python tests/experiments/gp_vi_closed_loop.py --report-only` redraws them from it "
        "without running. The sweep's rows, at full precision, are in "
        "`closed_loop_threshold.csv`."
    )
    return write_table(
        out,
        "closed_loop",
        "GP-VI against the nominal model in closed loop",
        meta["command"],
        intro,
        meta["rows"],
        CLOSED_LOOP_HEADERS,
        "\n\n".join(sections),
    )


# -- the runs ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--report-only",
        action="store_true",
        help=f"rewrite the tables and figures from the stored errors ({STORE}) without running",
    )
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1, "workers": 1})
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        print(report(out, *load_store(out / STORE)))
        return
    sets = {"GP-VI": [*QUICK_SETS, *QUICK_MODEL], "nominal": QUICK_SETS} if args.quick else {}
    scenarios = SCENARIOS[:1] if args.quick else SCENARIOS
    rows, kept = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in scenarios:
            source = ROOT / "scenarios" / f"{name}.toml"
            variants = {
                "GP-VI": source,
                "nominal": nominal_variant(source, Path(tmp)),
            }
            for label, path in variants.items():
                m, folder = vimpc_run(
                    path, Path(tmp) / f"{name}-{label}", episodes=args.episodes,
                    seed=args.seed, workers=args.workers, sets=sets.get(label, []),
                    plots=not args.quick,
                )  # fmt: skip
                kept[name, label] = kept_errors(folder, args.episodes)
                rows.append(closed_loop_row(name, label, m))
                print(rows[-1])
    command = (
        "python tests/experiments/gp_vi_closed_loop.py "
        f"--seed {args.seed} --episodes {args.episodes} --workers {args.workers}"
    )
    frictions = "; ".join(
        f"{name}: {tomllib.loads((ROOT / 'scenarios' / f'{name}.toml').read_text())['env']['kwargs']['friction']}"
        for name in scenarios
    )
    intro = (
        "Each pair of rows runs one scenario on the same episodes (reset seeds "
        f"{args.seed}-{args.seed + args.episodes - 1}) with the GP-VI model it names and with "
        "its `[model]` table replaced by the nominal midpoint model; the true system has "
        f"viscous friction the nominal model lacks ({frictions}; N m s per joint)."
    )
    meta = {
        "command": command,
        "date": f"{datetime.now(UTC):%Y-%m-%d}",
        "intro": intro,
        "rows": rows,
    }
    save_store(out / STORE, meta, kept)
    print(report(out, *load_store(out / STORE)))


if __name__ == "__main__":
    main()
