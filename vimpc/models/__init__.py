"""Model families: each fits data and exports a :class:`vimpc.dynamics.DiscreteModel`."""

from vimpc.models.base import BOUND_SETTINGS as BOUND_SETTINGS
from vimpc.models.base import ModelFamily as ModelFamily
from vimpc.models.base import SpreadFamily as SpreadFamily
from vimpc.models.conformal import calibrate as calibrate
from vimpc.models.integrated import integrator_model as integrator_model
from vimpc.models.nominal import NominalModel as NominalModel
from vimpc.models.registry import FAMILIES as FAMILIES
from vimpc.models.registry import family as family

__all__ = [
    "BOUND_SETTINGS",
    "FAMILIES",
    "ModelFamily",
    "NominalModel",
    "SpreadFamily",
    "calibrate",
    "family",
    "integrator_model",
]
