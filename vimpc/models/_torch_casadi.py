"""Trained torch networks written out as CasADi functions, and the one MLP constructor
the neural families share.

The writer walks a float64 :class:`torch.nn.Sequential` (nested ones too) layer by layer
and rebuilds it on a CasADi symbol, with the trained weights as numeric constants (DM).
Only layers whose maths is spelt out below are accepted (:data:`SUPPORTED`); anything
else — another module type, a subclass with its own ``forward``, float32 weights — is
refused, because a layer copied approximately would give a controller a model that is
quietly not the one that was trained.

This module imports torch; ``import vimpc`` never imports it (the families import it
only when they train or export).

Default expression kind: MX, one matrix product per layer with DM weights. Measured
on a 3x128 softplus MLP with 4 inputs (``python -m vimpc.models._torch_casadi``, a
shared 2-core machine, evaluation including CasADi's ~20 us Python call):

====  ======  ========  ======================  =====================
kind  build   evaluate  gradient+Hessian build  gradient+Hessian eval
====  ======  ========  ======================  =====================
SX    30 ms   0.21 ms   370 ms                  1.7 ms
MX    3.5 ms  0.07 ms   1.5 ms                  0.44 ms
====  ======  ========  ======================  =====================

SX expands every product with a constant weight into scalar operations (~105k
here) that CasADi's virtual machine interprets one by one; MX keeps dense products.
MX was as fast or faster at every size tried (2x32 up to 3x256), so SX is offered only
for callers that need an SX function; an MX network called on SX symbols, or expanded
by a solver's ``expand`` option, still becomes SX where that is wanted.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import casadi as ca
import numpy as np
import torch
from torch import nn

from vimpc.errors import InputError

__all__ = [
    "SUPPORTED",
    "PeriodicInput",
    "Sine",
    "casadi_expression",
    "casadi_function",
    "flat_weights",
    "load_weights",
    "mlp",
]


class Sine(nn.Module):
    """The sine activation ``sin(omega * x)`` (torch has none); ``omega`` is a fixed
    frequency, not a trained parameter."""

    def __init__(self, omega: float = 1.0) -> None:
        super().__init__()
        if isinstance(omega, bool) or not isinstance(omega, (int, float)):
            raise InputError(f"Sine's omega must be a number, got {omega!r}")
        if not np.isfinite(omega) or omega == 0:
            raise InputError(f"Sine's omega must be finite and non-zero, got {omega!r}")
        self.omega = float(omega)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.omega * x)

    def extra_repr(self) -> str:
        return f"omega={self.omega}"


class PeriodicInput(nn.Module):
    """Angles of the input replaced by their cosine and sine: input entry ``i`` in
    ``indices`` becomes the two entries ``(cos x_i, sin x_i)`` in its place, so a network
    behind it is ``2 pi``-periodic in those entries (the input grows by ``len(indices)``).
    The first input layer; ``n_in`` is the input's size."""

    def __init__(self, n_in: int, indices: Sequence[int]) -> None:
        super().__init__()
        if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
            raise InputError(f"PeriodicInput's n_in must be a positive integer, got {n_in!r}")
        idx = sorted({int(i) for i in indices})
        if not idx or idx[0] < 0 or idx[-1] >= n_in:
            raise InputError(
                f"PeriodicInput's indices must be entries of an input of {n_in}, got "
                f"{list(indices)!r}"
            )
        self.n_in, self.indices = n_in, tuple(idx)

    def columns(self, x, cos, sin, cat):
        """The features of ``x`` (rows are entries) with the library's ``cos``, ``sin``
        and row concatenation ``cat``."""
        parts = []
        for i in range(self.n_in):
            parts += [cos(x[i : i + 1]), sin(x[i : i + 1])] if i in self.indices else [x[i : i + 1]]
        return cat(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 1:  # one input
            return self.columns(x, torch.cos, torch.sin, torch.cat)
        return self.columns(x.T, torch.cos, torch.sin, torch.cat).T  # a batch (b, n_in)

    def extra_repr(self) -> str:
        return f"n_in={self.n_in}, indices={self.indices}"


def _periodic(x, layer: PeriodicInput):
    if x.shape != (layer.n_in, 1):
        raise InputError(f"PeriodicInput takes a column of {layer.n_in}, got shape {x.shape}")
    return layer.columns(x, ca.cos, ca.sin, lambda parts: ca.vertcat(*parts))


def _softplus(x, layer: nn.Softplus):
    # torch (aten softplus): x where beta*x > threshold, else log1p(exp(beta*x)) / beta.
    # log(1 + e^z) = max(z, 0) + log1p(e^-|z|) never overflows, so neither the value nor
    # a derivative of the branch if_else discards can be inf/NaN.
    beta, threshold = float(layer.beta), float(layer.threshold)
    z = beta * x
    soft = (ca.fmax(z, 0) + ca.log1p(ca.exp(-ca.fabs(z)))) / beta
    return ca.if_else(z > threshold, x, soft)


def _elu(x, layer: nn.ELU):
    # torch: x where x > 0, else alpha * expm1(x); fmin keeps the discarded branch finite
    return ca.if_else(x > 0, x, float(layer.alpha) * ca.expm1(ca.fmin(x, 0)))


#: The layer types the writer knows, each with its CasADi twin (exact types: a subclass
#: may change ``forward``).
SUPPORTED = {
    nn.Linear: None,  # handled in casadi_expression (needs the weights)
    nn.Tanh: lambda x, layer: ca.tanh(x),
    nn.Softplus: _softplus,
    nn.ELU: _elu,
    Sine: lambda x, layer: ca.sin(layer.omega * x),
    nn.Identity: lambda x, layer: x,
    PeriodicInput: _periodic,
}
_ACTIVATIONS = {"tanh": nn.Tanh, "softplus": nn.Softplus, "elu": nn.ELU, "sine": Sine}
#: the schemes :func:`mlp` draws initial weights by
INITS = ("uniform", "orthogonal")


def _supported_names() -> str:
    return ", ".join(["Sequential (nested)"] + [t.__name__ for t in SUPPORTED])


def _layers(module: nn.Module, path: str = "") -> list[tuple[str, nn.Module]]:
    """The leaf layers of ``module`` in order, with their dotted paths; refuses anything
    the writer cannot reproduce exactly."""
    here = path or "the network"
    if type(module) is nn.Sequential:
        out = []
        for name, child in module.named_children():
            out += _layers(child, f"{path}.{name}" if path else name)
        return out
    if type(module) not in SUPPORTED:
        raise InputError(
            f"{here} is a {type(module).__module__}.{type(module).__name__}, which the "
            f"torch -> CasADi writer does not support (supported: {_supported_names()}); "
            "build the network from these layers, e.g. with vimpc.models._torch_casadi.mlp"
        )
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if tensor.dtype != torch.float64:
            raise InputError(
                f"{path}.{name} is {tensor.dtype}, but the torch -> CasADi writer takes "
                "float64 networks only (the controller computes in float64); call "
                ".double() on the network before training"
            )
    return [(path, module)]


def _check_network(module) -> list[tuple[str, nn.Module]]:
    if not isinstance(module, nn.Module):
        raise InputError(
            f"the network must be a torch.nn.Module, got {type(module).__name__}; "
            f"supported: {_supported_names()}"
        )
    if type(module) is not nn.Sequential:
        raise InputError(
            f"the network is a {type(module).__module__}.{type(module).__name__}, but the "
            "torch -> CasADi writer takes a torch.nn.Sequential (a custom forward cannot be "
            f"read); supported: {_supported_names()}"
        )
    layers = _layers(module)
    if not layers:
        raise InputError("the network is an empty Sequential; it has nothing to write out")
    return layers


def casadi_expression(module: nn.Sequential, x, weights=None):
    """The network applied to the CasADi column ``x`` (SX or MX), weights as DM constants, or
    read from the CasADi column ``weights`` (of the same kind as ``x``) in the order of
    :func:`flat_weights`.

    Raises:
        InputError: an unsupported layer, float32 weights, or ``x`` or ``weights`` of the
            wrong size.
    """
    layers = _check_network(module)
    if weights is not None:
        n = flat_weights(module).size
        if weights.shape != (n, 1):
            raise InputError(
                f"the network has {n} weights; got a weights expression of shape {weights.shape}"
            )
    at = 0
    for path, layer in layers:
        if type(layer) is nn.Linear:
            if x.shape != (layer.in_features, 1):
                raise InputError(
                    f"layer {path} (Linear) takes a column of {layer.in_features}, got an "
                    f"expression of shape {x.shape}"
                )
            rows, cols = layer.out_features, layer.in_features
            if weights is None:
                W = ca.DM(layer.weight.detach().cpu().numpy())
            else:  # column-major, as flat_weights
                W, at = ca.reshape(weights[at : at + rows * cols], rows, cols), at + rows * cols
            x = ca.mtimes(W, x)
            if layer.bias is not None:
                if weights is None:
                    x = x + ca.DM(layer.bias.detach().cpu().numpy())
                else:
                    x, at = x + weights[at : at + rows], at + rows
        else:
            x = SUPPORTED[type(layer)](x, layer)
    return x


def flat_weights(module: nn.Sequential) -> np.ndarray:
    """The network's Linear weights and biases in one vector, layer by layer: each weight
    matrix column by column (CasADi's order), then its bias."""
    parts = []
    for _, layer in _check_network(module):
        if type(layer) is nn.Linear:
            parts.append(layer.weight.detach().cpu().numpy().ravel(order="F"))
            if layer.bias is not None:
                parts.append(layer.bias.detach().cpu().numpy())
    return np.concatenate(parts) if parts else np.zeros(0)


def casadi_function(
    module: nn.Sequential,
    *,
    name: str = "net",
    kind: str = "mx",
    n_in: int | None = None,
    weights_input: bool = False,
) -> ca.Function:
    """The network as a CasADi ``Function`` ``name: x (n_in) -> y (n_out)``, or with
    ``weights_input`` ``name: (x, w) -> y`` with the weights ``w`` an input in the order of
    :func:`flat_weights` (a controller compiled once then serves every set of weights).

    Args:
        module: a float64 ``torch.nn.Sequential`` of :data:`SUPPORTED` layers.
        name: the function's name.
        kind: ``"mx"`` (default: one matrix product per layer; faster to build,
            evaluate and differentiate at every size measured, see the module docstring)
            or ``"sx"`` (scalar operations; when an SX function is required).
        n_in: the input size; needed only when the network has no Linear layer.

    Raises:
        InputError: an unknown ``kind``, an unsupported layer, float32 weights, or no way
            to tell the input size.
    """
    if kind not in ("sx", "mx"):
        raise InputError(f"kind must be 'sx' or 'mx', got {kind!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise InputError(f"name must be a valid identifier, got {name!r}")
    layers = _check_network(module)
    linear = [layer for _, layer in layers if type(layer) is nn.Linear]
    if n_in is None:
        if type(layers[0][1]) is PeriodicInput:
            n_in = layers[0][1].n_in
        elif not linear:
            raise InputError("the network has no Linear layer; pass n_in (its input size)")
        else:
            n_in = linear[0].in_features
    if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
        raise InputError(f"n_in must be a positive integer, got {n_in!r}")
    sym = ca.SX if kind == "sx" else ca.MX
    x = sym.sym("x", n_in)
    if not weights_input:
        return ca.Function(name, [x], [casadi_expression(module, x)], ["x"], ["y"])
    w = sym.sym("w", flat_weights(module).size)
    return ca.Function(name, [x, w], [casadi_expression(module, x, w)], ["x", "w"], ["y"])


def mlp(
    sizes: Sequence[int],
    activation: str | nn.Module = "softplus",
    *,
    seed: int = 0,
    init: str = "uniform",
) -> nn.Sequential:
    """A float64 multilayer perceptron ``Linear, act, Linear, act, ..., Linear``.

    Args:
        sizes: layer widths from input to output, e.g. ``(4, 128, 128, 1)``.
        activation: ``"tanh"``, ``"softplus"``, ``"elu"``, ``"sine"`` (defaults of each),
            or a configured instance of a supported activation (copied per layer).
        seed: the initial weights are drawn from ``torch.Generator().manual_seed(seed)``;
            torch's global random state is left untouched.
        init: ``"uniform"``: torch's default scheme, weights and biases uniform in
            +-1/sqrt(fan_in); ``"orthogonal"``: each weight matrix a random orthogonal one
            (orthonormal rows or columns, gain 1), the biases uniform as before (the
            constrained-network authors' ``Linear(..., orthogonal_init=True)``).
    """
    if init not in INITS:
        raise InputError(f"init must be one of {list(INITS)}, got {init!r}")
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else sizes
    if (
        not isinstance(sizes, list)
        or len(sizes) < 2
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)
    ):
        raise InputError(
            f"sizes must be a list of at least 2 positive integers (input ... output), "
            f"got {sizes!r}"
        )
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise InputError(
                f"activation must be one of {sorted(_ACTIVATIONS)} or a layer instance, "
                f"got {activation!r}"
            )
        make = _ACTIVATIONS[activation]
    elif type(activation) in SUPPORTED and type(activation) is not nn.Linear:
        proto = activation

        def make() -> nn.Module:
            return copy.deepcopy(proto)
    else:
        raise InputError(
            f"activation must be one of {sorted(_ACTIVATIONS)} or an instance of "
            f"Tanh, Softplus, ELU, Sine or Identity, got {activation!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    generator = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        linear = nn.utils.skip_init(nn.Linear, fan_in, fan_out, dtype=torch.float64)
        bound = 1.0 / np.sqrt(fan_in)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
            if init == "orthogonal":
                nn.init.orthogonal_(linear.weight, generator=generator)
        layers.append(linear)
        if i < len(sizes) - 2:
            layers.append(make())
    return nn.Sequential(*layers)


def load_weights(module: nn.Module, layers) -> nn.Module:
    """``module`` with its Linear layers, in order, set to ``layers`` (``(W, b)`` numpy pairs,
    float64); returns it."""
    linear = [m for m in module.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for m, (W, b) in zip(linear, layers, strict=True):
            m.weight.copy_(torch.from_numpy(np.asarray(W, dtype=np.float64)))
            m.bias.copy_(torch.from_numpy(np.asarray(b, dtype=np.float64)))
    return module


def _timings(kind: str, repeats: int = 500) -> dict[str, float]:
    """Build and evaluation times (s) of a 3x128 softplus MLP on 4 inputs, of its value
    and of its gradient and Hessian together (what a Newton solve on a learned
    Lagrangian needs); evaluation times include CasADi's Python call (~20 us)."""
    net = mlp([4, 128, 128, 128, 1], "softplus", seed=0)
    x0 = np.linspace(-1.0, 1.0, 4)
    t = time.perf_counter()
    f = casadi_function(net, kind=kind)
    out = {"build_s": time.perf_counter() - t}
    t = time.perf_counter()
    x = f.sx_in(0) if kind == "sx" else f.mx_in(0)
    H, g = ca.hessian(f(x), x)
    fh = ca.Function("hessian", [x], [H, g])
    out["hessian_build_s"] = time.perf_counter() - t
    for key, fun in (("eval_s", f), ("hessian_eval_s", fh)):
        fun(x0)
        t = time.perf_counter()
        for _ in range(repeats):
            fun(x0)
        out[key] = (time.perf_counter() - t) / repeats
    return out


if __name__ == "__main__":
    for kind in ("sx", "mx"):
        print(kind, {k: f"{v:.3g}" for k, v in _timings(kind).items()})
