"""Analytic mechanical systems, evaluated on numpy arrays or CasADi symbols."""

from vimpc.mechanics.catalog import SYSTEMS as SYSTEMS
from vimpc.mechanics.catalog import make_system as make_system
from vimpc.mechanics.conservative import HenonHeiles as HenonHeiles
from vimpc.mechanics.conservative import Kepler as Kepler
from vimpc.mechanics.fourbar import FourBar as FourBar
from vimpc.mechanics.fourbar import ParallelogramFourBar as ParallelogramFourBar
from vimpc.mechanics.npendulum import NPendulum as NPendulum
from vimpc.mechanics.pendulums import CartPendulum as CartPendulum
from vimpc.mechanics.pendulums import CartPole as CartPole
from vimpc.mechanics.pendulums import DoublePendulum as DoublePendulum
from vimpc.mechanics.pendulums import Pendulum as Pendulum
from vimpc.mechanics.planar import MaximalCoordinates as MaximalCoordinates
from vimpc.mechanics.planar import PlanarBodies as PlanarBodies
from vimpc.mechanics.rolling_disk import RollingDisk as RollingDisk
from vimpc.mechanics.system import MechanicalSystem as MechanicalSystem
from vimpc.mechanics.system import NaturalSystem as NaturalSystem

__all__ = [
    "SYSTEMS",
    "CartPendulum",
    "CartPole",
    "DoublePendulum",
    "FourBar",
    "HenonHeiles",
    "Kepler",
    "MaximalCoordinates",
    "MechanicalSystem",
    "NPendulum",
    "NaturalSystem",
    "ParallelogramFourBar",
    "Pendulum",
    "PlanarBodies",
    "RollingDisk",
    "make_system",
]
