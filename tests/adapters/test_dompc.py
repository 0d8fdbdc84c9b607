"""vimpc.adapters.dompc: a DiscreteModel as a discrete do-mpc model, its step do-mpc's
right-hand side, its bound tightening do-mpc's MPC; learned cart-pole models (GP-VI and the
MLP residual) swing the pole up under do-mpc's MPC, the true plant in do-mpc's Simulator."""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # do-mpc's optional ONNX / OPC UA features
    do_mpc = pytest.importorskip(
        "do_mpc", reason='do-mpc is an optional extra: pip install -e ".[bench]"'
    )

import gymnasium as gym  # noqa: E402
import vimpc_envs  # noqa: E402, F401

from vimpc.adapters import DompcModel, dompc_model  # noqa: E402
from vimpc.errors import InputError  # noqa: E402
from vimpc.mechanics import CartPole  # noqa: E402
from vimpc.models import NominalModel  # noqa: E402
from vimpc.pipeline import build_env, build_model  # noqa: E402
from vimpc.scenario import load_scenario  # noqa: E402

SCENARIO = "scenarios/cartpole_gpvi_safe.toml"
RAIL = 0.7
#: small fits of the scenario's data (seconds): 40 training trajectories, a per-step bound
SMALL = [
    "data.trajectories=40",
    "data.heldout_trajectories=60",
    'model.bound_level="step"',
]
FITS = {
    "gp_vi": [*SMALL, "model.samples=200", "model.support_points=40"],
    "mlp_residual": [
        *SMALL,
        'model.family="mlp_residual"',
        "model.hidden=[32, 32]",
        "model.epochs=300",
        'model.conformal_scale="constant"',
    ],
}
#: the scenario's true cart-pole (masses within 10 %, friction) on the 0.7 m rail
ENV_KWARGS = dict(perturbation=0.1, param_seed=0, s_max=RAIL, friction=[0.3, 0.1])


@functools.cache
def _fit(name: str):
    """The scenario's model family fitted on the small data of ``FITS[name]``."""
    cfg = load_scenario(Path(__file__).resolve().parents[2] / SCENARIO, FITS[name])
    return build_model(cfg, build_env(cfg))


@pytest.fixture(scope="module", params=sorted(FITS))
def learned(request):
    return _fit(request.param)


@pytest.fixture(scope="module")
def gp_vi():
    return _fit("gp_vi")


def _simulator(adapter: DompcModel, dt: float):
    sim = do_mpc.simulator.Simulator(adapter.model)
    sim.settings.t_step = dt
    sim.setup()
    return sim


def test_dompc_steps_with_the_models_step_to_1e_12(learned):
    adapter = dompc_model(learned, tighten={"s": (-RAIL, RAIL)})
    assert adapter.model.model_type == "discrete"
    assert list(adapter.model.x.keys()) == [*learned.state_names, "s_margin"]
    # do-mpc adds an entry "default" to its inputs' struct
    assert [n for n in adapter.model.u.keys() if n != "default"] == list(learned.input_names)
    sim = _simulator(adapter, learned.dt)
    rng = np.random.default_rng(0)
    low, high = np.array([-0.7, -math.pi, -3.0, -8.0]), np.array([0.7, math.pi, 3.0, 8.0])
    worst = 0.0
    for _ in range(30):
        x, u, w = rng.uniform(low, high), rng.uniform(-20.0, 20.0, 1), rng.uniform(0.0, 0.1)
        sim.x0 = np.concatenate([x, [w]])
        x_next = np.asarray(sim.make_step(u.reshape(1, 1))).reshape(-1)
        worst = max(worst, float(np.max(np.abs(x_next[:4] - learned.step(x, u)))))
        # the margin state adds the bound's entry of s
        assert x_next[4] == pytest.approx(w + learned.bound(x, u)[0], abs=1e-12)
    assert worst <= 1e-12, worst


def _mpc(adapter: DompcModel, dt: float, horizon: int = 17, soft: bool = True):
    mpc = do_mpc.controller.MPC(adapter.model)
    mpc.settings.n_horizon = horizon
    mpc.settings.t_step = dt
    mpc.settings.store_full_solution = True
    mpc.settings.nlpsol_opts.update(
        {
            "ipopt.print_level": 0,
            "ipopt.sb": "yes",
            "print_time": 0,
            "ipopt.max_iter": 100,
            "ipopt.tol": 1e-4,
        }
    )
    x, force = adapter.model.x, adapter.model.u["force"]

    def cost(weights):  # upright at the rail's centre; the angle's error as 2 sin(e / 2)
        errors = (x["s"], 2 * ca.sin((x["theta"] - math.pi) / 2), x["s_dot"], x["theta_dot"])
        return sum(q * e**2 for q, e in zip(weights, errors, strict=True))

    mpc.set_objective(lterm=cost([10, 20, 0.1, 0.1]) + 0.01 * force**2, mterm=cost([50, 100, 5, 5]))
    mpc.set_rterm(force=0.0)
    mpc.bounds["lower", "_u", "force"] = -30.0
    mpc.bounds["upper", "_u", "force"] = 30.0
    adapter.constrain(mpc, soft=soft, penalty=1e4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # casadi's numpy notice inside do-mpc
        mpc.setup()
    return mpc


def _plan(mpc):
    """The last solve's predicted states (do-mpc's, margins included) and inputs."""
    n = mpc.settings.n_horizon
    X = np.array([np.asarray(mpc.opt_x_num["_x", k, 0, -1]).reshape(-1) for k in range(n + 1)])
    U = np.array([np.asarray(mpc.opt_x_num["_u", k, 0]).reshape(-1) for k in range(n)])
    return X, U


def _swing_up(model, steps: int, seed: int = 1):
    """do-mpc's MPC on the learned model, do-mpc's Simulator on the env's true plant."""
    env = gym.make("vimpc/CartPole-v0", dt=model.dt, obs_noise=0.0, **ENV_KWARGS)
    truth = env.unwrapped.true_system
    plant = NominalModel(truth, model.dt, integrator="midpoint", substeps=500).discrete_model()
    obs, _ = env.reset(seed=seed)
    adapter = dompc_model(model, tighten={"s": (-RAIL, RAIL)})
    mpc = _mpc(adapter, model.dt)
    sim = _simulator(dompc_model(plant), model.dt)
    sim.x0 = obs
    mpc.x0 = adapter.x0(obs)
    mpc.set_initial_guess()
    states, plans, env_gap = [obs], [], 0.0
    x = obs
    for _ in range(steps):
        u = mpc.make_step(adapter.x0(x))
        plans.append(_plan(mpc))
        x = np.asarray(sim.make_step(u)).reshape(-1)
        env_obs, *_ = env.step(np.asarray(u).reshape(-1))
        env_gap = max(env_gap, float(np.max(np.abs(env_obs - x))))
        states.append(x)
    return np.array(states), plans, env_gap


def _check_swing_up(model, states, plans, env_gap, last: int):
    # do-mpc's Simulator on the true plant is vimpc's env, step for step
    assert env_gap <= 1e-12, env_gap
    # the rail holds, and the pole ends upright: within 0.1 rad of pi over the last steps
    assert np.max(np.abs(states[:, 0])) <= RAIL, np.max(np.abs(states[:, 0]))
    error = np.abs((states[-last:, 1] - math.pi + math.pi) % (2 * math.pi) - math.pi)
    assert np.max(error) < 0.1, error
    for X, U in plans:
        # each plan's margin is the sum of the bounds of s along it, from 0
        e = np.array([model.bound(X[k, :4], U[k])[0] for k in range(len(U))])
        np.testing.assert_allclose(X[:, 4], np.concatenate([[0.0], np.cumsum(e)]), atol=1e-6)
        # and every predicted state keeps the tightened rail (up to the solver's tolerance)
        assert np.all(np.abs(X[1:, 0]) + X[1:, 4] <= RAIL + 1e-4), (X[:, 0], X[:, 4])
    # the tightening acts: somewhere a plan's tightened rail is active
    assert max(np.max(np.abs(X[1:, 0]) + X[1:, 4]) for X, _ in plans) > RAIL - 1e-3


def test_gp_vi_swings_the_cart_pole_up_under_dompc_on_the_true_plant(gp_vi):
    states, plans, gap = _swing_up(gp_vi, steps=60)
    _check_swing_up(gp_vi, states, plans, gap, last=20)


@pytest.mark.slow
def test_the_learned_models_swing_up_and_balance_for_8_s(learned):
    states, plans, gap = _swing_up(learned, steps=160)
    _check_swing_up(learned, states, plans, gap, last=40)


def test_the_nlp_predicts_with_the_models_step(gp_vi):
    """do-mpc's NLP: each stage's continuity constraint is step(x_k, u_k) - x_{k+1}, with
    vimpc's step, to 1e-12 (not the solver's tolerance: the constraint values themselves)."""
    adapter = dompc_model(gp_vi, tighten={"s": (-RAIL, RAIL)})
    mpc = _mpc(adapter, gp_vi.dt, horizon=10)
    x0 = np.array([0.1, 0.3, -0.5, 1.0])
    mpc.x0 = adapter.x0(x0)
    mpc.set_initial_guess()
    mpc.make_step(adapter.x0(x0))
    X, U = _plan(mpc)
    g = np.asarray(mpc.opt_g_num).reshape(-1)
    nx, n_cons = adapter.nx, 2  # s_upper, s_lower
    for k in range(10):
        block = g[nx + k * (nx + n_cons) :][:nx]
        expected = np.concatenate(
            [gp_vi.step(X[k, :4], U[k]), [X[k, 4] + gp_vi.bound(X[k, :4], U[k])[0]]]
        )
        np.testing.assert_allclose(block, expected - X[k + 1], rtol=0, atol=1e-12)


def _gain_model():
    """x_next = x + dt (v, gain u): a double integrator whose input gain is a parameter."""
    from vimpc.dynamics import DiscreteModel

    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 1)
    step = ca.Function("step", [x, u, p], [x + 0.1 * ca.vertcat(x[1], p * u)])
    obs = ca.MX.sym("obs", 2)
    same = ca.Function("same", [obs], [obs])
    return DiscreteModel(
        dt=0.1, nx=2, nu=1, np=1, nobs=2, step=step, from_obs=same, to_obs=same,
        state_names=("y", "y_dot"), input_names=("f",), param_names=("gain",),
        p_default=np.array([2.0]),
    )  # fmt: skip


def test_parameters_are_fixed_at_p_default_or_dompc_parameters():
    model = _gain_model()
    x, u = np.array([0.5, -1.0]), np.array([3.0])
    fixed = dompc_model(model)
    assert "gain" not in fixed.model.p.keys() and fixed.margin_names == ()
    sim = _simulator(fixed, model.dt)
    sim.x0 = x
    np.testing.assert_array_equal(
        np.asarray(sim.make_step(u.reshape(1, 1))).ravel(), model.step(x, u)
    )
    free = dompc_model(model, parameters="dompc")
    assert [n for n in free.model.p.keys() if n != "default"] == ["gain"]
    sim = do_mpc.simulator.Simulator(free.model)
    sim.settings.t_step = model.dt
    template = sim.get_p_template()
    template["gain"] = 5.0
    sim.set_p_fun(lambda t: template)
    sim.setup()
    sim.x0 = x
    np.testing.assert_array_equal(
        np.asarray(sim.make_step(u.reshape(1, 1))).ravel(), model.step(x, u, [5.0])
    )


def test_bad_input_is_refused_by_name(gp_vi):
    with pytest.raises(InputError, match="model must be a vimpc DiscreteModel.*got dict"):
        dompc_model({"step": None})
    with pytest.raises(InputError, match="margin must be one of \\('sum', 'step'\\), got 'tube'"):
        dompc_model(gp_vi, tighten={"s": (-1, 1)}, margin="tube")
    with pytest.raises(InputError, match="parameters must be one of"):
        dompc_model(gp_vi, parameters="free")
    with pytest.raises(
        InputError, match="tighten names states of the model, got 'x'; its states are s, theta"
    ):
        dompc_model(gp_vi, tighten={"x": (-1, 1)})
    with pytest.raises(
        InputError, match=r"tighten\['s'\] must have lower < upper, got \(1.0, -1.0\)"
    ):
        dompc_model(gp_vi, tighten={"s": (1, -1)})
    with pytest.raises(InputError, match=r"tighten\['s'\] must be a pair"):
        dompc_model(gp_vi, tighten={"s": 0.7})
    with pytest.raises(InputError, match="limits nothing"):
        dompc_model(gp_vi, tighten={"s": (-math.inf, math.inf)})
    with pytest.raises(InputError, match="tighten must be a mapping"):
        dompc_model(gp_vi, tighten=[("s", (-1, 1))])
    nominal = NominalModel(CartPole(), 0.05, integrator="midpoint").discrete_model()
    with pytest.raises(InputError, match="tighten needs a model with a bound"):
        dompc_model(nominal, tighten={"s": (-1, 1)})
    adapter = dompc_model(gp_vi, tighten={"s": (-RAIL, RAIL)})
    with pytest.raises(InputError, match="x must be the model's state, 4 finite numbers"):
        adapter.x0([0.0, 1.0])
    with pytest.raises(InputError, match="mpc must be a do_mpc.controller.MPC, got str"):
        adapter.constrain("mpc")
    other = do_mpc.controller.MPC(dompc_model(gp_vi, tighten={"s": (-RAIL, RAIL)}).model)
    with pytest.raises(InputError, match="mpc must be built on this adapter's model"):
        adapter.constrain(other)
    mpc = do_mpc.controller.MPC(adapter.model)
    with pytest.raises(InputError, match="penalty must be a positive number, got -1"):
        adapter.constrain(mpc, penalty=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sofd'"):
        adapter.constrain(mpc, sofd=True)
    with pytest.raises(InputError, match="no limits to tighten"):
        plain = dompc_model(gp_vi)
        plain.constrain(do_mpc.controller.MPC(plain.model))
    adapter.constrain(mpc)
    with pytest.raises(InputError, match="already added"):
        adapter.constrain(mpc)
