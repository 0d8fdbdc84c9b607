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
checked exact (:data:`vimpc.models._maximal.AFFINE_TOL`); a mechanism whose joint coordinates are no affine
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
initial weights are torch's uniform scheme (:func:`vimpc.models._torch_casadi.mlp`) by
default; ``init = "orthogonal"`` draws orthogonal weight matrices, the authors' scheme.

**Export** (``export = "mx"``, the default). The constrained midpoint step of the learned
``L = 1/2 x'^T M x' - V(x)`` in the position-momentum form, written on MX
(:func:`vimpc.models._maximal.constrained_midpoint`): the equations and the multipliers' projection of the
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
(``tests/models/test_clnn.py``).

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
0.341 against 1/3 kg m^2, ``tests/models/test_clnn.py``).

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
from dataclasses import replace
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, SUBSTEPS, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator, _newton
from vimpc.models import _network_lagrangian as nl
from vimpc.models._integrated import integrator_model
from vimpc.models._maximal import (
    PROJECTION_ITERATIONS,
    RANK_RTOL,
    CartesianLayout,
    ConstraintRows,
    cartesian_layout,
    constrained_midpoint,
    constraint_kinematics,
    constraint_names,
    independent_rows,
    projection,
    torch_constraints,
)
from vimpc.models._neural import NeuralFamily, rollout_windows

#: Fewer training windows (chunks of ``chunk + 1`` snapshots) than this are refused.
MIN_CHUNKS = 10
#: Fewer scalar targets (windows x chunk x state size) than this fraction of the network's
#: parameters are warned of (FitWarning); the same fraction as the other network families.
MIN_TARGETS_PER_PARAMETER = nl.MIN_EQUATIONS_PER_PARAMETER
#: Data whose positions miss the holonomic constraints (|Phi(x)|, in the constraint's
#: units) or whose velocities miss their derivative (|G(x) x'|) by more are refused.
DATA_CONSTRAINT_TOL = 1e-6
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
    "init": Setting(
        str, "uniform", "the network's initial weights: `uniform` (torch's default, "
        "+-1/sqrt(fan_in)) or `orthogonal` (each weight matrix orthogonal, as the authors)",
        choices=nl.INITS,
    ),
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
        self.constraints = torch_constraints(layout.system, rows) if self.k else None

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
        proj = projection(self.layout.system, self.rows_.kept, np.ones(n)).map(
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
        net = mlp(self.sizes, self.activation, seed=self.seed, init=self.init)
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
                rhs = rhs - ca.mtimes(
                    JDt, _newton.linear_solve(ca.mtimes(D, JDt), ca.mtimes(D, rhs))
                )
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
        proj = projection(s, self.rows_.kept, m).map(len(X))
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
            return constrained_midpoint(
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
