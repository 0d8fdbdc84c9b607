"""Long unforced rollouts of a model (vimpc.models.evaluation.long_rollout_metrics): energy
drift, constraint residuals measured by the nominal system, failed rollouts."""

from __future__ import annotations

import math
from dataclasses import replace

import casadi as ca
import numpy as np
import pytest

from vimpc.data import Dataset
from vimpc.data.sampling import onto_constraints
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics import FourBar, Pendulum
from vimpc.mechanics import _ops as ops
from vimpc.mechanics.system import NaturalSystem
from vimpc.models import NominalModel
from vimpc.models.evaluation import long_rollout_metrics


class Oscillator(NaturalSystem):
    """A mass on a spring, ``L = 1/2 m v^2 - 1/2 k q^2``: a quadratic energy, which the
    midpoint rule (the implicit midpoint rule on a linear system) keeps exactly."""

    defaults = {"m": 1.0, "k": 4.0}
    inertial = ("m",)
    lengths = ("k",)

    @property
    def coordinate_names(self):
        return ("x",)

    @property
    def input_names(self):
        return ("f",)

    @property
    def coordinate_units(self):
        return ("m",)

    @property
    def input_units(self):
        return ("N",)

    def mass_matrix(self, q):
        return ops.diag([self.params["m"]], like=q)

    def potential(self, q):
        return 0.5 * self.params["k"] * q[0] ** 2

    def input_map(self, q):
        return ops.eye(1, like=q)


def starts(system, low, high, n=6, dt=0.05, seed=0) -> Dataset:
    """A dataset whose trajectories begin at states spread over ``[low, high]`` (only the
    starts and the energy range of its true states matter here)."""
    rng = np.random.default_rng(seed)
    x = onto_constraints(system, rng.uniform(low, high, size=(n, len(low))))
    states = np.stack([x, x], axis=1)
    # measured with noise: the rollouts start from the true states, on the constraints
    obs = states + 1e-3 * rng.standard_normal(states.shape)
    t = np.tile([0.0, dt], (n, 1))
    return Dataset(t, obs, states, np.zeros((n, 1, system.nu)), dt)


def drift(system, integrator, data, steps=500):
    model = NominalModel(system, data.dt, integrator=integrator).discrete_model()
    return long_rollout_metrics(model, system, data, steps=steps)


def test_midpoint_keeps_a_quadratic_energy_to_round_off_and_euler_does_not():
    system = Oscillator()
    data = starts(system, [-1.0, -2.0], [1.0, 2.0])
    vi, euler = drift(system, "midpoint", data), drift(system, "euler", data)
    assert vi["energy_source"] == euler["energy_source"] == "model"
    assert vi["rollout_failed"] == 0 and vi["rollouts"] == data.n_trajectories
    assert vi["energy_drift_max"] < 1e-12
    # explicit Euler on omega = 2 rad/s at h = 0.05: each step multiplies E by 1 + (omega h)^2
    # = 1.01, so 500 steps give e^(500 ln 1.01) - 1 ~ 144 times the starting energy
    assert euler["energy_drift_median"] > 1e10 * vi["energy_drift_max"]
    assert euler["energy_drift_max"] > 1.0


def test_midpoint_pendulum_drift_stays_bounded_while_euler_grows():
    # the pendulum's energy is not quadratic: the midpoint rule keeps it within its O(h^2)
    # error (no growth), explicit Euler gains energy every step
    system = Pendulum()
    data = starts(system, [-2.0, -2.0], [2.0, 2.0])
    vi, euler = drift(system, "midpoint", data), drift(system, "euler", data)
    short = drift(system, "midpoint", data, steps=50)
    assert vi["energy_drift_max"] < 1e-2
    assert euler["energy_drift_median"] > 100 * vi["energy_drift_median"]
    # bounded: ten times longer does not drift further than twice the short rollouts' drift
    assert vi["energy_drift_max"] < 2 * short["energy_drift_max"]
    assert "holonomic_residual" not in vi and "nonholonomic_residual" not in vi


def test_a_model_without_energy_is_measured_by_the_nominal_energy():
    system = Oscillator()
    data = starts(system, [-1.0, -2.0], [1.0, 2.0])
    model = NominalModel(system, data.dt, integrator="midpoint").discrete_model()
    bare = replace(model, energy=None)
    out = long_rollout_metrics(bare, system, data)
    assert out["energy_source"] == "nominal"
    assert out["energy_drift_max"] < 1e-12
    # the scale: the range of 1/2 v^2 + 2 q^2 over the data's true states
    obs = data.states.reshape(-1, 2)
    energy = 0.5 * obs[:, 1] ** 2 + 2.0 * obs[:, 0] ** 2
    assert out["energy_scale_J"] == pytest.approx(energy.max() - energy.min(), rel=1e-12)


def test_the_constrained_midpoint_keeps_the_loop_closure_and_explicit_rk4_drifts():
    system = FourBar()
    low = [-math.pi, -math.pi, -math.pi, -3.0, -3.0, -3.0]
    data = starts(system, low, [-v for v in low], n=4, dt=0.02)
    vi, rk4 = drift(system, "midpoint", data, 300), drift(system, "rk4", data, 300)
    assert vi["rollout_failed"] == 0
    assert vi["holonomic_residual_max"] < 1e-9
    # the explicit method keeps the constraints only at the acceleration level: they drift
    assert rk4["holonomic_residual_median"] > 1e-6
    assert rk4["holonomic_residual_median"] > 1e4 * vi["holonomic_residual_max"]


def test_a_rollout_that_blows_up_counts_as_failed_and_stays_out_of_the_figures():
    system = Oscillator()
    data = starts(system, [-1.0, -2.0], [1.0, 2.0], n=4)
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0)
    # starts with q > 0 overflow to inf within a few steps, the others stay where they are
    grow = ca.if_else(x[0] > 0, 1e200, 1.0)
    step = ca.Function("step", [x, u, p], [x * grow])
    ident = ca.Function("id", [x], [x])
    model = DiscreteModel(
        dt=data.dt, nx=2, nu=1, np=0, step=step, from_obs=ident, to_obs=ident, nobs=2,
        state_names=("x", "v"), input_names=("f",),
    )  # fmt: skip
    out = long_rollout_metrics(model, system, data, steps=10)
    blown = data.states[:, 0, 0] > 0
    assert 0 < blown.sum() < len(blown)
    assert out["rollout_failed"] == int(blown.sum())
    assert out["rollout_failed_share"] == pytest.approx(blown.mean())
    assert [d is None for d in out["energy_drift"]] == blown.tolist()
    assert out["energy_drift_max"] == 0.0  # the resting ones do not move


def test_bad_arguments_are_refused_naming_them():
    system = Oscillator()
    data = starts(system, [-1.0, -2.0], [1.0, 2.0])
    model = NominalModel(system, data.dt).discrete_model()
    with pytest.raises(InputError, match="steps must be a positive int"):
        long_rollout_metrics(model, system, data, steps=0)
    with pytest.raises(InputError, match="nominal system"):
        long_rollout_metrics(model, FourBar(), data)
