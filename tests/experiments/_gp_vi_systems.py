"""The true systems and the metric of Fig. 2 of the GP-VI paper (``gp_vi_samples.py``).

Each system of the figure: its true system by ``param_seed`` (masses and inertias x U(0.9,
1.1), viscous joint friction from the paper's ranges, the midpoint VI at ``SUBSTEP``,
observation noise ``NOISE`` every ``DT``) and its box of start states at rest; the data
settings for :func:`vimpc.pipeline.collect`; the ``HORIZON``-step position error in joint
coordinates, also for models in maximal coordinates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vimpc.data import Dataset
from vimpc.mechanics import DoublePendulum, ParallelogramFourBar
from vimpc.models import evaluation

DT = 0.01
SUBSTEP = 1e-4
NOISE = 1e-3
PERTURBATION = 0.1
TRAIN, TEST, STEPS = 200, 100, 200  # trajectories of 2 s
HORIZON = 20
PI = math.pi


# -- the true systems -----------------------------------------------------------------------


def _env_by_id(env_id: str) -> Callable[[int], Any]:
    def make(param_seed: int):
        import gymnasium
        import vimpc_envs  # noqa: F401  (registers the environment ids)

        return gymnasium.make(
            env_id,
            dt=DT,
            substep=SUBSTEP,
            perturbation=PERTURBATION,
            obs_noise=NOISE,
            param_seed=param_seed,
        ).unwrapped

    return make


def _truth_env(system_type: type, friction_max: tuple[float, ...]) -> Callable[[int], Any]:
    """A true system without a package env: a task-free :class:`MechanicalEnv` of
    ``system_type`` (same perturbation, friction draw, integrator, noise as the envs)."""

    def make(param_seed: int):
        from vimpc_envs._base import MechanicalEnv

        class Truth(MechanicalEnv):
            def stage_cost(self, obs, u, t=0.0):
                return 0.0

            def safety_margin(self, obs):
                return np.zeros(0)

            def _sample_state(self):
                raise NotImplementedError("start states are given to reset")

            def _view(self):
                return (-2.0, 2.0), (-2.0, 2.0)

        nx = 2 * system_type().nq
        Truth.system_type = system_type
        Truth.friction_max = friction_max
        Truth.friction_rates = tuple(f"joint{i + 1}" for i in range(len(friction_max)))
        Truth.action_limit = (1e3,) * system_type().nu
        Truth.observation_limit = (1e4,) * (nx // 2) + (1e3,) * (nx // 2)
        Truth.__name__ = f"{system_type.__name__}Truth"
        return Truth(
            dt=DT,
            substep=SUBSTEP,
            perturbation=PERTURBATION,
            obs_noise=NOISE,
            param_seed=param_seed,
        )

    return make


@dataclass(frozen=True)
class SystemSpec:
    """A system of the figure: its true system (by ``param_seed``) and the box of start
    states ``(q, v)`` (velocities 0: at rest)."""

    label: str
    make_env: Callable[[int], Any]
    low: tuple[float, ...]
    high: tuple[float, ...]


# start boxes and friction ranges of implementations.md section 1 (the paper's Fig. 2)
SYSTEMS = {
    "pendulum": SystemSpec("Pendulum", _env_by_id("vimpc/Pendulum-v0"), (-PI, 0.0), (PI, 0.0)),
    "cartpole": SystemSpec(
        "Cart-pole", _env_by_id("vimpc/CartPole-v0"), (-0.5, -PI, 0, 0), (0.5, PI, 0, 0)
    ),
    "double_pendulum": SystemSpec(
        "Double pendulum",
        _truth_env(DoublePendulum, (2.0, 0.5)),
        (-PI / 2, -PI, 0, 0),
        (PI / 2, PI, 0, 0),
    ),
    # friction on the joints (torque, pivot3, joint12, joint34, joint24): the authors'
    # rand(4) .* [2, 0.5, 2, 0.5] on their joints 1-4; the second pivot, which their
    # mechanism closes with an extra joint, frictionless
    "fourbar": SystemSpec(
        "Parallelogram four-bar",
        _truth_env(ParallelogramFourBar, (2.0, 0.0, 0.5, 2.0, 0.5)),
        (-PI / 2, -PI / 2, 0, 0),
        (PI / 2, PI / 2, 0, 0),
    ),
}


# -- data and metric ----------------------------------------------------------------------------


def data_cfg(
    spec: SystemSpec, r: int, train: int = TRAIN, test: int = TEST, steps: int = STEPS
) -> dict[str, Any]:
    """The ``[data]`` of a scenario for :func:`vimpc.pipeline.collect`: ``train`` and
    ``test`` trajectories of ``steps`` steps, zero input, uniform starts at rest, seeds
    apart by realisation and part."""
    return {
        "data": {
            "trajectories": train,
            "seed": 1_000_000 + 1000 * r,
            "heldout_trajectories": test,
            "heldout_seed": 2_000_000 + 1000 * r,
            "steps": steps,
            "excitation": "zero",
            "excitation_options": {},
            "initial_state": "uniform",
            "low": list(spec.low),
            "high": list(spec.high),
            "obs_noise": None,  # the env's own, NOISE
        }
    }


def windows_of(test: Dataset, n: int, seed: int) -> Dataset:
    """``n`` noise-free windows of ``HORIZON`` steps drawn from the test trajectories, as a
    dataset of ``n`` short trajectories (``obs`` = the ground truth)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, test.n_trajectories, n)[:, None]
    k = rng.integers(0, test.n_steps - HORIZON + 1, n)[:, None] + np.arange(HORIZON + 1)
    states = test.states[i, k]
    return Dataset(test.t[i, k], states, states, test.inputs[i, k[:, :-1]], test.dt, test.metadata)


def _wrap(error: np.ndarray, angles: np.ndarray) -> np.ndarray:
    return np.where(angles, np.angle(np.exp(1j * error)), error)


@dataclass(frozen=True)
class Readout:
    """The joint-coordinate errors of a model's position errors: its angle entries
    (``model_angles``) wrapped, times ``matrix``, the joint angles (``angles``) wrapped."""

    model_angles: np.ndarray
    matrix: np.ndarray
    angles: np.ndarray

    @classmethod
    def joint(cls, joint) -> Readout:
        """A model in the joint coordinates of ``joint``."""
        angles = np.array([unit == "rad" for unit in joint.coordinate_units])
        return cls(angles, np.eye(joint.nq), angles)

    @classmethod
    def maximal(cls, joint) -> Readout:
        """A model in ``joint.maximal()``: the bodies' angles are ``phi = A q + c`` with a
        constant ``A`` (each row a body's angle Jacobian), so the joint angles' errors are
        ``pinv(A)`` times the bodies' angle errors (exact on the constraints, where the model
        stays); the bodies' positions are not used."""
        maximal = joint.maximal()
        A = np.vstack([np.asarray(p.angle_jacobian) for p in joint.poses(np.zeros(joint.nq))])
        model_angles = np.array([unit == "rad" for unit in maximal.coordinate_units])
        matrix = np.zeros((joint.nq, maximal.nq))
        matrix[:, model_angles] = np.linalg.pinv(A)
        return cls(model_angles, matrix, Readout.joint(joint).angles)


def to_maximal(joint, data: Dataset) -> Dataset:
    """``data`` of ``joint`` in ``joint.maximal()``'s coordinates: each observation and state
    mapped by ``joint.to_maximal`` (so the noise enters through the joint coordinates and
    the noisy data lie on the constraints, as the authors')."""
    metadata = {**data.metadata, "system": joint.maximal().name}
    return data.replace(
        obs=joint.states_to_maximal(data.obs),
        states=joint.states_to_maximal(data.states),
        metadata=metadata,
    )


def position_mse(model, windows: Dataset, readout: Readout) -> float:
    """Mean square ``HORIZON``-step error of the joint coordinates (angles wrapped); inf if
    the prediction is not finite."""
    try:
        error = evaluation.prediction_errors(model, windows, HORIZON)
    except RuntimeError:  # a Newton solve CasADi could not finish
        return math.inf
    error = _wrap(error[:, : len(readout.model_angles)], readout.model_angles)
    error = _wrap(error @ readout.matrix.T, readout.angles)
    value = float(np.mean(error**2))
    return value if np.isfinite(value) else math.inf
