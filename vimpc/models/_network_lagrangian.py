"""Shared maths of the neural Lagrangian families (:mod:`~vimpc.models.families.dlnn`,
:mod:`~vimpc.models.families.lnn`): the settings they share, the network kept as numpy
weights after training, input derivatives of a batch in torch, and the checks made
before training.

A network is trained on normalised inputs ``z = P x + c`` with its output multiplied by
a fixed ``scale``; both maps are folded into the first and last Linear layers when the
training ends (:func:`fold`), so the stored network is a plain MLP on the physical
inputs ``x`` (``(q0, q1)`` for a discrete Lagrangian, ``(q, v)`` for a continuous one).
Training needs torch; everything here that does not train imports it locally, so
``import vimpc.models.families.dlnn`` loads no torch.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, Rule, Setting
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
        import torch

        from vimpc.models._torch_casadi import mlp

        net = mlp(self.sizes, self.activation, seed=0)
        linear = [m for m in net if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            for module, (W, b) in zip(linear, self.layers, strict=True):
                module.weight.copy_(torch.from_numpy(W))
                module.bias.copy_(torch.from_numpy(b))
        return net

    def casadi_function(self, name: str) -> ca.Function:
        """``x -> y`` as an MX CasADi function, written by
        :func:`vimpc.models._torch_casadi.casadi_function` (agrees with torch to round-off)."""
        from vimpc.models._torch_casadi import casadi_function

        return casadi_function(self.torch_module(), name=name, kind="mx")

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
