"""The visual language every figure of a closed-loop run shares (matplotlib's object API; no
global state), and :func:`save`, which writes a figure as a PNG.

Every axis carries its unit; every figure is titled with the scenario; a legend names each
kind of line once. Limits come in two kinds, drawn apart: the *true* limits of the task (the
env's, where crossing it is a violation) and the *planning* limits the controller was given
(often tighter). Limits lie beneath the traces and marks (saturated inputs, crossings) on
top, so a trace that runs along a limit stays visible. Every episode of a run is drawn, and
its marks; past :data:`MAX_LINES` episodes their lines are thin and faint, so where they
crowd shows how the episodes spread. Counts agree with their nouns ("1 episode").

The figures themselves are in :mod:`vimpc.plotting.series` (states, inputs and solve times over
time), :mod:`vimpc.plotting.safety` (limits, safety rows with their plans and tubes, the model's
bound) and :mod:`vimpc.plotting.mechanism` (the mechanism drawn in its plane).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vimpc._files import write_atomic
from vimpc._text import count

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


def _nan_bounds(bounds: np.ndarray | None, n: int) -> np.ndarray:
    return np.full(n, np.nan) if bounds is None else np.asarray(bounds, dtype=np.float64)
