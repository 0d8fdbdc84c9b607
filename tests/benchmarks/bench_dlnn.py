"""DLNN and LNN: training speed and the exported step's cost on the discrete-Lagrangian
paper's cart-pendulum reproduction.

Run from the repository root::

    python tests/benchmarks/bench_dlnn.py [--epochs 100] [--calls 200] [--threads 1]
        [--before REV]

Data: the cart-pendulum (``CartPendulum``, m = M = l = 1, upright at phi = 0) from
``(s, phi, s', phi') = (0.1, 0.1, 0, 0)``, one unforced trajectory of 200 steps at
h = 0.01 s (the midpoint integrator of the true Lagrangian with 100 substeps, the paper's
ground truth), i.e. 199 triples. Network 3x128 softplus (the paper's notebooks). Reported:
epochs per second of DLNN (``symmetries = 0`` and 1) and of LNN over ``--epochs`` epochs
(the symmetry run's first half is its warm-up), then, for DLNN at ``order = 0`` and
``order = 2`` and for LNN, the build time and the median and p95 of ``--calls`` calls of
``step`` (``casadi.Function(model.step)``, without the contract's argument check), wall
clock and CPU time of the calling thread (the CPU time leaves out waits for a core the
other processes on the machine hold), of the exported model (MX, the network's derivatives
in closed form: ``vimpc.models._network_lagrangian.midpoint_model``), of that model as
written at git revision ``--before`` (its module loaded from git, "before"; default the
revision before the exported step's dense products went to CasADi's BLAS plugins) and of
the reference both replaced (the ``VariationalIntegrator`` of the same Lagrangian on SX,
the network expanded into scalar operations; ``--no-reference`` skips it: its order-2
build takes minutes), with the nominal model (the true cart-pendulum's midpoint
integrator) timed in the same run. Also the median wall time of the step's Jacobian (by
``x`` and ``u``), of the residual and of its Jacobian (by ``x``, ``u``, ``x_next``: what
the MPC's implicit transcription evaluates) at the same states and their steps, not for
the SX reference (its order-2 Jacobians take minutes to build). The
states: positions uniform in +-0.2, velocities in +-1, input 0 (the network is trained on
unforced data, so its scale, and hence its response to an input, is not identified);
"refused" counts steps whose root the acceptance test refused (NaN).
``--quick --out DIR``: a smoke test (hidden [16, 16], 5 epochs, 3 calls).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
import warnings
from contextlib import contextmanager
from pathlib import Path

import casadi as ca
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import OUT, ROOT, add_options, ms_stats, parse, write_results  # noqa: E402

from vimpc.integrators import VariationalIntegrator  # noqa: E402
from vimpc.mechanics import CartPendulum  # noqa: E402
from vimpc.models import _network_lagrangian as nl  # noqa: E402
from vimpc.models._integrated import integrator_model  # noqa: E402
from vimpc.models.families.dlnn import DLNNModel  # noqa: E402
from vimpc.models.families.lnn import LNNModel  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "experiments"))
from _dlnn_systems import CART, cart_data  # noqa: E402  (the paper's data, shared)

H, STEPS = CART["h"], CART["steps"]
#: the project's target for the exported DLNN step [ms]
STEP_MS = 1.0
#: the revision before the exported step's dense products went to CasADi's BLAS plugins
BEFORE = "63aa246"
MODULE = "vimpc/models/_network_lagrangian.py"
NO_COSTS = {"step_jac_ms": float("nan"), "residual_ms": float("nan"),
            "residual_jac_ms": float("nan")}  # fmt: skip


def _time_steps(model, states, u):
    step = ca.Function(model.step)
    step(states[0], u, [])
    times, cpu, refused, nexts = [], [], 0, []
    for x in states:
        t, c = time.perf_counter(), time.thread_time()
        xn = step(x, u, [])
        cpu.append(time.thread_time() - c)
        times.append(time.perf_counter() - t)
        xn = np.asarray(xn).ravel()
        refused += int(not np.all(np.isfinite(xn)))
        nexts.append(xn)
    return times, cpu, refused, nexts


def _median_ms(fn, args) -> float:
    fn(*args[0])
    times = []
    for a in args:
        t = time.perf_counter()
        fn(*a)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def _derivative_costs(model, states, u, nexts) -> dict[str, float]:
    """Median wall time [ms] of the step's Jacobian, the residual and its Jacobian."""
    step = ca.Function(model.step)
    X, U, P = step.mx_in()
    jac_step = ca.Function("J", [X, U, P], [ca.jacobian(step(X, U, P), ca.vertcat(X, U))])
    res = ca.Function(model.residual)
    X, U, XN, P = res.mx_in()
    jac_res = ca.Function(
        "Jr", [X, U, XN, P], [ca.jacobian(res(X, U, XN, P), ca.vertcat(X, U, XN))]
    )
    finite = [(x, xn) for x, xn in zip(states, nexts, strict=True) if np.all(np.isfinite(xn))]
    pairs = [(x, u, xn, []) for x, xn in finite] or [(states[0], u, states[0], [])]
    return {
        "step_jac_ms": _median_ms(jac_step, [(x, u, []) for x in states]),
        "residual_ms": _median_ms(res, pairs),
        "residual_jac_ms": _median_ms(jac_res, pairs),
    }


def _module_at(rev: str) -> types.ModuleType | None:
    """``vimpc.models._network_lagrangian`` as written at git revision ``rev`` (loaded from
    git as a separate module), or None where git cannot show it."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no 'before' rows: git cannot show {rev}:{MODULE} ({exc})")
        return None
    name = f"vimpc.models._network_lagrangian_at_{rev}"
    module = types.ModuleType(name)
    module.__file__ = f"{rev}:{MODULE}"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


@contextmanager
def _midpoint_model_of(module):
    """The families build their exported model by ``module``'s ``midpoint_model``."""
    now = nl.midpoint_model
    nl.midpoint_model = module.midpoint_model
    try:
        yield
    finally:
        nl.midpoint_model = now


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, nargs="+", default=[128, 128, 128])
    ap.add_argument(
        "--before",
        default=BEFORE,
        help=f"git revision whose exported step is timed as 'before' (default {BEFORE}; "
        "'none' skips it)",
    )
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

    def record(label, export, build_fn, derivatives=True):
        t = time.perf_counter()
        model = build_fn()
        build = time.perf_counter() - t
        times, cpu, refused, nexts = _time_steps(model, states, u)
        costs = _derivative_costs(model, states, u, nexts) if derivatives else {}
        row = {"model": label, "export": export, "build_s": build, **ms_stats(times),
               "cpu_median_ms": float(np.median(cpu) * 1e3), "refused": refused,
               "calls": len(times), **NO_COSTS, **costs}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
        return model

    before = None if args.before == "none" else _module_at(args.before)
    was = f"MX, closed form (before: {args.before})"
    nominal = integrator_model(VariationalIntegrator(s, "midpoint"), H)
    record("nominal (true cart-pendulum)", "SX integrator", lambda: nominal)
    m = fits["dlnn"]
    agree = []

    def compare(label, fit):
        fast = record(label, "MX, closed form (now)", fit.discrete_model)
        if before is not None:
            with _midpoint_model_of(before):
                old = record(label, was, fit.discrete_model)
            agree.append((f"{label}: now vs before", _difference(fast, old, states, u)))
        if not args.no_reference:
            slow = record(label, "SX integrator", fit._integrator_model, derivatives=False)
            agree.append((f"{label}: now vs SX integrator", _difference(fast, slow, states, u)))

    for order in (0, 2):
        m.order = m._settings["order"] = order
        compare(f"dlnn order {order}", m)
    compare("lnn", fits["lnn"])
    best = next(r for r in rows if r["model"] == "dlnn order 0" and r["export"].endswith("(now)"))
    old = [r for r in rows if r["model"] == "dlnn order 0" and r["export"] == was]
    extra = (
        "\nTraining speed (3 fits on the same data):\n" + "\n".join(speed) + "\n"
        + "".join(f"\n{name}: largest |step difference| over the calls {d:.1e}"
                  for name, d in agree)
        + f"\n\nDense products of the exported step: {nl._blas(1)} up to 3 columns, "
        + f"{nl._blas(4)} above (CasADi's BLAS plugins; vimpc.models._network_lagrangian"
        + "._blas).\n"
        + f"\nTarget: the exported DLNN (order 0) step <= {STEP_MS:g} ms median: "
        + ("met" if best["median_ms"] <= STEP_MS else "NOT met")
        + f" ({best['median_ms']:.2f} ms median, {best['p95_ms']:.2f} ms p95, "
        + f"{best['cpu_median_ms']:.2f} ms CPU median"
        + (f"; before: {old[0]['median_ms']:.2f} ms median, {old[0]['p95_ms']:.2f} ms p95"
           if old else "")
        + ").\n"
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
            ("cpu_median_ms", "step CPU median [ms]", ".3f"),
            ("step_jac_ms", "step Jacobian [ms]", ".3f"),
            ("residual_ms", "residual [ms]", ".3f"),
            ("residual_jac_ms", "residual Jacobian [ms]", ".3f"),
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
