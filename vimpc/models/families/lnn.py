"""Lagrangian neural networks (family ``"lnn"``): the continuous baseline of the discrete
Lagrangian networks (Cranmer et al.; the LNN of Lishkova et al.'s comparison).

A multilayer perceptron ``L(q, v)`` (the same settings as :mod:`~vimpc.models.families.dlnn`)
is trained on finite differences of the positions: at every interior snapshot
``v_k = (q_{k+1} - q_{k-1}) / 2h`` and ``a_k = (q_{k+1} - 2 q_k + q_{k-1}) / h^2`` (central
differences, O(h^2)), by the mean squared Euler–Lagrange residual

    r_k = d2L/dv2 a_k + d2L/(dv dq) v_k - dL/dq - B(q_k) u_k,

with ``u_k`` the mean of the inputs held over the two steps around ``t_k``. The inputs fix
the Lagrangian's scale; on unforced data the degeneracy term
``degeneracy_weight * mean(1 - sigmoid(c det(d2L/dv2)))`` alone keeps ``L`` away from zero
and the fit warns that the scale is not identified. Only positions are used.

The determinant cannot tell the sign of ``d2L/dv2`` in even dimension, so on unforced data
the learned ``L`` may come out negated (energy and momenta of the wrong sign): after
training on unforced data the network's last layer is negated (exactly) when ``d2L/dv2`` is
negative definite at more interior snapshots than positive definite
(``info["lagrangian_negated"]``); forced data fix the sign, which is kept. Snapshots where
``d2L/dv2`` is not positive definite are warned of (FitWarning) by count and the first one.

The exported model is the midpoint :class:`~vimpc.integrators.VariationalIntegrator` of the
learned ``L`` (position-momentum form, state ``(q, v)``, momentum ``dL/dv``, energy
``v . dL/dv - L``): unlike DLNN, it carries the midpoint rule's O(h^2) discretisation error
on top of the learning error.
The model is written on MX with the network's derivatives in closed form
(:func:`vimpc.models._network_lagrangian.midpoint_model`, checked against the integrator's
SX model to 1e-10).
"""

from __future__ import annotations

import time

import casadi as ca
import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.integrators import VariationalIntegrator
from vimpc.models import _network_lagrangian as nl
from vimpc.models._integrated import integrator_model
from vimpc.models._neural import NetworkFamily
from vimpc.models.families.lsi import check_conservative, snapshots


def finite_differences(Q: np.ndarray, U: np.ndarray, h: float):
    """``(q, v, a, u)`` at every interior snapshot of ``Q`` ``(N, T + 1, n)``, flattened:
    central differences and the mean of the two inputs around each snapshot."""
    n, nu = Q.shape[2], U.shape[2]
    q = Q[:, 1:-1].reshape(-1, n)
    v = ((Q[:, 2:] - Q[:, :-2]) / (2 * h)).reshape(-1, n)
    a = ((Q[:, 2:] - 2 * Q[:, 1:-1] + Q[:, :-2]) / h**2).reshape(-1, n)
    u = (0.5 * (U[:, :-1] + U[:, 1:])).reshape(-1, nu)
    return q, v, a, u


class LNNModel(NetworkFamily):
    """A continuous Lagrangian network L(q, v), exported as its midpoint integrator.

    See the module docstring.

    Fitted attributes: ``network_`` (the :class:`~vimpc.models._network_lagrangian.Network`
    ``L(q, v)``, numpy weights), ``forced_``, ``training_`` (a
    :class:`~vimpc.models._training.TrainingRecord`), ``el_residual_`` (RMS of ``r_k`` on
    the training snapshots), ``epochs_per_second_``.
    """

    name = "lnn"
    samples = "snapshots"

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        check_conservative(self.system, "lnn")

    def _fit(self, data: Dataset | None) -> None:
        s, h, n = self.system, self.dt, self.system.nq
        Q, U = snapshots(data, n, "lnn")
        q, v, a, u = finite_differences(Q, U, h)
        nl.check_equations("lnn", len(q), n * len(q), nl.n_parameters(self.sizes))
        qs, us = ca.SX.sym("q", n), ca.SX.sym("u", s.nu)
        Bu = ca.Function("Bu", [qs, us], [ca.mtimes(s.input_map(qs), us)]).map(len(q))
        force = np.asarray(Bu(q.T, u.T)).T
        self._note_inputs(
            U,
            ", so the Lagrangian's scale is set only by the degeneracy term, not the "
            "physical one: the exported model's response to inputs is off by an unknown "
            "factor (collect data with known, excited inputs for control)",
        )
        self._timed(self._train, q, v, a, force)
        self._check_fit(q, v, a, force, Q.shape[1] - 2)

    def _train(self, q, v, a, force) -> None:
        import torch

        from vimpc.models._torch_casadi import mlp

        n = self.system.nq
        X = np.hstack([q, v])
        mean, spread = X.mean(0), X.std(0)
        spread = np.where(spread > 1e-12, spread, 1.0)
        P_np, c_np = np.diag(1.0 / spread), -mean / spread
        scale = float(np.mean(spread[n:] ** 2))  # kinetic energy of a unit mass
        net = mlp(self.sizes, self.activation, seed=self.seed)
        P, c = torch.from_numpy(P_np), torch.from_numpy(c_np)
        Xt, A, Ft = torch.from_numpy(X), torch.from_numpy(a), torch.from_numpy(force)
        Vt = Xt[:, n:]
        blocks = (slice(n, 2 * n), slice(0, 2 * n))
        train_idx, val_idx = self._split(len(X))

        def loss(idx):
            g, H = nl.input_derivatives(net, Xt[idx] @ P.T + c, P, scale, blocks)
            Hvq, Hvv = H[:, :, :n], H[:, :, n:]
            r = (
                torch.einsum("bij,bj->bi", Hvv, A[idx])
                + torch.einsum("bij,bj->bi", Hvq, Vt[idx])
                - g[:, :n]
                - Ft[idx]
            )
            return torch.mean(torch.sum(r**2, 1)) + nl.degeneracy(
                nl.det(Hvv), self.degeneracy_weight, self.degeneracy_scale
            )

        start = time.perf_counter()
        record = self._train_network(loss, net, train_idx, val_idx)
        elapsed = time.perf_counter() - start
        self.training_ = record
        self.epochs_per_second_ = record.epochs / elapsed if elapsed > 0 else float("inf")
        self.network_ = nl.fold(net, P_np, c_np, scale, self.activation)
        self._l = None

    def _l_function(self) -> ca.Function:
        if getattr(self, "_l", None) is None:
            self._l = self.network_.casadi_function("L")
        return self._l

    def lagrangian(self) -> ca.Function:
        """``L: x = (q, v) -> y`` as a CasADi function (MX)."""
        self._require_fitted("lagrangian()")
        return self._l_function()

    def _check_fit(self, q, v, a, force, per: int) -> None:
        n = self.system.nq
        qs, vs = ca.MX.sym("q", n), ca.MX.sym("v", n)
        mass = ca.Function("M", [qs, vs], [ca.hessian(self._l_function()(ca.vertcat(qs, vs)),
                                                      vs)[0]]).map(len(q))  # fmt: skip
        M = np.asarray(mass(q.T, v.T)).reshape(n, len(q), n).transpose(1, 0, 2)
        # d2L/dv2 positive definite on the data: unforced data leave the sign open
        self.network_, self.negated_ = nl.orient(
            "lnn", self.network_, M, self.forced_, "interior snapshot", per
        )
        if self.negated_:
            self._l = None
        L = self._l_function()(ca.vertcat(qs, vs))
        p = ca.gradient(L, vs)
        M = ca.jacobian(p, vs)
        acc = ca.MX.sym("acc", n)
        r = ca.mtimes(M, acc) + ca.mtimes(ca.jacobian(p, qs), vs) - ca.gradient(L, qs)
        fn = ca.Function("el", [qs, vs, acc], [r, ca.det(M)]).map(len(q))
        res, det = fn(q.T, v.T, a.T)
        res = np.asarray(res).T - force
        self.el_residual_ = float(np.sqrt(np.mean(np.sum(res**2, 1))))
        nl.check_regular(
            "lnn", nl.signed_root(np.asarray(det).ravel(), n), "interior snapshot", per
        )

    def _build(self) -> DiscreteModel:
        n = self.system.nq
        return nl.midpoint_model(self.system, self.dt, self.network_, np.eye(2 * n), 1.0, 0,
                                 self._model_info())  # fmt: skip

    def _model_info(self) -> dict:
        return {
            **self.info(),
            "forced": self.forced_,
            "el_residual": self.el_residual_,
            "epochs": self.training_.epochs,
            "stopped": self.training_.stopped,
            # unforced data leave L's sign open: negated after training when d2L/dv2 was
            # negative definite at most interior snapshots
            "lagrangian_negated": self.negated_,
        }

    def _integrator_model(self) -> DiscreteModel:
        """The same model built by :class:`~vimpc.integrators.VariationalIntegrator` on SX
        (the network expanded into scalar operations): the reference the exported model is
        tested against."""
        f = self._l_function()

        def L(q, v, theta):
            return f(ca.vertcat(q, v))

        integrator = VariationalIntegrator(self.system, "midpoint", "position_momentum",
                                           lagrangian=L)  # fmt: skip
        return integrator_model(integrator, self.dt, info=self._model_info())
