"""What a person reads and looks at after a run or a fit: the summary tables printed by
``vimpc run`` and ``vimpc fit``, and the figures written next to a run's results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _rate(value: float, ci: list[float]) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.2f} (95% CI {ci[0]:.2f}-{ci[1]:.2f})"


def summary_table(summary: dict[str, Any]) -> str:
    n = summary["episodes"]
    rows = [
        ("episodes", f"{n}"),
        ("success rate", _rate(summary["success_rate"], summary["success_rate_ci95"])),
        (
            "episodes with a violation",
            f"{summary['episodes_with_violation']} of {n}, rate "
            + _rate(summary["violation_rate"], summary["violation_rate_ci95"]),
        ),
        (
            "safety margin",
            f"min {summary['min_margin']:.4g}, mean of episode minima "
            f"{summary['min_margin_mean']:.4g} (std {summary['min_margin_std']:.2g})",
        ),
        ("largest violation", f"{summary['max_violation']:.3g}"),
        ("cost", f"mean {summary['cost_mean']:.4g} (std {summary['cost_std']:.3g})"),
        ("tracking RMSE", f"mean {summary['tracking_rmse_mean']:.4g}"),
    ]
    if "coverage_mean" in summary:
        rows.append(
            (
                "bound coverage (one step)",
                f"mean {summary['coverage_mean']:.3f}, worst episode {summary['coverage_min']:.3f}",
            )
        )
    if "min_planned_margin_mean" in summary:
        rows.append(
            (
                "planned margin past the tube",
                f"mean of minima {summary['min_planned_margin_mean']:.3g}",
            )
        )
    rows += [
        ("constraint residual (max)", f"{summary['max_constraint_residual']:.2e}"),
        (
            "solve time median / p95 / max",
            f"{summary['solve_time_median_ms']:.2f} / "
            f"{summary['solve_time_p95_ms']:.2f} / {summary['solve_time_max_ms']:.2f} ms",
        ),
        ("failed solves", f"{summary['failed_solves']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def fit_table(report: dict[str, Any], names: list[str]) -> str:
    lines = [
        f"  fit time {report['fit_time_s']:.2f} s; transitions: {report['train_transitions']} "
        f"training, {report['calibration_transitions']} calibration, "
        f"{report['validation_transitions']} validation",
        f"  {'entry':<14} {'1-step RMSE':>12} {report['multi_step']:>3}-step RMSE",
    ]
    for name, one, many in zip(
        names, report["one_step_rmse"], report["multi_step_rmse"], strict=True
    ):
        lines.append(f"  {name:<14} {one:>12.3e} {many:>16.3e}")
    if "validation_coverage" in report:
        lines.append(
            f"  bound coverage on validation data: {report['validation_coverage']:.3f} "
            f"(promised >= {1 - report['delta']:.3f})"
        )
    return "\n".join(lines)


def run_figures(cfg, runner, trajectories, folder: Path) -> None:
    """The run's figures in ``folder`` (matplotlib is imported here, not with vimpc)."""
    from vimpc import plotting

    system = runner.env.nominal_system
    names = [*system.coordinate_names, *(f"{n}_dot" for n in system.coordinate_names)]
    ctl = runner.controller
    cons = ctl.constraints
    periodic = tuple(cfg["controller"]["cost"]["periodic"])
    first = trajectories[0]
    plotting.plot_states_inputs(
        first,
        names,
        system.input_names,
        cons.u_min,
        cons.u_max,
        folder / "states_inputs.png",
        cons.obs_min,
        cons.obs_max,
        periodic,
    )
    plotting.plot_solve_times(trajectories, folder / "solve_times.png")
    plotting.plot_constrained_entries(
        trajectories, names, cons.obs_min, cons.obs_max, folder / "episodes.png"
    )
    plotting.plot_mechanism(
        first,
        system,
        folder / "mechanism.png",
        circles=[(c["center"], c["radius"]) for c in cfg["controller"]["constraints"]["circles"]],
    )
    plotting.plot_safety(first, ctl.safety_function, ctl.safety_names, folder / "safety.png")
    if runner.model.bound is not None:
        plotting.plot_coverage(
            first, runner.model, list(runner.model.state_names), folder / "coverage.png"
        )
