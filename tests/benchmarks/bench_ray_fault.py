"""A sweep on Ray with a worker killed in the middle against the same sweep uninterrupted.

Run from the repository root::

    python tests/benchmarks/bench_ray_fault.py [--episodes 100] [--workers 2] [--kill-after 0.5]

The safe cart-pole (``scenarios/cartpole_safe.toml``, its bound calibrated per step on the
held-out data, so every configuration fits once and quickly) over 2 tightenings (none, the tube)
x 3 deltas (0.01, 0.05, 0.1) x ``--episodes`` episodes (reset seeds 100 ..), as one
``vimpc sweep``: once on the local backend (``--workers`` processes, uninterrupted), once on
a local Ray cluster of ``--workers`` CPUs during which one Ray worker running an episode is
killed with SIGKILL once ``--kill-after`` of all episodes are kept. Reported: whether the
Ray sweep completed, how many episodes each configuration kept (each once), how many
per-episode results differ from the local sweep's (every field of the episode JSON and
NPZ files but the measured times), and both wall times.

Target (issue): the sweep completes with a worker killed in the middle, with the same
per-episode results as an uninterrupted run.

``--quick --out DIR``: 2 episodes of 3 steps per configuration.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import (
    OUT,
    add_options,
    descendants,
    met,
    parse,
    process_title,
    timeless,
    write_results,
)

from vimpc import cli
from vimpc.closedloop.episode import WALL_CLOCK

SWEEP = """scenario = "cartpole_safe"

[sweep]
name = "safe_fault"

[set]
env.plant = "per_episode"
data.calibration = "heldout"
model.bound_level = "step"
model.bound_horizon = 0
episodes.count = {episodes}
episodes.seed = 100
{steps}
[grid]
controller.tightening = ["none", "tube"]
model.delta = [0.01, 0.05, 0.1]
"""


class Killer(threading.Thread):
    """SIGKILL one Ray worker running an episode once ``after`` episode files exist under
    ``folder``."""

    def __init__(self, folder: Path, after: int) -> None:
        super().__init__(daemon=True)
        self.folder, self.after = folder, after
        self.killed: int | None = None
        self.kept_then = 0
        self.stop = False

    def run(self) -> None:
        while not self.stop and self.killed is None:
            kept = len(list(self.folder.rglob("episode_*.json"))) if self.folder.exists() else 0
            if kept >= self.after:
                for pid in descendants(os.getpid()):
                    if process_title(pid) == "ray::episode":
                        os.kill(pid, signal.SIGKILL)
                        self.killed, self.kept_then = pid, kept
                        return
            time.sleep(0.05)


def _overrides(varying) -> str:
    if isinstance(varying, dict):
        return " ".join(f"{k}={json.dumps(v)}" for k, v in varying.items())
    return " ".join(map(str, varying))


def compare(a: Path, b: Path) -> tuple[int, int]:
    """(episodes in ``a``, those whose results differ in ``b`` or are missing there)."""
    names = sorted(p.relative_to(a) for p in a.rglob("episode_*.json"))
    differ = 0
    for name in names:
        other = b / name
        if not other.exists():
            differ += 1
            continue
        same = timeless(json.loads((a / name).read_text())) == timeless(
            json.loads(other.read_text())
        )
        with np.load(a / name.with_suffix(".npz")) as na, np.load(other.with_suffix(".npz")) as nb:
            same = same and na.files == nb.files
            for key in set(na.files) - set(WALL_CLOCK) if same else ():
                f = na[key].dtype.kind == "f"
                same = same and np.array_equal(na[key], nb[key], equal_nan=f)
        differ += not same
    return len(names), differ


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-after", type=float, default=0.5)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 2})
    if importlib.util.find_spec("ray") is None:
        parser.error('the Ray backend needs Ray: pip install -e ".[ray]"')
    steps = "episodes.steps = 3\n" if args.quick else ""
    configurations = 6
    total = configurations * args.episodes
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "sweep.toml"
        path.write_text(SWEEP.format(episodes=args.episodes, steps=steps), encoding="utf-8")
        base = ["sweep", str(path), "--quiet", "--no-plots", "--workers", str(args.workers)]
        start = time.perf_counter()
        local_code = cli.main([*base, "--out", str(root / "local")])
        local_s = time.perf_counter() - start
        killer = Killer(root / "ray", max(1, int(args.kill_after * total)))
        killer.start()
        start = time.perf_counter()
        try:
            ray_code = cli.main([*base, "--out", str(root / "ray"), "--backend", "ray"])
        finally:
            killer.stop = True
            killer.join()
        ray_s = time.perf_counter() - start
        local, ray = root / "local" / "safe_fault", root / "ray" / "safe_fault"
        manifest = json.loads((ray / "sweep.json").read_text())
        varying = {e["id"]: e["overrides"] for e in manifest["configurations"]}
        rows = []
        for cid in sorted(p.name for p in local.iterdir() if p.is_dir()):
            metrics = json.loads((ray / cid / "metrics.json").read_text())
            sessions = [s for s in metrics["sessions"] if s.get("backend") == "ray"]
            n, differ = compare(local / cid, ray / cid)
            rows.append(
                {
                    "configuration": cid,
                    "overrides": _overrides(varying[cid]),
                    "episodes_local": n,
                    "episodes_ray": len(metrics["per_episode"]),
                    "kept_once": sum(s["episodes_run"] for s in sessions),
                    "differ": differ,
                }
            )
    complete = ray_code == 0 and bool(manifest.get("complete")) and not manifest.get("failed")
    same = all(r["differ"] == 0 and r["episodes_ray"] == r["episodes_local"] for r in rows)
    columns = [
        ("configuration", "configuration", ""),
        ("overrides", "overrides", ""),
        ("episodes_local", "episodes (local, uninterrupted)", "d"),
        ("episodes_ray", "episodes (Ray, a worker killed)", "d"),
        ("kept_once", "episodes the Ray session kept", "d"),
        ("differ", "per-episode results that differ", "d"),
    ]
    notes = (
        f"`scenarios/cartpole_safe.toml` with a plant drawn per episode, over "
        f"controller.tightening = none, tube x model.delta = 0.01, 0.05, 0.1, "
        f"{args.episodes} episodes each (reset seeds 100..), {args.workers} processes: the "
        f"local backend uninterrupted ({local_s:.0f} s, exit {local_code}), then Ray (a local "
        f"loopback cluster of {args.workers} CPUs, {ray_s:.0f} s, exit {ray_code}) with one "
        f"worker running an episode SIGKILLed once {killer.kept_then} of {total} episodes "
        f"were kept (pid {killer.killed}). Compared: every field of each episode's JSON and "
        f"NPZ but the measured times ({', '.join(WALL_CLOCK)} and the time fields)."
    )
    extra = (
        f"\nA worker killed: {'yes' if killer.killed else 'NO'}; the Ray sweep complete with "
        f"no configuration failed: {met(complete)}; per-episode results identical to the "
        f"uninterrupted run: {met(same and complete and killer.killed is not None)}.\n"
    )
    write_results(
        "ray_fault",
        "A Ray sweep with a worker killed against the same sweep uninterrupted",
        rows,
        columns,
        notes,
        extra,
        out=args.out,
        script=__file__,
        argv=args.argv,
    )


if __name__ == "__main__":
    main()
