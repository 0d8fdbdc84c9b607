"""Scenario checks against the env: the results folder name, input bounds within the env's
action bounds, observation entries by index or name, the success test on several entries,
and what reading a file that is no scenario says."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vimpc import cli, pipeline, scenario
from vimpc.errors import ConfigError

ROOT = Path(__file__).parents[2]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
CARTPOLE = str(ROOT / "scenarios" / "cartpole_swingup.toml")
FOURBAR = str(ROOT / "scenarios" / "fourbar_tracking.toml")
DISK = str(ROOT / "scenarios" / "rollingdisk_parking.toml")


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture
def no_env(monkeypatch):
    """Building an env fails the test: every check here comes before any env is built."""

    def refuse(*args, **kwargs):
        raise AssertionError("an environment was built before the scenario was refused")

    monkeypatch.setattr(pipeline, "build_env", refuse)


def _refused(path: str, overrides: list[str], message: str, out: Path, capsys) -> None:
    """``overrides`` are refused on load with ``message``, and by ``vimpc run`` as one line
    with exit code 2, writing nothing."""
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path, overrides)
    assert message in str(err.value)
    assert cli.main(["run", path, "--out", str(out / "runs"), "--quiet", *_sets(overrides)]) == 2
    printed = capsys.readouterr().err
    assert message in printed and printed.count("\n") == 1
    assert not list(out.rglob("*"))


# -- the results folder name -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../x", "", ".", "..", "a/b", "a b", "/tmp/x", "a\\b"])
def test_a_name_that_is_not_one_folder_is_refused(name, tmp_path, no_env, capsys):
    _refused(
        PENDULUM,
        [f"scenario.name={json.dumps(name)}"],  # a TOML string
        f"scenario.name = {name!r} must be one folder name: letters, digits, '-', '_' and '.'",
        tmp_path,
        capsys,
    )


def test_a_file_name_that_is_not_a_folder_name_must_be_replaced(tmp_path, no_env):
    odd = tmp_path / "my scenario.toml"
    odd.write_text(Path(PENDULUM).read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigError, match="from the file name 'my scenario.toml'; set scenario"):
        scenario.load_scenario(odd)
    assert scenario.load_scenario(odd, ['scenario.name="mine"'])["scenario"]["name"] == "mine"


def test_a_good_name_is_the_runs_folder_under_the_root(tmp_path):
    out = tmp_path / "runs"
    args = ["--set", 'scenario.name="swing-up_2.b"', "--set", "episodes.steps=2"]
    args += ["--set", "controller.horizon=5", "--no-plots", "--quiet"]
    assert cli.main(["run", PENDULUM, "--out", str(out), *args]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert [p.name for p in out.iterdir()] == ["swing-up_2.b"]


# -- input bounds --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "controller.constraints.u_min=[-inf]",
            "controller.constraints.u_min[0] = -inf is outside the action bounds of "
            "vimpc/Pendulum-v0: it clips input 0 (torque) to [-2.0, 2.0]",
        ),
        (
            "controller.constraints.u_max=[2.5]",
            "controller.constraints.u_max[0] = 2.5 is outside the action bounds",
        ),
        (
            "controller.constraints.u_max=[-3.0]",
            "controller.constraints.u_max[0] = -3.0 is outside the action bounds",
        ),
    ],
)
def test_input_bounds_beyond_the_env_clipping_are_refused(
    override, message, tmp_path, no_env, capsys
):
    _refused(PENDULUM, [override], message, tmp_path, capsys)


def test_input_bounds_of_each_input_are_checked_against_its_own_limit(no_env):
    # the disk's steering torque is clipped at 1 N m, its drive torque at 2 N m
    with pytest.raises(ConfigError, match=r"u_max\[1\] = 1.5 .* input 1 \(steer_torque\)"):
        scenario.load_scenario(DISK, ["controller.constraints.u_max=[2.0, 1.5]"])
    cfg = scenario.load_scenario(DISK, ["controller.constraints.u_max=[1.5, 0.5]"])
    assert cfg["controller"]["constraints"]["u_max"] == [1.5, 0.5]


def test_unset_input_bounds_are_the_env_action_bounds():
    cfg = scenario.load_scenario(PENDULUM)
    cons = cfg["controller"]["constraints"]
    assert cons["u_min"] == [-2.0] and cons["u_max"] == [2.0]
    env = pipeline.build_env(cfg)
    model = pipeline.build_model(cfg, env)
    ctrl = pipeline.build_controller(cfg, model, env)
    np.testing.assert_array_equal(ctrl.constraints.u_min, env.action_space.low)
    np.testing.assert_array_equal(ctrl.constraints.u_max, env.action_space.high)
    tighter = scenario.load_scenario(PENDULUM, ["controller.constraints.u_min=[-1.0]"])
    ctrl = pipeline.build_controller(tighter, model, env)
    np.testing.assert_array_equal(ctrl.constraints.u_min, [-1.0])
    np.testing.assert_array_equal(ctrl.constraints.u_max, [2.0])


# -- observation entries by index or name --------------------------------------------------------


def test_names_become_indices_in_the_resolved_configuration(no_env, tmp_path):
    cfg = scenario.load_scenario(
        CARTPOLE,
        ['controller.cost.periodic=["theta", 0]', 'metrics.success_index="theta_dot"'],
    )
    assert cfg["controller"]["cost"]["periodic"] == [1, 0]
    assert cfg["metrics"]["success_index"] == 3
    disk = scenario.load_scenario(DISK)
    assert disk["controller"]["constraints"]["circles"][0]["indices"] == [2, 3]
    assert disk["metrics"]["success_index"] == [2, 3, 1]  # x, y and the heading phi
    fourbar = scenario.load_scenario(FOURBAR)
    assert fourbar["controller"]["cost"]["reference_index"] == 0
    assert fourbar["metrics"]["success_index"] == 0
    # the resolved configuration (indices) reads back to itself
    (tmp_path / "again.toml").write_text(scenario.dump_toml(disk), encoding="utf-8")
    assert scenario.load_scenario(tmp_path / "again.toml") == disk


def test_an_index_or_name_of_the_scenario_files_is_the_same_entry(no_env):
    # the scenario files name their entries; the indices give the same configuration
    by_index = scenario.load_scenario(
        CARTPOLE, ["controller.cost.periodic=[1]", "metrics.success_index=1"]
    )
    assert by_index == scenario.load_scenario(CARTPOLE)


@pytest.mark.parametrize(
    ("path", "override", "message"),
    [
        (
            CARTPOLE,
            'controller.cost.periodic=["tehta"]',
            "controller.cost.periodic[0] = 'tehta' is not an observation name of "
            "vimpc/CartPole-v0; did you mean 'theta'? (names: s, theta, s_dot, theta_dot; or an "
            "index 0 to 3)",
        ),
        (
            CARTPOLE,
            'metrics.success_index="angle"',
            "metrics.success_index = 'angle' is not an observation name of vimpc/CartPole-v0 "
            "(names: s, theta, s_dot, theta_dot",
        ),
        (
            CARTPOLE,
            'metrics.success_index=["s", "thetadot"]',
            "metrics.success_index[1] = 'thetadot' is not an observation name of "
            "vimpc/CartPole-v0; did you mean 'theta_dot'?",
        ),
        (
            CARTPOLE,
            "metrics.success_index=1.5",
            "metrics.success_index must be an observation index or name, got 1.5 (float)",
        ),
        (
            CARTPOLE,
            "metrics.success_index=[]",
            "metrics.success_index must be an observation index or name or a non-empty array",
        ),
        (
            CARTPOLE,
            'controller.cost.periodic="theta"',
            "controller.cost.periodic must be an array of observation indices or names, got "
            "'theta'",
        ),
        (
            CARTPOLE,
            "controller.cost.periodic=[-1]",
            "controller.cost.periodic[0] = -1 is not an observation index of vimpc/CartPole-v0 "
            "(0 to 3: s, theta, s_dot, theta_dot)",
        ),
        # checked even with reference_from_env = false: turning it on must not fail later
        (
            CARTPOLE,
            "controller.cost.reference_index=4",
            "controller.cost.reference_index = 4 is not an observation index of vimpc/CartPole-v0",
        ),
        (
            FOURBAR,
            'controller.cost.reference_index="crank"',
            "controller.cost.reference_index = 'crank' is not an observation name of "
            "vimpc/FourBar-v0",
        ),
        (
            CARTPOLE,
            "controller.cost.reference_index=[1]",
            "controller.cost.reference_index must be an observation index or name, got [1]",
        ),
    ],
)
def test_bad_observation_entries_are_refused(path, override, message, tmp_path, no_env, capsys):
    _refused(path, [override], message, tmp_path, capsys)


@pytest.mark.parametrize(
    ("circle", "message"),
    [
        (
            '{center = [1.0, 0.0], radius = 0.35, indices = ["x", "yy"]}',
            "controller.constraints.circles[0].indices[1] = 'yy' is not an observation name of "
            "vimpc/RollingDisk-v0; did you mean 'y'?",
        ),
        (
            "{center = [1.0, 0.0], radius = 0.35, indices = [2, 8]}",
            "controller.constraints.circles[0].indices[1] = 8 is not an observation index",
        ),
        (
            '{center = [1.0, 0.0], radius = 0.35, indices = ["x"]}',
            "controller.constraints.circles[0].indices must have 2 entries, got 1",
        ),
        (
            '{center = [1.0, 0.0], radius = 0.35, indices = ["x", "y", "phi"]}',
            "controller.constraints.circles[0].indices must have 2 entries, got 3",
        ),
        (
            '{center = [1.0], radius = 0.35, indices = ["x", "y"]}',
            "controller.constraints.circles[0].center must have 2 entries, got 1: [1.0]",
        ),
        (
            '{center = [1.0, 0.0, 0.0], radius = 0.35, indices = ["x", "y"]}',
            "controller.constraints.circles[0].center must have 2 entries, got 3",
        ),
        (
            '{center = [1.0, 0.0], radius = 0.35, indices = ["x", 2]}',
            "controller.constraints.circles[0].indices must be two different observation "
            "entries (the circle's plane), got [2, 2]",
        ),
    ],
)
def test_bad_circles_are_refused(circle, message, tmp_path, no_env, capsys):
    _refused(DISK, [f"controller.constraints.circles=[{circle}]"], message, tmp_path, capsys)


# -- the success test on several entries -----------------------------------------------------------


def _parked(x: float, y: float, phi: float, steps: int = 40, dt: float = 0.05):
    """A rolling-disk trajectory at rest at ``(x, y, phi)``."""
    states = np.zeros((steps + 1, 8))
    states[:, 1], states[:, 2], states[:, 3] = phi, x, y
    return SimpleNamespace(
        t=dt * np.arange(steps + 1), states=states, reference=np.full_like(states, np.nan)
    )


def test_the_disk_succeeds_only_at_the_whole_target_pose(no_env):
    success = pipeline.success_test(scenario.load_scenario(DISK))
    assert success(_parked(2.0, 0.0, 0.0))
    assert success(_parked(2.03, -0.04, 0.08))
    assert not success(_parked(2.0, 0.095, 0.0))  # parked beside the target
    assert not success(_parked(2.0, 0.0, 0.3))  # at the target, turned away
    assert success(_parked(2.0, 0.0, 2 * np.pi + 0.05))  # the heading is an angle
    # the former test, on x alone, took the disk parked beside the target for a success
    x_only = scenario.load_scenario(
        DISK,
        [
            'metrics.success_index="x"',
            "metrics.success_target=2.0",
            "metrics.success_tolerance=0.05",
            "metrics.success_periodic=false",
        ],
    )
    assert pipeline.success_test(x_only)(_parked(2.0, 0.095, 0.0))


def test_one_value_applies_to_every_entry_and_arrays_are_per_entry(no_env):
    pose = ['metrics.success_index=["x", "y", "phi"]', "metrics.success_target=[2.0, 0.0, 0.0]"]
    loose = scenario.load_scenario(DISK, [*pose, "metrics.success_tolerance=0.2"])
    assert pipeline.success_test(loose)(_parked(2.0, 0.15, 0.15))
    # no angle wrapping unless asked: a heading of 2 pi is 2 pi away from 0
    plain = scenario.load_scenario(DISK, [*pose, "metrics.success_periodic=false"])
    assert not pipeline.success_test(plain)(_parked(2.0, 0.0, 2 * np.pi))
    wrapped = scenario.load_scenario(DISK, [*pose, "metrics.success_periodic=true"])
    assert pipeline.success_test(wrapped)(_parked(2.0, 0.0, 2 * np.pi))
    # one entry, its values given as one-entry arrays
    one = scenario.load_scenario(
        DISK,
        [
            'metrics.success_index="y"',
            "metrics.success_target=[0.0]",
            "metrics.success_tolerance=[0.01]",
            "metrics.success_periodic=[false]",
        ],
    )
    assert one["metrics"]["success_index"] == 3
    assert pipeline.success_test(one)(_parked(2.5, 0.005, 1.0))
    assert not pipeline.success_test(one)(_parked(2.0, 0.02, 0.0))


def test_the_success_test_holds_over_the_whole_window(no_env):
    success = pipeline.success_test(scenario.load_scenario(DISK))  # window 1 s
    traj = _parked(2.0, 0.0, 0.0)
    traj.states[-20, 3] = 0.2  # 0.95 s before the end: inside the window
    assert not success(traj)
    traj = _parked(2.0, 0.0, 0.0)
    traj.states[-22, 3] = 0.2  # 1.05 s before the end: before it
    assert success(traj)


def test_several_entries_against_the_reference(no_env):
    cfg = scenario.load_scenario(
        FOURBAR,
        ['metrics.success_index=["theta1", "theta1_dot"]', "metrics.success_tolerance=0.05"],
    )
    assert cfg["metrics"]["success_index"] == [0, 3]
    states = np.zeros((41, 6))
    reference = np.full_like(states, np.nan)
    reference[:, 0], reference[:, 3] = 0.3, 2.0
    states[:, 0], states[:, 3] = 0.32, 2.0
    traj = SimpleNamespace(t=0.02 * np.arange(41), states=states, reference=reference)
    assert pipeline.success_test(cfg)(traj)
    traj.states[-1, 3] = 2.1
    assert not pipeline.success_test(cfg)(traj)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ['metrics.success_index=["x", "y", "phi"]', "metrics.success_target=[2.0, 0.0]"],
            "metrics.success_target must be one value for every entry or have 3 entries (one per "
            "entry of metrics.success_index = ['x', 'y', 'phi']), got 2: [2.0, 0.0]",
        ),
        (
            ["metrics.success_tolerance=[0.05, 0.05]"],
            "metrics.success_tolerance must be one value for every entry or have 3 entries",
        ),
        (
            ["metrics.success_periodic=[true]"],
            "metrics.success_periodic must be one value for every entry or have 3 entries",
        ),
        (
            ["metrics.success_tolerance=[0.05, 0.0, 0.1]"],
            "metrics.success_tolerance[1] must be a positive number, got 0.0",
        ),
        (
            ['metrics.success_target=[2.0, "0", 0.0]'],
            "metrics.success_target[1] must be a number, got '0'",
        ),
        (
            ["metrics.success_periodic=[false, false, 1]"],
            "metrics.success_periodic[2] must be true or false, got 1",
        ),
        (
            ["metrics.success_target=[2.0, 0.0, nan]"],
            "metrics.success_target[2] must be a finite number, got nan",
        ),
        (
            ["metrics.success_against_reference=true"],
            "metrics.success_target = [2.0, 0.0, 0.0] would be ignored",
        ),
    ],
)
def test_bad_success_tests_are_refused(overrides, message, tmp_path, no_env, capsys):
    _refused(DISK, overrides, message, tmp_path, capsys)


# -- files that are no scenario --------------------------------------------------------------------


def test_a_folder_is_not_a_scenario_file(tmp_path, capsys):
    with pytest.raises(ConfigError, match="is a folder, not a scenario file"):
        scenario.read_toml(tmp_path)
    assert cli.main(["run", str(tmp_path), "--out", str(tmp_path / "runs")]) == 2
    assert "is a folder, not a scenario file" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="does not exist"):
        scenario.read_toml(tmp_path / "nope.toml")


def test_files_that_are_no_scenario_say_why(tmp_path):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        scenario.read_toml(binary)
    broken = tmp_path / "broken.toml"
    broken.write_text("[env\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        scenario.read_toml(broken)
    # a document whose [scenario] is no table is read; loading it refuses it
    odd = tmp_path / "odd.toml"
    odd.write_text('scenario = 3\n[env]\nid = "vimpc/Pendulum-v0"\n', encoding="utf-8")
    assert scenario.read_toml(odd)["scenario"] == 3
    with pytest.raises(ConfigError, match="scenario must be a table, got 3"):
        scenario.load_scenario(odd)


def test_an_unreadable_file_is_a_config_error(tmp_path, monkeypatch):
    locked = tmp_path / "locked.toml"
    locked.write_text(Path(PENDULUM).read_text(encoding="utf-8"), encoding="utf-8")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(ConfigError, match="locked.toml cannot be read: Permission denied"):
        scenario.read_toml(locked)


# -- a saved model that cannot serve the controller or the variation -------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ['controller.tightening="tube"'],
            "controller.tightening = 'tube' needs a model with a bound, and the saved model ",
        ),
        (
            ['controller.tightening="tube"', 'controller.tube="feedback"'],
            "controller.tightening = 'tube' needs a model with a bound, and the saved model ",
        ),
        (["data.fits=2"], "data.fits = 2 repeats the data collection and the fit, but the saved"),
    ],
)
def test_a_saved_model_without_a_bound_is_refused_a_tube_and_fits(
    overrides, message, tmp_path, no_env, capsys
):
    import vimpc
    from vimpc.mechanics import Pendulum
    from vimpc.models import NominalModel

    saved = tmp_path / "models" / "nobound.vimpc"
    saved.parent.mkdir()
    vimpc.save_model(NominalModel(Pendulum(), 0.05).discrete_model(), saved)
    out = tmp_path / "out"
    out.mkdir()
    _refused(PENDULUM, [f'model.path="{saved}"', *overrides], message, out, capsys)


# -- one rule for settings that cannot act ------------------------------------------------------

SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")


@pytest.mark.parametrize(
    ("path", "override", "message"),
    [
        (
            PENDULUM,
            'controller.tube_errors="gaussian"',
            "controller.tube_errors = 'gaussian' applies only to controller.tightening = "
            "'tube', and would be ignored with controller.tightening = 'none'",
        ),
        (
            PENDULUM,
            "controller.tube_memory=0.5",
            "controller.tube_memory = 0.5 applies only to controller.tightening = 'tube'",
        ),
        (
            PENDULUM,
            "model.delta=0.1",
            "model.delta = 0.1 applies only where model.bound is not 'none', and would be "
            "ignored with model.bound = 'none'",
        ),
        (
            PENDULUM,
            "data.calibration_episodes=50",
            "data.calibration_episodes = 50 applies only to data.calibration = 'closed_loop'",
        ),
        (
            CARTPOLE,
            "controller.cost.reference_index=1",
            "controller.cost.reference_index = 1 applies only to "
            "controller.cost.reference_from_env = true",
        ),
        (
            SAFE,
            "controller.tube_lipschitz=2.0",
            "controller.tube_lipschitz = 2.0 applies only to controller.tube = 'open_loop', "
            "and would be ignored with controller.tube = 'feedback'",
        ),
    ],
)
def test_a_setting_that_cannot_act_is_refused_by_name(path, override, message):
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path, [override])
    assert message in str(err.value), str(err.value)


def test_every_declared_condition_is_on_a_setting_of_its_own_table():
    from vimpc.scenario.checks import setting_tables

    cfg = scenario.load_scenario(SAFE)
    conditioned = 0
    for prefix, settings, table in setting_tables(cfg):
        for key, setting in settings.items():
            for acts in getattr(setting, "acts", ()):
                assert acts.key in settings and acts.key in table, prefix + key
                conditioned += 1
    assert conditioned >= 20


def test_an_override_that_turns_a_setting_off_drops_the_files_value_only():
    cfg = scenario.load_scenario(
        SAFE, ['controller.tightening="none"', 'model.bound="none"', 'data.calibration="heldout"']
    )
    ctrl = cfg["controller"]
    assert (ctrl["tube"], ctrl["tube_errors"]) == ("open_loop", "box")  # the file's, dropped
    assert (cfg["model"]["bound_level"], cfg["model"]["bound_horizon"]) == ("step", 0)
    assert cfg["data"]["calibration_episodes"] == 100  # the default, as the file had it
    with pytest.raises(ConfigError, match="controller.tube_errors = 'gaussian' applies only"):
        scenario.load_scenario(
            SAFE, ['controller.tightening="none"', 'controller.tube_errors="gaussian"']
        )


def test_an_override_of_the_family_drops_the_files_settings_of_its_family_but_the_bounds():
    # cartpole_gpvi_safe: gp_vi with samples, support_points, coordinates and a conformal
    # bound at the horizon level; lsi has no samples, and its coordinates mean its own
    base = ROOT / "scenarios" / "cartpole_gpvi_safe.toml"
    with pytest.raises(ConfigError, match="unknown key 'model.samples'"):
        # a setting lsi lacks, given by an override itself, is still refused
        scenario.load_scenario(base, ['model.family="lsi"', "model.samples=512"])
    # (the file's conformal_scale = "spread" is gp_vi's posterior spread: lsi has none)
    cfg = scenario.load_scenario(
        base, ['model.family="lsi"', "model.centres=50", 'model.conformal_scale="constant"']
    )
    model = cfg["model"]
    assert model["family"] == "lsi" and model["centres"] == 50  # the override's own setting
    assert model["coordinates"] == "minimal"  # lsi's default, not the file's "sincos"
    bound = (model["bound"], model["delta"], model["bound_level"], model["bound_horizon"])
    assert bound == ("conformal", 0.05, "horizon", 20)  # the same calibration
    # the same family again drops nothing
    same = scenario.load_scenario(base, ['model.family="gp_vi"'])["model"]
    assert (same["samples"], same["support_points"]) == (512, 100)


def test_every_shipped_scenario_and_sweep_loads():
    from vimpc.runs.sweep import read_sweep
    from vimpc.scenario.catalog import shipped_scenarios, shipped_sweeps

    local = sorted(p.stem for p in (ROOT / "scenarios").glob("*.toml"))
    assert sorted(shipped_scenarios()) == local
    for name in local:
        scenario.load_scenario(ROOT / "scenarios" / f"{name}.toml")
    sweeps = sorted((ROOT / "scenarios" / "sweeps").glob("*.toml"))
    assert sweeps and sorted(p.stem for p in sweeps) == sorted(shipped_sweeps())
    for path in sweeps:
        assert read_sweep(path).configurations
