"""Compiling CasADi functions to C with the system's C compiler (CasADi's JIT).

One place for the compiler flags and the directory the generated sources and libraries go
to: a per-process temporary directory, removed when the process exits (CasADi's own
cleanup is off: it would run after the directory is gone when a function outlives the
exit handlers).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import casadi as ca

# -O2 compiles ~50 % longer for no measurable speed-up; no FMA contraction keeps the
# compiled arithmetic identical to CasADi's interpreter.
FLAGS = ["-O1", "-ffp-contract=off"]
_DIRECTORY: str | None = None


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
