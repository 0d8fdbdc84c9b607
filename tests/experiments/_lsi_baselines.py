"""The baselines of the LSI paper (Ober-Blöbaum & Offen, sec. 2.5.3 and 3): a Lagrangian
learned from velocities and accelerations (LGP) and a GP of the flow map (GPFlow).

:class:`LagrangianGP` (LGP) learns the *true* Lagrangian ``L(q, v) = sum_j alpha_j k_j(q, v)``
(the kernels of :mod:`vimpc.models._kernel_lagrangian`, centred at the training points
``(q, qdot)``) from the continuous Euler–Lagrange equations at those points,

    dL/dq - (d^2L/dv dq) qdot - (d^2L/dv^2) qddot = 0,

one row per point and coordinate (the paper's printed eq. 19 has a sign and an index
slip; this is the Euler–Lagrange equation itself), with the non-triviality and
normalisation rows of :func:`~vimpc.models._kernel_lagrangian.solve`. From position
snapshots the velocities and accelerations are central differences, as the authors:
``qdot_k = (q_{k+1} - q_{k-1}) / 2h`` at the interior snapshots and ``qddot_k`` the central
difference of those, ``(q_{k+2} - 2 q_k + q_{k-2}) / 4h^2``, so the first two and the last
two snapshots of each trajectory give no point (:meth:`LagrangianGP.fit`). The paper's
LGPExact takes exact ``(q, qdot, qddot)`` instead (:meth:`LagrangianGP.fit_exact`).
The learned ``L`` is integrated with the variational rule as it is (``momentum_order``
0): ``H^[[0]]`` is its own energy (system identification, "LGP without BEA"), ``H^[[2]]``
the energy its discrete motions keep ("LGP with BEA").

:class:`FlowMapGP` (GPFlow) fits one GP per state entry to the one-step increments
``(q_{k+1} - q_k, qdot_{k+1} - qdot_k)`` as functions of ``(q_k, qdot_k)``, the velocities
again central differences of the snapshots; it keeps no structure.

Both learn unforced motions only (data with inputs are refused) and read only the
positions of the data, like LSI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vimpc import _settings
from vimpc._settings import POSITIVE, SEED, Setting
from vimpc.data.dataset import Dataset
from vimpc.errors import InputError, NotFittedError
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _bea as bea
from vimpc.models._kernel_lagrangian import (
    KernelBasis,
    LagrangianDynamics,
    check_regularity,
    solve,
)
from vimpc.models.evaluation import check_data
from vimpc.models.families.lsi import check_conservative, snapshots


# -- shared checks ---------------------------------------------------------------------------
def _positions(system: MechanicalSystem, dt: float, data: Dataset, what: str, least: int):
    """The checked positions ``(N, T + 1, n)`` of unforced ``data`` with at least ``least``
    snapshots per trajectory."""
    check_data(dt, system.nq + system.nv, system.nu, data, "the data")
    name = data.metadata.get("system")
    if name is not None and name != system.name:
        raise InputError(f"the data were collected from a {name}, the model is of a {system.name}")
    Q, U = snapshots(data, system.nq, what)
    if Q.shape[1] < least:
        raise InputError(
            f"{what} needs at least {least} snapshots per trajectory (central differences of "
            f"the velocities); the data have {Q.shape[1]}"
        )
    if np.any(U != 0):
        raise InputError(
            f"{what} learns from unforced motions; the data have nonzero inputs (in "
            f"{int(np.any(U != 0, axis=(1, 2)).sum())} trajectories): collect them with zero input"
        )
    return Q


def central_differences(Q: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Velocities ``(q_{k+1} - q_{k-1}) / 2h`` at the interior snapshots ``1 .. T - 1`` of the
    trajectories ``Q (N, T + 1, n)``, ``(N, T - 1, n)``, and the central differences of those,
    ``(q_{k+2} - 2 q_k + q_{k-2}) / 4h^2`` at ``2 .. T - 2``, ``(N, T - 3, n)``."""
    V = (Q[:, 2:] - Q[:, :-2]) / (2.0 * h)
    return V, (V[:, 2:] - V[:, :-2]) / (2.0 * h)


def _resolve(obj: Any, settings: dict[str, Any]) -> None:
    values = _settings.resolve(settings, type(obj).settings, error=InputError)
    obj._settings = values
    for key, value in values.items():
        setattr(obj, key, value)


def _require(obj: Any, call: str) -> None:
    if not hasattr(obj, "fit_time_"):
        raise NotFittedError(
            f"this {type(obj).__name__} is not fitted yet: call fit(data) before {call}"
        )


# -- the Lagrangian GP -----------------------------------------------------------------------
def euler_lagrange_rows(basis: KernelBasis, X: np.ndarray, A: np.ndarray) -> np.ndarray:
    """The rows ``dk/dq - (d^2k/dv dq) qdot - (d^2k/dv^2) qddot`` of every kernel at the
    points ``X = (q, qdot) (K, 2n)`` with accelerations ``A (K, n)``: ``(K n, M)``, point
    by point, coordinate by coordinate."""
    n = basis.nq
    G = basis.gradients(X)  # (K, 2n, M)
    Hs = basis.hessians(X)  # (K, 2n, 2n, M)
    rows = (
        G[:, :n]
        - np.einsum("kilm,kl->kim", Hs[:, n:, :n], X[:, n:])
        - np.einsum("kilm,kl->kim", Hs[:, n:, n:], A)
    )
    return rows.reshape(-1, basis.size)


class LagrangianGP:
    """The paper's LGP: a kernel Lagrangian learned from the continuous Euler–Lagrange
    equations at points ``(q, qdot, qddot)`` (module docstring).

    Args:
        system: the structure (coordinates; unconstrained, without friction).
        dt: the step ``h`` of the snapshots and of the variational integrator.
        rule, length, scale, volume: see :attr:`settings`.

    Fitted attributes: ``points_`` (the ``(q, qdot)`` rows, also the kernel centres),
    ``accelerations_``, ``kernel_``, ``collocation_``, ``dynamics_`` (a
    :class:`~vimpc.models._kernel_lagrangian.LagrangianDynamics` with ``momentum_order`` 0) and
    ``fit_time_``.
    """

    settings = {
        "rule": Setting(
            str, "midpoint", "variational rule the learned Lagrangian is integrated with",
            choices=tuple(bea.RULES),
        ),
        "length": Setting(float, 5.0, "the kernel's length e", rule=POSITIVE),
        "scale": Setting(float, 1.0, "the kernel's scale c", rule=POSITIVE),
        "volume": Setting(float, 1.0, "the non-triviality constant c of eq. 15", rule=POSITIVE),
    }  # fmt: skip

    def __init__(self, system: MechanicalSystem, dt: float, **settings: Any) -> None:
        self.system = check_conservative(system, "lgp")
        if not (isinstance(dt, (int, float)) and not isinstance(dt, bool) and dt > 0):
            raise InputError(f"dt must be a positive step, got {dt!r}")
        self.dt = float(dt)
        _resolve(self, settings)

    def fit(self, data: Dataset) -> LagrangianGP:
        """Fit on the positions of unforced ``data`` (at least 5 snapshots per trajectory),
        with velocities and accelerations by central differences (module docstring)."""
        start = time.perf_counter()
        Q = _positions(self.system, self.dt, data, "lgp", 5)
        V, A = central_differences(Q, self.dt)
        n = self.system.nq
        X = np.concatenate([Q[:, 2:-2], V[:, 1:-1]], axis=2).reshape(-1, 2 * n)
        return self._fit(X, A.reshape(-1, n), start)

    def fit_exact(self, q, qdot, qddot) -> LagrangianGP:
        """Fit on given points ``q``, ``qdot``, ``qddot`` (each ``(K, n)``, or ``(K,)`` for
        one coordinate): the paper's LGPExact."""
        start = time.perf_counter()
        n = self.system.nq
        arrays = []
        for name, a in (("q", q), ("qdot", qdot), ("qddot", qddot)):
            a = np.asarray(a, dtype=np.float64)
            a = a.reshape(-1, 1) if (n == 1 and a.ndim == 1) else a
            if a.ndim != 2 or a.shape[1] != n:
                raise InputError(f"{name} must have shape (K, {n}), got {np.shape(a)}")
            if not np.all(np.isfinite(a)):
                raise InputError(f"lgp: {name} contains NaN or inf")
            arrays.append(a)
        if len({len(a) for a in arrays}) != 1 or len(arrays[0]) == 0:
            raise InputError(
                f"q, qdot and qddot must have the same number K >= 1 of rows, got "
                f"{[len(a) for a in arrays]}"
            )
        return self._fit(np.hstack(arrays[:2]), arrays[2], start)

    def _fit(self, X: np.ndarray, A: np.ndarray, start: float) -> LagrangianGP:
        n = self.system.nq
        basis = KernelBasis(X.copy(), self.scale, self.length, n)
        rows = euler_lagrange_rows(basis, X, A)
        col = solve(rows, np.zeros(len(rows)), basis, self.volume, "lgp")
        dynamics = LagrangianDynamics(col.lagrangian, self.rule, self.dt, 0, X)
        check_regularity(dynamics, "lgp")
        self.points_, self.accelerations_ = X, A
        self.kernel_, self.collocation_, self.dynamics_ = col.lagrangian, col, dynamics
        self.fit_time_ = time.perf_counter() - start
        return self

    # -- what the fitted model offers ------------------------------------------------------------
    def lagrangian(self, q, qdot, order: int = 0) -> np.ndarray:
        """``L^[[order]]`` (order 0: the learned ``L``), vectorised."""
        _require(self, "lagrangian()")
        return self.dynamics_.lagrangian(q, qdot, order)

    def hamiltonian(self, q, qdot, order: int = 0) -> np.ndarray:
        """``H^[[order]]``: order 0 the learned energy, 2 the one its discrete motions keep."""
        _require(self, "hamiltonian()")
        return self.dynamics_.hamiltonian(q, qdot, order)

    def hamiltonian_gradient(self, q, qdot, order: int = 0) -> np.ndarray:
        """``dH^[[order]]/d(q, qdot)`` by automatic differentiation, ``(..., 2n)``."""
        _require(self, "hamiltonian_gradient()")
        return self.dynamics_.hamiltonian_gradient(q, qdot, order)

    def positions(self, q0, qdot0, steps: int, **kwargs: Any) -> np.ndarray:
        """Snapshots of the variational integrator: :meth:`LagrangianDynamics.positions`."""
        _require(self, "positions()")
        return self.dynamics_.positions(q0, qdot0, steps, **kwargs)

    def velocities(self, positions: np.ndarray, qdot0=None) -> np.ndarray:
        """Velocities at snapshots: :meth:`LagrangianDynamics.velocities`."""
        _require(self, "velocities()")
        return self.dynamics_.velocities(positions, qdot0)


# -- the flow-map GP -------------------------------------------------------------------------
#: the noise variance's floor relative to the signal variance (sklearn's default alpha is
#: 1e-10): exact data drive the fitted noise to ~0, where the kernel matrix of long length
#: scales does not factorise
_NOISE_FLOOR = 1e-10


def _exact_posterior(Z: np.ndarray, y: np.ndarray, hp):
    """The exact posterior with the noise variance at least ``_NOISE_FLOOR`` times the
    signal variance, raised tenfold until the kernel matrix factorises."""
    import dataclasses

    from vimpc.models import _gp as gp

    noise = max(hp.noise_var, _NOISE_FLOOR * hp.signal_var)
    for _ in range(8):
        try:
            return gp.Posterior.exact(Z, y, dataclasses.replace(hp, noise_var=noise))
        except np.linalg.LinAlgError:
            noise *= 10.0
    raise InputError(
        f"flow-map GP: the kernel matrix does not factorise even with noise variance {noise:.2g} "
        f"(signal variance {hp.signal_var:.2g}, length scales {hp.lengthscales.tolist()}): "
        "duplicate training points?"
    )


class FlowMapGP:
    """GPFlow: one GP per state entry of the one-step increment ``x_{k+1} - x_k`` as a
    function of ``x_k = (q_k, qdot_k)``, the velocities central differences of the
    snapshots (module docstring); hyperparameters by maximum marginal likelihood
    (:func:`vimpc.models._gp.fit_hyperparameters`), exact posterior means (the noise
    variance floored at ``1e-10`` times the signal variance, as sklearn's default ``alpha``).

    Args:
        system: the structure (coordinates; unconstrained, without friction).
        dt: the step of the snapshots and of the map.
        restarts, iterations, seed: see :attr:`settings`.

    Fitted attributes: ``inputs_``, ``targets_`` (the training pairs), ``posteriors_`` (one
    :class:`~vimpc.models._gp.Posterior` per state entry) and ``fit_time_``.
    """

    settings = {
        "restarts": Setting(int, 3, "starts of the marginal-likelihood optimisation", rule=POSITIVE),
        "iterations": Setting(int, 200, "L-BFGS iterations per start", rule=POSITIVE),
        "seed": Setting(int, 0, "seed of the optimisation's starts", rule=SEED),
    }  # fmt: skip

    def __init__(self, system: MechanicalSystem, dt: float, **settings: Any) -> None:
        self.system = check_conservative(system, "flow-map GP")
        if not (isinstance(dt, (int, float)) and not isinstance(dt, bool) and dt > 0):
            raise InputError(f"dt must be a positive step, got {dt!r}")
        self.dt = float(dt)
        _resolve(self, settings)

    def fit(self, data: Dataset) -> FlowMapGP:
        """Fit on the positions of unforced ``data`` (at least 4 snapshots per trajectory):
        the pairs ``(x_k, x_{k+1})`` of consecutive interior snapshots."""
        from vimpc.models import _gp as gp

        start = time.perf_counter()
        Q = _positions(self.system, self.dt, data, "flow-map GP", 4)
        V, _ = central_differences(Q, self.dt)
        n = self.system.nq
        S = np.concatenate([Q[:, 1:-1], V], axis=2)  # (N, T - 1, 2n)
        Z = S[:, :-1].reshape(-1, 2 * n)
        Y = (S[:, 1:] - S[:, :-1]).reshape(-1, 2 * n)
        posteriors = []
        for i in range(2 * n):
            hp = gp.fit_hyperparameters(
                Z, Y[:, i], restarts=self.restarts, iterations=self.iterations, seed=self.seed + i
            )
            posteriors.append(_exact_posterior(Z, Y[:, i], hp))
        self.inputs_, self.targets_, self.posteriors_ = Z, Y, posteriors
        # stacked for the rollout: inverse lengths (2n, d), signal variances, weights (2n, m)
        self._inverse = np.array([1.0 / p.hp.lengthscales for p in posteriors])
        self._signal = np.array([p.hp.signal_var for p in posteriors])
        self._alpha = np.array([p.alpha for p in posteriors])
        self.fit_time_ = time.perf_counter() - start
        return self

    def predict(self, X) -> np.ndarray:
        """The next states ``x + mean increment`` of the rows ``X (K, 2n)``, ``(K, 2n)``."""
        _require(self, "predict()")
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1:] != (2 * self.system.nq,):
            raise InputError(f"X must have shape (K, {2 * self.system.nq}), got {X.shape}")
        return X + np.stack([p.mean(X) for p in self.posteriors_], axis=1)

    def _step(self, x: np.ndarray) -> np.ndarray:
        d = (x[None, None, :] - self.inputs_[None]) * self._inverse[:, None, :]  # (2n, m, d)
        k = self._signal[:, None] * np.exp(-0.5 * np.einsum("imd,imd->im", d, d))
        return x + np.einsum("im,im->i", k, self._alpha)

    def states(
        self,
        q0,
        qdot0,
        steps: int,
        *,
        until: Callable[[np.ndarray], np.ndarray] | None = None,
        chunk: int = 2000,
    ) -> np.ndarray:
        """The states ``x_0 ... x_steps`` of the map from ``(q0, qdot0)``, ``(K + 1, 2n)``;
        the run stops early (and returns what it has) at the first state that is not finite
        or whose positions make ``until`` (on an array of positions, returning booleans)
        true, checked every ``chunk`` steps."""
        _require(self, "states()")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InputError(f"steps must be a positive int, got {steps!r}")
        n = self.system.nq
        x = np.concatenate(
            [
                np.asarray(q0, dtype=np.float64).reshape(n),
                np.asarray(qdot0, dtype=np.float64).reshape(n),
            ]
        )
        out = [x[None]]
        if until is not None and np.any(until(x[None, :n])):
            return out[0]
        done = 0
        with np.errstate(all="ignore"):
            while done < steps:
                k = min(chunk, steps - done)
                new = np.empty((k, 2 * n))
                for j in range(k):
                    x = self._step(x)
                    new[j] = x
                bad = ~np.all(np.isfinite(new), axis=1)
                if until is not None:
                    bad = bad | np.asarray(until(new[:, :n]), dtype=bool)
                if np.any(bad):
                    out.append(new[: int(np.argmax(bad)) + 1])
                    break
                out.append(new)
                done += k
        return np.vstack(out)

    def positions(self, q0, qdot0, steps: int, **kwargs: Any) -> np.ndarray:
        """The positions of :meth:`states`, ``(K + 1, n)``."""
        return self.states(q0, qdot0, steps, **kwargs)[:, : self.system.nq]
