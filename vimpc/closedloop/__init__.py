"""Closed-loop episodes and the metrics computed from them."""

from vimpc.closedloop.episode import Trajectory as Trajectory
from vimpc.closedloop.episode import run_episode as run_episode
from vimpc.closedloop.metrics import episode_metrics as episode_metrics
from vimpc.closedloop.metrics import prediction_check as prediction_check
from vimpc.closedloop.metrics import safety_rows as safety_rows
from vimpc.closedloop.metrics import summarize as summarize
from vimpc.closedloop.metrics import wilson_interval as wilson_interval

__all__ = [
    "Trajectory",
    "episode_metrics",
    "prediction_check",
    "run_episode",
    "safety_rows",
    "summarize",
    "wilson_interval",
]
