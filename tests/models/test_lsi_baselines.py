"""The LSI paper's baselines: the Lagrangian GP (its collocation rows, finite differences,
the exact variant) and the flow-map GP, and their bad input."""

from __future__ import annotations

import functools
import warnings

import casadi as ca
import numpy as np
import pytest
from experiments._lsi_baselines import (
    FlowMapGP,
    LagrangianGP,
    central_differences,
    euler_lagrange_rows,
)
from test_lsi import PENDULUM, _quiet_fit, dataset, pendulum_energy_gradient

from vimpc.errors import FitWarning, InputError, NotFittedError
from vimpc.mechanics import HenonHeiles, Pendulum
from vimpc.models._kernel_lagrangian import KernelBasis, KernelLagrangian


def _exact_pendulum_points(n=120):
    """``(q, qdot, qddot)`` of the pendulum ``qddot = -sin q`` on a Halton set."""
    from vimpc.data.sampling import halton

    X = halton([-np.pi, -1.2], [np.pi, 1.2], n, seed=3)
    return X[:, 0], X[:, 1], -np.sin(X[:, 0])


@pytest.mark.parametrize("reversible", [False, True])
def test_lgp_rows_are_the_euler_lagrange_equations_of_its_lagrangian(reversible):
    # the rows times alpha are dL/dq - (d^2L/dv dq) qdot - (d^2L/dv^2) qddot of the kernel
    # Lagrangian, by CasADi's AD; two coordinates, so the mixed block's index order counts
    rng = np.random.default_rng(0)
    lengths = np.array([0.9, 1.4, 1.1, 0.7])
    basis = KernelBasis(rng.uniform(-1, 1, (7, 4)), 1.3, lengths, 2, reversible=reversible)
    L = KernelLagrangian(basis, rng.normal(size=7))
    q, v, a = (ca.SX.sym(k, 2) for k in "qva")
    Lqv = L.casadi(q, v)
    p = ca.gradient(Lqv, v)
    el = ca.gradient(Lqv, q) - ca.mtimes(ca.jacobian(p, q), v) - ca.mtimes(ca.jacobian(p, v), a)
    el = ca.Function("el", [q, v, a], [el])
    X, A = rng.uniform(-1, 1, (5, 4)), rng.uniform(-1, 1, (5, 2))
    expected = np.concatenate(
        [np.asarray(el(x[:2], x[2:], acc)).ravel() for x, acc in zip(X, A, strict=True)]
    )
    np.testing.assert_allclose(euler_lagrange_rows(basis, X, A) @ L.alpha, expected, atol=1e-12)


def test_central_differences_are_exact_on_a_parabola():
    t = 0.3 * np.arange(7)
    Q = (1.0 + 2.0 * t - 1.5 * t**2)[None, :, None]
    V, A = central_differences(Q, 0.3)
    np.testing.assert_allclose(V[0, :, 0], 2.0 - 3.0 * t[1:-1], atol=1e-12)
    np.testing.assert_allclose(A[0, :, 0], -3.0, atol=1e-12)


def test_lgp_exact_recovers_the_pendulum_level_sets():
    # the paper's LGPExact: with exact (q, qdot, qddot) the learned energy H^[[0]] has the
    # true level sets (paper: nu = 3.4e-5 on 2400 points; here 120 points, 1.6e-4 measured),
    # while the energy its midpoint motions keep at h = 0.5, H^[[2]], does not
    model = _quiet_fit_exact(LagrangianGP(PENDULUM, 0.5, length=5.0), *_exact_pendulum_points())
    q, v = np.meshgrid(np.linspace(-1.2, 1.2, 12), np.linspace(-0.6, 0.6, 12))
    ref = pendulum_energy_gradient(q, v)
    from _lsi_systems import level_set_mismatch

    nu0 = level_set_mismatch(ref, model.hamiltonian_gradient(q, v, 0))
    nu2 = level_set_mismatch(ref, model.hamiltonian_gradient(q, v, 2))
    assert nu0 < 1e-3
    assert nu2 > 10 * nu0


def _quiet_fit_exact(model, q, qdot, qddot):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        return model.fit_exact(q, qdot, qddot)


@functools.cache
def _small_pendulum_data(n=24, steps=6, h=0.2, seed=0):
    from vimpc.data.sampling import halton

    return dataset(PENDULUM, halton([-2.0, -1.0], [2.0, 1.0], n, seed=seed), h, steps)


def test_lgp_from_snapshots_uses_the_interior_central_differences():
    data = _small_pendulum_data()
    model = _quiet_fit(LagrangianGP(PENDULUM, 0.2, length=5.0), data)
    Q = data.obs[:, :, :1]
    assert model.points_.shape == (24 * 3, 2)  # snapshots 2 .. T-2 of 7
    np.testing.assert_allclose(model.points_[:3, 0], Q[0, 2:5, 0])
    np.testing.assert_allclose(model.points_[0, 1], (Q[0, 3, 0] - Q[0, 1, 0]) / 0.4)
    np.testing.assert_allclose(
        model.accelerations_[0, 0], (Q[0, 4, 0] - 2 * Q[0, 2, 0] + Q[0, 0, 0]) / 0.16
    )
    # its own energy is close to the true one's level sets (central-difference error only)
    q, v = np.meshgrid(np.linspace(-1.2, 1.2, 10), np.linspace(-0.6, 0.6, 10))
    from _lsi_systems import level_set_mismatch

    assert (
        level_set_mismatch(pendulum_energy_gradient(q, v), model.hamiltonian_gradient(q, v)) < 0.02
    )
    # and the momentum of its initial value problem is its own dL/dv (momentum_order 0)
    assert model.dynamics_.momentum_order == 0
    qs = model.positions(0.3, 0.0, 20)
    assert qs.shape == (21, 1) and np.all(np.isfinite(qs))


def test_the_flow_map_gp_predicts_one_step_on_held_out_data():
    data = _small_pendulum_data()
    model = FlowMapGP(PENDULUM, 0.2, restarts=1, iterations=60).fit(data)
    assert model.inputs_.shape == (24 * 4, 2)  # pairs of consecutive interior snapshots
    held = _small_pendulum_data(n=10, seed=7)
    X, Y = held.states[:, :-1].reshape(-1, 2), held.states[:, 1:].reshape(-1, 2)
    inside = np.all(np.abs(X) <= [1.8, 0.9], axis=1)
    error = np.abs(model.predict(X[inside]) - Y[inside])
    increment = np.abs(Y[inside] - X[inside])
    assert error.max() < 0.02 * increment.max()
    # the rollout is the map iterated, and it stops where `until` says
    xs = model.states(0.3, 0.0, 5)
    np.testing.assert_allclose(xs[1], model.predict(xs[:1])[0], atol=1e-12)
    np.testing.assert_allclose(xs[5], model.predict(xs[4:5])[0], atol=1e-12)
    stopped = model.positions(0.3, 0.0, 50, until=lambda qs: qs[:, 0] < 0.0, chunk=7)
    assert stopped[-1, 0] < 0.0 and np.all(stopped[:-1, 0] >= 0.0)


def test_the_baselines_refuse_bad_input():
    data = _small_pendulum_data()
    with pytest.raises(InputError, match="unforced"):
        LagrangianGP(PENDULUM, 0.2).fit(data.replace(inputs=np.ones_like(data.inputs)))
    with pytest.raises(InputError, match="at least 5 snapshots"):
        LagrangianGP(PENDULUM, 0.2).fit(
            data.replace(t=data.t[:, :4], obs=data.obs[:, :4], states=data.states[:, :4],
                         inputs=data.inputs[:, :3])
        )  # fmt: skip
    with pytest.raises(InputError, match="sampled every"):
        FlowMapGP(PENDULUM, 0.5).fit(data)
    with pytest.raises(InputError, match="friction"):
        LagrangianGP(Pendulum(friction=0.1), 0.2)
    with pytest.raises(InputError, match="length"):
        LagrangianGP(PENDULUM, 0.2, length=-1.0)
    with pytest.raises(InputError, match="same number"):
        LagrangianGP(PENDULUM, 0.2).fit_exact(np.zeros(3), np.zeros(4), np.zeros(3))
    with pytest.raises(InputError, match=r"shape \(K, 2\)"):
        LagrangianGP(HenonHeiles(), 0.1).fit_exact(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(NotFittedError):
        FlowMapGP(PENDULUM, 0.2).positions(0.0, 0.0, 3)
    with pytest.raises(NotFittedError):
        LagrangianGP(PENDULUM, 0.2).hamiltonian(0.0, 0.0)
