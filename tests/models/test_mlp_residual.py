"""The MLP-residual family (black-box neural baseline): what the network learns on top of
the explicit nominal step, on every vimpc system; the exported network against torch and
NumPy, and the fold of the normalisations against the training's own validation loss; the
conformal bound's coverage; nothing learned from nominal data; bad settings. The family
contract runs in tests/models/test_family_contract.py."""

from __future__ import annotations

import contextlib
import copy
import functools

import casadi as ca
import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)
from _binomial import fewest_covered

from vimpc import scenario
from vimpc.data import make_excitation, rollout_env
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import RollingDisk
from vimpc.models import NominalModel, family
from vimpc.models._features import sincos
from vimpc.models.evaluation import coverage
from vimpc.models.families.mlp_residual import MLPResidualModel
from vimpc.testing import DiscreteModelContract

DT = 0.05
PENDULUM = "vimpc/Pendulum-v0"
SYSTEMS = ("vimpc/Pendulum-v0", "vimpc/CartPole-v0", "vimpc/FourBar-v0", "vimpc/RollingDisk-v0")
#: a 32x32 network, at most 1000 epochs (early stopping on a fifth of the transitions)
SMALL = {"hidden": [32, 32], "epochs": 1000, "lr": 1e-2}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Train on one torch thread (the machine's cores are shared)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _rollouts(env, n: int, steps: int, seed: int):
    """``n`` trajectories of random step inputs up to the env's action limits from its
    reset (seeds ``seed``, ``seed + 1``, ...)."""
    high = np.asarray(env.action_space.high, dtype=np.float64)
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, high.size, DT, rng, low=-high, high=high)
            for _ in range(n)
        ]
    )
    return rollout_env(env, n, steps, inputs, seed)


@functools.cache
def _env(env_id: str, **kwargs):
    return gymnasium.make(env_id, dt=DT, **kwargs).unwrapped


@functools.cache
def _data(env_id: str = PENDULUM, nominal: bool = False):
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
def _fitted(env_id: str = PENDULUM, nominal: bool = False, **settings) -> MLPResidualModel:
    env, train, calibration, _ = _data(env_id, nominal)
    return MLPResidualModel(env.nominal_system, DT, **{**SMALL, **settings}).fit(train, calibration)


@functools.cache
def _small(env_id: str):
    """(the family fitted with SMALL on 20 trajectories of 20 steps of the env, 6 others)."""
    env = _env(env_id)
    train, test = _rollouts(env, 20, 20, 0), _rollouts(env, 6, 20, 1000)
    return MLPResidualModel(env.nominal_system, DT, **SMALL).fit(train), test


def _rms(model, data, entries: slice) -> float:
    """RMS one-step error of ``model`` on the noise-free transitions of ``data``."""
    X, U, Xn = data.pairs("states")
    P = np.tile(model.p_default, (len(X), 1)).T  # the learned numbers are the model's p
    pred = np.asarray(model.step.map(len(X))(X.T, U.T, P)).T
    return float(np.sqrt(np.mean((Xn[:, entries] - pred[:, entries]) ** 2)))


@pytest.mark.parametrize("integrator", ["rk4", "euler"])
def test_the_network_learns_what_the_nominal_step_misses(integrator):
    # the true pendulum has friction and other inertia, the nominal step neither (and
    # Euler's discretisation error besides): on noise-free held-out transitions the next
    # velocity is several times closer (measured: RMS ratio 0.17 for rk4, 0.03 for euler)
    env, _, _, test = _data()
    nominal = NominalModel(env.nominal_system, DT, integrator=integrator).discrete_model()
    model = _fitted(integrator=integrator).discrete_model()
    v = slice(1, 2)
    assert _rms(model, test, v) < _rms(nominal, test, v) / 4


@pytest.mark.parametrize("env_id", SYSTEMS)
def test_every_system_is_learned_and_its_model_claims_no_structure(env_id):
    # 400 transitions of each env (on 120, the four-bar's network was no better than the
    # nominal step: a network needs more data than the GPs): the next velocities beat the RK4 step of the nominal
    # ODE (constraints at acceleration level) on held-out noise-free transitions (measured
    # ratios 0.07, 0.02, 0.34, 0.33); the model is a black box
    fam, test = _small(env_id)
    s = fam.system
    assert fam.provides() == frozenset()
    model = fam.discrete_model()
    for field in ("residual", "energy", "constraint", "velocity_constraint", "bound"):
        assert getattr(model, field) is None, field
    nominal = NominalModel(s, DT, integrator="rk4").discrete_model()
    v = slice(s.nq, s.nq + s.nv)
    assert _rms(model, test, v) < 0.6 * _rms(nominal, test, v), env_id


@pytest.mark.parametrize("coordinates", ["minimal", "sincos"])
def test_the_exported_network_is_the_trained_one(coordinates):
    # the CasADi correction (the network through vimpc.models._torch_casadi) against the
    # stored network in torch and in NumPy on the inputs (sin q, cos q with "sincos"; v; u),
    # and the exported step less the nominal step against the correction
    import torch

    fam = _fitted(coordinates=coordinates, epochs=300)
    model = fam.discrete_model()
    rng = np.random.default_rng(0)
    X, U = rng.uniform([-3.0, -5.0], [3.0, 5.0], (40, 2)), rng.uniform(-2.0, 2.0, (40, 1))
    Z = np.column_stack([sincos(X[:, :1], (0,) if coordinates == "sincos" else ()), X[:, 1:], U])
    with torch.no_grad():
        in_torch = fam.network_.torch_module()(torch.from_numpy(Z)).numpy()
    in_numpy = fam.network_.numpy(Z)
    correction = np.asarray(fam.correction().map(len(X))(X.T, U.T)).T
    zeros = np.zeros((0, len(X)))
    nominal = NominalModel(fam.system, DT, integrator="rk4").discrete_model()
    P = np.tile(model.p_default, (len(X), 1)).T  # the learned numbers are the model's p
    step = np.asarray(model.step.map(len(X))(X.T, U.T, P)).T
    base = np.asarray(nominal.step.map(len(X))(X.T, U.T, zeros)).T
    assert np.max(np.abs(correction)) > 1e-3  # a correction worth checking
    np.testing.assert_allclose(correction, in_torch, rtol=0, atol=1e-12)
    np.testing.assert_allclose(correction, in_numpy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(step - base, correction, rtol=0, atol=1e-12)


def test_the_folded_normalisation_reproduces_the_best_validation_loss():
    # training stops with the parameters of the best validation loss, the mean squared
    # error of the normalised residual on the held-out fifth; the exported network (the
    # normalisations folded into its first and last layers) gives that loss again
    env, train, _, _ = _data()
    fam = _fitted()
    X, U, Xn = train.pairs("obs")
    nominal = NominalModel(env.nominal_system, DT, integrator="rk4").discrete_model()
    y = Xn - np.asarray(nominal.step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))).T
    order = np.random.default_rng(fam.seed).permutation(len(X))
    held_out = np.sort(order[: int(round(0.2 * len(X)))])
    d = fam.network_.numpy(np.column_stack([X, U]))
    loss = np.mean(((d - y) / y.std(0))[held_out] ** 2)
    record = fam.training_
    assert record.best_validation is not None and record.stopped in ("patience", "epochs")
    np.testing.assert_allclose(loss, record.best_validation, rtol=1e-9)


@pytest.mark.parametrize("scale", ["constant", "state"])
def test_the_conformal_bound_covers_held_out_errors_at_about_1_minus_delta(scale):
    # calibrated on 20 trajectories, checked on 20 others (800 transitions): covered at
    # least as often as 1 - delta allows beyond chance, and not trivially wide (measured
    # 0.92 and 0.88 at delta = 0.1)
    _, train, calibration, test = _data()
    fam = copy.copy(_fitted())  # recalibrated apart from the shared fit
    model = fam.recalibrate(
        train, calibration, bound="conformal", conformal_scale=scale, delta=0.1
    ).discrete_model()
    assert model.bound_info.method == "conformal" and model.delta == 0.1
    n = len(test.pairs("obs")[0])
    covered = coverage(model, test)
    assert round(covered * n) >= fewest_covered(n, 0.1), covered
    assert covered < 0.97, covered


def test_with_nominal_data_the_correction_is_near_zero():
    # data of the nominal system itself (no perturbation, no friction, no noise): all the
    # RK4 step misses is its own discretisation error (at most 1e-5 here); the network
    # starts at zero and its correction stays that small (measured 9e-6, against 0.02 for
    # the perturbed pendulum's)
    env, _, _, test = _data(nominal=True)
    X, U, Xn = test.pairs("states")
    nominal = NominalModel(env.nominal_system, DT, integrator="rk4").discrete_model()
    pred = np.asarray(nominal.step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))).T
    missed = np.max(np.abs(Xn - pred))
    small = np.max(np.abs(np.asarray(_fitted(nominal=True).correction().map(len(X))(X.T, U.T))))
    large = np.max(np.abs(np.asarray(_fitted().correction().map(len(X))(X.T, U.T))))
    assert missed < 2e-5 and small < 3 * missed and small < 1e-3 * large, (missed, small, large)


def test_bad_settings_are_refused_naming_the_key():
    # through a scenario: a ConfigError naming the key
    path = "scenarios/cartpole_gpvi_safe.toml"
    # the switch drops the file's GP settings, but a GP setting given with it is refused
    scenario.load_scenario(path, ['model.family="mlp_residual"', 'model.conformal_scale="state"'])
    with pytest.raises(ConfigError, match="unknown key 'model.samples'"):
        scenario.load_scenario(path, ['model.family="mlp_residual"', "model.samples=100"])
    path = "scenarios/pendulum_swingup.toml"
    base = [  # the black box has no energy to shape and no residual for "implicit"
        'model.family="mlp_residual"',
        'model.integrator="rk4"',
        'controller.transcription="step"',
        "controller.cost.energy_weight=0.0",
    ]
    scenario.load_scenario(path, base)  # loads
    for override, message in (
        ('model.bound="conformal"\nmodel.conformal_scale="spread"', "conformal_scale = 'spread' needs a family with a "
         "state-dependent spread; 'mlp_residual' has none"),
        ('model.integrator="rk5"', "model.integrator must be one of ['rk4', 'euler', "
         "'symplectic_euler'], got 'rk5'"),
        ("model.hidden=[]", "hidden must list at least one hidden layer width"),
        ("model.hidden=[0]", "model.hidden"),
        ('model.activation="relu"', "model.activation must be one of"),
        ("model.validation=0.0", "patience = 200 needs held-out transitions: set validation > 0"),
        ("model.epochs=0", "model.epochs must be a positive integer"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as error:
            scenario.load_scenario(path, [*base, *override.split("\n")])
        assert message in str(error.value), (override, str(error.value))
    system = _env(PENDULUM).nominal_system
    with pytest.raises(InputError, match="did you mean 'hidden'"):
        MLPResidualModel(system, DT, hiden=[8])
    assert family("mlp_residual") is MLPResidualModel
    _, train, _, _ = _data()
    few = train.replace(
        t=train.t[:1, :6], obs=train.obs[:1, :6], states=train.states[:1, :6],
        inputs=train.inputs[:1, :5],
    )  # fmt: skip
    with pytest.raises(InputError, match="at least 10 training transitions"):
        MLPResidualModel(system, DT, **SMALL).fit(few)


def test_the_explicit_step_leaves_the_rolling_constraint():
    # what the black box gives up: from a rolling state under constant inputs, the RK4
    # step of the nominal ODE keeps A(q) v = 0 to 4e-10 over 10 steps (the constraint at
    # acceleration level), the corrected step leaves it (measured 2e-3)
    fam, _ = _small("vimpc/RollingDisk-v0")
    disk = RollingDisk()
    q = np.array([0.2, 0.5, 0.1, -0.3])
    x0 = np.concatenate([q, disk.consistent_velocity(q, 1.0, 0.5)])
    A = fam.system.function("A")
    nominal = NominalModel(fam.system, DT, integrator="rk4").discrete_model()
    drift = {}
    for name, model in (("nominal", nominal), ("learned", fam.discrete_model())):
        x = model.simulate(x0, np.tile([0.5, 0.2], (10, 1)))[-1]
        drift[name] = float(np.max(np.abs(np.asarray(A(x[:4])) @ x[4:])))
    assert drift["nominal"] < 1e-8 and drift["learned"] > 1e-4, drift


class TestMLPResidualRollingDiskContract(DiscreteModelContract):
    """The rolling disk (nonholonomic rolling constraints) with a conformal bound: the
    explicit step does not keep the constraints (no ``velocity_constraint_preserving``),
    yet every check of a model holds."""

    def make_model(self):
        env = _env("vimpc/RollingDisk-v0")
        fam, _ = _small("vimpc/RollingDisk-v0")
        calibration = _rollouts(env, 20, 20, 3000)
        fam = copy.copy(fam)  # recalibrated apart from the shared fit
        train = _rollouts(env, 20, 20, 0)
        return fam.recalibrate(train, calibration, bound="conformal").discrete_model()

    def sample_states(self, rng, n):
        disk = RollingDisk()
        out = []
        for _ in range(n):
            q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi), *rng.uniform(-1, 1, 2)])
            out.append(np.concatenate([q, disk.consistent_velocity(q, *rng.uniform(-1, 1, 2))]))
        return np.array(out)

    def sample_inputs(self, rng, n):
        return rng.uniform([-2.0, -1.0], [2.0, 1.0], size=(n, 2))

    def heldout_transitions(self, rng):
        return _small("vimpc/RollingDisk-v0")[1].pairs("obs")


def test_every_fit_of_one_shape_gets_the_same_compiled_controller(monkeypatch):
    # the weights are the model's parameters p: two fits on different data are the same
    # functions with other p_default, so a controller's NLP and tube are the same C code
    # (compiled once, from the compile cache after that) and only its bound differs
    import hashlib
    from pathlib import Path

    from vimpc import _jit
    from vimpc.mpc import MPC, Constraints, Cost

    sources: list[tuple[str, str]] = []

    def record(write_source, what):  # the C source's digest, then interpreted
        with contextlib.chdir(_jit.directory()):
            path = Path(_jit.directory()) / write_source()
        sources.append((what, hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size))
        path.unlink()
        return None

    models = []
    for nominal in (False, True):
        _, train, calibration, _ = _data(nominal=nominal)
        fam = copy.copy(_fitted(nominal=nominal))  # recalibrated apart from the shared fit
        models.append(fam.recalibrate(train, calibration, bound="conformal").discrete_model())
    monkeypatch.setattr(_jit, "cached_library", record)
    assert models[0].np == models[1].np == 32 * 3 + 32 + 32 * 32 + 32 + 2 * 32 + 2
    assert np.max(np.abs(models[0].p_default - models[1].p_default)) > 1e-2
    assert models[0].step.serialize() == models[1].step.serialize()
    for model in models:
        ctrl = MPC(
            model, 8, Cost(Q=[1.0, 0.1], R=[1e-2]),
            Constraints(u_min=[-2.0], u_max=[2.0], obs_min=[-np.inf, -6.0], obs_max=[np.inf, 6.0]),
            solver="ipopt", tightening="tube", jit="nlp",
        )  # fmt: skip
        assert ctrl(np.array([0.3, 0.0])).status  # solved interpreted
    first, second = sources[:3], sources[3:]
    assert [what for what, _, _ in first] == [
        "controller's bound", "controller's tube", "controller's NLP"
    ]  # fmt: skip
    for (what, a, _), (_, b, _) in zip(first, second, strict=True):
        assert (a == b) == (what != "controller's bound"), what
    # no derivatives by the parameters: the NLP's code is no larger than with the weights
    # as constants (measured 1.35 MB against 1.68 MB; 46.7 MB when the stage's Hessian
    # took the weights as variables)
    x, u = ca.MX.sym("x", 2), ca.MX.sym("u", 1)
    fixed = ca.Function("fixed", [x, u, ca.MX.sym("p", 0)], [fam.correction()(x, u)])
    constants = fam._nominal.corrected(fixed, models[1].info, np.zeros(0), ())
    for model in (models[1], constants):
        MPC(
            model, 8, Cost(Q=[1.0, 0.1], R=[1e-2]), Constraints(u_min=[-2.0], u_max=[2.0]),
            solver="ipopt", jit="nlp",
        )  # fmt: skip
    assert [what for what, _, _ in sources[6:]] == ["controller's NLP"] * 2
    assert sources[6][2] < 1.2 * sources[7][2], (sources[6][2], sources[7][2])
