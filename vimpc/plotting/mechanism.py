"""The mechanism drawn in its plane: snapshots of the first episode, the marker point's path
in every episode, keep-out circles and a cart's rail with its end stops
(:func:`mechanism_figure`; conventions from :mod:`vimpc.plotting.style`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from vimpc.closedloop import Trajectory
from vimpc.plotting.style import (
    LIMIT_Z,
    PLANNING_LIMIT,
    TRACE_Z,
    TRUE_LIMIT,
    _episodes_label,
    _figure,
    _legend,
    _style,
)


def mechanism_figure(
    trajectories: Sequence[Trajectory],
    system,
    *,
    snapshots: int = 8,
    plan_circles: Sequence[tuple[Sequence[float], float]] = (),
    true_circles: Sequence[tuple[Sequence[float], float]] = (),
    rail: tuple[float, float] | None = None,
    plan_rail: tuple[float, float] | None = None,
    marker_name: str = "marker point",
    title: str = "",
) -> Figure:
    """The first episode's mechanism drawn at ``snapshots`` evenly spaced times (darker
    later), the path of its marker point (``marker_name``) in every episode, and the
    limits in the plane [m]: keep-out circles ``(center, radius)``, the controller's
    (``plan_circles``, dashed) and the task's true obstacles (``true_circles``, filled),
    and for a cart on a horizontal rail at ``y = 0`` the true limits ``rail = (lower,
    upper)`` of the cart's centre (solid end stops) and the controller's ``plan_rail``
    (dashed end stops where they differ); an infinite end has no stop."""
    nq = system.nq
    fig = _figure(1, 5.5, f"{title}: mechanism" if title else "mechanism", width=6.5)
    ax = fig.subplots()
    first = trajectories[0]
    idx = np.linspace(0, len(first.t) - 1, snapshots).astype(int)
    label = f"episode 0 (seed {first.seed}) at {len(idx)} times, darker later"
    for j, k in enumerate(idx):
        shade = 0.25 + 0.75 * j / max(1, snapshots - 1)
        for line in system.sketch(first.states[k, :nq]):
            ax.plot(
                line[:, 0],
                line[:, 1],
                color=(0.1, 0.3, 0.7, shade),
                linewidth=2,
                zorder=TRACE_Z,
                label=label,
            )
    n = len(trajectories)
    what = _episodes_label(f"path of the {marker_name}", n)
    for traj in trajectories:
        tips = np.array([system.marker(traj.states[i, :nq]) for i in range(len(traj.t))])
        ax.plot(tips[:, 0], tips[:, 1], color="C1", label=what, **_style(n))
    angle = np.linspace(0.0, 2 * np.pi, 200)
    for center, radius in true_circles:
        ax.fill(
            center[0] + radius * np.cos(angle),
            center[1] + radius * np.sin(angle),
            color=TRUE_LIMIT,
            alpha=0.35,
            linewidth=0,
            label="obstacle (true limit)",
        )
    for center, radius in plan_circles:
        ax.plot(
            center[0] + radius * np.cos(angle),
            center[1] + radius * np.sin(angle),
            "--",
            color=PLANNING_LIMIT,
            linewidth=1.2,
            label="keep-out circle (planning limit)",
        )
    if rail is not None:
        _rail(ax, rail, plan_rail)
    # the figure takes the drawing's shape, so a wide scene leaves no empty band
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    (x0, y0), (x1, y1) = ax.dataLim.get_points()
    ratio = (y1 - y0) / max(x1 - x0, 1e-9)
    fig.set_size_inches(6.5, float(np.clip(5.5 * ratio, 2.0, 6.0)) + 1.6)
    _legend(fig)
    return fig


def _rail(ax, rail: tuple[float, float], plan_rail: tuple[float, float] | None) -> None:
    """The rail along ``y = 0`` beneath the carts: solid end stops at the true limits of
    the cart's centre, dashed ones at the controller's where they differ. An open end
    runs to the drawing's edge."""
    (x0, _), (x1, _) = ax.dataLim.get_points()
    lo, hi = (float(v) for v in rail)
    span = max(x1 - x0, 1e-9)
    left = lo if np.isfinite(lo) else min(x0, hi if np.isfinite(hi) else x0) - 0.05 * span
    right = hi if np.isfinite(hi) else max(x1, lo if np.isfinite(lo) else x1) + 0.05 * span
    ax.plot([left, right], [0.0, 0.0], color="0.55", linewidth=3, zorder=LIMIT_Z, label="rail")
    stop = 0.08 * max(span, right - left)
    for end in (lo, hi):
        if np.isfinite(end):
            ax.plot(
                [end, end],
                [-stop, stop],
                color=TRUE_LIMIT,
                linewidth=2.5,
                zorder=LIMIT_Z,
                label=f"rail ends: cart centre in [{lo:g}, {hi:g}] m (true limit)",
            )
    if plan_rail is None:
        return
    plo, phi = (float(v) for v in plan_rail)
    for end, true_end in ((plo, lo), (phi, hi)):
        if np.isfinite(end) and not np.isclose(end, true_end):
            ax.plot(
                [end, end],
                [-stop, stop],
                "--",
                color=PLANNING_LIMIT,
                linewidth=1.5,
                zorder=LIMIT_Z,
                label=f"cart centre's planning limits [{plo:g}, {phi:g}] m",
            )
