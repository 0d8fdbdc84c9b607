"""The contract every vimpc environment must satisfy, as a test suite to inherit.

A test module subclasses :class:`EnvContract` and says how to build the (unwrapped) env::

    class TestCartPoleEnv(EnvContract):
        def make_env(self, **kwargs):
            return CartPoleEnv(**kwargs)

The contract, beyond gymnasium's ``check_env``:

- ``info`` after ``reset`` and after every ``step`` holds ``"state"`` (the noise-free true
  state, same shape as the observation), ``"safety_margin"`` (1-D float array, >= 0 where the
  safety constraint holds; may be empty), ``"constraint_violation"`` (float,
  ``max(0, -min(safety_margin))``, 0.0 if empty), ``"constraint_residual"`` (float >= 0) and
  ``"time"`` (float seconds since reset); after a step also ``"applied_action"`` (the action
  clipped to the Box), ``"action_clipped"`` (bool) and ``"stage_cost"`` (float,
  ``reward == -stage_cost``).
- Out-of-bounds actions are clipped; NaN/inf actions and wrongly shaped actions raise
  :class:`vimpc.errors.InputError`.
- Observations are float64; ``env.dt`` is the control step and ``info["time"]`` advances by
  it each step; ``render()`` in ``"rgb_array"`` mode gives an ``(H, W, 3)`` uint8 image.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env, data_equivalence

from vimpc.errors import InputError

_REQUIRED_INFO = ("state", "safety_margin", "constraint_violation", "constraint_residual", "time")
_REQUIRED_STEP_INFO = ("applied_action", "action_clipped", "stage_cost")


def _is_action_space_advice(w: warnings.WarningMessage) -> bool:
    # gymnasium recommends a symmetric, normalised action Box; physical units (N, N m) are
    # the documented choice here, so that one piece of advice is not a defect.
    text = str(w.message)
    return "action space" in text and "normalize" in text


class EnvContract:
    """Inheritable checks that a gymnasium environment follows the vimpc env contract.

    Subclasses implement :meth:`make_env`; each test makes fresh envs and closes them.
    """

    n_steps: int = 20
    """Length of the seeded rollouts compared for determinism and of the info checks."""
    n_random_steps: int = 50
    seed: int = 0

    def make_env(self, **kwargs: Any) -> gym.Env:
        """The unwrapped environment; ``kwargs`` are constructor arguments (``render_mode``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_env(**kwargs)")

    # ---- helpers ------------------------------------------------------------------------

    def _box(self, env: gym.Env) -> tuple[np.ndarray, np.ndarray]:
        space = env.action_space
        assert isinstance(space, spaces.Box), (
            f"action_space must be a Box, got {type(space).__name__}"
        )
        low, high = space.low.astype(np.float64), space.high.astype(np.float64)
        assert np.all(np.isfinite(low)) and np.all(np.isfinite(high)), (
            f"action_space bounds must be finite to clip to, got low={low}, high={high}"
        )
        return low, high

    def _actions(self, env: gym.Env, n: int) -> np.ndarray:
        """``n`` actions inside the Box, from a fixed-seed generator independent of the env."""
        low, high = self._box(env)
        return np.random.default_rng(self.seed).uniform(low, high, size=(n, *low.shape))

    def _rollout(self, env: gym.Env, actions: np.ndarray) -> list[tuple[Any, ...]]:
        obs, info = env.reset(seed=self.seed)
        out: list[tuple[Any, ...]] = [(obs, None, info)]
        for a in actions:
            obs, reward, terminated, truncated, info = env.step(a)
            out.append((obs, reward, info))
            if terminated or truncated:
                break
        return out

    def _check_info(
        self, env: gym.Env, obs: np.ndarray, info: dict, step: tuple[np.ndarray, float] | None
    ) -> None:
        """Check ``info`` against the contract; ``step`` is ``(action, reward)`` after a step."""
        keys = _REQUIRED_INFO + (_REQUIRED_STEP_INFO if step is not None else ())
        missing = [k for k in keys if k not in info]
        where = "reset" if step is None else "step"
        assert not missing, f"info after {where} lacks {missing}; it has {sorted(info)}"

        state = info["state"]
        assert isinstance(state, np.ndarray) and state.shape == np.shape(obs), (
            f'info["state"] must be an array of the observation\'s shape {np.shape(obs)}, '
            f"got {type(state).__name__} {np.shape(state)}"
        )
        assert np.all(np.isfinite(state)), f'info["state"] is not finite: {state}'

        margin = info["safety_margin"]
        assert (
            isinstance(margin, np.ndarray)
            and margin.ndim == 1
            and np.issubdtype(margin.dtype, np.floating)
        ), f'info["safety_margin"] must be a 1-D float array, got {margin!r}'
        violation = info["constraint_violation"]
        expected = max(0.0, -float(np.min(margin))) if margin.size else 0.0
        assert isinstance(violation, float) and math.isclose(
            violation, expected, rel_tol=1e-12, abs_tol=1e-15
        ), (
            f'info["constraint_violation"] must be the float max(0, -min(safety_margin)) = '
            f"{expected!r}, got {violation!r}"
        )
        residual = info["constraint_residual"]
        assert isinstance(residual, float) and np.isfinite(residual) and residual >= 0.0, (
            f'info["constraint_residual"] must be a finite float >= 0, got {residual!r}'
        )
        assert isinstance(info["time"], float), f'info["time"] must be a float: {info["time"]!r}'
        if step is None:
            assert info["time"] == 0.0, f'info["time"] after reset must be 0.0: {info["time"]!r}'
            return

        action, reward = step
        low, high = self._box(env)
        applied = info["applied_action"]
        assert isinstance(applied, np.ndarray) and np.array_equal(
            applied, np.clip(action, low, high)
        ), f'info["applied_action"] must be np.clip(action, low, high), got {applied!r}'
        clipped = info["action_clipped"]
        assert isinstance(clipped, (bool, np.bool_)), 'info["action_clipped"] must be a bool'
        assert bool(clipped) == bool(np.any(applied != action)), (
            f'info["action_clipped"] is {clipped} for action {action} applied as {applied}'
        )
        cost = info["stage_cost"]
        assert isinstance(cost, float) and np.isfinite(cost), (
            f'info["stage_cost"] must be a finite float, got {cost!r}'
        )
        assert math.isclose(float(reward), -cost, rel_tol=1e-12, abs_tol=0.0), (
            f'reward must equal -info["stage_cost"], got reward={reward!r}, stage_cost={cost!r}'
        )

    # ---- the contract -------------------------------------------------------------------

    def test_check_env(self) -> None:
        """gymnasium's ``check_env`` passes without any warning, save the advice to normalise
        the action Box."""
        env = self.make_env()
        # Record rather than turn warnings into errors, so the failure lists all of them.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=True)
        env.close()
        unexpected = [
            f"{w.category.__name__}: {w.message}" for w in caught if not _is_action_space_advice(w)
        ]
        assert not unexpected, "check_env warned:\n" + "\n".join(unexpected)

    def test_seeded_rollouts_are_identical(self) -> None:
        """``reset(seed=s)`` and the same actions give bit-identical observations, rewards and
        infos, both on the same env reset again and on a fresh env."""
        env, fresh = self.make_env(), self.make_env()
        actions = self._actions(env, self.n_steps)
        runs = [
            self._rollout(env, actions),
            self._rollout(env, actions),
            self._rollout(fresh, actions),
        ]
        env.close()
        fresh.close()
        for run in runs[1:]:
            assert len(run) == len(runs[0]), "the seeded rollouts ended at different steps"
            for k, ((o0, r0, i0), (o1, r1, i1)) in enumerate(zip(runs[0], run, strict=True)):
                assert np.asarray(o0).tobytes() == np.asarray(o1).tobytes(), (
                    f"observations differ at step {k}: {o0} vs {o1}"
                )
                assert r0 == r1, f"rewards differ at step {k}: {r0!r} vs {r1!r}"
                assert np.asarray(i0["state"]).tobytes() == np.asarray(i1["state"]).tobytes(), (
                    f'info["state"] differs at step {k}: {i0["state"]} vs {i1["state"]}'
                )
                assert data_equivalence(i0, i1, exact=True), f"infos differ at step {k}"

    def test_info_contract(self) -> None:
        """``info`` after reset and after each step holds the documented keys with the
        documented types and relations (see the module docstring)."""
        env = self.make_env()
        obs, info = env.reset(seed=self.seed)
        self._check_info(env, obs, info, None)
        for a in self._actions(env, self.n_steps):
            obs, reward, terminated, truncated, info = env.step(a)
            self._check_info(env, obs, info, (a, reward))
            if terminated or truncated:
                break
        env.close()

    def test_out_of_bounds_action_is_clipped(self) -> None:
        """An action 10x the half-width beyond the Box centre, either side, is applied clipped to
        the Box and flagged; an action inside the Box is applied as given and not flagged."""
        env = self.make_env()
        low, high = self._box(env)
        mid, half = (low + high) / 2.0, (high - low) / 2.0
        for sign in (1.0, -1.0):
            env.reset(seed=self.seed)
            action = mid + sign * 10.0 * half
            obs, _, _, _, info = env.step(action)
            np.testing.assert_array_equal(info["applied_action"], np.clip(action, low, high))
            assert info["action_clipped"], f"action {action} was clipped but not flagged"
            assert np.all(np.isfinite(obs)), f"observation after a clipped action: {obs}"
        env.reset(seed=self.seed)
        _, _, _, _, info = env.step(mid)
        np.testing.assert_array_equal(info["applied_action"], mid)
        assert not info["action_clipped"], f"action {mid} inside the Box was flagged as clipped"
        env.close()

    def test_nonfinite_action_raises(self) -> None:
        """An action holding NaN or inf raises ``InputError`` mentioning the action, instead of
        being clipped into a plausible-looking number."""
        env = self.make_env()
        low, high = self._box(env)
        for bad in (np.nan, np.inf, -np.inf):
            env.reset(seed=self.seed)
            action = (low + high) / 2.0
            action.flat[0] = bad
            try:
                env.step(action)
            except InputError as e:
                assert "action" in str(e).lower(), f"InputError must name the action: {e}"
            except Exception as e:
                raise AssertionError(
                    f"step({action}) raised {type(e).__name__} instead of InputError: {e}"
                ) from e
            else:
                raise AssertionError(f"step accepted the action {action}; it must raise InputError")
        env.close()

    def test_wrong_shape_action_raises(self) -> None:
        """An action with one entry too many raises ``InputError`` naming the expected shape."""
        env = self.make_env()
        env.reset(seed=self.seed)
        shape = env.action_space.shape
        action = np.zeros(int(np.prod(shape)) + 1)
        try:
            env.step(action)
        except InputError as e:
            assert str(tuple(shape)) in str(e), f"InputError must name the shape {shape}: {e}"
        except Exception as e:
            raise AssertionError(
                f"step with shape {action.shape} raised {type(e).__name__} instead of "
                f"InputError: {e}"
            ) from e
        else:
            raise AssertionError(f"step accepted an action of shape {action.shape}, not {shape}")
        env.close()

    def test_observations_in_space(self) -> None:
        """Observations are float64 and inside ``observation_space`` over random steps."""
        env = self.make_env()
        obs, _ = env.reset(seed=self.seed)
        for k, a in enumerate(self._actions(env, self.n_random_steps)):
            assert isinstance(obs, np.ndarray) and obs.dtype == np.float64, (
                f"observation must be a float64 array, got {type(obs).__name__} "
                f"{getattr(obs, 'dtype', '')}"
            )
            assert env.observation_space.contains(obs), (
                f"observation {obs} at step {k} not in space"
            )
            obs, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                obs, _ = env.reset()
        env.close()

    def test_render_rgb_array_and_close(self) -> None:
        """``render()`` in ``"rgb_array"`` mode returns an ``(H, W, 3)`` uint8 image and
        ``close()`` may be called twice."""
        env = self.make_env(render_mode="rgb_array")
        env.reset(seed=self.seed)
        frame = env.render()
        assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8, (
            f"render() must return a uint8 array, got {type(frame).__name__} "
            f"{getattr(frame, 'dtype', '')}"
        )
        assert frame.ndim == 3 and frame.shape[2] == 3 and frame.shape[0] * frame.shape[1] > 0, (
            f"render() must return shape (H, W, 3), got {frame.shape}"
        )
        env.close()
        env.close()

    def test_dt_and_time(self) -> None:
        """``env.dt`` is a positive float and ``info["time"]`` advances by ``env.dt`` per step."""
        env = self.make_env()
        dt = getattr(env, "dt", None)
        assert isinstance(dt, float) and np.isfinite(dt) and dt > 0, (
            f"env.dt must be the control step as a positive float, got {dt!r}"
        )
        _, info = env.reset(seed=self.seed)
        assert info["time"] == 0.0, f'info["time"] after reset must be 0.0, got {info["time"]!r}'
        for k, a in enumerate(self._actions(env, self.n_steps), start=1):
            _, _, terminated, truncated, info = env.step(a)
            assert math.isclose(info["time"], k * dt, rel_tol=1e-9), (
                f'info["time"] after {k} steps of dt={dt} must be {k * dt}, got {info["time"]}'
            )
            if terminated or truncated:
                break
        env.close()
