"""A model against data: one-step transitions, prediction errors, bound coverage."""

from __future__ import annotations

import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.data.rollout import rollout_model
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError


def _map(fn, n: int, *columns: np.ndarray) -> np.ndarray:
    """``fn`` over the rows of ``columns`` (each ``(n, k)``); returns ``(n, n_out)``."""
    return np.asarray(fn.map(n)(*[c.T for c in columns]), dtype=np.float64).reshape(-1, n).T


def transitions(model: DiscreteModel, data: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The measured one-step transitions of ``data`` in the model's state coordinates.

    Returns ``X, U, X_next`` of shapes ``(m, nx)``, ``(m, nu)``, ``(m, nx)`` with
    ``X = from_obs(obs_k)`` and ``X_next = from_obs(obs_{k+1})``.
    """
    check_compatible(model, data)
    obs, U, obs_next = data.pairs("obs")
    m = len(U)
    return _map(model.from_obs, m, obs), U, _map(model.from_obs, m, obs_next)


def one_step_errors(model: DiscreteModel, data: Dataset, p: np.ndarray | None = None) -> np.ndarray:
    """``X_next - step(X, U, p)`` for every measured transition of ``data``, ``(m, nx)``."""
    X, U, X_next = transitions(model, data)
    p = model.p_default if p is None else np.asarray(p, dtype=np.float64)
    P = np.tile(p, (len(U), 1))
    return X_next - _map(model.step, len(U), X, U, P)


def failed_transitions(errors: np.ndarray, data: Dataset) -> list[tuple[int, int]]:
    """``(trajectory, step)`` of every row of ``errors`` (from :func:`one_step_errors` on
    ``data``) that is not finite: where the model's step failed (NaN)."""
    rows = np.flatnonzero(~np.all(np.isfinite(errors), axis=1))
    return [(int(i) // data.n_steps, int(i) % data.n_steps) for i in rows]


def describe_failures(failed: list[tuple[int, int]], n: int, what: str) -> str:
    """``"the model's step failed (NaN) on 3 of 400 <what> transitions: trajectory 0 step 4,
    ..."``, the first five named."""
    named = ", ".join(f"trajectory {i} step {k}" for i, k in failed[:5])
    more = ", ..." if len(failed) > 5 else ""
    return (
        f"the model's step failed (NaN: no root of its equations, or a spurious one) on "
        f"{len(failed)} of {n} {what} transitions: {named}{more}"
    )


def bound_values(model: DiscreteModel, X: np.ndarray, U: np.ndarray, p=None) -> np.ndarray:
    """``bound(X, U, p)`` row by row, ``(m, nx)``."""
    if model.bound is None:
        raise InputError("the model has no bound")
    p = model.p_default if p is None else np.asarray(p, dtype=np.float64)
    return _map(model.bound, len(U), X, U, np.tile(p, (len(U), 1)))


def coverage(model: DiscreteModel, data: Dataset) -> float:
    """Fraction of the measured transitions of ``data`` whose error lies within the model's
    bound in every entry at once (the event the bound promises with probability
    ``1 - delta``)."""
    X, U, _ = transitions(model, data)
    errors = np.abs(one_step_errors(model, data))
    return float(np.mean(np.all(errors <= bound_values(model, X, U), axis=1)))


def prediction_errors(model: DiscreteModel, data: Dataset, steps: int) -> np.ndarray:
    """Errors of ``steps``-step open-loop predictions in the observation, ``(m, nobs)``.

    From every sample ``k`` of every trajectory with ``k + steps`` inside it, ``step`` is
    rolled ``steps`` times from ``from_obs(obs_k)`` under the recorded inputs and compared
    with ``obs_{k + steps}``.
    """
    check_compatible(model, data)
    T = data.n_steps
    if not 1 <= steps <= T:
        raise InputError(f"steps must be in [1, {T}] (the trajectories' length), got {steps}")
    starts = range(T - steps + 1)
    obs0 = np.concatenate([data.obs[:, k] for k in starts])
    inputs = np.concatenate([data.inputs[:, k : k + steps] for k in starts])
    target = np.concatenate([data.obs[:, k + steps] for k in starts])
    x0 = _map(model.from_obs, len(obs0), obs0)
    final = rollout_model(model, x0, inputs)[:, -1]
    return _map(model.to_obs, len(final), final) - target


def check_compatible(model: DiscreteModel, data: Dataset) -> None:
    """Refuse data whose step, observation or input size differ from the model's."""
    check_data(model.dt, model.nobs, model.nu, data)


def check_data(dt: float, nobs: int, nu: int, data: Dataset, what: str = "the data") -> None:
    """Refuse data not sampled every ``dt`` or not of ``nobs`` observations and ``nu`` inputs."""
    if not isinstance(data, Dataset):
        raise InputError(f"{what} must be a vimpc.data.Dataset, got {type(data).__name__}")
    if abs(data.dt - dt) > 1e-9 * dt:
        raise InputError(
            f"{what} are sampled every {data.dt} s but the model steps {dt} s; collect data "
            "at the model's dt"
        )
    if data.nobs != nobs or data.nu != nu:
        raise InputError(
            f"{what} have {data.nobs} observations and {data.nu} inputs per sample, the model "
            f"{nobs} and {nu}; they come from another system"
        )
