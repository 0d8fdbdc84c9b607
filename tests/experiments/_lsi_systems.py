"""The LSI paper's systems, data and metric (Ober-Blöbaum & Offen, sec. 3).

- the mathematical pendulum ``L = 1/2 qdot^2 + cos q``: the catalog's uniform rod with
  ``m = 3``, ``l = 1`` (so ``J = m l^2 / 12 = 1/4`` and ``J + m l^2 / 4 = 1``) and
  ``g = 2/3`` (so ``m g l / 2 = 1``);
- Hénon–Heiles with ``alpha = 0.8``.

Snapshots come from the exact flow (RK4 with 500 substeps per snapshot step for batches,
DOP853 with tolerances 1e-13 for single runs), positions and velocities, unforced; the
learners see positions only.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from vimpc.data.dataset import Dataset
from vimpc.data.sampling import halton
from vimpc.integrators import acceleration
from vimpc.mechanics import HenonHeiles, Pendulum

PENDULUM = Pendulum(m=3.0, l=1.0, g=2.0 / 3.0)
HENON_HEILES = HenonHeiles(alpha=0.8)


def flow(system, x0: np.ndarray, h: float, steps: int, u=None) -> np.ndarray:
    """Snapshots ``(steps + 1, 2n)`` of the exact motion from ``x0`` every ``h`` (input
    ``u`` per step, ``(steps, nu)``, held over each step; zero if None)."""
    n = system.nq
    acc = acceleration(system)
    U = np.zeros((steps, system.nu)) if u is None else np.asarray(u, dtype=np.float64)
    out = [np.asarray(x0, dtype=np.float64)]
    x = out[0]
    if u is None:
        ts = h * np.arange(steps + 1)
        sol = solve_ivp(
            lambda t, y: np.concatenate([y[n:], np.asarray(acc(y[:n], y[n:], U[0], [])).ravel()]),
            (0.0, ts[-1]), x, t_eval=ts, rtol=1e-13, atol=1e-13, method="DOP853",
        )  # fmt: skip
        return sol.y.T
    for k in range(steps):
        sol = solve_ivp(
            lambda t, y, k=k: np.concatenate(
                [y[n:], np.asarray(acc(y[:n], y[n:], U[k], [])).ravel()]
            ),
            (0.0, h), x, rtol=1e-13, atol=1e-13, method="DOP853",
        )  # fmt: skip
        x = sol.y[:, -1]
        out.append(x)
    return np.array(out)


def flow_batch(system, x0s: np.ndarray, h: float, steps: int, substeps: int = 500):
    """Unforced snapshots ``(N, steps + 1, 2n)`` from every row of ``x0s`` at once: classical
    RK4 with ``substeps`` steps per ``h`` (global error ~ (h / substeps)^4, 1e-13 at the
    paper's h = 0.5 and 500 substeps)."""
    n = system.nq
    acc = acceleration(system)
    N = len(x0s)
    f = acc.map(N)
    zero_u, zero_th = np.zeros((system.nu, N)), np.zeros((0, N))

    def rhs(X):
        return np.hstack([X[:, n:], np.asarray(f(X[:, :n].T, X[:, n:].T, zero_u, zero_th)).T])

    X = np.asarray(x0s, dtype=np.float64).copy()
    out, dt = [X.copy()], h / substeps
    for _ in range(steps):
        for _ in range(substeps):
            k1 = rhs(X)
            k2 = rhs(X + 0.5 * dt * k1)
            k3 = rhs(X + 0.5 * dt * k2)
            k4 = rhs(X + dt * k3)
            X = X + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(X.copy())
    return np.stack(out, axis=1)


def dataset(system, x0s: np.ndarray, h: float, steps: int, inputs=None) -> Dataset:
    """The exact snapshots of ``steps`` steps from each row of ``x0s`` as a Dataset."""
    N = len(x0s)
    U = np.zeros((N, steps, system.nu)) if inputs is None else np.asarray(inputs)
    if inputs is None:
        X = flow_batch(system, x0s, h, steps)
    else:
        X = np.stack([flow(system, x0, h, steps, U[i]) for i, x0 in enumerate(x0s)])
    t = np.tile(h * np.arange(steps + 1), (N, 1))
    return Dataset(
        t,
        X,
        X,
        U,
        h,
        {"system": system.name, "source": "exact flow (RK4, 500 substeps, or DOP853)"},
    )


def pendulum_data(n: int = 400, steps: int = 5, h: float = 0.5) -> Dataset:
    """The paper's pendulum set: Halton starts on [-pi, pi] x [-1.2, 1.2]."""
    x0s = halton([-np.pi, -1.2], [np.pi, 1.2], n, seed=0, scramble=False)
    return dataset(PENDULUM, x0s, h, steps)


def henon_heiles_data(n: int = 200, steps: int = 4, h: float = 0.1) -> Dataset:
    """The paper's Hénon–Heiles set: Halton starts on [-0.8, 0.8]^4."""
    x0s = halton([-0.8] * 4, [0.8] * 4, n, seed=0, scramble=False)
    return dataset(HENON_HEILES, x0s, h, steps)


def pendulum_energy(q, qdot):
    return 0.5 * np.asarray(qdot) ** 2 - np.cos(q)


def pendulum_energy_gradient(q, qdot):
    return np.stack([np.sin(q), np.asarray(qdot, dtype=float)], axis=-1)


def level_set_mismatch(grad_ref: np.ndarray, grad: np.ndarray) -> float:
    """``nu``: the mean over points of ``|sin|`` of the angle between two gradients (the
    area of the parallelogram of the normalised gradients), ``(..., 2)`` each."""
    a = grad_ref / np.linalg.norm(grad_ref, axis=-1, keepdims=True)
    b = grad / np.linalg.norm(grad, axis=-1, keepdims=True)
    return float(np.mean(np.abs(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0])))


def numerical_gradient(H, q, qdot, eps: float = 1e-5) -> np.ndarray:
    """Central-difference gradient of ``H(q, qdot)`` (vectorised) at the points, ``(..., 2)``."""
    dq = (H(q + eps, qdot) - H(q - eps, qdot)) / (2 * eps)
    dv = (H(q, qdot + eps) - H(q, qdot - eps)) / (2 * eps)
    return np.stack([dq, dv], axis=-1)
