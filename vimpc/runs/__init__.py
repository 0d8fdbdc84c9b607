"""The run layer: run a scenario (:func:`run_scenario`) or a sweep of scenarios
(:func:`run_sweep`) from Python, as ``vimpc run`` and ``vimpc sweep`` do.

- :mod:`vimpc.runs.store`: the run store: run and sweep folders, ``.partial``, locks,
  manifests, resume checks, episodes on disk, a sweep's summaries;
- :mod:`vimpc.runs.backends`: the :class:`~vimpc.runs.backends.Backend` protocol that local
  worker processes and Ray (:mod:`vimpc.runs.ray`, the only place Ray is imported)
  implement;
- :mod:`vimpc.runs.session`: one session of a run folder (models, episodes, metrics);
- :mod:`vimpc.runs.tasks`: a sweep's configuration as a task;
- :mod:`vimpc.runs.run`, :mod:`vimpc.runs.sweep`: the two library calls.

The names are loaded on first use, so importing :mod:`vimpc` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vimpc.runs.run import RunResult, run_scenario
    from vimpc.runs.sweep import SweepResult, run_sweep

__all__ = ["RunResult", "SweepResult", "run_scenario", "run_sweep"]

_WHERE = {
    "RunResult": "vimpc.runs.run",
    "run_scenario": "vimpc.runs.run",
    "SweepResult": "vimpc.runs.sweep",
    "run_sweep": "vimpc.runs.sweep",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'vimpc.runs' has no attribute {name!r}")
