"""An MPC on a vimpc model with CasADi alone: the ``.vimpc`` file read with ``json``, its
functions with ``casadi.Function.deserialize``, the problem solved by ``casadi.Opti``.

Nothing of vimpc is imported: this is what any CasADi program can do with a model file
(``vimpc export SCENARIO -o model.vimpc``, or ``vimpc.save_model``). Run::

    python docs/examples/casadi_only_mpc.py model.vimpc --state s --limit 1.0 --target 0.9

The problem (single shooting on the model's ``step``, so every predicted state is the
model's step of the one before, evaluated by the same function):

    minimise    sum_k  w (y_k - target)^2 + r |u_k|^2 + q |x_k|^2_velocities  (k = 1..N)
    over        u_0 .. u_{N-1},  |u_k| <= u_max
    with        x_0 given,  x_{k+1} = step(x_k, u_k, p_default)
    subject to  |y_k| <= limit - w_k,   w_k = sum_{j<k} e_j,   e_j = bound(x_j, u_j, p)[i]

where ``y = x[i]`` is the constrained state (``--state``, by name). The box on ``y``
shrinks at stage ``k`` by the bound's accumulated width ``w_k``: ``bound`` promises
``|x_true_{j+1} - step(x_j, u_j)| <= e_j`` for one step (with probability ``1 - delta``),
and adding the one-step widths along the plan is the simplest open-loop tube on that entry:
it ignores how an error at one step grows or shrinks through the dynamics over the next, so
it is a heuristic margin, not a guarantee (vimpc's own controller propagates the bound
through the linearised dynamics under a feedback instead). A model without a bound is
solved with the untightened box. Prints the plan; ``--json`` prints it as one JSON object
(``x`` the ``N + 1`` predicted states, ``u`` the inputs, ``width`` the ``w_k``,
``limit``, ``status``).
"""

from __future__ import annotations

import argparse
import json
import sys

import casadi as ca
import numpy as np

FORMATS = ("vimpc.DiscreteModel/3", "vimpc.DiscreteModel/2")


def load(path: str) -> dict:
    """The model file's JSON, with its functions deserialised (``None`` where absent)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") not in FORMATS:
        raise SystemExit(f"{path}: not a vimpc model file (format {doc.get('format')!r})")
    doc["functions"] = {
        name: None if entry is None else ca.Function.deserialize(entry["serialized"])
        for name, entry in doc["functions"].items()
    }
    return doc


def solve(doc: dict, x0, state: str, limit: float, target: float, horizon: int = 20,
          u_max: float = 10.0) -> dict:  # fmt: skip
    """Solve the problem of the module docstring once from ``x0``; returns the plan."""
    step, bound = doc["functions"]["step"], doc["functions"]["bound"]
    nx, nu = doc["nx"], doc["nu"]
    p = ca.DM(doc["p_default"])
    if state not in doc["state_names"]:
        raise SystemExit(f"--state must be one of {doc['state_names']}, got {state!r}")
    i = doc["state_names"].index(state)
    velocities = [k for k, n in enumerate(doc["state_names"]) if n.endswith("_dot")]
    opti = ca.Opti()
    U = opti.variable(nu, horizon)
    xs, widths, width, cost = [ca.DM(x0)], [ca.DM(0.0)], 0, 0
    for k in range(horizon):
        if bound is not None:
            width = width + bound(xs[k], U[:, k], p)[i]
        xs.append(step(xs[k], U[:, k], p))
        widths.append(width)
        y = xs[k + 1][i]
        cost += 10.0 * (y - target) ** 2 + 1e-3 * ca.sumsqr(U[:, k])
        cost += 1e-2 * sum(xs[k + 1][v] ** 2 for v in velocities)
        opti.subject_to(opti.bounded(-(limit - width), y, limit - width))
    opti.subject_to(opti.bounded(-u_max, ca.vec(U), u_max))
    opti.minimize(cost)
    opti.set_initial(U, 0)
    opti.solver(
        "ipopt",
        {"print_time": False},
        {"print_level": 0, "sb": "yes", "tol": 1e-10, "hessian_approximation": "limited-memory",
         "max_iter": 500},
    )  # fmt: skip
    try:
        sol = opti.solve()
        status, value = "solved", sol.value
    except RuntimeError:
        status, value = opti.return_status(), opti.debug.value
    X = np.array([np.asarray(value(x), dtype=float).reshape(nx) for x in xs])
    u = np.asarray(value(U), dtype=float).reshape(nu, horizon).T
    w = np.array([float(value(w)) for w in widths])
    return {"status": status, "x": X.tolist(), "u": u.tolist(), "width": w.tolist(),
            "limit": limit, "state": state, "index": i}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a .vimpc model file")
    parser.add_argument("--state", default=None, help="the constrained state (default: first)")
    parser.add_argument("--limit", type=float, default=1.0, help="|state| <= limit")
    parser.add_argument("--target", type=float, default=0.9, help="where the state should go")
    parser.add_argument("--x0", type=float, nargs="+", default=None, help="start (default 0)")
    parser.add_argument("--horizon", type=int, default=20)
    parser.add_argument("--u-max", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    doc = load(args.model)
    x0 = args.x0 if args.x0 is not None else [0.0] * doc["nx"]
    if len(x0) != doc["nx"]:
        raise SystemExit(f"--x0 must have nx = {doc['nx']} numbers, got {len(x0)}")
    plan = solve(doc, x0, args.state or doc["state_names"][0], args.limit, args.target,
                 args.horizon, args.u_max)  # fmt: skip
    if args.json:
        print(json.dumps(plan))
        return 0 if plan["status"] == "solved" else 1
    i = plan["index"]
    print(f"{plan['status']}: {args.horizon} steps of dt = {doc['dt']} s")
    print(f"{'k':>3} {plan['state']:>10} {'box':>10} {'u':>10}")
    for k, (x, w) in enumerate(zip(plan["x"], plan["width"], strict=True)):
        u = plan["u"][k][0] if k < args.horizon else float("nan")
        print(f"{k:>3} {x[i]:>10.4f} {args.limit - w:>10.4f} {u:>10.4f}")
    return 0 if plan["status"] == "solved" else 1


if __name__ == "__main__":
    sys.exit(main())
