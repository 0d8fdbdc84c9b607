"""Lagrangian Shadow Integration (family ``"lsi"``): an inverse modified Lagrangian learned
from position snapshots (Ober-Blöbaum & Offen).

The variational integrator of a rule (midpoint or trapezoidal, step ``dt``) applied to the
*inverse modified* Lagrangian ``L_invmod`` moves exactly along the true motion's snapshots.
LSI learns ``L_invmod`` as a kernel expansion (:mod:`vimpc.models.kernel_lagrangian`)
centred at the data pairs' midpoints ``((q_j + q_{j+1}) / 2, (q_{j+1} - q_j) / dt)``: the
discrete Euler–Lagrange equations on every data triple, divided by ``dt``,

    (D2 L_d(q_{j-1}, q_j) + D1 L_d(q_j, q_{j+1}) + f+(q_{j-1}, q_j, u_{j-1})
     + f-(q_j, q_{j+1}, u_j)) / dt = 0,

are linear in the kernel weights. With known inputs in the data the discrete forces
``f-``, ``f+`` of ``B(q) u`` (discrete Lagrange–d'Alembert) make the system inhomogeneous
and fix the Lagrangian's scale; without, the non-triviality condition (eq. 15) sets it to
``volume``. With the normalisation ``L(0) = 0`` the system is solved in the minimum-norm
least-squares sense. Only positions are used; the velocities in the data are ignored.

The true Lagrangian is recovered by backward error analysis (:mod:`vimpc.models.bea`):
``L^[[2]]``, whose energy ``H^[[2]]`` the learned motions keep. An initial value problem
from ``(q0, qdot0)`` starts from ``p0 = dL^[[2]]/dv (q0, qdot0)``, finds ``q1`` from the
discrete momentum equation and then runs the discrete Euler–Lagrange equations
(:meth:`LagrangianDynamics.positions`).

The exported model has the state ``x = (q, v)``: the integrator's position-momentum form
with the discrete equations of ``L_invmod`` and the momentum map ``p = dL^[[order]]/dv``
(:class:`~vimpc.integrators.VariationalIntegrator` with ``legendre``), its ``energy``
``H^[[order]]``. With ``centres`` set, the expansion keeps that many centres (spread over the
pair midpoints), which bounds the exported model's cost.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, Rule, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator, _newton, discrete_forces, discrete_lagrangian
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import bea
from vimpc.models.base import ModelFamily
from vimpc.models.gp import support_points
from vimpc.models.integrated import integrator_model
from vimpc.models.kernel_lagrangian import (
    Collocation,
    KernelBasis,
    KernelLagrangian,
    embed,
    solve,
)

#: relative regularity (bea.degenerate) below which the BEA formula is flagged
_DEGENERATE = 1e-6
#: Newton's residual tests, in units of the Lagrangian's slope round-off
#: (KernelLagrangian.slope_roundoff, a pessimistic estimate: converged iterates wander
#: at about a tenth of it); looser tests stop one iterate early, with an error of one sign
#: that adds up over thousands of steps
_NEWTON_LEVEL = 0.1


# -- data ------------------------------------------------------------------------------------
def check_conservative(system: MechanicalSystem, what: str) -> MechanicalSystem:
    """Refuse a system whose motion a learned Lagrangian in minimal coordinates with the
    inputs as its only forces cannot describe: constraints, or friction."""
    if not isinstance(system, MechanicalSystem):
        raise InputError(f"system must be a MechanicalSystem, got {type(system).__name__}")
    if system.n_holonomic or system.n_nonholonomic or system.nq != system.nv:
        raise InputError(
            f"{what} learns unconstrained Lagrangians in minimal coordinates; {system.name} "
            f"has {system.n_holonomic} holonomic and {system.n_nonholonomic} nonholonomic "
            "constraints"
        )
    if np.any(system.friction != 0):
        raise InputError(
            f"{what} learns a conservative Lagrangian with the inputs as the only forces; "
            f"{system.name} has friction {system.friction.tolist()}: give the system without "
            "friction"
        )
    return system


def snapshots(data: Dataset, nq: int, what: str = "lsi") -> tuple[np.ndarray, np.ndarray]:
    """The positions ``(N, T + 1, nq)`` and inputs ``(N, T, nu)`` of ``data``, checked: at
    least three snapshots per trajectory, a uniform step ``dt`` and finite values.

    Raises:
        InputError: naming the trajectory and what is wrong with it.
    """
    Q = np.asarray(data.obs[:, :, :nq])
    U = np.asarray(data.inputs)
    if Q.shape[1] < 3:
        raise InputError(
            f"{what} needs at least 3 snapshots per trajectory (a triple for the discrete "
            f"Euler-Lagrange equations); the data have {Q.shape[1]}"
        )
    steps = np.diff(data.t, axis=1)
    off = np.abs(steps - data.dt) > 1e-9 * data.dt
    if np.any(off):
        i, k = (int(a[0]) for a in np.nonzero(off))
        raise InputError(
            f"{what} needs snapshots at a uniform step dt = {data.dt} s; trajectory {i} has a "
            f"step of {steps[i, k]} s between samples {k} and {k + 1}"
        )
    for name, arr in (("positions", Q), ("inputs", U)):
        bad = ~np.isfinite(arr)
        if np.any(bad):
            trajectories = np.unique(np.nonzero(bad)[0])
            raise InputError(
                f"{what}: the {name} contain {int(bad.sum())} NaN or inf values (in "
                f"trajectories {trajectories[:5].tolist()}{'...' if len(trajectories) > 5 else ''})"
            )
    return Q, U


def pair_midpoints(Q: np.ndarray, h: float) -> np.ndarray:
    """``((q_j + q_{j+1}) / 2, (q_{j+1} - q_j) / h)`` of every consecutive pair, ``(P, 2n)``."""
    a, b = Q[:, :-1].reshape(-1, Q.shape[2]), Q[:, 1:].reshape(-1, Q.shape[2])
    return np.hstack([0.5 * (a + b), (b - a) / h])


# -- the discrete Euler-Lagrange rows --------------------------------------------------------
def _rule_points(rule: str, q0, q1, q2, h: float):
    """The discrete Euler-Lagrange equations of a triple, divided by ``h``, as
    ``sum (w_q dL/dq + w_v dL/dv)`` over points ``(q, v)``: a list of (points, w_q, w_v)."""
    v01, v12 = (q1 - q0) / h, (q2 - q1) / h
    if rule == "midpoint":
        # D2 L_d(a, b) = h/2 L_q(m) + L_v(m), D1 L_d(a, b) = h/2 L_q(m) - L_v(m)
        return [
            (np.hstack([0.5 * (q0 + q1), v01]), 0.5, 1.0 / h),
            (np.hstack([0.5 * (q1 + q2), v12]), 0.5, -1.0 / h),
        ]
    # trapezoidal: L_d(a, b) = h/2 (L(a, v) + L(b, v)), v = (b - a)/h
    return [
        (np.hstack([q0, v01]), 0.0, 0.5 / h),
        (np.hstack([q1, v01]), 0.5, 0.5 / h),
        (np.hstack([q1, v12]), 0.5, -0.5 / h),
        (np.hstack([q2, v12]), 0.0, -0.5 / h),
    ]


def del_rows(rule: str, Q: np.ndarray, h: float, basis: KernelBasis) -> np.ndarray:
    """The rows of the discrete Euler–Lagrange equations (divided by ``h``) on every triple
    of the trajectories ``Q`` ``(N, T + 1, n)``: ``(n K, M)`` for ``K`` triples."""
    n = Q.shape[2]
    q0, q1, q2 = (Q[:, i : Q.shape[1] - 2 + i].reshape(-1, n) for i in range(3))
    rows = 0.0
    for X, wq, wv in _rule_points(rule, q0, q1, q2, h):
        G = basis.gradients(X)
        rows = rows + wq * G[:, :n] + wv * G[:, n:]
    return np.asarray(rows).reshape(-1, basis.size)


def del_forces(system: MechanicalSystem, rule: str, Q: np.ndarray, U: np.ndarray, h: float):
    """``(f+(q_{j-1}, q_j, u_{j-1}) + f-(q_j, q_{j+1}, u_j)) / h`` of ``B(q) u`` on every
    triple, ``(n K,)``."""
    n, nu = system.nq, system.nu
    q0, q1, q2 = (ca.SX.sym(k, n) for k in ("q0", "q1", "q2"))
    u0, u1 = ca.SX.sym("u0", nu), ca.SX.sym("u1", nu)

    def force(q, v, u):
        return ca.mtimes(system.input_map(q), u)

    _, fp = discrete_forces(rule, force, q0, q1, u0, h)
    fm, _ = discrete_forces(rule, force, q1, q2, u1, h)
    fn = ca.Function("f", [q0, q1, q2, u0, u1], [(fp + fm) / h])
    T = Q.shape[1]
    args = [Q[:, i : T - 2 + i].reshape(-1, n) for i in range(3)]
    args += [U[:, : T - 2].reshape(-1, nu), U[:, 1 : T - 1].reshape(-1, nu)]
    K = args[0].shape[0]
    return np.asarray(fn.map(K)(*[a.T for a in args])).T.reshape(-1)


# -- a learned Lagrangian in motion ----------------------------------------------------------
class LagrangianDynamics:
    """The variational integrator (``rule``, step ``h``) of a kernel Lagrangian, with momenta
    and energies of its modified Lagrangians (:mod:`vimpc.models.bea`).

    Args:
        lagrangian: the Lagrangian of the discrete equations.
        rule: ``"midpoint"`` or ``"trapezoidal"``.
        h: the step.
        momentum_order: the BEA order of the Lagrangian whose ``dL/dv`` maps velocities to
            momenta (2 for an inverse modified Lagrangian, 0 for a Lagrangian meant as the
            true one).
        points: rows ``(q, v)`` of the data, where the Lagrangian's regularity is taken as
            the reference of :func:`vimpc.models.bea.degenerate`.
    """

    def __init__(
        self,
        lagrangian: KernelLagrangian,
        rule: str,
        h: float,
        momentum_order: int,
        points: np.ndarray,
    ):
        self.kernel = lagrangian
        self.rule, self.h, self.momentum_order = rule, float(h), momentum_order
        self.nq = lagrangian.nq
        self._functions = {
            order: bea.functions(lagrangian.casadi, self.nq, rule, self.h, order)
            for order in bea.ORDERS
        }
        n = self.nq
        self.regularity_on_data = self._evaluate(0, "regularity", points[:, :n], points[:, n:])
        self.reference_regularity = float(np.median(self.regularity_on_data))
        self._steps: dict[str, Callable] = {}
        self._gradients: dict[int, ca.Function] = {}
        #: the Newton residual test of the discrete equations (divided by h)
        self.del_tolerance = max(
            _newton.ABSTOL, _NEWTON_LEVEL * lagrangian.slope_roundoff() * (1.0 + 2.0 / self.h)
        )

    # -- functions of (q, qdot) --------------------------------------------------------------
    def _evaluate(self, order: int, output: str, q, qdot) -> np.ndarray:
        fn = self._gradient_function(order) if output == "grad" else self._functions[order]
        q, qdot = np.asarray(q, dtype=np.float64), np.asarray(qdot, dtype=np.float64)
        shape = np.broadcast_shapes(q.shape, qdot.shape)
        n = self.nq
        if n == 1:
            lead = shape
        else:
            if shape[-1:] != (n,):
                raise InputError(
                    f"q and qdot must end in a dimension of {n} (the coordinates), got shapes "
                    f"{q.shape} and {qdot.shape}"
                )
            lead = shape[:-1]
        Q = np.broadcast_to(q, shape).reshape(-1, n)
        V = np.broadcast_to(qdot, shape).reshape(-1, n)
        out = fn.map(len(Q)).call([Q.T, V.T])[fn.index_out(output)]
        out = np.asarray(out, dtype=np.float64)
        if output == "p":
            return out.T.reshape(*lead, n) if n > 1 else out.reshape(lead)
        if output == "grad":
            return out.T.reshape(*lead, 2 * n)
        return out.reshape(lead)

    def _gradient_function(self, order: int) -> ca.Function:
        """``(q, v) -> dH^[[order]]/d(q, v)`` by automatic differentiation, built once."""
        if order not in self._gradients:
            n = self.nq
            q, v = ca.SX.sym("q", n), ca.SX.sym("v", n)
            Lk = bea.modified(self.kernel.casadi, n, self.rule, self.h, order)(q, v)
            grad = ca.gradient(bea.energy(Lk, v), ca.vertcat(q, v))
            self._gradients[order] = ca.Function(
                f"dH_{order}", [q, v], [grad], ["q", "v"], ["grad"]
            )
        return self._gradients[order]

    def _checked(self, order: int, output: str, q, qdot) -> np.ndarray:
        values = self._evaluate(order, output, q, qdot)
        if order:
            regularity = self._evaluate(0, "regularity", q, qdot)
            bad = bea.degenerate(regularity, self.reference_regularity, _DEGENERATE)
            if np.any(bad):
                warnings.warn(
                    f"the learned Lagrangian is degenerate (its d^2L/dv^2 nearly singular, "
                    f"below {_DEGENERATE:g} of its median on the data) at {int(bad.sum())} "
                    f"of {bad.size} points: the order-{order} correction divides by it there "
                    "and is not meaningful (points far from the data?)",
                    FitWarning,
                    stacklevel=3,
                )
        return values

    def lagrangian(self, q, qdot, order: int = 2) -> np.ndarray:
        """``L^[[order]](q, qdot)``, vectorised over leading dimensions."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "L", q, qdot)

    def hamiltonian(self, q, qdot, order: int = 2) -> np.ndarray:
        """``H^[[order]](q, qdot) = qdot . dL^[[order]]/dqdot - L^[[order]]``."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "H", q, qdot)

    def hamiltonian_gradient(self, q, qdot, order: int = 2) -> np.ndarray:
        """``dH^[[order]]/d(q, qdot)`` by automatic differentiation (finite differences of
        the kernel sums lose digits to cancellation), ``(..., 2 n)``: the ``q`` entries,
        then the ``qdot`` ones."""
        bea.check(self.rule, order, self.h)
        return self._checked(order, "grad", q, qdot)

    def momentum(self, q, qdot, order: int | None = None) -> np.ndarray:
        """``dL^[[order]]/dqdot`` (default order: ``momentum_order``)."""
        order = self.momentum_order if order is None else order
        bea.check(self.rule, order, self.h)
        return self._checked(order, "p", q, qdot)

    # -- trajectories ------------------------------------------------------------------------
    def _discrete(self):
        n, h = self.nq, self.h
        qa, qb = ca.SX.sym("qa", n), ca.SX.sym("qb", n)
        Ld = discrete_lagrangian(self.rule, self.kernel.casadi, qa, qb, h)
        D1 = ca.Function("D1", [qa, qb], [ca.gradient(Ld, qa)])
        D2 = ca.Function("D2", [qa, qb], [ca.gradient(Ld, qb)])
        return D1, D2

    def _step_functions(self):
        """``first(q0, p0) -> q1``, ``step((q_{k-1}, q_k)) -> (q_k, q_{k+1})``, the DEL residual
        and the velocity solve, built once."""
        if self._steps:
            return self._steps
        n = self.nq
        D1, D2 = self._discrete()
        z, q0, q1, p = (ca.SX.sym(k, n) for k in ("z", "q0", "q1", "p"))
        scale = ca.sqrt(1.0 + ca.sumsqr(q1))
        tol = self.del_tolerance
        first = _newton.solve(
            "lsi_first", ca.Function("r0", [z, q1, p], [(p + D1(q1, scale * z)) / self.h]),
            False, tol,
        )  # fmt: skip
        self._steps["first"] = ca.Function("first", [q1, p], [scale * first(q1 / scale, q1, p)])
        pair = ca.SX.sym("pair", 2 * n)
        qm, qk = pair[:n], pair[n:]
        sk = ca.sqrt(1.0 + ca.sumsqr(qk))
        r = ca.Function("r", [z, pair], [(D2(qm, qk) + D1(qk, sk * z)) / self.h])
        root = _newton.solve("lsi_del", r, False, tol)
        q_next = sk * root((2 * qk - qm) / sk, pair)
        self._steps["step"] = ca.Function("step", [pair], [ca.vertcat(qk, q_next)])
        q2 = ca.SX.sym("q2", n)
        self._steps["residual"] = ca.Function(
            "del", [q0, q1, q2], [ca.norm_inf(D2(q0, q1) + D1(q1, q2)) / self.h]
        )
        # velocity from p = dL^[[m]]/dv (q, v)
        v = ca.SX.sym("v", n)
        Lm = bea.modified(self.kernel.casadi, n, self.rule, self.h, self.momentum_order)
        rv = ca.Function("rv", [v, q1, p], [(ca.gradient(Lm(q1, v), v) - p) / self.h])
        solve_v = _newton.solve("lsi_velocity", rv, False, tol)
        self._steps["velocity"] = ca.Function("velocity", [q1, p, v], [solve_v(v, q1, p)])
        self._steps["momentum_right"] = D2
        return self._steps

    def positions(
        self,
        q0,
        qdot0,
        steps: int,
        *,
        until: Callable[[np.ndarray], np.ndarray] | None = None,
        chunk: int = 2000,
        tolerance: float | None = None,
    ) -> np.ndarray:
        """The snapshots ``q_0 ... q_steps`` from ``(q0, qdot0)``, ``(steps + 1, n)``.

        ``p0 = dL^[[m]]/dv (q0, qdot0)`` (``m = momentum_order``), ``q1`` from ``p0 + D1
        L_d(q0, q1) = 0``, then the discrete Euler–Lagrange equations. The run stops early
        (and returns what it has) at the first snapshot where ``until(q)`` (on an array of
        snapshots, returning booleans) is true, or where Newton leaves a discrete
        equation's residual (divided by ``h``) above ``tolerance`` (default: 100 times
        Newton's own test, :attr:`del_tolerance`).
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InputError(f"steps must be a positive int, got {steps!r}")
        fn = self._step_functions()
        tolerance = 100.0 * self.del_tolerance if tolerance is None else tolerance
        n = self.nq
        q0 = np.asarray(q0, dtype=np.float64).reshape(n)
        qdot0 = np.asarray(qdot0, dtype=np.float64).reshape(n)
        p0 = self.momentum(q0[None] if n > 1 else q0, qdot0[None] if n > 1 else qdot0)
        q1 = np.asarray(fn["first"](q0, np.reshape(p0, n)), dtype=np.float64).reshape(n)
        out = [q0[None], q1[None]]
        done = 1
        state = np.concatenate([q0, q1])
        rollout = fn["step"].mapaccum("lsi_rollout", min(chunk, steps))
        stopped = bool(until is not None and np.any(until(np.vstack(out))))
        while done < steps and not stopped:
            k = min(chunk, steps - done)
            roll = rollout if k == min(chunk, steps) else fn["step"].mapaccum("lsi_tail", k)
            Z = np.asarray(roll(state), dtype=np.float64)
            new = Z[n:].T  # (k, n): q_{done+1} ... q_{done+k}
            prev = np.vstack([state.reshape(2, n), new])
            res = np.asarray(fn["residual"].map(k)(prev[:-2].T, prev[1:-1].T, prev[2:].T)).reshape(
                -1
            )
            bad = ~(np.isfinite(res) & (res <= tolerance)) | ~np.all(np.isfinite(new), axis=1)
            if until is not None:
                bad = bad | np.asarray(until(new), dtype=bool)
            if np.any(bad):
                cut = int(np.argmax(bad))
                out.append(new[: cut + 1])
                stopped = True
            else:
                out.append(new)
                state = Z[:, -1]
            done += k
        return np.vstack(out)

    def velocities(self, positions: np.ndarray, qdot0=None) -> np.ndarray:
        """The velocities at the snapshots ``positions`` ``(K + 1, n)``: at ``k >= 1`` the
        solution of ``dL^[[m]]/dv (q_k, v) = D2 L_d(q_{k-1}, q_k)``; at ``k = 0`` ``qdot0``
        (NaN if not given). Returns ``(K + 1, n)``."""
        fn = self._step_functions()
        Q = np.asarray(positions, dtype=np.float64).reshape(len(positions), self.nq)
        K = len(Q) - 1
        P = np.asarray(fn["momentum_right"].map(K)(Q[:-1].T, Q[1:].T), dtype=np.float64)
        guess = np.gradient(Q, self.h, axis=0)[1:].T
        V = np.asarray(fn["velocity"].map(K)(Q[1:].T, P, guess), dtype=np.float64).T
        first = np.full((1, self.nq), np.nan) if qdot0 is None else np.reshape(qdot0, (1, self.nq))
        return np.vstack([first, V])


# -- the family ------------------------------------------------------------------------------
class LSIModel(ModelFamily):
    """Lagrangian Shadow Integration: the inverse modified Lagrangian of a variational
    integrator, learned from position snapshots (module docstring).

    Args:
        system: the structure: coordinates and the input map ``B(q)`` (its Lagrangian and
            parameters are not used). Unconstrained systems without friction only: LSI
            learns a conservative Lagrangian and the inputs are its only forces.
        dt: the model step [s], the step between snapshots.
        rule, length, scale, volume, centres, order, seed, and the bound settings: see
            :attr:`settings`.

    Fitted attributes: ``kernel_`` (the :class:`KernelLagrangian` ``L_invmod``),
    ``collocation_`` (the linear system's size, rank and residual), ``forced_`` (whether
    known inputs fixed the scale), ``distilled_`` and ``distil_error_`` (with ``distil``)
    and ``dynamics_`` (a :class:`LagrangianDynamics`, behind
    :meth:`lagrangian`, :meth:`hamiltonian`, :meth:`positions` and :meth:`velocities`).
    """

    name = "lsi"
    settings = {
        "rule": Setting(
            str, "midpoint", "variational rule of the shadow integrator",
            choices=tuple(bea.RULES),
        ),
        "length": Setting(float, 5.0, "the kernel's length e", rule=POSITIVE),
        "velocity_length": Setting(
            float, 0.0,
            "the kernel's length in the velocities, where it differs (0: `length`)",
            rule=NONNEGATIVE,
        ),
        "scale": Setting(float, 1.0, "the kernel's scale c", rule=POSITIVE),
        "volume": Setting(
            float, 1.0,
            "the non-triviality constant c of eq. 15 (used when the data have no inputs)",
            rule=POSITIVE,
        ),
        "centres": Setting(
            int, 0,
            "kernel centres kept, spread over the pair midpoints (0: every pair)",
            rule=NONNEGATIVE,
        ),
        "coordinates": Setting(
            str, "minimal",
            "kernel inputs: `(q, v)`, or with every angle as its sine and cosine (periodic)",
            choices=("minimal", "sincos"),
        ),
        "order": Setting(
            int, 2,
            "BEA order of the exported model's momentum map and energy (0: L_invmod itself)",
            rule=Rule(lambda v: v in bea.ORDERS, phrase="0 or 2"),
        ),
        "distil": Setting(
            bool, False,
            "export L^[[order]] refitted on the kernels (its values and momenta on the data) "
            "instead of its closed form: first derivatives of the kernels only, several "
            "times cheaper, at the refit's error (distil_error_)",
        ),
        "rcond": Setting(
            float, 0.0,
            "singular values of the linear system below this fraction of the largest are "
            "dropped: regularises noisy data (0: round-off only, the paper's choice)",
            rule=NONNEGATIVE,
        ),
        "seed": Setting(int, 0, "seed of the first centre when centres are thinned"),
    }  # fmt: skip

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        check_conservative(self.system, "lsi")

    def _provides(self) -> set[str]:
        return {"residual", "energy"}

    def _basis(self, pairs: np.ndarray) -> KernelBasis:
        """The kernels centred at the pair midpoints ``pairs`` (thinned to ``centres``)."""
        n = self.system.nq
        angles = ()
        if self.coordinates == "sincos":
            angles = tuple(i for i, u in enumerate(self.system.coordinate_units) if u == "rad")
        embedded = embed(pairs, n, angles)
        d = embedded.shape[1]
        lengths = np.full(d, self.length)
        if self.velocity_length:
            lengths[d - n :] = self.velocity_length
        if 0 < self.centres < len(embedded):
            embedded = support_points(embedded, self.centres, lengths, self.seed)
        return KernelBasis(embedded, self.scale, lengths, n, angles)

    def _fit(self, data: Dataset | None) -> None:
        s, h = self.system, self.dt
        Q, U = snapshots(data, s.nq)
        pairs = pair_midpoints(Q, h)
        basis = self._basis(pairs)
        rows = del_rows(self.rule, Q, h, basis)
        self.forced_ = bool(np.any(U != 0))
        rhs = -del_forces(s, self.rule, Q, U, h) if self.forced_ else np.zeros(len(rows))
        volume = None if self.forced_ else self.volume
        col = solve(rows, rhs, basis, volume, "lsi", self.rcond or None)
        self._accept(col, s.nq)
        self.kernel_ = col.lagrangian
        self.collocation_ = col
        self.dynamics_ = LagrangianDynamics(col.lagrangian, self.rule, h, 2, pairs)
        check_regularity(self.dynamics_, "lsi")
        self.distilled_ = self._distil(pairs) if self.distil else None

    def _distil(self, points: np.ndarray) -> KernelLagrangian:
        """``L^[[order]]`` refitted on the kernels of ``L_invmod`` by least squares on its
        values and momenta at the data ``points``; sets ``distil_error_``, the refit's RMS
        momentum error relative to the momenta's RMS."""
        n, basis, dyn = self.system.nq, self.kernel_.basis, self.dynamics_
        q, v = points[:, :n], points[:, n:]
        values = dyn._evaluate(self.order, "L", q, v).reshape(-1)
        momenta = dyn._evaluate(self.order, "p", q, v).reshape(len(points), n)
        grads = basis.gradients(points)[:, n:, :]
        A = np.vstack([basis.features(points), *[grads[:, i] for i in range(n)]])
        b = np.concatenate([values, *momenta.T])
        beta = np.linalg.lstsq(A, b, rcond=self.rcond or None)[0]
        fitted = np.einsum("nim,m->ni", grads, beta)
        self.distil_error_ = float(np.sqrt(np.mean((fitted - momenta) ** 2) / np.mean(momenta**2)))
        return KernelLagrangian(basis, beta)

    def _accept(self, col: Collocation, n: int) -> None:
        """Warn where the solution rests on a choice the data did not make."""
        if col.condition_residual > 1e-3 * self.volume:
            warnings.warn(
                f"lsi: the non-triviality condition is off by {col.condition_residual:.2e} "
                f"(of volume = {self.volume}) at the least-squares solution: the data admit "
                f"only a (nearly) trivial Lagrangian in this kernel's span ({col.describe()})",
                FitWarning,
                stacklevel=4,
            )
        if col.data_rank <= 2 * n:
            warnings.warn(
                f"lsi: the data fix only {col.data_rank} independent equations "
                f"({col.describe()}): the model is the minimum-norm choice among a "
                f"{col.n_centres - col.rank}-dimensional family of equally consistent "
                "Lagrangians; collect more trajectories",
                FitWarning,
                stacklevel=4,
            )
        if not self.forced_:
            warnings.warn(
                "lsi: the data have no inputs, so the Lagrangian's scale is the "
                f"non-triviality constant volume = {self.volume}, not the physical one: the "
                "exported model's response to inputs is off by an unknown factor (collect "
                "data with known, excited inputs for control)",
                FitWarning,
                stacklevel=4,
            )

    # -- what the fitted model offers ------------------------------------------------------------
    def lagrangian(self, q, qdot, order: int = 2) -> np.ndarray:
        """The recovered Lagrangian ``L^[[order]]`` (order 0: ``L_invmod``), vectorised."""
        self._require_fitted("lagrangian()")
        return self.dynamics_.lagrangian(q, qdot, order)

    def hamiltonian(self, q, qdot, order: int = 2) -> np.ndarray:
        """The modified energy ``H^[[order]]``, vectorised."""
        self._require_fitted("hamiltonian()")
        return self.dynamics_.hamiltonian(q, qdot, order)

    def positions(self, q0, qdot0, steps: int, **kwargs: Any) -> np.ndarray:
        """Unforced snapshots from ``(q0, qdot0)``: :meth:`LagrangianDynamics.positions`."""
        self._require_fitted("positions()")
        return self.dynamics_.positions(q0, qdot0, steps, **kwargs)

    def velocities(self, positions: np.ndarray, qdot0=None) -> np.ndarray:
        """Velocities at snapshots: :meth:`LagrangianDynamics.velocities`."""
        self._require_fitted("velocities()")
        return self.dynamics_.velocities(positions, qdot0)

    def _residual_tolerance(self) -> float:
        """The exported step's Newton test: the round-off of its residual, whose rows
        hold slopes of ``L_invmod`` and of the momentum map's Lagrangian (the distilled
        one's weights can be far larger)."""
        tolerance = self.dynamics_.del_tolerance * self.dt
        if self.distilled_ is not None:
            roundoff = self.distilled_.slope_roundoff() * (1.0 + 2.0 / self.dt) * self.dt
            tolerance = max(tolerance, _NEWTON_LEVEL * roundoff)
        return tolerance

    def _build(self) -> DiscreteModel:
        L = self.kernel_.casadi
        if self.distilled_ is not None:
            recovered = self.distilled_.casadi
        else:
            recovered = bea.modified(L, self.system.nq, self.rule, self.dt, self.order)
        integrator = VariationalIntegrator(
            self.system,
            self.rule,
            "position_momentum",
            lagrangian=lambda q, v, theta: L(q, v),
            legendre=lambda q, v, theta: recovered(q, v),
            residual_tolerance=self._residual_tolerance(),
        )
        col = self.collocation_
        info = {
            **self.info(),
            "forced": self.forced_,
            "n_centres": col.n_centres,
            "rank": col.rank,
            "n_equations": col.n_equations,
            "data_residual": col.residual,
        }
        if self.distilled_ is not None:
            info["distil_error"] = self.distil_error_
        return integrator_model(integrator, self.dt, info=info)


def check_regularity(dynamics: LagrangianDynamics, what: str) -> None:
    """Refuse a Lagrangian degenerate on its data; warn where it is degenerate at some data
    points (the BEA formula divides by its ``d^2L/dv^2``)."""
    if not dynamics.reference_regularity > 0:
        raise InputError(
            f"{what}: the learned Lagrangian is degenerate on the data (its d^2L/dv^2 is "
            "singular at most data points): backward error analysis would divide by zero"
        )
    r = dynamics.regularity_on_data
    bad = bea.degenerate(r, dynamics.reference_regularity, _DEGENERATE)
    if np.any(bad):
        warnings.warn(
            f"{what}: the learned Lagrangian is degenerate at {int(bad.sum())} of {bad.size} "
            f"data points (d^2L/dv^2 below {_DEGENERATE:g} of its median): the BEA "
            "correction is not meaningful there",
            FitWarning,
            stacklevel=4,
        )
