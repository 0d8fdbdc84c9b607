"""The claims of ``results/``, re-checked at a smaller scale (``pytest -m slow``, minutes).

The committed tables come from ``tests/experiments/*.py``; these tests assert what those
tables say on other seeds, so a change that breaks a claim is caught without rerunning the
whole experiment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc import pipeline, scenario
from vimpc.data import rollout_model
from vimpc.data.dataset import Dataset
from vimpc.integrators import ExplicitIntegrator, VariationalIntegrator
from vimpc.mechanics import DoublePendulum, ParallelogramFourBar, Pendulum
from vimpc.models import NominalModel, evaluation
from vimpc.models.families.gp_vi import GPVIModel

ROOT = Path(__file__).parents[1]
SAFE = ROOT / "scenarios" / "cartpole_safe.toml"

pytestmark = pytest.mark.slow


def _episodes(overrides: list[str], seeds: range, path: Path = SAFE) -> list[dict]:
    cfg = scenario.load_scenario(path, overrides)
    source = pipeline.obtain_model(cfg, pipeline.build_env(cfg), log=lambda _: None)
    results = pipeline.run_episodes(cfg, source.path, list(seeds), workers=2)
    return [metrics for _, metrics in results]


def test_the_tube_keeps_the_cart_on_the_rail():
    # results/safety (seeds 100-199, plants drawn per episode, 3 fits): 0 of 100 episodes
    # off the rail with the scenario's gaussian feedback tube and its horizon-level bound
    # calibrated closed loop (smallest margin 0.061 m), 23 of 100 without; here 30 other
    # seeds on the scenario's plant: the tube keeps every one on the rail with at least half
    # that margin, and the same episodes without it do leave the rail (so the check can fail)
    seeds = range(300, 330)
    tube = _episodes([], seeds)
    assert sum(m["violations"] > 0 for m in tube) == 0
    assert min(m["min_margin"] for m in tube) > 0.03
    assert np.mean([m["success"] for m in tube]) >= 0.9
    # the bound held in closed loop about as often as it promised (delta = 0.05), per step
    # and per 20-step window (0.963 over 100 episodes, bootstrap interval +-0.012; a mean
    # over 30 episodes spreads about sqrt(100 / 30) = 1.8 times as much: 0.025 of slack)
    assert np.mean([m["coverage"] for m in tube]) >= 0.95
    assert np.mean([m["horizon_coverage"] for m in tube]) >= 0.95 - 0.025
    free = _episodes(['controller.tightening="none"'], seeds)
    assert sum(m["violations"] > 0 for m in free) >= 3


def test_swing_up_solves_run_to_convergence_and_the_cart_keeps_its_rail():
    # at fatrop's former max_iter of 100 the hardest swing-up solves (80-160 iterations, in
    # the first second, where the tube leaves no room at some stage) stopped unconverged:
    # the fallback input and the solve from scratch after it took the cart 0.066 m past
    # the rail in one of the episodes 7000-7009 (the report); at the scenario's 500
    # every solve converges and all ten keep the rail (results/safety/nominal_scenario/)
    seeds = range(7000, 7010)
    shipped = _episodes([], seeds)
    assert sum(m["violations"] > 0 for m in shipped) == 0
    assert sum(m["failed_solves"] for m in shipped) == 0
    capped = _episodes(["controller.max_iter=100"], seeds)
    assert sum(m["violations"] > 0 for m in capped) >= 1
    assert sum(m["failed_solves"] for m in capped) > 0


def test_the_gp_vi_tubes_keep_the_cart_on_the_rail_and_still_swing_up():
    # results/safety (seeds 100-199, plants drawn per episode, 3 fits, the 0.7 m rail): with
    # the GP-VI model and the gaussian feedback tube 0 of 100 episodes off the rail and
    # success 1.00 with the scenario's horizon-level conformal bound (smallest margin 0.16 m)
    # and with the Theorem 1 bound (0.014 m); here 12 other seeds, at least half
    # those margins, and without the tube some episodes do leave the rail (so the check can
    # fail)
    seeds = range(400, 412)
    gpvi = ROOT / "scenarios" / "cartpole_gpvi_safe.toml"
    step_level = ['model.bound_level="step"', "model.bound_horizon=0"]
    for overrides, margin in (
        ([], 0.08),
        (['model.bound="theorem1"', *step_level], 0.007),
    ):
        episodes = _episodes(overrides, seeds, gpvi)
        assert sum(m["violations"] > 0 for m in episodes) == 0, overrides
        assert min(m["min_margin"] for m in episodes) > margin, overrides
        assert np.mean([m["success"] for m in episodes]) >= 0.9, overrides
    free = _episodes(['controller.tightening="none"'], seeds, gpvi)
    assert sum(m["violations"] > 0 for m in free) >= 1


def test_the_clnn_tube_keeps_the_cart_on_the_rail():
    # results/safety/cartpole_clnn (seeds 100-199, plants drawn per episode, 3 fits, the
    # 0.7 m rail): the CLNN in Cartesian coordinates with its tube and the condensed SQP
    # keeps all 100 on the rail (smallest margin 0.090 m) and swings up in 100, 31 of 100
    # leave it without the tube; here 20 other seeds, plants drawn per episode, the
    # scenario's fit: no episode off the rail with the tube, at least half that margin, its
    # plans on the model's constraints within 1e-7 (2.3e-8 there: fatrop's plans, to tol
    # 1e-6, where the condensed SQP hands over; its own hold 1e-11), and without the tube
    # some episodes do leave the rail (so the check can fail)
    seeds = range(500, 520)
    clnn = ROOT / "scenarios" / "cartpole_clnn_safe.toml"
    plants = ['env.plant="per_episode"']
    tube = _episodes(plants, seeds, clnn)
    assert sum(m["violations"] > 0 for m in tube) == 0
    assert min(m["min_margin"] for m in tube) > 0.045
    assert np.mean([m["success"] for m in tube]) >= 0.9
    assert max(m["max_plan_constraint_residual"] for m in tube) <= 1e-7
    free = _episodes([*plants, 'controller.tightening="none"'], seeds, clnn)
    assert sum(m["violations"] > 0 for m in free) >= 1


def test_conformal_bound_covers_fresh_trajectories():
    # results/conformal: coverage on fresh trajectories at least 1 - delta for exchangeable
    # transitions; here the cart-pole at delta = 0.1, 40 fresh trajectories, with a
    # tolerance of three binomial standard deviations of the test set
    delta = 0.1
    cfg = scenario.load_scenario(SAFE, [f"model.delta={delta}"])
    env = pipeline.build_env(cfg)
    train = pipeline.collect(cfg, env, "train")
    calibration, _ = pipeline.split_heldout(pipeline.collect(cfg, env, "heldout"))
    fresh = cfg.replace(data={"heldout_seed": 7_000_000, "heldout_trajectories": 40})
    test = pipeline.collect(fresh, env, "heldout")
    family = NominalModel(env.nominal_system, env.dt, bound="conformal", delta=delta)
    model = family.fit(train, calibration).discrete_model()
    coverage = evaluation.coverage(model, test)
    n = test.n_trajectories * test.n_steps
    assert coverage >= 1 - delta - 3 * np.sqrt(delta * (1 - delta) / n)
    assert coverage <= 1 - delta + 0.05  # and the bound is not trivially wide


def _released_pendulum(h: float) -> np.ndarray:
    """2 s of the true frictionless pendulum released from rest at pi/2 (midpoint VI,
    1e-4 s substeps), sampled every ``h``: the states ``(201, 2)``."""
    x0 = np.array([np.pi / 2, 0.0])
    fine = VariationalIntegrator(Pendulum(), "midpoint").step_function(1e-4)
    xs = np.asarray(fine.mapaccum(20_000)(x0, np.zeros((1, 20_000)), np.zeros((0, 20_000)))).T
    return np.vstack([x0, xs])[:: round(h / 1e-4)]


def test_gp_vi_energy_error_bounded_by_dissipation():
    # results/gp_vi/energy: without a prior model (eq. 10, minimal coordinates) the GP-VI's
    # energy error stays bounded over 100 min while explicit Euler's grows to 419, but the
    # GP-VI does not conserve energy: it only ever loses it, so |E - E0| / (m g l / 2) stays
    # within the 1 a pendulum released at pi/2 can lose. Here another sample draw, 200 s.
    system, h, n = Pendulum(), 0.01, 20_000
    x0 = np.array([np.pi / 2, 0.0])  # E0 = 0
    scale = system.params["m"] * system.params["g"] * system.params["l"] / 2
    xs = _released_pendulum(h)  # 2 s of the true pendulum every 0.01 s
    data = Dataset(
        t=np.arange(201)[None] * h, obs=xs[None], states=xs[None],
        inputs=np.zeros((1, 200, 1)), dt=h, metadata={"system": system.name},
    )  # fmt: skip
    energy = system.function("E").map(n + 1)

    def err(step):
        ys = np.vstack([x0, np.asarray(step.mapaccum(n)(x0, np.zeros((1, n)), np.zeros((0, n)))).T])
        return np.asarray(energy(ys[:, :1].T, ys[:, 1:].T)).ravel() / scale

    euler = np.abs(err(ExplicitIntegrator(system, "euler").step_function(h)))
    for samples in (10, 20):
        family = GPVIModel(Pendulum(), h, prior="zero", samples=samples, seed=2).fit(data)
        gp = err(family.discrete_model().step)
        assert np.all(np.isfinite(gp))
        # measured at 200 s on draws 2-5: never above E0, |err| <= 0.99999, final err -0.92
        # to -0.18
        assert gp.max() <= 0.01, samples  # never gains energy
        assert np.abs(gp).max() <= 1.01, samples  # bounded: loses at most all it has
        assert gp[-1] < -0.1, samples  # and it does lose it: dissipation, not conservation
    # explicit Euler on the true pendulum: 0.99 at 10 s, 7.4 by 100 s, 14.8 by 200 s
    assert euler.max() > 10 * 1.01  # ten times the GP-VI's bound
    assert euler[n // 2 :].max() > 1.5 * euler[: n // 2].max()  # and still growing


def test_gp_vi_on_difference_quotients_keeps_the_energy():
    # results/gp_vi/energy: the same eq. 10 GP-VI trained on the difference quotients
    # w_k = (q_k - q_(k-1)) / h of the same positions (the velocity its position update
    # q_(k+1) = q_k + h w_(k+1) needs) keeps the pendulum's energy where the sampled-velocity
    # targets lose it: 20 samples, draws 0-9 of the table, |final err| <= 0.0115 after 100 min.
    # Here draws 11-13, 200 s, the energy at the step's midpoint (q_k - h w_k / 2, w_k).
    system, h, n = Pendulum(), 0.01, 20_000
    scale = system.params["m"] * system.params["g"] * system.params["l"] / 2
    x0 = np.array([np.pi / 2, 0.0])  # E0 = 0
    q = _released_pendulum(h)[:, 0]  # 2 s of positions every 0.01 s
    ws = np.column_stack([q[1:], np.diff(q) / h])
    data = Dataset(
        t=np.arange(1, 201)[None] * h, obs=ws[None], states=ws[None],
        inputs=np.zeros((1, 199, 1)), dt=h, metadata={"system": system.name},
    )  # fmt: skip
    start = np.array([q[0], (q[0] - q[1]) / h])  # released at rest: q(-h) = q(h)
    energy = system.function("E").map(n + 1)
    for seed in (11, 12, 13):
        family = GPVIModel(Pendulum(), h, prior="zero", samples=20, seed=seed).fit(data)
        step = family.discrete_model().step
        ys = np.vstack(
            [start, np.asarray(step.mapaccum(n)(start, np.zeros((1, n)), np.zeros((0, n)))).T]
        )
        mid_q = ys[:, 0] - h * ys[:, 1] / 2
        err = (
            np.asarray(energy(mid_q[None], ys[:, 1][None])).ravel() - system.energy(x0[:1], x0[1:])
        ) / scale
        assert np.all(np.isfinite(err)), seed
        # kept: a tenth of the swing energy at most, where sampled targets lose 0.86-1
        assert np.abs(err).max() <= 0.1, (seed, np.abs(err).max())
        # and no drift: the last tenth no further out than the first tenth's envelope allows
        assert np.abs(err[-n // 10 :]).max() <= np.abs(err[: n // 10]).max() + 0.02, seed


def test_gp_vi_keeps_the_double_pendulum_on_its_constraints():
    # results/gp_vi/constraints: in maximal coordinates the GP-VI without a prior (eq. 10 with
    # the projection 10e) holds max |g| near 1e-12 m (its projection's regularisation floor,
    # no drift) while explicit Euler on the index-1 DAE drifts to 0.40 m in 10 s and 12 m in
    # 20 s. Its projection's Newton can fail, but only once a link angle has grown past
    # ~100 rad, where its absolute tolerances are below round-off (draw 0, 20 samples: step
    # 6844 at 268 rad). Here another draw, 20 s; on it the 10-sample model fails at step 1874
    # at 257 rad, the 20-sample one runs through.
    joint, h, n = DoublePendulum(), 0.01, 2_000
    maximal = joint.maximal()
    start = np.array([np.pi / 2, 0.0, 0.0, 0.0])  # the paper's (pi/2, 0) at rest
    fine = VariationalIntegrator(joint, "midpoint").step_function(1e-4)
    xs = np.asarray(fine.mapaccum(20_000)(start, np.zeros((2, 20_000)), np.zeros((0, 20_000)))).T
    xs = np.vstack([start, xs])[::100]  # 2 s of the true double pendulum every 0.01 s
    states = joint.states_to_maximal(xs)
    data = Dataset(
        t=np.arange(201)[None] * h, obs=states[None], states=states[None],
        inputs=np.zeros((1, 200, maximal.nu)), dt=h, metadata={"system": maximal.name},
    )  # fmt: skip
    nq, nu = maximal.nq, maximal.nu
    angles = [i for i, unit in enumerate(maximal.coordinate_units) if unit == "rad"]

    def rollout(step):  # the states up to n steps, up to a step whose Newton raises
        ys = [states[0]]
        for _ in range(n):
            try:
                ys.append(np.asarray(step(ys[-1], np.zeros(nu), np.zeros(0))).ravel())
            except RuntimeError:
                break
        ys = np.array(ys)
        return ys, np.abs(np.asarray(maximal.function("g").map(len(ys))(ys[:, :nq].T))).max(0)

    for samples in (10, 20):
        family = GPVIModel(maximal, h, prior="zero", samples=samples, seed=1).fit(data)
        ys, gp = rollout(family.discrete_model().step)
        assert gp.max() <= 1e-10, samples  # measured: 7.5e-13 to 5.6e-12 m on draws 0-3
        if len(ys) <= n:  # a failed step: only at an angle where the tolerances are too tight
            assert np.abs(ys[-1, angles]).max() > 64, (samples, len(ys))
    _, euler = rollout(ExplicitIntegrator(maximal, "euler").step_function(h))
    assert euler.max() > 1.0  # 10^10 times the GP-VI's bound
    assert euler[n // 2 :].max() > 3 * euler[: n // 2].max()  # and still growing


def test_gp_vi_with_the_prior_beats_the_nominal_integrator():
    # results/gp_vi/samples (Fig. 2 of the GP-VI paper): with the midpoint prior the
    # pendulum's 20-step position MSE at 128 samples was 220 to 3.1e4 times (median 8.3e3)
    # below the nominal midpoint VI's on 7 realisations (param_seed 0-6, paired; the ratio
    # grows with the drawn friction, which the nominal model lacks). Here realisation 100
    # (friction 0.29 N m s) with 100 training and 20 test trajectories: 2.3e3 measured,
    # at least 100 asserted (the target is 10 at 256 samples)
    import gymnasium

    env = gymnasium.make(
        "vimpc/Pendulum-v0", dt=0.01, substep=1e-4, perturbation=0.1, obs_noise=1e-3,
        param_seed=100,
    ).unwrapped  # fmt: skip
    data = {
        "trajectories": 100, "seed": 7_000_000, "heldout_trajectories": 20,
        "heldout_seed": 7_100_000, "steps": 200, "excitation": "zero",
        "excitation_options": {}, "initial_state": "uniform", "low": [-np.pi, 0.0],
        "high": [np.pi, 0.0], "obs_noise": None,
    }  # fmt: skip
    train = pipeline.collect({"data": data}, env, "train")
    test = pipeline.collect({"data": data}, env, "heldout")
    test = test.replace(obs=test.states)  # predictions against the ground truth

    def mse(model):
        error = evaluation.prediction_errors(model, test, 20)[:, 0]
        return float(np.mean(np.angle(np.exp(1j * error)) ** 2))

    nominal = mse(NominalModel(env.nominal_system, env.dt).discrete_model())
    family = GPVIModel(env.nominal_system, env.dt, samples=128, seed=100).fit(train)
    assert nominal / mse(family.discrete_model()) >= 100


@pytest.mark.slow
def test_gp_vi_learns_the_parallelogram_four_bar_in_maximal_coordinates():
    # results/gp_vi/samples (Fig. 2d of the GP-VI paper): without a prior, the GP-VI on the
    # four-bar's maximal coordinates (12 body coordinates, 10 joint constraints) is scored
    # like the joint-coordinate models. Every start at rest swings through the hanging rest,
    # where all links align and the constraints lose rank; there the projection's Newton
    # once failed on every model. Here 30 training and 5 test trajectories of 1 s from the
    # authors' start box, friction on the joints: every 20-step rollout runs through, keeps
    # |g| <= 1e-9 (measured: 1.2e-10 m at the fold, where the projection amplifies the
    # constraints' round-off; ~1e-13 m away from it), and 128 samples give a 20-step error of
    # the bodies' angles at least 20 times below 16 samples' (measured 1.1e-4 against 1.3e-2).
    joint, h = ParallelogramFourBar(), 0.01
    true = joint.with_params(m=1.05, friction=[1.0, 0.0, 0.25, 1.0, 0.25])
    maximal = joint.maximal()
    fine = VariationalIntegrator(true, "midpoint").step_function(1e-4).mapaccum(10_000)
    rng = np.random.default_rng(5)

    def trajectories(n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` trajectories of 1 s in joint coordinates, true and with noise 1e-3."""
        states = []
        for start in rng.uniform(
            [-np.pi / 2, -np.pi / 2, 0, 0], [np.pi / 2, np.pi / 2, 0, 0], (n, 4)
        ):
            xs = np.asarray(fine(start, np.zeros((1, 10_000)), np.zeros((0, 10_000)))).T
            states.append(np.vstack([start, xs[99::100]]))
        states = np.array(states)
        return states, states + 1e-3 * rng.standard_normal(states.shape)

    def dataset(states: np.ndarray, obs: np.ndarray) -> Dataset:
        n, t = states.shape[:2]
        return Dataset(
            t=np.tile(np.arange(t) * h, (n, 1)), obs=joint.states_to_maximal(obs),
            states=joint.states_to_maximal(states),
            inputs=np.zeros((n, t - 1, 1)), dt=h, metadata={"system": maximal.name},
        )  # fmt: skip

    train = dataset(*trajectories(30))
    test = dataset(*[trajectories(5)[0]] * 2)
    nq, angles = maximal.nq, [2, 5, 8, 11]
    # every start with 20 steps ahead
    X = np.concatenate([test.states[:, k] for k in range(81)], axis=0)
    target = np.concatenate([test.states[:, k + 20] for k in range(81)], axis=0)
    errors = {}
    for samples in (16, 128):
        family = GPVIModel(maximal, h, prior="zero", samples=samples, seed=0, restarts=1)
        model = family.fit(train).discrete_model()
        xs = rollout_model(model, X, np.zeros((len(X), 20, 1)))  # raises if a Newton fails
        g = np.asarray(maximal.function("g").map(xs[:, :, :nq].size // nq)(
            xs[:, :, :nq].reshape(-1, nq).T
        ))  # fmt: skip
        assert np.abs(g).max() <= 1e-9, samples
        error = np.angle(np.exp(1j * (xs[:, -1, angles] - target[:, angles])))
        errors[samples] = float(np.mean(error**2))
    assert errors[128] < errors[16] / 20, errors


@pytest.mark.slow
def test_lsi_recovers_the_pendulum_level_sets_and_bea_is_what_does_it():
    # results/lsi/pendulum: on the paper's pendulum (h = 0.5, 400 trajectories of 5 steps,
    # kernel length 5) LSI's BEA-corrected energy H^[[2]] has nu = 0.0112 on
    # pendulum_data() (plain Halton points 1..400) and 0.0105 on the authors' points 4..403
    # (authors 0.01044), while its uncorrected H^[[0]] has 0.10 (authors 0.1019). Reduced
    # here to LSI's nu on the authors' points (the table's fit on pendulum_data() is the
    # other set): nu(H^[[2]]) <= 0.0125 and H^[[0]] more than five times worse. The claim is
    # specific to these plain Halton sets: on scrambled Halton sets of the same size the
    # table measures nu(H^[[2]]) from 0.009 to 0.13, so no other seed is asserted.
    import sys
    import warnings

    from scipy.stats import qmc

    from vimpc.errors import FitWarning
    from vimpc.models.families.lsi import LSIModel

    sys.path.insert(0, str(ROOT / "tests" / "experiments"))
    from _lsi_systems import PENDULUM, dataset, level_set_mismatch, pendulum_energy_gradient

    engine = qmc.Halton(d=2, scramble=False)
    engine.fast_forward(4)  # skopt's Halton() skips max(primes) = 3 points after the 0 point
    x0s = np.array([-np.pi, -1.2]) + np.array([2 * np.pi, 2.4]) * engine.random(400)
    data = dataset(PENDULUM, x0s, 0.5, 5)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*the data have no inputs", category=FitWarning)
        model = LSIModel(PENDULUM, 0.5, length=5.0).fit(data)
    q, v = np.meshgrid(np.linspace(-1.2, 1.2, 30), np.linspace(-0.6, 0.6, 30))
    ref = pendulum_energy_gradient(q, v)
    nu = {o: level_set_mismatch(ref, model.dynamics_.hamiltonian_gradient(q, v, o)) for o in (0, 2)}
    assert nu[2] <= 0.0125, nu  # measured 0.01046
    assert nu[0] > 5 * nu[2], nu  # measured 0.1019


def test_many_trajectories_pin_the_hamel_connection_where_one_orbit_does_not():
    # results/hamel/disk (seeds 0-4): the connection learned from 400 trajectories of 20 steps
    # over the workspace is within 1e-2 RMS of the true one on held-out configurations, the
    # one from the authors' orbit far off; here seed 7 (its own data draw and weights) for
    # the many trajectories, seed 8 for the orbit, at 600 epochs against the table's 1000
    import argparse
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "experiments"))
    import hamel_disk

    args = argparse.Namespace(
        epochs=600, orbit_steps=hamel_disk.ORBIT_STEPS, steps=20, window=1, heading="periodic",
        hidden=[20, 20, 20], rollout_steps=300, rollout_starts=4,
    )  # fmt: skip
    many, _ = hamel_disk.experiment(args, "many", 400, 7)
    orbit, _ = hamel_disk.experiment(args, "orbit", 0, 8)
    assert many["heldout_rms"] <= 1e-2, many
    assert orbit["heldout_rms"] >= 10 * many["heldout_rms"], (orbit, many)
    assert orbit["orbit_rms"] <= 2e-2, orbit  # accurate where its data are
    assert many["vi_max_constraint"] <= 1e-10, many  # the exported step keeps its constraint
    assert many["momentum_err_heldout_vi"] < orbit["momentum_err_heldout_vi"], (many, orbit)
