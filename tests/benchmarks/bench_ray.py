"""The Ray backend against local worker processes: episodes' wall time with 1 and 2 processes.

Run from the repository root::

    python tests/benchmarks/bench_ray.py [--repeats 3] [--episodes 36] [--steps 100]

The nominal cart-pole swing-up (``scenarios/cartpole_swingup.toml``, ``--steps`` steps per
episode, seeds 0 ..) runs ``--episodes`` episodes four ways, alternating within every
repetition so that machine-load drift hits all: the local backend
(:func:`vimpc.pipeline.run_episodes`, 1 worker: in this process; 2: spawned processes) and
the Ray backend (:func:`vimpc.runs.ray.run_episodes`, one task per episode) on a fresh
local Ray cluster of 1 or 2 CPUs. The time is that of the call, from the first episode
submitted to the last result back: it includes starting the workers (spawned processes or
Ray workers), building each worker's env and controller and sending the results back, and
excludes the Ray cluster's own start and stop (reported apart: a command pays it once).
Per-episode results (times excluded) of all four are compared.

Targets (issue): Ray's overhead per episode <= 10 % against the local backend with the same
number of processes; Ray from 1 to 2 local workers >= 1.7 times faster. The machine has 2
cores shared with other work: the load average is reported before and after each timing.

``--quick --out DIR``: 2 episodes of 3 steps, one repetition, 1 process only.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np
from _common import CARTPOLE, OUT, add_options, met, parse, write_results

OVERHEAD_TARGET = 0.10
SCALING_TARGET = 1.7


def _timeless(results) -> list[dict]:
    return [{k: v for k, v in m.items() if "time" not in k and "late" not in k} for _, m in results]


def _local(cfg, seeds, workers) -> tuple[float, list]:
    from vimpc import pipeline

    start = time.perf_counter()
    results = pipeline.run_episodes(cfg, None, seeds, workers=workers)
    return time.perf_counter() - start, results


def _ray(cfg, seeds, workers) -> tuple[float, list, float, float]:
    from vimpc.runs import ray as ray_backend

    start = time.perf_counter()
    with ray_backend.connected(None, workers) as cluster:
        assert cluster.owned, "a Ray connection was open already: the timing needs a fresh one"
        up = time.perf_counter() - start
        t0 = time.perf_counter()
        results = ray_backend.run_episodes(cfg, None, seeds, workers=workers)
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
    down = time.perf_counter() - t1
    return seconds, results, up, down


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=36)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"repeats": 1, "episodes": 2, "steps": 3, "workers": [1]})
    if importlib.util.find_spec("ray") is None:
        write_results(
            "ray",
            "Ray backend against local workers",
            [],
            [("backend", "backend", "s")],
            'Ray is not installed (pip install -e ".[ray]"): nothing was measured.',
            out=args.out,
            script=__file__,
            argv=args.argv,
        )
        return
    from vimpc import scenario

    cfg = scenario.load_scenario(CARTPOLE, [f"episodes.steps={args.steps}"])
    seeds = list(range(args.episodes))
    times: dict[tuple[str, int], list[float]] = {}
    loads: dict[tuple[str, int], list[float]] = {}
    starts, stops = [], []
    reference = None
    identical = True
    for r in range(args.repeats):
        for workers in args.workers:
            for backend in ("local", "ray"):
                before = os.getloadavg()[0]
                if backend == "local":
                    seconds, results = _local(cfg, seeds, workers)
                else:
                    seconds, results, up, down = _ray(cfg, seeds, workers)
                    starts.append(up)
                    stops.append(down)
                loads.setdefault((backend, workers), []).extend([before, os.getloadavg()[0]])
                times.setdefault((backend, workers), []).append(seconds)
                episodes = _timeless(results)
                reference = episodes if reference is None else reference
                identical &= episodes == reference
                print(
                    f"repeat {r}: {backend} x {workers}: {seconds:.2f} s "
                    f"({seconds / len(seeds) * 1e3:.0f} ms per episode), load {before:.2f}",
                    flush=True,
                )
    rows = []
    for (backend, workers), values in times.items():
        t = np.asarray(values)
        rows.append(
            {
                "backend": backend,
                "workers": workers,
                "repeats": len(t),
                "median_s": float(np.median(t)),
                "p95_s": float(np.percentile(t, 95)),
                "per_episode_ms": float(np.median(t) / len(seeds) * 1e3),
                "load": f"{min(loads[backend, workers]):.1f}-{max(loads[backend, workers]):.1f}",
            }
        )
    median = {(r["backend"], r["workers"]): r["median_s"] for r in rows}
    for row in rows:
        local = median.get(("local", row["workers"]))
        row["vs_local"] = row["median_s"] / local - 1.0 if local else float("nan")
        one = median.get((row["backend"], 1))
        row["speedup"] = one / row["median_s"] if one else float("nan")
        checks = []
        if row["backend"] == "ray":
            checks.append(f"overhead {met(row['vs_local'] <= OVERHEAD_TARGET)}")
            if row["workers"] == 2 and one:
                checks.append(f"scaling {met(row['speedup'] >= SCALING_TARGET)}")
        row["targets"] = ", ".join(checks) or "-"
    columns = [
        ("backend", "backend", "s"),
        ("workers", "processes", "d"),
        ("repeats", "repeats", "d"),
        ("median_s", "wall time median [s]", ".2f"),
        ("p95_s", "p95 [s]", ".2f"),
        ("per_episode_ms", "per episode [ms]", ".0f"),
        ("vs_local", "vs local, same processes", "+.1%"),
        ("speedup", "speed-up vs 1 process", ".2f"),
        ("load", "load average", "s"),
        ("targets", "targets", "s"),
    ]
    notes = f"""
{args.episodes} episodes of `scenarios/cartpole_swingup.toml` (nominal model, nothing to
fit) with `episodes.steps = {args.steps}`, seeds 0-{args.episodes - 1}; {args.repeats}
repetitions, the four settings alternating within each. Wall time of the episodes call:
worker start-up (spawned processes, or Ray workers), env and controller builds in every
worker, the episodes and their results sent back. A fresh local Ray cluster (loopback,
`num_cpus` = processes) for every Ray timing; its start took {np.median(starts):.1f} s median
and its stop {np.median(stops):.1f} s (not in the times above: a command pays them once).
Per-episode results of all settings, times excluded, are
{"identical" if identical else "DIFFERENT"}. Targets: Ray <= +{OVERHEAD_TARGET:.0%} against
the local backend with the same processes; Ray 2 processes >= {SCALING_TARGET} x 1 process.
The load average (1 minute, before and after each timing) is the machine's: 2 cores shared
with other work.
"""
    write_results(
        "ray",
        "Ray backend against local workers: episodes' wall time",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
