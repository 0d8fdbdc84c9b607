"""How the MuJoCo cart-pole's training data are collected decides whether GP-VI learns it.

    python tests/experiments/mujoco_cartpole_data.py [--heldout 40] [--seeds 3]

The plant is ``scenarios/mujoco_cartpole_gpvi_safe.toml``'s (gymnasium's
``InvertedPendulum-v5`` with vimpc's MJCF: end stops at |s| = 1 m, damping and armature the
nominal model lacks). For each collection design (the scenario's data settings with the
design's overrides) and data seed (``data.seed`` 0, 1, ...; held-out seeds 10^6 apart), the
training and held-out trajectories are collected as the scenario collects them, GP-VI is
fitted with the scenario's settings (without its bound: the mean prediction is compared),
and the table gives: the share
of training trajectories that reach |s| >= 0.95 m (the end stops' impacts), the held-out
one-step RMSE of the cart's and the pole's velocity for the nominal model (the midpoint VI of
the declared cart-pole) and for GP-VI, and their ratio. Designs: open-loop random forces of
+-20 N held 2 steps, 40 steps a trajectory from the env's reset (``collection =
"open_loop"``); trajectories of 60 steps around the nominal model's controller with a dither
of +-5 N, and of +-2 N (the scenario's).

Writes ``results/mujoco/cartpole_data.{md,csv}``. ``--quick --out DIR``: one seed, few
trajectories.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from _quick import RESULTS, ROOT, add_options, command, parse
from _tables import write_table

SCENARIO = ROOT / "scenarios" / "mujoco_cartpole_gpvi_safe.toml"
OUT = RESULTS / "mujoco"

DESIGNS = {
    "open loop, +-20 N": [
        'data.collection="open_loop"',
        "data.steps=40",
        "data.trajectories=100",
        "data.excitation_options={hold=2, low=[-20.0], high=[20.0]}",
    ],
    "nominal controller, +-5 N dither": [
        "data.excitation_options={hold=2, low=[-5.0], high=[5.0]}",
    ],
    "nominal controller, +-2 N dither (the scenario's)": [],
}


def measure(design: list[str], seed: int, heldout: int, trajectories: int | None) -> dict:
    from vimpc import pipeline, scenario
    from vimpc.models import NominalModel, evaluation
    from vimpc.scenario import build_family

    # the mean prediction is what is compared: no bound is calibrated
    sets = [*design, 'model.bound="none"', 'controller.tightening="none"', f"data.seed={seed}"]
    sets.append(f"data.heldout_seed={1_000_000 * (seed + 1)}")
    sets.append(f"data.heldout_trajectories={heldout}")
    if trajectories is not None:
        sets.append(f"data.trajectories={trajectories}")
    cfg = scenario.load_scenario(SCENARIO, sets)
    env = pipeline.build_env(cfg)
    train = pipeline.collect(cfg, env, "train")
    held = pipeline.collect(cfg, env, "heldout")
    nominal = NominalModel(env.nominal_system, env.dt).fit().discrete_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        family = build_family(cfg, env.nominal_system).fit(train, held)
    learned = family.discrete_model()
    env.close()

    def rmse(model):
        e = evaluation.one_step_errors(model, held)
        return np.sqrt(np.nanmean(e**2, axis=0))

    nom, gp = rmse(nominal), rmse(learned)
    return {
        "stops": float(np.mean(np.any(np.abs(train.states[..., 0]) >= 0.95, axis=1))),
        "nominal_s_dot": nom[2],
        "nominal_theta_dot": nom[3],
        "gpvi_s_dot": gp[2],
        "gpvi_theta_dot": gp[3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heldout", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trajectories", type=int, default=None, help="(quick mode)")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"seeds": 1, "heldout": 4, "trajectories": 4})
    rows = []
    for name, design in DESIGNS.items():
        for seed in range(args.seeds):
            m = measure(design, seed, args.heldout, args.trajectories)
            rows.append(
                {
                    "collection": name,
                    "data_seed": seed,
                    "trajectories_at_the_stops": round(m["stops"], 4),
                    "nominal_s_dot_rmse": m["nominal_s_dot"],
                    "gpvi_s_dot_rmse": m["gpvi_s_dot"],
                    "nominal_theta_dot_rmse": m["nominal_theta_dot"],
                    "gpvi_theta_dot_rmse": m["gpvi_theta_dot"],
                    "theta_dot_ratio": m["gpvi_theta_dot"] / m["nominal_theta_dot"],
                }
            )
            print(name, seed, {k: f"{v:.3g}" for k, v in m.items()}, flush=True)
    write_table(
        args.out,
        "cartpole_data",
        "MuJoCo cart-pole: how the training data are collected decides what GP-VI learns",
        command(__file__, args.argv),
        "The plant of `scenarios/mujoco_cartpole_gpvi_safe.toml`; per collection design and "
        "data seed, the share of training trajectories that reach |s| >= 0.95 m (the end "
        "stops at 1 m), and the held-out one-step RMSE of the cart's velocity [m/s] and the "
        "pole's [rad/s] for the nominal midpoint VI and for GP-VI fitted with the scenario's "
        f"settings, no bound ({args.heldout} held-out trajectories); ratio: GP-VI over nominal on the "
        "pole's velocity (below 1: GP-VI learned the damping and armature).",
        rows,
        outputs=(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
