"""run_episode refuses bad arguments with an InputError naming the argument, before the
environment is stepped."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc.closedloop import run_episode
from vimpc.errors import InputError
from vimpc.mpc import Status


class CountingPendulum:
    """The pendulum env, counting resets and steps."""

    def __init__(self) -> None:
        self.env = gymnasium.make("vimpc/Pendulum-v0").unwrapped
        self.dt = self.env.dt
        self.resets = self.steps = 0

    def reset(self, **kwargs):
        self.resets += 1
        return self.env.reset(**kwargs)

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


def _zero(obs, t):
    return SimpleNamespace(
        u=np.zeros(1), status=Status.SOLVED, solve_time=0.0, iterations=0, slack=0.0
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": -1}, "seed must be a non-negative integer (a reset seed), got -1"),
        ({"seed": 1.5}, "seed must be a non-negative integer (a reset seed), got 1.5"),
        ({"seed": True}, "seed must be a non-negative integer (a reset seed), got True"),
        ({"seed": "3"}, "seed must be a non-negative integer (a reset seed), got '3'"),
        ({"steps": 0}, "steps must be a positive integer, got 0"),
        ({"steps": -4}, "steps must be a positive integer, got -4"),
        ({"steps": 2.5}, "steps must be a positive integer, got 2.5"),
        ({"controller": "mpc"}, "controller must be callable as controller(obs, t)"),
        ({"controller": None}, "controller must be callable as controller(obs, t)"),
        ({"reset_options": [1]}, "reset_options must be a dict or None, got list"),
        ({"on_step": 3}, "on_step must be callable as on_step(k) or None, got 3"),
    ],
)
def test_bad_arguments_are_named_before_any_step(change, message):
    env = CountingPendulum()
    args = {"env": env, "controller": _zero, "steps": 3, "seed": 0, **change}
    with pytest.raises(InputError) as err:
        run_episode(**args)
    assert message in str(err.value)
    assert env.resets == 0 and env.steps == 0


def test_an_env_without_the_interface_is_named():
    with pytest.raises(InputError, match=r"env must be a gymnasium environment .* no step\(\)"):
        run_episode(SimpleNamespace(reset=lambda **k: None, dt=0.1), _zero, 3, 0)
    with pytest.raises(InputError, match=r"no reset or step\(\)"):
        run_episode(object(), _zero, 3, 0)

    class NoDt(CountingPendulum):
        def __init__(self) -> None:
            super().__init__()
            del self.dt

    with pytest.raises(InputError, match="env must have a control step dt"):
        run_episode(NoDt(), _zero, 3, 0)
    bad_dt = CountingPendulum()
    bad_dt.dt = -0.1
    with pytest.raises(InputError, match="env.dt must be a positive number of seconds, got -0.1"):
        run_episode(bad_dt, _zero, 3, 0)
    assert bad_dt.resets == 0

    class Plain(CountingPendulum):  # a gymnasium-like env whose info lacks vimpc's entries
        def reset(self, **kwargs):
            obs, _ = super().reset(**kwargs)
            return obs, {}

    env = Plain()
    with pytest.raises(InputError, match=r"info has no \['state', 'safety_margin'"):
        run_episode(env, _zero, 3, 0)
    assert env.steps == 0


def test_good_arguments_still_run():
    env = CountingPendulum()
    traj = run_episode(env, _zero, 3, np.int64(7), reset_options=None, on_step=lambda k: None)
    assert env.steps == 3 and traj.seed == 7 and traj.inputs.shape == (3, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sed'"):
        run_episode(env, _zero, 3, 0, sed=1)


@pytest.mark.parametrize(
    ("returned", "got"),
    [
        (np.zeros(1), "got ndarray of shape (1,) array([0.]) at step 0, which has no u, status"),
        (0.0, "got float 0.0 at step 0, which has no u, status, solve_time"),
    ],
)
def test_a_controller_that_returns_a_bare_input_is_named_before_the_step(returned, got):
    # the bare array reached env.step(result.u) as an AttributeError: 'numpy.ndarray'
    # object has no attribute 'u'
    env = CountingPendulum()
    with pytest.raises(InputError) as err:
        run_episode(env, lambda obs, t: returned, 3, 0)
    text = str(err.value)
    assert "controller(obs, t) must return an MPCResult" in text and got in text
    assert "SimpleNamespace(u=u, status=vimpc.mpc.Status.SOLVED" in text
    assert env.steps == 0
