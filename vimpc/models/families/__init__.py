"""The registered model families, one module each (:data:`vimpc.models.FAMILIES` names them).

``NominalModel`` is imported at once; every other registered family's class (``GPVIModel``,
``LSIModel``, ``DLNNModel``, ``LNNModel``, ``CLNNModel``, ``CHNNModel``, ``HamelModel``) on
first use, found through the registry, so that importing this package costs nothing more
for a user of another family (the families that train import torch and gpytorch only inside
``fit``) and a newly registered family is here without a line of its own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vimpc.models.families.nominal import NominalModel as NominalModel
from vimpc.models.registry import FAMILIES

if TYPE_CHECKING:
    from vimpc.models.families.clnn import CHNNModel as CHNNModel
    from vimpc.models.families.clnn import CLNNModel as CLNNModel
    from vimpc.models.families.dlnn import DLNNModel as DLNNModel
    from vimpc.models.families.gp_vi import GPVIModel as GPVIModel
    from vimpc.models.families.hamel import HamelModel as HamelModel
    from vimpc.models.families.lnn import LNNModel as LNNModel
    from vimpc.models.families.lsi import LSIModel as LSIModel

#: class name -> module of the families imported on first use (from the registry)
_LAZY = {
    cls: module
    for module, cls in (where.split(":") for where in FAMILIES.values())
    if cls != "NominalModel"
}

__all__ = sorted([*_LAZY, "NominalModel"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
