"""Variational integrators (forced, constrained) and explicit baselines, as CasADi functions."""

from vimpc.integrators.base import ImplicitIntegrator as ImplicitIntegrator
from vimpc.integrators.base import Integrator as Integrator
from vimpc.integrators.discrete_lagrangians import RULES as RULES
from vimpc.integrators.discrete_lagrangians import discrete_forces as discrete_forces
from vimpc.integrators.discrete_lagrangians import discrete_lagrangian as discrete_lagrangian
from vimpc.integrators.explicit import METHODS as METHODS
from vimpc.integrators.explicit import ExplicitIntegrator as ExplicitIntegrator
from vimpc.integrators.explicit import acceleration as acceleration
from vimpc.integrators.variational import FORMS as FORMS
from vimpc.integrators.variational import VariationalIntegrator as VariationalIntegrator

__all__ = [
    "FORMS",
    "METHODS",
    "RULES",
    "ExplicitIntegrator",
    "ImplicitIntegrator",
    "Integrator",
    "VariationalIntegrator",
    "acceleration",
    "discrete_forces",
    "discrete_lagrangian",
]
