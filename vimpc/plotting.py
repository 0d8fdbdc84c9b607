"""Figures of closed-loop runs (matplotlib's object API; no global state).

Each ``*_figure`` function builds and returns a :class:`~matplotlib.figure.Figure` and
:func:`save` writes one as a PNG. Every axis carries its unit; every figure is titled
with the scenario; a legend names each kind of line once. Limits come in two kinds,
drawn apart: the *true* limits of the task (the env's, where crossing it is a
violation) and the *planning* limits the controller was given (often tighter). Every
episode of a run is drawn; past :data:`MAX_LINES` episodes their lines are thin and
faint, so where they crowd shows how the episodes spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from vimpc._files import write_atomic
from vimpc.closedloop import Trajectory, prediction_check, safety_rows

#: runs with more episodes than this draw them thin and faint, without one legend entry each
MAX_LINES = 8

STATE, REFERENCE, INPUT = "C0", "C1", "C2"
TRUE_LIMIT, PLANNING_LIMIT, INPUT_LIMIT = "C3", "C4", "0.35"
PLAN, BOUND = "C1", "C1"


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` to ``path`` as a PNG (atomically, replacing an older file)."""
    FigureCanvasAgg(fig)
    write_atomic(
        path,
        lambda handle: fig.savefig(handle, format="png", dpi=110, bbox_inches="tight"),
        overwrite=True,
    )


def axis_label(name: str, unit: str) -> str:
    """``"name [unit]"`` (just the name for a dimensionless quantity)."""
    return f"{name} [{unit}]" if unit else name


def _style(n: int) -> dict[str, float]:
    """Line weight of one of ``n`` episodes."""
    if n == 1:
        return {"alpha": 1.0, "linewidth": 1.2}
    return {"alpha": 0.7, "linewidth": 1.1} if n <= MAX_LINES else {"alpha": 0.3, "linewidth": 0.7}


def unwrapped(values: np.ndarray) -> np.ndarray:
    """An angle's samples without jumps of a whole turn (``np.unwrap``)."""
    return np.unwrap(np.asarray(values, dtype=np.float64))


def _figure(rows: int, row_height: float, title: str, width: float = 8.0) -> Figure:
    fig = Figure(figsize=(width, row_height * rows + 0.9), layout="constrained")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _legend(fig: Figure) -> None:
    """One legend for the whole figure, each label once (the first handle drawn with it)."""
    handles: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        columns = 4 if fig.get_figwidth() >= 8 else 2
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncol=min(columns, len(handles)),
            fontsize=8,
            frameon=False,
        )


def _episodes_label(what: str, n: int) -> str:
    return what if n == 1 else f"{what} ({n} episodes)"


def _series(
    ax, t_list: list[np.ndarray], values: list[np.ndarray], color: str, what: str, step=False
):
    """Every episode's ``values`` against its ``t``."""
    n = len(values)
    label = _episodes_label(what, n)
    for t, v in zip(t_list, values, strict=True):
        if step:
            ax.step(t, v, where="post", color=color, label=label, **_style(n))
        else:
            ax.plot(t, v, color=color, label=label, **_style(n))


def _limit_lines(ax, planning: Sequence[float], true: Sequence[float]) -> None:
    """Planning limits dashed, true limits solid; one line where they coincide."""
    true = [float(v) for v in true if np.isfinite(v)]
    for value in (float(v) for v in planning if np.isfinite(v)):
        if any(np.isclose(value, w) for w in true):
            continue
        ax.axhline(
            value, color=PLANNING_LIMIT, linestyle="--", linewidth=1.2, label="planning limit"
        )
    planning = [float(v) for v in planning if np.isfinite(v)]
    for value in true:
        same = any(np.isclose(value, w) for w in planning)
        label = "true limit (= planning limit)" if same else "true limit"
        ax.axhline(value, color=TRUE_LIMIT, linewidth=1.4, label=label)


def _open(bound: float, side: int) -> float:
    """A bound with NaN (none) read as the infinite end on ``side`` (-1 lower, +1 upper)."""
    return side * np.inf if np.isnan(bound) else float(bound)


def _nan_bounds(bounds: np.ndarray | None, n: int) -> np.ndarray:
    return np.full(n, np.nan) if bounds is None else np.asarray(bounds, dtype=np.float64)


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
                ax.plot(times[k], ref, "--", color=REFERENCE, linewidth=1.2, label="reference")
        _limit_lines(ax, (obs_min[i], obs_max[i]), (true_min[i], true_max[i]))
        ax.set_ylabel(axis_label(names[i], units[i]))
    for j in range(m):
        ax = axes[n + j]
        inputs = [traj.inputs[:, j] for traj in trajectories]
        _series(ax, [t[:-1] for t in times], inputs, INPUT, "input", step=True)
        for value in (u_min[j], u_max[j]):
            if np.isfinite(value):
                ax.axhline(value, color=INPUT_LIMIT, linewidth=1.2, label="input limit")
        ax.set_ylabel(axis_label(input_names[j], input_units[j]))
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig


def solve_times_figure(trajectories: Sequence[Trajectory], *, title: str = "") -> Figure:
    """Solve time per step for each episode; failed, late and iteration-limit solves
    marked."""
    fig = _figure(1, 2.8, f"{title}: solve times" if title else "solve times")
    ax = fig.subplots()
    n = len(trajectories)
    marks = (
        (("FAILED", "INFEASIBLE"), "x", "C3", "failed (fallback input)"),
        (("LATE",), "o", "C1", "late"),
        (("ITERATION_LIMIT",), "^", "C4", "at the iteration limit"),
    )
    for k, traj in enumerate(trajectories):
        label = f"episode {k} (seed {traj.seed})" if n <= MAX_LINES else f"{n} episodes"
        ax.plot(traj.t[:-1], traj.solve_times * 1e3, linewidth=1, alpha=0.8, label=label)
    for traj in trajectories:
        for statuses, marker, color, what in marks:
            hit = np.isin(traj.status, statuses)
            if hit.any():
                ax.plot(
                    traj.t[:-1][hit],
                    traj.solve_times[hit] * 1e3,
                    marker,
                    color=color,
                    linestyle="none",
                    label=what,
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


def mechanism_figure(
    trajectories: Sequence[Trajectory],
    system,
    *,
    snapshots: int = 8,
    plan_circles: Sequence[tuple[Sequence[float], float]] = (),
    true_circles: Sequence[tuple[Sequence[float], float]] = (),
    title: str = "",
) -> Figure:
    """The first episode's mechanism drawn at ``snapshots`` evenly spaced times, the path
    of its marker point in every episode, and keep-out circles ``(center, radius)`` [m]:
    the controller's (``plan_circles``, dashed) and the task's true obstacles
    (``true_circles``, filled)."""
    nq = system.nq
    fig = _figure(1, 5.5, f"{title}: mechanism" if title else "mechanism", width=6.5)
    ax = fig.subplots()
    first = trajectories[0]
    idx = np.linspace(0, len(first.t) - 1, snapshots).astype(int)
    label = f"episode 0 (seed {first.seed}) at {len(idx)} times"
    for j, k in enumerate(idx):
        shade = 0.25 + 0.75 * j / max(1, snapshots - 1)
        for line in system.sketch(first.states[k, :nq]):
            ax.plot(line[:, 0], line[:, 1], color=(0.1, 0.3, 0.7, shade), linewidth=2, label=label)
    n = len(trajectories)
    what = _episodes_label("path of the marker point", n)
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
    # the figure takes the drawing's shape, so a wide scene leaves no empty band
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    (x0, y0), (x1, y1) = ax.dataLim.get_points()
    ratio = (y1 - y0) / max(x1 - x0, 1e-9)
    fig.set_size_inches(6.5, float(np.clip(5.5 * ratio, 2.0, 6.0)) + 1.6)
    _legend(fig)
    return fig


def _worst_episode(rows: list[np.ndarray]) -> int:
    worst = [float(r.min()) if r.size else np.inf for r in rows]
    return int(np.argmin(worst))


def safety_figure(
    trajectories: Sequence[Trajectory],
    safety,
    names: Sequence[str],
    *,
    units: Sequence[str] | None = None,
    true_levels: Sequence[float] | None = None,
    funnels: int = 8,
    title: str = "",
) -> Figure | None:
    """Each of the controller's safety rows ``h(obs) >= 0`` over the episodes: the
    realized value on the true state in every episode and, for the episode that came
    closest to a constraint, at ``funnels`` evenly spaced steps the plan made there, drawn
    over its horizon with its tube (``planned - tube .. planned + tube``: where the true
    value stays while the one-step errors stay within the bound).

    ``h = 0`` is the planning limit; ``true_levels[j]`` (NaN: none) is the value of row
    ``j`` on the task's true limit. ``None`` when the controller has no safety rows.
    """
    realized = [safety_rows(traj, safety)["realized"] for traj in trajectories]
    m = realized[0].shape[1]
    if m == 0:
        return None
    units = [""] * m if units is None else units
    levels = np.full(m, np.nan) if true_levels is None else np.asarray(true_levels, float)
    chosen = _worst_episode(realized)
    traj = trajectories[chosen]
    dt = traj.t[1] - traj.t[0]
    fig = _figure(m, 2.1, f"{title}: safety rows" if title else "safety rows")
    axes = np.atleast_1d(fig.subplots(m, 1, sharex=True))
    T, n_stages = traj.plan_obs.shape[:2]
    for k in np.unique(np.linspace(0, T - 1, funnels).astype(int)):
        if not np.all(np.isfinite(traj.plan_obs[k])):
            continue  # the controller fell back: no plan
        h = np.asarray(safety.map(n_stages)(traj.plan_obs[k].T)).reshape(m, n_stages)
        t = traj.t[k] + dt * np.arange(n_stages)
        for j, ax in enumerate(axes):
            tube = traj.tube[k, :, j] if traj.tube.shape[2] == m else np.zeros(n_stages)
            ax.fill_between(
                t,
                h[j] - tube,
                h[j] + tube,
                color=PLAN,
                alpha=0.25,
                linewidth=0,
                label=f"plans with their tubes (episode {chosen})",
            )
            ax.plot(t, h[j], color=PLAN, linewidth=0.8)
    n = len(trajectories)
    for j, ax in enumerate(axes):
        for e, (other, rows) in enumerate(zip(trajectories, realized, strict=True)):
            if e != chosen:
                ax.plot(
                    other.t[1:],
                    rows[:, j],
                    color=STATE,
                    alpha=0.3,
                    linewidth=0.8,
                    label=f"realized, the other {n - 1} episodes",
                )
        values = realized[chosen][:, j]
        ax.plot(traj.t[1:], values, color=STATE, linewidth=1.4, label=f"realized, episode {chosen}")
        bad = values < 0
        if bad.any():
            ax.plot(traj.t[1:][bad], values[bad], "x", color=TRUE_LIMIT, label="below h = 0")
        level = float(levels[j])
        if np.isfinite(level) and np.isclose(level, 0.0):
            ax.axhline(0.0, color=TRUE_LIMIT, linewidth=1.4, label="true limit (= planning limit)")
        else:
            ax.axhline(
                0.0,
                color=PLANNING_LIMIT,
                linestyle="--",
                linewidth=1.2,
                label="planning limit (h = 0)",
            )
            if np.isfinite(level):
                ax.axhline(level, color=TRUE_LIMIT, linewidth=1.4, label="true limit")
        # the view follows the realized values: a tube that grows past them leaves the plot
        every = np.concatenate([r[:, j] for r in realized])
        lo = min(0.0, float(every.min()), level if np.isfinite(level) else 0.0)
        hi = float(every.max())
        pad = 0.6 * max(hi - lo, 1e-9)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_ylabel(f"{names[j]}\n" + axis_label("margin", units[j]), fontsize=9)
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig


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
    fig = _figure(
        nx,
        1.5,
        f"{head}one-step error against the model's bound ({outside} of {steps} steps outside)",
    )
    axes = np.atleast_1d(fig.subplots(nx, 1, sharex=True))
    n = len(trajectories)
    for i, ax in enumerate(axes):
        for traj, check in zip(trajectories, checks, strict=True):
            t = traj.t[:-1]
            err, bound = np.abs(check["error"][:, i]), check["bound"][:, i]
            ax.plot(t, err, color=STATE, label=_episodes_label("|error|", n), **_style(n))
            if np.isfinite(bound).any():
                ax.plot(t, bound, color=BOUND, label="bound", **_style(n))
                out = err > bound
                if out.any():
                    ax.plot(t[out], err[out], "x", color=TRUE_LIMIT, label="outside the bound")
        ax.set_yscale("log")
        ax.set_ylabel(axis_label(names[i], units[i]))
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
    count = len(trajectories)
    head = f"{title}: " if title else ""
    fig = _figure(len(bounded), 2.4, f"{head}limited entries over {count} episodes")
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
                style = {"color": STATE, "alpha": 0.35, "label": "within the limits"}
            ax.plot(traj.t, x, linewidth=0.9, **style)
        _limit_lines(ax, (obs_min[i], obs_max[i]), (true_min[i], true_max[i]))
        ax.set_ylabel(axis_label(names[i], units[i]))
        parts = []
        if np.isfinite([true_min[i], true_max[i]]).any():
            parts.append(f"{crossed_true} of {count} episodes cross the true limit")
        if np.isfinite([obs_min[i], obs_max[i]]).any():
            parts.append(f"{crossed_plan} cross the planning limit")
        ax.set_title(f"{names[i]}: " + ", ".join(parts), fontsize=9)
    axes[-1].set_xlabel("time [s]")
    _legend(fig)
    return fig
