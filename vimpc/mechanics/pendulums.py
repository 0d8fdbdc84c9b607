"""Pendulum, double pendulum, cart-pole and cart-pendulum.

All live in a vertical plane, gravity ``-g e_y``. Angles in radians, SI units.
"""

from __future__ import annotations

import math

from vimpc.mechanics import _ops as ops
from vimpc.mechanics.planar import (
    BodySpec,
    PlanarBodies,
    Prismatic,
    Revolute,
    chain_pose,
)

_DOWN = -math.pi / 2  # a rod hanging at rest points along -y


def _hanging(theta):
    """Unit vector of a rod at angle ``theta`` from the downward vertical."""
    return ops.vector([ops.sin(theta), -ops.cos(theta)])


def _hanging_rate(theta):
    """d/dtheta of :func:`_hanging`."""
    return ops.vector([ops.cos(theta), ops.sin(theta)])


def _rod_inertia(values: dict, mass: str, length: str, inertia: str) -> None:
    if values[inertia] is None:
        values[inertia] = values[mass] * values[length] ** 2 / 12.0


class Pendulum(PlanarBodies):
    """Uniform rod pivoted at one end; ``theta = 0`` hangs down, counter-clockwise positive.

    ``q = (theta,)`` [rad], ``u = (torque,)`` [N m] at the pivot. Parameters: ``m`` [kg],
    ``l`` [m], ``J`` [kg m^2] about the centre (default ``m l^2 / 12``), ``g`` [m/s^2].
    Friction: one viscous coefficient [N m s] on the pivot rate.
    """

    defaults = {"m": 1.0, "l": 1.0, "J": None, "g": 9.81}
    inertial = ("m", "J")
    lengths = ("l",)
    actuated = (0,)

    def _derive(self, values):
        _rod_inertia(values, "m", "l", "J")
        return values

    @property
    def coordinate_names(self):
        return ("theta",)

    @property
    def coordinate_units(self):
        return ("rad",)

    def bodies(self):
        p = self.params
        return (BodySpec("rod", p["m"], p["J"], p["l"]),)

    def joints(self):
        return (Revolute("torque", None, (0.0, 0.0), 0, (-self.params["l"] / 2, 0.0)),)

    def poses(self, q):
        half = self.params["l"] / 2
        theta = q[0]
        return [
            chain_pose(
                half * _hanging(theta), [half * _hanging_rate(theta)], theta + _DOWN, [1.0], q
            )
        ]


class DoublePendulum(PlanarBodies):
    """Two uniform rods in a chain, in joint angles ``q = (theta1, theta2)``.

    ``theta1`` is the first rod's angle from the downward vertical, ``theta2`` the
    second rod's angle relative to the first; ``u`` are the torques at the two joints
    [N m]. Parameters ``m1, l1, J1, m2, l2, J2, g`` (rods, ``J = m l^2 / 12`` by
    default). ``.maximal()`` gives the six maximal coordinates with four joint
    constraints.
    """

    defaults = {"m1": 1.0, "l1": 1.0, "J1": None, "m2": 1.0, "l2": 1.0, "J2": None, "g": 9.81}
    inertial = ("m1", "J1", "m2", "J2")
    lengths = ("l1", "l2")
    actuated = (0, 1)

    def _derive(self, values):
        _rod_inertia(values, "m1", "l1", "J1")
        _rod_inertia(values, "m2", "l2", "J2")
        return values

    @property
    def coordinate_names(self):
        return ("theta1", "theta2")

    @property
    def coordinate_units(self):
        return ("rad", "rad")

    def bodies(self):
        p = self.params
        return (
            BodySpec("link1", p["m1"], p["J1"], p["l1"]),
            BodySpec("link2", p["m2"], p["J2"], p["l2"]),
        )

    def joints(self):
        l1, l2 = self.params["l1"], self.params["l2"]
        return (
            Revolute("torque1", None, (0.0, 0.0), 0, (-l1 / 2, 0.0)),
            Revolute("torque2", 0, (l1 / 2, 0.0), 1, (-l2 / 2, 0.0)),
        )

    def poses(self, q):
        l1, l2 = self.params["l1"], self.params["l2"]
        t1, t12 = q[0], q[0] + q[1]
        elbow_rate = l1 * _hanging_rate(t1)
        return [
            chain_pose(
                l1 / 2 * _hanging(t1), [l1 / 2 * _hanging_rate(t1), None], t1 + _DOWN, [1.0, 0.0], q
            ),
            chain_pose(
                l1 * _hanging(t1) + l2 / 2 * _hanging(t12),
                [elbow_rate + l2 / 2 * _hanging_rate(t12), l2 / 2 * _hanging_rate(t12)],
                t12 + _DOWN,
                [1.0, 1.0],
                q,
            ),
        ]


class CartPole(PlanarBodies):
    """Cart on a horizontal rail with a uniform rod pinned at its top end to the cart.

    ``q = (s, theta)``: cart position [m] and pole angle from the downward vertical
    [rad] (``theta = 0`` hangs, ``theta = pi`` is upright); ``u = (force,)`` [N] on
    the cart along the rail. Parameters: cart mass ``mc`` [kg] and central inertia
    ``Jc`` (a 0.2 m x 0.1 m box by default; it matters only in maximal coordinates),
    pole ``m, l, J`` (rod, ``J = m l^2 / 12``), ``g``. Friction: cart [N s/m], pole
    pivot [N m s].
    """

    defaults = {"mc": 1.0, "Jc": None, "m": 1.0, "l": 0.5, "J": None, "g": 9.81}
    inertial = ("mc", "Jc", "m", "J")
    lengths = ("l",)
    actuated = (0,)

    def _derive(self, values):
        _rod_inertia(values, "m", "l", "J")
        if values["Jc"] is None:
            values["Jc"] = values["mc"] * (0.2**2 + 0.1**2) / 12.0
        return values

    @property
    def coordinate_names(self):
        return ("s", "theta")

    @property
    def coordinate_units(self):
        return ("m", "rad")

    def bodies(self):
        p = self.params
        return (BodySpec("cart", p["mc"], p["Jc"]), BodySpec("pole", p["m"], p["J"], p["l"]))

    def joints(self):
        return (
            Prismatic("force", 0, (1.0, 0.0)),
            Revolute("pole_pivot", 0, (0.0, 0.0), 1, (-self.params["l"] / 2, 0.0)),
        )

    def poses(self, q):
        half = self.params["l"] / 2
        s, theta = q[0], q[1]
        cart = chain_pose(
            ops.vector([s, 0.0 * s]), [ops.vector([1.0, 0.0]), None], 0.0 * s, [0.0, 0.0], q
        )
        pole = chain_pose(
            ops.vector([s, 0.0 * s]) + half * _hanging(theta),
            [ops.vector([1.0, 0.0]), half * _hanging_rate(theta)],
            theta + _DOWN,
            [0.0, 1.0],
            q,
        )
        return [cart, pole]


class CartPendulum(PlanarBodies):
    """Point mass on a massless rod over a cart, upright at ``phi = 0``.

    The discrete-Lagrangian paper's system (Bloch 1.9.23):
    ``L = 1/2 (m l^2 phi'^2 + 2 m l cos(phi) s' phi' + (M + m) s'^2) - m g l cos(phi)``.
    ``q = (s, phi)`` [m, rad]; ``u = (force,)`` [N] on the cart. With no force the
    cart momentum ``(M + m) s' + m l cos(phi) phi'`` is conserved (translation
    symmetry). Parameters ``M, m, l, g`` (all 1 except ``g = 9.81`` by default).
    """

    defaults = {"M": 1.0, "m": 1.0, "l": 1.0, "g": 9.81}
    inertial = ("M", "m")
    lengths = ("l",)
    actuated = (0,)

    @property
    def coordinate_names(self):
        return ("s", "phi")

    @property
    def coordinate_units(self):
        return ("m", "rad")

    def bodies(self):
        p = self.params
        return (BodySpec("cart", p["M"], 0.0), BodySpec("bob", p["m"], 0.0))

    def joints(self):
        return (Prismatic("force", 0, (1.0, 0.0)), Revolute("pivot", 0, (0.0, 0.0), 1, (0.0, 0.0)))

    def poses(self, q):
        l = self.params["l"]
        s, phi = q[0], q[1]
        up = ops.vector([ops.sin(phi), ops.cos(phi)])
        up_rate = ops.vector([ops.cos(phi), -ops.sin(phi)])
        cart = chain_pose(
            ops.vector([s, 0.0 * s]), [ops.vector([1.0, 0.0]), None], 0.0 * s, [0.0, 0.0], q
        )
        bob = chain_pose(
            ops.vector([s, 0.0 * s]) + l * up,
            [ops.vector([1.0, 0.0]), l * up_rate],
            phi,
            [0.0, 1.0],
            q,
        )
        return [cart, bob]
