"""Wall time of ``vimpc run`` on 100 cart-pole episodes with ``--workers 1`` and ``--workers 2``.

Run from the repository root::

    python tests/benchmarks/bench_workers.py [--repeats 3] [--episodes 100]

Each repetition runs ``vimpc run scenarios/cartpole_safe.toml --set episodes.count=100
--workers N --no-plots --quiet`` as a fresh process for N = 1 and N = 2 (alternating, so
machine-load drift hits both), after one ``vimpc fit`` that puts the model in a temporary
cache (so no run fits). The time is the whole command, start to exit, as a user waits for
it. The two runs' per-episode metrics are compared: apart from times they must be equal.
Issue target: ``--workers 2`` at least 1.7 times faster than ``--workers 1``.

``--quick --out DIR``: a smoke test into ``DIR``: one repetition of 2 episodes of 3 steps,
the model fitted on a few short trajectories (``QUICK_SETS``, given to the fit and to
every run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import OUT, ROOT, add_options, met, parse, write_results

SAFE = str(ROOT / "scenarios" / "cartpole_safe.toml")
TARGET = 1.7
# --quick: 4 training and 8 held-out trajectories of 5 steps (20 calibration transitions,
# the fewest split conformal takes at delta 0.05; the bound per step on them, not on
# closed-loop episodes) and 3 control steps
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
    'data.calibration="heldout"',
    'model.bound_level="step"',
    "model.bound_horizon=0",
]


def _run(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vimpc.cli", *args], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def _episodes(out: Path) -> list[dict]:
    (run,) = [p for p in (out / "cartpole_safe").iterdir() if p.is_dir()]
    metrics = json.loads((run / "metrics.json").read_text())
    return [{k: v for k, v in m.items() if "time" not in k} for m in metrics["per_episode"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=100)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"repeats": 1, "episodes": 2})
    sets = [a for item in QUICK_SETS for a in ("--set", item)] if args.quick else []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "VIMPC_CACHE": str(Path(tmp) / "cache")}
        _run(["fit", SAFE, "-o", str(Path(tmp) / "m.vimpc"), "--quiet", *sets], env)
        times: dict[int, list[float]] = {1: [], 2: []}
        episodes: dict[int, list[dict]] = {}
        for r in range(args.repeats):
            for workers in (1, 2):
                out = Path(tmp) / f"runs_{workers}_{r}"
                command = [
                    "run",
                    SAFE,
                    "--out",
                    str(out),
                    "--no-plots",
                    "--quiet",
                    "--workers",
                    str(workers),
                    "--set",
                    f"episodes.count={args.episodes}",
                    *sets,
                ]
                times[workers].append(_run(command, env))
                episodes[workers] = _episodes(out)
                print(f"repeat {r}: --workers {workers}: {times[workers][-1]:.1f} s", flush=True)
    identical = episodes[1] == episodes[2]
    rows = []
    for workers, values in times.items():
        t = np.asarray(values)
        rows.append(
            {
                "workers": workers,
                "runs": len(t),
                "median_s": float(np.median(t)),
                "min_s": float(t.min()),
                "max_s": float(t.max()),
                "speedup": float(np.median(times[1]) / np.median(t)),
            }
        )
    rows[1]["target"] = met(rows[1]["speedup"] >= TARGET)
    rows[0]["target"] = "-"
    columns = [
        ("workers", "--workers", "d"),
        ("runs", "runs", "d"),
        ("median_s", "wall time median [s]", ".1f"),
        ("min_s", "min [s]", ".1f"),
        ("max_s", "max [s]", ".1f"),
        ("speedup", "speed-up vs 1 worker", ".2f"),
        ("target", ">= 1.7 x", "s"),
    ]
    notes = f"""
`vimpc run scenarios/cartpole_safe.toml --set episodes.count={args.episodes} --workers N
--no-plots --quiet`, {args.repeats} runs each, alternating; the model was fitted once
before and read from the cache by every run. Whole command wall time (imports, env and
controller builds in every worker, episodes, writing results). Per-episode metrics of the
two settings, times excluded, are {"identical" if identical else "DIFFERENT"}.
"""
    write_results(
        "workers",
        "Episodes in worker processes: wall time",
        rows,
        columns,
        notes,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
