"""The torch -> CasADi writer agrees with torch autograd in value, Jacobian and Hessian."""

from __future__ import annotations

import subprocess
import sys

import casadi as ca
import numpy as np
import pytest
import torch
from torch import nn

from vimpc.errors import InputError
from vimpc.models._torch_casadi import PeriodicInput, Sine, casadi_function, mlp

TOL = 1e-10
ACTIVATIONS = {
    "tanh": nn.Tanh(),
    "softplus": nn.Softplus(),
    # a low threshold so that random pre-activations fall on both of torch's branches
    "softplus_b2_t1": nn.Softplus(beta=2.0, threshold=1.0),
    "elu": nn.ELU(alpha=0.7),
    "sine": Sine(omega=1.5),
    "identity": nn.Identity(),
}


def _close(got, ref, what):
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref)))
    assert err <= TOL, f"{what}: max error {err:.3g} > {TOL}"


def _compare(net, kind, points, hessian=False):
    f = casadi_function(net, kind=kind, n_in=points.shape[1])
    x = f.sx_in(0) if kind == "sx" else f.mx_in(0)
    y = f(x)
    jac = ca.Function("J", [x], [ca.jacobian(y, x)])
    hess = ca.Function("H", [x], [ca.hessian(y, x)[0]]) if hessian else None
    for p in points:
        xt = torch.as_tensor(p)
        with torch.no_grad():
            ref = net(xt).numpy()
        _close(f(p).full().ravel(), ref, "value")
        _close(jac(p).full(), torch.autograd.functional.jacobian(net, xt).numpy(), "Jacobian")
        if hessian:
            ref_h = torch.autograd.functional.hessian(lambda z: net(z).squeeze(), xt).numpy()
            _close(hess(p).full(), ref_h, "Hessian")


@pytest.mark.parametrize("kind", ["sx", "mx"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_each_activation_matches_torch(name, kind):
    points = np.random.default_rng(1).normal(scale=2.0, size=(8, 3))
    _compare(mlp([3, 12, 12, 2], ACTIVATIONS[name], seed=3), kind, points)
    _compare(mlp([3, 10, 10, 1], ACTIVATIONS[name], seed=4), kind, points, hessian=True)


@pytest.mark.parametrize("kind", ["sx", "mx"])
def test_softplus_threshold_branches(kind):
    # beta * x > threshold returns x exactly (torch's rule); at beta * x == threshold the
    # smooth branch still applies. The two branches differ by ~0.024 at the threshold,
    # so a writer that picks the wrong one fails by far more than the tolerance.
    net = nn.Sequential(nn.Softplus(beta=2.0, threshold=3.0)).double()
    xs = [1.5 - 1e-9, 1.5 + 1e-9, -30.0, -800.0, 0.3, 40.0, 800.0]
    _compare(net, kind, np.array(xs)[:, None], hessian=True)
    # exactly at the threshold torch's double backward masks with beta*x < threshold while
    # its value and gradient use the smooth branch, so only those two are compared there
    _compare(net, kind, np.array([[1.5]]))
    f = casadi_function(net, kind=kind, n_in=1)
    assert float(f(1.5 + 1e-9)) == 1.5 + 1e-9
    assert abs(float(f(1.5)) - np.log1p(np.exp(3.0)) / 2) < 1e-15
    # far left the value is tiny: log1p keeps it to full relative precision (log(1 + e^z)
    # would round it to 0)
    tiny = float(net(torch.tensor([-30.0], dtype=torch.float64)))
    assert 0 < tiny < 1e-25 and float(f(-30.0)) == pytest.approx(tiny, rel=1e-14, abs=0)
    # a chain that crosses the threshold inside the network
    chain = nn.Sequential(nn.Linear(2, 6), nn.Softplus(beta=3.0, threshold=2.0), nn.Linear(6, 1))
    chain = chain.double()
    with torch.no_grad():
        chain[0].weight.copy_(torch.linspace(-1.0, 1.0, 12).reshape(6, 2))
    points = np.random.default_rng(2).uniform(-2.0, 2.0, size=(12, 2))
    pre = points @ chain[0].weight.detach().numpy().T + chain[0].bias.detach().numpy()
    assert np.any(3.0 * pre > 2.0) and np.any(3.0 * pre <= 2.0)
    _compare(chain, kind, points, hessian=True)


@pytest.mark.parametrize("kind", ["sx", "mx"])
def test_periodic_input_matches_torch_and_is_periodic(kind):
    torch.manual_seed(1)
    net = nn.Sequential(PeriodicInput(3, [0, 2]), nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 1))
    net = net.double()
    points = np.random.default_rng(6).normal(size=(6, 3))
    _compare(net, kind, points, hessian=True)
    f = casadi_function(net, kind=kind)
    assert f.size_in(0) == (3, 1)
    turned = points + 2 * np.pi * np.array([1.0, 0.0, -1.0])
    np.testing.assert_allclose(
        np.asarray(f.map(6)(turned.T)), np.asarray(f.map(6)(points.T)), atol=1e-12
    )
    for n_in, indices in ((3, [3]), (3, []), (0, [0])):
        with pytest.raises(InputError, match="PeriodicInput"):
            PeriodicInput(n_in, indices)


@pytest.mark.parametrize("kind", ["sx", "mx"])
def test_nested_sequentials(kind):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(4, 8),
        nn.Sequential(
            nn.Tanh(), nn.Linear(8, 8), nn.Sequential(nn.Softplus(beta=0.5), nn.Identity())
        ),
        nn.ELU(),
        nn.Sequential(nn.Linear(8, 5, bias=False), Sine(2.0)),
        nn.Linear(5, 1),
    ).double()
    points = np.random.default_rng(5).normal(size=(6, 4))
    _compare(net, kind, points, hessian=True)
    f = casadi_function(net, kind=kind, name="lagrangian")
    assert f.name() == "lagrangian" and f.size_in(0) == (4, 1) and f.size_out(0) == (1, 1)
    assert f.is_a("SXFunction") == (kind == "sx")


def test_mx_network_expands_and_takes_sx_arguments():
    net = mlp([3, 16, 2], "tanh", seed=0)
    f = casadi_function(net, kind="mx")
    p = np.array([0.3, -0.2, 0.9])
    ref = f(p).full()
    np.testing.assert_allclose(f.expand()(p).full(), ref, rtol=1e-14, atol=1e-14)
    x = ca.SX.sym("x", 3)
    np.testing.assert_allclose(ca.Function("g", [x], [f(x)])(p).full(), ref, rtol=1e-14, atol=1e-14)


class _Custom(nn.Sequential):
    def forward(self, x):
        return 2.0 * super().forward(x)


@pytest.mark.parametrize(
    ("net", "words"),
    [
        (nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).double(), ["1", "ReLU"]),
        (nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.GELU())).double(), ["1.0", "GELU"]),
        (nn.Sequential(nn.Linear(2, 3), nn.Tanh()), ["0.weight", "float32", ".double()"]),
        (_Custom(nn.Linear(2, 1)).double(), ["_Custom", "Sequential"]),
        (nn.Linear(2, 1).double(), ["Linear", "Sequential"]),
        (nn.Sequential(), ["empty"]),
        (np.eye(2), ["ndarray", "torch.nn.Module"]),
    ],
)
def test_unsupported_networks_refused_by_name(net, words):
    with pytest.raises(InputError) as err:
        casadi_function(net)
    for word in words:
        assert word in str(err.value)
    if "ReLU" in words or "GELU" in words:
        for name in ("Linear", "Tanh", "Softplus", "ELU", "Sine", "Identity"):
            assert name in str(err.value)


def test_bad_writer_arguments():
    net = mlp([2, 4, 1], "tanh")
    with pytest.raises(InputError, match="kind must be 'sx' or 'mx', got 'SX'"):
        casadi_function(net, kind="SX")
    with pytest.raises(InputError, match="name must be a valid identifier"):
        casadi_function(net, name="my net")
    with pytest.raises(InputError, match="pass n_in"):
        casadi_function(nn.Sequential(nn.Tanh()))
    with pytest.raises(InputError, match="takes a column of 2"):
        casadi_function(net, n_in=3)


def test_mlp_is_seeded_float64_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = mlp([3, 5, 2], "elu", seed=7), mlp([3, 5, 2], "elu", seed=7), mlp([3, 5, 2], "elu")
    assert torch.equal(torch.get_rng_state(), state)
    assert [type(m) for m in a] == [nn.Linear, nn.ELU, nn.Linear]
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters(), strict=True):
        assert pa.dtype == torch.float64 and torch.equal(pa, pb) and not torch.equal(pa, pc)
        assert float(pa.detach().abs().max()) <= 1.0 / np.sqrt(pa.shape[-1] if pa.ndim == 2 else 3)
    sp = mlp([2, 4, 4, 1], nn.Softplus(beta=3.0, threshold=5.0))
    assert sp[1] is not sp[3] and sp[3].beta == 3.0 and sp[3].threshold == 5.0
    for bad, match in [
        (dict(sizes=[3]), "sizes must be"),
        (dict(sizes=[3, 0, 1]), "sizes must be"),
        (dict(sizes=[2, 1], activation="relu"), "activation must be one of .* got 'relu'"),
        (dict(sizes=[2, 1], activation=nn.ReLU()), "activation must be one of"),
        (dict(sizes=[2, 1], seed=-1), "seed must be a non-negative integer, got -1"),
    ]:
        with pytest.raises(InputError, match=match):
            mlp(**bad)
    with pytest.raises(InputError, match="omega must be finite and non-zero"):
        Sine(0.0)


def test_import_vimpc_does_not_import_torch():
    code = "import vimpc, vimpc.models, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_orthogonal_init_draws_orthogonal_weights_from_the_seed():
    # every weight matrix orthogonal (orthonormal rows of the wide ones, columns of the
    # tall ones), the biases uniform in +-1/sqrt(fan_in), the same draw for the same seed
    net = mlp([4, 16, 16, 1], "tanh", seed=3, init="orthogonal")
    for layer in net[::2]:
        W = layer.weight.detach()
        small = min(W.shape)
        gram = W @ W.T if W.shape[0] == small else W.T @ W
        torch.testing.assert_close(gram, torch.eye(small, dtype=W.dtype), rtol=0, atol=1e-12)
        assert float(layer.bias.abs().max()) <= 1.0 / np.sqrt(W.shape[1])
    uniform = mlp([4, 16, 16, 1], "tanh", seed=3)
    assert not torch.equal(net[0].weight, uniform[0].weight)
    again = mlp([4, 16, 16, 1], "tanh", seed=3, init="orthogonal")
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), again.parameters(), strict=True))
    with pytest.raises(InputError, match=r"init must be one of \['uniform', 'orthogonal'\]"):
        mlp([4, 1], init="xavier")


def test_the_network_settings_offer_what_the_writer_draws():
    # the settings declare their choices without importing torch; each must be one mlp takes
    from vimpc.models import _network_lagrangian as nl
    from vimpc.models import _torch_casadi as tc

    assert set(nl.INITS) == set(tc.INITS)
    assert set(nl.ACTIVATIONS) <= set(tc._ACTIVATIONS)
