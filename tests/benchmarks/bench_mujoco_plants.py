"""The MuJoCo plants of ``scenarios/mujoco/``: step time, loop closure and rolling slip.

Run from the repository root::

    python tests/benchmarks/bench_mujoco_plants.py --out DIR

- Wall time of one ``env.step`` of ``vimpc/MujocoPlant-v0`` for each shipped file at the
  frame_skip of its header (its control step): 100 warm-up steps, then 1,000 timed steps
  with uniform random actions in the Box (seed 0), one by one with ``time.perf_counter``.
- The four-bar's loop-closure residual ``|C_coupler - C_rocker|`` [m] over 10 s of random
  crank torques uniform in +-20 N m, a new draw every step (0.02 s) and every 0.1 s, with
  the fastest link rate reached [rad/s] and the largest residual while every rate stays
  within 8 rad/s (vimpc's FourBar safety bound).
- The rolling disk's slip speed ``|(x_dot, y_dot) - R theta_dot (cos phi, sin phi)|``
  [m/s] (the catalog's no-slip constraint) over 20 s of random torques: at the limits
  (each input +-limit, a new draw every step, 0.05 s) and uniform within them.

Writes ``mujoco_plants.md`` into ``--out`` (default ``results/benchmarks``) and prints it.
``--quick``: 2 warm-up and 5 timed steps, 0.2 s rollouts (a smoke test).
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from pathlib import Path

import gymnasium
import numpy as np
import vimpc_envs  # noqa: F401  (registers the environment ids)
from _common import add_options, machine, parse
from vimpc_envs._mjcf_header import read_header
from vimpc_envs.mujoco import SHIPPED, shipped_mjcf

OUT = Path(__file__).resolve().parents[2] / "results" / "benchmarks"
COMMAND = "python tests/benchmarks/bench_mujoco_plants.py"


def _env(name: str, **kw):
    path = shipped_mjcf(name)
    env = gymnasium.make("vimpc/MujocoPlant-v0", xml_file=path, frame_skip=1)
    model = env.unwrapped.model
    header = read_header(path, model.nq, model.nv, model.nu)
    (line,) = header.lines["step"]
    frame_skip = int(line.split("frame_skip ")[1].split()[0])
    env = gymnasium.make("vimpc/MujocoPlant-v0", xml_file=path, frame_skip=frame_skip, **kw)
    return env, header


def step_times(name: str, warmup: int, steps: int) -> dict[str, float | str]:
    env, _ = _env(name)
    env.reset(seed=0)
    low, high = env.action_space.low, env.action_space.high
    actions = np.random.default_rng(0).uniform(low, high, size=(warmup + steps, *low.shape))
    for a in actions[:warmup]:
        env.step(a)
    times = np.empty(steps)
    for k, a in enumerate(actions[warmup:]):
        t0 = time.perf_counter()
        env.step(a)
        times[k] = time.perf_counter() - t0
    frame_skip = env.unwrapped.frame_skip
    return {
        "file": f"{name}.xml",
        "dt": env.unwrapped.dt,
        "frame_skip": frame_skip,
        "median_ms": float(np.median(times)) * 1e3,
        "p95_ms": float(np.percentile(times, 95)) * 1e3,
        "per_mj_step_us": float(np.median(times)) * 1e6 / frame_skip,
    }


def fourbar_residual(seconds: float, hold: int) -> dict[str, float]:
    env, _ = _env("fourbar")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    residuals, speeds = [], []
    for k in range(round(seconds / env.unwrapped.dt)):
        if k % hold == 0:
            action = rng.uniform(-20.0, 20.0, 1)
        obs, _, _, _, info = env.step(action)
        residuals.append(info["equality_residual"])
        speeds.append(float(np.max(np.abs(obs[3:]))))
    residuals, speeds = np.array(residuals), np.array(speeds)
    slow = speeds <= 8.0
    return {
        "hold_s": hold * env.unwrapped.dt,
        "max_residual_m": float(residuals.max()),
        "max_rate": float(speeds.max()),
        "max_residual_within_8": float(residuals[slow].max()) if slow.any() else math.nan,
        "max_residual_over_rate2": float((residuals / np.maximum(speeds, 2.0) ** 2).max()),
    }


def disk_slip(seconds: float, at_limits: bool) -> dict[str, float | str]:
    env, header = _env("rolling_disk")
    env.reset(seed=0)
    R = header.params["R"]
    rng = np.random.default_rng(0)
    high = env.action_space.high
    slips, speeds = [], []
    for _ in range(round(seconds / env.unwrapped.dt)):
        if at_limits:
            action = rng.choice([-1.0, 1.0], high.shape) * high
        else:
            action = rng.uniform(-high, high)
        obs, _, _, _, _ = env.step(action)
        q, v = header.q_map(obs[:5]), header.v_map(obs[5:])
        phi, rolling = q[1], R * v[0]  # heading [rad]; R theta_dot [m/s]
        slips.append(math.hypot(v[2] - rolling * math.cos(phi), v[3] - rolling * math.sin(phi)))
        speeds.append(math.hypot(v[2], v[3]))
    slips = np.array(slips)
    return {
        "inputs": "+-limits" if at_limits else "uniform within limits",
        "median_slip": float(np.median(slips)),
        "p95_slip": float(np.percentile(slips, 95)),
        "max_slip": float(slips.max()),
        "max_speed": float(max(speeds)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warmup", type=int, default=100, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps")
    parser.add_argument("--seconds", type=float, default=10.0, help="four-bar rollout [s]")
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"warmup": 2, "steps": 5, "seconds": 0.2})
    timing = [step_times(name, args.warmup, args.steps) for name in SHIPPED]
    closure = [fourbar_residual(args.seconds, hold) for hold in (1, 5)]
    slip = [disk_slip(2 * args.seconds, at_limits) for at_limits in (True, False)]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = COMMAND if not args.argv else f"{COMMAND} {' '.join(args.argv)}"
    lines = [
        "# MuJoCo plants: step time, loop closure, rolling slip",
        "",
        f"Made by `{command}` on {stamp}.",
        "",
        f"Machine: {machine()}.",
        "",
        f"## env.step wall time ({args.warmup} warm-up, {args.steps} timed steps)",
        "",
        "| file | dt [s] | frame_skip | median [ms] | p95 [ms] | per mj_step [us] |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['file']} | {r['dt']:g} | {r['frame_skip']} | {r['median_ms']:.3f} | "
            f"{r['p95_ms']:.3f} | {r['per_mj_step_us']:.1f} |"
            for r in timing
        ),
        "",
        f"## four-bar loop closure over {args.seconds:g} s of random torques",
        "",
        "| torque held [s] | max residual [m] | fastest rate [rad/s] "
        "| max residual, rates <= 8 rad/s [m] | max residual / rate^2 [m s^2] |",
        "|---|---|---|---|---|",
        *(
            f"| {r['hold_s']:g} | {r['max_residual_m']:.3g} | {r['max_rate']:.3g} | "
            f"{r['max_residual_within_8']:.3g} | {r['max_residual_over_rate2']:.3g} |"
            for r in closure
        ),
        "",
        f"## rolling-disk slip speed over {2 * args.seconds:g} s of random torques",
        "",
        "| inputs | median [m/s] | p95 [m/s] | max [m/s] | top speed [m/s] |",
        "|---|---|---|---|---|",
        *(
            f"| {r['inputs']} | {r['median_slip']:.3g} | {r['p95_slip']:.3g} | "
            f"{r['max_slip']:.3g} | {r['max_speed']:.3g} |"
            for r in slip
        ),
        "",
    ]
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "mujoco_plants.md"
    tmp = target.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
