"""The registered model families, one module each (:data:`vimpc.models.FAMILIES` names them).

``NominalModel`` is imported at once; ``GPVIModel``, ``LSIModel``, ``CLNNModel``,
``CHNNModel`` and ``HamelModel`` on first use, so that importing this package costs nothing
more for a user of another family (the families that train import torch and gpytorch only inside ``fit``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vimpc.models.families.nominal import NominalModel as NominalModel

if TYPE_CHECKING:
    from vimpc.models.families.clnn import CHNNModel as CHNNModel
    from vimpc.models.families.clnn import CLNNModel as CLNNModel
    from vimpc.models.families.gp_vi import GPVIModel as GPVIModel
    from vimpc.models.families.hamel import HamelModel as HamelModel
    from vimpc.models.families.lsi import LSIModel as LSIModel

#: class name -> module of the families imported on first use
_LAZY = {
    "CHNNModel": "vimpc.models.families.clnn",
    "CLNNModel": "vimpc.models.families.clnn",
    "GPVIModel": "vimpc.models.families.gp_vi",
    "HamelModel": "vimpc.models.families.hamel",
    "LSIModel": "vimpc.models.families.lsi",
}

__all__ = ["CHNNModel", "CLNNModel", "GPVIModel", "HamelModel", "LSIModel", "NominalModel"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
