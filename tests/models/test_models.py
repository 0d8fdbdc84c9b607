"""Model families: settings, the fit/export protocol, the registry, and the nominal model with
a calibrated bound end to end on a real environment.

Two toy families exercise what the nominal model does not: ``OffsetModel`` learns (a
constant one-step offset from the training data, so it needs training data) and
``SpreadModel`` has a state-dependent spread for ``conformal_scale = "spread"``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import casadi as ca
import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

import vimpc
from vimpc._settings import (
    NONNEGATIVE,
    Setting,
)
from vimpc.data import Dataset, add_noise, make_excitation, rollout_env, rollout_model
from vimpc.dynamics import DiscreteModel
from vimpc.errors import ConfigError, InputError, NotFittedError
from vimpc.mechanics import FourBar, Pendulum, RollingDisk
from vimpc.models import (
    BOUND_SETTINGS,
    FAMILIES,
    ModelFamily,
    NominalModel,
    SpreadFamily,
    family,
)
from vimpc.models.evaluation import bound_values, coverage, one_step_errors, transitions
from vimpc.testing import DiscreteModelContract

DT = 0.05
OPTIONAL_FIELDS = ("residual", "bound", "energy", "constraint", "velocity_constraint")


def present(model: DiscreteModel) -> frozenset[str]:
    return frozenset(f for f in OPTIONAL_FIELDS if getattr(model, f) is not None)


@functools.cache
def pendulum_data(n: int, seed: int, dt: float = DT) -> Dataset:
    """``n`` trajectories of 20 steps of a pendulum with friction 0.3 (the 'true' system the
    frictionless nominal model does not know), observed with 1e-3 noise."""
    rng = np.random.default_rng(seed)
    truth = NominalModel(Pendulum(friction=[0.3]), dt).discrete_model()
    x0 = rng.uniform([-2.0, -2.0], [2.0, 2.0], size=(n, 2))
    inputs = rng.uniform(-2.0, 2.0, size=(n, 20, 1))
    states = rollout_model(truth, x0, inputs)
    t = np.tile(np.arange(21) * dt, (n, 1))
    clean = Dataset(t, states, states, inputs, dt, {"system": "Pendulum"})
    return add_noise(clean, 1e-3, rng)


class OffsetModel(ModelFamily):
    """The nominal midpoint model plus a constant offset: the training data's mean error."""

    name = "offset"
    settings = {"weight": Setting(float, 1.0, "share of the offset applied", rule=NONNEGATIVE)}

    def __init__(self, system, dt, **settings):
        super().__init__(system, dt, **settings)
        self.calls = 0

    def _base(self) -> DiscreteModel:
        return NominalModel(self.system, self.dt).discrete_model()

    def _fit(self, data):
        self.calls += 1
        self.offset_ = np.mean(one_step_errors(self._base(), data), axis=0)

    def _build(self):
        base = self._base()
        x, u, p = ca.MX.sym("x", base.nx), ca.MX.sym("u", base.nu), ca.MX.sym("p", base.np)
        shifted = base.step(x, u, p) + self.weight * ca.DM(self.offset_)
        step = ca.Function("step", [x, u, p], [shifted], ["x", "u", "p"], ["x_next"])
        return dataclasses.replace(base, step=step, residual=None, info=self.info())

    def _provides(self):
        return {"energy"}


class SpreadModel(SpreadFamily):
    """The nominal model with the spread ``0.01 (1 + |x|)``; learns nothing."""

    name = "spread"

    def needs_training_data(self):
        return False

    def _fit(self, data):
        pass

    def _build(self):
        return NominalModel(self.system, self.dt).discrete_model()

    def _provides(self):
        return {"energy", "residual"}

    def _spread(self):
        n = self.system.nq + self.system.nv
        x, u, p = ca.MX.sym("x", n), ca.MX.sym("u", self.system.nu), ca.MX.sym("p", 0)
        return ca.Function("spread", [x, u, p], [0.01 * (1.0 + ca.fabs(x))])


# -- settings of a family -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"integrater": "rk4"},
            r"unknown key 'integrater'; did you mean 'integrator'\? \(expected one of "
            r"\['bound', 'bound_horizon', 'bound_level', 'conformal_scale', 'delta', 'form', "
            r"'integrator', 'substeps'\]\)",
        ),
        ({"integrator": "rk5"}, r"integrator must be one of .*got 'rk5'; did you mean 'rk4'\?"),
        ({"integrator": 4}, r"integrator must be a string, got 4 \(int\)"),
        ({"delta": 1.5}, r"delta must be a number in \(0, 1\), got 1\.5"),
        ({"delta": 0}, r"delta must be a number in \(0, 1\), got 0\.0"),
        ({"delta": 1}, r"delta must be a number in \(0, 1\), got 1\.0"),
        ({"delta": "0.1"}, r"delta must be a number, got '0\.1' \(str\)"),
        ({"delta": True}, r"delta must be a number, got True \(bool\)"),
        ({"delta": float("nan")}, r"delta must be a finite number, got nan"),
        ({"substeps": 0}, r"substeps must be a positive integer <= 10000 .*, got 0"),
        ({"substeps": 2.0}, r"substeps must be an integer, got 2\.0 \(float\)"),
        ({"bound": "conformall"}, r"bound must be one of .*; did you mean 'conformal'\?"),
        (
            {"conformal_scale": "spread"},
            r"conformal_scale = 'spread' needs a family with a state-dependent spread; "
            r"'nominal' has none, use conformal_scale = 'constant'",
        ),
    ],
)
def test_nominal_settings_are_validated(settings, message):
    with pytest.raises(InputError, match=message):
        NominalModel(Pendulum(), DT, **settings)


def test_settings_resolved_and_recorded():
    m = NominalModel(Pendulum(), DT, integrator="rk4", delta=1 / 4, substeps=np.int64(2))
    settings = m.get_settings()
    assert settings == {
        "integrator": "rk4",
        "form": "position_momentum",
        "substeps": 2,
        "bound": "none",
        "delta": 0.25,
        "conformal_scale": "constant",
        "bound_level": "step",
        "bound_horizon": 0,
    }
    # a numpy integer is an integer, stored as a plain int (the resolved file is JSON/TOML)
    assert type(settings["substeps"]) is int and m.substeps == 2
    # an int where a number is due becomes a float
    assert type(OffsetModel(Pendulum(), DT, weight=2).weight) is float
    # get_settings is a copy and the model records it
    settings["integrator"] = "euler"
    assert m.get_settings()["integrator"] == "rk4"
    assert m.discrete_model().info["settings"] == m.get_settings()
    assert NominalModel.all_settings() == {**NominalModel.settings, **BOUND_SETTINGS}
    assert list(OffsetModel.all_settings()) == [
        "weight",
        "bound",
        "delta",
        "conformal_scale",
        "bound_level",
        "bound_horizon",
    ]
    assert "substeps=2" in repr(m) and "integrator='rk4'" in repr(m)


# -- provides() is what discrete_model() exports --------------------------------------------------


@pytest.mark.parametrize(
    "system", [Pendulum(), FourBar(), RollingDisk()], ids=["Pendulum", "FourBar", "RollingDisk"]
)
@pytest.mark.parametrize(
    ("integrator", "substeps"),
    [("midpoint", 1), ("trapezoidal", 1), ("first_order", 1), ("midpoint", 2), ("rk4", 1)],
)
def test_provides_matches_the_exported_fields(system, integrator, substeps):
    family_ = NominalModel(system, DT, integrator=integrator, substeps=substeps)
    exported = family_.discrete_model()
    assert family_.provides() == present(exported)
    # and what that is, from the structure: a residual only for one variational step,
    # the holonomic residual g(q) for the four-bar, A(q) v for the rolling disk
    expected = {"energy"}
    if integrator != "rk4" and substeps == 1:
        expected.add("residual")
    if system.n_holonomic:
        expected.add("constraint")
    if system.n_nonholonomic:
        expected.add("velocity_constraint")
    assert present(exported) == expected
    x = np.zeros(exported.nx)
    if system.n_holonomic:
        x = np.concatenate(system.assemble(0.3, 1.0))
        assert np.max(np.abs(np.asarray(exported.constraint(x)))) < 1e-12
    if system.n_nonholonomic:
        q = np.array([0.1, 0.7, 0.2, -0.3])
        x = np.concatenate([q, system.consistent_velocity(q, 2.0, -1.0)])
        assert np.max(np.abs(np.asarray(exported.velocity_constraint(x)))) < 1e-15
        assert np.max(np.abs(np.asarray(exported.velocity_constraint(x + 0.1)))) > 1e-3
    q, v = x[: system.nq], x[system.nq :]
    assert float(exported.energy(x, [])) == pytest.approx(float(system.energy(q, v)), abs=1e-14)


def test_provides_with_a_bound():
    m = NominalModel(Pendulum(), DT, integrator="rk4", bound="conformal", delta=0.2)
    assert m.provides() == {"energy", "bound"} and m.needs_fit()
    exported = m.fit(pendulum_data(4, 0), pendulum_data(4, 1)).discrete_model()
    assert present(exported) == m.provides() and exported.delta == 0.2
    assert not NominalModel(Pendulum(), DT).needs_fit()
    assert OffsetModel(Pendulum(), DT).needs_fit()
    spread = SpreadModel(Pendulum(), DT, bound="conformal", conformal_scale="spread")
    assert spread.provides() == {"energy", "residual", "bound"}


# -- fit and discrete_model ------------------------------------------------------------------------


def test_not_fitted():
    with pytest.raises(
        NotFittedError,
        match=r"this NominalModel \(family 'nominal'\) is not fitted yet: call fit\(data\)",
    ):
        NominalModel(Pendulum(), DT, bound="conformal").discrete_model()
    with pytest.raises(NotFittedError, match=r"OffsetModel \(family 'offset'\)"):
        OffsetModel(Pendulum(), DT).discrete_model()
    # nothing to learn and no bound: ready at construction, and fit() changes nothing
    m = NominalModel(Pendulum(), DT)
    before = m.discrete_model()
    after = m.fit().discrete_model()
    x, u = np.array([0.4, -1.0]), np.array([0.5])
    np.testing.assert_array_equal(
        np.asarray(before.step(x, u, [])), np.asarray(after.step(x, u, []))
    )
    assert before.bound is None and "fit_time_s" in after.info


def test_fit_needs_its_data():
    with pytest.raises(
        InputError,
        match=r"NominalModel with bound = 'conformal' needs held-out calibration data: "
        r"fit\(data, calibration\)",
    ):
        NominalModel(Pendulum(), DT, bound="conformal").fit(pendulum_data(4, 0))
    with pytest.raises(InputError, match=r"conformal_scale = 'constant' .* needs training data"):
        NominalModel(Pendulum(), DT, bound="conformal").fit(None, pendulum_data(4, 1))
    with pytest.raises(InputError, match=r"OffsetModel.fit needs training data: fit\(data\)"):
        OffsetModel(Pendulum(), DT).fit()
    # a spread needs no training data
    m = SpreadModel(Pendulum(), DT, bound="conformal", conformal_scale="spread", delta=0.1)
    assert m.fit(None, pendulum_data(4, 1)).discrete_model().bound is not None


def test_missing_data_are_reported_before_training():
    m = OffsetModel(Pendulum(), DT, bound="conformal", delta=0.2)
    with pytest.raises(InputError, match="needs held-out calibration data"):
        m.fit(pendulum_data(4, 0))
    with pytest.raises(InputError, match="needs training data"):
        m.fit(None, pendulum_data(4, 1))
    with pytest.raises(InputError, match="calibration have 4 observations"):
        m.fit(pendulum_data(4, 0), _resized(pendulum_data(4, 1), 4))
    assert m.calls == 0
    m.fit(pendulum_data(4, 0), pendulum_data(4, 1))
    assert m.calls == 1
    # the offset is learned: the frictionless model's mean error on damped data is not zero
    assert np.abs(m.offset_).max() > 1e-4


def test_a_failed_refit_leaves_no_half_fitted_family():
    # After a good fit: a refit refused for its arguments changes nothing (the model keeps
    # the bound it was calibrated with), and a refit that fails while fitting leaves the
    # family unfitted. Neither may export a model without the bound its settings promise.
    m = NominalModel(Pendulum(), DT, bound="conformal", delta=0.2)
    m.fit(pendulum_data(4, 0), pendulum_data(4, 1))
    quantile = m.calibration_.quantile
    with pytest.raises(InputError, match="calibration data"):
        m.fit(pendulum_data(4, 0))
    assert m.discrete_model().bound is not None and m.calibration_.quantile == quantile
    with pytest.raises(InputError, match="sampled every"):
        m.fit(pendulum_data(4, 0), pendulum_data(4, 1, dt=0.1))
    assert m.discrete_model().bound is not None and m.calibration_.quantile == quantile
    small = NominalModel(Pendulum(), DT, bound="conformal", delta=0.01)  # needs 99 transitions
    small.fit(pendulum_data(4, 0), pendulum_data(5, 1))
    with pytest.raises(InputError, match="too small for delta = 0.01"):
        small.fit(pendulum_data(4, 0), pendulum_data(4, 1))
    with pytest.raises(NotFittedError):
        small.discrete_model()
    assert small.fit(pendulum_data(4, 0), pendulum_data(5, 1)).discrete_model().bound is not None


def _resized(data: Dataset, nobs: int) -> Dataset:
    obs = np.zeros((*data.obs.shape[:2], nobs))
    return Dataset(data.t, obs, obs, data.inputs, data.dt, data.metadata)


def test_fit_refuses_data_of_another_step_system_or_size():
    m = NominalModel(Pendulum(), DT, bound="conformal", delta=0.2)
    train, calibration = pendulum_data(4, 0), pendulum_data(4, 1)
    cases = [
        (
            (pendulum_data(4, 0, dt=0.02), calibration),
            r"data are sampled every 0\.02 s but the model steps 0\.05 s",
        ),
        (
            (train, pendulum_data(4, 1, dt=0.1)),
            r"calibration are sampled every 0\.1 s but the model steps 0\.05 s",
        ),
        (
            (train.replace(metadata={"system": "CartPole"}), calibration),
            r"data were collected from a CartPole, the model is of a Pendulum",
        ),
        (
            (_resized(train, 4), calibration),
            r"data have 4 observations and 1 inputs per sample, the model 2 and 1",
        ),
        (
            (train.replace(inputs=np.zeros((4, 20, 2))), calibration),
            r"data have 2 observations and 2 inputs per sample, the model 2 and 1",
        ),
        ((train.obs, calibration), r"data must be a vimpc.data.Dataset, got ndarray"),
    ]
    for args, message in cases:
        with pytest.raises(InputError, match=message):
            m.fit(*args)
    # without metadata the system is not checked; with a matching one it is accepted
    m.fit(train.replace(metadata={}), calibration)
    assert m.discrete_model().info["system"] == "Pendulum"


def test_spread_family_bound_is_quantile_times_spread():
    m = SpreadModel(Pendulum(), DT, bound="conformal", conformal_scale="spread", delta=0.1)
    exported = m.fit(None, pendulum_data(8, 1)).discrete_model()
    q = m.calibration_.quantile
    rng = np.random.default_rng(0)
    X, U = rng.uniform(-2.0, 2.0, (5, 2)), rng.uniform(-1.0, 1.0, (5, 1))
    np.testing.assert_allclose(bound_values(exported, X, U), q * 0.01 * (1 + np.abs(X)), rtol=1e-15)
    assert exported.bound_info.extra["scale"] == "state-dependent spread"
    # the frictionless model misses the 0.3 friction: the quantile is well above 1
    assert q > 1.0


# -- the registry ----------------------------------------------------------------------------------


def test_registry():
    assert family("nominal") is NominalModel
    for name in FAMILIES:
        cls = family(name)
        assert issubclass(cls, ModelFamily) and cls.name == name
    with pytest.raises(
        ConfigError,
        match=r"model.family must be one of \['chnn', 'clnn', 'dlnn', 'gp_residual', 'gp_vi', 'hamel', 'lnn', 'lsi', 'mlp_residual', 'nominal'\], got 'nominl'; did you mean",
    ):
        vimpc.models.family("nominl")
    with pytest.raises(ConfigError, match=r"^scenario.model must be one of .*got 'gp'$"):
        family("gp", key="scenario.model")
    with pytest.raises(ConfigError, match=r"got 'gp_iv'; did you mean 'gp_vi'\?$"):
        family("gp_iv")


def test_every_registered_family_is_a_name_of_the_families_package():
    # the package's lazy names come from the registry: a new family needs no line there
    from vimpc.models import families

    for name in FAMILIES:
        cls = family(name)
        assert getattr(families, cls.__name__) is cls
        assert cls.__name__ in families.__all__


def test_registry_refuses_a_misregistered_family(monkeypatch):
    monkeypatch.setitem(FAMILIES, "gp", "vimpc.models.families.nominal:NominalModel")
    with pytest.raises(TypeError, match="is not the ModelFamily named 'gp'"):
        family("gp")


# -- end to end: a calibrated nominal model of the cart-pole environment ----------------------------

DELTA = 0.1


@functools.lru_cache(maxsize=1)
def cartpole_split():
    """120 trajectories of 12 steps (0.6 s) of the cart-pole env under random steps held
    for 3 steps in [-10, 10] N, split by trajectory into 40 training, 40 calibration and 40
    test trajectories (480 transitions each). Many short trajectories keep the dependence
    between the transitions of one trajectory small (see test_coverage_on_the_test_split)."""
    env = gymnasium.make(
        "vimpc/CartPole-v0",
        dt=DT,
        perturbation=0.1,
        friction=[0.3, 0.1],
        obs_noise=1e-3,
        param_seed=0,
    )
    n, steps = 120, 12
    rng = np.random.default_rng(0)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, 1, DT, rng, low=-10.0, high=10.0, hold=3)
            for _ in range(n)
        ]
    )
    data = rollout_env(env, n, steps, inputs, seed=100)
    train, rest = data.split(1 / 3, seed=1)
    calibration, test = rest.split(0.5, seed=2)
    family_ = NominalModel(env.unwrapped.nominal_system, DT, bound="conformal", delta=DELTA)
    model = family_.fit(train, calibration).discrete_model()
    env.close()
    return model, family_, train, calibration, test


class TestCalibratedCartPole(DiscreteModelContract):
    def make_model(self):
        return cartpole_split()[0]

    def sample_states(self, rng, n):
        return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))

    def sample_inputs(self, rng, n):
        return rng.uniform(-10.0, 10.0, size=(n, 1))

    def heldout_transitions(self, rng):
        model, *_, test = cartpole_split()
        return transitions(model, test)


def test_calibrated_cartpole_model():
    model, family_, train, calibration, test = cartpole_split()
    assert (len(train), len(calibration), len(test)) == (40, 40, 40)
    assert present(model) == family_.provides() == {"residual", "energy", "bound"}
    assert model.delta == DELTA
    cb = family_.calibration_
    assert cb.n_calibration == 480 and cb.quantile > 0
    # the constant shape is the training RMS error per entry; the nominal model knows no
    # friction and wrong masses, so the velocity errors dominate the position errors
    rms = np.sqrt(np.mean(one_step_errors(model, train) ** 2, axis=0))
    np.testing.assert_allclose(cb.scale, rms, rtol=1e-12)
    assert rms[2] > 3 * rms[0] and rms[3] > 3 * rms[1]
    e = np.asarray(model.bound(np.zeros(4), [0.0], [])).ravel()
    np.testing.assert_allclose(e, cb.quantile * rms, rtol=1e-15)
    # exactly the conformal fraction of the calibration set is covered: k of n transitions
    k = math.ceil((cb.n_calibration + 1) * (1 - DELTA))
    assert coverage(model, calibration) == pytest.approx(k / cb.n_calibration, abs=1e-12)


def test_coverage_on_the_test_split():
    # For exchangeable transitions the miss rate of a test transition is at most delta.
    # The measured coverage varies with the calibration set (the coverage F(q) of the
    # calibrated quantile has variance ~ delta (1 - delta) / (n + 2)) and with the m test
    # transitions (binomial, delta (1 - delta) / m): sigma = sqrt(0.09 (1/482 + 1/480))
    # = 0.019. Transitions of one trajectory are dependent, which inflates this by a
    # design effect, measured over 8 data seeds as about 1.25 (per-trajectory spread);
    # 3.5 sigma, 0.068, therefore leaves a false failure rate of about 1e-3.
    model, family_, _, _, test = cartpole_split()
    n, m = family_.calibration_.n_calibration, test.n_trajectories * test.n_steps
    sigma = math.sqrt(DELTA * (1 - DELTA) * (1 / (n + 2) + 1 / m))
    measured = coverage(model, test)
    assert measured >= 1 - DELTA - 3.5 * sigma
    # and the bound is not vacuous: coverage stays near 1 - delta (upper conformal bound
    # 1 - delta + 1/(n + 1) for continuous scores, with the same tolerance)
    assert measured <= 1 - DELTA + 1 / (n + 1) + 3.5 * sigma
    # the nominal model's errors are far from negligible: without the quantile (q = 1, the
    # training RMS alone) fewer than 1 - delta are covered
    X, U, X_next = transitions(model, test)
    errors = np.abs(one_step_errors(model, test))
    assert np.mean(np.all(errors <= family_.calibration_.scale, axis=1)) < 1 - DELTA - 0.2


class TestRollingDiskKeepsRolling(DiscreteModelContract):
    # A(q) v = 0 (rolling without slipping) is among the midpoint step's equations at the
    # new node, so the step keeps it to Newton's tolerance
    velocity_constraint_preserving = True
    DISK = RollingDisk()

    def make_model(self):
        return NominalModel(self.DISK, DT).discrete_model()

    def sample_states(self, rng, n):
        qs = rng.uniform([-3.0, -math.pi, -1.0, -1.0], [3.0, math.pi, 1.0, 1.0], size=(n, 4))
        rates = rng.uniform(-3.0, 3.0, size=(n, 2))
        return np.array(
            [
                np.concatenate([q, self.DISK.consistent_velocity(q, *w)])
                for q, w in zip(qs, rates, strict=True)
            ]
        )

    def sample_inputs(self, rng, n):
        return rng.uniform(-1.0, 1.0, size=(n, 2))
