"""Every registered model family keeps the family contract (vimpc.testing.ModelFamilyContract).

One test class per family of ``vimpc.models.registry.FAMILIES``: a newly registered family
is checked at once and fails until it has a small case below (or a classmethod
``small_case()``). Each case is a pendulum with tiny data and small settings; the fit is
made once per family and shared by the checks.
"""

from __future__ import annotations

import functools
import unittest

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc.data import make_excitation, rollout_env
from vimpc.data.sampling import halton
from vimpc.errors import InputError
from vimpc.models import NominalModel
from vimpc.testing import ModelFamilyContract, SmallCase

DT = 0.05
PENDULUM = "vimpc/Pendulum-v0"
# LSI learns a conservative Lagrangian: its pendulum has no friction
FRICTIONLESS = {"friction": [0.0]}


@functools.cache
def _env(frictionless: bool) -> gymnasium.Env:
    return gymnasium.make(PENDULUM, dt=DT, **(FRICTIONLESS if frictionless else {})).unwrapped


@functools.cache
def _data(
    frictionless: bool, trajectories: int, steps: int, seed: int, starts: tuple | None = None
):
    """Random-step torques up to 2 N m on the pendulum; starts from its reset or spread
    (Halton) over the box ``starts = (low, high)`` of angles and velocities."""
    env = _env(frictionless)
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, 1, DT, rng, low=[-2.0], high=[2.0])
            for _ in range(trajectories)
        ]
    )
    initial = None if starts is None else halton(*starts, trajectories, seed=seed)
    return rollout_env(env, trajectories, steps, inputs, seed, initial_states=initial)


def _pendulum_case(frictionless: bool = False, **fields) -> SmallCase:
    return SmallCase(
        **{
            "system": _env(frictionless).nominal_system,
            "env_id": PENDULUM,
            "dt": DT,
            "env_kwargs": FRICTIONLESS if frictionless else {},
            "obs_low": [-np.pi, -4.0],
            "obs_high": [np.pi, 4.0],
            "input_low": [-2.0],
            "input_high": [2.0],
            **fields,
        }
    )


def nominal_case() -> SmallCase:
    # nothing to learn and no bound: the family needs no fit
    return _pendulum_case(settings={"integrator": "midpoint"})


def gp_vi_case() -> SmallCase:
    # 60 GP samples, one optimiser start of 30 steps; the GPs' own bound (Theorem 1), so the
    # file and the checks carry a bound, checked on 200 held-out transitions
    settings = {"samples": 60, "restarts": 1, "iterations": 30, "bound": "theorem1"}
    return _pendulum_case(
        settings=settings,
        data=_data(False, 6, 20, 0),
        heldout=_data(False, 10, 20, 500),
    )


def gp_residual_case() -> SmallCase:
    # the black-box GPs on the RK4 step's residual: 60 samples, one optimiser start of 30
    # steps, a conformal bound shaped by the GPs' spread, checked on 200 held-out transitions
    settings = {
        "samples": 60, "restarts": 1, "iterations": 30, "bound": "conformal",
        "conformal_scale": "spread",
    }  # fmt: skip
    return _pendulum_case(
        settings=settings,
        data=_data(False, 6, 20, 0),
        calibration=_data(False, 10, 20, 300),
        heldout=_data(False, 10, 20, 500),
    )


def mlp_residual_case() -> SmallCase:
    # a 16x16 network on the RK4 step's residual, 200 epochs; a constant conformal bound
    return _pendulum_case(
        settings={"hidden": [16, 16], "epochs": 200, "lr": 1e-2, "bound": "conformal"},
        data=_data(False, 6, 20, 0),
        calibration=_data(False, 10, 20, 300),
        heldout=_data(False, 10, 20, 500),
    )


def lsi_case() -> SmallCase:
    # 30 excited trajectories spread over the phase plane, 80 kernel centres; Newton stops
    # at the kernel sums' round-off (as in tests/models/test_lsi.py's contract)
    settings = {"length": 2.0, "velocity_length": 6.0, "centres": 80}
    return _pendulum_case(
        frictionless=True,
        settings=settings,
        data=_data(True, 30, 20, 0, ((-np.pi, -8.0), (np.pi, 8.0))),
        contract={"residual_tol": 1e-7, "jacobian_rtol": 1e-4, "fd_step": 1e-3},
    )


def _network_case(**settings) -> SmallCase:
    # a 16x16 network trained for 200 epochs on 6 excited trajectories; states sampled
    # where the data are (after tests/models/test_dlnn.py's 40 epochs the midpoint step of either
    # network failed, NaN, at 332 of 400 such states; after 200, at none)
    return _pendulum_case(
        frictionless=True,
        settings={"hidden": [16, 16], "epochs": 200, "lr": 1e-2, **settings},
        data=_data(True, 6, 20, 0, ((-2.0, -3.0), (2.0, 3.0))),
        obs_low=[-1.5, -2.5],
        obs_high=[1.5, 2.5],
        contract={"jacobian_rtol": 1e-4, "fd_step": 1e-4},
    )


def dlnn_case() -> SmallCase:
    return _network_case(order=0)


def lnn_case() -> SmallCase:
    return _network_case()


def constrained_network_case() -> SmallCase:
    # CLNN/CHNN in the pendulum's maximal coordinates (x, y, phi): a 16x16 potential trained
    # for 100 epochs on 5-step rollouts of the network families' data; the step keeps the
    # rod on its pivot
    return _pendulum_case(
        frictionless=True,
        settings={"hidden": [16, 16], "epochs": 100, "lr": 1e-2},
        data=_data(True, 6, 20, 0, ((-2.0, -3.0), (2.0, 3.0))),
        obs_low=[-1.5, -2.5],
        obs_high=[1.5, 2.5],
        contract={"jacobian_rtol": 1e-4, "fd_step": 1e-4, "constraint_preserving": True},
    )


def hamel_case() -> SmallCase:
    # the rolling disk: 20 excited trajectories of 6 steps from consistent starts spread over
    # the heading, an 8x8 connection network, 30 epochs of one-step rollouts (tests/models/test_hamel.py
    # checks the learning); the step keeps the learned constraint only from states that meet it
    from vimpc.mechanics import RollingDisk

    kwargs = {"substep": 1e-3, "perturbation": 0.0, "obs_noise": 0.0}
    env = gymnasium.make("vimpc/RollingDisk-v0", dt=DT, **kwargs).unwrapped
    rng = np.random.default_rng(0)
    disk = RollingDisk()
    starts, inputs = [], []
    for _ in range(20):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi), *rng.uniform(-1, 1, 2)])
        v = disk.consistent_velocity(q, rng.uniform(-2, 2), rng.uniform(-1.5, 1.5))
        starts.append(np.concatenate([q, v]))
        inputs.append(make_excitation("random_steps", 6, 2, DT, rng, low=[-2, -1], high=[2, 1]))
    data = rollout_env(env, 20, 6, np.stack(inputs), 0, initial_states=np.array(starts))
    return SmallCase(
        system=env.nominal_system,
        env_id="vimpc/RollingDisk-v0",
        dt=DT,
        env_kwargs=kwargs,
        settings={"hidden": [8, 8], "epochs": 30, "window": 1, "lr": 1e-2, "batch": 0},
        data=data,
        obs_low=[-1.0, -np.pi, -1.0, -1.0, -1.0, -1.0, -0.3, -0.3],
        obs_high=[1.0, np.pi, 1.0, 1.0, 1.0, 1.0, 0.3, 0.3],
        input_low=[-2.0, -1.0],
        input_high=[2.0, 1.0],
        contract={"jacobian_rtol": 1e-4, "fd_step": 1e-4},
    )


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Train the tiny networks on one torch thread: with the machine's 2 cores shared by
    other processes, torch's default pool of 2 threads fitted the lnn case 8x slower
    (16.9 s against 2.2 s for 100 epochs at a load average of 3.4)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: family name -> its small case
SMALL_CASES = {
    "nominal": nominal_case,
    "gp_vi": gp_vi_case,
    "gp_residual": gp_residual_case,
    "mlp_residual": mlp_residual_case,
    "lsi": lsi_case,
    "dlnn": dlnn_case,
    "lnn": lnn_case,
    "clnn": constrained_network_case,
    "chnn": constrained_network_case,
    "hamel": hamel_case,
}

globals().update(ModelFamilyContract.for_registry(SMALL_CASES))


# -- the contract catches what it is written for ------------------------------------------------


def _failures(suite: ModelFamilyContract, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            getattr(suite, name)()
        except unittest.SkipTest:
            pass
        except AssertionError as exc:
            out[name] = str(exc)
    return out


def test_a_family_without_a_small_case_fails_saying_what_to_add():
    suite = ModelFamilyContract.for_family("nominal", {})()
    failures = _failures(suite, ["test_has_small_case", "test_fit_returns_self"])
    assert set(failures) == {"test_has_small_case", "test_fit_returns_self"}
    message = failures["test_has_small_case"]
    assert "has no small case" in message and "add an entry 'nominal' to SMALL_CASES" in message


class _Lying(NominalModel):
    """A nominal model whose fit returns nothing and whose provides() omits the energy."""

    def fit(self, data=None, calibration=None):
        super().fit(data, calibration)

    def _provides(self):
        return super()._provides() - {"energy"}


def test_a_broken_family_fails_the_checks_written_for_it():
    cls = ModelFamilyContract.for_family("nominal", SMALL_CASES)
    suite = type("Broken", (cls,), {"family_class": lambda self: _Lying})()
    checks = [
        "test_fit_returns_self",
        "test_provides_matches_the_exported_model",
        "test_use_before_fit",
        "test_unknown_settings_are_refused",
    ]
    failures = _failures(suite, checks)
    assert set(failures) == {"test_fit_returns_self", "test_provides_matches_the_exported_model"}
    assert (
        "missing from provides: ['energy']" in failures["test_provides_matches_the_exported_model"]
    )


def test_a_small_case_refuses_unknown_contract_options():
    with pytest.raises(InputError, match=r"got \['residual_tolerance'\]"):
        _pendulum_case(settings={}, contract={"residual_tolerance": 1e-6})
