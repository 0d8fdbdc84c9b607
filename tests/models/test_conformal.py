"""Split conformal calibration (:mod:`vimpc.models.calibration`) on synthetic data.

The reference model steps ``x_next = a x + u`` (``a = 0.5``, the input added to every entry)
and the "system" is the same map plus i.i.d. noise, so the one-step errors are exactly the
noise and the coverage a calibrated quantile ``q`` gives a fresh transition is known in
closed form: for Gaussian noise of standard deviations ``sigma`` and a constant scale ``s``,
``P(max_j |e_j| / s_j <= q) = prod_j erf(q s_j / (sigma_j sqrt 2))``.

The classical split conformal facts checked here (Vovk et al. 2005; Angelopoulos & Bates
2023, thm. D.1): for ``n`` exchangeable calibration scores and ``k = ceil((n + 1)(1 - delta))``
the ``k``-th smallest score ``q`` covers a fresh score with probability ``k / (n + 1)``
exactly when the scores are continuous, so ``1 - delta <= P <= 1 - delta + 1/(n + 1)``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import casadi as ca
import numpy as np
import pytest
from scipy.special import erf

from vimpc.data import Dataset
from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.errors import InputError
from vimpc.models import calibrate
from vimpc.models.calibration import Bound, minimum_calibration_size, residual_scale
from vimpc.models.evaluation import bound_values, coverage, one_step_errors

DT = 0.1
GAIN = 0.5


def tiny_model(nx: int = 2, *, with_bound: bool = False) -> DiscreteModel:
    """``x_next = GAIN x + u`` (one input added to every entry), identity observations."""
    x, u, p = ca.MX.sym("x", nx), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    obs = ca.MX.sym("obs", nx)
    extra = {}
    if with_bound:
        extra = {
            "bound": ca.Function("bound", [x, u, p], [ca.DM.ones(nx)]),
            "bound_info": BoundInfo(0.5, "step", None, "assumed", "assumed"),
        }
    return DiscreteModel(
        dt=DT,
        nx=nx,
        nu=1,
        np=0,
        nobs=nx,
        step=ca.Function("step", [x, u, p], [GAIN * x + u]),
        from_obs=ca.Function("from_obs", [obs], [obs]),
        to_obs=ca.Function("to_obs", [x], [x]),
        state_names=tuple(f"x{i}" for i in range(nx)),
        input_names=("u",),
        **extra,
    )


def one_step_data(rng: np.random.Generator, n: int, sigma, nx: int = 2) -> Dataset:
    """``n`` one-step trajectories: ``x0 ~ N(0, I)``, ``u ~ N(0, 1)`` and
    ``x1 = GAIN x0 + u + sigma(x0) * N(0, I)``; ``sigma`` a vector or a function of ``x0``."""
    x0 = rng.normal(size=(n, nx))
    u = rng.normal(size=(n, 1))
    std = sigma(x0) if callable(sigma) else np.broadcast_to(np.asarray(sigma, float), (n, nx))
    x1 = GAIN * x0 + u + std * rng.normal(size=(n, nx))
    obs = np.stack([x0, x1], axis=1)
    t = np.tile([0.0, DT], (n, 1))
    return Dataset(t=t, obs=obs, states=obs, inputs=u[:, None, :], dt=DT)


def exact_k(n: int, delta: str) -> int:
    """``ceil((n + 1)(1 - delta))`` in exact rational arithmetic (``delta`` as a decimal)."""
    return math.ceil((n + 1) * (1 - Fraction(delta)))


def scores_of(model: DiscreteModel, data: Dataset, scale) -> np.ndarray:
    return np.max(np.abs(one_step_errors(model, data)) / np.asarray(scale), axis=1)


# -- the quantile -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "delta"),
    [
        (9, "0.1"),
        (19, "0.1"),
        (19, "0.05"),
        (25, "0.1"),
        (10, "0.3"),
        (4, "0.2"),
        (57, "0.15"),
        (9, "0.7"),  # 10 * (1 - 0.7) is 3.0000000000000004 in floats
    ],
)
def test_quantile_is_the_kth_smallest_score(n, delta):
    # k is computed here with exact fractions: where (n + 1)(1 - delta) is an integer
    # (n = 19, delta = 0.1: 20 * 9/10 = 18) a float product may land just above it and an
    # unguarded ceil would take the next score, a conservative but wrong quantile
    # (n = 9, delta = 0.7: the 4th score instead of the 3rd)
    model = tiny_model()
    data = one_step_data(np.random.default_rng(n), n, [1.0, 2.0])
    scale = np.array([1.0, 2.0])
    cb = calibrate(model, data, float(delta), scale=scale)
    k = exact_k(n, delta)
    assert 1 <= k <= n
    assert cb.quantile == np.sort(scores_of(model, data, scale))[k - 1]
    assert (cb.n_calibration, cb.delta) == (n, float(delta))


@pytest.mark.parametrize("delta", ["0.5", "0.3", "0.25", "0.2", "0.1", "0.05", "0.01", "0.15"])
def test_minimum_calibration_size(delta):
    # k <= n  <=>  (n + 1)(1 - delta) <= n  <=>  n >= (1 - delta) / delta = 1/delta - 1
    need = math.ceil((1 - Fraction(delta)) / Fraction(delta))
    assert minimum_calibration_size(float(delta)) == need
    model, scale = tiny_model(), np.ones(2)
    rng = np.random.default_rng(1)
    # at the minimum size the quantile is the largest score (k = n) ...
    data = one_step_data(rng, need, 1.0)
    cb = calibrate(model, data, float(delta), scale=scale)
    assert cb.quantile == scores_of(model, data, scale).max()
    # ... and one transition fewer is refused, naming 1/delta - 1
    if need > 1:
        with pytest.raises(
            InputError,
            match=rf"calibration set of {need - 1} transitions is too small for delta = "
            rf"{float(delta)}: .*at least 1/delta - 1 = {need}",
        ):
            calibrate(model, one_step_data(rng, need - 1, 1.0), float(delta), scale=scale)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5, float("nan"), float("inf"), True, "0.1"])
def test_delta_outside_the_unit_interval(delta):
    data = one_step_data(np.random.default_rng(2), 50, 1.0)
    with pytest.raises(InputError, match=r"delta must be a probability in \(0, 1\), got"):
        calibrate(tiny_model(), data, delta, scale=np.ones(2))


# -- finite-sample validity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "delta", "sigma", "scale"),
    [
        # (n + 1)(1 - delta) = 18 exactly: the expected coverage is exactly 1 - delta
        (19, "0.1", [1.0, 1.0], [1.0, 1.0]),
        # 26 * 0.9 = 23.4, k = 24: expected coverage 24/26 = 0.923, strictly inside the band;
        # the scale is not the noise's (any scale fixed before the data is valid)
        (25, "0.1", [1.0, 3.0], [1.0, 1.0]),
        (200, "0.05", [0.5, 2.0], [0.5, 2.0]),
    ],
)
def test_finite_sample_coverage(n, delta, sigma, scale):
    # 2000 independent calibration sets. For each, the coverage of a fresh transition given
    # the calibrated q is known in closed form (module docstring), so its mean estimates
    # the marginal coverage without the noise of one fresh draw per set. Its expectation is
    # exactly k / (n + 1); 4.5 standard errors (from the 2000 values) keep a false failure
    # below 1e-5 while an off-by-one k, a shift of 1/(n + 1) >= 0.005, is >= 7 errors away.
    reps = 2000
    rng = np.random.default_rng(n)
    model, sigma, scale = tiny_model(), np.array(sigma), np.array(scale)
    conditional, fresh_hits = np.empty(reps), 0
    for r in range(reps):
        q = calibrate(model, one_step_data(rng, n, sigma), float(delta), scale=scale).quantile
        conditional[r] = np.prod(erf(q * scale / (sigma * math.sqrt(2.0))))
        fresh = rng.normal(size=2) * sigma
        fresh_hits += bool(np.all(np.abs(fresh) <= q * scale))
    mean = conditional.mean()
    se = conditional.std(ddof=1) / math.sqrt(reps)
    d = float(delta)
    k = exact_k(n, delta)
    assert abs(mean - k / (n + 1)) <= 4.5 * se, (mean, k / (n + 1), se)
    assert mean >= 1 - d - 4.5 * se
    assert mean <= 1 - d + 1 / (n + 1) + 4.5 * se
    # the same with one fresh transition per set (a binomial count; 4.5 sigma)
    assert fresh_hits / reps >= 1 - d - 4.5 * math.sqrt(d * (1 - d) / reps)


def test_coverage_of_a_large_calibration_set_is_tight():
    # n = 4999, delta = 0.1: k/(n + 1) = 0.9 and the conditional coverage F(q) of one
    # calibration has standard deviation sqrt(0.9 * 0.1 / 5001) = 0.0042; 20000 fresh
    # transitions measured by vimpc.models.evaluation.coverage add 0.0021
    rng = np.random.default_rng(3)
    model = tiny_model()
    cb = calibrate(model, one_step_data(rng, 4999, 1.0), 0.1, scale=np.ones(2))
    bounded = cb.apply(model)
    measured = coverage(bounded, one_step_data(rng, 20_000, 1.0))
    assert abs(measured - 0.9) <= 4.5 * math.hypot(0.0042, 0.0021)
    # the joint quantile of two standard normal entries: erf(q / sqrt 2)^2 = 0.9
    assert cb.quantile == pytest.approx(1.9486, abs=0.05)


def test_score_is_joint_over_entries():
    # Three independent unit-normal entries, delta = 0.1. The max-score quantile solves
    # erf(q / sqrt 2)^3 = 0.9, q = 2.11; a per-entry quantile would be 1.645 (each entry
    # covered with 0.9, all three at once with 0.9^3 = 0.73).
    rng = np.random.default_rng(4)
    model = tiny_model(3)
    cb = calibrate(model, one_step_data(rng, 5000, 1.0, nx=3), 0.1, scale=np.ones(3))
    assert cb.quantile == pytest.approx(2.113, abs=0.05)
    bounded = cb.apply(model)
    test = one_step_data(rng, 20_000, 1.0, nx=3)
    errors = np.abs(one_step_errors(bounded, test))
    inside = errors <= cb.quantile
    joint, per_entry = np.mean(np.all(inside, axis=1)), np.mean(inside, axis=0)
    assert abs(joint - 0.9) <= 0.02  # 4.5 sd of the calibration and test noise (see above)
    # each entry alone is covered with 0.9^(1/3) = 0.965, clearly more than 1 - delta
    assert np.all(np.abs(per_entry - 0.9 ** (1 / 3)) <= 0.015)
    assert joint == pytest.approx(coverage(bounded, test), abs=1e-15)


# -- the bound's shape: constant scale or state-dependent spread ----------------------------------


def test_bound_is_quantile_times_scale():
    rng = np.random.default_rng(5)
    model = tiny_model(with_bound=True)  # its own bound and delta are replaced
    scale = np.array([0.5, 4.0])
    cb = calibrate(model, one_step_data(rng, 99, [0.5, 4.0]), 0.2, scale=scale)
    assert isinstance(cb, Bound) and cb.obtained == "conformal"
    bounded = cb.apply(model)
    assert bounded.delta == 0.2 and bounded.step is model.step
    X, U = rng.normal(size=(7, 2)), rng.normal(size=(7, 1))
    np.testing.assert_array_equal(bound_values(bounded, X, U), np.tile(cb.quantile * scale, (7, 1)))
    assert (bounded.bound_info.method, bounded.bound_info.level) == ("conformal", "step")
    assert bounded.bound_info.delta == 0.2 and bounded.bound_info.calibrated_on == "heldout"
    info = bounded.bound_info.extra
    assert info["description"] == "split conformal" and info["n_calibration"] == 99
    assert info["quantile"] == cb.quantile and list(info["scale"]) == scale.tolist()
    # the scale sets the shape, not the coverage: scaling it by 10 scales q by 1/10
    cb10 = calibrate(
        model, one_step_data(np.random.default_rng(5), 99, [0.5, 4.0]), 0.2, scale=scale * 10
    )
    assert cb10.quantile * 10 == pytest.approx(cb.quantile, rel=1e-14)


def _spread_function() -> ca.Function:
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    return ca.Function("spread", [x, u, p], [0.1 + ca.fabs(x)])


def test_bound_is_quantile_times_spread():
    # heteroscedastic noise sigma(x) = 0.1 + |x| per entry: a spread of the same shape makes
    # the score exchangeable AND identically scaled, so the bound covers large and small
    # states alike; a constant scale (the RMS) over-covers small states and under-covers
    # large ones while meeting 1 - delta only on average
    rng = np.random.default_rng(6)
    model = tiny_model()
    spread = _spread_function()

    def sigma(x0):
        return 0.1 + np.abs(x0)

    calibration, training = one_step_data(rng, 2000, sigma), one_step_data(rng, 2000, sigma)
    cb = calibrate(model, calibration, 0.1, spread=spread)
    assert cb.scale == "state-dependent spread"
    bounded = cb.apply(model)
    X, U = rng.normal(size=(5, 2)), rng.normal(size=(5, 1))
    expected = cb.quantile * (0.1 + np.abs(X))
    np.testing.assert_allclose(bound_values(bounded, X, U), expected, rtol=1e-15)
    assert bounded.bound_info.extra["scale"] == "state-dependent spread"

    constant = calibrate(model, calibration, 0.1, scale=residual_scale(model, training))
    test = one_step_data(rng, 20_000, sigma)
    x0 = test.obs[:, 0]
    large = np.max(np.abs(x0), axis=1) > 1.5  # about a quarter of the states
    for cbound, within in ((cb, 0.03), (constant, None)):
        m = cbound.apply(model)
        errors = np.abs(one_step_errors(m, test))
        hits = np.all(errors <= bound_values(m, x0, test.inputs[:, 0]), axis=1)
        assert abs(hits.mean() - 0.9) <= 0.02  # both are valid on average
        if within is not None:
            assert abs(hits[large].mean() - 0.9) <= within
            assert abs(hits[~large].mean() - 0.9) <= within
        else:
            assert hits[large].mean() < 0.85 and hits[~large].mean() > 0.94


def test_scale_and_spread_are_checked():
    rng = np.random.default_rng(7)
    model, data = tiny_model(), one_step_data(rng, 30, 1.0)
    with pytest.raises(InputError, match="exactly one of scale .* and spread"):
        calibrate(model, data, 0.1)
    with pytest.raises(InputError, match="exactly one of scale .* and spread"):
        calibrate(model, data, 0.1, scale=np.ones(2), spread=_spread_function())
    for bad in ([1.0], [1.0, 0.0], [1.0, -2.0], [1.0, np.nan], [np.inf, 1.0]):
        with pytest.raises(InputError, match="scale must be 2 positive finite numbers"):
            calibrate(model, data, 0.1, scale=np.array(bad))
    with pytest.raises(InputError, match="spread must be a casadi.Function"):
        calibrate(model, data, 0.1, spread=lambda x, u, p: x)
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    signed = ca.Function("spread", [x, u, p], [x])  # negative on half the states
    with pytest.raises(InputError, match="spread.* must be > 0 on the calibration data"):
        calibrate(model, data, 0.1, spread=signed)


def test_residual_scale_is_the_rms_with_a_floor():
    # entry 0 carries noise of std 2; entry 1 is predicted exactly, so its RMS is 0 and the
    # floor (1e-9 of the largest) keeps the score finite
    rng = np.random.default_rng(8)
    model = tiny_model()
    data = one_step_data(rng, 500, [2.0, 0.0])
    errors = one_step_errors(model, data)
    scale = residual_scale(model, data)
    assert scale[0] == pytest.approx(math.sqrt(np.mean(errors[:, 0] ** 2)), rel=1e-14)
    assert scale[0] == pytest.approx(2.0, rel=0.1)
    assert scale[1] == pytest.approx(1e-9 * scale[0], rel=1e-6)
    cb = calibrate(model, one_step_data(rng, 500, [2.0, 0.0]), 0.1, scale=scale)
    assert np.isfinite(cb.quantile) and cb.quantile == pytest.approx(1.645, abs=0.2)


def test_a_step_that_fails_on_calibration_data_is_refused():
    # a model whose step is NaN for x0 > 1 (about 16 % of N(0, 1) draws): no score there
    x, u, p = ca.SX.sym("x", 1), ca.SX.sym("u", 1), ca.SX.sym("p", 0)
    step = ca.Function("step", [x, u, p], [ca.if_else(x > 1.0, np.nan, GAIN * x + u)])
    broken = dataclasses.replace(tiny_model(1), step=step)
    data = one_step_data(np.random.default_rng(3), 200, [0.1], nx=1)
    X, _, _ = data.pairs("obs")
    first = int(np.flatnonzero(X[:, 0] > 1.0)[0])
    where = f"trajectory {first // data.n_steps} step {first % data.n_steps}"
    with pytest.raises(InputError, match=rf"on \d+ of 200 calibration transitions: {where}"):
        calibrate(broken, data, 0.1, scale=np.ones(1))
    # the training errors that set the constant scale are refused the same way
    with pytest.raises(InputError, match=rf"of 200 training transitions: {where}"):
        residual_scale(broken, data)
