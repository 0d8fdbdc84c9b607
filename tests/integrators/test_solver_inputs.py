"""What the numerical solvers are given: the ground truth's Newton solve far from the origin,
the controller's call arguments and the solver options a user passes to the controller."""

from __future__ import annotations

import sys

import casadi as ca
import numpy as np
import pytest
from vimpc_envs.cartpole import CartPoleEnv
from vimpc_envs.rolling_disk import RollingDiskEnv

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError, SolverError
from vimpc.integrators import VariationalIntegrator
from vimpc.mpc import MPC, Cost

EPS = sys.float_info.epsilon

# ---- the ground truth far from the origin ----------------------------------------------------

# Where the cart-pole env stopped with "Newton solve failed (largest residual 1.206e-08)":
# reset(seed=0), then 58.02 s of full force (+30 N); the cart runs at its terminal speed.
CART_AT_2052 = np.array(
    [2052.236053694407, -4.5019035175072094e-11, 36.88810748658094, 3.385489763329329e-11]
)


def _disk_state(env, theta, rolling, turning, phi=0.8, x=1.0, y=2.0):
    q = np.array([theta, phi, x, y])
    return np.concatenate([q, env.true_system.consistent_velocity(q, rolling, turning)])


def _run(env, state, action, steps):
    env.reset(options={"state": state})
    for _ in range(steps):
        env.step(action)
    return env.state


def _assert_shift_invariant(env, far, shift, action, steps):
    """The env's flow from ``far`` equals its flow from ``far - shift`` moved by ``shift``,
    up to the round-off of the far coordinates.

    ``shift`` moves only coordinates the physics does not see (the cart's position: L,
    friction and the input map are independent of it; the disk's rolling angle and contact
    point: L, the rolling constraint and friction are), so the flows agree exactly in real
    arithmetic. Shift and subtractions are exact in float64 (Sterbenz: operands within a
    factor 2). In float64 the far run keeps positions on a grid of ulp(|q|) <= 2 eps |q|:
    each of its n substeps rounds them once, and nothing in one control step amplifies a
    rounding error by more than a factor of order one, so positions agree to 2 n eps |q|;
    velocities are difference quotients of positions one substep h apart, so they agree
    to 2 eps |q| / h. (Measured in the cases below: at most 0.19 of the first bound and
    0.004 of the second.) A step Newton did not solve is off by far more: its first guess
    q + h v misses by h^2 |a| / 2, 1e-7 m for the cart.
    """
    n_q = env.true_system.nq
    substeps = steps * round(env.dt / env.substep)
    size = float(np.max(np.abs(far[:n_q])))
    moved = _run(env, far, action, steps) - shift
    near = _run(env, far - shift, action, steps)
    q_err = float(np.max(np.abs(moved[:n_q] - near[:n_q])))
    v_err = float(np.max(np.abs(moved[n_q:] - near[n_q:])))
    assert q_err <= 2 * substeps * EPS * size, (q_err, 2 * substeps * EPS * size)
    assert v_err <= 2 * EPS * size / env.substep, (v_err, 2 * EPS * size / env.substep)


def _raw_residual(env, state, action):
    """Largest absolute integrator residual over one env step, substep by substep."""
    integrator = VariationalIntegrator(env.true_system, "midpoint")
    step = integrator.step_function(env.substep)
    residual = integrator.residual_function(env.substep)
    x, worst = np.asarray(state, dtype=np.float64), 0.0
    for _ in range(round(env.dt / env.substep)):
        x_next = np.asarray(step(x, action, [])).ravel()
        r = np.asarray(residual(x, action, x_next, []))
        worst = max(worst, float(np.max(np.abs(r))))
        x = x_next
    return worst


@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "interpreted"])
def test_cart_2052_m_down_the_rail_steps(jit):
    env = CartPoleEnv(jit=jit)
    # the regime: converged residuals here exceed 1e-8, the absolute tolerance that failed
    assert _raw_residual(env, CART_AT_2052, [30.0]) > 1e-8
    after = _run(env, CART_AT_2052, [30.0], 200)  # 2 s more at full force
    assert after[0] > CART_AT_2052[0] + 70.0
    _assert_shift_invariant(env, CART_AT_2052, np.array([2048.0, 0, 0, 0]), [30.0], 1)
    _assert_shift_invariant(env, CART_AT_2052, np.array([2048.0, 0, 0, 0]), [30.0], 10)


def test_cart_at_the_observation_bound_steps():
    env = CartPoleEnv()
    far = np.array([9999.0, 0.3, 70.0, 1.0])  # |s| <= 1e4 is declared valid
    assert _raw_residual(env, far, [30.0]) > 1e-8
    _assert_shift_invariant(env, far, np.array([9984.0, 0, 0, 0]), [30.0], 1)
    _assert_shift_invariant(env, far, np.array([9984.0, 0, 0, 0]), [-30.0], 10)


@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "interpreted"])
def test_disk_rolled_to_7093_rad_steps(jit):
    env = RollingDiskEnv(jit=jit)
    far = _disk_state(env, 7093.0, rolling=600.0, turning=1.0)
    # used to fail 1.82 s into this run, near theta = 8200 rad
    after = _run(env, far, [2.0, 1.0], 200)
    assert after[0] > 7093.0 + 1000.0
    shift = np.array([7092.0, 0, 0, 0, 0, 0, 0, 0])
    _assert_shift_invariant(env, far, shift, [2.0, 1.0], 1)
    _assert_shift_invariant(env, far, shift, [2.0, 1.0], 10)
    # contact point far out as well, at the observation bound
    far = _disk_state(env, 9999.0, rolling=600.0, turning=1.0, x=-9999.0, y=9999.0)
    shift = np.array([9984.0, 0, -9984.0, 9984.0, 0, 0, 0, 0])
    _assert_shift_invariant(env, far, shift, [2.0, 1.0], 1)


def test_residual_level_bounds_converged_residuals():
    """Newton's converged residuals stay within a few ``eps * level`` from the origin to the
    observation bound, which is what the env's check (``1e3 eps level``) relies on."""
    cart = CartPoleEnv()
    disk = RollingDiskEnv()
    integrators = {env: VariationalIntegrator(env.true_system, "midpoint") for env in (cart, disk)}
    cases = [(cart, np.array([s, 2.0, 30.0, -1.0]), [5.0]) for s in (0.2, 1e2, 1e3, 1e4)]
    cases += [
        (disk, _disk_state(disk, theta, 50.0, 1.0, x=theta, y=-theta), [0.3, -0.1])
        for theta in (0.2, 1e2, 1e3, 1e4)
    ]
    for env, x, u in cases:
        integrator = integrators[env]
        h = env.substep
        step, residual = integrator.step_function(h), integrator.residual_function(h)
        level = integrator.residual_level(h)
        worst = 0.0
        for _ in range(100):
            x_next = np.asarray(step(x, u, [])).ravel()
            r = np.abs(np.asarray(residual(x, u, x_next, [])).ravel())
            floor = _newton_floor(np.asarray(level(x, [])).ravel())
            worst = max(worst, float(np.max(r / floor)))
            x = x_next
        assert worst <= 10.0, (type(env).__name__, x, worst)


def _newton_floor(level):
    # Newton may stop once the residual is below its absolute 1e-12 (near the origin)
    return 1e-12 + EPS * level


@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "interpreted"])
def test_a_newton_solve_that_does_not_converge_still_fails(jit):
    # one substep of 10 ms while the pole spins up past 5e4 rad/s: Newton cannot follow
    env = CartPoleEnv(dt=0.01, substep=0.01, jit=jit)
    env.reset(options={"state": [0.0, 0.0, 900.0, 900.0]})
    with pytest.raises(SolverError) as failure:
        for _ in range(30):
            env.step([30.0])
    message = str(failure.value)
    assert "did not converge" in message
    # the advice points to a smaller substep (a larger one only lowers round-off, which
    # the tolerance allows for already)
    assert "a smaller substep (now 0.01 s)" in message


def test_full_force_for_60_s():
    # the reproduction itself (2 s): it used to stop at t = 58.02 s, s = 2052 m
    env = CartPoleEnv()
    env.reset(seed=0)
    for _ in range(6000):
        env.step([30.0])
    assert env.state[0] > 2100.0


# ---- the controller's call arguments --------------------------------------------------------

DT = 0.1


def _model(n_params: int = 0) -> DiscreteModel:
    """A pendulum with drag (Euler step): state and observation ``(s, v)``, angle and rate;
    with one parameter the drag rate is ``p[0]``, else 0.2."""
    x, u, xn = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("x_next", 2)
    p = ca.SX.sym("p", n_params)
    drag = p[0] if n_params else 0.2
    x_next = ca.vertcat(x[0] + DT * x[1], x[1] + DT * (u[0] - drag * x[1] - 10 * ca.sin(x[0])))
    ident = ca.Function("id", [x], [x])
    return DiscreteModel(
        dt=DT,
        nx=2,
        nu=1,
        np=n_params,
        nobs=2,
        step=ca.Function("step", [x, u, p], [x_next]),
        residual=ca.Function("residual", [x, u, xn, p], [xn - x_next]),
        from_obs=ident,
        to_obs=ident,
        p_default=np.full(n_params, 0.2),
        state_names=("s", "v"),
        input_names=("f",),
        param_names=("drag",) if n_params else (),
    )


def _controller(**kw) -> MPC:
    return MPC(_model(kw.pop("n_params", 0)), 5, Cost(Q=[1.0, 1.0], R=[1.0]), **kw)


@pytest.mark.parametrize("t", [float("nan"), float("inf"), -float("inf")])
def test_call_refuses_a_time_that_is_not_finite(t):
    ctrl = _controller()
    with pytest.raises(InputError, match=rf"^t must be a finite number of seconds .*, got {t!r}$"):
        ctrl([1.0, 0.0], t)
    assert ctrl([1.0, 0.0], 0.5).status.ok  # nothing was left half-done


@pytest.mark.parametrize("t", ["soon", None, True])
def test_call_refuses_a_time_that_is_not_a_number(t):
    with pytest.raises(InputError, match=r"^t must be a finite number of seconds .*, got "):
        _controller()([1.0, 0.0], t)


def test_call_names_the_entry_of_obs_that_is_not_finite():
    ctrl = _controller()
    with pytest.raises(InputError, match=r"^obs must be finite .* entry: obs\[1\] \(v\) is nan;"):
        ctrl([1.0, float("nan")])
    with pytest.raises(InputError, match=r"obs\[0\] \(s\) is -inf and 1 more; got \[-inf, inf\]"):
        ctrl(np.array([[-np.inf], [np.inf]]))
    with pytest.raises(InputError, match=r"obs must have shape \(2,\)"):
        ctrl([1.0, 0.0, 0.0])
    assert ctrl([1.0, 0.0]).status.ok


def test_call_names_the_entry_of_p_that_is_not_finite():
    ctrl = _controller(n_params=1)
    with pytest.raises(InputError, match=r"^p must be finite .* entry: p\[0\] \(drag\) is nan;"):
        ctrl([1.0, 0.0], 0.0, [float("nan")])
    assert ctrl([1.0, 0.0], 0.0, [0.3]).status.ok


# ---- solver options ---------------------------------------------------------------------------

UNKNOWN = [
    ("sqpmethod", {"foo": 1}, r"solver_options has an unknown key 'foo': solver 'sqpmethod'"),
    (
        "sqpmethod",
        {"max_iters": 3},
        r"unknown key 'max_iters'.*did you mean 'max_iter'.*casadi\.doc_nlpsol\('sqpmethod'\)",
    ),
    (
        "sqpmethod",
        {"qpsol_options": {"print_iters": False}},
        r"solver_options\['qpsol_options'\] has an unknown key 'print_iters': solver "
        r"'sqpmethod'.*did you mean 'print_iter'.*casadi\.doc_conic\('qrqp'\)",
    ),
    ("rti", {"foo": 1}, r"solver_options has an unknown key 'foo': solver 'rti'"),
    ("ipopt", {"foo": 1}, r"solver_options has an unknown key 'foo': solver 'ipopt'"),
    (
        "ipopt",
        {"ipopt": {"nonsense": 1}},
        r"solver_options\['ipopt'\] has an unknown key 'nonsense': solver 'ipopt'.*Ipopt/OPTIONS",
    ),
    ("fatrop", {"foo": 1}, r"solver_options has an unknown key 'foo': solver 'fatrop'"),
    (
        "fatrop",
        {"fatrop": {"nonsense": 1}},
        r"solver_options\['fatrop'\] has an unknown key 'nonsense': solver 'fatrop'",
    ),
]


@pytest.mark.parametrize(
    "solver, options, message", UNKNOWN, ids=[f"{c[0]}-{c[1]}" for c in UNKNOWN]
)
def test_unknown_solver_option_is_refused_when_the_controller_is_built(solver, options, message):
    with pytest.raises(InputError, match=message):
        _controller(solver=solver, solver_options=options)


WRONG_TYPE = [
    (
        "sqpmethod",
        {"max_iter": "many"},
        r"solver_options\['max_iter'\] has the wrong type for solver 'sqpmethod': CasADi "
        r"expects int, got string 'many'",
    ),
    (
        "ipopt",
        {"ipopt": {"tol": "small"}},
        r"solver_options\['ipopt'\]\['tol'\] = 'small' has the wrong type: solver 'ipopt'",
    ),
    (
        "fatrop",
        {"fatrop": {"mu_init": "small"}},
        r"solver_options\['fatrop'\]\['mu_init'\] = 'small' has the wrong type: solver 'fatrop'",
    ),
    ("fatrop", {"fatrop": {"print_level": "loud"}}, r"\['print_level'\] must be an int"),
    ("ipopt", {"ipopt": 5}, r"solver_options\['ipopt'\] must be a dict of ipopt options"),
    ("sqpmethod", [("max_iter", 3)], r"solver_options must be a dict"),
]


@pytest.mark.parametrize(
    "solver, options, message", WRONG_TYPE, ids=[f"{c[0]}-{c[1]}" for c in WRONG_TYPE]
)
def test_solver_option_of_the_wrong_type_is_refused(solver, options, message):
    with pytest.raises(InputError, match=message):
        _controller(solver=solver, solver_options=options)


@pytest.mark.parametrize(
    "solver, options",
    [
        ("sqpmethod", {"max_iter": 20, "qpsol_options": {"print_iter": False}}),
        ("ipopt", {"ipopt": {"mu_strategy": "adaptive", "tol": 1e-9}}),
        ("fatrop", {"fatrop": {"mu_init": 0.01, "tol": 1e-9, "print_level": 0}}),
    ],
)
def test_known_solver_options_are_accepted(solver, options):
    ctrl = _controller(solver=solver, solver_options=options)
    assert ctrl([1.0, 0.0]).status.ok


@pytest.mark.parametrize(
    "solver, options",
    [
        ("sqpmethod", {"max_iter": 1}),
        ("ipopt", {"ipopt": {"max_iter": 1}}),
        ("fatrop", {"fatrop": {"max_iter": 1}}),
    ],
)
def test_solver_options_reach_the_solver(solver, options):
    # from a swing of 2 rad every solver needs a few iterations; the option cuts them short
    free = _controller(solver=solver, tol=1e-10)([2.0, 0.0])
    limited = _controller(solver=solver, tol=1e-10, solver_options=options)([2.0, 0.0])
    assert limited.iterations < free.iterations
