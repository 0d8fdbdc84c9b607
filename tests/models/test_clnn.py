"""The constrained network families (clnn, chnn): the exported CasADi maths agrees with the
torch maths it was trained with, the two formulations give one motion, predicted states stay
on the constraints, training helps, and bad input is refused with the value and the fix.

The family contract (tests/models/test_family_contract.py) covers the rest. Networks are tiny
(16x16) and trained for a few hundred epochs at most, on one torch thread.
"""

from __future__ import annotations

import copy
import functools

import casadi as ca
import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc.data import make_excitation, onto_constraints, rollout_env, rollout_model
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
    _TorchDynamics,
    cartesian_layout,
)
from vimpc.testing import DiscreteModelContract

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


@functools.cache
def _friction_pendulum(trajectories: int, seed: int) -> Dataset:
    """The pendulum with viscous joint friction 0.3 N m s (the nominal system has none),
    random-step torques up to 2 N m, starts spread over ``PENDULUM_BOX``."""
    env = gymnasium.make("vimpc/Pendulum-v0", dt=DT, friction=[0.3], perturbation=0.0)
    env = env.unwrapped
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [make_excitation("random_steps", 20, 1, DT, rng, low=[-2.0], high=[2.0])
         for _ in range(trajectories)]
    )  # fmt: skip
    initial = halton(*PENDULUM_BOX, trajectories, seed=seed)
    return rollout_env(env, trajectories, 20, inputs, seed, initial_states=initial)


def test_learned_damping_is_the_friction_of_training_and_of_the_export():
    """``damping = "learned"``: the coefficient the training's torch dynamics apply
    (``r^2``) is the one the exported vector field and step apply (``_fitted_layout``), to
    1e-10, and the export's energy falls by the friction's work."""
    import torch

    system = _env("vimpc/Pendulum-v0").nominal_system
    fam = CLNNModel(system, DT, epochs=20, damping="learned", **TINY).fit(_friction_pendulum(6, 0))
    assert fam.damping_.shape == (1,) and fam.damping_[0] > 0
    assert fam.discrete_model().info["learned_friction"] == fam.damping_.tolist()
    root = torch.from_numpy(np.sqrt(fam.damping_))
    plain = fam._torch_dynamics()  # the fitted layout: known + learned friction in D
    training = _TorchDynamics(fam.layout, plain.net, plain.P, plain.c, 1.0, plain.log_mass,
                              fam.rows_.kept, root)  # fmt: skip
    Y = torch.from_numpy(_states_on_manifold(fam, 5, 2))
    U = torch.from_numpy(np.random.default_rng(4).uniform(-2, 2, size=(5, 1)))
    n = fam.layout.n
    a = training.acceleration(Y[:, :n], Y[:, n:], U).detach().numpy()
    b = plain.acceleration(Y[:, :n], Y[:, n:], U).detach().numpy()
    np.testing.assert_allclose(a, b, atol=1e-10)
    field = fam.vector_field()
    for i in range(5):
        want = np.asarray(field(Y[i].numpy(), U[i].numpy())).ravel()[n:]
        np.testing.assert_allclose(a[i], want, atol=1e-10 * max(1.0, np.abs(want).max()))
    # unforced over 5 s, the exported step loses energy to the learned friction, beyond the
    # conservative step's own oscillation (the same fit without it)
    undamped = copy.copy(fam)
    undamped.damping_ = np.zeros(1)

    def energies(model):
        x, E = Y[0].numpy(), []
        for _ in range(100):
            x = np.asarray(model.step(x, [0.0], [])).ravel()
            E.append(float(model.energy(x, [])))
        return np.array(E)

    damped, conservative = energies(fam.discrete_model()), energies(undamped.discrete_model())
    assert damped[-1] < conservative.min() - 0.5 * np.ptp(conservative), (damped, conservative)


def test_learned_damping_needs_the_mx_export():
    system = _env("vimpc/Pendulum-v0").nominal_system
    with pytest.raises(InputError, match="damping = 'learned' is written into the MX export"):
        CLNNModel(system, DT, damping="learned", export="sx", **TINY)


@pytest.mark.slow
def test_learned_damping_recovers_the_pendulums_friction():
    """12 trajectories of the pendulum with friction 0.3, 600 epochs: the learned
    coefficient within 10 % of 0.3 (measured 0.30005), and the 20-step rollout error on
    held-out trajectories under a fifth of the same fit's without learned friction
    (measured 0.019 against 0.574: the conservative model bends its potential instead)."""
    system = _env("vimpc/Pendulum-v0").nominal_system
    train, held = _friction_pendulum(12, 0), _friction_pendulum(6, 100)
    fits = {d: CLNNModel(system, DT, epochs=600, damping=d, **TINY).fit(train)
            for d in ("known", "learned")}  # fmt: skip
    assert abs(fits["learned"].damping_[0] - 0.3) < 0.03, fits["learned"].damping_
    errors = {d: _rollout_error(f, held, 20) for d, f in fits.items()}
    assert errors["learned"] < 0.2 * errors["known"], errors


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


# -- the MX export on the four-bar (9 maximal coordinates, 8 constraints) ---------------------------

FOURBAR_DT = 0.02
FOURBAR_BOX = ((-np.pi, -np.pi, -np.pi, -6.0, -6.0, -6.0), (np.pi, np.pi, np.pi, 6.0, 6.0, 6.0))


@functools.cache
def _fourbar_data(trajectories: int = 8, steps: int = 20, noise: float = 0.0) -> Dataset:
    """The four-bar with joint friction, starts assembled onto the loop closure (Halton over
    the crank's circle), random torques up to 2 N m."""
    env = gymnasium.make(
        "vimpc/FourBar-v0", dt=FOURBAR_DT, obs_noise=noise, friction=[0.5, 0.1, 0.1, 0.5]
    ).unwrapped
    rng = np.random.default_rng(0)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, 1, FOURBAR_DT, rng, low=[-2.0], high=[2.0])
            for _ in range(trajectories)
        ]
    )
    initial = onto_constraints(env.true_system, halton(*FOURBAR_BOX, trajectories, seed=0))
    return rollout_env(env, trajectories, steps, inputs, 0, initial_states=initial)


@functools.cache
def _fourbar_fitted(export: str = "mx", hidden: tuple = (32, 32)) -> CLNNModel:
    system = catalog.make_system("FourBar", friction=[0.5, 0.1, 0.1, 0.5])
    fam = CLNNModel(system, FOURBAR_DT, hidden=list(hidden), epochs=20, lr=1e-2, export=export)
    return fam.fit(_fourbar_data())


def _fourbar_states(fam, n: int, seed: int) -> np.ndarray:
    """States on the constraints: assembled crank angles and rates, through from_obs."""
    rng = np.random.default_rng(seed)
    system = fam.layout.source
    obs = [np.concatenate(system.assemble(a, r)) for a, r in
           zip(rng.uniform(-np.pi, np.pi, n), rng.uniform(-4.0, 4.0, n), strict=True)]  # fmt: skip
    return np.asarray(fam.discrete_model().from_obs.map(n)(np.array(obs).T)).T


def test_mx_export_agrees_with_the_sx_export():
    """The MX step (dense products, closed-form derivatives) against the constrained
    VariationalIntegrator built on SX for the same fit: step, residual, the closed-form
    residual Jacobian against CasADi's Jacobian of the SX residual, the step's Jacobian (by
    the implicit function theorem), energy; round-off (1e-12 relative). Predicted states keep
    every constraint within 1e-10, and the MX model keeps the controller's NLP on MX."""
    fam = _fourbar_fitted()
    mx = fam.discrete_model()
    fam_sx = CLNNModel(fam.system, FOURBAR_DT, **{**fam.get_settings(), "export": "sx"})
    for name in ("network_", "masses_", "damping_", "rows_", "forced_", "training_", "windows_",
                 "data_offset_", "data_projection_", "fit_time_"):  # fmt: skip
        setattr(fam_sx, name, getattr(fam, name))
    sx = fam_sx.discrete_model()
    assert "dense_products" in mx.info and "dense_products" not in sx.info
    assert mx.info["export"] == "mx" and mx.info["dropped_constraints"] == []
    nx = mx.nx
    x, u, z, p = ca.MX.sym("x", nx), ca.MX.sym("u", 1), ca.MX.sym("z", nx), ca.MX(0, 1)
    J_sx = ca.Function("J", [x, u, z], [ca.jacobian(sx.residual(x, u, z, p),
                                                    ca.vertcat(x, u, z))])  # fmt: skip
    steps = {m: ca.Function("S", [x, u], [ca.jacobian(mod.step(x, u, p), ca.vertcat(x, u))])
             for m, mod in (("mx", mx), ("sx", sx))}  # fmt: skip
    rng = np.random.default_rng(1)
    for xi in _fourbar_states(fam, 5, 2):
        ui = rng.uniform(-2.0, 2.0, 1)
        a = np.asarray(mx.step(xi, ui, [])).ravel()
        b = np.asarray(sx.step(xi, ui, [])).ravel()
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * max(1.0, np.abs(b).max()))
        assert np.abs(np.asarray(mx.constraint(a))).max() <= 1e-10
        zi = a + 1e-3 * rng.normal(size=nx)  # off the root: residuals of size
        ra, rb = (np.asarray(mod.residual(xi, ui, zi, [])).ravel() for mod in (mx, sx))
        assert np.abs(rb).max() > 1e-4
        np.testing.assert_allclose(ra, rb, rtol=0, atol=1e-12 * np.abs(rb).max())
        r, J = (np.asarray(v) for v in mx.residual_jacobian(xi, ui, zi, []))
        Jref = np.asarray(J_sx(xi, ui, zi))
        np.testing.assert_allclose(r.ravel(), ra, atol=1e-14 * np.abs(ra).max())
        np.testing.assert_allclose(J, Jref, rtol=0, atol=1e-12 * np.abs(Jref).max())
        Sa, Sb = (np.asarray(steps[m](xi, ui)) for m in ("mx", "sx"))
        np.testing.assert_allclose(Sa, Sb, rtol=0, atol=1e-9 * np.abs(Sb).max())
        Ea, Eb = float(mx.energy(xi, [])), float(sx.energy(xi, []))
        assert abs(Ea - Eb) <= 1e-12 * max(1.0, abs(Eb))


def test_the_network_derivatives_of_the_export_agree_with_torch():
    """The gradient and Hessian of V the MX step uses (closed form, dense products) against
    torch's autograd of the folded network, to 1e-10 relative, at the four-bar's data
    configurations."""
    import torch

    from vimpc.models import _network_lagrangian as nl

    fam = _fourbar_fitted()
    n = fam.layout.n
    q = ca.MX.sym("q", n)
    y, g, H = nl.network_pass(fam.network_, q, np.eye(n))
    f = ca.Function("VgH", [q], [y, g, H])
    net = fam.network_.torch_module()
    Q = _fourbar_states(fam, 4, 3)[:, :n]
    for qi in Q:
        qt = torch.from_numpy(qi.copy()).requires_grad_(True)
        yt = net(qt.reshape(1, -1)).sum()
        gt = torch.autograd.grad(yt, qt, create_graph=True)[0]
        Ht = torch.stack([torch.autograd.grad(gt[i], qt, retain_graph=True)[0] for i in range(n)])
        vals = [np.asarray(v) for v in f(qi)]
        for got, want in zip(vals, (yt, gt, Ht), strict=True):
            want = want.detach().numpy().reshape(got.shape)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * max(1.0, np.abs(want).max()))


@pytest.mark.slow  # a timing, and the SX export of a 3 x 128 network takes seconds to build
def test_a_bigger_network_steps_faster_on_mx_than_on_sx():
    """3 x 128 potential on the four-bar: the MX step at least 3x faster than the SX export
    (medians of 15 steps; measured 0.53 against 21 ms at load ~4.5, the bench)."""
    import time

    system = catalog.make_system("FourBar", friction=[0.5, 0.1, 0.1, 0.5])
    fam = CLNNModel(system, FOURBAR_DT, hidden=[128, 128, 128], epochs=1).fit(_fourbar_data())
    x = _fourbar_states(fam, 1, 4)[0]
    times = {}
    for export in ("mx", "sx"):
        fam.export = export
        f = ca.Function(fam.discrete_model().step)
        f(x, [0.3], [])
        runs = []
        for _ in range(15):
            t = time.perf_counter()
            f(x, [0.3], [])
            runs.append(time.perf_counter() - t)
        times[export] = float(np.median(runs))
    assert times["mx"] * 3 < times["sx"], times


def test_the_exported_model_survives_its_file(tmp_path):
    """Saved to a .vimpc file and loaded back, the MX model steps to the same state."""
    from vimpc import model_file

    model = _fourbar_fitted().discrete_model()
    back = model_file.load(model_file.save(model, tmp_path / "clnn.vimpc"))
    x = _fourbar_states(_fourbar_fitted(), 1, 5)[0]
    a, b = (np.asarray(m.step(x, [0.4], [])).ravel() for m in (model, back))
    np.testing.assert_array_equal(a, b)
    assert back.info["dense_products"] == model.info["dense_products"]


class TestCLNNFourBarContract(DiscreteModelContract):
    """The MX export of a CLNN four-bar as the controller sees it (steps keep the loop
    closure)."""

    jacobian_rtol = 1e-4
    fd_step = 1e-5
    constraint_preserving = True

    def make_model(self):
        return _fourbar_fitted().discrete_model()

    def sample_states(self, rng, n):
        return _fourbar_states(_fourbar_fitted(), n, int(rng.integers(1000)))

    def sample_inputs(self, rng, n):
        return rng.uniform(-2.0, 2.0, size=(n, 1))


# -- redundant constraints, projection and bad input ----------------------------------------------


def _twice_pinned():
    """The pendulum with its pivot written twice (a second revolute joint at the same
    place): 4 constraint rows of rank 2 at every configuration, G M^-1 G^T singular."""
    from vimpc.mechanics import Pendulum
    from vimpc.mechanics.planar import Revolute

    class TwicePinnedPendulum(Pendulum):
        actuated = (0,)

        def joints(self):
            half = self.params["l"] / 2
            return (
                Revolute("torque", None, (0.0, 0.0), 0, (-half, 0.0)),
                Revolute("pin_again", None, (0.0, 0.0), 0, (-half, 0.0)),
            )

    return TwicePinnedPendulum(friction=[0.0, 0.0])


def _as_data_of(system, data: Dataset) -> Dataset:
    return Dataset(data.t, data.obs, data.states, data.inputs, data.dt, {"system": system.name})


def test_redundant_constraints_are_dropped_and_named():
    """Twice-pinned pendulum: redundant = "drop" keeps 2 independent rows (named the
    dropped ones in info), trains, and the exported step keeps all 4 rows within 1e-10
    (the dropped ones hold where the kept ones do) and matches the plain pendulum's shape."""
    system = _twice_pinned()
    fam = CLNNModel(system, DT, epochs=30, **TINY).fit(_as_data_of(system, _pendulum()))
    assert fam.rows_.rank == 2 and len(fam.rows_.kept) == 2
    model = fam.discrete_model()
    dropped = model.info["dropped_constraints"]
    assert len(dropped) == 2 and model.info["constraint_rank"] == 2
    assert set(dropped) <= {"torque.x", "torque.y", "pin_again.x", "pin_again.y"}
    x0 = _states_on_manifold(fam, 4, 8)
    X = rollout_model(model, x0, np.random.default_rng(1).uniform(-2, 2, size=(4, 30, 1)))
    assert np.all(np.isfinite(X))
    g = np.asarray(model.constraint.map(4 * 31)(X.reshape(-1, 6).T))
    assert g.shape[0] == 4 and np.abs(g).max() <= 1e-10


def test_redundant_constraints_are_refused_when_asked():
    system = _twice_pinned()
    fam = CLNNModel(system, DT, epochs=3, redundant="refuse", **TINY)
    with pytest.raises(InputError, match=r"redundant, G has rank 2 at every data configuration"):
        fam.fit(_as_data_of(system, _pendulum()))
    with pytest.raises(InputError, match=r"export = 'sx' .* use export = 'mx'"):
        CLNNModel(system, DT, epochs=3, export="sx", **TINY).fit(_as_data_of(system, _pendulum()))


def test_a_singular_configuration_in_the_data_is_refused_saying_where():
    """The parallelogram four-bar in maximal coordinates: G loses rank where the links are
    collinear (theta1 = theta2); data through there are refused, naming the sample."""
    system = catalog.make_system("ParallelogramFourBar", friction=[0.0] * 5)
    rng = np.random.default_rng(0)
    obs = np.concatenate([rng.uniform(-1, 1, (3, 12, 2)), rng.uniform(-1, 1, (3, 12, 2))], 2)
    obs[1, 4, 1] = obs[1, 4, 0]  # theta2 = theta1 at trajectory 1, sample 4
    t = np.tile(np.arange(12) * DT, (3, 1))
    data = Dataset(t, obs, obs, np.zeros((3, 11, 1)), DT, {"system": system.name})
    with pytest.raises(
        InputError, match=r"changes rank, from 10 to 9 \(first at trajectory 1, sample 4"
    ):
        CLNNModel(system, DT, epochs=1, **TINY).fit(data)


def test_noisy_data_are_projected_within_the_data_tolerance():
    """Four-bar observations with 1e-3 rad noise miss the loop closure by ~1e-3 m: refused at
    the default data_tolerance (naming it), projected and recorded with a looser one."""
    system = catalog.make_system("FourBar", friction=[0.5, 0.1, 0.1, 0.5])
    noisy = _fourbar_data(8, 20, 1e-3)
    with pytest.raises(InputError, match=r"data_tolerance = 1e-06\); raise data_tolerance"):
        CLNNModel(system, FOURBAR_DT, epochs=1, **TINY).fit(noisy)
    fam = CLNNModel(system, FOURBAR_DT, epochs=1, data_tolerance=0.05, **TINY).fit(noisy)
    info = fam.discrete_model().info
    assert 1e-4 < info["data_offset"][0] < 0.05 and 1e-4 < info["data_projection"] < 0.05


def test_states_off_the_constraints_are_projected_saying_how_far():
    """project() moves a four-bar state 1e-3 off its loop closure back onto it (|Phi| and
    |G x'| within 1e-10) and reports the move in the mass metric; from_obs does the same
    for a noisy observation; a state 3 m off, or NaN, is refused naming it."""
    fam = _fourbar_fitted()
    model = fam.discrete_model()
    n = fam.layout.n
    on = _fourbar_states(fam, 3, 9)
    rng = np.random.default_rng(2)
    off = on + np.concatenate([1e-3 * rng.normal(size=(3, n)), 1e-2 * rng.normal(size=(3, n))], 1)
    P, distance = fam.project(off)
    m = np.diag(fam.mass_matrix())
    want = np.sqrt(np.einsum("bi,i,bi->b", P[:, :n] - off[:, :n], m, P[:, :n] - off[:, :n]))
    np.testing.assert_allclose(distance, want, rtol=1e-12)
    assert np.all(distance > 1e-4) and np.all(distance < 1e-2)
    assert np.abs(np.asarray(model.constraint.map(3)(P.T))).max() <= 1e-10
    assert np.abs(P - on).max() < 0.05
    same, zero = fam.project(on)
    np.testing.assert_allclose(same, on, atol=1e-12)
    assert zero.max() < 1e-12
    obs = np.concatenate(fam.layout.source.assemble(0.7, 1.0)) + [2e-3, -1e-3, 1e-3, 0, 0, 0]
    x = np.asarray(model.from_obs(obs)).ravel()
    assert np.abs(np.asarray(model.constraint(x))).max() <= 1e-10
    far = on[:1].copy()
    far[0, 0] += 3.0
    with pytest.raises(InputError, match=r"state 0 is no noisy state of FourBarMaximal: .* by"):
        fam.project(far)
    bad = on[:2].copy()
    bad[1, 3] = np.nan
    with pytest.raises(InputError, match=r"states must be finite, got .*nan.* at row 1"):
        fam.project(bad)
    with pytest.raises(InputError, match=r"states must have shape \(m, 18\)"):
        fam.project(on[:, :9])


def test_a_maximal_description_without_constraints_is_refused():
    from vimpc.mechanics import Pendulum

    class FreeRod(Pendulum):
        actuated = ()

        def joints(self):
            return ()

    with pytest.raises(InputError, match=r"FreeRodMaximal\) has no holonomic constraints"):
        CLNNModel(FreeRod(friction=[]), DT, **TINY)


def test_nan_data_are_refused_naming_where():
    data = _pendulum()
    obs = np.array(data.obs)
    obs[2, 5, 1] = np.nan
    with pytest.raises(InputError, match=r"Dataset.obs must be finite, got nan at trajectory 2"):
        Dataset(data.t, obs, data.states, data.inputs, data.dt, dict(data.metadata))


@pytest.mark.parametrize("cls", [CLNNModel, CHNNModel])
def test_the_init_setting_reaches_the_network(cls, monkeypatch):
    # `init` draws the potential network's first weights (orthogonal: the authors'); it is
    # refused by name when unknown
    from vimpc.models import _torch_casadi

    real, seen = _torch_casadi.mlp, []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("init"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_torch_casadi, "mlp", recording)
    system = _env("vimpc/Pendulum-v0").nominal_system
    fam = cls(system, DT, epochs=1, init="orthogonal", **TINY).fit(_pendulum())
    assert seen == ["orthogonal"] and fam.info()["settings"]["init"] == "orthogonal"
    with pytest.raises(InputError, match="init must be one of"):
        cls(system, DT, init="xavier")
