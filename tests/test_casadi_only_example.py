"""docs/examples/casadi_only_mpc.py: an MPC on a .vimpc file with json and casadi alone, run in a
process where vimpc cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import casadi as ca
import numpy as np

from vimpc.dynamics import BoundInfo
from vimpc.mechanics import CartPole
from vimpc.model_file import save
from vimpc.models import NominalModel

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "casadi_only_mpc.py"
LIMIT, TARGET, HORIZON = 0.5, 0.48, 15
#: one step's bound: a constant per entry, growing with the input
E0 = np.array([0.002, 0.004, 0.02, 0.04])


def _model():
    """The nominal cart-pole (midpoint VI, dt = 0.05 s) with a bound given by hand."""
    from dataclasses import replace

    m = NominalModel(CartPole(friction=[0.2, 0.05]), 0.05, integrator="midpoint").discrete_model()
    x, u, p = ca.MX.sym("x", 4), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    bound = ca.Function("bound", [x, u, p], [ca.DM(E0) + 1e-4 * u**2], ["x", "u", "p"], ["e"])
    record = BoundInfo(0.05, "step", None, "assumed by hand", "assumed")
    return replace(m, bound=bound, bound_info=record, delta=None)


def _run(path: Path) -> dict:
    code = (
        "import runpy, sys\n"
        "sys.modules['vimpc'] = None  # vimpc cannot be imported here\n"
        "sys.modules['vimpc_envs'] = None\n"
        f"sys.argv = [{str(EXAMPLE)!r}, {str(path)!r}, '--state', 's', '--limit', '{LIMIT}',"
        f" '--target', '{TARGET}', '--horizon', '{HORIZON}', '--json']\n"
        f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')\n"
        "assert not any(n == 'vimpc' or n.startswith('vimpc.') for n, m in sys.modules.items()"
        " if m is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=path.parent
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_plan_keeps_the_tightened_box_and_predicts_with_the_models_step(tmp_path):
    model = _model()
    path = save(model, tmp_path / "cartpole.vimpc")
    plan = _run(path)
    assert plan["status"] == "solved"
    x, u, width = np.array(plan["x"]), np.array(plan["u"]), np.array(plan["width"])
    assert x.shape == (HORIZON + 1, 4) and u.shape == (HORIZON, 1)
    # the accumulated width is the sum of the one-step bounds along the plan
    e = np.array([model.bound(x[k], u[k])[0] for k in range(HORIZON)])
    np.testing.assert_allclose(width, np.concatenate([[0.0], np.cumsum(e)]), rtol=0, atol=1e-12)
    # the plan keeps the shrunk box, and the box binds: the target lies outside it late on
    assert np.all(np.abs(x[:, 0]) <= LIMIT - width + 1e-7), (x[:, 0], LIMIT - width)
    assert LIMIT - width[-1] < TARGET and np.max(x[:, 0] - (LIMIT - width)) > -1e-4
    # every predicted state is the model's step of the one before
    first = model.step(x[0], u[0])
    assert np.max(np.abs(x[1] - first)) <= 1e-12
    for k in range(HORIZON):
        assert np.max(np.abs(x[k + 1] - model.step(x[k], u[k]))) <= 1e-12, k
