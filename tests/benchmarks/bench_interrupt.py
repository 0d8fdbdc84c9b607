"""How long one Ctrl-C takes to stop ``vimpc run``, with every solver and with workers.

Run from the repository root::

    python tests/benchmarks/bench_interrupt.py [--repeats 20]

Each repetition starts ``vimpc run scenarios/cartpole_swingup.toml`` (200 episodes, far
longer than the wait) as a fresh process, waits until it has printed its first line and
then a further delay drawn uniformly from 1 to 4 s (seeded), so the signal lands at
varied moments: mostly inside a solve, sometimes in an env step, the bookkeeping or, with
workers, while the parent waits on them. It sends one SIGINT and measures the time to the
process's exit. A run counts as stopped when it exits with code 130 and leaves no
``.partial`` folder and no ``metrics.json``. Issue target: within a second, always.

``--quick --out DIR``: a smoke test into ``DIR``: one interrupt of the first solver's run,
1.5 s after its first line (``--delay 1.5 1.5``: a signal during the run's set-up, before
its first episode, is not acted on), waiting at most 15 s for the exit, no workers row.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import CARTPOLE, OUT, ROOT, add_options, met, parse, write_results

CONFIGS = {
    "sqpmethod": ['controller.solver="sqpmethod"'],
    "fatrop": ['controller.solver="fatrop"'],
    "ipopt": ['controller.solver="ipopt"'],
    "rti": ['controller.solver="rti"'],
}
TARGET_S = 1.0


def _once(
    out: Path, sets: list[str], workers: int, delay: float, env: dict, timeout: float = 60.0
) -> dict:
    cmd = [sys.executable, "-m", "vimpc.cli", "run", str(CARTPOLE), "--out", str(out)]
    cmd += ["--quiet", "--no-plots", "--workers", str(workers), "--set", "episodes.count=200"]
    for item in sets:
        cmd += ["--set", item]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    proc.stdout.readline()
    time.sleep(delay)
    if proc.poll() is not None:  # nothing to interrupt: the run failed, not the benchmark's case
        raise SystemExit(
            f"{shlex.join(cmd)} exited with code {proc.returncode} before the interrupt:\n"
            + proc.stderr.read()
        )
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    latency = time.perf_counter() - sent
    clean = not list(out.rglob("*.partial")) and not list(out.rglob("metrics.json"))
    return {
        "latency": latency if code is not None else float("inf"),
        "stopped": code == 130 and clean,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--delay",
        type=float,
        nargs=2,
        default=[1.0, 4.0],
        metavar=("LOW", "HIGH"),
        help="seconds from the run's first line to the signal, drawn uniformly",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the exit (then: inf)"
    )
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"repeats": 1, "delay": [1.5, 1.5], "timeout": 15.0})
    rng = np.random.default_rng(args.seed)
    cases = [(name, sets, 1) for name, sets in CONFIGS.items()]
    cases.append(("sqpmethod, --workers 2", CONFIGS["sqpmethod"], 2))
    if args.quick:
        cases = cases[:1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "VIMPC_CACHE": str(Path(tmp) / "cache")}
        for label, sets, workers in cases:
            got = []
            for r in range(args.repeats):
                delay = float(rng.uniform(*args.delay))
                folder = Path(tmp) / f"{len(rows)}_{r}"
                got.append(_once(folder, sets, workers, delay, env, args.timeout))
                print(
                    f"{label}: {r + 1}/{args.repeats} delay {delay:.2f} s -> "
                    f"{got[-1]['latency'] * 1e3:.0f} ms, stopped {got[-1]['stopped']}",
                    flush=True,
                )
            lat = np.array([g["latency"] for g in got]) * 1e3
            stopped = sum(g["stopped"] for g in got)
            rows.append(
                {
                    "case": label,
                    "interrupts": len(got),
                    "stopped": stopped,
                    "median_ms": float(np.median(lat)),
                    "p95_ms": float(np.percentile(lat, 95)),
                    "max_ms": float(lat.max()),
                    "target": met(stopped == len(got) and lat.max() <= TARGET_S * 1e3),
                }
            )
    columns = [
        ("case", "solver", "s"),
        ("interrupts", "SIGINTs", "d"),
        ("stopped", "stopped cleanly (exit 130, no partial folder)", "d"),
        ("median_ms", "signal to exit, median [ms]", ".0f"),
        ("p95_ms", "p95 [ms]", ".0f"),
        ("max_ms", "max [ms]", ".0f"),
        ("target", "all within 1 s", "s"),
    ]
    delays = f"{args.delay[0]:g} to {args.delay[1]:g}"
    notes = f"""
One SIGINT per run of `vimpc run scenarios/cartpole_swingup.toml --set episodes.count=200`,
sent {delays} s (uniform, seed {args.seed}) after the run printed its first line. The time
runs from the signal to the process's exit, including removing the staging folder and
the interpreter's shutdown.
"""
    write_results(
        "interrupt",
        "One Ctrl-C stops a run",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
