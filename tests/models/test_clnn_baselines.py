"""The constrained-NN paper's angular-coordinate baselines (Neural ODE, HNN, DeLaN): the
coordinate maps, the HNN's and DeLaN's equations of motion, and their training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from experiments._clnn_baselines import EPS, KINDS, _Baseline, fit, to_angles, to_cartesian

from vimpc.data import rollout_model
from vimpc.mechanics import catalog
from vimpc.models import NominalModel

DT = 0.03


def chain(n: int):
    return catalog.make_system("NPendulum", n=n, friction=[0.0] * (2 * n))


def true_trajectories(system, n_traj: int, steps: int, seed: int, substeps: int = 20):
    """Cartesian trajectories of the chain from angles and rates ~ N(0, 1), by the midpoint
    variational integrator with ``substeps`` substeps per DT."""
    rng = np.random.default_rng(seed)
    k = system.nq // 2
    x0 = np.array([np.concatenate(system.from_angles(rng.normal(size=k), rng.normal(size=k)))
                   for _ in range(n_traj)])  # fmt: skip
    truth = NominalModel(system, DT, substeps=substeps).discrete_model()
    return rollout_model(truth, x0, np.zeros((n_traj, steps, 1)))


def test_angles_and_cartesian_coordinates_are_inverse():
    system = chain(3)
    X = true_trajectories(system, 4, 40, seed=0)
    Y = to_angles(system, X)
    np.testing.assert_allclose(to_cartesian(system, Y), X, atol=1e-12)
    # unwrapped: no jump of 2 pi between consecutive samples 0.03 s apart
    assert np.abs(np.diff(Y[:, :, :3], axis=1)).max() < 1.0


def _true_mass_and_potential(system):
    """The chain's mass matrix and potential in its link angles: ``M_ij = l_i l_j
    cos(theta_i - theta_j) sum_{k >= max(i, j)} m_k``, ``V = -g sum_k m_k sum_{i <= k} l_i
    cos theta_i``."""
    n = system.nq // 2
    m = torch.tensor([system.params[f"m{i + 1}"] for i in range(n)], dtype=torch.float64)
    lengths = torch.tensor([system.params[f"l{i + 1}"] for i in range(n)], dtype=torch.float64)
    tail = torch.flip(torch.cumsum(torch.flip(m, [0]), 0), [0])  # sum_{k >= i} m_k
    idx = torch.arange(n)
    outer_tail = tail[torch.maximum(idx[:, None], idx[None, :])]

    def mass(theta):
        c = torch.cos(theta[:, :, None] - theta[:, None, :])
        return lengths[:, None] * lengths[None, :] * outer_tail * c

    def potential(theta):
        return (-system.params["g"] * tail * lengths * torch.cos(theta)).sum()

    return mass, potential


@pytest.mark.parametrize("kind", ["hnn", "delan"])
def test_hnn_and_delan_with_the_true_mass_and_potential_move_as_the_chain(kind):
    # the baselines' equations of motion, given the chain's own M(theta) and V(theta),
    # reproduce its motion: RK4 with 10 steps per DT over 0.6 s against the second-order
    # variational integrator with 100 substeps per DT (3e-4 s: its error, measured 7e-5 at
    # 20 substeps, falls 25-fold; a wrong term in the equations would show at order 1)
    system = chain(3)
    X = true_trajectories(system, 3, 20, seed=1, substeps=100)
    Y = to_angles(system, X)
    mass, potential = _true_mass_and_potential(system)
    model = _Baseline(kind, 3, [4], seed=0)
    if kind == "hnn":  # M^-1 = L L^T
        model._factor = lambda th: torch.linalg.cholesky(torch.linalg.inv(mass(th)))
    else:  # M = L L^T + EPS I
        model._factor = lambda th: torch.linalg.cholesky(mass(th) - EPS * torch.eye(3))
    model._potential = potential
    s = model.to_state(torch.from_numpy(Y[:, 0]))
    h = DT / 10
    for _ in range(200):
        k1 = model.field(s)
        k2 = model.field(s + 0.5 * h * k1)
        k3 = model.field(s + 0.5 * h * k2)
        k4 = model.field(s + h * k3)
        s = (s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)).detach()
    pred = model.from_state(s).detach().numpy()
    np.testing.assert_allclose(pred, Y[:, -1], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_training_lowers_the_rollout_loss_and_repeats_exactly(kind):
    system = chain(2)
    X = true_trajectories(system, 6, 5, seed=2)
    Y = to_angles(system, X)
    a = fit(kind, Y, DT, hidden=[16], epochs=8, batch=3, seed=3)
    b = fit(kind, Y, DT, hidden=[16], epochs=8, batch=3, seed=3)
    assert a.record.loss == b.record.loss  # float64, seeded: the same numbers
    assert a.record.loss[-1] < a.record.loss[0]
    pred = a.rollout(Y[:, 0], 5, DT)
    assert pred.shape == Y.shape and np.all(np.isfinite(pred))
