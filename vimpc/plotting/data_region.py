"""Where a run left its model's data: the share of each episode's steps whose true state lay
outside the box of the states the model was trained and calibrated on
(:func:`outside_data_figure`), one bar per episode, coloured by the fit that episode used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from vimpc._text import count
from vimpc.plotting.style import TRUE_LIMIT, _figure, _legend


def outside_data_figure(
    per_episode: Sequence[dict[str, Any]],
    *,
    seeds: Sequence[int] | None = None,
    holds_only_on: str | None = None,
    title: str = "",
) -> Figure | None:
    """Bars of ``outside_data_share`` per episode (``None`` when no episode has one: the
    model records no data box). ``holds_only_on`` names the region a bound is known to hold
    on only; it is written on the axis, since every bar above 0 is then a share of steps
    where the bound's promise does not apply."""
    rows = [(k, m) for k, m in enumerate(per_episode) if "outside_data_share" in m]
    if not rows:
        return None
    index = np.array([k for k, _ in rows])
    share = np.array([m["outside_data_share"] for _, m in rows], dtype=np.float64)
    fits = np.array([int(m.get("fit", 0)) for _, m in rows])
    fig = _figure(1, 2.6, title)
    ax = fig.add_subplot(1, 1, 1)
    for k in np.unique(fits):
        mine = fits == k
        label = f"fit {k}" if len(np.unique(fits)) > 1 else "episode"
        ax.bar(index[mine], share[mine], width=0.8, color=f"C{k % 10}", label=label)
    pooled = sum(m["outside_data_steps"] for _, m in rows) / max(
        sum(m["steps"] for _, m in rows), 1
    )
    ax.axhline(pooled, color=TRUE_LIMIT, linewidth=1, linestyle="--", label="pooled share")
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("share of steps outside\nthe data box")
    xlabel = "episode"
    if seeds is not None and len(seeds) == len(per_episode) and len(rows) <= 20:
        ax.set_xticks(index, [str(seeds[k]) for k in index], fontsize=7)
        xlabel = "episode seed"
    ax.set_xlabel(xlabel)
    note = f"{count(int(np.sum(share > 0)), 'episode')} of {len(rows)} left the box"
    if holds_only_on:
        note += f"; the bound holds only on the {holds_only_on}"
    ax.set_title(note, fontsize=9)
    _legend(fig)
    return fig
