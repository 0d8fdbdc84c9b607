"""Writing an experiment's table as CSV and markdown, and running a scenario for one (not a
test module).

Each script in this folder is run by hand from the repository root and writes its results
under ``results/<experiment>/`` with the command that made them. Each also takes ``--quick``
and ``--out`` (``_quick.py``); ``tests/test_scripts_quick.py`` runs every script's quick mode.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vimpc import _provenance

#: the folders whose scripts write results (a record names the script it was called from)
SCRIPT_FOLDERS = tuple(
    Path(__file__).resolve().parents[1] / f for f in ("experiments", "benchmarks")
)


def record(
    table: Path, command: str, outputs: Sequence[Path | str] = (), **fields: str | None
) -> Path:
    """Write ``table``'s provenance record (:func:`vimpc._provenance.write_record`): the
    command, the commit, the date and the hash of the calling script and every module of the
    project it imported; ``fields``: ``paper``, ``verdict``, ``settings_differ``."""
    script = _provenance.caller_script(SCRIPT_FOLDERS)
    return _provenance.write_record(
        table,
        command=command,
        script=script,
        outputs=outputs,
        root=SCRIPT_FOLDERS[0].parents[1],
        **fields,
    )


def interval(ci: Sequence[float]) -> str:
    """A 95 % interval as ``lo-hi``."""
    return f"{ci[0]:.2f}-{ci[1]:.2f}"


def _cell(value: Any) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|")  # a literal bar inside a markdown table cell


def write_table(
    folder: Path,
    name: str,
    title: str,
    command: str,
    intro: str,
    rows: Sequence[Mapping[str, Any]],
    headers: Mapping[str, str] | None = None,
    after: str = "",
    outputs: Sequence[Path | str] = (),
    **provenance: str | None,
) -> str:
    """Write ``folder/name.csv`` (every column at full precision) and ``folder/name.md``
    (title, the command and date, ``intro``, the table with ``headers`` naming the columns,
    then ``after``) and the table's provenance record (:func:`record`; ``provenance``:
    ``paper``, ``verdict``, ``settings_differ``; ``outputs``: the figures beside it);
    returns the markdown table."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = list(rows[0])
    with open(folder / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    headers = headers or {}
    table = "\n".join(
        [
            "| " + " | ".join(headers.get(k, k) for k in keys) + " |",
            "|" + "---|" * len(keys),
            *["| " + " | ".join(_cell(r[k]) for k in keys) + " |" for r in rows],
        ]
    )
    text = (
        f"# {title}\n\nMade by `{command}` on {datetime.now(UTC):%Y-%m-%d}. {intro.strip()}\n\n"
        f"{table}\n"
    )
    if after:
        text += f"\n{after.strip()}\n"
    (folder / f"{name}.md").write_text(text)
    record(folder / f"{name}.md", command, [f"{name}.csv", *outputs], **provenance)
    return table


def vimpc_run(
    scenario: Path,
    out: Path,
    *,
    episodes: int,
    seed: int,
    workers: int,
    sets: Sequence[str] = (),
    accept: Sequence[int] = (0,),
    plots: bool = True,
) -> tuple[dict, Path]:
    """``vimpc run scenario`` into ``out`` over ``episodes`` episodes from reset seed
    ``seed`` with the ``--set`` overrides ``sets``; returns its metrics and run folder.
    ``accept``: the exit codes taken as a written run (``(0, 3)`` also takes a run whose
    every solve failed, a result where a failing controller is reported with its numbers).
    ``plots=False``: the run's own figures are not drawn (``--no-plots``; the smoke tests,
    where they took most of the time)."""
    from vimpc import cli

    argv = [
        "run", str(scenario), "--out", str(out), "--quiet", "--workers", str(workers),
        "--set", f"episodes.count={episodes}", "--set", f"episodes.seed={seed}",
    ]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    if not plots:
        argv.append("--no-plots")
    code = cli.main(argv)
    if code not in accept:
        raise SystemExit(f"vimpc run {scenario} {' '.join(sets)} failed (exit code {code})")
    (folder,) = [p for p in out.glob("*/*") if p.is_dir()]
    return json.loads((folder / "metrics.json").read_text()), folder


NOMINAL_MODEL = '[model]\nfamily = "nominal"\nintegrator = "midpoint"\n\n'


def nominal_variant(source: Path, folder: Path, model: str = NOMINAL_MODEL) -> Path:
    """The scenario with its ``[model]`` table replaced by ``model`` (by default the nominal
    midpoint model)."""
    text = source.read_text(encoding="utf-8")
    replaced, n = re.subn(r"(?ms)^\[model\]\n.*?(?=^\[)", model, text)
    if n != 1:
        raise SystemExit(f"{source} has no single [model] table followed by another table")
    path = folder / source.name
    path.write_text(replaced, encoding="utf-8")
    return path


#: the columns of a closed-loop comparison (:func:`closed_loop_row`)
CLOSED_LOOP_HEADERS = {
    "scenario": "scenario",
    "model": "model",
    "episodes": "episodes",
    "success": "success",
    "success_ci95": "success 95% CI",
    "tracking_rmse": "tracking RMSE (mean over episodes)",
    "prediction_rmse": "one-step prediction RMSE in closed loop",
    "solve_median_ms": "solve median [ms]",
    "solve_p95_ms": "solve p95 [ms]",
    "failed_solves": "failed solves",
    "solves": "solves",
    "max_constraint_residual": "largest constraint residual of a state",
}


def closed_loop_row(scenario: str, label: str, m: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a closed-loop comparison from a run's metrics ``m``."""
    return {
        "scenario": scenario,
        "model": label,
        "episodes": m["episodes"],
        "success": m["success_rate"],
        "success_ci95": interval(m["success_rate_ci95"]),
        "tracking_rmse": m["tracking_rmse_mean"],
        "prediction_rmse": m.get("prediction_rmse_mean", float("nan")),
        "solve_median_ms": m["solve_time_median_ms"],
        "solve_p95_ms": m["solve_time_p95_ms"],
        "failed_solves": m["failed_solves"],
        "solves": m["solves"],
        "max_constraint_residual": m["max_constraint_residual"],
    }


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate ``k / n``: it holds at least ``level``
    for every true rate, so for ``k = 0`` its upper end is the rate the runs rule out."""
    from scipy.stats import beta

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    tail = (1.0 - level) / 2.0
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


def read_run(root: Path) -> tuple[dict, Path, bool] | None:
    """The run under ``root`` (``root/<scenario>/<timestamp>[.partial]``, as ``vimpc run
    --out root`` makes it): ``(metrics, folder, complete)``, or None when there is none.
    A complete run's ``metrics.json``; an unfinished one's metrics are the run summary
    (:func:`vimpc.closedloop.metrics.summarize`) of the episodes it has finished so far,
    with ``episodes_requested`` the count it was started for (None if it finished none)."""
    complete = sorted(p for p in root.glob("*/*") if (p / "metrics.json").exists())
    if complete:
        folder = complete[-1]
        return json.loads((folder / "metrics.json").read_text()), folder, True
    partial = sorted(p for p in root.glob("*/*.partial") if (p / "run.json").exists())
    if not partial:
        return None
    from vimpc.closedloop.metrics import summarize
    from vimpc.runs import store

    folder = partial[-1]
    requested = int(json.loads((folder / "run.json").read_text())["episodes"])
    done = store.finished(folder, requested)
    if not done:
        return None
    loaded = [store.load_episode(folder, k) for k in done]
    per_episode = [m for _, m in loaded]
    metrics = summarize(per_episode, [t for t, _ in loaded])
    metrics["per_episode"] = per_episode
    metrics["episodes_requested"] = requested
    return metrics, folder, False
