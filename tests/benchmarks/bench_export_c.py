"""The C99 export per model family: the library's size and the time of one compiled ``step``
against CasADi's interpreted call of the same function.

Run from the repository root::

    python tests/benchmarks/bench_export_c.py [--families nominal gp_vi dlnn]

Each model is exported by :func:`vimpc.export_c.export_c` and built with its Makefile
(``gcc -std=c99 -Wall -Werror -O2``). A bench C file linked against ``libmodel.a`` calls
``step`` ``--calls`` times (10^4) on random states and inputs from the model's
observation box and times each call with ``clock_gettime`` (median and p95 over the calls);
CasADi's interpreter (``casadi.Function(model.step)``, without vimpc's argument check) is timed
the same way on ``--interpreted`` calls. The models: for ``nominal`` the midpoint VI of each
vimpc system (nothing to fit); for a learned family its small case of
``tests/models/test_family_contract.py`` (a pendulum, tiny data and settings: a fit of
seconds; the shipped scenarios' fits have larger models, so larger and slower libraries).
``--scenarios NAME ...`` adds shipped scenarios' models as ``vimpc fit`` makes them (a cached
fit is reused; states from the scenario env's resets). Writes
``results/benchmarks/export_c.md`` and ``.csv``. ``--quick --out DIR``: the nominal
pendulum only, 100 calls.
"""

from __future__ import annotations

import argparse
import itertools
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np
from _common import OUT, ROOT, add_options, parse, write_results

FAMILIES = ("nominal", "gp_vi", "gp_residual", "mlp_residual", "lsi", "dlnn", "lnn", "clnn",
            "chnn", "hamel")  # fmt: skip
CALLS, INTERPRETED = 10_000, 2_000

BENCH_C = r"""#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "model.h"

/* usage: ./bench CALLS < points (nx + nu + np numbers per call); prints one time [s] a line */
int main(int argc, char** argv) {
  long calls = atol(argv[1]), k;
  int nx = (int)step_sparsity_in(0)[0], nu = (int)step_sparsity_in(1)[0];
  int np = (int)step_sparsity_in(2)[0], n = nx + nu + np, i;
  casadi_real* points = malloc(sizeof(casadi_real) * (size_t)(n * calls + 1));
  casadi_real x_next[64];
  const casadi_real* arg[step_SZ_ARG];
  casadi_real* res[step_SZ_RES];
  casadi_int iw[step_SZ_IW > 0 ? step_SZ_IW : 1];
  casadi_real w[step_SZ_W > 0 ? step_SZ_W : 1];
  double* times = malloc(sizeof(double) * (size_t)calls);
  struct timespec t0, t1;
  for (k = 0; k < calls * n; ++k)
    if (scanf("%lf", &points[k]) != 1) return 2;
  res[0] = x_next;
  for (k = 0; k < calls; ++k) {
    arg[0] = points + k * n;
    arg[1] = arg[0] + nx;
    arg[2] = arg[1] + nu;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    step(arg, res, iw, w, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    times[k] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  }
  for (i = 0; i < (int)calls; ++i) printf("%.9e\n", times[i]);
  return 0;
}
"""


def _models(families: list[str]):
    """(label, model, observation box low/high, input bound) per family."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "models")]
    from vimpc.mechanics import CartPole, FourBar, Pendulum
    from vimpc.models import NominalModel
    from vimpc.models.registry import family

    for name in families:
        if name == "nominal":
            for label, system, low, high, umax in (
                ("pendulum", Pendulum(friction=[0.1]), [-math.pi, -3.0], [math.pi, 3.0], 2.0),
                ("cart-pole", CartPole(friction=[0.2, 0.05]), [-1.0, -math.pi, -2.0, -4.0],
                 [1.0, math.pi, 2.0, 4.0], 10.0),
                ("four-bar", FourBar(friction=[0.05, 0.02, 0.02, 0.05]), None, None, 5.0),
            ):  # fmt: skip
                model = NominalModel(system, 0.02, integrator="midpoint").discrete_model()
                yield f"nominal {label}", model, system, low, high, umax
            continue
        import torch

        torch.set_num_threads(1)
        from test_family_contract import SMALL_CASES

        case = SMALL_CASES[name]()
        t0 = time.perf_counter()
        fam = family(name)(case.system, case.dt, **case.settings).fit(case.data, case.calibration)
        model = fam.discrete_model()
        print(f"{name}: fitted in {time.perf_counter() - t0:.1f} s", flush=True)
        low, high = case.obs_low, case.obs_high
        yield f"{name} ({case.env_id})", model, case.system, low, high, float(case.input_high[0])


def _scenario_models(names: list[str]):
    """(label, model, None, None, None, input bound) per shipped scenario: its model as
    ``vimpc fit`` makes it (a cached fit is reused), states from the scenario's env."""
    from vimpc import pipeline, scenario
    from vimpc.runs.session import obtain_model
    from vimpc.scenario.catalog import find_scenario

    for name in names:
        cfg = scenario.load_scenario(find_scenario(name), [])
        env = pipeline.build_env(cfg)
        t0 = time.perf_counter()
        model = obtain_model(
            cfg, env, refit=False, progress=False, workers=1, log=lambda *a: None
        ).model
        print(f"{name}: model in {time.perf_counter() - t0:.1f} s", flush=True)
        yield f"{name} ({model.info.get('model', '?')})", model, env, None, None, None


def _points(model, system, low, high, umax, n, rng) -> np.ndarray:
    if umax is None:  # a scenario's env: states it resets to, inputs in its action box
        env = system
        obs = np.array([env.reset(seed=int(k))[0] for k in rng.integers(0, 2**31, n)])
        xs = np.array([np.asarray(ca.DM(model.from_obs(o))).reshape(-1) for o in obs])
        lo, hi = env.action_space.low, env.action_space.high
        us = rng.uniform(lo, hi, size=(n, model.nu))
        return np.hstack([xs, us, np.tile(model.p_default, (n, 1))])
    if low is None:  # the four-bar: states on the loop closure
        xs = np.array([np.concatenate(system.assemble(rng.uniform(-3, 3), rng.uniform(-3, 3)))
                       for _ in range(n)])  # fmt: skip
    else:
        obs = rng.uniform(low, high, size=(n, len(low)))
        xs = np.array([np.asarray(ca.DM(model.from_obs(o))).reshape(-1) for o in obs])
    us = rng.uniform(-umax, umax, size=(n, model.nu))
    ps = np.tile(model.p_default, (n, 1))
    return np.hstack([xs, us, ps])


def bench(label, model, system, low, high, umax, calls, interpreted, work: Path) -> dict:
    from vimpc.export_c import export_c

    folder = work / label.replace(" ", "_").replace("/", "_").replace("(", "").replace(")", "")
    t0 = time.perf_counter()
    export_c(model, folder)
    t_export = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(["make", "-s", "-C", str(folder)], check=True, capture_output=True)
    t_build = time.perf_counter() - t0
    (folder / "bench.c").write_text(BENCH_C)
    subprocess.run(
        ["gcc", "-std=c99", "-Wall", "-Werror", "-O2", "bench.c", "libmodel.a", "-o", "bench",
         "-lm"], cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    points = _points(model, system, low, high, umax, calls, rng)
    text = "\n".join(" ".join(repr(float(v)) for v in row) for row in points)
    done = subprocess.run(
        [str(folder / "bench"), str(calls)], input=text, capture_output=True, text=True, check=True
    )
    c_times = np.array([float(v) for v in done.stdout.split()])
    step = ca.Function(model.step)
    nx, nu = model.nx, model.nu
    py_times = np.empty(min(interpreted, calls))
    for k in range(py_times.size):
        x, u, p = points[k, :nx], points[k, nx : nx + nu], points[k, nx + nu :]
        t0 = time.perf_counter()
        step(x, u, p)
        py_times[k] = time.perf_counter() - t0
    us = 1e6
    return {
        "model": label,
        "nx": nx,
        "functions": len(ca.Function(model.step).find_functions()) + 1,
        "source_bytes": (folder / "model.c").stat().st_size,
        "shared_bytes": (folder / "libmodel.so").stat().st_size,
        "static_bytes": (folder / "libmodel.a").stat().st_size,
        "export_s": t_export,
        "build_s": t_build,
        "c_median_us": float(np.median(c_times)) * us,
        "c_p95_us": float(np.percentile(c_times, 95)) * us,
        "casadi_median_us": float(np.median(py_times)) * us,
        "casadi_p95_us": float(np.percentile(py_times, 95)) * us,
        "speedup": float(np.median(py_times) / np.median(c_times)),
        "calls": calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument(
        "--scenarios",
        nargs="*",
        default=[],
        help="shipped scenarios whose models (as vimpc fit makes them) are benchmarked too",
    )
    parser.add_argument("--calls", type=int, default=CALLS, help="timed C calls per model")
    parser.add_argument("--interpreted", type=int, default=INTERPRETED,
                        help="timed CasADi calls per model")  # fmt: skip
    add_options(parser, OUT)
    args = parse(
        parser, argv, OUT, quick={"families": ["nominal"], "calls": 100, "interpreted": 100}
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-export-c-") as work:
        models = itertools.chain(_models(args.families), _scenario_models(args.scenarios))
        for label, model, system, low, high, umax in models:
            if args.quick and label != "nominal pendulum":
                continue
            rows.append(
                bench(
                    label, model, system, low, high, umax, args.calls, args.interpreted, Path(work)
                )  # fmt: skip
            )
            print(rows[-1], flush=True)
    write_results(
        "export_c",
        "The C99 export: library size and one step's time, compiled against interpreted",
        rows,
        [
            ("model", "model", ""),
            ("nx", "nx", ""),
            ("source_bytes", "model.c [B]", ""),
            ("shared_bytes", "libmodel.so [B]", ""),
            ("static_bytes", "libmodel.a [B]", ""),
            ("build_s", "make [s]", ".1f"),
            ("c_median_us", "C step median [us]", ".2f"),
            ("c_p95_us", "C step p95 [us]", ".2f"),
            ("casadi_median_us", "CasADi step median [us]", ".2f"),
            ("casadi_p95_us", "CasADi step p95 [us]", ".2f"),
            ("speedup", "median ratio", ".1f"),
        ],
        notes=__doc__.split("\n\n", 2)[2],
        out=args.out,
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
