"""Figures of closed-loop runs, built with matplotlib's object API (no global state) and
returned as :class:`~matplotlib.figure.Figure` objects; :func:`save` writes one as a PNG.

- :mod:`~vimpc.plotting.style`: the conventions every figure shares (units on every axis,
  true and planning limits drawn apart and beneath the traces, marks on top, counts that
  agree with their nouns) and :func:`save`;
- :mod:`~vimpc.plotting.series`: states and inputs over time, solve times per step;
- :mod:`~vimpc.plotting.safety`: constrained entries against their limits, the controller's
  safety rows with plans and tubes, the model's one-step errors against its bound;
- :mod:`~vimpc.plotting.mechanism`: the mechanism drawn in its plane.

:mod:`vimpc.report` puts them together for a run; ``import vimpc`` does not import this
package (nor matplotlib).
"""

from vimpc.plotting.mechanism import mechanism_figure as mechanism_figure
from vimpc.plotting.safety import constrained_entries_figure as constrained_entries_figure
from vimpc.plotting.safety import coverage_figure as coverage_figure
from vimpc.plotting.safety import safety_figure as safety_figure
from vimpc.plotting.series import solve_times_figure as solve_times_figure
from vimpc.plotting.series import states_inputs_figure as states_inputs_figure
from vimpc.plotting.style import save as save

__all__ = [
    "constrained_entries_figure",
    "coverage_figure",
    "mechanism_figure",
    "safety_figure",
    "save",
    "solve_times_figure",
    "states_inputs_figure",
]
