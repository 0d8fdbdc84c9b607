"""The GP-residual family (black-box GP-MPC): what the GPs learn on top of the explicit
nominal step, on every vimpc system; the exported posterior mean against NumPy; the
conformal and Theorem 1 bounds' coverage; nothing learned from nominal data; bad settings.
The family contract runs in tests/models/test_family_contract.py."""

from __future__ import annotations

import copy
import functools

import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)
from _binomial import fewest_covered

from vimpc import scenario
from vimpc.data import make_excitation, rollout_env
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import FourBar
from vimpc.models import NominalModel, family
from vimpc.models._features import sincos
from vimpc.models.evaluation import coverage
from vimpc.models.families.gp_residual import GPResidualModel
from vimpc.testing import DiscreteModelContract

DT = 0.05
PENDULUM = "vimpc/Pendulum-v0"
SYSTEMS = ("vimpc/Pendulum-v0", "vimpc/CartPole-v0", "vimpc/FourBar-v0", "vimpc/RollingDisk-v0")
SMALL = {"samples": 80, "restarts": 1, "iterations": 40}
#: the pendulum fits: 120 of the 400 training transitions, one start
BASE = {"samples": 120, "restarts": 1, "iterations": 60}


def _rollouts(env, n: int, steps: int, seed: int):
    """``n`` trajectories of random step inputs up to the env's action limits from its
    reset (seeds ``seed``, ``seed + 1``, ...)."""
    high = np.asarray(env.action_space.high, dtype=np.float64)
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [make_excitation("random_steps", steps, high.size, DT, rng, low=-high, high=high)
         for _ in range(n)]
    )  # fmt: skip
    return rollout_env(env, n, steps, inputs, seed)


@functools.cache
def _env(env_id: str, **kwargs):
    return gymnasium.make(env_id, dt=DT, **kwargs).unwrapped


@functools.cache
def _data(env_id: str = PENDULUM, nominal: bool = False):  # the pendulum's
    """(env, train, calibration, test) of the perturbed env (masses and friction drawn from
    param_seed 0), or with ``nominal`` of the nominal system itself without noise."""
    kwargs = {"perturbation": 0.0, "friction": (0.0,), "obs_noise": 0.0} if nominal else {}
    env = _env(env_id, **kwargs)
    return (
        env,
        _rollouts(env, 10, 40, 0),
        _rollouts(env, 20, 40, 1000),
        _rollouts(env, 20, 40, 2000),
    )


@functools.cache
def _fitted(env_id: str = PENDULUM, nominal: bool = False, **settings) -> GPResidualModel:
    env, train, calibration, _ = _data(env_id, nominal)
    return GPResidualModel(env.nominal_system, DT, **settings).fit(train, calibration)


@functools.cache
def _small(env_id: str):
    """(the family fitted with SMALL on 6 trajectories of 20 steps of the env, 6 others)."""
    env = _env(env_id)
    train, test = _rollouts(env, 6, 20, 0), _rollouts(env, 6, 20, 1000)
    return GPResidualModel(env.nominal_system, DT, **SMALL).fit(train), test


def _bounded(**bound):
    """The pendulum's BASE fit (shared) with the bound settings ``bound``, calibrated on
    the calibration trajectories."""
    _, train, calibration, _ = _data()
    fam = copy.copy(_fitted(**BASE))  # recalibrated apart from the shared fit
    return fam.recalibrate(train, calibration, **bound).discrete_model()


def _rms(model, data, entries: slice) -> float:
    """RMS one-step error of ``model`` on the noise-free transitions of ``data``."""
    X, U, Xn = data.pairs("states")
    P = np.tile(model.p_default, (len(X), 1)).T  # the learned numbers are the model's p
    pred = np.asarray(model.step.map(len(X))(X.T, U.T, P)).T
    return float(np.sqrt(np.mean((Xn[:, entries] - pred[:, entries]) ** 2)))


@pytest.mark.parametrize("integrator", ["rk4", "euler"])
def test_the_gps_learn_what_the_nominal_step_misses(integrator):
    # the true pendulum has friction and other inertia, the nominal step neither (and
    # Euler's discretisation error besides): on noise-free held-out transitions the next
    # velocity is many times closer (measured: 33x for rk4, 54x for euler), the next angle
    # no farther
    env, _, _, test = _data()
    nominal = NominalModel(env.nominal_system, DT, integrator=integrator).discrete_model()
    model = _fitted(**{**BASE, "integrator": integrator}).discrete_model()
    v, q = slice(1, 2), slice(0, 1)
    assert _rms(model, test, v) < _rms(nominal, test, v) / 10
    assert _rms(model, test, q) < _rms(nominal, test, q)


@pytest.mark.parametrize("env_id", SYSTEMS)
def test_every_system_is_learned_and_its_model_claims_no_structure(env_id):
    # 120 transitions of each env, 80 GP samples: the next velocities beat the RK4 step of
    # the nominal ODE (constraints at acceleration level) on held-out noise-free
    # transitions (measured ratios 0.04, 0.02, 0.30, 0.19); the model is a black box
    fam, test = _small(env_id)
    s = fam.system
    assert fam.provides() == frozenset()
    model = fam.discrete_model()
    for field in ("residual", "energy", "constraint", "velocity_constraint", "bound"):
        assert getattr(model, field) is None, field
    assert len(fam.posteriors_) == s.nq + s.nv  # one GP per state entry
    nominal = NominalModel(s, DT, integrator="rk4").discrete_model()
    v = slice(s.nq, s.nq + s.nv)
    assert _rms(model, test, v) < 0.5 * _rms(nominal, test, v), env_id


@pytest.mark.parametrize(
    "settings", [{"samples": 60}, {"coordinates": "sincos", "support_points": 25}]
)
def test_the_posterior_mean_through_casadi_is_the_numpy_posterior(settings):
    # the exported step less the nominal step, and the correction function, against the
    # posterior mean sum_i alpha_i sf2 exp(-|z - z_i|^2_l / 2) written out in NumPy on the
    # GP inputs (sin q, cos q with "sincos"; v; u; the varying ones)
    fam = _fitted(restarts=1, iterations=40, **settings)
    model = fam.discrete_model()
    nominal = NominalModel(fam.system, DT, integrator="rk4").discrete_model()
    rng = np.random.default_rng(0)
    X, U = rng.uniform([-3.0, -5.0], [3.0, 5.0], (40, 2)), rng.uniform(-2.0, 2.0, (40, 1))
    angles = (0,) if settings.get("coordinates") == "sincos" else ()
    Z = np.column_stack([sincos(X[:, :1], angles), X[:, 1:], U])[:, fam.inputs_]
    expected = np.column_stack(
        [
            post.hp.signal_var
            * np.exp(-0.5 * np.sum(((Z[:, None] - post.support) / post.hp.lengthscales) ** 2, 2))
            @ post.alpha
            for post in fam.posteriors_
        ]
    )
    assert [len(p.support) for p in fam.posteriors_] == [settings.get("support_points", 60)] * 2
    zeros = np.zeros((0, len(X)))
    P = np.tile(model.p_default, (len(X), 1)).T  # the learned numbers are the model's p
    step = np.asarray(model.step.map(len(X))(X.T, U.T, P)).T
    base = np.asarray(nominal.step.map(len(X))(X.T, U.T, zeros)).T
    correction = np.asarray(fam.correction().map(len(X))(X.T, U.T)).T
    assert np.max(np.abs(expected)) > 1e-3  # a correction worth checking
    np.testing.assert_allclose(correction, expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(step - base, expected, rtol=0, atol=1e-10)


def test_the_exact_posterior_mean_is_the_gp_regression_of_the_residuals():
    # samples = 0 on 60 transitions: the support points are the training inputs and alpha
    # solves (K + sn2 I) alpha = y for the residuals y = x_next - f_rk4(x, u), recomputed
    # here from the data and the nominal model
    env, train, _, _ = _data()
    few = train.replace(
        t=train.t[:3, :21], obs=train.obs[:3, :21], states=train.states[:3, :21],
        inputs=train.inputs[:3, :20],
    )  # fmt: skip
    fam = GPResidualModel(env.nominal_system, DT, samples=0, restarts=1, iterations=40).fit(few)
    X, U, Xn = few.pairs("obs")
    nominal = NominalModel(env.nominal_system, DT, integrator="rk4").discrete_model()
    y = Xn - np.asarray(nominal.step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))).T
    Z = np.column_stack([X, U])[:, fam.inputs_]
    for j, post in enumerate(fam.posteriors_):
        np.testing.assert_array_equal(post.support, Z)
        hp = post.hp
        K = hp.signal_var * np.exp(-0.5 * np.sum(((Z[:, None] - Z) / hp.lengthscales) ** 2, 2))
        alpha = np.linalg.solve(K + hp.noise_var * np.eye(len(Z)), y[:, j])
        mean = K @ alpha
        np.testing.assert_allclose(post.mean(Z), mean, rtol=0, atol=1e-8 * np.max(np.abs(y[:, j])))


@pytest.mark.parametrize("scale", ["spread", "constant"])
def test_the_conformal_bound_covers_held_out_errors_at_about_1_minus_delta(scale):
    # calibrated on 20 trajectories, checked on 20 others (800 transitions): covered at
    # least as often as 1 - delta allows beyond chance, and not trivially wide (measured
    # 0.92 with either shape at delta = 0.1)
    _, _, _, test = _data()
    model = _bounded(bound="conformal", conformal_scale=scale, delta=0.1)
    assert model.bound_info.method == "conformal" and model.delta == 0.1
    n = len(test.pairs("obs")[0])
    covered = coverage(model, test)
    assert round(covered * n) >= fewest_covered(n, 0.1), covered
    assert covered < 0.97, covered


def test_the_spread_shapes_the_bound_where_the_data_are_sparse():
    # the GPs' posterior spread grows away from the data: the spread-shaped bound on the
    # next velocity is wider at fast spins, which the excitation never reached, than near
    # the hanging rest (measured 24x; the angle's GP is mostly its noise: 1.0x)
    model = _bounded(bound="conformal", conformal_scale="spread", delta=0.1)
    near = np.asarray(model.bound([0.0, 0.0], [0.0])).ravel()  # p: the model's p_default
    far = np.asarray(model.bound([0.0, 30.0], [0.0])).ravel()
    assert far[1] > 3 * near[1] and far[0] >= near[0], (near, far)


def test_the_theorem1_bound_covers_held_out_errors():
    _, _, _, test = _data()
    model = _bounded(bound="theorem1", delta=0.05)
    assert model.bound_info.method == "theorem1"
    n = len(test.pairs("obs")[0])
    assert round(coverage(model, test) * n) >= fewest_covered(n, 0.05)


def test_with_nominal_data_the_correction_is_near_zero():
    # data of the nominal system itself (no perturbation, no friction, no noise): all the
    # RK4 step misses is its own discretisation error (here at most 1e-5), and the learned
    # correction is no larger (measured 8e-6, against 0.03 for the perturbed pendulum's)
    env, _, _, test = _data(nominal=True)
    X, U, Xn = test.pairs("states")
    nominal = NominalModel(env.nominal_system, DT, integrator="rk4").discrete_model()
    missed = np.max(
        np.abs(Xn - np.asarray(nominal.step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))).T)
    )
    clean = _fitted(nominal=True, **BASE).correction()
    perturbed = _fitted(**BASE).correction()
    small = np.max(np.abs(np.asarray(clean.map(len(X))(X.T, U.T))))
    large = np.max(np.abs(np.asarray(perturbed.map(len(X))(X.T, U.T))))
    assert missed < 2e-5 and small < missed and small < 1e-3 * large, (missed, small, large)


def test_bad_settings_are_refused_naming_the_key(tmp_path):
    # through a scenario (a gp_vi one switched to gp_residual): a ConfigError naming the key
    path = "scenarios/cartpole_gpvi_safe.toml"
    # the switch keeps the file's bound (the same calibration for every family) and gives
    # the new family its own defaults for the rest
    from vimpc.models.base import BOUND_SETTINGS

    switched = scenario.load_scenario(path, ['model.family="gp_residual"']).model
    file_bound = scenario.load_scenario(path).model.settings.to_dict()
    for key, setting in GPResidualModel.all_settings().items():
        expected = file_bound[key] if key in BOUND_SETTINGS else setting.default
        assert switched.settings.to_dict()[key] == expected, key
    for override, message in (
        ('model.integrator="midpoint"', "model.integrator must be one of ['rk4', 'euler', "
         "'symplectic_euler'], got 'midpoint'"),
        ("model.substeps=0", "model.substeps must be a positive integer"),
        ("model.support_points=-1", "model.support_points must be a non-negative integer"),
        ('model.coordinates="polar"', "model.coordinates must be one of"),
        ("model.prior=\"midpoint\"", "unknown key 'model.prior'"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as error:
            scenario.load_scenario(path, ['model.family="gp_residual"', override])
        assert message in str(error.value), (override, str(error.value))
    # and directly: an InputError naming the key, with a "did you mean"
    system = _env(PENDULUM).nominal_system
    with pytest.raises(InputError, match="did you mean 'integrator'"):
        GPResidualModel(system, DT, integrater="rk4")
    with pytest.raises(InputError, match="samples must be a non-negative"):
        GPResidualModel(system, DT, samples=-1)
    assert family("gp_residual") is GPResidualModel
    _, train, _, _ = _data()
    with pytest.raises(InputError, match="at least 2 training pairs"):
        GPResidualModel(system, DT, samples=1).fit(train)
    with pytest.raises(InputError, match="needs held-out calibration data"):
        GPResidualModel(system, DT, bound="conformal").fit(train)


class TestGPResidualFourBarContract(DiscreteModelContract):
    """The four-bar (three joint angles, two loop-closure constraints) with the Theorem 1
    bound: the black box's step is explicit and leaves the constraints (no
    ``constraint_preserving``), yet every check of a model holds."""

    def make_model(self):
        fam = copy.copy(_small("vimpc/FourBar-v0")[0])
        return fam.recalibrate(bound="theorem1").discrete_model()

    def sample_states(self, rng, n):
        bar = FourBar()
        return np.array(
            [np.concatenate(bar.assemble(a, w)) for a, w in rng.uniform([-3, -4], [3, 4], (n, 2))]
        )

    def sample_inputs(self, rng, n):
        return rng.uniform(-20.0, 20.0, size=(n, 1))

    def heldout_transitions(self, rng):
        return _small("vimpc/FourBar-v0")[1].pairs("obs")


def test_the_explicit_step_leaves_the_four_bar_constraints():
    # what the black box gives up: the loop closure drifts under the step (the GP-VI's
    # projection keeps it to round-off, tests/models/test_gp_vi.py). Unforced from the
    # data's range, this small fit is 0.08 rad off the loop after 10 steps (the RK4 step of
    # the nominal ODE: 3e-5), and its rollout diverges to NaN at step 29
    model = _small("vimpc/FourBar-v0")[0].discrete_model()
    xs = model.simulate(np.concatenate(FourBar().assemble(0.3, 1.0)), np.zeros((10, 1)))
    g = _env("vimpc/FourBar-v0").nominal_system.function("g").map(11)
    drift = np.max(np.abs(np.asarray(g(xs[:, :3].T))))
    assert np.all(np.isfinite(xs)) and drift > 1e-2, drift


def test_two_fits_with_as_many_support_points_are_one_function_of_p():
    # the posteriors' numbers (support points, length scales, signal variance, alpha) are
    # the model's parameters: two fits on different data export the same step function with
    # other p_default, so a controller compiled for one serves the other
    # (tests/models/test_mlp_residual.py checks the controller's C code for the MLP)
    a, b = _fitted().discrete_model(), _fitted(nominal=True).discrete_model()
    assert a.info["support_points"] == b.info["support_points"] == [400, 400]  # all of them
    assert a.np == b.np == 2 * (400 * 3 + 3 + 1 + 400)  # on 3 GP inputs
    assert np.max(np.abs(a.p_default - b.p_default)) > 1e-2
    assert a.step.serialize() == b.step.serialize()
    x, u = np.array([0.4, -1.0]), np.array([0.5])
    assert np.max(np.abs(a.step(x, u) - b.step(x, u))) > 1e-4
    np.testing.assert_array_equal(a.step(x, u), b.step(x, u, a.p_default))
