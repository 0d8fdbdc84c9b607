"""The success-threshold figures and sweep (vimpc.plotting.success) read the success test's
rule: an episode succeeds at a threshold exactly when its error stays within it over the
window, as vimpc.pipeline.success_test decides."""

from __future__ import annotations

import numpy as np
import pytest

from vimpc.closedloop import Trajectory
from vimpc.closedloop.metrics import wilson_interval
from vimpc.errors import InputError
from vimpc.pipeline import success_test
from vimpc.plotting.success import (
    success_error_figure,
    success_sweep,
    success_sweep_figure,
    window_worst,
)


def _trajectory(t: np.ndarray, theta: np.ndarray) -> Trajectory:
    T = len(t) - 1
    n = np.zeros
    return Trajectory(
        t=t, obs=np.c_[theta, n(T + 1)], states=np.c_[theta, n(T + 1)], inputs=n((T, 1)),
        rewards=n(T), solve_times=n(T), iterations=n(T), status=np.array(["solved"] * T),
        safety_margin=n((T + 1, 0)), constraint_residual=n(T + 1),
        reference=np.full((T + 1, 2), np.nan), slack=n(T), plan_obs=n((T, 2, 2)),
        tube=n((T, 2, 0)), seed=0,
    )  # fmt: skip


def test_window_worst_decides_as_the_success_test():
    """At random thresholds, ``window_worst <= threshold`` agrees with success_test on
    random angle trajectories (wrapped around the target pi), the window's first sample
    included."""
    rng = np.random.default_rng(0)
    t = np.arange(61) * 0.05  # a window of 1 s holds the last 21 samples
    for _ in range(40):
        theta = np.pi + rng.normal(scale=rng.choice([0.01, 0.1, 1.0]), size=t.size)
        tol = float(rng.uniform(0.02, 0.5))
        metrics = {
            "success_index": 0, "success_target": np.pi, "success_tolerance": tol,
            "success_window": 1.0, "success_periodic": True, "success_against_reference": False,
        }  # fmt: skip
        error = np.abs(np.angle(np.exp(1j * (theta - np.pi))))
        worst = window_worst(t, error[None], 1.0)[0]
        assert np.isclose(worst, error[-21:].max())
        assert (worst <= tol) == success_test({"metrics": metrics})(_trajectory(t, theta))


def test_sweep_counts_and_wilson_intervals():
    worst = {"a": np.array([0.01, 0.02, 0.03, np.nan]), "b": np.array([0.5, 0.5, 0.5, 0.5])}
    sweep = success_sweep(worst, [0.005, 0.02, 0.1, 1.0])
    assert sweep["a"]["successes"].tolist() == [0, 2, 3, 3]  # a NaN episode never succeeds
    assert sweep["b"]["successes"].tolist() == [0, 0, 0, 4]
    assert sweep["a"]["rate"].tolist() == [0.0, 0.5, 0.75, 0.75]
    low, high = wilson_interval(2, 4)
    assert (sweep["a"]["low"][1], sweep["a"]["high"][1]) == (low, high)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: window_worst(np.arange(3.0), np.zeros((2, 4)), 1.0), "errors must be"),
        (lambda: window_worst(np.arange(3.0), np.zeros((2, 3)), 0.0), "window must be"),
        (lambda: success_sweep({"a": np.zeros(3)}, [0.1, -1.0]), "thresholds must be"),
        (lambda: success_sweep({"a": np.zeros((2, 2))}, [0.1]), "worst['a']"),
        (
            lambda: success_error_figure(
                np.arange(3.0), {}, threshold=1, window=1, name="e", unit=""
            ),
            "at least one model",
        ),  # fmt: skip
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_figures_count_the_episodes_within_the_threshold():
    t = np.linspace(0.0, 3.0, 31)
    inside = np.full((3, t.size), 0.01)
    outside = inside.copy()
    outside[0, -1] = 0.2  # one episode leaves the threshold at the last step
    outside[1, -5] = np.nan  # one has a failed step in the window
    fig = success_error_figure(
        t, {"A": inside, "B": outside}, threshold=0.05, window=1.0, name="|e|", unit="rad"
    )
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["A: 3 of 3 episodes within the threshold",
                      "B: 1 of 3 episodes within the threshold"]  # fmt: skip
    thresholds = [0.005, 0.01, 0.1]  # rates 0 and 1: Wilson's ends meet them to round-off
    sweep = success_sweep(
        {m: window_worst(t, e, 1.0) for m, e in (("A", inside), ("B", outside))}, thresholds
    )
    fig = success_sweep_figure(thresholds, sweep, threshold=0.05, unit="rad")
    assert fig.axes[0].get_xscale() == "log"
