"""The discrete-Lagrangian paper's data (Lishkova et al.), shared by
``tests/benchmarks/bench_dlnn.py`` and ``tests/experiments/dlnn_reproduction.py`` (not a
test module).

Ground truth, as the authors make it: the midpoint variational integrator of the true
Lagrangian at the fine step ``h / 100``, every 100th point kept.

- Cart-pendulum (``CartPendulum``, m = M = l = 1, g = 9.81, upright at phi = 0), h = 0.01 s,
  training start ``(s, phi, s', phi') = (0.1, 0.1, 0, 0)``, test start
  ``(-1.1, -0.1, 0.1, -0.1)``, 200 training steps.
- Kepler (``Kepler`` with ``m = m2 = 100``, ``k = gamma m1 = 0.4004``), h = 0.1 s, start
  ``(x, y, x', y') = (1, 0, 0, 0.6)``, test start ``(1.1, -0.01, 0, 0.6)``, 50 training steps;
  the noisy variant adds N(0, ``noise``^2) (standard deviation ``noise``, 0.001 in the
  authors' code) to every observed position.
"""

from __future__ import annotations

import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.data.rollout import rollout_model
from vimpc.integrators import VariationalIntegrator
from vimpc.mechanics import CartPendulum, Kepler
from vimpc.models._integrated import integrator_model

SUBSTEPS = 100

CART = {
    "h": 0.01,
    "steps": 200,
    "x0": (0.1, 0.1, 0.0, 0.0),
    "test_x0": (-1.1, -0.1, 0.1, -0.1),
}
KEPLER = {
    "h": 0.1,
    "steps": 50,
    "x0": (1.0, 0.0, 0.0, 0.6),
    "test_x0": (1.1, -0.01, 0.0, 0.6),
}
KEPLER_PARAMS = {"m": 100.0, "k": 0.4004}
NOISE = 0.001


def cart_system() -> CartPendulum:
    return CartPendulum()


def kepler_system() -> Kepler:
    return Kepler(**KEPLER_PARAMS)


def truth(system, h: float, x0, steps: int) -> np.ndarray:
    """States ``(steps + 1, 2 nq)`` from ``x0``: the midpoint integrator at ``h / 100``,
    every 100th point."""
    model = integrator_model(VariationalIntegrator(system, "midpoint"), h, substeps=SUBSTEPS)
    U = np.zeros((1, steps, system.nu))
    return rollout_model(model, np.asarray([x0], dtype=float), U)[0]


def dataset(system, h: float, X: np.ndarray, noise: float = 0.0, seed: int = 0) -> Dataset:
    """One unforced trajectory ``X`` ``(T + 1, 2 nq)`` as a Dataset; with ``noise > 0`` the
    observed positions get N(0, noise^2) added (``seed``: the noise's)."""
    obs = np.array(X[None], dtype=float)
    if noise > 0:
        rng = np.random.default_rng(seed)
        obs[..., : system.nq] += rng.normal(0.0, noise, obs[..., : system.nq].shape)
    T = len(X) - 1
    t = h * np.arange(T + 1)[None]
    return Dataset(t, obs, X[None], np.zeros((1, T, system.nu)), h, {"system": system.name})


def cart_data(steps: int = CART["steps"]) -> Dataset:
    """The cart-pendulum training trajectory (``steps`` steps from the training start)."""
    s = cart_system()
    return dataset(s, CART["h"], truth(s, CART["h"], CART["x0"], steps))
