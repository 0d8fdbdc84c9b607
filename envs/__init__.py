"""vimpc's gymnasium environments, installed as ``vimpc_envs``.

Importing this package registers the environment ids with gymnasium; the
environment modules themselves load only when an environment is made.
"""

from __future__ import annotations

import gymnasium

ENV_IDS = {
    "vimpc/Pendulum-v0": "vimpc_envs.pendulum:PendulumEnv",
    "vimpc/CartPole-v0": "vimpc_envs.cartpole:CartPoleEnv",
    "vimpc/FourBar-v0": "vimpc_envs.fourbar:FourBarEnv",
    "vimpc/RollingDisk-v0": "vimpc_envs.rolling_disk:RollingDiskEnv",
    # any MJCF mechanism (the mujoco extra); the entry point loads mujoco only when made
    "vimpc/MujocoPlant-v0": "vimpc_envs.mujoco:MujocoPlantEnv",
}


def register_envs() -> None:
    """Register every vimpc environment id (idempotent)."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


register_envs()
