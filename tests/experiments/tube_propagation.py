"""How the MPC's tube propagates the one-step bound, and what each tube gives in closed loop.

    python tests/experiments/tube_propagation.py [--seed 0] [--episodes 50] [--workers 1]

Both parts use the scenario with its bound calibrated per step on the held-out open-loop
trajectories (:data:`HELDOUT_STEP`: the bound the comparison was made with; the scenario
itself now calibrates a horizon-level bound on closed-loop episodes, results/safety/).

Part 1, propagation: ``scenarios/cartpole_safe.toml``'s fitted nominal model (midpoint,
conformal bound), linearised at the upright (``x = (0, pi, 0, 0)``, ``u = 0``, dt 0.05 s) with
the bound ``w`` there, over the scenario's 20 steps. The cart position's tube ``t_s`` and the
input's share under each propagation of the error ``e``:

- ``open loop, box``: ``e_{k+1} = |A| e_k + w`` (``tube = "open_loop"``);
- ``open loop, worst case``: the largest ``|e_s|`` over every error sequence in the boxes of
  the linearised system, ``sum_j |g^T A^(k-1-j)| w`` (exact for the linear system);
- ``feedback, box``: ``|A + B K_k|`` in place of ``|A|``;
- ``feedback, worst case``: ``sum_j |g^T Phi_{k,j}| w`` with the closed loop's transition
  ``Phi``; the input's share the same with ``K_k`` for ``g``;
- ``feedback, ellipsoid outer``: ellipsoids that contain the sum of the boxes (the Minkowski
  sum's outer ellipsoid with the trace-minimising weight);
- ``feedback, ellipsoid second moment``: ``Sigma_{k+1} = (A + B K) Sigma (A + B K)^T + nx
  diag(w^2)`` (``tube = "feedback"``, ``tube_errors = "box"``);
- ``feedback, gaussian chance``: the same with ``W = diag((w / z_w)^2)`` and margins ``z_c
  sqrt(g^T Sigma g)`` (``tube_errors = "gaussian"``). Both checked here against the
  controller's own tube function.

``K_k`` is the LQR of the row's ``tube_Q`` and ``tube_R`` (defaults the cost's Q and R).

Part 2, closed loop: ``vimpc run scenarios/cartpole_safe.toml`` on reset seeds ``seed ..
seed + episodes - 1`` (0-49: the seeds the scenario is designed on) with each row's
overrides, one worker at a time.

Writes ``results/tube_propagation/{propagation,closed_loop}.{md,csv}``. ``--quick --out
DIR``: the same code path on a model fitted on a few short trajectories, one episode of 3
steps per closed-loop row.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _quick import add_options, command, parse
from _tables import interval, vimpc_run, write_table

from vimpc.mpc.tube import gaussian_factors

ROOT = Path(__file__).parents[2]
OUT = ROOT / "results" / "tube_propagation"
SAFE = ROOT / "scenarios" / "cartpole_safe.toml"
STAGES = (1, 2, 5, 10, 15, 20)
FEEDBACK = 'controller.tube="feedback"'
# the LQR weights compared in part 1 (tube_Q, tube_R; None: the cost's)
GAINS = {
    "cost's Q, R": (None, None),
    "cost's Q, R = 1": (None, [1.0]),
    "cost's Q, R = 100": (None, [100.0]),
}
GAUSSIAN = 'controller.tube_errors="gaussian"'
ROWS = {
    "no tightening": ['controller.tightening="none"'],
    "open-loop tube (box)": ['controller.tube="open_loop"'],
    "feedback tube, box, cost's Q, R": [FEEDBACK, 'controller.tube_errors="box"'],
    "feedback tube, box, cost's Q, R = 1": [
        FEEDBACK,
        'controller.tube_errors="box"',
        "controller.tube_R=[1.0]",
    ],
    "feedback tube, gaussian, cost's Q, R": [FEEDBACK, GAUSSIAN],
    "feedback tube, gaussian, cost's Q, R = 1": [FEEDBACK, GAUSSIAN, "controller.tube_R=[1.0]"],
}
#: the bound of the comparison: per step, on the held-out open-loop trajectories
HELDOUT_STEP = ['data.calibration="heldout"', 'model.bound_level="step"', "model.bound_horizon=0"]
QUICK_SETS = [
    "data.trajectories=4",
    "data.heldout_trajectories=8",
    "data.steps=5",
    "episodes.steps=3",
]
QUICK_ROWS = ("open-loop tube (box)", "feedback tube, gaussian, cost's Q, R")


def lqr_gains(A, B, Q, R, N):
    """The controller's gains (:mod:`vimpc.mpc.tube`): Riccati from ``Q``, ``N`` stages past
    the horizon and the horizon's ``N``, on one linearisation."""
    P, gains = Q, []
    for _ in range(2 * N):
        K = -np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
        gains.append(K)
        P = Q + A.T @ P @ (A + B @ K)
    return gains[::-1][:N]


def propagations(A, B, w, gains, N, delta):
    """Per propagation, ``(t_s, t_u)``: the cart position's tube at stages 0..N and the
    input's share at stages 0..N-1 (NaN where the propagation has no feedback)."""
    nx = len(w)
    g = np.eye(nx)[0]
    closed = [A + B @ K for K in gains]
    W = nx * np.diag(w**2)
    out = {}

    def worst(transitions, row, k):  # max over the boxes of row . e_k
        lam, total = row.copy(), 0.0
        for j in range(k - 1, -1, -1):
            total += np.abs(lam) @ w
            lam = lam @ transitions[j]
        return total

    def box(transitions):  # the boxes e_0..e_N
        e = [np.zeros(nx)]
        for k in range(N):
            e.append(np.abs(transitions[k]) @ e[-1] + w)
        return np.array(e)

    none_u = np.full(N, np.nan)
    out["open loop, box"] = (box([A] * N)[:, 0], none_u)
    out["open loop, worst case"] = (np.array([worst([A] * N, g, k) for k in range(N + 1)]), none_u)
    e = box(closed)
    out["feedback, box"] = (e[:, 0], np.array([np.abs(gains[k]) @ e[k] for k in range(N)]).ravel())
    out["feedback, worst case"] = (
        np.array([worst(closed, g, k) for k in range(N + 1)]),
        np.array([worst(closed, gains[k].ravel(), k) for k in range(N)]),
    )
    for name, outer in (
        ("feedback, ellipsoid outer", True),
        ("feedback, ellipsoid second moment", False),
    ):
        S, t, u = np.zeros((nx, nx)), [0.0], [0.0]
        for k in range(N):
            M = closed[k] @ S @ closed[k].T
            if outer and np.trace(M) > 0:
                p = np.sqrt(np.trace(M) / np.trace(W))
                S = (1 + 1 / p) * M + (1 + p) * W
            else:
                S = M + W
            t.append(np.sqrt(S[0, 0]))
            if k + 1 < N:
                u.append(np.sqrt(gains[k + 1] @ S @ gains[k + 1].T).item())
        out[name] = (np.array(t), np.array(u))
    shape, margin = gaussian_factors(delta, nx)
    t, u = out["feedback, ellipsoid second moment"]
    t_g = t * margin * np.sqrt(shape / nx)
    t_g[1] = max(t_g[1], w[0])  # stage 1 holds the box: |g| . w_0 for the row of s
    out["feedback, gaussian chance"] = (t_g, u * margin * np.sqrt(shape / nx))
    return out


def part_one(cfg, model, env) -> list[dict]:
    from vimpc.mpc.tube import step_jacobians, tube_function, weight_matrix
    from vimpc.pipeline import build_controller

    ctrl = build_controller(cfg, model, env)
    N, p = ctrl.horizon, model.p_default
    x, u = np.array([0.0, np.pi, 0.0, 0.0]), np.zeros(model.nu)
    x_next = np.asarray(model.step(x, u, p)).ravel()
    A, B = (np.asarray(M) for M in step_jacobians(model)(x, u, x_next, p))
    w = np.asarray(model.bound(x, u, p)).ravel()
    rows = []
    for label, (tube_Q, tube_R) in GAINS.items():
        Q = weight_matrix(
            "tube_Q", ctrl.cost.Q if tube_Q is None else tube_Q, model.nobs, definite=False
        )
        R = weight_matrix(
            "tube_R", ctrl.cost.R if tube_R is None else tube_R, model.nu, definite=True
        )
        gains = lqr_gains(A, B, Q, R, N)
        tubes = propagations(A, B, w, gains, N, model.delta)
        # the controller's own feedback tubes at a plan resting at the upright agree
        for errors, name in (
            ("box", "feedback, ellipsoid second moment"),
            ("gaussian", "feedback, gaussian chance"),
        ):
            fn = tube_function(
                model, N, ctrl.safety_function, kind="feedback", Q=Q, R=R, errors=errors
            )
            t, t_u, _ = fn(np.tile(x, (N + 1, 1)).T, np.zeros((model.nu, N)), p)
            mine, mine_u = tubes[name]
            # row 1 of the safety function: s <= 1 (obs = state for this model)
            np.testing.assert_allclose(np.asarray(t)[1], mine, rtol=1e-6, atol=1e-12)
            np.testing.assert_allclose(np.asarray(t_u)[0], mine_u, rtol=1e-6, atol=1e-12)
        for name, (t_s, t_in) in tubes.items():
            if name.startswith("open loop") and label != next(iter(GAINS)):
                continue  # no gain in it: one row is enough
            empty = np.flatnonzero(2 * t_s > 2.0)  # the rail |s| <= 1: room 2 m
            room = np.flatnonzero(2 * t_in > 60.0)  # the force |F| <= 30 N
            rows.append(
                {
                    "propagation": name,
                    "gain": "-" if name.startswith("open loop") else label,
                    **{f"t_s_{k}_m": float(t_s[k]) for k in STAGES},
                    "max_input_share_N": float(np.nanmax(t_in))
                    if np.isfinite(t_in).any()
                    else float("nan"),
                    "first_empty_rail_stage": int(empty[0]) if empty.size else "-",
                    "first_empty_input_stage": int(room[0]) if room.size else "-",
                }
            )
    return rows, w


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    add_options(parser, OUT)
    args = parse(parser, argv, OUT, quick={"episodes": 1})
    from vimpc.pipeline import build_env, build_model
    from vimpc.scenario import load_scenario

    sets = [*HELDOUT_STEP, *(QUICK_SETS if args.quick else [])]
    cfg = load_scenario(SAFE, sets)
    env = build_env(cfg)
    model = build_model(cfg, env)
    rows, w = part_one(cfg, model, env)
    cmd = command(__file__, args.argv)
    headers = {f"t_s_{k}_m": f"t_s stage {k} [m]" for k in STAGES}
    headers.update(
        max_input_share_N="largest input share [N]",
        first_empty_rail_stage="first stage with no room on the rail",
        first_empty_input_stage="first stage with no room for the input",
    )
    write_table(
        args.out,
        "propagation",
        "Cart-pole at the upright: the cart position's tube under each propagation",
        cmd,
        f"`scenarios/cartpole_safe.toml`'s fitted nominal model (its bound per step on "
        "the held-out open-loop data) linearised at the upright "
        f"(dt {model.dt} s), its conformal bound there w = {np.round(w, 4).tolist()} "
        "(s [m], theta [rad], s_dot [m/s], theta_dot [rad/s]; delta "
        f"{model.delta}), 20 steps. t_s: the tightening of the rail rows; input share: the "
        "tightening of the force bounds |F| <= 30 N for the feedback. The rail has room "
        "while 2 t_s < 2 m, the force while 2 share < 60 N. The open-loop box is the "
        "`open_loop` tube, the second-moment ellipsoid the `feedback` tube with `tube_errors = "
        '"box"`, the gaussian chance one with `tube_errors = "gaussian"` (both checked '
        "here against the controller's tube function); the worst cases are those of the "
        "linearised system over all error sequences in the boxes.",
        rows,
        headers,
    )
    closed_rows = []
    rows_run = {k: v for k, v in ROWS.items() if not args.quick or k in QUICK_ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        for label, overrides in rows_run.items():
            out = Path(tmp) / str(len(closed_rows))
            m, _ = vimpc_run(
                SAFE, out, episodes=args.episodes, seed=args.seed, workers=args.workers,
                sets=[*sets, *overrides], plots=not args.quick,
            )  # fmt: skip
            closed_rows.append(
                {
                    "tube": label,
                    "overrides": " ".join(overrides) or "-",
                    "episodes": m["episodes"],
                    "off_rail": m["episodes_with_violation"],
                    "off_rail_ci95": interval(m["violation_rate_ci95"]),
                    "largest_excursion_m": m["max_violation"],
                    "success": m["success_rate"],
                    "success_ci95": interval(m["success_rate_ci95"]),
                    "empty_tube_fraction": m.get("empty_tube_fraction", float("nan")),
                    "failed_solves": m["failed_solves"],
                    "solves": m["solves"],
                    "min_margin_m": m["min_margin"],
                    "solve_median_ms": m["solve_time_median_ms"],
                }
            )
            print(f"{label}: {closed_rows[-1]}")
    write_table(
        args.out,
        "closed_loop",
        "Safe cart-pole: open-loop against feedback tubes in closed loop",
        cmd,
        "Each row is `vimpc run scenarios/cartpole_safe.toml` with its bound per step on the "
        f"held-out open-loop data ({', '.join(HELDOUT_STEP)}) and its overrides, over "
        f"{args.episodes} episodes (reset seeds {args.seed}-{args.seed + args.episodes - 1}), "
        f"{args.workers} worker(s). Off the rail: episodes whose true cart position left "
        "|s| <= 1 m at any step. Empty tube: the share of control steps at which some stage's "
        "tightened set was empty (no cap: soft rail rows then carry a slack; an empty input "
        "interval is not solved, the step falls back and counts as a failed solve).",
        closed_rows,
        {
            "off_rail": "episodes off the rail",
            "off_rail_ci95": "rate 95% CI",
            "largest_excursion_m": "largest excursion [m]",
            "success_ci95": "success 95% CI",
            "empty_tube_fraction": "steps with an empty tube",
            "failed_solves": "failed solves",
            "min_margin_m": "min margin [m]",
            "solve_median_ms": "solve median [ms]",
        },
    )


if __name__ == "__main__":
    main()
