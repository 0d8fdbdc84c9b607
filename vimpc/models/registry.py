"""Model families by name.

A family is registered by one line below (its name and where it lives); its module is
imported only when the family is used, so a family that trains with torch costs nothing
to a user of another.
"""

from __future__ import annotations

import difflib
import importlib

from vimpc.errors import ConfigError
from vimpc.models.base import ModelFamily

#: name -> "module:Class"
FAMILIES: dict[str, str] = {
    "nominal": "vimpc.models.families.nominal:NominalModel",
    "gp_vi": "vimpc.models.families.gp_vi:GPVIModel",
    "gp_residual": "vimpc.models.families.gp_residual:GPResidualModel",
    "mlp_residual": "vimpc.models.families.mlp_residual:MLPResidualModel",
    "lsi": "vimpc.models.families.lsi:LSIModel",
    "dlnn": "vimpc.models.families.dlnn:DLNNModel",
    "lnn": "vimpc.models.families.lnn:LNNModel",
    "clnn": "vimpc.models.families.clnn:CLNNModel",
    "chnn": "vimpc.models.families.clnn:CHNNModel",
    "hamel": "vimpc.models.families.hamel:HamelModel",
}


def family(name: str, key: str = "model.family") -> type[ModelFamily]:
    """The family class registered as ``name``; an unknown name gets a "did you mean"."""
    if name not in FAMILIES:
        hint = difflib.get_close_matches(str(name), list(FAMILIES), n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(f"{key} must be one of {sorted(FAMILIES)}, got {name!r}{extra}")
    module, cls = FAMILIES[name].split(":")
    found = getattr(importlib.import_module(module), cls)
    if not (isinstance(found, type) and issubclass(found, ModelFamily) and found.name == name):
        raise TypeError(f"{FAMILIES[name]} is not the ModelFamily named {name!r}")
    return found
