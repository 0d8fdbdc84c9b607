"""The controller's tightening strategies: how the safety rows (and the inputs) shrink by the
model's bound before each solve.

One strategy per kind, chosen once from the options by :func:`tightening_for` (a table from
the option values to the class, :data:`TIGHTENINGS`): :class:`NoTightening`
(``tightening = "none"``), :class:`OpenLoopTube` (``tube = "open_loop"``, the box),
:class:`FeedbackTube` (``tube = "feedback"``, the ellipsoid of an ancillary LQR) and
:class:`GaussianTube` (``tube_errors = "gaussian"``, the feedback ellipsoid read as Gaussian
quantiles). Each declares the options it reads (``READS``) and checks its own; it owns the
tube's margins on the constraints (:meth:`Tightening.margins`), its memory between calls
(``tube_memory``, and the margins of the last solved call for the condensed SQP's second
try) and the diagnosis of a tube that cannot be computed. The maths is
:mod:`vimpc.mpc.tube`'s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import casadi as ca
import numpy as np

from vimpc import _jit
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc.options import SETTINGS
from vimpc.mpc.problem import Constraints, SafetyRows
from vimpc.mpc.tube import step_jacobians, tube_failure_cause, tube_parts, weight_matrix

#: the cause of a tube that is not finite although its recursions are
NO_CAUSE = (
    "the bound, the linearisation and the tube's recursion are finite along the plan, so a "
    "safety row's gradient is not (check the path constraints there)"
)


@dataclasses.dataclass
class Margins:
    """One call's tightening: the margins ``tube (N + 1, m)`` of the safety rows and
    ``tube_inputs (N, nu)`` of the inputs, the NLP's parameters ``P`` with the margins
    appended, the variables' ``bounds`` (the inputs tightened where the feedback tube's
    input margins are hard), whether no input meets them (``inputs_empty``: nothing to
    solve), the empty and failed stages, the failure's message and the wall time."""

    tube: np.ndarray
    tube_inputs: np.ndarray
    P: Any
    bounds: dict[str, Any]
    inputs_empty: bool = False
    empty_stages: int = 0
    failed_stages: int = 0
    failure: str = ""
    time: float = 0.0


class Tightening:
    """The abstract tightening strategy. ``active`` says whether the NLP carries margins
    (a tube with at least one safety row); ``soft_inputs`` whether the feedback's share of
    the inputs is a soft row of it."""

    #: the options this strategy reads (the others of the tube's must stay at their defaults)
    READS: ClassVar[tuple[str, ...]] = ()
    #: the tube's inputs margins come from the same set as the rows' (the feedback tubes)
    FEEDBACK: ClassVar[bool] = False

    def __init__(self, model: DiscreteModel, horizon: int, checked: dict[str, Any]) -> None:
        self.model, self.horizon = model, horizon
        self.memory: float = checked["tube_memory"]
        self.lipschitz: float | None = checked["tube_lipschitz"]
        self.Q: np.ndarray | None = None
        self.R: np.ndarray | None = None
        self.active = False
        self.soft_inputs = False
        self._fn: ca.Function | None = None
        self._bounds: ca.Function | None = None
        self._shape = (horizon + 1, 0)

    # -- built with the controller ------------------------------------------------------
    def attach(self, safety_rows: SafetyRows, cons: Constraints) -> None:
        """Bind the problem's safety rows and resolved constraints (before the transcription:
        :attr:`active` and :attr:`soft_inputs` shape the NLP)."""
        self.safety_rows, self._cons = safety_rows, cons
        self._shape = (self.horizon + 1, len(safety_rows))

    def build(self, tr: Any, compile: bool) -> None:
        """Bind the transcription ``tr``; a tube builds its function along the guess here
        (compiled to C with ``compile``)."""
        self._tr, self._layout = tr, tr.layout

    def reset(self) -> None:
        """Forget the memory of previous calls (between episodes)."""

    # -- every call -----------------------------------------------------------------------
    def margins(
        self, w0: ca.DM, P: ca.DM, p: np.ndarray, bounds: dict[str, Any], unhurried: bool
    ) -> Margins:
        """The call's margins along the initial guess ``w0`` (``P``: the NLP's parameters
        without the margins; ``unhurried``: :meth:`MPC.start`'s solves): none here."""
        return Margins(np.zeros(self._shape), np.zeros((self.horizon, self.model.nu)), P, bounds)

    def fallback_input(
        self, u: np.ndarray, k: int, plan_x: np.ndarray, plan_u: np.ndarray, x0, P
    ) -> np.ndarray:
        """The fallback input ``u`` (the plan's input at stage ``k``) with the feedback the
        tube assumes on the measured state ``x0`` (None: not known): ``u`` as it is here."""
        return u

    def with_margins(self, P_given, tube: np.ndarray, tube_inputs: np.ndarray) -> np.ndarray:
        """The NLP's parameters: ``P_given`` with the margins appended as the tube along
        the guess appends them."""
        parts = [np.asarray(P_given).reshape(-1), tube[1:].reshape(-1)]
        if self.soft_inputs:
            parts.append(tube_inputs.reshape(-1))
        return np.concatenate(parts)

    def empty_inputs(self, tube_inputs: np.ndarray) -> np.ndarray:
        """The stages ``(N,)`` where the input margins ``tube_inputs (N, nu)`` leave no input
        (the open-loop tube's are zero: never empty)."""
        c = self._cons
        return np.any(c.u_min + tube_inputs > c.u_max - tube_inputs, axis=1)

    def empty_stages(self, tube: np.ndarray, tube_inputs: np.ndarray) -> int:
        """How many stages ``1..N`` have an empty tightened set under these margins."""
        empty_at = self.safety_rows.empty_stages(tube[1:]) | self.empty_inputs(tube_inputs)
        return int(np.count_nonzero(empty_at))

    def tightened_bounds(self, tube_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The variables' bounds ``(lbx, ubx)`` with the input margins ``tube_inputs (N, nu)``
        in the input bounds where they are hard (the feedback tubes without soft bounds):
        else the bounds as they are."""
        return self._tr.lbw.copy(), self._tr.ubw.copy()

    # -- the condensed SQP's second try -----------------------------------------------------
    #: the margins of the last call that solved, with ``keep_solved``'s controller
    solved: tuple[np.ndarray, np.ndarray] | None = None

    def keep_solved(self, tube: np.ndarray, tube_inputs: np.ndarray) -> None:
        """Remember a solved call's margins (``solver = "condensed"``, whose second try of a
        warm solve takes them); nothing to remember without a tube."""

    def age_solved(self, guess: bool, warm: bool, current: bool) -> None:
        """After a failed call: the remembered margins follow the next guess, a stage on
        with the plan shifted once more (``current``: the plan was for this call), none
        without a ``guess`` or after a cold start (not ``warm``)."""
        if self.solved is not None:
            if not guess or not warm:
                self.solved = None
            elif not current:
                self.solved = shifted(*self.solved)


class NoTightening(Tightening):
    """``tightening = "none"``: the constraints as they are."""


class _Tube(Tightening):
    """The abstract tube: the model's bound propagated along the initial guess (the previous
    plan shifted), every safety row tightened at stages ``1..N`` by its margin."""

    READS = ("tightening", "tube", "tube_memory")
    #: the tube's name in messages
    LABEL: ClassVar[str] = ""
    #: :func:`~vimpc.mpc.tube.tube_function`'s ``kind`` and ``errors``
    KIND: ClassVar[str] = ""
    ERRORS: ClassVar[str] = "box"

    def __init__(self, model: DiscreteModel, horizon: int, checked: dict[str, Any]) -> None:
        super().__init__(model, horizon, checked)
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # tube_memory's
        self._diagnosis: tuple[ca.Function, ca.Function] | None = None

    def attach(self, safety_rows: SafetyRows, cons: Constraints) -> None:
        super().attach(safety_rows, cons)
        # without safety rows there is nothing to tighten: the NLP stays the plain one
        self.active = len(safety_rows) > 0
        # with soft bounds the feedback's share of the inputs is a soft row too
        self.soft_inputs = self.active and self.FEEDBACK and cons.soft_bounds

    def build(self, tr: Any, compile: bool) -> None:
        super().build(tr, compile)
        if not self.active:
            return
        self._bounds, self._fn = self._on_guess()
        if compile:
            # the tube is recomputed every call (GP-VI cart-pole: 1.7 ms interpreted, 0.61 ms
            # compiled); the bound apart, so that the tube's library serves every fit of a
            # model that keeps its learned numbers in its parameters
            self._bounds = _jit.compiled_now(self._bounds, "controller's bound") or self._bounds
            self._fn = _jit.compiled_now(self._fn, "controller's tube") or self._fn

    def reset(self) -> None:
        self._last = self.solved = None

    def _on_guess(self) -> tuple[ca.Function, ca.Function]:
        """``bounds: (w, P) -> W (nx, N)``, the model's bound at the stages of the plan held in
        the initial guess ``w``, and ``tube: (w, P, W) -> (P with the tightening appended,
        t (m, N + 1), t_u (nu, N), K (nu, nx N))``: the tube along that plan, and the feedback
        gains it assumes (:func:`~vimpc.mpc.tube.tube_parts`). They take the DMs the solver
        gets anyway, so a solve converts nothing more than the tube it reports. Nothing is
        capped: a margin wider than its constraint's range leaves that stage's tightened set
        empty, which :meth:`margins` counts."""
        m, N, L = self.model, self.horizon, self._layout
        bounds, fn = tube_parts(
            m,
            N,
            self.safety_rows.function,
            self.lipschitz,
            kind=self.KIND,
            Q=self.Q,
            R=self.R,
            errors=self.ERRORS,
        )
        n_p = self._tr.nlp["p"].numel() - self._tr.n_tube

        def on_guess(fn: ca.Function) -> tuple[ca.MX | ca.SX, ...]:
            sym = ca.SX if fn.is_a("SXFunction") else ca.MX
            w, P = sym.sym("w", L.n_w), sym.sym("P", n_p)
            X = ca.reshape(w[L.x.ravel().tolist()], m.nx, N + 1)
            U = ca.reshape(w[L.u.ravel().tolist()], m.nu, N)
            return sym, w, P, X, U, P[n_p - m.np :]

        _, w, P, X, U, p = on_guess(bounds)
        bounds_on_guess = ca.Function("bounds_on_guess", [w, P], [bounds(X, U, p)])
        sym, w, P, X, U, p = on_guess(fn)
        W = sym.sym("W", m.nx, N)
        t, t_u, K = fn(X, U, p, W)
        params = [P, ca.vec(t[:, 1:])] + ([ca.vec(t_u)] if self.soft_inputs else [])
        return bounds_on_guess, ca.Function(
            "tube_on_guess", [w, P, W], [ca.vertcat(*params), t, t_u, K]
        )

    def along(self, w: ca.DM, P: ca.DM) -> tuple[ca.DM, ca.DM, ca.DM, ca.DM]:
        """``(P with the tightening appended, t, t_u, K)`` along the plan held in ``w``, the
        NLP's parameters ``P`` given (:meth:`_on_guess`)."""
        return self._fn(w, P, self._bounds(w, P))

    def margins(
        self, w0: ca.DM, P: ca.DM, p: np.ndarray, bounds: dict[str, Any], unhurried: bool
    ) -> Margins:
        if self._fn is None:
            return super().margins(w0, P, p, bounds, unhurried)
        N, nu = self.horizon, self.model.nu
        start = time.perf_counter()
        P_given = P
        tube_inputs, inputs_empty = np.zeros((N, nu)), False
        failed_stages, failure = 0, ""
        try:
            P, applied, applied_u, _ = self.along(w0, P)
            unevaluated = None
        except RuntimeError as exc:  # a function along the plan failed to evaluate
            applied = ca.DM.inf(self._shape[1], N + 1)
            applied_u = ca.DM.inf(nu, N)
            unevaluated = exc
        tube = applied.full().T
        if self.FEEDBACK:
            tube_inputs = applied_u.full().T
        if self.memory:
            tube, tube_inputs, P = self._remembered(tube, tube_inputs, P, P_given, unhurried)
        inputs_empty_at = self.empty_inputs(tube_inputs)
        # a stage whose tube is not finite (NaN or inf margins) has no known tightened set:
        # it is taken as empty (an infinite margin) and the problem is not solved
        failed = self._failed(tube, tube_inputs, w0, p, unevaluated)
        if failed is not None:
            failed_obs, failed_u, failure = failed
            stages = np.flatnonzero(np.append(failed_u, False) | failed_obs)
            failed_stages = int(stages.size)
            tube[failed_obs] = np.inf
            # the inputs' margins at stage k come from the same ellipsoid as the rows'
            tube_inputs[failed_u | (failed_obs[:N] if self.FEEDBACK else False)] = np.inf
            inputs_empty_at |= failed_obs[1:] | failed_u  # as the empty stages are counted
            inputs_empty = True
        if self.FEEDBACK and not self.soft_inputs:
            # hard input bounds: tightened in the box bounds, and not solved when empty
            lbx, ubx = self.tightened_bounds(tube_inputs)
            bounds = {**bounds, "lbx": ca.DM(lbx), "ubx": ca.DM(ubx)}
            inputs_empty = inputs_empty or bool(inputs_empty_at.any())
        obs_empty_at = self.safety_rows.empty_stages(tube[1:])
        empty_stages = int(np.count_nonzero(obs_empty_at | inputs_empty_at))
        return Margins(
            tube, tube_inputs, P, bounds, inputs_empty, empty_stages, failed_stages, failure,
            time.perf_counter() - start,
        )  # fmt: skip

    def keep_solved(self, tube: np.ndarray, tube_inputs: np.ndarray) -> None:
        if self._fn is not None:
            self.solved = (tube.copy(), tube_inputs.copy())

    def _remembered(
        self, tube: np.ndarray, tube_inputs: np.ndarray, P: ca.DM, P_given: ca.DM, unhurried: bool
    ) -> tuple[np.ndarray, np.ndarray, ca.DM]:
        """``tube_memory``: the tube along the guess (margins ``tube (N + 1, m)`` and
        ``tube_inputs (N, nu)``) widened towards the previous call's at the same stage (the
        same number of steps ahead): ``t + tube_memory * max(0, t_prev - t)`` entry by
        entry, so a tube that does not change between calls stays as it is; the NLP's
        parameters ``P`` rebuilt from the ones given to the tube ``P_given`` in the order
        :meth:`_on_guess` appends the margins. :meth:`MPC.start` (``unhurried``)
        keeps its own tubes (no call before it) and leaves its last for the first call; a
        tube that is not finite everywhere (a failed one) is not remembered."""
        last, self._last = self._last, None
        if last is not None and not unhurried:
            a = self.memory
            prev, prev_u = last
            tube += a * np.maximum(prev - tube, 0.0)
            tube_inputs += a * np.maximum(prev_u - tube_inputs, 0.0)
            P = ca.DM(self.with_margins(P_given, tube, tube_inputs))
        if np.isfinite(tube).all() and np.isfinite(tube_inputs).all():
            self._last = (tube.copy(), tube_inputs.copy())
        return tube, tube_inputs, P

    def _failed(
        self,
        tube: np.ndarray,
        tube_inputs: np.ndarray,
        w0: ca.DM,
        p: np.ndarray,
        error: RuntimeError | None = None,
    ) -> tuple[np.ndarray, np.ndarray, str] | None:
        """``(stages 0..N whose observation margins failed, stages 0..N-1 whose input margins
        failed, the message)`` of a tube that cannot be computed (``error``: the tube
        function's evaluation error, every stage failed), else None (one pass over the
        margins when they are fine)."""
        if np.isfinite(tube).all() and np.isfinite(tube_inputs).all():
            return None
        N = self.horizon
        w = np.asarray(w0).reshape(-1)
        failed_obs = ~np.all(np.isfinite(tube), axis=1)
        failed_u = ~np.all(np.isfinite(tube_inputs), axis=1)
        stages = np.flatnonzero(np.append(failed_u, False) | failed_obs)
        if error is not None:
            last = str(error).strip().splitlines()[-1]
            cause = f"a function along the plan failed to evaluate (CasADi: {last})"
        else:
            cause = self._cause(w, p) or NO_CAUSE
        return (
            failed_obs,
            failed_u,
            f"the {self.LABEL} tube cannot be computed at {stages_text(stages)} of the plan "
            f"(of {N}): {cause}; its tightened set is taken as empty and the problem is not "
            "solved (fallback input)",
        )

    def _cause(self, w: np.ndarray, p: np.ndarray) -> str | None:
        """Why the tube along the plan held in the guess ``w`` is not finite, naming the stage
        (:func:`tube_failure_cause`), or None where its recursions are finite."""
        m, N, L = self.model, self.horizon, self._layout
        if self._diagnosis is None:  # built on the first use only
            x = ca.MX.sym("x", m.nx)
            self._diagnosis = (
                step_jacobians(m),
                ca.Function("to_obs_jacobian", [x], [ca.jacobian(m.to_obs(x), x)]),
            )
        jacobians, to_obs_jacobian = self._diagnosis
        X, U = w[L.x], w[L.u]
        W = [np.asarray(m.bound(X[k], U[k], p), float).reshape(-1) for k in range(N)]
        As, Bs = [], []
        if self.lipschitz is None:
            for k in range(N):
                A, B = jacobians(X[k], U[k], X[k + 1], p)
                As.append(np.asarray(A, float))
                Bs.append(np.asarray(B, float))
        Qx = None
        if self.FEEDBACK:
            Js = [np.asarray(to_obs_jacobian(X[k]), float) for k in range(N + 1)]
            Qx = [J.T @ self.Q @ J for J in Js]
        return tube_failure_cause(W, As, Bs, Qx=Qx, R=self.R, lipschitz=self.lipschitz)


class OpenLoopTube(_Tube):
    """``tube = "open_loop"``: the planned inputs applied as they are, the deviation in the
    box ``e_{k+1} = |A_k| e_k + w_k`` (or ``L max(e_k) + w_k`` with ``tube_lipschitz``),
    margins ``|dh_j/dx| e_k``, the inputs untightened."""

    READS = (*_Tube.READS, "tube_lipschitz")
    LABEL, KIND = "open-loop", "open_loop"


class FeedbackTube(_Tube):
    """``tube = "feedback"``: the time-varying LQR ``K_k`` of the guess's linearisation
    (weights ``tube_Q``, ``tube_R``, by default the cost's), the deviation in an ellipsoid
    holding every error in the bound's box, margins ``sqrt(g^T Sigma_k g)`` and
    ``sqrt(K_k[i] Sigma_k K_k[i]^T)`` for input ``i``."""

    READS = (*_Tube.READS, "tube_errors", "tube_Q", "tube_R")
    FEEDBACK = True
    LABEL, KIND = "feedback", "feedback"

    def __init__(
        self,
        model: DiscreteModel,
        horizon: int,
        checked: dict[str, Any],
        cost: Any,
        tube_Q: Any,
        tube_R: Any,
    ) -> None:
        super().__init__(model, horizon, checked)
        self.Q = weight_matrix(
            "tube_Q" if tube_Q is not None else "tube_Q (by default the cost's Q)",
            cost.Q if tube_Q is None else tube_Q,
            model.nobs,
            definite=False,
        )
        self.R = weight_matrix(
            "tube_R" if tube_R is not None else "tube_R (by default the cost's R)",
            cost.R if tube_R is None else tube_R,
            model.nu,
            definite=True,
        )
        check_stabilizable(model, cost)

    def tightened_bounds(self, tube_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lbx, ubx = super().tightened_bounds(tube_inputs)
        if not self.soft_inputs:
            lbx[self._layout.u] += tube_inputs
            ubx[self._layout.u] -= tube_inputs
        return lbx, ubx

    def fallback_input(
        self, u: np.ndarray, k: int, plan_x: np.ndarray, plan_u: np.ndarray, x0, P
    ) -> np.ndarray:
        """The plan's input plus the tube's feedback on ``x0``'s deviation from the plan's
        prediction, ``K_k (x0 - x_plan_k)`` (the law its margins assume, the gains along the
        plan; the plan's input alone where they do not evaluate or the term is not
        finite)."""
        if self._fn is None or x0 is None:
            return u
        L, nx = self._layout, self.model.nx
        w = np.zeros(L.n_w)
        w[L.x], w[L.u] = plan_x, plan_u
        try:
            w = ca.DM(w)
            K = np.asarray(self.along(w, P)[3])[:, k * nx : (k + 1) * nx]
        except RuntimeError:  # a function along the plan failed: the plan's input alone
            K = np.zeros((self.model.nu, nx))
        feedback = K @ (x0 - plan_x[k])
        return u + feedback if np.all(np.isfinite(feedback)) else u


class GaussianTube(FeedbackTube):
    """``tube = "feedback"`` with ``tube_errors = "gaussian"``: the feedback ellipsoid with the
    bound read as quantiles of independent Gaussian errors, each row held with probability
    ``1 - delta`` per stage (the chance constraints of cautious GP-MPC)."""

    ERRORS = "gaussian"


#: the tightening strategy of each option value: ``tightening``, then ``tube``, then
#: ``tube_errors``
TIGHTENINGS: dict[str, Any] = {
    "none": NoTightening,
    "tube": {
        "open_loop": OpenLoopTube,
        "feedback": {"box": FeedbackTube, "gaussian": GaussianTube},
    },
}


def tightening_class(options: Mapping[str, Any]) -> type[Tightening]:
    """The strategy class of the option values ``options`` (``tightening``, then ``tube``,
    then ``tube_errors`` where the choice goes on), unchecked: :data:`TIGHTENINGS`."""
    chosen = TIGHTENINGS[options["tightening"]]
    for key in ("tube", "tube_errors"):
        if isinstance(chosen, dict):
            chosen = chosen[options[key]]
    return chosen


def tightening_for(checked: dict[str, Any], model: DiscreteModel) -> type[Tightening]:
    """The strategy of the checked options ``checked``, after refusing a tube without the
    model's bound and every tube option that the chosen strategy would not read (given away
    from its default), in the order: the tube's own, then the open-loop tube's, then the
    feedback tube's (``tube_Q``, ``tube_R`` are ``MPC``'s arguments: None unless given)."""
    tightening, tube = checked["tightening"], checked["tube"]
    if tightening == "tube" and model.bound is None:
        raise InputError(
            "tightening='tube' needs the model's one-step error bound, but the model has "
            "no bound (DiscreteModel.bound is None); calibrate one (e.g. "
            "vimpc.models.calibration) or use tightening='none'"
        )
    chosen = tightening_class(checked)
    reads = chosen.READS
    # options that only the tube (or one kind of tube) reads: without it they do nothing
    for name in ("tube", "tube_memory", "tube_lipschitz"):
        if not issubclass(chosen, _Tube) and _given(name, checked[name]):
            raise InputError(
                f"{name} = {checked[name]!r} only applies with tightening='tube', got "
                f"tightening={tightening!r}; set tightening='tube' or drop {name}"
            )
    if "tube_lipschitz" not in reads and _given("tube_lipschitz", checked["tube_lipschitz"]):
        raise InputError(
            f"tube_lipschitz = {checked['tube_lipschitz']!r} applies only to tube='open_loop', "
            f"got tube={tube!r}; drop tube_lipschitz or set tube='open_loop'"
        )
    for name in ("tube_errors", "tube_Q", "tube_R"):
        if name not in reads and _given(name, checked[name]):
            raise InputError(
                f"{name} = {checked[name]!r:.80} applies only to tube='feedback', got "
                f"tube={tube!r}; drop {name} or set tube='feedback'"
            )
    return chosen


def make_tightening(
    chosen: type[Tightening],
    checked: dict[str, Any],
    model: DiscreteModel,
    horizon: int,
    cost: Any,
    tube_Q: Any,
    tube_R: Any,
) -> Tightening:
    """The strategy ``chosen`` (by :func:`tightening_for`) built on the resolved ``cost``
    (the feedback tubes check their weights, by default the cost's, here)."""
    if issubclass(chosen, FeedbackTube):
        return chosen(model, horizon, checked, cost, tube_Q, tube_R)
    return chosen(model, horizon, checked)


def _given(name: str, value: Any) -> bool:
    """Whether the option ``name`` is set away from its default (the weights: given)."""
    if name in ("tube_Q", "tube_R"):
        return value is not None
    if name == "tube_memory":
        return value != 0.0
    return value != SETTINGS[name].default


def shifted(*margins: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each stage-wise array one stage on, as a plan is shifted: stage ``k`` takes stage
    ``k + 1``'s rows, the last stage its own again."""
    return tuple(np.vstack([m[1:], m[-1:]]) for m in margins)


def stages_text(stages: np.ndarray) -> str:
    """``"stage 3"``, ``"stages 0-20"`` or ``"stages 2, 5-7"``."""
    runs, start = [], None
    for i, k in enumerate(stages):
        if start is None:
            start = k
        if i + 1 == len(stages) or stages[i + 1] != k + 1:
            runs.append(f"{start}" if start == k else f"{start}-{k}")
            start = None
    return ("stage " if len(stages) == 1 else "stages ") + ", ".join(runs)


def check_stabilizable(model: DiscreteModel, cost) -> None:
    """Refuse ``tube='feedback'`` when the linearisation at the cost's reference has a mode
    that grows (``|lambda| > 1``) and that the input cannot reach (PBH test): no feedback
    shrinks the tube there."""
    x = np.asarray(model.from_obs(np.asarray(cost.reference(0.0), float)), float).reshape(-1)
    u, p = cost.u_reference, model.p_default
    x_next = np.asarray(model.step(x, u, p), float).reshape(-1)
    A, B = (np.asarray(M, float) for M in step_jacobians(model)(x, u, x_next, p))
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
        raise InputError(
            "tube='feedback' needs the model's linearisation at the cost's reference "
            f"(x = {x.tolist()}, u = {u.tolist()}), which is not finite there (the step failed); "
            "give a reference the model can step from, or use tube='open_loop'"
        )
    scale = max(1.0, float(np.abs(np.hstack([A, B])).max()))
    for lam in np.linalg.eigvals(A):
        if abs(lam) <= 1 + 1e-6:
            continue
        M = np.hstack([A - lam * np.eye(model.nx), B])
        if np.linalg.matrix_rank(M, tol=1e-9 * scale) < model.nx:
            raise InputError(
                f"tube='feedback' needs an LQR that can stabilise the model's linearisation, but "
                f"at the cost's reference (x = {np.round(x, 6).tolist()}, u = {u.tolist()}) the "
                f"mode of eigenvalue {lam:.6g} of A (growing, |lambda| = {abs(lam):.6g}) is not "
                "reachable from the input (PBH rank test on [A - lambda I, B]); use "
                "tube='open_loop' or a model whose input reaches that mode"
            )
