"""The maximal-coordinate description of a mechanism and the constrained midpoint step of
a learned ``L = 1/2 x'^T M x' - V(x)`` in it, written on MX: the shared maths of the
constrained network families (:mod:`~vimpc.models.families.clnn`, ``"clnn"`` and
``"chnn"``; the module docstring there says what they learn and why).

**Layout** (:func:`cartesian_layout`): the state is the system's maximal coordinates, a
planar mechanism's :meth:`~vimpc.mechanics.planar.PlanarBodies.maximal` (each body's ``x, y,
phi``) or a system already in Cartesian coordinates; ``from_obs`` gives the bodies' poses
and ``to_obs`` the affine map ``q = A x + b`` back, fitted once to the poses and checked
exact (:data:`AFFINE_TOL`). The constraint Jacobian ``G`` and ``d(G w)/dx`` come from the
system's CasADi functions (:func:`constraint_kinematics`; in torch with their
vector-Jacobian products by CasADi's reverse mode, :func:`torch_constraints`), and
:func:`independent_rows` keeps an independent subset of redundant rows.

**Export** (:func:`constrained_midpoint`): the :class:`~vimpc.integrators.VariationalIntegrator`'s
constrained midpoint equations, Newton solve and acceptance test with the network kept as
dense products and its gradient and Hessian in closed form (:func:`stage_equations`);
:func:`projection` is the exported ``from_obs``'s projection onto the constraints.
Nothing here imports torch at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import casadi as ca
import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.integrators import VariationalIntegrator, _newton
from vimpc.mechanics.npendulum import NPendulum
from vimpc.mechanics.planar import MaximalCoordinates, PlanarBodies, Revolute
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _network_lagrangian as nl

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


def torch_constraints(system: MechanicalSystem, rows=None):
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


# -- the exported step on MX -----------------------------------------------------------------------


def stage_equations(system, rows, m: np.ndarray, B: np.ndarray, D: np.ndarray, h: float):
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
        Y0 = _newton.linear_solve(
            ca.mtimes(C0, C0.T), ca.horzcat(ca.mtimes(C0, e_q) - phik(q1) / h, C0)
        )
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


def constrained_midpoint(
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

    The step's equations (:func:`stage_equations`) and its Newton solve (CasADi's
    ``fast_newton`` on the state scaled as the integrator scales it, its tolerances and
    iterations) and acceptance test (finite; residual within ``ACCEPT_FACTOR`` times the
    Newton tolerance plus ``ACCEPT_RTOL`` times the round-off level; energy balance with
    ``ENERGY_JUMP``, the snap of an off-constraint start included) are the
    :class:`~vimpc.integrators.VariationalIntegrator`'s; what differs is that the network
    stays a chain of dense products (:func:`vimpc.models._network_lagrangian.network_pass`,
    CasADi's BLAS plugins) with its gradient and Hessian in closed form, so the Newton
    Jacobian and the model's ``residual_jacobian`` are written out
    (:func:`stage_equations`). ``tests/models/test_clnn.py`` checks step, residual, its
    Jacobian and energy against the SX export (``export = "sx"``) and torch."""
    from vimpc.integrators.variational import ENERGY_JUMP

    system = layout.system
    n, nu = layout.n, system.nu
    h = dt / substeps
    stage = stage_equations(system, rows, m, layout.B, layout.D, h)
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
        "from_obs", [obs], [projection(system, rows, m)(layout.from_obs()(obs))], ["obs"], ["x"]
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


def projection(system, rows, m: np.ndarray) -> ca.Function:
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
