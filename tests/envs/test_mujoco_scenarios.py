"""The shipped MuJoCo scenarios say what their MJCF files say: the adapter's catalog system,
nominal parameters, observation map and action map against each file's machine-readable
header, on the observations of the real env; and a scenario pointed at another MJCF (a
plant variant) takes its data and episodes from that file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from vimpc_envs._mjcf_header import read_header

from vimpc import pipeline, scenario

ROOT = Path(__file__).parents[2]
MUJOCO_SCENARIOS = sorted((ROOT / "scenarios").glob("mujoco_*.toml"))


def test_every_system_has_a_mujoco_scenario():
    systems = {scenario.load_scenario(p).env.adapter["system"] for p in MUJOCO_SCENARIOS}
    assert systems == {"Pendulum", "CartPole", "FourBar", "RollingDisk"}


@pytest.mark.parametrize("path", MUJOCO_SCENARIOS, ids=lambda p: p.stem)
def test_the_adapter_is_the_mjcf_header(path):
    import mujoco

    cfg = scenario.load_scenario(path)
    xml = cfg.env.kwargs["xml_file"]
    assert Path(xml).is_absolute() and Path(xml).parent == ROOT / "scenarios" / "mujoco"
    model = mujoco.MjModel.from_xml_path(xml)
    header = read_header(xml, model.nq, model.nv, model.nu)
    plant = pipeline.build_env(cfg)
    try:
        system = plant.nominal_system
        assert system.name == header.system
        for key, value in header.params.items():  # the nominal model is the file's
            assert system.params[key] == pytest.approx(value, rel=1e-12), key
        assert not np.any(np.asarray(system.friction))  # nothing the file hides is assumed
        # the map on the env's own observations (qpos, qvel), along a short excited run
        rng = np.random.default_rng(0)
        inner = plant.inner
        x, _ = plant.reset(seed=1)
        for _ in range(10):
            qpos, qvel = inner.data.qpos.copy(), inner.data.qvel.copy()
            expected = np.concatenate([header.q_map(qpos), header.v_map(qvel)])
            # (angles unwrapped along the run: equal up to whole turns)
            assert np.allclose(x, expected, atol=1e-12)
            u = rng.uniform(plant.action_space.low, plant.action_space.high)
            x, _, _, _, info = plant.step(u)
            ctrl = inner.data.ctrl.copy()
            # (InvertedPendulum-v5 takes float32 actions)
            eps = 4 * np.finfo(inner.action_space.dtype).eps
            assert np.allclose(header.u_map(ctrl), u, rtol=eps, atol=0.0)
            assert np.allclose(info["applied_action"], u, rtol=1e-12)
        # the input bounds are the motors' ranges through their gears
        gear = np.diag(header.u_map.matrix)
        assert np.allclose(plant.action_space.high, gear * model.actuator_ctrlrange[:, 1])
        assert cfg.env.dt == pytest.approx(model.opt.timestep * cfg.env.kwargs["frame_skip"])
    finally:
        plant.close()


def test_a_scenario_pointed_at_a_variant_takes_its_plant_from_it(tmp_path):
    """``--set env.kwargs.xml_file=...`` (relative to the working folder) changes the plant
    and the fit's cache key; the data come from the variant (its heavier rod swings
    slower under the same inputs)."""
    path = ROOT / "scenarios" / "mujoco_pendulum_gpvi_swingup.toml"
    base = scenario.load_scenario(path)
    variant = scenario.load_scenario(
        path, [f"env.kwargs.xml_file={ROOT / 'scenarios' / 'mujoco' / 'pendulum_variant.xml'}"]
    )
    assert pipeline.cache_key(base) != pipeline.cache_key(variant)
    header = read_header(variant.env.kwargs["xml_file"], 1, 1, 1)
    assert header.variant_of == "pendulum.xml" and header.variant["mass"] != 1.0
    moved = []
    for cfg in (base, variant):
        cfg = cfg.replace(data=cfg.data.replace(trajectories=3, steps=20, collection="open_loop"))
        env = pipeline.build_env(cfg)
        data = pipeline.collect(cfg, env, "train")
        env.close()
        assert data.metadata["foreign_env"] == "vimpc/MujocoPlant-v0"
        moved.append(np.abs(np.diff(data.obs[..., 1], axis=1)).mean())
    assert moved[0] != pytest.approx(moved[1], rel=1e-3)
