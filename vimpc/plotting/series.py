"""Figures of closed-loop runs over time: the true states and inputs with their references
and limits (:func:`states_inputs_figure`), and the controller's solve time per step
(:func:`solve_times_figure`). Each builds and returns a :class:`~matplotlib.figure.Figure`;
:func:`vimpc.plotting.style.save` writes one. The conventions all figures share are
:mod:`vimpc.plotting.style`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from vimpc._text import count
from vimpc.closedloop import Trajectory
from vimpc.plotting.style import (
    INPUT,
    INPUT_LIMIT,
    LIMIT_Z,
    MARK,
    MARK_Z,
    MAX_LINES,
    REFERENCE,
    REFERENCE_Z,
    SATURATED,
    SATURATED_LABEL,
    STATE,
    TRACE_Z,
    TRUE_LIMIT,
    _figure,
    _legend,
    _limit_lines,
    _nan_bounds,
    _series,
    _style,
    axis_label,
    saturated,
    unwrapped,
)


def states_inputs_figure(
    trajectories: Sequence[Trajectory],
    *,
    names: Sequence[str],
    units: Sequence[str],
    input_names: Sequence[str],
    input_units: Sequence[str],
    u_min: np.ndarray,
    u_max: np.ndarray,
    obs_min: np.ndarray | None = None,
    obs_max: np.ndarray | None = None,
    true_min: np.ndarray | None = None,
    true_max: np.ndarray | None = None,
    periodic: Sequence[int] = (),
    tracked: Sequence[int] | None = None,
    title: str = "",
) -> Figure:
    """True states with their planning (``obs_min``, ``obs_max``) and true (``true_min``,
    ``true_max``) limits, and inputs with their limits, over the episodes.

    Angles listed in ``periodic`` are unwrapped; their reference is drawn on the branch
    (a whole number of turns away) where the episode ends. References are drawn for the
    ``tracked`` entries only (all by default) and only where finite.
    """
    first = trajectories[0]
    n, m = first.states.shape[1], first.inputs.shape[1]
    obs_min, obs_max = _nan_bounds(obs_min, n), _nan_bounds(obs_max, n)
    true_min, true_max = _nan_bounds(true_min, n), _nan_bounds(true_max, n)
    tracked = range(n) if tracked is None else tracked
    fig = _figure(n + m, 1.7, f"{title}: states and inputs" if title else "states and inputs")
    axes = np.atleast_1d(fig.subplots(n + m, 1, sharex=True))
    times = [traj.t for traj in trajectories]
    for i in range(n):
        ax = axes[i]
        values = [traj.states[:, i] for traj in trajectories]
        if i in periodic:
            values = [unwrapped(v) for v in values]
        _series(ax, times, values, STATE, "true state")
        if i in tracked:
            drawn: list[np.ndarray] = []
            for k in range(len(trajectories)):
                ref = trajectories[k].reference[:, i].copy()
                if not np.isfinite(ref).any():
                    continue
                if i in periodic:
                    last = np.flatnonzero(np.isfinite(ref))[-1]
                    turns = np.round((values[k][last] - ref[last]) / (2 * np.pi))
                    ref = ref + 2 * np.pi * turns
                if any(len(r) == len(ref) and np.allclose(r, ref, equal_nan=True) for r in drawn):
                    continue
                drawn.append(ref)
                ax.plot(
                    times[k],
                    ref,
                    "--",
                    color=REFERENCE,
                    linewidth=1.2,
                    alpha=_style(len(trajectories))["alpha"],
                    zorder=REFERENCE_Z,
                    label="reference",
                )
        _limit_lines(ax, (obs_min[i], obs_max[i]), (true_min[i], true_max[i]))
        ax.set_ylabel(axis_label(names[i], units[i]))
    for j in range(m):
        ax = axes[n + j]
        inputs = [traj.inputs[:, j] for traj in trajectories]
        _series(ax, [t[:-1] for t in times], inputs, INPUT, "input", step=True)
        for value in (u_min[j], u_max[j]):
            if np.isfinite(value):
                ax.axhline(
                    value,
                    color=INPUT_LIMIT,
                    linestyle=":",
                    linewidth=1.4,
                    zorder=LIMIT_Z,
                    label="input limit",
                )
        for t, u in zip(times, inputs, strict=True):
            hit = saturated(u, u_min[j], u_max[j])
            if hit.any():
                ax.plot(
                    t[:-1][hit],
                    u[hit],
                    "o",
                    color=SATURATED,
                    markersize=3,
                    zorder=MARK_Z,
                    label=SATURATED_LABEL,
                )
        ax.set_ylabel(axis_label(input_names[j], input_units[j]))
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig


def solve_times_figure(
    trajectories: Sequence[Trajectory], *, time_budget: float | None = None, title: str = ""
) -> Figure:
    """Solve time per step for each episode; failed, late and iteration-limit solves
    marked (black marks, apart from the episodes' colours); the controller's
    ``time_budget`` [s] (solves past it are late) drawn where it has one."""
    fig = _figure(1, 2.8, f"{title}: solve times" if title else "solve times")
    ax = fig.subplots()
    n = len(trajectories)
    marks = (
        (("FAILED", "INFEASIBLE", "TIME_LIMIT"), "x", "failed (fallback input)"),
        (("LATE",), "o", "late"),
        (("ITERATION_LIMIT",), "^", "at the iteration limit"),
    )
    for k, traj in enumerate(trajectories):
        if n <= MAX_LINES:
            style = {"label": f"episode {k} (seed {traj.seed})", "linewidth": 1, "alpha": 0.8}
        else:
            style = {"label": count(n, "episode"), "color": STATE, **_style(n)}
        ax.plot(traj.t[:-1], traj.solve_times * 1e3, zorder=TRACE_Z, **style)
    for traj in trajectories:
        for statuses, marker, what in marks:
            hit = np.isin(traj.status, statuses)
            if hit.any():
                ax.plot(
                    traj.t[:-1][hit],
                    traj.solve_times[hit] * 1e3,
                    marker,
                    color=MARK,
                    markerfacecolor="none" if marker != "x" else MARK,
                    linestyle="none",
                    zorder=MARK_Z,
                    label=what,
                )
    if time_budget is not None:
        ax.axhline(
            time_budget * 1e3,
            color=TRUE_LIMIT,
            linestyle="--",
            linewidth=1.2,
            zorder=LIMIT_Z,
            label="time budget (solves past it are late)",
        )
    ax.set_yscale("log")
    # plain numbers at 1, 2, 5 per decade: solve times often span less than a decade
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time [s]")
    ax.set_ylabel("solve time [ms]")
    _legend(fig)
    return fig
