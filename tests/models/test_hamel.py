"""The hamel family: the rolling disk's connection learned in Hamel's moving frame.

One small fit (40 consistent disk trajectories of 6 steps, the authors' 3 x 20 sine
network, 100 epochs of one-step rollouts, ~7 s) is shared by the checks.
"""

from __future__ import annotations

import functools

import casadi as ca
import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc.data import make_excitation, rollout_env
from vimpc.data.dataset import Dataset
from vimpc.errors import FitWarning, InputError, NotFittedError
from vimpc.mechanics import Pendulum, RollingDisk
from vimpc.models.families.hamel import HamelModel, LearnedConstraintSystem, _TorchHamel

DT = 0.05
DISK = RollingDisk()
R = DISK.params["R"]
SETTINGS = {"hidden": [20, 20, 20], "epochs": 100, "window": 1, "lr": 1e-2, "batch": 0}


@functools.cache
def _env():
    return gymnasium.make(
        "vimpc/RollingDisk-v0", dt=DT, substep=1e-3, perturbation=0.0, obs_noise=0.0
    ).unwrapped


def disk_data(n: int, steps: int, seed: int, consistent: bool = True) -> Dataset:
    """Excited disk trajectories from starts spread over the heading, with the consistent
    velocity (or, ``consistent=False``, a sideways slip of 0.05 m/s)."""
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, 2, DT, rng, low=[-2, -1], high=[2, 1])
            for _ in range(n)
        ]
    )
    starts = []
    for _ in range(n):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi), *rng.uniform(-1, 1, 2)])
        v = DISK.consistent_velocity(q, rng.uniform(-2, 2), rng.uniform(-1.5, 1.5))
        starts.append(np.concatenate([q, v]))
    data = rollout_env(_env(), n, steps, inputs, seed, initial_states=np.array(starts))
    if consistent:
        return data
    obs = data.obs.copy()
    obs[:, 0, 6] += 0.05
    return Dataset(data.t, obs, data.states, data.inputs, data.dt, data.metadata)


@pytest.fixture(scope="module")
def fitted():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield HamelModel(DISK, DT, **SETTINGS).fit(disk_data(40, 6, 0))
    finally:
        torch.set_num_threads(threads)


def _configurations(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack(
        [rng.uniform(-1, 1, n), rng.uniform(-np.pi, np.pi, n), *rng.uniform(-1, 1, (2, n))]
    )


def test_connection_casadi_and_torch_agree_in_value_and_jacobian(fitted):
    import torch

    net = fitted.torch_network()
    q = ca.MX.sym("q", 4)
    A = fitted.connection()(q)
    both = ca.Function("AJ", [q], [A, ca.jacobian(A, q)])
    for x in _configurations(10, 1):
        qt = torch.from_numpy(x)
        value = net(qt[None])[0].detach().numpy()
        jac = torch.autograd.functional.jacobian(lambda z: net(z[None])[0], qt).numpy()
        a, J = (np.asarray(v, dtype=np.float64) for v in both(x))
        np.testing.assert_allclose(a.ravel(), value, rtol=0, atol=1e-10)
        np.testing.assert_allclose(J, jac, rtol=0, atol=1e-10)


def test_hamel_field_casadi_and_torch_agree(fitted):
    import torch

    f = fitted.vector_field()
    dyn = fitted.torch_dynamics()
    rng = np.random.default_rng(2)
    Q = _configurations(6, 2)
    P, U = rng.normal(size=(6, 2)), rng.uniform(-1, 1, (6, 2))
    qd, pd = dyn.field(torch.from_numpy(Q), torch.from_numpy(P), torch.from_numpy(U))
    for i in range(6):
        cq, cp = (np.asarray(v).ravel() for v in f(Q[i], P[i], U[i]))
        np.testing.assert_allclose(cq, qd[i].detach().numpy(), rtol=0, atol=1e-10)
        np.testing.assert_allclose(cp, pd[i].detach().numpy(), rtol=0, atol=1e-10)


def test_hamel_equations_equal_lagrange_dalembert_on_the_learned_distribution(fitted):
    # Hamel's form (structure coefficients of the Lie brackets plus u_a[l]) against the
    # Lagrange-d'Alembert principle on D~ written without brackets:
    # d/dt (S^T M q') = S'^T M q' + S^T F with S' the derivative of S along q'
    f = fitted.vector_field()
    S_fn = fitted.distribution()
    M = DISK.function("M")(np.zeros(4)).full()
    B = DISK.function("B")(np.zeros(4)).full()
    q = ca.MX.sym("q", 4)
    dS = ca.Function("dS", [q], [ca.jacobian(ca.vec(S_fn(q)), q)])
    rng = np.random.default_rng(3)
    for x in _configurations(6, 3):
        p, u = rng.normal(size=2), rng.uniform(-1, 1, 2)
        qdot, pdot = (np.asarray(v).ravel() for v in f(x, p, u))
        S = S_fn(x).full()
        Sdot = (dS(x).full() @ qdot).reshape(2, 4).T  # column-major vec
        expected = Sdot.T @ M @ qdot + S.T @ B @ u
        np.testing.assert_allclose(pdot, expected, rtol=0, atol=1e-10)
        np.testing.assert_allclose(S.T @ M @ qdot, p, rtol=0, atol=1e-12)


def test_the_true_connection_gives_the_disks_reduced_motion():
    # (I + m R^2) theta'' = u_drive, J phi'' = u_steer and x' = R cos(phi) theta' on the disk
    import torch

    def true_connection(Q):
        phi = Q[:, 1]
        return torch.stack([0.0 * phi, -R * torch.cos(phi), -R * torch.sin(phi)], 1)

    M = DISK.function("M")(np.zeros(4)).full()
    B = DISK.function("B")(np.zeros(4)).full()
    dyn = _TorchHamel(true_connection, M, B, np.zeros((4, 4)))
    rng = np.random.default_rng(4)
    Q = torch.from_numpy(_configurations(5, 4))
    V = torch.from_numpy(
        np.array([DISK.consistent_velocity(q, *rng.normal(size=2)) for q in Q.numpy()])
    )
    U = torch.from_numpy(rng.uniform(-1, 1, (5, 2)))
    P = dyn.momenta(Q, V)
    qd, pd = dyn.field(Q, P, U)
    np.testing.assert_allclose(qd.detach().numpy(), V.numpy(), rtol=0, atol=1e-12)
    inertia = np.array([DISK.params["I"] + DISK.params["m"] * R**2, DISK.params["J"]])
    np.testing.assert_allclose(P.numpy(), inertia * V.numpy()[:, :2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(pd.detach().numpy(), U.numpy(), rtol=0, atol=1e-12)


def test_exported_velocity_constraint_is_the_learned_one_and_holds_on_predictions(fitted):
    m = fitted.discrete_model()
    a = fitted.constraint_matrix()
    rng = np.random.default_rng(5)
    for x in np.column_stack([_configurations(5, 5), rng.normal(size=(5, 4))]):
        got = np.asarray(m.velocity_constraint(x)).ravel()
        np.testing.assert_allclose(got, a(x[:4]).full() @ x[4:], rtol=0, atol=1e-12)
    x = disk_data(1, 1, 9).obs[0, 0]
    worst = 0.0
    for k in range(40):
        x = np.asarray(m.step(x, [np.sin(0.3 * k), 0.5 * np.cos(0.2 * k)], [])).ravel()
        worst = max(worst, float(np.max(np.abs(np.asarray(m.velocity_constraint(x))))))
    assert np.all(np.isfinite(x)) and worst < 1e-10
    # the exported step moves as the learned constraint says: x' = e_x theta', y' = e_y theta'
    assert isinstance(fitted.learned_system(), LearnedConstraintSystem)
    assert m.info["model"] == "hamel" and m.info["inconsistent_starts"] == 0


def test_training_on_many_trajectories_recovers_the_connection(fitted):
    Q = _configurations(200, 6)  # held-out configurations, in the data's range
    learned = fitted.constraint_error(Q)
    net = fitted.untrained_network()
    import torch

    A0 = net(torch.from_numpy(Q)).detach().numpy()
    ident0 = np.column_stack([A0[:, 1] - A0[:, 0] * Q[:, 3], A0[:, 2] + A0[:, 0] * Q[:, 2]])
    true = -R * np.column_stack([np.cos(Q[:, 1]), np.sin(Q[:, 1])])
    untrained = float(np.sqrt(np.mean(np.sum((ident0 - true) ** 2, 1))))
    assert untrained > 0.25  # a network near zero: the error is about R
    assert learned["connection_rms"] < 0.25 * untrained, (learned, untrained)
    assert fitted.training_.loss[-1] < 0.05 * fitted.training_.loss[0]


def test_a_conformal_bound_is_calibrated_and_exported():
    fam = HamelModel(DISK, DT, **{**SETTINGS, "epochs": 3, "bound": "conformal"})
    fam.fit(disk_data(12, 6, 10), calibration=disk_data(12, 6, 11))
    m = fam.discrete_model()
    assert m.bound is not None and m.delta == 0.05
    e = np.asarray(m.bound(disk_data(1, 1, 12).obs[0, 0], [0.1, 0.1], [])).ravel()
    assert e.shape == (8,) and np.all(np.isfinite(e)) and np.all(e > 0)


# -- bad input ----------------------------------------------------------------------------------


def test_a_system_that_is_not_the_split_is_refused():
    with pytest.raises(InputError, match=r"R x SE\(2\).*Pendulum has nq = 1"):
        HamelModel(Pendulum(), DT)


def test_bad_settings_are_refused():
    with pytest.raises(InputError, match="hidden"):
        HamelModel(DISK, DT, hidden=[])
    with pytest.raises(InputError, match="windw"):
        HamelModel(DISK, DT, windw=3)
    with pytest.raises(InputError, match="activation"):
        HamelModel(DISK, DT, activation="relu")


def test_inconsistent_starts_are_warned_of_with_how_far():
    data = disk_data(12, 3, 13, consistent=False)
    fam = HamelModel(DISK, DT, **{**SETTINGS, "epochs": 1})
    with pytest.warns(
        FitWarning, match=r"12 of 12 trajectories start off .*\|A\(q\) v\| up to 0\.05"
    ):
        fam.fit(data)
    assert fam.inconsistent_starts_ == 12


def test_short_data_and_use_before_fit_are_refused():
    fam = HamelModel(DISK, DT, **{**SETTINGS, "window": 5})
    with pytest.raises(InputError, match="window = 5 .* the data have 4"):
        fam.fit(disk_data(4, 3, 14))
    with pytest.raises(NotFittedError, match="hamel"):
        fam.connection()
    with pytest.raises(InputError, match="MIN_WINDOWS"):
        HamelModel(DISK, DT, **{**SETTINGS, "window": 3}).fit(disk_data(2, 4, 15))


def test_nan_data_are_refused_naming_where():
    data = disk_data(4, 3, 16)
    obs = data.obs.copy()
    obs[2, 1, 3] = np.nan
    # the data a fit takes are a Dataset, whose arrays are read-only once checked
    with pytest.raises(InputError, match="obs must be finite, got nan at trajectory 2, step 1"):
        Dataset(data.t, obs, data.states, data.inputs, data.dt, data.metadata)
    with pytest.raises(ValueError, match="read-only"):
        data.obs[2, 1, 3] = np.nan


def test_a_periodic_heading_makes_the_connection_periodic_and_the_raw_one_does_not(fitted):
    # the default: the network sees (theta, cos phi, sin phi, x, y), in torch and in CasADi
    Q = _configurations(8, 7)
    turned = Q + np.array([0.0, 2 * np.pi, 0.0, 0.0])
    A = fitted.connection().map(len(Q))
    np.testing.assert_allclose(np.asarray(A(turned.T)), np.asarray(A(Q.T)), atol=1e-12)
    raw = HamelModel(DISK, DT, **{**SETTINGS, "epochs": 1, "heading": "raw"})
    raw.fit(disk_data(12, 3, 17))
    B = raw.connection().map(len(Q))
    assert np.abs(np.asarray(B(turned.T)) - np.asarray(B(Q.T))).max() > 1e-3
    with pytest.raises(InputError, match="heading"):
        HamelModel(DISK, DT, heading="angle")


def test_constraint_error_checks_its_configurations(fitted):
    with pytest.raises(InputError, match=r"shape \(n, 4\), got \(3,\)"):
        fitted.constraint_error(np.zeros(3))


def test_the_learned_system_keeps_the_base_mechanics_and_checks_its_constraint():
    q = ca.SX.sym("q", 4)
    half = ca.Function("a", [q], [0.5 * DISK.nonholonomic(q)])
    s = LearnedConstraintSystem(DISK, half).with_params(friction=[0.1, 0.2])
    assert s.name == "RollingDisk" and s.friction.tolist() == [0.1, 0.2]
    x = np.array([0.2, 0.7, 0.1, -0.3])
    np.testing.assert_array_equal(s.nonholonomic(x), 0.5 * DISK.nonholonomic(x))
    np.testing.assert_array_equal(s.function("M")(x).full(), DISK.function("M")(x).full())
    wrong = ca.Function("a", [ca.SX.sym("q", 3)], [ca.SX.zeros(2, 4)])
    with pytest.raises(InputError, match=r"q \(4\).*inputs \[\(3, 1\)\]"):
        LearnedConstraintSystem(DISK, wrong)


def test_elu_alpha_sets_the_slope_below_zero_of_the_exported_network():
    # the authors' alpha 0.5 puts a kink in the connection (slope 0.5 below the ELU's 0, 1
    # above); alpha 1 makes it continuously differentiable: checked on the CasADi export
    from vimpc.models._torch_casadi import casadi_function

    for alpha in (0.5, 1.0):
        # one hidden unit: Linear(4, 1) (bias 0), ELU(alpha), Linear(1, 3)
        net = HamelModel(DISK, DT, hidden=[1], elu_alpha=alpha, heading="raw").untrained_network()
        assert net[1].alpha == alpha
        fn = casadi_function(net, name="connection")
        q = ca.MX.sym("q", 4)
        slope = ca.Function("slope", [q], [ca.jacobian(fn(q), q)])
        w = net[0].weight.detach().numpy()[0]
        # inputs along w with the hidden unit's pre-activation just below and above 0
        below, above = (np.asarray(slope(s * 1e-6 * w / (w @ w))) for s in (-1.0, 1.0))
        ratio = below[np.abs(above) > 1e-12] / above[np.abs(above) > 1e-12]
        np.testing.assert_allclose(ratio, alpha, rtol=1e-4)
    with pytest.raises(InputError, match="elu_alpha"):
        HamelModel(DISK, DT, elu_alpha=0.0)
