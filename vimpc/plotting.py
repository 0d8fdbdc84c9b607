"""Figures of closed-loop runs (matplotlib's object API; no global state).

Each ``*_figure`` function builds and returns a :class:`~matplotlib.figure.Figure` and
:func:`save` writes one as a PNG. Every axis carries its unit; every figure is titled
with the scenario; a legend names each kind of line once. Limits come in two kinds,
drawn apart: the *true* limits of the task (the env's, where crossing it is a
violation) and the *planning* limits the controller was given (often tighter). Limits
lie beneath the traces and marks (saturated inputs, crossings) on top, so a trace that
runs along a limit stays visible. Every episode of a run is drawn, and its marks; past
:data:`MAX_LINES` episodes their lines are thin and faint, so where they crowd shows how
the episodes spread. Counts agree with their nouns ("1 episode").
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
from vimpc.report import count

#: runs with more episodes than this draw them thin and faint, without one legend entry each
MAX_LINES = 8

#: an input within this fraction of its range (of ``max(1, |limit|)`` where the other end
#: is open) from a limit is drawn as saturated
SATURATION_TOLERANCE = 1e-3

STATE, REFERENCE, INPUT = "C0", "C1", "C2"
TRUE_LIMIT, PLANNING_LIMIT, INPUT_LIMIT = "C3", "C4", "0.35"
PLAN, BOUND, SATURATED, MARK = "C1", "C1", "k", "k"
# limits drawn beneath the traces, references between them, marks on top
LIMIT_Z, REFERENCE_Z, TRACE_Z, MARK_Z = 1.0, 1.5, 2.0, 3.0
SATURATED_LABEL = f"input at its limit (within {SATURATION_TOLERANCE:.1%} of its range)"


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
    return what if n == 1 else f"{what} ({count(n, 'episode')})"


def _series(
    ax, t_list: list[np.ndarray], values: list[np.ndarray], color: str, what: str, step=False
):
    """Every episode's ``values`` against its ``t``."""
    n = len(values)
    label = _episodes_label(what, n)
    for t, v in zip(t_list, values, strict=True):
        if step:
            ax.step(t, v, where="post", color=color, label=label, zorder=TRACE_Z, **_style(n))
        else:
            ax.plot(t, v, color=color, label=label, zorder=TRACE_Z, **_style(n))


def _limit_lines(ax, planning: Sequence[float], true: Sequence[float]) -> None:
    """Planning limits dashed, true limits solid, beneath the traces (a trace that runs
    along a limit stays visible); one line where they coincide."""
    true = [float(v) for v in true if np.isfinite(v)]
    for value in (float(v) for v in planning if np.isfinite(v)):
        if any(np.isclose(value, w) for w in true):
            continue
        ax.axhline(
            value,
            color=PLANNING_LIMIT,
            linestyle="--",
            linewidth=1.2,
            zorder=LIMIT_Z,
            label="planning limit",
        )
    planning = [float(v) for v in planning if np.isfinite(v)]
    for value in true:
        same = any(np.isclose(value, w) for w in planning)
        label = "true limit (= planning limit)" if same else "true limit"
        ax.axhline(value, color=TRUE_LIMIT, linewidth=1.4, zorder=LIMIT_Z, label=label)


def saturated(u: np.ndarray, low: float, high: float) -> np.ndarray:
    """Where the input samples ``u`` lie at (or past) a finite limit, within
    :data:`SATURATION_TOLERANCE` of the input's range."""
    u = np.asarray(u, dtype=np.float64)
    if np.isfinite(low) and np.isfinite(high):
        tol = SATURATION_TOLERANCE * (high - low)
        return (u >= high - tol) | (u <= low + tol)
    out = np.zeros(u.shape, dtype=bool)
    for end, side in ((low, -1), (high, 1)):
        if np.isfinite(end):
            tol = SATURATION_TOLERANCE * max(1.0, abs(end))
            out |= side * (u - end) >= -tol
    return out


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
        (("FAILED", "INFEASIBLE"), "x", "failed (fallback input)"),
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
