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
and the system's known joint friction ``-W^T C W x'`` where it has any.

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

**Export.** The learned ``L = 1/2 x'^T M x' - V(x)`` (the network written by the torch ->
CasADi writer) goes through the constrained midpoint
:class:`~vimpc.integrators.VariationalIntegrator` in the position-momentum form: ``step``
solves its equations by Newton (``substeps`` midpoint steps per ``dt``), ``residual`` is its
implicit form (with one substep), the holonomic constraints
hold at every predicted state to the Newton tolerance (``constraint``), ``energy`` is
``1/2 x'^T M x' + V(x)``. The integrator builds on SX, so the network is expanded into scalar
operations there: measured on the 2-pendulum (a shared 2-core machine, load ~5), a 3 x 128
potential builds in 11 s and steps in 12-30 ms, 3 x 256 (the default) in 26 s and 135 ms
(the DLNN family's MX step, :func:`vimpc.models._network_lagrangian.midpoint_model`, is
unconstrained only); for control, a small network.

**What the data identify.** Only what the constraints leave free of the masses: on a
pendulum in ``(x, y, phi)`` the rod's mass and central inertia apart are not identified (the
potential is learned too), their combination about the pivot ``I + m l^2 / 4`` is (learned
0.341 against 1/3 kg m^2, ``tests/test_clnn.py``).

**Data checks.** Positions off the constraints by more than :data:`DATA_CONSTRAINT_TOL`
(``|Phi|`` or ``|G x'|``) are refused, naming how far and where; fewer than
:data:`MIN_CHUNKS` training windows are refused; fewer scalar targets than
:data:`MIN_TARGETS_PER_PARAMETER` per network parameter are warned of (FitWarning). On data
without inputs the Lagrangian's scale (masses and potential together) is not identified:
warned of (FitWarning).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, SUBSTEPS, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator
from vimpc.mechanics.npendulum import NPendulum
from vimpc.mechanics.planar import MaximalCoordinates, PlanarBodies
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _network_lagrangian as nl
from vimpc.models._integrated import integrator_model
from vimpc.models.base import ModelFamily

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
    """

    source: MechanicalSystem
    system: MechanicalSystem
    groups: np.ndarray
    mass_names: tuple[str, ...]
    A: np.ndarray | None
    b: np.ndarray | None
    B: np.ndarray
    D: np.ndarray

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
    n = maximal.nq
    B = _constant(maximal.function("B"), n, what, "input map B")
    W = _constant(maximal.function("W"), n, what, "friction rate map W")
    D = W.T @ np.diag(maximal.friction) @ W
    return CartesianLayout(system, maximal, groups, names, A, b, B, D)


def constraint_kinematics(system: MechanicalSystem) -> ca.Function:
    """``(x, w) -> (G(x), d(G(x) w)/dx)``, each ``(k, n)`` row-major as a column of
    ``k n``: the constraint Jacobian and the derivative that gives ``dG/dt w`` (``w = x'``)."""
    n = system.nq
    x, w = ca.SX.sym("x", n), ca.SX.sym("w", n)
    G = system.function("G")(x)
    K = ca.jacobian(ca.mtimes(G, w), x)
    return ca.Function("constraint_kinematics", [x, w], [ca.vec(G.T), ca.vec(K.T)])


def _torch_constraints(system: MechanicalSystem):
    """A torch function ``(x, w) -> (G, K)`` ``(B, k, n)`` each, for batches ``(B, n)``,
    evaluated by CasADi, with its vector-Jacobian product by CasADi's reverse mode."""
    import torch

    n, k = system.nq, system.n_holonomic
    f = constraint_kinematics(system)
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


# -- the continuous dynamics in torch ------------------------------------------------------------


class _TorchDynamics:
    """The CLNN and CHNN vector fields of a potential network and log masses in torch."""

    def __init__(self, layout: CartesianLayout, net, P, c, scale: float, log_mass) -> None:
        import torch

        self.layout, self.net, self.P, self.c, self.scale = layout, net, P, c, scale
        self.log_mass = log_mass
        self.groups = torch.from_numpy(layout.groups)
        self.B = torch.from_numpy(layout.B)
        self.D = torch.from_numpy(layout.D)
        self.k = layout.system.n_holonomic
        self.constraints = _torch_constraints(layout.system) if self.k else None

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
        return U @ self.B.T - Vel @ self.D.T

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


# -- the families ----------------------------------------------------------------------------------


class _ConstrainedNetwork(ModelFamily):
    """What CLNN and CHNN share; ``formulation`` picks the rollouts' vector field."""

    settings = SETTINGS
    formulation = "lagrangian"

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        if not self.hidden:
            raise InputError("hidden must list at least one hidden layer width, got []")
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

    def _check_constraints(self, X: np.ndarray) -> None:
        s, n = self.layout.system, self.layout.n
        if not s.n_holonomic:
            return
        flat = X.reshape(-1, 2 * n)
        g = np.asarray(s.function("g").map(len(flat))(flat[:, :n].T)).T
        kin = constraint_kinematics(s).map(len(flat))
        G = np.asarray(kin(flat[:, :n].T, flat[:, n:].T)[0]).T.reshape(len(flat), -1, n)
        gv = np.einsum("bkn,bn->bk", G, flat[:, n:])
        for name, value, units in (("positions", g, "Phi(x)"), ("velocities", gv, "G(x) x'")):
            worst = np.abs(value).max(axis=1)
            if np.any(worst > DATA_CONSTRAINT_TOL):
                j = int(np.argmax(worst))
                i, t = divmod(j, X.shape[1])
                raise InputError(
                    f"{self.name}: the data's {name} violate the constraints of {s.name} by up "
                    f"to |{units}| = {worst[j]:.3g} (trajectory {i}, sample {t}; "
                    f"{int(np.sum(worst > DATA_CONSTRAINT_TOL))} of {len(worst)} samples above "
                    f"DATA_CONSTRAINT_TOL = {DATA_CONSTRAINT_TOL}); project the states onto "
                    "the constraints (vimpc.data.sampling.onto_constraints) or give data of "
                    "this system"
                )

    def _windows(self, X: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        N, T1 = X.shape[:2]
        c = self.chunk
        if T1 < c + 1:
            raise InputError(
                f"{self.name} trains on rollouts of chunk = {c} steps, which needs trajectories "
                f"of at least chunk + 1 = {c + 1} snapshots; the data have {T1}: lower chunk "
                "or collect longer trajectories"
            )
        starts = range(T1 - c)
        Xw = np.stack([X[:, s : s + c + 1] for s in starts], 1).reshape(-1, c + 1, X.shape[2])
        Uw = np.stack([U[:, s : s + c] for s in starts], 1).reshape(-1, c, U.shape[2])
        if len(Xw) < MIN_CHUNKS:
            raise InputError(
                f"{self.name} needs at least MIN_CHUNKS = {MIN_CHUNKS} training windows of "
                f"chunk + 1 = {c + 1} snapshots, but {N} trajectories of {T1} snapshots give "
                f"{len(Xw)}: collect more or longer trajectories, or lower chunk"
            )
        targets = len(Xw) * c * X.shape[2]
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
        self._check_constraints(X)
        U = np.asarray(data.inputs, dtype=np.float64)
        Xw, Uw = self._windows(X, U)
        self.forced_ = bool(np.any(U != 0))
        if not self.forced_:
            warnings.warn(
                f"{self.name}: the data have no inputs, so the learned Lagrangian's scale "
                "(masses and potential together) is not identified: the exported model's "
                "response to inputs is off by an unknown factor (collect data with known, "
                "excited inputs for control)",
                FitWarning,
                stacklevel=3,
            )
        start = time.perf_counter()
        with nl.torch_threads(self.threads):
            self._train(X, Xw, Uw)
        self.fit_train_time_ = time.perf_counter() - start
        self.windows_ = len(Xw)
        self._v = None

    def _train(self, X: np.ndarray, Xw: np.ndarray, Uw: np.ndarray) -> None:
        import torch

        from vimpc.models._torch_casadi import mlp
        from vimpc.models._training import train

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
        dyn = _TorchDynamics(
            self.layout, net, torch.from_numpy(P_np), torch.from_numpy(c_np), scale, log_mass
        )
        Xt, Ut = torch.from_numpy(Xw), torch.from_numpy(Uw)
        loss_fn = self._rollout_loss(dyn, Xt, Ut, h)
        batch = self.batch if 0 < self.batch < len(Xw) else None
        params = {**dict(net.named_parameters()), "log_mass": log_mass}
        record = train(
            lambda idx=None: loss_fn(slice(None) if idx is None else idx),
            params, optimizer="adamw", lr=self.lr, weight_decay=self.weight_decay,
            epochs=self.epochs, batch_size=batch, n_samples=len(Xw) if batch else None,
            schedule="cosine", time_budget_s=self.time_budget or None, seed=self.seed,
            progress=self.progress,
        )  # fmt: skip
        self.training_ = record
        self.epochs_per_second_ = record.epochs / max(record.wall_time_s, 1e-12)
        self.network_ = nl.fold(net, P_np, c_np, scale, self.activation)
        self.masses_ = np.exp(log_mass.detach().numpy()).copy()
        self._v = None

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
        lay, n = self.layout, self.layout.n
        x, second, u = ca.MX.sym("x", n), ca.MX.sym("w", n), ca.MX.sym("u", lay.system.nu)
        y = ca.vertcat(x, second)
        minv = ca.DM(1.0 / self.masses_[lay.groups])
        gV = ca.gradient(self._potential()(x), x)
        w = second if self.formulation == "lagrangian" else minv * second
        F = ca.mtimes(ca.DM(lay.B), u) - ca.mtimes(ca.DM(lay.D), w)
        k = lay.system.n_holonomic
        G = K = None
        if k:
            Gv, Kv = constraint_kinematics(lay.system)(x, w)
            G, K = ca.reshape(Gv, n, k).T, ca.reshape(Kv, n, k).T
        if self.formulation == "lagrangian":
            f = minv * (F - gV)
            if k:
                Mi = ca.diag(minv)
                S = ca.mtimes([G, Mi, G.T])
                lam = ca.solve(S, ca.mtimes(G, f) + ca.mtimes(K, w))
                f = f - ca.mtimes([Mi, G.T, lam])
            out = ca.vertcat(w, f)
        else:
            rhs = ca.vertcat(w, F - gV)
            if k:
                D = ca.vertcat(
                    ca.horzcat(G, ca.MX.zeros(k, n)), ca.horzcat(K, ca.mtimes(G, ca.diag(minv)))
                )
                JDt = ca.horzcat(D[:, n:], -D[:, :n]).T
                rhs = rhs - ca.mtimes(JDt, ca.solve(ca.mtimes(D, JDt), ca.mtimes(D, rhs)))
            out = rhs
        return ca.Function("vector_field", [y, u], [out], ["y", "u"], ["y_dot"])

    def _torch_dynamics(self) -> _TorchDynamics:
        """The fitted model's torch dynamics (for checks: the folded network, unit scale)."""
        import torch

        net = self.network_.torch_module()
        eye = torch.eye(self.layout.n, dtype=torch.float64)
        zero = torch.zeros(self.layout.n, dtype=torch.float64)
        log_mass = torch.from_numpy(np.log(self.masses_))
        return _TorchDynamics(self.layout, net, eye, zero, 1.0, log_mass)

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
        lay = self.layout
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
            "training_windows": self.windows_,
            "final_loss": self.training_.loss[-1],
            "epochs": self.training_.epochs,
            "stopped": self.training_.stopped,
            # data further off the constraints than this are refused
            "data_constraint_tol": DATA_CONSTRAINT_TOL,
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
