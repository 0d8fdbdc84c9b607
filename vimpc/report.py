"""What a person reads and looks at after a run or a fit: the summary tables printed by
``vimpc run`` and ``vimpc fit``, and the figures written next to a run's results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: width of the summary table's first column; its values start at column ``KEY_WIDTH + 4``
KEY_WIDTH = 28


def _rate(value: float, ci: list[float]) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.2f} (95% CI {ci[0]:.2f}-{ci[1]:.2f})"


def _with_unit(value: str, unit: str) -> str:
    return f"{value} {unit}" if unit else value


def _limit_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per true safety limit: its name, the states outside it and the closest
    approach."""
    limits = summary["safety_limits"]
    if not limits:
        rows = len(summary["margin_row_violations"])
        return [
            ("true safety limits", f"not named by the env ({rows} margin rows)" if rows else "none")
        ]
    return [
        (
            "true safety limits" if k == 0 else "",
            f"{limit['name']}: {limit['states_outside']} states outside, smallest margin "
            + _with_unit(f"{limit['min_margin']:.4g}", limit["unit"]),
        )
        for k, limit in enumerate(limits)
    ]


def summary_table(summary: dict[str, Any]) -> str:
    """The run's summary (:func:`vimpc.closedloop.summarize`) as aligned ``key  value``
    rows, with the env's true safety limits by name."""
    n = summary["episodes"]
    units = {limit["unit"] for limit in summary["safety_limits"]}
    unit = units.pop() if len(units) == 1 else ""
    rows = [
        ("episodes", f"{n}"),
        ("success rate", _rate(summary["success_rate"], summary["success_rate_ci95"])),
        *_limit_rows(summary),
        (
            "episodes with a violation",
            f"{summary['episodes_with_violation']} of {n}, rate "
            + _rate(summary["violation_rate"], summary["violation_rate_ci95"]),
        ),
        (
            "safety margin",
            "min "
            + _with_unit(f"{summary['min_margin']:.4g}", unit)
            + f", mean of episode minima {summary['min_margin_mean']:.4g} "
            f"(std {summary['min_margin_std']:.2g})",
        ),
        ("largest violation", _with_unit(f"{summary['max_violation']:.3g}", unit)),
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
            "solve time median/p95/max",
            f"{summary['solve_time_median_ms']:.2f} / "
            f"{summary['solve_time_p95_ms']:.2f} / {summary['solve_time_max_ms']:.2f} ms",
        ),
        (
            "solves",
            f"{summary['solves']}: {summary['failed_solves']} failed, "
            f"{summary['late_solves']} late, "
            f"{summary['iteration_limit_solves']} at the iteration limit",
        ),
    ]
    return "\n".join(f"  {k:<{KEY_WIDTH}}  {v}" for k, v in rows)


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
        lines.append(f"  {name:<14} {_num(one, 12)} {_num(many, 16)}")
    failed = report.get("failed_predictions")
    if failed:
        lines.append(
            f"  failed predictions (not in the RMSE): {failed['one_step']} one-step, "
            f"{failed['multi_step']} {report['multi_step']}-step"
        )
    if "validation_coverage" in report:
        lines.append(
            f"  bound coverage on validation data: {report['validation_coverage']:.3f} "
            f"(promised >= {1 - report['delta']:.3f})"
        )
    return "\n".join(lines)


def _num(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.3e}"


def _true_limits(limits: Sequence[Any], n: int):
    """``(true_min, true_max, circles)`` from the env's safety limits: per observation
    entry (NaN where unlimited) and ``(center, radius, indices)`` of each keep-out circle."""
    from vimpc_envs._base import KeepOutCircle, ObservationBound

    true_min, true_max, circles = np.full(n, np.nan), np.full(n, np.nan), []
    for limit in limits:
        if isinstance(limit, ObservationBound):
            true_min[limit.index], true_max[limit.index] = limit.lower, limit.upper
        elif isinstance(limit, KeepOutCircle):
            circles.append((limit.center, limit.radius, tuple(limit.indices)))
    return true_min, true_max, circles


def _safety_rows(cfg, ctl, names, units, true_min, true_max, true_circles):
    """Names (with units), units and the value on the task's true limit (NaN where no true
    limit matches) of each of the controller's safety rows: a bound row ``obs_max - obs``
    meets the true upper limit at ``obs_max - true_max``; a circle row
    ``|p - c|^2 - r^2`` meets a true circle about the same centre at ``r_true^2 - r^2``."""
    cons = ctl.constraints
    lo, hi, path_rows = cons.safety_layout()
    labels = [_with_unit(f"{names[i]} >= {cons.obs_min[i]:g}", units[i]) for i in lo]
    labels += [_with_unit(f"{names[i]} <= {cons.obs_max[i]:g}", units[i]) for i in hi]
    levels = [true_min[i] - cons.obs_min[i] for i in lo]
    levels += [cons.obs_max[i] - true_max[i] for i in hi]
    row_units = [units[i] for i in (*lo, *hi)]
    circles = cfg["controller"]["constraints"]["circles"]
    for k, rows in enumerate(path_rows):
        label, level, unit = None, np.nan, ""
        if len(circles) == len(path_rows):
            c = circles[k]
            (ix, iy), (cx, cy) = c["indices"], c["center"]
            label = _with_unit(
                f"|({names[ix]}, {names[iy]}) - ({cx:g}, {cy:g})| >= {c['radius']:g}", units[ix]
            )
            unit = f"{units[ix]}^2" if units[ix] else ""
            for center, radius, indices in true_circles:
                if tuple(c["indices"]) == indices and np.allclose(center, c["center"]):
                    level = radius**2 - c["radius"] ** 2
        labels += [label or ctl.safety_names[r] for r in rows]
        levels += [level] * len(rows)
        row_units += [unit] * len(rows)
    levels = [v if np.isfinite(v) else np.nan for v in levels]
    return labels, row_units, levels


def run_figure_set(cfg, runner, trajectories) -> dict[str, Any]:
    """The run's figures by file stem (matplotlib is imported here, not with vimpc):
    ``states_inputs``, ``solve_times``, ``mechanism`` always; ``episodes`` where an entry
    has a planning or a true limit; ``safety`` where the controller has safety rows;
    ``coverage`` where the model has a bound."""
    from vimpc import plotting

    env = runner.env
    system = env.nominal_system
    names = list(env.obs_names)
    units = system.state_units
    ctl = runner.controller
    cons = ctl.constraints
    title = cfg["scenario"]["name"]
    true_min, true_max, true_circles = _true_limits(env.safety_limits, len(names))
    out = {
        "states_inputs": plotting.states_inputs_figure(
            trajectories,
            names=names,
            units=units,
            input_names=system.input_names,
            input_units=system.input_units,
            u_min=cons.u_min,
            u_max=cons.u_max,
            obs_min=cons.obs_min,
            obs_max=cons.obs_max,
            true_min=true_min,
            true_max=true_max,
            periodic=tuple(cfg["controller"]["cost"]["periodic"]),
            tracked=np.flatnonzero(np.diag(ctl.cost.Q)).tolist(),
            title=title,
        ),
        "solve_times": plotting.solve_times_figure(trajectories, title=title),
        "episodes": plotting.constrained_entries_figure(
            trajectories,
            names=names,
            units=units,
            obs_min=cons.obs_min,
            obs_max=cons.obs_max,
            true_min=true_min,
            true_max=true_max,
            title=title,
        ),
        "mechanism": plotting.mechanism_figure(
            trajectories,
            system,
            plan_circles=[
                (c["center"], c["radius"]) for c in cfg["controller"]["constraints"]["circles"]
            ],
            true_circles=[(center, radius) for center, radius, _ in true_circles],
            title=title,
        ),
    }
    labels, row_units, levels = _safety_rows(
        cfg, ctl, names, units, true_min, true_max, true_circles
    )
    out["safety"] = plotting.safety_figure(
        trajectories,
        ctl.safety_function,
        labels,
        units=row_units,
        true_levels=levels,
        title=title,
    )
    model = runner.model
    if model.bound is not None:
        unit_of = dict(zip(names, units, strict=True))
        out["coverage"] = plotting.coverage_figure(
            trajectories,
            model,
            list(model.state_names),
            [unit_of.get(name, "") for name in model.state_names],
            title=title,
        )
    return {name: fig for name, fig in out.items() if fig is not None}


def run_figures(cfg, runner, trajectories, folder: Path) -> None:
    """The run's figures (:func:`run_figure_set`) written as ``<name>.png`` in ``folder``."""
    from vimpc import plotting

    for name, fig in run_figure_set(cfg, runner, trajectories).items():
        plotting.save(fig, folder / f"{name}.png")
