"""The constrained network families (clnn, chnn): the exported CasADi maths agrees with the
torch maths it was trained with, the two formulations give one motion, predicted states stay
on the constraints, training helps, and bad input is refused with the value and the fix.

The family contract (tests/test_family_contract.py) covers the rest. Networks are tiny
(16x16) and trained for a few hundred epochs at most, on one torch thread.
"""

from __future__ import annotations

import functools

import casadi as ca
import gymnasium
import numpy as np
import pytest

from vimpc.data import make_excitation, rollout_env, rollout_model
from vimpc.data.dataset import Dataset
from vimpc.data.sampling import halton
from vimpc.errors import FitWarning, InputError, NotFittedError
from vimpc.mechanics import catalog
from vimpc.models import NominalModel
from vimpc.models.families.clnn import (
    DATA_CONSTRAINT_TOL,
    MIN_CHUNKS,
    CHNNModel,
    CLNNModel,
    cartesian_layout,
)

DT = 0.05
TINY = {"hidden": [16, 16], "lr": 1e-2}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def _env(env_id: str) -> gymnasium.Env:
    kwargs = {"friction": [0.0]} if "Pendulum" in env_id else {"friction": [0.0, 0.0]}
    return gymnasium.make(env_id, dt=DT, **kwargs).unwrapped


@functools.cache
def _data(env_id: str, trajectories: int, steps: int, seed: int, box: tuple) -> Dataset:
    """Random-step inputs up to 2 (N m or N), starts spread (Halton) over ``box``."""
    env = _env(env_id)
    nu = env.nominal_system.nu
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, nu, DT, rng, low=[-2.0] * nu, high=[2.0] * nu)
            for _ in range(trajectories)
        ]
    )
    initial = halton(*box, trajectories, seed=seed)
    return rollout_env(env, trajectories, steps, inputs, seed, initial_states=initial)


PENDULUM_BOX = ((-2.0, -3.0), (2.0, 3.0))


def _pendulum(trajectories=6, seed=0):
    return _data("vimpc/Pendulum-v0", trajectories, 20, seed, PENDULUM_BOX)


@functools.cache
def _fitted(cls, epochs: int):
    system = _env("vimpc/Pendulum-v0").nominal_system
    return cls(system, DT, epochs=epochs, **TINY).fit(_pendulum())


def _rollout_error(fam, data: Dataset, steps: int) -> float:
    """RMS over every entry of the observations predicted ``steps`` steps from each
    trajectory's start under its recorded inputs."""
    model = fam.discrete_model()
    obs = data.obs[:, : steps + 1]
    x0 = np.asarray(model.from_obs.map(obs.shape[0])(obs[:, 0].T)).T
    X = rollout_model(model, x0, data.inputs[:, :steps])
    N, T1, nx = X.shape
    pred = np.asarray(model.to_obs.map(N * T1)(X.reshape(-1, nx).T)).T.reshape(N, T1, -1)
    return float(np.sqrt(np.mean((pred - obs) ** 2)))


def _states_on_manifold(fam, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    obs = rng.uniform([-1.5, -2.5], [1.5, 2.5], size=(n, 2))
    return np.asarray(fam.discrete_model().from_obs.map(n)(obs.T)).T


# -- CasADi against torch -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CLNNModel, CHNNModel])
def test_potential_and_dynamics_agree_with_torch(cls):
    """V, its gradient, the vector field and its Jacobian: CasADi (the exported writer's
    network, the constraint Jacobian of the system) against torch (the network and the
    CasADi-bridged constraints the training used) to 1e-10."""
    import torch

    fam = _fitted(cls, 30)
    dyn = fam._torch_dynamics()
    V, field = fam.potential(), fam.vector_field()
    n = fam.layout.n
    rng = np.random.default_rng(3)
    Y = _states_on_manifold(fam, 6, 1)
    U = rng.uniform(-2.0, 2.0, size=(6, 1))
    x = ca.MX.sym("x", n)
    grad = ca.Function("g", [x], [ca.gradient(V(x), x)])
    Xt = torch.from_numpy(Y[:, :n].copy())
    v_torch = dyn.net(Xt).detach().numpy().ravel()
    g_torch = dyn.grad_v(Xt).detach().numpy()
    for i in range(len(Y)):
        assert abs(float(V(Y[i, :n])) - v_torch[i]) <= 1e-10 * max(1.0, abs(v_torch[i]))
        np.testing.assert_allclose(np.asarray(grad(Y[i, :n])).ravel(), g_torch[i], atol=1e-10)
    y, u = ca.MX.sym("y", 2 * n), ca.MX.sym("u", 1)
    jac = ca.Function("J", [y, u], [ca.jacobian(field(y, u), y)])
    m = np.diag(fam.mass_matrix())

    def torch_field(yt, ut):
        yt, ut = yt.reshape(1, -1), ut.reshape(1, -1)
        if cls is CLNNModel:
            return torch.cat([yt[:, n:], dyn.acceleration(yt[:, :n], yt[:, n:], ut)], 1)[0]
        return dyn.hamiltonian_field(yt[:, :n], yt[:, n:], ut)[0]

    for i in range(len(Y)):
        yi = Y[i].copy()
        if cls is CHNNModel:  # (x, p)
            yi[n:] *= m
        want = np.asarray(field(yi, U[i])).ravel()
        yt, ut = torch.from_numpy(yi), torch.from_numpy(U[i].copy())
        got = torch_field(yt, ut).detach().numpy()
        np.testing.assert_allclose(got, want, atol=1e-10 * max(1.0, np.abs(want).max()))
        J_torch = torch.autograd.functional.jacobian(
            functools.partial(torch_field, ut=ut), yt
        ).numpy()
        J = np.asarray(jac(yi, U[i]))
        np.testing.assert_allclose(J_torch, J, atol=1e-10 * max(1.0, np.abs(J).max()))


def test_clnn_and_chnn_give_one_motion():
    """For the same potential and masses the constrained acceleration (CLNN) and the
    projected Hamiltonian field (CHNN, ``p = M x'``) agree to 1e-10, and the acceleration
    keeps the velocity constraint: ``d/dt (G x') = G x'' + K x' = 0``."""
    import torch

    fam = _fitted(CLNNModel, 30)
    dyn = fam._torch_dynamics()
    n = fam.layout.n
    Y = torch.from_numpy(_states_on_manifold(fam, 8, 2))
    U = torch.from_numpy(np.random.default_rng(4).uniform(-2.0, 2.0, size=(8, 1)))
    X, Vel = Y[:, :n], Y[:, n:]
    acc = dyn.acceleration(X, Vel, U).detach().numpy()
    minv = dyn.minv().detach().numpy()
    zdot = dyn.hamiltonian_field(X, Vel / dyn.minv(), U).detach().numpy()
    np.testing.assert_allclose(zdot[:, :n], Vel.numpy(), atol=1e-10)
    np.testing.assert_allclose(minv * zdot[:, n:], acc, atol=1e-10 * np.abs(acc).max())
    G, K = dyn.constraints(X, Vel)
    drift = np.einsum("bkn,bn->bk", G.numpy(), acc) + np.einsum("bkn,bn->bk", K.numpy(), Vel)
    assert np.abs(drift).max() <= 1e-10 * max(1.0, np.abs(acc).max())


# -- the exported model ---------------------------------------------------------------------------


def test_learned_mass_matrix_is_positive_definite_and_is_the_models():
    """The learned mass matrix is diagonal and positive definite with one mass and one
    second moment for the rod, and the exported energy is ``1/2 x'^T M x' + V(x)``."""
    fam = _fitted(CLNNModel, 30)
    M = fam.mass_matrix()
    assert np.all(np.linalg.eigvalsh(M) > 0)
    assert M[0, 0] == M[1, 1] and fam.layout.mass_names == ("rod.mass", "rod.inertia")
    model = fam.discrete_model()
    for y in _states_on_manifold(fam, 4, 5):
        E = float(model.energy(y, model.p_default))
        want = 0.5 * y[3:] @ M @ y[3:] + float(fam.potential()(y[:3]))
        assert abs(E - want) <= 1e-12 * max(1.0, abs(want))


@pytest.mark.parametrize("cls", [CLNNModel, CHNNModel])
def test_predicted_states_stay_on_the_constraints(cls):
    """On the cart-pole (a rail: linear constraints; a pin: a joint), 100 predicted steps
    from each of 4 starts keep every constraint within 1e-10, and to_obs(from_obs(obs))
    returns the observation."""
    env_id = "vimpc/CartPole-v0"
    data = _data(env_id, 4, 10, 0, ((-0.5, -1.0, -1.0, -2.0), (0.5, 1.0, 1.0, 2.0)))
    fam = cls(_env(env_id).nominal_system, DT, epochs=3, **TINY).fit(data)
    model = fam.discrete_model()
    assert model.nx == 12 and model.nobs == 4
    obs0 = data.obs[:, 0]
    x0 = np.asarray(model.from_obs.map(4)(obs0.T)).T
    back = np.asarray(model.to_obs.map(4)(x0.T)).T
    np.testing.assert_allclose(back, obs0, atol=1e-12)
    inputs = np.random.default_rng(0).uniform(-1.0, 1.0, size=(4, 100, 1))
    X = rollout_model(model, x0, inputs)
    assert np.all(np.isfinite(X))
    g = np.asarray(model.constraint.map(4 * 101)(X.reshape(-1, 12).T))
    assert np.abs(g).max() <= 1e-10


def test_a_short_training_beats_an_untrained_network():
    """On the single pendulum in maximal coordinates, 200 epochs bring the exported model's
    5-step rollout error on held-out trajectories below 0.3 times the error after one epoch
    (measured: 0.21 against 1.03 rad, rad/s)."""
    held_out = _pendulum(6, seed=100)
    untrained = _rollout_error(_fitted(CLNNModel, 1), held_out, 5)
    trained = _rollout_error(_fitted(CLNNModel, 200), held_out, 5)
    assert np.isfinite(untrained) and trained < 0.3 * untrained, (untrained, trained)


@pytest.mark.slow
def test_a_longer_training_predicts_a_second_and_identifies_the_inertia():
    """12 trajectories and 400 epochs: the 20-step (1 s) rollout error on held-out
    trajectories under a tenth of the untrained network's (measured 0.049 against 2.33),
    and the one inertia the pin leaves identified, ``I + m l^2 / 4`` about the pivot (the
    rod's mass and central inertia apart are not: the potential is learned too), within 5 %
    of the true 1/3 kg m^2 (measured 0.341)."""
    system = _env("vimpc/Pendulum-v0").nominal_system
    data = _data("vimpc/Pendulum-v0", 12, 20, 0, PENDULUM_BOX)
    held_out = _pendulum(6, seed=100)
    fam = CLNNModel(system, DT, epochs=400, **TINY).fit(data)
    untrained = _rollout_error(_fitted(CLNNModel, 1), held_out, 20)
    trained = _rollout_error(fam, held_out, 20)
    assert trained < 0.1 * untrained, (untrained, trained)
    m, inertia = fam.masses_
    assert abs(inertia + m * system.params["l"] ** 2 / 4 - 1 / 3) < 0.05 / 3, fam.masses_


def test_substeps_bring_the_step_closer_to_the_learned_flow():
    """With 4 midpoint substeps the exported step (the same fit: same seed, same data) has no
    residual, keeps the constraints, and its error against the learned vector field's flow
    (RK4 with 100 substeps) is under a tenth of one midpoint step's (second order: 1/16)."""
    one = _fitted(CLNNModel, 30)
    system = _env("vimpc/Pendulum-v0").nominal_system
    four = CLNNModel(system, DT, epochs=30, substeps=4, **TINY).fit(_pendulum())
    assert "residual" not in four.provides() and four.discrete_model().residual is None
    field = one.vector_field()
    y, u = ca.MX.sym("y", 6), ca.MX.sym("u", 1)
    h = DT / 100
    k1 = field(y, u)
    k2 = field(y + h / 2 * k1, u)
    k3 = field(y + h / 2 * k2, u)
    k4 = field(y + h * k3, u)
    rk4 = ca.Function("rk4", [y, u], [y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)])
    errors = {1: [], 4: []}
    for x in _states_on_manifold(one, 4, 7):
        flow = x
        for _ in range(100):
            flow = np.asarray(rk4(flow, 0.5)).ravel()
        for k, fam in ((1, one), (4, four)):
            model = fam.discrete_model()
            x1 = np.asarray(model.step(x, [0.5], model.p_default)).ravel()
            errors[k].append(np.abs(x1 - flow).max())
            assert np.abs(np.asarray(model.constraint(x1))).max() <= 1e-10
    assert max(errors[4]) < 0.1 * max(errors[1]), errors


def test_conformal_bound():
    """bound = "conformal" calibrates on held-out trajectories: the exported model carries
    a finite non-negative bound of the state's size and its delta."""
    system = _env("vimpc/Pendulum-v0").nominal_system
    fam = CLNNModel(system, DT, epochs=30, bound="conformal", delta=0.2, **TINY)
    model = fam.fit(_pendulum(), _pendulum(4, seed=50)).discrete_model()
    assert model.bound is not None and model.delta == 0.2
    for y in _states_on_manifold(fam, 3, 6):
        e = np.asarray(model.bound(y, [0.5], model.p_default)).ravel()
        assert e.shape == (6,) and np.all(np.isfinite(e)) and np.all(e >= 0) and e.max() > 0


# -- Cartesian systems and bad input ----------------------------------------------------------------


def _npendulum_data(n_traj: int, steps: int, offset: float = 0.0) -> Dataset:
    """A two-link chain of point masses (Cartesian coordinates) from angle starts, rolled
    out by the analytic midpoint integrator; ``offset`` [m] shifts every x of the first
    mass off its tether."""
    system = catalog.make_system("NPendulum", n=2, friction=[0.0] * 4)
    model = NominalModel(system, DT).discrete_model()
    rng = np.random.default_rng(0)
    x0 = np.array(
        [np.concatenate(system.from_angles(*rng.normal(size=(2, 2)))) for _ in range(n_traj)]
    )
    inputs = rng.uniform(-1.0, 1.0, size=(n_traj, steps, 1))
    X = rollout_model(model, x0, inputs)
    X[:, :, 0] += offset
    t = np.tile(np.arange(steps + 1) * DT, (n_traj, 1))
    return Dataset(t, X, X, inputs, DT, {"system": system.name})


def test_a_chain_of_point_masses_is_learned_in_its_own_coordinates():
    """NPendulum is already Cartesian: the observation is the state, one mass per point,
    and the exported model keeps both distance constraints."""
    data = _npendulum_data(3, 12)
    system = catalog.make_system("NPendulum", n=2, friction=[0.0] * 4)
    fam = CLNNModel(system, DT, epochs=3, **TINY).fit(data)
    assert fam.layout.mass_names == ("m1", "m2") and fam.layout.A is None
    model = fam.discrete_model()
    X = rollout_model(model, data.obs[:, 0], data.inputs)
    assert np.abs(np.asarray(model.constraint.map(3 * 13)(X.reshape(-1, 8).T))).max() <= 1e-10


def test_data_off_the_constraints_are_refused_saying_how_far():
    system = catalog.make_system("NPendulum", n=2, friction=[0.0] * 4)
    fam = CLNNModel(system, DT, epochs=3, **TINY)
    with pytest.raises(
        InputError, match=r"violate the constraints .* by up to \|Phi\(x\)\| = 0\.0"
    ):
        fam.fit(_npendulum_data(3, 12, offset=0.01))
    assert DATA_CONSTRAINT_TOL < 1e-4
    with pytest.raises(NotFittedError, match="clnn"):
        fam.discrete_model()


@pytest.mark.parametrize("name", ["Kepler", "RollingDisk"])
def test_a_system_without_a_maximal_description_is_refused(name):
    system = catalog.make_system(name)
    with pytest.raises(InputError, match=f"{system.name} has no maximal-coordinate description"):
        CHNNModel(system, DT, **TINY)
    with pytest.raises(InputError, match="must be a MechanicalSystem"):
        cartesian_layout("pendulum")


def test_too_few_trajectories_are_refused_naming_the_setting():
    system = _env("vimpc/Pendulum-v0").nominal_system
    short = _data("vimpc/Pendulum-v0", 1, 4, 0, PENDULUM_BOX)
    with pytest.raises(
        InputError, match=r"chunk = 5 .* at least chunk \+ 1 = 6 snapshots; the data have 5"
    ):
        CLNNModel(system, DT, **TINY).fit(short)
    few = _data("vimpc/Pendulum-v0", 1, 8, 0, PENDULUM_BOX)
    with pytest.raises(
        InputError, match=f"MIN_CHUNKS = {MIN_CHUNKS} .* 1 trajectories of 9 snapshots give 4"
    ):
        CLNNModel(system, DT, **TINY).fit(few)
    with pytest.raises(InputError, match=r"hidden must list at least one"):
        CLNNModel(system, DT, hidden=[])


def test_a_large_network_on_little_data_is_warned_of():
    system = _env("vimpc/Pendulum-v0").nominal_system
    fam = CLNNModel(system, DT, hidden=[256, 256, 256], epochs=1)
    with pytest.warns(
        FitWarning, match=r"scalar targets for a network of .*hidden = \[256, 256, 256\]"
    ):
        fam.fit(_data("vimpc/Pendulum-v0", 1, 20, 0, PENDULUM_BOX))
