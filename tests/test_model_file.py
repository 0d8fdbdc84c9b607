"""DiscreteModel files (vimpc.model_file): save, load, read from plain CasADi, and C code."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap

import casadi as ca
import numpy as np
import pytest

from vimpc.dynamics import FUNCTION_FIELDS, DiscreteModel
from vimpc.errors import InputError
from vimpc.mechanics import CartPole, FourBar
from vimpc.model_file import FILE_FORMAT, load, save
from vimpc.models import NominalModel

DT = 0.05
FOURBAR = FourBar(friction=[0.05, 0.02, 0.02, 0.05])
PROVENANCE = {
    "data": {"file": "rollouts/cartpole.npz", "n_trajectories": 12, "seed": 3},
    "fit": {"lengthscales": [0.5, 1.5], "noise": 1e-4, "converged": True, "note": None},
}


def _num(fn: ca.Function, *args) -> np.ndarray:
    return np.asarray(ca.DM(fn(*args)).full(), dtype=np.float64).reshape(-1)


def _cartpole_states(rng, n):
    return rng.uniform([-1.0, -math.pi, -2.0, -4.0], [1.0, math.pi, 2.0, 4.0], size=(n, 4))


def _fourbar_states(rng, n):
    return np.array(
        [
            np.concatenate(FOURBAR.assemble(rng.uniform(-math.pi, math.pi), rng.uniform(-3.0, 3.0)))
            for _ in range(n)
        ]
    )


CASES = {
    "cartpole": (
        lambda: NominalModel(CartPole(), DT, integrator="midpoint"),
        _cartpole_states,
        10.0,
    ),
    "fourbar": (lambda: NominalModel(FOURBAR, DT, integrator="midpoint"), _fourbar_states, 2.0),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """(original model with provenance in info, its loaded copy, sampled states and inputs)."""
    build, states, u_max = CASES[request.param]
    model = build().discrete_model()
    model = dataclasses.replace(model, info={**model.info, **PROVENANCE})
    path = save(model, tmp_path_factory.mktemp("export") / f"{request.param}.vimpc")
    rng = np.random.default_rng(7)
    xs = states(rng, 6)
    us = rng.uniform(-u_max, u_max, size=(6, model.nu))
    return model, load(path), xs, us


@pytest.fixture(scope="module")
def cartpole():
    return NominalModel(CartPole(), DT, integrator="midpoint").discrete_model()


# -- round trip ------------------------------------------------------------------------


def test_round_trip_keeps_every_field(case):
    model, loaded, _, _ = case
    assert isinstance(loaded, DiscreteModel)
    for name in ("dt", "nx", "nu", "np", "nobs", "state_names", "input_names", "param_names"):
        assert getattr(loaded, name) == getattr(model, name), name
    assert type(loaded.dt) is float and type(loaded.nx) is int
    np.testing.assert_array_equal(loaded.p_default, model.p_default)
    assert dict(loaded.info) == dict(model.info)
    assert (
        loaded.info["data"] == PROVENANCE["data"] and loaded.info["system"] == model.info["system"]
    )
    assert loaded.implicit == model.implicit
    assert loaded.delta == model.delta
    for name in FUNCTION_FIELDS:
        mine, theirs = getattr(model, name), getattr(loaded, name)
        assert (mine is None) == (theirs is None), name
        if mine is not None:
            assert theirs.name() == mine.name()
            assert theirs.name_in() == mine.name_in() and theirs.name_out() == mine.name_out()
            for i in range(mine.n_in()):
                assert theirs.sparsity_in(i) == mine.sparsity_in(i)
            for i in range(mine.n_out()):
                assert theirs.sparsity_out(i) == mine.sparsity_out(i)


def test_fourbar_keeps_its_constraint(case):
    model, loaded, xs, _ = case
    if model.info["system"] == "FourBar":
        assert loaded.constraint is not None and loaded.residual is not None
        assert np.max(np.abs(_num(loaded.constraint, xs[0]))) < 1e-12


def test_loaded_functions_give_identical_numbers(case):
    model, loaded, xs, us = case
    p = model.p_default
    for x, u in zip(xs, us, strict=True):
        x_next = _num(model.step, x, u, p)
        np.testing.assert_array_equal(_num(loaded.step, x, u, p), x_next)
        for name in ("to_obs", "from_obs", "constraint"):
            if getattr(model, name) is not None:
                np.testing.assert_array_equal(
                    _num(getattr(loaded, name), x), _num(getattr(model, name), x), err_msg=name
                )
        for xn in (x_next, x_next + 1e-3):
            np.testing.assert_array_equal(
                _num(loaded.residual, x, u, xn, p), _num(model.residual, x, u, xn, p)
            )
    np.testing.assert_array_equal(loaded.simulate(xs[0], us), model.simulate(xs[0], us))


def test_derivatives_through_the_loaded_rootfinder(case):
    model, loaded, xs, us = case
    p = model.p_default
    jac, jac_loaded = model.step.jacobian(), loaded.step.jacobian()
    for x, u in zip(xs, us, strict=True):
        out = model.step(x, u, p)
        for mine, theirs in zip(jac(x, u, p, out), jac_loaded(x, u, p, out), strict=True):
            np.testing.assert_array_equal(np.array(theirs), np.array(mine))
    # second order, as an exact-Hessian NLP solver needs it
    x, u = ca.MX.sym("x", model.nx), ca.MX.sym("u", model.nu)
    hessians = [
        ca.Function("H", [x, u], [ca.hessian(ca.sumsqr(m.step(x, u, p)), x)[0]])
        for m in (model, loaded)
    ]
    np.testing.assert_allclose(
        np.array(hessians[1](xs[0], us[0])),
        np.array(hessians[0](xs[0], us[0])),
        rtol=1e-10,
        atol=1e-10,
    )


# -- any CasADi program reads the file ---------------------------------------------

_PLAIN_CASADI = textwrap.dedent(
    """
    import json, sys
    import casadi
    path, x, u = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["format"] == "vimpc.DiscreteModel/3", doc["format"]
    step = casadi.Function.deserialize(doc["functions"]["step"]["serialized"])
    p = doc["p_default"]
    x_next = step(x, u, p).full().ravel().tolist()
    jac = step.jacobian()(x, u, p, x_next)[0].full().tolist()
    assert not any(name == "vimpc" or name.startswith("vimpc.") for name in sys.modules)
    print(json.dumps({"dt": doc["dt"], "names": doc["state_names"], "x_next": x_next, "jac": jac}))
    """
)


def test_a_fresh_casadi_program_evaluates_the_step(case, tmp_path):
    model, _, xs, us = case
    path = save(model, tmp_path / "model.vimpc")
    x, u = xs[1], us[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            _PLAIN_CASADI,
            str(path),
            json.dumps(x.tolist()),
            json.dumps(u.tolist()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["dt"] == model.dt and tuple(got["names"]) == model.state_names
    x_next = _num(model.step, x, u, model.p_default)
    np.testing.assert_array_equal(np.array(got["x_next"]), x_next)
    jac = np.array(model.step.jacobian()(x, u, model.p_default, x_next)[0])
    np.testing.assert_array_equal(np.array(got["jac"]), jac)


# -- file handling -------------------------------------------------------------------


def test_save_returns_the_path_and_writes_json(cartpole, tmp_path):
    path = save(cartpole, str(tmp_path / "m.vimpc"))
    assert path == tmp_path / "m.vimpc"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == FILE_FORMAT and doc["dt"] == DT and doc["nx"] == 4
    assert doc["functions"]["bound"] is None and isinstance(
        doc["functions"]["step"]["serialized"], str
    )
    assert os.listdir(tmp_path) == ["m.vimpc"]  # no temporary file left behind


def test_refuses_to_overwrite(cartpole, tmp_path):
    path = tmp_path / "m.vimpc"
    path.write_text("keep me", encoding="utf-8")
    with pytest.raises(FileExistsError, match=str(path)):
        save(cartpole, path)
    assert path.read_text(encoding="utf-8") == "keep me"
    assert os.listdir(tmp_path) == ["m.vimpc"]
    save(cartpole, path, overwrite=True)
    assert load(path).nx == 4
    assert os.listdir(tmp_path) == ["m.vimpc"]


@pytest.mark.parametrize("name", ["model.json", "model", "model.vimpc.bak"])
def test_wrong_suffix(cartpole, tmp_path, name):
    path = tmp_path / name
    with pytest.raises(ValueError, match=r"\.vimpc") as err:
        save(cartpole, path)
    assert str(path) in str(err.value)
    assert not path.exists()
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\.vimpc"):
        load(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nothing.vimpc"
    with pytest.raises(InputError, match=f"model file {str(path)!r} does not exist"):
        load(path)


def _tamper(doc):
    text = doc["functions"]["step"]["serialized"]
    doc["functions"]["step"]["serialized"] = (
        text[:500] + ("a" if text[500] != "a" else "b") + text[501:]
    )


def _retag(fmt):
    def edit(doc):
        doc["format"] = fmt

    return edit


def _drop(key):
    def edit(doc):
        del doc[key]

    return edit


def _swap_names(doc):
    doc["state_names"] = doc["state_names"][::-1]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not a vimpc model file"),
        (b'{"format": "vimpc.DiscreteModel/2", "dt": 0.0', "not a vimpc model file"),
        (b'{"hello": 1}', "no 'format' marker"),
        (b"[1, 2, 3]", "no 'format' marker"),
        (_retag("someone.else/1"), "not a vimpc model file"),
        (_retag("vimpc.DiscreteModel/1"), "unsupported DiscreteModel file format"),
        (_retag("vimpc.DiscreteModel/99"), "unsupported DiscreteModel file format"),
        (_drop("dt"), "checksum"),
        (_drop("sha256"), "checksum"),
        (_tamper, "checksum"),
        (lambda doc: doc.update(nx=5), "checksum"),
        (lambda doc: doc.update(dt=0.5), "checksum"),
        (_swap_names, "checksum"),
        (lambda doc: doc["info"].update(system="Pendulum"), "checksum"),
        (lambda doc: doc["functions"].update(step=None), "checksum"),
    ],
)
def test_corrupt_file(cartpole, tmp_path, edit, message):
    # the checksum covers the whole document: no edit anywhere loads silently
    path = save(cartpole, tmp_path / "m.vimpc")
    if isinstance(edit, bytes):
        path.write_bytes(edit)
    else:
        doc = json.loads(path.read_text(encoding="utf-8"))
        edit(doc)
        path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)


def _resealed(doc):
    """``doc`` with a valid checksum again (an edit made by someone who knows the format)."""
    doc.pop("sha256", None)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return doc


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda doc: doc.update(nx=5), "corrupt"),
        (_drop("functions"), "'functions' is missing"),
        (lambda doc: doc["functions"].update(step=None), "'step' is missing"),
        (lambda doc: doc.update(delta=0.1), "bound and DiscreteModel.delta go together"),
    ],
)
def test_consistent_checksum_but_invalid_content(cartpole, tmp_path, edit, message):
    path = save(cartpole, tmp_path / "m.vimpc")
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(_resealed(doc)), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load(path)


def test_unreadable_function_text(cartpole, tmp_path):
    path = save(cartpole, tmp_path / "m.vimpc")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["functions"]["step"] = {"serialized": doc["functions"]["step"]["serialized"][:1000]}
    path.write_text(json.dumps(_resealed(doc)), encoding="utf-8")
    with pytest.raises(ValueError, match="cannot deserialise function 'step'"):
        load(path)


def test_a_directory_is_not_a_model_file(cartpole, tmp_path):
    folder = tmp_path / "x.vimpc"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        load(folder)
    with pytest.raises(ValueError, match="is a directory"):
        save(cartpole, folder)


def test_bound_delta_energy_and_velocity_constraint_round_trip(tmp_path):
    from vimpc.mechanics import RollingDisk
    from vimpc.models.calibration import conformal_bound

    disk = NominalModel(RollingDisk(), DT).discrete_model()
    bounded = conformal_bound(disk, 0.1, 2.0, 50, scale=np.arange(1.0, 9.0)).apply(disk)
    loaded = load(save(bounded, tmp_path / "disk.vimpc"))
    assert loaded.delta == 0.1 and loaded.bound_info.extra["quantile"] == 2.0
    assert loaded.bound_info == bounded.bound_info
    x = np.array([0.3, 0.4, 0.1, -0.2, 1.0, 0.5, 0.3 * np.cos(0.4), 0.3 * np.sin(0.4)])
    u = np.array([0.5, -0.2])
    np.testing.assert_array_equal(_num(loaded.bound, x, u, []), 2.0 * np.arange(1.0, 9.0))
    np.testing.assert_array_equal(_num(loaded.energy, x, []), _num(disk.energy, x, []))
    np.testing.assert_array_equal(
        _num(loaded.velocity_constraint, x), _num(disk.velocity_constraint, x)
    )
    assert np.max(np.abs(_num(loaded.velocity_constraint, x))) < 1e-15


@pytest.mark.parametrize(
    ("info", "key"),
    [
        ({"ok": 1, "weights": np.zeros(3)}, "weights"),
        ({"count": np.int64(3)}, "count"),
        ({"fit": {"kernel": object()}}, "fit"),
        ({"tags": {"a", "b"}}, "tags"),
        ({"loss": float("nan")}, "loss"),
        ({"table": {1: "one"}}, "table"),
    ],
)
def test_info_must_be_json(cartpole, tmp_path, info, key):
    model = dataclasses.replace(cartpole, info=info)
    path = tmp_path / "m.vimpc"
    with pytest.raises(TypeError, match=repr(key)):
        save(model, path)
    assert os.listdir(tmp_path) == []


def test_info_round_trips_tuples_as_lists(cartpole, tmp_path):
    model = dataclasses.replace(
        cartpole, info={"sizes": (1, 2), "nested": {"x": [1.5, None, True]}}
    )
    loaded = load(save(model, tmp_path / "m.vimpc"))
    assert dict(loaded.info) == {"sizes": [1, 2], "nested": {"x": [1.5, None, True]}}


# -- C code ---------------------------------------------------------------------------


def test_step_generates_c_code_that_compiles(cartpole, tmp_path):
    # from the file, as a C++ user would start
    loaded = load(save(cartpole, tmp_path / "cartpole.vimpc"))
    gen = ca.CodeGenerator("cartpole_model.c")
    gen.add(loaded.step)
    gen.add(loaded.step.jacobian())
    gen.add(loaded.residual)
    source = gen.generate(str(tmp_path) + os.sep)
    assert os.path.getsize(source) > 0
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not available to compile the generated C code")
    library = tmp_path / "cartpole_model.so"
    subprocess.run(
        [gcc, "-fPIC", "-shared", "-O1", source, "-o", str(library), "-lm"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    step = ca.external("step", str(library))
    jac = ca.external(loaded.step.jacobian().name(), str(library))
    residual = ca.external("residual", str(library))
    rng = np.random.default_rng(11)
    p = cartpole.p_default
    for x, u in zip(_cartpole_states(rng, 5), rng.uniform(-10, 10, size=(5, 1)), strict=True):
        x_next = _num(cartpole.step, x, u, p)
        np.testing.assert_allclose(_num(step, x, u, p), x_next, rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            np.array(jac(x, u, p, x_next)[0]),
            np.array(cartpole.step.jacobian()(x, u, p, x_next)[0]),
            rtol=1e-12,
            atol=1e-12,
        )
        assert np.max(np.abs(_num(residual, x, u, x_next, p))) < 1e-10
