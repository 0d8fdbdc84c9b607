"""A :class:`~vimpc.dynamics.DiscreteModel` as self-contained C99 sources for embedded targets.

:func:`export_c` writes, into one new folder, CasADi's generated C of the model's ``step``,
``residual`` and ``bound`` (those the model has) and of their Jacobians, one header, a
``Makefile`` and a ``main.c`` example; nothing of CasADi is needed at run time:

========================  =========================================================================
file                      what
========================  =========================================================================
``model.c``, ``model.h``  ``casadi.CodeGenerator(..., {"with_header": True})`` of the functions below:
                          each keeps its name and CasADi's generated C API (``step(arg, res, iw,
                          w, mem)``, ``step_work``, ``step_checkout``, ``step_SZ_W``, ...)
``blas.c``                only for a model whose products call a BLAS (the network Lagrangians:
                          CasADi's ``blasfeo`` / ``classic`` plugins): a plain C99 ``dgemm`` under
                          both names, so the library links alone; delete it and link
                          ``-lblasfeo`` / ``-lopenblas`` to use an optimised BLAS instead
``main.c``                calls ``step`` once on ``p_default`` and a state (and input, default 0)
                          given on the command line; prints ``x_next`` with 17 digits
``Makefile``              ``libmodel.a``, ``libmodel.so`` and ``example`` with ``gcc -std=c99 -Wall
                          -Werror -O2``
``README.txt``            the functions, sizes, state/input/parameter names, ``p_default``
========================  =========================================================================

The functions (``x`` state, ``u`` input, ``p`` parameters; every argument a dense column):

- ``step(x, u, p) -> x_next``; an implicit step's Newton solve (CasADi's ``fast_newton``)
  is emitted as plain C, its dense LU included;
- ``jac_step(x, u, p) -> (jac_x_next_x, jac_x_next_u)``: ``d x_next/dx`` (``nx x nx``) and
  ``d x_next/du`` (``nx x nu``), column-major, by the implicit function theorem through the
  Newton solve;
- ``residual(x, u, x_next, p) -> r`` and ``jac_residual(x, u, x_next, p) -> (jac_r_x,
  jac_r_u, jac_r_x_next)``, for an implicit (variational) model;
- ``bound(x, u, p) -> e`` and ``jac_bound(x, u, p) -> (jac_e_x, jac_e_u)``, for a model with
  an uncertainty bound.

The library loads in CasADi with ``casadi.external("step", "./libmodel.so")``.

A function CasADi cannot write as C (one that calls a Python callback, such as a torch
network evaluated at run time, an external compiled library, or a solver plugin without code
generation, such as the ``newton`` rootfinder) is refused by name before anything is
written (:func:`check_generable`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import casadi as ca
import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError, OutputExistsError, VimpcError

#: The library's base name: ``libmodel.a``, ``libmodel.so``, ``model.c``, ``model.h``.
LIBRARY = "model"
#: The C compiler flags of the Makefile.
CFLAGS = "-std=c99 -Wall -Werror -O2"

#: The model's functions that go to C, with the arguments each takes and the arguments its
#: Jacobian differentiates by.
_EXPORTED = {
    "step": (("x", "u", "p"), ("x", "u"), "x_next"),
    "residual": (("x", "u", "x_next", "p"), ("x", "u", "x_next"), "r"),
    "bound": (("x", "u", "p"), ("x", "u"), "e"),
}

#: CasADi function classes whose C code generation CasADi has (those the shipped families
#: build: expression graphs, maps, the fast_newton rootfinder, the BLAS products).
_GENERABLE = frozenset(
    {"MXFunction", "SXFunction", "FastNewton", "Map", "OmpMap", "ThreadMap", "Switch"}
)
#: Why CasADi has no C for a class (what the refusal says).
_WHY = {
    "CallbackInternal": "it calls a Python callback (casadi.Callback, such as a torch "
    "network evaluated at run time), whose code lives in Python",
    "External": "it calls an external compiled library (casadi.external), whose source is "
    "not part of the model",
    "Newton": "it calls the 'newton' rootfinder plugin, which has no code generation (the "
    "'fast_newton' rootfinder has)",
}


class ExportError(VimpcError, ValueError):
    """The model cannot be exported to C: the message names the function and why."""


@dataclass(frozen=True)
class CExport:
    """What :func:`export_c` wrote.

    Fields:
        folder: the folder of the sources.
        files: the files written, by name.
        functions: the C functions of ``model.h``, in order.
    """

    folder: Path
    files: tuple[str, ...]
    functions: tuple[str, ...]


def c_functions(model: DiscreteModel) -> list[ca.Function]:
    """The functions :func:`export_c` writes as C, named as in the module docstring, each with
    dense arguments and results (every entry stored, matrices column-major; a Jacobian takes
    the function's arguments, no output placeholder)."""
    if not isinstance(model, DiscreteModel):
        raise TypeError(f"model must be a DiscreteModel, got {type(model).__name__}")
    out = []
    for name, (arguments, wrt, result) in _EXPORTED.items():
        fn = getattr(model, name)
        if fn is None:
            continue
        fn = ca.Function(fn)  # without the numeric argument check
        args = [ca.MX.sym(a, fn.size1_in(i), fn.size2_in(i)) for i, a in enumerate(arguments)]
        (value,) = fn.call(args)
        # dense outputs: C reads every entry of a result, structural zeros included
        out.append(ca.Function(name, args, [ca.densify(value)], list(arguments), [result]))
        jac = [ca.densify(ca.jacobian(value, args[arguments.index(a)])) for a in wrt]
        out.append(
            ca.Function(
                f"jac_{name}", args, jac, list(arguments), [f"jac_{result}_{a}" for a in wrt]
            )
        )
    return out


def check_generable(model: DiscreteModel) -> list[ca.Function]:
    """The functions of :func:`c_functions`, or an :class:`ExportError` naming the first model
    function CasADi cannot generate C for, the inner function and class that stop it, and
    why."""
    functions: list[ca.Function] = []
    for name in _EXPORTED:
        fn = getattr(model, name)
        if fn is None:
            continue
        for inner in [ca.Function(fn), *ca.Function(fn).find_functions()]:
            kind = inner.class_name()
            if kind not in _GENERABLE:
                why = _WHY.get(kind, f"CasADi has no C code generation for a {kind}")
                raise ExportError(
                    f"cannot export the model to C: its function {name!r} calls "
                    f"{inner.name()!r} ({kind}), and {why}; export a model whose {name} is "
                    "CasADi expressions only (every vimpc family builds one), or use the "
                    ".vimpc file from a CasADi program instead"
                )
    try:
        functions = c_functions(model)
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()
        raise ExportError(
            f"cannot export the model to C: CasADi cannot differentiate it for the Jacobians "
            f"({lines[-1] if lines else type(exc).__name__})"
        ) from None
    for fn in functions:
        for inner in fn.find_functions():
            if inner.class_name() not in _GENERABLE:
                raise ExportError(
                    f"cannot export the model to C: {fn.name()!r} calls {inner.name()!r} "
                    f"({inner.class_name()}), which CasADi cannot write as C"
                )
    return functions


def export_c(model: DiscreteModel, folder: str | os.PathLike[str]) -> CExport:
    """Write ``model`` as C99 sources into ``folder`` (contents in the module docstring).

    ``folder`` must not exist or be empty: nothing already there is overwritten. Everything is
    generated in a temporary folder beside it and moved into place at the end, so a refusal or
    a failure leaves no partial export.

    Raises:
        OutputExistsError: ``folder`` holds files, or is a file.
        InputError: ``folder``'s parent does not exist.
        ExportError: a function cannot be generated (:func:`check_generable`).
    """
    if not isinstance(folder, (str, os.PathLike)):
        raise InputError(f"folder must be a path (str or os.PathLike), got {folder!r}")
    target = Path(os.fspath(folder))
    _check_target(target)
    functions = check_generable(model)
    parent = target.absolute().parent
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(work, 0o777 & ~umask)  # a folder as mkdir makes it, not mkdtemp's 0700
        written = _write(model, functions, work)
        _check_target(target)  # the folder may have appeared meanwhile
        if target.exists():
            target.rmdir()  # empty: checked above
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return CExport(target, tuple(written), tuple(f.name() for f in functions))


def _check_target(target: Path) -> None:
    if target.is_dir():
        if any(target.iterdir()):
            raise OutputExistsError(
                f"cannot export C sources to {str(target)!r}: the folder exists and is not "
                "empty, and nothing in it is overwritten; give a new or empty folder, or "
                "remove this one first"
            )
    elif target.exists():
        raise OutputExistsError(
            f"cannot export C sources to {str(target)!r}: it is a file, not a folder; give "
            "a new folder"
        )
    elif not target.absolute().parent.is_dir():
        raise InputError(
            f"cannot export C sources to {str(target)!r}: its parent folder "
            f"{str(target.absolute().parent)!r} does not exist; create it first"
        )


def _write(model: DiscreteModel, functions: list[ca.Function], folder: Path) -> list[str]:
    gen = ca.CodeGenerator(f"{LIBRARY}.c", {"with_header": True})
    for fn in functions:
        gen.add(fn)
    gen.generate(str(folder) + os.sep)
    source = (folder / f"{LIBRARY}.c").read_text()
    files = [f"{LIBRARY}.c", f"{LIBRARY}.h"]
    blas = _blas_calls(source)
    if blas:
        (folder / "blas.c").write_text(_BLAS_C)
        files.append("blas.c")
    (folder / "main.c").write_text(_main_c(model))
    (folder / "Makefile").write_text(_makefile(bool(blas)))
    (folder / "README.txt").write_text(_readme(model, functions, bool(blas)))
    return [*files, "main.c", "Makefile", "README.txt"]


def _blas_calls(source: str) -> set[str]:
    """The BLAS entry points the generated source calls (CasADi's BLAS plugins)."""
    calls = set()
    if re.search(r"\bblasfeo_blas_dgemm\s*\(&", source):
        calls.add("blasfeo_blas_dgemm")
    if re.search(r"\bCASADI_BLAS_DGEMM\s*\(&", source):
        calls.add("dgemm")
    return calls


def _c_array(values: np.ndarray) -> str:
    if values.size == 0:
        return "{0.0}"  # C99 has no empty arrays; the size macro says 0
    return "{" + ", ".join(f"{float(v):.17g}" for v in values) + "}"


def _main_c(model: DiscreteModel) -> str:
    nx, nu, npar = model.nx, model.nu, model.np
    return f"""/* Calls the model's step once and prints x_next.
 *
 * usage: ./example x_1 ... x_{nx} [u_1 ... u_{nu}]
 *   the state ({", ".join(model.state_names)}), then optionally the input
 *   ({", ".join(model.input_names)}; default 0); the parameters are p_default.
 * prints: x_next = v_1 ... v_{nx} (17 significant digits, so the doubles read back exactly)
 */
#include <stdio.h>
#include <stdlib.h>
#include "{LIBRARY}.h"

#define NX {nx}
#define NU {nu}
#define NP {npar}

static const casadi_real p_default[NP > 0 ? NP : 1] = {_c_array(model.p_default)};

static int read_number(const char* text, casadi_real* value) {{
  char* end;
  *value = strtod(text, &end);
  return end != text && *end == '\\0';
}}

int main(int argc, char** argv) {{
  casadi_real x[NX], u[NU > 0 ? NU : 1] = {{0}}, x_next[NX];
  const casadi_real* arg[step_SZ_ARG];
  casadi_real* res[step_SZ_RES];
  casadi_int iw[step_SZ_IW > 0 ? step_SZ_IW : 1];
  casadi_real w[step_SZ_W > 0 ? step_SZ_W : 1];
  int i, mem, flag;
  if (argc != 1 + NX && argc != 1 + NX + NU) {{
    fprintf(stderr, "usage: %s x_1 ... x_%d [u_1 ... u_%d]: %d state entries, then "
            "optionally %d inputs (default 0); got %d numbers\\n", argv[0], NX, NU, NX, NU,
            argc - 1);
    return 2;
  }}
  for (i = 0; i < argc - 1; ++i) {{
    casadi_real* into = i < NX ? &x[i] : &u[i - NX];
    if (!read_number(argv[i + 1], into)) {{
      fprintf(stderr, "%s: argument %d must be a number, got '%s'\\n", argv[0], i + 1,
              argv[i + 1]);
      return 2;
    }}
  }}
  arg[0] = x;
  arg[1] = u;
  arg[2] = p_default;
  res[0] = x_next;
  mem = step_checkout();
  flag = step(arg, res, iw, w, mem);
  step_release(mem);
  if (flag) {{
    fprintf(stderr, "%s: step failed (flag %d)\\n", argv[0], flag);
    return 1;
  }}
  printf("x_next =");
  for (i = 0; i < NX; ++i) printf(" %.17g", x_next[i]);
  printf("\\n");
  return 0;
}}
"""


def _makefile(blas: bool) -> str:
    objects = f"{LIBRARY}.o" + (" blas.o" if blas else "")
    define = " -DCASADI_BLAS_DGEMM=vimpc_dgemm" if blas else ""
    return f"""# C99 sources of a vimpc model: make builds lib{LIBRARY}.a, lib{LIBRARY}.so and example.
CC ?= gcc
CFLAGS ?= {CFLAGS}
CPPFLAGS +={define}
LDLIBS = -lm

all: lib{LIBRARY}.a lib{LIBRARY}.so example

%.o: %.c {LIBRARY}.h
\t$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -c $< -o $@

lib{LIBRARY}.a: {objects}
\t$(AR) rcs $@ $^

lib{LIBRARY}.so: {objects}
\t$(CC) $(CFLAGS) -shared $^ -o $@ $(LDLIBS)

example: main.c lib{LIBRARY}.a
\t$(CC) $(CPPFLAGS) $(CFLAGS) main.c lib{LIBRARY}.a -o $@ $(LDLIBS)

clean:
\trm -f *.o lib{LIBRARY}.a lib{LIBRARY}.so example

.PHONY: all clean
"""


def _readme(model: DiscreteModel, functions: list[ca.Function], blas: bool) -> str:
    rows = "\n".join(f"  {fn}" for fn in functions)
    names = (
        f"state x ({model.nx}): {', '.join(model.state_names)}\n"
        f"input u ({model.nu}): {', '.join(model.input_names)}\n"
        f"parameters p ({model.np}): {', '.join(model.param_names) or '(none)'}\n"
        f"p_default: {[float(v) for v in model.p_default]}\n"
    )
    extra = (
        "blas.c: a plain C99 dgemm for the model's dense products (CasADi's BLAS plugins); "
        "drop it and link -lblasfeo / -lopenblas for an optimised one\n"
        if blas
        else ""
    )
    return (
        f"C99 sources of a vimpc model ({model.info.get('system', '?')}, "
        f"{model.info.get('model', '?')}), dt = {model.dt} s, generated by CasADi "
        f"{ca.__version__}.\n\n{names}\nfunctions ({LIBRARY}.h, CasADi's generated C API; "
        f"matrices column-major):\n{rows}\n\n{extra}"
        f"build: make (lib{LIBRARY}.a, lib{LIBRARY}.so, example); run: ./example "
        f"{' '.join(['X'] * model.nx)} [U]\n"
        f'from CasADi: casadi.external("step", "./lib{LIBRARY}.so")\n'
    )


#: A reference column-major dgemm for the generated products: C = alpha op(A) op(B) + beta C.
_BLAS_C = """/* dgemm for the dense products of the generated model (CasADi's BLAS plugins call it):
 * C = alpha op(A) op(B) + beta C, column-major, op = transpose for 'T'/'t'/'C'/'c'.
 * A plain loop; link an optimised BLAS instead by dropping this file (see README.txt). */
#include <stddef.h>

static void reference_dgemm(const char* transa, const char* transb, const int* m,
                            const int* n, const int* k, const double* alpha, const double* A,
                            const int* lda, const double* B, const int* ldb,
                            const double* beta, double* C, const int* ldc) {
  int i, j, l;
  int ta = *transa == 'T' || *transa == 't' || *transa == 'C' || *transa == 'c';
  int tb = *transb == 'T' || *transb == 't' || *transb == 'C' || *transb == 'c';
  for (j = 0; j < *n; ++j) {
    for (i = 0; i < *m; ++i) {
      double s = 0;
      for (l = 0; l < *k; ++l) {
        double a = ta ? A[l + (size_t)i * *lda] : A[i + (size_t)l * *lda];
        double b = tb ? B[j + (size_t)l * *ldb] : B[l + (size_t)j * *ldb];
        s += a * b;
      }
      C[i + (size_t)j * *ldc] = *beta == 0 ? *alpha * s : *alpha * s + *beta * C[i + (size_t)j * *ldc];
    }
  }
}

void blasfeo_blas_dgemm(char* transa, char* transb, int* m, int* n, int* k, double* alpha,
                        double* A, int* lda, double* B, int* ldb, double* beta, double* C,
                        int* ldc) {
  reference_dgemm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void vimpc_dgemm(const char* transa, const char* transb, const int* m, const int* n,
                 const int* k, const double* alpha, const double* A, const int* lda,
                 const double* B, const int* ldb, const double* beta, double* C,
                 const int* ldc) {
  reference_dgemm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
"""
