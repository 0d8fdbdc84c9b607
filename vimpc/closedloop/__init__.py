"""Closed-loop episodes and the metrics computed from them."""

from vimpc.closedloop.episode import Trajectory as Trajectory
from vimpc.closedloop.episode import run_episode as run_episode
from vimpc.closedloop.metrics import episode_metrics as episode_metrics
from vimpc.closedloop.metrics import summarize as summarize

__all__ = ["Trajectory", "episode_metrics", "run_episode", "summarize"]
