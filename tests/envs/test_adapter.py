"""Any gymnasium env as a plant: the adapter's maps, its checks, and a foreign env through
the whole pipeline (gymnasium's own Pendulum-v1, whose physics vimpc did not write)."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from vimpc_envs.adapter import AdapterSpec, ForeignPlant

from vimpc import scenario
from vimpc.errors import ConfigError, InputError

#: gymnasium's Pendulum-v1 as the vimpc Pendulum: its angle is 0 upright, vimpc's hangs
PENDULUM = {
    "system": "Pendulum",
    "params": {"m": 1.0, "l": 1.0, "g": 10.0},
    "observation": [{"cos": 0, "sin": 1, "offset": math.pi}, 2],
    "limits": {"obs_min": [-math.inf, -8.0], "obs_max": [math.inf, 8.0]},
}


class Ender(gymnasium.Env):
    """A point on a line, ``x' = u``; terminated once ``|x| > 1``, truncated at ``limit``
    steps; observation ``(x, cos a, sin a, x_dot)`` with ``a`` turning by ``spin`` a step."""

    def __init__(self, spin: float = 0.0, limit: int = 10_000, dt: float = 0.1):
        self.action_space = gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.dt, self.spin, self.limit = dt, spin, limit

    def _obs(self):
        return np.array([self.x, math.cos(self.a), math.sin(self.a), self.v])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.v, self.a, self.k = 0.0, 0.0, 3.0, 0
        return self._obs(), {}

    def step(self, action):
        self.v = float(np.asarray(action).reshape(-1)[0])
        self.x += self.dt * self.v
        self.a += self.spin
        self.k += 1
        return self._obs(), 0.0, abs(self.x) > 1.0, self.k >= self.limit, {}


gymnasium.register("test_adapter/Ender-v0", entry_point=Ender)

#: Ender as a cart whose pole angle is the observation's turning angle
ENDER = {
    "system": "CartPole",
    "observation": [0, {"cos": 1, "sin": 2}, 3, {"index": 3, "scale": 0.0}],
}


def plant(adapter, env_id="Pendulum-v1", dt=None, **kwargs) -> ForeignPlant:
    env = gymnasium.make(env_id, **kwargs).unwrapped
    return ForeignPlant(env, AdapterSpec.parse(adapter), dt, env_id)


def test_pendulum_v1_seen_as_vimpcs_pendulum():
    """The mapped state is gymnasium's own (theta + pi, theta_dot), continuous through the
    bottom (gymnasium wraps it at pi, the adapter does not), and the nominal model written
    from its declared rod predicts its step to within its integrator's difference."""
    p = plant(PENDULUM)
    x, info = p.reset(seed=3)
    inner = p.inner
    th, thdot = inner.state
    # (its observation is float32: cos and sin to 1e-7)
    assert math.remainder(x[0] - th - math.pi, 2 * math.pi) == pytest.approx(0.0, abs=1e-6)
    assert x[1] == pytest.approx(thdot, abs=1e-6) and np.array_equal(info["state"], x)
    assert p.dt == 0.05 and p.obs_names == ("theta", "theta_dot")
    assert p.action_space.low.tolist() == [-2.0] and p.action_space.high.tolist() == [2.0]
    # the nominal midpoint VI of the declared rod against gymnasium's semi-implicit Euler,
    # and of a rod declared half as long again
    from vimpc.models import NominalModel

    def errors_of(params):
        system = AdapterSpec.parse({**PENDULUM, "params": params}).system
        model = NominalModel(system, p.dt).fit().discrete_model()
        rng = np.random.default_rng(0)
        x, _ = p.reset(seed=3)
        jumps, errors, moves = 0, [], []
        for _ in range(100):
            u = rng.uniform(-2.0, 2.0, 1)
            before = x
            predicted = np.asarray(model.step(model.from_obs(before), u, model.p_default))
            x, _, terminated, truncated, _ = p.step(u)
            assert not (terminated or truncated)
            jumps += abs(x[0] - before[0]) > math.pi
            if abs(x[1]) < 7.9:  # gymnasium clips the speed at 8 rad/s, the model does not
                errors.append(np.abs(np.asarray(model.to_obs(predicted)).ravel() - x))
                moves.append(np.abs(x - before))
        assert jumps == 0  # no 2 pi jump: the angle is unwrapped
        return np.mean(errors, axis=0), np.mean(moves, axis=0)

    right, moves = errors_of(PENDULUM["params"])
    wrong, _ = errors_of({**PENDULUM["params"], "l": 1.5})
    assert np.all(right < 0.2 * moves)  # measured: 0.11 and 0.08 of the step's change
    # the speed tells the rods apart (measured 5.6x; the angle's error is mostly the two
    # integrators' difference, semi-implicit Euler moving the angle with the new speed)
    assert wrong[1] > 3.0 * right[1]


def test_limits_give_the_margins_and_the_names():
    p = plant(PENDULUM)
    assert [limit.name for limit in p.safety_limits] == ["|theta_dot| <= 8 rad/s"]
    assert p.safety_margin([0.3, 7.5]).tolist() == [0.5, 15.5]
    circles = plant({**ENDER, "limits": {"circles": [
        {"entries": ["s", "theta"], "center": [0.0, 0.0], "radius": 0.5}]}},
        "test_adapter/Ender-v0")  # fmt: skip
    assert circles.safety_margin([0.3, 0.4, 0.0, 0.0]) == pytest.approx([0.0], abs=1e-12)


def test_linear_maps_and_the_action_map():
    """A sum of scaled entries with an offset; the action ``scale * u + offset``, clipped to
    the env's Box, the applied input reported in the model's units."""
    adapter = {
        "system": "CartPole",
        "observation": [
            {"index": [0, 3], "scale": [2.0, -1.0], "offset": 0.5},
            {"cos": 1, "sin": 2, "scale": -1.0},
            3,
            {"index": 0, "scale": 0.0},
        ],
        "action": {"scale": [0.1], "offset": [0.05]},
    }
    p = plant(adapter, "test_adapter/Ender-v0")
    x, _ = p.reset(seed=0)
    assert x.tolist() == pytest.approx([0.5, -3.0, 0.0, 0.0])
    # the box is [-2, 2] on the action, so [(-2 - 0.05) / 0.1, (2 - 0.05) / 0.1] on u
    assert p.action_space.low[0] == pytest.approx(-20.5) and p.action_space.high[
        0
    ] == pytest.approx(19.5)
    x, _, _, _, info = p.step([5.0])
    v = 0.1 * 5.0 + 0.05
    assert x[2] == pytest.approx(v) and x[0] == pytest.approx(2 * 0.1 * v - v + 0.5)
    assert not info["action_clipped"] and info["applied_action"][0] == pytest.approx(5.0)
    _, _, _, _, info = p.step([100.0])
    assert info["action_clipped"] and info["applied_action"][0] == pytest.approx(19.5)


def test_an_angle_is_continuous_across_pi():
    p = plant(ENDER, "test_adapter/Ender-v0", spin=0.3)
    x, _ = p.reset(seed=0)
    angles = [x[1]]
    for _ in range(40):
        x, *_ = p.step([0.0])
        angles.append(x[1])
    assert np.allclose(np.diff(angles), 0.3, atol=1e-12)  # 3.0 to 15.0 rad, never wrapped
    assert angles[-1] == pytest.approx(3.0 + 40 * 0.3)


@pytest.mark.parametrize(
    ("adapter", "env_id", "message"),
    [
        (ENDER, "CartPole-v1", "not a Box"),
        (
            {**PENDULUM, "observation": [{"cos": 0, "sin": 1}, 5]},
            "Pendulum-v1",
            "env.adapter.observation[1] indexes entry 5 of Pendulum-v1's observation, which has 3",
        ),
        (
            {**ENDER, "observation": [1, {"cos": 0, "sin": 3}, 3, 3]},
            "test_adapter/Ender-v0",
            "env.adapter.observation[1] takes an angle from entries (0, 3)",
        ),
        (
            {
                **PENDULUM,
                "system": "RollingDisk",
                "params": {},
                "limits": {},
                "observation": [0, 1, 2, 2, 0, 1, 2, 2],
            },
            "Pendulum-v1",
            "the model has 2 inputs (drive_torque, steer_torque) but Pendulum-v1's action has 1",
        ),
        (
            {**PENDULUM, "observation": [0, 1, 2]},
            "Pendulum-v1",
            "must map each of the 2 entries of the Pendulum's observation (theta, theta_dot), got 3",
        ),
        ({**PENDULUM, "terminal": "restart"}, "Pendulum-v1", "env.adapter.terminal must be one of"),
        ({**PENDULUM, "system": "Pendlum"}, "Pendulum-v1", "env.adapter.system must be one of"),
        ({**PENDULUM, "action": {"scale": [0.0]}}, "Pendulum-v1", "must not be 0"),
        ({**PENDULUM, "observation": [{"cos": 1}, 2]}, "Pendulum-v1", "needs both cos and sin"),
    ],  # fmt: skip
)
def test_bad_maps_are_refused_naming_the_key(adapter, env_id, message):
    with pytest.raises(InputError) as err:
        plant(adapter, env_id)
    assert message in str(err.value)


def test_a_step_that_is_not_the_envs_is_refused():
    with pytest.raises(InputError, match=r"env.dt = 0.02 s is not the step of Pendulum-v1, which "
                       r"advances 0.05 s"):  # fmt: skip
        plant(PENDULUM, dt=0.02)
    assert plant(PENDULUM, dt=0.05).dt == 0.05
    env = Ender()
    del env.dt  # an env that does not say its step
    with pytest.raises(InputError, match="does not say its step"):
        ForeignPlant(env, AdapterSpec.parse(ENDER), None)
    assert ForeignPlant(env, AdapterSpec.parse(ENDER), 0.1).dt == 0.1


def test_reset_options_are_refused_a_foreign_env_starts_from_its_own_reset():
    p = plant(PENDULUM)
    with pytest.raises(InputError, match="its episodes start from its own reset"):
        p.reset(seed=0, options={"state": [0.0, 0.0]})
    with pytest.raises(InputError, match="cannot draw its plant"):
        p.set_plant(1)


# -- termination --------------------------------------------------------------------------


def _hold(u):
    """A controller that always gives ``u``."""
    from types import SimpleNamespace

    from vimpc.mpc.result import Status

    def control(obs, t):
        return SimpleNamespace(u=np.array([u]), status=Status.SOLVED, solve_time=0.0,
                               iterations=0, slack=0.0)  # fmt: skip

    return control


@pytest.mark.parametrize(("terminal", "steps"), [("end", 6), ("continue", 20)])
def test_the_envs_termination_ends_or_is_recorded(terminal, steps):
    """x' = 2 from 0 leaves |x| <= 1 after 6 steps of 0.1 s: with terminal = "end" the
    episode ends there, with "continue" it goes on; either way terminated_at = 6."""
    from vimpc.closedloop import run_episode
    from vimpc.closedloop.metrics import episode_metrics, summarize

    p = plant({**ENDER, "terminal": terminal}, "test_adapter/Ender-v0")
    traj = run_episode(p, _hold(2.0), steps=20, seed=0)
    assert len(traj.inputs) == steps and int(traj.terminated_at) == 6
    assert int(traj.truncated_at) == -1
    m = episode_metrics(traj, success=lambda t: True)
    assert m["terminated_at"] == 6 and "truncated_at" not in m
    s = summarize([m, {**m}], [traj, traj])
    assert s["terminated_episodes"] == 2 and s["terminated_first_step_median"] == 6.0


def test_data_record_where_the_env_said_the_episode_was_over():
    from vimpc.data import rollout_env

    p = plant({**ENDER, "terminal": "continue"}, "test_adapter/Ender-v0")
    inputs = np.stack([np.full((10, 1), 2.0), np.full((10, 1), 0.5)])
    data = rollout_env(p, 2, 10, inputs, seed=0)
    assert data.metadata["env_terminated_at"] == [6, -1]
    ended = plant(ENDER, "test_adapter/Ender-v0")  # terminal = "end": no silent restart
    with pytest.raises(InputError, match="terminated at step 6 of 10"):
        rollout_env(ended, 2, 10, inputs, seed=0)


# -- scenarios ------------------------------------------------------------------------------

SCENARIO = """
[env]
id = "Pendulum-v1"
{dt}
[env.adapter]
system = "Pendulum"
params = {{ m = 1.0, l = 1.0, g = 10.0 }}
observation = [{{ cos = 0, sin = 1, offset = 3.141592653589793 }}, 2]
{extra}
[model]
family = "nominal"

[controller]
horizon = 10

[controller.cost]
Q = [10.0, 0.1]
R = [0.01]
reference = [3.141592653589793, 0.0]
periodic = ["theta"]

[episodes]
count = 2
steps = 10
{more}
"""


def _write(tmp_path: Path, dt="", extra="", more="", name="foreign.toml") -> Path:
    path = tmp_path / name
    path.write_text(SCENARIO.format(dt=dt, extra=extra, more=more), encoding="utf-8")
    return path


def test_a_foreign_scenario_takes_the_envs_step_and_bounds(tmp_path):
    cfg = scenario.load_scenario(_write(tmp_path))
    assert cfg.env.dt == 0.05
    assert list(cfg.controller.constraints.u_min) == [-2.0]
    assert list(cfg.controller.constraints.u_max) == [2.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dt": "dt = 0.1"}, "env.dt = 0.1 s is not the step of Pendulum-v1"),
        (
            {
                "more": "[data]\ninitial_state = 'halton'\nlow = [0.0, 0.0]\nhigh = [1.0, 1.0]\n"
                "[model]\n"
            },
            "data.initial_state = 'halton' places start states",
        ),
        ({"extra": "observation_ = 1\n"}, "env.adapter has unknown keys ['observation_']"),
        ({"extra": "terminal = 'never'\n"}, "env.adapter.terminal must be one of"),
    ],  # fmt: skip
)
def test_foreign_scenarios_refuse_what_the_env_cannot_do(tmp_path, kwargs, message):
    if "more" in kwargs:  # a learned family needs data: [model] moves after [data]
        text = SCENARIO.format(dt="", extra="", more="").replace(
            '[model]\nfamily = "nominal"',
            "[data]\ninitial_state = 'halton'\nlow = [0.0, 0.0]\nhigh = [1.0, 1.0]\n\n"
            '[model]\nfamily = "gp_vi"\ncoordinates = "sincos"',
        )
        path = tmp_path / "foreign.toml"
        path.write_text(text, encoding="utf-8")
    else:
        path = _write(tmp_path, **kwargs)
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path)
    assert message in str(err.value)


def test_a_vimpc_env_refuses_an_adapter_and_a_foreign_env_needs_one(tmp_path):
    text = _write(tmp_path).read_text()
    (tmp_path / "own.toml").write_text(text.replace('"Pendulum-v1"', '"vimpc/Pendulum-v0"'))
    with pytest.raises(ConfigError, match="env.adapter is for environments that are not vimpc"):
        scenario.load_scenario(tmp_path / "own.toml")
    adapter = text[text.index("[env.adapter]") : text.index("[model]")]
    (tmp_path / "bare.toml").write_text(text.replace(adapter, ""))
    with pytest.raises(ConfigError, match=r"declare \[env.adapter\]"):
        scenario.load_scenario(tmp_path / "bare.toml")


def test_an_xml_file_is_relative_to_the_file_that_names_it(tmp_path, monkeypatch):
    """A scenario's MJCF path is relative to the scenario file; a --set one to the working
    folder; either way the resolved configuration holds the absolute path, and a missing
    file is refused by name before any env is made."""
    sub = tmp_path / "sub"
    sub.mkdir()
    path = sub / "s.toml"
    text = SCENARIO.format(dt="", extra="", more="").replace(
        'id = "Pendulum-v1"', 'id = "Pendulum-v1"\nkwargs = { xml_file = "plant.xml" }'
    )
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path)
    assert f"env.kwargs.xml_file = {str(sub / 'plant.xml')!r}: no such file" in str(err.value)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path, ["env.kwargs.xml_file=other.xml"])
    assert f"{str(tmp_path / 'other.xml')!r}: no such file" in str(err.value)


MUJOCO_SCENARIO = """
[env]
id = "InvertedPendulum-v5"
kwargs = {{ xml_file = "{xml}", frame_skip = 5 }}

[env.adapter]
system = "CartPole"
observation = [0, 1, 2, 3]
action = {{ scale = [0.1] }}
terminal = "continue"

[model]
family = "nominal"

[controller]
horizon = 5

[controller.cost]
Q = [1.0, 1.0, 0.1, 0.1]
R = [0.01]

[episodes]
steps = 10
"""


def test_an_mjcf_that_does_not_parse_is_refused_with_mujocos_message(tmp_path):
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body><joint type='hinge'/></worldbody></mujoco>")
    path = tmp_path / "s.toml"
    path.write_text(MUJOCO_SCENARIO.format(xml="broken.xml"))
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path)
    text = str(err.value)
    assert f"env.kwargs.xml_file = {str(broken)!r}" in text and "XML parse error" in text


def test_mujoco_not_installed_names_the_extra(tmp_path, monkeypatch):
    import gymnasium.error

    def missing(*args, **kwargs):
        raise gymnasium.error.DependencyNotInstalled("MuJoCo is not installed")

    root = Path(__file__).parents[2]
    path = tmp_path / "s.toml"
    path.write_text(MUJOCO_SCENARIO.format(xml=root / "scenarios" / "mujoco" / "cartpole.xml"))
    monkeypatch.setattr(gymnasium, "make", missing)
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[mujoco\]"'):
        scenario.load_scenario(path)
