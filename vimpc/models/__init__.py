"""Model families: each fits data and exports a :class:`vimpc.dynamics.DiscreteModel`.

The layout: :mod:`~vimpc.models.base` (the abstract :class:`ModelFamily`),
:mod:`~vimpc.models.registry` (families by name), :mod:`~vimpc.models.families` (the
registered families, one module each), :mod:`~vimpc.models.calibration` (the one
:class:`Bound` type and split conformal calibration), :mod:`~vimpc.models.evaluation` (a
model against data); the shared maths in private modules (``_gp``, ``_kernel_lagrangian``,
``_bea``, ``_features``, ``_integrated``, ``_network_lagrangian``, ``_maximal``,
``_torch_casadi``, ``_training``), and the neural families' fit written once (``_neural``).

``GPVIModel`` and ``LSIModel`` are imported on first use (see :mod:`vimpc.models.families`).
:func:`checkpoints` makes the neural families' trainings inside it resumable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vimpc.models._integrated import integrator_model as integrator_model
from vimpc.models._training import checkpoints as checkpoints
from vimpc.models.base import BOUND_SETTINGS as BOUND_SETTINGS
from vimpc.models.base import ModelFamily as ModelFamily
from vimpc.models.base import SpreadFamily as SpreadFamily
from vimpc.models.calibration import Bound as Bound
from vimpc.models.calibration import calibrate as calibrate
from vimpc.models.families.nominal import NominalModel as NominalModel
from vimpc.models.registry import FAMILIES as FAMILIES
from vimpc.models.registry import family as family

if TYPE_CHECKING:
    from vimpc.models.families import GPVIModel as GPVIModel
    from vimpc.models.families import LSIModel as LSIModel

__all__ = [
    "BOUND_SETTINGS",
    "FAMILIES",
    "Bound",
    "GPVIModel",
    "LSIModel",
    "ModelFamily",
    "NominalModel",
    "SpreadFamily",
    "calibrate",
    "checkpoints",
    "family",
    "integrator_model",
]


def __getattr__(name: str) -> Any:
    if name in ("GPVIModel", "LSIModel"):
        from vimpc.models import families

        return getattr(families, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
