"""Figures of the quantity a scenario's success test decides on: the error of its
``success_index`` entries over time against the success threshold, one panel per model
(:func:`success_error_figure`), and the share of episodes that succeed as the threshold is
scaled (:func:`success_sweep_figure`, from :func:`success_sweep`).

The success test (:func:`vimpc.pipeline.success_test`) passes an episode when the error stays
within the threshold at every step of the last ``window`` seconds (``t >= t[-1] - window``),
so an episode succeeds at a threshold exactly when its largest error over that window,
:func:`window_worst`, is no larger. Conventions from :mod:`vimpc.plotting.style`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from vimpc._text import count
from vimpc.closedloop.metrics import wilson_interval
from vimpc.errors import InputError
from vimpc.plotting.style import LIMIT_Z, MARK_Z, TRACE_Z, TRUE_LIMIT, _figure, _legend, axis_label

#: the band drawn around the median, as percentiles over the episodes
BAND = (10.0, 90.0)
#: the sweep's markers, by model
MARKERS = ("o", "s", "^")


def _errors(t: np.ndarray, errors: np.ndarray, label: str) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(t, dtype=np.float64)
    errors = np.asarray(errors, dtype=np.float64)
    if t.ndim != 1 or errors.ndim != 2 or errors.shape[1] != t.size or errors.shape[0] == 0:
        raise InputError(
            f"{label} must be (episodes, {t.size}) errors on the {t.size} times of t, got shape "
            f"{errors.shape} (t {t.shape}); pass one row per episode"
        )
    return t, errors


def window_worst(t: np.ndarray, errors: np.ndarray, window: float) -> np.ndarray:
    """Each episode's largest error over the last ``window`` seconds (``t >= t[-1] -
    window``, as the success test reads it): the smallest threshold it succeeds at.
    ``errors``: ``(episodes, len(t))``; a NaN error makes the episode's worst NaN (it
    succeeds at no threshold)."""
    t, errors = _errors(t, errors, "errors")
    if not window > 0:
        raise InputError(f"window must be a positive number of seconds, got {window!r}")
    recent = t >= t[-1] - window
    tail = errors[:, recent]
    return np.where(np.isnan(tail).any(axis=1), np.nan, tail.max(axis=1))


def success_sweep(
    worst: Mapping[str, np.ndarray], thresholds: Sequence[float]
) -> dict[str, dict[str, np.ndarray]]:
    """Per model (``worst``: label -> each episode's :func:`window_worst`), at every
    threshold: ``successes`` (episodes whose worst is within it; NaN never), ``episodes``,
    ``rate`` and the 95 % Wilson interval ``low``, ``high``."""
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.ndim != 1 or thresholds.size == 0 or not np.all(thresholds > 0):
        raise InputError(f"thresholds must be positive numbers, got {thresholds.tolist()!r}")
    out = {}
    for label, w in worst.items():
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise InputError(f"worst[{label!r}] must be one value per episode, got {w.shape}")
        k = np.array([int(np.count_nonzero(w <= tau)) for tau in thresholds])
        ci = np.array([wilson_interval(int(ki), w.size) for ki in k])
        out[label] = {
            "successes": k,
            "episodes": np.full(k.shape, w.size),
            "rate": k / w.size,
            "low": ci[:, 0],
            "high": ci[:, 1],
        }
    return out


def success_error_figure(
    t: np.ndarray,
    errors: Mapping[str, np.ndarray],
    *,
    threshold: float,
    window: float,
    name: str,
    unit: str,
    threshold_label: str = "success threshold",
    title: str = "",
) -> Figure:
    """The success test's error over time, one panel per model (``errors``: label ->
    ``(episodes, len(t))``, all episodes on the same times ``t``): every episode as a thin
    line, the median over the episodes and its :data:`BAND` percentile band, the threshold
    (named by ``threshold_label``) and the window it applies in. The error axis is
    logarithmic; exact zeros are drawn at the axis' floor. Each panel's title counts the
    episodes within the threshold over the whole window."""
    if not errors:
        raise InputError("errors must name at least one model, got none")
    if not threshold > 0:
        raise InputError(f"threshold must be a positive number, got {threshold!r}")
    series = {label: _errors(t, e, f"errors[{label!r}]")[1] for label, e in errors.items()}
    t = np.asarray(t, dtype=np.float64)
    fig = _figure(1, 3.0, title, width=4.2 * len(series) + 0.6)
    axes = np.atleast_1d(fig.subplots(1, len(series), sharey=True))
    positive = np.concatenate([e[np.isfinite(e) & (e > 0)] for e in series.values()])
    floor = min(float(positive.min()) if positive.size else threshold, threshold) / 3.0
    start = max(t[-1] - window, t[0])
    for i, (ax, (label, e)) in enumerate(zip(axes, series.items(), strict=True)):
        color = f"C{i}"
        shown = np.where(np.isnan(e), np.nan, np.maximum(e, floor))  # NaN stays a gap
        n = e.shape[0]
        for row in shown:
            ax.plot(t, row, color=color, alpha=0.25, linewidth=0.6, zorder=TRACE_Z)
        low, mid, high = np.nanpercentile(shown, [BAND[0], 50.0, BAND[1]], axis=0)
        ax.fill_between(
            t, low, high, color=color, alpha=0.25, linewidth=0, zorder=TRACE_Z,
            label=f"{BAND[0]:.0f}-{BAND[1]:.0f} % of the episodes",
        )  # fmt: skip
        ax.plot(t, mid, color="k", linewidth=1.4, zorder=MARK_Z, label="median over the episodes")
        ax.axvspan(start, t[-1], color="0.9", zorder=0, label=f"success window: last {window:g} s")
        ax.axhline(
            threshold, color=TRUE_LIMIT, linewidth=1.4, zorder=LIMIT_Z, label=threshold_label
        )
        ok = int(np.count_nonzero(window_worst(t, e, window) <= threshold))
        ax.set_title(f"{label}: {ok} of {count(n, 'episode')} within the threshold", fontsize=9)
        ax.set_xlim(t[0], t[-1])
        ax.set_yscale("log")
        ax.set_xlabel("time [s]")
        ax.plot([], [], color="0.5", alpha=0.5, linewidth=0.6, label="one episode")
    axes[0].set_ylabel(axis_label(name, unit))
    _legend(fig)
    return fig


def success_sweep_figure(
    thresholds: Sequence[float],
    sweep: Mapping[str, Mapping[str, np.ndarray]],
    *,
    threshold: float,
    unit: str,
    threshold_label: str = "scenario's threshold",
    title: str = "",
) -> Figure:
    """Success rate against the threshold (logarithmic axis), one line per model of
    ``sweep`` (:func:`success_sweep`) with its 95 % Wilson interval as a band and error
    bars, and the scenario's ``threshold`` marked."""
    thresholds = np.asarray(thresholds, dtype=np.float64)
    fig = _figure(1, 3.2, title, width=6.5)
    ax = fig.subplots()
    ax.axvline(threshold, color=TRUE_LIMIT, linewidth=1.4, zorder=LIMIT_Z, label=threshold_label)
    for i, (label, s) in enumerate(sweep.items()):
        color = f"C{i}"
        rate = np.asarray(s["rate"])
        ax.fill_between(
            thresholds, s["low"], s["high"], color=color, alpha=0.15, linewidth=0, zorder=TRACE_Z
        )
        # the interval's ends differ from the rate by round-off where it is 0 or 1
        below = np.maximum(rate - s["low"], 0.0)
        above = np.maximum(s["high"] - rate, 0.0)
        # hollow, larger markers for the later models: equal rates stay visible
        ax.errorbar(
            thresholds, rate, yerr=[below, above], color=color, marker=MARKERS[i % 3],
            markersize=3.5 + 2.5 * i, markerfacecolor=color if i == 0 else "none",
            linewidth=1.2, capsize=2, zorder=MARK_Z,
            label=f"{label} (95 % Wilson interval, {count(int(s['episodes'][0]), 'episode')})",
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(axis_label("success threshold", unit))
    ax.set_ylabel("success rate")
    ax.grid(True, which="major", alpha=0.3)
    _legend(fig)
    return fig
