"""What a run prints and draws: the summary table and dict, and the figures (inspected as
matplotlib objects: axis labels, titles, legends and the lines drawn)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from vimpc_envs.cartpole import CartPoleEnv
from vimpc_envs.fourbar import FourBarEnv
from vimpc_envs.pendulum import PendulumEnv
from vimpc_envs.rolling_disk import RollingDiskEnv

from vimpc import _text, cli, mechanics, pipeline, report, scenario
from vimpc.closedloop import Trajectory, episode_metrics, summarize
from vimpc.plotting import mechanism as plot_mechanism
from vimpc.plotting import safety as plot_safety
from vimpc.plotting import series as plot_series
from vimpc.plotting import style as plot_style

ROOT = Path(__file__).parents[1]
SCENARIOS = ROOT / "scenarios"


# ---- helpers -----------------------------------------------------------------------------


def _trajectory(states, inputs, *, dt=0.1, reference=None, status=None, margin=None, seed=0):
    """A recorded episode built by hand (no solver): ``states (T+1, n)``, ``inputs (T, m)``."""
    states = np.asarray(states, dtype=np.float64)
    inputs = np.asarray(inputs, dtype=np.float64).reshape(len(states) - 1, -1)
    T, n = len(inputs), states.shape[1]
    if status is None:
        status = ["SOLVED"] * T
    if margin is None:
        margin = np.ones((T + 1, 1))
    return Trajectory(
        t=dt * np.arange(T + 1),
        obs=states.copy(),
        states=states,
        inputs=inputs,
        rewards=np.zeros(T),
        solve_times=np.full(T, 1e-3),
        iterations=np.ones(T, dtype=np.int64),
        status=np.array(status, dtype=str),
        safety_margin=np.asarray(margin, dtype=np.float64),
        constraint_residual=np.zeros(T + 1),
        reference=np.full((T + 1, n), np.nan) if reference is None else reference,
        slack=np.zeros(T),
        plan_obs=np.full((T, 2, n), np.nan),
        tube=np.zeros((T, 2, 0)),
        seed=seed,
    )


def _legend_labels(fig) -> list[str]:
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    for ax in fig.axes:
        if ax.get_legend() is not None:
            labels += [t.get_text() for t in ax.get_legend().get_texts()]
    return labels


def _lines(ax, label: str):
    return [line for line in ax.get_lines() if line.get_label() == label]


def _hline_levels(ax, label: str) -> list[float]:
    return sorted(float(line.get_ydata()[0]) for line in _lines(ax, label))


def _pendulum_figure(trajectories, **kw):
    defaults = dict(
        names=["theta", "theta_dot"],
        units=["rad", "rad/s"],
        input_names=["torque"],
        input_units=["N m"],
        u_min=np.array([-2.0]),
        u_max=np.array([2.0]),
        title="pendulum_swingup",
    )
    return plot_series.states_inputs_figure(trajectories, **{**defaults, **kw})


def _spin(n_steps=60, turns=1.5):
    """An angle turning ``turns`` times at constant speed, and its rate."""
    theta = np.linspace(0.0, 2 * np.pi * turns, n_steps + 1)
    rate = np.full(n_steps + 1, 2 * np.pi * turns / (0.1 * n_steps))
    return np.column_stack([theta, rate])


# ---- units and true limits are declared where the physics lives ---------------------------


@pytest.mark.parametrize(
    "system, coordinates, inputs",
    [
        (mechanics.Pendulum(), ("rad",), ("N m",)),
        (mechanics.CartPole(), ("m", "rad"), ("N",)),
        (mechanics.RollingDisk(), ("rad", "rad", "m", "m"), ("N m", "N m")),
        (mechanics.FourBar(), ("rad", "rad", "rad"), ("N m",)),
        (mechanics.NPendulum(2), ("m",) * 4, ("N",)),
        (mechanics.Kepler(), ("m", "m"), ("N", "N")),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, mechanics.MechanicalSystem) else None,
)
def test_systems_declare_the_units_of_their_coordinates_and_inputs(system, coordinates, inputs):
    assert system.coordinate_units == coordinates and system.input_units == inputs
    assert system.state_units == (*coordinates, *(f"{u}/s" for u in coordinates))
    assert len(system.state_units) == system.nq + system.nv


def test_maximal_coordinates_carry_metres_and_radians_per_body():
    maximal = mechanics.MaximalCoordinates(mechanics.CartPole())
    assert maximal.coordinate_units == ("m", "m", "rad", "m", "m", "rad")
    assert maximal.input_units == ("N",)  # the cart's slider is driven by a force


@pytest.mark.parametrize(
    "make, names",
    [
        (PendulumEnv, ["|theta_dot| <= 10 rad/s"]),
        (CartPoleEnv, ["|s| <= 1 m"]),
        (FourBarEnv, ["|theta1_dot| <= 8 rad/s"]),
        (RollingDiskEnv, ["|(x, y) - (1, 0)| >= 0.3 m"]),
    ],
)
def test_declared_true_limits_are_the_safety_margin(make, names):
    """Each env's declared limits reproduce its safety margin row by row, and name it."""
    env = make(jit=False)
    limits = env.safety_limits
    assert [limit.name for limit in limits] == names
    rows = sorted(r for limit in limits for r in limit.rows)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = rng.uniform(-3.0, 3.0, size=env.observation_space.shape)
        margin = env.safety_margin(obs)
        assert rows == list(range(len(margin)))
        for limit in limits:
            np.testing.assert_allclose(margin[list(limit.rows)], limit.margin(obs), atol=1e-12)


# ---- states and inputs ----------------------------------------------------------------------


def test_every_axis_carries_its_unit_and_the_figure_names_the_scenario():
    fig = _pendulum_figure([_trajectory(_spin(), np.zeros(60))])
    theta, rate, torque = fig.axes
    assert theta.get_ylabel() == "theta [rad]"
    assert rate.get_ylabel() == "theta_dot [rad/s]"
    assert torque.get_ylabel() == "torque [N m]"
    assert torque.get_xlabel() == "time [s]"
    assert "pendulum_swingup" in fig.get_suptitle()


def test_angles_are_drawn_unwrapped():
    """A wrapped record of 1.5 turns is drawn as one climbing line (no 2 pi jumps), and a
    continuous record as it is (not folded onto the reference's branch)."""
    spin = _spin()
    wrapped = spin.copy()
    wrapped[:, 0] = np.angle(np.exp(1j * spin[:, 0]))
    reference = np.tile([np.pi, 0.0], (61, 1))
    for states in (wrapped, spin):
        traj = _trajectory(states, np.zeros(60), reference=reference)
        fig = _pendulum_figure([traj], periodic=(0,))
        (line,) = _lines(fig.axes[0], "true state")
        drawn = np.asarray(line.get_ydata())
        assert np.max(np.abs(np.diff(drawn))) < 0.5
        np.testing.assert_allclose(drawn, spin[:, 0], atol=1e-12)
        # the reference moves by whole turns to where the angle ends (3 pi here)
        (ref,) = _lines(fig.axes[0], "reference")
        np.testing.assert_allclose(ref.get_ydata(), 3 * np.pi)


def test_references_are_drawn_for_tracked_entries_only():
    reference = np.tile([np.pi, 0.0], (61, 1))
    traj = _trajectory(_spin(), np.zeros(60), reference=reference)
    fig = _pendulum_figure([traj], tracked=[0])
    assert len(_lines(fig.axes[0], "reference")) == 1
    assert _lines(fig.axes[1], "reference") == []
    both = _pendulum_figure([traj], tracked=[0, 1])
    assert len(_lines(both.axes[1], "reference")) == 1


def test_true_and_planning_limits_are_drawn_and_labelled_apart():
    states = np.column_stack([np.linspace(0, 0.95, 41), np.zeros(41)])
    traj = _trajectory(states, np.zeros(40))
    fig = _pendulum_figure(
        [traj],
        names=["s", "s_dot"],
        units=["m", "m/s"],
        input_names=["force"],
        input_units=["N"],
        obs_min=np.array([-0.9, -np.inf]),
        obs_max=np.array([0.9, np.inf]),
        true_min=np.array([-1.0, np.nan]),
        true_max=np.array([1.0, np.nan]),
    )
    s_axis = fig.axes[0]
    assert _hline_levels(s_axis, "true limit") == [-1.0, 1.0]
    assert _hline_levels(s_axis, "planning limit") == [-0.9, 0.9]
    assert _lines(fig.axes[1], "true limit") == [] and _lines(fig.axes[1], "planning limit") == []
    assert _hline_levels(fig.axes[2], "input limit") == [-2.0, 2.0]
    labels = _legend_labels(fig)
    assert "true limit" in labels and "planning limit" in labels
    # where the controller plans on the true limit itself, one line says so
    same = _pendulum_figure(
        [traj],
        obs_min=np.array([-1.0, -np.inf]),
        obs_max=np.array([1.0, np.inf]),
        true_min=np.array([-1.0, np.nan]),
        true_max=np.array([1.0, np.nan]),
    )
    assert _hline_levels(same.axes[0], "true limit (= planning limit)") == [-1.0, 1.0]
    assert _lines(same.axes[0], "planning limit") == []


def test_every_episode_is_shown():
    trajectories = [_trajectory(_spin(turns=0.2 * (k + 1)), np.zeros(60), seed=k) for k in range(3)]
    fig = _pendulum_figure(trajectories)
    lines = _lines(fig.axes[0], "true state (3 episodes)")
    assert len(lines) == 3
    finals = sorted(float(line.get_ydata()[-1]) for line in lines)
    np.testing.assert_allclose(finals, [2 * np.pi * 0.2 * (k + 1) for k in range(3)])
    assert len(_lines(fig.axes[2], "input (3 episodes)")) == 3
    # a long run draws every episode too, thinner and fainter
    many = [_trajectory(_spin(turns=0.1 * (k + 1)), np.zeros(60), seed=k) for k in range(20)]
    lines = _lines(_pendulum_figure(many).axes[0], "true state (20 episodes)")
    assert len(lines) == 20
    assert max(line.get_alpha() for line in lines) < 0.5


def test_legends_name_each_kind_of_line_once():
    reference = np.tile([np.pi, 0.0], (61, 1))
    trajectories = [
        _trajectory(_spin(turns=0.2 * (k + 1)), np.zeros(60), reference=reference, seed=k)
        for k in range(4)
    ]
    figs = [
        _pendulum_figure(
            trajectories,
            obs_min=np.array([-np.inf, -5.0]),
            obs_max=np.array([np.inf, 5.0]),
            true_min=np.array([np.nan, -10.0]),
            true_max=np.array([np.nan, 10.0]),
        ),
        plot_series.solve_times_figure(trajectories, title="x"),
        plot_mechanism.mechanism_figure(
            trajectories,
            mechanics.Pendulum(),
            plan_circles=[((1.0, 0.0), 0.35)],
            true_circles=[((1.0, 0.0), 0.3)],
        ),
    ]
    for fig in figs:
        labels = _legend_labels(fig)
        assert labels and len(labels) == len(set(labels)), labels


def test_solve_times_mark_failed_late_and_iteration_limit_solves():
    status = ["SOLVED", "LATE", "ITERATION_LIMIT", "FAILED", "SOLVED"]
    traj = _trajectory(np.zeros((6, 2)), np.zeros(5), status=status)
    fig = plot_series.solve_times_figure([traj], title="pendulum_swingup")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "solve time [ms]" and ax.get_xlabel() == "time [s]"
    for label, step in (
        ("late", 1),
        ("at the iteration limit", 2),
        ("failed (fallback input)", 3),
    ):
        (marks,) = _lines(ax, label)
        np.testing.assert_allclose(marks.get_xdata(), [0.1 * step])
    assert "pendulum_swingup" in fig.get_suptitle()


def test_mechanism_draws_the_true_obstacle_apart_from_the_planning_circle():
    disk = mechanics.RollingDisk()
    states = np.zeros((11, 8))
    states[:, 2] = np.linspace(0.0, 2.0, 11)
    states[:, 3] = 0.5
    trajectories = [_trajectory(states, np.zeros((10, 2)), seed=k) for k in range(2)]
    fig = plot_mechanism.mechanism_figure(
        trajectories,
        disk,
        plan_circles=[((1.0, 0.0), 0.35)],
        true_circles=[((1.0, 0.0), 0.3)],
        title="rollingdisk_parking",
    )
    (ax,) = fig.axes
    (plan,) = _lines(ax, "keep-out circle (planning limit)")
    radius = np.hypot(np.asarray(plan.get_xdata()) - 1.0, plan.get_ydata())
    np.testing.assert_allclose(radius, 0.35)
    (obstacle,) = [p for p in ax.patches if p.get_label() == "obstacle (true limit)"]
    xy = obstacle.get_xy()
    np.testing.assert_allclose(np.hypot(xy[:, 0] - 1.0, xy[:, 1]), 0.3, atol=1e-12)
    assert len(_lines(ax, "path of the marker point (2 episodes)")) == 2
    assert ax.get_xlabel() == "x [m]" and ax.get_ylabel() == "y [m]"


# ---- a run's figures, from the scenarios ------------------------------------------------------


def _run_figures(name: str, overrides: list[str], seeds=(0, 1)):
    cfg = scenario.load_scenario(str(SCENARIOS / f"{name}.toml"), overrides)
    runner = pipeline.EpisodeRunner(cfg, None)
    trajectories = [runner.run(seed)[0] for seed in seeds]
    return cfg, runner, trajectories, report.run_figure_set(cfg, runner, trajectories)


def test_pendulum_run_figures_show_the_speed_limit_with_units():
    _, _, trajectories, figs = _run_figures(
        "pendulum_swingup", ["controller.horizon=5", "episodes.steps=6"]
    )
    assert set(figs) == {"states_inputs", "solve_times", "episodes", "mechanism"}
    for fig in figs.values():
        assert fig.get_suptitle().startswith("pendulum_swingup: ")
        labels = _legend_labels(fig)
        assert len(labels) == len(set(labels))
    theta, rate, torque = figs["states_inputs"].axes
    assert [theta.get_ylabel(), rate.get_ylabel(), torque.get_ylabel()] == [
        "theta [rad]",
        "theta_dot [rad/s]",
        "torque [N m]",
    ]
    assert _hline_levels(rate, "true limit") == [-10.0, 10.0]
    assert len(_lines(theta, "true state (2 episodes)")) == 2
    # the episodes figure is drawn for the env's speed limit though the controller has none
    (ax,) = figs["episodes"].axes
    assert ax.get_ylabel() == "theta_dot [rad/s]"
    assert _hline_levels(ax, "true limit") == [-10.0, 10.0]
    assert "true limit crossed in 0 of 2 episodes" in ax.get_title()


def test_rolling_disk_run_figures_tell_the_obstacle_from_the_planning_circle():
    _, _, _, figs = _run_figures(
        "rollingdisk_parking", ["controller.horizon=5", "episodes.steps=4"], seeds=(0,)
    )
    (ax,) = figs["mechanism"].axes
    labels = _legend_labels(figs["mechanism"])
    assert "obstacle (true limit)" in labels and "keep-out circle (planning limit)" in labels
    # the safety row |p - c|^2 - r^2 meets the true obstacle at 0.3^2 - 0.35^2
    (row,) = figs["safety"].axes
    assert _hline_levels(row, "true limit") == [pytest.approx(0.3**2 - 0.35**2)]
    assert _hline_levels(row, "planning limit (h = 0)") == [0.0]
    assert row.get_ylabel() == "h [m^2]"
    # the row says what h is, in which unit
    assert row.get_title() == ("|(x, y) - (1, 0)| >= 0.35 m:  h = (x - 1)^2 + y^2 - 0.35^2 [m^2]")
    assert "h >= 0" in figs["safety"].get_suptitle()
    assert "path of the contact point" in labels


def test_cartpole_run_draws_the_rail_and_the_planning_margin():
    _, _, _, figs = _run_figures("cartpole_swingup", ["controller.horizon=5", "episodes.steps=4"])
    s_axis = figs["states_inputs"].axes[0]
    assert s_axis.get_ylabel() == "s [m]"
    assert _hline_levels(s_axis, "true limit") == [-1.0, 1.0]
    assert _hline_levels(s_axis, "planning limit") == [-0.9, 0.9]
    assert figs["states_inputs"].axes[-1].get_ylabel() == "force [N]"
    # references only where Q weighs the entry: every entry here
    assert all(_lines(ax, "reference") for ax in figs["states_inputs"].axes[:4])
    low, high = figs["safety"].axes
    assert low.get_ylabel() == high.get_ylabel() == "h [m]"
    assert low.get_title() == "s >= -0.9 m:  h = s + 0.9 [m]"
    assert high.get_title() == "s <= 0.9 m:  h = 0.9 - s [m]"
    # the rail: its true ends at the env's |s| <= 1 m, the controller's at 0.9 m
    (ax,) = figs["mechanism"].axes
    (rail,) = _lines(ax, "rail")
    np.testing.assert_allclose(rail.get_xdata(), [-1.0, 1.0])
    np.testing.assert_allclose(rail.get_ydata(), [0.0, 0.0])
    ends = _lines(ax, "rail ends: cart centre in [-1, 1] m (true limit)")
    assert sorted(float(line.get_xdata()[0]) for line in ends) == [-1.0, 1.0]
    plan = _lines(ax, "cart centre's planning limits [-0.9, 0.9] m")
    assert sorted(float(line.get_xdata()[0]) for line in plan) == [-0.9, 0.9]
    assert max(line.get_zorder() for line in [rail, *ends]) < min(
        line.get_zorder() for line in _lines(ax, "path of the last link's end (2 episodes)")
    )


# ---- the summary ---------------------------------------------------------------------------


def _summary_inputs():
    """Two episodes of five steps; row 0 of the margin ends negative in the first and
    starts negative in the second."""
    margin = np.column_stack([[3.0, 2.0, 1.0, 0.5, 0.2, -1.0], np.linspace(5.0, 4.0, 6)])
    trajectories = [
        _trajectory(
            np.zeros((6, 2)),
            np.zeros(5),
            status=["SOLVED", "LATE", "ITERATION_LIMIT", "ITERATION_LIMIT", "FAILED"],
            margin=margin,
        ),
        _trajectory(
            np.zeros((6, 2)),
            np.zeros(5),
            status=["LATE"] + ["SOLVED"] * 4,
            margin=margin[::-1],
            seed=1,
        ),
    ]
    return [episode_metrics(t) for t in trajectories], trajectories


def test_summary_counts_late_and_iteration_limit_solves_and_violations_per_row():
    per_episode, trajectories = _summary_inputs()
    assert [m["late_solves"] for m in per_episode] == [1, 1]
    assert [m["iteration_limit_solves"] for m in per_episode] == [2, 0]
    summary = summarize(per_episode, trajectories)
    assert summary["solves"] == 10
    assert summary["failed_solves"] == 1
    assert summary["late_solves"] == 2
    assert summary["iteration_limit_solves"] == 2
    # row 0 is negative at the last state of episode 0 and the first of episode 1
    assert summary["margin_row_violations"] == [2, 0]
    assert summary["margin_row_min"] == [-1.0, 4.0]


def test_summary_table_names_each_true_limit_and_lines_up():
    per_episode, trajectories = _summary_inputs()
    limits = PendulumEnv(jit=False).safety_limits
    summary = summarize(per_episode, trajectories, limits)
    assert summary["safety_limits"] == [
        {
            "name": "|theta_dot| <= 10 rad/s",
            "unit": "rad/s",
            "states_outside": 2,
            "min_margin": -1.0,
        }
    ]
    table = report.summary_table(summary)
    assert "|theta_dot| <= 10 rad/s: 2 states outside, smallest margin -1 rad/s" in table
    assert "10: 1 failed, 2 late, 2 at the iteration limit" in table
    column = report.KEY_WIDTH + 4
    for line in table.splitlines():
        assert line[column - 2 : column] == "  " and line[column] != " ", line
    # two limits: one row each, the second without a key, still in the value column
    split = [
        type(limits[0])(1, "theta_dot", "rad/s", -np.inf, 10.0, (0,)),
        type(limits[0])(1, "theta_dot", "rad/s", -10.0, np.inf, (1,)),
    ]
    lines = report.summary_table(summarize(per_episode, trajectories, split)).splitlines()
    first = next(k for k, line in enumerate(lines) if "theta_dot <= 10 rad/s" in line)
    assert "theta_dot >= -10 rad/s: 0 states outside" in lines[first + 1]
    assert lines[first + 1][:column].strip() == ""


def test_the_printed_run_summary_lines_up_with_the_wall_time(tmp_path, capsys):
    args = [
        "run",
        str(SCENARIOS / "pendulum_swingup.toml"),
        "--out",
        str(tmp_path),
        "--quiet",
        "--no-plots",
        "--set",
        "episodes.steps=3",
        "--set",
        "controller.horizon=5",
    ]
    assert cli.main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert any("|theta_dot| <= 10 rad/s" in line for line in lines)
    assert any(line.startswith("  wall time") for line in lines)
    # no tube, so no line about empty tightened sets (there are none to count)
    assert not any("empty tightened set" in line for line in lines), lines
    # the tracking RMSE per weighted entry, each in its unit
    assert any(re.search(r"tracking RMSE, episode mean +theta: \S+ rad$", line) for line in lines)
    assert any(re.search(r"^ +theta_dot: \S+ rad/s$", line) for line in lines)
    starts = {len(line) - len(line[2:].split("  ", 1)[1].lstrip()) for line in lines}
    assert starts == {report.KEY_WIDTH + 4}, lines
    (metrics,) = tmp_path.glob("*/*/metrics.json")
    saved = json.loads(metrics.read_text())
    assert [limit["name"] for limit in saved["safety_limits"]] == ["|theta_dot| <= 10 rad/s"]
    assert {"late_solves", "iteration_limit_solves", "failed_solves"} <= saved.keys()
    # 3 steps of 0.05 s are shorter than the 2 s success window: said, not hidden
    assert "episode (0.15 s)" in saved["success_note"]
    assert any("warning: metrics.success_window = 2 s" in line for line in lines)


def test_run_figures_writes_one_png_per_figure(tmp_path):
    cfg, runner, trajectories, figs = _run_figures(
        "pendulum_swingup", ["controller.horizon=5", "episodes.steps=3"], seeds=(0,)
    )
    report.run_figures(cfg, runner, trajectories, tmp_path)
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(figs)
    assert all(p.stat().st_size > 0 for p in tmp_path.glob("*.png"))


# ---- what a person could misread ------------------------------------------------------------


def _texts(fig) -> list[str]:
    """Every piece of text a figure shows: titles, axis labels, tick-free legend texts."""
    out = [fig.get_suptitle(), *_legend_labels(fig)]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return out


def test_saturated_inputs_are_marked_over_limits_drawn_beneath_them():
    """Inputs that ride on a limit are marked, and the limit line lies beneath the trace
    (drawn over it, it hid a saturated input); the state limits too."""
    u = np.array([2.0, 2.0, 0.5, -2.0, 1.9995, 1.99, -1.9, -2.0005, 0.0, 0.0])
    states = np.column_stack([np.linspace(0.0, 1.0, 11), np.zeros(11)])
    fig = _pendulum_figure(
        [_trajectory(states, u)],
        true_min=np.array([np.nan, -10.0]),
        true_max=np.array([np.nan, 10.0]),
    )
    torque = fig.axes[2]
    (marks,) = _lines(torque, plot_style.SATURATED_LABEL)
    # within 0.1 % of the 4 N m range: steps 0, 1, 3, 4 and 7, not 1.99 or -1.9
    np.testing.assert_allclose(marks.get_xdata(), 0.1 * np.array([0, 1, 3, 4, 7]))
    np.testing.assert_allclose(marks.get_ydata(), u[[0, 1, 3, 4, 7]])
    (trace,) = _lines(torque, "input")
    limits = _lines(torque, "input limit")
    assert len(limits) == 2
    assert all(line.get_zorder() < trace.get_zorder() < marks.get_zorder() for line in limits)
    assert all(line.get_linestyle() != trace.get_linestyle() for line in limits)
    assert plot_style.SATURATED_LABEL in _legend_labels(fig)
    assert "within 0.1% of its range" in plot_style.SATURATED_LABEL  # the threshold is named
    (rate,) = _lines(fig.axes[1], "true state")
    assert all(line.get_zorder() < rate.get_zorder() for line in _lines(fig.axes[1], "true limit"))
    # an input that stays inside its limits gets no mark and no legend entry
    calm = _pendulum_figure([_trajectory(states, np.full(10, 1.5))])
    assert _lines(calm.axes[2], plot_style.SATURATED_LABEL) == []
    assert plot_style.SATURATED_LABEL not in _legend_labels(calm)


def test_saturation_with_one_open_end():
    hit = plot_style.saturated(np.array([5.0, 4.999, 4.9, -100.0]), -np.inf, 5.0)
    assert hit.tolist() == [True, True, False, False]
    assert not plot_style.saturated(np.array([1e9]), -np.inf, np.inf).any()


def _bound_rows():
    """The safety rows of ``|s| <= 1``: ``h = [s + 1, 1 - s]`` [m]."""
    import casadi as ca

    obs = ca.SX.sym("obs", 2)
    return ca.Function("safety", [obs], [ca.vertcat(obs[0] + 1.0, 1.0 - obs[0])])


def _planned(s, *, tube=0.0, stages=3, seed=0):
    """An episode of ``s`` with plans that keep ``s`` and tubes of width ``tube``."""
    s = np.asarray(s, dtype=np.float64)
    states = np.column_stack([s, np.zeros_like(s)])
    traj = _trajectory(states, np.zeros(len(s) - 1), seed=seed)
    plan = np.repeat(states[:-1, None, :], stages, axis=1)
    widths = np.full((len(s) - 1, stages, 2), tube)
    return type(traj)(**{**traj.__dict__, "plan_obs": plan, "tube": widths})


def test_safety_rows_say_what_h_is_and_mark_crossings_in_every_episode():
    """Episode 0 leaves at s = 1.2 (row 1 below h = 0), episode 1 at s = -1.1 (row 0):
    both are marked, though only one episode has its plans drawn."""
    out_right = np.concatenate([np.linspace(0.0, 1.2, 8), [1.2, 0.5, 0.0]])
    out_left = np.concatenate([np.linspace(0.0, -1.1, 8), [-0.5, 0.0, 0.0]])
    trajectories = [_planned(out_right), _planned(out_left, seed=1)]
    fig = plot_safety.safety_figure(
        trajectories,
        _bound_rows(),
        ["s >= -1 m", "s <= 1 m"],
        units=["m", "m"],
        definitions=["s + 1", "1 - s"],
        true_levels=[0.0, 0.0],
        title="cartpole",
    )
    low, high = fig.axes
    assert "h >= 0" in fig.get_suptitle()
    assert low.get_title() == "s >= -1 m:  h = s + 1 [m]" and low.get_ylabel() == "h [m]"
    label = "past the true limit (= planning limit)"
    (left,) = _lines(low, label)
    np.testing.assert_allclose(left.get_ydata(), 1.0 + out_left[1:][out_left[1:] < -1.0])
    (right,) = _lines(high, label)
    np.testing.assert_allclose(right.get_ydata(), 1.0 - out_right[1:][out_right[1:] > 1.0])
    labels = _legend_labels(fig)
    # zero tubes: the legend does not promise a tube
    assert not any("tube around" in text for text in labels)
    (plans,) = [text for text in labels if text.startswith("plans made at")]
    assert "no tube" in plans
    assert "realized, the other episode" in labels
    # with a tube, it is drawn and named
    tubed = plot_safety.safety_figure(
        [_planned(out_right, tube=0.1)], _bound_rows(), ["s >= -1 m", "s <= 1 m"]
    )
    labels = _legend_labels(tubed)
    assert "tube around each plan (plan +- tube)" in labels
    assert not any("no tube" in text for text in labels)


def test_a_planning_limit_inside_the_true_one_is_marked_apart():
    """Planning limit s <= 0.9 (h = 0.9 - s), true limit s <= 1 (h = -0.1): s = 0.95 is
    past the planning limit only, s = 1.05 past the true limit."""
    import casadi as ca

    obs = ca.SX.sym("obs", 2)
    row = ca.Function("safety", [obs], [0.9 - obs[0]])
    s = np.array([0.0, 0.5, 0.95, 1.05, 0.5])
    fig = plot_safety.safety_figure([_planned(s)], row, ["s <= 0.9 m"], true_levels=[-0.1])
    (ax,) = fig.axes
    (plan,) = _lines(ax, "past the planning limit (h < 0)")
    np.testing.assert_allclose(plan.get_ydata(), [0.9 - 0.95])
    (true,) = _lines(ax, "past the true limit")
    np.testing.assert_allclose(true.get_ydata(), [0.9 - 1.05])


def test_one_episode_is_not_called_episodes():
    """Counts agree with their nouns in every figure of a one-episode run."""
    states = np.column_stack([np.linspace(0.0, 1.2, 11), np.zeros(11)])
    single = [_planned(states[:, 0])]
    figs = [
        plot_safety.constrained_entries_figure(
            single,
            names=["s", "s_dot"],
            units=["m", "m/s"],
            obs_min=np.array([-0.9, -np.inf]),
            obs_max=np.array([0.9, np.inf]),
            true_min=np.array([-1.0, np.nan]),
            true_max=np.array([1.0, np.nan]),
            title="cartpole",
        ),
        plot_safety.safety_figure(single, _bound_rows(), ["s >= -1 m", "s <= 1 m"]),
        plot_series.solve_times_figure(single),
        _pendulum_figure(single),
    ]
    assert "over 1 episode" in figs[0].get_suptitle()
    assert figs[0].axes[0].get_title().startswith("s: true limit crossed in 1 of 1 episode,")
    for fig in figs:
        for text in _texts(fig):
            assert not re.search(r"\b1 (episodes|steps)\b", text), text
    assert _text.count(1, "episode") == "1 episode"
    assert _text.count(0, "episode") == "0 episodes"
    assert _text.count(2, "step") == "2 steps"


def test_solve_time_marks_do_not_share_a_colour_with_an_episode():
    status = ["SOLVED", "FAILED", "LATE", "ITERATION_LIMIT", "SOLVED"]
    trajectories = [
        _trajectory(np.zeros((6, 2)), np.zeros(5), status=status, seed=k) for k in range(5)
    ]
    fig = plot_series.solve_times_figure(trajectories, time_budget=2e-3)
    (ax,) = fig.axes
    episodes = {
        to_rgb(line.get_color()) for line in ax.get_lines() if line.get_label().startswith("ep")
    }
    assert len(episodes) == 5
    for label in ("failed (fallback input)", "late", "at the iteration limit"):
        marks = _lines(ax, label)
        assert len(marks) == 5 and {to_rgb(m.get_color()) for m in marks}.isdisjoint(episodes)
    (budget,) = _lines(ax, "time budget (solves past it are late)")
    np.testing.assert_allclose(budget.get_ydata(), 2.0)  # ms


def test_the_summary_gives_tracking_rmse_per_entry_with_its_unit():
    """s is 0.5 m off its reference, theta 2 pi + 0.1 rad off (0.1 rad once wrapped);
    s_dot is not tracked."""
    n = 11
    reference = np.zeros((n, 3))
    states = np.column_stack([np.full(n, 0.5), np.full(n, 2 * np.pi + 0.1), np.ones(n)])
    traj = _trajectory(states, np.zeros(n - 1), reference=reference)
    tracking = report.tracking_rmse(
        [traj, traj],
        ["s", "theta", "s_dot"],
        ["m", "rad", "m/s"],
        periodic=(1,),
        tracked=[0, 1],
    )
    assert [(name, unit) for name, unit, _ in tracking] == [("s", "m"), ("theta", "rad")]
    np.testing.assert_allclose([v for *_, v in tracking], [0.5, 0.1])
    per_episode, trajectories = _summary_inputs()
    summary = summarize(per_episode, trajectories)
    lines = report.summary_table(summary, tracking=tracking).splitlines()
    first = next(k for k, line in enumerate(lines) if "tracking RMSE" in line)
    assert lines[first].endswith("s: 0.5 m") and lines[first + 1].endswith("theta: 0.1 rad")
    assert lines[first + 1][: report.KEY_WIDTH + 4].strip() == ""
    # without per-entry values the pooled number says it is pooled
    (pooled,) = [line for line in report.summary_table(summary).splitlines() if "RMSE" in line]
    assert "pooled" in pooled
    # the margin's mean and spread carry the limit's unit too
    limits = PendulumEnv(jit=False).safety_limits
    table = report.summary_table(summarize(per_episode, trajectories, limits))
    assert re.search(r"mean of episode minima \S+ rad/s \(std \S+ rad/s\)", table), table


def test_the_fit_table_gives_each_entry_its_unit():
    fit = {
        "fit_time_s": 0.1,
        "train_transitions": 10,
        "calibration_transitions": 0,
        "validation_transitions": 5,
        "multi_step": 20,
        "one_step_rmse": [1e-3, 2e-3],
        "multi_step_rmse": [1e-1, None],
    }
    lines = report.fit_table(fit, ["theta", "theta_dot"], ["rad", "rad/s"]).splitlines()
    assert lines[1].split()[:2] == ["entry", "[unit]"]
    assert lines[2].split() == ["theta", "[rad]", "1.000e-03", "1.000e-01"]
    assert lines[3].split() == ["theta_dot", "[rad/s]", "2.000e-03", "-"]


def test_summary_table_counts_empty_tightened_sets_only_with_a_tube():
    per_episode, trajectories = _summary_inputs()
    summary = {**summarize(per_episode, trajectories), "empty_tube_steps": 0}
    summary["empty_tube_fraction"] = 0.0
    assert "empty tightened set" not in report.summary_table(summary)
    assert "empty tightened set" in report.summary_table(summary, tube=True)


def _fit_report(**extra):
    return {
        "fit_time_s": 1.0,
        "train_transitions": 800,
        "calibration_transitions": 400,
        "validation_transitions": 400,
        "one_step_rmse": [0.1, 0.2],
        "multi_step": 5,
        "multi_step_rmse": [0.3, 0.4],
        "delta": 0.05,
        "validation_coverage": 0.68,
        **extra,
    }


def test_the_fit_summary_promises_coverage_only_where_the_bound_was_calibrated():
    held = report.fit_table(_fit_report(calibration="heldout"), ["theta", "theta_dot"])
    assert "bound coverage on validation data: 0.680 (promised >= 0.950)" in held
    closed = report.fit_table(_fit_report(calibration="closed_loop"), ["theta", "theta_dot"])
    assert "promised >=" not in closed
    assert "bound coverage on open-loop held-out data: 0.680 (not promised" in closed
    assert "calibrated on closed-loop episodes" in closed
    noted = report.fit_table(_fit_report(notes=["used the exact GP"]), ["theta", "theta_dot"])
    assert "  note: used the exact GP" in noted.splitlines()
