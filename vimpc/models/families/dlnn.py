"""Discrete Lagrangian neural networks (family ``"dlnn"``): DLNN and, with
``symmetries > 0``, SymDLNN (Lishkova et al.).

The discrete Lagrangian ``L_d(q_k, q_{k+1})`` is a multilayer perceptron on the pair of
positions, trained on every data triple ``(q_{k-1}, q_k, q_{k+1})`` by the mean squared
forced discrete Euler–Lagrange residual (divided by the step ``h``, as in
:mod:`~vimpc.models.families.lsi`, so its units are those of a force)

    r_k = (D2 L_d(q_{k-1}, q_k) + D1 L_d(q_k, q_{k+1}) + f+(q_{k-1}, q_k, u_{k-1})
           + f-(q_k, q_{k+1}, u_k)) / h,

with the midpoint rule's discrete Lagrange–d'Alembert forces ``f± = h/2 B(q_mid) u`` of
the known input map (the forces :mod:`vimpc.integrators` uses, so training and export
agree), plus the degeneracy term ``degeneracy_weight * mean(1 - sigmoid(c det(-D1 D2
L_d)))`` over the data pairs. The paper writes ``det D1 D2 L_d`` for its two-dimensional
examples; ``-D1 D2 L_d ~ M / h`` is positive definite in any dimension, so
``det(-D1 D2 L_d)`` is the paper's term for even ``n`` and the right sign for odd ``n``.
With the paper's ``c = 0.01`` the term is saturated (zero) once ``det(-D1 D2 L_d)`` is a
few hundred (the paper's cart at h = 0.01 s: ~1300); at larger steps (h = 0.05 s, unit
mass: det ~ 20) its gradient pulls the learned mass up, so a fit on forced data there
wants a smaller ``degeneracy_weight``. Input derivatives come from batched double
backward passes (rows are independent: one pass per Hessian row for the whole batch).

Inputs fix the Lagrangian's scale (the forces enter the residual); on unforced data the
degeneracy term alone keeps ``L_d`` away from zero, and the fit warns that the scale is
not identified.

**Export.** With ``L_invmod(q, v) = L_d(q - h v / 2, q + h v / 2) / h`` the midpoint
discrete Lagrangian of ``L_invmod``, ``h L_invmod((q0 + q1) / 2, (q1 - q0) / h)``, is
exactly ``L_d(q0, q1)``. So the model is the midpoint
:class:`~vimpc.integrators.VariationalIntegrator` of ``L_invmod`` in the position-momentum
form (state ``(q, v)``, the observation), with the momentum map and energy of the
Lagrangian ``L^[[order]]`` recovered by backward error analysis (:mod:`vimpc.models._bea`,
built on MX), as LSI does. The model is written on MX by
:func:`vimpc.models._network_lagrangian.midpoint_model`: the integrator's equations, Newton
solve and acceptance test, with the network's gradient and Hessian (and the Newton
Jacobian) in closed form, a few dense products per layer, instead of the network expanded
into scalar operations (tests check it against the integrator's model to 1e-10). Measured
on the cart-pendulum, 3x128, a shared 2-core machine (``tests/benchmarks/bench_dlnn.py``,
``results/benchmarks/dlnn.md``): ``order = 0`` builds in 0.1 s and steps in 1.8 ms
(median; the integrator's SX model: 8.7 s, 18 ms), ``order = 2`` in 0.05 s and 10 ms (third
and fourth derivatives of the network in the BEA momentum map, by MX AD; the SX model:
78 s, 237 ms); for control with a large network, ``order = 0``.

**Symmetries** (``symmetries = K``): K generators ``xi = (M, w)`` of the affine group
(``q -> q + eps (M q + w)``) trained with the network after ``warmup`` network-only
epochs, by ``symmetry_weight`` times the mean over ``symmetry_points`` pairs drawn every
epoch from the data's box (``q0`` in the bounding box of the positions, ``q1 - q0`` in
that of the steps) of ``((<M q0 + w, D1 L_d> + <M q1 + w, D2 L_d>) / h)^2``, plus
``|‖xi‖ - 1|`` per generator and, for K > 1, ``(xi_j . xi_k)^2`` per pair. The paper's
schedule (``jnp.select``) set the learning rate to 0 from epoch 1000 to 2000 and to 3e-4
after; here both phases run a cosine schedule from ``lr`` to 0 (a warm restart when the
symmetry terms switch on). A generator is *found* when its residual on the data pairs,
relative to the size of its two terms, is at most :data:`SYMMETRY_RATIO` times the
discrete Euler–Lagrange residual relative to the size of its terms at the end of the
warm-up, and the joint training left that relative DEL residual within
:data:`FIT_DEGRADATION` times the warm-up's (a network can bend itself to obey an absent
symmetry, at the cost of its fit); otherwise it is
*absent* (a FitWarning, and ``info`` says so). A found generator's discrete Noether
quantity ``I_k = -(M q_k + w)^T D1 L_d(q_k, q_{k+1})`` is in :meth:`conserved_quantity`.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import casadi as ca
import numpy as np

from vimpc._settings import NONNEGATIVE, POSITIVE, Rule, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import FitWarning, InputError
from vimpc.integrators import VariationalIntegrator
from vimpc.models import _bea as bea
from vimpc.models import _network_lagrangian as nl
from vimpc.models._integrated import integrator_model
from vimpc.models.families.lsi import check_conservative, del_forces, snapshots

#: A generator is found when (its residual / the size of its terms) on the data pairs is at
#: most SYMMETRY_RATIO times (the DEL residual / the size of its terms) on the triples; an
#: absent symmetry leaves a relative residual of order one.
SYMMETRY_RATIO = 10.0
#: ... and when the symmetry terms left the DEL residual (relative to its terms) at most
#: FIT_DEGRADATION times what the network-only warm-up reached: a network can bend itself
#: to obey an absent symmetry (measured on a pendulum: relative DEL residual 0.29 after
#: the symmetry phase, against 0.001 when the symmetry is there).
FIT_DEGRADATION = 3.0


def pair_normalisation(Q: np.ndarray, h: float):
    """``(P, c)`` with ``z = P [q0; q1] + c`` the standardised midpoint and difference
    velocity of a pair, from the data pairs of ``Q`` ``(N, T + 1, n)``."""
    n = Q.shape[2]
    a, b = Q[:, :-1].reshape(-1, n), Q[:, 1:].reshape(-1, n)
    mid, vel = 0.5 * (a + b), (b - a) / h
    sq, sv = _spread(mid), _spread(vel)
    eye = np.eye(n)
    P = np.block([[0.5 * eye / sq[:, None], 0.5 * eye / sq[:, None]],
                  [-eye / (h * sv[:, None]), eye / (h * sv[:, None])]])  # fmt: skip
    c = np.concatenate([-mid.mean(0) / sq, -vel.mean(0) / sv])
    return P, c, float(np.mean(sv**2))


def _spread(x: np.ndarray) -> np.ndarray:
    s = x.std(axis=0)
    return np.where(s > 1e-12, s, 1.0)


class DLNNModel(nl.NetworkFamily):
    """A discrete Lagrangian network L_d(q_k, q_k+1) with optional symmetry discovery.

    See the module docstring.

    Args:
        system: the structure: coordinates and the input map ``B(q)``. Unconstrained
            systems without friction only.
        dt: the model step [s], the step between snapshots.
        settings: see :attr:`settings`.

    Fitted attributes: ``network_`` (the :class:`~vimpc.models._network_lagrangian.Network`
    ``L_d``, numpy weights), ``forced_``, ``training_`` (the
    :class:`~vimpc.models._training.TrainingRecord` of each phase), ``del_residual_`` (RMS
    of ``r_k`` on the training triples), ``symmetries_`` (one dict per generator: ``w``,
    ``M``, ``ratio``, ``found``), ``epochs_per_second_``.
    """

    name = "dlnn"
    samples = "triples"
    settings = {
        **nl.NETWORK_SETTINGS,
        "order": Setting(
            int, 2,
            "BEA order of the exported momentum map and energy (0: L_invmod itself; 3x128 "
            "cart-pendulum step 1.8 ms at 0, 10 ms at 2)",
            rule=Rule(lambda v: v in bea.ORDERS, phrase="0 or 2"),
        ),
        "symmetries": Setting(
            int, 0, "number K of affine symmetry generators to discover (0: DLNN)",
            rule=NONNEGATIVE,
        ),
        "symmetry_weight": Setting(float, 1.0, "weight of the symmetry terms", rule=POSITIVE),
        "warmup": Setting(
            int, 500, "network-only epochs before the symmetry terms switch on",
            rule=NONNEGATIVE,
        ),
        "symmetry_points": Setting(
            int, 256, "pairs drawn from the data's box each epoch for the symmetry residual",
            rule=POSITIVE,
        ),
    }  # fmt: skip

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        check_conservative(self.system, "dlnn")
        n = self.system.nq
        if self.symmetries > n + n * n:
            raise InputError(
                f"symmetries must be at most n + n^2 = {n + n * n} (the affine group's "
                f"generators in {n} coordinates), got {self.symmetries}"
            )
        if self.symmetries and not 0 < self.warmup < self.epochs:
            raise InputError(
                f"warmup = {self.warmup} must be between 1 and epochs - 1 = {self.epochs - 1} "
                "with symmetries: the symmetry test compares against the network-only fit "
                "the warm-up reaches, and the symmetry terms must switch on before the end"
            )

    # -- training ------------------------------------------------------------------------------
    def _fit(self, data: Dataset | None) -> None:
        s, h, n = self.system, self.dt, self.system.nq
        Q, U = snapshots(data, n, "dlnn")
        N, T1 = Q.shape[:2]
        K = N * (T1 - 2)
        nl.check_equations("dlnn", K, n * K, nl.n_parameters(self.sizes))
        if self.symmetries:
            spread = np.ptp(Q.reshape(-1, n), axis=0)
            if np.any(spread == 0):
                i = int(np.nonzero(spread == 0)[0][0])
                raise InputError(
                    f"symmetries = {self.symmetries} needs data that move every coordinate; "
                    f"{s.coordinate_names[i]} never changes in the data, so no generator "
                    "acting on it can be tested"
                )
        triples = np.stack([Q[:, i : T1 - 2 + i].reshape(-1, n) for i in range(3)], axis=1)
        forces = del_forces(s, "midpoint", Q, U, h).reshape(K, n)  # (f+ + f-) / h
        self.forced_ = bool(np.any(U != 0))
        if not self.forced_:
            warnings.warn(
                "dlnn: the data have no inputs, so the discrete Lagrangian's scale is set "
                "only by the degeneracy term, not the physical one: the exported model's "
                "response to inputs is off by an unknown factor (collect data with known, "
                "excited inputs for control)",
                FitWarning,
                stacklevel=3,
            )
        start = time.perf_counter()
        with nl.torch_threads(self.threads):
            self._train(Q, triples, forces)
        self.fit_train_time_ = time.perf_counter() - start
        self._check_fit(Q, triples, forces)

    def _train(self, Q, triples, forces) -> None:
        import torch

        from vimpc.models._torch_casadi import mlp
        from vimpc.models._training import train

        h, n, K = self.dt, self.system.nq, len(triples)
        P_np, c_np, v2 = pair_normalisation(Q, h)
        scale = h * v2  # L_d ~ h (kinetic energy of a unit mass at the data's speeds)
        net = mlp(self.sizes, self.activation, seed=self.seed)
        P, c = torch.from_numpy(P_np), torch.from_numpy(c_np)
        T = torch.from_numpy(triples)
        F = torch.from_numpy(forces)
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(K)
        n_val = int(round(self.validation * K))
        val_idx = torch.from_numpy(np.sort(order[:n_val]))
        train_idx = torch.from_numpy(np.sort(order[n_val:]))
        blocks = (slice(0, n), slice(n, 2 * n))

        def del_terms(idx):
            t = T[idx]
            X = torch.cat([torch.cat([t[:, 0], t[:, 1]], 1), torch.cat([t[:, 1], t[:, 2]], 1)])
            g, H = nl.input_derivatives(net, X @ P.T + c, P, scale, blocks)
            B = len(idx)
            r = (g[:B, n:] + g[B:, :n]) / h + F[idx]
            det = nl.det(-H[B:])
            return r, det

        def base_loss(idx):
            r, det = del_terms(idx)
            return torch.mean(torch.sum(r**2, 1)) + nl.degeneracy(
                det, self.degeneracy_weight, self.degeneracy_scale
            )

        self._xi = None
        common = dict(
            optimizer=self.optimizer, lr=self.lr, weight_decay=self.weight_decay,
            schedule="cosine", seed=self.seed, progress=self.progress,
        )  # fmt: skip
        batch = self.batch if 0 < self.batch < len(train_idx) else None

        def phase(loss, params, epochs, budget):
            def loss_fn(idx=None):
                return loss(train_idx if idx is None else train_idx[idx])

            validation = None
            if n_val:

                def validation():
                    with torch.enable_grad():
                        return float(base_loss(val_idx).detach())

            return train(
                loss_fn, params, epochs=epochs, batch_size=batch,
                n_samples=len(train_idx) if batch else None, validation=validation,
                patience=self.patience or None, time_budget_s=budget, **common,
            )  # fmt: skip

        budget = self.time_budget or None
        records = []
        t0 = time.perf_counter()
        if not self.symmetries:
            records.append(phase(base_loss, net, self.epochs, budget))
        else:
            records.append(phase(base_loss, net, self.warmup, budget))

            def relative_del():
                with torch.enable_grad():
                    X = torch.cat([torch.cat([T[:, 0], T[:, 1]], 1),
                                   torch.cat([T[:, 1], T[:, 2]], 1)])  # fmt: skip
                    g, _ = nl.input_derivatives(net, X @ P.T + c, P, scale)
                a_, b_ = g[:K, n:].detach() / h, g[K:, :n].detach() / h
                r = a_ + b_ + F
                size = torch.mean(torch.sum((a_.abs() + b_.abs()) ** 2 + F**2, 1))
                return float(torch.sqrt(torch.mean(torch.sum(r**2, 1)) / size))

            self.del_relative_warmup_ = relative_del()
            xi = self._init_generators()
            lo, hi = Q.reshape(-1, n).min(0), Q.reshape(-1, n).max(0)
            steps = (Q[:, 1:] - Q[:, :-1]).reshape(-1, n)
            dlo, dhi = steps.min(0), steps.max(0)
            gen = torch.Generator().manual_seed(self.seed + 1)
            box = [torch.from_numpy(a) for a in (lo, hi, dlo, dhi)]
            self._centre = Q.reshape(-1, n).mean(0)
            centre = torch.from_numpy(self._centre)

            def symmetry_loss(idx):
                m = self.symmetry_points
                q0 = box[0] + (box[1] - box[0]) * torch.rand(
                    m, n, generator=gen, dtype=torch.float64
                )
                d = box[2] + (box[3] - box[2]) * torch.rand(
                    m, n, generator=gen, dtype=torch.float64
                )
                res = self._symmetry_residual(
                    net, P, c, scale, xi, q0 - centre, q0 + d - centre, centre
                )
                norms = torch.linalg.norm(xi, dim=1)
                penalty = torch.sum(torch.abs(norms - 1.0))
                if len(xi) > 1:
                    G = xi @ xi.T
                    penalty = penalty + torch.sum(torch.triu(G, 1) ** 2)
                return base_loss(idx) + self.symmetry_weight * (
                    torch.mean(torch.sum(res**2, 1)) + penalty
                )

            left = None if budget is None else max(budget - (time.perf_counter() - t0), 1e-3)
            params = {**dict(net.named_parameters()), "xi": xi}
            records.append(phase(symmetry_loss, params, self.epochs - self.warmup, left))
            self._xi = xi.detach().numpy().copy()
        elapsed = time.perf_counter() - t0
        self.training_ = tuple(records)
        done = sum(r.epochs for r in records)
        self.epochs_per_second_ = done / elapsed if elapsed > 0 else float("inf")
        self.network_ = nl.fold(net, P_np, c_np, scale, self.activation)
        self._ld = None

    def _init_generators(self):
        import torch

        n, k = self.system.nq, self.symmetries
        gen = torch.Generator().manual_seed(self.seed + 2)
        xi = torch.randn(k, n + n * n, generator=gen, dtype=torch.float64)
        xi = xi / torch.linalg.norm(xi, dim=1, keepdim=True)
        return xi.requires_grad_(True)

    def _symmetry_residual(self, net, P, c, scale, xi, q0, q1, centre):
        """``(<M q0 + w, D1 L_d> + <M q1 + w, D2 L_d>) / h`` per pair and generator, for
        positions ``q0``, ``q1`` relative to ``centre`` (the generators are trained about
        the data's mean position: ``M (q - centre) + w``, so ``w`` is the generator's
        value where the data are, not a far-away extrapolation of ``M``)."""
        import torch

        n, h = self.system.nq, self.dt
        X = torch.cat([q0 + centre, q1 + centre], 1)
        g, _ = nl.input_derivatives(net, X @ P.T + c, P, scale)
        w, M = xi[:, :n], xi[:, n:].reshape(-1, n, n)
        a0 = torch.einsum("kij,bj->bki", M, q0) + w  # (B, K, n)
        a1 = torch.einsum("kij,bj->bki", M, q1) + w
        return (
            torch.einsum("bki,bi->bk", a0, g[:, :n]) + torch.einsum("bki,bi->bk", a1, g[:, n:])
        ) / h

    # -- checks after training (numpy / CasADi, no torch objects kept) ------------------------------
    def _derivative_functions(self) -> ca.Function:
        """``(q0, q1) -> (L_d, D1 L_d, D2 L_d, D1 D2 L_d)`` as one CasADi function."""
        n = self.system.nq
        f = self._ld_function()
        a, b = ca.MX.sym("q0", n), ca.MX.sym("q1", n)
        Ld = f(ca.vertcat(a, b))
        D1, D2 = ca.gradient(Ld, a), ca.gradient(Ld, b)
        return ca.Function("Ld_derivatives", [a, b], [Ld, D1, D2, ca.jacobian(D1, b)])

    def _ld_function(self) -> ca.Function:
        if getattr(self, "_ld", None) is None:
            self._ld = self.network_.casadi_function("L_d")
        return self._ld

    def _pairs(self, A: np.ndarray, B: np.ndarray):
        f = self._derivative_functions().map(len(A))
        Ld, D1, D2, D12 = f(A.T, B.T)
        n = self.system.nq
        D12 = np.asarray(D12).reshape(n, len(A), n).transpose(1, 0, 2)
        return np.asarray(Ld).ravel(), np.asarray(D1).T, np.asarray(D2).T, D12

    def _check_fit(self, Q, triples, forces) -> None:
        n, h = self.system.nq, self.dt
        a, b = Q[:, :-1].reshape(-1, n), Q[:, 1:].reshape(-1, n)
        _, D1p, D2p, D12 = self._pairs(a, b)
        det = np.linalg.det(-D12)
        nl.check_regular("dlnn", nl.signed_root(det, n), "pair", Q.shape[1] - 1)
        _, D1a, D2a, _ = self._pairs(triples[:, 0], triples[:, 1])
        _, D1b, D2b, _ = self._pairs(triples[:, 1], triples[:, 2])
        r = (D2a + D1b) / h + forces
        self.del_residual_ = float(np.sqrt(np.mean(np.sum(r**2, 1))))
        size = np.sqrt(np.mean(np.sum((np.abs(D2a) + np.abs(D1b)) ** 2 / h**2 + forces**2, 1)))
        self.del_relative_ = self.del_residual_ / size
        self.symmetries_ = []
        if self._xi is None:
            return
        for k, xi in enumerate(self._xi):
            w_c, M = xi[:n], xi[n:].reshape(n, n)
            w = w_c - M @ self._centre  # the generator M q + w in the data's coordinates
            t0 = np.einsum("bi,bi->b", a @ M.T + w, D1p) / h
            t1 = np.einsum("bi,bi->b", b @ M.T + w, D2p) / h
            reference = max(self.del_relative_warmup_, 1e-300)
            relative = float(np.sqrt(np.mean((t0 + t1) ** 2)) / np.sqrt(np.mean(t0**2 + t1**2)))
            ratio = relative / reference
            degradation = float(self.del_relative_ / reference)
            found = ratio <= SYMMETRY_RATIO and degradation <= FIT_DEGRADATION
            norm = float(np.linalg.norm(xi))
            entry = {"w": (w / norm).tolist(), "M": (M / norm).tolist(),
                     "w_at_centre": (w_c / norm).tolist(), "centre": self._centre.tolist(),
                     "norm": norm, "ratio": ratio, "degradation": degradation,
                     "found": bool(found)}  # fmt: skip
            self.symmetries_.append(entry)
            if not found:
                warnings.warn(
                    f"dlnn: symmetry generator {k} is absent: its residual relative to its "
                    f"terms is {ratio:.3g} times the warm-up's relative DEL residual "
                    f"(SYMMETRY_RATIO = {SYMMETRY_RATIO}) and the symmetry terms left the "
                    f"relative DEL residual at {degradation:.3g} times the warm-up's "
                    f"(FIT_DEGRADATION = {FIT_DEGRADATION}); the data show no such "
                    "symmetry, or it did not converge (more epochs, a larger symmetry_weight)",
                    FitWarning,
                    stacklevel=4,
                )

    # -- what the fitted model offers ------------------------------------------------------------
    def discrete_lagrangian(self) -> ca.Function:
        """``L_d: x = (q0, q1) -> y`` as a CasADi function (MX)."""
        self._require_fitted("discrete_lagrangian()")
        return self._ld_function()

    def conserved_quantity(self) -> ca.Function:
        """``(q0, q1) -> I``: the discrete Noether quantities ``I = -(M q0 + w)^T D1 L_d(q0,
        q1)`` of the found generators (normalised to unit norm), one entry each.

        Raises:
            InputError: the fit discovered no symmetry (``symmetries = 0`` or every
                generator absent).
        """
        self._require_fitted("conserved_quantity()")
        found = [s for s in self.symmetries_ if s["found"]]
        if not found:
            why = ("symmetries = 0" if not self.symmetries_
                   else f"all {len(self.symmetries_)} generators are absent")  # fmt: skip
            raise InputError(f"dlnn found no symmetry ({why}), so it has no conserved quantity")
        n = self.system.nq
        a, b = ca.MX.sym("q0", n), ca.MX.sym("q1", n)
        D1 = ca.gradient(self._ld_function()(ca.vertcat(a, b)), a)
        out = [-ca.dot(ca.mtimes(ca.DM(s["M"]), a) + ca.DM(s["w"]), D1) for s in found]
        return ca.Function("conserved_quantity", [a, b], [ca.vertcat(*out)], ["q0", "q1"], ["I"])

    def _build(self) -> DiscreteModel:
        n, h = self.system.nq, self.dt
        eye = np.eye(n)
        # the network's input (q - h v / 2, q + h v / 2): L_invmod(q, v) = L_d(...) / h
        A = np.block([[eye, -0.5 * h * eye], [eye, 0.5 * h * eye]])
        return nl.midpoint_model(self.system, h, self.network_, A, 1.0 / h, self.order,
                                 self._model_info())  # fmt: skip

    def _model_info(self) -> dict[str, Any]:
        return {
            **self.info(),
            "forced": self.forced_,
            "del_residual": self.del_residual_,
            "epochs": [r.epochs for r in self.training_],
            "stopped": [r.stopped for r in self.training_],
            "symmetries": [
                {**s, "status": "found" if s["found"] else "absent"} for s in self.symmetries_
            ],
        }

    def _integrator_model(self) -> DiscreteModel:
        """The same model built by :class:`~vimpc.integrators.VariationalIntegrator` on SX
        (the network expanded into scalar operations, derivatives by SX AD): the reference
        the exported model is tested against (~50x slower to step)."""
        n, h = self.system.nq, self.dt
        f = self._ld_function()

        def L_invmod(q, v):
            return f(ca.vertcat(q - 0.5 * h * v, q + 0.5 * h * v)) / h

        recovered = nl.mx_modified(L_invmod, n, "midpoint", h, self.order)
        integrator = VariationalIntegrator(
            self.system,
            "midpoint",
            "position_momentum",
            lagrangian=lambda q, v, theta: L_invmod(q, v),
            legendre=lambda q, v, theta: recovered(q, v),
        )
        return integrator_model(integrator, h, info=self._model_info())

    def info(self) -> dict[str, Any]:
        out = super().info()
        if hasattr(self, "symmetries_"):
            out["symmetry_ratio_threshold"] = SYMMETRY_RATIO
        return out
