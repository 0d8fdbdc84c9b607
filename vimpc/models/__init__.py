"""Models: each ends as a :class:`vimpc.dynamics.DiscreteModel`."""

from vimpc.models.nominal import NominalModel as NominalModel

__all__ = ["NominalModel"]
