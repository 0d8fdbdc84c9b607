"""Metrics computed from recorded trajectories, never inside the loop that made them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from vimpc.closedloop.episode import Trajectory

FAILED_STATUSES = ("FAILED", "INFEASIBLE")


def wrapped_error(traj: Trajectory, periodic: Sequence[int] = ()) -> np.ndarray:
    """``states - reference`` with the entries in ``periodic`` (angles) wrapped to (-pi, pi]."""
    err = traj.states - traj.reference
    for i in periodic:
        err[:, i] = np.angle(np.exp(1j * err[:, i]))
    return err


def episode_metrics(
    traj: Trajectory,
    success: Callable[[Trajectory], bool] | None = None,
    periodic: Sequence[int] = (),
    tracked: Sequence[int] | None = None,
) -> dict[str, float]:
    """Per-episode metrics.

    ``cost``: sum of stage costs (minus the rewards). ``tracking_rmse``: RMS of
    ``states - reference`` over the finite reference entries of the ``tracked``
    observations (all by default), angles listed in ``periodic`` wrapped (NaN
    without a reference). ``violations``: steps with a negative safety margin;
    ``max_violation``: largest ``-margin``; ``min_slack``: smallest margin over
    the episode (the safety margin the controller really had; ``inf`` if the task
    has no safety constraint). Solve times in milliseconds.
    """
    margin = traj.safety_margin
    worst = margin.min(axis=1) if margin.shape[1] else np.full(len(traj.t), np.inf)
    err = wrapped_error(traj, periodic)
    if tracked is not None:
        err = err[:, list(tracked)]
    mask = np.isfinite(err)
    rmse = float(np.sqrt(np.mean(err[mask] ** 2))) if mask.any() else float("nan")
    times_ms = traj.solve_times * 1e3
    failed = np.isin(traj.status, FAILED_STATUSES)
    return {
        "cost": float(-traj.rewards.sum()),
        "tracking_rmse": rmse,
        "success": float(success(traj)) if success is not None else float("nan"),
        "violations": int(np.count_nonzero(worst < 0)),
        "max_violation": float(max(0.0, -worst.min())),
        "min_slack": float(worst.min()),
        "max_constraint_residual": float(traj.constraint_residual.max()),
        "solve_time_median_ms": float(np.median(times_ms)),
        "solve_time_p95_ms": float(np.percentile(times_ms, 95)),
        "solve_time_max_ms": float(times_ms.max()),
        "failed_solves": int(np.count_nonzero(failed)),
        "failed_solve_fraction": float(failed.mean()),
        "steps": int(len(traj.inputs)),
    }


def summarize(per_episode: Sequence[dict[str, float]], trajectories: Sequence[Trajectory]) -> dict:
    """Aggregate over episodes. Solve-time statistics pool all steps of all episodes."""
    if not per_episode:
        raise ValueError("summarize needs at least one episode")
    times_ms = np.concatenate([t.solve_times for t in trajectories]) * 1e3
    status = np.concatenate([t.status for t in trajectories])
    success = [m["success"] for m in per_episode]
    return {
        "episodes": len(per_episode),
        "success_rate": float(np.mean(success)) if not np.any(np.isnan(success)) else float("nan"),
        "mean_cost": float(np.mean([m["cost"] for m in per_episode])),
        "tracking_rmse": float(np.mean([m["tracking_rmse"] for m in per_episode])),
        "violations": int(sum(m["violations"] for m in per_episode)),
        "failure_rate": float(np.mean([m["violations"] > 0 for m in per_episode])),
        "max_violation": float(max(m["max_violation"] for m in per_episode)),
        "min_slack": float(min(m["min_slack"] for m in per_episode)),
        "max_constraint_residual": float(max(m["max_constraint_residual"] for m in per_episode)),
        "solve_time_median_ms": float(np.median(times_ms)),
        "solve_time_p95_ms": float(np.percentile(times_ms, 95)),
        "solve_time_max_ms": float(times_ms.max()),
        "failed_solves": int(np.count_nonzero(np.isin(status, FAILED_STATUSES))),
        "failed_solve_fraction": float(np.mean(np.isin(status, FAILED_STATUSES))),
    }
