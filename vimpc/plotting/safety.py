"""Figures of what the controller was asked to keep and what it kept: every constrained
observation entry against its planning and true limits (:func:`constrained_entries_figure`),
the controller's safety rows with the plans and tubes behind them (:func:`safety_figure`),
and the model's realized one-step errors against its bound (:func:`coverage_figure`).
Conventions from :mod:`vimpc.plotting.style`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from vimpc._text import count
from vimpc.closedloop import Trajectory, prediction_check, safety_rows
from vimpc.plotting.style import (
    BOUND,
    LIMIT_Z,
    MARK_Z,
    MAX_LINES,
    PLAN,
    PLANNING_LIMIT,
    REFERENCE_Z,
    STATE,
    TRACE_Z,
    TRUE_LIMIT,
    _episodes_label,
    _figure,
    _legend,
    _limit_lines,
    _nan_bounds,
    _style,
    axis_label,
)


def _open(bound: float, side: int) -> float:
    """A bound with NaN (none) read as the infinite end on ``side`` (-1 lower, +1 upper)."""
    return side * np.inf if np.isnan(bound) else float(bound)


def _worst_episode(rows: list[np.ndarray]) -> int:
    worst = [float(r.min()) if r.size else np.inf for r in rows]
    return int(np.argmin(worst))


def safety_figure(
    trajectories: Sequence[Trajectory],
    safety,
    names: Sequence[str],
    *,
    units: Sequence[str] | None = None,
    definitions: Sequence[str] | None = None,
    true_levels: Sequence[float] | None = None,
    funnels: int = 8,
    title: str = "",
) -> Figure | None:
    """Each of the controller's safety rows ``h(obs)`` over the episodes (``h >= 0`` where
    the controller's planning limit holds): the realized value on the true state in every
    episode and, for the episode that came closest to a constraint, at ``funnels`` evenly
    spaced steps the plan made there, drawn over its horizon with its tube (``planned -
    tube .. planned + tube``: where the true value stays while the one-step errors stay
    within the bound; no tube is drawn, and the legend says so, where the controller
    tightens nothing).

    ``names[j]`` is row ``j``'s constraint as a person writes it, ``definitions[j]`` its
    ``h`` as a formula of the observation (both shown above the row), ``units[j]`` the unit
    of ``h``; ``true_levels[j]`` (NaN: none) is the value of ``h`` on the task's true limit.
    States past the planning limit (``h < 0``) and past the true limit are marked in every
    episode. ``None`` when the controller has no safety rows.
    """
    realized = [safety_rows(traj, safety)["realized"] for traj in trajectories]
    m = realized[0].shape[1]
    if m == 0:
        return None
    units = [""] * m if units is None else units
    definitions = [f"h_{j}(obs)" for j in range(m)] if definitions is None else definitions
    levels = np.full(m, np.nan) if true_levels is None else np.asarray(true_levels, float)
    chosen = _worst_episode(realized)
    traj = trajectories[chosen]
    dt = traj.t[1] - traj.t[0]
    head = f"{title}: " if title else ""
    fig = _figure(
        m,
        2.3,
        f"{head}the controller's safety rows h (h >= 0: its planning limit holds)",
    )
    axes = np.atleast_1d(fig.subplots(m, 1, sharex=True))
    T, n_stages = traj.plan_obs.shape[:2]
    steps = [
        k
        for k in np.unique(np.linspace(0, T - 1, funnels).astype(int))
        if np.all(np.isfinite(traj.plan_obs[k]))  # else the controller fell back: no plan
    ]
    has_tube = traj.tube.shape[2] == m
    tubes = [traj.tube[k] if has_tube else np.zeros((n_stages, m)) for k in steps]
    widened = any(np.any(tube > 0) for tube in tubes)
    plans = f"plans made at {count(len(steps), 'step')} of episode {chosen}"
    if not widened:
        plans += " (no tube: nothing tightened)"
    for k, tube in zip(steps, tubes, strict=True):
        h = np.asarray(safety.map(n_stages)(traj.plan_obs[k].T)).reshape(m, n_stages)
        t = traj.t[k] + dt * np.arange(n_stages)
        for j, ax in enumerate(axes):
            if widened:
                ax.fill_between(
                    t,
                    h[j] - tube[:, j],
                    h[j] + tube[:, j],
                    color=PLAN,
                    alpha=0.25,
                    linewidth=0,
                    zorder=LIMIT_Z,
                    label="tube around each plan (plan +- tube)",
                )
            ax.plot(t, h[j], color=PLAN, linewidth=0.8, zorder=REFERENCE_Z, label=plans)
    n = len(trajectories)
    others = "the other episode" if n == 2 else f"the other {count(n - 1, 'episode')}"
    for j, ax in enumerate(axes):
        level = float(levels[j])
        same = np.isfinite(level) and np.isclose(level, 0.0)
        for e, (other, rows) in enumerate(zip(trajectories, realized, strict=True)):
            if e != chosen:
                ax.plot(
                    other.t[1:],
                    rows[:, j],
                    color=STATE,
                    alpha=0.3,
                    linewidth=0.8,
                    zorder=TRACE_Z,
                    label=f"realized, {others}",
                )
        values = realized[chosen][:, j]
        ax.plot(
            traj.t[1:],
            values,
            color=STATE,
            linewidth=1.4,
            zorder=TRACE_Z,
            label=f"realized, episode {chosen}",
        )
        for other, rows in zip(trajectories, realized, strict=True):
            values = rows[:, j]
            past_true = values < level if np.isfinite(level) else np.zeros(len(values), bool)
            past_plan = (values < 0) & ~past_true
            if past_true.any():
                ax.plot(
                    other.t[1:][past_true],
                    values[past_true],
                    "x",
                    color=TRUE_LIMIT,
                    zorder=MARK_Z,
                    label="past the true limit (= planning limit)"
                    if same
                    else "past the true limit",
                )
            if past_plan.any():
                ax.plot(
                    other.t[1:][past_plan],
                    values[past_plan],
                    "x",
                    color=PLANNING_LIMIT,
                    zorder=MARK_Z,
                    label="past the planning limit (h < 0)",
                )
        if same:
            ax.axhline(
                0.0,
                color=TRUE_LIMIT,
                linewidth=1.4,
                zorder=LIMIT_Z,
                label="true limit (= planning limit, h = 0)",
            )
        else:
            ax.axhline(
                0.0,
                color=PLANNING_LIMIT,
                linestyle="--",
                linewidth=1.2,
                zorder=LIMIT_Z,
                label="planning limit (h = 0)",
            )
            if np.isfinite(level):
                ax.axhline(
                    level, color=TRUE_LIMIT, linewidth=1.4, zorder=LIMIT_Z, label="true limit"
                )
        # the view follows the realized values: a tube that grows past them leaves the plot
        every = np.concatenate([r[:, j] for r in realized])
        lo = min(0.0, float(every.min()), level if np.isfinite(level) else 0.0)
        hi = float(every.max())
        pad = 0.6 * max(hi - lo, 1e-9)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_title(f"{names[j]}:  h = {_with_unit(definitions[j], units[j])}", fontsize=9)
        ax.set_ylabel(axis_label("h", units[j]))
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig


def _with_unit(text: str, unit: str) -> str:
    return f"{text} [{unit}]" if unit else text


def coverage_figure(
    trajectories: Sequence[Trajectory],
    model,
    names: Sequence[str],
    units: Sequence[str],
    *,
    title: str = "",
) -> Figure:
    """The model's realized one-step errors against its bound, per state entry, over the
    episodes; steps where the error leaves the bound marked."""
    checks = [prediction_check(traj, model) for traj in trajectories]
    nx = checks[0]["error"].shape[1]
    outside = sum(int(np.any(np.abs(c["error"]) > c["bound"], axis=1).sum()) for c in checks)
    steps = sum(len(c["error"]) for c in checks)
    head = f"{title}: " if title else ""
    delta = getattr(model, "delta", None)
    promise = "" if delta is None else f"; the bound promises >= {1 - delta:.3g} inside"
    fig = _figure(
        nx,
        1.5,
        f"{head}one-step error against the model's bound "
        f"({outside} of {count(steps, 'step')} outside in some entry{promise})",
    )
    axes = np.atleast_1d(fig.subplots(nx, 1, sharex=True))
    n = len(trajectories)
    for i, ax in enumerate(axes):
        for traj, check in zip(trajectories, checks, strict=True):
            t = traj.t[:-1]
            err, bound = np.abs(check["error"][:, i]), check["bound"][:, i]
            ax.plot(
                t,
                err,
                color=STATE,
                zorder=TRACE_Z,
                label=_episodes_label("|one-step error|", n),
                **_style(n),
            )
            if np.isfinite(bound).any():
                ax.plot(
                    t, bound, color=BOUND, zorder=LIMIT_Z, label="the model's bound", **_style(n)
                )
                out = err > bound
                if out.any():
                    ax.plot(
                        t[out],
                        err[out],
                        "x",
                        color=TRUE_LIMIT,
                        zorder=MARK_Z,
                        label="outside the bound",
                    )
        ax.set_yscale("log")
        ax.set_ylabel(axis_label(f"{names[i]} error", units[i]))
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig


def constrained_entries_figure(
    trajectories: Sequence[Trajectory],
    *,
    names: Sequence[str],
    units: Sequence[str],
    obs_min: np.ndarray,
    obs_max: np.ndarray,
    true_min: np.ndarray | None = None,
    true_max: np.ndarray | None = None,
    title: str = "",
) -> Figure | None:
    """Every episode's true value of each observation entry with a planning or a true
    limit, against both; episodes that cross the true limit drawn in red, those that
    cross only the planning limit in orange. ``None`` when no entry has a limit."""
    n = len(names)
    true_min, true_max = _nan_bounds(true_min, n), _nan_bounds(true_max, n)
    limits = np.stack([obs_min, obs_max, true_min, true_max])
    bounded = [i for i in range(n) if np.isfinite(limits[:, i]).any()]
    if not bounded:
        return None
    n_runs = len(trajectories)
    head = f"{title}: " if title else ""
    fig = _figure(len(bounded), 2.4, f"{head}limited entries over {count(n_runs, 'episode')}")
    axes = np.atleast_1d(fig.subplots(len(bounded), 1, sharex=True))

    def outside(x, lo, hi):
        return bool(np.any(x < lo) or np.any(x > hi))

    for ax, i in zip(axes, bounded, strict=True):
        lo_p, hi_p = _open(obs_min[i], -1), _open(obs_max[i], 1)
        lo_t, hi_t = _open(true_min[i], -1), _open(true_max[i], 1)
        crossed_true = crossed_plan = 0
        for traj in trajectories:
            x = traj.states[:, i]
            past_true, past_plan = outside(x, lo_t, hi_t), outside(x, lo_p, hi_p)
            crossed_true += past_true
            crossed_plan += past_plan
            if past_true:
                style = {"color": TRUE_LIMIT, "alpha": 0.9, "label": "crosses the true limit"}
            elif past_plan:
                style = {
                    "color": PLANNING_LIMIT,
                    "alpha": 0.7,
                    "label": "crosses the planning limit only",
                }
            else:
                faint = 0.35 if n_runs > MAX_LINES else 0.7
                style = {"color": STATE, "alpha": faint, "label": "within the limits"}
            ax.plot(traj.t, x, linewidth=0.9, zorder=TRACE_Z, **style)
        _limit_lines(ax, (obs_min[i], obs_max[i]), (true_min[i], true_max[i]))
        ax.set_ylabel(axis_label(names[i], units[i]))
        parts = []
        if np.isfinite([true_min[i], true_max[i]]).any():
            parts.append(f"true limit crossed in {crossed_true} of {count(n_runs, 'episode')}")
        if np.isfinite([obs_min[i], obs_max[i]]).any():
            parts.append(f"planning limit crossed in {crossed_plan}")
        ax.set_title(f"{names[i]}: " + ", ".join(parts), fontsize=9)
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig
