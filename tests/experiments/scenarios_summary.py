"""Run the four nominal-model scenarios and tabulate their metrics.

    python tests/experiments/scenarios_summary.py

writes results/scenarios/{summary.md, summary.csv} and each scenario's figures
(``<scenario>_states_inputs.png``, ``<scenario>_mechanism.png``).
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from vimpc import cli

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "scenarios"
NAMES = ("pendulum_swingup", "cartpole_swingup", "fourbar_tracking", "rollingdisk_parking")
COLUMNS = (
    "success_rate",
    "mean_cost",
    "tracking_rmse",
    "violations",
    "max_violation",
    "min_slack",
    "max_constraint_residual",
    "solve_time_median_ms",
    "solve_time_p95_ms",
    "solve_time_max_ms",
    "failed_solves",
    "wall_time_s",
)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES:
            assert (
                cli.main(["run", str(ROOT / "scenarios" / f"{name}.toml"), "--out", tmp, "--quiet"])
                == 0
            )
            run = next((Path(tmp) / name).iterdir())
            metrics = json.loads((run / "metrics.json").read_text())
            rows.append((name, *(metrics[c] for c in COLUMNS)))
            for fig in ("states_inputs.png", "mechanism.png"):
                shutil.copy(run / fig, OUT / f"{name}_{fig}")
    with open(OUT / "summary.csv", "w", newline="") as f:
        csv.writer(f).writerows([("scenario", *COLUMNS), *rows])

    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = [
        "# Scenarios with the nominal variational model",
        "",
        f"Made by `python tests/experiments/scenarios_summary.py` on {datetime.now(UTC):%Y-%m-%d} "
        "(each row is `vimpc run scenarios/<scenario>.toml`). The true systems are perturbed "
        "(masses and inertias within 10 %, friction, observation noise 1e-3); the controller's "
        "model is the nominal system with the midpoint variational integrator. Safety: "
        "violations are steps with a negative margin of the env's safety constraint; min_slack "
        "is the smallest margin over the episode (the margin the controller really had). "
        "Solve times in ms, wall time in s (everything included).",
        "",
        "| scenario | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
        *["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows],
        "",
        *[f"![{n}]({n}_states_inputs.png) ![{n}]({n}_mechanism.png)" for n in NAMES],
    ]
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:-5]))


if __name__ == "__main__":
    main()
