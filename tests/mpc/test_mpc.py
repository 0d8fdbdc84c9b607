"""The controller against reference solutions and its failure handling."""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from vimpc import _jit
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics import CartPole, Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost, EnergyShaping, PathConstraint, Status

DT = 0.1
# double integrator with a drag term, exact zero-order-hold discretisation
A_C = np.array([[0.0, 1.0], [0.0, -0.2]])
B_C = np.array([[0.0], [1.0]])


def _linear_model(implicit: bool) -> DiscreteModel:
    M = scipy.linalg.expm(np.block([[A_C, B_C], [np.zeros((1, 3))]]) * DT)
    A, B = M[:2, :2], M[:2, 2:]
    x, u, p, xn = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 0), ca.SX.sym("xn", 2)
    ident = ca.Function("id", [x], [x])
    return (
        DiscreteModel(
            dt=DT,
            nx=2,
            nu=1,
            np=0,
            nobs=2,
            step=ca.Function("step", [x, u, p], [ca.mtimes(A, x) + ca.mtimes(B, u)]),
            residual=ca.Function("res", [x, u, xn, p], [xn - ca.mtimes(A, x) - ca.mtimes(B, u)])
            if implicit
            else None,
            from_obs=ident,
            to_obs=ident,
            state_names=("s", "v"),
            input_names=("f",),
        ),
        A,
        B,
    )


def test_input_bounds_hold_and_plan_is_consistent():
    model, A, B = _linear_model(implicit=False)
    ctrl = MPC(model, 10, Cost(Q=[10.0, 1.0], R=[1e-3]), Constraints(u_min=[-0.5], u_max=[0.5]))
    result = ctrl(np.array([3.0, 0.0]))
    assert result.status is Status.SOLVED
    assert np.all(np.abs(result.u_plan) <= 0.5 + 1e-9)
    assert np.isclose(abs(result.u[0]), 0.5)  # far from the origin the bound is active
    for k in range(10):  # the predicted states follow the model
        np.testing.assert_allclose(
            result.x[k + 1], A @ result.x[k] + B @ result.u_plan[k], atol=1e-8
        )


def test_soft_constraint_reports_slack_and_hard_infeasibility_falls_back():
    model, _, _ = _linear_model(implicit=False)
    obs = ca.SX.sym("obs", 2)
    wall = ca.Function("wall", [obs], [1.0 - obs[0]])  # s <= 1
    cost = Cost(Q=[1.0, 0.1], R=[1e-2])
    soft = MPC(
        model,
        10,
        cost,
        Constraints(u_min=[-0.1], u_max=[0.1], path=[PathConstraint("wall", wall, soft=True)]),
    )
    result = soft(np.array([0.9, 2.0]))  # moving too fast to stop before the wall
    assert result.status.ok and result.slack > 1e-3
    hard = MPC(
        model,
        10,
        cost,
        Constraints(u_min=[-0.1], u_max=[0.1], path=[PathConstraint("wall", wall)]),
        safe_input=[-0.1],
    )
    result = hard(np.array([0.9, 2.0]))
    assert not result.status.ok and result.fallback
    np.testing.assert_array_equal(result.u, [-0.1])


def test_fallback_uses_the_shifted_previous_plan():
    model, _, _ = _linear_model(implicit=False)
    obs = ca.SX.sym("obs", 2)
    wall = ca.Function("wall", [obs], [1.0 - obs[0]])
    ctrl = MPC(
        model,
        10,
        Cost(Q=[1.0, 0.1], R=[1e-2]),
        Constraints(u_min=[-0.1], u_max=[0.1], path=[PathConstraint("wall", wall)]),
    )
    first = ctrl(np.array([0.0, 0.0]))
    assert first.status.ok
    failed = ctrl(np.array([0.9, 2.0]))
    assert failed.fallback
    np.testing.assert_allclose(failed.u, first.u_plan[1])


def test_cartpole_nominal_variational_model_swings_up():
    dt = 0.05
    model = NominalModel(CartPole(), dt).discrete_model()
    plant = NominalModel(
        CartPole(friction=[0.5, 0.1], m=1.05, mc=0.95), dt, substeps=50
    ).discrete_model()
    ctrl = MPC(
        model,
        20,
        Cost(
            Q=[10, 20, 0.1, 0.1],
            R=[0.01],
            Q_terminal=[50, 100, 5, 5],
            reference=[0, np.pi, 0, 0],
            periodic=(1,),
        ),
        Constraints(
            u_min=[-30],
            u_max=[30],
            obs_min=[-1, -np.inf, -np.inf, -np.inf],
            obs_max=[1, np.inf, np.inf, np.inf],
            soft_bounds=True,
        ),
        transcription="implicit",
    )
    x = np.array([0.0, 0.1, 0.0, 0.0])
    for _ in range(60):
        result = ctrl(x)
        assert result.status.ok
        x = np.asarray(plant.step(x, result.u, [])).ravel()
    assert abs(np.cos(x[1]) + 1) < 1e-2 and abs(x[3]) < 0.5  # upright, balancing


@pytest.mark.parametrize(
    "solver, transcription", [("sqpmethod", "implicit"), ("fatrop", "implicit"), ("ipopt", "step")]
)
def test_compiled_controllers_solve_the_interpreted_ones_problem(
    solver, transcription, tmp_path, monkeypatch
):
    # jit="model" compiles the cart-pole's midpoint residual (an SX function) and leaves the
    # NLP around it unexpanded; jit="nlp" compiles the whole NLP. Both solve the same
    # problem: the plans agree with the interpreted controller's to the solver tolerance.
    monkeypatch.chdir(tmp_path)
    model = NominalModel(CartPole(), 0.05).discrete_model()
    cost = Cost(Q=[10, 20, 0.1, 0.1], R=[0.01], reference=[0, np.pi, 0, 0], periodic=(1,))
    cons = Constraints(u_min=[-30], u_max=[30])
    plans = {}
    for jit in ("none", "model", "nlp"):
        ctrl = MPC(
            model, 10, cost, cons, solver=solver, transcription=transcription, jit=jit, tol=1e-10
        )
        assert ctrl.model_compiled == (jit == "model")
        plans[jit] = [ctrl(np.array(x0)).u_plan for x0 in ([0.0, 0.3, 0.0, 0.0], [0.2, 2.8, 1, -1])]
    for jit in ("model", "nlp"):
        np.testing.assert_allclose(plans[jit], plans["none"], atol=1e-6)
    assert list(tmp_path.iterdir()) == []  # the generated C stays out of the working directory


def test_a_stage_function_with_a_newton_loop_stays_interpreted():
    x, a = ca.MX.sym("x"), ca.MX.sym("a")
    root = ca.rootfinder("root", "newton", ca.Function("g", [x, a], [x**3 - x - a]))
    assert _jit.compiled(ca.Function("f", [x], [root(0.0, x)])) is None
    compiled = _jit.compiled(ca.Function("f", [x], [ca.sin(x) * x]), derivatives=1)
    assert compiled is not None and float(compiled(0.7)) == float(ca.sin(0.7) * 0.7)


def test_a_model_jit_that_cannot_compile_says_so(monkeypatch):
    # a compile that fails (no C compiler, a compiler stopped by Ctrl-C, a stage function
    # without an SX form) leaves the model interpreted, and the controller says so
    monkeypatch.setattr(_jit, "compiled", lambda fn, derivatives=0: None)
    model = NominalModel(Pendulum(), 0.05).discrete_model()
    cost = Cost(Q=[1.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
    with pytest.warns(RuntimeWarning, match="residual function was not compiled"):
        ctrl = MPC(model, 5, cost, jit="model")
    assert not ctrl.model_compiled


def test_bad_input_is_named():
    model, _, _ = _linear_model(implicit=False)
    cost = Cost(Q=[1.0, 1.0], R=[1.0])
    with pytest.raises(InputError, match="horizon must be a positive integer, got 0"):
        MPC(model, 0, cost)
    with pytest.raises(InputError, match=r"u_min\[0\] = 2.0 exceeds constraints.u_max\[0\] = 1.0"):
        MPC(model, 5, cost, Constraints(u_min=[2.0], u_max=[1.0]))
    with pytest.raises(InputError, match="transcription='implicit' needs a model with a residual"):
        MPC(model, 5, cost, transcription="implicit")
    with pytest.raises(InputError, match="did you mean 'fatrop'"):
        MPC(model, 5, cost, solver="fatrob")
    with pytest.raises(InputError, match="jit.*'none', 'model', 'nlp'.*True"):
        MPC(model, 5, cost, jit=True)
    ctrl = MPC(model, 5, cost)
    with pytest.raises(InputError, match="obs must be finite"):
        ctrl(np.array([np.nan, 0.0]))
    with pytest.raises(InputError, match=r"obs must have shape \(2,\)"):
        ctrl(np.zeros(3))


@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_hard_path_constraint_holds_along_the_plan(transcription):
    model, _, _ = _linear_model(implicit=True)
    obs = ca.SX.sym("obs", 2)
    wall = ca.Function("wall", [obs], [0.5 - obs[0]])  # s <= 0.5
    ctrl = MPC(
        model,
        15,
        Cost(Q=[10.0, 0.1], R=[1e-3], reference=[2.0, 0.0]),
        Constraints(u_min=[-1.0], u_max=[1.0], path=[PathConstraint("wall", wall)]),
        transcription=transcription,
    )
    result = ctrl(np.array([0.0, 0.0]))
    assert result.status.ok
    assert result.obs[:, 0].max() <= 0.5 + 1e-6  # pushed against the wall, not through it
    assert result.obs[:, 0].max() > 0.45


def test_input_rate_penalty_smooths_the_first_move():
    # with a heavy weight on u_0 - u_prev the first input stays near the previous one
    model, _, _ = _linear_model(implicit=False)
    free = MPC(model, 10, Cost(Q=[10.0, 1.0], R=[1e-3]))
    smooth = MPC(model, 10, Cost(Q=[10.0, 1.0], R=[1e-3], R_rate=[100.0]))
    x0 = np.array([2.0, 0.0])
    jump = free(x0).u[0]
    held = smooth(x0).u[0]  # u_prev is the safe input 0 before the first call
    assert abs(jump) > 1.0
    assert abs(held) < 0.2 * abs(jump)


def test_time_varying_reference_is_queried_per_stage():
    model, _, _ = _linear_model(implicit=False)
    ctrl = MPC(model, 10, Cost(Q=[1.0, 0.0], R=[1e-4], reference=lambda t: np.array([t, 0.0])))
    result = ctrl(np.array([0.0, 1.0]), t=2.0)
    assert result.status.ok
    np.testing.assert_allclose(ctrl.reference(2.5), [2.5, 0.0])
    assert result.obs[-1, 0] > 1.0  # the plan moves toward the reference 2 .. 3


def _pendulum_cost(energy):
    return Cost(
        Q=[10.0, 0.1],
        R=[0.01],
        Q_terminal=[50.0, 1.0],
        reference=[np.pi, 0.0],
        periodic=(0,),
        energy=energy,
    )


def test_energy_shaping_on_the_model_energy_swings_the_pendulum_up():
    # the torque limit 2 N m is below the gravity torque 4.9 N m: the pendulum must pump
    # energy, and with a 1 s horizon only the energy term sees the way up
    dt = 0.05
    model = NominalModel(Pendulum(), dt).discrete_model()
    plant = NominalModel(Pendulum(friction=[0.1], m=1.05), dt, substeps=20).discrete_model()
    finals = {}
    for name, energy in (("shaped", EnergyShaping(weight=1.0)), ("plain", None)):
        ctrl = MPC(
            model,
            20,
            _pendulum_cost(energy),
            Constraints(u_min=[-2.0], u_max=[2.0]),
            transcription="implicit",
            max_iter=30,
        )
        x = np.array([0.05, 0.0])
        for _ in range(120):
            result = ctrl(x)
            assert result.status.ok
            x = np.asarray(plant.step(x, result.u, [])).ravel()
        finals[name] = x
    x = finals["shaped"]
    assert abs(np.cos(x[0]) + 1) < 1e-3 and abs(x[1]) < 0.1  # upright, at rest
    assert np.cos(finals["plain"][0]) > 0  # without the energy term it stays below
    # the default target is the model's energy of the reference: m g l / 2 upright
    ctrl = MPC(model, 20, _pendulum_cost(EnergyShaping()))
    expected = float(model.energy(model.from_obs([np.pi, 0.0]), model.p_default))
    assert ctrl.cost.energy.target == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.0 * 9.81 * 1.0 / 2, rel=1e-12)
    explicit = MPC(model, 20, _pendulum_cost(EnergyShaping(weight=2.0, target=3.0)))
    assert explicit.cost.energy == EnergyShaping(weight=2.0, target=3.0)


def _kinetic_model() -> DiscreteModel:
    """The double integrator with energy ``p v^2 / 2`` (the mass ``p`` a parameter)."""
    base, _, _ = _linear_model(implicit=False)
    x, p = ca.SX.sym("x", 2), ca.SX.sym("p", 1)
    u = ca.SX.sym("u", 1)
    step = base.step
    return dataclasses.replace(
        base,
        np=1,
        step=ca.Function("step", [x, u, p], [step(x, u, ca.DM.zeros(0, 1))]),
        energy=ca.Function("energy", [x, p], [p * x[1] ** 2 / 2]),
        param_names=("m",),
        p_default=np.array([2.0]),
    )


@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_energy_term_uses_the_model_energy_of_the_state(transcription):
    model = _kinetic_model()
    if transcription == "implicit":
        x, u, xn, p = (ca.SX.sym(n, k) for n, k in (("x", 2), ("u", 1), ("xn", 2), ("p", 1)))
        model = dataclasses.replace(
            model, residual=ca.Function("res", [x, u, xn, p], [xn - model.step(x, u, p)])
        )
    # only energy is penalised; the reference (0, 1) has energy 2 * 1 / 2 = 1 J
    cost = Cost(Q=0.0, R=[1e-4], reference=[0.0, 1.0], energy=EnergyShaping(weight=10.0))
    ctrl = MPC(model, 20, cost, transcription=transcription, tol=1e-8)
    assert ctrl.cost.energy.target == pytest.approx(1.0, rel=1e-12)
    result = ctrl(np.array([0.0, 0.1]))  # v = 0 is a stationary point of (E - target)^2
    assert result.status.ok
    energies = model.p_default[0] * result.x[:, 1] ** 2 / 2
    assert abs(energies[-1] - 1.0) < 1e-2  # pumped up to the target
    assert result.cost == pytest.approx(
        10.0 * np.sum((energies - 1.0) ** 2) + 1e-4 * np.sum(result.u_plan**2), rel=1e-6
    )


def test_energy_shaping_errors_name_the_argument():
    model, _, _ = _linear_model(implicit=False)  # no energy
    shaped = Cost(Q=[1.0, 1.0], R=[1.0], energy=EnergyShaping())
    with pytest.raises(InputError, match=r"cost.energy .*the model has no energy"):
        MPC(model, 5, shaped)
    kinetic = _kinetic_model()
    with pytest.raises(InputError, match="cost.energy.weight must be a non-negative .* got -1.0"):
        MPC(kinetic, 5, Cost(Q=[1.0, 1.0], R=[1.0], energy=EnergyShaping(weight=-1.0)))
    with pytest.raises(InputError, match="cost.energy.target must be a finite number"):
        MPC(kinetic, 5, Cost(Q=[1.0, 1.0], R=[1.0], energy=EnergyShaping(target=float("nan"))))
    with pytest.raises(InputError, match="cost.energy must be a vimpc.mpc.EnergyShaping"):
        MPC(kinetic, 5, Cost(Q=[1.0, 1.0], R=[1.0], energy=1.0))


def test_the_real_time_iteration_is_one_gauss_newton_step_with_one_jacobian():
    # RealTimeIteration on a nonlinear swing-up NLP: its iterate equals the full step of
    # CasADi's sqpmethod stopped after one iteration without line search (the same QP), and
    # it evaluates the constraint Jacobian once where sqpmethod evaluates it twice
    from vimpc.mpc.solvers import RealTimeIteration, nlpsol_options

    model = NominalModel(Pendulum(), 0.05).discrete_model()
    ctrl = MPC(model, 12, Cost(Q=[10.0, 0.1], R=[0.01], reference=[np.pi, 0.0]), solver="rti")
    assert isinstance(ctrl._solving.solver, RealTimeIteration)
    tr = ctrl._tr
    _, opts = nlpsol_options(
        "rti", max_iter=1, tol=1e-8, expand=tr.expandable, gauss_newton=tr.gauss_newton
    )
    sqp = ca.nlpsol("one", "sqpmethod", tr.nlp, opts)
    rng = np.random.default_rng(0)
    w0 = rng.normal(scale=0.3, size=tr.layout.n_w)
    w0[tr.layout.s] = 0.0
    p = np.concatenate([[0.3, -0.2], np.tile([np.pi, 0.0], 13), [0.0]])
    bounds = dict(lbx=tr.lbw, ubx=tr.ubw, lbg=tr.lbg, ubg=tr.ubg)
    mine = ctrl._solving.solver(
        x0=ca.DM(w0), p=ca.DM(p), **{k: ca.DM(v) for k, v in bounds.items()}
    )
    theirs = sqp(x0=w0, p=p, **bounds)
    np.testing.assert_allclose(np.asarray(mine["x"]), np.asarray(theirs["x"]), atol=1e-9)
    assert np.abs(np.asarray(mine["x"]) - w0[:, None]).max() > 1e-2  # a step was taken
    assert sqp.stats()["n_call_nlp_jac_fg"] == 2
    assert ctrl._solving.solver.stats()["iter_count"] == 1


def test_a_real_time_iteration_whose_qp_fails_applies_the_fallback():
    model = NominalModel(Pendulum(), 0.05).discrete_model()
    ctrl = MPC(model, 6, Cost(Q=[10.0, 0.1], R=[0.01]), solver="rti")
    # an infeasible box (u_min > u_max after the guess shift) cannot be built through the
    # public API, so the QP's bounds are made inconsistent at the solver directly
    tr = ctrl._tr
    lbx, ubx = tr.lbw.copy(), tr.ubw.copy()
    lbx[tr.layout.u[0]], ubx[tr.layout.u[0]] = 1.0, -1.0
    out = ctrl._solving.solver(
        x0=ca.DM.zeros(tr.layout.n_w), p=ca.DM.zeros(tr.nlp["p"].numel()),
        lbx=ca.DM(lbx), ubx=ca.DM(ubx), lbg=ca.DM(tr.lbg), ubg=ca.DM(tr.ubg),
    )  # fmt: skip
    assert np.all(np.isnan(np.asarray(out["x"])))
    assert ctrl._solving.solver.stats()["return_status"].startswith("QP failed")
    assert ctrl._solving.status(ctrl, out, ctrl._solving.solver.stats(), 0.0, None) is Status.FAILED


@pytest.mark.parametrize("transcription", ["step", "implicit"])
def test_hpipm_takes_the_stages_as_laid_out_and_agrees_with_qrqp(transcription):
    """HPIPM is given the stage sizes of the layout (states; inputs, next-state copies and
    slacks as its controls; the other rows as its constraints) and finds qrqp's plan, with a
    hard path constraint active. With soft bounds, the implicit transcription lays the
    terminal stage's slacks out with stage N-1 (its rows on the copy z_{N-1}), so HPIPM
    takes them and agrees with qrqp with the soft bound active at every stage to the end;
    on the step transcription the terminal stage has slacks, which CasADi's HPIPM interface
    cannot take: refused, naming the option."""
    model, _, _ = _linear_model(implicit=transcription == "implicit")
    obs = ca.SX.sym("obs", 2)
    wall = ca.Function("wall", [obs], [0.6 - obs[0]])  # s <= 0.6
    cons = Constraints(u_min=[-0.5], u_max=[0.5], path=[PathConstraint("wall", wall)])
    cost = Cost(Q=[10.0, 0.1], R=[1e-3], reference=[1.0, 0.0])
    soft = Constraints(
        u_min=[-0.5], u_max=[0.5], obs_max=[0.6, np.inf], soft_bounds=True, bound_weight=1e3
    )
    plans = {}
    for qpsol in ("qrqp", "hpipm"):
        ctrl = MPC(model, 20, cost, cons, qpsol=qpsol, transcription=transcription, tol=1e-9)
        result = ctrl(np.array([0.0, 0.3]))
        assert result.status.ok, (qpsol, result.status)
        plans[qpsol] = result.x
        if transcription == "implicit":
            ctrl = MPC(model, 20, cost, soft, qpsol=qpsol, transcription="implicit", tol=1e-9)
            assert ctrl._tr.layout.ocp_structure()["nu"][-1] == 0  # the terminal stage: states
            result = ctrl(np.array([0.0, 0.3]))
            assert result.status.ok, (qpsol, "soft", result.status)
            plans[qpsol, "soft"] = result.x
    assert plans["qrqp"][:, 0].max() == pytest.approx(0.6, abs=1e-6)  # the wall is active
    np.testing.assert_allclose(plans["hpipm"], plans["qrqp"], atol=1e-6)
    if transcription == "implicit":
        # the exact penalty holds the soft bound to the end of the horizon, terminal included
        assert plans["qrqp", "soft"][-1, 0] == pytest.approx(0.6, abs=1e-3)
        np.testing.assert_allclose(plans["hpipm", "soft"], plans["qrqp", "soft"], atol=1e-6)
    else:
        with pytest.raises(
            InputError, match="qpsol='hpipm' cannot solve this problem: it has soft"
        ):
            MPC(model, 10, cost, soft, qpsol="hpipm", transcription=transcription)
