"""Off-screen drawing of a mechanism into an RGB array.

Matplotlib's object API only (``Figure`` + ``FigureCanvasAgg``): no pyplot, so no
global figure state, no GUI backend and nothing to leak between environments.
Matplotlib loads on the first frame, so making an environment stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

LINK_COLOR = "#1f4e79"
TASK_COLOR = "#c0392b"
GROUND_COLOR = "#555555"


class Renderer:
    """Draws polylines (metres) in a fixed view and returns an ``(H, W, 3)`` uint8 image.

    Args:
        xlim, ylim: the view [m]; the image keeps the aspect ratio of the view.
        width: image width in pixels.
    """

    def __init__(
        self, xlim: tuple[float, float], ylim: tuple[float, float], width: int = 480
    ) -> None:
        self._xlim = (float(xlim[0]), float(xlim[1]))
        self._ylim = (float(ylim[0]), float(ylim[1]))
        aspect = (self._ylim[1] - self._ylim[0]) / (self._xlim[1] - self._xlim[0])
        height = max(2, 2 * round(width * aspect / 2))
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        dpi = 100
        self._figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
        self._canvas = FigureCanvasAgg(self._figure)
        self._axes = self._figure.add_axes((0.0, 0.0, 1.0, 1.0))

    def draw(
        self,
        lines: Sequence[np.ndarray],
        decorate: Callable[[Axes], None] | None = None,
        caption: str = "",
    ) -> np.ndarray:
        """One frame: the task decorations, then the mechanism's polylines on top."""
        ax = self._axes
        ax.clear()
        ax.set_xlim(*self._xlim)
        ax.set_ylim(*self._ylim)
        ax.set_aspect("equal", adjustable="box")
        ax.set_axis_off()
        if decorate is not None:
            decorate(ax)
        for line in lines:
            points = np.asarray(line, dtype=np.float64)
            ax.plot(
                points[:, 0],
                points[:, 1],
                "-o",
                color=LINK_COLOR,
                linewidth=4,
                markersize=5,
                solid_capstyle="round",
            )
        if caption:
            ax.text(0.02, 0.97, caption, transform=ax.transAxes, va="top", fontsize=10)
        self._canvas.draw()
        return np.array(self._canvas.buffer_rgba(), dtype=np.uint8)[..., :3]

    def close(self) -> None:
        self._figure.clear()
