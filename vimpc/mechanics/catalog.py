"""Look up systems by name."""

from __future__ import annotations

from vimpc import _checks
from vimpc.mechanics.conservative import HenonHeiles, Kepler
from vimpc.mechanics.fourbar import FourBar, ParallelogramFourBar
from vimpc.mechanics.npendulum import NPendulum
from vimpc.mechanics.pendulums import CartPendulum, CartPole, DoublePendulum, Pendulum
from vimpc.mechanics.rolling_disk import RollingDisk
from vimpc.mechanics.system import MechanicalSystem

SYSTEMS: dict[str, type[MechanicalSystem]] = {
    cls.__name__: cls
    for cls in (
        Pendulum,
        CartPole,
        DoublePendulum,
        FourBar,
        ParallelogramFourBar,
        NPendulum,
        RollingDisk,
        CartPendulum,
        Kepler,
        HenonHeiles,
    )
}


def make_system(name: str, *, coordinates: str = "joint", **kwargs) -> MechanicalSystem:
    """Build a catalog system by class name; ``coordinates="maximal"`` for planar mechanisms."""
    _checks.one_of("system", name, SYSTEMS)
    _checks.one_of("coordinates", coordinates, ("joint", "maximal"))
    system = SYSTEMS[name](**kwargs)
    if coordinates == "maximal":
        maximal = getattr(system, "maximal", None)
        if maximal is None:
            _checks.one_of(f"coordinates for {name}", coordinates, ("joint",))
        system = maximal()
    return system
