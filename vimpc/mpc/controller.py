"""The model-predictive controller: built once, then called every step.

``MPC(model, horizon, cost, constraints=None, **options)``

Args:
    model: the prediction model (the controller sees nothing else).
    horizon: number of steps ``N`` (each ``model.dt``).
    cost: a :class:`Cost` on the observation (its energy shaping, if any, on the
        model's ``energy``).
    constraints: a :class:`Constraints` (input bounds, observation bounds, path
        constraints). Its safety rows ``h(obs) >= 0`` (finite observation lower
        bounds, finite upper bounds, then the rows of every path constraint) are
        :attr:`safety_rows` (a :class:`~vimpc.mpc.problem.SafetyRows`), with
        :attr:`safety_function` and :attr:`safety_names`.
    solver: ``"sqpmethod"`` (default: SQP with a Gauss–Newton Hessian and the
        QP solver ``qpsol``; the fastest when it converges), ``"fatrop"``
        (interior point exploiting the stage structure; the most robust on
        swing-ups with state constraints), ``"ipopt"`` or ``"rti"`` (the real-time
        iteration, :class:`~vimpc.mpc.solvers.RealTimeIteration`: one Gauss–Newton
        linearisation at the shifted plan and one condensed QP per call, split into
        :meth:`prepare` before the state arrives and a feedback phase in the call
        (``MPCResult.preparation_time``, ``feedback_time``); ``rti_start`` may solve a
        cold start to convergence. With the exact Hessian, a time budget,
        ``sqpmethod`` options or a transcription it cannot condense it is ``sqpmethod``
        stopped after one iteration, unsplit), or ``"condensed"``
        (:class:`~vimpc.mpc.condensed.CondensedSQP`: the Gauss–Newton SQP of
        ``sqpmethod`` on the implicit transcription with the states eliminated, to
        convergence, from the shifted plan; ``tol`` is then its last input and slack
        step, and every predicted state solves the model's step equations to 1e-8 and
        its holonomic constraints to 1e-11; cold starts are ``condensed_start``'s, to
        ``min(tol, 1e-6)``, and so is a warm solve it does not finish, unless a
        ``time_budget`` or ``warm_max_iter`` is set: that solve then gets its
        single-shooting descent's last iterate where that meets the constraints, else the
        fallback input, its next call starting from the plan shifted).
    transcription: ``"implicit"`` (the model's residual as equality
        constraints; no Newton loop inside the NLP's functions) or ``"step"``
        (multiple shooting on ``model.step``). Default ``"auto"`` (``None`` too):
        ``"implicit"`` when the model has a residual, else ``"step"``.
    qpsol: QP solver for ``sqpmethod``/``rti``: ``"auto"`` (default: ``"qrqp"`` for
        ``sqpmethod``, ``"daqp"`` for the real-time iteration's dense condensed QP),
        ``"qrqp"``, ``"osqp"``, ``"daqp"``, ``"hpipm"``, ``"qpoases"``.
    hessian: for ``sqpmethod``/``rti``: ``"gauss-newton"`` (default; the cost is
        least squares) or ``"exact"`` (convexified by eigenvalue reflection).
    rti_start: for ``rti``: ``"none"`` (default: a cold start, the first call after
        :meth:`reset` or after a failed solve, is one real-time iteration from the
        measured state held), or the solver (``"fatrop"``, ``"ipopt"``,
        ``"sqpmethod"``; with ``max_iter`` and ``tol``) that solves a cold start to
        convergence (on the cart-pole swing-up, seeds 0-49, ``"fatrop"`` swung up 46 of
        50 against 49 with ``"none"``: ``results/rti``).
    rti_regularization: for ``rti``: ``lambda >= 0`` added to the diagonal of the
        Gauss–Newton Hessian (Levenberg–Marquardt; default 0).
    condensed_start: for ``condensed``: the solver of a call without a plan to start
        from (an episode's first plan, :meth:`start`, or a call after a solve it did not
        finish either) and, without a time or an iteration budget (``warm_max_iter``),
        of the warm solves the condensed SQP does not finish: ``"sqpmethod"`` (default, with ``qpsol``), ``"fatrop"`` or
        ``"ipopt"``.
    warm_barrier: for ``fatrop``/``ipopt``: the barrier parameter ``mu_init`` at which a
        solve from the previous plan starts (fatrop's ``bound_push`` then at most
        :data:`~vimpc.mpc.solvers.WARM_BOUND_PUSH`); the first plan (:meth:`start`) and
        a solve after a failed one start at the solver's own (0.1), from scratch, but
        where the failed one was a solve from the previous plan: the next call continues
        from its last iterate, with the warm instance. ``None`` (default): every solve
        at the solver's own. An interior-point method restarted at 0.1 spends iterations
        walking back to a plan it already had; a small start saves them where the plan
        changes little between samples, and fails more solves where it changes much
        (``results/benchmarks/warm_barrier.md``).
    warm_max_iter: for ``fatrop``/``ipopt``/``condensed``: the iteration limit of a solve
        from the previous plan; the first plan (:meth:`start`) and a solve from scratch
        keep ``max_iter``. The bound on a real-time solve that is the same on every
        computer (fatrop has no time limit, ``time_budget``). ``condensed``: the
        iterations of a warm call's tries and descent together, shared as a time budget
        is (:data:`~vimpc.mpc.solving.TRY_SHARE`). ``fatrop``/``ipopt``: a solve it stops is ``ITERATION_LIMIT`` where the iterate
        meets the constraints (the iterate is used), else ``FAILED``: the fallback
        input, and the next call continues the stopped solve from its last iterate
        (moved on by a stage), within the same limit; a continuation that fails too
        leaves the call after it to a solve from scratch. ``None`` (default):
        ``max_iter``.
    max_iter: iteration budget per solve; ``tol``: solver tolerance.
    period: the sampling period [s], the time between two calls (default ``model.dt``:
        the controller is called once per model step). A call whose wall time (tube,
        solve and the Python work around them: what a robot waits for) exceeds it is
        ``late`` (:attr:`MPCResult.late`, with :attr:`MPCResult.call_time`).
    time_budget: wall time [s] a solve may take (``None``: no budget; 0 or less is
        refused), at most ``period``. The solver keeps it: ipopt through its
        ``max_wall_time``, ``sqpmethod``/``rti`` through an iteration callback that
        stops the solve at the first iteration past the budget (both check between
        iterations, so a solve ends at most one iteration late); ``condensed`` begins
        no iteration that would end past it by its longest one so far (its cold starts,
        ``condensed_start``'s, are not held to it); ``fatrop`` has no time limit and is
        refused. A solve it stops reports ``Status.TIME_LIMIT`` and applies
        the fallback input, as a failed solve does; one that converged in its last
        iteration past the budget reports ``Status.LATE`` and is used.
    safe_input: the input applied when a solve fails and no previous plan
        exists (default: zero clipped to the input bounds).
    solver_options: CasADi ``nlpsol`` options merged over the preset (nested
        tables such as ``{"fatrop": {"mu_init": 0.01}}`` merge key by key). A key
        the solver does not know, at the top or in the ``ipopt``, ``fatrop`` or
        ``qpsol_options`` table, or a value of the wrong type raises
        :class:`~vimpc.errors.InputError` naming it, when the controller is built.
    jit: compile to C with the system's C compiler when the controller is built:
        ``"auto"`` (default): ``"nlp"`` for ``fatrop``, ``ipopt`` and ``sqpmethod``
        where a C compiler runs, else ``"none"`` (a model with a network's dense
        products, whose interpreted products run on a BLAS and beat compiled loops;
        no compiler: said once per process; the environment variable
        ``VIMPC_JIT=none`` also keeps ``"auto"`` interpreted, as the test suite does);
        ``"none"``: CasADi's interpreter;
        ``"model"``: the model's stage function, ``residual`` or ``step``, and its
        derivatives as the solver asks for them (the NLP around it interpreted and
        unexpanded; compiled in each process); ``"nlp"``: all of the NLP's
        functions, the fastest solves. For ``fatrop``, ``ipopt`` and ``sqpmethod``
        the NLP is compiled once per problem: the library is cached on disk by a hash
        of its C source (the model and the problem) and loaded in milliseconds by
        later runs and worker processes (:func:`vimpc._jit.cached_library`; the
        first compile takes ~10 s for a nominal model, ~45 s for a GP-VI model with
        100 support points, at -O3). The NLP is expanded to scalar operations when the
        model's stage function has at most
        :data:`~vimpc.mpc.compiling.EXPAND_LIMIT` of them, else its
        stages call the (expanded) stage function, which compiles ~10x faster for a
        heavy model and solves faster too. ``"nlp"`` with ``rti`` or ``condensed``
        compiles its functions in each process. A stage function with no SX form (a
        Newton loop inside) or a missing compiler leaves ``"model"`` interpreted
        (:attr:`model_compiled` says which); a compile that fails leaves ``"nlp"``
        interpreted, with a warning (:attr:`nlp_compiled` says which).
    tightening: ``"none"`` or ``"tube"``: tighten every safety row at stages
        ``1..N`` by the model's ``bound`` propagated along the plan (below).
    tube: with ``"tube"``, how the bound is propagated: ``"open_loop"`` (default; the
        planned inputs applied as they are, the deviation in a box) or ``"feedback"``
        (an ancillary LQR feedback ``K_k`` on the plan's linearisation, the deviation in
        an ellipsoid; the inputs are tightened by the feedback's share too).
    tube_Q, tube_R: with ``tube="feedback"``, the LQR's weights on the observation
        (scalar, diagonal or matrix; positive semidefinite) and on the input (positive
        definite). Default: the cost's ``Q`` and ``R``.
    tube_errors: with ``tube="feedback"``, ``"box"`` (default: the ellipsoid holds every
        error in the bound's box) or ``"gaussian"`` (the bound read as quantiles of
        independent Gaussian errors, each row held with probability ``1 - delta`` per
        stage: the chance constraints of cautious GP-MPC; see :mod:`vimpc.mpc.tube`).
    tube_memory: with ``tightening="tube"``, ``a`` in [0, 1): each margin of a call is
        ``t + a max(0, t_prev - t)``, ``t`` the tube along the guess and ``t_prev`` the
        previous call's margin at the same stage (default 0: ``t`` alone; a tube that
        does not change between calls stays as it is). The tube is
        computed along the previous plan, so plan and tube can alternate between a bold
        plan with a wide tube and a timid one with a narrow tube; this damps the
        alternation and never narrows a margin below ``t``.
    tube_lipschitz: with ``tube="open_loop"``, a Lipschitz constant ``L`` of ``step`` in
        the infinity norm that propagates the bound as ``L max(e_k)`` instead of
        through the Jacobian ``|A_k| e_k``.
    obs_names: names of the observation entries for :attr:`safety_names`
        (default: the model's state names when the observation is the state,
        else ``obs0, obs1, ...``).

The options from ``horizon`` to ``tube_lipschitz`` are declared once in
:data:`~vimpc.mpc.options.SETTINGS` (:attr:`MPC.settings`): their defaults here, their
allowed values and the scenario's ``[controller]`` table come from it (``vimpc schema``
lists them).

Every argument is checked before anything is built; a wrong one (an unknown keyword
too, with a "did you mean") raises :class:`~vimpc.errors.InputError` naming it. A
problem of more than :data:`~vimpc.mpc.problem.MAX_DECISION_VARIABLES` decision
variables is refused with the time its build would take.

Calling ``controller(obs, t=0.0)`` solves from the observation at time ``t``
(used by time-varying references) and returns an :class:`MPCResult`. A failed,
infeasible or late solve never raises: on failure the input is the next input
of the previous plan (shifted), or ``safe_input`` when there is none. Arguments
that cannot be solved from (a NaN or infinite entry of ``obs`` or ``p``, a time
``t`` that is not a finite number) raise :class:`~vimpc.errors.InputError`.

Tube tightening (``tightening="tube"``, :mod:`vimpc.mpc.tube`): before each solve, along
the initial guess (the previous plan shifted by one stage; on a cold start the measured
state held under the safe input), the bound ``w_k = bound(x_k, u_k, p)`` is propagated
from ``e_0 = 0`` to a set holding the deviation at every stage, and safety row ``j`` must
hold at stage ``k`` with the margin ``t_{k,j}`` (``MPCResult.tube``), the inputs at stage
``k`` with the margin ``MPCResult.tube_inputs[k]``. ``tube="open_loop"``: the box
``e_{k+1} = |A_k| e_k + w_k``, margin ``|dh_j/dx| e_k``, inputs untightened.
``tube="feedback"``: the time-varying LQR ``K_k`` of the guess's linearisation
``(A_k, B_k)``, ``Sigma_{k+1} = (A_k + B_k K_k) Sigma_k (A_k + B_k K_k)^T + nx diag(w_k^2)``,
margins ``sqrt(g^T Sigma_k g)`` for a row of gradient ``g`` and
``sqrt(K_k[i] Sigma_k K_k[i]^T)`` for input ``i``.

What is guaranteed: the state measured next lies within the bound of stage 1's
prediction whenever that step's error lies within the bound (probability ``>= 1 - delta``
for transitions exchangeable with the calibration ones), and every tube holds that box
at stage 1; so a safety row linear in the state that the plan meets at stage 1 with its
margin holds on the true state at the next step (first order for a nonlinear row). Past
stage 1 the tubes are first-order predictions along the guess: the open-loop box holds
the worst case of the linearised system under the planned inputs; the feedback
ellipsoid (``tube_errors="box"``) adds second moments (the covariance bound for errors
independent from step to step), which is smaller than the worst case over all error
sequences in the boxes; ``tube_errors="gaussian"`` holds each row with probability
``1 - delta`` per stage if the errors are independent Gaussians whose quantiles the
bound gives (a model's systematic error is not). The feedback tubes assume the
feedback's inputs fit within the input bounds (they are tightened for it). Nothing
makes later problems feasible.

No cap: where the tightened set of a stage is empty (a bounded observation entry whose
lower and upper margins exceed its range, or an input whose margins exceed its range),
``MPCResult.empty_tube_stages`` counts the stages. Soft rows then report it in
``slack``; for hard observation rows the solver reports the problem infeasible. With
``constraints.soft_bounds`` the feedback's share of the inputs is a soft row as well
(inside the hard input bounds: an empty interval shows in ``slack``); without, the input
bounds themselves are tightened and an empty interval is not solved at all
(``Status.INFEASIBLE``). An infeasible problem applies the fallback input.

A tube that cannot be computed along the guess (a margin NaN or infinite: the model's
bound or the step's linearisation not finite at a stage, the LQR or the ellipsoid
overflowing where the linearisation is uncontrollable, ``R + B^T P B`` singular) is not
solved with: its stages count as empty (margins ``inf``), the problem
is not solved (``Status.INFEASIBLE``, fallback input), and ``MPCResult.failed_tube_stages``
and ``MPCResult.tube_failure`` give the stages and the first cause along the plan.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import casadi as ca
import numpy as np

from vimpc import _checks
from vimpc._interrupt import kept_interrupts
from vimpc._settings import Setting
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc.compiling import (
    CACHED_SOLVERS,
    called_stage,
    compiled_stage,
    resolved_jit,
)
from vimpc.mpc.options import (
    DEFAULTS,
    MATRICES,
    SETTINGS,
    check_obs_names,
    check_option,
    check_within_period,
)
from vimpc.mpc.problem import Constraints, Cost, SafetyRows, check_problem_size
from vimpc.mpc.result import MPCResult, Status
from vimpc.mpc.solving import STRATEGIES
from vimpc.mpc.tightening import make_tightening, shifted, tightening_for
from vimpc.mpc.transcription import SlackCover, n_slacks, transcribe, transcriber_for


def _read(strategy: str, name: str, doc: str) -> property:
    """A read-only attribute of the controller: ``name`` of its ``strategy`` (or of its
    checked options, ``"_options"``)."""

    def get(self):
        owner = getattr(self, strategy)
        return owner[name] if isinstance(owner, dict) else getattr(owner, name)

    return property(get, doc=f"``{name}``: {doc}.")


class MPC:
    """Model-predictive controller on a :class:`DiscreteModel`: a facade over three
    strategies chosen once from the options, a transcription
    (:mod:`vimpc.mpc.transcription`), a solver (:mod:`vimpc.mpc.solving`) and a tightening
    (:mod:`vimpc.mpc.tightening`). Its arguments, the call, the tube and what is guaranteed
    are documented in the module's docstring (:mod:`vimpc.mpc.controller`)."""

    #: the options' declaration (:data:`SETTINGS`)
    settings: ClassVar[Mapping[str, Setting]] = SETTINGS

    def __init__(
        self,
        model: DiscreteModel,
        horizon: int,
        cost: Cost,
        constraints: Constraints | None = None,
        *,
        solver: str = DEFAULTS["solver"],
        transcription: str | None = DEFAULTS["transcription"],
        qpsol: str = DEFAULTS["qpsol"],
        hessian: str = DEFAULTS["hessian"],
        rti_start: str = DEFAULTS["rti_start"],
        rti_regularization: float = DEFAULTS["rti_regularization"],
        condensed_start: str = DEFAULTS["condensed_start"],
        warm_barrier: float | None = DEFAULTS["warm_barrier"],
        warm_max_iter: int | None = DEFAULTS["warm_max_iter"],
        max_iter: int = DEFAULTS["max_iter"],
        tol: float = DEFAULTS["tol"],
        period: float | None = DEFAULTS["period"],
        time_budget: float | None = DEFAULTS["time_budget"],
        safe_input: Any = None,
        solver_options: dict[str, Any] | None = None,
        jit: str = DEFAULTS["jit"],
        tightening: str = DEFAULTS["tightening"],
        tube: str = DEFAULTS["tube"],
        tube_Q: Any = DEFAULTS["tube_Q"],
        tube_R: Any = DEFAULTS["tube_R"],
        tube_errors: str = DEFAULTS["tube_errors"],
        tube_memory: float = DEFAULTS["tube_memory"],
        tube_lipschitz: float | None = DEFAULTS["tube_lipschitz"],
        obs_names: Sequence[str] | None = None,
        **unknown: Any,
    ) -> None:
        checked, constraints = _checked_arguments(dict(locals()), model, cost, constraints)
        self.model, self._options = model, checked
        horizon, solver, transcription = (
            checked[key] for key in ("horizon", "solver", "transcription")
        )
        self.horizon, self.max_iter, self.tol = horizon, checked["max_iter"], checked["tol"]
        self.period = model.dt if checked["period"] is None else checked["period"]
        self.time_budget = checked["time_budget"]
        where = "model.dt" if checked["period"] is None else "period"
        check_within_period(self.time_budget, self.period, where)
        self.solver_name = solver
        #: the solver strategy (:mod:`vimpc.mpc.solving`)
        strategy = STRATEGIES[solver]
        given_options = strategy.check(solver, checked, solver_options)
        self.tightening = checked["tightening"]
        self.jit = resolved_jit(checked["jit"], solver, model)
        chosen = tightening_for({**checked, "tube_Q": tube_Q, "tube_R": tube_R}, model)
        self.obs_names = check_obs_names(model, obs_names)
        self._cost = cost.resolved(model)
        #: the tightening strategy (:mod:`vimpc.mpc.tightening`)
        self._tightening = tight = make_tightening(
            chosen, checked, model, horizon, self._cost, tube_Q, tube_R
        )
        self._cons = constraints.resolved(model.nobs, model.nu)
        #: the safety rows h(obs) >= 0 the tube tightens: layout, names, function, labels
        self.safety_rows = SafetyRows.of(self._cons, self.obs_names)
        tight.attach(self.safety_rows, self._cons)
        self.safe_input = _checked_safe_input(safe_input, self._cons, model.nu)
        transcriber = transcriber_for(transcription, model)
        self.transcription = transcription = transcriber.NAME
        tightened, soft_inputs = tight.active, tight.soft_inputs
        check_problem_size(
            self.horizon,
            model.nx,
            model.nu,
            transcriber.IMPLICIT,
            n_slacks(self.safety_rows, soft_inputs),
        )
        staged, self.model_compiled = (
            compiled_stage(model, transcription) if self.jit == "model" else (model, False)
        )
        # a compiled NLP of a heavy model keeps its stages as calls of the expanded stage
        # function (the expanded NLP compiles ~10x longer and solves no faster)
        # "nlp": one cached library for an nlpsol (condensed: its cold starts' and its own
        # functions), CasADi's per-process JIT for rti
        cached_nlp = self.jit == "nlp" and solver in CACHED_SOLVERS
        stage_calls = False
        if cached_nlp:
            staged, stage_calls = called_stage(model, transcription)
        self._tr = transcribe(
            staged,
            self.horizon,
            self._cost,
            self.safety_rows,
            transcription,
            tightened=tightened,
            soft_input_tube=soft_inputs,
        )
        tight.build(self._tr, self.jit == "nlp")
        has_soft = self._tr.layout.s.size and self._tr.inequality is not None
        self._cover = SlackCover(self._tr) if has_soft else None
        strategy.refuse_problem(transcription, self._cost, hessian)
        self._solving = strategy(solver, checked, given_options)
        expand = self._tr.expandable and not (self.model_compiled or stage_calls)
        self._solving.build(self, expand, cached_nlp)
        L = self._tr.layout
        self._from_obs = ca.Function(model.from_obs)  # obs is checked in __call__ already
        self._to_obs_map = model.to_obs.map(self.horizon + 1)
        self._constraint_map = (
            None if model.constraint is None else model.constraint.map(self.horizon)
        )
        # static bounds converted once: numpy -> DM conversion is a visible part of a 1 ms solve
        tr = self._tr
        bounds = (tr.lbw, tr.ubw, tr.lbg, tr.ubg)
        self._bounds = {k: ca.DM(v) for k, v in zip(_BOUNDS, bounds, strict=True)}
        # the warm start, its multipliers, the plan's inputs and the states it predicts
        self._w0 = self._lam_g0 = self._lam_x0 = self._plan_u = self._plan_x = None
        self._u_prev = self.safe_input.copy()
        self._layout = L
        # the warm start is the plan for the next call's own time (start), not one stage back
        self._current = False
        self._unhurried = False  # start: no time budget

    # -- the strategies' options ------------------------------------------------------------
    nlp_compiled = _read("_solving", "nlp_compiled", "whether the NLP runs compiled (jit)")
    rti_start = _read("_options", "rti_start", "the real-time iteration's cold-start solver")
    rti_regularization = _read("_options", "rti_regularization", "rti's Levenberg–Marquardt")
    tube = _read("_options", "tube", "the tube's propagation, open_loop or feedback")
    tube_errors = _read("_options", "tube_errors", "the feedback tube's reading of the bound")
    tube_memory = _read("_tightening", "memory", "the share of the last tube a new one keeps")
    tube_lipschitz = _read("_tightening", "lipschitz", "the open-loop tube's Lipschitz constant")
    tube_Q = _read("_tightening", "Q", "the feedback tube's LQR weight on the observation")
    tube_R = _read("_tightening", "R", "the feedback tube's LQR weight on the input")

    @property
    def safety_function(self) -> ca.Function:
        """The safety rows as one function ``obs -> h`` (``h >= 0`` is safe):
        ``safety_rows.function``."""
        return self.safety_rows.function

    @property
    def safety_names(self) -> tuple[str, ...]:
        """The safety rows' names (``s >= -1``, ``s <= 1``, ``wall[0]``):
        ``safety_rows.names``."""
        return self.safety_rows.names

    @property
    def cost(self):
        """The resolved cost (weight matrices, reference function)."""
        return self._cost

    @property
    def constraints(self) -> Constraints:
        """The resolved constraints (bounds as arrays, ``+-inf`` where none)."""
        return self._cons

    def reference(self, t: float) -> np.ndarray:
        """The cost's observation reference at time ``t`` [s]."""
        return np.asarray(self._cost.reference(t), dtype=np.float64)

    def solver_stats(self) -> dict:
        """The statistics of the solver of the last call (CasADi's ``stats()``: status,
        iterations, and for an NLP solver the calls and wall times of each of its functions,
        ``n_call_nlp_hess_l``, ``t_wall_nlp_hess_l``, ...; the condensed SQP's and the
        real-time iteration's own)."""
        return self._solving.stats()

    def reset(self) -> None:
        """Forget the warm start and the previous plan (call between episodes)."""
        self._w0 = self._lam_g0 = self._lam_x0 = self._plan_u = self._plan_x = None
        self._u_prev = self.safe_input.copy()
        self._current = False
        self._tightening.reset()
        self._solving.reset()

    def start(self, obs: Any, t: float = 0.0, p: Any = None) -> MPCResult:
        """The first plan, made before the control loop's clock starts (as a robot plans
        while it waits at its start): forgets any previous plan (:meth:`reset`), solves
        from ``obs`` at time ``t`` as a call would, without the time budget
        (``sqpmethod``/``fatrop``/``rti``; ipopt keeps its own wall-time limit), and keeps
        the plan as the warm start of the call at the same ``obs`` and ``t``, unshifted.
        The input applied before the first call stays ``safe_input`` (the rate penalty's
        reference); the real-time iteration also prepares that call (:meth:`prepare`).
        With a tube, whose first tightening follows the cold guess (the measured state
        held), the plan is solved once more with the tube along it, the plan the first
        call's tube follows (``solver = "condensed"``: both by ``condensed_start``); where
        that solve does not converge, the first plan stays. ``solver = "condensed"`` keeps the
        last iterate of a cold start that failed (finite) as the first call's start.
        Returns the last solve's :class:`MPCResult` (its ``u`` is not applied;
        ``call_time`` is how long the robot waited, the preparation included;
        ``iterations`` of all its solves). ``run_episode`` calls it
        before the first step and records its time apart (``Trajectory.start_time``)."""
        self.reset()
        self._unhurried = True
        try:
            result = self(obs, t, p)
            if result.status.ok and self._tightening.active:
                # the tube was computed along the cold guess (the measured state held): solved
                # once more with the tube along the first plan, the plan the first call's tube
                # follows
                result = self._solved_again(obs, t, p, result)
        finally:
            self._unhurried = False
        self._u_prev = self.safe_input.copy()
        # the plan (or, for the condensed SQP, a failed cold start's last iterate) is for the
        # first call itself
        self._current = self._w0 is not None
        if result.status.ok and self._solving.split:  # the real-time iteration: its first too
            prepared = self.prepare(t, p)
            result = dataclasses.replace(result, call_time=result.call_time + prepared)
        return result

    def _solved_again(self, obs, t, p, result: MPCResult) -> MPCResult:
        """:meth:`start`'s solve once more, from its plan ``result``, unshifted: the second
        result where it converged, else the first, with both solves' time and iterations."""
        kept = (self._w0, self._lam_g0, self._lam_x0, self._plan_u, self._plan_x)
        self._u_prev, self._current = self.safe_input.copy(), True
        again = self(obs, t, p)
        better = again.status == Status.SOLVED
        if not better:  # the first plan stays
            self._w0, self._lam_g0, self._lam_x0, self._plan_u, self._plan_x = kept
        return dataclasses.replace(
            again if better else result,
            call_time=result.call_time + again.call_time,
            iterations=result.iterations + again.iterations,
        )

    def prepare(self, t: float = 0.0, p: Any = None) -> float:
        """The real-time iteration's preparation phase for the call at time ``t`` [s] with
        parameters ``p``: linearise at the previous plan shifted by one stage (its predicted
        initial state) and condense the QP, so that the call itself only solves that QP from
        the measured state. Call it right after applying the input (``run_episode`` does);
        a call that finds no preparation for its ``t`` and ``p`` prepares itself, with the
        same result. Returns its wall time [s]; 0 where there is nothing to prepare: other
        solvers, a cold start (no plan yet, or the last solve failed: the call starts from
        the measured state, or ``rti_start`` solves it), tube tightening (the tube is
        computed from the measured state, so the linearisation follows it in the call)."""
        return self._solving.prepare(self, t, p)

    def __call__(self, obs: Any, t: float = 0.0, p: Any = None) -> MPCResult:
        called = time.perf_counter()
        m, N, L = self.model, self.horizon, self._layout
        obs = _checks.finite_vector("obs", obs, m.nobs, self.obs_names)
        t = _checks.finite_number(
            "t", t, "a finite number of seconds (the time of obs, read by the cost's reference)"
        )
        p = m.p_default if p is None else _checks.finite_vector("p", p, m.np, m.param_names)
        x0 = np.asarray(self._from_obs(obs), dtype=np.float64).reshape(-1)
        refs = np.stack([self._cost.reference(t + k * m.dt) for k in range(N + 1)], axis=1)
        cold = self._w0 is None  # no plan to start from: the state held (initial_guess)
        w0 = ca.DM(self._initial_guess(x0))
        P = ca.DM(np.concatenate([x0, refs.T.reshape(-1), self._u_prev, p]))
        P_given = P
        margins = self._tightening.margins(w0, P, p, self._bounds, self._unhurried)
        tube, tube_inputs, P, bounds = margins.tube, margins.tube_inputs, margins.P, margins.bounds
        if cold and self._cover is not None:  # its slacks cover the soft rows (SlackCover)
            w0 = ca.DM(self._cover(w0.full(), P, bounds["lbg"], bounds["ubg"]))
        inputs_empty, empty_stages = margins.inputs_empty, margins.empty_stages
        args: dict[str, Any] = dict(x0=w0, p=P, **bounds)
        if self._lam_g0 is not None:
            args.update(lam_g0=ca.DM(self._lam_g0), lam_x0=ca.DM(self._lam_x0))
        start = time.perf_counter()
        kept = None
        self._solving.begin()
        if inputs_empty:  # no input meets the tightened bounds (or no tube): nothing to solve
            sol, error, stats = None, None, {}
        else:
            try:
                with kept_interrupts():  # CasADi would swallow a Ctrl-C (see vimpc._interrupt)
                    sol, kept = self._solving.solve(self, args, x0, t, p, refs, P_given)
                error = None
            except RuntimeError as exc:  # error_on_fail is off; a hard evaluation error
                sol, error = None, exc
            stats = self._solving.stats()
        elapsed = time.perf_counter() - start
        if kept is not None:  # solved with the last solved call's tube (_condensed_step)
            tube, tube_inputs = kept
            empty_stages = self._tightening.empty_stages(tube, tube_inputs)
        status = (
            Status.INFEASIBLE
            if inputs_empty
            else self._solving.status(self, sol, stats, elapsed, error)
        )
        iterations = int(stats.get("iter_count", 0))
        if status.ok:
            w = np.asarray(sol["x"]).reshape(-1)
            u_plan = w[L.u]
            x_plan = w[L.x]
            slack = float(w[L.s].max()) if L.s.size else 0.0
            cost = float(sol["f"])
            self._w0 = w
            self._lam_g0 = np.asarray(sol["lam_g"]).reshape(-1)
            self._lam_x0 = np.asarray(sol["lam_x"]).reshape(-1)
            self._plan_u, self._plan_x = u_plan, x_plan
            u = np.clip(u_plan[0], self._cons.u_min, self._cons.u_max)
            fallback = False
            self._solving.kept(self, tube, tube_inputs)
        else:
            u = self._fallback(x0, P_given)
            u_plan = np.tile(u, (N, 1)) if self._plan_u is None else self._plan_u
            x_plan = np.tile(x0, (N + 1, 1))
            slack, cost, fallback = float("nan"), float("nan"), True
            # the condensed SQP starts its next call from the plan the fallback input follows,
            # or from the last iterate of a cold start that failed (finite); fatrop/ipopt's
            # warm instance continues a solve it stopped: the cold-start solver takes a call
            # without either only
            warm = self._w0 is not None
            self._w0 = self._solving.next_guess(self, sol, w0)
            self._lam_g0 = self._lam_x0 = None
            # the margins a second try takes follow the guess: a stage on with the plan
            # shifted once more, none without it
            self._tightening.age_solved(self._w0 is not None, warm, self._current)
        self._u_prev = u
        self._current = False
        obs_plan = np.asarray(self._to_obs_map(x_plan.T)).T
        plan_constraint = float("nan")
        if self._constraint_map is not None and not fallback:
            plan_constraint = float(
                np.abs(self._constraint_map(x_plan[1:].T).full()).max(initial=0.0)
            )
        call_time = time.perf_counter() - called
        phases = {} if inputs_empty else self._solving.phases(stats)
        return MPCResult(
            u=u,
            status=status,
            x=x_plan,
            obs=obs_plan,
            u_plan=u_plan,
            iterations=iterations,
            solve_time=elapsed,
            slack=slack,
            cost=cost,
            fallback=fallback,
            tube=tube,
            tube_time=margins.time,
            tube_inputs=tube_inputs,
            empty_tube_stages=empty_stages,
            failed_tube_stages=margins.failed_stages,
            tube_failure=margins.failure,
            call_time=call_time,
            late=call_time > self.period,
            plan_constraint=plan_constraint,
            handed_over=self._solving.handed_over(),
            tube_kept=kept is not None,
            descended=self._solving.descended and not inputs_empty,
            **phases,
        )

    # -- helpers --------------------------------------------------------------------------
    def _initial_guess(self, x0: np.ndarray) -> np.ndarray:
        """The solve's guess at the measured state ``x0`` (:func:`initial_guess`)."""
        plan_u0 = None if self._plan_u is None else self._plan_u[0]
        return initial_guess(self._layout, self._w0, self._current, x0, self.safe_input, plan_u0)

    def _fallback(self, x0: np.ndarray | None = None, P: ca.DM | None = None) -> np.ndarray:
        """The input of a call nothing solved, at the measured state ``x0`` (``P``: the
        NLP's parameters before the tube's): the last plan's input for this call (its first
        after :meth:`start`, else its next, the plan then shifted), with the feedback tube
        (and ``x0`` given) plus the tube's feedback on ``x0``'s deviation from the plan's
        prediction,
        ``K_k (x0 - x_plan_k)`` (the law its margins assume, the gains along the plan; the
        plan's input alone where they do not evaluate or the term is not finite), and
        ``safe_input`` without a plan; clipped to the input bounds."""
        if self._plan_u is None or (not self._current and len(self._plan_u) < 2):
            return self.safe_input.copy()
        k = 0 if self._current else 1
        u = self._tightening.fallback_input(
            self._plan_u[k].copy(), k, self._plan_x, self._plan_u, x0, P
        )
        if k:
            self._plan_u, self._plan_x = shifted(self._plan_u, self._plan_x)
        return np.clip(u, self._cons.u_min, self._cons.u_max)


#: the keyword arguments of MPC, for the "did you mean" of a misspelt one
_KEYWORDS = tuple(
    name
    for name, param in inspect.signature(MPC.__init__).parameters.items()
    if name not in ("self", "model", "horizon", "cost") and param.kind is not param.VAR_KEYWORD
)


#: the names of the variables' and rows' bounds, as the solvers take them
_BOUNDS = ("lbx", "ubx", "lbg", "ubg")


def _checked_arguments(
    arguments: dict[str, Any], model: Any, cost: Any, constraints: Any
) -> tuple[dict[str, Any], Constraints]:
    """``MPC``'s declared options (all but the weights) checked against :data:`SETTINGS`,
    and its ``constraints`` (None: none), after refusing an unknown keyword (with a "did
    you mean") and a model, cost or constraints of the wrong type."""
    for key in arguments["unknown"]:
        hint = difflib.get_close_matches(key, _KEYWORDS, n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise InputError(
            f"MPC got an unknown keyword argument {key!r}{extra} (expected one of "
            f"{', '.join(_KEYWORDS)})"
        )
    if not isinstance(model, DiscreteModel):
        raise InputError(f"model must be a DiscreteModel, got {type(model).__name__}")
    if not isinstance(cost, Cost):
        raise InputError(f"cost must be a vimpc.mpc.Cost, got {type(cost).__name__}")
    constraints = Constraints() if constraints is None else constraints
    if not isinstance(constraints, Constraints):
        raise InputError(
            f"constraints must be a vimpc.mpc.Constraints, got {type(constraints).__name__}"
        )
    # every declared option as given (the weights are matrices here: the tightening's)
    given = {key: arguments[key] for key in SETTINGS if key not in MATRICES}
    if given["transcription"] is None:  # the keyword's default before "auto" was declared
        given["transcription"] = "auto"
    return {key: check_option(key, value) for key, value in given.items()}, constraints


def _checked_safe_input(safe_input: Any, cons: Constraints, nu: int) -> np.ndarray:
    """The fallback input without a plan: ``safe_input`` checked (finite, within the input
    bounds), by default zero clipped to them."""
    lo, hi = cons.u_min, cons.u_max
    if safe_input is None:
        safe_input = np.clip(np.zeros(nu), lo, hi)
    checked = _checks.finite_vector("safe_input", safe_input, nu)
    outside = np.flatnonzero((checked < lo) | (checked > hi))
    if outside.size:
        i = int(outside[0])
        raise InputError(
            f"safe_input[{i}] = {checked[i]} is outside the input bounds "
            f"[{lo[i]}, {hi[i]}] (constraints.u_min, u_max); the fallback input must "
            "satisfy them"
        )
    return checked


def initial_guess(
    L: Any,
    w_prev: np.ndarray | None,
    current: bool,
    x0: np.ndarray,
    safe_input: np.ndarray,
    plan_u0: np.ndarray | None,
) -> np.ndarray:
    """The guess of a solve from the measured state ``x0`` in the layout ``L``: without a
    previous solution ``w_prev`` the state held under ``plan_u0`` (the last plan's first
    input) or ``safe_input``; with one, it for this very call (``current``: the plan of
    :meth:`MPC.start`), else shifted by one stage, the last stage repeated."""
    if w_prev is None:
        w = np.zeros(L.n_w)
        w[L.x] = x0
        if L.z.size:
            w[L.z] = x0
        w[L.u] = safe_input if plan_u0 is None else plan_u0
        return w
    w = w_prev.copy()
    if current:  # the plan of start, for this very call
        w[L.x[0]] = x0
        return w
    # shift the previous solution one stage, repeat the last stage
    w[L.x[:-1]] = w_prev[L.x[1:]]
    w[L.u[:-1]] = w_prev[L.u[1:]]
    if L.z.size:
        w[L.z[:-1]] = w_prev[L.z[1:]]
    if L.s.size:
        w[L.s[:-1]] = w_prev[L.s[1:]]
    w[L.x[0]] = x0
    return w
