"""The GP-VI family: GP posteriors in CasADi against gpytorch, the DTC approximation, what
the GPs learn on top of the nominal integrator, the model contract with a calibrated
spread bound, and bad input."""

from __future__ import annotations

import functools

import casadi as ca
import gymnasium
import numpy as np
import pytest

import vimpc  # noqa: F401  (registers the environments)
from vimpc.data import make_excitation, rollout_env
from vimpc.errors import InputError
from vimpc.mechanics import CartPole
from vimpc.models import NominalModel, family
from vimpc.models.gp import Hyperparameters, Posterior, fit_hyperparameters, kernel
from vimpc.models.gp_vi import GPVIModel
from vimpc.testing import DiscreteModelContract

DT = 0.01


def _samples(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    Z = rng.uniform(-2.0, 2.0, size=(n, 3))
    y = np.sin(Z[:, 0]) * np.cos(0.5 * Z[:, 1]) + 0.1 * Z[:, 2] + 0.01 * rng.standard_normal(n)
    return Z, y


def test_the_posterior_in_numpy_and_casadi_agrees_with_gpytorch():
    import gpytorch
    import torch

    Z, y = _samples()
    hp = fit_hyperparameters(Z, y, restarts=2, iterations=100, seed=0)
    post = Posterior.exact(Z, y, hp)
    # gpytorch's own posterior with the same hyperparameters, by Cholesky in float64
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()

    class GP(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(torch.as_tensor(Z), torch.as_tensor(y), likelihood)
            self.covar = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=3))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(torch.zeros(len(x)), self.covar(x))

    gp = GP().double()
    gp.covar.base_kernel.lengthscale = torch.as_tensor(hp.lengthscales)
    gp.covar.outputscale = torch.as_tensor(hp.signal_var)
    likelihood.noise = torch.as_tensor(hp.noise_var)
    gp.eval()
    test = np.random.default_rng(1).uniform(-2.5, 2.5, size=(40, 3))
    with (
        torch.no_grad(),
        gpytorch.settings.fast_computations(False, False, False),
        gpytorch.settings.max_cholesky_size(10**6),
    ):
        out = gp(torch.as_tensor(test))
        mean, var = out.mean.numpy(), out.variance.numpy()
    z = ca.SX.sym("z", 3)
    f = ca.Function("f", [z], [post.casadi_mean(z), post.casadi_var(z)])
    cas_mean = np.array([float(f(t)[0]) for t in test])
    cas_var = np.array([float(f(t)[1]) for t in test])
    scale = np.max(np.abs(mean))
    np.testing.assert_allclose(post.mean(test), mean, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(cas_mean, mean, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(post.var(test), var, rtol=0, atol=1e-8 * hp.signal_var)
    np.testing.assert_allclose(cas_var, var, rtol=0, atol=1e-8 * hp.signal_var)
    # and the Jacobian of the CasADi mean is that of the closed form,
    # d/dz sum_i alpha_i k(z, Z_i) = -sum_i alpha_i k(z, Z_i) (z - Z_i) / l^2
    J = ca.Function("J", [z], [ca.jacobian(post.casadi_mean(z), z)])
    for t in test[:5]:
        k = post.hp.signal_var * np.exp(
            -0.5 * np.sum(((t - post.support) / hp.lengthscales) ** 2, axis=1)
        )
        exact = -((post.alpha * k) @ (t - post.support)) / hp.lengthscales**2
        np.testing.assert_allclose(np.asarray(J(t)).ravel(), exact, rtol=1e-9, atol=1e-12)


def test_dtc_with_every_sample_as_support_is_the_exact_posterior():
    Z, y = _samples()
    hp = Hyperparameters(np.array([0.8, 1.5, 3.0]), 0.7, 1e-3, 0.0)
    exact, dtc = Posterior.exact(Z, y, hp), Posterior.dtc(Z, y, hp, Z)
    test = np.random.default_rng(2).uniform(-2.0, 2.0, size=(30, 3))
    np.testing.assert_allclose(dtc.mean(test), exact.mean(test), rtol=0, atol=1e-7)
    np.testing.assert_allclose(dtc.var(test), exact.var(test), rtol=0, atol=1e-7)
    # fewer support points: an approximation, not a copy
    few = Posterior.dtc(Z, y, hp, Z[:10])
    assert np.max(np.abs(few.mean(test) - exact.mean(test))) > 1e-4


def test_dtc_stays_accurate_where_the_support_kernel_is_nearly_singular():
    # long length scales and little noise (a GP that learned a smooth residual from clean
    # data): K_mm has a condition number near 1/eps, and inverting it directly lost the mean
    rng = np.random.default_rng(3)
    Z = rng.uniform(-3.0, 3.0, size=(200, 3))
    y = 0.05 * Z[:, 0] + 0.01 * Z[:, 1] ** 2 + 1e-3 * rng.standard_normal(200)
    hp = Hyperparameters(np.array([3.0, 30.0, 300.0]), 1e-2, 1e-6, 0.0)
    exact = Posterior.exact(Z, y, hp)
    dtc = Posterior.dtc(Z, y, hp, Z[::2])
    assert np.linalg.cond(kernel(Z[::2], Z[::2], hp)) > 1e12
    test = rng.uniform(-3.0, 3.0, size=(100, 3))
    np.testing.assert_allclose(dtc.mean(test), exact.mean(test), rtol=0, atol=1e-4)


# -- the family on the pendulum ----------------------------------------------------------------


@functools.cache
def _pendulum_data():
    env = gymnasium.make("vimpc/Pendulum-v0", dt=DT).unwrapped
    rng = np.random.default_rng(0)

    def collect(n: int, seed: int):
        inputs = np.stack(
            [
                make_excitation("random_steps", 100, 1, DT, rng, low=[-2.0], high=[2.0])
                for _ in range(n)
            ]
        )
        return rollout_env(env, n, 100, inputs, seed)

    return env, collect(20, 0), collect(20, 100_000), collect(40, 200_000)


@functools.cache
def _fitted(**settings):
    env, train, calibration, _ = _pendulum_data()
    return GPVIModel(env.nominal_system, DT, **settings).fit(train, calibration)


def _clean_velocity_rmse(model, data) -> float:
    X, U, Xn = data.pairs("states")
    pred = np.asarray(model.step.map(len(X))(X.T, U.T, np.zeros((0, len(X))))).T
    return float(np.sqrt(np.mean((Xn[:, 1] - pred[:, 1]) ** 2)))


def test_the_gps_learn_what_the_nominal_integrator_misses():
    # the true pendulum has friction and other inertia; the prior has neither. On
    # noise-free held-out transitions the GP-VI's next velocity is several times closer.
    env, _, _, test = _pendulum_data()
    for integrator, form, prior in (
        ("first_order", "del", "first_order"),  # the paper's
        ("midpoint", "position_momentum", "midpoint"),
    ):
        model = NominalModel(env.nominal_system, DT, integrator=integrator, form=form)
        nominal = _clean_velocity_rmse(model.discrete_model(), test)
        learned = _clean_velocity_rmse(_fitted(samples=256, prior=prior).discrete_model(), test)
        assert learned < nominal / 3, (prior, learned, nominal)


def test_sparse_export_stays_close_to_the_exact_one():
    _, _, _, test = _pendulum_data()
    exact = _fitted(samples=256).discrete_model()
    sparse_family = _fitted(samples=256, support_points=40)
    assert [len(p.support) for p in sparse_family.posteriors_] == [40]
    sparse = sparse_family.discrete_model()
    e, s = _clean_velocity_rmse(exact, test), _clean_velocity_rmse(sparse, test)
    assert s < 1.5 * e, (s, e)


def test_the_registry_knows_the_family_and_it_refuses_bad_input():
    assert family("gp_vi") is GPVIModel
    env, train, _, _ = _pendulum_data()
    with pytest.raises(InputError, match="samples must be a non-negative"):
        GPVIModel(env.nominal_system, DT, samples=-1)
    with pytest.raises(InputError, match="did you mean 'support_points'"):
        GPVIModel(env.nominal_system, DT, support_point=10)
    bad = train.replace(
        obs=np.where(np.arange(train.obs.size).reshape(train.obs.shape) == 7, np.nan, train.obs)
    )
    with pytest.raises(InputError, match="NaN"):
        GPVIModel(env.nominal_system, DT).fit(bad)
    with pytest.raises(InputError, match="dt"):
        GPVIModel(env.nominal_system, 2 * DT).fit(train)
    with pytest.raises(InputError, match="holonomic"):
        GPVIModel(CartPole().maximal(), DT)


class TestGPVIContract(DiscreteModelContract):
    """The fitted GP-VI pendulum with a conformal bound shaped by the GPs' spread."""

    def make_model(self):
        return _fitted(samples=128, bound="conformal", conformal_scale="spread").discrete_model()

    def sample_states(self, rng, n):
        return rng.uniform([-np.pi, -4.0], [np.pi, 4.0], size=(n, 2))

    def sample_inputs(self, rng, n):
        return rng.uniform(-2.0, 2.0, size=(n, 1))

    def heldout_transitions(self, rng):
        _, _, _, test = _pendulum_data()
        return test.pairs("obs")
