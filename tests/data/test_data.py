"""Tests of vimpc.data: sampling, excitation, datasets and rollouts."""

from __future__ import annotations

import os

import casadi as ca
import gymnasium
import numpy as np
import pytest
from scipy.stats import qmc

from vimpc.data import (
    Dataset,
    add_noise,
    chirp,
    halton,
    make_excitation,
    project_onto_constraints,
    project_velocity,
    random_steps,
    rollout_env,
    rollout_model,
    uniform,
    zero,
)
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError, SolverError

# ---------------------------------------------------------------- sampling


def test_halton_is_deterministic_and_in_the_box():
    low, high = [-1.0, 0.0, 2.0], [1.0, 0.5, 2.0]  # a zero-width coordinate is allowed
    a = halton(low, high, 100, seed=3)
    assert a.dtype == np.float64 and a.shape == (100, 3)
    np.testing.assert_array_equal(a, halton(low, high, 100, seed=3))
    assert not np.array_equal(a, halton(low, high, 100, seed=4))
    assert np.all(a >= low) and np.all(a <= high)
    np.testing.assert_array_equal(a[:, 2], 2.0)


def test_unscrambled_halton_is_the_plain_sequence_without_zero():
    # radical inverse in base 2: 1/2, 1/4, 3/4, 1/8, 5/8; base 3: 1/3, 2/3, 1/9, 4/9, 7/9
    expected = np.array(
        [[1 / 2, 1 / 3], [1 / 4, 2 / 3], [3 / 4, 1 / 9], [1 / 8, 4 / 9], [5 / 8, 7 / 9]]
    )
    np.testing.assert_allclose(halton([0, 0], [1, 1], 5, scramble=False), expected, rtol=1e-15)
    # scaled to [-2, 2]
    np.testing.assert_allclose(
        halton([-2, -2], [2, 2], 5, scramble=False), -2 + 4 * expected, rtol=1e-15
    )


def test_halton_has_lower_discrepancy_than_uniform_random():
    n = 256
    d_halton = qmc.discrepancy(halton([0, 0], [1, 1], n, seed=0), method="L2-star")
    d_random = [
        qmc.discrepancy(uniform([0, 0], [1, 1], n, rng=s), method="L2-star") for s in range(5)
    ]
    assert d_halton < 0.5 * min(d_random)


def test_uniform_is_deterministic_and_in_the_box():
    a = uniform([0, -3], [1, -2], 50, rng=7)
    np.testing.assert_array_equal(a, uniform([0, -3], [1, -2], 50, rng=np.random.default_rng(7)))
    assert np.all(a[:, 0] >= 0) and np.all(a[:, 0] <= 1)
    assert np.all(a[:, 1] >= -3) and np.all(a[:, 1] <= -2)


@pytest.mark.parametrize("sampler", [halton, uniform])
def test_bounds_errors_name_index_and_values(sampler):
    kw = {"seed": 0} if sampler is halton else {"rng": 0}
    with pytest.raises(InputError, match=r"index 1 low=2\.5 > high=1\.0"):
        sampler([0.0, 2.5], [1.0, 1.0], 4, **kw)
    with pytest.raises(InputError, match="same length"):
        sampler([0.0, 0.0], [1.0], 4, **kw)
    with pytest.raises(InputError, match="finite"):
        sampler([0.0, np.nan], [1.0, 1.0], 4, **kw)
    with pytest.raises(InputError, match="positive integer"):
        sampler([0.0], [1.0], 0, **kw)


def test_uniform_refuses_unseeded_rng():
    with pytest.raises(InputError, match="seed"):
        uniform([0], [1], 3, rng=None)


def _circle(q):
    return np.array([q @ q - 1.0])


def _circle_jac(q):
    return 2.0 * q[None, :]


def test_projection_onto_circle():
    q0 = np.array([2.0, 0.5])
    q = project_onto_constraints(q0, _circle, _circle_jac)
    assert abs(_circle(q)[0]) <= 1e-12
    # J^T is along q, so every Gauss-Newton step stays on the ray through q0
    np.testing.assert_allclose(q, q0 / np.linalg.norm(q0), rtol=0, atol=1e-12)


def test_projection_reports_failure_with_residual():
    with pytest.raises(SolverError, match=r"residual max\|g\(q\)\| = [0-9.e+-]+"):
        project_onto_constraints([30.0, 0.0], _circle, _circle_jac, max_iter=2)
    with pytest.raises(SolverError, match="singular"):
        project_onto_constraints([0.0, 0.0], _circle, _circle_jac)


def test_velocity_projection_lies_in_null_space():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 5))
    v = rng.standard_normal(5)
    w = project_velocity(v, A)
    assert np.max(np.abs(A @ w)) <= 1e-14
    np.testing.assert_allclose(project_velocity(w, A), w, atol=1e-15)  # idempotent
    # v - w lies in the row space of A: orthogonal to the null space
    null = np.linalg.svd(A)[2][2:]
    assert np.max(np.abs(null @ (v - w))) <= 1e-14
    # holonomic tangent space of the circle: radial velocity is removed
    q = np.array([0.6, 0.8])
    np.testing.assert_allclose(project_velocity(q + [0.8, -0.6], _circle_jac(q)), [0.8, -0.6])


# -------------------------------------------------------------- excitation


def _sign_changes(x):
    s = np.sign(x)
    s = s[s != 0]
    return int(np.count_nonzero(s[1:] != s[:-1]))


def test_chirp_frequency_sweeps_linearly():
    dt, n, f0, f1 = 1e-3, 10_000, 1.0, 5.0  # horizon T = 10 s
    u = chirp(n, 1, dt, amplitude=2.0, f0=f0, f1=f1)
    assert u.shape == (n, 1)
    assert np.max(np.abs(u)) <= 2.0
    # phase at T is 2 pi (f0 + f1)/2 T: (f0 + f1) T = 60 zero crossings
    assert abs(_sign_changes(u[:, 0]) - 60) <= 1
    # first half: f0 T/2 + (f1 - f0) T/8 = 10 cycles -> 20 crossings, second half 40
    assert abs(_sign_changes(u[: n // 2, 0]) - 20) <= 1
    assert abs(_sign_changes(u[n // 2 :, 0]) - 40) <= 1


def test_chirp_channels_same_or_shifted():
    same = chirp(200, 3, 0.01, amplitude=[1.0, 2.0, 3.0], f0=0.5, f1=2.0)
    np.testing.assert_allclose(same[:, 1], 2 * same[:, 0])
    shifted = chirp(200, 3, 0.01, f0=0.5, f1=2.0, phase_shift=True)
    assert not np.allclose(shifted[:, 0], shifted[:, 1])
    np.testing.assert_allclose(shifted[0], np.sin(2 * np.pi * np.arange(3) / 3))
    with pytest.raises(InputError, match="Nyquist"):
        chirp(100, 1, 0.1, f0=1.0, f1=6.0)


def test_random_steps_hold_levels_within_bounds():
    low, high, hold = np.array([-1.0, 0.0]), np.array([1.0, 10.0]), 7
    u = random_steps(50, 2, low, high, hold, rng=1)
    assert u.shape == (50, 2)
    assert np.all(u >= low) and np.all(u <= high)
    for start in range(0, 50, hold):
        block = u[start : start + hold]
        np.testing.assert_array_equal(block, np.broadcast_to(block[0], block.shape))
    levels = u[::hold]
    assert np.all(levels[1:] != levels[:-1])  # a new level every hold steps
    np.testing.assert_array_equal(u, random_steps(50, 2, low, high, hold, rng=1))


def test_make_excitation_dispatches_and_rejects_typos():
    np.testing.assert_array_equal(make_excitation("zero", 5, 2, 0.1, rng=0), zero(5, 2))
    np.testing.assert_array_equal(
        make_excitation("random_steps", 30, 1, 0.1, rng=3, hold=5, low=-2.0),
        random_steps(30, 1, -2.0, 1.0, 5, rng=3),
    )
    np.testing.assert_array_equal(
        make_excitation("chirp", 30, 1, 0.1, rng=0, f1=2.0), chirp(30, 1, 0.1, f1=2.0)
    )
    with pytest.raises(InputError, match="did you mean 'chirp'"):
        make_excitation("chrip", 5, 1, 0.1, rng=0)
    with pytest.raises(InputError, match="did you mean 'hold'"):
        make_excitation("random_steps", 5, 1, 0.1, rng=0, hodl=3)


# ----------------------------------------------------------------- dataset


def _dataset(n=4, T=5, nobs=4, nu=2, seed=0):
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((n, T + 1, nobs))
    return Dataset(
        t=np.tile(np.arange(T + 1) * 0.05, (n, 1)),
        obs=states + 0.01 * rng.standard_normal(states.shape),
        states=states,
        inputs=rng.standard_normal((n, T, nu)),
        dt=0.05,
        metadata={
            "system": "toy",
            "parameters": {"m": np.float64(1.5), "l": np.array([0.3, 0.4])},
            "noise": 0.01,
            "seed": seed,
            "excitation": ("chirp", {"f0": 0.1}),
        },
    )


def test_save_load_round_trip_is_bit_exact(tmp_path):
    d = _dataset()
    path = d.save(tmp_path / "d.npz")
    e = Dataset.load(path)
    for name in ("t", "obs", "states", "inputs"):
        a, b = getattr(d, name), getattr(e, name)
        assert a.dtype == b.dtype == np.float64 and a.tobytes() == b.tobytes()
    assert e.dt == d.dt
    assert e.metadata == d.metadata
    assert e.metadata["parameters"] == {"m": 1.5, "l": [0.3, 0.4]}
    assert e.metadata["excitation"] == ["chirp", {"f0": 0.1}]


def test_save_refuses_overwrite_and_leaves_no_temp_file(tmp_path, monkeypatch):
    d = _dataset()
    path = tmp_path / "d.npz"
    d.save(path)
    assert os.listdir(tmp_path) == ["d.npz"]
    with pytest.raises(FileExistsError, match="d.npz"):
        _dataset(seed=1).save(path)
    assert Dataset.load(path).metadata["seed"] == 0
    _dataset(seed=1).save(path, overwrite=True)
    assert Dataset.load(path).metadata["seed"] == 1

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "link", boom)
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        d.save(tmp_path / "e.npz")
    assert os.listdir(tmp_path) == ["d.npz"]


def test_load_rejects_files_that_are_not_datasets(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    np.savez(tmp_path / "b.npz", x=np.zeros(3))
    (tmp_path / "c.npz").write_text("hello")
    for name in ("a.npy", "b.npz", "c.npz"):
        with pytest.raises(InputError, match="not a vimpc dataset"):
            Dataset.load(tmp_path / name)


def test_dataset_validates_shapes_and_metadata():
    d = _dataset()
    with pytest.raises(
        InputError, match=r"Dataset.states must have shape \(4, 6, 4\).*got \(4, 5, 4\)"
    ):
        d.replace(states=d.states[:, :-1])
    with pytest.raises(InputError, match=r"Dataset.inputs must have shape \(4, 5, 2\)"):
        d.replace(inputs=d.inputs[:, :-1])
    with pytest.raises(InputError, match="Dataset.dt"):
        d.replace(dt=0.0)
    with pytest.raises(InputError, match="JSON"):
        d.replace(metadata={"f": object()})
    assert not d.obs.flags.writeable


def test_pairs_and_triples():
    d = _dataset(n=3, T=5, nobs=4, nu=2)
    X, U, Xn = d.pairs()
    assert X.shape == Xn.shape == (15, 4) and U.shape == (15, 2)
    np.testing.assert_array_equal(X[2 * 5 + 3], d.obs[2, 3])
    np.testing.assert_array_equal(Xn[2 * 5 + 3], d.obs[2, 4])
    np.testing.assert_array_equal(U[2 * 5 + 3], d.inputs[2, 3])
    np.testing.assert_array_equal(d.pairs("states")[0][7], d.states[1, 2])
    Qp, Q, Qn, Up, Uk = d.triples(nq=2, with_inputs=True)
    assert Qp.shape == Q.shape == Qn.shape == (12, 2) and Up.shape == Uk.shape == (12, 2)
    row, i, k = 1 * 4 + 2, 1, 3  # time k = 3 of trajectory 1
    np.testing.assert_array_equal(Qp[row], d.obs[i, k - 1, :2])
    np.testing.assert_array_equal(Q[row], d.obs[i, k, :2])
    np.testing.assert_array_equal(Qn[row], d.obs[i, k + 1, :2])
    np.testing.assert_array_equal(Up[row], d.inputs[i, k - 1])
    np.testing.assert_array_equal(Uk[row], d.inputs[i, k])
    assert len(d.triples(nq=2)) == 3
    with pytest.raises(InputError, match="nq"):
        d.triples(nq=5)


def test_split_by_trajectory():
    d = _dataset(n=10)
    train, test = d.split(0.7, seed=0)
    assert (len(train), len(test)) == (7, 3) and train.n_trajectories == 7
    idx = train.metadata["split"]["indices"] + test.metadata["split"]["indices"]
    assert sorted(idx) == list(range(10))
    np.testing.assert_array_equal(test.obs, d.obs[test.metadata["split"]["indices"]])
    again, _ = d.split(0.7, seed=0)
    np.testing.assert_array_equal(again.obs, train.obs)
    with pytest.raises(InputError, match="fraction"):
        d.split(1.0, seed=0)


def test_add_noise():
    d = _dataset(n=20, T=50)
    clean = d.replace(obs=d.states)
    noisy = add_noise(clean, [0.1, 0.0, 0.0, 0.2], rng=0)
    np.testing.assert_array_equal(noisy.states, d.states)
    err = (noisy.obs - noisy.states).reshape(-1, 4)
    np.testing.assert_allclose(err.std(axis=0), [0.1, 0.0, 0.0, 0.2], rtol=0.1)
    assert noisy.metadata["added_noise_std"] == [0.1, 0.0, 0.0, 0.2]
    np.testing.assert_array_equal(add_noise(d.states, 0.1, rng=0), add_noise(d.states, 0.1, rng=0))
    with pytest.raises(InputError, match="std"):
        add_noise(d, -1.0, rng=0)


# ----------------------------------------------------------------- rollout


def _linear_model():
    A = np.array([[1.0, 0.1], [-0.2, 0.95]])
    B = np.array([[0.0], [0.1]])
    c = np.array([0.5, -1.0])
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 1)
    ident = ca.Function("id", [x], [x])
    model = DiscreteModel(
        dt=0.1,
        nx=2,
        nu=1,
        np=1,
        nobs=2,
        step=ca.Function("step", [x, u, p], [A @ x + B @ u + c * p]),
        from_obs=ident,
        to_obs=ident,
        state_names=("q", "v"),
        input_names=("f",),
        param_names=("offset",),
        p_default=np.array([0.0]),
    )
    return model, A, B, c


def test_rollout_model_matches_linear_recursion():
    model, A, B, c = _linear_model()
    rng = np.random.default_rng(0)
    x0s, inputs = rng.standard_normal((3, 2)), rng.standard_normal((3, 8, 1))
    p = np.array([[0.0], [1.0], [-2.0]])
    xs = rollout_model(model, x0s, inputs, p=p)
    assert xs.shape == (3, 9, 2)
    for i in range(3):
        x = x0s[i]
        np.testing.assert_array_equal(xs[i, 0], x)
        for k in range(8):
            x = A @ x + B @ inputs[i, k] + c * p[i, 0]
            np.testing.assert_allclose(xs[i, k + 1], x, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(
        rollout_model(model, x0s, inputs)[0], model.simulate(x0s[0], inputs[0])
    )
    with pytest.raises(InputError, match="inputs must have shape"):
        rollout_model(model, x0s, inputs[:2])


class _PointMass(gymnasium.Env):
    """Double integrator, dt = 0.1 s, force clipped to [-1, 1] N, noisy observation."""

    dt = 0.1

    def __init__(self, terminate_at=None):
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float64)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.terminate_at = terminate_at

    def _out(self, info):
        obs = self.state + 0.01 * self.np_random.standard_normal(2)
        return obs, {"state": self.state.copy(), **info}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        scale = (options or {}).get("scale", 1.0)
        self.state, self.k = scale * self.np_random.uniform(-1, 1, 2), 0
        return self._out({})

    def step(self, action):
        a = np.clip(action, -1.0, 1.0)
        q, v = self.state
        v = v + self.dt * a[0]
        self.state, self.k = np.array([q + self.dt * v, v]), self.k + 1
        obs, info = self._out({"applied_action": a})
        return obs, 0.0, self.k == self.terminate_at, False, info

    def metadata_for_dataset(self):
        return {"system": "point_mass", "noise_std": 0.01}


def test_rollout_env_records_true_states_and_applied_inputs():
    n, T = 3, 20
    u = 2.0 * np.sin(np.arange(T) * 0.5)[None, :, None].repeat(n, axis=0)
    d = rollout_env(_PointMass(), n, T, u, seed=10, reset_options={"scale": 0.5})
    assert d.obs.shape == d.states.shape == (n, T + 1, 2) and d.inputs.shape == (n, T, 1)
    np.testing.assert_array_equal(d.inputs, np.clip(u, -1.0, 1.0))
    np.testing.assert_allclose(d.t[1], np.arange(T + 1) * 0.1)
    for i in range(n):
        env = _PointMass()
        _, info = env.reset(seed=10 + i, options={"scale": 0.5})
        np.testing.assert_array_equal(d.states[i, 0], info["state"])
        for k in range(T):  # the recorded true states obey the dynamics with applied inputs
            q, v = d.states[i, k]
            v = v + 0.1 * d.inputs[i, k, 0]
            np.testing.assert_allclose(d.states[i, k + 1], [q + 0.1 * v, v], atol=1e-15)
    noise = d.obs - d.states
    assert 0 < np.abs(noise).max() < 0.1
    again = rollout_env(_PointMass(), n, T, u, seed=10, reset_options={"scale": 0.5})
    np.testing.assert_array_equal(again.obs, d.obs)
    m = d.metadata
    assert m["env_class"] == "_PointMass" and m["env_id"] is None
    assert (m["seed"], m["n_steps"], m["dt"], m["system"]) == (10, T, 0.1, "point_mass")
    assert m["reset_options"] == {"scale": 0.5}


def test_rollout_env_refuses_termination_and_truncation():
    u = np.zeros((2, 10, 1))
    with pytest.raises(InputError, match="terminated at step 4"):
        rollout_env(_PointMass(terminate_at=4), 2, 10, u, seed=0)
    wrapped = gymnasium.wrappers.TimeLimit(_PointMass(), max_episode_steps=5)
    with pytest.raises(InputError, match="truncated at step 5"):
        rollout_env(wrapped, 2, 10, u, seed=0)
    d = rollout_env(wrapped, 2, 5, u[:, :5], seed=0)  # dt is found through the wrapper
    assert d.dt == 0.1
    with pytest.raises(InputError, match="action_space"):
        rollout_env(_PointMass(), 2, 10, np.zeros((2, 10, 2)), seed=0)
