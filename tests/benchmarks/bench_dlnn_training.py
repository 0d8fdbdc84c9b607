"""Training time of the cart-pendulum reproduction's three networks (LNN, DLNN, SymDLNN).

Run from the repository root::

    python tests/benchmarks/bench_dlnn_training.py [--seeds 0] [--epochs 4000]

The fits of ``tests/experiments/dlnn_reproduction.py --systems cart`` with its settings
(the paper's cart-pendulum: one unforced 200-step trajectory at h = 0.01 s, 3x128 softplus,
``--epochs`` epochs; SymDLNN with one generator, a quarter of the epochs as warm-up and 64
symmetry points), each timed alone, one after the other (the wall time of ``fit``, one
torch thread as the family's default). Target: each trains in <= 5 minutes on this
machine's CPU. ``--quick --out DIR``: 30 epochs into ``DIR``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from _common import OUT, ROOT, add_options, met, parse, write_results

from vimpc.errors import FitWarning
from vimpc.models.families.dlnn import DLNNModel
from vimpc.models.families.lnn import LNNModel

sys.path.insert(0, str(ROOT / "tests" / "experiments"))
from _dlnn_systems import CART, cart_system, dataset, truth  # noqa: E402

BUDGET_S = 300.0
HIDDEN = [128, 128, 128]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, default=4000)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"epochs": 30})
    system, h = cart_system(), CART["h"]
    X = truth(system, h, CART["x0"], CART["steps"])
    data = dataset(system, h, X, noise=0.0, seed=0)
    rows = []
    for seed in args.seeds:
        common = dict(hidden=HIDDEN, epochs=args.epochs, seed=seed)
        models = {
            "LNN": LNNModel(system, h, **common),
            "DLNN": DLNNModel(system, h, order=0, **common),
            "SymDLNN": DLNNModel(system, h, order=0, symmetries=1, warmup=max(1, args.epochs // 4),
                                 symmetry_points=64, **common),
        }  # fmt: skip
        for name, model in models.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FitWarning)
                model.fit(data)
            seconds = time.perf_counter() - start
            records = model.training_ if isinstance(model.training_, tuple) else (model.training_,)
            epochs = sum(r.epochs for r in records)
            rows.append(
                {
                    "model": name,
                    "seed": seed,
                    "epochs": epochs,
                    "fit_s": seconds,
                    "epochs_per_s": epochs / seconds,
                    "target": met(seconds <= BUDGET_S),
                }
            )
            print(f"{name} seed {seed}: {epochs} epochs in {seconds:.1f} s", flush=True)
    columns = [
        ("model", "model", "s"),
        ("seed", "seed", "d"),
        ("epochs", "epochs", "d"),
        ("fit_s", "fit [s]", ".1f"),
        ("epochs_per_s", "epochs/s", ".1f"),
        ("target", f"<= {BUDGET_S:g} s", "s"),
    ]
    notes = f"""
The cart-pendulum of the DLNN paper (m = M = l = 1, upright at phi = 0): one unforced
trajectory of {CART["steps"]} steps at h = {h} s from {CART["x0"]}, the training data of
`tests/experiments/dlnn_reproduction.py --systems cart` ({len(X) - 2} triples). Networks
{"x".join(map(str, HIDDEN))} softplus, {args.epochs} epochs each (SymDLNN: {max(1, args.epochs // 4)}
network-only warm-up epochs, then the symmetry terms on 64 points), seeds {args.seeds}; each fit
timed alone. Target (issue): the reproduction trains in <= 5 minutes per network.
"""
    write_results("dlnn_training", "DLNN paper's cart-pendulum: training time", rows, columns,
                  notes, out=args.out, script=__file__, argv=args.argv)  # fmt: skip


if __name__ == "__main__":
    main()
