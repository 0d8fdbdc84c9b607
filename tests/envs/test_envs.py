"""The four environments: the shipped contract, the structure the ground truth keeps
(constraints, energy), the task pieces and the errors a user sees."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)
from vimpc_envs.cartpole import CartPoleEnv
from vimpc_envs.fourbar import FourBarEnv
from vimpc_envs.pendulum import PendulumEnv
from vimpc_envs.rolling_disk import RollingDiskEnv

import vimpc
from vimpc.errors import InputError, SolverError
from vimpc.testing import EnvContract

ENVS = (PendulumEnv, CartPoleEnv, FourBarEnv, RollingDiskEnv)


# ---- (a) the shipped contract --------------------------------------------------------------


class TestPendulumEnv(EnvContract):
    def make_env(self, **kw):
        return PendulumEnv(**kw)


class TestCartPoleEnv(EnvContract):
    def make_env(self, **kw):
        return CartPoleEnv(**kw)


class TestFourBarEnv(EnvContract):
    def make_env(self, **kw):
        return FourBarEnv(**kw)


class TestRollingDiskEnv(EnvContract):
    def make_env(self, **kw):
        return RollingDiskEnv(**kw)


def _random_actions(env, n, seed=1):
    low, high = env.action_space.low, env.action_space.high
    return np.random.default_rng(seed).uniform(low, high, size=(n, *low.shape))


# ---- (b), (c) constraints hold on the true state --------------------------------------------


def test_rolling_disk_keeps_its_nonholonomic_constraint():
    """``A(q) v = 0`` (rolling without slipping) to 1e-8 over 2000 steps of random torques,
    in the env's report and recomputed from ``info["state"]``."""
    env = RollingDiskEnv()
    _, info = env.reset(seed=3)
    A = env.true_system.nonholonomic
    worst = worst_recomputed = info["constraint_residual"]
    for u in _random_actions(env, 2000):
        _, _, _, _, info = env.step(u)
        q, v = info["state"][:4], info["state"][4:]
        worst = max(worst, info["constraint_residual"])
        worst_recomputed = max(worst_recomputed, float(np.linalg.norm(A(q) @ v)))
    assert worst <= 1e-8 and worst_recomputed <= 1e-8, (worst, worst_recomputed)
    assert np.ptp(info["state"][2:4]) > 0.0  # it did move


def test_fourbar_keeps_loop_closure():
    """``g(q) = 0`` to 1e-8 over 2000 steps of random crank torques (the crank turns)."""
    env = FourBarEnv()
    _, info = env.reset(seed=3)
    g = env.true_system.holonomic
    start = info["state"][0]
    worst = worst_recomputed = info["constraint_residual"]
    for u in _random_actions(env, 2000):
        _, _, _, _, info = env.step(u)
        worst = max(worst, info["constraint_residual"])
        worst_recomputed = max(worst_recomputed, float(np.linalg.norm(g(info["state"][:3]))))
    assert worst <= 1e-8 and worst_recomputed <= 1e-8, (worst, worst_recomputed)
    assert abs(info["state"][0] - start) > 0.1


# ---- (d) energy -----------------------------------------------------------------------------


def test_frictionless_unperturbed_pendulum_conserves_energy():
    """With no friction, no perturbation and zero torque the midpoint variational integrator
    keeps the energy to a relative 1e-6 over 1000 steps (10 s, 1e5 substeps)."""
    env = PendulumEnv(perturbation=0.0, friction=[0.0], obs_noise=0.0)
    assert dict(env.true_system.params) == dict(env.nominal_system.params)
    _, info = env.reset(options={"state": [1.0, 0.0]})
    energy = env.true_system.energy
    e0 = energy(info["state"][:1], info["state"][1:])
    worst = 0.0
    for _ in range(1000):
        obs, _, _, _, info = env.step(np.zeros(1))
        e = energy(info["state"][:1], info["state"][1:])
        worst = max(worst, abs(e - e0) / abs(e0))
    assert worst <= 1e-6, worst
    np.testing.assert_array_equal(obs, info["state"])  # obs_noise=0: the state itself


# ---- the ground truth and the task ------------------------------------------------------------


@pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
def test_true_system_is_the_perturbed_catalog_system_with_friction(cls):
    env = cls()
    nominal, true = env.nominal_system, env.true_system
    assert type(nominal) is type(true) is cls.system_type
    assert dict(nominal.params) == dict(cls.system_type().params)
    np.testing.assert_array_equal(nominal.friction, 0.0)
    for key in cls.system_type.inertial:
        assert abs(true.params[key] / nominal.params[key] - 1.0) <= 0.1
    assert np.all(true.friction >= 0.0) and np.all(true.friction <= cls.friction_max)
    # the same param_seed gives the same truth; another seed another one
    assert repr(cls().true_system) == repr(true)
    np.testing.assert_array_equal(cls().true_system.friction, true.friction)
    assert repr(cls(param_seed=1).true_system) != repr(true)
    meta = env.metadata_for_dataset()
    assert json.loads(json.dumps(meta)) == meta
    assert meta["env_class"] == cls.__name__ and meta["param_seed"] == 0
    assert meta["true_params"] == dict(true.params) and meta["friction"] == true.friction.tolist()
    assert (meta["dt"], meta["substep"], meta["obs_noise"], meta["perturbation"]) == (
        0.01,
        1e-4,
        1e-3,
        0.1,
    )


def test_friction_and_params_arguments():
    env = CartPoleEnv(friction=[0.2, 0.05], params={"m": 2.0}, perturbation=0.0)
    np.testing.assert_array_equal(env.true_system.friction, [0.2, 0.05])
    assert env.nominal_system.params["m"] == 2.0 == env.true_system.params["m"]
    assert env.nominal_system.params["J"] == pytest.approx(2.0 * 0.5**2 / 12)
    # given friction does not change the drawn masses
    assert repr(CartPoleEnv(friction=[0.0, 0.0]).true_system) == repr(CartPoleEnv().true_system)
    np.testing.assert_array_equal(RollingDiskEnv().true_system.friction, [0.0, 0.0])


def test_reset_start_distributions_and_exact_state():
    pendulum = PendulumEnv()
    for seed in range(5):
        _, info = pendulum.reset(seed=seed)
        assert np.all(np.abs(info["state"]) <= 0.1)
    fourbar = FourBarEnv()
    q, v = fourbar.true_system.assemble(0.7, 1.5)
    _, info = fourbar.reset(options={"state": np.concatenate([q, v])})
    np.testing.assert_array_equal(info["state"], np.concatenate([q, v]))
    assert fourbar.reference(0.0) == 0.7
    assert fourbar.reference(3.0) == pytest.approx(0.7 + 2 * math.pi)
    disk = RollingDiskEnv()
    _, info = disk.reset(seed=0)
    assert info["constraint_residual"] <= 1e-15
    assert info["safety_margin"] == pytest.approx([0.7], abs=0.06)


def test_task_pieces_are_plain_functions_of_the_observation():
    cart = CartPoleEnv(s_max=0.5)
    upright = np.array([0.0, math.pi, 0.0, 0.0])
    assert cart.stage_cost(upright, [0.0]) == pytest.approx(0.0, abs=1e-12)
    assert cart.stage_cost(np.zeros(4), [0.0]) == pytest.approx(4.0)
    np.testing.assert_allclose(cart.safety_margin([0.7, 0, 0, 0]), [-0.2, 1.2])
    pendulum = PendulumEnv()
    np.testing.assert_allclose(pendulum.safety_margin([0.0, 12.0]), [-2.0, 22.0])
    disk = RollingDiskEnv(obstacle_center=(1.0, 0.5), obstacle_radius=0.2)
    np.testing.assert_allclose(disk.safety_margin([0, 0, 1.0, 0.0, 0, 0, 0, 0]), [0.3])
    assert disk.stage_cost([0, 0, 2.0, 0.0, 0, 0, 0, 0], [0.0, 0.0]) == pytest.approx(0.0)
    fourbar = FourBarEnv()
    _, info = fourbar.reset(seed=0)
    x = info["state"].copy()
    x[0], x[3] = fourbar.reference(1.5), fourbar.reference_speed
    assert fourbar.stage_cost(x, [0.0], t=1.5) == pytest.approx(0.0, abs=1e-20)
    np.testing.assert_allclose(fourbar.safety_margin(x), [8.0 - x[3], 8.0 + x[3]])


def test_reward_is_minus_the_stage_cost_of_the_state_after_the_step():
    env = FourBarEnv()
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(np.array([5.0]))
    assert reward == -env.stage_cost(info["state"], info["applied_action"], t=env.dt)
    assert (terminated, truncated) == (False, False)


# ---- (e) errors a user sees ----------------------------------------------------------------


def _message(excinfo):
    return str(excinfo.value)


def test_nonfinite_action_message():
    env = PendulumEnv()
    env.reset(seed=0)
    with pytest.raises(InputError) as e:
        env.step(np.array([np.nan]))
    text = _message(e)
    assert "action" in text and "nan" in text and "(1,)" in text and "2.0" in text


def test_wrong_shape_action_message():
    env = RollingDiskEnv()
    env.reset(seed=0)
    with pytest.raises(InputError, match=r"shape \(3,\).*expected shape \(2,\)"):
        env.step(np.zeros(3))
    with pytest.raises(InputError, match="action must be numeric"):
        env.step("fast")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"obs_noise": -0.1}, ["obs_noise", "-0.1", "non-negative"]),
        ({"dt": 0.0}, ["dt", "0.0", "positive"]),
        ({"dt": -0.01}, ["dt", "-0.01", "positive"]),
        ({"dt": 0.01005}, ["dt", "0.01005", "multiple of the substep"]),
        ({"substep": 0.0}, ["substep", "0.0", "positive"]),
        ({"perturbation": 1.0}, ["perturbation", "1.0", "[0, 1)"]),
        ({"perturbation": -0.1}, ["perturbation", "-0.1"]),
        ({"param_seed": -1}, ["param_seed", "-1"]),
        ({"param_seed": 1.5}, ["param_seed", "1.5"]),
        ({"params": {"m": -1.0}}, ["params['m']", "-1.0", "positive"]),
        ({"params": {"l": 0.0}}, ["params['l']", "0.0", "positive"]),
        ({"params": {"mm": 2.0}}, ["params", "'mm'", "did you mean 'm'"]),
        ({"friction": [-0.1]}, ["friction", "-0.1", ">= 0"]),
        ({"friction": [0.1, 0.2]}, ["friction", "shape (1,)", "(2,)"]),
        ({"max_speed": 0.0}, ["max_speed", "0.0"]),
        ({"render_mode": "human"}, ["render_mode", "'human'", "rgb_array"]),
        ({"jit": "yes"}, ["jit", "'yes'", "True or False"]),
    ],
)
def test_bad_constructor_arguments(kwargs, words):
    with pytest.raises(InputError) as e:
        PendulumEnv(**kwargs)
    for word in words:
        assert word in _message(e), (word, _message(e))


def test_bad_task_arguments():
    with pytest.raises(InputError, match="s_max"):
        CartPoleEnv(s_max=-1.0)
    with pytest.raises(InputError, match="reference_speed"):
        FourBarEnv(reference_speed=float("nan"))
    with pytest.raises(InputError, match="Grashof"):
        FourBarEnv(params={"a": 2.0})
    with pytest.raises(InputError, match="target"):
        RollingDiskEnv(target=(1.0, 0.0))
    with pytest.raises(InputError, match="from the start"):
        RollingDiskEnv(obstacle_center=(0.2, 0.0))
    with pytest.raises(InputError, match="outside the obstacle"):
        RollingDiskEnv(target=(1.1, 0.0, 0.0))
    with pytest.raises(TypeError):
        PendulumEnv(obs_nosie=0.0)  # a misspelt keyword is refused


def test_step_before_reset_raises():
    env = CartPoleEnv(render_mode="rgb_array")
    with pytest.raises(InputError, match=r"CartPoleEnv.step needs a state: call reset\(\) first"):
        env.step(np.zeros(1))
    with pytest.raises(InputError, match="reset"):
        env.render()


def test_bad_reset_options():
    env = FourBarEnv()
    with pytest.raises(InputError, match="options got an unknown key 'sate'.*did you mean 'state'"):
        env.reset(options={"sate": np.zeros(6)})
    with pytest.raises(InputError, match=r"options\['state'\] must have shape \(6,\)"):
        env.reset(options={"state": np.zeros(4)})
    with pytest.raises(InputError, match="finite"):
        env.reset(options={"state": [np.nan] * 6})
    q, v = env.true_system.assemble(0.3, 1.0)
    # turning the crank alone by 0.01 rad moves B by a * 0.01 = 5 mm off the loop
    with pytest.raises(InputError, match=r"\|\|g\(q\)\|\| is 5\.000e-03.*assemble"):
        env.reset(options={"state": np.concatenate([q + [0.01, 0, 0], v])})
    with pytest.raises(InputError, match=r"\|\|G\(q\) v\|\|"):
        env.reset(options={"state": np.concatenate([q, v + [0.0, 0.1, 0.0]])})
    with pytest.raises(InputError, match="observation bounds"):
        env.reset(options={"state": np.concatenate([q, [1e4, 0.0, 0.0]])})
    disk = RollingDiskEnv()
    with pytest.raises(InputError, match=r"\|\|A\(q\) v\|\|.*consistent_velocity"):
        disk.reset(options={"state": [0, 0, 0, 0, 1.0, 0, 0, 0]})


class _Failing:
    """Stands in for the env's CasADi step function to exercise the failure paths."""

    def __init__(self, result):
        self.result = result

    def __call__(self, x, u):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def test_solver_failures_raise_solver_error():
    env = PendulumEnv()
    env.reset(seed=0)
    before = env.state
    env._step_fn = _Failing(RuntimeError("fast_newton: max_iter reached"))
    with pytest.raises(SolverError, match="Newton solve .* failed at t = 0 s"):
        env.step(np.zeros(1))
    # compiled code ignores error_on_fail: the integrator residual output catches it
    env._step_fn = _Failing((np.array([0.1, 0.2]), 0.0, 3e-4))
    with pytest.raises(
        SolverError, match=r"Newton solve .* failed \(largest residual 3\.000e-04\)"
    ):
        env.step(np.zeros(1))
    env._step_fn = _Failing((np.array([np.nan, 0.0]), 0.0, 0.0))
    with pytest.raises(SolverError, match="non-finite"):
        env.step(np.zeros(1))
    env._step_fn = _Failing((np.array([np.nan, np.nan]), 0.0, np.nan))
    with pytest.raises(SolverError, match="non-finite"):
        env.step(np.zeros(1))
    np.testing.assert_array_equal(env.state, before)  # a failed step changes nothing
    assert env.time == 0.0


@pytest.mark.parametrize("cls", ENVS, ids=lambda c: c.__name__)
def test_compiled_and_interpreted_steps_are_bit_identical(cls):
    """``jit`` changes the speed, never the numbers."""
    runs = []
    for jit in (True, False):
        env = cls(jit=jit)
        if jit and not env.compiled:
            pytest.skip("no working C compiler: the env fell back to the interpreter")
        assert env.compiled == jit
        obs, info = env.reset(seed=4)
        states = [info["state"]]
        for u in _random_actions(env, 30):
            states.append(env.step(u)[4]["state"])
        runs.append(np.array(states))
    assert runs[0].tobytes() == runs[1].tobytes()


# ---- (f) registration and imports --------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id", ["vimpc/Pendulum-v0", "vimpc/CartPole-v0", "vimpc/FourBar-v0", "vimpc/RollingDisk-v0"]
)
def test_gymnasium_make(env_id):
    assert vimpc.__version__
    env = gymnasium.make(env_id, dt=0.02, max_episode_steps=3)
    obs, info = env.reset(seed=0)
    assert env.unwrapped.dt == 0.02 and obs.shape == env.observation_space.shape
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
    assert not terminated and truncated  # only the user's TimeLimit ends an episode
    assert info["time"] == pytest.approx(0.06)
    env.close()


def test_import_vimpc_envs_registers_envs_without_torch():
    code = (
        "import sys, vimpc\n"
        "assert 'gymnasium' not in sys.modules, 'import vimpc imported gymnasium'\n"
        "import gymnasium, vimpc_envs\n"
        "assert 'torch' not in sys.modules, 'import vimpc_envs imported torch'\n"
        "env = gymnasium.make('vimpc/CartPole-v0')\n"
        "env.reset(seed=0)\n"
        "assert 'torch' not in sys.modules, 'making an env imported torch'\n"
        "env = gymnasium.make('vimpc_envs:vimpc/Pendulum-v0')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
