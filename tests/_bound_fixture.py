"""A small fitted model with a horizon-level conformal bound, built by the public API only, so
that the code of any version builds the same one (``tests/fixtures/pendulum_v2.vimpc`` holds
it as the ``vimpc.DiscreteModel/2`` writer saved it, with its bound described in
``info["bound"]``)."""

from __future__ import annotations

import numpy as np

from vimpc.data import Dataset, add_noise, rollout_model
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel

DT = 0.1


def pendulum_data(rng: np.random.Generator, n: int, T: int) -> Dataset:
    """``n`` trajectories of ``T`` steps of a pendulum with friction 0.3 (the 'true' system
    the frictionless nominal model does not know), observed with 1e-3 noise."""
    truth = NominalModel(Pendulum(friction=[0.3]), DT).discrete_model()
    x0 = rng.uniform([-2.0, -2.0], [2.0, 2.0], size=(n, 2))
    inputs = rng.uniform(-2.0, 2.0, size=(n, T, 1))
    states = rollout_model(truth, x0, inputs)
    t = np.tile(np.arange(T + 1) * DT, (n, 1))
    return add_noise(Dataset(t, states, states, inputs, DT, {"system": "Pendulum"}), 1e-3, rng)


def datasets() -> tuple[Dataset, Dataset]:
    """``(train, calibration)``: 20 trajectories of 10 steps each, of a pendulum with
    friction 0.3 observed with 1e-3 noise."""
    rng = np.random.default_rng(2024)
    return pendulum_data(rng, 20, 10), pendulum_data(rng, 20, 10)


def fitted_family() -> NominalModel:
    """A frictionless pendulum with a conformal bound over 5-step horizons at delta 0.2, its
    scale chosen on the training data (``conformal_scale = "auto"``)."""
    train, cal = datasets()
    family = NominalModel(
        Pendulum(),
        DT,
        integrator="rk4",
        bound="conformal",
        delta=0.2,
        conformal_scale="auto",
        bound_level="horizon",
        bound_horizon=5,
    )
    return family.fit(train, cal)
