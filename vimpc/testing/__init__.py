"""Contract test suites that every model and every environment inherits.

``DiscreteModelContract`` checks a :class:`~vimpc.dynamics.DiscreteModel`; ``EnvContract``
checks a gymnasium environment. Subclass one in a test module (class name starting with
``Test``) and implement its ``make_*`` and ``sample_*`` methods. ``ModelFamilyContract``
checks a registered model family on its ``SmallCase`` (``ModelFamilyContract.for_registry``).
``ControllerContract`` checks the controller on every valid combination of its strategies
(transcription, solver, tightening) on a small problem.
"""

from vimpc.testing.controller_contract import ControllerContract as ControllerContract
from vimpc.testing.env_contract import EnvContract as EnvContract
from vimpc.testing.family_contract import ModelFamilyContract as ModelFamilyContract
from vimpc.testing.family_contract import SmallCase as SmallCase
from vimpc.testing.model_contract import DiscreteModelContract as DiscreteModelContract

__all__ = [
    "ControllerContract",
    "DiscreteModelContract",
    "EnvContract",
    "ModelFamilyContract",
    "SmallCase",
]
