"""Lagrangian Shadow Integration (family ``"lsi"``): an inverse modified Lagrangian learned
from position snapshots (Ober-Blöbaum & Offen).

The variational integrator of a rule (midpoint or trapezoidal, step ``dt``) applied to the
*inverse modified* Lagrangian ``L_invmod`` moves exactly along the true motion's snapshots.
LSI learns ``L_invmod`` as a kernel expansion (:mod:`vimpc.models._kernel_lagrangian`)
centred at the data pairs' midpoints ``((q_j + q_{j+1}) / 2, (q_{j+1} - q_j) / dt)``: the
discrete Euler–Lagrange equations on every data triple, divided by ``dt``,

    (D2 L_d(q_{j-1}, q_j) + D1 L_d(q_j, q_{j+1}) + f+(q_{j-1}, q_j, u_{j-1})
     + f-(q_j, q_{j+1}, u_j)) / dt = 0,

are linear in the kernel weights. With known inputs in the data the discrete forces
``f-``, ``f+`` of ``B(q) u`` (discrete Lagrange–d'Alembert) make the system inhomogeneous
and fix the Lagrangian's scale; without, the non-triviality condition (eq. 15) sets it to
``volume``. With the normalisation ``L(0) = 0`` the system is solved in the minimum-norm
least-squares sense. Only positions are used; the velocities in the data are ignored.

Total derivatives ``xi'(q) v`` leave the continuous motion unchanged, and eq. 15, linear
in ``dL/dv``, is satisfied by them as well as by the physical part: on unforced data the
minimum-norm solution carries its scale mostly in such a gauge term (momenta at rest far
from zero, a small fitted mass, a momentum map the kernels cannot refit). The mass form
(``nontriviality = "mass"``) fixes the corners' mean of ``d^2L/dv^2`` instead, which a
total derivative cannot satisfy; ``reversible = true`` learns a Lagrangian even in the
velocities, with no gauge term in its span at all (``results/lsi/nontriviality.md``).

The true Lagrangian is recovered by backward error analysis (:mod:`vimpc.models._bea`):
``L^[[2]]``, whose energy ``H^[[2]]`` the learned motions keep. An initial value problem
from ``(q0, qdot0)`` starts from ``p0 = dL^[[2]]/dv (q0, qdot0)``, finds ``q1`` from the
discrete momentum equation and then runs the discrete Euler–Lagrange equations
(:meth:`~vimpc.models._kernel_lagrangian.LagrangianDynamics.positions`).

The exported model has the state ``x = (q, v)``: the integrator's position-momentum form
with the discrete equations of ``L_invmod`` and the momentum map ``p = dL^[[order]]/dv``
(:class:`~vimpc.integrators.VariationalIntegrator` with ``legendre``), its ``energy``
``H^[[order]]``. With ``centres`` set, the expansion keeps that many centres (spread over the
pair midpoints), which bounds the exported model's cost.
"""

from __future__ import annotations

import warnings
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, SEED, Rule, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator, discrete_forces
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models import _bea as bea
from vimpc.models import _features
from vimpc.models._gp import support_points
from vimpc.models._integrated import integrator_model
from vimpc.models._kernel_lagrangian import (
    NEWTON_LEVEL,
    Collocation,
    KernelBasis,
    KernelLagrangian,
    LagrangianDynamics,
    check_dense_size,
    check_regularity,
    embed,
    in_chunks,
    solve,
)
from vimpc.models.base import ModelFamily

# A distilled momentum map off by more than this fraction of the momenta's RMS is warned of
# (forced fits distil to ~5e-4; eq. 15's gauge-dominated momenta to 0.1-1).
DISTIL_WARN = 0.01


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
    triples = np.hstack([Q[:, i : Q.shape[1] - 2 + i].reshape(-1, n) for i in range(3)])

    def rows(T: np.ndarray) -> np.ndarray:
        out = 0.0
        for X, wq, wv in _rule_points(rule, T[:, :n], T[:, n : 2 * n], T[:, 2 * n :], h):
            G = basis.gradients(X)
            out = out + wq * G[:, :n] + wv * G[:, n:]
        return out

    # by chunks of triples, so that the sums' temporaries stay within CHUNK_BYTES too
    return np.asarray(in_chunks(triples, 3 * n * basis.size, rows)).reshape(-1, basis.size)


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


# -- the family ------------------------------------------------------------------------------
class LSIModel(ModelFamily):
    """Lagrangian Shadow Integration: the inverse modified Lagrangian of a variational
    integrator, learned from position snapshots (module docstring).

    Args:
        system: the structure: coordinates and the input map ``B(q)`` (its Lagrangian and
            parameters are not used). Unconstrained systems without friction only: LSI
            learns a conservative Lagrangian and the inputs are its only forces.
        dt: the model step [s], the step between snapshots.
        rule, length, velocity_length, scale, volume, nontriviality, reversible, centres,
            coordinates, order, distil, rcond, seed, and the bound settings: see :attr:`settings`.

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
        "nontriviality": Setting(
            str, "momentum",
            "what `volume` fixes without inputs: the corners' mean of dL/dv (`momentum`, "
            "eq. 15) or of d^2L/dv^2 (`mass`, which a total derivative cannot satisfy)",
            choices=("momentum", "mass"),
        ),
        "reversible": Setting(
            bool, False,
            "learn a Lagrangian even in the velocities (kernels summed with their mirror "
            "images in v): time-reversible systems, without gyroscopic or magnetic forces; "
            "no gauge term xi'(q) v is then in the span, so momenta at rest are zero",
        ),
        "centres": Setting(
            int, 0,
            "kernel centres kept, spread over the pair midpoints (0: every pair)",
            rule=NONNEGATIVE,
        ),
        "coordinates": Setting(
            str, "minimal",
            "kernel inputs: `(q, v)`, or with every angle as its sine and cosine (periodic)",
            choices=_features.COORDINATES,
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
        "seed": Setting(int, 0, "seed of the first centre when centres are thinned", rule=SEED),
    }  # fmt: skip

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        check_conservative(self.system, "lsi")

    def _provides(self) -> set[str]:
        return {"residual", "energy"}

    def _basis(self, pairs: np.ndarray) -> KernelBasis:
        """The kernels centred at the pair midpoints ``pairs`` (thinned to ``centres``)."""
        n = self.system.nq
        angles = _features.angles(self.system, self.coordinates)
        embedded = embed(pairs, n, angles)
        d = embedded.shape[1]
        lengths = np.full(d, self.length)
        if self.velocity_length:
            lengths[d - n :] = self.velocity_length
        if 0 < self.centres < len(embedded):
            embedded = support_points(embedded, self.centres, lengths, self.seed)
        return KernelBasis(embedded, self.scale, lengths, n, angles, self.reversible)

    def _fit(self, data: Dataset | None) -> None:
        s, h = self.system, self.dt
        Q, U = snapshots(data, s.nq)
        pairs = pair_midpoints(Q, h)
        basis = self._basis(pairs)
        kept = (
            f"a kernel at every one of the {len(pairs)} pairs"
            if basis.size == len(pairs)
            else f"{basis.size} of the {len(pairs)} pairs"
        )
        advice = (
            f"set model.centres (now {self.centres}: {kept}) to keep fewer kernels, or fit "
            "on fewer trajectories"
        )
        check_dense_size("lsi", Q.shape[0] * (Q.shape[1] - 2) * s.nq + 2, basis.size, advice)
        if self.distil:
            check_dense_size("lsi (distil)", len(pairs) * (1 + s.nq), basis.size, advice)
        rows = del_rows(self.rule, Q, h, basis)
        self.forced_ = bool(np.any(U != 0))
        rhs = -del_forces(s, self.rule, Q, U, h) if self.forced_ else np.zeros(len(rows))
        volume = None if self.forced_ else self.volume
        col = solve(rows, rhs, basis, volume, "lsi", self.rcond or None, self.nontriviality)
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
        if self.distil_error_ > DISTIL_WARN:
            warnings.warn(
                f"lsi: the distilled momentum map is off by {self.distil_error_:.1%} of the "
                "momenta's RMS on the data: the exported step's velocities carry that error, "
                "and its Newton solve can fail where the refitted map does not invert (use "
                "distil = false, or reversible = true, which leaves no gauge term "
                "xi'(q) v in the momenta)",
                FitWarning,
                stacklevel=4,
            )
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
            tolerance = max(tolerance, NEWTON_LEVEL * roundoff)
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
