"""Horizon-level conformal bounds and the state-dependent bound scale
(:mod:`vimpc.models.calibration`), and the per-horizon coverage of the closed-loop metrics.

Synthetic data as in ``test_conformal.py``: the reference model steps ``x_next = a x + u``
(``a = 0.5``), the "system" adds noise, so the one-step errors are exactly the noise. Here
the noise of a trajectory is an AR(1) process (correlation ``RHO`` from one step to the
next, stationary from the first step), so consecutive errors are dependent, as along a
real trajectory, while trajectories are independent: the trajectories, not their windows,
are exchangeable. Conformal risk control over every window of ``n`` trajectories covers a
window of a fresh trajectory with probability in ``[1 - delta, 1 - delta + 2/(n + 1)]``
for continuous scores; with one window per trajectory it is split conformal on the window
scores, covering with probability ``k / (n + 1)``, ``k = ceil((n + 1)(1 - delta))``,
exactly.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from _bound_fixture import DT, pendulum_data
from test_conformal import tiny_model  # noqa: E402  (the same x_next = GAIN x + u)

from vimpc import scenario
from vimpc.closedloop import Trajectory, episode_metrics, summarize
from vimpc.closedloop.metrics import windows_inside as episode_windows_inside
from vimpc.data import Dataset
from vimpc.dynamics import BoundInfo
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel, calibrate
from vimpc.models.calibration import (
    STATE_SCALE_FLOOR,
    choose_scale,
    conformal_rank,
    horizon_coverage,
    log_state_scale,
    residual_scale,
    risk_control_quantile,
    state_scale,
    step_scores,
    window_scores,
    windows_inside,
)
from vimpc.models.evaluation import bound_values, coverage, one_step_errors
from vimpc.pipeline import fit_report
from vimpc.report import fit_table, summary_table

GAIN = 0.5
RHO = 0.8
ROOT = Path(__file__).parents[2]


def ar_noise(rng: np.random.Generator, n: int, T: int, nx: int = 2) -> np.ndarray:
    """``(n, T, nx)`` stationary AR(1) noise of unit variance, correlation ``RHO``."""
    w = np.empty((n, T, nx))
    w[:, 0] = rng.normal(size=(n, nx))
    for k in range(1, T):
        w[:, k] = RHO * w[:, k - 1] + math.sqrt(1 - RHO**2) * rng.normal(size=(n, nx))
    return w


def trajectories(rng: np.random.Generator, n: int, T: int, sigma=(1.0, 1.0)) -> Dataset:
    """``n`` trajectories of ``T`` steps of ``x_next = GAIN x + u + sigma * w`` (AR(1) ``w``)."""
    w = ar_noise(rng, n, T) * np.asarray(sigma)
    u = rng.normal(size=(n, T, 1))
    x = np.empty((n, T + 1, 2))
    x[:, 0] = rng.normal(size=(n, 2))
    for k in range(T):
        x[:, k + 1] = GAIN * x[:, k] + u[:, k] + w[:, k]
    t = np.tile(DT * np.arange(T + 1), (n, 1))
    return Dataset(t=t, obs=x, states=x, inputs=u, dt=DT)


# -- windows -------------------------------------------------------------------------------------


def test_windows_inside_is_every_window_brute_force():
    rng = np.random.default_rng(0)
    inside = rng.random((5, 17)) < 0.85
    for horizon in (1, 3, 17, 18):
        brute = np.array(
            [[inside[i, s : s + horizon].all() for s in range(17 - horizon + 1)] for i in range(5)]
        ).reshape(5, max(0, 17 - horizon + 1))
        np.testing.assert_array_equal(windows_inside(inside, horizon), brute)
        np.testing.assert_array_equal(episode_windows_inside(inside[2], horizon), brute[2])


def test_window_scores_are_every_window_of_every_trajectory():
    rng = np.random.default_rng(1)
    scores = rng.random((40, 12))
    w = window_scores(scores, 5)
    assert w.shape == (40, 8)
    np.testing.assert_array_equal(
        w, [[scores[i, s : s + 5].max() for s in range(8)] for i in range(40)]
    )
    np.testing.assert_array_equal(window_scores(scores, 12), scores.max(axis=1)[:, None])
    assert window_scores(scores, 13).size == 0


def test_risk_control_with_one_window_per_trajectory_is_split_conformal():
    # one window per trajectory: the losses are 0/1 and the risk-control quantile is the
    # k-th smallest score, k = ceil((n + 1)(1 - delta)), for every n and delta tried
    rng = np.random.default_rng(2)
    for n, delta in ((19, 0.05), (99, 0.1), (100, 0.05), (57, 0.2), (1000, 0.01)):
        w = rng.random((n, 1))
        k = conformal_rank(n, delta)
        assert risk_control_quantile(w, delta) == np.sort(w.ravel())[k - 1]
    assert risk_control_quantile(rng.random((18, 3)), 0.05) == math.inf  # n < 1/delta - 1


def test_risk_control_leaves_at_most_the_allowed_share_of_windows_outside():
    # sum_i L_i(q) <= (n + 1) delta - 1 at the returned q, and not at the next smaller score
    rng = np.random.default_rng(3)
    for n, m, delta in ((40, 7, 0.1), (100, 141, 0.05), (25, 1, 0.2)):
        w = rng.exponential(size=(n, m))
        q = risk_control_quantile(w, delta)
        budget = (n + 1) * delta - 1
        assert np.mean(w > q, axis=1).sum() <= budget + 1e-12
        smaller = np.sort(w.ravel())
        smaller = smaller[smaller < q].max()
        assert np.mean(w > smaller, axis=1).sum() > budget


# -- horizon-level coverage ------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "T", "horizon", "delta"), [(99, 25, 10, 0.1), (59, 10, 10, 0.2)])
def test_horizon_coverage_on_fresh_exchangeable_trajectories(n, T, horizon, delta):
    # 200 calibration sets of n trajectories; for each, 4000 fresh windows (AR noise of
    # the same law, stationary, so the law of a window at any start of a fresh trajectory)
    # estimate the conditional probability that all `horizon` errors lie within the bound.
    # Its mean over the sets lies in [1 - delta, 1 - delta + 2/(n + 1)] (conformal risk
    # control over the 16 windows of each trajectory of 25 steps, Theorems 1 and 2), and
    # is k / (n + 1) exactly with one window per trajectory (59 of 10 steps: 49/60 =
    # 0.8167). 4.5 standard errors (from the 200 values) keep a false failure below 1e-5;
    # a per-step calibration lies far below the band (see the next test).
    reps, fresh = 200, 4000
    rng = np.random.default_rng(n)
    model = tiny_model()
    conditional = np.empty(reps)
    for r in range(reps):
        cb = calibrate(
            model,
            trajectories(rng, n, T),
            delta,
            scale=np.ones(2),
            level="horizon",
            horizon=horizon,
            method="windows",
        )
        assert cb.horizon_method == "windows" and cb.windows == n * (T - horizon + 1)
        w = np.abs(ar_noise(rng, fresh, horizon))
        conditional[r] = np.mean(w.max(axis=(1, 2)) <= cb.quantile)
    mean, se = conditional.mean(), conditional.std(ddof=1) / math.sqrt(reps)
    if T == horizon:
        k = conformal_rank(n, delta)
        assert abs(mean - k / (n + 1)) <= 4.5 * se, (mean, k / (n + 1), se)
    assert mean >= 1 - delta - 4.5 * se
    assert mean <= 1 - delta + 2 / (n + 1) + 4.5 * se


def test_a_step_level_bound_does_not_hold_over_a_horizon_and_bonferroni_does():
    # One calibration set of 400 trajectories of 20 steps, 2000 fresh ones; horizon 10.
    # The step-level bound (delta = 0.1) covers 90 % of steps but far fewer 10-step
    # windows; the windows' bound and the Bonferroni one (delta/10 per step) cover at
    # least 90 % of the fresh windows, within a binomial interval (4.5 sigma of the 2000
    # fresh trajectories plus the calibration's own spread, sqrt(0.09 / 400) = 0.015)
    rng = np.random.default_rng(7)
    model = tiny_model()
    cal, test = trajectories(rng, 400, 20), trajectories(rng, 2000, 20)
    one = dict(scale=np.ones(2))
    step = calibrate(model, cal, 0.1, **one).apply(model)
    assert coverage(step, test) == pytest.approx(0.9, abs=0.02)
    assert horizon_coverage(step, test, 10) < 0.75
    tol = 4.5 * math.hypot(math.sqrt(0.09 / 2000), 0.015)
    quantiles = {}
    for method in ("windows", "bonferroni"):
        cb = calibrate(model, cal, 0.1, **one, level="horizon", horizon=10, method=method)
        assert cb.horizon_method == method and cb.level == "horizon" and cb.horizon == 10
        assert horizon_coverage(cb.apply(model), test, 10) >= 0.9 - tol
        quantiles[method] = cb.quantile
    # the union bound is loose: with 400 windows the windows' quantile is the smaller
    assert quantiles["windows"] < quantiles["bonferroni"]
    # the Bonferroni quantile is the per-step one at delta / 10
    scores = np.sort(step_scores(model, cal, scale=np.ones(2)).ravel())
    assert quantiles["bonferroni"] == scores[conformal_rank(scores.size, 0.01) - 1]


def test_auto_picks_the_smaller_quantile_measured_on_other_data():
    rng = np.random.default_rng(8)
    model, scale = tiny_model(), np.ones(2)
    train = trajectories(rng, 400, 20)
    # many short trajectories: windows (120 of them) and Bonferroni (2400 steps) both fit
    cal = trajectories(rng, 120, 20)
    cb = calibrate(model, cal, 0.1, scale=scale, level="horizon", horizon=10, choose_on=train)
    predicted = cb.predicted_quantile
    assert set(predicted) == {"windows", "bonferroni"}
    assert cb.horizon_method == min(predicted, key=predicted.get)
    assert cb.horizon_method_chosen_on == "training data"
    assert "horizon" in cb.method and cb.describe()["horizon_method"] == cb.horizon_method
    # trajectories shorter than the horizon: only Bonferroni is possible, and chosen
    short = trajectories(rng, 200, 5)
    cb = calibrate(model, short, 0.1, scale=scale, level="horizon", horizon=10, choose_on=train)
    assert cb.horizon_method == "bonferroni" and cb.windows == 0
    assert cb.predicted_quantile.keys() == {"bonferroni"}
    with pytest.raises(InputError, match=r"method = 'windows' needs at least 9 calibration"):
        calibrate(model, short, 0.1, scale=scale, level="horizon", horizon=10, method="windows")
    # 5 trajectories of 5 steps: neither calibration fits, named with both sizes
    with pytest.raises(
        InputError,
        match=r"\(5 trajectories of 5 steps\) is too small for a 10-step horizon at delta = "
        r"0\.1: .*at least 9 trajectories of at least 10 steps, the Bonferroni one at least "
        r"99 transitions",
    ):
        calibrate(
            model,
            trajectories(rng, 5, 5),
            0.1,
            scale=scale,
            level="horizon",
            horizon=10,
            choose_on=train,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": "window"}, r"level must be one of \('step', 'horizon'\).*got 'window'"),
        ({"level": "horizon"}, r"level = 'horizon' needs horizon.*got None"),
        ({"level": "horizon", "horizon": 0}, r"needs horizon.*positive integer.*got 0"),
        ({"level": "horizon", "horizon": 2.0}, r"needs horizon.*got 2\.0"),
        ({"horizon": 5}, r"horizon = 5 is for level = 'horizon'"),
        (
            {"level": "horizon", "horizon": 5, "method": "union"},
            r"method must be one of \('auto', 'windows', 'bonferroni'\).*got 'union'",
        ),
        (
            {"level": "horizon", "horizon": 5},
            r"method = 'auto' chooses .* pass choose_on \(the training data\)",
        ),
    ],
)
def test_calibrate_refuses_bad_levels(kwargs, message):
    data = trajectories(np.random.default_rng(9), 30, 10)
    with pytest.raises(InputError, match=message):
        calibrate(tiny_model(), data, 0.1, scale=np.ones(2), **kwargs)


# -- the state-dependent scale ----------------------------------------------------------------------


def speed_data(rng: np.random.Generator, n: int) -> Dataset:
    """One-step transitions of ``x = (q, v)`` whose error's spread grows with ``|v|`` and
    ``|u|``: ``sigma_j = A_j + B_j |v| + C_j |u|``."""
    x0 = rng.normal(size=(n, 2)) * [1.0, 2.0]
    u = rng.normal(size=(n, 1))
    std = SIGMA_A + np.abs(x0[:, 1:2]) * SIGMA_B + np.abs(u) * SIGMA_C
    x1 = GAIN * x0 + u + std * rng.normal(size=(n, 2))
    obs = np.stack([x0, x1], axis=1)
    return Dataset(t=np.tile([0.0, DT], (n, 1)), obs=obs, states=obs, inputs=u[:, None], dt=DT)


SIGMA_A, SIGMA_B, SIGMA_C = np.array([0.01, 0.02]), np.array([0.2, 0.5]), np.array([0.0, 0.3])


def test_state_scale_recovers_the_spread_of_the_errors():
    # E|e_j| = sqrt(2/pi) sigma_j for Gaussian noise: the least-squares fit of |e_j| on
    # (1, |v|, |u|) estimates sqrt(2/pi) (A_j, B_j, C_j)
    rng = np.random.default_rng(10)
    model = tiny_model()
    data = speed_data(rng, 20_000)
    function, record = state_scale(model, data)
    c = math.sqrt(2 / math.pi)
    np.testing.assert_allclose(record["per_abs_velocity"], c * SIGMA_B[:, None], rtol=0.05)
    np.testing.assert_allclose(record["per_abs_input"][1], [c * SIGMA_C[1]], rtol=0.08)
    assert record["per_abs_input"][0][0] < 0.01  # no input dependence in entry 0
    np.testing.assert_allclose(record["intercept"], c * SIGMA_A, atol=0.01)
    # the function is max(a + b |v| + c |u|, floor), floor = STATE_SCALE_FLOOR mean |e|
    errors = np.abs(one_step_errors(model, data))
    np.testing.assert_allclose(record["floor"], STATE_SCALE_FLOOR * errors.mean(0), rtol=1e-12)
    X, U = rng.normal(size=(6, 2)), rng.normal(size=(6, 1))
    X[0], U[0] = 0.0, 0.0  # at rest the affine part may lie below the floor
    a, b = np.array(record["intercept"]), np.array(record["per_abs_velocity"])[:, 0]
    cu = np.array(record["per_abs_input"])[:, 0]
    expected = np.maximum(a + np.abs(X[:, 1:2]) * b + np.abs(U) * cu, np.array(record["floor"]))
    got = np.asarray(function.map(6)(X.T, U.T, np.zeros((0, 6)))).T
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_state_dependent_bound_is_narrower_at_equal_coverage():
    # errors growing with speed: both bounds cover 90 % of fresh transitions (they are
    # calibrated alike), the state-dependent one with a smaller mean width in every entry;
    # at exactly equal coverage on the test set (each shape's quantile set there to 0.9)
    # the same holds
    rng = np.random.default_rng(11)
    model = tiny_model()
    train, cal, test = speed_data(rng, 4000), speed_data(rng, 4000), speed_data(rng, 40_000)
    function, record = state_scale(model, train)
    constant = calibrate(model, cal, 0.1, scale=residual_scale(model, train))
    state = calibrate(model, cal, 0.1, spread=function, shape=record)
    assert state.scale == record and state.level == "step"
    X, U = test.obs[:, 0], test.inputs[:, 0]
    widths, at_equal = {}, {}
    for name, cb in (("constant", constant), ("state", state)):
        bounded = cb.apply(model)
        assert coverage(bounded, test) == pytest.approx(0.9, abs=0.015)
        b = bound_values(bounded, X, U)
        widths[name] = b.mean(axis=0)
        shape = b / cb.quantile
        scores = np.max(np.abs(one_step_errors(model, test)) / shape, axis=1)
        at_equal[name] = np.quantile(scores, 0.9) * shape.mean(axis=0)
    assert np.all(widths["state"] < 0.85 * widths["constant"]), widths
    assert np.all(at_equal["state"] < 0.85 * at_equal["constant"]), at_equal


def power_law_data(rng: np.random.Generator, n: int, v_scale: float = 2.0) -> Dataset:
    """One-step transitions whose error's spread grows faster than a line in the speed:
    ``sigma_j = A_j exp(B_j |v| + C_j v^2 + D_j |u|)``."""
    x0 = rng.normal(size=(n, 2)) * [1.0, v_scale]
    u = rng.normal(size=(n, 1))
    v = np.abs(x0[:, 1:2])
    std = LOG_A * np.exp(LOG_B * v + LOG_C * v**2 + LOG_D * np.abs(u))
    x1 = GAIN * x0 + u + std * rng.normal(size=(n, 2))
    obs = np.stack([x0, x1], axis=1)
    return Dataset(t=np.tile([0.0, DT], (n, 1)), obs=obs, states=obs, inputs=u[:, None], dt=DT)


LOG_A, LOG_B = np.array([1e-3, 3e-3]), np.array([0.1, 0.4])
LOG_C, LOG_D = np.array([0.3, 0.05]), np.array([0.0, 0.5])
# E log|z| for a standard normal z: -(Euler's gamma + log 2) / 2
E_LOG_ABS_NORMAL = -(0.5772156649015329 + math.log(2.0)) / 2


def test_log_state_scale_recovers_a_power_law_spread():
    # log|e_j| = log sigma_j + log|z|: least squares on (1, |v|, v^2, |u|) estimates
    # (log A_j + E log|z|, B_j, C_j, D_j)
    rng = np.random.default_rng(16)
    model = tiny_model()
    data = power_law_data(rng, 40_000)
    function, record = log_state_scale(model, data)
    np.testing.assert_allclose(record["log_intercept"], np.log(LOG_A) + E_LOG_ABS_NORMAL, atol=0.05)
    np.testing.assert_allclose(np.ravel(record["per_abs_velocity"]), LOG_B, atol=0.05)
    np.testing.assert_allclose(np.ravel(record["per_squared_velocity"]), LOG_C, atol=0.02)
    np.testing.assert_allclose(np.ravel(record["per_abs_input"]), LOG_D, atol=0.03)
    # the function is exp(w . phi) with |v| and |u| clipped at the data's largest values
    v_max, u_max = record["abs_velocity_clipped_at"][0], record["abs_input_clipped_at"][0]
    assert v_max == pytest.approx(np.abs(data.obs[:, 0, 1]).max(), rel=1e-12)
    X = np.array([[0.0, 0.0], [0.3, -1.5], [0.0, 3 * v_max], [0.0, -3 * v_max]])
    U = np.array([[0.0], [0.7], [-2 * u_max], [3 * u_max]])
    av, au = np.minimum(np.abs(X[:, 1:2]), v_max), np.minimum(np.abs(U), u_max)
    w = [np.array(record[k]).reshape(2, -1) for k in ("per_abs_velocity", "per_squared_velocity")]
    expected = np.exp(
        np.array(record["log_intercept"])
        + av * w[0][:, 0]
        + av**2 * w[1][:, 0]
        + au * np.array(record["per_abs_input"])[:, 0]
    )
    got = np.asarray(function.map(4)(X.T, U.T, np.zeros((0, 4)))).T
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.array_equal(got[2], got[3])  # no extrapolation past the data's box
    # with a spread g, the fit is of log(|e| / g) and the scale is g times the correction:
    # a constant g only shifts the intercepts by -log g, and the scale is the same
    g = ca.Function(
        "g", [ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)], [ca.DM([2.0, 0.5])]
    )
    with_g, record_g = log_state_scale(model, data, g)
    assert record_g["kind"].startswith("spread *")
    np.testing.assert_allclose(
        record_g["log_intercept"], np.array(record["log_intercept"]) - np.log([2.0, 0.5])
    )
    np.testing.assert_allclose(
        np.asarray(with_g.map(4)(X.T, U.T, np.zeros((0, 4)))).T, got, rtol=1e-9
    )


def test_log_state_bound_is_narrower_than_the_affine_one_for_errors_growing_like_v_squared():
    # calibrated alike, both cover 90 % of fresh transitions; the affine scale cannot follow
    # exp(C v^2), so its typical bound is further above the typical error
    rng = np.random.default_rng(17)
    model = tiny_model()
    train, cal, test = (power_law_data(rng, m, v_scale=3.0) for m in (4000, 4000, 40_000))
    X, U = test.obs[:, 0], test.inputs[:, 0]
    errors = np.abs(one_step_errors(model, test))
    tightness = {}
    for name, (function, record) in (
        ("state", state_scale(model, train)),
        ("log_state", log_state_scale(model, train)),
    ):
        bounded = calibrate(model, cal, 0.1, spread=function, shape=record).apply(model)
        assert coverage(bounded, test) == pytest.approx(0.9, abs=0.015)
        b = bound_values(bounded, X, U)
        tightness[name] = np.median(b, axis=0) / np.median(errors, axis=0)
    assert np.all(tightness["log_state"] < 0.8 * tightness["state"]), tightness


def test_choose_scale_measures_the_width_at_equal_coverage_on_training_data():
    rng = np.random.default_rng(14)
    model = tiny_model()
    train = speed_data(rng, 4000)
    function, _ = state_scale(model, train)
    constant = residual_scale(model, train)
    candidates = {"constant": (constant, None), "state": (None, function)}
    chosen, ratios = choose_scale(model, train, 0.1, candidates)
    assert chosen == "state" and ratios["constant"] == 1.0 and ratios["state"] < 0.85
    # the ratio is the one of q * mean scale, q covering 90 % of the training scores
    scores = step_scores(model, train, scale=constant).ravel()
    q = np.sort(scores)[math.ceil(0.9 * scores.size) - 1]
    s_state = np.asarray(function.map(4000)(train.obs[:, 0].T, train.inputs[:, 0].T, [])).T
    q_state = np.sort(step_scores(model, train, spread=function).ravel())[3599]
    expected = np.mean(q_state * s_state.mean(0) / (q * constant))
    assert ratios["state"] == pytest.approx(expected, rel=1e-12)
    # a scale twice as large changes nothing: the quantile halves
    doubled = {"constant": (constant, None), "twice": (2 * constant, None)}
    assert choose_scale(model, train, 0.1, doubled)[1]["twice"] == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(InputError, match="exactly one of scale"):
        choose_scale(model, train, 0.1, {"neither": (None, None)})


def test_a_family_with_the_auto_scale_records_its_choice():
    rng = np.random.default_rng(15)
    train, cal = pendulum_data(rng, 60, 15), pendulum_data(rng, 60, 15)
    family = NominalModel(Pendulum(), DT, bound="conformal", delta=0.1, conformal_scale="auto")
    info = family.fit(train, cal).discrete_model().bound_info.extra
    ratios = info["width_vs_constant_on_training"]
    assert set(ratios) == {"constant", "state"} and ratios["constant"] == 1.0
    assert info["scale_chosen"] == min(ratios, key=ratios.get)
    # the same bound as asking for the chosen scale by name
    family.recalibrate(train, cal, conformal_scale=info["scale_chosen"])
    assert family.calibration_.quantile == info["quantile"]
    with pytest.raises(InputError, match="conformal_scale = 'auto' sets the bound's shape"):
        NominalModel(Pendulum(), DT, bound="conformal", conformal_scale="auto").fit(None, cal)


def test_state_scale_needs_velocities_in_an_even_observation():
    model = tiny_model(3)
    rng = np.random.default_rng(12)
    x0, u = rng.normal(size=(20, 3)), rng.normal(size=(20, 1))
    obs = np.stack([x0, GAIN * x0 + u], axis=1)
    data = Dataset(np.tile([0.0, DT], (20, 1)), obs, obs, u[:, None], DT)
    with pytest.raises(InputError, match=r"observation \(q, v\).* even size; .* has 3"):
        state_scale(model, data)


# -- the family settings and the scenario keys -------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bound_level": "horizn"}, r"bound_level must be one of .*got 'horizn'"),
        ({"conformal_scale": "states"}, r"conformal_scale must be one of .*did you mean 'state'"),
        (
            {"bound": "conformal", "bound_level": "horizon"},
            r"bound_level = 'horizon' needs bound_horizon, .*got 0",
        ),
        ({"bound": "conformal", "bound_horizon": 20}, r"bound_horizon = 20 is for bound_level"),
        (
            {"bound_level": "horizon", "bound_horizon": 20},
            r"bound_level = 'horizon' is for a conformal bound, got bound = 'none'",
        ),
        ({"bound_horizon": -1}, r"bound_horizon must be a non-negative integer, got -1"),
    ],
)
def test_bad_bound_settings_name_the_key(settings, message):
    with pytest.raises(InputError, match=message):
        NominalModel(Pendulum(), DT, **settings)


def test_a_family_calibrates_a_horizon_bound_with_a_state_scale_and_reports_it():
    rng = np.random.default_rng(13)
    train, cal, val = (pendulum_data(rng, 60, 15) for _ in range(3))
    family = NominalModel(
        Pendulum(),
        DT,
        bound="conformal",
        delta=0.1,
        conformal_scale="state",
        bound_level="horizon",
        bound_horizon=10,
    ).fit(train, cal)
    record = family.discrete_model().bound_info
    assert (record.level, record.horizon, record.steps()) == ("horizon", 10, 10)
    assert (record.method, record.calibrated_on, record.delta) == ("conformal", "heldout", 0.1)
    info = record.extra
    assert info["horizon_method"] in ("windows", "bonferroni")
    assert info["scale"]["kind"].startswith("state")
    model = family.discrete_model()
    report = fit_report(model, train, cal, val, 0.0)
    assert report["validation_horizon_coverage"] == horizon_coverage(model, val, 10)
    assert report["validation_horizon_coverage"] <= report["validation_coverage"]
    assert report["bound_horizon"] == 10
    text = fit_table(report, ["q", "v"])
    assert (
        f"per 10-step window (all errors inside): {report['validation_horizon_coverage']:.3f}"
        in (text)
    )
    # back to a step-level bound without fitting again: no horizon figures
    family.recalibrate(train, cal, bound_level="step", bound_horizon=0)
    record = family.discrete_model().bound_info
    assert (record.level, record.horizon) == ("step", None) and "horizon_method" not in record.extra
    assert "validation_horizon_coverage" not in fit_report(
        family.discrete_model(), train, cal, val, 0.0
    )


def test_scenario_bound_horizon_shorter_than_the_controller_horizon_is_refused():
    path = ROOT / "scenarios" / "cartpole_safe.toml"
    sets = ['model.bound_level="horizon"']
    with pytest.raises(ConfigError, match=r"bound_horizon.*got 0"):
        scenario.load_scenario(path, [*sets, "model.bound_horizon=0"])
    with pytest.raises(ConfigError, match=r"bound_horizon.*got 0"):
        scenario.load_scenario(
            path,
            [
                'data.calibration="heldout"',
                'model.bound_level="step"',
                *sets,
                "model.bound_horizon=0",
            ],
        )
    with pytest.raises(
        ConfigError,
        match=r"model.bound_horizon = 10: .*covers 10 consecutive steps, fewer than the "
        r"controller's horizon of 20: set it to controller.horizon = 20",
    ):
        scenario.load_scenario(path, [*sets, "model.bound_horizon=10"])
    cfg = scenario.load_scenario(path, [*sets, "model.bound_horizon=20"])
    assert cfg["model"]["bound_horizon"] == 20


# -- closed-loop coverage per horizon ---------------------------------------------------------------


def _episode(obs: np.ndarray, inputs: np.ndarray, horizon: int) -> Trajectory:
    T = len(inputs)
    return Trajectory(
        t=DT * np.arange(T + 1),
        obs=obs,
        states=obs,
        inputs=inputs,
        rewards=np.zeros(T),
        solve_times=np.full(T, 1e-3),
        iterations=np.ones(T, dtype=np.int64),
        status=np.array(["SOLVED"] * T, dtype=str),
        safety_margin=np.ones((T + 1, 1)),
        constraint_residual=np.zeros(T + 1),
        reference=np.full((T + 1, 2), np.nan),
        slack=np.zeros(T),
        plan_obs=np.zeros((T, horizon + 1, 2)),
        tube=np.zeros((T, horizon + 1, 0)),
        seed=0,
    )


def test_episode_metrics_report_coverage_per_step_and_per_horizon():
    # a bound of 1 in each entry; the errors leave it at steps 4 and 5 of 10: 8 of 10
    # steps inside; of the 8 windows of 3 steps (plans of horizon 3), those starting at
    # 2, 3, 4 and 5 hold an outside step: 4 of 8 inside
    model = tiny_model()
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    record = BoundInfo(0.1, "step", None, "assumed", "assumed")
    model = replace(model, bound=ca.Function("b", [x, u, p], [ca.DM.ones(2)]), bound_info=record)
    T = 10
    inputs = np.zeros((T, 1))
    obs = np.zeros((T + 1, 2))
    obs[5] = [1.5, 0.0]  # error of step 4: 1.5 > 1
    obs[6] = [-0.5, 0.0]  # error of step 5: -0.5 - 0.75 = -1.25
    m = episode_metrics(_episode(obs, inputs, 3), model=model)
    assert m["coverage"] == 0.8
    assert m["horizon_coverage"] == 0.5 and m["coverage_horizon"] == 3
    # the horizon can be given; an episode shorter than it has no window (NaN)
    assert episode_metrics(_episode(obs, inputs, 3), model=model, horizon=1)[
        "horizon_coverage"
    ] == pytest.approx(0.8)
    short = episode_metrics(_episode(obs[:3], inputs[:2], 3), model=model)
    assert math.isnan(short["horizon_coverage"])
    with pytest.raises(InputError, match="horizon must be a positive integer, got 0"):
        episode_metrics(_episode(obs, inputs, 3), model=model, horizon=0)
    s = summarize([m, short], [_episode(obs, inputs, 3), _episode(obs[:3], inputs[:2], 3)])
    assert s["horizon_coverage_mean"] == 0.5 and s["horizon_coverage_min"] == 0.5
    assert s["coverage_horizon"] == 3 and s["coverage_mean"] == pytest.approx(0.9)
    # episodes all shorter than the horizon: no window, no line in the summary
    none = summarize([short], [_episode(obs[:3], inputs[:2], 3)])
    assert none["coverage_horizon"] == 3 and "horizon_coverage_min" not in none
    assert "windows" not in summary_table(none)
    line = next(x for x in summary_table(s).splitlines() if "3-step windows" in x)
    assert line.strip().startswith("bound coverage (3-step windows)")
    assert line.endswith("mean 0.500, worst episode 0.500 (every error of the window inside)")
