"""The controller's options, declared once (:data:`SETTINGS`), and the checks of their
values that do not need the model's maths. Where :class:`~vimpc.mpc.controller.MPC` and the
scenario's checks refuse the same thing they call one function here (``error`` and ``prefix``
name the exception and the keys' table)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vimpc import _checks
from vimpc._settings import NONNEGATIVE, POSITIVE, REQUIRED, Acts, Rule, Setting
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc.solvers import HESSIANS, INTERIOR_POINT, QP_SOLVERS, SOLVERS
from vimpc.mpc.tube import ERRORS

TIGHTENINGS = ("none", "tube")
JITS = ("auto", "none", "model", "nlp")
#: the solvers that are one CasADi ``nlpsol``, whose NLP ``jit`` compiles once per problem
NLPSOL_SOLVERS = ("sqpmethod", "fatrop", "ipopt")
#: the solvers of the SQP presets, and the options that only they read
SQP_SOLVERS = ("sqpmethod", "rti", "condensed")
SQP_OPTIONS = ("qpsol", "hessian")
#: the solvers that can start the real-time iteration, and the options only ``rti`` reads
RTI_STARTS = ("none", "fatrop", "ipopt", "sqpmethod")
RTI_OPTIONS = ("rti_start", "rti_regularization")
#: the solvers that can make ``condensed``'s cold starts
CONDENSED_STARTS = ("sqpmethod", "fatrop", "ipopt")
#: the options that only some solvers read, and those solvers
SOLVER_OPTIONS = {
    **dict.fromkeys(RTI_OPTIONS, ("rti",)),
    "condensed_start": ("condensed",),
    "warm_barrier": INTERIOR_POINT,
    "warm_max_iter": (*INTERIOR_POINT, "condensed"),
}
#: every option that only some solvers read, the SQP presets' among them, and its readers
OPTION_READERS = {**SOLVER_OPTIONS, **dict.fromkeys(SQP_OPTIONS, SQP_SOLVERS)}
#: where the tube's options act (``Setting.acts``)
WITH_TUBE = Acts("tightening", ("tube",))
WITH_FEEDBACK = (WITH_TUBE, Acts("tube", ("feedback",)))

#: The controller's options, declared once: :class:`~vimpc.mpc.controller.MPC`'s keyword
#: defaults and checks, the scenario's ``[controller]`` table (its schema, its validation, the
#: ``vimpc schema`` output and ``scenarios/README.md``) and
#: :func:`vimpc.pipeline.build_controller` read this table. The docs are written for scenario
#: files; ``MPC`` also takes a scalar or a matrix for ``tube_Q`` and ``tube_R`` and ``None`` for
#: ``transcription`` (the same as ``"auto"``).
SETTINGS: dict[str, Setting] = {
    "horizon": Setting(int, REQUIRED, "prediction steps", rule=POSITIVE),
    "solver": Setting(
        str,
        "sqpmethod",
        "NLP solver; `condensed`: Gauss–Newton SQP condensed onto the inputs and slacks "
        "(implicit transcription; cold starts by `condensed_start`, and a warm solve it does "
        "not finish too, unless `time_budget` or `warm_max_iter` is set: then its "
        "single-shooting descent in the rest of the budget, whose last iterate is used, else "
        "the fallback input; `tol` its step [input units])",
        choices=SOLVERS,
    ),
    "transcription": Setting(
        str,
        "auto",
        "`implicit` (integrator residual as constraints), `step`, or `auto` (implicit "
        "when the model has a residual)",
        choices=("auto", "implicit", "step"),  # the same as TRANSCRIPTIONS and "auto"
    ),
    "qpsol": Setting(
        str,
        "auto",
        "QP solver of `sqpmethod`/`rti`; `auto`: `qrqp` for `sqpmethod`, `daqp` for the "
        "real-time iteration's condensed QP",
        choices=QP_SOLVERS,
        acts=(Acts("solver", OPTION_READERS["qpsol"]),),
    ),
    "hessian": Setting(
        str,
        "gauss-newton",
        "for `sqpmethod`/`rti`",
        choices=HESSIANS,
        acts=(Acts("solver", OPTION_READERS["hessian"]),),
    ),
    "rti_start": Setting(
        str,
        "none",
        "`rti` only: `none` (real-time iterations from the cold guess: the measured state "
        "held), or the solver that solves an episode's first sample (and any sample after a "
        "failed one) to convergence before one real-time iteration per sample takes over "
        "(the cart-pole swing-up, seeds 0-49: 49/50 with `none`, 46/50 with `fatrop`; "
        "results/rti)",
        choices=RTI_STARTS,
        acts=(Acts("solver", OPTION_READERS["rti_start"]),),
    ),
    "condensed_start": Setting(
        str,
        "sqpmethod",
        "`condensed` only: the solver, to convergence (tol at most 1e-6), of a call without a "
        "plan to start from (an episode's first plan, made before its clock, or a call after "
        "a solve neither solver finished) and, without `time_budget` and `warm_max_iter`, of "
        "the warm solves `condensed` does not finish",
        choices=CONDENSED_STARTS,
        acts=(Acts("solver", OPTION_READERS["condensed_start"]),),
    ),
    "rti_regularization": Setting(
        float,
        0.0,
        "`rti` only: added to the diagonal of the Gauss–Newton Hessian (Levenberg–Marquardt)",
        rule=NONNEGATIVE,
        acts=(Acts("solver", OPTION_READERS["rti_regularization"]),),
    ),
    "warm_barrier": Setting(
        float,
        None,
        "`fatrop`/`ipopt` only: the barrier parameter (`mu_init`) at which a solve from the "
        "previous plan starts, its variables pushed off their bounds by at most 1e-6 "
        "(fatrop's `bound_push`; ipopt's warm start already does); an episode's first plan "
        "and a solve after a failed one start at the solver's own (0.1), except that a "
        "solve from the previous plan that failed is continued from its last iterate. Not "
        "set: every solve at the solver's own. On the Hamel rolling disk 1e-3 halves the "
        "median solve; on the nominal cart-pole it fails more solves "
        "(results/benchmarks/warm_barrier.md)",
        rule=POSITIVE,
        acts=(Acts("solver", OPTION_READERS["warm_barrier"]),),
    ),
    "warm_max_iter": Setting(
        int,
        None,
        "`fatrop`/`ipopt`/`condensed` only: the iteration limit of a solve from the "
        "previous plan (an episode's first plan and a solve from scratch keep `max_iter`): "
        "the bound on a real-time solve that is the same on every computer (fatrop has no "
        "time limit). A solve stopped there uses its iterate where that meets the "
        "constraints (`ITERATION_LIMIT`), else applies the fallback input (`FAILED`) and the "
        "next call continues it from its last iterate within the same limit (a continuation "
        "that fails too: the next solve from scratch, at `max_iter`). `condensed`: the "
        "iterations of a warm call's tries and single-shooting descent together, shared as "
        "`time_budget` is (40 % to the first try, up to 80 % with the second), the descent's "
        "last iterate used where it meets the constraints; its warm solves then never go to "
        "`condensed_start`. Not set (`none`): `max_iter`",
        rule=POSITIVE,
        unset="none",
        acts=(Acts("solver", OPTION_READERS["warm_max_iter"]),),
    ),
    "max_iter": Setting(int, 50, "iteration budget per solve", rule=POSITIVE),
    "tol": Setting(float, 1e-4, "solver tolerance", rule=POSITIVE),
    "period": Setting(
        float,
        None,
        "the sampling period [s]: a call (tube, solve and Python work) that takes longer is "
        "counted `late` (default: the model's dt; in a scenario, the env's dt)",
        rule=POSITIVE,
    ),
    "time_budget": Setting(
        float,
        None,
        "wall time [s] a solve may take, at most `period`; kept by the solver (ipopt's "
        "`max_wall_time`, an iteration callback for `sqpmethod`/`rti`, `condensed`'s own "
        "clock, not for its cold starts; `fatrop` has no time limit and is refused: see "
        "`warm_max_iter`): a solve stopped by it reports `TIME_LIMIT` and applies the "
        "fallback input (`condensed`: its descent's last iterate where it meets the "
        "constraints, `ITERATION_LIMIT`); not set: none",
        rule=POSITIVE,
        unset="none",
    ),
    "jit": Setting(
        str,
        "auto",
        "compile to C when the controller is built: `nlp` (the whole NLP, compiled once per "
        "problem and cached on disk; with `condensed` its own functions too), `model` (the "
        "model's stage function, in each process), `none`; `auto`: `nlp` for `fatrop`, "
        "`ipopt`, `sqpmethod` and `condensed` where a C compiler runs (and `VIMPC_JIT` is not "
        "`none`), else `none`; for a model with a network's dense products only where CasADi "
        "ships the OpenBLAS the compiled products run on",
        choices=JITS,
    ),
    "tightening": Setting(
        str,
        "none",
        "`tube`: tighten every observation constraint by the model's bound propagated "
        "along the previous plan",
        choices=TIGHTENINGS,
    ),
    "tube": Setting(
        str,
        "open_loop",
        "read only with `tightening = 'tube'`: `open_loop` (the planned inputs as they "
        "are, the error in a box) or `feedback` (an LQR feedback on the plan's "
        "linearisation, the error in an ellipsoid, the inputs tightened by the feedback's "
        "share)",
        choices=("open_loop", "feedback"),  # the same as vimpc.mpc.tube.TUBES
        acts=(WITH_TUBE,),
    ),
    "tube_memory": Setting(
        float,
        0.0,
        "read only with `tightening = 'tube'`: how much of the previous call's tube a "
        "narrower new one keeps: each margin is the tube along the guess plus `tube_memory` "
        "times what the previous call's margin at the same stage had in excess of it, never "
        "less than the tube along the guess (0: that tube alone). A tube along the previous "
        "plan can alternate between two plans, a bold one whose tube is wide and a timid one "
        "whose tube is narrow; this damps it (the GP-VI cart-pole's swing-up: "
        "results/benchmarks/tube_memory.md)",
        rule=Rule(lambda v: 0.0 <= v < 1.0, phrase="in [0, 1)"),
        acts=(WITH_TUBE,),
    ),
    "tube_Q": Setting(
        list,
        None,
        "the feedback tube's LQR weights on the observation (diagonal; default the cost's "
        "Q; read only with `tube = 'feedback'`)",
        items=float,
        rule=NONNEGATIVE,
        acts=WITH_FEEDBACK,
    ),
    "tube_R": Setting(
        list,
        None,
        "the feedback tube's LQR weights on the input (diagonal; default the cost's R; "
        "read only with `tube = 'feedback'`)",
        items=float,
        rule=POSITIVE,
        acts=WITH_FEEDBACK,
    ),
    "tube_errors": Setting(
        str,
        "box",
        "the feedback tube's reading of the bound: `box` (every error in it) or `gaussian` "
        "(quantiles of independent Gaussian errors; each row held with probability "
        "1 - delta per stage, as in cautious GP-MPC; read only with `tube = 'feedback'`)",
        choices=ERRORS,
        acts=WITH_FEEDBACK,
    ),
    "tube_lipschitz": Setting(
        float,
        None,
        "a fixed Lipschitz constant for the open-loop tube instead of the step's Jacobian",
        rule=POSITIVE,
        acts=(WITH_TUBE, Acts("tube", ("open_loop",))),
    ),
}
#: the options' defaults, as ``MPC``'s keyword arguments take them
DEFAULTS = {key: s.default for key, s in SETTINGS.items() if s.default is not REQUIRED}
#: the weights an ``MPC`` argument takes as matrices too (checked by ``weight_matrix``)
MATRICES = ("tube_Q", "tube_R")


def check_option(key: str, value: Any) -> Any:
    """``value`` of the option ``key`` checked against :data:`SETTINGS` as a Python argument
    (numpy numbers accepted), or an :class:`InputError` naming the key, the value and what
    the table allows."""
    setting = SETTINGS[key]
    if setting.default is None and (value is None or (setting.unset and value == setting.unset)):
        return None
    if key == "time_budget":
        return _time_budget(value)
    if setting.choices:
        return _checks.one_of(key, value, setting.choices)
    if setting.rule is POSITIVE and setting.kind is int:
        return _checks.positive_int(key, value)
    if setting.rule is POSITIVE and setting.kind is float:
        return _checks.positive(key, value)
    return setting.check(key, value, InputError)


def _time_budget(value: Any) -> float:
    """The time budget in seconds, or an InputError naming it (None and the setting's
    ``unset`` word are :func:`check_option`'s)."""
    bad = isinstance(value, (bool, np.bool_, str, bytes))
    try:
        budget = math.nan if bad else float(value)
    except (TypeError, ValueError):
        budget = math.nan
    if not math.isfinite(budget) or budget <= 0.0:
        raise InputError(
            "time_budget must be a positive number: the finite wall time [s] a solve may "
            f'take, got {value!r}; leave time_budget unset (None), or "none", for no budget'
        )
    return budget


def check_within_period(
    budget: float | None,
    period: float,
    where: str,
    error: type[Exception] = InputError,
    prefix: str = "",
) -> None:
    """Refuse a time budget ``budget`` (None: none) longer than the sampling period ``period``
    [s]; ``where`` says where the period came from, ``prefix`` names the keys' table in the
    message (``"controller."``)."""
    if budget is not None and budget > period:
        raise error(
            f"{prefix}time_budget = {budget!r} s exceeds the sampling period {period!r} s "
            f"({where}): a solve must end within one period; lower {prefix}time_budget, or "
            f"set {prefix}period if the controller is called less often"
        )


def ignored_sqp_options(solver: str, options: Mapping[str, Any]) -> list[str]:
    """The options of the SQP presets (``qpsol``, ``hessian``) that ``options`` sets away from
    their defaults while ``solver`` is not an SQP one, where they would do nothing."""
    if solver in SQP_SOLVERS:
        return []
    return [key for key in SQP_OPTIONS if options[key] != SETTINGS[key].default]


def ignored_solver_options(solver: str, options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The options that some solvers alone read (:data:`SOLVER_OPTIONS`: ``rti_start``,
    ``rti_regularization``, ``condensed_start``, ``warm_barrier``, ``warm_max_iter``) that
    ``options`` sets away from their defaults while ``solver`` is another: ``(option, the
    solvers that read it)``, the solvers quoted and joined by "or" (``"'fatrop' or
    'ipopt'"``)."""
    return [
        (key, " or ".join(repr(r) for r in readers))
        for key, readers in SOLVER_OPTIONS.items()
        if solver not in readers and options[key] != SETTINGS[key].default
    ]


def check_obs_names(model: DiscreteModel, names: Sequence[str] | None) -> tuple[str, ...]:
    """The names of ``model``'s observation entries: ``names`` checked (one string per
    entry), or by default the state names when the observation is the state, else
    ``obs0, obs1, ...``."""
    if names is None:
        if model.nobs == model.nx:
            return tuple(model.state_names)
        return tuple(f"obs{i}" for i in range(model.nobs))
    if isinstance(names, str) or len(names) != model.nobs:
        raise InputError(
            f"obs_names must be {model.nobs} names (one per observation entry), got {names!r}"
        )
    if not all(isinstance(n, str) for n in names):
        raise InputError(f"obs_names must be strings, got {list(names)!r}")
    return tuple(names)
