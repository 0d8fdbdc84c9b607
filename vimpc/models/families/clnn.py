"""Constrained Lagrangian and Hamiltonian networks in Cartesian coordinates (families
``"clnn"`` and ``"chnn"``; Finzi, Wang & Wilson, "Simplifying Hamiltonian and Lagrangian
neural networks via explicit constraints", NeurIPS 2020).

**Coordinates.** The model's state is the system's maximal-coordinate description, not
typed again here: a planar mechanism's :meth:`~vimpc.mechanics.planar.PlanarBodies.maximal`
(each body's ``x, y, phi``; every joint, tether to the ground and the rail of a cart a
holonomic constraint ``Phi(x) = 0`` with its Jacobian ``G = dPhi/dx``), or a system already
in Cartesian coordinates (:class:`~vimpc.mechanics.planar.MaximalCoordinates`, the chain of
point masses :class:`~vimpc.mechanics.npendulum.NPendulum`). The environment's joint
coordinates ``(q, v)`` reach the state through ``from_obs`` (the bodies' poses) and come back
through ``to_obs``, the affine map ``q = A x + b`` (``v = A x'``) fitted once to the poses and
checked exact (:data:`AFFINE_TOL`); a mechanism whose joint coordinates are no affine
function of its maximal ones is refused.

**Learned parts.** A potential ``V(x)``, a multilayer perceptron on the flattened positions
(default 3 hidden layers of 256, tanh, as the authors'), and a constant positive definite
diagonal mass matrix: one learned mass per point mass (its ``x`` and ``y``) and one mass and
one second moment per extended body (its ``x, y`` and its ``phi``), stored as logarithms
(initialised ``0.1 N(0, 1)`` as in the authors' ``d_moments``). The inputs enter as the
known generalized force ``B u`` of the system's input map (constant in these coordinates),
and the system's known joint friction ``-W^T C W x'`` where it has any. With ``damping =
"learned"`` a viscous friction on the same joint rates ``W x'`` is learned too, one
coefficient ``c_j = r_j^2 >= 0`` per rate (``r_j`` trained with the network from 0.1; the
weight decay pulls it towards no friction): the friction ``-W^T diag(C + c) W x'`` then
enters training, the exported step and the vector field alike. The paper's systems have
none; a real mechanism does, and a conservative model fitted to its data bends its
potential to make up for the energy it cannot lose.

**Dynamics** (paper Sec. 4, eqs. 6-9):

- CLNN (``"clnn"``): ``x'' = f - M^-1 G^T (G M^-1 G^T)^-1 (G f + dG/dt x')`` with
  ``f = M^-1 (-grad V + F)`` (the sign of the authors' ``lagrangian.py``; the copy of this
  class in their ``hamiltonian.py`` has ``+grad V``, unused there).
- CHNN (``"chnn"``): ``z' = P(z) (J grad H(z) + (0, F))`` on ``z = (x, p)``, ``H = 1/2 p^T M^-1 p
  + V(x)``, ``P = I - J D^T (D J D^T)^-1 D`` with ``D`` the Jacobian of ``(Phi(x), G(x) M^-1 p)``
  in ``z``. For a constant ``M`` both give the same motion (tests check it to 1e-10); the
  families differ in what the rollouts integrate (velocities or momenta).

``G`` and ``d(G w)/dx`` come from the system's CasADi constraint Jacobian, called from torch
with their vector-Jacobian products by CasADi's reverse mode (no constraint is written twice).

**Training** (the authors' ``pl_trainer.py``): every window of ``chunk + 1`` consecutive
snapshots (default 5 steps) of every trajectory is a sample (the authors keep one random
chunk per trajectory of 10000); a rollout of ``chunk`` RK4 steps, one per ``dt``, the inputs
held over each step, from its first state; the L1 loss (mean absolute error over positions
and velocities of every predicted snapshot); AdamW (lr 3e-3, weight decay 1e-4) with a cosine
schedule to 0; minibatches of 200; float64 (the authors: float32). Inputs are standardised by
the data's mean and spread and the output scaled by the data's mean squared speed, folded into
the network after training (:func:`vimpc.models._network_lagrangian.fold`). The network's
initial weights are torch's uniform scheme (:func:`vimpc.models._torch_casadi.mlp`), not the
authors' orthogonal one.

**Export** (``export = "mx"``, the default). The constrained midpoint step of the learned
``L = 1/2 x'^T M x' - V(x)`` in the position-momentum form, written on MX
(:func:`_constrained_midpoint`): the equations and the multipliers' projection of the
:class:`~vimpc.integrators.VariationalIntegrator` (the holonomic constraints hold at every
predicted state to the Newton tolerance: ``constraint``), its Newton solve in CasADi's
``rootfinder`` and its acceptance test, with the network kept as dense products and its
gradient and Hessian in closed form (:func:`vimpc.models._network_lagrangian.network_pass`);
``residual`` is its implicit form and ``residual_jacobian`` its Jacobian in closed form
(with one substep); ``energy`` is ``1/2 x'^T M x' + V(x)``; ``from_obs`` projects the
bodies' poses onto the constraints (:data:`PROJECTION_ITERATIONS` Gauss-Newton steps in the
mass metric; :meth:`CLNNModel.project` does the same on numbers and says how far each state
moved). ``info["dense_products"]`` keeps the controller's problem on MX. ``export = "sx"``
builds the integrator itself on SX, which expands the network into scalar operations:
measured on the four-bar (9 maximal coordinates, 8 constraints; a shared 2-core machine at
load ~4.5), one step takes 0.19 / 0.53 / 1.8 ms (median) on MX against 3.6 / 21 / 86 ms on
SX for 2 x 64 / 3 x 128 / 3 x 256 potentials, the residual's Jacobian 0.08 / 0.16 / 0.43 ms
against 2.8 / 15 / 61 ms (``results/benchmarks/clnn.md``); both agree to round-off
(``tests/test_clnn.py``).

**Redundant constraints.** Where the constraint rows are not independent (``G`` of rank
``r < k`` at every data configuration, so ``G M^-1 G^T`` is singular), ``redundant = "drop"``
keeps ``r`` independent rows (pivoted QR of ``G^T`` at the data configuration farthest from
singular, checked at all of them) in training and in the exported step; the dropped rows are
named in ``info["dropped_constraints"]`` and still reported by ``constraint`` (they hold where
the kept ones do). ``redundant = "refuse"`` raises instead. A rank that changes over the data
(a singular configuration, where the reactions are not determined) is always refused.

**What the data identify.** Only what the constraints leave free of the masses: on a
pendulum in ``(x, y, phi)`` the rod's mass and central inertia apart are not identified (the
potential is learned too), their combination about the pivot ``I + m l^2 / 4`` is (learned
0.341 against 1/3 kg m^2, ``tests/test_clnn.py``).

**Data checks.** Positions off the constraints by more than ``data_tolerance`` (default
:data:`DATA_CONSTRAINT_TOL`; ``|Phi|`` or ``|G x'|``) are refused, naming how far and where;
data within it are projected onto the constraints before training (the largest offset and
move in the model's info: ``data_offset``, ``data_projection``); a system whose maximal
description has no holonomic constraints is refused; fewer than
:data:`MIN_CHUNKS` training windows are refused; fewer scalar targets than
:data:`MIN_TARGETS_PER_PARAMETER` per network parameter are warned of (FitWarning). On data
without inputs the Lagrangian's scale (masses and potential together) is not identified:
warned of (FitWarning).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, SUBSTEPS, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator, _newton
from vimpc.mechanics.npendulum import NPendulum
from vimpc.mechanics.planar import MaximalCoordinates, PlanarBodies, Revolute
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _network_lagrangian as nl
from vimpc.models._integrated import integrator_model
from vimpc.models._neural import NeuralFamily, rollout_windows

#: Fewer training windows (chunks of ``chunk + 1`` snapshots) than this are refused.
MIN_CHUNKS = 10
#: Fewer scalar targets (windows x chunk x state size) than this fraction of the network's
#: parameters are warned of (FitWarning); the same fraction as the other network families.
MIN_TARGETS_PER_PARAMETER = nl.MIN_EQUATIONS_PER_PARAMETER
#: Data whose positions miss the holonomic constraints (|Phi(x)|, in the constraint's
#: units) or whose velocities miss their derivative (|G(x) x'|) by more are refused.
DATA_CONSTRAINT_TOL = 1e-6
#: The map from maximal to joint coordinates is accepted as affine when it reproduces the
#: joint coordinates of fresh poses to this (relative to 1 + |q|).
AFFINE_TOL = 1e-9
#: How many configurations the affine map is fitted on, and checked on (another draw).
AFFINE_POINTS = 24
#: A singular value of the constraint Jacobian ``G`` below this fraction of its largest
#: counts as zero in the rank of ``G`` (at the data's configurations).
RANK_RTOL = 1e-6
#: Gauss-Newton iterations of the exported ``from_obs``'s projection onto the constraints
#: (quadratic convergence: a state 1e-2 off is on them to round-off after 4).
PROJECTION_ITERATIONS = 4
#: States whose projection moves them further than this (in the mass metric,
#: ``sqrt(dx^T M dx)``, or leaves ``|Phi|`` above :data:`PROJECTED_TOL`) are refused by
#: :meth:`CLNNModel.project`: they are no noisy states of this mechanism.
PROJECTION_MAX = 0.5
#: What the projection must reach (``|Phi(x)|`` and ``|G(x) x'|``).
PROJECTED_TOL = 1e-10


SETTINGS: dict[str, Setting] = {
    "hidden": Setting(
        list, [256, 256, 256], "widths of the potential network's hidden layers (authors: "
        "3 x 256)", items=int, rule=POSITIVE,
    ),
    "activation": Setting(str, "tanh", "activation of the hidden layers",
                          choices=nl.ACTIVATIONS),
    "chunk": Setting(
        int, 5, "steps per training rollout (one RK4 step per dt; authors: 5)", rule=POSITIVE
    ),
    "epochs": Setting(int, 2000, "training epochs (authors: 2000)", rule=POSITIVE),
    "lr": Setting(float, 3e-3, "initial learning rate of AdamW (cosine schedule to 0)",
                  rule=POSITIVE),
    "weight_decay": Setting(float, 1e-4, "AdamW's decoupled weight decay", rule=NONNEGATIVE),
    "batch": Setting(
        int, 200, "training windows per minibatch (0 or more than there are: full batch)",
        rule=NONNEGATIVE,
    ),
    "time_budget": Setting(
        float, 0.0, "wall-clock training budget [s] (0: none)", rule=NONNEGATIVE
    ),
    "threads": Setting(int, 1, "torch threads while training (restored after)", rule=POSITIVE),
    "seed": Setting(int, 0, "seed of the initial weights, masses and minibatches", rule=SEED),
    "progress": Setting(bool, False, "show a progress bar while training"),
    "substeps": Setting(
        int, 1, "midpoint steps per dt in the exported model (1 gives the residual the "
        "implicit transcription needs; 2-pendulum at dt = 0.03 s: rollout error 3.8e-3 with "
        "1, 6.6e-4 with 4, results/clnn)", rule=SUBSTEPS,
    ),
    "data_tolerance": Setting(
        float, DATA_CONSTRAINT_TOL, "data whose positions miss the constraints (|Phi(x)|) or whose "
        "velocities miss their derivative (|G(x) x'|) by more are refused; data within it are "
        "projected onto the constraints before training (measurement noise; the largest "
        "move is recorded in the model's info)", rule=POSITIVE,
    ),
    "export": Setting(
        str, "mx", "how the exported step is written: `mx` (the network's dense products, "
        "closed-form derivatives, for control) or `sx` (the constrained VariationalIntegrator "
        "with the network expanded into scalar operations: slow, kept as the reference)",
        choices=("mx", "sx"),
    ),
    "damping": Setting(
        str, "known", "friction on the joint rates: `known`, the system's own friction "
        "(the paper's systems have none), or `learned`: a non-negative viscous coefficient "
        "per joint rate learned with the network, added to the known one (export `mx` only)",
        choices=("known", "learned"),
    ),
    "redundant": Setting(
        str, "drop", "constraint rows that the others imply (rank of G below its rows at "
        "every data configuration): `drop` keeps an independent subset (the dropped rows "
        "named in the model's info), `refuse` raises", choices=("drop", "refuse"),
    ),
}  # fmt: skip


# -- the maximal-coordinate description ----------------------------------------------------------


@dataclass(frozen=True)
class CartesianLayout:
    """What the families need of a system's maximal-coordinate description.

    Attributes:
        source: the system of the observations (joint coordinates, or the Cartesian
            system itself).
        system: the maximal-coordinate system (its constraints, input map, friction).
        groups: ``(n,)`` the learned mass each coordinate carries.
        mass_names: a name per learned mass.
        A, b: ``q = A x + b`` and ``v = A x'`` (None: the observation is the state).
        B, D: the constant input map ``(n, nu)`` and friction matrix ``W^T C W`` ``(n, n)``.
        W: the rates friction acts on, ``W x'`` ``(nf, n)`` (constant).
    """

    source: MechanicalSystem
    system: MechanicalSystem
    groups: np.ndarray
    mass_names: tuple[str, ...]
    A: np.ndarray | None
    b: np.ndarray | None
    B: np.ndarray
    D: np.ndarray
    W: np.ndarray

    def with_damping(self, c: np.ndarray) -> CartesianLayout:
        """The same layout with the viscous coefficients ``c`` (one per rate of ``W``) added
        to its friction: ``D + W^T diag(c) W``."""
        return replace(
            self, D=self.D + self.W.T @ np.diag(np.asarray(c, dtype=np.float64)) @ self.W
        )

    @property
    def n(self) -> int:
        return self.system.nq

    def from_obs(self) -> ca.Function:
        """``obs = (q, v) -> x = (x, x')`` (the bodies' poses and their velocities)."""
        s = self.source
        obs = ca.SX.sym("obs", s.nq + s.nv)
        if self.A is None:
            return ca.Function("from_obs", [obs], [obs], ["obs"], ["x"])
        q, v = obs[: s.nq], obs[s.nq :]
        z, w = [], []
        for pose in s.poses(q):
            z += [pose.position[0], pose.position[1], pose.angle]
            lin = ca.mtimes(pose.position_jacobian, v)
            w += [lin[0], lin[1], ca.mtimes(pose.angle_jacobian, v)]
        return ca.Function("from_obs", [obs], [ca.vertcat(*z, *w)], ["obs"], ["x"])

    def to_obs(self) -> ca.Function:
        """``x -> obs = (A x + b, A x')``."""
        x = ca.SX.sym("x", 2 * self.n)
        if self.A is None:
            return ca.Function("to_obs", [x], [x], ["x"], ["obs"])
        A = ca.DM(self.A)
        out = ca.vertcat(ca.mtimes(A, x[: self.n]) + ca.DM(self.b), ca.mtimes(A, x[self.n :]))
        return ca.Function("to_obs", [x], [out], ["x"], ["obs"])


def _affine_inverse(source: PlanarBodies, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(A, b)`` with ``q = A to_maximal(q) + b``, fitted by least squares and checked on
    other configurations; refused when the joint coordinates are not affine in the poses."""
    rng = np.random.default_rng(0)

    def poses(n):
        Q = rng.uniform(-3.0, 3.0, size=(n, source.nq))
        Z = np.array([source.to_maximal(q, np.zeros(source.nv))[0] for q in Q])
        return Q, np.hstack([Z, np.ones((n, 1))])

    Q, Z = poses(AFFINE_POINTS)
    coef = np.linalg.lstsq(Z, Q, rcond=None)[0]
    Q2, Z2 = poses(AFFINE_POINTS)
    err = float(np.max(np.abs(Z2 @ coef - Q2) / (1.0 + np.abs(Q2))))
    if not err <= AFFINE_TOL:
        raise InputError(
            f"{what} maps the model's maximal coordinates back to the observation by an affine "
            f"map, but {source.name}'s joint coordinates are not affine in its bodies' poses "
            f"(best affine fit off by {err:.3g} relative, AFFINE_TOL = {AFFINE_TOL}); use a "
            "system whose coordinates are body angles and slider positions"
        )
    return coef[:-1].T.copy(), coef[-1].copy()


def _constant(fn: ca.Function, n: int, what: str, name: str) -> np.ndarray:
    """A matrix function of ``q`` that must not depend on it in maximal coordinates."""
    rng = np.random.default_rng(1)
    values = [np.asarray(fn(rng.uniform(-2.0, 2.0, n)), dtype=np.float64) for _ in range(3)]
    if any(np.max(np.abs(v - values[0]), initial=0.0) > 1e-12 for v in values[1:]):
        raise InputError(
            f"{what} needs a constant {name} in maximal coordinates; the system's depends on "
            "the configuration"
        )
    return values[0]


def cartesian_layout(system: MechanicalSystem, what: str = "clnn") -> CartesianLayout:
    """The maximal-coordinate description of ``system`` (see the module docstring).

    Raises:
        InputError: a system without one (not a planar mechanism, nor in Cartesian
            coordinates), with nonholonomic constraints, or whose joint coordinates are not
            affine in its poses.
    """
    if not isinstance(system, MechanicalSystem):
        raise InputError(f"system must be a MechanicalSystem, got {type(system).__name__}")
    A = b = None
    if isinstance(system, NPendulum):
        maximal = system
        k = system.nq // 2
        groups = np.repeat(np.arange(k), 2)
        names = tuple(f"m{i + 1}" for i in range(k))
    elif isinstance(system, PlanarBodies):
        maximal = system if isinstance(system, MaximalCoordinates) else system.maximal()
        bodies = maximal.bodies()
        groups = np.array([g for i in range(len(bodies)) for g in (2 * i, 2 * i, 2 * i + 1)])
        names = tuple(f"{body.name}.{kind}" for body in bodies for kind in ("mass", "inertia"))
        if maximal is not system:
            A, b = _affine_inverse(system, what)
    else:
        raise InputError(
            f"{what} learns in maximal (Cartesian) coordinates, but {system.name} has no "
            "maximal-coordinate description: give a planar mechanism (a system with "
            ".maximal(), e.g. Pendulum, CartPole, DoublePendulum) or one in Cartesian "
            "coordinates (NPendulum, a MaximalCoordinates system)"
        )
    if maximal.n_nonholonomic:
        raise InputError(
            f"{what} learns holonomically constrained systems; {maximal.name} has "
            f"{maximal.n_nonholonomic} nonholonomic constraints"
        )
    if not maximal.n_holonomic:
        raise InputError(
            f"{what} learns holonomically constrained systems in maximal coordinates, but the "
            f"maximal description of {system.name} ({maximal.name}) has no holonomic "
            "constraints (n_holonomic = 0): its explicit constraints are what the family "
            "adds; learn an unconstrained system with 'lnn' or 'dlnn'"
        )
    n = maximal.nq
    B = _constant(maximal.function("B"), n, what, "input map B")
    W = _constant(maximal.function("W"), n, what, "friction rate map W")
    D = W.T @ np.diag(maximal.friction) @ W
    return CartesianLayout(system, maximal, groups, names, A, b, B, D, W)


def constraint_kinematics(system: MechanicalSystem, rows=None) -> ca.Function:
    """``(x, w) -> (G(x), d(G(x) w)/dx)``, each ``(k, n)`` row-major as a column of
    ``k n``: the constraint Jacobian and the derivative that gives ``dG/dt w`` (``w = x'``);
    only the constraint ``rows`` where given (an independent subset)."""
    n = system.nq
    x, w = ca.SX.sym("x", n), ca.SX.sym("w", n)
    G = system.function("G")(x)
    if rows is not None:
        G = G[list(rows), :]
    K = ca.jacobian(ca.mtimes(G, w), x)
    return ca.Function("constraint_kinematics", [x, w], [ca.vec(G.T), ca.vec(K.T)])


def _torch_constraints(system: MechanicalSystem, rows=None):
    """A torch function ``(x, w) -> (G, K)`` ``(B, k, n)`` each, for batches ``(B, n)``,
    evaluated by CasADi, with its vector-Jacobian product by CasADi's reverse mode (only
    the constraint ``rows`` where given)."""
    import torch

    n = system.nq
    k = system.n_holonomic if rows is None else len(rows)
    f = constraint_kinematics(system, rows)
    x, w = ca.SX.sym("x", n), ca.SX.sym("w", n)
    sG, sK = ca.SX.sym("sG", k * n), ca.SX.sym("sK", k * n)
    G, K = f(x, w)
    s = ca.dot(G, sG) + ca.dot(K, sK)
    back = ca.Function("constraint_vjp", [x, w, sG, sK], [ca.gradient(s, x), ca.gradient(s, w)])
    maps: dict[tuple[str, int], ca.Function] = {}

    def mapped(fn, size):
        key = (fn.name(), size)
        if key not in maps:
            maps[key] = fn.map(size)
        return maps[key]

    def arr(dm, size, *shape):
        return torch.from_numpy(np.asarray(dm, dtype=np.float64).T.reshape(size, *shape).copy())

    class Constraints(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, Wv):
            m = X.shape[0]
            ctx.save_for_backward(X, Wv)
            G_, K_ = mapped(f, m)(X.detach().numpy().T, Wv.detach().numpy().T)
            return arr(G_, m, k, n), arr(K_, m, k, n)

        @staticmethod
        def backward(ctx, gG, gK):
            X, Wv = ctx.saved_tensors
            m = X.shape[0]
            zeros = np.zeros((k * n, m))
            sg = zeros if gG is None else gG.detach().reshape(m, k * n).numpy().T
            sk = zeros if gK is None else gK.detach().reshape(m, k * n).numpy().T
            dx, dw = mapped(back, m)(X.detach().numpy().T, Wv.detach().numpy().T, sg, sk)
            return arr(dx, m, n), arr(dw, m, n)

    return Constraints.apply


def constraint_names(system: MechanicalSystem) -> tuple[str, ...]:
    """A name per holonomic constraint row: ``<joint>.x``/``.y`` for a revolute joint of a
    planar mechanism, ``<joint>.offset``/``.angle`` for a prismatic one, ``link<i>`` for a
    chain's distance constraints, ``g<i>`` otherwise."""
    k = system.n_holonomic
    if isinstance(system, PlanarBodies):
        joints = system.joints()
        names = []
        for i in system.closures:
            j = joints[i]
            kinds = ("x", "y") if isinstance(j, Revolute) else ("offset", "angle")
            names += [f"{j.name}.{kind}" for kind in kinds]
        if len(names) == k:
            return tuple(names)
    if isinstance(system, NPendulum):
        return tuple(f"link{i + 1}" for i in range(k))
    return tuple(f"g{i}" for i in range(k))


@dataclass(frozen=True)
class ConstraintRows:
    """Which rows of ``Phi`` the model keeps (an independent subset where some are implied by
    the others) and the rank analysis that chose them.

    Attributes:
        kept: indices of the kept rows (all of them when none is redundant).
        dropped: names of the dropped rows (implied by the kept ones at every data
            configuration).
        rank: the rank of ``G`` at the data's configurations (the same at each).
        smallest: the smallest kept singular value of ``G`` relative to its largest, over
            the data (how far from singular the kept rows are).
    """

    kept: tuple[int, ...]
    dropped: tuple[str, ...]
    rank: int
    smallest: float


def independent_rows(
    what: str, G: np.ndarray, names: tuple[str, ...], policy: str, where: tuple[int, int]
) -> ConstraintRows:
    """The rows of the constraint Jacobians ``G`` ``(B, k, n)`` (one per data configuration)
    to keep: all when ``G`` has full row rank ``k`` at every configuration; an independent
    subset (pivoted QR of ``G^T`` at the configuration where the rank-th singular value is
    largest, checked at every other) when the rank is the same ``r < k`` everywhere and
    ``policy == "drop"``. Refused (InputError, naming the rows, the rank and where): a rank
    that changes over the data (a singular configuration: the reactions there are not
    determined), redundant rows with ``policy == "refuse"``, a subset that loses rank
    somewhere. Singular values below :data:`RANK_RTOL` times the largest count as zero;
    ``where = (trajectories, snapshots)`` locates a sample in the messages."""
    import scipy.linalg

    B, k, _ = G.shape
    sv = np.linalg.svd(G, compute_uv=False)  # (B, min(k, n)) descending
    rel = sv / sv[:, :1]
    ranks = np.sum(rel > RANK_RTOL, axis=1)

    def place(j):
        i, t = divmod(int(j), where[1])
        return f"trajectory {i}, sample {t}"

    lo, hi = int(ranks.min()), int(ranks.max())
    if lo != hi:
        j = int(np.argmin(ranks))
        raise InputError(
            f"{what}: the constraint Jacobian G of the data's configurations changes rank, from "
            f"{hi} to {lo} (first at {place(j)}, smallest singular value "
            f"{rel[j, lo]:.3g} of the largest, RANK_RTOL = {RANK_RTOL}; "
            f"{int(np.sum(ranks < hi))} of {B} samples): a singular configuration, where the "
            "constraint reactions are not determined; keep the data away from it (e.g. the "
            "parallelogram four-bar's links collinear, theta1 = theta2)"
        )
    if lo == k:
        return ConstraintRows(tuple(range(k)), (), k, float(rel[:, k - 1].min()))
    ref = int(np.argmax(rel[:, lo - 1]))
    _, _, piv = scipy.linalg.qr(G[ref].T, pivoting=True)
    kept = tuple(sorted(int(i) for i in piv[:lo]))
    dropped = tuple(names[i] for i in range(k) if i not in kept)
    if policy == "refuse":
        raise InputError(
            f"{what}: the {k} constraint rows are redundant, G has rank {lo} at every data "
            f"configuration, so G M^-1 G^T is singular (rows {list(dropped)} are implied by "
            "the others); set redundant = 'drop' to keep an independent subset, or describe "
            "the mechanism without the redundant joint"
        )
    sub = np.linalg.svd(G[:, list(kept)], compute_uv=False)
    sub_rel = sub[:, -1] / sub[:, 0]
    if not np.all(sub_rel > RANK_RTOL):
        j = int(np.argmin(sub_rel))
        raise InputError(
            f"{what}: the constraint rows are redundant (rank {lo} of {k}), and no subset of "
            f"{lo} rows chosen at one configuration stays independent over the data (the "
            f"subset without {list(dropped)} loses rank at {place(j)}); describe the "
            "mechanism without the redundant joint"
        )
    return ConstraintRows(kept, dropped, lo, float(sub_rel.min()))


# -- the continuous dynamics in torch ------------------------------------------------------------


class _TorchDynamics:
    """The CLNN and CHNN vector fields of a potential network and log masses in torch."""

    def __init__(
        self,
        layout: CartesianLayout,
        net,
        P,
        c,
        scale: float,
        log_mass,
        rows=None,
        damping_root=None,
    ) -> None:
        import torch

        self.layout, self.net, self.P, self.c, self.scale = layout, net, P, c, scale
        self.log_mass = log_mass
        # the learned viscous coefficients are its squares (None: the known friction only)
        self.damping_root = damping_root
        self.groups = torch.from_numpy(layout.groups)
        self.B = torch.from_numpy(layout.B)
        self.D = torch.from_numpy(layout.D)
        self.W = torch.from_numpy(layout.W)
        self.k = layout.system.n_holonomic if rows is None else len(rows)
        self.constraints = _torch_constraints(layout.system, rows) if self.k else None

    def minv(self):
        import torch

        return torch.exp(-self.log_mass)[self.groups]

    def grad_v(self, X):
        """``grad V`` at the rows of ``X``, differentiable in ``X`` too (a rollout's later
        states depend on the parameters; nl.input_derivatives detaches its input)."""
        import torch

        if not X.requires_grad:
            X = X.detach().requires_grad_(True)
        y = self.scale * self.net(X @ self.P.T + self.c).sum()
        return torch.autograd.grad(y, X, create_graph=True)[0]

    def force(self, Vel, U):
        F = U @ self.B.T - Vel @ self.D.T
        if self.damping_root is None:
            return F
        return F - ((Vel @ self.W.T) * self.damping_root**2) @ self.W

    def acceleration(self, X, Vel, U):
        """CLNN: ``x'' = f - M^-1 G^T (G M^-1 G^T)^-1 (G f + K x')``, ``f = M^-1 (F - grad V)``."""
        import torch

        minv = self.minv()
        f = minv * (self.force(Vel, U) - self.grad_v(X))
        if not self.k:
            return f
        G, K = self.constraints(X, Vel)
        S = torch.einsum("bkn,n,bjn->bkj", G, minv, G)
        rhs = torch.einsum("bkn,bn->bk", G, f) + torch.einsum("bkn,bn->bk", K, Vel)
        lam = torch.linalg.solve(S, rhs)
        return f - minv * torch.einsum("bkn,bk->bn", G, lam)

    def hamiltonian_field(self, X, Pm, U):
        """CHNN: ``z' = P(z) (J grad H + (0, F))`` on ``z = (x, p)``."""
        import torch

        minv = self.minv()
        w = minv * Pm
        rhs = torch.cat([w, self.force(w, U) - self.grad_v(X)], 1)
        if not self.k:
            return rhs
        G, K = self.constraints(X, w)
        zero = torch.zeros_like(G)
        D = torch.cat([torch.cat([G, zero], 2), torch.cat([K, G * minv], 2)], 1)  # (B, 2k, 2n)
        n = X.shape[1]
        JDt = torch.cat([D[:, :, n:], -D[:, :, :n]], 2).transpose(1, 2)  # J D^T (B, 2n, 2k)
        S = D @ JDt
        lam = torch.linalg.solve(S, torch.einsum("bkn,bn->bk", D, rhs))
        return rhs - torch.einsum("bnk,bk->bn", JDt, lam)


def _rk4(field, y, u, h):
    k1 = field(y, u)
    k2 = field(y + 0.5 * h * k1, u)
    k3 = field(y + 0.5 * h * k2, u)
    k4 = field(y + h * k3, u)
    return y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


# -- the exported step on MX -----------------------------------------------------------------------


def _stage_equations(system, rows, m: np.ndarray, B: np.ndarray, D: np.ndarray, h: float):
    """The constrained midpoint equations of ``L = 1/2 x'^T M x' - V(x)`` on MX, with the
    gradient ``g`` (and Hessian ``H``) of ``V`` at the midpoint given: a callable
    ``(x, u, x_next, g, H=None) -> r``, or ``(r, dr/dx, dr/du, dr/dx_next)`` when ``H`` is
    given, the Jacobians in closed form.

    The equations are the :class:`~vimpc.integrators.VariationalIntegrator`'s (position-
    momentum form, midpoint rule, Marsden & West 2001 eq. 3.5.2 with forcing) with the
    multipliers eliminated by the same projection ``r = e - C^T lam``, ``lam = (C C^T)^-1
    (C e - c)``:

        M x'_0 + D1 L_d + f- = G(x_0)^T lam,   Phi(x_1) / h = 0,
        M x'_1 - D2 L_d - f+ = G(x_1)^T mu,    G(x_1) x'_1 = 0,

    ``D1 L_d = -M (x_1 - x_0) / h - h/2 grad V(mid)``, ``D2 L_d = M (x_1 - x_0) / h - h/2
    grad V(mid)``, ``f- = f+ = h/2 (B u - D (x_1 - x_0) / h)``; only the kept ``rows``. The
    derivative of the projection: ``dr = P (de - dC^T lam) - A^T (dC r - dc)`` with ``A =
    (C C^T)^-1 C`` and ``P = I - C^T A``; ``dC w`` and ``dC^T lam`` are the small SX
    functions ``d(G w)/dq`` and ``d(G^T lam)/dq`` of the constraints. CasADi's automatic
    Jacobian of the projection written in scalar operations has ~18,000 instructions on the
    four-bar (2.2 ms per stage), this ~0.1 ms."""
    n, nu = len(m), B.shape[1]
    rows = list(rows)
    k = len(rows)
    q, w, lam = ca.SX.sym("q", n), ca.SX.sym("w", n), ca.SX.sym("lam", k)
    G = system.function("G")(q)[rows, :]
    Gk = ca.Function("G", [q], [G])
    phik = ca.Function("phi", [q], [system.function("g")(q)[rows]])
    Kf = ca.Function("dGw", [q, w], [ca.jacobian(ca.mtimes(G, w), q)])
    Hf = ca.Function("dGtlam", [q, lam], [ca.jacobian(ca.mtimes(G.T, lam), q)])
    Md, Bd, Dd = ca.DM(m), ca.DM(B), ca.DM(D)
    Mm, I = ca.DM(np.diag(m)), ca.DM.eye(n)

    def stage(x, u, z, g, H=None):
        q0, w0, q1, w1 = x[:n], x[n:], z[:n], z[n:]
        v01 = (q1 - q0) / h
        f = 0.5 * h * (ca.mtimes(Bd, u) - ca.mtimes(Dd, v01))
        e_q = Md * w0 - Md * v01 - 0.5 * h * g + f
        e_v = Md * w1 - Md * v01 + 0.5 * h * g - f
        C0, C1 = Gk(q0), Gk(q1)
        Y0 = _newton.linear_solve(ca.mtimes(C0, C0.T), ca.horzcat(ca.mtimes(C0, e_q) - phik(q1) / h, C0))
        Y1 = _newton.linear_solve(ca.mtimes(C1, C1.T), ca.horzcat(ca.mtimes(C1, e_v - w1), C1))
        lam0, A0, mu1, A1 = Y0[:, 0], Y0[:, 1:], Y1[:, 0], Y1[:, 1:]
        r_q = e_q - ca.mtimes(C0.T, lam0)
        r_v = e_v - ca.mtimes(C1.T, mu1)
        r = ca.vertcat(r_q, r_v)
        if H is None:
            return r
        P0, P1 = I - ca.mtimes(C0.T, A0), I - ca.mtimes(C1.T, A1)
        Hh = 0.25 * h * H  # h/2 d(grad V(mid))/dq_i = h/4 H, for q0 and q1 alike
        friction = 0.5 * Dd
        # de/d(q0, q1, w0 or w1, u): the momentum equations are linear but for g
        eq_q0 = Mm / h + friction - Hh
        eq_q1 = -Mm / h - friction - Hh
        ev_q0 = Mm / h - friction + Hh
        ev_q1 = -Mm / h + friction + Hh
        rq_q0 = ca.mtimes(P0, eq_q0 - Hf(q0, lam0)) - ca.mtimes(A0.T, Kf(q0, r_q))
        rq_q1 = ca.mtimes(P0, eq_q1) + ca.mtimes(A0.T, C1) / h
        rq_w0 = ca.mtimes(P0, Mm)
        rq_u = ca.mtimes(P0, 0.5 * h * Bd)
        rv_q0 = ca.mtimes(P1, ev_q0)
        rv_q1 = ca.mtimes(P1, ev_q1 - Hf(q1, mu1)) - ca.mtimes(A1.T, Kf(q1, r_v - w1))
        rv_w1 = ca.mtimes(P1, Mm) + ca.mtimes(A1.T, C1)
        rv_u = ca.mtimes(P1, -0.5 * h * Bd)
        zero = ca.MX(n, n)
        Jx = ca.vertcat(ca.horzcat(rq_q0, rq_w0), ca.horzcat(rv_q0, zero))
        Jz = ca.vertcat(ca.horzcat(rq_q1, zero), ca.horzcat(rv_q1, rv_w1))
        return r, Jx, ca.vertcat(rq_u, rv_u), Jz

    del nu
    return stage


def _constrained_midpoint(
    layout: CartesianLayout,
    network: nl.Network,
    m: np.ndarray,
    rows: tuple[int, ...],
    dt: float,
    substeps: int,
    info: dict,
) -> DiscreteModel:
    """The DiscreteModel of the constrained midpoint step of ``L = 1/2 x'^T M x' - V(x)``
    (constant diagonal ``M = diag(m)``, network ``V``) written on MX.

    The step's equations (:func:`_stage_equations`) and its Newton solve (CasADi's
    ``fast_newton`` on the state scaled as the integrator scales it, its tolerances and
    iterations) and acceptance test (finite; residual within ``ACCEPT_FACTOR`` times the
    Newton tolerance plus ``ACCEPT_RTOL`` times the round-off level; energy balance with
    ``ENERGY_JUMP``, the snap of an off-constraint start included) are the
    :class:`~vimpc.integrators.VariationalIntegrator`'s; what differs is that the network
    stays a chain of dense products (:func:`vimpc.models._network_lagrangian.network_pass`,
    CasADi's BLAS plugins) with its gradient and Hessian in closed form, so the Newton
    Jacobian and the model's ``residual_jacobian`` are written out
    (:func:`_stage_equations`). ``tests/test_clnn.py`` checks step, residual, its
    Jacobian and energy against the SX export (``export = "sx"``) and torch."""
    from vimpc.integrators.variational import ENERGY_JUMP

    system = layout.system
    n, nu = layout.n, system.nu
    h = dt / substeps
    stage = _stage_equations(system, rows, m, layout.B, layout.D, h)
    weights = nl.layer_weights(network)
    eye = np.eye(n)
    Md = ca.DM(m)
    rows_l = list(rows)
    phi, Gf = system.function("g"), system.function("G")

    def network_pass_(q, directions=None, grad=True):
        return nl.network_pass(network, q, directions, grad, weights)

    def residual_parts(X, U, Z, hessian):
        mid = 0.5 * (X[:n] + Z[:n])
        _, g, H = network_pass_(mid, eye if hessian else None)
        return stage(X, U, Z, g, H)

    X, Z, U = ca.MX.sym("x", 2 * n), ca.MX.sym("x_next", 2 * n), ca.MX.sym("u", nu)
    P = ca.MX.sym("p", 0)
    r = residual_parts(X, U, Z, False)
    residual = ca.Function("residual", [X, U, Z, P], [r], ["x", "u", "x_next", "p"], ["r"])
    r, Jx, Ju, Jz = residual_parts(X, U, Z, True)
    residual_jacobian = ca.Function(
        "residual_jacobian", [X, U, Z, P], [r, ca.horzcat(Jx, Ju, Jz)],
        ["x", "u", "x_next", "p"], ["r", "J"],
    )  # fmt: skip

    # -- the Newton solve on the scaled unknown, with the closed-form Jacobian --------------
    tol = _newton.ABSTOL
    Zs = ca.MX.sym("z", 2 * n)
    scale = _newton.state_scale(X[:n], X[n:], h)
    implicit = ca.Function("G", [Zs, X, U], [residual_parts(X, U, scale * Zs, False)])
    rz, _, _, Jzz = residual_parts(X, U, scale * Zs, True)
    jac = ca.mtimes(Jzz, ca.diag(scale))
    newton = ca.rootfinder(
        f"{system.name}_clnn_midpoint_newton", "fast_newton", implicit,
        {"abstol": tol, "abstolStep": _newton.STEP_TOL, "max_iter": _newton.MAX_ITER,
         "error_on_fail": False,
         "jacobian_function": ca.Function("G_jac", [Zs, X, U], [jac, rz])},
    )  # fmt: skip
    guess = ca.vertcat(X[:n] + h * X[n:], X[n:]) / scale
    root = scale * newton(guess, X, U)

    # -- the acceptance test (the integrator's _acceptable and energy_balance) -------------
    q0, w0, q1, w1 = X[:n], X[n:], root[:n], root[n:]
    res = residual_parts(X, U, root, False)
    level = ca.mmax(Md) * (ca.norm_inf(q0) / h + ca.norm_inf(w0))
    tolerance = _newton.ACCEPT_FACTOR * tol + _newton.ACCEPT_RTOL * ca.repmat(level, 2 * n, 1)
    V0, gV0, _ = network_pass_(q0)
    V1 = network_pass_(q1, grad=False)[0]
    v01 = (q1 - q0) / h
    f = 0.5 * h * (ca.mtimes(ca.DM(layout.B), U) - ca.mtimes(ca.DM(layout.D), v01))
    work = ca.dot(2.0 * f, q1 - q0) / h
    T0, T1 = 0.5 * ca.dot(w0, Md * w0), 0.5 * ca.dot(w1, Md * w1)
    E0, E1 = T0 + V0, T1 + V1
    C = Gf(q0)[rows_l, :]
    rate = ca.mtimes(C, w0) + phi(q0)[rows_l] / h
    ws = ca.mtimes(C.T, _newton.linear_solve(ca.mtimes(C, C.T), rate))
    snap = ca.fabs(ca.dot(w0, Md * ws)) + 0.5 * ca.dot(ws, Md * ws) + h * ca.fabs(ca.dot(gV0, ws))
    error = ca.fabs(E1 - E0 - work)
    allowance = ENERGY_JUMP * (ca.fabs(T0) + ca.fabs(work) + ca.fabs(V1 - V0) + snap) + (
        _newton.ACCEPT_RTOL
        * (ca.fabs(E0) + ca.fabs(E1) + ca.fabs(T0) + ca.fabs(T1) + ca.fabs(work))
    )
    ok = _newton.all_finite(root) * _newton.within(res, tolerance) * (error <= allowance)
    one = ca.Function("step_h", [X, U], [_newton.accepted(root, ok)])
    if substeps == 1:
        x_next = one(X, U)
    else:
        x_next = one.mapaccum("step_substeps", substeps)(X, ca.repmat(U, 1, substeps))[:, -1]
    step = ca.Function("step", [X, U, P], [x_next], ["x", "u", "p"], ["x_next"])
    V = network_pass_(X[:n], grad=False)[0]
    energy = ca.Function("energy", [X, P], [0.5 * ca.dot(X[n:], Md * X[n:]) + V],
                         ["x", "p"], ["E"])  # fmt: skip
    constraint = ca.Function("constraint", [X], [phi(X[:n])], ["x"], ["g"])
    obs = ca.MX.sym("obs", layout.source.nq + layout.source.nv)
    from_obs = ca.Function(
        "from_obs", [obs], [_projection(system, rows, m)(layout.from_obs()(obs))], ["obs"], ["x"]
    )
    names = system.coordinate_names
    reference = VariationalIntegrator(system, "midpoint", "position_momentum")
    return DiscreteModel(
        dt=dt,
        nx=2 * n,
        nu=nu,
        np=0,
        nobs=int(obs.numel()),
        step=step,
        residual=residual if substeps == 1 else None,
        residual_jacobian=residual_jacobian if substeps == 1 else None,
        energy=energy,
        from_obs=from_obs,
        to_obs=layout.to_obs(),
        constraint=constraint,
        state_names=(*names, *(f"{c}_dot" for c in names)),
        input_names=system.input_names,
        param_names=(),
        p_default=np.zeros(0),
        info={
            **info,
            "step_acceptance": reference.acceptance(),
            "dense_products": f"{nl._blas(1)} up to 3 columns, {nl._blas(4)} above",
        },
    )


def _projection(system, rows, m: np.ndarray) -> ca.Function:
    """``x -> x`` projected onto the kept constraints: :data:`PROJECTION_ITERATIONS`
    Gauss-Newton steps ``dx = -M^-1 G^T (G M^-1 G^T)^-1 Phi`` on the positions (the smallest
    move in the mass metric), then the velocities onto the null space of ``G`` in the same
    metric. A state on the constraints comes back unchanged (to round-off)."""
    n = len(m)
    rows = list(rows)
    x = ca.SX.sym("x", 2 * n)
    minv = ca.DM(1.0 / m)
    phi, Gf = system.function("g"), system.function("G")

    def correction(q, c):
        G = Gf(q)[rows, :]
        S = ca.mtimes([G, ca.diag(minv), G.T])
        return minv * ca.mtimes(G.T, _newton.linear_solve(S, c))

    q = x[:n]
    for _ in range(PROJECTION_ITERATIONS):
        q = q - correction(q, phi(q)[rows])
    w = x[n:] - correction(q, ca.mtimes(Gf(q)[rows, :], x[n:]))
    return ca.Function("onto_constraints", [x], [ca.vertcat(q, w)], ["x"], ["x_projected"])


# -- the families ----------------------------------------------------------------------------------


class _ConstrainedNetwork(NeuralFamily):
    """What CLNN and CHNN share; ``formulation`` picks the rollouts' vector field."""

    settings = SETTINGS
    formulation = "lagrangian"

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        if self.damping == "learned" and self.export == "sx":
            raise InputError(
                "damping = 'learned' is written into the MX export only; export = 'sx' builds "
                "the system's own integrator with its known friction: use export = 'mx'"
            )
        self.layout = cartesian_layout(self.system, self.name)

    def _provides(self) -> set[str]:
        constrained = {"constraint"} if self.layout.system.n_holonomic else set()
        implicit = {"residual"} if self.substeps == 1 else set()
        return {"energy"} | implicit | constrained

    @property
    def sizes(self) -> list[int]:
        return [self.layout.n, *self.hidden, 1]

    # -- data ------------------------------------------------------------------------------------
    def _maximal_states(self, data: Dataset) -> np.ndarray:
        """The data's noisy observations in maximal coordinates ``(N, T + 1, 2 n)``."""
        obs = np.asarray(data.obs, dtype=np.float64)
        N, T1, m = obs.shape
        f = self.layout.from_obs().map(N * T1)
        return np.asarray(f(obs.reshape(-1, m).T), dtype=np.float64).T.reshape(N, T1, -1)

    def _check_constraints(self, X: np.ndarray) -> ConstraintRows:
        """Refuse data off the constraints; the constraint rows to keep (the rank of ``G``
        at the data's configurations, :func:`independent_rows`)."""
        s, n = self.layout.system, self.layout.n
        flat = X.reshape(-1, 2 * n)
        g = np.asarray(s.function("g").map(len(flat))(flat[:, :n].T)).T
        kin = constraint_kinematics(s).map(len(flat))
        G = np.asarray(kin(flat[:, :n].T, flat[:, n:].T)[0]).T.reshape(len(flat), -1, n)
        gv = np.einsum("bkn,bn->bk", G, flat[:, n:])
        tol = self.data_tolerance
        for name, value, units in (("positions", g, "Phi(x)"), ("velocities", gv, "G(x) x'")):
            worst = np.abs(value).max(axis=1)
            if np.any(worst > tol):
                j = int(np.argmax(worst))
                i, t = divmod(j, X.shape[1])
                raise InputError(
                    f"{self.name}: the data's {name} violate the constraints of {s.name} by up "
                    f"to |{units}| = {worst[j]:.3g} (trajectory {i}, sample {t}; "
                    f"{int(np.sum(worst > tol))} of {len(worst)} samples above "
                    f"data_tolerance = {tol:g}); raise data_tolerance if that is measurement "
                    "noise (the data are then projected onto the constraints), or give data "
                    "of this system"
                )
        self.data_offset_ = (float(np.abs(g).max()), float(np.abs(gv).max()))
        names = constraint_names(s)
        return independent_rows(self.name, G, names, self.redundant, X.shape[:2])

    def _windows(self, X: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Xw, Uw = rollout_windows(self.name, X, U, self.chunk, "chunk", ("MIN_CHUNKS", MIN_CHUNKS))
        targets = len(Xw) * self.chunk * X.shape[2]
        params = nl.n_parameters(self.sizes)
        if targets < MIN_TARGETS_PER_PARAMETER * params:
            warnings.warn(
                f"{self.name}: {targets} scalar targets for a network of {params} parameters "
                f"(hidden = {self.hidden}; fewer than MIN_TARGETS_PER_PARAMETER = "
                f"{MIN_TARGETS_PER_PARAMETER} per parameter): the fit rests on the network's "
                "implicit bias; use smaller hidden layers or more data",
                FitWarning,
                stacklevel=4,
            )
        return Xw, Uw

    # -- training --------------------------------------------------------------------------------
    def _fit(self, data: Dataset | None) -> None:
        X = self._maximal_states(data)
        self.rows_ = self._check_constraints(X)
        # within data_tolerance: onto the constraints (unit metric: no masses yet)
        n = self.layout.n
        proj = _projection(self.layout.system, self.rows_.kept, np.ones(n)).map(
            X[0].size // (2 * n) * len(X)
        )
        flat = X.reshape(-1, 2 * n)
        Xp = np.asarray(proj(flat.T)).T
        self.data_projection_ = float(np.abs(Xp - flat).max())
        X = Xp.reshape(X.shape)
        if self.rows_.dropped and self.export == "sx":
            raise InputError(
                f"{self.name}: export = 'sx' builds the system's VariationalIntegrator with "
                f"every constraint row, but rows {list(self.rows_.dropped)} are redundant "
                f"(rank {self.rows_.rank} of {self.layout.system.n_holonomic}): use "
                "export = 'mx', which keeps the independent subset"
            )
        U = np.asarray(data.inputs, dtype=np.float64)
        Xw, Uw = self._windows(X, U)
        self._note_inputs(
            U,
            ", so the learned Lagrangian's scale (masses and potential together) is not "
            "identified: the exported model's response to inputs is off by an unknown factor "
            "(collect data with known, excited inputs for control)",
        )
        self._timed(self._train, X, Xw, Uw)
        self.windows_ = len(Xw)
        self._v = None

    def _train(self, X: np.ndarray, Xw: np.ndarray, Uw: np.ndarray) -> None:
        import torch

        from vimpc.models._torch_casadi import mlp

        n, h = self.layout.n, self.dt
        pos = X[:, :, :n].reshape(-1, n)
        mean, spread = pos.mean(0), pos.std(0)
        spread = np.where(spread > 1e-12, spread, 1.0)
        P_np, c_np = np.diag(1.0 / spread), -mean / spread
        speed2 = float(np.mean(np.sum(X[:, :, n:] ** 2, axis=2)))
        scale = speed2 if speed2 > 1e-12 else 1.0  # kinetic energy of unit masses
        net = mlp(self.sizes, self.activation, seed=self.seed)
        gen = torch.Generator().manual_seed(self.seed + 1)
        n_mass = len(self.layout.mass_names)
        log_mass = (0.1 * torch.randn(n_mass, generator=gen, dtype=torch.float64)).requires_grad_()
        root = None
        if self.damping == "learned":
            nf = self.layout.W.shape[0]
            root = torch.full((nf,), 0.1, dtype=torch.float64, requires_grad=True)
        dyn = _TorchDynamics(
            self.layout,
            net,
            torch.from_numpy(P_np),
            torch.from_numpy(c_np),
            scale,
            log_mass,
            self.rows_.kept,
            root,
        )
        Xt, Ut = torch.from_numpy(Xw), torch.from_numpy(Uw)
        loss_fn = self._rollout_loss(dyn, Xt, Ut, h)
        params = {**dict(net.named_parameters()), "log_mass": log_mass}
        if root is not None:
            params["damping_root"] = root
        self._keep(self._train_loop(loss_fn, params, len(Xw), optimizer="adamw",
                                    weight_decay=self.weight_decay))  # fmt: skip
        self.network_ = nl.fold(net, P_np, c_np, scale, self.activation)
        self.masses_ = np.exp(log_mass.detach().numpy()).copy()
        nf = self.layout.W.shape[0]
        self.damping_ = np.zeros(nf) if root is None else (root.detach().numpy() ** 2).copy()
        self._v = None

    def _fitted_layout(self) -> CartesianLayout:
        """The layout with the learned friction (``damping_``) added to the known one (after
        training; the calibration builds the model before the fit is complete)."""
        return self.layout.with_damping(self.damping_)

    def _rollout_loss(self, dyn: _TorchDynamics, Xt, Ut, h: float):
        """The mean absolute error of ``chunk`` RK4 steps from each window's first state."""
        import torch

        n = self.layout.n
        lagrangian = self.formulation == "lagrangian"

        def field(y, u):
            if lagrangian:
                return torch.cat([y[:, n:], dyn.acceleration(y[:, :n], y[:, n:], u)], 1)
            return dyn.hamiltonian_field(y[:, :n], y[:, n:], u)

        def loss(idx):
            x, u = Xt[idx], Ut[idx]
            y = x[:, 0]
            if not lagrangian:  # (x, p = M x')
                y = torch.cat([y[:, :n], y[:, n:] / dyn.minv()], 1)
            preds = []
            for j in range(self.chunk):
                y = _rk4(field, y, u[:, j], h)
                preds.append(y if lagrangian else torch.cat([y[:, :n], dyn.minv() * y[:, n:]], 1))
            return torch.mean(torch.abs(torch.stack(preds, 1) - x[:, 1:]))

        return loss

    # -- what the fitted model offers --------------------------------------------------------------
    def mass_matrix(self) -> np.ndarray:
        """The learned constant mass matrix ``(n, n)`` (diagonal, positive)."""
        self._require_fitted("mass_matrix()")
        return np.diag(self.masses_[self.layout.groups])

    def potential(self) -> ca.Function:
        """``V: x -> y`` as a CasADi function (MX), written by the torch -> CasADi writer."""
        self._require_fitted("potential()")
        return self._potential()

    def _potential(self) -> ca.Function:
        if getattr(self, "_v", None) is None:
            self._v = self.network_.casadi_function("V")
        return self._v

    def vector_field(self) -> ca.Function:
        """The learned continuous dynamics as a CasADi function ``(y, u) -> y'``: CLNN on
        ``y = (x, x')``, CHNN on ``y = (x, p)`` (the same formulas as training)."""
        self._require_fitted("vector_field()")
        lay, n = self._fitted_layout(), self.layout.n
        x, second, u = ca.MX.sym("x", n), ca.MX.sym("w", n), ca.MX.sym("u", lay.system.nu)
        y = ca.vertcat(x, second)
        minv = ca.DM(1.0 / self.masses_[lay.groups])
        gV = ca.gradient(self._potential()(x), x)
        w = second if self.formulation == "lagrangian" else minv * second
        F = ca.mtimes(ca.DM(lay.B), u) - ca.mtimes(ca.DM(lay.D), w)
        k = len(self.rows_.kept)
        G = K = None
        if k:
            Gv, Kv = constraint_kinematics(lay.system, self.rows_.kept)(x, w)
            G, K = ca.reshape(Gv, n, k).T, ca.reshape(Kv, n, k).T
        if self.formulation == "lagrangian":
            f = minv * (F - gV)
            if k:
                Mi = ca.diag(minv)
                S = ca.mtimes([G, Mi, G.T])
                lam = _newton.linear_solve(S, ca.mtimes(G, f) + ca.mtimes(K, w))
                f = f - ca.mtimes([Mi, G.T, lam])
            out = ca.vertcat(w, f)
        else:
            rhs = ca.vertcat(w, F - gV)
            if k:
                D = ca.vertcat(
                    ca.horzcat(G, ca.MX.zeros(k, n)), ca.horzcat(K, ca.mtimes(G, ca.diag(minv)))
                )
                JDt = ca.horzcat(D[:, n:], -D[:, :n]).T
                rhs = rhs - ca.mtimes(JDt, _newton.linear_solve(ca.mtimes(D, JDt), ca.mtimes(D, rhs)))
            out = rhs
        return ca.Function("vector_field", [y, u], [out], ["y", "u"], ["y_dot"])

    def project(self, states) -> tuple[np.ndarray, np.ndarray]:
        """States ``(m, 2 n)`` in maximal coordinates projected onto the constraints as the
        exported ``from_obs`` projects them, and how far each moved: ``(projected,
        distance)``, ``distance`` the move of the positions in the learned mass metric,
        ``sqrt(dx^T M dx)``. A state that is not finite, moves further than
        :data:`PROJECTION_MAX` or is not on the constraints to :data:`PROJECTED_TOL` after
        :data:`PROJECTION_ITERATIONS` iterations is refused (InputError naming it and how
        far it was)."""
        self._require_fitted("project()")
        n = self.layout.n
        try:
            X = np.array(states, dtype=np.float64, ndmin=2)
        except (TypeError, ValueError):
            raise InputError(
                f"{self.name}.project: states must be numeric, got {type(states).__name__}"
            ) from None
        if X.ndim != 2 or X.shape[1] != 2 * n:
            raise InputError(
                f"{self.name}.project: states must have shape (m, {2 * n}) (maximal positions "
                f"and velocities of {self.layout.system.name}), got shape {X.shape}"
            )
        bad = ~np.all(np.isfinite(X), axis=1)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(
                f"{self.name}.project: states must be finite, got {X[i].tolist()} at row {i}"
            )
        s, rows, m = self.layout.system, list(self.rows_.kept), self.masses_[self.layout.groups]
        proj = _projection(s, self.rows_.kept, m).map(len(X))
        P = np.asarray(proj(X.T)).T
        dq = P[:, :n] - X[:, :n]
        distance = np.sqrt(np.einsum("bi,i,bi->b", dq, m, dq))
        g = np.asarray(s.function("g").map(len(X))(P[:, :n].T)).T[:, rows]
        G = np.asarray(constraint_kinematics(s, rows).map(len(X))(P[:, :n].T, P[:, n:].T)[0])
        gv = np.einsum("bkn,bn->bk", G.T.reshape(len(X), len(rows), n), P[:, n:])
        left = np.maximum(np.abs(g).max(axis=1), np.abs(gv).max(axis=1))
        worst = np.where(np.isfinite(left), left, np.inf)
        fail = (distance > PROJECTION_MAX) | ~(worst <= PROJECTED_TOL)
        if fail.any():
            i = int(np.argmax(fail))
            raise InputError(
                f"{self.name}.project: state {i} is no noisy state of {s.name}: projecting it "
                f"onto the constraints moves its positions by {distance[i]:.3g} (mass metric; "
                f"PROJECTION_MAX = {PROJECTION_MAX}) and leaves |Phi|, |G x'| = {worst[i]:.3g} "
                f"(PROJECTED_TOL = {PROJECTED_TOL}) after {PROJECTION_ITERATIONS} iterations; "
                "give states near the constraints (from_obs of an observation)"
            )
        return P, distance

    def _torch_dynamics(self) -> _TorchDynamics:
        """The fitted model's torch dynamics (for checks: the folded network, unit scale)."""
        import torch

        net = self.network_.torch_module()
        eye = torch.eye(self.layout.n, dtype=torch.float64)
        zero = torch.zeros(self.layout.n, dtype=torch.float64)
        log_mass = torch.from_numpy(np.log(self.masses_))
        return _TorchDynamics(self._fitted_layout(), net, eye, zero, 1.0, log_mass, self.rows_.kept)

    def lagrangian(self):
        """``L(q, v, theta) = 1/2 v^T M v - V(q)`` for the integrator (any CasADi type)."""
        self._require_fitted("lagrangian()")
        return self._lagrangian()

    def _lagrangian(self):
        V = self._potential()
        m = ca.DM(self.masses_[self.layout.groups])

        def L(q, v, theta):
            return 0.5 * ca.dot(v, m * v) - V(q)

        return L

    def _build(self) -> DiscreteModel:
        lay = self._fitted_layout()
        if self.export == "mx":
            m = self.masses_[lay.groups]
            return _constrained_midpoint(
                lay, self.network_, m, self.rows_.kept, self.dt, self.substeps,
                self._model_info(),
            )  # fmt: skip
        integrator = VariationalIntegrator(
            lay.system, "midpoint", "position_momentum", lagrangian=self._lagrangian()
        )
        model = integrator_model(
            integrator, self.dt, substeps=self.substeps, info=self._model_info()
        )
        return replace(
            model,
            nobs=lay.source.nq + lay.source.nv,
            from_obs=lay.from_obs(),
            to_obs=lay.to_obs(),
        )

    def _model_info(self) -> dict[str, Any]:
        return {
            **self.info(),
            "formulation": self.formulation,
            "coordinates": self.layout.system.name,
            "forced": self.forced_,
            "masses": dict(zip(self.layout.mass_names, self.masses_.tolist(), strict=True)),
            # viscous coefficients per joint rate added to the known friction (learned)
            "damping": self.damping,
            "learned_friction": self.damping_.tolist(),
            **self._rollout_info(),
            # data further off the constraints than this are refused
            "data_tolerance": self.data_tolerance,
            # the data's largest |Phi|, |G x'| and the largest move projecting them
            "data_offset": list(self.data_offset_),
            "data_projection": self.data_projection_,
            "export": self.export,
            "constraint_rank": self.rows_.rank,
            # rows implied by the kept ones (G's rank below its rows at every data sample)
            "dropped_constraints": list(self.rows_.dropped),
            "rank_rtol": RANK_RTOL,
            "from_obs": (
                f"onto the constraints: {PROJECTION_ITERATIONS} Gauss-Newton steps in the "
                "mass metric, velocities onto the null space of G"
                if self.export == "mx"
                else "the bodies' poses, not projected"
            ),
        }


class CLNNModel(_ConstrainedNetwork):
    """A constrained Lagrangian network in maximal coordinates (see the module docstring).

    Args:
        system: the environment's system (joint coordinates) with a maximal-coordinate
            description, or a system in Cartesian coordinates.
        dt: the model step [s], the step between snapshots (one RK4 step in training).
        settings: see :attr:`settings`.

    Fitted attributes: ``network_`` (the potential, numpy weights), ``masses_`` (the
    learned masses and second moments, ``layout.mass_names``), ``forced_``, ``training_``
    (a :class:`~vimpc.models._training.TrainingRecord`), ``windows_``,
    ``epochs_per_second_``.
    """

    name = "clnn"
    formulation = "lagrangian"


class CHNNModel(_ConstrainedNetwork):
    """A constrained Hamiltonian network in maximal coordinates (see the module docstring).

    CLNN's model, trained on rollouts of the projected Hamiltonian vector field in
    ``(x, p)``; the exported model is the same constrained variational integrator."""

    name = "chnn"
    formulation = "hamiltonian"
