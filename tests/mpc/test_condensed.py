"""``solver = "condensed"``: the Gauss–Newton SQP of the implicit transcription with the
states eliminated (vimpc.mpc.condensed)."""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics import CartPole
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost
from vimpc.mpc.condensed import DESCENT_STATUS, QP_SOLVER, box_qp, qp_failure
from vimpc.mpc.solvers import qp_options

DT = 0.1


def _linear_model() -> tuple[DiscreteModel, np.ndarray, np.ndarray]:
    """A damped double integrator, exactly discretised, with an implicit residual and no
    residual Jacobian (the solver differentiates the residual itself)."""
    M = scipy.linalg.expm(np.array([[0, 1, 0], [0, -0.2, 1], [0, 0, 0]]) * DT)
    A, B = M[:2, :2], M[:2, 2:]
    x, u, p, xn = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0), ca.SX.sym("xn", 2)
    ident = ca.Function("id", [x], [x])
    model = DiscreteModel(
        dt=DT, nx=2, nu=1, np=0, nobs=2,
        step=ca.Function("step", [x, u, p], [A @ x + B @ u]),
        residual=ca.Function("res", [x, u, xn, p], [xn - A @ x - B @ u]),
        from_obs=ident, to_obs=ident, state_names=("s", "v"), input_names=("f",),
    )  # fmt: skip
    return model, A, B


def _used_condensed(ctrl: MPC) -> bool:
    return "evaluations" in ctrl._solving.stats()  # the condensed SQP's statistics


def test_it_finds_sqpmethods_plan_on_a_swing_up_with_the_input_bounds_active():
    """The nominal cart-pole's variational model (nonlinear, implicit): along a swing-up
    driven by sqpmethod, the condensed SQP warm-started from sqpmethod's previous plan finds
    sqpmethod's plan at each state (inputs within 1e-5 N, the bounds active at some
    stages), and every predicted state solves the model's step equations to 1e-8."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(
        Q=[10, 20, 0.1, 0.1], R=[0.01], Q_terminal=[50, 100, 5, 5],
        reference=[0, np.pi, 0, 0], periodic=(1,),
    )  # fmt: skip
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    options = dict(transcription="implicit", tol=1e-9, max_iter=100)
    reference = MPC(model, 20, cost, bounds, **options)
    condensed = MPC(model, 20, cost, bounds, solver="condensed", **options)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    active, used = 0, 0
    for _ in range(25):
        want = reference(x)
        got = condensed(x)
        assert want.status.ok and got.status.ok
        used += _used_condensed(condensed)
        np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-5)
        active += int(np.any(np.abs(got.u_plan) >= 20.0 - 1e-9))
        for k in range(20):
            r = model.residual(got.x[k], got.u_plan[k], got.x[k + 1], model.p_default)
            assert np.abs(np.asarray(r)).max() <= 1e-8
        x = np.asarray(model.step(x, want.u, model.p_default)).ravel()
    assert used == 24 and active > 0, (used, active)


@pytest.mark.parametrize("seed", range(20))
def test_box_qp_meets_the_optimality_conditions(seed):
    """On random positive definite problems with random boxes, the active-set solution is
    feasible and optimal: zero gradient on the free entries, the gradient pointing out of
    the box on the entries at a bound (the KKT conditions of a box QP)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    L = rng.normal(size=(n, n))
    H = L @ L.T + 1e-2 * np.eye(n)
    g = rng.normal(size=n) * 10
    lb, ub = -rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    d, converged = box_qp(H, g, lb, ub)
    assert converged
    assert np.all(d >= lb - 1e-12) and np.all(d <= ub + 1e-12)
    grad = H @ d + g
    at_lb, at_ub = np.isclose(d, lb, atol=1e-12), np.isclose(d, ub, atol=1e-12)
    free = ~(at_lb | at_ub)
    scale = 1e-9 * (1 + np.abs(g).max())
    assert np.all(np.abs(grad[free]) <= scale)
    assert np.all(grad[at_lb] >= -scale) and np.all(grad[at_ub] <= scale)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"transcription": "step"}, "transcription='implicit'"),
        ({"hessian": "exact"}, "Gauss–Newton"),
    ],
)
def test_what_it_cannot_solve_is_refused_with_the_reason(options, named):
    model, _, _ = _linear_model()
    with pytest.raises(InputError, match="condensed") as err:
        MPC(model, 8, Cost(Q=[1.0, 1.0], R=[0.1]), solver="condensed", **options)
    assert named in str(err.value)


def test_condensed_start_is_refused_with_another_solver():
    model, _, _ = _linear_model()
    with pytest.raises(InputError, match="condensed_start='fatrop' applies only to"):
        MPC(model, 8, Cost(Q=[1.0, 1.0], R=[0.1]), condensed_start="fatrop")


def test_with_soft_rail_bounds_active_it_finds_fatrops_plan():
    """The nominal cart-pole swinging up on a rail of +-0.25 m, the rail a soft bound (exact
    L1 penalty, weight 1e4), driven by fatrop: where the condensed SQP's warm start (its own
    previous plan) leads to fatrop's local solution, its plan agrees with fatrop's to 1e-4 N
    and its slacks to 1e-6 m (the QP's rows and slacks are the NLP's); the rail is active
    (a positive slack) at some of them. Cold starts are condensed_start's (fatrop here), and
    so are the warm solves it does not finish (no time budget; 5 early ones)."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(
        Q=[10, 20, 0.1, 0.1], R=[0.01], Q_terminal=[50, 100, 5, 5],
        reference=[0, np.pi, 0, 0], periodic=(1,),
    )  # fmt: skip
    bounds = Constraints(
        u_min=[-20.0], u_max=[20.0], obs_min=[-0.25, -np.inf, -np.inf, -np.inf],
        obs_max=[0.25, np.inf, np.inf, np.inf], soft_bounds=True, bound_weight=1e4,
    )  # fmt: skip
    options = dict(transcription="implicit", max_iter=200)
    reference = MPC(model, 20, cost, bounds, solver="fatrop", tol=1e-9, **options)
    condensed = MPC(
        model, 20, cost, bounds, solver="condensed", condensed_start="fatrop", tol=1e-5,
        **options,
    )  # fmt: skip
    x = np.array([0.0, 0.1, 0.0, 0.0])
    agreed, active, handed = 0, 0, 0
    for k in range(30):
        want, got = reference(x), condensed(x)
        assert want.status.ok and got.status.ok
        assert got.handed_over or k > 0
        handed += got.handed_over
        if np.abs(got.u_plan - want.u_plan).max() <= 1e-4:
            agreed += 1
            assert abs(got.slack - want.slack) <= 1e-6
            active += want.slack > 1e-3
        x = np.asarray(model.step(x, want.u, model.p_default)).ravel()
    assert agreed >= 20 and active >= 10 and handed <= 8, (agreed, active, handed)


def test_a_time_budget_stops_it_with_the_fallback_and_the_next_call_starts_warm():
    """A budget shorter than one iteration: each warm solve stops after its first
    iteration (TIME_LIMIT, the fallback input: the next input of the plan held), and the
    call after it is the condensed SQP's again, from that plan shifted (no cold start)."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    ctrl = MPC(model, 20, cost, bounds, solver="condensed", tol=1e-9, time_budget=1e-6)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    first = ctrl.start(x)  # the cold start, before the clock: not held to the budget
    assert first.status.ok and first.handed_over
    for k in range(3):  # start's plan is for the first call: its inputs in turn
        result = ctrl(x)
        assert result.status.name == "TIME_LIMIT" and result.fallback and not result.handed_over
        np.testing.assert_allclose(result.u, first.u_plan[k])
        stats = ctrl._solving.stats()
        assert stats["return_status"] == "time budget" and stats["iter_count"] == 1
        x = np.asarray(model.step(x, result.u, model.p_default)).ravel()


@pytest.mark.parametrize("soft", [True, False])
def test_with_a_tube_and_state_bounds_it_solves_fatrops_problem(soft):
    """The double integrator (a constant one-step bound of 0.02) steered from s = -0.5 to
    0.99, near its rail |s| <= 1, with the feedback tube: the rail's rows tightened by the
    tube (active: the plan runs along the tightened rail), with soft bounds their slacks
    and the inputs' soft tightened rows, with hard bounds the inputs' tightened box. A
    convex problem: at every step the condensed SQP (warm) meets the NLP's rows to 1e-8 and
    reaches fatrop's objective (tol 1e-10) to 1e-6 relative (fatrop's interior slacks, ~-1e-8,
    set to 0); with hard bounds its plan is fatrop's to 1e-5. The transcription's
    ``inequality`` is its NLP's rows with differing bounds, in their order."""
    model, A, B, cost, bounds = _on_the_rail(lambda x: ca.DM([0.02, 0.02]), soft)
    options = dict(tightening="tube", tube="feedback", transcription="implicit", max_iter=100)
    reference = MPC(model, 15, cost, bounds, solver="fatrop", tol=1e-10, **options)
    condensed = MPC(model, 15, cost, bounds, solver="condensed", tol=1e-9, **options)
    tr, L = condensed._tr, condensed._layout
    nlp = ca.Function("nlp", [tr.nlp["x"], tr.nlp["p"]], [tr.nlp["f"], tr.nlp["g"], tr.inequality])
    rng = np.random.default_rng(1)
    for _ in range(3):
        _, values, rows = nlp(
            rng.normal(size=tr.nlp["x"].numel()), rng.normal(size=tr.nlp["p"].numel())
        )
        np.testing.assert_array_equal(np.asarray(values)[tr.lbg != tr.ubg], np.asarray(rows))
    x = np.array([-0.5, 0.0])
    active = 0
    for k in range(25):
        want, got = reference(x), condensed(x)
        assert want.status.ok and got.status.ok and got.handed_over == (k == 0)
        np.testing.assert_allclose(got.tube, want.tube, atol=1e-12)
        P = condensed._tightening.along(condensed._w0, _parameters(condensed, x))[0]
        f_got, g_got, _ = nlp(condensed._w0, P)
        w_want = reference._w0.copy()
        w_want[L.s] = np.maximum(w_want[L.s], 0.0)
        f_want = float(nlp(w_want, P)[0])
        g_got = np.asarray(g_got).ravel()
        assert np.all(g_got >= tr.lbg - 1e-8) and np.all(g_got <= tr.ubg + 1e-8)
        assert float(f_got) <= f_want + 1e-6 * (1 + f_want), (k, float(f_got), f_want)
        if not soft:
            np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-5)
        active += bool(np.any(got.obs[1:, 0] >= 1.0 - got.tube[1:, 0] - 1e-6))
        x = A @ x + B @ want.u
    assert active >= 5, active


def test_where_the_tube_along_the_guess_fails_it_solves_with_the_last_solved_calls_tube():
    """The double integrator on its rail with the feedback tube (as above), each warm solve
    with the tube along its guess made to fail: the condensed SQP solves the call again with
    the margins of the last call that solved, shifted by one stage as the plan is (start's,
    unshifted, in the first call), and the call says so (``tube_kept``, not handed over).
    Its plan meets the NLP's rows with those margins to 1e-8; the tube along the guess
    differs from them (so the fallback is not the same problem)."""
    ctrl, A, B = _rail_with_a_speed_tube()
    tr = ctrl._tr
    nlp = ca.Function("nlp", [tr.nlp["x"], tr.nlp["p"]], [tr.nlp["g"]])
    x = np.array([-0.5, 0.0])
    last = ctrl.start(x)
    solve, tries = ctrl._solving.condensed.solve, []

    def first_try_fails(*args):
        tries.append(1)
        return None if len(tries) % 2 else solve(*args)

    ctrl._solving.condensed.solve = first_try_fails
    differed = 0
    for k in range(6):
        given = _parameters(ctrl, x)
        along_guess = ctrl._tightening.along(ca.DM(ctrl._initial_guess(x)), given)[1]
        got = ctrl(x)
        assert got.status.ok and got.tube_kept and not got.handed_over and len(tries) == 2 * k + 2
        want = last.tube if k == 0 else np.vstack([last.tube[1:], last.tube[-1:]])
        np.testing.assert_array_equal(got.tube, want)
        P = ctrl._tightening.with_margins(given, got.tube, got.tube_inputs)
        g = np.asarray(nlp(ctrl._w0, P)).ravel()
        assert np.all(g >= tr.lbg - 1e-8) and np.all(g <= tr.ubg + 1e-8)
        differed += bool(np.abs(np.asarray(along_guess).T - got.tube).max() > 1e-6)
        last, x = got, A @ x + B @ got.u
    assert differed >= 3, differed


def _on_the_rail(bound, soft: bool = True):
    """``(model, A, B, cost, constraints)``: the double integrator with the one-step bound
    ``bound(x)`` (delta 0.05), steered to s = 0.99 near its rail |s| <= 1 (soft bounds of
    weight 1e3, or hard)."""
    model, A, B = _linear_model()
    x_, u_, p_ = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0)
    fn = ca.Function("bound", [x_, u_, p_], [bound(x_)])
    model = dataclasses.replace(
        model, bound=fn, delta=0.05, bound_info=BoundInfo(0.05, "step", None, "assumed", "assumed")
    )
    cost = Cost(Q=[10.0, 0.1], R=[0.1], reference=[0.99, 0.0])
    bounds = Constraints(
        u_min=[-2.0], u_max=[2.0], obs_min=[-1.0, -np.inf], obs_max=[1.0, np.inf],
        soft_bounds=soft, bound_weight=1e3,
    )  # fmt: skip
    return model, A, B, cost, bounds


def _rail_with_a_speed_tube(**options) -> tuple[MPC, np.ndarray, np.ndarray]:
    """The condensed SQP on the double integrator's soft rail with a feedback tube whose
    bound grows with the speed (the tube follows the plan), and ``A``, ``B``."""
    model, A, B, cost, bounds = _on_the_rail(lambda x: 0.01 + 0.05 * ca.fabs(x[1]) * ca.DM.ones(2))
    ctrl = MPC(model, 15, cost, bounds, solver="condensed", tol=1e-9, tightening="tube",
               tube="feedback", transcription="implicit", max_iter=100, **options)  # fmt: skip
    return ctrl, A, B


def test_after_a_call_nothing_solved_the_kept_tube_follows_the_plan_shifted_twice():
    """With a time budget, a call where both tries and the descent fail gives the fallback
    input and leaves the plan shifted as the next guess (shifted once more by that call):
    the margins of the next call's second try are the last solved call's shifted twice,
    stage for stage."""
    ctrl, A, B = _rail_with_a_speed_tube(time_budget=0.5, period=1.0)
    x = np.array([-0.5, 0.0])
    ctrl.start(x)
    solved = ctrl(x)
    assert solved.status.ok and not solved.tube_kept
    x = A @ x + B @ solved.u
    solve = ctrl._solving.condensed.solve
    ctrl._solving.condensed.solve = lambda *args: None
    descend, ctrl._solving.condensed.descend = ctrl._solving.condensed.descend, lambda *args: None
    failed = ctrl(x)
    assert failed.fallback and not failed.tube_kept and failed.descended
    ctrl._solving.condensed.descend = descend
    x = A @ x + B @ failed.u
    tries = []

    def first_try_fails(*args):
        tries.append(1)
        return None if len(tries) == 1 else solve(*args)

    ctrl._solving.condensed.solve = first_try_fails
    kept = ctrl(x)
    assert kept.status.ok and kept.tube_kept and len(tries) == 2
    twice = np.vstack([solved.tube[2:], solved.tube[-1:], solved.tube[-1:]])
    np.testing.assert_array_equal(kept.tube, twice)


def _parameters(ctrl: MPC, x0: np.ndarray) -> ca.DM:
    """The NLP's parameters before the tube's: x0, the references, u_prev, p."""
    N = ctrl.horizon
    refs = np.stack([ctrl.cost.reference(k * ctrl.model.dt) for k in range(N + 1)], axis=1)
    return ca.DM(np.concatenate([x0, refs.T.reshape(-1), ctrl._u_prev, ctrl.model.p_default]))


def test_a_failed_cold_start_leaves_its_last_iterate_to_the_condensed_sqp():
    """With a time budget, the cart-pole swing-up's first plan with the cold-start solver
    stopped after 2 iterations (its steps still infeasible: FAILED): the calls after it are
    the condensed SQP's, from that iterate (not another cold start in the loop), each
    within its iteration limit (its tries failing too here, the descent's iterate or the
    fallback input)."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    ctrl = MPC(model, 20, cost, bounds, solver="condensed", max_iter=2, tol=1e-6,
              time_budget=0.5, period=1.0)  # fmt: skip
    x = np.array([0.0, 0.1, 0.0, 0.0])
    first = ctrl.start(x)
    assert first.status.name == "FAILED" and first.handed_over
    for _ in range(5):
        result = ctrl(x)
        assert not result.handed_over and result.descended
        assert result.status.name in ("ITERATION_LIMIT", "FAILED")
        assert ctrl._solving.stats()["iter_count"] <= 2
        x = np.asarray(model.step(x, result.u, model.p_default)).ravel()


def test_without_a_time_budget_an_unfinished_warm_solve_is_handed_over():
    """Every warm solve of the condensed SQP made to stop unfinished: without a time budget
    it goes to condensed_start (sqpmethod, to convergence from the same guess), whose plan
    the call returns (handed over, sqpmethod's own plan to 1e-6); with a budget the same
    calls go to the single-shooting descent (not handed over), whose plan's states are the
    model's step under its inputs and whose merit never rose."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    options = dict(transcription="implicit", tol=1e-8, max_iter=100)
    reference = MPC(model, 20, cost, bounds, **options)
    handing = MPC(model, 20, cost, bounds, solver="condensed", **options)
    timed = MPC(model, 20, cost, bounds, solver="condensed", time_budget=0.5, period=1.0,
                **options)  # fmt: skip
    x = np.array([0.0, 0.1, 0.0, 0.0])
    for ctrl in (reference, handing, timed):
        ctrl.start(x)
    for ctrl in (handing, timed):
        ctrl._solving.condensed.solve = lambda *args, **kwargs: (
            None
        )  # unfinished, whatever the cause
    for _ in range(4):
        want, got, held = reference(x), handing(x), timed(x)
        assert got.status.ok and got.handed_over
        np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-6)
        assert held.status.ok and held.descended and not held.handed_over
        np.testing.assert_allclose(held.x, _simulated(model, x, held.u_plan), atol=1e-10)
        merits = np.array(timed._solving.stats()["merits"])
        assert np.all(np.diff(merits) <= 1e-12 * merits[:-1])
        x = np.asarray(model.step(x, want.u, model.p_default)).ravel()


@pytest.mark.parametrize("allowed", [1, 3, 6])
def test_warm_max_iter_bounds_a_warm_calls_iterations_and_never_hands_over(allowed):
    """With ``warm_max_iter = n`` a warm call's condensed tries and descent together take at
    most ``n`` iterations (counted, so the same on any computer), the first try at most
    ``ceil(0.4 n)``; an unfinished call goes to the descent, never to ``condensed_start``;
    and the calls that converge within it return the unlimited solver's plan."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    options = dict(transcription="implicit", tol=1e-8, max_iter=100)
    free = MPC(model, 20, cost, bounds, solver="condensed", **options)
    capped = MPC(model, 20, cost, bounds, solver="condensed", warm_max_iter=allowed, **options)
    cond = capped._solving.condensed
    counted: list[tuple[str, int | None, int]] = []
    for name in ("solve", "descend"):
        method = getattr(cond, name)

        def spy(*args, _method=method, _name=name, **kwargs):
            found = _method(*args, **kwargs)
            counted.append((_name, args[-1], cond.stats()["iter_count"]))
            return found

        setattr(cond, name, spy)
    x = np.array([0.0, 0.3, 0.0, 0.0])
    for ctrl in (free, capped):
        ctrl.start(x)
    descended = 0
    for _ in range(12):
        counted.clear()
        want, got = free(x), capped(x)
        assert not got.handed_over
        assert counted and sum(n for _, _, n in counted) <= allowed
        assert counted[0][0] == "solve" and counted[0][1] == int(np.ceil(0.4 * allowed))
        descended += got.descended
        if got.descended:  # the rest of the iterations, after the tries' (no tube here)
            assert counted[-1][0] == "descend"
            assert counted[-1][1] == allowed - sum(n for m, _, n in counted if m == "solve")
            assert got.status.name in ("SOLVED", "ITERATION_LIMIT")
        elif got.status.ok:  # converged in a try: the unlimited solver's plan
            np.testing.assert_allclose(got.u_plan, want.u_plan, atol=1e-6)
        x = np.asarray(model.step(x, want.u, model.p_default)).ravel()
    # the swing-up's warm solves take 7-83 iterations unlimited: every call after the first
    # is stopped, and descends where iterations are left after the first try
    assert descended == (0 if allowed == 1 else 11)


def test_a_descent_iterate_with_slack_gives_the_fallback_input():
    """With a time budget and both tries made to fail, the descent's unconverged iterate is
    the call's plan (ITERATION_LIMIT) where its soft rows hold without slack; the same
    iterate with a slack of 1e-3 on a rail row gives the fallback input instead (an
    unconverged iterate's slacks are not a solution's: on the CLNN cart-pole they reached
    57 m past the tightened rail)."""
    results = {}
    for slack in (0.0, 1e-3):
        ctrl, A, B = _rail_with_a_speed_tube(time_budget=0.5, period=1.0)
        ctrl._solving.condensed.max_iter = 1  # the descent stops unconverged
        x = np.array([-0.5, 0.0])
        ctrl.start(x)
        ctrl._solving.condensed.solve = lambda *args: None
        descend = ctrl._solving.condensed.descend

        def with_slack(*args, slack=slack, descend=descend, rows=ctrl._layout.s[1:, 0]):
            w, f, g = descend(*args)
            w[rows] += slack  # the rows hold: a slack only loosens them
            return w, f, g

        ctrl._solving.condensed.descend = with_slack
        results[slack] = ctrl(x)
        assert results[slack].descended
    assert results[0.0].status.name == "ITERATION_LIMIT" and not results[0.0].fallback
    assert results[1e-3].status.name == "FAILED" and results[1e-3].fallback


def _simulated(model: DiscreteModel, x: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """The states ``(N + 1, nx)`` of the model's step from ``x`` under ``inputs (N, nu)``."""
    states = [np.asarray(x, dtype=np.float64)]
    for u in inputs:
        states.append(np.asarray(model.step(states[-1], u, model.p_default)).ravel())
    return np.array(states)


def test_the_descent_reaches_fatrops_swing_up_from_the_state_held():
    """The cart-pole swing-up on a soft rail (|s| <= 0.6 m) from the state held and no
    input, a cold guess far from the plan: every accepted iterate of the single-shooting
    descent lowers the merit (never rises above round-off), it converges (in fewer
    iterations than its cap, 200), and its plan is fatrop's to 1e-3 in the inputs with an
    objective no more than 1e-6 above it; the plan's states are the model's step under its
    inputs. Given the far guess and that plan, it starts from the plan (the lower merit)
    and stops at once. With no budget left after its first iteration it returns that
    iterate (the descent's status), its merit below the guess's."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(
        u_min=[-20.0], u_max=[20.0], obs_min=[-0.6, -np.inf, -np.inf, -np.inf],
        obs_max=[0.6, np.inf, np.inf, np.inf], soft_bounds=True, bound_weight=1e3,
    )  # fmt: skip
    options = dict(transcription="implicit", tol=1e-6, max_iter=200)
    ctrl = MPC(model, 20, cost, bounds, solver="condensed", **options)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    guess = np.asarray(ctrl._initial_guess(x)).ravel()
    refs = np.stack([ctrl.cost.reference(0.05 * k) for k in range(21)])
    P = np.asarray(_parameters(ctrl, x)).ravel()
    lbx, ubx = (np.asarray(ctrl._bounds[k]).ravel() for k in ("lbx", "ubx"))
    cond = ctrl._solving.condensed
    args = (P, lbx, ubx, refs, ctrl._u_prev, model.p_default)
    w, f, _ = cond.descend(guess.copy(), *args)
    stats = cond.stats()
    assert stats["success"] and stats["iter_count"] < 200
    merits = np.array(stats["merits"])
    assert merits.size > 10 and np.all(np.diff(merits) <= 1e-12 * merits[:-1])
    L = ctrl._layout
    np.testing.assert_allclose(w[L.x], _simulated(model, x, w[L.u]), atol=1e-10)
    want = MPC(model, 20, cost, bounds, solver="fatrop", **options).start(x)
    np.testing.assert_allclose(w[L.u], want.u_plan, atol=1e-3)
    assert f <= want.cost + 1e-6 * abs(want.cost)
    again = cond.descend([guess.copy(), w.copy()], *args)  # from the better of the two
    assert cond.stats()["merits"][0] <= f + 1e-9 * abs(f) and cond.stats()["iter_count"] <= 2
    np.testing.assert_allclose(again[0][L.u], w[L.u], atol=1e-6)
    cond.max_iter = 1
    w1, f1, _ = cond.descend(guess.copy(), *args)
    assert cond.stats()["return_status"] == DESCENT_STATUS and f1 < merits[0]
    np.testing.assert_allclose(w1[L.x], _simulated(model, x, w1[L.u]), atol=1e-10)


class _FailingOnce:
    """A cold-start solver whose first call fails (a non-finite iterate); it records every
    call's guess."""

    def __init__(self, solver) -> None:
        self.solver, self.guesses, self.failed = solver, [], False

    def __call__(self, **args):
        self.guesses.append(np.asarray(args["x0"]).ravel().copy())
        sol = self.solver(**args)
        if not self.failed:
            self.failed = True
            return {**sol, "x": ca.DM.nan(*sol["x"].shape)}
        return sol

    def stats(self):
        return self.solver.stats()


def test_a_warm_solve_whose_hand_over_fails_leaves_a_cold_start():
    """A warm solve handed to the cold-start solver that fails there too gives the fallback
    input, and the next call starts cold, from the measured state held (as after any
    solver's failed call), not from the plan shifted once more: the guess both solvers
    failed from only ages."""
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    bounds = Constraints(u_min=[-20.0], u_max=[20.0])
    ctrl = MPC(model, 20, cost, bounds, solver="condensed", transcription="implicit", tol=1e-8)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    plan = ctrl.start(x)
    ctrl._solving.condensed.solve = lambda *args, **kwargs: None  # every warm solve unfinished
    ctrl._solving.solver = cold = _FailingOnce(ctrl._solving.solver)
    L = ctrl._layout
    failed = ctrl(x)
    assert failed.status.name == "FAILED" and failed.fallback and failed.handed_over
    np.testing.assert_allclose(failed.u, plan.u_plan[1])
    shifted = cold.guesses[0][L.x]
    assert np.ptp(shifted, axis=0).max() > 0.1  # the failed solve's guess: the plan shifted
    x = np.asarray(model.step(x, failed.u, model.p_default)).ravel()
    again = ctrl(x)
    assert again.status.ok and again.handed_over
    np.testing.assert_allclose(cold.guesses[1][L.x], np.tile(x, (ctrl.horizon + 1, 1)))


def test_a_daqp_setup_failure_is_named_as_one():
    """DAQP fails in its setup on a Hessian that is not positive definite, and CasADi then
    keeps the last solve's exit flag (0 before any, 1 after an optimal one): both read as
    the setup's failure; an infeasible QP keeps its own flag (-1)."""
    solver = ca.conic(
        "q", QP_SOLVER, {"h": ca.Sparsity.dense(2, 2), "a": ca.Sparsity.dense(1, 2)},
        qp_options(QP_SOLVER),
    )  # fmt: skip
    qp = dict(g=np.ones(2), a=np.ones((1, 2)), lba=-1.0, uba=1.0, lbx=-10.0, ubx=10.0)
    singular, definite = np.diag([0.0, 1.0]), np.eye(2)
    for h in (singular, definite, singular):
        solver(h=h, **qp)
        stats = solver.stats()
        assert stats["success"] == (h is definite)
        if h is singular:
            assert "DAQP's setup" in qp_failure(stats), stats["return_status"]
    solver(h=definite, **{**qp, "lba": 30.0, "uba": 40.0})  # x1 + x2 <= 20 on the box
    stats = solver.stats()
    assert not stats["success"] and qp_failure(stats).endswith("(DAQP exit flag -1)")
