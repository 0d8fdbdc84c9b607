"""A :class:`~vimpc.dynamics.DiscreteModel` handed to other controllers.

- :mod:`vimpc.adapters.dompc`: the model as a discrete ``do_mpc.model.Model``
  (``pip install "vimpc[bench]"`` or ``pip install "do-mpc>=5.0"``), its bound as tightened
  state constraints of do-mpc's MPC where asked.

Each adapter sees the model only through :mod:`vimpc.dynamics` and imports its controller
library when it is called, so ``import vimpc.adapters`` loads none of them.
"""

from __future__ import annotations

from vimpc.adapters.dompc import DompcModel as DompcModel
from vimpc.adapters.dompc import dompc_model as dompc_model

__all__ = ["DompcModel", "dompc_model"]
