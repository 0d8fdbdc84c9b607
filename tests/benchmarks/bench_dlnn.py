"""DLNN and LNN: training speed and the exported step's cost on the discrete-Lagrangian
paper's cart-pendulum reproduction.

Run from the repository root::

    python tests/benchmarks/bench_dlnn.py [--epochs 200] [--calls 200] [--threads 1]

Data: the cart-pendulum (``CartPendulum``, m = M = l = 1, upright at phi = 0) from
``(s, phi, s', phi') = (0.1, 0.1, 0, 0)``, one unforced trajectory of 200 steps at
h = 0.01 s (the midpoint integrator of the true Lagrangian with 100 substeps, the paper's
ground truth), i.e. 199 triples. Network 3x128 softplus (the paper's notebooks). Reported:
epochs per second of DLNN (``symmetries = 0`` and 1) and of LNN over ``--epochs`` epochs
(the symmetry run's first half is its warm-up), then the exported model's build time and
the median of ``--calls`` calls of ``model.step`` at ``order = 0`` and ``order = 2``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from vimpc.mechanics import CartPendulum
from vimpc.models.families.dlnn import DLNNModel
from vimpc.models.families.lnn import LNNModel

sys.path.insert(0, str(Path(__file__).parents[1] / "experiments"))
from _dlnn_systems import CART, cart_data  # noqa: E402  (the paper's data, shared)

H, STEPS = CART["h"], CART["steps"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    data = cart_data()
    s = CartPendulum()
    common = dict(epochs=args.epochs, threads=args.threads)
    fits = {
        "dlnn": DLNNModel(s, H, order=0, **common),
        "dlnn (symmetries = 1)": DLNNModel(s, H, symmetries=1, warmup=args.epochs // 2, **common),
        "lnn": LNNModel(s, H, **common),
    }
    for name, m in fits.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(data)
        print(f"{name}: {m.epochs_per_second_:.1f} epochs/s (3x128, {STEPS - 1} triples)")
    m = fits["dlnn"]
    rng = np.random.default_rng(0)
    states = np.hstack(
        [rng.uniform(-0.2, 0.2, (args.calls, 2)), rng.uniform(-1, 1, (args.calls, 2))]
    )
    for order in (0, 2):
        m.order = m._settings["order"] = order
        t = time.perf_counter()
        model = m.discrete_model()
        build = time.perf_counter() - t
        times = []
        for x in states:
            t = time.perf_counter()
            model.step(x, [0.0], [])
            times.append(time.perf_counter() - t)
        print(
            f"dlnn order {order}: build {build:.1f} s, step median {1e3 * np.median(times):.2f} ms"
        )


if __name__ == "__main__":
    main()
