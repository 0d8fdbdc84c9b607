"""Figures of closed-loop runs (matplotlib's object API; no global state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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


def plot_safety(traj: Trajectory, safety, names: Sequence[str], path: Path) -> None:
    """Each of the controller's safety rows ``h(obs) >= 0`` over the episode: the realized
    value on the true state, the value the plan predicted one step earlier with the tube
    it kept from the constraint (the band ``planned - tube .. planned + tube`` holds the
    realized value whenever the bound held), and the constraint ``h = 0``."""
    rows = safety_rows(traj, safety)
    m = rows["realized"].shape[1]
    if m == 0:
        return
    t = traj.t[1:]
    fig = Figure(figsize=(8, 1.9 * m))
    axes = np.atleast_1d(fig.subplots(m, 1, sharex=True))
    for j, ax in enumerate(axes):
        planned, tube = rows["planned"][:, j], rows["tube"][:, j]
        ax.fill_between(
            t, planned - tube, planned + tube, color="C1", alpha=0.3, step="mid", label="tube"
        )
        ax.plot(t, planned, ".", color="C1", markersize=2, label="planned one step ahead")
        ax.plot(t, rows["realized"][:, j], color="C0", linewidth=1.2, label="realized (true state)")
        ax.axhline(0.0, color="C3", linewidth=1, label="constraint")
        bad = rows["realized"][:, j] < 0
        if bad.any():
            ax.plot(t[bad], rows["realized"][bad, j], "x", color="C3", label="violation")
        ax.set_ylabel(names[j])
    axes[0].legend(loc="upper right", fontsize=7, ncol=2)
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
