"""Wall time of one ``env.step`` for every vimpc environment at its defaults.

Run from the repository root::

    python tests/benchmarks/bench_env_step.py

Each environment is built with its default arguments (dt = 0.01 s, 100 midpoint
variational substeps of 1e-4 s), reset with seed 0 and stepped 100 times to warm
up; then 1,000 steps with random actions inside the Box are timed one by one with
``time.perf_counter``, once with the default compiled step function and once
interpreted (``jit=False``). The column "integrator" times the environment's CasADi flow
alone on the same states, so "step - integrator" is the Python overhead of the
environment (checks, noise, info). Writes ``results/benchmarks/env_step.md`` and
``results/benchmarks/env_step.csv`` and prints the table. Budget: 2 ms median.
``--quick --out DIR``: 2 warm-up and 5 timed steps per row, into ``DIR`` (a smoke test).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import casadi
import numpy as np
from _common import add_options, parse, record
from vimpc_envs.cartpole import CartPoleEnv
from vimpc_envs.fourbar import FourBarEnv
from vimpc_envs.pendulum import PendulumEnv
from vimpc_envs.rolling_disk import RollingDiskEnv

ENVS = {
    "vimpc/Pendulum-v0": PendulumEnv,
    "vimpc/CartPole-v0": CartPoleEnv,
    "vimpc/FourBar-v0": FourBarEnv,
    "vimpc/RollingDisk-v0": RollingDiskEnv,
}
WARMUP, STEPS, BUDGET_MS = 100, 1000, 2.0
COMMAND = "python tests/benchmarks/bench_env_step.py"
OUT = Path(__file__).resolve().parents[2] / "results" / "benchmarks"


def bench(cls, jit: bool, warmup: int = WARMUP, steps: int = STEPS) -> dict[str, float | str]:
    env = cls(jit=jit)
    env.reset(seed=0)
    low, high = env.action_space.low, env.action_space.high
    actions = np.random.default_rng(0).uniform(low, high, size=(warmup + steps, *low.shape))
    for a in actions[:warmup]:
        env.step(a)
    step_times, states = np.empty(steps), np.empty((steps, env.observation_space.shape[0]))
    for k, a in enumerate(actions[warmup:]):
        states[k] = env.state
        t0 = time.perf_counter()
        env.step(a)
        step_times[k] = time.perf_counter() - t0
    flow = env._step_fn  # the CasADi function the env calls once per step
    flow_times = np.empty(steps)
    for k, a in enumerate(actions[warmup:]):
        t0 = time.perf_counter()
        flow(states[k], a)
        flow_times[k] = time.perf_counter() - t0
    env.close()
    ms = 1e3
    median = float(np.median(step_times)) * ms
    return {
        "env": cls.__name__,
        "step_function": "compiled (default)" if env.compiled else "interpreted (jit=False)",
        "nx": env.observation_space.shape[0],
        "substeps": round(env.dt / env.substep),
        "median_ms": median,
        "p95_ms": float(np.percentile(step_times, 95)) * ms,
        "integrator_median_ms": float(np.median(flow_times)) * ms,
        "overhead_median_ms": median - float(np.median(flow_times)) * ms,
        "within_budget": "yes" if median <= BUDGET_MS else "NO",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=STEPS, help="timed steps")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"warmup": 2, "steps": 5})
    out, warmup, steps = args.out, args.warmup, args.steps
    rows = []
    for jit in (True, False):
        for env_id, cls in ENVS.items():
            rows.append({"id": env_id, **bench(cls, jit, warmup, steps)})
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, {_cpu_model()}, "
        f"Python {platform.python_version()}, CasADi {casadi.__version__}, "
        f"NumPy {np.__version__}"
    )
    header = (
        "| env | step function | nx | substeps | median [ms] | p95 [ms] "
        "| integrator median [ms] | overhead median [ms] | median <= 2 ms |"
    )
    lines = [
        header,
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['id']} | {r['step_function']} | {r['nx']} | {r['substeps']} | "
            f"{r['median_ms']:.3f} | "
            f"{r['p95_ms']:.3f} | {r['integrator_median_ms']:.3f} | "
            f"{r['overhead_median_ms']:.3f} | {r['within_budget']} |"
            for r in rows
        ),
    ]
    table = "\n".join(lines)
    command = COMMAND if not args.argv else f"{COMMAND} {' '.join(args.argv)}"
    out.mkdir(parents=True, exist_ok=True)
    md = (
        "# env.step wall time\n\n"
        f"Made by `{command}` on {stamp}.\n\n"
        f"Machine: {machine}.\n\n"
        f"Default arguments (dt = 0.01 s, substep = 1e-4 s, midpoint variational integrator); "
        f"{warmup} warm-up steps, then {steps} timed steps with uniform random actions in the "
        f'Box (seed 0). "integrator" is the env\'s CasADi step function alone on the same '
        f'states and actions; "overhead" = median step - median integrator. '
        f"Budget: {BUDGET_MS} ms median at the defaults, i.e. with the step function compiled "
        f"by CasADi's JIT (`jit=True`); the interpreted rows (`jit=False`, also the fallback "
        f"without a C compiler; bit-identical results) are for reference.\n\n"
        f"{table}\n"
    )
    _write(out / "env_step.md", md)
    fields = ["id", *(k for k in rows[0] if k != "id")]
    tmp = out / "env_step.csv.tmp"
    with tmp.open("w", newline="") as f:
        f.write(f"# command: {command}\n# date: {stamp}\n# machine: {machine}\n")
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    tmp.replace(out / "env_step.csv")
    record(out / "env_step.md", command, ["env_step.csv"])
    print(table)
    print(f"\nwrote {out / 'env_step.md'} and {out / 'env_step.csv'}")
    if args.quick:  # a smoke test: its few timings judge nothing
        return 0
    default = [r for r in rows if r["step_function"].startswith("compiled")]
    return (
        0 if len(default) == len(ENVS) and all(r["within_budget"] == "yes" for r in default) else 1
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
