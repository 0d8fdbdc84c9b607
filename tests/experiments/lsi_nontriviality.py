"""LSI's non-triviality condition: the paper's (eq. 15, the corners' mean of dL/dv) against
the mass form (the corners' mean of d^2L/dv^2), on the pendulum reproduction's data.

    python tests/experiments/lsi_nontriviality.py [--steps 10000] [--scrambles 5]

Eq. 15 is linear in the kernel weights, and so is every total derivative ``xi'(q) v``: the
gauge term can satisfy it in place of the physical part, and the minimum-norm solution
lets it (the fitted mass d^2L/dv^2 is then small and the momenta are mostly ``xi'(q)``).
A total derivative has no mass, so the mass form fixes the physical scale. Both forms are
fitted on `pendulum_data()`, on the authors' training set and on ``--scrambles`` scrambled
Halton sets (as `lsi_reproduction.py`); reported: nu of H^[[2]] and H^[[0]], the median
mass on the data, the momentum at rest at q = 0.3, the distilled momentum map's error, and
on `pendulum_data()` the largest position error over ``--steps`` steps from (0.3, 0).
Writes ``results/lsi/nontriviality.{csv,md}``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from _lsi_systems import PENDULUM, flow, pendulum_data
from _tables import write_table
from lsi_reproduction import H_P, LENGTH_P, nu, plain_halton, snapshot_data
from tqdm import tqdm

from vimpc.data.sampling import halton
from vimpc.errors import FitWarning
from vimpc.models.lsi import LSIModel

OUT = Path(__file__).parents[2] / "results" / "lsi"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--scrambles", type=int, default=5)
    args = parser.parse_args()
    box = ([-np.pi, -1.2], [np.pi, 1.2])
    sets = {"pendulum_data()": pendulum_data}
    sets["authors' starts and step 0.500005"] = lambda: snapshot_data(
        PENDULUM, plain_halton(*box, 400, first=4), H_P, 5, H_P * (1 + 1e-5)
    )
    for s in range(args.scrambles):
        sets[f"scrambled Halton, seed {s}"] = lambda s=s: snapshot_data(
            PENDULUM, halton(*box, 400, seed=s, scramble=True), H_P, 5, H_P
        )
    reference = flow(PENDULUM, np.array([0.3, 0.0]), H_P, args.steps)
    rows = []
    with tqdm(total=2 * len(sets), desc="fits") as bar:
        for label, make in sets.items():
            data = make()
            for kind in ("momentum", "mass"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FitWarning)
                    m = LSIModel(PENDULUM, H_P, length=LENGTH_P, nontriviality=kind,
                                 distil=True).fit(data)  # fmt: skip
                d = m.dynamics_
                error = float("nan")
                if label == "pendulum_data()":
                    q = m.positions(0.3, 0.0, args.steps)
                    error = float(np.max(np.abs(q[:, 0] - reference[: len(q), 0])))
                rows.append({
                    "data": label, "nontriviality": kind, "nu2": nu(m, 2), "nu0": nu(m, 0),
                    "mass": d.reference_regularity, "p_rest": float(d.momentum(0.3, 0.0)),
                    "distil_error": m.distil_error_, "trajectory_error": error,
                    "rank": m.collocation_.rank, "residual": m.collocation_.residual,
                })  # fmt: skip
                bar.update()
    headers = {
        "data": "data", "nontriviality": "non-triviality", "nu2": "nu, H^[[2]]",
        "nu0": "nu, H^[[0]]", "mass": "median d^2L/dv^2 on the data",
        "p_rest": "dL^[[2]]/dv at (0.3, 0)", "distil_error": "distil error",
        "trajectory_error": f"max |q - q_ref|, {args.steps} steps", "rank": "rank",
        "residual": "data residual RMS",
    }  # fmt: skip
    by = {(r["data"], r["nontriviality"]): r for r in rows}
    ratio = [by[k, "momentum"]["nu2"] / by[k, "mass"]["nu2"] for k in sets]
    intro = (
        "Pendulum (h = 0.5, 400 trajectories of 6 snapshots, kernel length 5). The true "
        "mass is 1 times the scale the non-triviality constant sets (volume = 1: mean "
        "d^2L/dv^2 = 1 at the corners in the mass form). nu of H^[[2]], momentum form over "
        f"mass form: {min(ratio):.3g} to {max(ratio):.3g} across the {len(sets)} sets."
    )
    command = (
        f"python tests/experiments/lsi_nontriviality.py --steps {args.steps} "
        f"--scrambles {args.scrambles}"
    )
    print(write_table(OUT, "nontriviality", "LSI: the non-triviality condition", command,
                      intro, rows, headers, ""))  # fmt: skip


if __name__ == "__main__":
    main()
