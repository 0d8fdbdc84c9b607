"""Planar rigid-body systems, in joint coordinates or in maximal coordinates.

A system of this kind lists its bodies (mass, central inertia, length), their
poses as functions of ``q`` (centre of mass, its Jacobian, angle, its Jacobian)
and its joints. From that one declaration follow the mass matrix
``M = sum m Jc^T Jc + I jphi^T jphi``, the gravity potential, the joint rates that
inputs and friction act on, loop-closure constraints, and the maximal-coordinate
version of the same mechanism (each body's ``x, y, phi`` with every joint as a
holonomic constraint).

Frames: world ``x`` right, ``y`` up, gravity ``-g e_y``. A body's angle ``phi`` is
the direction of its local ``x`` axis; a rod lies along its local ``x`` axis from
``(-l/2, 0)`` to ``(l/2, 0)``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import casadi as ca
import numpy as np

from vimpc.errors import InputError
from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import MechanicalSystem, NaturalSystem


@dataclass(frozen=True)
class BodySpec:
    """A rigid body: ``mass`` (kg), ``inertia`` about its centre (kg m^2), ``length`` (m)."""

    name: str
    mass: float
    inertia: float
    length: float = 0.0


@dataclass(frozen=True)
class BodyPose:
    """A body's pose at ``q``: centre ``position`` with Jacobian ``position_jacobian``
    (2 x nv) and ``angle`` with Jacobian ``angle_jacobian`` (1 x nv)."""

    position: Any
    position_jacobian: Any
    angle: Any
    angle_jacobian: Any


@dataclass(frozen=True)
class Revolute:
    """Pin joint: point ``point_a`` of body ``body_a`` (or of the ground, in world
    coordinates, when ``body_a`` is None) coincides with ``point_b`` of ``body_b``.
    Its rate is the relative angular velocity of ``body_b`` over ``body_a``."""

    name: str
    body_a: int | None
    point_a: tuple[float, float]
    body_b: int
    point_b: tuple[float, float]


@dataclass(frozen=True)
class Prismatic:
    """Slider: body ``body`` moves along the world unit ``axis`` through the origin at
    the fixed angle ``angle``. Its rate is the velocity along ``axis``."""

    name: str
    body: int
    axis: tuple[float, float]
    angle: float = 0.0


def _rotate(angle, point: tuple[float, float]):
    c, s = ops.cos(angle), ops.sin(angle)
    return ops.vector([c * point[0] - s * point[1], s * point[0] + c * point[1]])


class PlanarBodies(NaturalSystem):
    """Abstract planar mechanism of rigid bodies connected by joints.

    Subclasses give :meth:`bodies`, :meth:`poses`, :meth:`joints`, the names, and
    the class attributes ``actuated`` (indices of joints driven by the inputs, in
    input order) and ``closures`` (indices of joints that the coordinates do not
    satisfy by construction, enforced as holonomic constraints).
    """

    actuated: ClassVar[tuple[int, ...]] = ()
    closures: ClassVar[tuple[int, ...]] = ()

    @abc.abstractmethod
    def bodies(self) -> tuple[BodySpec, ...]:
        """The bodies, in a fixed order."""

    @abc.abstractmethod
    def poses(self, q) -> list[BodyPose]:
        """Each body's pose at ``q``."""

    @abc.abstractmethod
    def joints(self) -> tuple[Revolute | Prismatic, ...]:
        """The joints; the rates of all joints carry friction, in this order."""

    @property
    def n_rates(self) -> int:
        return len(self.joints())

    @property
    def n_holonomic(self) -> int:
        return sum(2 for i in self.closures)

    @property
    def input_names(self) -> tuple[str, ...]:
        joints = self.joints()
        return tuple(joints[i].name for i in self.actuated)

    @property
    def input_units(self) -> tuple[str, ...]:
        """A revolute joint is driven by a torque [N m], a slider by a force [N]."""
        joints = self.joints()
        return tuple("N m" if isinstance(joints[i], Revolute) else "N" for i in self.actuated)

    def mass_matrix(self, q):
        M = ops.zeros(self.nv, self.nv, like=q)
        for body, pose in zip(self.bodies(), self.poses(q), strict=True):
            Jc, jphi = pose.position_jacobian, pose.angle_jacobian
            M = M + body.mass * (Jc.T @ Jc) + body.inertia * (jphi.T @ jphi)
        return M

    def potential(self, q):
        g = self.params["g"]
        total = 0.0
        for body, pose in zip(self.bodies(), self.poses(q), strict=True):
            total = total + body.mass * g * pose.position[1]
        return total

    def point(self, pose: BodyPose, local: tuple[float, float]):
        """World position of the body-fixed point ``local``."""
        return pose.position + _rotate(pose.angle, local)

    def _joint_rows(self, q):
        poses = self.poses(q)
        rows = []
        for joint in self.joints():
            if isinstance(joint, Revolute):
                row = poses[joint.body_b].angle_jacobian
                if joint.body_a is not None:
                    row = row - poses[joint.body_a].angle_jacobian
            else:
                axis = ops.matrix([list(joint.axis)], like=q)
                row = axis @ poses[joint.body].position_jacobian
            rows.append(row)
        return rows

    def rate_map(self, q):
        return ops.stack_rows(self._joint_rows(q), self.nv, like=q)

    def input_map(self, q):
        rows = self._joint_rows(q)
        return ops.stack_rows([rows[i] for i in self.actuated], self.nv, like=q).T

    def _joint_residual(self, joint: Revolute | Prismatic, poses: Sequence[BodyPose]):
        if isinstance(joint, Revolute):
            pb = self.point(poses[joint.body_b], joint.point_b)
            if joint.body_a is None:
                pa = ops.vector(list(joint.point_a))
            else:
                pa = self.point(poses[joint.body_a], joint.point_a)
            return pa - pb
        pose = poses[joint.body]
        normal = (-joint.axis[1], joint.axis[0])
        offset = normal[0] * pose.position[0] + normal[1] * pose.position[1]
        return ops.vector([offset, pose.angle - joint.angle])

    def holonomic(self, q):
        if not self.closures:
            return ops.zeros(0, like=q)
        poses = self.poses(q)
        joints = self.joints()
        return ops.concat([self._joint_residual(joints[i], poses) for i in self.closures])

    def sketch(self, q) -> list[np.ndarray]:
        q = np.asarray(q, dtype=np.float64)
        lines = []
        for body, pose in zip(self.bodies(), self.poses(q), strict=True):
            half = body.length / 2 if body.length > 0 else 0.1
            if body.length > 0:
                ends = [self.point(pose, (-half, 0.0)), self.point(pose, (half, 0.0))]
            else:  # a cart or a point mass: a small box around the centre
                corners = [
                    (-half, -0.05),
                    (half, -0.05),
                    (half, 0.05),
                    (-half, 0.05),
                    (-half, -0.05),
                ]
                ends = [self.point(pose, c) for c in corners]
            lines.append(np.array(ends, dtype=np.float64))
        return lines

    # -- maximal coordinates --------------------------------------------------------
    def maximal(self) -> MaximalCoordinates:
        """The same mechanism in maximal coordinates."""
        return MaximalCoordinates(self)

    def to_maximal(self, q, v) -> tuple[np.ndarray, np.ndarray]:
        """Maximal-coordinate state ``(x_i, y_i, phi_i)_i`` and its velocity at ``(q, v)``."""
        q = np.asarray(q, dtype=np.float64)
        v = np.asarray(v, dtype=np.float64)
        z, w = [], []
        for pose in self.poses(q):
            z.extend([pose.position[0], pose.position[1], pose.angle])
            lin = np.asarray(pose.position_jacobian) @ v
            ang = np.asarray(pose.angle_jacobian) @ v
            w.extend([lin[0], lin[1], ang[0]])
        return np.array(z, dtype=np.float64), np.array(w, dtype=np.float64)

    def states_to_maximal(self, x) -> np.ndarray:
        """States ``x (..., 2 nq)`` as states of :meth:`maximal` ``(..., 2 n)``, each mapped
        by :meth:`to_maximal`."""
        x = np.asarray(x, dtype=np.float64)
        nq = self.nq
        if x.ndim == 0 or x.shape[-1] != 2 * nq:
            raise InputError(
                f"states must have 2 nq = {2 * nq} entries in their last axis, got shape {x.shape}"
            )
        flat = x.reshape(-1, 2 * nq)
        out = np.array([np.concatenate(self.to_maximal(y[:nq], y[nq:])) for y in flat])
        return out.reshape(*x.shape[:-1], out.shape[-1])


class MaximalCoordinates(PlanarBodies):
    """A planar mechanism with each body's ``(x, y, phi)`` as coordinates.

    Every joint of the source mechanism becomes a holonomic constraint (two
    equations each), the mass matrix is constant and diagonal, and inputs and
    friction act on the same joint rates as in the source. Constraint residuals of
    the integrators in these coordinates test exactly what the GP-VI paper's
    Fig. 1b shows.
    """

    def __init__(self, source: PlanarBodies) -> None:
        if isinstance(source, MaximalCoordinates):
            raise InputError("source is already in maximal coordinates")
        if any(b.mass <= 0 or b.inertia <= 0 for b in source.bodies()):
            raise InputError(
                f"{source.name} has a body with zero mass or inertia, so its maximal-coordinate "
                "mass matrix would be singular"
            )
        self._source = source
        self.defaults = dict(source.params)
        self._params = source.params
        self._friction = source.friction
        self._functions: dict[str, ca.Function] = {}
        self.actuated = source.actuated
        self.closures = tuple(range(len(source.joints())))

    @property
    def source(self) -> PlanarBodies:
        return self._source

    @property
    def name(self) -> str:
        return f"{self._source.name}Maximal"

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        return tuple(f"{b.name}.{c}" for b in self.bodies() for c in ("x", "y", "phi"))

    @property
    def coordinate_units(self) -> tuple[str, ...]:
        return ("m", "m", "rad") * len(self.bodies())

    @property
    def n_holonomic(self) -> int:
        return 2 * len(self.joints())

    def bodies(self) -> tuple[BodySpec, ...]:
        return self._source.bodies()

    def joints(self) -> tuple[Revolute | Prismatic, ...]:
        return self._source.joints()

    def poses(self, q) -> list[BodyPose]:
        n = self.nq
        poses = []
        for i in range(len(self.bodies())):
            Jc = ops.zeros(2, n, like=q)
            jphi = ops.zeros(1, n, like=q)
            Jc[0, 3 * i] = 1.0
            Jc[1, 3 * i + 1] = 1.0
            jphi[0, 3 * i + 2] = 1.0
            position = ops.vector([q[3 * i], q[3 * i + 1]])
            poses.append(BodyPose(position, Jc, q[3 * i + 2], jphi))
        return poses

    def with_params(self, *, friction: Any = None, **changes: float) -> MaximalCoordinates:
        return MaximalCoordinates(self._source.with_params(friction=friction, **changes))

    def perturbed(self, spread: float, rng: np.random.Generator) -> MaximalCoordinates:
        return MaximalCoordinates(self._source.perturbed(spread, rng))

    def __repr__(self) -> str:
        return f"MaximalCoordinates({self._source!r})"


def rod(name: str, mass: float, length: float, inertia: float) -> BodySpec:
    return BodySpec(name, mass, inertia, length)


def unit(angle) -> Any:
    """``(cos angle, sin angle)``."""
    return ops.vector([ops.cos(angle), ops.sin(angle)])


def chain_pose(position, position_jacobian_columns, angle, angle_jacobian_row, like) -> BodyPose:
    """A pose from lists: ``position_jacobian_columns`` are 2-vectors or 0 per coordinate."""
    n = len(angle_jacobian_row)
    Jc = ops.zeros(2, n, like=like)
    for j, col in enumerate(position_jacobian_columns):
        if col is not None:
            Jc[0, j] = col[0]
            Jc[1, j] = col[1]
    jphi = ops.matrix([list(angle_jacobian_row)], like=like)
    return BodyPose(position, Jc, angle, jphi)


__all__ = [
    "BodyPose",
    "BodySpec",
    "MaximalCoordinates",
    "MechanicalSystem",
    "PlanarBodies",
    "Prismatic",
    "Revolute",
    "chain_pose",
    "rod",
    "unit",
]
