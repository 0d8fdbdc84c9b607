"""The exported network step's dense products (vimpc.models._network_lagrangian): CasADi's
BLAS plugins give the reference kernel's values to round-off, in the closed-form network
derivatives and in the whole exported model (step, residual, energy, with Jacobians); each
hidden-to-hidden weight is one constant node per function; a saved model keeps its values;
a CasADi without the plugin falls back to the reference kernel and says so."""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from vimpc import model_file
from vimpc.errors import FitWarning
from vimpc.mechanics import CartPendulum
from vimpc.models import _network_lagrangian as nl

sys.path.insert(0, str(Path(__file__).parents[1] / "experiments"))


def _reference_kernel(columns: int) -> str:
    return "reference"


def _random_network(sizes, activation, seed=0):
    rng = np.random.default_rng(seed)
    layers = tuple(
        (rng.normal(scale=1.0 / np.sqrt(a), size=(b, a)), rng.normal(scale=0.1, size=b))
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    )
    return nl.Network(layers, activation)


@functools.cache
def _cart_model():
    """A small 3-hidden-layer DLNN on the paper's cart-pendulum data (two hidden-to-hidden
    weights, so the BLAS products run at both)."""
    pytest.importorskip("torch")
    from _dlnn_systems import CART, cart_data

    from vimpc.models.families.dlnn import DLNNModel

    m = DLNNModel(CartPendulum(), CART["h"], hidden=[16, 16, 16], epochs=300, lr=3e-3, order=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        return m.fit(cart_data())


@pytest.mark.parametrize("activation", nl.ACTIVATIONS)
def test_the_blas_products_give_the_reference_kernels_network_derivatives(monkeypatch, activation):
    # value, gradient and D^T H D with 0, 2 and 4 directions (BLASFEO and OpenBLAS
    # products), against the same pass on CasADi's reference kernel
    net = _random_network([4, 24, 24, 24, 1], activation)
    x = ca.MX.sym("x", 4)
    rng = np.random.default_rng(1)
    points = rng.normal(scale=2.0, size=(5, 4))
    for D in (None, rng.normal(size=(4, 2)), np.eye(4)):
        outs = {}
        for kernel in ("plugins", "reference"):
            with monkeypatch.context() as mp:
                if kernel == "reference":
                    mp.setattr(nl, "_blas", _reference_kernel)
                y, g, H = nl.network_pass(net, x, D)
            f = ca.Function("f", [x], [o for o in (y, g, H) if o is not None])
            outs[kernel] = [[np.asarray(o) for o in f.call([p])] for p in points]
        for a, b in zip(outs["plugins"], outs["reference"], strict=True):
            for mine, ref in zip(a, b, strict=True):
                assert mine.shape == ref.shape
                assert np.allclose(mine, ref, rtol=1e-13, atol=1e-13)


def _functions(model):
    return {name: ca.Function(getattr(model, name)) for name in ("step", "residual", "energy")}


def test_the_exported_model_on_blas_equals_it_on_the_reference_kernel(monkeypatch):
    # step (Newton root and acceptance), residual and energy, values and Jacobians: the
    # products' summation order is all that differs
    m = _cart_model()
    fast = m.discrete_model()
    with monkeypatch.context() as mp:
        mp.setattr(nl, "_blas", _reference_kernel)
        slow = m.discrete_model()
    assert slow.info["dense_products"] == "reference up to 3 columns, reference above"
    rng = np.random.default_rng(2)
    states = np.hstack([rng.uniform(-0.2, 0.2, (8, 2)), rng.uniform(-1.0, 1.0, (8, 2))])
    u = np.zeros(1)  # unforced data: the network's response to an input is not identified
    finite = 0
    for name in ("step", "residual", "energy"):
        f, g = _functions(fast)[name], _functions(slow)[name]
        args = f.mx_in()
        out = f.call(args)[0]
        wrt = ca.vertcat(*[a for a in args if a.numel()])
        jf = ca.Function("j", args, [out, ca.jacobian(out, wrt)])
        jg = ca.Function("j", args, [g.call(args)[0], ca.jacobian(g.call(args)[0], wrt)])
        for x in states:
            xn = np.asarray(slow.step(x, u, [])).ravel()
            if name == "step":
                finite += int(np.all(np.isfinite(xn)))
            elif name == "residual" and not np.all(np.isfinite(xn)):
                continue  # a refused step: no x_next to evaluate the residual at
            call = {"step": (x, u, []), "residual": (x, u, xn, []), "energy": (x, [])}[name]
            for a, b in zip(jf(*call), jg(*call), strict=True):
                a, b = np.asarray(a), np.asarray(b)
                assert np.array_equal(np.isnan(a), np.isnan(b)), name
                assert np.allclose(a, b, rtol=1e-11, atol=1e-11, equal_nan=True), name
    assert finite >= 6


def test_each_hidden_weight_is_one_constant_per_function():
    # CasADi copies a constant at every evaluation of the function holding it: the step,
    # residual and energy each hold each 16 x 16 hidden-to-hidden weight once, however
    # many network passes they make (the step: the state, the acceptance test's passes)
    m = _cart_model()
    model = m.discrete_model()
    hidden = [W for W, _ in m.network_.layers[1:-1]]
    assert len(hidden) == 2
    for name, f in _functions(model).items():
        consts = [
            np.asarray(ca.evalf(e))
            for e in (f.instruction_MX(k) for k in range(f.n_instructions()))
            if e.is_constant() and e.shape == (16, 16)
        ]
        assert len(consts) == len(hidden), name
        for W in hidden:
            assert sum(np.array_equal(c, W) for c in consts) == 1, name


def test_a_saved_model_steps_as_the_model_it_was_saved_from(tmp_path):
    # serialisation keeps the products (values bitwise equal, refusals included)
    model = _cart_model().discrete_model()
    loaded = model_file.load(model_file.save(model, tmp_path / "dlnn.vimpc"))
    rng = np.random.default_rng(4)
    for x in np.hstack([rng.uniform(-0.3, 0.3, (6, 2)), rng.uniform(-1.5, 1.5, (6, 2))]):
        a = np.asarray(model.step(x, [0.0], [])).ravel()
        b = np.asarray(loaded.step(x, [0.0], [])).ravel()
        assert np.array_equal(a, b, equal_nan=True)


def test_without_the_blas_plugins_the_products_use_the_reference_kernel(monkeypatch):
    try:
        with monkeypatch.context() as mp:
            mp.setattr(ca, "has_blas", lambda name: False)
            nl._blas.cache_clear()
            assert nl._blas(1) == nl._blas(4) == "reference"
            net = _random_network([4, 8, 8, 1], "tanh")
            x = ca.MX.sym("x", 4)
            f = ca.Function("f", [x], list(nl.network_pass(net, x, np.eye(4))))
            y, g, H = (np.asarray(o) for o in f(np.array([0.1, -0.2, 0.3, 0.4])))
            assert np.all(np.isfinite(H)) and np.allclose(H, H.T, atol=1e-14)
    finally:
        nl._blas.cache_clear()  # the choice with the plugins restored, for later tests
    assert nl._blas(1) == ("blasfeo" if ca.has_blas("blasfeo") else "reference")
    assert nl._blas(4) == ("classic" if ca.has_blas("classic") else "reference")


# -- the residual's Jacobian in closed form ------------------------------------------------------


def _stage_points(rng, n, N):
    X = np.vstack([rng.uniform(-0.3, 0.3, (2, N)), rng.uniform(-1.5, 1.5, (2, N))])
    return X, X + 0.02 * rng.normal(size=X.shape), rng.uniform(-0.5, 0.5, (1, N))


@pytest.mark.parametrize("N", [1, 5])
def test_the_closed_form_residual_jacobian_is_the_automatic_one(N):
    # residual_blocks (N stages at once, the model's residual_jacobian at N = 1): the
    # residual equals the exported residual at each stage and the blocks [dr/dx, dr/du,
    # dr/dx_next] equal CasADi's automatic Jacobian of it, to round-off
    m = _cart_model().discrete_model()
    assert m.residual_jacobian is not None
    rng = np.random.default_rng(7)
    X, Z, U = _stage_points(rng, 2, N)
    fn = m.residual_jacobian if N == 1 else _blocks(_cart_model(), N)
    r, J = (np.asarray(v) for v in fn(X, U, Z, []))
    auto = m.residual.jacobian()
    w = 2 * m.nx + m.nu
    for k in range(N):
        rk = np.asarray(m.residual(X[:, k], U[:, k], Z[:, k], [])).ravel()
        jx, ju, jz, _ = (np.asarray(v) for v in auto(X[:, k], U[:, k], Z[:, k], [], rk))
        ref = np.hstack([jx, ju, jz])
        assert np.allclose(r[:, k], rk, rtol=1e-12, atol=1e-12)
        assert np.allclose(
            J[:, k * w : (k + 1) * w], ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max()
        )
        assert np.abs(ref).max() > 1e-3  # a Jacobian with content


def _blocks(family, N):
    """residual_blocks of ``family``'s exported network at N stages (its input map and
    discrete forces as the DLNN export writes them)."""
    from vimpc.integrators.discrete_lagrangians import discrete_forces

    s, h = family.system, family.dt
    n, eye = s.nq, np.eye(s.nq)
    A = np.block([[eye, -0.5 * h * eye], [eye, 0.5 * h * eye]])
    q0, q1, u = ca.SX.sym("q0", n), ca.SX.sym("q1", n), ca.SX.sym("u", s.nu)
    forces = ca.Function(
        "fd", [q0, q1, u], list(discrete_forces("midpoint", s.generalized_force, q0, q1, u, h))
    )
    return nl.residual_blocks(family.network_, A, 1.0 / h, h, forces, N)


def test_the_controller_differentiates_the_residual_by_the_models_jacobian():
    # residual_function: the same values as the residual, its Jacobian the model's closed form
    # (custom_jacobian), with the sparsity of the residual's own Jacobian
    from vimpc.mpc.tube import residual_function

    m = _cart_model().discrete_model()
    fn = residual_function(m)
    rng = np.random.default_rng(8)
    X, Z, U = _stage_points(rng, 2, 1)
    args = (X[:, 0], U[:, 0], Z[:, 0], [])
    assert np.array_equal(np.asarray(fn(*args)).reshape(-1), m.residual(*args))
    x = ca.MX.sym("w", 2 * m.nx + m.nu)
    parts = (x[: m.nx], x[m.nx : m.nx + m.nu], x[m.nx + m.nu :], ca.MX(0, 1))
    mine = ca.Function("j", [x], [ca.jacobian(fn(*parts), x)])
    auto = ca.Function("j", [x], [ca.jacobian(m.residual(*parts), x)])
    w = np.concatenate([X[:, 0], U[:, 0], Z[:, 0]])
    a, b = mine(w), auto(w)
    assert a.sparsity() == b.sparsity()
    assert np.allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    given = m.residual_jacobian(*args)[1]
    assert np.allclose(np.asarray(a), np.asarray(given), rtol=1e-12, atol=1e-12)


def test_a_saved_model_keeps_its_residual_jacobian(tmp_path):
    m = _cart_model().discrete_model()
    loaded = model_file.load(model_file.save(m, tmp_path / "m.vimpc"))
    rng = np.random.default_rng(9)
    X, Z, U = _stage_points(rng, 2, 1)
    args = (X[:, 0], U[:, 0], Z[:, 0], [])
    for a, b in zip(loaded.residual_jacobian(*args), m.residual_jacobian(*args), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
