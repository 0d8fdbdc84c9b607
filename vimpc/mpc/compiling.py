"""Compiling a controller's functions to C: what ``jit = "auto"`` means for a solver, the
stage function kept as one call in a compiled NLP, the NLP solver loaded from its cached
library (:func:`vimpc._jit.cached_library`), and the stage function compiled alone
(``jit = "model"``)."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import casadi as ca

from vimpc import _jit
from vimpc.dynamics import DiscreteModel
from vimpc.mpc.options import NLPSOL_SOLVERS
from vimpc.mpc.tube import keeps_mx

#: A compiled NLP is expanded to scalar operations when the model's stage function has at
#: most this many (the nominal models: 110-659; the Hamel rolling disk's residual: 1,293;
#: GP-VI models with 100 support points: 5,806-13,902); a heavier stage is compiled once and
#: called per stage. At -O1, on the GP-VI cart-pole the expanded NLP took 310 s to compile
#: and solved in 7.5 ms (median), the called one 30 s and 6.5 ms; on the Hamel rolling disk
#: the called one solves in 5.6 ms against 7.7 ms (the same iterates, 6 episodes
#: interleaved); on the nominal cart-pole the expanded one solves in 0.71 ms against
#: 0.91 ms, on the nominal four-bar (659) in 1.04 ms against 1.18 ms.
EXPAND_LIMIT = 1000
#: the solvers whose NLP ``jit = "nlp"`` compiles into one cached library (``condensed``: the
#: NLP of its cold starts, with its own functions beside it)
CACHED_SOLVERS = (*NLPSOL_SOLVERS, "condensed")


def resolved_jit(jit: str, solver: str, model: DiscreteModel) -> str:
    """``jit`` with ``"auto"`` made concrete for ``solver`` and ``model`` (see
    :class:`~vimpc.mpc.MPC`): ``"nlp"`` where a C compiler runs, for an NLP solver and for
    ``condensed`` (its linearisation too: 0.53 ms a call against 0.65 ms interpreted on the
    four-bar CLNN), ``"none"`` for ``rti``. A model written with dense products (a network's
    layers, :func:`~vimpc.mpc.tube.keeps_mx`) is compiled only where its products, and those
    automatic differentiation derives from them, run on CasADi's OpenBLAS in the generated C
    (:func:`vimpc._jit.dense_products_on_blas`): on CasADi's own loops the CLNN cart-pole of
    ``cartpole_clnn_safe.toml`` (2 x 64 network) solved in 146 ms median compiled against
    56 ms interpreted (3 episodes); on OpenBLAS, ``results/benchmarks/clnn_mpc.md``."""
    if jit != "auto":
        return jit
    if (
        os.environ.get("VIMPC_JIT", "").strip().lower() == "none"
        or solver not in CACHED_SOLVERS
        or (keeps_mx(model) and not _jit.dense_products_compile())
    ):
        return "none"
    return "nlp" if _jit.compiler() is not None else "none"


def called_stage(model: DiscreteModel, transcription: str) -> tuple[DiscreteModel, bool]:
    """``model`` with its stage function expanded to SX and marked to stay a call in the
    NLP, when it is heavier than :data:`EXPAND_LIMIT` operations; whether it was."""
    name = "step" if transcription == "step" else "residual"
    fn = getattr(model, name)
    try:
        sx = fn.expand()
    except RuntimeError:  # a Newton loop inside: the NLP is not expanded anyway
        return model, False
    if sx.n_instructions() <= EXPAND_LIMIT:
        return model, False
    args = sx.sx_in()
    # CasADi takes a function's forward (adjoint) directions from its whole Jacobian when
    # jac_penalty times its inputs' (outputs') nonzeros is below their number. At 0.5 the
    # constraint Jacobian's forward sweeps (one per colour) become one call of the stage's
    # SX Jacobian (Hamel rolling disk: 6,033 operations a stage against 14,493 for its 12
    # directions), while a gradient's single adjoint stays a reverse sweep. The derivatives
    # of its derivative functions (the Hessian's forward sweeps over the adjoint) come from
    # their whole Jacobians: one SX Jacobian per stage rather than a sweep per colour.
    # Measured with the same iterates: the whole-Jacobian Hessian took 0.51 against 0.65 ms
    # a call on the GP-VI cart-pole; jac_penalty 0.5 cut the solves' median by 6 % there
    # and on the Hamel disk.
    options = {"jac_penalty": 0.5, "der_options": {"jac_penalty": 0}}
    # the parameters are not the NLP's variables: no derivative by them (a model whose
    # learned numbers are its p, an MLP of 2 x 32, had a stage Hessian 25x the code)
    options["is_diff_in"] = [name != "p" for name in fn.name_in()]
    called = ca.Function(fn.name(), args, sx.call(args), fn.name_in(), fn.name_out(), options)
    return dataclasses.replace(model, **{name: called}), True


def compiled_stage(model: DiscreteModel, transcription: str) -> tuple[DiscreteModel, bool]:
    """``model`` with the stage function of ``transcription`` compiled (derivatives up to
    the Hessian's on demand), and whether that worked."""
    name = "step" if transcription == "step" else "residual"
    fn = _jit.compiled(getattr(model, name), derivatives=2)
    if fn is None:
        warnings.warn(
            f"jit='model': the model's {name} function was not compiled (it has no SX form, "
            "such as a step with a Newton loop inside, or the C compiler failed or was "
            "stopped); the controller evaluates it interpreted, which is slower",
            RuntimeWarning,
            stacklevel=3,
        )
        return model, False
    return dataclasses.replace(model, **{name: fn}), True


def compiled_nlpsol(
    solver: ca.Function, plugin: str, options: list[dict[str, Any]]
) -> list[ca.Function] | None:
    """``solver`` (an interpreted ``nlpsol`` of ``plugin``) loaded from its compiled library,
    from the compile cache or compiled now, once per options table in ``options`` (the
    library holds the NLP's functions, not the solver's options); None (with a warning
    where something failed) when no library could be made or loaded."""
    library = _jit.cached_library(
        lambda: solver.generate_dependencies("vimpc_nlp.c"), "controller's NLP"
    )
    if library is None:
        return None
    try:
        return [
            ca.nlpsol(
                solver.name(),
                plugin,
                str(library),
                {k: v for k, v in opts.items() if k != "expand"},
            )
            for opts in options
        ]
    except RuntimeError as exc:
        warnings.warn(
            f"jit='nlp': the compiled NLP {str(library)!r} could not be loaded "
            f"({str(exc).splitlines()[-1]}); the controller solves it interpreted",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
