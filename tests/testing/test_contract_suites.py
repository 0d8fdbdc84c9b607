"""Tests of the contract suites themselves: a correct model/env passes every check and each
deliberately broken one fails exactly the check written for its defect.

The reference model is a cart of mass ``m`` pushed by a force ``u`` (double integrator),
discretised exactly under a zero-order hold: ``q+ = q + dt v + dt^2 u / (2 m)``,
``v+ = v + dt u / m``. Its residual is written in a different but equivalent form (momentum
balance ``m (v+ - v) - dt u``) so that agreement with ``step`` is not a tautology.
"""

from __future__ import annotations

import dataclasses
import unittest
from typing import Any

import casadi as ca
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.errors import InputError
from vimpc.testing import DiscreteModelContract, EnvContract

DT = 0.1


def contract_failures(suite: object) -> dict[str, str]:
    """Run every ``test_*`` method of ``suite``; map the failing ones to their messages.

    Skips are not failures. Any exception other than an assertion propagates: a contract
    must fail by assertion with a message, not crash.
    """
    failures = {}
    for name in sorted(n for n in dir(suite) if n.startswith("test_")):
        try:
            getattr(suite, name)()
        except unittest.SkipTest:
            pass
        except (AssertionError, pytest.fail.Exception) as e:
            failures[name] = str(e)
    return failures


# ---- models -------------------------------------------------------------------------------


def carts(b: tuple[float, ...] = (1.0,), *, quantise: bool = False) -> DiscreteModel:
    """``len(b)`` carts of common mass ``m`` (the parameter), the force ``u`` acting on cart
    ``i`` with gain ``b[i]``; state ``(q_1..q_n, v_1..v_n)``. With two carts the constraint
    ``(q_1 - q_2, v_1 - v_2)`` is kept by ``step`` exactly when ``b[0] == b[1]``.

    ``quantise`` rounds the state to 1e-12 inside ``step``: the value is right to 1e-12 but
    ``floor`` has zero derivative, so CasADi's Jacobian in ``x`` is wrong.
    """
    n = len(b)
    x, u, m = ca.MX.sym("x", 2 * n), ca.MX.sym("u", 1), ca.MX.sym("m", 1)
    x_next = ca.MX.sym("x_next", 2 * n)
    bv = ca.DM(b)
    xs = ca.floor(x * 1e12) / 1e12 if quantise else x
    q, v = xs[:n], xs[n:]
    step = ca.vertcat(q + DT * v + DT**2 / (2 * m) * bv * u, v + DT / m * bv * u)
    qn, vn = x_next[:n], x_next[n:]
    residual = ca.vertcat(
        qn - x[:n] - DT * x[n:] - DT**2 / (2 * m) * bv * u, m * (vn - x[n:]) - DT * bv * u
    )
    obs = ca.MX.sym("obs", 2 * n)
    return DiscreteModel(
        dt=DT,
        nx=2 * n,
        nu=1,
        np=1,
        nobs=2 * n,
        step=ca.Function("step", [x, u, m], [step]),
        residual=ca.Function("residual", [x, u, x_next, m], [residual]),
        bound=ca.Function("bound", [x, u, m], [1e-3 * ca.DM.ones(2 * n)]),
        delta=0.05,
        bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed"),
        constraint=(
            ca.Function("constraint", [x], [ca.vertcat(x[0] - x[1], x[2] - x[3])])
            if n == 2
            else None
        ),
        from_obs=ca.Function("from_obs", [obs], [obs]),
        to_obs=ca.Function("to_obs", [x], [x]),
        state_names=tuple(f"q{i}" for i in range(n)) + tuple(f"v{i}" for i in range(n)),
        input_names=("u",),
        param_names=("m",),
        p_default=np.array([2.0]),
    )


def _fn(name: str, sizes: list[int], body: Any) -> ca.Function:
    """A CasADi function of column inputs of ``sizes`` with output ``body(*symbols)``."""
    args = [ca.MX.sym(f"a{i}", n) for i, n in enumerate(sizes)]
    return ca.Function(name, args, [body(*args)])


class _Flaky(ca.Callback):
    """Identity that returns the next float up on every other call: bit-level
    nondeterminism, as from an unordered parallel reduction."""

    def __init__(self, n: int) -> None:
        ca.Callback.__init__(self)
        self.n, self.calls = n, 0
        self.construct("flaky", {"enable_fd": True})

    def get_n_in(self) -> int:
        return 1

    def get_n_out(self) -> int:
        return 1

    def get_sparsity_in(self, i: int) -> ca.Sparsity:
        return ca.Sparsity.dense(self.n, 1)

    def get_sparsity_out(self, i: int) -> ca.Sparsity:
        return ca.Sparsity.dense(self.n, 1)

    def eval(self, arg: list[ca.DM]) -> list[ca.DM]:
        self.calls += 1
        y = arg[0].full().ravel()
        up = np.where(np.isfinite(y), np.nextafter(y, np.inf), y)  # -inf stays -inf
        return [ca.DM(up if self.calls % 2 else y)]


_FLAKY = _Flaky(2)  # a Callback must outlive every Function that calls it


MEASUREMENT_NOISE = 3e-4


class TestCartContract(DiscreteModelContract):
    def make_model(self) -> DiscreteModel:
        return carts()

    def sample_states(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(n, 2))

    def sample_inputs(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(n, 1))

    def heldout_transitions(self, rng: np.random.Generator):
        # exact cart steps measured with 3e-4 noise: the 1e-3 bound is 3.3 standard
        # deviations per entry, so about 0.2 % of transitions leave it (delta = 5 %)
        X, U = self.sample_states(rng, 400), self.sample_inputs(rng, 400)
        model = carts()
        exact = np.array(
            [np.asarray(model.step(x, u, 2.0)).ravel() for x, u in zip(X, U, strict=True)]
        )
        return X, U, exact + MEASUREMENT_NOISE * rng.standard_normal(exact.shape)


class TestLinkedCartsContract(DiscreteModelContract):
    constraint_preserving = True

    def make_model(self) -> DiscreteModel:
        return carts((1.0, 1.0))

    def sample_states(self, rng: np.random.Generator, n: int) -> np.ndarray:
        q, v = rng.uniform(-1.0, 1.0, size=(2, n))
        return np.stack([q, q, v, v], axis=1)  # on the manifold q_1 = q_2, v_1 = v_2

    def sample_inputs(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(0.5, 1.0, size=(n, 1))


def _broken(base: type, make: Any) -> type:
    return type(f"Broken{base.__name__}", (base,), {"make_model": lambda self: make()})


def _replace(**fields: Any) -> Any:
    return lambda: dataclasses.replace(carts(), **fields)


_BROKEN_MODELS = {
    "residual inconsistent with step": (
        _replace(residual=_fn("r", [2, 1, 2, 1], lambda x, u, xn, m: xn - x)),
        {"test_step_satisfies_residual"},
    ),
    "residual identically zero": (
        _replace(residual=_fn("r", [2, 1, 2, 1], lambda x, u, xn, m: 0 * xn)),
        {"test_residual_is_not_trivial"},
    ),
    "AD Jacobian wrong": (
        lambda: carts(quantise=True),
        {"test_jacobians_match_finite_differences"},
    ),
    "NaN in step": (
        _replace(
            residual=None,
            bound=None,
            delta=None,
            bound_info=None,
            step=_fn("step", [2, 1, 1], lambda x, u, m: x + u + ca.sqrt(x[0] - 10.0)),
        ),
        {"test_outputs_are_finite", "test_jacobians_match_finite_differences"},
    ),
    "NaN in bound": (
        _replace(bound=_fn("bound", [2, 1, 1], lambda x, u, m: ca.sqrt(x - 10.0))),
        {
            "test_outputs_are_finite",
            "test_bound_is_nonnegative",
            "test_bound_covers_heldout_transitions",
        },
    ),
    "negative bound": (
        _replace(bound=_fn("bound", [2, 1, 1], lambda x, u, m: -1e-3 * ca.DM.ones(2))),
        {"test_bound_is_nonnegative", "test_bound_covers_heldout_transitions"},
    ),
    "bound too tight for its delta": (
        # 1.5 noise deviations per entry: about 25 % of transitions leave it, delta is 5 %
        _replace(bound=_fn("bound", [2, 1, 1], lambda x, u, m: 4.5e-4 * ca.DM.ones(2))),
        {"test_bound_covers_heldout_transitions"},
    ),
    "energy not finite": (
        _replace(energy=_fn("energy", [2, 1], lambda x, m: ca.log(x[0] - 10.0))),
        {"test_outputs_are_finite"},
    ),
    "from_obs off by 1e-8": (
        _replace(from_obs=_fn("from_obs", [2], lambda o: o + 1e-8)),
        {"test_obs_round_trip"},
    ),
    "names not strings": (_replace(state_names=("q", 1)), {"test_shapes_and_names"}),
    "step a row vector": (
        _replace(
            residual=None,
            bound=None,
            delta=None,
            bound_info=None,
            step=_fn("step", [2, 1, 1], lambda x, u, m: (x + u).T),
        ),
        {"test_shapes_and_names"},
    ),
    "nondeterministic step": (
        _replace(
            residual=None,
            bound=None,
            delta=None,
            bound_info=None,
            step=_fn("step", [2, 1, 1], lambda x, u, m: _FLAKY(x) + u),
        ),
        {"test_step_is_deterministic"},
    ),
}


def test_correct_models_pass_every_check() -> None:
    for suite in (TestCartContract(), TestLinkedCartsContract()):
        assert contract_failures(suite) == {}


@pytest.mark.parametrize("defect", sorted(_BROKEN_MODELS))
def test_broken_model_fails_the_right_check(defect: str) -> None:
    make, expected = _BROKEN_MODELS[defect]
    assert set(contract_failures(_broken(TestCartContract, make)())) == expected


def test_constraint_drift_fails_constraint_check() -> None:
    # The input pushes only the first cart, so the carts separate.
    suite = _broken(TestLinkedCartsContract, lambda: carts((1.0, 0.0)))()
    assert set(contract_failures(suite)) == {"test_step_preserves_constraint"}


def test_off_manifold_samples_are_reported() -> None:
    suite = _broken(TestLinkedCartsContract, lambda: carts((1.0, 1.0)))()
    suite.sample_states = lambda rng, n: rng.uniform(-1.0, 1.0, size=(n, 4))
    assert (
        "sample_states must return states that satisfy the constraint,"
        in (contract_failures(suite)["test_step_preserves_constraint"])
    )


def test_velocity_constraint_drift_fails_its_check() -> None:
    # carts((1, 0)) separates the carts: read (v_1 - v_2) as a nonholonomic residual
    def drifting() -> DiscreteModel:
        model = carts((1.0, 0.0))
        return dataclasses.replace(
            model,
            constraint=None,
            velocity_constraint=_fn("velocity_constraint", [4], lambda x: x[2] - x[3]),
        )

    suite = _broken(TestLinkedCartsContract, drifting)()
    suite.constraint_preserving, suite.velocity_constraint_preserving = False, True
    assert set(contract_failures(suite)) == {"test_step_preserves_velocity_constraint"}
    linked = carts((1.0, 1.0))
    kept = _broken(
        TestLinkedCartsContract,
        lambda: dataclasses.replace(drifting(), step=linked.step, residual=linked.residual),
    )()
    kept.constraint_preserving, kept.velocity_constraint_preserving = False, True
    assert contract_failures(kept) == {}


def test_absent_parts_are_skipped_not_passed() -> None:
    bare = dataclasses.replace(carts(), residual=None, bound=None, delta=None, bound_info=None)
    suite = _broken(TestCartContract, lambda: bare)()
    for name in (
        "test_step_satisfies_residual",
        "test_residual_is_not_trivial",
        "test_bound_is_nonnegative",
        "test_bound_covers_heldout_transitions",
        "test_step_preserves_constraint",
        "test_step_preserves_velocity_constraint",
    ):
        with pytest.raises(unittest.SkipTest):
            getattr(suite, name)()


# ---- environments -------------------------------------------------------------------------


class _CartEnv(gym.Env):
    """A cart on a line (double integrator), force ``u`` in [-2, 2] N, observation ``(q, v)``
    in m and m/s with 1e-3 Gaussian noise; safe while ``|q| <= 1`` m; ends when ``|q|`` or
    ``|v|`` exceeds 8."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, render_mode: str | None = None, dt: float = 0.05) -> None:
        self.render_mode, self.dt = render_mode, dt
        self.action_space = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float64)
        self.observation_space = self._observation_space()
        self._x, self._k = np.zeros(2), 0

    def _observation_space(self) -> spaces.Box:
        return spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float64)

    def _check_action(self, action: Any) -> np.ndarray:
        a = self._check_shape(action)
        if not np.all(np.isfinite(a)):
            raise InputError(f"action must be finite (no NaN or inf), got {a.tolist()}")
        return a

    def _check_shape(self, action: Any) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise InputError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        return a

    def _info(self) -> dict[str, Any]:
        margin = np.array([1.0 - self._x[0], 1.0 + self._x[0]])
        return {
            "state": self._x.copy(),
            "safety_margin": margin,
            "constraint_violation": max(0.0, -float(margin.min())),
            "constraint_residual": 0.0,
            "time": self._k * self.dt,
        }

    def _obs(self) -> np.ndarray:
        return self._x + 1e-3 * self.np_random.standard_normal(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self._x, self._k = self.np_random.uniform(-0.5, 0.5, size=2), 0
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple:
        a = self._check_action(action)
        applied = np.clip(a, self.action_space.low, self.action_space.high)
        (q, v), u, dt = self._x, float(applied[0]), self.dt
        cost = float(q**2 + 0.1 * v**2 + 0.01 * u**2)
        self._x = np.array([q + dt * v + 0.5 * dt**2 * u, v + dt * u])
        self._k += 1
        info = self._info() | {
            "applied_action": applied,
            "action_clipped": bool(np.any(applied != a)),
            "stage_cost": cost,
        }
        terminated = bool(np.any(np.abs(self._x) > 8.0))
        return self._obs(), -cost, terminated, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.full((32, 64, 3), 255, dtype=np.uint8)
        col = int(np.clip(32 + 3 * self._x[0], 0, 63))
        frame[12:20, max(col - 2, 0) : col + 2] = 0
        return frame


class TestCartEnvContract(EnvContract):
    def make_env(self, **kwargs: Any) -> gym.Env:
        return _CartEnv(**kwargs)


class _NoSafetyMargin(_CartEnv):
    def _info(self) -> dict[str, Any]:
        info = super()._info()
        del info["safety_margin"]
        return info


class _NoNanCheck(_CartEnv):
    def _check_action(self, action: Any) -> np.ndarray:
        return self._check_shape(action)


class _ClipNotFlagged(_CartEnv):
    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, info | {"action_clipped": False}


class _UnboundedObservation(_CartEnv):
    # gymnasium warns that an infinite Box bound is "probably too high": not action advice.
    def _observation_space(self) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float64)


class _Float32Observation(_CartEnv):
    def _observation_space(self) -> spaces.Box:
        return spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)

    def _obs(self) -> np.ndarray:
        return super()._obs().astype(np.float32)


class _TimeInSteps(_CartEnv):
    def _info(self) -> dict[str, Any]:
        return super()._info() | {"time": float(self._k)}


_BROKEN_ENVS = {
    _NoSafetyMargin: {"test_info_contract"},
    _NoNanCheck: {"test_nonfinite_action_raises"},
    _ClipNotFlagged: {"test_out_of_bounds_action_is_clipped"},
    _UnboundedObservation: {"test_check_env"},
    _Float32Observation: {"test_observations_in_space"},
    _TimeInSteps: {"test_dt_and_time"},
}


def test_correct_env_passes_every_check() -> None:
    assert contract_failures(TestCartEnvContract()) == {}


@pytest.mark.parametrize("env_cls", list(_BROKEN_ENVS), ids=lambda c: c.__name__)
def test_broken_env_fails_the_right_check(env_cls: type) -> None:
    suite = type("Suite", (EnvContract,), {"make_env": lambda self, **kw: env_cls(**kw)})()
    assert set(contract_failures(suite)) == _BROKEN_ENVS[env_cls]
