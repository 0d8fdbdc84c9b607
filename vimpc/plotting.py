"""Figures of closed-loop runs (matplotlib's object API; no global state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from vimpc._files import write_atomic
from vimpc.closedloop import Trajectory, prediction_check, safety_rows


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    write_atomic(
        path,
        lambda handle: fig.savefig(handle, format="png", dpi=110, bbox_inches="tight"),
        overwrite=True,
    )


def plot_states_inputs(
    traj: Trajectory,
    obs_names: Sequence[str],
    input_names: Sequence[str],
    u_min: np.ndarray,
    u_max: np.ndarray,
    path: Path,
    obs_min: np.ndarray | None = None,
    obs_max: np.ndarray | None = None,
    periodic: Sequence[int] = (),
) -> None:
    """True states against the reference and bounds, and inputs against their limits.
    Angles listed in ``periodic`` are drawn on the reference's branch."""
    n, m = traj.states.shape[1], traj.inputs.shape[1]
    states = traj.states.copy()
    for i in periodic:
        ref = np.nan_to_num(traj.reference[:, i])
        states[:, i] = ref + np.angle(np.exp(1j * (states[:, i] - ref)))
    fig = Figure(figsize=(8, 1.8 * (n + m)))
    axes = fig.subplots(n + m, 1, sharex=True)
    for i in range(n):
        ax = axes[i]
        ax.plot(traj.t, states[:, i], color="C0", label="true state")
        if np.isfinite(traj.reference[:, i]).any():
            ax.plot(traj.t, traj.reference[:, i], "--", color="C1", label="reference")
        for bounds in (obs_min, obs_max):
            if bounds is not None and np.isfinite(bounds[i]):
                ax.axhline(bounds[i], color="C3", linewidth=1, label="limit")
        ax.set_ylabel(obs_names[i])
    for j in range(m):
        ax = axes[n + j]
        ax.step(traj.t[:-1], traj.inputs[:, j], where="post", color="C2")
        ax.axhline(u_min[j], color="C3", linewidth=1)
        ax.axhline(u_max[j], color="C3", linewidth=1)
        ax.set_ylabel(input_names[j])
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("time [s]")
    _save(fig, path)


def plot_solve_times(trajectories: Sequence[Trajectory], path: Path) -> None:
    """Solve time per step for each episode, failures marked."""
    fig = Figure(figsize=(8, 3))
    ax = fig.subplots()
    for k, traj in enumerate(trajectories):
        ax.plot(traj.t[:-1], traj.solve_times * 1e3, linewidth=1, label=f"episode {k}")
        bad = np.isin(traj.status, ("FAILED", "INFEASIBLE"))
        if bad.any():
            ax.plot(traj.t[:-1][bad], traj.solve_times[bad] * 1e3, "x", color="C3")
    ax.set_yscale("log")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("solve time [ms]")
    if len(trajectories) <= 8:
        ax.legend(fontsize=8)
    _save(fig, path)


def plot_mechanism(
    traj: Trajectory,
    system,
    path: Path,
    snapshots: int = 8,
    circles: Sequence[tuple[Sequence[float], float]] = (),
) -> None:
    """The mechanism drawn at evenly spaced times, the path of its marker point, and
    keep-out circles ``(center, radius)`` [m]."""
    nq = system.nq
    fig = Figure(figsize=(6, 6))
    ax = fig.subplots()
    idx = np.linspace(0, len(traj.t) - 1, snapshots).astype(int)
    for j, k in enumerate(idx):
        shade = 0.25 + 0.75 * j / max(1, snapshots - 1)
        for line in system.sketch(traj.states[k, :nq]):
            ax.plot(line[:, 0], line[:, 1], color=(0.1, 0.3, 0.7, shade), linewidth=2)
    tips = np.array([system.marker(traj.states[k, :nq]) for k in range(len(traj.t))])
    ax.plot(tips[:, 0], tips[:, 1], color="C1", linewidth=1, label="path")
    for center, radius in circles:
        angle = np.linspace(0.0, 2 * np.pi, 100)
        ax.fill(
            center[0] + radius * np.cos(angle),
            center[1] + radius * np.sin(angle),
            color="C3",
            alpha=0.3,
            label="keep-out",
        )
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_safety(
    traj: Trajectory, safety, names: Sequence[str], path: Path, funnels: int = 8
) -> None:
    """Each of the controller's safety rows ``h(obs) >= 0`` over the episode: the realized
    value on the true state, and at ``funnels`` evenly spaced steps the plan made there,
    drawn over its horizon with its tube (``planned - tube .. planned + tube``: where the
    true value stays while the one-step errors stay within the bound)."""
    rows = safety_rows(traj, safety)
    m = rows["realized"].shape[1]
    if m == 0:
        return
    dt = traj.t[1] - traj.t[0]
    fig = Figure(figsize=(8, 2.2 * m))
    axes = np.atleast_1d(fig.subplots(m, 1, sharex=True))
    T, n_stages = traj.plan_obs.shape[:2]
    starts = np.unique(np.linspace(0, T - 1, funnels).astype(int))
    for k in starts:
        if not np.all(np.isfinite(traj.plan_obs[k])):
            continue  # the controller fell back: no plan
        h = np.asarray(safety.map(n_stages)(traj.plan_obs[k].T)).reshape(m, n_stages)
        t = traj.t[k] + dt * np.arange(n_stages)
        for j, ax in enumerate(axes):
            tube = traj.tube[k, :, j] if traj.tube.shape[2] == m else np.zeros(n_stages)
            ax.fill_between(t, h[j] - tube, h[j] + tube, color="C1", alpha=0.25, linewidth=0)
            ax.plot(t, h[j], color="C1", linewidth=0.8)
    for j, ax in enumerate(axes):
        realized = rows["realized"][:, j]
        ax.plot(traj.t[1:], realized, color="C0", linewidth=1.3)
        ax.axhline(0.0, color="C3", linewidth=1)
        # the view follows the realized values: a tube that grows past them leaves the plot
        lo, hi = min(0.0, float(realized.min())), float(realized.max())
        pad = 0.6 * max(hi - lo, 1e-9)
        ax.set_ylim(lo - pad, hi + pad)
        bad = rows["realized"][:, j] < 0
        if bad.any():
            ax.plot(traj.t[1:][bad], rows["realized"][bad, j], "x", color="C3")
        ax.set_ylabel(names[j])
    handles = [
        Patch(color="C1", alpha=0.4, label="plans with their tubes"),
        Line2D([], [], color="C0", label="realized (true state)"),
        Line2D([], [], color="C3", label="constraint h = 0"),
    ]
    axes[0].legend(handles=handles, loc="upper right", fontsize=7, ncol=3)
    axes[-1].set_xlabel("time [s]")
    _save(fig, path)


def plot_coverage(traj: Trajectory, model, names: Sequence[str], path: Path) -> None:
    """The model's realized one-step errors against its bound, per state entry."""
    check = prediction_check(traj, model)
    nx = check["error"].shape[1]
    t = traj.t[:-1]
    fig = Figure(figsize=(8, 1.6 * nx))
    axes = np.atleast_1d(fig.subplots(nx, 1, sharex=True))
    for i, ax in enumerate(axes):
        err, bound = np.abs(check["error"][:, i]), check["bound"][:, i]
        ax.plot(t, err, color="C0", linewidth=1, label="|error|")
        if np.isfinite(bound).any():
            ax.plot(t, bound, color="C1", linewidth=1, label="bound")
            out = err > bound
            if out.any():
                ax.plot(t[out], err[out], "x", color="C3", label="outside")
        ax.set_yscale("log")
        ax.set_ylabel(names[i])
    axes[0].legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("time [s]")
    _save(fig, path)


def plot_constrained_entries(
    trajectories: Sequence[Trajectory],
    names: Sequence[str],
    obs_min: np.ndarray,
    obs_max: np.ndarray,
    path: Path,
    title: str = "",
) -> bool:
    """Every episode's true value of each observation entry that has a bound, against the
    bound; episodes that cross it drawn in red. Returns False (and draws nothing) when no
    entry is bounded."""
    bounded = [i for i in range(len(names)) if np.isfinite(obs_min[i]) or np.isfinite(obs_max[i])]
    if not bounded:
        return False
    fig = Figure(figsize=(8, 2.6 * len(bounded)))
    axes = np.atleast_1d(fig.subplots(len(bounded), 1, sharex=True))
    for ax, i in zip(axes, bounded, strict=True):
        crossed = 0
        for traj in trajectories:
            x = traj.states[:, i]
            bad = bool(np.any(x < obs_min[i]) or np.any(x > obs_max[i]))
            crossed += bad
            ax.plot(
                traj.t, x, color="C3" if bad else "C0", alpha=0.8 if bad else 0.25, linewidth=0.8
            )
        for limit in (obs_min[i], obs_max[i]):
            if np.isfinite(limit):
                ax.axhline(limit, color="k", linewidth=1.2)
        ax.set_ylabel(names[i])
        ax.set_title(
            f"{title}{len(trajectories)} episodes, {crossed} crossing the bound", fontsize=9
        )
    axes[-1].set_xlabel("time [s]")
    _save(fig, path)
    return True
