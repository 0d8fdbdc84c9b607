"""Compiling CasADi functions to C with the system's C compiler (CasADi's JIT).

One place for the compiler flags and the directory the generated sources and libraries go
to: a per-process temporary directory, removed when the process exits (CasADi's own
cleanup is off: it would run after the directory is gone when a function outlives the
exit handlers).

CasADi's JIT runs the compiler through C's ``system()``, which ignores SIGINT in the
calling process while it waits: a Ctrl-C during the compile is lost (or kills only the
compiler, and the caller falls back to the interpreter and carries on). A function that
needs no derivatives is therefore compiled by :func:`compiled_now` instead: CasADi writes
the C source, Python runs the compiler as a subprocess (a Ctrl-C stops it and raises
``KeyboardInterrupt`` as anywhere else) and CasADi loads the library.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from typing import Any

import casadi as ca

# -O2 compiles ~50 % longer for no measurable speed-up; no FMA contraction keeps the
# compiled arithmetic identical to CasADi's interpreter.
FLAGS = ["-O1", "-ffp-contract=off"]
_DIRECTORY: str | None = None
_COUNTER = itertools.count()


def directory() -> str:
    """The per-process directory compiled code goes to (made on first use)."""
    global _DIRECTORY
    if _DIRECTORY is None:
        _DIRECTORY = tempfile.mkdtemp(prefix="vimpc_jit_")
        atexit.register(shutil.rmtree, _DIRECTORY, ignore_errors=True)
    return _DIRECTORY + os.sep


def options(derivatives: int = 0) -> dict[str, Any]:
    """CasADi function options that compile it, and its derivative functions up to order
    ``derivatives`` when a solver asks for them."""
    opts: dict[str, Any] = {
        "jit": True,
        "compiler": "shell",
        "jit_cleanup": False,
        "jit_options": {
            "flags": FLAGS,
            "directory": directory(),
            "cleanup": False,
            "verbose": False,
        },
    }
    if derivatives > 0:
        opts["der_options"] = options(derivatives - 1)
    return opts


def compiled(fn: ca.Function, derivatives: int = 0) -> ca.Function | None:
    """``fn`` as compiled C with the same inputs and outputs, or None when it has no SX form
    (a rootfinder inside) or no C compiler works. Its first ``derivatives`` orders of
    derivative functions are compiled when first asked for."""
    try:
        sx = fn.expand()
    except RuntimeError:
        return None
    args = sx.sx_in()
    try:
        return ca.Function(
            fn.name(), args, sx.call(args), fn.name_in(), fn.name_out(), options(derivatives)
        )
    except RuntimeError:
        return None


def compiled_now(fn: ca.Function) -> ca.Function | None:
    """``fn`` (no derivatives needed) as compiled C with the same name, inputs and
    outputs, or None when no C compiler works. The compiler runs as a Python subprocess, so
    a Ctrl-C (to the process or its group) raises ``KeyboardInterrupt`` here rather than
    being ignored by ``system()`` or turned into a fallback to the interpreter."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return None
    # a unique base name per compile: a loaded library is never overwritten
    base = os.path.join(directory(), f"{fn.name()}_{os.getpid()}_{next(_COUNTER)}")
    generator = ca.CodeGenerator(os.path.basename(base) + ".c", {"with_header": False})
    generator.add(fn)
    generator.generate(directory())
    try:
        done = subprocess.run(
            [compiler, "-fPIC", "-shared", *FLAGS, base + ".c", "-o", base + ".so"],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if done.returncode == -signal.SIGINT:  # a Ctrl-C to the process group stopped it
        raise KeyboardInterrupt
    if done.returncode != 0:
        return None
    try:
        return ca.external(fn.name(), base + ".so")
    except RuntimeError:
        return None
