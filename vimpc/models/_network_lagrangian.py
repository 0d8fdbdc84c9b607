"""Shared maths of the neural Lagrangian families (:mod:`~vimpc.models.families.dlnn`,
:mod:`~vimpc.models.families.lnn`): the settings they share (their family base,
:class:`~vimpc.models._neural.NetworkFamily`, declares them), the network kept as numpy
weights after training, input derivatives of a batch in torch, the checks made
before training, and the exported model: the midpoint step written on MX with the
network's gradient and Hessian in closed form (:func:`network_pass`, :func:`midpoint_model`).

A network is trained on normalised inputs ``z = P x + c`` with its output multiplied by
a fixed ``scale``; both maps are folded into the first and last Linear layers when the
training ends (:func:`fold`), so the stored network is a plain MLP on the physical
inputs ``x`` (``(q0, q1)`` for a discrete Lagrangian, ``(q, v)`` for a continuous one).
Training needs torch; everything here that does not train imports it locally, so
``import vimpc.models.families.dlnn`` loads no torch.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, Rule, Setting
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError

#: Fewer triples than this cannot train a network and keep any for the checks after it.
MIN_TRIPLES = 10
#: Fewer scalar equations (triples x nq) than this fraction of the trainable parameters
#: is warned of (FitWarning): the fit then leans on the network's implicit bias. The
#: paper's cart-pendulum (200 triples x 2 equations, 3x128 network: 33,793 parameters)
#: has 1.2 %; below 1 % the equations constrain too little of the network.
MIN_EQUATIONS_PER_PARAMETER = 0.01
#: The degeneracy check after training: a pair where |det(-D1 D2 L_d)|^(1/n) (or
#: |det d2L/dv2|^(1/n)) is below this fraction of its median on the data is degenerate.
DEGENERATE_FRACTION = 1e-6

ACTIVATIONS = ("softplus", "tanh", "elu")
#: How a network's initial weights are drawn (:func:`vimpc.models._torch_casadi.mlp`).
INITS = ("uniform", "orthogonal")


#: Settings of the network and of its training, declared once for both families.
NETWORK_SETTINGS: dict[str, Setting] = {
    "hidden": Setting(
        list, [128, 128, 128], "widths of the hidden layers (at least one)", items=int,
        rule=POSITIVE,
    ),
    "activation": Setting(str, "softplus", "activation of the hidden layers",
                          choices=ACTIVATIONS),
    "epochs": Setting(int, 3000, "training epochs (warm-up included)", rule=POSITIVE),
    "lr": Setting(float, 3e-3, "initial learning rate (cosine schedule to 0)", rule=POSITIVE),
    "optimizer": Setting(str, "adam", "optimizer", choices=("adam", "adamw")),
    "weight_decay": Setting(float, 0.0, "the optimizer's weight decay", rule=NONNEGATIVE),
    "batch": Setting(int, 0, "minibatch size in samples (0: full batch)", rule=NONNEGATIVE),
    "validation": Setting(
        float, 0.0,
        "fraction of the samples held out for early stopping (0: none)",
        rule=Rule(lambda v: 0.0 <= v < 0.5, phrase="in [0, 0.5)"),
    ),
    "patience": Setting(
        int, 0, "epochs without validation improvement before stopping (0: never)",
        rule=NONNEGATIVE,
    ),
    "time_budget": Setting(
        float, 0.0, "wall-clock training budget [s] (0: none)", rule=NONNEGATIVE
    ),
    "degeneracy_weight": Setting(
        float, 1.0, "weight of the degeneracy term mean(1 - sigmoid(c det))", rule=NONNEGATIVE
    ),
    "degeneracy_scale": Setting(
        float, 0.01, "the constant c inside the degeneracy term's sigmoid (paper: 0.01)",
        rule=POSITIVE,
    ),
    "threads": Setting(
        int, 1,
        "torch threads while training (restored after); one by default: on a shared 2-core "
        "machine the two-thread batched kernels ran up to 100x slower",
        rule=POSITIVE,
    ),
    "seed": Setting(int, 0, "seed of the initial weights and the sampling", rule=SEED),
    "progress": Setting(bool, False, "show a progress bar while training"),
}  # fmt: skip


@dataclass(frozen=True)
class Network:
    """A trained MLP as numpy weights: ``layers[i] = (W_i, b_i)``, the activation between
    consecutive Linear layers. Holds no torch object."""

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    activation: str

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0][0].shape[1]] + [W.shape[0] for W, _ in self.layers]

    def torch_module(self):
        """The network as a float64 ``torch.nn.Sequential`` (imports torch)."""

        from vimpc.models._torch_casadi import load_weights, mlp

        return load_weights(mlp(self.sizes, self.activation, seed=0), self.layers)

    def casadi_function(self, name: str, weights_input: bool = False) -> ca.Function:
        """``x -> y`` as an MX CasADi function, written by
        :func:`vimpc.models._torch_casadi.casadi_function` (agrees with torch to round-off);
        with ``weights_input``, ``(x, w) -> y`` with the weights ``w`` an input
        (:meth:`weights` gives them)."""
        from vimpc.models._torch_casadi import casadi_function

        return casadi_function(
            self.torch_module(), name=name, kind="mx", weights_input=weights_input
        )

    def weights(self) -> np.ndarray:
        """The weights and biases in one vector, in the order of
        :func:`vimpc.models._torch_casadi.flat_weights`: each layer's weight matrix column by
        column, then its bias."""
        return np.concatenate([np.concatenate([W.ravel(order="F"), b]) for W, b in self.layers])

    def weight_names(self, prefix: str) -> tuple[str, ...]:
        """A name for each entry of :meth:`weights`: ``{prefix}W{layer}_{row}_{col}`` and
        ``{prefix}b{layer}_{row}``."""
        names: list[str] = []
        for k, (W, b) in enumerate(self.layers):
            rows, cols = W.shape
            names += [f"{prefix}W{k}_{i}_{j}" for j in range(cols) for i in range(rows)]
            names += [f"{prefix}b{k}_{i}" for i in range(len(b))]
        return tuple(names)

    def numpy(self, X: np.ndarray) -> np.ndarray:
        """The network on the rows of ``X`` in numpy (for checks and info)."""
        y = np.asarray(X, dtype=np.float64)
        for i, (W, b) in enumerate(self.layers):
            y = y @ W.T + b
            if i < len(self.layers) - 1:
                y = _ACT[self.activation](y)
        return y


def _softplus(x):
    return np.where(x > 20.0, x, np.logaddexp(0.0, x))


_ACT = {
    "softplus": _softplus,
    "tanh": np.tanh,
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
}


def fold(net, P: np.ndarray, c: np.ndarray, scale: float, activation: str) -> Network:
    """The network ``x -> scale * net(P x + c)`` as a plain MLP on ``x`` (numpy weights)."""
    import torch

    linear = [m for m in net if isinstance(m, torch.nn.Linear)]
    layers = [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()) for m in linear]
    W0, b0 = layers[0]
    layers[0] = (W0 @ P, W0 @ c + b0)
    Wl, bl = layers[-1]
    layers[-1] = (scale * Wl, scale * bl)
    return Network(tuple(layers), activation)


def input_derivatives(net, Z, P, scale: float, blocks: tuple[slice, slice] | None = None):
    """Per-row input gradient ``dy/dx`` of ``y = scale * net(P x + c)`` at the rows
    ``Z = P x + c`` and, with ``blocks = (rows, cols)``, the Hessian block
    ``d2y / dx[rows] dx[cols]`` ``(B, len(rows), len(cols))``; differentiable in the
    network's parameters (the rows are independent, so one backward pass per Hessian row
    gives every sample's row at once)."""
    import torch

    Z = Z.detach().requires_grad_(True)
    y = scale * net(Z).sum()
    gz = torch.autograd.grad(y, Z, create_graph=True)[0]
    g = gz @ P  # dy/dx = dy/dz P
    if blocks is None:
        return g, None
    rows, cols = blocks
    Pc = P[:, cols]
    out = []
    for i in range(rows.start, rows.stop):
        hz = torch.autograd.grad(g[:, i].sum(), Z, create_graph=True)[0]
        out.append(hz @ Pc)
    return g, torch.stack(out, dim=1)


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch threads, restoring the previous number after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def det(A):
    """Determinants of a batch ``(B, n, n)``: written out for n <= 3 (torch's batched
    ``linalg.det`` takes ~10x longer through the double backward pass of training),
    ``torch.linalg.det`` above."""
    import torch

    n = A.shape[-1]
    if n == 1:
        return A[:, 0, 0]
    if n == 2:
        return A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    if n == 3:
        a, b, c = A[:, 0, 0], A[:, 0, 1], A[:, 0, 2]
        d, e, f = A[:, 1, 0], A[:, 1, 1], A[:, 1, 2]
        g, h, i = A[:, 2, 0], A[:, 2, 1], A[:, 2, 2]
        return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    return torch.linalg.det(A)


def degeneracy(det, weight: float, c: float):
    """The degeneracy term ``weight * mean(1 - sigmoid(c det))``."""
    import torch

    return weight * torch.mean(1.0 - torch.sigmoid(c * det))


def check_equations(what: str, n_triples: int, n_equations: int, n_parameters: int) -> None:
    """Refuse fewer than :data:`MIN_TRIPLES` triples; warn where the equations are fewer
    than :data:`MIN_EQUATIONS_PER_PARAMETER` times the parameters."""
    if n_triples < MIN_TRIPLES:
        raise InputError(
            f"{what} needs at least {MIN_TRIPLES} triples (q_k-1, q_k, q_k+1) of training "
            f"data, got {n_triples}: collect longer or more trajectories"
        )
    if n_equations < MIN_EQUATIONS_PER_PARAMETER * n_parameters:
        warnings.warn(
            f"{what}: {n_equations} equations for a network of {n_parameters} parameters "
            f"(fewer than MIN_EQUATIONS_PER_PARAMETER = {MIN_EQUATIONS_PER_PARAMETER} per "
            "parameter): the fit rests on the network's implicit bias; use smaller hidden "
            "layers or more data",
            FitWarning,
            stacklevel=4,
        )


def n_parameters(sizes: list[int]) -> int:
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def check_regular(what: str, regularity: np.ndarray, where: str, per_trajectory: int) -> None:
    """Warn (FitWarning) of samples where ``regularity`` (sign(det) |det|^(1/n) of the
    matrix the step inverts) is below :data:`DEGENERATE_FRACTION` times its median (not
    positive definite included), naming the first such sample by trajectory and index
    (``per_trajectory`` samples per trajectory)."""
    r = np.asarray(regularity, dtype=np.float64).reshape(-1)
    median = float(np.median(np.abs(r)))
    bad = ~(r > DEGENERATE_FRACTION * median)
    if np.any(bad):
        k = int(np.nonzero(bad)[0][0])
        i, j = divmod(k, per_trajectory)
        warnings.warn(
            f"{what}: the learned Lagrangian is degenerate (or not positive definite) at "
            f"{int(bad.sum())} of {r.size} {where}s, first at trajectory {i}, {where} {j} "
            f"(det^(1/n) = "
            f"{r[k]:.3g}, median {median:.3g}, DEGENERATE_FRACTION = {DEGENERATE_FRACTION}): "
            "the exported step's Newton solve can fail there; raise degeneracy_weight",
            FitWarning,
            stacklevel=4,
        )


def signed_root(det: np.ndarray, n: int) -> np.ndarray:
    """``sign(det) |det|^(1/n)``."""
    return np.sign(det) * np.abs(det) ** (1.0 / n)


def mx_modified(L, nq: int, rule: str, h: float, order: int):
    """``L^[[order]]`` of the callable ``L(q, v)`` (the BEA formula of
    :mod:`vimpc.models._bea`) built on MX symbols, so a network stays a chain of dense
    products rather than being expanded into scalar operations here.

    The formula is :func:`vimpc.models._bea.correction`'s with one change: ``M^-1`` is
    applied by CasADi's ``symbolicqr`` linear solver, because the integrator evaluates the
    result on SX symbols and the default MX ``solve`` (``LinsolQr``) cannot be (``eval_sx
    not defined for LinsolQr``) once ``n > 1``."""
    from vimpc.models import _bea as bea

    bea.check(rule, order, h)
    if order == 0:
        return L
    q, v = ca.MX.sym("q", nq), ca.MX.sym("v", nq)
    base = L(q, v)
    p = ca.gradient(base, v)
    M = ca.jacobian(p, v)
    force = ca.gradient(base, q) - ca.mtimes(ca.jacobian(p, q), v)
    a = ca.solve(M, force, "symbolicqr")
    Lqq = ca.jacobian(ca.gradient(base, q), q)
    corr = h * h / 24.0 * (ca.dot(a, force) + bea.RULES[rule] * ca.mtimes([v.T, Lqq, v]))
    fn = ca.Function("L_mod", [q, v], [base + corr])
    return lambda q_, v_: fn(q_, v_)


# -- the exported model: closed-form network derivatives and an MX midpoint step ----------------


def _activation(name: str, z):
    """``(s(z), s'(z), s''(z))`` of a hidden layer's activation on a CasADi column, the value
    written as :mod:`vimpc.models._torch_casadi` writes torch's layer (defaults of each)."""
    if name == "softplus":  # torch: beta = 1, threshold = 20
        e = ca.exp(-ca.fabs(z))
        sig = ca.if_else(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        over = z > 20.0
        value = ca.if_else(over, z, ca.fmax(z, 0) + ca.log1p(e))
        return value, ca.if_else(over, 1.0, sig), ca.if_else(over, 0.0, sig * (1.0 - sig))
    if name == "tanh":
        t = ca.tanh(z)
        d = 1.0 - t * t
        return t, d, -2.0 * t * d
    if name == "elu":  # alpha = 1
        e = ca.exp(ca.fmin(z, 0))
        pos = z > 0
        return (
            ca.if_else(pos, z, ca.expm1(ca.fmin(z, 0))),
            ca.if_else(pos, 1.0, e),
            ca.if_else(pos, 0.0, e),
        )
    raise InputError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


@functools.cache
def _blas(columns: int) -> str:
    """CasADi's BLAS plugin for a dense product of a hidden-to-hidden weight with
    ``columns`` columns in the exported model: BLASFEO up to 3 columns, the OpenBLAS bundled
    with CasADi (``"classic"``) above, CasADi's own triple loop (``"reference"``) where this
    CasADi lacks the plugin. Measured for a 128 x 128 weight on a shared 2-core machine, per
    product with 1 / 3 / 5 columns: reference 21 / 60 / 97 us, classic 7.4 / 12 / 13 us,
    BLASFEO 6.5 / 9.8 / 64 us; a row times the weight (the backward pass): reference 13 us,
    classic 13 us, BLASFEO 6.0 us. The sums run in another order than the reference's, so
    results differ from it by round-off."""
    name = "blasfeo" if columns <= 3 else "classic"
    return name if ca.has_blas(name) else "reference"


def layer_weights(network: Network) -> dict[int, object]:
    """The weights of the hidden-to-hidden layers (those of the input and output layers are
    small) as one MX constant node each, for :func:`network_pass`'s ``weights``: passes that
    share them, inside one function, share one copy. CasADi copies a constant into its work
    vector at every evaluation of a function that holds it (~7 us for 128 x 128, about what
    a product with it costs)."""
    return {i: ca.MX(ca.DM(W)) for i, (W, _) in enumerate(network.layers[1:-1], start=1)}


def network_pass(
    network: Network,
    x,
    directions: np.ndarray | None = None,
    grad: bool = True,
    weights: dict[int, object] | None = None,
):
    """A scalar network ``y = f(x)`` on the MX column ``x`` with its derivatives in closed
    form: ``(y, dy/dx, D^T (d2y/dx2) D)`` (None for what is not asked; ``directions`` is the
    constant ``D``, e.g. the identity for the whole Hessian). ``weights`` (from
    :func:`layer_weights`) are the hidden-to-hidden weights as MX; by default one constant
    node each, shared by the forward and backward products.

    With ``z_i`` the pre-activations, ``T_i = (dz_i/dx) D`` (forward) and ``d_i = dy/da_i``
    (backward): ``dy/dx = W_1^T (s'(z_1) * d_1)`` and ``D^T (d2y/dx2) D = sum_i T_i^T
    diag(d_i * s''(z_i)) T_i``. Per hidden-to-hidden layer one dense product for the
    activation and the tangents together (``W_i [a, T]``) and one for the backward pass
    (``(s' d)^T W_i``), each by the BLAS plugin :func:`_blas` picks; ``T_1 = W_1 D`` is a
    constant. Automatic differentiation of the network's graph builds many more products
    (and, on SX, expands every weight into scalar operations)."""
    if network.sizes[-1] != 1:
        raise InputError(f"network_pass needs a scalar network, got sizes {network.sizes}")
    if weights is None:
        weights = layer_weights(network)
    k = 0 if directions is None else int(np.shape(directions)[1])
    a, tangent, saved = x, None, []
    for i, (W, b) in enumerate(network.layers[:-1]):
        if i == 0:
            Wi = ca.DM(W)
            z = ca.mtimes(Wi, a) + ca.DM(b)
            T = ca.DM(W @ np.asarray(directions, dtype=np.float64)) if k else None
        else:
            Wi = weights[i]
            Y = ca.mtimes(Wi, ca.horzcat(a, tangent) if k else a, _blas(1 + k))
            z, T = (Y[:, 0] + ca.DM(b), Y[:, 1:]) if k else (Y + ca.DM(b), None)
        a, s1, s2 = _activation(network.activation, z)
        if k:
            tangent = T * ca.repmat(s1, 1, k)
        saved.append((Wi, T, s1, s2))
    WL, bL = network.layers[-1]
    y = ca.mtimes(ca.DM(WL), a) + ca.DM(bL)
    if not grad and directions is None:
        return y, None, None
    d = ca.DM(WL.T)
    hess = None
    for i in reversed(range(len(saved))):
        Wi, T, s1, s2 = saved[i]
        if T is not None:
            term = ca.mtimes(T.T, T * ca.repmat(d * s2, 1, k))
            hess = term if hess is None else hess + term
        d = ca.mtimes((d * s1).T, Wi, _blas(1) if i else "reference").T  # W^T (s' d)
    return y, d, hess


def network_batch(network: Network, Y, directions: np.ndarray, weights=None):
    """A scalar network on the ``P`` columns of the MX matrix ``Y`` at once: ``(y (1, P),
    dy/dY (n_in, P), pairs (k (k + 1) / 2, P))``, ``pairs`` the upper triangle (row by row)
    of ``D^T (d2y/dY2) D`` at each column for the constant ``D`` (``n_in x k``).

    :func:`network_pass`'s closed form with the columns side by side: each hidden-to-hidden
    layer is one dense product for the activations and the ``k`` tangents of every column
    (``W_i [A, T_1, ..., T_k]``) and one for the backward pass, so a horizon's ``3 N`` network
    points cost about as many MX operations as one point (the operations, not the
    arithmetic, dominate on this network size)."""
    if network.sizes[-1] != 1:
        raise InputError(f"network_batch needs a scalar network, got sizes {network.sizes}")
    if weights is None:
        weights = layer_weights(network)
    D = np.asarray(directions, dtype=np.float64)
    k, P = D.shape[1], Y.size2()
    pairs = [(i, j) for i in range(k) for j in range(i, k)]
    ones = ca.DM.ones(1, P)
    a, tangents, saved = Y, None, []
    for i, (W, b) in enumerate(network.layers[:-1]):
        if i == 0:
            z = ca.mtimes(ca.DM(W), a) + ca.mtimes(ca.DM(b), ones)
            T = [ca.DM(W @ D[:, j]) for j in range(k)]  # constant columns
        else:
            Z = ca.mtimes(weights[i], ca.horzcat(a, *tangents), _blas(4))
            z = Z[:, :P] + ca.mtimes(ca.DM(b), ones)
            T = [Z[:, (j + 1) * P : (j + 2) * P] for j in range(k)]
        a, s1, s2 = _activation(network.activation, z)
        tangents = [s1 * (t if i else ca.mtimes(t, ones)) for t in T]
        saved.append((T, s1, s2))
    WL, bL = network.layers[-1]
    y = ca.mtimes(ca.DM(WL), a) + float(bL[0])
    d = ca.mtimes(ca.DM(WL.T), ones)
    rows = [None] * len(pairs)
    for i in reversed(range(len(saved))):
        T, s1, s2 = saved[i]
        E = d * s2
        if i == 0:  # constant tangents: every pair in one product
            C = ca.DM(np.array([np.asarray(T[a_]).ravel() * np.asarray(T[b_]).ravel()
                                for a_, b_ in pairs]))  # fmt: skip
            layer = ca.mtimes(C, E)
            layer = [layer[r, :] for r in range(len(pairs))]
        else:
            layer = [ca.sum1(T[a_] * T[b_] * E) for a_, b_ in pairs]
        rows = [term if r is None else r + term for r, term in zip(rows, layer, strict=True)]
        W = ca.DM(network.layers[0][0]) if i == 0 else weights[i]
        d = ca.mtimes(W.T, d * s1)  # dy/da_{i-1}, dy/dY at the first layer
    return y, d, ca.vertcat(*rows)


def residual_blocks(
    network: Network, A: np.ndarray, c: float, h: float, forces: ca.Function, N: int = 1
) -> ca.Function:
    """``(x (nx, N), u (nu, N), x_next (nx, N), p) -> (r (nx, N), J (nx, (2 nx + nu) N))``:
    the residual of :func:`midpoint_model` (order 0) at ``N`` stages and its Jacobian blocks
    ``[dr/dx, dr/du, dr/dx_next]`` side by side, stage by stage, in closed form
    (``forces``: ``(q0, q1, u) -> (f-, f+)``, the discrete forces).

    The ``3 N`` network points (the momentum at each state and the midpoint of each pair) go
    through the network together (:func:`network_batch`): the gradient gives the residuals,
    the Hessian contracted with the input map ``A`` their Jacobians, assembled by one
    constant product. With ``N = 1`` it is the model's ``residual_jacobian``; measured on the
    balance scenario's 2x64 network at load ~5 on 2 cores: 0.065 ms per stage for ``(r, J)``
    against 0.145 ms for CasADi's automatic Jacobian of the residual, and ``N = 20`` at once
    no faster than 20 single stages (the arithmetic, not the operation count, dominates)."""
    nu = forces.size1_in(2)
    n = A.shape[1] // 2
    nx = 2 * n
    X, U, Z, P = (ca.MX.sym("x", nx, N), ca.MX.sym("u", nu, N), ca.MX.sym("x_next", nx, N),
                  ca.MX.sym("p", 0, 1))  # fmt: skip
    q0, q1 = X[:n, :], Z[:n, :]
    points = ca.horzcat(X, ca.vertcat(0.5 * (q0 + q1), (q1 - q0) / h), Z)  # (q, v), 3N
    _, g, pairs = network_batch(network, ca.mtimes(ca.DM(A), points), A)
    gp = c * ca.mtimes(ca.DM(A.T), g)  # dL/d(q, v) at every point
    g1, g2, g3 = gp[:, :N], gp[:, N : 2 * N], gp[:, 2 * N :]
    fm, fp = forces.map(N)(q0, q1, U)
    r = ca.vertcat(g1[n:, :] + 0.5 * h * g2[:n, :] - g2[n:, :] + fm,
                   g3[n:, :] - 0.5 * h * g2[:n, :] - g2[n:, :] - fp)  # fmt: skip
    # the Jacobian blocks: linear in the Hessian pairs of the three points and the forces'
    # Jacobians, one constant matrix written by differentiating one stage symbolically
    m = nx * (nx + 1) // 2
    qa, qb, us = ca.SX.sym("q0", n), ca.SX.sym("q1", n), ca.SX.sym("u", nu)
    fa, fb = forces(qa, qb, us)
    force_jac = ca.Function("force_jac", [qa, qb, us], [ca.vec(ca.jacobian(ca.vertcat(fa, fb),
                            ca.vertcat(qa, qb, us)))])  # fmt: skip
    K = [ca.SX.sym(f"k{i}", m) for i in range(3)]
    fj = ca.SX.sym("fj", 2 * n * (2 * n + nu))

    def full(k):  # the symmetric 2n x 2n matrix c A^T H A from its upper triangle
        rows, it = [[None] * nx for _ in range(nx)], iter(range(m))
        for i in range(nx):
            for j in range(i, nx):
                rows[i][j] = rows[j][i] = c * k[next(it)]
        return ca.blockcat(rows)

    K1, K2, K3 = (full(k) for k in K)
    S = ca.DM(np.block([[0.5 * np.eye(n), 0.5 * np.eye(n)], [-np.eye(n) / h, np.eye(n) / h]]))
    dg2 = ca.mtimes(K2, S)  # d(dL/d(q, v) at the midpoint)/d(q0, q1)
    dD1 = 0.5 * h * dg2[:n, :] - dg2[n:, :]
    dD2 = 0.5 * h * dg2[:n, :] + dg2[n:, :]
    dF = ca.reshape(fj, 2 * n, 2 * n + nu)  # d(fm, fp)/d(q0, q1, u)
    zero = ca.SX.zeros(n, n)
    dr1 = ca.horzcat(K1[n:, :n] + dD1[:, :n] + dF[:n, :n], K1[n:, n:], dF[:n, 2 * n :],
                     dD1[:, n:] + dF[:n, n : 2 * n], zero)  # fmt: skip
    dr2 = ca.horzcat(-dD2[:, :n] - dF[n:, :n], zero, -dF[n:, 2 * n :],
                     K3[n:, :n] - dD2[:, n:] - dF[n:, n : 2 * n], K3[n:, n:])  # fmt: skip
    blocks = ca.vec(ca.vertcat(dr1, dr2))
    coeffs = ca.DM(ca.evalf(ca.jacobian(blocks, ca.vertcat(*K, fj))))
    stacked = ca.vertcat(pairs[:, :N], pairs[:, N : 2 * N], pairs[:, 2 * N :],
                         force_jac.map(N)(q0, q1, U))  # fmt: skip
    J = ca.reshape(ca.mtimes(coeffs, stacked), nx, (2 * nx + nu) * N)
    return ca.Function("residual_jacobian", [X, U, Z, P], [r, J],
                       ["x", "u", "x_next", "p"], ["r", "J"])  # fmt: skip


def midpoint_model(
    system, h: float, network: Network, A: np.ndarray, c: float, order: int, info: dict
) -> DiscreteModel:
    """The DiscreteModel of the midpoint :class:`~vimpc.integrators.VariationalIntegrator`
    (position-momentum form) of ``L(q, v) = c f(A (q, v))`` for a scalar network ``f``,
    with the momentum map and energy of ``L^[[order]]`` (:func:`mx_modified`'s formula),
    for an unconstrained system (friction and inputs enter through the system's discrete
    forces, as in the integrator).

    The same equations, Newton solve (scaling, tolerances, iterations) and acceptance test
    (finite; residual within the Newton tolerance plus ``ACCEPT_RTOL`` times the round-off
    level; energy balance with ``ENERGY_JUMP``) as the integrator's, written on MX with the
    network's derivatives in closed form (:func:`network_pass`) instead of expanded into
    scalar operations, and with each network evaluation shared where the integrator's
    separate functions repeat it: the momentum at ``x`` is computed once outside the Newton
    loop, the acceptance test reuses the momentum, energy and mass matrix of ``x`` and of
    the root. The dense products run on CasADi's BLAS plugins (:func:`_blas`; ``info``'s
    ``dense_products`` names them) and each function holds each hidden-to-hidden weight
    once (:func:`layer_weights`). ``tests/models/test_dlnn.py`` and ``tests/models/test_lnn.py`` check
    step, residual and energy (values and Jacobians) against the integrator's to 1e-10,
    ``tests/models/test_network_step.py`` the plugins against CasADi's reference kernel. Measured
    (``tests/benchmarks/bench_dlnn.py``, cart-pendulum, 3x128 softplus, order 0, shared
    2-core machine at load ~13): 0.53 ms per step (median; 1.80 ms before the plugins and
    the shared weights, in the same run)."""
    from vimpc.integrators import VariationalIntegrator, _newton
    from vimpc.integrators.discrete_lagrangians import discrete_forces
    from vimpc.integrators.variational import ENERGY_JUMP
    from vimpc.models import _bea as bea

    bea.check("midpoint", order, h)
    if system.n_holonomic or system.n_nonholonomic:
        raise InputError(
            f"midpoint_model writes the step of an unconstrained system; {system.name} has "
            f"{system.n_holonomic} holonomic and {system.n_nonholonomic} nonholonomic "
            "constraints: use VariationalIntegrator with the network as its lagrangian"
        )
    n, nu = system.nq, system.nu
    A = np.asarray(A, dtype=np.float64)
    Ad, c = ca.DM(A), float(c)
    reference = VariationalIntegrator(system, "midpoint", "position_momentum")
    tol = reference.residual_tolerance

    qs, q1s, us = ca.SX.sym("q0", n), ca.SX.sym("q1", n), ca.SX.sym("u", nu)
    forces = ca.Function(
        "fd", [qs, q1s, us], list(discrete_forces("midpoint", system.generalized_force,
                                                  qs, q1s, us, h))
    )  # fmt: skip
    # One constant node per hidden-to-hidden weight, shared by every network pass below:
    # CasADi copies a constant at every evaluation of a function that holds it (~7 us for
    # 128 x 128). The pieces are Python functions that write their expressions at each
    # use rather than CasADi functions called (each call would copy the weights again) or
    # inlined (CasADi's re-evaluation of a product node drops its BLAS plugin).
    weights = layer_weights(network)

    def net(q, v, directions=None, grad=True):
        return network_pass(network, ca.mtimes(Ad, ca.vertcat(q, v)), directions, grad, weights)

    # -- functions of a state (q, v): momentum, energy, mass matrices ------------------------
    zero = ca.DM.zeros(n, 1)
    Av = Ad[:, n:]
    if order == 0:

        def state(x):  # momentum, energy, M of L, M of p
            y, g, Hvv = net(x[:n], x[n:], A[:, n:])
            p, M = c * ca.mtimes(Av.T, g), c * Hvv
            return p, ca.dot(x[n:], p) - c * y, M, M

        def momentum(q, v):
            return c * ca.mtimes(Av.T, net(q, v)[1])

        def energy(x):
            y, g, _ = net(x[:n], x[n:])
            return ca.dot(x[n:], c * ca.mtimes(Av.T, g)) - c * y

        def rest(q):
            return -c * net(q, zero, grad=False)[0]

        def momentum_jac(q, v):
            _, g, H = net(q, v, np.eye(A.shape[0]))
            return c * ca.mtimes(Av.T, g), c * ca.mtimes([Av.T, H, Ad])

    else:  # CasADi functions: the BEA terms differentiate the network's derivatives
        q, v = ca.MX.sym("q", n), ca.MX.sym("v", n)
        x = ca.vertcat(q, v)
        y, g, Hw = net(q, v, A)
        L, gw, Hw = c * y, c * ca.mtimes(Ad.T, g), c * Hw
        force = gw[:n] - ca.mtimes(Hw[n:, :n], v)
        acc = ca.solve(Hw[n:, n:], force, "symbolicqr")
        corr = (
            h
            * h
            / 24.0
            * (ca.dot(acc, force) + bea.RULES["midpoint"] * ca.mtimes([v.T, Hw[:n, :n], v]))
        )
        Lmod = L + corr
        p = ca.gradient(Lmod, v)
        E = ca.dot(v, p) - Lmod
        # the Jacobians of p by reverse mode (n adjoint directions): measured 4x faster
        # than CasADi's default choice for this graph (6.9 ms -> 1.7 ms for 3x128)
        dp = ca.jtimes(p, x, ca.DM.eye(n), True).T
        state = ca.Function("state", [x], [p, E, Hw[n:, n:], dp[:, n:]])
        momentum = ca.Function("dLdv", [q, v], [p])
        momentum_jac = ca.Function("dLdv_jac", [q, v], [p, dp])
        energy = ca.Function("energy", [x], [E])
        rest = ca.Function("energy_at_rest", [q], [energy(ca.vertcat(q, zero))])

    # -- D1 L_d, D2 L_d of L_d(q0, q1) = h L((q0 + q1) / 2, (q1 - q0) / h) --------------------
    def D(qa, qb):
        gp = c * ca.mtimes(Ad.T, net(0.5 * (qa + qb), (qb - qa) / h)[1])
        return 0.5 * h * gp[:n] - gp[n:], 0.5 * h * gp[:n] + gp[n:]

    X, XN, U = ca.MX.sym("x", 2 * n), ca.MX.sym("x_next", 2 * n), ca.MX.sym("u", nu)
    P, P0 = ca.MX.sym("p", 0), ca.MX.sym("p0", n)
    q0, v0, q1, v1 = X[:n], X[n:], XN[:n], XN[n:]
    fm, fp = forces(q0, q1, U)
    D1, D2 = D(q0, q1)
    r = ca.vertcat(momentum(q0, v0) + D1 + fm, momentum(q1, v1) - D2 - fp)
    residual = ca.Function("residual", [X, U, XN, P], [r], ["x", "u", "x_next", "p"], ["r"])
    # the Newton residual, the momentum at x given (it does not change over the iterations)
    Z = ca.MX.sym("z", 2 * n)
    scale = _newton.state_scale(X[:n], X[n:], h)
    xz = scale * Z
    fmz, fpz = forces(q0, xz[:n], U)
    D1z, D2z = D(q0, xz[:n])
    implicit = ca.Function(
        "G", [Z, X, U, P0], [ca.vertcat(P0 + D1z + fmz, momentum(xz[:n], xz[n:]) - D2z - fpz)]
    )
    newton_options = {
        "abstol": tol,
        "abstolStep": _newton.STEP_TOL,
        "max_iter": _newton.MAX_ITER,
        "error_on_fail": False,
    }  # _newton.solve's options, with the Jacobian below
    # the Newton Jacobian: the network's Hessian in closed form at the pair and (order
    # 0) at the new state (CasADi's AD of the gradient costs ~1.7x as many dense
    # products), the momentum's Jacobian by reverse mode at order 2
    n_in = A.shape[0]
    Fd = ca.Function(
        "fd_jac", [qs, q1s, us], [ca.jacobian(forces(qs, q1s, us)[0], q1s),
                                  ca.jacobian(forces(qs, q1s, us)[1], q1s)],
    )  # fmt: skip
    q1z, v1z = xz[:n], xz[n:]
    _, gP, HP = net(0.5 * (q0 + q1z), (q1z - q0) / h, np.eye(n_in))
    gq = c * ca.mtimes(Ad.T, gP)
    dgq = c * ca.mtimes([Ad.T, HP, Ad, ca.DM(np.vstack([0.5 * np.eye(n), np.eye(n) / h]))])
    p1z, dp1 = momentum_jac(q1z, v1z)
    dfm, dfp = Fd(q0, q1z, U)
    G_value = ca.vertcat(P0 + 0.5 * h * gq[:n] - gq[n:] + fmz,
                         p1z - 0.5 * h * gq[:n] - gq[n:] - fpz)  # fmt: skip
    J_q = ca.vertcat(0.5 * h * dgq[:n, :] - dgq[n:, :] + dfm,
                     dp1[:, :n] - 0.5 * h * dgq[:n, :] - dgq[n:, :] - dfp)  # fmt: skip
    J_x = ca.horzcat(J_q, ca.vertcat(ca.DM.zeros(n, n), dp1[:, n:]))
    jac = ca.mtimes(J_x, ca.diag(scale))
    newton_options["jacobian_function"] = ca.Function("G_jac", [Z, X, U, P0], [jac, G_value])
    newton = ca.rootfinder(
        f"{system.name}_midpoint_newton", "fast_newton", implicit, newton_options
    )

    p0, E0, Ml0, Mp0 = state(X)
    guess = ca.vertcat(X[:n] + h * X[n:], X[n:]) / scale
    root = scale * newton(guess, X, U, p0)
    # the acceptance test at the root (the integrator's _acceptable and energy_balance)
    p1, E1, _, Mp1 = state(root)
    r1, s1 = root[:n], root[n:]
    fm1, fp1 = forces(q0, r1, U)
    D1r, D2r = D(q0, r1)
    res = ca.vertcat(p0 + D1r + fm1, p1 - D2r - fp1)
    level = ca.mmax(ca.sum2(ca.fabs(Ml0))) * (ca.norm_inf(q0) / h + ca.norm_inf(v0))
    tolerance = _newton.ACCEPT_FACTOR * tol + _newton.ACCEPT_RTOL * ca.repmat(level, 2 * n, 1)
    work = ca.dot(fm1 + fp1, r1 - q0) / h
    T0, T1 = 0.5 * ca.bilin(Mp0, v0, v0), 0.5 * ca.bilin(Mp1, s1, s1)
    potential = rest(r1) - rest(q0)
    error = ca.fabs(E1 - E0 - work)
    allowance = ENERGY_JUMP * (ca.fabs(T0) + ca.fabs(work) + ca.fabs(potential)) + (
        _newton.ACCEPT_RTOL
        * (ca.fabs(E0) + ca.fabs(E1) + ca.fabs(T0) + ca.fabs(T1) + ca.fabs(work))
    )
    ok = _newton.all_finite(root) * _newton.within(res, tolerance) * (error <= allowance)
    step = ca.Function("step", [X, U, P], [_newton.accepted(root, ok)], ["x", "u", "p"],
                       ["x_next"])  # fmt: skip
    obs = ca.MX.sym("obs", 2 * n)
    return DiscreteModel(
        dt=h,
        nx=2 * n,
        nu=nu,
        np=0,
        nobs=2 * n,
        step=step,
        residual=residual,
        energy=ca.Function("energy", [X, P], [energy(X)], ["x", "p"], ["E"]),
        from_obs=ca.Function("from_obs", [obs], [obs], ["obs"], ["x"]),
        to_obs=ca.Function("to_obs", [X], [X], ["x"], ["obs"]),
        state_names=reference.state_names,
        input_names=system.input_names,
        param_names=(),
        p_default=np.zeros(0),
        residual_jacobian=residual_blocks(network, A, c, h, forces) if order == 0 else None,
        info={
            **info,
            "step_acceptance": reference.acceptance(),
            "dense_products": f"{_blas(1)} up to 3 columns, {_blas(4)} above",
        },
    )


# -- the learned Lagrangian's sign ---------------------------------------------------------------


def negated(network: Network) -> Network:
    """The network ``-f``: its last Linear layer negated (exact, no retraining)."""
    *hidden, (W, b) = network.layers
    return Network((*hidden, (-W, -b)), network.activation)


def orient(
    what: str, network: Network, masses: np.ndarray, forced: bool, where: str, per: int
) -> tuple[Network, bool]:
    """``(network, negated)``: the network with the sign that makes the learned mass matrices
    ``masses`` ``(B, n, n)`` (one per data sample, their symmetric part) positive definite.

    Unforced data fix a Lagrangian only up to a factor, sign included (``det`` of an even
    dimension cannot tell it): the network is negated when its mass matrices are negative
    definite at more samples than positive definite. Forced data fix the sign; there it is
    kept and a majority of negative-definite samples is warned of. Samples left not
    positive definite are warned of (FitWarning) by count and the first one, by trajectory
    and index (``per`` samples per trajectory)."""
    M = np.asarray(masses, dtype=np.float64)
    eig = np.linalg.eigvalsh(0.5 * (M + np.swapaxes(M, 1, 2)))
    pd, nd = eig.min(axis=1) > 0, eig.max(axis=1) < 0
    flip = bool(not forced and nd.sum() > pd.sum())
    if flip:
        network, pd, nd, eig = negated(network), nd, pd, -eig[:, ::-1]
    bad = ~pd
    if np.any(bad):
        k = int(np.nonzero(bad)[0][0])
        i, j = divmod(k, per)
        kept = (
            "; the data are forced, so their forces fixed this sign and it is kept: check "
            "the input map's sign and units"
            if forced and nd.sum() > pd.sum()
            else ""
        )
        warnings.warn(
            f"{what}: the learned mass matrix is not positive definite at {int(bad.sum())} of "
            f"{len(M)} {where}s ({int(nd.sum())} negative definite, "
            f"{int((bad & ~nd).sum())} indefinite), first at trajectory {i}, {where} {j} "
            f"(eigenvalues {np.array2string(eig[k], precision=3)}){kept}; energy and momenta "
            "have the wrong sign there: train longer or on data covering that region",
            FitWarning,
            stacklevel=4,
        )
    return network, flip
