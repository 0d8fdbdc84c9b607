"""An implicit step never returns something that only looks like an answer.

A Newton solve fed NaN stops at its initial guess, and one that does not converge stops at
its last iterate; the midpoint step of a fast cart-pole has spurious roots with residual
1e-12. Each of these must come out as NaN (or an error where Python calls), be refused by
the data, and be counted where results are reported.
"""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest

from vimpc.closedloop import Trajectory, episode_metrics, summarize
from vimpc.data import Dataset, onto_constraints, rollout_env
from vimpc.errors import InputError
from vimpc.integrators import FORMS, RULES, VariationalIntegrator, _newton
from vimpc.mechanics import CartPole, FourBar, Pendulum
from vimpc.models import NominalModel
from vimpc.models.calibration import calibrate

NAN = float("nan")


def _unguarded(integrator: VariationalIntegrator, h: float) -> ca.Function:
    """The step as it was built before the acceptance test: the rootfinder's answer as is."""
    n = integrator.system.nq
    residual = integrator.residual_function(h)
    z, x = ca.SX.sym("z", integrator.nx), ca.SX.sym("x", integrator.nx)
    u, th = ca.SX.sym("u", integrator.system.nu), ca.SX.sym("theta", integrator.n_theta)
    scale = _newton.state_scale(x[:n], x[n:], h)
    implicit = ca.Function("G", [z, x, u, th], [residual(x, u, scale * z, th)])
    newton = _newton.solve("raw", implicit, False, integrator.residual_tolerance)
    guess = ca.vertcat(x[:n] + h * x[n:], x[n:]) / scale
    return ca.Function("raw", [x, u, th], [scale * newton(guess, x, u, th)])


def _value_and_jacobian(step: ca.Function, nx: int, nu: int) -> ca.Function:
    x, u = ca.MX.sym("x", nx), ca.MX.sym("u", nu)
    y = step(x, u, ca.DM.zeros(0, 1))
    return ca.Function("vj", [x, u], [y, ca.jacobian(y, ca.vertcat(x, u))])


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("form", FORMS)
def test_a_nan_input_gives_nan_for_every_rule_and_form(rule, form):
    integrator = VariationalIntegrator(Pendulum(), rule, form)
    for error_on_fail in (False, True):
        step = integrator.step_function(0.1, error_on_fail=error_on_fail)
        for x, u in (([0.1, 0.2], [NAN]), ([NAN, 0.2], [0.0]), ([0.1, math.inf], [0.0])):
            assert np.all(np.isnan(np.asarray(step(x, u, [])))), (x, u, error_on_fail)
    # the solve itself stops at its guess (0.12, 0.2): what the step used to return
    raw = np.asarray(_unguarded(integrator, 0.1)([0.1, 0.2], [NAN], [])).ravel()
    assert np.all(np.isfinite(raw))
    # and so does the model built on it, over several substeps too
    for substeps in (1, 3):
        model = NominalModel(Pendulum(), 0.3, integrator=rule, form=form, substeps=substeps)
        out = np.asarray(model.discrete_model().step([0.1, 0.2], [NAN], []))
        assert np.all(np.isnan(out))


def test_a_solve_that_does_not_converge_gives_nan_or_raises(monkeypatch):
    # one Newton iteration from the explicit guess leaves the pendulum's large step unsolved
    monkeypatch.setattr(_newton, "MAX_ITER", 1)
    integrator = VariationalIntegrator(Pendulum(), "midpoint")
    x, u = [1.0, 3.0], [0.5]
    raw = _unguarded(integrator, 0.3)(x, u, [])
    r = np.asarray(integrator.residual_function(0.3)(x, u, raw, []))
    assert np.all(np.isfinite(np.asarray(raw))) and np.max(np.abs(r)) > 1e-6
    assert np.all(
        np.isnan(np.asarray(integrator.step_function(0.3, error_on_fail=False)(x, u, [])))
    )
    with pytest.raises(RuntimeError, match="rootfinder"):
        integrator.step_function(0.3, error_on_fail=True)(x, u, [])


@pytest.mark.parametrize("system", [CartPole(), FourBar()], ids=["cartpole", "fourbar"])
def test_the_good_path_keeps_its_value_and_jacobian(system):
    # the controller differentiates through step: on an accepted root the acceptance test
    # must change neither the value nor the implicit-function-theorem derivatives
    rng = np.random.default_rng(0)
    X = rng.uniform(-0.4, 0.4, (4, system.nq + system.nv))
    if system.n_holonomic:
        X = onto_constraints(system, X)
    U = rng.uniform(-1.0, 1.0, (4, system.nu))
    for rule in RULES:
        for form in FORMS:
            integrator = VariationalIntegrator(system, rule, form)
            new = _value_and_jacobian(integrator.step_function(0.02), integrator.nx, system.nu)
            old = _value_and_jacobian(_unguarded(integrator, 0.02), integrator.nx, system.nu)
            for x, u in zip(X, U, strict=True):
                for a, b in zip(new(x, u), old(x, u), strict=True):
                    a, b = np.asarray(a), np.asarray(b)
                    assert np.all(np.isfinite(a))
                    assert np.max(np.abs(a - b)) <= 1e-14 * (1.0 + np.max(np.abs(b))), (rule, form)


# the cart-pole state a 20-step prediction of scenarios/cartpole_safe.toml's validation data
# reaches (trajectory 33, step 16): the pole at 70 rad/s, the largest push
SPURIOUS_X = [-3.61274259, -14.50554208, -9.46063846, -69.92561974]
SPURIOUS_U = [-29.27023943]


def test_the_cartpoles_spurious_midpoint_root_is_refused():
    integrator = VariationalIntegrator(CartPole(), "midpoint")
    raw = _unguarded(integrator, 0.05)(SPURIOUS_X, SPURIOUS_U, [])
    # a root to 1e-11 ...
    r = np.asarray(integrator.residual_function(0.05)(SPURIOUS_X, SPURIOUS_U, raw, []))
    assert np.max(np.abs(r)) < 1e-10
    # ... at 3117 rad/s, where twenty substeps reach 82 rad/s: the energy jumps 234 J -> 4e5 J
    fine = np.asarray(integrator.flow(0.05, 0.0025)(SPURIOUS_X, SPURIOUS_U, [])).ravel()
    assert abs(float(raw[3])) > 3000 and abs(fine[3]) < 100
    error, allowance = integrator.energy_balance(0.05)(SPURIOUS_X, SPURIOUS_U, raw, [])
    assert float(error) > 1000 * float(allowance)
    assert np.all(np.isnan(np.asarray(integrator.step_function(0.05)(SPURIOUS_X, SPURIOUS_U, []))))
    # one step back on the same prediction the root is the physical one, and is kept
    fine_root = np.asarray(integrator.flow(0.05, 0.0025)(SPURIOUS_X, [0.0], []))
    assert np.all(np.isfinite(fine_root))


def test_a_spurious_root_of_a_pendulum_step_fails_the_energy_balance():
    # a constructed case: the midpoint step of a pendulum (m = l = 1) over h = 1 s has
    # several roots; Newton from the explicit guess q + h v = 2.5 lands on one at 7.15 rad,
    # 11.3 rad/s (energy 2.2 J -> 24 J), while the root continuous with the flow, 0.15 rad,
    # -2.7 rad/s, is found from the state itself
    integrator = VariationalIntegrator(Pendulum(), "midpoint")
    h, x, u = 1.0, np.array([0.5, 2.0]), [0.0]
    raw = np.asarray(_unguarded(integrator, h)(x, u, [])).ravel()
    assert raw[0] == pytest.approx(7.152, abs=1e-3)
    assert np.all(np.isnan(np.asarray(integrator.step_function(h)(x, u, []))))
    z, xx, uu = ca.SX.sym("z", 2), ca.SX.sym("x", 2), ca.SX.sym("u", 1)
    residual = integrator.residual_function(h)
    solve = ca.rootfinder(
        "scan", "newton", ca.Function("r", [z, xx, uu], [residual(xx, uu, z, [])]),
        {"abstol": 1e-12, "max_iter": 100},
    )  # fmt: skip
    roots = {}
    for q_guess in np.linspace(-20.0, 20.0, 81):
        try:
            root = np.asarray(solve([q_guess, 0.0], x, u)).ravel()
        except RuntimeError:
            continue
        roots[tuple(np.round(root, 6))] = root
    physical = np.asarray(solve(x, x, u)).ravel()
    assert physical[0] == pytest.approx(0.150, abs=1e-3) and len(roots) >= 3
    balance = integrator.energy_balance(h)
    for root in roots.values():
        assert np.max(np.abs(np.asarray(residual(x, u, root, [])))) < 1e-9
        error, allowance = balance(x, u, root, [])
        kept = float(error) <= float(allowance)
        assert kept == bool(np.max(np.abs(root - physical)) < 1e-6), root


def test_a_noisy_state_off_the_loop_closure_is_not_taken_for_a_spurious_root():
    # a measured four-bar state (fourbar_gpvi_tracking.toml's data), 1e-3 rad off its loop
    # closure and nearly at rest: the step pulls it back onto the constraints, which moves
    # more energy than the state has; the allowance counts that, and the step is kept
    integrator = VariationalIntegrator(FourBar(), "midpoint")
    h = 0.02
    x = [-6.30542626, -0.96113945, -1.68312334, 0.15489276, -0.09817612, -0.09612428]
    u = [-4.44314304]
    step = np.asarray(integrator.step_function(h)(x, u, [])).ravel()
    assert np.all(np.isfinite(step))
    error, allowance = integrator.energy_balance(h)(x, u, step, [])
    xs = ca.SX.sym("x", 6)
    snap = float(ca.Function("snap", [xs], [integrator._snap(xs, ca.SX(0, 1), h)])(x))
    assert float(allowance) - snap < float(error) <= float(allowance)


# -- the data ---------------------------------------------------------------------------------


def _data(obs: np.ndarray, inputs: np.ndarray) -> Dataset:
    n, t1, _ = obs.shape
    return Dataset(np.tile(0.1 * np.arange(t1), (n, 1)), obs, obs, inputs, 0.1)


def test_a_dataset_refuses_nan_and_inf_by_array_trajectory_and_step(tmp_path):
    obs, inputs = np.zeros((3, 6, 2)), np.zeros((3, 5, 1))
    bad = inputs.copy()
    bad[2, 4, 0] = NAN
    with pytest.raises(
        InputError, match=r"Dataset.inputs must be finite, got nan at trajectory 2, step 4"
    ):
        _data(obs, bad)
    bad = obs.copy()
    bad[1, 3, 1] = math.inf
    with pytest.raises(
        InputError, match=r"Dataset.obs must be finite, got inf at trajectory 1, step 3, entry 1"
    ):
        _data(bad, inputs)
    # a file written by someone else: refused on load, by name
    path = tmp_path / "bad.npz"
    good = _data(obs, inputs)
    good.save(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["states"] = arrays["states"].copy()
    arrays["states"][0, 5, 0] = NAN
    np.savez(path, **arrays)
    with pytest.raises(
        InputError, match=r"Dataset.states must be finite, got nan at trajectory 0, step 5"
    ):
        Dataset.load(path)


class _BrokenEnv:
    """A minimal env whose step returns a NaN observation at its third step."""

    def __init__(self):
        import gymnasium

        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
        self.dt = 0.1
        self.spec = None
        self.unwrapped = self
        self._k = 0

    def get_wrapper_attr(self, name):
        return getattr(self, name)

    def reset(self, seed=None, options=None):
        self._k = 0
        return np.zeros(2), {"state": np.zeros(2)}

    def step(self, u):
        self._k += 1
        o = np.full(2, NAN) if self._k == 3 else np.zeros(2)
        return o, 0.0, False, False, {"state": o}


def test_data_collection_refuses_a_failed_step_by_trajectory_and_step():
    with pytest.raises(
        InputError, match=r"trajectory 0 \(seed 7\) has a non-finite input at step 1"
    ):
        rollout_env(_BrokenEnv(), 1, 5, np.full((1, 5, 1), NAN), 7)
    with pytest.raises(
        InputError, match=r"trajectory 0 \(seed 7\) has a non-finite observation at step 3"
    ):
        rollout_env(_BrokenEnv(), 2, 5, np.zeros((2, 5, 1)), 7)


def test_calibration_names_the_transitions_where_the_step_failed():
    # the cart-pole's spurious root in a calibration trajectory: refused with its place,
    # not scored as a measurement (it inflated the bound before)
    model = NominalModel(CartPole(), 0.05).discrete_model()
    rng = np.random.default_rng(0)
    obs = rng.uniform(-0.2, 0.2, (25, 3, 4))
    obs[4, 1] = SPURIOUS_X
    inputs = np.zeros((25, 2, 1))
    inputs[4, 1] = SPURIOUS_U
    data = Dataset(np.tile(0.05 * np.arange(3), (25, 1)), obs, obs, inputs, 0.05)
    with pytest.raises(InputError, match=r"1 of 50 calibration transitions: trajectory 4 step 1"):
        calibrate(model, data, 0.1, scale=np.ones(4))


# -- counts where results are reported --------------------------------------------------------


def _episode(obs, inputs, plan_obs, status):
    T = len(inputs)
    return Trajectory(
        t=0.05 * np.arange(T + 1),
        obs=obs,
        states=obs,
        inputs=inputs,
        rewards=np.zeros(T),
        solve_times=np.full(T, 1e-3),
        iterations=np.ones(T, dtype=np.int64),
        status=np.array(status, dtype=str),
        safety_margin=np.ones((T + 1, 1)),
        constraint_residual=np.zeros(T + 1),
        reference=np.full((T + 1, 4), np.nan),
        slack=np.zeros(T),
        plan_obs=plan_obs,
        tube=np.zeros((T, 2, 0)),
        seed=0,
    )


def test_failed_model_steps_and_nonfinite_plans_are_counted_in_the_metrics():
    model = NominalModel(CartPole(), 0.05).discrete_model()
    obs = np.zeros((4, 4))
    obs[1] = SPURIOUS_X  # the model's step from here is the refused spurious root
    inputs = np.zeros((3, 1))
    inputs[1] = SPURIOUS_U
    plans = np.zeros((3, 2, 4))
    plans[0, 1, 2] = NAN  # a solved plan that predicts NaN
    plans[2] = NAN  # a fallback: NaN by definition, not counted
    traj = _episode(obs, inputs, plans, ["SOLVED", "SOLVED", "FAILED"])
    m = episode_metrics(traj, model=model)
    assert m["failed_model_steps"] == 1 and m["nonfinite_plans"] == 1
    assert np.isfinite(m["prediction_rmse"])  # over the two steps predicted
    s = summarize([m, m], [traj, traj])
    assert s["failed_model_steps"] == 2 and s["nonfinite_plans"] == 2


def test_a_gp_vi_fit_refuses_transitions_where_its_prior_fails_by_name():
    # the prior's midpoint step from the cart-pole's spurious state is NaN: the targets of
    # the GPs would be NaN there, so the fit names the transition before any GP is fitted
    from vimpc.models.families.gp_vi import GPVIModel

    rng = np.random.default_rng(1)
    obs = rng.uniform(-0.2, 0.2, (6, 4, 4))
    obs[3, 1] = SPURIOUS_X
    inputs = rng.uniform(-1.0, 1.0, (6, 3, 1))
    inputs[3, 1] = SPURIOUS_U
    data = Dataset(np.tile(0.05 * np.arange(4), (6, 1)), obs, obs, inputs, 0.05)
    with pytest.raises(InputError, match=r"on 1 of 18 training transitions: trajectory 3 step 1"):
        GPVIModel(CartPole(), 0.05).fit(data)
