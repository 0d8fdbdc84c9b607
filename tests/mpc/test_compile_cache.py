"""Compiled controllers: the NLP compiled once per problem and cached on disk, refused and
compiled again when its library no longer matches its record, and the interpreter where no
compiler runs or the cache cannot be written."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings

import numpy as np
import pytest

from vimpc import _jit
from vimpc.mechanics import Pendulum
from vimpc.models import NominalModel
from vimpc.mpc import MPC, Constraints, Cost

MODEL = NominalModel(Pendulum(), 0.05).discrete_model()
COST = Cost(Q=[1.0, 0.1], R=[0.01], reference=[np.pi, 0.0], periodic=(0,))
CONS = Constraints(u_min=[-2.0], u_max=[2.0])
STARTS = ([0.1, 0.0], [2.5, -1.0])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh compile cache, ``jit = "auto"`` compiling, nothing said yet in the process."""
    monkeypatch.setenv("VIMPC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VIMPC_JIT", raising=False)
    monkeypatch.setattr(_jit, "_SAID", set())
    monkeypatch.setattr(_jit, "_COMPILER", [])
    return tmp_path / "cache" / "compiled"


def _plans(ctrl: MPC) -> np.ndarray:
    return np.array([ctrl(np.array(x0)).u_plan for x0 in STARTS])


def _needs_compiler() -> None:
    """Skip where no C compiler runs: there is nothing to compile with, and the interpreted
    path is tested by ``test_auto_is_interpreted_without_a_compiler_and_says_so_once``."""
    if _jit.compiler() is None:
        pytest.skip("no C compiler runs here")


def _compiles(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling")]


@pytest.mark.parametrize("solver", ["fatrop", "ipopt", "sqpmethod"])
def test_a_compiled_nlp_is_cached_and_solves_the_interpreted_ones_problem(solver, cache, caplog):
    caplog.set_level(logging.INFO, logger="vimpc")
    interpreted = _plans(MPC(MODEL, 6, COST, CONS, solver=solver, jit="none", tol=1e-10))
    first = MPC(MODEL, 6, COST, CONS, solver=solver, tol=1e-10)  # jit = "auto"
    assert (first.jit, first.nlp_compiled) == ("nlp", True)
    assert len(_compiles(caplog)) == 1
    second = MPC(MODEL, 6, COST, CONS, solver=solver, tol=1e-10)
    assert second.nlp_compiled and len(_compiles(caplog)) == 1  # loaded, not compiled again
    assert sorted(p.suffix for p in cache.iterdir() if p.suffix != ".lock") == [".json", ".so"]
    np.testing.assert_allclose(_plans(first), interpreted, atol=1e-8)
    np.testing.assert_allclose(_plans(second), interpreted, atol=1e-8)
    # another problem is another library
    MPC(MODEL, 7, COST, CONS, solver=solver, tol=1e-10)
    assert len(_compiles(caplog)) == 2 and len(list(cache.glob("*.so"))) == 2


def test_a_changed_library_is_refused_and_compiled_again(cache, caplog):
    caplog.set_level(logging.INFO, logger="vimpc")
    reference = _plans(MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10))
    (library,) = cache.glob("*.so")
    library.write_bytes(library.read_bytes()[:-100])  # truncated
    with pytest.warns(RuntimeWarning, match="refusing the compiled controller's NLP.*do not match"):
        ctrl = MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10)
    assert ctrl.nlp_compiled and len(_compiles(caplog)) == 2
    np.testing.assert_allclose(_plans(ctrl), reference, atol=1e-12)
    # a record that names another library's digest is refused the same way
    (record,) = cache.glob("*.json")
    record.write_text(record.read_text().replace('"sha256": "', '"sha256": "0'))
    with pytest.warns(RuntimeWarning, match="refusing"):
        MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10)
    assert len(_compiles(caplog)) == 3
    with warnings.catch_warnings():  # and the rebuilt one is taken as it is
        warnings.simplefilter("error")
        MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10)
    assert len(_compiles(caplog)) == 3


def test_auto_is_interpreted_without_a_compiler_and_says_so_once(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcc, no cc
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.warns(RuntimeWarning, match=r"no C compiler runs here \(\$CC, gcc or cc\)"):
        ctrl = MPC(MODEL, 6, COST, CONS, solver="fatrop")
    assert (ctrl.jit, ctrl.nlp_compiled) == ("none", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        again = MPC(MODEL, 6, COST, CONS, solver="fatrop", jit="nlp")
    assert not again.nlp_compiled and not cache.exists()
    np.testing.assert_allclose(_plans(again), _plans(ctrl), atol=1e-12)


def test_an_unwritable_cache_is_said_and_the_controller_still_compiled(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("VIMPC_CACHE", str(blocker))  # its compiled/ cannot be made
    monkeypatch.delenv("VIMPC_JIT", raising=False)
    monkeypatch.setattr(_jit, "_SAID", set())
    with pytest.warns(RuntimeWarning, match="compile cache .*a_file/compiled.* cannot be written"):
        ctrl = MPC(MODEL, 6, COST, CONS, solver="fatrop")
    assert ctrl.nlp_compiled  # compiled for this process alone
    assert np.isfinite(_plans(ctrl)).all()


def test_auto_compiles_the_condensed_sqp_and_leaves_rti_and_the_environments_choice(
    cache, monkeypatch
):
    assert MPC(MODEL, 6, COST, CONS, solver="rti").jit == "none"
    condensed = MPC(MODEL, 6, COST, CONS, solver="condensed", tol=1e-10)
    assert condensed.jit == "nlp"  # its cold starts' NLP and its own functions compiled
    interpreted = MPC(MODEL, 6, COST, CONS, solver="condensed", jit="none", tol=1e-10)
    for x0 in STARTS:  # the first call a cold start, the second the condensed SQP
        for _ in range(2):
            np.testing.assert_allclose(
                condensed(np.array(x0)).u_plan, interpreted(np.array(x0)).u_plan, atol=1e-8
            )
    assert condensed._solving.condensed._linearization.fn.class_name() == "External"
    # a network's dense products are compiled where the generated C runs them on CasADi's
    # OpenBLAS, and stay interpreted (on a BLAS) where CasADi ships none (CasADi's loops)
    network = dataclasses.replace(MODEL, info={**MODEL.info, "dense_products": "blasfeo"})
    monkeypatch.setattr(_jit, "dense_products_compile", lambda: False)
    libraries = len(list(cache.glob("*.so")))
    ctrl = MPC(network, 6, COST, CONS, solver="fatrop")
    assert (ctrl.jit, ctrl.nlp_compiled) == ("none", False)
    assert len(list(cache.glob("*.so"))) == libraries
    monkeypatch.setattr(_jit, "dense_products_compile", lambda: True)
    assert MPC(network, 6, COST, CONS, solver="fatrop").jit == "nlp"
    monkeypatch.setenv("VIMPC_JIT", "none")
    ctrl = MPC(MODEL, 7, COST, CONS, solver="fatrop")
    assert (ctrl.jit, ctrl.nlp_compiled) == ("none", False)
    assert MPC(network, 6, COST, CONS, solver="fatrop", jit="nlp").nlp_compiled  # if asked


def test_a_heavy_stage_stays_one_called_function_in_the_compiled_nlp(cache, monkeypatch):
    # above EXPAND_LIMIT operations the stage function is compiled once and called per stage:
    # another library (its source differs from the expanded NLP's), the same plans
    expanded = _plans(MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10))
    monkeypatch.setattr("vimpc.mpc.compiling.EXPAND_LIMIT", 10)
    called = MPC(MODEL, 6, COST, CONS, solver="fatrop", tol=1e-10)
    assert called.nlp_compiled and len(list(cache.glob("*.so"))) == 2
    np.testing.assert_allclose(_plans(called), expanded, atol=1e-8)


def _called_functions(fn) -> set[str]:
    import casadi as ca

    names = set()
    for i in range(fn.n_instructions()):
        if fn.instruction_id(i) == ca.OP_CALL:
            names.add(fn.instruction_MX(i).which_function().name())
    return names


def test_a_called_stage_differentiates_through_its_whole_jacobians(monkeypatch):
    # the constraint Jacobian of a called stage calls the stage's SX Jacobian (not a forward
    # sweep per colour), the Lagrangian's Hessian the Jacobian of its adjoint (not forward
    # sweeps over it), and the gradient stays one adjoint sweep: the cheaper derivatives
    # of a heavy stage (compiling.called_stage)
    import casadi as ca

    from vimpc.mpc.compiling import called_stage

    monkeypatch.setattr("vimpc.mpc.compiling.EXPAND_LIMIT", 10)
    model, called = called_stage(MODEL, "implicit")
    assert called
    nx, nu, N = MODEL.nx, MODEL.nu, 3
    w = ca.MX.sym("w", N * (2 * nx + nu))
    stages = ca.vertsplit(w, [k * (2 * nx + nu) for k in range(N + 1)])
    g = ca.vertcat(*(model.residual(s[:nx], s[nx : nx + nu], s[nx + nu :], []) for s in stages))
    lam = ca.MX.sym("lam", g.numel())
    lagrangian = ca.dot(lam, g) + ca.sumsqr(w)
    jac = ca.Function("constraint_jacobian", [w], [ca.jacobian(g, w)])
    hess = ca.Function("lagrangian_hessian", [w, lam], [ca.hessian(lagrangian, w)[0]])
    grad = ca.Function("lagrangian_gradient", [w, lam], [ca.gradient(lagrangian, w)])
    assert _called_functions(jac) == {"jac_residual"}
    assert "jac_adj1_residual" in _called_functions(hess)
    assert not any(name.startswith("fwd") for name in _called_functions(hess))
    assert _called_functions(grad) == {"adj1_residual"}
    # and they are the expanded stage's derivatives
    rng = np.random.default_rng(0)
    w0, lam0 = rng.normal(size=w.numel()), rng.normal(size=lam.numel())
    expanded = ca.Function("e", [w, lam], [ca.jacobian(g, w), ca.hessian(lagrangian, w)[0]])
    expanded = expanded.expand()
    np.testing.assert_allclose(
        np.asarray(jac(w0)), np.asarray(expanded(w0, lam0)[0]), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        np.asarray(hess(w0, lam0)), np.asarray(expanded(w0, lam0)[1]), rtol=1e-12, atol=1e-12
    )


def test_compiled_code_calling_casadis_blas_plugins_links_casadis_blas(cache):
    """Generated C for ``ca.mtimes(A, B, plugin)`` (a network's dense layers) calls the
    Fortran ``dgemm_`` or BLASFEO: the library links CasADi's own copies. Unlinked, loading
    it failed, or the first call ended the process on an undefined symbol."""
    import casadi as ca

    _needs_compiler()
    rng = np.random.default_rng(0)
    W = ca.MX(ca.DM(rng.normal(size=(32, 32))))
    x = ca.MX.sym("x", 32, 3)
    products = [ca.mtimes(W, x, plugin) for plugin in ("classic", "blasfeo") if ca.has_blas(plugin)]
    if not products:  # nothing of this kind to link (CasADi's wheels ship both)
        pytest.skip("this CasADi has neither BLAS plugin")
    fn = ca.Function("dense_products", [x], products)
    compiled = _jit.compiled_now(fn)
    assert compiled is not None
    value = rng.normal(size=(32, 3))
    for got, want in zip(compiled(value), fn(value), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13, atol=1e-13)
    record = next(cache.glob("*.json")).read_text()
    assert "-Wl,-rpath," in record and "casadi" in record


def test_casadis_dense_product_runs_on_blas_in_compiled_code_and_agrees(cache, tmp_path):
    """The products automatic differentiation derives from a network's (no BLAS plugin on
    them) are CasADi's ``casadi_mtimes_dense`` loop in generated C: it is replaced by a
    ``dgemm_`` call from ``BLAS_FROM`` multiply-adds on (the transposed form, which the code
    generator does not emit, keeps the loop), and the compiled derivative agrees with the
    interpreted one to round-off."""
    import casadi as ca

    from vimpc.models import _network_lagrangian as nl

    _needs_compiler()
    rng = np.random.default_rng(1)
    n = 5
    sizes = [(48, n), (48, 48), (1, 48)]
    net = nl.Network(
        tuple((rng.normal(size=s) / np.sqrt(s[1]), rng.normal(size=s[0])) for s in sizes), "tanh"
    )
    q, c = ca.MX.sym("q", n), ca.MX.sym("c", n)
    _, g, H = nl.network_pass(net, q, np.eye(n))
    # the Hessian of c^T H c by automatic differentiation of the closed-form pass
    fn = ca.Function("third", [q, c], [ca.hessian(ca.bilin(H, c, c), q)[0], ca.jacobian(g, q)])
    with contextlib.chdir(tmp_path):
        generated = (tmp_path / fn.generate("third.c", {"with_header": False})).read_bytes()
    assert b"casadi_mtimes_dense(" in generated
    assert b"CASADI_BLAS_DGEMM(&n, &n" in _jit.dense_products_on_blas(generated)
    compiled = _jit.compiled_now(fn)
    assert compiled is not None
    for _ in range(3):
        args = (rng.normal(size=n), rng.normal(size=n))
        for got, want in zip(compiled(*args), fn(*args), strict=True):
            want = np.asarray(want)
            np.testing.assert_allclose(
                np.asarray(got), want, rtol=1e-11, atol=1e-11 * abs(want).max()
            )
