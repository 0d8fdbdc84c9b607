"""DiscreteModel's functions at the edges: NumPy in gives NumPy out, CasADi in gives CasADi
out, ``p`` defaults to ``p_default``, and ``step_many`` equals a loop of single steps."""

from __future__ import annotations

import math
import pickle

import casadi as ca
import numpy as np
import pytest

from vimpc.errors import InputError
from vimpc.mechanics import CartPole
from vimpc.models import NominalModel


@pytest.fixture(scope="module")
def model():
    # a parameterised record: the nominal cart-pole's step with p a force offset, p_default
    # non-zero, so that p left out differs from p = 0
    base = NominalModel(CartPole(friction=[0.2, 0.05]), 0.02, integrator="midpoint")
    m = base.discrete_model()
    x, u, p = ca.MX.sym("x", 4), ca.MX.sym("u", 1), ca.MX.sym("p", 1)
    step = ca.Function("step", [x, u, p], [m.step(x, u + p, [])], ["x", "u", "p"], ["x_next"])
    energy = ca.Function("energy", [x, p], [m.energy(x, []) + p], ["x", "p"], ["E"])
    from dataclasses import replace

    return replace(m, step=step, residual=None, residual_jacobian=None, energy=energy, np=1,
                   param_names=("offset",), p_default=np.array([0.7]))  # fmt: skip


def _states(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))


def test_numbers_in_give_ndarrays_of_the_right_shape(model):
    x = _states(1)[0]
    out = model.step(x, [1.0], [0.7])
    assert type(out) is np.ndarray and out.shape == (4,) and out.dtype == np.float64
    assert type(model.step(list(x), 1.0, 0.7)) is np.ndarray
    assert model.energy(x).shape == () and isinstance(float(model.energy(x)), float)
    assert model.to_obs(x).shape == (model.nobs,)
    several = model.step(_states(3).T, np.ones((1, 3)), np.full((1, 3), 0.7))
    assert type(several) is np.ndarray and several.shape == (4, 3)
    column = model.step(x[:, None], [1.0], [0.7])  # a matrix in keeps CasADi's shape
    assert type(column) is np.ndarray and column.shape == (4, 1)
    np.testing.assert_array_equal(column[:, 0], out)
    # a DM among the arguments keeps CasADi's DM, with CasADi's column shape
    dm = model.step(ca.DM(x), [1.0], [0.7])
    assert isinstance(dm, ca.DM) and dm.shape == (4, 1)
    np.testing.assert_array_equal(np.asarray(dm).reshape(-1), out)


def test_symbols_in_give_symbols_out(model):
    x, u = ca.MX.sym("x", 4), ca.MX.sym("u", 1)
    assert isinstance(model.step(x, u), ca.MX) and model.step(x, u).shape == (4, 1)
    assert isinstance(model.step(x, u, ca.MX.sym("p")), ca.MX)
    assert isinstance(model.to_obs(ca.SX.sym("x", 4)), ca.SX)


def test_p_left_out_is_p_default(model):
    x = _states(1, seed=2)[0]
    given = model.step(x, [0.5], model.p_default)
    np.testing.assert_array_equal(model.step(x, [0.5]), given)
    np.testing.assert_array_equal(model.step(x=x, u=[0.5])["x_next"], given)  # by name: a dict
    assert float(model.energy(x)) == float(model.energy(x, model.p_default))
    # and p matters: another p gives another step
    assert np.max(np.abs(model.step(x, [0.5], [0.0]) - given)) > 1e-6
    # symbolic calls take the default too
    X = ca.MX.sym("x", 4)
    f = ca.Function("f", [X], [model.step(X, 0.5)])
    np.testing.assert_allclose(np.asarray(f(x)).reshape(-1), given, rtol=0, atol=1e-15)
    # the default travels with a pickled function
    again = pickle.loads(pickle.dumps(model.step))
    np.testing.assert_array_equal(again(x, [0.5]), given)


def test_step_many_equals_a_loop_of_steps(model):
    X, rng = _states(50, seed=3), np.random.default_rng(4)
    U, P = rng.uniform(-10, 10, size=(50, 1)), rng.uniform(-1, 1, size=(50, 1))
    loop = np.array([model.step(x, u, p) for x, u, p in zip(X, U, P, strict=True)])
    many = model.step_many(X, U, P)
    assert many.shape == (50, 4)
    np.testing.assert_allclose(many, loop, rtol=0, atol=1e-14)
    default = np.array([model.step(x, u) for x, u in zip(X, U, strict=True)])
    np.testing.assert_allclose(model.step_many(X, U[:, 0]), default, rtol=0, atol=1e-14)
    np.testing.assert_allclose(model.step_many(X, U, [0.7]), default, rtol=0, atol=1e-14)
    with pytest.raises(InputError, match=r"U must have shape \(50, 1\)"):
        model.step_many(X, U[:10])
    with pytest.raises(InputError, match=r"X must have shape \(N, 4\)"):
        model.step_many(X[:, :3], U)
