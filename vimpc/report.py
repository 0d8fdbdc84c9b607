"""What a person reads and looks at after a run or a fit: the summary tables printed by
``vimpc run`` and ``vimpc fit``, and the figures written next to a run's results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vimpc._text import count

if TYPE_CHECKING:
    from vimpc.dynamics import BoundInfo

#: width of the summary table's first column; its values start at column ``KEY_WIDTH + 4``
KEY_WIDTH = 28


def _rate(value: float, ci: list[float]) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.2f} (95% CI {ci[0]:.2f}-{ci[1]:.2f})"


def _with_unit(value: str, unit: str) -> str:
    return f"{value} {unit}" if unit else value


def axis_unit(name: str, unit: str) -> str:
    """``"name [unit]"`` (just the name for a dimensionless entry)."""
    return f"{name} [{unit}]" if unit else name


def _limit_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per true safety limit: its name, the states outside it and the closest
    approach."""
    limits = summary["safety_limits"]
    if not limits:
        rows = len(summary["margin_row_violations"])
        return [
            (
                "true safety limits",
                f"not named by the env ({count(rows, 'margin row')})" if rows else "none",
            )
        ]
    return [
        (
            "true safety limits" if k == 0 else "",
            f"{limit['name']}: {count(limit['states_outside'], 'state')} outside, smallest margin "
            + _with_unit(f"{limit['min_margin']:.4g}", limit["unit"]),
        )
        for k, limit in enumerate(limits)
    ]


def tracking_rmse(
    trajectories: Sequence[Any],
    names: Sequence[str],
    units: Sequence[str],
    periodic: Sequence[int] = (),
    tracked: Sequence[int] | None = None,
) -> list[tuple[str, str, float]]:
    """``(name, unit, rmse)`` of each ``tracked`` observation entry (all by default): the
    RMS of ``state - reference`` over the finite reference samples of an episode (angles in
    ``periodic`` wrapped, as in the episode metrics), averaged over the episodes; NaN for an
    entry without a reference."""
    from vimpc.closedloop.metrics import wrapped_error

    tracked = range(len(names)) if tracked is None else tracked
    errors = [wrapped_error(traj, periodic) for traj in trajectories]
    out = []
    for i in tracked:
        per_episode = []
        for err in errors:
            e = err[:, i][np.isfinite(err[:, i])]
            if e.size:
                per_episode.append(float(np.sqrt(np.mean(e**2))))
        value = float(np.mean(per_episode)) if per_episode else float("nan")
        out.append((names[i], units[i], value))
    return out


def run_tracking(cfg, env, trajectories) -> list[tuple[str, str, float]]:
    """:func:`tracking_rmse` of a run: the entries the scenario's cost weighs (``Q``), its
    ``periodic`` angles, the env's names and units."""
    from vimpc.scenario.records import as_scenario

    cost = as_scenario(cfg).controller.cost
    return tracking_rmse(
        trajectories,
        list(env.obs_names),
        env.nominal_system.state_units,
        periodic=tuple(cost.periodic),
        tracked=np.flatnonzero(np.asarray(cost.Q, dtype=np.float64)).tolist(),
    )


def _tracking_rows(summary: dict[str, Any], tracking) -> list[tuple[str, str]]:
    """Per entry with its unit where known; else the pooled value, said to be pooled (its
    entries may have different units)."""
    if tracking is None:
        return [
            (
                "tracking RMSE",
                f"mean {summary['tracking_rmse_mean']:.4g} (all tracked entries pooled)",
            )
        ]
    if not tracking:
        return [("tracking RMSE", "no tracked entry")]
    return [
        (
            "tracking RMSE, episode mean" if k == 0 else "",
            f"{name}: "
            + (
                "n/a (no reference)" if not np.isfinite(value) else _with_unit(f"{value:.4g}", unit)
            ),
        )
        for k, (name, unit, value) in enumerate(tracking)
    ]


def success_window_note(cfg) -> str | None:
    """Why the success rate means something else than it says, or None: a success window
    as long as the episode reaches back to its start state, which would have to be at the
    target too."""
    from vimpc.scenario.records import as_scenario

    s = as_scenario(cfg)
    metrics = s.metrics
    length = s.episodes.steps * s.env.dt
    if metrics.success_index is None or metrics.success_window < length:
        return None
    return (
        f"metrics.success_window = {metrics.success_window:g} s is not shorter than the "
        f"episode ({length:g} s): the test covers every step from the start state, so the "
        "success rate says whether an episode was within tolerance throughout, not whether "
        "it got there"
    )


def summary_table(
    summary: dict[str, Any],
    *,
    tracking: Sequence[tuple[str, str, float]] | None = None,
    tube: bool = False,
) -> str:
    """The run's summary (:func:`vimpc.closedloop.summarize`) as aligned ``key  value``
    rows, with the env's true safety limits by name, and the tracking RMSE per entry with
    its unit (``tracking``, from :func:`tracking_rmse`; without it, the summary's pooled
    value). The count of empty tightened sets only with a ``tube`` (without one it is 0)."""
    n = summary["episodes"]
    units = {limit["unit"] for limit in summary["safety_limits"]}
    unit = units.pop() if len(units) == 1 else ""
    rows = [
        ("episodes", f"{n}"),
        ("success rate", _rate(summary["success_rate"], summary["success_rate_ci95"])),
        *((("", f"warning: {summary['success_note']}"),) if "success_note" in summary else ()),
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
            + ", mean of episode minima "
            + _with_unit(f"{summary['min_margin_mean']:.4g}", unit)
            + " (std "
            + _with_unit(f"{summary['min_margin_std']:.2g}", unit)
            + ")",
        ),
        ("largest violation", _with_unit(f"{summary['max_violation']:.3g}", unit)),
        ("cost", f"mean {summary['cost_mean']:.4g} (std {summary['cost_std']:.3g})"),
        *_tracking_rows(summary, tracking),
    ]
    if "coverage_mean" in summary:
        rows.append(
            (
                "bound coverage (one step)",
                f"mean {summary['coverage_mean']:.3f}, worst episode {summary['coverage_min']:.3f}",
            )
        )
    if "horizon_coverage_min" in summary:  # absent: no episode as long as the horizon
        rows.append(
            (
                f"bound coverage ({summary['coverage_horizon']}-step windows)",
                f"mean {summary['horizon_coverage_mean']:.3f}, worst episode "
                f"{summary['horizon_coverage_min']:.3f} (every error of the window inside)",
            )
        )
    if "min_planned_margin_mean" in summary:
        rows.append(
            (
                "planned h - tube",
                f"mean of episode minima {summary['min_planned_margin_mean']:.3g} "
                "(h >= 0: the planning limit holds)",
            )
        )
    rows += _variation_rows(summary)
    if tube and "empty_tube_fraction" in summary:
        rows.append(
            (
                "empty tightened set",
                f"{summary['empty_tube_steps']} of {summary['solves']} steps "
                f"({summary['empty_tube_fraction']:.1%}): some stage's tube left no room",
            )
        )
    rows += [("constraint residual (max)", f"{summary['max_constraint_residual']:.2e}")]
    plan = summary.get("max_plan_constraint_residual", float("nan"))
    if np.isfinite(plan):  # a model with holonomic constraints
        rows += [("predicted constraint residual (max)", f"{plan:.2e} (the model's, over plans)")]
    rows += [
        (
            "solve time median/p95/max",
            f"{summary['solve_time_median_ms']:.2f} / "
            f"{summary['solve_time_p95_ms']:.2f} / {summary['solve_time_max_ms']:.2f} ms",
        ),
        (
            "solves",
            f"{summary['solves']}: {summary['failed_solves']} failed, "
            f"{summary['late_solves']} late, "
            f"{summary['iteration_limit_solves']} at the iteration limit" + _budget_text(summary),
        ),
    ]
    if summary.get("handed_over_solves", 0):
        rows.append(
            (
                "handed over",
                f"{summary['handed_over_solves']} solves by the cold-start solver "
                "(condensed_start) instead of the condensed SQP",
            )
        )
    if summary.get("tube_kept_solves", 0):
        rows.append(
            (
                "tube kept",
                f"{summary['tube_kept_solves']} solves by the condensed SQP with the last "
                "solved call's tube, shifted (it did not converge with the tube along the guess)",
            )
        )
    if summary.get("descended_solves", 0):
        rows.append(
            (
                "descended",
                f"{summary['descended_solves']} solves by the condensed SQP's single-shooting "
                "descent in the rest of the time budget (its tries did not converge in their "
                f"shares), {summary['descended_iterates']} of them its last iterate unconverged",
            )
        )
    if np.isfinite(summary.get("period_ms", np.nan)):
        rows.append(
            (
                "late calls",
                f"{summary['late_solves']} of {summary['solves']} "
                f"({summary['late_solve_fraction']:.1%}) took longer than the period "
                f"{summary['period_ms']:.3g} ms (slowest call {summary['call_time_max_ms']:.2f} ms)",
            )
        )
    if np.isfinite(summary.get("preparation_time_max_ms", np.nan)):
        rows.append(
            (
                "preparations",
                "the real-time iteration's, between samples: median "
                f"{summary['preparation_time_median_ms']:.2f} ms, p95 "
                f"{summary['preparation_time_p95_ms']:.2f} ms, slowest "
                f"{summary['preparation_time_max_ms']:.2f} ms",
            )
        )
    if np.isfinite(summary.get("first_plan_time_max_ms", np.nan)):
        rows.append(
            (
                "first plans",
                "made before each episode's first step, outside the loop's clock: median "
                f"{summary['first_plan_time_median_ms']:.2f} ms, slowest "
                f"{summary['first_plan_time_max_ms']:.2f} ms",
            )
        )
    return "\n".join(f"  {k:<{KEY_WIDTH}}  {v}" for k, v in rows)


def _budget_text(summary: dict[str, Any]) -> str:
    """The solves the time budget stopped (counted among the failed) or ran past, if any."""
    stopped, past = summary.get("time_limit_solves", 0), summary.get("over_budget_solves", 0)
    if not (stopped or past):
        return ""
    return f" ({stopped} stopped by the time budget, {past} converged past it)"


def fit_table(report: dict[str, Any], names: list[str], units: Sequence[str] | None = None) -> str:
    """The fit report as a table: the RMSE of each entry (in its unit, from ``units``)."""
    entries = (
        list(names)
        if units is None
        else [axis_unit(n, u) for n, u in zip(names, units, strict=True)]
    )
    width = max(14, *(len(e) for e in entries))
    lines = [
        f"  fit time {report['fit_time_s']:.2f} s; transitions: {report['train_transitions']} "
        f"training, {report['calibration_transitions']} calibration, "
        f"{report['validation_transitions']} validation",
        f"  {'entry [unit]' if units is not None else 'entry':<{width}} {'1-step RMSE':>12} "
        f"{report['multi_step']:>3}-step RMSE",
    ]
    for entry, one, many in zip(
        entries, report["one_step_rmse"], report["multi_step_rmse"], strict=True
    ):
        lines.append(f"  {entry:<{width}} {_num(one, 12)} {_num(many, 16)}")
    failed = report.get("failed_predictions")
    if failed:
        lines.append(
            f"  failed predictions (not in the RMSE): {failed['one_step']} one-step, "
            f"{failed['multi_step']} {report['multi_step']}-step"
        )
    if report.get("calibration") == "closed_loop":
        # calibrated on the controller's episodes: open-loop data are not exchangeable with
        # those, so the figure is a measurement, not a check of the bound's promise
        promise = (
            f"not promised: the bound is calibrated on closed-loop episodes, where it holds "
            f"with probability >= {1 - report.get('delta', 0.0):.3f}"
        )
        where = "open-loop held-out data"
    else:
        promise = f"promised >= {1 - report.get('delta', 0.0):.3f}"
        where = "validation data"
    if "validation_coverage" in report:
        lines.append(
            f"  bound coverage on {where}: {report['validation_coverage']:.3f} ({promise})"
        )
    if "validation_horizon_coverage" in report:
        lines.append(
            f"  per {report['bound_horizon']}-step window (all errors inside): "
            f"{report['validation_horizon_coverage']:.3f} ({promise})"
        )
    lines += _rollout_lines(report.get("long_rollout"))
    lines += [f"  note: {note}" for note in report.get("notes", [])]
    return "\n".join(lines)


def _rollout_lines(rollout: dict[str, Any] | None) -> list[str]:
    """The fit report's long unforced rollouts, one line each figure."""
    if not rollout:
        return []
    head = (
        f"  {rollout['rollouts']} unforced rollouts of {rollout['rollout_steps']} steps: "
        f"{rollout['rollout_failed']} failed"
    )
    lines = [head]
    if rollout.get("energy_drift_max") is not None:
        which = "the model's" if rollout["energy_source"] == "model" else "the nominal"
        lines.append(
            f"  energy drift ({which} energy, max |E - E0| over its range on the validation "
            f"states): median {rollout['energy_drift_median']:.3e}, max "
            f"{rollout['energy_drift_max']:.3e}"
        )
    for key, what in (
        ("holonomic_residual", "holonomic"),
        ("nonholonomic_residual", "nonholonomic"),
    ):
        if rollout.get(f"{key}_max") is not None:
            lines.append(
                f"  {what} constraint residual of the nominal system along them: max "
                f"{rollout[f'{key}_max']:.3e}"
            )
    return lines


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


def _safety_rows(ctl, names, units, true_min, true_max, true_circles):
    """Labels (with units), definitions of ``h``, units and the value on the task's true
    limit (NaN where no true limit matches) of each of the controller's safety rows
    (:class:`~vimpc.mpc.problem.SafetyRows` says what each row is): a bound row
    ``obs_max - obs`` meets the true upper limit at ``obs_max - true_max``; a circle row
    ``|p - c|^2 - r^2`` meets a true circle about the same centre at ``r_true^2 - r^2``."""
    from vimpc.mpc.problem import SafetyRows

    safety = ctl.safety_rows
    if tuple(names) != safety.obs_names:  # the report's names for the observation entries
        safety = SafetyRows.of(ctl.constraints, names)
    path = safety.constraints.path
    labels, formulas, row_units, levels = [], [], [], []
    for row in safety.rows:
        unit = units[row.entries[0]] if row.power else ""
        labels.append(_with_unit(row.label, unit))
        formulas.append(row.formula)
        row_units.append(unit if row.power < 2 or not unit else f"{unit}^{row.power}")
        level = np.nan
        if row.kind == "lower":
            level = true_min[row.entry] - row.bound
        elif row.kind == "upper":
            level = row.bound - true_max[row.entry]
        elif path[row.constraint].circle is not None:
            indices, center, radius = path[row.constraint].circle
            for true_center, true_radius, true_indices in true_circles:
                if tuple(indices) == tuple(true_indices) and np.allclose(true_center, center):
                    level = true_radius**2 - radius**2
        levels.append(level if np.isfinite(level) else np.nan)
    return labels, formulas, row_units, levels


def _rail(system, true_min, true_max, obs_min, obs_max) -> dict[str, Any]:
    """The mechanism figure's rail for a cart whose centre ``q[0]`` runs along ``y = 0``
    (:class:`~vimpc.mechanics.CartPole`, :class:`~vimpc.mechanics.CartPendulum`): the true
    and the planning limits on that entry, where either is finite."""
    from vimpc.mechanics import CartPendulum, CartPole

    if not isinstance(system, (CartPole, CartPendulum)):
        return {}
    true = (_open_end(true_min[0], -1), _open_end(true_max[0], 1))
    plan = (_open_end(obs_min[0], -1), _open_end(obs_max[0], 1))
    if not np.isfinite([*true, *plan]).any():
        return {}
    return {"rail": true, "plan_rail": plan}


def _open_end(value: float, side: int) -> float:
    return side * np.inf if np.isnan(value) else float(value)


def _marker_name(system) -> str:
    """What the mechanism figure's path follows (``system.marker``)."""
    from vimpc.mechanics import RollingDisk

    return "contact point" if isinstance(system, RollingDisk) else "last link's end"


def run_figure_set(cfg, runner, trajectories) -> dict[str, Any]:
    """The run's figures by file stem (matplotlib is imported here, not with vimpc):
    ``states_inputs``, ``solve_times``, ``mechanism`` always; ``episodes`` where an entry
    has a planning or a true limit; ``safety`` where the controller has safety rows;
    ``coverage`` where the model has a bound."""
    from vimpc.plotting import mechanism as plot_mechanism
    from vimpc.plotting import safety as plot_safety
    from vimpc.plotting import series as plot_series
    from vimpc.scenario.records import as_scenario

    cfg = as_scenario(cfg)
    env = runner.env
    system = env.nominal_system
    names = list(env.obs_names)
    units = system.state_units
    ctl = runner.controller
    cons = ctl.constraints
    title = cfg.scenario.name
    true_min, true_max, true_circles = _true_limits(env.safety_limits, len(names))
    out = {
        "states_inputs": plot_series.states_inputs_figure(
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
            periodic=tuple(cfg.controller.cost.periodic),
            tracked=np.flatnonzero(np.diag(ctl.cost.Q)).tolist(),
            title=title,
        ),
        "solve_times": plot_series.solve_times_figure(
            trajectories, time_budget=ctl.time_budget, title=title
        ),
        "episodes": plot_safety.constrained_entries_figure(
            trajectories,
            names=names,
            units=units,
            obs_min=cons.obs_min,
            obs_max=cons.obs_max,
            true_min=true_min,
            true_max=true_max,
            title=title,
        ),
        "mechanism": plot_mechanism.mechanism_figure(
            trajectories,
            system,
            plan_circles=[(c.center, c.radius) for c in cfg.controller.constraints.circles],
            true_circles=[(center, radius) for center, radius, _ in true_circles],
            **_rail(system, true_min, true_max, cons.obs_min, cons.obs_max),
            marker_name=_marker_name(system),
            title=title,
        ),
    }
    labels, formulas, row_units, levels = _safety_rows(
        ctl, names, units, true_min, true_max, true_circles
    )
    out["safety"] = plot_safety.safety_figure(
        trajectories,
        ctl.safety_function,
        labels,
        units=row_units,
        definitions=formulas,
        true_levels=levels,
        title=title,
    )
    model = runner.model
    if model.bound is not None:
        unit_of = dict(zip(names, units, strict=True))
        out["coverage"] = plot_safety.coverage_figure(
            trajectories,
            model,
            list(model.state_names),
            [unit_of.get(name, "") for name in model.state_names],
            title=title,
        )
    return {name: fig for name, fig in out.items() if fig is not None}


def run_figures(
    cfg, runner, trajectories, folder: Path, *, per_episode=None, seeds=None, holds_only_on=None
) -> None:
    """The run's figures (:func:`run_figure_set`) written as ``<name>.png`` in ``folder``;
    with the episodes' metrics also ``outside_data`` where the model records its data box
    (:func:`vimpc.plotting.data_region.outside_data_figure`), and with several fits
    ``coverage_fit<k>`` (each fit's episodes against its own bound) instead of ``coverage``."""
    from vimpc.plotting.data_region import outside_data_figure
    from vimpc.plotting.style import save
    from vimpc.scenario.records import as_scenario

    cfg = as_scenario(cfg)
    figures = run_figure_set(cfg, runner, trajectories)
    fits = sorted({int(m.get("fit", 0)) for m in per_episode or []})
    if len(fits) > 1 and "coverage" in figures:
        # each fit's episodes against that fit's own bound: coverage_fit<k>
        del figures["coverage"]
        figures.update(_coverage_per_fit(cfg, runner, trajectories, per_episode, fits))
    if per_episode is not None:
        fig = outside_data_figure(
            per_episode,
            seeds=seeds,
            holds_only_on=holds_only_on,
            title=cfg.scenario.name,
        )
        if fig is not None:
            figures["outside_data"] = fig
    for name, fig in figures.items():
        save(fig, folder / f"{name}.png")


def _coverage_per_fit(cfg, runner, trajectories, per_episode, fits) -> dict[str, Any]:
    from vimpc.plotting import safety as plot_safety

    unit_of = dict(zip(runner.env.obs_names, runner.env.nominal_system.state_units, strict=True))
    out = {}
    for k in fits:
        model = runner.fit(k)[0]
        mine = [t for t, m in zip(trajectories, per_episode, strict=True) if m.get("fit", 0) == k]
        out[f"coverage_fit{k}"] = plot_safety.coverage_figure(
            mine,
            model,
            list(model.state_names),
            [unit_of.get(name, "") for name in model.state_names],
            title=f"{cfg.scenario.name}, fit {k}",
        )
    return out


#: the region a bound of this kind is known to hold on only (a bound record may also name it
#: itself, as ``holds_only_on``)
TRAINING_BOX = "training box"


def bound_holds_only_on(bound: BoundInfo | None) -> str | None:
    """The region a model's bound (its :class:`~vimpc.dynamics.BoundInfo`) is known to hold
    on only: the record's own ``holds_only_on`` (in its ``extra``), else :data:`TRAINING_BOX`
    for a bound derived from a theorem on the box of the training inputs (calibrated on the
    training data; GP-VI's Theorem 1 records that box as ``domain_low``/``domain_high``);
    ``None`` for a bound without such a limit (a conformal bound's promise is over the
    calibration distribution, not a region)."""
    if bound is None:
        return None
    if bound.extra.get("holds_only_on"):
        return str(bound.extra["holds_only_on"])
    if bound.calibrated_on == "training" and "domain_low" in bound.extra:
        return TRAINING_BOX
    return None


def data_region_flags(summary: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict:
    """Summary keys on the data region: ``bound_holds_only_on`` (from the fits' model
    records, :func:`bound_holds_only_on`) and ``warnings``, which says the share of steps
    outside the data box when such a bound was in use there, or that the share is unknown
    (a model that records no data box: fitted before it was recorded, or not fitted)."""
    out: dict[str, Any] = {}
    region = next((r["bound_holds_only_on"] for r in records if r.get("bound_holds_only_on")), None)
    warnings = list(summary.get("warnings", []))
    if region is not None:
        out["bound_holds_only_on"] = region
        share = summary.get("outside_data_share")
        if share is None:
            warnings.append(
                f"the bound holds only on its {region}, and this run cannot say how often it "
                "left it: the model records no data box (refit with --refit)"
            )
        elif share > 0:
            warnings.append(
                f"the bound holds only on its {region}: {share:.1%} of the steps "
                f"({summary['episodes_outside_data']} of {summary['episodes_with_data_box']} "
                "episodes) started outside the box of the data, where its coverage promise "
                "does not apply"
            )
    if warnings:
        out["warnings"] = warnings
    return out


def _variation_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of :func:`vimpc.closedloop.metrics.variation_summary`: intervals over episodes
    (and plants), per fit, and the data region."""
    rows: list[tuple[str, str]] = []
    boot = "(percentile bootstrap over episodes)"
    ci = summary.get("min_margin_mean_ci95")
    if ci is not None and np.all(np.isfinite(ci)):
        rows.append(("margin, mean of minima", f"95% CI {ci[0]:.4g} to {ci[1]:.4g} {boot}"))
    ci = summary.get("coverage_mean_ci95")
    if ci is not None and np.all(np.isfinite(ci)):
        rows.append(("bound coverage, mean", f"95% CI {ci[0]:.3f} to {ci[1]:.3f} {boot}"))
    if summary.get("plants", 1) > 1:
        rows.append(("plants", f"{summary['plants']} (one drawn per episode)"))
    for k, fit in enumerate(summary.get("per_fit", [])):
        text = f"fit {fit['fit']}: {count(fit['episodes'], 'episode')}"
        if "success_rate" in fit:
            text += ", success " + _rate(fit["success_rate"], fit["success_rate_ci95"])
        text += ", violation " + _rate(fit["violation_rate"], fit["violation_rate_ci95"])
        if "coverage_mean" in fit:
            text += f", coverage {fit['coverage_mean']:.3f}"
        rows.append(("per fit" if k == 0 else "", text))
    spread = summary.get("between_fit_std")
    if spread:
        rows.append(
            ("between-fit std", ", ".join(f"{key} {value:.3g}" for key, value in spread.items()))
        )
    if "outside_data_share" in summary:
        rows.append(
            (
                "steps outside the data box",
                f"{summary['outside_data_share']:.1%} pooled, worst episode "
                f"{summary['outside_data_share_max']:.1%}, "
                f"{summary['episodes_outside_data']} of {summary['episodes_with_data_box']} "
                "episodes left it",
            )
        )
    region = summary.get("bound_holds_only_on")
    if region is not None and not summary.get("warnings"):
        rows.append(("bound holds only on", f"its {region}; no step started outside the data box"))
    for k, text in enumerate(summary.get("warnings", [])):
        rows.append(("WARNING" if k == 0 else "", text))
    return rows
