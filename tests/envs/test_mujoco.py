"""The MuJoCo plants: the shipped MJCF files are vimpc's catalog systems (their headers say
so, and the compiled models and their dynamics agree), the variants differ as documented,
and ``vimpc/MujocoPlant-v0`` keeps the gymnasium contract, its reset distribution and its
errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)
from vimpc_envs._mjcf_header import read_header

from vimpc import mechanics
from vimpc.errors import InputError
from vimpc.integrators import acceleration

ROOT = Path(__file__).parents[2]
FOLDER = ROOT / "scenarios" / "mujoco"
NAMES = ("pendulum", "cartpole", "fourbar", "rolling_disk")


def _load(name: str):
    import mujoco

    return mujoco.MjModel.from_xml_path(str(FOLDER / f"{name}.xml"))


def _header(name: str):
    model = _load(name)
    return read_header(FOLDER / f"{name}.xml", model.nq, model.nv, model.nu)


def _system(header):
    return getattr(mechanics, header.system)(**header.params)


def _rigid(name: str):
    """The model with joint damping and armature zeroed: what the catalog system knows."""
    model = _load(name)
    model.dof_damping[:] = 0.0
    model.dof_armature[:] = 0.0
    return model


def _step_line(header) -> tuple[float, int, float]:
    (line,) = header.lines["step"]
    found = re.fullmatch(
        r"timestep ([\d.]+) s, frame_skip (\d+) gives the control step ([\d.]+) s", line
    )
    assert found, line
    return float(found.group(1)), int(found.group(2)), float(found.group(3))


def _catalog_rollout(system, x0, inputs, dt, substeps):
    """RK4 on the catalog system's (constrained) Euler-Lagrange acceleration."""
    acc = acceleration(system)
    n = system.nq

    def f(x, u):
        return np.concatenate([x[n:], np.asarray(acc(x[:n], x[n:], u, [])).ravel()])

    x, h, out = np.array(x0, dtype=np.float64), dt / substeps, [np.array(x0)]
    for u in inputs:
        for _ in range(substeps):
            k1 = f(x, u)
            k2 = f(x + h / 2 * k1, u)
            k3 = f(x + h / 2 * k2, u)
            k4 = f(x + h * k3, u)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(x.copy())
    return np.array(out)


def _mujoco_rollout(model, qpos, qvel, ctrls, frame_skip):
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    out = [np.concatenate([data.qpos, data.qvel])]
    for ctrl in ctrls:
        data.ctrl[:] = ctrl
        mujoco.mj_step(model, data, frame_skip)
        out.append(np.concatenate([data.qpos, data.qvel]))
    return np.array(out)


def _to_mujoco(header, q, v):
    """``(qpos, qvel)`` of a catalog state, for maps that are square and invertible."""
    qpos = np.linalg.solve(header.q_map.matrix, q - header.q_map.offset)
    return qpos, np.linalg.solve(header.v_map.matrix, v)


def _make(name: str, **kw):
    from vimpc_envs.mujoco import shipped_mjcf

    frame_skip = _step_line(_header(name))[1]
    return gymnasium.make(
        "vimpc/MujocoPlant-v0", xml_file=shipped_mjcf(name), frame_skip=frame_skip, **kw
    )


# ---- the files' headers ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_header_names_the_catalog_coordinates_and_inputs(name):
    header = _header(name)
    system = _system(header)
    assert header.q_map.names == system.coordinate_names
    assert header.v_map.names == tuple(f"{c}_dot" for c in system.coordinate_names)
    assert header.u_map.names == system.input_names
    # the rates are the same combinations of qvel as the coordinates of qpos
    assert np.array_equal(header.q_map.matrix, header.v_map.matrix)
    for key in ("limits", "step", "unmodelled"):
        assert header.lines[key], f"{name}.xml has no vimpc-{key} line"
    unmodelled = header.lines["unmodelled"][0]
    assert "damping" in unmodelled and "armature" in unmodelled


@pytest.mark.parametrize("name", NAMES)
def test_the_declared_parameters_are_the_compiled_bodies(name):
    """Masses and central inertias (about the axis the plane's rotations turn about) of each
    body equal the catalog system's, and a rod's centre sits at half its length."""
    model, header = _load(name), _header(name)
    system = _system(header)
    if name == "rolling_disk":
        body = model.body("disk")
        p = system.params
        assert body.mass[0] == p["m"]
        assert np.array_equal(body.inertia, [p["J"], p["I"], p["J"]])
        assert model.geom("contact").size[0] == p["R"]
        assert model.geom("contact").type == 2  # a sphere: one contact point
        return
    for spec in system.bodies():
        body = model.body(spec.name)
        assert body.mass[0] == pytest.approx(spec.mass, rel=1e-15), spec.name
        assert body.inertia[1] == pytest.approx(spec.inertia, rel=1e-15), spec.name
        if spec.length:
            assert np.linalg.norm(body.ipos) == pytest.approx(spec.length / 2, rel=1e-15)
    assert model.opt.gravity[2] == -system.params["g"]


@pytest.mark.parametrize("name", NAMES)
def test_the_declared_step_and_limits_are_the_files(name):
    model, header = _load(name), _header(name)
    timestep, frame_skip, dt = _step_line(header)
    assert model.opt.timestep == timestep and timestep * frame_skip == pytest.approx(dt, rel=1e-12)
    (line,) = header.lines["limits"]
    declared = re.findall(r"(\w+) in \[(-?[\d.]+), (-?[\d.]+)\]", line)
    assert [d[0] for d in declared] == list(header.u_map.names)
    gears = np.diag(header.u_map.matrix)
    assert np.array_equal(model.actuator_gear[:, 0], gears)  # u = gear ctrl
    limits = np.array([[float(lo), float(hi)] for _, lo, hi in declared])
    assert np.allclose(model.actuator_ctrlrange * gears[:, None], limits, rtol=1e-15)


def test_the_pendulum_must_pump():
    """Its torque limit is below the largest gravity torque m g l / 2."""
    header = _header("pendulum")
    p = header.params
    assert _load("pendulum").actuator_ctrlrange[0, 1] < p["m"] * p["g"] * p["l"] / 2


# ---- the dynamics agree with the catalog systems ----------------------------------------------


@pytest.mark.parametrize("name", ["pendulum", "cartpole"])
def test_accelerations_are_the_catalog_systems(name):
    """With damping and armature zeroed, MuJoCo's forward dynamics at 50 random states and
    inputs are the catalog system's Euler-Lagrange acceleration to 1e-8 (the rigid-body
    algorithms agree to round-off; a wrong sign, offset or inertia misses by O(1))."""
    import mujoco

    model, header = _rigid(name), _header(name)
    system = _system(header)
    acc = acceleration(system)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(50):
        q = rng.uniform(-math.pi, math.pi, system.nq)
        if name == "cartpole":
            q[0] = rng.uniform(-0.8, 0.8)  # off the rail's end stops
        v = rng.uniform(-5.0, 5.0, system.nv)
        ctrl = rng.uniform(*model.actuator_ctrlrange.T)
        data.qpos[:], data.qvel[:] = _to_mujoco(header, q, v)
        data.ctrl[:] = ctrl
        mujoco.mj_forward(model, data)
        expected = np.asarray(acc(q, v, header.u_map(ctrl), [])).ravel()
        got = header.v_map.matrix @ data.qacc
        worst = max(worst, float(np.max(np.abs(got - expected) / (1.0 + np.abs(expected)))))
    assert worst < 1e-8


def test_fourbar_accelerations_are_the_rigid_closures():
    """At 30 assembled states the soft loop closure's accelerations are the rigid closure's
    to 1e-4 relative (solimp 0.9999: regularization 1e-4 of the constraint's inertia). With
    MuJoCo 3.2 and 3.3 they miss by up to 25 % (hence mujoco>=4.0 in pyproject.toml)."""
    import mujoco

    model, header = _rigid("fourbar"), _header("fourbar")
    system = _system(header)
    acc = acceleration(system)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(1)
    for _ in range(30):
        q, v = system.assemble(rng.uniform(-math.pi, math.pi), rng.uniform(-5.0, 5.0))
        ctrl = rng.uniform(-20.0, 20.0, 1)
        data.qpos[:], data.qvel[:] = _to_mujoco(header, q, v)
        data.ctrl[:] = ctrl
        mujoco.mj_forward(model, data)
        expected = np.asarray(acc(q, v, header.u_map(ctrl), [])).ravel()
        got = header.v_map.matrix @ data.qacc
        assert np.max(np.abs(got - expected)) < 1e-4 * np.max(np.abs(expected))


def test_fourbar_rollout_converges_to_the_catalog_at_first_order():
    """One second of random torques from an assembled state: MuJoCo's rollout (damping and
    armature zeroed) stays within 0.05 rad of the catalog's (RK4 at 1 ms, exact to 1e-9
    here), and halving MuJoCo's timestep halves the gap: what is left is the first-order
    integrator's error, not a modelling one (measured 0.031 rad at 1 ms, 0.016 at 0.5 ms)."""
    header = _header("fourbar")
    system = _system(header)
    q0, v0 = system.assemble(1.0, 2.0)
    inputs = np.random.default_rng(0).uniform(-10.0, 10.0, (50, 1))
    truth = _catalog_rollout(system, np.concatenate([q0, v0]), inputs, 0.02, 20)
    gaps = []
    for timestep, frame_skip in ((0.001, 20), (0.0005, 40)):
        model = _rigid("fourbar")
        model.opt.timestep = timestep
        out = _mujoco_rollout(model, *_to_mujoco(header, q0, v0), inputs, frame_skip)
        q = out[:, : model.nq] @ header.q_map.matrix.T
        gaps.append(float(np.max(np.abs(q - truth[:, :3]))))
    assert gaps[0] < 0.05
    assert 1.7 < gaps[0] / gaps[1] < 2.3


def test_rolling_disk_rollout_agrees_with_the_catalog():
    """Two seconds of random torques within the limits, the disk rolling off consistently:
    contact point, heading and rolling angle stay within 1e-3 (m, rad) of the catalog's
    nonholonomic dynamics (measured 4.2e-4: the contact's creep and sinking), over a path
    of about 0.57 m."""
    header = _header("rolling_disk")
    system = _system(header)
    q0 = np.array([0.0, 0.3, 0.0, 0.0])
    v0 = system.consistent_velocity(q0, 1.0, 0.5)
    inputs = np.random.default_rng(0).uniform(-1.0, 1.0, (40, 2)) * [2.0, 1.0]
    truth = _catalog_rollout(system, np.concatenate([q0, v0]), inputs, 0.05, 25)
    model = _rigid("rolling_disk")
    qpos, qvel = np.zeros(model.nq), np.zeros(model.nv)
    for row, index in enumerate(np.argmax(header.q_map.matrix, axis=1)):
        qpos[index], qvel[index] = q0[row], v0[row]
    out = _mujoco_rollout(model, qpos, qvel, inputs, 25)
    q = out[:, : model.nq] @ header.q_map.matrix.T
    assert np.linalg.norm(truth[-1, 2:4] - truth[0, 2:4]) > 0.5
    assert np.max(np.abs(q - truth[:, :4])) < 1e-3


# ---- the plant variants ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_variant_differs_from_its_base_as_declared(name):
    base, variant = _load(name), _load(f"{name}_variant")
    header = _header(f"{name}_variant")
    assert header.variant_of == f"{name}.xml"
    assert header.params == _header(name).params  # the nominal parameters are the base's
    factors = header.variant
    assert set(factors) == {"mass", "damping", "armature"}
    assert all(1.1 <= f <= 1.3 or 0.7 <= f <= 0.9 for f in factors.values())
    moving = base.body_mass > 0
    assert np.allclose(variant.body_mass[moving] / base.body_mass[moving], factors["mass"])
    assert np.allclose(variant.body_inertia[moving] / base.body_inertia[moving], factors["mass"])
    damped = base.dof_damping > 0
    assert damped.any() and np.array_equal(damped, variant.dof_damping > 0)
    assert np.allclose(variant.dof_damping[damped] / base.dof_damping[damped], factors["damping"])
    assert np.allclose(
        variant.dof_armature[damped] / base.dof_armature[damped], factors["armature"]
    )
    # nothing else: geometry, options, joints, actuators and constraints are the base's
    for field in (
        "body_pos", "body_quat", "body_ipos", "jnt_axis", "qpos0", "geom_size", "actuator_gear",
        "actuator_ctrlrange", "eq_data", "eq_solref", "eq_solimp", "geom_friction",
    ):  # fmt: skip
        assert np.array_equal(getattr(base, field), getattr(variant, field)), field
    assert base.opt.timestep == variant.opt.timestep
    assert base.opt.integrator == variant.opt.integrator


# ---- the env ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_env_spaces_and_step_come_from_the_file(name):
    header = _header(name)
    model = _load(name)
    env = _make(name)
    assert env.unwrapped.dt == pytest.approx(_step_line(header)[2], rel=1e-12)
    assert env.observation_space.shape == (model.nq + model.nv,)
    assert env.observation_space.dtype == np.float64 and env.action_space.dtype == np.float64
    assert np.array_equal(env.action_space.low, model.actuator_ctrlrange[:, 0])
    assert np.array_equal(env.action_space.high, model.actuator_ctrlrange[:, 1])
    obs, _ = env.reset(seed=0)
    assert np.array_equal(obs, np.concatenate([model.qpos0, np.zeros(model.nv)]))
    obs, reward, terminated, truncated, info = env.step(env.action_space.high)
    assert reward == 0.0 and not terminated and not truncated
    assert info["time"] == pytest.approx(env.unwrapped.dt)
    unwrapped = env.unwrapped
    assert np.array_equal(obs, np.concatenate([unwrapped.data.qpos, unwrapped.data.qvel]))


def test_the_fourbar_starts_assembled_anywhere_on_the_turn():
    """``qpos_noise = (pi, 0, 0)``: 200 resets put the crank all round the turn (every
    45-degree sector), the coupler and rocker where the catalog's branch +1 puts them (to
    1e-8 rad), the loop closed (residual <= 1e-10 m) and the rates consistent."""
    env = _make("fourbar", qpos_noise=[math.pi, 0.0, 0.0], qvel_noise=[1.0, 0.0, 0.0])
    header = _header("fourbar")
    system = _system(header)
    cranks = []
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        q, v = header.q_map(obs[:3]), header.v_map(obs[3:])
        assert info["equality_residual"] <= 1e-10
        q_ref, v_ref = system.assemble(q[0], v[0])
        assert np.max(np.abs(q - q_ref)) < 1e-8
        assert np.max(np.abs(v - v_ref)) < 1e-8
        cranks.append(q[0])
    sectors = np.floor((np.array(cranks) + math.pi) / (math.pi / 4)).astype(int)
    assert set(sectors.tolist()) == set(range(8))


def test_the_pendulum_starts_anywhere_on_its_circle():
    env = _make("pendulum", qpos_noise=math.pi, qvel_noise=0.5)
    angles, rates = zip(*(env.reset(seed=s)[0] for s in range(100)), strict=True)
    sectors = np.floor((np.array(angles) + math.pi) / (math.pi / 4)).astype(int)
    assert set(sectors.tolist()) == set(range(8))
    assert max(np.abs(rates)) <= 0.5 and max(np.abs(rates)) > 0.4


def test_a_keyframe_is_the_base_of_the_reset(tmp_path):
    """The named <keyframe> is the centre of the reset noise; a misspelt name is answered
    with the file's keyframes."""
    text = (FOLDER / "pendulum.xml").read_text()
    keyed = tmp_path / "keyed.xml"
    keyed.write_text(
        text.replace(
            "</mujoco>", '<keyframe><key name="up" qpos="3.0" qvel="0.5"/></keyframe></mujoco>'
        )
    )
    env = gymnasium.make("vimpc/MujocoPlant-v0", xml_file=keyed, keyframe="up")
    assert np.array_equal(env.reset(seed=0)[0], [3.0, 0.5])
    env = gymnasium.make("vimpc/MujocoPlant-v0", xml_file=keyed, keyframe=0, qpos_noise=0.1)
    starts = np.array([env.reset(seed=s)[0] for s in range(50)])
    assert np.all(np.abs(starts[:, 0] - 3.0) <= 0.1) and np.all(starts[:, 1] == 0.5)
    assert np.ptp(starts[:, 0]) > 0.15
    with pytest.raises(InputError, match="did you mean 'up'"):
        gymnasium.make("vimpc/MujocoPlant-v0", xml_file=keyed, keyframe="upp")


def test_the_fourbar_assembles_the_same_with_a_sparse_jacobian(tmp_path):
    """MuJoCo lays the constraint Jacobian out sparse for large models; forced here, the
    reset's Newton steps read it the same way and reach the same state."""
    text = (FOLDER / "fourbar.xml").read_text()
    sparse = tmp_path / "sparse.xml"
    sparse.write_text(
        text.replace('integrator="implicitfast"', 'integrator="implicitfast" jacobian="sparse"')
    )
    kw = {"qpos_noise": [math.pi, 0.0, 0.0], "qvel_noise": [1.0, 0.0, 0.0]}
    dense_env = _make("fourbar", **kw)
    sparse_env = gymnasium.make("vimpc/MujocoPlant-v0", xml_file=sparse, **kw)
    import mujoco

    assert mujoco.mj_isSparse(sparse_env.unwrapped.model)
    assert not mujoco.mj_isSparse(dense_env.unwrapped.model)
    for seed in range(5):
        a, b = dense_env.reset(seed=seed)[0], sparse_env.reset(seed=seed)[0]
        assert np.allclose(a, b, rtol=0, atol=1e-10)


def test_the_env_is_deterministic_under_a_seed():
    actions = np.random.default_rng(3).uniform(-20.0, 20.0, (20, 1))

    def run(seed):
        env = _make("fourbar", qpos_noise=[math.pi, 0.0, 0.0])
        out = [env.reset(seed=seed)[0]]
        out += [env.step(a)[0] for a in actions]
        return np.array(out)

    assert np.array_equal(run(7), run(7))
    assert not np.allclose(run(7)[0], run(8)[0])


def test_a_given_start_state_is_taken_exactly():
    env = _make("cartpole")
    x = np.array([0.3, 2.0, -0.1, 0.5])
    obs, _ = env.reset(seed=0, options={"state": x})
    assert np.array_equal(obs, x)
    with pytest.raises(InputError, match=r"options\['state'\] must have shape \(4,\)"):
        env.reset(options={"state": [0.0, 0.0]})
    with pytest.raises(InputError, match="unknown key 'stat'"):
        env.reset(options={"stat": x})


def test_a_diverged_state_terminates_the_episode(tmp_path, monkeypatch):
    """A velocity beyond MuJoCo's limit (1e10): mj_step warns and resets the data itself; the
    env says terminated rather than hand back the reset state as if nothing happened."""
    monkeypatch.chdir(tmp_path)  # MuJoCo logs its warning to MUJOCO_LOG.TXT here
    env = _make("pendulum")
    env.reset(seed=0, options={"state": [0.1, 1e11]})
    _, _, terminated, truncated, _ = env.step([0.0])
    assert terminated and not truncated
    env.reset(seed=0)
    assert not env.step([0.0])[2]


def test_the_fourbar_loop_stays_closed_under_random_torques():
    """Ten seconds of random crank torques in +-20 N m (a new draw every 0.1 s) spin the
    linkage up to ~46 rad/s. The soft closure's residual [m] grows as the square of the
    fastest link rate w [rad/s]: at most 2e-6 w^2 (measured 1.6e-6 w^2, 1.6e-3 m at the
    top speed), and below 1e-4 m while every rate is within vimpc's FourBar safety bound of
    8 rad/s (measured 8.1e-5 m). It is soft, so never zero."""
    env = _make("fourbar")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    residuals, speeds = [], []
    for k in range(500):
        if k % 5 == 0:
            action = rng.uniform(-20.0, 20.0, 1)
        obs, _, terminated, _, info = env.step(action)
        assert not terminated
        residuals.append(info["equality_residual"])
        speeds.append(np.max(np.abs(obs[3:])))
    residuals, speeds = np.array(residuals), np.array(speeds)
    assert speeds.max() > 30.0 and residuals.max() > 1e-6
    assert np.all(residuals <= 2e-6 * np.maximum(speeds, 2.0) ** 2)
    assert np.any(speeds <= 8.0) and residuals[speeds <= 8.0].max() < 1e-4


def test_the_rolling_disk_barely_slips_under_torques_at_the_limits():
    """Ten seconds of each torque at +- its limit (a new draw every step): the contact
    point's slip speed, the catalog's no-slip residual, stays below 3e-3 m/s (measured max
    1.4e-3 m/s, median 7e-4) while the disk reaches over 0.3 m/s."""
    env = _make("rolling_disk")
    header = _header("rolling_disk")
    R = header.params["R"]
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    slips, speeds = [], []
    for _ in range(200):
        obs, *_ = env.step(rng.choice([-1.0, 1.0], 2) * env.action_space.high)
        q, v = header.q_map(obs[:5]), header.v_map(obs[5:])
        rolling = R * v[0] * np.array([math.cos(q[1]), math.sin(q[1])])
        slips.append(np.linalg.norm(v[2:] - rolling))
        speeds.append(np.linalg.norm(v[2:]))
    assert max(speeds) > 0.3 and max(slips) < 3e-3


def test_the_gymnasium_checker_passes():
    from gymnasium.utils.env_checker import check_env

    for name, kw in (("pendulum", {"qpos_noise": 0.1}), ("fourbar", {"qpos_noise": [1, 0, 0]})):
        env = _make(name, **kw)
        check_env(env.unwrapped, skip_render_check=True)


def test_the_cartpole_file_runs_gymnasiums_inverted_pendulum():
    """InvertedPendulum-v5 reads the file: control step 0.05 s, observation concat(qpos,
    qvel) with the pole hanging at qpos = 0, the hinge unlimited (the pole swings over the
    top), the rail's end stops holding the cart under the full force (hit at 4.9 m/s: the
    overshoot 4.8 cm, at rest 0.6 mm beyond the stop)."""
    import mujoco

    env = gymnasium.make("InvertedPendulum-v5", xml_file=str(FOLDER / "cartpole.xml"), frame_skip=5)
    obs, _ = env.reset(seed=0)
    unwrapped = env.unwrapped
    assert unwrapped.dt == pytest.approx(0.05, rel=1e-12)
    assert np.array_equal(obs, np.concatenate([unwrapped.data.qpos, unwrapped.data.qvel]))
    model, data = unwrapped.model, unwrapped.data
    mujoco.mj_resetData(model, data)
    mujoco.mj_forward(model, data)
    assert np.allclose(data.xipos[model.body("pole").id], [0.0, 0.0, -0.25], atol=1e-15)
    data.qvel[1] = 20.0
    mujoco.mj_step(model, data, 50)
    assert data.qpos[1] > math.pi  # over the top: no hinge limit
    mujoco.mj_resetData(model, data)
    data.ctrl[0] = model.actuator_ctrlrange[0, 1]
    positions = []
    for _ in range(400):
        mujoco.mj_step(model, data)
        positions.append(data.qpos[0])
    assert 1.0 < max(positions) < 1.06 and abs(positions[-1] - 1.0) < 1e-3


def test_a_missing_or_broken_xml_file_is_named(tmp_path):
    missing = tmp_path / "nowhere.xml"
    with pytest.raises(InputError, match=rf"xml_file '{missing}' does not exist.*MuJoCo says"):
        gymnasium.make("vimpc/MujocoPlant-v0", xml_file=missing)
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></worldbody></mujoco>")
    with pytest.raises(InputError, match=rf"xml_file '{broken}' is no valid MJCF.*MuJoCo says: "):
        gymnasium.make("vimpc/MujocoPlant-v0", xml_file=str(broken))
    unlimited = tmp_path / "unlimited.xml"
    text = (FOLDER / "pendulum.xml").read_text().replace(' ctrlrange="-2 2"', "")
    unlimited.write_text(text)
    with pytest.raises(InputError, match=r"every actuator needs a ctrlrange.*\['torque'\]"):
        gymnasium.make("vimpc/MujocoPlant-v0", xml_file=unlimited)


def test_bad_reset_arguments_are_named():
    with pytest.raises(InputError, match=r"qpos_noise must have shape \(3,\)"):
        _make("fourbar", qpos_noise=[1.0, 0.0])
    with pytest.raises(InputError, match="qpos_noise are half-widths and must be >= 0"):
        _make("pendulum", qpos_noise=[-1.0])
    with pytest.raises(InputError, match="draws all 3 degrees of freedom"):
        _make("fourbar", qpos_noise=0.1)
    with pytest.raises(InputError, match="keyframe index must be in"):
        _make("pendulum", keyframe=0)
    with pytest.raises(InputError, match="frame_skip must be a positive integer, got 0"):
        gymnasium.make("vimpc/MujocoPlant-v0", xml_file=FOLDER / "pendulum.xml", frame_skip=0)
