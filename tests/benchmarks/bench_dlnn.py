"""DLNN and LNN: training speed and the exported step's cost on the discrete-Lagrangian
paper's cart-pendulum reproduction.

Run from the repository root::

    python tests/benchmarks/bench_dlnn.py [--epochs 100] [--calls 200] [--threads 1]

Data: the cart-pendulum (``CartPendulum``, m = M = l = 1, upright at phi = 0) from
``(s, phi, s', phi') = (0.1, 0.1, 0, 0)``, one unforced trajectory of 200 steps at
h = 0.01 s (the midpoint integrator of the true Lagrangian with 100 substeps, the paper's
ground truth), i.e. 199 triples. Network 3x128 softplus (the paper's notebooks). Reported:
epochs per second of DLNN (``symmetries = 0`` and 1) and of LNN over ``--epochs`` epochs
(the symmetry run's first half is its warm-up), then, for DLNN at ``order = 0`` and
``order = 2`` and for LNN, the build time and the median and p95 of ``--calls`` calls of
``step`` (``casadi.Function(model.step)``, without the contract's argument check) of the
exported model (MX, the network's derivatives in closed form:
``vimpc.models._network_lagrangian.midpoint_model``) and of the reference it replaced (the
``VariationalIntegrator`` of the same Lagrangian on SX, the network expanded into scalar
operations; ``--no-reference`` skips it: its order-2 build takes minutes), with the
nominal model (the true cart-pendulum's midpoint integrator) timed in the same run. The
states: positions uniform in +-0.2, velocities in +-1, input 0 (the network is trained on
unforced data, so its scale, and hence its response to an input, is not identified);
"refused" counts steps whose root the acceptance test refused (NaN).
``--quick --out DIR``: a smoke test (hidden [16, 16], 5 epochs, 3 calls).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import casadi as ca
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import OUT, add_options, ms_stats, parse, write_results  # noqa: E402

from vimpc.integrators import VariationalIntegrator  # noqa: E402
from vimpc.mechanics import CartPendulum  # noqa: E402
from vimpc.models._integrated import integrator_model  # noqa: E402
from vimpc.models.families.dlnn import DLNNModel  # noqa: E402
from vimpc.models.families.lnn import LNNModel  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "experiments"))
from _dlnn_systems import CART, cart_data  # noqa: E402  (the paper's data, shared)

H, STEPS = CART["h"], CART["steps"]
#: the project's target for the exported DLNN step [ms]
STEP_MS = 1.0


def _time_steps(model, states, u):
    step = ca.Function(model.step)
    step(states[0], u, [])
    times, refused = [], 0
    for x in states:
        t = time.perf_counter()
        xn = step(x, u, [])
        times.append(time.perf_counter() - t)
        refused += int(not np.all(np.isfinite(np.asarray(xn))))
    return times, refused


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, nargs="+", default=[128, 128, 128])
    ap.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the SX integrator reference (its order-2 build takes minutes)",
    )
    add_options(ap, OUT)
    args = parse(ap, argv, OUT, quick={"epochs": 5, "calls": 3, "hidden": [16, 16]})
    data = cart_data()
    s = CartPendulum()
    common = dict(epochs=args.epochs, threads=args.threads, hidden=args.hidden)
    fits = {
        "dlnn": DLNNModel(s, H, order=0, **common),
        "dlnn (symmetries = 1)": DLNNModel(
            s, H, symmetries=1, warmup=max(args.epochs // 2, 1), **common
        ),
        "lnn": LNNModel(s, H, **common),
    }
    speed = []
    for name, m in fits.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(data)
        speed.append(f"- {name}: {m.epochs_per_second_:.1f} epochs/s")
        print(speed[-1])
    rng = np.random.default_rng(0)
    states = np.hstack(
        [rng.uniform(-0.2, 0.2, (args.calls, 2)), rng.uniform(-1, 1, (args.calls, 2))]
    )
    u = np.zeros(1)
    rows = []

    def record(label, export, build_fn):
        t = time.perf_counter()
        model = build_fn()
        build = time.perf_counter() - t
        times, refused = _time_steps(model, states, u)
        row = {"model": label, "export": export, "build_s": build, **ms_stats(times),
               "refused": refused, "calls": len(times)}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
        return model

    nominal = integrator_model(VariationalIntegrator(s, "midpoint"), H)
    record("nominal (true cart-pendulum)", "SX integrator", lambda: nominal)
    m = fits["dlnn"]
    agree = []
    for order in (0, 2):
        m.order = m._settings["order"] = order
        fast = record(f"dlnn order {order}", "MX, closed form", m.discrete_model)
        if not args.no_reference:
            slow = record(f"dlnn order {order}", "SX integrator (before)", m._integrator_model)
            agree.append((f"dlnn order {order}", _difference(fast, slow, states, u)))
    lnn = fits["lnn"]
    fast = record("lnn", "MX, closed form", lnn.discrete_model)
    if not args.no_reference:
        slow = record("lnn", "SX integrator (before)", lnn._integrator_model)
        agree.append(("lnn", _difference(fast, slow, states, u)))
    best = next(r for r in rows if r["model"] == "dlnn order 0" and r["export"].startswith("MX"))
    extra = (
        "\nTraining speed (3 fits on the same data):\n" + "\n".join(speed) + "\n"
        + "".join(f"\n{name}: largest |step difference| exported vs reference over the "
                  f"calls {d:.1e}" for name, d in agree)
        + f"\n\nTarget: the exported DLNN (order 0) step <= {STEP_MS:g} ms median: "
        + ("met" if best["median_ms"] <= STEP_MS else "NOT met")
        + f" ({best['median_ms']:.2f} ms).\n"
    )  # fmt: skip
    write_results(
        "dlnn",
        "DLNN / LNN: the exported step's build time and cost (cart-pendulum)",
        rows,
        [
            ("model", "model", ""),
            ("export", "export", ""),
            ("build_s", "build [s]", ".2f"),
            ("median_ms", "step median [ms]", ".3f"),
            ("p95_ms", "step p95 [ms]", ".3f"),
            ("refused", "refused", "d"),
            ("calls", "calls", "d"),
        ],
        notes=__doc__.split("\n\n", 2)[2].split("``--quick")[0],
        extra=extra,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )
    return 0


def _difference(fast, slow, states, u) -> float:
    a = np.hstack([np.asarray(fast.step(x, u, [])) for x in states])
    b = np.hstack([np.asarray(slow.step(x, u, [])) for x in states])
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    d = np.abs(a - b)
    return float(np.max(d[np.isfinite(d)], initial=0.0))


if __name__ == "__main__":
    sys.exit(main())
