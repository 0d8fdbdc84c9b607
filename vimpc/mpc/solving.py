"""The controller's solver strategies: how one call's NLP is solved.

One strategy per ``solver`` option, chosen once from its value by :data:`STRATEGIES`:
:class:`SQPMethod` (CasADi's ``sqpmethod``), :class:`InteriorPoint` (``fatrop``, ``ipopt``:
the warm instance of ``warm_barrier``/``warm_max_iter`` and the continuation of a stopped
solve), :class:`RealTime` (``rti``: the split real-time iteration, or ``sqpmethod`` stopped
after one iteration, with ``rti_start``'s cold starts) and :class:`Condensed`
(``condensed``: :class:`~vimpc.mpc.condensed.CondensedSQP` with ``condensed_start``'s cold
starts). Each checks the options it reads and refuses what it cannot do, builds its solver
instances, keeps the time budget its own way, and owns its warm start after a failed call,
its statistics and its share of the status. The plan (the warm start shifted from call to
call) stays the controller's: a strategy reads it from the :class:`~vimpc.mpc.controller.MPC`
it is given.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from typing import Any

import casadi as ca
import numpy as np

from vimpc import _checks, _jit
from vimpc.errors import InputError
from vimpc.mpc.compiling import compiled_nlpsol
from vimpc.mpc.condensed import BUDGET_STATUS, CondensedSQP, condensing_refusal
from vimpc.mpc.options import SETTINGS, ignored_solver_options, ignored_sqp_options
from vimpc.mpc.result import Status
from vimpc.mpc.solvers import (
    Deadline,
    RealTimeIteration,
    SparseRealTimeIteration,
    check_time_budget,
    checked_options,
    condensing_obstacle,
    nlpsol_options,
    option_error,
    qp_options,
    qp_solver,
    warm_options,
)

#: the controller a strategy serves (:class:`~vimpc.mpc.controller.MPC`, which imports this
#: module): its plan, transcription and tightening are read from it
MPC = Any

#: constraint violation up to which an unconverged iterate is still used
FEASIBILITY_TOL = 1e-6
#: ``solver = "condensed"`` with a time budget (or ``warm_max_iter``): the share of it each
#: of a warm call's condensed SQP tries may take before the single-shooting descent takes
#: the rest
TRY_SHARE = 0.4


class Solver:
    """The abstract solver strategy of the ``solver`` option :attr:`name`. After
    :meth:`build`, :attr:`solver` is the main instance and :attr:`stepper` the one of the
    current call (its statistics are the call's)."""

    def __init__(self, name: str, checked: Mapping[str, Any], given: Mapping[str, Any]) -> None:
        self.name = name
        self.checked, self.given = checked, given
        self.time_budget: float | None = checked["time_budget"]
        self.deadline = None
        self.nlp_compiled = False
        self.descended = False  # this call's solution is the condensed SQP's descent's
        self.solver: Any = None
        self.stepper: Any = None

    @classmethod
    def check(cls, solver: str, checked: Mapping[str, Any], solver_options: Any) -> dict:
        """The user's ``solver_options`` checked against ``solver``'s (returned), after
        refusing the options only other solvers read, given away from their defaults; then a
        time budget ``solver`` cannot keep or that those options would override (checked
        once, here)."""
        for name in ignored_sqp_options(solver, checked):
            # they belong to the SQP presets: given with another solver they would do nothing
            raise InputError(
                f"{name}={checked[name]!r} applies only to solver='sqpmethod' or 'rti', and "
                f"would be ignored with solver={solver!r}; leave {name} at its "
                f"default {SETTINGS[name].default!r} or choose an SQP solver"
            )
        for name, readers in ignored_solver_options(solver, checked):
            raise InputError(
                f"{name}={checked[name]!r} applies only to solver={readers}, and would be "
                f"ignored with solver={solver!r}; leave {name} at its default "
                f"{SETTINGS[name].default!r} or set solver={readers}"
            )
        given = checked_options(solver, solver_options)
        check_time_budget(solver, checked["time_budget"], given)
        return given

    @classmethod
    def refuse_problem(cls, transcription: str, cost: Any, hessian: str) -> None:
        """Refuse a problem (its ``transcription``, its resolved ``cost``, the ``hessian``)
        this solver cannot solve: every one it is given here."""

    # -- built with the controller ------------------------------------------------------
    def build(self, ctl: MPC, expand: bool, cached_nlp: bool) -> None:
        """The solver instances of the transcription ``ctl._tr``: the preset
        (:func:`~vimpc.mpc.solvers.nlpsol_options`, expanded to SX with ``expand``), the time
        budget's options and the user's merged over it, the NLP's library cached with
        ``cached_nlp``; a CasADi error about a given option is raised as an
        :class:`InputError` naming it."""
        tr, casadi_jit = ctl._tr, ctl.jit == "nlp" and not cached_nlp
        checked = self.checked
        plugin, opts = nlpsol_options(
            self.name,
            max_iter=ctl.max_iter,
            tol=ctl.tol,
            qpsol=checked["qpsol"],
            expand=expand,
            equality=(tr.lbg == tr.ubg).tolist(),
            hessian=checked["hessian"],
            gauss_newton=tr.gauss_newton,
            structure=tr.layout.ocp_structure(),
            condensed_start=checked["condensed_start"],
        )
        if casadi_jit:
            opts.update(_jit.options())
        budget_opts: dict[str, Any] = {}
        if self.time_budget is not None:
            nlp = tr.nlp
            sizes = (nlp["x"].numel(), nlp["g"].numel(), nlp["p"].numel())
            budget_opts, self.deadline = self._budget_options(self.time_budget, sizes)
        # the preset, the budget's options, then the user's (which cannot set the budget's)
        for extra in (budget_opts, self.given):
            for key, value in extra.items():
                if isinstance(value, dict) and isinstance(opts.get(key), dict):
                    opts[key] = {**opts[key], **value}
                else:
                    opts[key] = value
        # an NLP's JIT also writes its C source to the working directory: keep it in the
        # JIT directory, which the process removes at exit
        where = contextlib.chdir(_jit.directory()) if casadi_jit else contextlib.nullcontext()
        try:
            with where:
                self.solver = self._instances(ctl, opts, plugin, cached_nlp)
                self.stepper = self.solver  # the solver of the current call (stats)
        except RuntimeError as exc:
            error = option_error(self.name, plugin, self._used_qp(), self.given, str(exc))
            if error is None:
                raise
            raise error from exc

    def _budget_options(
        self, budget: float, sizes: tuple[int, int, int]
    ) -> tuple[dict[str, Any], Deadline | None]:
        """The nlpsol options that keep ``budget`` seconds of wall time, and the
        :class:`~vimpc.mpc.solvers.Deadline` to arm before each solve (None where the solver
        keeps its own clock); ``sizes`` are the NLP's ``(nx, ng, np)``. Here the iteration
        callback (``sqpmethod``, ``rti``)."""
        deadline = Deadline(*sizes)
        return {"iteration_callback": deadline}, deadline

    def _instances(self, ctl: MPC, opts: dict[str, Any], plugin: str, cached_nlp: bool) -> Any:
        """The main instance: one ``nlpsol`` (its library cached with ``cached_nlp``)."""
        first = ca.nlpsol("mpc", plugin, ctl._tr.nlp, opts)
        solvers = compiled_nlpsol(first, plugin, [opts]) if cached_nlp else None
        self.nlp_compiled = solvers is not None
        return first if solvers is None else solvers[0]

    def _used_qp(self) -> str:
        """The QP solver that may have refused an option."""
        return qp_solver(self.checked["qpsol"])

    #: whether a call is split into a preparation before the state arrives and a feedback
    split = False

    # -- every call -----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget what the previous calls left (between episodes)."""

    def begin(self) -> None:
        """A call begins (whether or not it solves)."""

    def prepare(self, ctl: MPC, t: float, p: Any) -> float:
        """The preparation phase of the call at ``t``: none here (0 s)."""
        return 0.0

    def solve(self, ctl: MPC, args: dict[str, Any], x0, t, p, refs, P_given) -> tuple[Any, Any]:
        """One call's solve from ``args`` (``x0``, ``p``, the bounds, the multipliers):
        ``(solution or None, the margins the solution kept or None)``; the deadline armed
        (none for :meth:`MPC.start`'s solves)."""
        if self.deadline is not None:
            self.deadline.arm(np.inf if ctl._unhurried else self.time_budget)
        self.stepper = self.solver
        self.descended = False
        return self._solved(ctl, args, x0, t, p, refs, P_given)

    def _solved(self, ctl: MPC, args, x0, t, p, refs, P_given) -> tuple[Any, Any]:
        return self.solver(**args), None

    def next_guess(self, ctl: MPC, sol, w0) -> np.ndarray | None:
        """The warm start after a failed call (None: a cold start)."""
        return None

    def kept(self, ctl: MPC, tube: np.ndarray, tube_inputs: np.ndarray) -> None:
        """A call solved with these margins."""

    def stats(self) -> dict:
        """The statistics of the current call's instance (CasADi's ``stats()``)."""
        try:
            return dict(self.stepper.stats())
        except RuntimeError as exc:
            # some plugins fail to report stats after an aborted solve
            return {"success": False, "return_status": f"no statistics: {exc}"}

    def status(self, ctl: MPC, sol, stats: dict, elapsed: float, error) -> Status:
        """The status of a call's solve ``sol`` (None: the condensed SQP's unfinished one)
        with the statistics ``stats``, its wall time ``elapsed`` and a CasADi ``error``."""
        if error is not None:
            return Status.FAILED
        if sol is None:  # the condensed SQP's unfinished solve
            return Status.TIME_LIMIT if self._timed_out(ctl, stats) else Status.FAILED
        w = np.asarray(sol["x"]).reshape(-1)
        if not np.all(np.isfinite(w)):
            return Status.FAILED
        if stats.get("unified_return_status") == "SOLVER_RET_INFEASIBLE" or "nfeasib" in str(
            stats.get("return_status", "")
        ):
            return Status.INFEASIBLE
        if self._timed_out(ctl, stats):
            return Status.TIME_LIMIT
        if stats.get("success", False):
            result = Status.SOLVED
        elif self.one_iteration() or (
            _violation(ctl._tr, sol) <= FEASIBILITY_TOL
            and not (self.descended and _slack(ctl._layout, sol) > FEASIBILITY_TOL)
        ):
            # stopped early (iteration limit, tiny steps) at a usable iterate; a real-time
            # iteration is never converged by design; the condensed SQP's descent's only where
            # its soft rows hold without slack (its slacks can be far larger than a solution's:
            # on the CLNN cart-pole up to 57 m past the tightened rail)
            result = Status.ITERATION_LIMIT
        else:
            return Status.FAILED
        if self.time_budget is not None and elapsed > self.time_budget and not ctl._unhurried:
            return Status.LATE
        return result

    def _timed_out(self, ctl: MPC, stats: dict) -> bool:
        """Whether the time budget stopped the solve (as the solver keeps it)."""
        if self.time_budget is None or stats.get("success", False) or ctl._unhurried:
            return False
        return self.stopped_by_budget(stats)

    def stopped_by_budget(self, stats: dict) -> bool:
        """Whether the time budget stopped a solve it timed (unsuccessful, not unhurried):
        the iteration callback's request (``sqpmethod``, ``rti``), or ipopt's wall-clock
        limit."""
        if self.deadline is not None:
            return self.deadline.stopped
        return stats.get("return_status") == "Maximum_WallTime_Exceeded"

    def one_iteration(self) -> bool:
        """Whether this call's solve is one real-time iteration (never converged by design)."""
        return False

    def phases(self, stats: dict) -> dict[str, float]:
        """The call's preparation and feedback times, where it was split."""
        return {}

    def handed_over(self) -> bool:
        """Whether this call's solve went to the cold-start solver (``condensed``)."""
        return False


class SQPMethod(Solver):
    """``solver = "sqpmethod"``: CasADi's SQP with a Gauss–Newton (or exact) Hessian and the
    QP solver ``qpsol``; a time budget through an iteration callback."""


class InteriorPoint(Solver):
    """The abstract interior-point ``nlpsol`` (``fatrop``, ``ipopt``), with
    ``warm_barrier`` or ``warm_max_iter`` a second instance of the same NLP (one compiled
    library) for the solves from the previous plan, and the continuation of one it stopped."""

    def __init__(self, name: str, checked: Mapping[str, Any], given: Mapping[str, Any]) -> None:
        super().__init__(name, checked, given)
        self.warm_solver: Any = None
        # the next call continues a solve the warm instance stopped (next_guess)
        self.continuation = False
        self._continuing = False

    def _instances(self, ctl: MPC, opts: dict[str, Any], plugin: str, cached_nlp: bool) -> Any:
        checked = self.checked
        warm_opts = warm_options(plugin, opts, checked["warm_barrier"], checked["warm_max_iter"])
        variants = [opts] + ([] if warm_opts is None else [warm_opts])
        first = ca.nlpsol("mpc", plugin, ctl._tr.nlp, opts)
        solvers = compiled_nlpsol(first, plugin, variants) if cached_nlp else None
        self.nlp_compiled = solvers is not None
        if solvers is None:
            solvers = [first] + [ca.nlpsol("mpc", plugin, ctl._tr.nlp, o) for o in variants[1:]]
        self.warm_solver = solvers[1] if warm_opts is not None else None
        return solvers[0]

    def reset(self) -> None:
        self.continuation = False

    def begin(self) -> None:
        self._continuing, self.continuation = self.continuation, False

    def _solved(self, ctl: MPC, args, x0, t, p, refs, P_given) -> tuple[Any, Any]:
        if self.warm_solver is not None and ctl._w0 is not None and not ctl._unhurried:
            self.stepper = self.warm_solver
            return self.warm_solver(**args), None
        return self.solver(**args), None

    def next_guess(self, ctl: MPC, sol, w0) -> np.ndarray | None:
        """The last iterate ``sol`` of a solve from the previous plan that the warm instance
        did not finish (``warm_max_iter``, or a failure), where finite, for the next call to
        continue from (moved on by a stage, with the warm instance); None after any other
        failure, a continuation's among them (the next call from scratch, at the solver's
        own barrier and ``max_iter``). Continued, each solve stays within ``warm_max_iter``:
        from the stopped solve's guess at the solver's own barrier, the solve after one took
        up to 68 iterations on the GP-VI cart-pole, longer than its period. The solve from
        scratch keeps ``max_iter``: bounded too (a third instance at ``warm_max_iter``), the
        GP-VI safety run (seeds 100-199) lost its one late call but also an episode, 124
        failed solves of fallback inputs in a row and the cart 27.8 m past its rail, where
        the unbounded solve (101 iterations, 92.7 ms of a 50 ms period) had recovered it
        (``results/safety/gpvi_bounded_recovery/``)."""
        # the stepper is never None: without a warm instance this is False
        stopped_warm = self.stepper is self.warm_solver
        w = None if self._continuing or not stopped_warm else finite_iterate(sol)
        self.continuation = w is not None
        return w


class RealTime(Solver):
    """``solver = "rti"``: the real-time iteration
    (:class:`~vimpc.mpc.solvers.RealTimeIteration`: one Gauss–Newton linearisation and one
    condensed QP per call, split into :meth:`prepare` and a feedback phase; with a tube, or
    with ``qpsol = "hpipm"``, the sparse QP of
    :class:`~vimpc.mpc.solvers.SparseRealTimeIteration`, both phases in the call) where it
    applies, else ``sqpmethod`` stopped after one iteration; ``rti_start`` the solver of its
    cold starts."""

    def __init__(self, name: str, checked: Mapping[str, Any], given: Mapping[str, Any]) -> None:
        super().__init__(name, checked, given)
        self.rti_start = checked["rti_start"]
        self.rti_regularization = checked["rti_regularization"]
        self.start: Any = None  # rti_start's solver (None for "none")
        self.split = False  # True where it runs as RealTimeIteration
        self.sparse = False  # True where its QP is the sparse one, both phases in the call
        self._rti_qp: str | None = None
        self._ready: tuple[float, bytes] | None = None  # (t, p) of the prepared iteration

    def _used_qp(self) -> str:
        return self._rti_qp or super()._used_qp()

    def _instances(self, ctl: MPC, opts: dict[str, Any], plugin: str, cached_nlp: bool) -> Any:
        if not self._real_time(ctl):
            return super()._instances(ctl, opts, plugin, cached_nlp)
        self.split = True
        return self._real_time_solvers(ctl, opts)

    def _real_time(self, ctl: MPC) -> bool:
        """Whether it runs as :class:`RealTimeIteration` (one linearisation and one QP per
        call): with the Gauss–Newton Hessian, no time budget and no solver options of
        CasADi's ``sqpmethod``; otherwise it is ``sqpmethod`` stopped after one iteration
        (the exact Hessian's convexification, the budget's iteration callback and such
        options are ``sqpmethod``'s)."""
        return (
            self.checked["hessian"] == "gauss-newton"
            and self.time_budget is None
            and set(self.given) <= {"qpsol_options"}
            and self._condensing_obstacle(ctl) is None
        )

    @staticmethod
    def _condensing_obstacle(ctl: MPC) -> str | None:
        """Why the real-time iteration cannot condense this transcription onto the inputs
        and slacks (:func:`~vimpc.mpc.solvers.condensing_obstacle`), or None."""
        tr = ctl._tr
        free = np.concatenate([tr.layout.u.ravel(), tr.layout.s.ravel()])
        return condensing_obstacle(tr.nlp, free, tr.lbg == tr.ubg, tr.lbw, tr.ubw, ctl.model.nx)

    def _real_time_solvers(
        self, ctl: MPC, opts: Mapping[str, Any]
    ) -> RealTimeIteration | SparseRealTimeIteration:
        """The :class:`RealTimeIteration` (condensed onto the inputs and slacks, its QP
        solved by ``qpsol``, ``"auto"`` meaning daqp, with the user's ``qpsol_options``),
        and in :attr:`start` the solver ``rti_start`` of its cold starts."""
        tr, L, qpsol, given = ctl._tr, ctl._tr.layout, self.checked["qpsol"], self.given
        function_options = _jit.options() if ctl.jit == "nlp" else None
        if ctl._tightening.active or qpsol == "hpipm":
            # the tube needs the measured state, so the linearisation follows it in the call:
            # the sparse QP (qrqp by default), without the condensing that is worth it only
            # when prepared ahead (the DLNN cart-pole's balance: ~2 ms against ~45 ms); HPIPM
            # takes the sparse QP stage by stage alone
            self.sparse = True
            self._rti_qp = rti_qp = qp_solver(qpsol)
            rti: RealTimeIteration | SparseRealTimeIteration = SparseRealTimeIteration(
                tr.nlp,
                tr.gauss_newton,
                rti_qp,
                opts["qpsol_options"],
                expand=opts["expand"],
                function_options=function_options,
                regularization=self.rti_regularization,
            )
            self._build_start(ctl, opts)
            return rti
        self._rti_qp = rti_qp = qp_solver(qpsol, condensed=True)
        rti = RealTimeIteration(
            tr.nlp,
            tr.gauss_newton,
            rti_qp,
            {**qp_options(rti_qp), **given.get("qpsol_options", {})},
            expand=opts["expand"],
            free=np.concatenate([L.u.ravel(), L.s.ravel()]),
            equality=tr.lbg == tr.ubg,
            n_init=ctl.model.nx,
            regularization=self.rti_regularization,
            function_options=function_options,
        )
        self._build_start(ctl, opts)
        return rti

    def _build_start(self, ctl: MPC, opts: Mapping[str, Any]) -> None:
        """:attr:`start`: the solver ``rti_start`` of the cold starts (None for "none")."""
        tr, given = ctl._tr, self.given
        if self.rti_start != "none":
            plugin, start_opts = nlpsol_options(
                self.rti_start,
                max_iter=ctl.max_iter,
                tol=ctl.tol,
                qpsol=self.checked["qpsol"],
                expand=opts["expand"],
                equality=(tr.lbg == tr.ubg).tolist(),
                gauss_newton=tr.gauss_newton,
            )
            if ctl.jit == "nlp":
                start_opts.update(_jit.options())
            if given.get("qpsol_options") and plugin == "sqpmethod":
                qp_opts = {**start_opts["qpsol_options"], **given["qpsol_options"]}
                start_opts["qpsol_options"] = qp_opts
            self.start = ca.nlpsol("mpc_start", plugin, tr.nlp, start_opts)

    def reset(self) -> None:
        self._ready = None

    def prepare(self, ctl: MPC, t: float, p: Any) -> float:
        """Linearise at the previous plan shifted by one stage (its predicted initial state)
        and condense the QP for the call at ``t`` with ``p``: see :meth:`MPC.prepare`."""
        if not self.split or self.sparse or ctl._w0 is None:
            return 0.0
        t = _checks.finite_number(
            "t", t, "a finite number of seconds (the time of the call it prepares)"
        )
        m, N, L = ctl.model, ctl.horizon, ctl._layout
        p = m.p_default if p is None else _checks.finite_vector("p", p, m.np, m.param_names)
        # the shift (none after start); x_0 is the predicted state
        w = ctl._initial_guess(ctl._w0[L.x[0 if ctl._current else 1]])
        refs = np.stack([ctl._cost.reference(t + k * m.dt) for k in range(N + 1)], axis=1)
        P = np.concatenate([w[L.x[0]], refs.T.reshape(-1), ctl._u_prev, p])
        elapsed = self.solver.prepare(x0=w, p=P, **ctl._bounds)
        self._ready = (t, np.asarray(p, np.float64).tobytes())
        return elapsed

    def _solved(self, ctl: MPC, args, x0, t, p, refs, P_given) -> tuple[Any, Any]:
        if not self.split:
            return self.solver(**args), None
        return self._real_time_step(ctl, args, x0, t, p), None

    def _real_time_step(self, ctl: MPC, args: Mapping[str, Any], x0: np.ndarray, t, p) -> dict:
        """One sample of the split real-time iteration: a cold start (no plan) solved to
        convergence by :attr:`start`; with a tube, both phases from the measured state; else
        the feedback phase on the preparation for ``(t, p)`` (prepared now if missing)."""
        ready, self._ready = self._ready, None
        if ctl._w0 is None and self.start is not None:
            self.stepper = self.start
            return self.start(**args)
        self.stepper = self.solver
        if self.sparse or ctl._w0 is None:
            return self.solver(**args)
        if ready != (t, np.asarray(p, np.float64).tobytes()) or not self.solver.prepared:
            self.prepare(ctl, t, p)
        return self.solver.feedback(x0)

    def one_iteration(self) -> bool:
        return self.stepper is self.solver

    def phases(self, stats: dict) -> dict[str, float]:
        if not self.split or self.stepper is not self.solver:
            return {}
        return dict(
            preparation_time=stats.get("t_wall_preparation", float("nan")),
            feedback_time=stats.get("t_wall_feedback", float("nan")),
        )


class Condensed(Solver):
    """``solver = "condensed"``: :class:`~vimpc.mpc.condensed.CondensedSQP` from the shifted
    plan, its cold starts (and, without a time budget, the warm solves it does not finish)
    by ``condensed_start``; a time budget on its own clock, the rest of it for the
    single-shooting descent."""

    def build(self, ctl: MPC, expand: bool, cached_nlp: bool) -> None:
        super().build(ctl, expand, cached_nlp)
        self.condensed = CondensedSQP(
            ctl.model, ctl.horizon, ctl._cost, ctl._tr, max_iter=ctl.max_iter, tol=ctl.tol,
            compile=ctl.jit == "nlp",
        )  # fmt: skip

    @classmethod
    def refuse_problem(cls, transcription: str, cost: Any, hessian: str) -> None:
        """Refuse a problem the condensed SQP cannot solve."""
        refusal = condensing_refusal(transcription, cost, hessian)
        if refusal is not None:
            raise InputError(f"solver='condensed' cannot solve this problem: {refusal}")

    def _solved(self, ctl: MPC, args, x0, t, p, refs, P_given) -> tuple[Any, Any]:
        if ctl._w0 is not None and not ctl._unhurried:
            return self._condensed_step(ctl, args, refs, p, P_given)
        return self.solver(**args), None

    def _condensed_step(
        self, ctl: MPC, args: dict, refs: np.ndarray, p, P_given: ca.DM
    ) -> tuple[dict | None, tuple[np.ndarray, np.ndarray] | None]:
        """The condensed SQP from the previous plan shifted (``args``); where it does not
        converge with a tube, again from the same guess with the margins of the last call
        that solved, shifted by one stage as the plan is (none after :meth:`MPC.start`): the
        problem that plan solved, one step on (the tube along the new guess can move the
        rails so far that the full Gauss–Newton steps diverge; on the CLNN cart-pole they
        did in the swing-up's first steps). Where neither converges, ``condensed_start``
        from the same guess without a time budget. With one, each try stops at
        :data:`TRY_SHARE` of it (the second at twice that from the call's start), and the
        rest goes to :meth:`CondensedSQP.descend`, from the guess or the tries' last
        iterates, whichever simulates to the lowest merit; its last accepted iterate (states
        the model's step under its inputs, the merit no worse than its start's) is the
        call's solution where it meets the NLP's rows with no slack (``ITERATION_LIMIT``,
        else the fallback input), the call's ``descended``. Returns the solution (or None)
        and the margins ``(tube, tube_inputs)`` of the second try where it solved, else
        None. ``warm_max_iter`` shares the call's iterations as the time budget shares its
        time (the first try up to ``ceil(TRY_SHARE n)``, both up to ``ceil(2 TRY_SHARE n)``,
        the descent the rest), and with it too such a solve never goes to
        ``condensed_start``."""
        from vimpc.mpc.tightening import shifted

        cond, L = self.condensed, ctl._layout
        self.stepper = cond
        started = time.perf_counter()
        budget = np.inf if self.time_budget is None or ctl._unhurried else self.time_budget
        allowed = None if ctl._unhurried else self.checked["warm_max_iter"]
        used = 0  # iterations of the tries, against warm_max_iter
        guess = np.asarray(args["x0"], dtype=np.float64).reshape(-1)
        if not ctl._current:  # shifted: the last state extrapolated linearly, not repeated
            guess[L.x[-1]] = 2 * ctl._w0[L.x[-1]] - ctl._w0[L.x[-2]]

        def share(k: int) -> int | None:  # the iterations up to the end of try k (1, 2)
            return None if allowed is None else min(allowed, math.ceil(k * TRY_SHARE * allowed))

        def solve(P, lbx, ubx, left: float, iterations: int | None):
            nonlocal used
            found = cond.solve(guess.copy(), P, lbx, ubx, refs.T, ctl._u_prev, p, left, iterations)
            if allowed is not None:
                used += cond.stats()["iter_count"]
            return found

        found = solve(args["p"], args["lbx"], args["ubx"], budget * TRY_SHARE, share(1))
        kept, starts = None, []  # the descent's: the tries' last iterates, then the guess
        if found is None:
            starts.append(cond.last_iterate)
        left = 2 * TRY_SHARE * budget - (time.perf_counter() - started)
        tries = None if allowed is None else share(2) - used
        tight = ctl._tightening
        if found is None and tight.solved is not None and left > 0 and tries != 0:
            tube, tube_inputs = tight.solved
            if not ctl._current:
                tube, tube_inputs = shifted(tube, tube_inputs)
            bounds = tight.tightened_bounds(tube_inputs)
            found = solve(tight.with_margins(P_given, tube, tube_inputs), *bounds, left, tries)
            kept = None if found is None else (tube, tube_inputs)
            if found is None:
                starts.append(cond.last_iterate)
        if found is None and self.time_budget is None and allowed is None:
            # no budget: the cold-start solver
            self.stepper = self.solver
            given = {k: v for k, v in args.items() if k not in ("lam_g0", "lam_x0")}
            return self.solver(**given), None
        left = budget - (time.perf_counter() - started)
        rest = None if allowed is None else allowed - used
        if found is None and left > 0 and (rest is None or rest > 0):
            # the rest of the budget: the single-shooting descent
            self.descended = True
            found = cond.descend(
                [*starts, guess], args["p"], args["lbx"], args["ubx"], refs.T, ctl._u_prev, p,
                left, rest,
            )  # fmt: skip
        if found is None:
            return None, None
        w, f, g = found
        sol = {"x": w, "f": f, "g": g, "lam_x": np.zeros(w.size), "lam_g": np.zeros(g.size)}
        return sol, kept

    def next_guess(self, ctl: MPC, sol, w0) -> np.ndarray | None:
        """The next call's warm start after a failed one, or None (a cold start, as after
        any solver's failed call). The guess ``w0`` of a warm solve that the time budget left
        unfinished; after a cold start that failed, its last iterate ``sol``, where finite.
        A warm solve handed to the cold-start solver that failed too leaves None: from that
        guess neither converged, and the shifted plan only ages (on the CLNN cart-pole such
        guesses failed call after call while the cart left the rail)."""
        if ctl._w0 is not None:
            return np.asarray(w0).reshape(-1) if self.stepper is self.condensed else None
        return finite_iterate(sol) if self.stepper is self.solver else None

    def _budget_options(
        self, budget: float, sizes: tuple[int, int, int]
    ) -> tuple[dict[str, Any], Deadline | None]:
        return {}, None  # kept by the condensed SQP (its cold starts are not timed)

    def kept(self, ctl: MPC, tube: np.ndarray, tube_inputs: np.ndarray) -> None:
        # the margins (tube, tube_inputs) of the last call that solved: its second try's
        ctl._tightening.keep_solved(tube, tube_inputs)

    def stopped_by_budget(self, stats: dict) -> bool:
        if self.stepper is self.condensed:
            return stats.get("return_status") == BUDGET_STATUS
        return super().stopped_by_budget(stats)

    def handed_over(self) -> bool:
        return self.stepper is not self.condensed


class Fatrop(InteriorPoint):
    """``solver = "fatrop"``: the interior point exploiting the stage structure; no time
    limit (a time budget is refused: ``warm_max_iter`` bounds its real-time solves)."""


class Ipopt(InteriorPoint):
    """``solver = "ipopt"``: a time budget is ipopt's own ``max_wall_time``."""

    def _budget_options(
        self, budget: float, sizes: tuple[int, int, int]
    ) -> tuple[dict[str, Any], Deadline | None]:
        return {"ipopt": {"max_wall_time": budget}}, None


#: the solver strategy of each value of the ``solver`` option
STRATEGIES: dict[str, type[Solver]] = {
    "sqpmethod": SQPMethod,
    "fatrop": Fatrop,
    "ipopt": Ipopt,
    "rti": RealTime,
    "condensed": Condensed,
}


def finite_iterate(sol) -> np.ndarray | None:
    """A solve's last iterate ``sol["x"]`` as a vector where every entry is finite, else
    None (also for no solve, ``sol`` None)."""
    if sol is None:
        return None
    w = np.asarray(sol["x"], dtype=np.float64).reshape(-1)
    return w if np.all(np.isfinite(w)) else None


def _slack(layout: Any, sol) -> float:
    """The largest slack of the returned iterate (0 without soft rows)."""
    w = np.asarray(sol["x"]).reshape(-1)
    return float(w[layout.s].max(initial=0.0))


def _violation(tr: Any, sol) -> float:
    """Largest violation of the NLP's constraints at the returned iterate."""
    g = np.asarray(sol["g"]).reshape(-1)
    over = np.maximum(tr.lbg - g, g - tr.ubg)
    return float(np.max(over, initial=0.0))
