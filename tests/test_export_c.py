"""The C99 export (vimpc.export_c, ``vimpc export ... --c DIR``): the sources build with
``-Wall -Werror``, the compiled library agrees with the model's CasADi functions, the example
binary prints the step, and what cannot or must not be written is refused first."""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
from pathlib import Path

import casadi as ca
import gymnasium
import numpy as np
import pytest
import vimpc_envs  # noqa: F401  (registers the environment ids)

from vimpc import cli
from vimpc.data import make_excitation, rollout_env
from vimpc.dynamics import DiscreteModel
from vimpc.export_c import ExportError, export_c
from vimpc.mechanics import CartPole
from vimpc.model_file import save
from vimpc.models import NominalModel
from vimpc.models.registry import family

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

TOL = 1e-12
N_POINTS = 20


def _cartpole() -> DiscreteModel:
    return NominalModel(
        CartPole(friction=[0.2, 0.05]), 0.02, integrator="midpoint"
    ).discrete_model()


def _gp_vi() -> DiscreteModel:
    """GP-VI on a pendulum with friction (6 random-torque trajectories of 20 steps, 60 GP
    samples, one optimiser start of 30 steps) with the GPs' own bound: a fit of about 1 s."""
    env = gymnasium.make("vimpc/Pendulum-v0", dt=0.05).unwrapped
    rng = np.random.default_rng(0)
    inputs = np.stack(
        [
            make_excitation("random_steps", 20, 1, 0.05, rng, low=[-2.0], high=[2.0])
            for _ in range(6)
        ]
    )
    data = rollout_env(env, 6, 20, inputs, 0)
    settings = {"samples": 60, "restarts": 1, "iterations": 30, "bound": "theorem1"}
    return family("gp_vi")(env.nominal_system, 0.05, **settings).fit(data).discrete_model()


MODELS = {"cartpole_midpoint": _cartpole, "pendulum_gp_vi": _gp_vi}
#: states (as observations, low and high) and inputs the agreement is checked on
BOXES = {
    "cartpole_midpoint": ([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], 10.0),
    "pendulum_gp_vi": ([-math.pi, -3.0], [math.pi, 3.0], 2.0),
}


@functools.cache
def _model(name: str) -> DiscreteModel:
    return MODELS[name]()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Each model exported (the cart-pole through ``vimpc export FILE.vimpc --c DIR``, the
    GP-VI model by :func:`export_c`) and built with its Makefile."""
    root = tmp_path_factory.mktemp("export_c")
    out = {}
    for name in MODELS:
        folder = root / name
        if name == "cartpole_midpoint":
            path = save(_model(name), root / f"{name}.vimpc")
            assert cli.main(["export", str(path), "--c", str(folder)]) == 0
        else:
            export_c(_model(name), folder)
        done = subprocess.run(["make", "-C", str(folder)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        out[name] = folder
    return out


def _points(name: str, seed: int = 0):
    model = _model(name)
    low, high, umax = BOXES[name]
    rng = np.random.default_rng(seed)
    obs = rng.uniform(low, high, size=(N_POINTS, len(low)))
    xs = [np.asarray(ca.DM(model.from_obs(o))).reshape(-1) for o in obs]
    us = rng.uniform(-umax, umax, size=(N_POINTS, model.nu))
    return list(zip(xs, us, strict=True))


def _dense(values) -> list[np.ndarray]:
    values = values if isinstance(values, (list, tuple)) else [values]
    return [np.asarray(ca.DM(v)) for v in values]


def test_the_sources_build_with_warnings_as_errors_into_libraries_without_casadi(built):
    for name, folder in built.items():
        made = sorted(p.name for p in folder.iterdir())
        assert {"model.c", "model.h", "main.c", "Makefile", "libmodel.a", "libmodel.so",
                "example"} <= set(made), made  # fmt: skip
        assert [p.name for p in folder.glob("*.h")] == ["model.h"], made
        assert "-std=c99 -Wall -Werror -O2" in (folder / "Makefile").read_text()
        # what the shared library needs from elsewhere: the C library and libm only
        undefined = subprocess.run(
            ["nm", "-u", "--format=posix", str(folder / "libmodel.so")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        names = {line.split()[0].split("@")[0] for line in undefined if line.strip()}
        foreign = {n for n in names if "casadi" in n.lower() or "blas" in n.lower() or "gemm" in n}
        assert not foreign, (name, foreign)
        header = (folder / "model.h").read_text()
        model = _model(name)
        for fn in ("step", "jac_step", "residual", "jac_residual"):
            assert f"int {fn}(const casadi_real** arg" in header, (name, fn)
        assert ("int bound(const casadi_real** arg" in header) == (model.bound is not None)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_compiled_library_agrees_with_the_model(built, name):
    """step, its Jacobian, residual (at the step) and bound of the C library loaded by
    casadi.external equal the model's CasADi functions to 1e-12 at 20 random points."""
    model, library = _model(name), str(built[name] / "libmodel.so")
    ext = {fn: ca.external(fn, library) for fn in ("step", "jac_step", "residual", "bound")
           if fn != "bound" or model.bound is not None}  # fmt: skip
    jac = model.step.jacobian()
    p = model.p_default
    worst = 0.0
    for x, u in _points(name):
        x_next = np.asarray(ca.DM(model.step(x, u, p))).reshape(-1)
        pairs = [
            (ext["step"](x, u, p), x_next),
            (ext["jac_step"](x, u, p), jac(x, u, p, x_next)[:2]),
            (ext["residual"](x, u, x_next, p), model.residual(x, u, x_next, p)),
        ]
        if model.bound is not None:
            pairs.append((ext["bound"](x, u, p), model.bound(x, u, p)))
        for got, want in pairs:
            for a, b in zip(_dense(got), _dense(want), strict=True):
                assert a.shape == b.shape
                worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)))
    assert worst <= TOL, (name, worst)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_example_prints_the_step(built, name):
    model = _model(name)
    x, u = _points(name, seed=1)[0]
    done = subprocess.run(
        [str(built[name] / "example"), *(repr(float(v)) for v in (*x, *u))],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    label, *values = done.stdout.split()
    assert label == "x_next" and values[0] == "="
    printed = np.array([float(v) for v in values[1:]])
    want = np.asarray(ca.DM(model.step(x, u, model.p_default))).reshape(-1)
    assert printed.shape == want.shape
    assert np.max(np.abs(printed - want)) <= TOL
    # a wrong count of numbers is refused with the usage
    bad = subprocess.run([str(built[name] / "example"), "1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_a_non_empty_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    model = _cartpole()
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not empty, and nothing in it is overwritten"):
        export_c(model, folder)
    path = save(model, tmp_path / "m.vimpc")
    assert cli.main(["export", str(path), "--c", str(folder)]) == 2
    assert "is a folder that is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.vimpc", "mine"]  # no leftovers
    # an empty folder is used
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "model.h" in export_c(model, empty).files


class _Doubling(ca.Callback):
    """A Python callback (as a torch network evaluated at run time would be)."""

    def __init__(self) -> None:
        ca.Callback.__init__(self)
        self.construct("network", {})

    def get_sparsity_in(self, i):
        return ca.Sparsity.dense(2, 1)

    def get_sparsity_out(self, i):
        return ca.Sparsity.dense(2, 1)

    def eval(self, arg):
        return [2 * arg[0]]


def test_a_function_casadi_cannot_generate_is_refused_by_name(tmp_path):
    base = NominalModel(CartPole(), 0.02).discrete_model()  # any record to copy names from
    network = _Doubling()
    x, u, p = ca.MX.sym("x", 2), ca.MX.sym("u", 1), ca.MX.sym("p", 0)
    obs = ca.MX.sym("obs", 2)
    model = DiscreteModel(
        dt=0.02, nx=2, nu=1, np=0, nobs=2,
        step=ca.Function("step", [x, u, p], [x + network(x) * u]),
        from_obs=ca.Function("from_obs", [obs], [obs]),
        to_obs=ca.Function("to_obs", [x], [x]),
        state_names=base.state_names[:2], input_names=base.input_names,
    )  # fmt: skip
    assert np.allclose(np.asarray(model.step([1.0, 2.0], [1.0], [])).reshape(-1), [3.0, 6.0])
    folder = tmp_path / "out"
    with pytest.raises(ExportError, match=r"function 'step' calls 'network' \(CallbackInternal\)"):
        export_c(model, folder)
    assert not folder.exists() and list(tmp_path.iterdir()) == []


def test_vimpc_export_writes_a_scenarios_model_as_c_and_a_file(tmp_path, capsys):
    """``vimpc export SCENARIO --c DIR`` (nothing to fit in pendulum_swingup), with ``-o``
    too; and what the command refuses before any work."""
    folder, path = tmp_path / "c", tmp_path / "pendulum.vimpc"
    argv = ["export", "pendulum_swingup", "--quiet", "--c", str(folder), "-o", str(path)]
    assert cli.main(argv) == 0
    assert path.is_file() and (folder / "model.h").is_file()
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["export", "pendulum_swingup", "--quiet"]) == 2
    assert "needs -o FILE.vimpc" in capsys.readouterr().err
    assert cli.main(["export", str(path)]) == 2
    assert "needs --c DIR" in capsys.readouterr().err
    assert cli.main(["export", str(path), "--c", str(tmp_path / "d"), "-o", "x.vimpc"]) == 2
    assert "apply to a scenario" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def _dlnn() -> DiscreteModel:
    """A 16 x 16 discrete Lagrangian network on the frictionless pendulum (200 epochs on
    6 excited trajectories, as the family contract's small case): its products call
    CasADi's BLAS plugins, which the export's blas.c stands in for."""
    import torch

    torch.set_num_threads(1)
    env = gymnasium.make("vimpc/Pendulum-v0", dt=0.05, friction=[0.0]).unwrapped
    rng = np.random.default_rng(0)
    inputs = np.stack(
        [
            make_excitation("random_steps", 20, 1, 0.05, rng, low=[-2.0], high=[2.0])
            for _ in range(6)
        ]
    )
    from vimpc.data.sampling import halton

    starts = halton((-2.0, -3.0), (2.0, 3.0), 6, seed=0)
    data = rollout_env(env, 6, 20, inputs, 0, initial_states=starts)
    settings = {"hidden": [16, 16], "epochs": 200, "lr": 1e-2, "order": 0}
    return family("dlnn")(env.nominal_system, 0.05, **settings).fit(data).discrete_model()


@pytest.mark.slow  # the network's C takes ~7 s to compile
def test_a_network_lagrangian_links_without_a_blas_and_agrees(tmp_path):
    model = _dlnn()
    done = export_c(model, tmp_path / "c")
    assert "blas.c" in done.files
    built = subprocess.run(["make", "-C", str(done.folder)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    step = ca.external("step", str(done.folder / "libmodel.so"))
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(N_POINTS):
        x = np.asarray(ca.DM(model.from_obs(rng.uniform([-1.5, -2.5], [1.5, 2.5])))).reshape(-1)
        u = rng.uniform(-2.0, 2.0, size=1)
        a = np.asarray(ca.DM(step(x, u, model.p_default))).reshape(-1)
        b = np.asarray(ca.DM(model.step(x, u, model.p_default))).reshape(-1)
        worst = max(worst, float(np.max(np.abs(a - b))))
    assert worst <= TOL, worst
