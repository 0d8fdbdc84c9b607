"""Writing an experiment's table as CSV and markdown, and running a scenario for one (not a
test module).

Each script in this folder is run by hand from the repository root and writes its results
under ``results/<experiment>/`` with the command that made them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


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
) -> str:
    """Write ``folder/name.csv`` (every column at full precision) and ``folder/name.md``
    (title, the command and date, ``intro``, the table with ``headers`` naming the columns,
    then ``after``); returns the markdown table."""
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
    return table


def vimpc_run(
    scenario: Path, out: Path, *, episodes: int, seed: int, workers: int, sets: Sequence[str] = ()
) -> tuple[dict, Path]:
    """``vimpc run scenario`` into ``out`` over ``episodes`` episodes from reset seed
    ``seed`` with the ``--set`` overrides ``sets``; returns its metrics and run folder."""
    from vimpc import cli

    argv = [
        "run", str(scenario), "--out", str(out), "--quiet", "--workers", str(workers),
        "--set", f"episodes.count={episodes}", "--set", f"episodes.seed={seed}",
    ]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    if cli.main(argv) != 0:
        raise SystemExit(f"vimpc run {scenario} {' '.join(sets)} failed")
    (folder,) = [p for p in out.glob("*/*") if p.is_dir()]
    return json.loads((folder / "metrics.json").read_text()), folder
