"""``warm_barrier``: fatrop's and ipopt's solves from the previous plan start at a small
barrier parameter; the first plan keeps the solver's own start, the plans stay the same,
and the option is refused where no interior-point solver reads it. ``warm_max_iter``: the
same solves stop at their own iteration limit."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from vimpc import _jit
from vimpc.errors import InputError
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost
from vimpc.mpc.solvers import WARM_BOUND_PUSH, warm_options

MODEL = NominalModel(Pendulum(), 0.05).discrete_model()
COST = Cost(Q=[1.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
CONS = Constraints(u_min=[-2.0], u_max=[2.0])


def _closed_loop(ctrl: MPC, steps: int = 60) -> tuple[int, np.ndarray, list[int]]:
    """The swing-up from rest on the model itself: the first plan's iterations, every
    call's plan, and every call's iterations."""
    x = np.array([0.1, 0.0])
    first = ctrl.start(x)
    plans, iterations = [], []
    for _ in range(steps):
        r = ctrl(x)
        assert r.status.name == "SOLVED", r.status
        plans.append(r.u_plan)
        iterations.append(r.iterations)
        x = np.asarray(MODEL.step(x, r.u, MODEL.p_default)).reshape(-1)
    return first.iterations, np.array(plans), iterations


@pytest.mark.parametrize("solver", ["fatrop", "ipopt"])
def test_warm_solves_start_low_the_first_plan_does_not_and_the_plans_stay(solver):
    kw = dict(solver=solver, tol=1e-8, max_iter=200, jit="none")
    first, plans, its = _closed_loop(MPC(MODEL, 20, COST, CONS, **kw))
    first_w, plans_w, its_w = _closed_loop(MPC(MODEL, 20, COST, CONS, warm_barrier=1e-3, **kw))
    assert first_w == first  # the first plan: the solver's own start, the same iterations
    # the same closed loop (the solves converge to 1e-8; the plans' inputs are O(1))
    np.testing.assert_allclose(plans_w, plans, atol=1e-4)
    # fewer iterations from the previous plan (on this swing-up: fatrop 398 against 455,
    # ipopt 374 against 452 over 60 calls)
    assert sum(its_w) < 0.95 * sum(its), (sum(its_w), sum(its))


def test_a_failed_solve_makes_the_next_one_cold():
    ctrl = MPC(MODEL, 10, COST, CONS, solver="fatrop", warm_barrier=1e-3, jit="none")
    ctrl.start(np.array([0.1, 0.0]))
    ctrl(np.array([0.1, 0.0]))
    assert ctrl._solving.stepper is ctrl._solving.warm_solver
    ctrl._w0 = None  # what a failed solve leaves
    ctrl(np.array([0.1, 0.0]))
    assert ctrl._solving.stepper is ctrl._solving.solver


class _Recorder:
    """A solver that records what each call was given and returned."""

    def __init__(self, solver):
        self.solver, self.calls = solver, []

    def __call__(self, **args):
        out = self.solver(**args)
        self.calls.append((args, {k: np.asarray(v).reshape(-1) for k, v in out.items()}))
        return out

    def stats(self):
        return self.solver.stats()


@pytest.mark.parametrize("solver", ["fatrop", "ipopt"])
def test_a_stopped_warm_solve_is_continued_from_its_last_iterate_once(solver):
    kw = dict(solver=solver, tol=1e-8, max_iter=200, jit="none", warm_max_iter=1)
    ctrl = MPC(MODEL, 20, COST, CONS, **kw)
    warm, cold = _Recorder(ctrl._solving.warm_solver), _Recorder(ctrl._solving.solver)
    ctrl._solving.warm_solver, ctrl._solving.solver = warm, cold
    x = np.array([0.1, 0.0])
    ctrl.start(x)
    L, seen = ctrl._layout, 0
    for _ in range(60):
        r = ctrl(x)
        x = np.asarray(MODEL.step(x, r.u, MODEL.p_default)).reshape(-1)
        if r.status.name != "FAILED":
            continue
        if ctrl._solving.stepper is warm and len(warm.calls) >= 2 and ctrl._solving.continuation:
            # stopped by warm_max_iter at an infeasible iterate: the next call continues from
            # that iterate moved on by a stage (the measured state first), with the warm
            # instance, within the same limit
            stopped = warm.calls[-1][1]["x"]
            ctrl(x)
            assert ctrl._solving.stepper is warm
            given = np.asarray(warm.calls[-1][0]["x0"]).reshape(-1)
            np.testing.assert_array_equal(given[L.x[0]], x)
            np.testing.assert_array_equal(given[L.x[1:-1]], stopped[L.x[2:]])
            np.testing.assert_array_equal(given[L.u[:-1]], stopped[L.u[1:]])
            seen += 1
            break
    assert seen, "no warm solve was stopped"
    # a continuation that fails too leaves the next call to a solve from scratch (the cold
    # instance: test_a_failed_solve_makes_the_next_one_cold)
    last = {"x": warm.calls[-1][1]["x"]}
    ctrl._solving.stepper = warm
    ctrl._solving._continuing = True  # this call was a continuation
    assert ctrl._solving.next_guess(ctrl, last, None) is None
    ctrl._solving._continuing = False
    np.testing.assert_array_equal(ctrl._solving.next_guess(ctrl, last, None), last["x"])


def test_the_options_of_the_warm_instance():
    opts = {"fatrop": {"print_level": 0, "tol": 1e-4}, "expand": True}
    warm = warm_options("fatrop", opts, 1e-3)
    assert warm["fatrop"] == {
        "print_level": 0,
        "tol": 1e-4,
        "mu_init": 1e-3,
        "bound_push": WARM_BOUND_PUSH,
    }
    assert opts["fatrop"] == {"print_level": 0, "tol": 1e-4}  # the cold options untouched
    assert warm_options("ipopt", {"ipopt": {}}, 1e-2) == {"ipopt": {"mu_init": 1e-2}}
    assert warm_options("fatrop", opts, None) is None
    limited = warm_options("fatrop", opts, None, 7)
    assert limited["fatrop"] == {"print_level": 0, "tol": 1e-4, "max_iter": 7}  # no mu_init
    assert warm_options("ipopt", {"ipopt": {}}, 1e-2, 7) == {
        "ipopt": {"mu_init": 1e-2, "max_iter": 7}
    }


@pytest.mark.parametrize("solver", ["fatrop", "ipopt"])
def test_warm_max_iter_limits_the_solves_from_the_previous_plan_alone(solver):
    kw = dict(solver=solver, tol=1e-8, max_iter=200, jit="none")
    x = np.array([0.1, 0.0])
    free, limited = (
        MPC(MODEL, 20, COST, CONS, **kw),
        MPC(MODEL, 20, COST, CONS, warm_max_iter=2, **kw),
    )
    first, first_limited = free.start(x), limited.start(x)
    assert first_limited.iterations == first.iterations > 2  # the first plan keeps max_iter
    free_its, statuses = [], set()
    for _ in range(30):
        r, r_limited = free(x), limited(x)
        free_its.append(r.iterations)
        if (
            limited._solving.stepper is limited._solving.warm_solver
        ):  # a solve after a failed one is cold
            # stopped after 2 iterations (fatrop counts the one it stopped in: 3)
            assert r_limited.iterations <= 3, r_limited.iterations
            statuses.add(r_limited.status.name)
        else:
            assert statuses - {"SOLVED"}  # only after a solve the limit stopped
        x = np.asarray(MODEL.step(x, r.u, MODEL.p_default)).reshape(-1)
    assert max(free_its) > 3  # the limit did stop solves that needed more
    assert statuses <= {"SOLVED", "ITERATION_LIMIT", "FAILED"} and statuses - {"SOLVED"}


def test_a_compiled_nlp_serves_both_instances_from_one_library(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VIMPC_JIT", raising=False)
    monkeypatch.setattr(_jit, "_SAID", set())
    monkeypatch.setattr(_jit, "_COMPILER", [])
    caplog.set_level(logging.INFO, logger="vimpc")
    if _jit.compiler() is None:  # nothing to compile with: the interpreted path is tested above
        pytest.skip("no C compiler runs on this machine ($CC, gcc, cc)")
    kw = dict(solver="fatrop", tol=1e-8, max_iter=200, warm_barrier=1e-3)
    compiled = MPC(MODEL, 20, COST, CONS, **kw)
    assert compiled.nlp_compiled
    compiles = [r for r in caplog.records if r.getMessage().startswith("compiling")]
    assert len(compiles) == 1 and compiled._solving.warm_solver is not None
    _, plans, _ = _closed_loop(compiled, 20)
    _, interpreted, _ = _closed_loop(MPC(MODEL, 20, COST, CONS, jit="none", **kw), 20)
    np.testing.assert_allclose(plans, interpreted, atol=1e-8)


def test_warm_barrier_is_refused_with_a_solver_that_would_ignore_it():
    with pytest.raises(InputError) as err:
        MPC(MODEL, 5, COST, solver="sqpmethod", warm_barrier=1e-3)
    assert "warm_barrier=0.001 applies only to solver='fatrop' or 'ipopt'" in str(err.value)
    with pytest.raises(InputError, match="warm_max_iter=5 applies only to solver='fatrop'"):
        MPC(MODEL, 5, COST, solver="sqpmethod", warm_max_iter=5)
