"""SafetyRows: the one description of the safety rows h(obs) >= 0 that the transcription
tightens, the controller counts empty tube stages on and the report labels."""

from __future__ import annotations

import re

import casadi as ca
import numpy as np
import pytest
from test_mpc_tube import _double_integrator

from vimpc import report
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc import MPC, Constraints, Cost, PathConstraint
from vimpc.mpc.problem import SafetyRows

DT = 0.1
NAMES = ("a", "b", "c")
A3 = np.array([[1.0, DT, 0.0], [0.0, 1.0, DT], [0.0, 0.0, 1.0]])
B3 = np.array([[0.0], [0.0], [DT]])


def _triple_integrator() -> DiscreteModel:
    """``x_next = A x + B u`` on ``(a, b, c)``, observed as the state, a constant bound."""
    return _double_integrator([1e-3, 2e-3, 5e-3], A=A3, B=B3, state_names=NAMES)


def _constraints(soft_bounds: bool) -> Constraints:
    """``a`` bounded on both sides, ``b`` below only, ``c`` above only; a hard path
    constraint of two rows and a soft keep-out circle."""
    obs = ca.SX.sym("obs", 3)
    wall = ca.Function("wall", [obs], [ca.vertcat(2.0 - obs[0] - obs[1], 4.0 + obs[2])])
    return Constraints(
        u_min=[-1.0],
        u_max=[1.0],
        obs_min=[-1.0, -2.0, -np.inf],
        obs_max=[1.5, np.inf, 3.0],
        soft_bounds=soft_bounds,
        path=[
            PathConstraint("wall", wall),
            PathConstraint.keep_out("ring", 3, (0, 2), (0.5, -1.0), 0.25, soft=True, weight=50.0),
        ],
    )


EXPECTED_NAMES = ("a >= -1", "b >= -2", "a <= 1.5", "c <= 3", "wall[0]", "wall[1]", "ring")


def _evaluate(formula: str, obs: np.ndarray) -> float:
    """A row's formula text evaluated on ``obs`` (``^`` is a power)."""
    return float(eval(formula.replace("^", "**"), {}, dict(zip(NAMES, obs, strict=True))))


def test_rows_say_what_each_row_is_and_their_formulas_are_their_function():
    cons = _constraints(soft_bounds=False).resolved(3, 1)
    rows = SafetyRows.of(cons, NAMES)
    assert rows.names == EXPECTED_NAMES and len(rows) == 7
    assert [r.kind for r in rows.rows] == ["lower"] * 2 + ["upper"] * 2 + ["path"] * 3
    assert [r.entry for r in rows.rows[:4]] == [0, 1, 0, 2]
    assert [r.bound for r in rows.rows[:4]] == [-1.0, -2.0, 1.5, 3.0]
    assert [(r.constraint, r.component) for r in rows.rows[4:]] == [(0, 0), (0, 1), (1, 0)]
    np.testing.assert_array_equal(rows.lower, [0, 1])
    np.testing.assert_array_equal(rows.upper, [0, 2])
    assert [p.tolist() for p in rows.path] == [[4, 5], [6]]
    np.testing.assert_array_equal(rows.soft_rows, [6])  # hard bounds, the soft circle
    # only a is bounded on both sides: rows 0 and 2, range 2.5
    assert [p.tolist() for p in rows.paired] == [[0], [2], [2.5]]
    assert rows.rows[6].label == "|(a, c) - (0.5, -1)| >= 0.25"
    assert rows.rows[6].formula == "(a - 0.5)^2 + (c + 1)^2 - 0.25^2"
    assert rows.rows[4].formula == "wall(obs)[0]" and rows.rows[4].power == 0
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs = rng.uniform(-3.0, 3.0, 3)
        h = np.asarray(rows.function(obs), float).ravel()
        np.testing.assert_allclose(h[4:6], [2.0 - obs[0] - obs[1], 4.0 + obs[2]], atol=1e-12)
        for j, row in enumerate(rows.rows):
            if row.power:  # the bounds and the circle are written out
                assert _evaluate(row.formula, obs) == pytest.approx(h[j], abs=1e-12)
    # soft bounds make the four bound rows soft, in the stacked order
    soft = SafetyRows.of(_constraints(soft_bounds=True).resolved(3, 1), NAMES)
    np.testing.assert_array_equal(soft.soft_rows, [0, 1, 2, 3, 6])


@pytest.mark.parametrize("soft_bounds", [False, True])
@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_the_nlp_tightens_exactly_the_rows_of_the_layout(transcription, soft_bounds):
    """Each tightening parameter t_{k,j} enters one NLP row with coefficient -1 (h - t >= lb)
    or +1 (an upper bound: g + t <= ub); that row read as h (g - lbg, or ubg - g) is
    h_j(obs_k) of SafetyRows.function, and it carries a slack exactly when row j is soft."""
    N = 4
    ctrl = MPC(
        _triple_integrator(),
        N,
        Cost(Q=[1.0, 0.1, 0.1], R=[0.1]),
        _constraints(soft_bounds),
        transcription=transcription,
        tightening="tube",
        obs_names=NAMES,
    )
    rows = ctrl.safety_rows
    assert ctrl.safety_names == rows.names == EXPECTED_NAMES
    assert ctrl.safety_function is rows.function
    tr, L = ctrl._tr, ctrl._tr.layout
    m = len(rows)
    assert tr.n_tube == m * N
    W, P, g = tr.nlp["x"], tr.nlp["p"], tr.nlp["g"]
    n_p = P.numel() - tr.n_tube
    fn = ca.Function("probe", [W, P], [g, ca.jacobian(g, P), ca.jacobian(g, W)])
    rng = np.random.default_rng(1)
    w = rng.normal(size=L.n_w)
    w[L.s.ravel()] = 0.0
    if L.z.size:  # the copies on their gaps: the terminal rows are written on z_{N-1} = x_N
        w[L.z] = w[L.x[1:]]
    p = np.concatenate([rng.normal(size=n_p), np.zeros(tr.n_tube)])
    g_val, dg_dp, dg_dw = (np.asarray(ca.DM(v).full()) for v in fn(w, p))
    g_val = g_val.ravel()
    dg_dt, dg_ds = dg_dp[:, n_p:], dg_dw[:, L.s.ravel()] if L.s.size else None
    hit = set()
    for k in range(1, N + 1):
        h = np.asarray(rows.function(w[L.x[k]]), float).ravel()
        for j, row in enumerate(rows.rows):
            column = dg_dt[:, (k - 1) * m + j]
            (i,) = np.flatnonzero(column)
            hit.add(i)
            assert column[i] in (-1.0, 1.0)
            upper = column[i] == 1.0
            assert upper == (row.kind == "upper" and not soft_bounds)
            as_h = tr.ubg[i] - g_val[i] if upper else g_val[i] - tr.lbg[i]
            assert as_h == pytest.approx(h[j], abs=1e-12), (k, row.name)
            has_slack = dg_ds is not None and bool(np.any(dg_ds[i]))
            assert has_slack == row.soft, (k, row.name)
    assert len(hit) == m * N  # one NLP row per safety row and stage


def test_empty_stages_are_those_whose_two_sided_margins_exceed_the_range():
    rows = SafetyRows.of(_constraints(soft_bounds=False).resolved(3, 1), NAMES)
    tube = np.zeros((4, 7))
    tube[1, [0, 2]] = [1.0, 1.5]  # exactly the range 2.5: not empty
    tube[2, [0, 2]] = [1.0, 1.6]  # past it
    tube[3, [1, 3, 4, 5, 6]] = 100.0  # one-sided rows never make the set empty here
    np.testing.assert_array_equal(rows.empty_stages(tube), [False, False, True, False])
    tube[0, 0] = np.inf  # a tube that was not computed
    assert rows.empty_stages(tube)[0]
    with pytest.raises(InputError, match=re.escape("tube must be margins of shape (stages, 7)")):
        rows.empty_stages(np.zeros((4, 6)))


def test_the_controller_counts_empty_stages_by_the_rows():
    """A range of 2e-3 on a, narrower than the tube after a few stages: the controller's
    count is the rows' count on the tube it reports."""
    cons = Constraints(u_min=[-1.0], u_max=[1.0], obs_min=[-1e-3, -5, -5], obs_max=[1e-3, 5, 5])
    ctrl = MPC(
        _triple_integrator(),
        6,
        Cost(Q=[1.0, 0.1, 0.1], R=[0.1]),
        cons,
        tightening="tube",
        obs_names=NAMES,
    )
    result = ctrl(np.zeros(3))
    empty = ctrl.safety_rows.empty_stages(result.tube[1:])
    assert empty.any() and result.empty_tube_stages == int(np.count_nonzero(empty))


def test_report_labels_add_only_units_and_true_limits():
    ctrl = MPC(
        _triple_integrator(),
        3,
        Cost(Q=[1.0, 0.1, 0.1], R=[0.1]),
        _constraints(soft_bounds=False),
        obs_names=NAMES,
    )
    units = ("m", "m/s", "")
    true_min = np.array([-1.2, np.nan, np.nan])
    true_max = np.array([2.0, np.nan, 3.0])
    true_circles = [((0.5, -1.0), 0.2, (0, 2)), ((9.0, 9.0), 1.0, (0, 2))]
    labels, formulas, row_units, levels = report._safety_rows(
        ctrl, NAMES, units, true_min, true_max, true_circles
    )
    rows = ctrl.safety_rows.rows
    assert labels == [
        "a >= -1 m",
        "b >= -2 m/s",
        "a <= 1.5 m",
        "c <= 3",
        "wall[0]",
        "wall[1]",
        "|(a, c) - (0.5, -1)| >= 0.25 m",
    ]
    assert formulas == [r.formula for r in rows]
    assert row_units == ["m", "m/s", "m", "", "", "", "m^2"]
    np.testing.assert_allclose(
        levels, [-0.2, np.nan, -0.5, 0.0, np.nan, np.nan, 0.2**2 - 0.25**2], atol=1e-15
    )
    # other names for the observation entries: the report's, not the controller's
    renamed, formulas, _, _ = report._safety_rows(
        ctrl, ("s", "v", "w"), units, true_min, true_max, []
    )
    assert renamed[0] == "s >= -1 m" and formulas[6] == "(s - 0.5)^2 + (w + 1)^2 - 0.25^2"


def test_bad_input_is_refused_with_the_value():
    cons = _constraints(soft_bounds=False)
    with pytest.raises(InputError, match=r"resolved constraints \(Constraints.resolved"):
        SafetyRows.of(cons, NAMES)
    with pytest.raises(InputError, match="obs_names must be 3 names .* got 2"):
        SafetyRows.of(cons.resolved(3, 1), ("a", "b"))
    with pytest.raises(InputError, match="obs_names must be a sequence of strings, got 'abc'"):
        SafetyRows.of(cons.resolved(3, 1), "abc")
    with pytest.raises(InputError, match=r"'ring': circle must be .* got \(\(0, 3\)"):
        PathConstraint.keep_out("ring", 3, (0, 3), (0.0, 0.0), 1.0)
    with pytest.raises(InputError, match=r"'ring': circle must be .* radius > 0, got"):
        PathConstraint.keep_out("ring", 3, (0, 1), (0.0, 0.0), -1.0)
    obs = ca.SX.sym("obs", 3)
    two = ca.Function("two", [obs], [obs[:2]])
    bad = Constraints(path=[PathConstraint("two", two, circle=((0, 1), (0.0, 0.0), 1.0))])
    with pytest.raises(InputError, match="'two': a circle has one row, but its function gives 2"):
        bad.resolved(3, 1)
    # a circle that is not the function's would label another h than the one constrained
    other = ca.Function("other", [obs], [obs[0] ** 2 + obs[1] ** 2 - 4.0])
    lying = Constraints(path=[PathConstraint("other", other, circle=((0, 1), (0.0, 0.0), 1.0))])
    with pytest.raises(InputError, match=r"'other': circle = .* gives h = -1 at obs = \[0.0"):
        lying.resolved(3, 1)
    # the same circle with its own function passes, its numbers made plain
    honest = Constraints(path=[PathConstraint("c", other, circle=[[0, 1], [0, 0], 2])])
    assert honest.resolved(3, 1).path[0].circle == ((0, 1), (0.0, 0.0), 2.0)
