"""What one controller call returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class Status(enum.Enum):
    """Outcome of one solve; values read as messages."""

    SOLVED = "solved to tolerance"
    ITERATION_LIMIT = (
        "stopped before convergence (the iteration limit; the condensed SQP's descent at the "
        "time budget) at an iterate that meets the constraints; the iterate is used"
    )
    LATE = "solved, but the solve ran past the time budget (checked between iterations)"
    TIME_LIMIT = "stopped at the time budget: fell back to the shifted previous plan"
    INFEASIBLE = "infeasible: fell back to the shifted previous plan"
    FAILED = "solver failed: fell back to the shifted previous plan"

    @property
    def ok(self) -> bool:
        """True when the input came from this solve rather than from the fallback."""
        return self in (Status.SOLVED, Status.ITERATION_LIMIT, Status.LATE)


@dataclass(frozen=True)
class MPCResult:
    """One control step.

    Attributes:
        u: the input to apply, shape ``(nu,)``.
        status: the solve outcome; on a failure ``u`` is the fallback.
        x: predicted model states, shape ``(N + 1, nx)``.
        obs: predicted observations, shape ``(N + 1, nobs)``.
        u_plan: planned inputs, shape ``(N, nu)``.
        iterations: solver iterations.
        solve_time: wall time of the NLP solve alone [s].
        call_time: wall time of the whole controller call [s]: the tube, the solve and the
            Python work around them, the time a robot waits for ``u`` (nan when unknown).
        late: True when ``call_time`` exceeded the controller's sampling period
            (``MPC.period``): the input came later than the next sample.
        slack: largest slack of the soft constraints (0 when all hold).
        plan_constraint: largest ``|constraint(x_k)|`` of the model's holonomic constraints
            over the predicted states ``k = 1..N`` of the plan (NaN for a model without
            constraints or a fallback): how far the controller's predictions leave them.
        handed_over: ``solver = "condensed"``: True when this call was solved by its
            ``condensed_start`` solver instead (a cold start, or, without a time budget, a
            warm solve the condensed SQP did not finish).
        tube_kept: ``solver = "condensed"`` with a tube: True when the condensed SQP solved
            this call with the margins of the last call that solved, shifted by one stage,
            after it did not converge with the tube along this call's guess (``tube`` is
            then those margins).
        descended: ``solver = "condensed"`` with a time budget: True when the call's solution
            came from the condensed SQP's single-shooting descent (``CondensedSQP.descend``),
            after its condensed SQP tries did not converge within their shares of the budget:
            converged (``SOLVED``), or its last accepted iterate (``ITERATION_LIMIT``; the
            fallback where its tightened rows do not hold without slack).
        cost: optimal objective value (nan on failure).
        fallback: True when ``u`` is the documented fallback.
        tube: the tightening applied to each safety row at each stage in this solve,
            shape ``(N + 1, m)`` (row 0 is zero: the initial state is given; all zeros
            without tightening).
        tube_time: wall time spent computing the tube in this call [s] (0 without).
        tube_inputs: the tightening of each input's bounds at each stage, shape ``(N, nu)``
            (the feedback tube's share of the input; zeros otherwise).
        empty_tube_stages: how many stages of this solve's tightened set were empty (a
            bounded observation entry or an input whose margins exceed its range); 0
            without tightening.
        failed_tube_stages: how many stages of this solve's tube could not be computed (NaN
            or inf margins, or the feedback tube's zeros over an ellipsoid that is not finite:
            a bound or linearisation that is not finite, an LQR that overflows); such a
            stage's set is taken as empty (counted in ``empty_tube_stages`` too, its margins
            reported as ``inf``), the problem is not solved and the status is
            ``INFEASIBLE``. 0 without tightening.
        tube_failure: which stages and why, when ``failed_tube_stages > 0``; else ``""``.
        preparation_time: ``solver = "rti"``: the wall time of the preparation phase this
            call's step was linearised and condensed in [s], whether it ran in
            ``MPC.prepare`` before the call or in the call (nan for other solvers and for a
            cold start that ``rti_start`` solves to convergence, in ``solve_time``).
        feedback_time: ``solver = "rti"``: the wall time of the feedback phase [s], from
            the measured state to the step (the condensed QP and the plan's expansion); nan
            where ``preparation_time`` is.
    """

    u: np.ndarray
    status: Status
    x: np.ndarray
    obs: np.ndarray
    u_plan: np.ndarray
    iterations: int
    solve_time: float
    slack: float
    cost: float
    fallback: bool
    tube: np.ndarray
    tube_time: float
    tube_inputs: np.ndarray | None = None
    empty_tube_stages: int = 0
    failed_tube_stages: int = 0
    tube_failure: str = ""
    call_time: float = float("nan")
    late: bool = False
    preparation_time: float = float("nan")
    feedback_time: float = float("nan")
    plan_constraint: float = float("nan")
    handed_over: bool = False
    tube_kept: bool = False
    descended: bool = False
