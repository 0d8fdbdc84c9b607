"""Nonholonomic dynamics with a learned connection, in Hamel's moving frame (family
``"hamel"``; Wang & Bloch, "Learning nonholonomic dynamics with constraint discovery",
L4DC 2025, Secs. 3-5).

**Split.** The configuration is ``Q = Q/G x G`` with ``r = q[0]`` (the disk's rolling angle
``theta``) and ``g = q[1:4] = (phi, x, y)`` in ``SE(2)``, as the paper's Sec. 5.1. The
group's vector fields are the paper's eqs. 20-22, ``u2 = d_phi - y d_x + x d_y``,
``u3 = d_x``, ``u4 = d_y``. The Lagrangian is known (the system's, as in the paper:
only the constraint is learned); this family takes systems whose Lagrangian does not depend
on ``q`` (constant mass matrix, constant potential: the frame alone moves ``l``) and whose
two nonholonomic constraints leave the heading free (:func:`check_split`). The
system's own constraint is used for one thing only: to warn of data that violate it.

**Learned connection.** ``A~(q)``, ``g``-valued (3 components), a multilayer perceptron on
all of ``q`` (reference: 3 hidden layers of 20 with sine activations and an ELU with
``alpha = 0.5`` before the output layer; weights ``N(0, init_std^2)``, biases 0; no input
scaling). With ``heading = "periodic"`` (the default) the network sees the heading through
its cosine and sine, ``(theta, cos phi, sin phi, x, y)``: ``phi`` is the angle of ``SE(2)``'s
rotation, so the connection is ``2 pi``-periodic in it and defined at every heading a motion
turns to; the authors' network sees ``phi`` itself (``heading = "raw"``), and a heading
outside the data's range is then an extrapolation (a disk turning at 1 rad/s leaves
``[-pi, pi]`` within seconds). The horizontal field is eq. 23,
``u~1 = d_theta - A~^a u_{1+a}``.

**The distribution and the frame.** The learned constraint distribution is
``D~ = span{u~1, d_phi}`` (on the disk the heading turns freely; the true ``D`` is the
paper's eq. 65). Hamel's equations for a nonholonomic system need a frame whose first
members span ``D``, so the frame is ``(u~1, d_phi, u3, u4)`` with
``d_phi = u2 + y u3 - x u4``; the quasi-velocities are ``w = (theta', phi' + A~^1 theta')``
on ``D~`` and zero off it. Because ``d_phi`` lies in ``D~``, only the ``(x, y)`` part of
``u~1``, ``(e_x, e_y) = (A~^1 y - A~^2, -A~^1 x - A~^3)``, shapes ``D~``: three components
give two functions, and no motion tells connections with the same ``(e_x, e_y)`` apart.
The identified part is the connection in the gauge ``A^1 = 0``,
``(0, A~^2 - A~^1 y, A~^3 + A~^1 x)`` (:meth:`HamelModel.identified_connection`), which the
true ``(0, -R cos phi, -R sin phi)`` is compared with. The implied constraint matrix ``a~(q)`` (2 x 4) is the reduced row
echelon form of eq. 6: rows ``(-e_x, 0, 1, 0)`` and ``(-e_y, 0, 0, 1)`` with
``(e_x, e_y)`` the ``(x, y)`` part of ``u~1``.

**Hamel's equations** (eq. 14 restricted to ``D~``; Bloch, Marsden & Zenkov 2009): the
momenta ``p_i = dl/dw^i = u_i^T M q'`` of the reduced Lagrangian ``l(q, w) = L(q, U w)``;
for ``a, b`` in ``D~``'s two members, ``d/dt p_a = sum_b sum_m c^m_{ba} p_m w^b
+ u_a[l] + u_a^T F``, where ``u_a[l]`` is the derivative of ``l`` along ``u_a`` at fixed
``w`` (not zero: ``l`` depends on ``q`` through the frame even where ``L`` does not),
``sum_b w^b (J_b u_a)^T M q'`` with ``J_b`` the Jacobian of ``u_b``; the structure
coefficients ``[u_b, u_a] = c^m_{ba} u_m`` and the Jacobians come from the Lie brackets of the frame (eq. 39) by automatic differentiation (torch's autograd in
training, CasADi's ``jacobian`` in the export), and ``F = B u - D q'`` the generalized force
of the inputs (torques on ``theta`` and ``phi``) and of the system's known friction.
``w = K^-1 p_D`` with the locked inertia ``K = S^T M S``, ``S = (u~1, d_phi)``, and the
kinematics ``q' = S w``. The ODE's state is ``(q, p_D)``.

**Training** (Sec. 4.4, eq. 18): every window of ``window`` consecutive steps of every
trajectory (the authors: 100 random windows of 20 steps of one trajectory); a rollout of
the learned equations by RK4 (``substeps`` per ``dt``, the input held over each step) from
the window's first observed state, its momenta ``p_a = u~_a^T M q'``; the loss is the mean
squared error of the predicted ``(q, q')`` over the window (the paper: a sum over the
momenta and configuration; ``q'`` is the frame-free measurement). Adam (the authors:
RMSprop, which :mod:`vimpc.models._training` does not offer), minibatches of ``batch``
windows, a cosine schedule. The inputs enter as generalized forces, so excited inputs are
in the data (:data:`vimpc.errors.FitWarning` without).

**Export.** The package's midpoint :class:`~vimpc.integrators.VariationalIntegrator` in the
position-momentum form (discrete Lagrange-d'Alembert), with the learned ``a~(q)`` in place
of the system's constraint: a :class:`LearnedConstraintSystem` hands the integrator
``a~(q)`` (the network, written by the torch -> CasADi writer) and the system's Lagrangian,
input map and friction. ``step`` solves the discrete equations by Newton, ``residual`` is
their implicit form, ``velocity_constraint`` is ``a~(q) v`` and vanishes on every predicted
state to the Newton tolerance, ``energy`` is the system's. The continuous Hamel ODE is
:meth:`HamelModel.vector_field` (an RK4 discretisation of it is a baseline, not exported).

**Data checks.** Trajectories whose first states miss the system's constraint by more than
:data:`CONSISTENT_TOL` (``|A(q) v|``) are warned of with how far (FitWarning: the paper's
formulation preserves the constraint it starts with, so inconsistent starts teach a wrong
one); fewer than :data:`MIN_WINDOWS` windows are refused.
"""

from __future__ import annotations

import warnings
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator, _newton
from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import MechanicalSystem, NaturalSystem
from vimpc.models._integrated import integrator_model
from vimpc.models._neural import NeuralFamily, rollout_windows

#: Fewer training windows than this are refused.
MIN_WINDOWS = 10
#: First states of trajectories whose |A(q) v| (the system's constraint) exceeds this are
#: warned of (FitWarning).
CONSISTENT_TOL = 1e-6
#: ELU's alpha before the output layer (the authors' network).
ELU_ALPHA = 0.5
#: A system's matrices are taken as constant when they agree to this at random
#: configurations.
CONSTANT_TOL = 1e-12
#: Configuration indices of the split: r = theta, g = (phi, x, y).
R_INDEX, PHI, X, Y = 0, 1, 2, 3
HEADINGS = ("periodic", "raw")

SETTINGS: dict[str, Setting] = {
    "hidden": Setting(list, [20, 20, 20], "widths of the connection network's hidden layers "
                      "(authors: 3 x 20)", items=int, rule=POSITIVE),
    "activation": Setting(str, "sine", "activation of the hidden layers (an ELU with alpha "
                          "elu_alpha follows the last, as the authors')",
                          choices=("sine", "tanh", "softplus", "elu")),
    "elu_alpha": Setting(float, ELU_ALPHA, "alpha of the ELU before the output layer (the "
                         "authors' 0.5 has a kink, its slope jumps from 0.5 to 1 at 0; 1: "
                         "continuously differentiable, for Newton-type MPC solvers)",
                         rule=POSITIVE),
    "heading": Setting(str, "periodic", "how the connection network sees the heading phi: "
                       "`periodic` (its cosine and sine: the connection is 2 pi-periodic in "
                       "phi) or `raw` (phi itself, as the authors)", choices=HEADINGS),
    "init_std": Setting(float, 0.1, "standard deviation of the initial weights (biases 0)",
                        rule=POSITIVE),
    "window": Setting(int, 20, "steps per training rollout (authors: 20)", rule=POSITIVE),
    "substeps": Setting(int, 1, "RK4 steps per dt in the training rollouts", rule=POSITIVE),
    "epochs": Setting(int, 2000, "training epochs (authors: 2001 iterations)", rule=POSITIVE),
    "lr": Setting(float, 1e-3, "initial learning rate of Adam (cosine schedule to 0)",
                  rule=POSITIVE),
    "batch": Setting(int, 100, "windows per minibatch (0 or more than there are: full "
                     "batch; authors: 100)", rule=NONNEGATIVE),
    "time_budget": Setting(float, 0.0, "wall-clock training budget [s] (0: none)",
                           rule=NONNEGATIVE),
    "threads": Setting(int, 1, "torch threads while training (restored after)", rule=POSITIVE),
    "seed": Setting(int, 0, "seed of the initial weights and minibatches", rule=SEED),
    "progress": Setting(bool, False, "show a progress bar while training"),
}  # fmt: skip


# -- the split ----------------------------------------------------------------------------------


def _sample_q(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3.0, 3.0, size=(n, 4))


def _constant_matrix(system: MechanicalSystem, name: str, what: str) -> np.ndarray:
    fn = system.function(name)
    values = [np.asarray(fn(q), dtype=np.float64) for q in _sample_q(4, 3)]
    worst = max(float(np.max(np.abs(v - values[0]), initial=0.0)) for v in values[1:])
    if worst > CONSTANT_TOL:
        raise InputError(
            f"hamel needs a constant {what} (a Lagrangian invariant under the split's "
            f"translations, q-independent forces); {system.name}'s changes by {worst:.3g} "
            "between configurations: use the rolling disk or a system of its form"
        )
    return values[0]


def check_split(system: MechanicalSystem) -> dict[str, np.ndarray]:
    """The constant matrices of a system on ``R x SE(2)`` with a free heading: mass matrix
    ``M``, input map ``B`` and friction ``D = W^T C W``.

    Raises:
        InputError: not 4 coordinates; holonomic constraints; not 2 nonholonomic ones;
            a constraint that involves the heading or leaves ``(x', y')`` undetermined;
            a configuration-dependent mass matrix, potential, input map or friction map.
    """
    if not isinstance(system, MechanicalSystem):
        raise InputError(f"system must be a MechanicalSystem, got {type(system).__name__}")
    shape = (system.nq, system.n_holonomic, system.n_nonholonomic)
    if shape != (4, 0, 2):
        raise InputError(
            "hamel learns the connection of a system on R x SE(2), q = (r, phi, x, y), with "
            "2 nonholonomic constraints and no holonomic ones (the rolling disk); "
            f"{system.name} has nq = {system.nq}, {system.n_holonomic} holonomic and "
            f"{system.n_nonholonomic} nonholonomic constraints"
        )
    if not isinstance(system, NaturalSystem):
        raise InputError(
            f"hamel needs a Lagrangian 1/2 v^T M v - V(q) (a NaturalSystem); {system.name} "
            "is not one"
        )
    M = _constant_matrix(system, "M", "mass matrix")
    q = ca.SX.sym("q", 4)
    grad_v = ca.Function("grad_V", [q], [ca.gradient(system.potential(q) + 0.0 * q[0], q)])
    worst = max(float(np.max(np.abs(np.asarray(grad_v(qq))))) for qq in _sample_q(4, 4))
    if worst > CONSTANT_TOL:
        raise InputError(
            "hamel needs a constant potential (Hamel's equations are written for a kinetic "
            f"Lagrangian); "
            f"{system.name}'s gradient reaches {worst:.3g}: use the rolling disk or a system "
            "of its form"
        )
    B = _constant_matrix(system, "B", "input map")
    W = _constant_matrix(system, "W", "friction rate map")
    A = system.function("A")
    for qq in _sample_q(4, 5):
        a = np.asarray(A(qq), dtype=np.float64)
        block = a[:, [X, Y]]
        if np.max(np.abs(a[:, PHI])) > CONSTANT_TOL or abs(np.linalg.det(block)) < 1e-9:
            raise InputError(
                f"hamel's split needs constraints that fix (x', y') from the rolling rate and "
                f"leave the heading phi free; {system.name}'s constraint matrix at q = "
                f"{qq.round(3).tolist()} is {a.round(6).tolist()}"
            )
    return {"M": M, "B": B, "D": W.T @ np.diag(system.friction) @ W}


def true_effective(system: MechanicalSystem, Q: np.ndarray) -> np.ndarray:
    """``(n, 2)``: the ``(x, y)`` part of the true horizontal field ``u1`` at each row of
    ``Q`` (from the system's constraint ``A(q) v = 0``; ``(R cos phi, R sin phi)`` on the
    disk)."""
    A = system.function("A").map(len(Q))
    a = np.asarray(A(np.asarray(Q, dtype=np.float64).T), dtype=np.float64)  # (2, 4 n)
    a = a.reshape(2, len(Q), 4).transpose(1, 0, 2)
    return -np.linalg.solve(a[:, :, [X, Y]], a[:, :, [R_INDEX]])[:, :, 0]


# -- the frame (any CasADi type) ----------------------------------------------------------------


def horizontal_field(q, A):
    """Eq. 23: ``u~1 = d_theta - A^1 u2 - A^2 u3 - A^3 u4`` as a column of 4."""
    x, y = q[X], q[Y]
    return ca.vertcat(1.0, -A[0], A[0] * y - A[1], -A[0] * x - A[2])


def constraint_rows(u1):
    """The reduced row echelon constraint matrix ``(2, 4)`` annihilating ``u1`` and
    ``d_phi``."""
    return ca.vertcat(
        ca.horzcat(-u1[X], 0.0, 1.0, 0.0),
        ca.horzcat(-u1[Y], 0.0, 0.0, 1.0),
    )


class LearnedConstraintSystem(NaturalSystem):
    """A system with its nonholonomic constraint replaced by a learned ``a~(q)``.

    Everything else (Lagrangian, input map, friction, names) is the base system's; the
    package's integrators see a :class:`~vimpc.mechanics.system.MechanicalSystem`.

    Args:
        base: the system whose mechanics are kept.
        constraint: ``q -> a~(q)`` ``(n_nonholonomic, nv)``, a CasADi function.
        friction: the base system's friction coefficients replaced (None: kept).
    """

    defaults: dict[str, float] = {}

    def __init__(self, base: NaturalSystem, constraint: ca.Function, *, friction=None) -> None:
        if not isinstance(base, NaturalSystem):
            raise InputError(f"base must be a NaturalSystem, got {type(base).__name__}")
        if not isinstance(constraint, ca.Function):
            raise InputError(
                f"constraint must be a CasADi Function q -> a(q), got {type(constraint).__name__}"
            )
        shape = constraint.size_out(0)
        if constraint.n_in() != 1 or constraint.size1_in(0) != base.nq or shape[1] != base.nv:
            raise InputError(
                f"constraint must map q ({base.nq}) to a matrix with {base.nv} columns, got "
                f"inputs {[constraint.size_in(i) for i in range(constraint.n_in())]} and "
                f"output {shape}"
            )
        self._base = base if friction is None else base.with_params(friction=friction)
        self._constraint = constraint
        super().__init__(friction=self._base.friction)

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"base": self._base, "constraint": self._constraint}

    @property
    def params(self):
        return self._base.params

    @property
    def name(self) -> str:
        return self._base.name

    @property
    def coordinate_names(self):
        return self._base.coordinate_names

    @property
    def coordinate_units(self):
        return self._base.coordinate_units

    @property
    def input_names(self):
        return self._base.input_names

    @property
    def input_units(self):
        return self._base.input_units

    @property
    def n_nonholonomic(self) -> int:
        return self._constraint.size1_out(0)

    @property
    def n_rates(self) -> int:
        return self._base.n_rates

    def mass_matrix(self, q):
        return self._base.mass_matrix(q)

    def potential(self, q):
        return self._base.potential(q)

    def input_map(self, q):
        return self._base.input_map(q)

    def rate_map(self, q):
        return self._base.rate_map(q)

    def nonholonomic(self, q):
        if ops.symbolic(q):
            return self._constraint(q)
        return np.asarray(self._constraint(np.asarray(q, dtype=np.float64)), dtype=np.float64)

    def sketch(self, q):
        return self._base.sketch(q)

    def marker(self, q):
        return self._base.marker(q)


# -- torch (training and checks) -----------------------------------------------------------------


def _network(
    sizes: list[int],
    activation: str,
    std: float,
    seed: int,
    alpha: float = ELU_ALPHA,
    heading: str = "raw",
):
    """``Linear, act, ..., Linear, ELU(alpha), Linear`` (the authors' layout, alpha 0.5),
    float64, weights ``N(0, std^2)``, biases 0; with ``heading = "periodic"`` behind a
    :class:`~vimpc.models._torch_casadi.PeriodicInput` of the heading."""
    import torch
    from torch import nn

    from vimpc.models._torch_casadi import PeriodicInput, Sine

    acts = {"sine": Sine, "tanh": nn.Tanh, "softplus": nn.Softplus, "elu": nn.ELU}
    gen = torch.Generator().manual_seed(seed)
    layers: list = []
    n_hidden = len(sizes) - 2
    if heading == "periodic":
        layers.append(PeriodicInput(sizes[0], [PHI]))
        sizes = [sizes[0] + 1, *sizes[1:]]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        lin = nn.Linear(a, b, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.normal_(0.0, std, generator=gen)
            lin.bias.zero_()
        layers.append(lin)
        if i < n_hidden:
            layers.append(nn.ELU(alpha=alpha) if i == n_hidden - 1 else acts[activation]())
    return nn.Sequential(*layers)


class _TorchHamel:
    """The learned equations in torch, batched: ``field(q, p_D, u) -> (q', p_D')``."""

    def __init__(self, net, M: np.ndarray, B: np.ndarray, D: np.ndarray) -> None:
        import torch

        self.net = net
        self.M, self.B, self.D = (
            torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (M, B, D)
        )

    def horizontal(self, Q):
        """``u~1`` ``(b, 4)`` and the connection ``(b, 3)``."""
        import torch

        A = self.net(Q)
        x, y = Q[:, X], Q[:, Y]
        u1 = torch.stack(
            [torch.ones_like(x), -A[:, 0], A[:, 0] * y - A[:, 1], -A[:, 0] * x - A[:, 2]], 1
        )
        return u1, A

    def field(self, Q, P, U):
        import torch

        if not Q.requires_grad:
            Q = Q.detach().requires_grad_(True)
        b = Q.shape[0]
        u1, _ = self.horizontal(Q)
        e = torch.eye(4, dtype=Q.dtype)
        # frame (u~1, d_phi, u3, u4) as columns; D~ = span of the first two
        frame = torch.stack([u1, e[PHI].expand(b, 4), e[X].expand(b, 4), e[Y].expand(b, 4)], 2)
        S = frame[:, :, :2]
        K = S.transpose(1, 2) @ self.M @ S
        w = torch.linalg.solve(K, P)
        qdot = torch.einsum("bij,bj->bi", S, w)
        # Lie brackets (eq. 39) by autograd: J1[b, j, k] = d u~1_j / d q_k
        rows = [torch.zeros_like(Q)]
        for j in range(1, 4):
            (g,) = torch.autograd.grad(u1[:, j].sum(), Q, create_graph=True)
            rows.append(g)
        J = [torch.stack(rows, 1), torch.zeros(b, 4, 4, dtype=Q.dtype)]  # d_phi is constant
        p_all = torch.einsum("bim,ij,bj->bm", frame, self.M, qdot)  # p_m = u_m^T M q'
        force = U @ self.B.T - qdot @ self.D.T
        dP = []
        Mq = qdot @ self.M.T
        for a in range(2):
            total = torch.einsum("bi,bi->b", S[:, :, a], force)
            for c in range(2):
                # [u_c, u_a] = J_a u_c - J_c u_a (eq. 39), in the frame: c^m_{ca}
                br = torch.einsum("bij,bj->bi", J[a], S[:, :, c]) - torch.einsum(
                    "bij,bj->bi", J[c], S[:, :, a]
                )
                coef = torch.linalg.solve(frame, br)
                # u_a[l] at fixed w: l(q, w) = L(S(q) w) moves with the frame
                moved = torch.einsum("bij,bj,bi->b", J[c], S[:, :, a], Mq)
                total = total + (torch.einsum("bm,bm->b", coef, p_all) + moved) * w[:, c]
            dP.append(total)
        return qdot, torch.stack(dP, 1)

    def momenta(self, Q, V):
        """``p_a = u~_a^T M q'`` ``(b, 2)`` of observed velocities."""
        import torch

        u1, _ = self.horizontal(Q)
        e = torch.zeros_like(u1)
        e[:, PHI] = 1.0
        S = torch.stack([u1, e], 2)
        return torch.einsum("bia,ij,bj->ba", S, self.M, V)

    def velocities(self, Q, P):
        import torch

        u1, _ = self.horizontal(Q)
        e = torch.zeros_like(u1)
        e[:, PHI] = 1.0
        S = torch.stack([u1, e], 2)
        w = torch.linalg.solve(S.transpose(1, 2) @ self.M @ S, P)
        return torch.einsum("bij,bj->bi", S, w)


# -- the family ------------------------------------------------------------------------------------


class HamelModel(NeuralFamily):
    """The rolling disk's connection learned in Hamel's frame, stepped by the nonholonomic VI.

    See the module docstring.

    Args:
        system: the environment's system, on ``R x SE(2)`` with a free heading (the
            rolling disk); its Lagrangian, input map and friction are used as known.
        dt: the model step [s].
        settings: see :attr:`settings`.

    Fitted attributes: ``weights_`` (the connection network's ``(W, b)`` per layer),
    ``connection_`` (the network as a CasADi function ``q -> A~``), ``forced_``,
    ``training_`` (a :class:`~vimpc.models._training.TrainingRecord`), ``windows_``,
    ``epochs_per_second_``, ``inconsistent_starts_`` (trajectories whose first state misses
    the system's constraint by more than :data:`CONSISTENT_TOL`).
    """

    name = "hamel"
    settings = SETTINGS

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        self._matrices = check_split(self.system)

    def _provides(self) -> set[str]:
        return {"residual", "energy", "velocity_constraint"}

    @property
    def sizes(self) -> list[int]:
        return [4, *self.hidden, 3]

    # -- data ----------------------------------------------------------------------------------
    def _check_starts(self, obs: np.ndarray) -> None:
        first = obs[:, 0]
        A = self.system.function("A").map(len(first))
        a = np.asarray(A(first[:, :4].T), dtype=np.float64).reshape(2, len(first), 4)
        res = np.abs(np.einsum("kbn,bn->bk", a, first[:, 4:])).max(1)
        bad = np.flatnonzero(res > CONSISTENT_TOL)
        self.inconsistent_starts_ = int(len(bad))
        if len(bad):
            i = int(bad[np.argmax(res[bad])])
            warnings.warn(
                f"hamel: {len(bad)} of {len(first)} trajectories start off the constraint of "
                f"{self.system.name} (|A(q) v| up to {res[i]:.3g} at trajectory {i}; "
                f"CONSISTENT_TOL = {CONSISTENT_TOL}): the learned equations keep the "
                "constraint they start with, so such windows teach a wrong one; start the "
                "data from consistent states (RollingDisk.consistent_velocity)",
                FitWarning,
                stacklevel=4,
            )

    # -- training ------------------------------------------------------------------------------
    def _fit(self, data: Dataset | None) -> None:
        obs = np.asarray(data.obs, dtype=np.float64)
        U = np.asarray(data.inputs, dtype=np.float64)
        self._check_starts(obs)
        Xw, Uw = rollout_windows("hamel", obs, U, self.window, "window",
                                 ("MIN_WINDOWS", MIN_WINDOWS))  # fmt: skip
        self._note_inputs(
            U,
            ": the learned constraint is fitted to free motion only, and the model's "
            "response to torques is not tested by the fit (collect data with known, excited "
            "inputs for control)",
        )
        self._timed(self._train, Xw, Uw)
        self.windows_ = len(Xw)

    def untrained_network(self):
        """The network before training (torch; its weights depend on ``seed`` only)."""
        return _network(self.sizes, self.activation, self.init_std, self.seed, self.elu_alpha,
                        self.heading)  # fmt: skip

    def _train(self, Xw: np.ndarray, Uw: np.ndarray) -> None:
        import torch

        from vimpc.models._torch_casadi import casadi_function

        net = self.untrained_network()
        dyn = _TorchHamel(net, **self._matrices)
        loss_fn = rollout_loss(dyn, torch.from_numpy(Xw), torch.from_numpy(Uw), self.dt,
                               self.substeps)  # fmt: skip
        self._keep(self._train_loop(loss_fn, net, len(Xw), optimizer="adam"))
        self.weights_ = [
            (m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
            for m in net
            if isinstance(m, torch.nn.Linear)
        ]
        self.connection_ = casadi_function(net, name="connection")

    def torch_network(self):
        """The fitted connection network, rebuilt in torch from ``weights_`` (for checks)."""
        from vimpc.models._torch_casadi import load_weights

        self._require_fitted("torch_network()")
        return load_weights(self.untrained_network(), self.weights_)

    def torch_dynamics(self, net=None) -> _TorchHamel:
        """The learned equations in torch (the fitted network unless ``net`` is given)."""
        return _TorchHamel(self.torch_network() if net is None else net, **self._matrices)

    # -- readouts ------------------------------------------------------------------------------
    def connection(self) -> ca.Function:
        """``A~: q -> (A^1, A^2, A^3)``, the learned connection (CasADi, MX)."""
        self._require_fitted("connection()")
        return self.connection_

    def _symbolic(self):
        q = ca.MX.sym("q", 4)
        A = self.connection_(q)
        return q, A, horizontal_field(q, A)

    def identified_connection(self) -> ca.Function:
        """``q -> (0, A^2 - A^1 y, A^3 + A^1 x)``: the learned connection in the gauge
        ``A^1 = 0``, the part motion determines (see the module docstring)."""
        self._require_fitted("identified_connection()")
        q, _, u1 = self._symbolic()
        out = ca.vertcat(0.0, -u1[X], -u1[Y])
        return ca.Function("identified_connection", [q], [out], ["q"], ["A"])

    def distribution(self) -> ca.Function:
        """``q -> S (4, 2)``: the columns ``u~1`` and ``d_phi`` span the learned ``D~``."""
        self._require_fitted("distribution()")
        q, _, u1 = self._symbolic()
        S = ca.horzcat(u1, ca.DM([0.0, 1.0, 0.0, 0.0]))
        return ca.Function("distribution", [q], [S], ["q"], ["S"])

    def constraint_matrix(self) -> ca.Function:
        """``q -> a~(q) (2, 4)``: the learned constraint ``a~(q) v = 0`` in reduced row
        echelon form (eq. 6)."""
        self._require_fitted("constraint_matrix()")
        return self._constraint_matrix()

    def _constraint_matrix(self) -> ca.Function:
        q, _, u1 = self._symbolic()
        return ca.Function("constraint_matrix", [q], [constraint_rows(u1)], ["q"], ["a"])

    def constraint_error(self, Q: Any) -> dict[str, float]:
        """Distances of the learned constraint to the system's at configurations ``Q``
        ``(n, 4)``: ``connection_rms`` (RMS over ``Q`` of the Euclidean error of the
        identified connection, equal to that of the constraint matrices), ``raw_rms`` (of
        the network's ``A~`` against the true ``(0, -e_x, -e_y)``, including the
        split into ``A^1`` and the rest that motion does not fix), ``max`` (largest error of
        the identified connection)."""
        self._require_fitted("constraint_error()")
        Q = np.asarray(Q, dtype=np.float64)
        if Q.ndim != 2 or Q.shape[1] != 4 or not np.all(np.isfinite(Q)):
            raise InputError(f"Q must be finite configurations of shape (n, 4), got {Q.shape}")
        e = true_effective(self.system, Q)
        true = np.hstack([np.zeros((len(Q), 1)), -e])
        ident = np.asarray(self.identified_connection().map(len(Q))(Q.T)).T
        raw = np.asarray(self.connection_.map(len(Q))(Q.T)).T
        err = np.linalg.norm(ident - true, axis=1)
        return {
            "connection_rms": float(np.sqrt(np.mean(err**2))),
            "raw_rms": float(np.sqrt(np.mean(np.sum((raw - true) ** 2, 1)))),
            "max": float(err.max()),
        }

    def vector_field(self) -> ca.Function:
        """The learned Hamel ODE ``(q, p_D, u) -> (q', p_D')`` in CasADi (the training's
        equations; structure coefficients by CasADi's ``jacobian``)."""
        self._require_fitted("vector_field()")
        mats = self._matrices
        M, B, D = (ca.DM(mats[k]) for k in ("M", "B", "D"))
        q, _, u1 = self._symbolic()
        P, u = ca.MX.sym("p", 2), ca.MX.sym("u", self.system.nu)
        e = ca.DM.eye(4)
        frame = ca.horzcat(u1, e[:, PHI], e[:, X], e[:, Y])
        S = frame[:, :2]
        w = _newton.linear_solve(ca.mtimes([S.T, M, S]), P)
        qdot = ca.mtimes(S, w)
        J = [ca.jacobian(u1, q), ca.MX.zeros(4, 4)]
        p_all = ca.mtimes(frame.T, ca.mtimes(M, qdot))
        force = ca.mtimes(B, u) - ca.mtimes(D, qdot)
        dP = []
        Mq = ca.mtimes(M, qdot)
        for a in range(2):
            total = ca.dot(S[:, a], force)
            for c in range(2):
                br = ca.mtimes(J[a], S[:, c]) - ca.mtimes(J[c], S[:, a])
                moved = ca.dot(ca.mtimes(J[c], S[:, a]), Mq)
                total = total + (ca.dot(_newton.linear_solve(frame, br), p_all) + moved) * w[c]
            dP.append(total)
        return ca.Function("vector_field", [q, P, u], [qdot, ca.vertcat(*dP)],
                           ["q", "p", "u"], ["q_dot", "p_dot"])  # fmt: skip

    def learned_system(self) -> LearnedConstraintSystem:
        """The system with the learned constraint in place of its own (what the exported
        integrator steps)."""
        self._require_fitted("learned_system()")
        return self._learned_system()

    def _learned_system(self) -> LearnedConstraintSystem:
        return LearnedConstraintSystem(self.system, self._constraint_matrix())

    # -- export --------------------------------------------------------------------------------
    def _build(self) -> DiscreteModel:
        integrator = VariationalIntegrator(self._learned_system(), "midpoint", "position_momentum")
        return integrator_model(integrator, self.dt, info=self._model_info())

    def _model_info(self) -> dict[str, Any]:
        return {
            **self.info(),
            "split": "R x SE(2): r = q[0], g = (q[1], q[2], q[3])",
            "forced": self.forced_,
            **self._rollout_info(),
            # trajectories whose first state missed the system's constraint by more than
            # consistent_tol (warned of)
            "inconsistent_starts": self.inconsistent_starts_,
            "consistent_tol": CONSISTENT_TOL,
        }


def rollout_loss(dyn: _TorchHamel, Xt, Ut, h: float, substeps: int):
    """The mean squared error of RK4 rollouts of the Hamel ODE from each window's first
    observed state, over the window's predicted ``(q, q')``."""
    import torch

    steps = Ut.shape[1]
    k = h / substeps

    def f(y, u):
        qd, pd = dyn.field(y[:, :4], y[:, 4:], u)
        return torch.cat([qd, pd], 1)

    def loss(idx):
        x, u = Xt[idx], Ut[idx]
        y = torch.cat([x[:, 0, :4], dyn.momenta(x[:, 0, :4], x[:, 0, 4:])], 1)
        preds = []
        for j in range(steps):
            for _ in range(substeps):
                k1 = f(y, u[:, j])
                k2 = f(y + 0.5 * k * k1, u[:, j])
                k3 = f(y + 0.5 * k * k2, u[:, j])
                k4 = f(y + k * k3, u[:, j])
                y = y + k / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            preds.append(torch.cat([y[:, :4], dyn.velocities(y[:, :4], y[:, 4:])], 1))
        return torch.mean((torch.stack(preds, 1) - x[:, 1:]) ** 2)

    return loss
