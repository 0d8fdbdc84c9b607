"""The contract every combination of the controller's strategies must satisfy, as an
inheritable suite.

:class:`~vimpc.mpc.controller.MPC` is a facade over three strategies: a transcription
(``step``, ``implicit``), a solver (``sqpmethod``, ``fatrop``, ipopt``, ``rti``,
``condensed``) and a tightening (none, the open-loop box, the feedback ellipsoid, the Gaussian
ellipsoid). A test module subclasses :class:`ControllerContract` and gives a small problem;
every ``test_*`` method then runs on every valid combination (:meth:`combinations`) and checks
that the invalid ones are refused::

    class TestDoubleIntegrator(ControllerContract):
        def make_model(self):
            return double_integrator()  # with a residual and a bound

        def make_cost(self):
            return Cost(Q=[10.0, 1.0], R=0.1, reference=[1.0, 0.0])

        def make_constraints(self):
            return Constraints(u_min=-1.0, u_max=1.0, obs_min=[-2.0, -0.5], obs_max=[2.0, 0.5])

        def initial_obs(self):
            return np.zeros(2)

The checks: the first input agrees with a reference solve (ipopt at a tight tolerance, the
same transcription and tightening) to :attr:`~ControllerContract.agreement_tol`, with a
status that says it solved; a problem without a feasible input (:meth:`infeasible_constraints`)
gives a status that says it failed and the fallback input; a time budget of a share of the
same process's unbudgeted solve is kept (a ratio, never an absolute time); a tube tightens
every bound by at least the model's bound propagated one step (the margin of stage 1), so the
tightened bounds lie inside the nominal ones, and the plan keeps them.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.mpc import MPC, Constraints, Cost, Status
from vimpc.mpc.solvers import SOLVERS
from vimpc.mpc.transcription import TRANSCRIPTIONS

#: the tightenings, as the options that choose them
TIGHTENINGS: dict[str, dict[str, Any]] = {
    "none": {},
    "open_loop": {"tightening": "tube"},
    "feedback": {"tightening": "tube", "tube": "feedback"},
    "gaussian": {"tightening": "tube", "tube": "feedback", "tube_errors": "gaussian"},
}
#: the solvers that keep a time budget on every solve (fatrop has no time limit: refused;
#: the condensed SQP's cold starts are not held to it)
TIMED = ("ipopt", "sqpmethod", "rti")
#: the statuses of a solve with a time budget
_BUDGET_STATUSES = (Status.SOLVED, Status.ITERATION_LIMIT, Status.LATE, Status.TIME_LIMIT)


def _fastest(ctl: MPC, obs: np.ndarray, repeats: int):
    """The shortest of ``repeats`` first calls of ``ctl`` at ``obs`` (reset after each)."""
    calls = []
    for _ in range(repeats):
        calls.append(ctl(obs))
        ctl.reset()
    return min(calls, key=lambda c: c.solve_time)


def _called_once(ctl: MPC, obs: np.ndarray) -> MPC:
    """``ctl`` after one call and a reset: its one-off work (CasADi's allocations) apart."""
    ctl(obs)
    ctl.reset()
    return ctl


class ControllerContract:
    """Inheritable checks of the controller on every valid combination of its strategies.

    Subclasses implement :meth:`make_model` (a model with a ``bound``; with a ``residual`` the
    implicit transcription is checked too), :meth:`make_cost`, :meth:`make_constraints` (with
    a finite observation bound, which the tubes tighten) and :meth:`initial_obs`, and may
    override :meth:`infeasible_constraints` and the tolerances below.
    """

    horizon: int = 10
    agreement_tol: float = 1e-4
    """Largest ``|u - u_ref|`` of the first input, in input units, against the reference."""
    tol: float = 1e-8
    """The solvers' tolerance in the agreement check."""
    reference_tol: float = 1e-10
    """The reference solve's (ipopt) tolerance."""
    budget_share: float = 0.1
    """The time budget, as a share of the same process's unbudgeted solve."""
    budget_overrun: float = 1.0
    """The shortest solve the budget stopped takes at most this share of the unbudgeted one
    (a solve's fixed work, ipopt's set-up among it, is outside the solver's iterations: on a
    small problem a solve stopped after a few iterations can take most of a full one's
    time)."""
    budget_repeats: int = 5
    """The solves each time is the shortest of (another process's load only lengthens one)."""
    budget_iterations: int = 8
    """The unbudgeted iterations from which the budget must stop a solve."""

    # ---- to implement -------------------------------------------------------------------

    def make_model(self) -> DiscreteModel:
        raise NotImplementedError(f"{type(self).__name__} must implement make_model()")

    def make_cost(self) -> Cost:
        raise NotImplementedError(f"{type(self).__name__} must implement make_cost()")

    def make_constraints(self) -> Constraints:
        raise NotImplementedError(f"{type(self).__name__} must implement make_constraints()")

    def initial_obs(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement initial_obs()")

    def infeasible_constraints(self) -> Constraints:
        """Constraints no input meets from :meth:`initial_obs`: by default the first
        observation entry held by hard bounds to a narrow band 1 (plus its range) away from
        where it starts, which no step can reach."""
        obs = np.asarray(self.initial_obs(), float)
        cons = self.make_constraints()
        target = obs[0] + 1.0 + max(1.0, abs(obs[0]))
        lo = np.full(obs.size, -np.inf)
        hi = np.full(obs.size, np.inf)
        lo[0], hi[0] = target, target + 0.1
        return dataclasses.replace(cons, obs_min=lo, obs_max=hi, soft_bounds=False, path=())

    # ---- the combinations ---------------------------------------------------------------

    def combinations(self) -> list[tuple[str, str, str]]:
        """Every valid ``(transcription, solver, tightening)``: the condensed SQP needs the
        implicit transcription, and the implicit transcription a model with a residual."""
        model = self._model()
        transcriptions = [t for t in TRANSCRIPTIONS if t == "step" or model.residual is not None]
        return [
            (tr, solver, tight)
            for tr, solver, tight in itertools.product(transcriptions, SOLVERS, TIGHTENINGS)
            if not (solver == "condensed" and tr != "implicit")
        ]

    def build(self, transcription: str, solver: str, tightening: str, **options: Any) -> MPC:
        """The controller of one combination, interpreted (``jit = "none"``), with
        ``options`` over the contract's."""
        constraints = options.pop("constraints", None) or self.make_constraints()
        settings: dict[str, Any] = dict(
            transcription=transcription,
            solver=solver,
            jit="none",
            tol=self.tol,
            max_iter=200,
            **TIGHTENINGS[tightening],
        )
        if solver == "rti":  # its cold start to convergence, as the reference's
            settings["rti_start"] = "ipopt"
        settings.update(options)
        return MPC(self._model(), self.horizon, self.make_cost(), constraints, **settings)

    # ---- helpers ------------------------------------------------------------------------

    def _model(self) -> DiscreteModel:
        cls = type(self)
        if "_contract_model" not in cls.__dict__:
            model = self.make_model()
            assert isinstance(model, DiscreteModel), (
                f"{cls.__name__}.make_model() must return a DiscreteModel, "
                f"got {type(model).__name__}"
            )
            assert model.bound is not None, f"{cls.__name__}.make_model() needs a bound"
            cls._contract_model = model
        return cls.__dict__["_contract_model"]

    def _reference(self, transcription: str, tightening: str):
        """The reference solve of the first call: ipopt at :attr:`reference_tol`."""
        cls = type(self)
        cache = cls.__dict__.get("_contract_references")
        if cache is None:
            cache = {}
            cls._contract_references = cache
        key = (transcription, tightening)
        if key not in cache:
            ref = self.build(transcription, "ipopt", tightening, tol=self.reference_tol)
            cache[key] = ref(self.initial_obs())
            assert cache[key].status is Status.SOLVED, (
                f"the reference (ipopt, {transcription}, {tightening}) did not solve: "
                f"{cache[key].status.value}"
            )
        return cache[key]

    # ---- the contract -------------------------------------------------------------------

    def test_the_first_input_agrees_with_the_reference(self) -> None:
        """Every valid combination solves the first call (``Status.SOLVED``; the real-time
        iteration's cold start by ``rti_start``) to the reference's first input."""
        obs = self.initial_obs()
        for combo in self.combinations():
            want = self._reference(combo[0], combo[2])
            got = self.build(*combo)(obs)
            assert got.status is Status.SOLVED, f"{combo}: {got.status.value}"
            assert not got.fallback, f"{combo}: the fallback input"
            err = float(np.max(np.abs(got.u - want.u)))
            assert err <= self.agreement_tol, (
                f"{combo}: first input {got.u.tolist()} against the reference's "
                f"{want.u.tolist()} (|difference| {err:.3g} > {self.agreement_tol:g})"
            )

    def test_an_infeasible_problem_gets_the_fallback_input(self) -> None:
        """Without a feasible input every solver's status says so (not ``ok``) and the input
        is the fallback, ``safe_input`` without a previous plan, within the input bounds."""
        obs, cons = self.initial_obs(), self.infeasible_constraints()
        for transcription, solver, _ in self.combinations():
            if _ != "none":
                continue
            ctl = self.build(transcription, solver, "none", constraints=cons)
            got = ctl(obs)
            combo = (transcription, solver)
            assert not got.status.ok, f"{combo}: {got.status.value} on an infeasible problem"
            assert got.fallback, f"{combo}: no fallback input"
            np.testing.assert_array_equal(got.u, ctl.safe_input, err_msg=str(combo))
            assert np.all(np.isfinite(got.u)), combo

    def test_the_time_budget_is_kept(self) -> None:
        """A budget of :attr:`budget_share` of the same process's unbudgeted solve (the
        shortest ``solve_time`` of :attr:`budget_repeats`, both instances called once
        before) either lets the solve finish (``SOLVED``, ``ITERATION_LIMIT``, ``LATE``) or
        stops it (``TIME_LIMIT``, the fallback input) in fewer iterations than the unbudgeted
        solve, the shortest stopped one within :attr:`budget_overrun` of its time. Solvers check the clock between
        iterations (ipopt its own, which leaves CasADi's work out), so a short solve may end
        past the budget (``LATE``); at least one combination of :attr:`budget_iterations`
        iterations or more must be stopped (the problem is too easy otherwise). Fatrop,
        which has no time limit, refuses a budget; the real-time iteration with one becomes
        ``sqpmethod`` stopped after one iteration, with a valid status."""
        obs, stopped = self.initial_obs(), 0
        for transcription, solver, tightening in self.combinations():
            combo = (transcription, solver, tightening)
            if tightening != "none" or solver not in TIMED:
                continue
            # no rti_start: a budget makes rti sqpmethod stopped after one iteration
            options = {"rti_start": "none"} if solver == "rti" else {}
            options.update(tol=1e-12, max_iter=500)
            plain = _called_once(self.build(*combo, **options), obs)
            free = _fastest(plain, obs, self.budget_repeats)
            options.update(time_budget=self.budget_share * free.solve_time, period=1e3)
            timed = _called_once(self.build(*combo, **options), obs)
            calls = [_fastest(timed, obs, 1) for _ in range(self.budget_repeats)]
            for got in calls:
                assert got.status in _BUDGET_STATUSES, f"{combo}: {got.status.value}"
                if got.status is Status.TIME_LIMIT:
                    assert got.fallback, f"{combo}: stopped by the budget without the fallback"
            stops = [c for c in calls if c.status is Status.TIME_LIMIT]
            if not stops or free.iterations < self.budget_iterations:
                # finished within the budget, or in its last iteration past it; or stopped
                # after its first iteration, all the time it needed
                continue
            fewest = min(c.iterations for c in stops)
            assert fewest < free.iterations, (
                f"{combo}: the budget stopped none of its solves before the "
                f"{free.iterations} iterations of the unbudgeted one"
            )
            ratio = min(c.solve_time for c in stops) / free.solve_time
            assert ratio <= self.budget_overrun, (
                f"{combo}: stopped after {ratio:.2f} of the unbudgeted solve's time (its "
                f"budget {self.budget_share:g} of it, {free.iterations} iterations unbudgeted)"
            )
            stopped += 1
        assert stopped, (
            f"no solve of {self.budget_iterations} iterations or more was stopped by a budget of "
            f"{self.budget_share:g} of its time: give a harder problem"
        )
        try:
            self.build("step", "fatrop", "none", time_budget=1.0, period=1e3)
        except InputError as exc:
            assert "cannot be kept by solver = 'fatrop'" in str(exc), str(exc)
        else:
            raise AssertionError("fatrop accepted a time budget it cannot keep")

    def test_a_tube_tightens_every_bound_by_the_bound(self) -> None:
        """Each tube's margins are zero at stage 0, finite and nonnegative, and at stage 1
        at least the box worst case of the model's bound ``|d obs_i / dx| . w_0`` for every
        bounded observation entry ``i`` (the tightened bounds inside the nominal ones by the
        bound); the plan keeps the tightened bounds; no tightening, no margins."""
        import casadi as ca

        model, obs = self._model(), self.initial_obs()
        cons = self.make_constraints().resolved(model.nobs, model.nu)
        x0 = np.asarray(model.from_obs(obs), float).reshape(-1)
        for combo in self.combinations():
            transcription, solver, tightening = combo
            ctl = self.build(*combo)
            got = ctl(obs)
            rows = ctl.safety_rows
            assert got.tube.shape == (self.horizon + 1, len(rows)), combo
            if tightening == "none":
                assert not np.any(got.tube), f"{combo}: margins without a tube"
                continue
            assert len(rows.lower) + len(rows.upper) > 0, "the contract needs an obs bound"
            assert np.all(got.tube[0] == 0.0), f"{combo}: a margin at stage 0"
            assert np.all(np.isfinite(got.tube)) and np.all(got.tube >= 0.0), combo
            # the first call's tube follows the cold guess: x0 held under safe_input
            w0 = np.asarray(model.bound(x0, ctl.safe_input, model.p_default), float).ravel()
            x = ca.MX.sym("x", model.nx)
            J = ca.Function("J", [x], [ca.jacobian(model.to_obs(x), x)])
            box = np.abs(np.asarray(J(x0), float)) @ w0
            entries = np.concatenate([rows.lower, rows.upper]).astype(int)
            margin = got.tube[1, : entries.size]
            short = margin < box[entries] * (1 - 1e-9) - 1e-15
            assert not short.any(), (
                f"{combo}: stage-1 margins {margin.tolist()} below the bound's box "
                f"{box[entries].tolist()}"
            )
            if got.status.ok:
                plan = got.obs[1:]
                for j, i in enumerate(rows.lower):
                    low = cons.obs_min[i] + got.tube[1:, j]
                    assert np.all(plan[:, i] >= low - 1e-6), f"{combo}: below a tightened bound"
                for j, i in enumerate(rows.upper):
                    high = cons.obs_max[i] - got.tube[1:, len(rows.lower) + j]
                    assert np.all(plan[:, i] <= high + 1e-6), f"{combo}: above a tightened bound"

    def test_invalid_combinations_are_refused(self) -> None:
        """The combinations no strategy can make are refused when the controller is built,
        by an :class:`InputError` naming the option and the fix."""
        refused = [
            (("step", "condensed", "none"), {}, "solver='condensed' cannot solve this problem"),
            (("step", "sqpmethod", "none"), {"tube": "feedback"}, "only applies with"),
            (("step", "sqpmethod", "open_loop"), {"tube_errors": "gaussian"}, "tube='feedback'"),
            (("step", "sqpmethod", "feedback"), {"tube_lipschitz": 1.0}, "tube='open_loop'"),
            (("step", "fatrop", "none"), {"qpsol": "osqp"}, "applies only to solver="),
            (("step", "ipopt", "none"), {"rti_start": "fatrop"}, "applies only to solver='rti'"),
            (("step", "sqpmethod", "none"), {"warm_barrier": 1e-3}, "applies only to solver="),
        ]
        for combo, options, message in refused:
            try:
                self.build(*combo, **options)
            except InputError as exc:
                assert message in str(exc), f"{combo} {options}: {exc}"
            else:
                raise AssertionError(f"{combo} with {options} was not refused")
        model = self._model()
        bare = dataclasses.replace(model, residual=None, bound=None, delta=None, bound_info=None)
        for options, message in (
            ({"transcription": "implicit"}, "transcription='implicit' needs a model with a"),
            ({"tightening": "tube"}, "tightening='tube' needs the model's one-step error"),
        ):
            try:
                MPC(bare, self.horizon, self.make_cost(), self.make_constraints(), **options)
            except InputError as exc:
                assert message in str(exc), f"{options}: {exc}"
            else:
                raise AssertionError(f"{options} on a model without it was not refused")
