"""The contract every :class:`~vimpc.dynamics.DiscreteModel` must satisfy, as an inheritable suite.

A test module subclasses :class:`DiscreteModelContract` and says how to build the model and
where its domain is; every ``test_*`` method then runs on that model::

    class TestPendulumNominal(DiscreteModelContract):
        def make_model(self):
            return pendulum_nominal().discrete_model()

        def sample_states(self, rng, n):
            return rng.uniform([-np.pi, -2.0], [np.pi, 2.0], size=(n, 2))

        def sample_inputs(self, rng, n):
            return rng.uniform(-1.0, 1.0, size=(n, 1))

Checks that do not apply to a model (no ``residual``, no ``bound``) are skipped, not passed.
A model with a bound is also checked against held-out transitions when the subclass gives
them (:meth:`DiscreteModelContract.heldout_transitions`).
"""

from __future__ import annotations

import unittest
from typing import Any

import casadi as ca
import numpy as np
from scipy.stats import binom

from vimpc.dynamics import (
    BOUND_CALIBRATED_ON,
    BOUND_LEVELS,
    FUNCTION_FIELDS,
    BoundInfo,
    CheckedFunction,
    DiscreteModel,
)
from vimpc.errors import InputError, VimpcError


def _num(fn: ca.Function, *args: Any) -> np.ndarray:
    """Evaluate ``fn`` on numbers; its (single) output as a flat float64 array."""
    return np.asarray(ca.DM(fn(*args)).full(), dtype=np.float64).reshape(-1)


def _is_column(shape: tuple[int, int], n: int) -> bool:
    # Controllers stack states with vertcat, so every vector is a column; an empty vector
    # may come as 0x0 or 0x1 depending on how the symbol was made.
    return shape == (n, 1) or (n == 0 and shape[0] * shape[1] == 0)


class DiscreteModelContract:
    """Inheritable checks that a :class:`DiscreteModel` is fit to hand to the controller.

    Subclasses implement :meth:`make_model`, :meth:`sample_states` and :meth:`sample_inputs`
    and may override the tolerances below. :meth:`make_model` is called once per test class
    (the model is frozen, so sharing it between test methods is safe). Parameters are always
    ``model.p_default``.
    """

    residual_tol: float = 1e-10
    """Largest ``|residual(x, u, step(x, u, p), p)|`` accepted (the Newton tolerance of an
    implicit step sets how small this can be)."""
    jacobian_rtol: float = 1e-5
    """``|J_ad - J_fd| / max(1, |J_ad|)`` accepted, Frobenius norms."""
    n_samples: int = 8
    fd_step: float = 1e-6
    """Central-difference step, scaled by ``max(1, |x_i|)``."""
    roundtrip_tol: float = 1e-10
    constraint_preserving: bool = False
    """Set True for models whose ``step`` keeps ``constraint(x) == 0``; then
    :meth:`sample_states` must return points on the constraint manifold."""
    velocity_constraint_preserving: bool = False
    """Set True for models whose ``step`` keeps ``velocity_constraint(x) == 0``; then
    :meth:`sample_states` must return states that satisfy it."""
    manifold_tol: float = 1e-10
    constraint_tol: float = 1e-8
    bound_nan_at_nonfinite: bool = False
    """Set True for models whose bound is NaN where an argument has a NaN or inf entry, as
    every registered family's is (:meth:`vimpc.models.calibration.Bound.apply`)."""
    coverage_alpha: float = 1e-3
    """Significance of the coverage check: it fails when so many held-out errors leave the
    bound that a coverage of ``1 - delta`` would give that many with probability below
    ``coverage_alpha``."""
    seed: int = 0

    # ---- to implement -------------------------------------------------------------------

    def make_model(self) -> DiscreteModel:
        raise NotImplementedError(f"{type(self).__name__} must implement make_model()")

    def sample_states(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n, nx)`` states on the model's documented domain."""
        raise NotImplementedError(f"{type(self).__name__} must implement sample_states(rng, n)")

    def sample_inputs(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n, nu)`` inputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement sample_inputs(rng, n)")

    def heldout_transitions(
        self, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Optional: measured transitions ``(X, U, X_next)`` of the system the model's bound
        was calibrated on, not used in calibrating it, in the model's state coordinates
        (shapes ``(m, nx)``, ``(m, nu)``, ``(m, nx)``). ``None`` skips the coverage check."""
        return None

    # ---- helpers ------------------------------------------------------------------------

    def _model(self) -> DiscreteModel:
        cls = type(self)
        # Cached on the class itself (not a parent) since pytest makes one instance per test
        # and building a learned model can be slow.
        if "_contract_model" not in cls.__dict__:
            model = self.make_model()
            assert isinstance(model, DiscreteModel), (
                f"{cls.__name__}.make_model() must return a DiscreteModel, "
                f"got {type(model).__name__}"
            )
            cls._contract_model = model
        return cls.__dict__["_contract_model"]

    def _samples(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs ``(x, u)`` drawn with a fixed seed, checked for shape and finiteness."""
        m = self._model()
        rng = np.random.default_rng(self.seed)
        n = self.n_samples
        xs = np.asarray(self.sample_states(rng, n), dtype=np.float64)
        us = np.asarray(self.sample_inputs(rng, n), dtype=np.float64)
        name = type(self).__name__
        assert xs.shape == (n, m.nx), f"{name}.sample_states must return shape {(n, m.nx)}"
        assert us.shape == (n, m.nu), f"{name}.sample_inputs must return shape {(n, m.nu)}"
        assert np.all(np.isfinite(xs)) and np.all(np.isfinite(us)), f"{name} sampled NaN or inf"
        return list(zip(xs, us, strict=True))

    # ---- the contract -------------------------------------------------------------------

    def test_shapes_and_names(self) -> None:
        """Every function takes and returns column vectors of the declared sizes, ``dt`` is a
        positive finite number, and the name tuples hold one string per entry."""
        m = self._model()
        assert np.isfinite(m.dt) and m.dt > 0, f"dt must be positive and finite, got {m.dt!r}"
        signatures = {
            "step": (m.step, [m.nx, m.nu, m.np], [m.nx]),
            "from_obs": (m.from_obs, [m.nobs], [m.nx]),
            "to_obs": (m.to_obs, [m.nx], [m.nobs]),
            "residual": (m.residual, [m.nx, m.nu, m.nx, m.np], [m.nx]),
            "bound": (m.bound, [m.nx, m.nu, m.np], [m.nx]),
            "energy": (m.energy, [m.nx, m.np], [1]),
        }
        for name in ("constraint", "velocity_constraint"):
            fn = getattr(m, name)
            if fn is not None:
                signatures[name] = (fn, [m.nx], [fn.size1_out(0)])
        for name, (fn, ins, outs) in signatures.items():
            if fn is None:
                continue
            got_in = [fn.size_in(i) for i in range(fn.n_in())]
            got_out = [fn.size_out(i) for i in range(fn.n_out())]
            ok = len(got_in) == len(ins) and len(got_out) == len(outs)
            ok = ok and all(
                _is_column(s, n) for s, n in zip(got_in + got_out, ins + outs, strict=True)
            )
            assert ok, (
                f"{name} must map columns of sizes {ins} to {outs}, got {got_in} -> {got_out}"
            )
        for field, size in (("state_names", m.nx), ("input_names", m.nu), ("param_names", m.np)):
            names = getattr(m, field)
            assert isinstance(names, tuple) and len(names) == size, (
                f"{field} must be a tuple of {size} names, got {names!r}"
            )
            assert all(isinstance(s, str) for s in names), f"{field} must be strings, got {names!r}"
        p = m.p_default
        for x, u in self._samples():
            assert _num(m.step, x, u, p).shape == (m.nx,)
            obs = _num(m.to_obs, x)
            assert obs.shape == (m.nobs,), f"to_obs gave {obs.shape[0]} entries, nobs={m.nobs}"
            assert _num(m.from_obs, obs).shape == (m.nx,)

    def test_numeric_calls_are_checked(self) -> None:
        """Every function is a :class:`~vimpc.dynamics.CheckedFunction` (still a
        ``casadi.Function``): a numeric call with a state of the wrong size raises
        :class:`~vimpc.errors.InputError` naming the function and the argument, and symbolic
        calls pass through."""
        m = self._model()
        for name in FUNCTION_FIELDS:
            fn = getattr(m, name)
            if fn is not None:
                assert isinstance(fn, CheckedFunction) and isinstance(fn, ca.Function), name
        x, u = self._samples()[0]
        try:
            m.step(np.append(x, 0.0), u, m.p_default)
        except InputError as exc:
            assert f"DiscreteModel.step: argument x (input 0) must be {m.nx} number" in str(exc)
        else:
            raise AssertionError("step accepted a state with nx + 1 entries")
        try:
            m.step(x + 1j, u, m.p_default)
        except InputError as exc:
            message = str(exc)
            assert "argument x (input 0) must be real" in message and "complex" in message, (
                f"a complex state must be refused naming x, its dtype and what is expected, "
                f"got {message!r}"
            )
        else:
            raise AssertionError("step accepted a complex state")
        X = ca.MX.sym("x", m.nx)
        assert m.step(X, u, m.p_default).numel() == m.nx  # passed through to CasADi

    def test_hostile_arguments_give_nan_or_a_vimpc_error(self) -> None:
        """``step``, ``residual`` and ``bound`` at states off the constraint manifold or
        singular (all zeros: a four-bar's bodies at one point), far outside any data (1e3,
        1e8, 1e300 in every entry), huge inputs, and NaN or +-inf entries return numbers or
        raise a :class:`~vimpc.errors.VimpcError`, never CasADi's own error; at a NaN or
        inf argument ``step`` (and ``bound``, where ``bound_nan_at_nonfinite``) is not
        finite, so the closed loop counts a failed model step."""
        m = self._model()
        p = m.p_default
        x0, u0 = self._samples()[0]
        rng = np.random.default_rng(self.seed + 17)
        cases = [
            ("x = 0", np.zeros(m.nx), u0, True),
            ("x off the manifold", x0 + 0.3 * rng.standard_normal(m.nx), u0, True),
            *((f"x = {v:g}", np.full(m.nx, v), u0, True) for v in (1e3, 1e8, 1e300)),
            ("u = 1e300", x0, np.full(m.nu, 1e300), True),
        ]
        for bad in (np.nan, np.inf, -np.inf):
            cases.append((f"x[0] = {bad}", np.where(np.arange(m.nx) == 0, bad, x0), u0, False))
            if m.nu:
                cases.append((f"u = {bad}", x0, np.full(m.nu, bad), False))
        for what, x, u, finite in cases:
            calls = {"step": (m.step, (x, u, p))}
            if m.residual is not None:
                calls["residual"] = (m.residual, (x, u, x0, p))
            if m.bound is not None:
                calls["bound"] = (m.bound, (x, u, p))
            for name, (fn, args) in calls.items():
                try:
                    y = _num(fn, *args)
                except VimpcError:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"{name} at {what} raised {type(exc).__name__} "
                        f"({' '.join(str(exc).split())[:200]}); it must give NaN or a vimpc "
                        "error naming the cause"
                    ) from exc
                if (
                    finite
                    or name == "residual"
                    or (name == "bound" and not self.bound_nan_at_nonfinite)
                ):
                    continue
                assert not np.all(np.isfinite(y)), (
                    f"{name} at {what} is finite ({y.tolist()}): a NaN or inf argument must "
                    "give a NaN output, a failed step"
                )

    def test_step_satisfies_residual(self) -> None:
        """``residual(x, u, step(x, u, p), p)`` vanishes (to ``residual_tol``): the NLP of the
        implicit transcription and the shooting transcription describe the same dynamics."""
        m = self._model()
        if m.residual is None:
            raise unittest.SkipTest("model has no residual")
        p = m.p_default
        for x, u in self._samples():
            r = _num(m.residual, x, u, _num(m.step, x, u, p), p)
            err = np.max(np.abs(r), initial=0.0)
            assert err <= self.residual_tol, (
                f"|residual(x, u, step(x, u, p), p)| = {err:.3g} > residual_tol="
                f"{self.residual_tol:g} at x={x.tolist()}, u={u.tolist()}"
            )

    def test_residual_is_not_trivial(self) -> None:
        """Moving any one entry of ``x_next`` off ``step(x, u, p)`` by 1e-3 makes the residual
        clearly nonzero, so the residual pins down every entry of the next state."""
        m = self._model()
        if m.residual is None:
            raise unittest.SkipTest("model has no residual")
        p = m.p_default
        floor = 1e3 * self.residual_tol
        for x, u in self._samples():
            x_next = _num(m.step, x, u, p)
            for i in range(m.nx):
                moved = x_next.copy()
                moved[i] += 1e-3
                r = np.max(np.abs(_num(m.residual, x, u, moved, p)), initial=0.0)
                assert r > floor, (
                    f"residual is only {r:.3g} (<= {floor:g}) when x_next[{i}] "
                    f"({m.state_names[i]}) is off by 1e-3 at x={x.tolist()}, u={u.tolist()}; "
                    "it must vanish only at x_next == step(x, u, p)"
                )

    def test_residual_jacobian_is_the_residuals(self) -> None:
        """Where the model writes its residual's Jacobian out (``residual_jacobian``), its
        ``r`` is the residual and its ``J`` CasADi's Jacobian ``[dr/dx, dr/du, dr/dx_next]``
        of it (to ``roundtrip_tol``, relative), near ``x_next = step(x, u, p)``."""
        m = self._model()
        if m.residual_jacobian is None:
            raise unittest.SkipTest("model has no residual_jacobian")
        auto = ca.Function(m.residual).jacobian()
        p = m.p_default
        for k, (x, u) in enumerate(self._samples()):
            z = _num(m.step, x, u, p) + 1e-3 * np.cos(np.arange(m.nx) + k)
            r, J = (np.asarray(ca.DM(v).full()) for v in m.residual_jacobian(x, u, z, p))
            r_ref = _num(m.residual, x, u, z, p)
            blocks = auto(x, u, z, p, r_ref)[:3]
            J_ref = np.hstack([np.asarray(ca.DM(b).full()) for b in blocks])
            scale = max(1.0, float(np.abs(J_ref).max()))
            for what, mine, ref in (("r", r.ravel(), r_ref), ("J", J, J_ref)):
                err = float(np.abs(mine - ref).max()) / scale
                assert err <= self.roundtrip_tol, (
                    f"residual_jacobian's {what} differs from the residual's by {err:.3g} "
                    f"(relative) > roundtrip_tol={self.roundtrip_tol:g} at x={x.tolist()}, "
                    f"u={u.tolist()}"
                )

    def test_jacobians_match_finite_differences(self) -> None:
        """CasADi's derivatives of ``step`` in ``x`` and ``u`` (what the NLP solver sees) agree
        with central finite differences of the numeric ``step`` to ``jacobian_rtol``."""
        m = self._model()
        xs, us, ps = ca.MX.sym("x", m.nx), ca.MX.sym("u", m.nu), ca.MX.sym("p", m.np)
        f = m.step(xs, us, ps)
        jac = ca.Function("step_jacobians", [xs, us, ps], [ca.jacobian(f, xs), ca.jacobian(f, us)])
        p = m.p_default
        for x, u in self._samples():
            ad = [np.asarray(ca.DM(J).full()) for J in jac(x, u, p)]
            fd = [
                self._central_difference(lambda z, u=u: _num(m.step, z, u, p), x),
                self._central_difference(lambda z, x=x: _num(m.step, x, z, p), u),
            ]
            for wrt, J_ad, J_fd in zip(("x", "u"), ad, fd, strict=True):
                err = np.linalg.norm(J_ad - J_fd) / max(1.0, np.linalg.norm(J_ad))
                assert err <= self.jacobian_rtol, (
                    f"d step / d {wrt}: AD and finite differences differ by {err:.3g} "
                    f"(relative) > jacobian_rtol={self.jacobian_rtol:g} at x={x.tolist()}, "
                    f"u={u.tolist()}\nAD:\n{J_ad}\nFD:\n{J_fd}"
                )

    def _central_difference(self, f: Any, z: np.ndarray) -> np.ndarray:
        cols = []
        for i in range(z.size):
            h = self.fd_step * max(1.0, abs(z[i]))
            dz = np.zeros_like(z)
            dz[i] = h
            cols.append((f(z + dz) - f(z - dz)) / (2.0 * h))
        n_out = self._model().nx
        return np.stack(cols, axis=1) if cols else np.zeros((n_out, 0))

    def test_obs_round_trip(self) -> None:
        """``from_obs(to_obs(x)) == x`` at the samples: a state sent to the scenario's costs and
        back is unchanged."""
        m = self._model()
        for x, _ in self._samples():
            back = _num(m.from_obs, _num(m.to_obs, x))
            err = np.max(np.abs(back - x), initial=0.0)
            assert err <= self.roundtrip_tol, (
                f"from_obs(to_obs(x)) differs from x by {err:.3g} > {self.roundtrip_tol:g} "
                f"at x={x.tolist()}: got {back.tolist()}"
            )

    def test_step_is_deterministic(self) -> None:
        """Two evaluations of ``step`` at the same arguments are bit-identical, so closed-loop
        runs repeat exactly."""
        m = self._model()
        p = m.p_default
        for x, u in self._samples():
            first, second = _num(m.step, x, u, p), _num(m.step, x, u, p)
            assert first.tobytes() == second.tobytes(), (
                f"step gave {first.tolist()} then {second.tolist()} at x={x.tolist()}, "
                f"u={u.tolist()}"
            )

    def test_outputs_are_finite(self) -> None:
        """``step``, ``bound``, ``energy``, ``constraint`` and ``velocity_constraint`` give no
        NaN or inf on the sampled domain."""
        m = self._model()
        p = m.p_default
        for x, u in self._samples():
            outputs = {"step": _num(m.step, x, u, p)}
            if m.bound is not None:
                outputs["bound"] = _num(m.bound, x, u, p)
            if m.energy is not None:
                outputs["energy"] = _num(m.energy, x, p)
            for name in ("constraint", "velocity_constraint"):
                if getattr(m, name) is not None:
                    outputs[name] = _num(getattr(m, name), x)
            for name, value in outputs.items():
                assert np.all(np.isfinite(value)), (
                    f"{name} is not finite at x={x.tolist()}, u={u.tolist()}: {value.tolist()}"
                )

    def test_bound_comes_with_its_record(self) -> None:
        """``bound_info`` is present exactly when ``bound`` is, a :class:`BoundInfo` whose
        ``delta`` is the model's, whose level is ``"step"`` (no horizon) or ``"horizon"``
        (a positive horizon: what the controller's tube reads), with a method, where it
        was calibrated and read-only figures."""
        m = self._model()
        if m.bound is None:
            assert m.bound_info is None and m.delta is None, (
                f"a model without a bound has no bound record nor delta, got bound_info="
                f"{m.bound_info!r} and delta={m.delta!r}"
            )
            raise unittest.SkipTest("model has no bound")
        r = m.bound_info
        assert isinstance(r, BoundInfo), (
            f"a model with a bound carries its BoundInfo record, got bound_info={r!r}"
        )
        assert m.delta == r.delta and 0.0 < r.delta < 1.0, (
            f"delta = {m.delta!r}, its record says {r.delta!r}"
        )
        assert r.level in BOUND_LEVELS, f"level {r.level!r} is not one of {BOUND_LEVELS}"
        if r.level == "step":
            assert r.horizon is None and r.steps() == 1, f"a step-level bound, horizon {r.horizon}"
        else:
            assert isinstance(r.horizon, int) and r.horizon >= 1 and r.steps() == r.horizon, (
                f"a horizon-level bound needs a positive int horizon, got {r.horizon!r}"
            )
        assert isinstance(r.method, str) and r.method.strip(), f"method {r.method!r}"
        assert r.calibrated_on in BOUND_CALIBRATED_ON, f"calibrated_on {r.calibrated_on!r}"
        try:
            r.extra["added"] = 1  # type: ignore[index]
        except TypeError:
            pass
        else:
            raise AssertionError("the bound record's extra figures can be changed")

    def test_bound_is_nonnegative(self) -> None:
        """The uncertainty bound is elementwise >= 0 (it bounds an absolute error)."""
        m = self._model()
        if m.bound is None:
            raise unittest.SkipTest("model has no bound")
        p = m.p_default
        for x, u in self._samples():
            e = _num(m.bound, x, u, p)
            assert np.all(e >= 0.0), (
                f"bound must be >= 0 elementwise, got {e.tolist()} at x={x.tolist()}, "
                f"u={u.tolist()}"
            )

    def test_bound_covers_heldout_transitions(self) -> None:
        """On held-out transitions, the errors leave the bound (in any entry) no more often
        than ``delta`` allows: the check fails when the number of misses would have
        probability below ``coverage_alpha`` under a coverage of exactly ``1 - delta``
        (a one-sided binomial test, so an exactly calibrated bound passes)."""
        m = self._model()
        if m.bound is None:
            raise unittest.SkipTest("model has no bound")
        data = self.heldout_transitions(np.random.default_rng(self.seed + 1))
        if data is None:
            raise unittest.SkipTest("no held-out transitions given")
        X, U, X_next = (np.asarray(a, dtype=np.float64) for a in data)
        n = len(X)
        assert X.shape == (n, m.nx) and U.shape == (n, m.nu) and X_next.shape == (n, m.nx), (
            f"heldout_transitions must return shapes (m, {m.nx}), (m, {m.nu}), (m, {m.nx}), "
            f"got {X.shape}, {U.shape}, {X_next.shape}"
        )
        p = m.p_default
        missed = 0
        for x, u, x_next in zip(X, U, X_next, strict=True):
            error = np.abs(x_next - _num(m.step, x, u, p))
            missed += int(not np.all(error <= _num(m.bound, x, u, p)))  # NaN counts as a miss
        p_value = float(binom.sf(missed - 1, n, m.delta)) if missed else 1.0
        assert p_value >= self.coverage_alpha, (
            f"the bound covers {n - missed} of {n} held-out transitions "
            f"({(n - missed) / n:.3f}), below 1 - delta = {1 - m.delta:g} beyond chance "
            f"(p = {p_value:.2g} < {self.coverage_alpha:g})"
        )

    def test_step_preserves_constraint(self) -> None:
        """From a state on the constraint manifold, ``step`` lands on it again (to
        ``constraint_tol``). Runs only when ``constraint_preserving`` is True."""
        self._check_preserved("constraint", self.constraint_preserving)

    def test_step_preserves_velocity_constraint(self) -> None:
        """From a state with ``velocity_constraint(x) == 0`` (nonholonomic constraints met),
        ``step`` lands on such a state again (to ``constraint_tol``). Runs only when
        ``velocity_constraint_preserving`` is True."""
        self._check_preserved("velocity_constraint", self.velocity_constraint_preserving)

    def _check_preserved(self, name: str, flag: bool) -> None:
        if not flag:
            raise unittest.SkipTest(f"{name}_preserving is False")
        m = self._model()
        fn = getattr(m, name)
        assert fn is not None, f"{name}_preserving is True but model.{name} is None"
        p = m.p_default
        for x, u in self._samples():
            g0 = np.max(np.abs(_num(fn, x)), initial=0.0)
            assert g0 <= self.manifold_tol, (
                f"{type(self).__name__}.sample_states must return states that satisfy the "
                f"{name}, |{name}(x)| = {g0:.3g} at x={x.tolist()}"
            )
            g1 = np.max(np.abs(_num(fn, _num(m.step, x, u, p))), initial=0.0)
            assert g1 <= self.constraint_tol, (
                f"|{name}(step(x, u, p))| = {g1:.3g} > constraint_tol={self.constraint_tol:g} "
                f"at x={x.tolist()}, u={u.tolist()}"
            )
