"""What a fit of a neural family does besides its own maths, written once: the checks of
the settings and the data every neural family makes, the "no inputs" warning, the timed
training on a fixed number of torch threads, the call of the one training loop
(:func:`vimpc.models._training.train`) with the family's settings, the held-out split of
the families that stop early, and the training's entries in the exported model's info.

A neural family subclasses :class:`NeuralFamily` (or :class:`NetworkFamily`, for the
network-Lagrangian families and their shared settings), writes its loss and its export,
and is registered by one line in :mod:`vimpc.models.registry`; the conformal bound and
its record come from :class:`~vimpc.models.base.ModelFamily`. Nothing here imports torch
at module level, so importing a family loads no torch.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from vimpc.errors import FitWarning, InputError
from vimpc.models import _network_lagrangian as nl
from vimpc.models.base import ModelFamily


def rollout_windows(
    what: str, X: np.ndarray, U: np.ndarray, steps: int, setting: str, minimum: tuple[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Every window of ``steps + 1`` consecutive snapshots of every trajectory of ``X``
    ``(N, T + 1, m)`` with its ``steps`` inputs of ``U``: ``(Xw, Uw)``, the samples of a
    family trained on rollouts. ``setting`` names the setting ``steps`` comes from and
    ``minimum`` the family's ``(name, value)`` of the fewest windows it trains on.

    Raises:
        InputError: trajectories shorter than a window; fewer windows than ``minimum``.
    """
    N, T1 = X.shape[:2]
    c = steps
    if T1 < c + 1:
        raise InputError(
            f"{what} trains on rollouts of {setting} = {c} steps, which needs trajectories "
            f"of at least {setting} + 1 = {c + 1} snapshots; the data have {T1}: lower "
            f"{setting} or collect longer trajectories"
        )
    starts = range(T1 - c)
    Xw = np.stack([X[:, s : s + c + 1] for s in starts], 1).reshape(-1, c + 1, X.shape[2])
    Uw = np.stack([U[:, s : s + c] for s in starts], 1).reshape(-1, c, U.shape[2])
    name, fewest = minimum
    if len(Xw) < fewest:
        raise InputError(
            f"{what} needs at least {name} = {fewest} training windows of {setting} + 1 = "
            f"{c + 1} snapshots, but {N} trajectories of {T1} snapshots give {len(Xw)}: "
            f"collect more or longer trajectories, or lower {setting}"
        )
    return Xw, Uw


class NeuralFamily(ModelFamily):
    """What every neural family shares in its fit. Its settings include ``hidden``,
    ``epochs``, ``lr``, ``batch``, ``time_budget``, ``threads``, ``seed`` and ``progress``.

    Fitted attributes it sets: ``forced_`` (:meth:`_note_inputs`), ``fit_train_time_``
    (:meth:`_timed`), ``training_`` and ``epochs_per_second_`` (:meth:`_keep`).
    """

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        if not self.hidden:
            raise InputError("hidden must list at least one hidden layer width, got []")

    def _note_inputs(self, U: np.ndarray, consequence: str) -> None:
        """``forced_``: whether the data excite any input; a FitWarning ``"<name>: the data
        have no inputs<consequence>"`` where they do not (called from ``_fit``: the
        warning points at the line that called :meth:`fit`)."""
        self.forced_ = bool(np.any(U != 0))
        if not self.forced_:
            warnings.warn(
                f"{self.name}: the data have no inputs{consequence}", FitWarning, stacklevel=4
            )

    def _timed(self, train: Callable[..., None], *args: Any) -> None:
        """``train(*args)`` on ``threads`` torch threads, its wall time in
        ``fit_train_time_``."""
        start = time.perf_counter()
        with nl.torch_threads(self.threads):
            train(*args)
        self.fit_train_time_ = time.perf_counter() - start

    def _train_loop(
        self,
        loss: Callable,
        parameters,
        samples,
        *,
        optimizer: str,
        epochs: int | None = None,
        time_budget_s: float | None = None,
        **options: Any,
    ):
        """:func:`vimpc.models._training.train` of ``loss(idx)`` over ``parameters`` with the
        family's settings: learning rate ``lr`` on a cosine schedule to 0, ``epochs`` (by
        default the setting), minibatches of ``batch`` samples (full batch for 0 or more
        than there are), the budget ``time_budget_s`` (by default ``time_budget``, 0 for
        none), ``seed`` and ``progress``; ``options`` go to ``train`` as they are.

        ``samples`` is the number of samples, all trained on (``loss`` gets ``slice(None)``
        for the full batch), or the index tensor of those trained on (``loss`` gets them,
        or the minibatch's among them)."""
        from vimpc.models._training import train

        if isinstance(samples, int):
            n = samples

            def loss_fn(idx=None):
                return loss(slice(None) if idx is None else idx)
        else:
            n = len(samples)

            def loss_fn(idx=None):
                return loss(samples if idx is None else samples[idx])

        batch = self.batch if 0 < self.batch < n else None
        if time_budget_s is None:
            time_budget_s = self.time_budget or None
        return train(
            loss_fn, parameters, optimizer=optimizer, lr=self.lr,
            epochs=self.epochs if epochs is None else epochs, batch_size=batch,
            n_samples=n if batch else None, schedule="cosine", time_budget_s=time_budget_s,
            seed=self.seed, progress=self.progress, **options,
        )  # fmt: skip

    def _keep(self, record) -> None:
        """Keep one training's record (``training_``) and its speed (``epochs_per_second_``,
        over the loop's own wall time)."""
        self.training_ = record
        self.epochs_per_second_ = record.epochs / max(record.wall_time_s, 1e-12)

    def _rollout_info(self) -> dict[str, Any]:
        """The info entries of a family trained on ``windows_`` rollout windows by one
        training (:meth:`_keep`)."""
        return {
            "training_windows": self.windows_,
            "final_loss": self.training_.loss[-1],
            "epochs": self.training_.epochs,
            "stopped": self.training_.stopped,
        }


class NetworkFamily(NeuralFamily):
    """What the network-Lagrangian families share: the network settings and their checks,
    the held-out split of their samples, the exported fields, and the network's layer sizes
    (input ``2 nq``: ``(q_k, q_{k+1})`` for a discrete Lagrangian, ``(q, v)`` for a
    continuous one). ``samples`` names what the family trains on, for messages."""

    settings = dict(nl.NETWORK_SETTINGS)
    samples = "samples"

    def __init__(self, system, dt, **settings) -> None:
        super().__init__(system, dt, **settings)
        if self.patience and not self.validation:
            raise InputError(
                f"patience = {self.patience} needs held-out {self.samples}: set validation > 0"
            )

    def _provides(self) -> set[str]:
        return {"residual", "energy"}

    @property
    def sizes(self) -> list[int]:
        return [2 * self.system.nq, *self.hidden, 1]

    def _split(self, n: int):
        """``(train_idx, val_idx)``: index tensors of the ``n`` samples trained on and of the
        ``validation`` fraction held out for early stopping, drawn from ``seed``."""
        import torch

        rng = np.random.default_rng(self.seed)
        order = rng.permutation(n)
        n_val = int(round(self.validation * n))
        val_idx = torch.from_numpy(np.sort(order[:n_val]))
        train_idx = torch.from_numpy(np.sort(order[n_val:]))
        return train_idx, val_idx

    def _train_network(self, loss, parameters, train_idx, val_idx, validation_loss=None,
                       **options):  # fmt: skip
        """:meth:`_train_loop` on the samples ``train_idx`` with the optimizer, weight decay
        and early stopping of the settings: the loss ``validation_loss`` (by default
        ``loss``) on the held-out ``val_idx`` is watched with ``patience``."""
        import torch

        held_out = loss if validation_loss is None else validation_loss
        validation = None
        if len(val_idx):

            def validation():
                with torch.enable_grad():
                    return float(held_out(val_idx).detach())

        return self._train_loop(
            loss, parameters, train_idx, optimizer=self.optimizer,
            weight_decay=self.weight_decay, validation=validation,
            patience=self.patience or None, **options,
        )  # fmt: skip
