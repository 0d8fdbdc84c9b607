"""The model-predictive controller; it sees models only through :class:`vimpc.dynamics.DiscreteModel`."""

from vimpc.mpc.controller import MPC as MPC
from vimpc.mpc.problem import Constraints as Constraints
from vimpc.mpc.problem import Cost as Cost
from vimpc.mpc.problem import EnergyShaping as EnergyShaping
from vimpc.mpc.problem import PathConstraint as PathConstraint
from vimpc.mpc.result import MPCResult as MPCResult
from vimpc.mpc.result import Status as Status

__all__ = ["MPC", "Constraints", "Cost", "EnergyShaping", "MPCResult", "PathConstraint", "Status"]
