"""Planar four-bar linkages.

:class:`FourBar` is a Grashof crank-rocker (one degree of freedom) with no singular
configuration; :class:`ParallelogramFourBar` is the two-degree-of-freedom rhombus of
unit rods that the GP-VI paper's experiments simulate.
"""

from __future__ import annotations

import math

import numpy as np

from vimpc.errors import InputError
from vimpc.mechanics import _ops as ops
from vimpc.mechanics.pendulums import _hanging, _hanging_rate
from vimpc.mechanics.planar import BodySpec, PlanarBodies, Revolute, chain_pose, unit


def _unit_rate(angle):
    return ops.vector([-ops.sin(angle), ops.cos(angle)])


class FourBar(PlanarBodies):
    """Crank-rocker four-bar linkage of uniform rods in a vertical plane.

    Geometry: ground pivots ``A = (0, 0)`` and ``D = (d, 0)``; crank ``A -> B`` of
    length ``a``, coupler ``B -> C`` of length ``b``, rocker ``D -> C`` of length
    ``c``. Coordinates ``q = (theta1, theta2, theta3)`` are the absolute angles of
    crank, coupler and rocker from the ``+x`` axis [rad], tied by the two
    loop-closure equations ``a e(theta1) + b e(theta2) - c e(theta3) - (d, 0) = 0``,
    so the linkage has one degree of freedom. Input: torque on the crank at ``A``
    [N m]. Friction: one coefficient per joint (A, B, C, D).

    Defaults ``a, b, c, d = 0.5, 1.2, 1.0, 1.3`` m make a Grashof crank-rocker
    (``a + d = 1.8 < b + c = 2.2``, the crank shortest): the crank turns fully and
    the rocker swings. Because ``b + c > d + a`` and ``|b - c| < d - a``, coupler
    and rocker are never collinear, so the closure Jacobian has full rank in every
    configuration (transmission angle between 41 and 110 degrees). The linkage has
    two assembly branches; ``branch=+1`` (default in :meth:`assemble`) puts ``C``
    above the line ``B D``. Each rod has ``m = 1`` kg and ``J = m l^2 / 12``.
    ``.maximal()`` gives nine maximal coordinates with eight joint constraints.
    """

    defaults = {"a": 0.5, "b": 1.2, "c": 1.0, "d": 1.3, "m": 1.0, "g": 9.81}
    inertial = ("m",)
    lengths = ("a", "b", "c", "d")
    actuated = (0,)
    closures = (2,)

    def _validate(self):
        a, b, c, d = (self.params[k] for k in "abcd")
        if not (a < min(b, c, d) and a + max(b, c, d) < b + c + d - max(b, c, d)):
            raise InputError(
                f"FourBar lengths (a, b, c, d) = {(a, b, c, d)} must make a Grashof crank-rocker: "
                "the crank a shortest and shortest + longest < sum of the other two"
            )
        if not (b + c > d + a and abs(b - c) < d - a):
            raise InputError(
                f"FourBar lengths (a, b, c, d) = {(a, b, c, d)} allow a singular configuration; "
                "need b + c > d + a and |b - c| < d - a"
            )

    @property
    def coordinate_names(self):
        return ("theta1", "theta2", "theta3")

    @property
    def coordinate_units(self):
        return ("rad", "rad", "rad")

    def bodies(self):
        p = self.params
        m = p["m"]
        return tuple(
            BodySpec(name, m, m * p[k] ** 2 / 12.0, p[k])
            for name, k in (("crank", "a"), ("coupler", "b"), ("rocker", "c"))
        )

    def joints(self):
        a, b, c, d = (self.params[k] for k in "abcd")
        return (
            Revolute("crank_torque", None, (0.0, 0.0), 0, (-a / 2, 0.0)),
            Revolute("joint_B", 0, (a / 2, 0.0), 1, (-b / 2, 0.0)),
            Revolute("joint_C", 1, (b / 2, 0.0), 2, (c / 2, 0.0)),
            Revolute("joint_D", None, (d, 0.0), 2, (-c / 2, 0.0)),
        )

    def poses(self, q):
        a, b, c, d = (self.params[k] for k in "abcd")
        t1, t2, t3 = q[0], q[1], q[2]
        return [
            chain_pose(
                a / 2 * unit(t1), [a / 2 * _unit_rate(t1), None, None], t1, [1.0, 0.0, 0.0], q
            ),
            chain_pose(
                a * unit(t1) + b / 2 * unit(t2),
                [a * _unit_rate(t1), b / 2 * _unit_rate(t2), None],
                t2,
                [0.0, 1.0, 0.0],
                q,
            ),
            chain_pose(
                ops.vector([d, 0.0]) + c / 2 * unit(t3),
                [None, None, c / 2 * _unit_rate(t3)],
                t3,
                [0.0, 0.0, 1.0],
                q,
            ),
        ]

    def assemble(self, crank_angle: float, crank_rate: float = 0.0, branch: int = 1):
        """A consistent state ``(q, v)`` for a crank angle [rad] and rate [rad/s]."""
        if branch not in (1, -1):
            raise InputError(f"branch must be +1 or -1, got {branch!r}")
        a, b, c, d = (self.params[k] for k in "abcd")
        B = a * np.array([math.cos(crank_angle), math.sin(crank_angle)])
        BD = np.array([d, 0.0]) - B
        r = float(np.hypot(*BD))
        psi = math.atan2(BD[1], BD[0])
        alpha = math.acos((b * b + r * r - c * c) / (2 * b * r))
        t2 = psi + branch * alpha
        C = B + b * np.array([math.cos(t2), math.sin(t2)])
        t3 = math.atan2(C[1], C[0] - d)
        q = np.array([crank_angle, t2, t3])
        G = self.holonomic_jacobian(q)
        rates = np.linalg.solve(G[:, 1:], -G[:, 0] * crank_rate)
        return q, np.array([crank_rate, rates[0], rates[1]])


class ParallelogramFourBar(PlanarBodies):
    """The GP-VI paper's four-bar: a rhombus of four unit rods hanging from one pivot.

    Links 1 and 3 hang from the origin at angles ``theta1`` and ``theta2`` from the
    downward vertical; link 2 hangs from the end of link 1 parallel to link 3, link
    4 from the end of link 3 parallel to link 1, and links 2 and 4 meet at their
    lower ends. In ``q = (theta1, theta2)`` the closure holds by construction, so
    the linkage has two degrees of freedom and
    ``M = m l^2 [[5/3, cos(theta1 - theta2)], [cos(theta1 - theta2), 5/3]]``,
    ``V = -2 m g l (cos theta1 + cos theta2)``. Input: torque on link 1 at the
    pivot [N m]. Friction: one coefficient per joint (five joints).

    In maximal coordinates (``.maximal()``: 12 coordinates, 10 constraints) the
    rhombus is singular when ``theta1 = theta2`` (all links collinear), where the
    constraint Jacobian loses rank; keep ``|theta1 - theta2|`` away from 0 there.
    """

    defaults = {"m": 1.0, "l": 1.0, "g": 9.81}
    inertial = ("m",)
    lengths = ("l",)
    actuated = (0,)

    @property
    def coordinate_names(self):
        return ("theta1", "theta2")

    @property
    def coordinate_units(self):
        return ("rad", "rad")

    def bodies(self):
        m, l = self.params["m"], self.params["l"]
        return tuple(BodySpec(f"link{i}", m, m * l * l / 12.0, l) for i in range(1, 5))

    def joints(self):
        h = self.params["l"] / 2
        return (
            Revolute("torque", None, (0.0, 0.0), 0, (-h, 0.0)),
            Revolute("pivot3", None, (0.0, 0.0), 2, (-h, 0.0)),
            Revolute("joint12", 0, (h, 0.0), 1, (-h, 0.0)),
            Revolute("joint34", 2, (h, 0.0), 3, (-h, 0.0)),
            Revolute("joint24", 1, (h, 0.0), 3, (h, 0.0)),
        )

    def poses(self, q):
        l = self.params["l"]
        t1, t2 = q[0], q[1]
        e1, e2 = _hanging(t1), _hanging(t2)
        d1, d2 = _hanging_rate(t1), _hanging_rate(t2)
        down = -math.pi / 2
        return [
            chain_pose(l / 2 * e1, [l / 2 * d1, None], t1 + down, [1.0, 0.0], q),
            chain_pose(l * e1 + l / 2 * e2, [l * d1, l / 2 * d2], t2 + down, [0.0, 1.0], q),
            chain_pose(l / 2 * e2, [None, l / 2 * d2], t2 + down, [0.0, 1.0], q),
            chain_pose(l * e2 + l / 2 * e1, [l / 2 * d1, l * d2], t1 + down, [1.0, 0.0], q),
        ]
