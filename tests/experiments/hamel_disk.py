"""The hamel family on the rolling disk: one orbit (the authors' data) against many short
trajectories, by the error of the learned connection on held-out configurations.

    python tests/experiments/hamel_disk.py [--seeds 0 1 2] [--epochs 300] [--window 1]
        [--orbit-steps 400] [--trajectories 40] [--steps 10] [--hidden 20 20 20]

Data from ``vimpc/RollingDisk-v0`` (the true disk through the nonholonomic variational
integrator, substep 1e-3 s, nominal masses, no noise), dt = 0.05 s:

- "one orbit": the authors' single trajectory (Wang & Bloch, Sec. 5; the reference code's
  analytic orbit): ``theta' = 1``, ``phi' = 0.5`` rad/s from ``phi = 0`` with the contact
  point circling ``(3.2, -4.1)``, unforced, ``--orbit-steps`` steps (400: the authors' 20 s);
- "many trajectories": ``--trajectories`` trajectories of ``--steps`` steps (the same number of
  transitions, 40 x 10 = 400) from consistent starts with ``theta, x, y ~ U(-1, 1)``,
  ``phi ~ U(-pi, pi)``, rates ``U(-2, 2)``, ``U(-1.5, 1.5)``, and random-step torques up to
  the env's limits.

Each is fitted with the family's training (one-step RK4 rollouts of the Hamel ODE by default,
``--window``; the authors: 20 steps of 0.01 s), the authors' 3 x 20 sine network with an ELU
before the output, Adam with lr 1e-2 and a cosine schedule, full batch, ``--epochs`` (the
authors: 2001 RMSprop iterations), once per training seed (``--seeds``; the seed sets the
initial weights, the data stay the same). Errors of the identified connection (the gauge
``A^1 = 0``; motion fixes only ``(A^1 y - A^2, -A^1 x - A^3)``, see the family's docstring) against
the true ``(0, -R cos phi, -R sin phi)``: RMS over 500 held-out configurations of the
many-trajectory distribution, and over the orbit's own configurations; also the raw network
output's RMS error. Predictions of the exported model over 20 steps from 10 held-out
consistent starts with random torques: the contact point's RMS error against the env and the
largest ``|a~(q) v|`` (the learned constraint kept by the integrator); the nominal model with
the true constraint is the reference row.

Writes ``results/hamel/disk.{md,csv}``. ``--quick --out DIR``: the same path on a 12-step orbit,
4 trajectories of 3 steps, a 1 x 4 network, 2 epochs, one seed.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import vimpc_envs  # noqa: F401  (registers the envs)
from _quick import add_options, command, parse
from _tables import write_table

from vimpc.data import make_excitation, rollout_env, rollout_model
from vimpc.errors import FitWarning
from vimpc.mechanics import RollingDisk
from vimpc.models import NominalModel
from vimpc.models.families.hamel import HamelModel

OUT = Path(__file__).parents[2] / "results" / "hamel"
DT = 0.05
ENV = {"dt": DT, "substep": 1e-3, "perturbation": 0.0, "obs_noise": 0.0}
DISK = RollingDisk()
# the reference code's orbit: theta' = Omega, phi' = omega, centre (x0, y0)
OMEGA, TURN, X0, Y0 = 1.0, 0.5, 3.2, -4.1
HELDOUT = 500
PREDICTED_STARTS, PREDICTED_STEPS = 10, 20


def _env():
    return gymnasium.make("vimpc/RollingDisk-v0", **ENV).unwrapped


def orbit(steps: int):
    R = DISK.params["R"]
    q = np.array([0.0, 0.0, X0, Y0 - OMEGA / TURN * R])
    start = np.concatenate([q, DISK.consistent_velocity(q, OMEGA, TURN)])
    return rollout_env(_env(), 1, steps, np.zeros((1, steps, 2)), 0, initial_states=start[None])


def _starts(n: int, rng: np.random.Generator) -> np.ndarray:
    out = []
    for _ in range(n):
        q = np.array([rng.uniform(-1, 1), rng.uniform(-np.pi, np.pi), *rng.uniform(-1, 1, 2)])
        out.append(np.concatenate([q, DISK.consistent_velocity(q, rng.uniform(-2, 2),
                                                              rng.uniform(-1.5, 1.5))]))  # fmt: skip
    return np.array(out)


def many(n: int, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    inputs = np.stack(
        [
            make_excitation("random_steps", steps, 2, DT, rng, low=[-2, -1], high=[2, 1])
            for _ in range(n)
        ]
    )
    return rollout_env(_env(), n, steps, inputs, seed, initial_states=_starts(n, rng))


def prediction(model, truth) -> tuple[float, float]:
    """RMS contact-point error [m] over the predicted steps of ``truth``'s trajectories
    (the same starts and torques), and the largest ``|velocity_constraint|`` on them."""
    pred = rollout_model(model, truth.states[:, 0], truth.inputs)
    if not np.all(np.isfinite(pred)):
        return float("nan"), float("nan")
    err = np.linalg.norm(pred[:, 1:, 2:4] - truth.states[:, 1:, 2:4], axis=2)
    flat = pred[:, 1:].reshape(-1, 8)
    a = np.asarray(model.velocity_constraint.map(len(flat))(flat.T))
    return float(np.sqrt(np.mean(err**2))), float(np.max(np.abs(a)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--orbit-steps", type=int, default=400)
    parser.add_argument("--trajectories", type=int, default=40)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hidden", type=int, nargs="+", default=[20, 20, 20])
    add_options(parser, OUT)
    args = parse(
        parser,
        argv,
        OUT,
        {"seeds": [0], "epochs": 2, "orbit_steps": 12, "trajectories": 4, "steps": 3,
         "hidden": [4]},
    )  # fmt: skip
    sets = {
        "one orbit": orbit(args.orbit_steps),
        "many trajectories": many(args.trajectories, args.steps, 100),
    }
    rng = np.random.default_rng(200)
    heldout = _starts(HELDOUT, rng)[:, :4]
    truth = many(PREDICTED_STARTS, PREDICTED_STEPS, 300)
    orbit_q = sets["one orbit"].states[0, :, :4]
    nominal = prediction(NominalModel(DISK, DT, integrator="midpoint").discrete_model(), truth)
    rows = [
        {
            "data": "none: the true constraint (nominal midpoint model)",
            "transitions": "-",
            "seed": "-",
            "train_s": "-",
            "final_loss": "-",
            "heldout_rms": 0.0,
            "heldout_max": 0.0,
            "heldout_raw_rms": 0.0,
            "orbit_rms": 0.0,
            "predicted_position_rms": nominal[0],
            "predicted_max_constraint": nominal[1],
        }
    ]
    for name, data in sets.items():
        for seed in args.seeds:
            fam = HamelModel(DISK, DT, hidden=list(args.hidden), epochs=args.epochs,
                             window=args.window, lr=1e-2, batch=0, seed=seed)  # fmt: skip
            with warnings.catch_warnings():
                # the orbit is unforced, as the authors'
                warnings.filterwarnings("ignore", "hamel: the data have no inputs", FitWarning)
                fam.fit(data)
            held, on_orbit = fam.constraint_error(heldout), fam.constraint_error(orbit_q)
            rows.append(
                {
                    "data": name,
                    "transitions": int(data.inputs.shape[0] * data.inputs.shape[1]),
                    "seed": seed,
                    "train_s": round(fam.fit_train_time_, 1),
                    "final_loss": fam.training_.loss[-1],
                    "heldout_rms": held["connection_rms"],
                    "heldout_max": held["max"],
                    "heldout_raw_rms": held["raw_rms"],
                    "orbit_rms": on_orbit["connection_rms"],
                }
            )
            position, constraint = prediction(fam.discrete_model(), truth)
            rows[-1]["predicted_position_rms"] = position
            rows[-1]["predicted_max_constraint"] = constraint
    summary = []
    for name in sets:
        vals = np.array([r["heldout_rms"] for r in rows if r["data"] == name])
        orb = np.array([r["orbit_rms"] for r in rows if r["data"] == name])
        summary.append(
            f"- {name}: held-out RMS {vals.mean():.3g} (min {vals.min():.3g}, max "
            f"{vals.max():.3g} over {len(vals)} seeds); on the orbit's configurations "
            f"{orb.mean():.3g}"
        )
    R = DISK.params["R"]
    intro = f"""
Rolling disk (R = {R} m, I = J = m = 1), dt = {DT} s. "one orbit": the authors' single
unforced orbit, {args.orbit_steps} steps; "many trajectories": {args.trajectories} excited
trajectories of {args.steps} steps from consistent starts spread over the heading. A
{args.hidden} sine network (ELU before the output), {args.epochs} epochs of {args.window}-step
rollouts, Adam lr 1e-2, full batch, training seeds {args.seeds}. Errors of the identified
connection (gauge A^1 = 0) against the true (0, -R cos phi, -R sin phi), Euclidean per
configuration: RMS and max over {HELDOUT} held-out configurations (theta, x, y in [-1, 1],
phi in [-pi, pi]), RMS over the orbit's configurations; raw: the network's own output,
including the split into A^1 and the rest that motion does not fix. An untrained network (output near 0) is off by
about R = {R}. Predictions: the exported model (the midpoint nonholonomic variational
integrator with the learned constraint, one step per dt) over {PREDICTED_STEPS} steps from
{PREDICTED_STARTS} held-out consistent starts with random-step torques, against the env's
trajectories: RMS contact-point error [m] and the largest |a~(q) v| on the predicted states;
the first row is the nominal model with the true constraint (the discretisation's floor:
one midpoint step per dt against the env's 1e-3 s substeps).
"""
    after = (
        "\n".join(summary)
        + """

Not reproduced: the authors' figure (one orbit, 2000 RMSprop iterations of 20-step dopri5
rollouts at dt = 0.01 s, errors of a few 1e-2 after t = 5 s along their orbit) is
qualitative; this table uses one-step RK4 rollouts at dt = 0.05 s, Adam and far fewer
epochs. The orbit's heading covers every angle, but its contact point stays on one circle
and its theta grows to 20 rad, so the held-out configurations (theta, x, y in [-1, 1]) lie
outside what the orbit shows the network, and the orbit's configurations (theta up to 20
rad, the contact point near (3.2, -4.7) m) lie outside the many trajectories' range: each
network is accurate where its data are (the network sees all of q, though the true
connection depends on phi alone). Learning from many initial conditions instead of one
orbit is the paper's stated open problem (its Sec. 6).
"""
    )
    write_table(
        args.out,
        "disk",
        "Hamel family: the rolling disk's connection from one orbit and from many trajectories",
        command(__file__, args.argv),
        intro,
        rows,
        after=after,
    )
    print((args.out / "disk.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
