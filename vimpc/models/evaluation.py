"""A model against data: one-step transitions, prediction errors, bound coverage, long
unforced rollouts."""

from __future__ import annotations

from typing import Any

import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.data.rollout import rollout_model
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics.system import MechanicalSystem


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


#: steps of the unforced model rollouts of :func:`long_rollout_metrics` (25 s at 0.05 s)
ROLLOUT_STEPS = 500
#: the most rollouts :func:`long_rollout_metrics` makes (the first trajectories' starts)
ROLLOUT_STARTS = 20


def long_rollout_metrics(
    model: DiscreteModel,
    system: MechanicalSystem,
    data: Dataset,
    steps: int = ROLLOUT_STEPS,
    starts: int = ROLLOUT_STARTS,
) -> dict[str, Any]:
    """What the model does over long unforced rollouts of its own ``step`` (not the plant's):
    energy drift, constraint residuals measured by the nominal ``system``, failures.

    From the first true state (``data.states``, without the observation noise, so on the
    system's constraints) of each of the first ``starts`` trajectories of ``data``, ``step``
    is rolled ``steps`` times with ``u = 0`` and the states are read back as
    observations ``(q, v)`` through ``to_obs``. A rollout *fails* when a state along it is
    not finite (a failed step is NaN); the figures below are over the rollouts that did not
    fail, the failures counted apart (``rollout_failed``, ``rollout_failed_share``).

    - ``energy_drift``: per rollout ``max_k |E_k - E_0| / energy_scale_J``. The energy is the
      model's own ``energy`` field where it has one (``energy_source = "model"``), else the
      nominal system's energy of the model's observation (``"nominal"``); the scale is the
      range (max - min) of the same energy over every true state of ``data`` (a model's
      learned Lagrangian is compared with its own scale). A conservative model keeps it at
      its integrator's error (round-off for a quadratic energy and the midpoint rule); a model
      that learned the plant's friction loses energy as the plant would, which shows as drift.
    - ``holonomic_residual`` (systems with holonomic constraints, in the coordinates' units):
      per rollout ``max_k |g(q_k)|`` of the nominal system's ``g``; ``nonholonomic_residual``
      (systems with nonholonomic constraints, in the velocities' units): ``max_k |A(q_k) v_k|``.
      Both use the system's functions on the observation, so a model without constraints is
      measured as one that keeps them.

    Per-rollout lists keep ``None`` for a failed rollout; ``*_median`` and ``*_max`` summarise
    the others (``None`` when every rollout failed).
    """
    import casadi as ca

    check_compatible(model, data)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps must be a positive int (rollout length), got {steps!r}")
    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise InputError(f"starts must be a positive int (number of rollouts), got {starts!r}")
    if data.nobs != system.nq + system.nv or model.nu != system.nu:
        raise InputError(
            f"system {system.name} has {system.nq + system.nv} observations and {system.nu} "
            f"inputs, the model {model.nobs} and {model.nu}; give the model's nominal system"
        )
    obs0 = data.states[: min(starts, data.n_trajectories), 0]
    n = len(obs0)
    x0 = _map(model.from_obs, n, obs0)
    states = _rollouts(model, x0, steps)  # (n, steps + 1, nx)
    failed = ~np.all(np.isfinite(states.reshape(n, -1)), axis=1)
    kept = np.flatnonzero(~failed)
    out: dict[str, Any] = {
        "rollout_steps": int(steps),
        "rollout_seconds": float(steps * model.dt),
        "rollouts": int(n),
        "rollout_failed": int(failed.sum()),
        "rollout_failed_share": float(failed.mean()),
    }
    obs = np.full((n, steps + 1, model.nobs), np.nan)
    if kept.size:
        flat = states[kept].reshape(-1, model.nx)
        obs[kept] = _map(model.to_obs, len(flat), flat).reshape(kept.size, steps + 1, -1)
    nq = system.nq
    q, v = ca.SX.sym("q", nq), ca.SX.sym("v", system.nv)
    if model.energy is not None:

        def energies(o: np.ndarray) -> np.ndarray:
            X = _map(model.from_obs, len(o), o)
            return _map(model.energy, len(o), X, np.tile(model.p_default, (len(o), 1)))[:, 0]

        out["energy_source"] = "model"
    else:
        nominal = ca.Function("E", [ca.vertcat(q, v)], [system.energy(q, v)])

        def energies(o: np.ndarray) -> np.ndarray:
            return _map(nominal, len(o), o)[:, 0]

        out["energy_source"] = "nominal"
    seen = energies(data.states.reshape(-1, data.nobs))
    seen = seen[np.isfinite(seen)]
    scale = float(seen.max() - seen.min()) if seen.size else float("nan")
    if not scale > 0:
        scale = 1.0  # data at one energy: the drift is in joules
        out["energy_scale_note"] = "the data's energy does not vary: drift in J"
    out["energy_scale_J"] = scale
    out["energy_scale"] = "range (max - min) of the energy over the data's true states"
    drift: list[float | None] = [None] * n
    if kept.size:
        E = energies(obs[kept].reshape(-1, model.nobs)).reshape(kept.size, steps + 1)
        for i, e in zip(kept, E, strict=True):
            drift[i] = float(np.max(np.abs(e - e[0])) / scale)
    out.update(_per_rollout("energy_drift", drift))
    for name, count, expr in (
        ("holonomic_residual", system.n_holonomic, lambda: system.holonomic(q)),
        ("nonholonomic_residual", system.n_nonholonomic, lambda: system.nonholonomic(q) @ v),
    ):
        if not count:
            continue
        fn = ca.Function(name, [ca.vertcat(q, v)], [expr()])
        worst: list[float | None] = [None] * n
        if kept.size:
            r = _map(fn, kept.size * (steps + 1), obs[kept].reshape(-1, model.nobs))
            r = np.abs(r).reshape(kept.size, -1)
            for i, row in zip(kept, r, strict=True):
                worst[i] = float(row.max())
        out.update(_per_rollout(name, worst))
    return out


def _rollouts(model: DiscreteModel, x0: np.ndarray, steps: int) -> np.ndarray:
    """Unforced rollouts of ``model`` from ``x0``; a start whose rollout raises (instead of
    returning NaN) is rolled alone, NaN from where its step raised."""
    zeros = np.zeros((len(x0), steps, model.nu))
    try:
        return rollout_model(model, x0, zeros)
    except RuntimeError:
        pass
    out = np.full((len(x0), steps + 1, model.nx), np.nan)
    for i, x in enumerate(x0):
        out[i, 0] = x
        for k in range(steps):
            try:
                x = np.asarray(model.step(x, np.zeros(model.nu), model.p_default)).ravel()
            except RuntimeError:
                break
            out[i, k + 1] = x
            if not np.all(np.isfinite(x)):
                break
    return out


def _per_rollout(name: str, values: list[float | None]) -> dict[str, Any]:
    finite = [v for v in values if v is not None]
    return {
        name: values,
        f"{name}_median": float(np.median(finite)) if finite else None,
        f"{name}_max": float(np.max(finite)) if finite else None,
    }
