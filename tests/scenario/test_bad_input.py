"""Bad input is refused before any work, with one line that names the key or argument, the
value received and what is expected: impossible or meaningless constraints, problem sizes
that cannot be solved in reasonable time, seeds and other integer ranges, model files and
their folders, the model's CasADi functions called from Python, and the controller's
constructor."""

from __future__ import annotations

import pickle
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import vimpc
from vimpc import cli, scenario
from vimpc._settings import MAX_SEED
from vimpc.dynamics import CheckedFunction, DiscreteModel
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost, PathConstraint
from vimpc.mpc.problem import MAX_DECISION_VARIABLES

ROOT = Path(__file__).parents[2]
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
CARTPOLE = str(ROOT / "scenarios" / "cartpole_swingup.toml")
GPVI = str(ROOT / "scenarios" / "pendulum_gpvi_swingup.toml")
SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
SHORT = ["episodes.count=1", "episodes.steps=3"]


_OBS = ca.SX.sym("obs", 2)
_WALL = ca.Function("wall", [_OBS], [_OBS[0] - 1.0])


@pytest.fixture(scope="module")
def pendulum() -> DiscreteModel:
    return NominalModel(Pendulum(), 0.05).discrete_model()


def _refused(path: str, overrides: list[str], message: str, out: Path, capsys) -> str:
    """``overrides`` are refused on load with ``message``, and by ``vimpc run`` as one line
    with exit code 2, writing nothing; returns the message."""
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(path, [*SHORT, *overrides])
    assert message in str(err.value), str(err.value)
    sets = [arg for item in [*SHORT, *overrides] for arg in ("--set", item)]
    assert cli.main(["run", path, "--out", str(out / "runs"), "--quiet", *sets]) == 2
    printed = capsys.readouterr().err
    assert message in printed and printed.count("\n") == 1, printed
    assert not list(out.rglob("*"))
    return str(err.value)


# -- constraints that can never be met or mean nothing ----------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "controller.constraints.obs_max=[-inf, inf]",
            "controller.constraints.obs_max[0] = -inf excludes every value, so it can never be "
            "met: an upper bound must be a finite number or inf (no bound)",
        ),
        (
            "controller.constraints.obs_min=[inf, -inf]",
            "controller.constraints.obs_min[0] = inf excludes every value, so it can never be "
            "met: a lower bound must be a finite number or -inf (no bound)",
        ),
        (
            "controller.constraints.u_min=[inf]",
            "controller.constraints.u_min[0] = inf excludes every value",
        ),
        (
            "controller.constraints.obs_min=[20000.0, -inf]",
            "controller.constraints.obs_min[0] = 20000.0 (theta) is outside the range "
            "[-10000, 10000] every observation of vimpc/Pendulum-v0 stays in",
        ),
        (
            "controller.constraints.obs_max=[inf, -5000.0]",
            "controller.constraints.obs_max[1] = -5000.0 (theta_dot) is outside the range "
            "[-1000, 1000]",
        ),
        (
            "controller.cost.Q=[inf, 0.1]",
            "controller.cost.Q[0] must be a finite number, got inf",
        ),
        (
            "controller.constraints.circles=[{center=[inf, 0.0], radius=1.0, indices=[0, 1]}]",
            "controller.constraints.circles[0].center[0] must be a finite number, got inf",
        ),
    ],
)
def test_constraints_that_exclude_every_value_are_refused(override, message, tmp_path, capsys):
    _refused(PENDULUM, [override], message, tmp_path, capsys)


@pytest.mark.parametrize(
    "path, overrides, message",
    [
        (
            PENDULUM,
            ["controller.cost.reference=[1e300, 0.0]"],
            "controller.cost.reference[0] = 1e+300 (theta) is outside the range [-10000, 10000] "
            "every observation of vimpc/Pendulum-v0 stays in, so no state can reach it",
        ),
        (
            PENDULUM,
            ["metrics.success_target=1e5"],
            "metrics.success_target = 100000.0 (theta) is outside the range [-10000, 10000] "
            "every observation of vimpc/Pendulum-v0 stays in, so no episode can succeed",
        ),
        (
            PENDULUM,
            ["controller.cost.periodic=[0, 'theta']"],
            "controller.cost.periodic[1] = 'theta' (entry 0) is listed twice",
        ),
        (
            SAFE,
            [
                "data.low=[20000.0, 0.0, 0.0, 0.0]",
                "data.high=[30000.0, 0.0, 0.0, 0.0]",
            ],
            "data.low[0] = 20000.0 (s) is outside the range [-10000, 10000] the env's states "
            "stay in, so trajectories cannot start there",
        ),
    ],
)
def test_targets_no_state_reaches_are_refused(path, overrides, message, tmp_path, capsys):
    _refused(path, overrides, message, tmp_path, capsys)


def test_inf_is_still_no_bound_where_the_schema_allows_it():
    cfg = scenario.load_scenario(
        PENDULUM,
        [
            *SHORT,
            "controller.constraints.obs_min=[-inf, -inf]",
            "controller.constraints.obs_max=[inf, inf]",
        ],
    )
    assert cfg["controller"]["constraints"]["obs_max"] == [np.inf, np.inf]


@pytest.mark.parametrize(
    "overrides, message",
    [
        # every pendulum episode starts within 0.1 of rest: theta_dot >= 3 rad/s excludes it
        (
            ["controller.constraints.obs_min=[-inf, 3.0]"],
            "controller.constraints.obs_min[1] = 3.0 (theta_dot) is a hard bound the start "
            "already breaks: episode 0 (seed 0) starts at (theta = ",
        ),
        (
            ["controller.constraints.obs_max=[-0.5, inf]"],
            "controller.constraints.obs_max[0] = -0.5 (theta) is a hard bound the start",
        ),
        (
            [
                "controller.constraints.circles=[{center=[0.0, 0.0], radius=1.0, "
                "indices=['theta', 'theta_dot'], soft=false}]"
            ],
            "controller.constraints.circles[0] (centre [0.0, 0.0], radius 1.0 on theta, "
            "theta_dot) is a hard keep-out circle the start lies inside: episode 0 (seed 0)",
        ),
    ],
)
def test_hard_constraints_the_start_breaks_are_refused(overrides, message, tmp_path, capsys):
    _refused(PENDULUM, overrides, message, tmp_path, capsys)


def test_the_same_bounds_soft_or_around_the_start_are_accepted():
    soft = [
        *SHORT,
        "controller.constraints.obs_min=[-inf, 3.0]",
        "controller.constraints.soft_bounds=true",
    ]
    assert scenario.load_scenario(PENDULUM, soft)["controller"]["constraints"]["soft_bounds"]
    around = [*SHORT, "episodes.count=20", "controller.constraints.obs_min=[-0.5, -inf]"]
    assert scenario.load_scenario(PENDULUM, around)["controller"]["constraints"]["obs_min"][0]


def test_a_later_episode_that_starts_outside_is_named(tmp_path, capsys):
    # the cart-pole starts within 0.1 of rest; some seed of the first 50 starts below s = -0.05
    sets = [
        "episodes.count=50",
        "controller.constraints.obs_min=[-0.05, -inf, -inf, -inf]",
        "controller.constraints.soft_bounds=false",
    ]
    with pytest.raises(ConfigError, match=r"obs_min\[0\] = -0.05 \(s\) is a hard bound") as err:
        scenario.load_scenario(CARTPOLE, [*SHORT, *sets])
    assert "episodes.seed" in str(err.value)


# -- problem sizes ---------------------------------------------------------------------------


def test_a_horizon_too_large_to_build_is_refused_with_an_estimate(tmp_path, capsys):
    text = _refused(
        PENDULUM,
        ["controller.horizon=100000"],
        "controller.horizon = 100000 gives an NLP of 500002 decision variables",
        tmp_path,
        capsys,
    )
    assert f"above the limit of {MAX_DECISION_VARIABLES}" in text
    assert "building it would take about 100 s" in text
    assert "give a horizon of at most 3999 steps" in text


def test_the_controller_refuses_the_same_problem_before_building(pendulum):
    with pytest.raises(InputError, match="horizon = 100000 gives an NLP of 500002 decision"):
        MPC(pendulum, 100_000, Cost(Q=[1.0, 0.1], R=[0.01]))
    with pytest.raises(InputError, match="horizon = 7000 gives an NLP of 21002 decision"):
        MPC(pendulum, 7000, Cost(Q=[1.0, 0.1], R=[0.01]), transcription="step")


def test_model_substeps_that_would_hang_the_controller_are_refused(tmp_path, capsys):
    _refused(
        PENDULUM,
        ["model.substeps=1000000000", "controller.transcription='step'"],
        "model.substeps must be a positive integer <= 10000 (vimpc._settings.MAX_SUBSTEPS",
        tmp_path,
        capsys,
    )


def test_a_control_step_too_long_for_the_env_is_refused(tmp_path, capsys):
    _refused(
        PENDULUM,
        ["env.dt=1e9"],
        "env.dt = 1000000000.0 s is 1e+13 substeps of the env's ground truth (0.0001 s each), "
        "above the limit of 100000",
        tmp_path,
        capsys,
    )


def test_sqp_settings_with_another_solver_are_refused(tmp_path, capsys):
    _refused(
        PENDULUM,
        ["controller.solver='ipopt'", "controller.hessian='exact'"],
        "controller.hessian = 'exact' applies only to controller.solver = 'sqpmethod' or 'rti'",
        tmp_path,
        capsys,
    )


# -- seeds and integer ranges ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path, override, message",
    [
        (PENDULUM, "episodes.seed=-1", "episodes.seed must be an integer in [0, 4294967295]"),
        (
            PENDULUM,
            "episodes.seed=4294967295",
            "episodes.seed = 4294967295 with episodes.count = 2 uses seeds up to 4294967296",
        ),
        (GPVI, "data.seed=-1", "data.seed must be an integer in [0, 4294967295] (a seed), got -1"),
        (GPVI, "data.heldout_seed=-3", "data.heldout_seed must be an integer in [0, 4294967295]"),
        (GPVI, "model.seed=-1", "model.seed must be an integer in [0, 4294967295]"),
        (
            GPVI,
            "data.excitation_options={hold=-1}",
            "data.excitation_options = {'hold': -1} (data.excitation = 'random_steps'): hold "
            "must be a positive integer, got -1",
        ),
    ],
)
def test_seeds_and_integer_ranges_are_checked(path, override, message, tmp_path, capsys):
    overrides = [override, "episodes.count=2"] if "4294967295" in override else [override]
    _refused(path, overrides, message, tmp_path, capsys)


def test_more_episodes_than_seeds_say_to_lower_the_count():
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(PENDULUM, [*SHORT, "episodes.count=9223372036854775807"])
    assert str(err.value).endswith("set episodes.count <= 4294967296")


def test_the_largest_seed_is_accepted():
    cfg = scenario.load_scenario(PENDULUM, [*SHORT, f"episodes.seed={MAX_SEED}"])
    assert cfg["episodes"]["seed"] == MAX_SEED


def test_a_billion_training_trajectories_are_checked_in_no_time():
    # the overlap of training and held-out seeds is two intervals, not two sets of seeds
    with pytest.raises(ConfigError, match="overlapping reset seeds"):
        scenario.load_scenario(GPVI, [*SHORT, "data.trajectories=1000000000"])


# -- model files -----------------------------------------------------------------------------


def test_overwrite_must_be_a_bool(pendulum, tmp_path):
    path = vimpc.save_model(pendulum, tmp_path / "p.vimpc")
    before = path.read_bytes()
    with pytest.raises(InputError, match="overwrite must be True or False, got 'no'"):
        vimpc.save_model(pendulum, path, overwrite="no")
    assert path.read_bytes() == before


def test_save_into_a_missing_folder_names_the_path_and_the_folder(pendulum, tmp_path):
    path = tmp_path / "no" / "such" / "m.vimpc"
    with pytest.raises(InputError) as err:
        vimpc.save_model(pendulum, path)
    text = str(err.value)
    assert f"cannot save the model to {str(path)!r}" in text
    assert f"the folder {str(path.parent)!r} does not exist" in text
    assert f"({str(tmp_path / 'no')!r} is missing)" in text
    assert ".tmp" not in text and not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "m.txt", "a DiscreteModel file must have the suffix '.vimpc', got '.txt'"),
        (lambda d: (d / "f.vimpc").mkdir() or d / "f.vimpc", "is a directory, not a Discrete"),
        (lambda d: d, "is a directory, not a DiscreteModel file"),
        (
            lambda d: (d / "a.txt").write_text("x") and d / "a.txt" / "m.vimpc",
            "is a file, not a folder",
        ),
        (lambda d: 3, "cannot save the model to 3: the path must be a str or os.PathLike"),
    ],
)
def test_save_refuses_paths_it_cannot_write(pendulum, tmp_path, make, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        vimpc.save_model(pendulum, make(tmp_path))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "none.vimpc", "does not exist"),
        (lambda d: (d / "f.vimpc").mkdir() or d / "f.vimpc", "is a directory"),
        (lambda d: (d / "m.toml").write_text("x") and d / "m.toml", "suffix '.vimpc'"),
        (lambda d: (d / "e.vimpc").write_text("") or d / "e.vimpc", "the file is empty"),
        (lambda d: (d / "b.vimpc").write_bytes(b"\xff\xfe") and d / "b.vimpc", "not UTF-8"),
        (lambda d: None, "cannot load a model from None"),
    ],
)
def test_load_gives_one_line_for_what_is_no_model_file(tmp_path, make, message):
    with pytest.raises(InputError) as err:
        vimpc.load_model(make(tmp_path))
    assert message in str(err.value) and "\n" not in str(err.value)


# -- the model's functions called from Python ------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: m.step([1.0, 2.0, 3.0], [0.0], []),
            "DiscreteModel.step: argument x (input 0) must be 2 numbers (a vector, or a matrix "
            "of 2 rows for several evaluations), got shape (3,): [1.0, 2.0, 3.0]",
        ),
        (
            lambda m: m.step("a", [0.0], []),
            "DiscreteModel.step: argument x (input 0) must be numeric (2 numbers), got 'a' (str)",
        ),
        (
            lambda m: m.step([0.0, 0.0], [0.0, 1.0], []),
            "DiscreteModel.step: argument u (input 1) must be 1 number",
        ),
        (lambda m: m.step([0.0, 0.0]), "DiscreteModel.step takes 3 arguments (x, u, p)"),
        (lambda m: m.step(x=[0.0, 0.0], v=[0.0]), "DiscreteModel.step got an unknown argument"),
        (
            lambda m: m.residual([0.0, 0.0], [0.0], [0.0], []),
            "DiscreteModel.residual: argument x_next (input 2) must be 2 numbers",
        ),
        (lambda m: m.to_obs(None), "DiscreteModel.to_obs: argument x (input 0) must be numeric"),
        (
            lambda m: m.simulate([0.0, 0.0, 0.0], np.zeros((3, 1))),
            "DiscreteModel.simulate: x0 must have shape (2,) (nx = 2), got shape (3,)",
        ),
        (
            lambda m: m.simulate([0.0, 0.0], np.zeros((3, 2))),
            "DiscreteModel.simulate: inputs must have shape (N, 1) (one row of nu = 1 inputs per "
            "step), got shape (3, 2)",
        ),
        (lambda m: m.simulate([0.0, 0.0], "abc"), "DiscreteModel.simulate: inputs must be numeric"),
        (
            lambda m: m.simulate([np.nan, 0.0], np.zeros((3, 1))),
            "DiscreteModel.simulate: x0 must be finite, got nan",
        ),
    ],
)
def test_numeric_calls_with_wrong_arguments_name_them(pendulum, call, message):
    with pytest.raises(InputError) as err:
        call(pendulum)
    assert message in str(err.value)


def test_the_functions_stay_casadi_functions(pendulum, tmp_path):
    step = pendulum.step
    assert isinstance(step, ca.Function) and isinstance(step, CheckedFunction)
    x, u = ca.MX.sym("x", 2), ca.SX.sym("u", 1)
    symbolic = ca.Function("f", [x], [pendulum.step(x, np.zeros(1), [])])
    assert float(symbolic([0.1, 0.0])[0]) == float(pendulum.step([0.1, 0.0], [0.0], [])[0])
    assert pendulum.to_obs(ca.SX.sym("x", 2)).shape == (2, 1) and u.shape == (1, 1)
    # several evaluations at once, CasADi's own rule, still work
    assert pendulum.step(np.zeros((2, 3)), np.zeros((1, 3)), []).shape == (2, 3)
    again = pickle.loads(pickle.dumps(step))
    assert isinstance(again, CheckedFunction) and again.label == "DiscreteModel.step"
    loaded = vimpc.load_model(vimpc.save_model(pendulum, tmp_path / "p.vimpc"))
    assert isinstance(loaded.step, CheckedFunction)
    np.testing.assert_array_equal(
        loaded.simulate([0.1, 0.0], np.ones(4)), pendulum.simulate([0.1, 0.0], np.ones((4, 1)))
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dt": True}, "DiscreteModel.dt must be a positive finite float, got True"),
        ({"nx": True}, "DiscreteModel.nx must be a non-negative int, got True"),
        ({"p_default": [np.nan]}, "DiscreteModel.p_default must have shape (0,)"),
        ({"state_names": ("a",)}, "DiscreteModel.state_names must have 2 entries"),
    ],
)
def test_a_record_with_wrong_fields_is_refused_by_name(pendulum, change, message):
    import dataclasses

    with pytest.raises(InputError) as err:
        dataclasses.replace(pendulum, **change)
    assert message in str(err.value)


def test_overrides_must_be_a_list_of_strings():
    with pytest.raises(ConfigError, match="overrides must be a list of 'key.sub=value' strings"):
        scenario.load_scenario(PENDULUM, "episodes.count=2")


# -- the controller's constructor ------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda m, c: MPC(m, 10, c, solvr="ipopt"),
            "MPC got an unknown keyword argument 'solvr'; did you mean 'solver'?",
        ),
        (
            lambda m, c: MPC(m, 10, Cost(Q="ab", R=[0.1])),
            "cost.Q must be numbers: a scalar, a vector of 2 or a 2x2 matrix, got 'ab'",
        ),
        (
            lambda m, c: MPC(m, 10, Cost(Q=[1.0, 1.0], R=[0.1], periodic=0)),
            "cost.periodic must be a sequence of observation indices in [0, 2), got 0",
        ),
        (
            lambda m, c: MPC(m, 10, Cost(Q=[1.0, 1.0], R=[0.1], reference=lambda t: [np.nan, 0])),
            "cost.reference(0.0) must be finite (no NaN or inf) in every entry",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(obs_max=[-np.inf, np.inf])),
            "constraints.obs_max[0] = -inf excludes every value and can never be met",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(u_min=[np.inf])),
            "constraints.u_min[0] = inf excludes every value",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(u_max=["a"])),
            "constraints.u_max must be 1 numbers (inf allowed), got ['a']",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(soft_bounds="yes")),
            "constraints.soft_bounds must be True or False, got 'yes'",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(path=[PathConstraint("wall", "x > 0")])),
            "path constraint 'wall': function must be a casadi.Function of the observation",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(u_min=[-1.0], u_max=[1.0]), safe_input=[5.0]),
            "safe_input[0] = 5.0 is outside the input bounds [-1.0, 1.0]",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(path=PathConstraint("wall", _WALL))),
            "constraints.path must be a list of PathConstraint",
        ),
        (
            lambda m, c: MPC(m, 10, c, Constraints(path=[PathConstraint(3, _WALL)])),
            "path constraint names must be non-empty strings, got 3",
        ),
        (
            lambda m, c: MPC(m, 10, Cost(Q=[1.0, 1.0], R=[0.1], reference=lambda t: 1 / 0)),
            "cost.reference(0.0) raised ZeroDivisionError: division by zero",
        ),
        (
            lambda m, c: MPC(m, 10, Cost(Q=[1.0, 1.0], R=[0.1], periodic=(True,))),
            "cost.periodic entries must be observation indices in [0, 2), got True",
        ),
        (lambda m, c: MPC(m, 10, c, time_budget="1"), "time_budget must be a positive number"),
        (
            lambda m, c: MPC(m, 10, c, solver="ipopt", qpsol="osqp"),
            "qpsol='osqp' applies only to solver='sqpmethod' or 'rti', and would be ignored "
            "with solver='ipopt'",
        ),
        (
            lambda m, c: MPC(m, 10, c, solver="fatrop", hessian="hessian"),
            "hessian must be one of ['gauss-newton', 'exact'], got 'hessian'",
        ),
        (lambda m, c: MPC(m, 0, c), "horizon must be a positive integer, got 0"),
        (lambda m, c: MPC(m, 2.5, c), "horizon must be a positive integer, got 2.5"),
    ],
)
def test_the_controller_names_each_bad_argument(pendulum, make, message):
    with pytest.raises(InputError) as err:
        make(pendulum, Cost(Q=[1.0, 0.1], R=[0.01]))
    assert message in str(err.value)


# -- held-out bad inputs ----------------------------------------------------------------------


def test_a_success_window_as_long_as_the_episode_is_named_in_the_summary():
    from vimpc import report

    cfg = scenario.load_scenario(PENDULUM, ["episodes.steps=160", "metrics.success_window=1000.0"])
    note = report.success_window_note(cfg)
    assert "metrics.success_window = 1000 s" in note and "episode (8 s)" in note, note
    shorter = scenario.load_scenario(PENDULUM, ["episodes.steps=160"])
    assert report.success_window_note(shorter) is None


def test_save_model_over_an_existing_file_says_what_to_do(pendulum, tmp_path):
    from vimpc.errors import VimpcError

    path = vimpc.save_model(pendulum, tmp_path / "p.vimpc")
    before = path.read_bytes()
    with pytest.raises(FileExistsError) as err:
        vimpc.save_model(pendulum, path)
    assert isinstance(err.value, VimpcError)
    message = str(err.value)
    assert str(path) in message and "overwrite=True" in message and "another path" in message
    assert path.read_bytes() == before


def test_more_episodes_than_memory_holds_are_refused_naming_the_size():
    with pytest.raises(ConfigError) as err:
        scenario.load_scenario(PENDULUM, ["episodes.count=1000000000"])
    message = str(err.value)
    assert message.startswith("episodes.count = 1000000000 episodes of episodes.steps = 200")
    assert "GB of records" in message and "set episodes.count <= " in message
    most = int(message.rsplit("<= ", 1)[1])
    assert scenario.load_scenario(PENDULUM, [f"episodes.count={most}"])["episodes"]["count"] == most
