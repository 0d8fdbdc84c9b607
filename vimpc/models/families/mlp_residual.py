"""A multilayer perceptron on the one-step residual of an explicit nominal step (family
``"mlp_residual"``): the black-box neural baseline of the structure-preserving families,
on the same data, budgets, controller and calibration.

The nominal step ``f_nom`` integrates the nominal system's ODE by an explicit method (RK4
by default, :mod:`vimpc.models.families._residual`); an MLP ``d(q, v, u)`` (with ``coordinates =
"sincos"`` every angle as its sine and cosine) learns the residual ``x_next - f_nom(x, u)``
of the measured transitions by the mean squared error, every input and output entry
normalised by its mean and standard deviation on the training data (both maps folded into
the first and last layers after training, so the stored network is a plain MLP on the
physical inputs). The last layer starts at zero, so training starts from the nominal step.
Training is the shared loop (:mod:`vimpc.models._training`: Adam or AdamW, cosine schedule,
full batch or minibatches, a wall-clock budget) with the budget settings the network
families declare, and by default stops early on a held-out fifth of the transitions
(``validation = 0.2``, ``patience = 200``) and keeps the network of the best held-out
loss: much of a one-step residual can be measurement noise, which a network fits readily.

The exported model is ``step(x, u) = f_nom(x, u) + d(x, u)``, the network written to CasADi
by :mod:`vimpc.models._torch_casadi` (no torch at control time). It is a black box: no
energy, no constraint (the four-bar's loop closure and the rolling disk's rolling drift
away under the step), no momentum conservation, hence no ``energy``, ``constraint``,
``velocity_constraint`` or ``residual`` field. A bound: ``bound = "conformal"`` with a
constant, state-dependent or automatically chosen shape (the network has no spread).
"""

from __future__ import annotations

from dataclasses import replace

import casadi as ca
import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.models import _network_lagrangian as nl
from vimpc.models._neural import NeuralFamily
from vimpc.models.families._residual import NOMINAL_SETTINGS, ExplicitNominal, coordinates_setting

_NET = nl.NETWORK_SETTINGS
#: fewer training transitions than this cannot train a network and hold any out
MIN_TRANSITIONS = 10


class MLPResidualModel(NeuralFamily):
    """An MLP on the one-step residual of an explicit nominal step.

    Args:
        system: the nominal system (its parameters may be wrong) and the structure
            (coordinates, inputs).
        dt: the model step [s].
        integrator, substeps, coordinates, hidden, activation, epochs, lr, optimizer,
            weight_decay, batch, validation, patience, time_budget, threads, seed, progress,
            and the bound settings: see :attr:`settings`.

    Fitted attributes: ``network_`` (the :class:`~vimpc.models._network_lagrangian.Network`
    on the physical inputs, numpy weights), ``n_samples_`` (training transitions),
    ``training_`` (a :class:`~vimpc.models._training.TrainingRecord`),
    ``epochs_per_second_``, ``fit_train_time_``, ``train_rms_`` (RMS of each state entry's
    residual error on the training transitions) and ``target_rms_`` (RMS of the residual
    itself there, what the nominal step alone misses).
    """

    name = "mlp_residual"
    settings = {
        **NOMINAL_SETTINGS,
        "coordinates": coordinates_setting("network inputs"),
        # the network families' settings of the network and its training, declared there
        # once; other defaults where a residual network differs
        "hidden": replace(_NET["hidden"], default=[64, 64]),
        "activation": replace(_NET["activation"], default="tanh"),
        "epochs": replace(_NET["epochs"], default=2000),
        **{key: _NET[key] for key in ("lr", "optimizer", "weight_decay", "batch")},
        # early stopping by default: much of a one-step residual can be measurement noise
        "validation": replace(_NET["validation"], default=0.2),
        "patience": replace(_NET["patience"], default=200),
        **{key: _NET[key] for key in ("time_budget", "threads", "seed", "progress")},
    }

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        if self.patience and not self.validation:
            raise InputError(
                f"patience = {self.patience} needs held-out transitions: set validation > 0"
            )
        self._nominal = ExplicitNominal(self.system, self.dt, self.integrator, self.substeps)

    def _provides(self) -> set[str]:
        return set()

    def _fit(self, data: Dataset | None) -> None:
        X, U, Xn = data.pairs("obs")
        if len(X) < MIN_TRANSITIONS:
            raise InputError(
                f"mlp_residual needs at least {MIN_TRANSITIONS} training transitions, the "
                f"data hold {len(X)}"
            )
        targets = self._nominal.residuals("mlp_residual", X, U, Xn)
        Z = self._nominal.inputs(self.coordinates, X, U)
        self._timed(self._train, Z, targets)
        self._net = None
        error = self.network_.numpy(Z) - targets
        self.n_samples_ = len(Z)
        self.train_rms_ = np.sqrt(np.mean(error**2, axis=0))
        self.target_rms_ = np.sqrt(np.mean(targets**2, axis=0))

    def _train(self, Z: np.ndarray, targets: np.ndarray) -> None:
        import torch

        from vimpc.models._torch_casadi import mlp

        mean, spread = Z.mean(0), Z.std(0)
        spread = np.where(spread > 0, spread, 1.0)  # a constant input (an unexcited torque)
        y_mean, y_scale = targets.mean(0), targets.std(0)
        y_scale = np.where(y_scale > 0, y_scale, 1.0)
        net = mlp([Z.shape[1], *self.hidden, targets.shape[1]], self.activation, seed=self.seed)
        # the correction starts at zero, the nominal step itself: where the residual is
        # mostly noise, training (with early stopping) moves it only as far as it pays
        with torch.no_grad():
            net[-1].weight.zero_()
            net[-1].bias.zero_()
        Zt = torch.from_numpy((Z - mean) / spread)
        Yt = torch.from_numpy((targets - y_mean) / y_scale)

        def loss(idx):
            return torch.mean((net(Zt[idx]) - Yt[idx]) ** 2)

        order = np.random.default_rng(self.seed).permutation(len(Z))
        n_val = int(round(self.validation * len(Z)))
        train_idx = torch.from_numpy(np.sort(order[n_val:]))
        val_idx = torch.from_numpy(np.sort(order[:n_val]))
        validation = None
        if n_val:

            def validation():
                with torch.no_grad():
                    return float(loss(val_idx))

        self._keep(
            self._train_loop(
                loss, net, train_idx, optimizer=self.optimizer, weight_decay=self.weight_decay,
                validation=validation, patience=self.patience or None,
            )
        )  # fmt: skip
        # y = y_mean + y_scale * net((z - mean) / spread), folded into a plain MLP on z
        folded = nl.fold(net, np.diag(1.0 / spread), -mean / spread, 1.0, self.activation)
        (W0, b0), *middle, (Wl, bl) = folded.layers
        last = (y_scale[:, None] * Wl, y_scale * bl + y_mean)
        self.network_ = nl.Network(((W0, b0), *middle, last), self.activation)

    def _network(self) -> ca.Function:
        if getattr(self, "_net", None) is None:
            self._net = self.network_.casadi_function("residual_net")
        return self._net

    def correction(self) -> ca.Function:
        """``(x, u) -> d``: the network's residual correction of the nominal step (MX)."""
        self._require_fitted("correction()")
        return self._correction()

    def _correction(self) -> ca.Function:
        x, u = ca.MX.sym("x", self._nominal.nx), ca.MX.sym("u", self.system.nu)
        d = self._network()(self._nominal.inputs(self.coordinates, x, u))
        return ca.Function("mlp_correction", [x, u], [d], ["x", "u"], ["d"])

    def _build(self) -> DiscreteModel:
        info = {
            **self.info(),
            "n_samples": int(self.n_samples_),
            "epochs": self.training_.epochs,
            "stopped": self.training_.stopped,
            "final_loss": self.training_.loss[-1],
            "train_rms": self.train_rms_.tolist(),
            "target_rms": self.target_rms_.tolist(),
        }
        # the weights are the model's parameters: one compiled controller serves every fit
        net = self.network_.casadi_function("residual_net", weights_input=True)
        x, u = ca.MX.sym("x", self._nominal.nx), ca.MX.sym("u", self.system.nu)
        w = ca.MX.sym("w", net.numel_in(1))
        d = net(self._nominal.inputs(self.coordinates, x, u), w)
        correction = ca.Function("mlp_correction", [x, u, w], [d], ["x", "u", "p"], ["d"])
        return self._nominal.corrected(
            correction, info, self.network_.weights(), self.network_.weight_names("net_")
        )
