"""The one training loop of the neural families (torch, float64, seeded).

``train`` checks every setting before the first step, runs full-batch or minibatch
epochs, stops on convergence, on validation patience, on a wall-clock budget or after
the last epoch, says which in the returned :class:`TrainingRecord`, and leaves the
parameters at their best validation loss.

A long training can be stopped and resumed: with a checkpoint file (``checkpoint``, or
every call inside :func:`checkpoints`) ``train`` saves its whole state (parameters,
optimizer, schedule, random generators, losses, best validation) every
``checkpoint_every`` epochs and at the end, and a later call with the same settings and
the same initial parameters continues from it, to the same parameters an uninterrupted
run reaches. A file written by other settings or another start is refused, never
overwritten.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vimpc.errors import InputError, SolverError

OPTIMIZERS = ("adamw", "adam", "lbfgs")
STOP_REASONS = ("converged", "patience", "budget", "epochs")


@dataclass(frozen=True)
class TrainingRecord:
    """What a call of :func:`train` did.

    ``loss[k]`` is epoch k+1's training loss (Adam/AdamW: the mean of the losses its
    steps started from; L-BFGS: the loss after its step); ``validation[k]`` the validation loss
    after it. ``stopped`` is one of :data:`STOP_REASONS`, ``message`` says it in words.
    """

    epochs: int
    stopped: str
    message: str
    loss: tuple[float, ...]
    validation: tuple[float, ...]
    best_validation: float | None
    best_epoch: int | None
    wall_time_s: float


#: the folder, key and call count of the enclosing :func:`checkpoints` block
_CHECKPOINTS: contextvars.ContextVar = contextvars.ContextVar("checkpoints", default=None)


@contextlib.contextmanager
def checkpoints(folder: str | os.PathLike, key: str, every: int = 100) -> Iterator[Path]:
    """Checkpoint every :func:`train` call inside the block (the ones that name no file
    of their own) to ``folder/<key>-<k>.pt`` every ``every`` epochs, ``k`` counting the
    calls from 0, so that a fit of several phases resumes phase by phase. ``key`` names
    the fit (its data and settings): two fits under one key would resume each other's
    files, and are refused only where their settings or initial parameters differ."""
    if not isinstance(key, str) or not key or any(c in key for c in "/\\"):
        raise InputError(f"key must be a non-empty string without path separators, got {key!r}")
    _integer("every", every)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    token = _CHECKPOINTS.set([folder, key, 0, every])
    try:
        yield folder
    finally:
        _CHECKPOINTS.reset(token)


def _block_checkpoint() -> tuple[Path, int] | None:
    block = _CHECKPOINTS.get()
    if block is None:
        return None
    folder, key, count, every = block
    block[2] = count + 1
    return folder / f"{key}-{count}.pt", every


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _save(path: Path, state: dict) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a stop mid-write leaves the previous checkpoint whole


def _number(name, value, *, positive=False, allow_none=False):
    if value is None and allow_none:
        return
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or (value <= 0 if positive else value < 0):
        rule = "a positive" if positive else "a non-negative"
        raise InputError(f"{name} must be {rule} finite number, got {value!r}")


def _integer(name, value, *, minimum=1, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _named_parameters(parameters):
    import torch

    if isinstance(parameters, torch.nn.Module):
        named = list(parameters.named_parameters())
    elif isinstance(parameters, Mapping):
        named = list(parameters.items())
    elif isinstance(parameters, torch.Tensor):
        named = [("parameters", parameters)]
    else:
        named = [
            p if isinstance(p, tuple) else (f"parameters[{i}]", p) for i, p in enumerate(parameters)
        ]
    if not named:
        raise InputError("parameters is empty; pass the module or tensors to train")
    for name, p in named:
        if not isinstance(p, torch.Tensor) or not p.requires_grad:
            raise InputError(
                f"parameter {name} must be a tensor with requires_grad=True, got {p!r}"
            )
        if p.dtype != torch.float64:
            raise InputError(
                f"parameter {name} is {p.dtype}; training is float64 only (call .double())"
            )
    return named


def train(
    loss_fn: Callable,
    parameters,
    *,
    optimizer: str = "adamw",
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    epochs: int = 1000,
    batch_size: int | None = None,
    n_samples: int | None = None,
    schedule: str | tuple = "none",
    validation: Callable[[], float] | None = None,
    patience: int | None = None,
    min_delta: float = 0.0,
    tol: float | None = None,
    time_budget_s: float | None = None,
    lbfgs_iterations: int = 20,
    seed: int = 0,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    generators: Sequence = (),
) -> TrainingRecord:
    """Minimise ``loss_fn`` over ``parameters``.

    Args:
        loss_fn: ``loss_fn()`` (full batch) or ``loss_fn(idx)`` with ``idx`` a LongTensor
            of sample indices (``batch_size`` set) returning a scalar float64 tensor.
        parameters: a ``torch.nn.Module``, a mapping name -> tensor, or tensors (float64,
            requires_grad); named in every error.
        optimizer: ``"adamw"``, ``"adam"`` or ``"lbfgs"`` (full batch, strong-Wolfe line
            search, ``lbfgs_iterations`` iterations per epoch, no weight decay).
        lr, weight_decay: the optimizer's step size and decay (Adam: L2 in the gradient;
            AdamW: decoupled).
        epochs: the most epochs to run.
        batch_size, n_samples: minibatches of ``batch_size`` out of ``n_samples``,
            reshuffled every epoch by a ``torch.Generator`` seeded with ``seed``.
        schedule: ``"none"``, ``"cosine"`` (to 0 at the last epoch) or
            ``("step", every, gamma)`` (lr times gamma every ``every`` epochs).
        validation: returns the validation loss, called after every epoch; the best
            parameters (improvement above ``min_delta``) are restored at the end.
        patience: stop after this many epochs without such an improvement.
        tol: stop ("converged") when the training loss changes by at most
            ``tol * max(1, |loss|)`` over an epoch.
        time_budget_s: stop ("budget") at the end of the first epoch past this wall time.
        progress: show a tqdm bar with the current losses.
        checkpoint: a file to save the training's state to every ``checkpoint_every``
            epochs and at the end, and to resume from when it exists (module docstring);
            None: the enclosing :func:`checkpoints` block's next file (and its ``every``),
            else none.
        generators: further ``torch.Generator`` objects ``loss_fn`` draws from, saved
            and restored with the checkpoint so that a resumed run draws what an
            uninterrupted one would.

    Raises:
        InputError: a bad setting, before any step; a checkpoint written by other
            settings or from other initial parameters (named, left as it is).
        SolverError: the training or validation loss became NaN or inf (the parameters
            are left as they were when it happened).
    """
    import torch
    from tqdm.auto import tqdm

    if not callable(loss_fn):
        raise InputError(f"loss_fn must be callable, got {loss_fn!r}")
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    _number("lr", lr, positive=True)
    _number("weight_decay", weight_decay)
    _integer("epochs", epochs)
    _integer("n_samples", n_samples, allow_none=True)
    _integer("batch_size", batch_size, allow_none=True)
    if batch_size is not None and n_samples is None:
        raise InputError(f"batch_size={batch_size} needs n_samples (the dataset's size)")
    if batch_size is not None and batch_size > n_samples:
        raise InputError(
            f"batch_size must be at most n_samples={n_samples}, got {batch_size}; "
            "use batch_size=None for full-batch training"
        )
    if optimizer == "lbfgs" and batch_size is not None:
        raise InputError(f"optimizer 'lbfgs' trains full batch; got batch_size={batch_size}")
    if optimizer == "lbfgs" and weight_decay != 0:
        raise InputError(
            f"optimizer 'lbfgs' has no weight_decay, got {weight_decay!r}; add a penalty "
            "to loss_fn instead"
        )
    step_rule = isinstance(schedule, (tuple, list)) and len(schedule) == 3 and schedule[0] == "step"
    if step_rule:
        _integer("schedule's step every", schedule[1])
        _number("schedule's step gamma", schedule[2], positive=True)
    elif schedule not in ("none", "cosine"):
        raise InputError(
            f"schedule must be 'none', 'cosine' or ('step', every, gamma), got {schedule!r}"
        )
    if validation is not None and not callable(validation):
        raise InputError(f"validation must be callable or None, got {validation!r}")
    _integer("patience", patience, allow_none=True)
    if patience is not None and validation is None:
        raise InputError(f"patience={patience} needs a validation callable")
    _number("min_delta", min_delta)
    _number("tol", tol, allow_none=True)
    _number("time_budget_s", time_budget_s, positive=True, allow_none=True)
    _integer("lbfgs_iterations", lbfgs_iterations)
    _integer("seed", seed, minimum=0)
    if not isinstance(progress, bool):
        raise InputError(f"progress must be True or False, got {progress!r}")
    _integer("checkpoint_every", checkpoint_every)
    generators = tuple(generators)
    for i, g in enumerate(generators):
        if not isinstance(g, torch.Generator):
            raise InputError(f"generators[{i}] must be a torch.Generator, got {g!r}")
    named = _named_parameters(parameters)
    params = [p for _, p in named]
    path = Path(checkpoint) if checkpoint is not None else None
    if path is None and (block := _block_checkpoint()) is not None:
        path, checkpoint_every = block
    # what decides the result (the wall-clock budget does not enter: a resumed run adds
    # the saved wall time to its own, and a caller's budget may be what is left of one)
    signature = {
        "optimizer": optimizer,
        "lr": float(lr),
        "weight_decay": float(weight_decay),
        "epochs": int(epochs),
        "batch_size": batch_size,
        "n_samples": n_samples,
        "schedule": repr(schedule),
        "tol": tol,
        "patience": patience,
        "min_delta": float(min_delta),
        "lbfgs_iterations": int(lbfgs_iterations),
        "seed": int(seed),
        "validation": validation is not None,
        "generators": len(generators),
        "parameters": [f"{n} {tuple(p.shape)}" for n, p in named],
        "initial": _digest(params),
    }
    saved = None
    if path is not None and path.exists():
        try:
            saved = torch.load(path, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file: name it, keep it
            raise InputError(
                f"checkpoint {str(path)!r} cannot be read ({exc}); move it away to train "
                "from the start"
            ) from exc
        theirs = saved.get("signature", {}) if isinstance(saved, dict) else {}
        differ = sorted(k for k in signature if theirs.get(k) != signature[k])
        if differ:
            what = ", ".join(f"{k}: {theirs.get(k)!r} there, {signature[k]!r} here"
                             for k in differ if k != "initial")  # fmt: skip
            if "initial" in differ:
                what = (what + "; " if what else "") + "other initial parameters"
            raise InputError(
                f"checkpoint {str(path)!r} was written by another training ({what}); use "
                "another file, or move it away to train from the start"
            )

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            params,
            lr=lr,
            max_iter=lbfgs_iterations,
            # torch's defaults (1e-7, 1e-9) stop float64 fits early (least squares: 1e-9 off)
            tolerance_grad=1e-10,
            tolerance_change=1e-18,
            line_search_fn="strong_wolfe",
        )
    else:
        kind = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
        opt = kind(params, lr=lr, weight_decay=weight_decay)
    if schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    elif step_rule:
        scheduler = torch.optim.lr_scheduler.StepLR(opt, int(schedule[1]), float(schedule[2]))
    else:
        scheduler = None
    generator = torch.Generator().manual_seed(seed)

    def scalar(loss):
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise InputError(f"loss_fn must return a scalar tensor, got {loss!r}")
        return loss

    def checked(value, what, epoch):
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        if not math.isfinite(value):
            raise SolverError(
                f"the {what} loss became {value} at epoch {epoch}; lower lr (now {lr}) "
                "or check loss_fn and the data's scale"
            )
        return value

    losses: list[float] = []
    vals: list[float] = []
    best, best_epoch, best_state = math.inf, None, None
    stopped, message = "epochs", f"ran all {epochs} epochs"
    first, before, finished = 1, 0.0, False
    if saved is not None:
        with torch.no_grad():
            for p, value in zip(params, saved["params"], strict=True):
                p.copy_(value)
        opt.load_state_dict(saved["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(saved["scheduler"])
        generator.set_state(saved["generator"])
        for g, state in zip(generators, saved["generators"], strict=True):
            g.set_state(state)
        losses, vals = list(saved["losses"]), list(saved["validation"])
        best, best_epoch = saved["best"], saved["best_epoch"]
        best_state = saved["best_state"]
        before, first = saved["wall_time_s"], len(losses) + 1
        # a training stopped by its time budget goes on where a later call allows more
        more_time = saved["stopped"] == "budget" and (
            time_budget_s is None or before < time_budget_s
        )
        if saved["stopped"] is not None and not more_time:
            stopped, message, finished = saved["stopped"], saved["message"], True

    def state(done: str | None) -> dict:
        return {
            "signature": signature,
            "params": [p.detach().clone() for p in params],
            "optimizer": opt.state_dict(),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "generator": generator.get_state(),
            "generators": [g.get_state() for g in generators],
            "losses": list(losses),
            "validation": list(vals),
            "best": best,
            "best_epoch": best_epoch,
            "best_state": best_state,
            "wall_time_s": before + time.perf_counter() - start,
            "stopped": done,
            "message": message if done is not None else None,
        }

    start = time.perf_counter()
    epochs_left = range(first, epochs + 1) if not finished else range(0)
    bar = tqdm(epochs_left, desc=f"train ({optimizer})", disable=not progress,
               initial=first - 1, total=epochs)  # fmt: skip
    try:
        for epoch in bar:
            if optimizer == "lbfgs":

                def closure():
                    opt.zero_grad()
                    loss = scalar(loss_fn())
                    loss.backward()
                    return loss

                opt.step(closure)
                with torch.no_grad():
                    losses.append(checked(scalar(loss_fn()), "training", epoch))
            else:
                if batch_size is None:
                    batches = [None]
                else:
                    batches = torch.randperm(n_samples, generator=generator).split(batch_size)
                total = 0.0
                for idx in batches:
                    opt.zero_grad()
                    loss = scalar(loss_fn() if idx is None else loss_fn(idx))
                    total += checked(loss, "training", epoch)
                    loss.backward()
                    opt.step()
                losses.append(total / len(batches))
            if scheduler is not None:
                scheduler.step()
            postfix = {"loss": f"{losses[-1]:.3e}"}
            if validation is not None:
                with torch.no_grad():
                    vals.append(checked(validation(), "validation", epoch))
                postfix["val"] = f"{vals[-1]:.3e}"
                if vals[-1] < best - min_delta:
                    best, best_epoch = vals[-1], epoch
                    best_state = [p.detach().clone() for p in params]
            bar.set_postfix(postfix)
            if tol is not None and epoch > 1:
                change = abs(losses[-1] - losses[-2])
                if change <= tol * max(1.0, abs(losses[-1])):
                    stopped = "converged"
                    message = (
                        f"converged at epoch {epoch}: the loss changed by {change:.3g} (tol {tol})"
                    )
                    break
            if patience is not None and epoch - best_epoch >= patience:
                stopped = "patience"
                message = (
                    f"stopped at epoch {epoch}: no validation improvement above min_delta="
                    f"{min_delta} for {patience} epochs (best {best:.6g} at epoch {best_epoch})"
                )
                break
            elapsed = before + time.perf_counter() - start
            if time_budget_s is not None and elapsed >= time_budget_s and epoch < epochs:
                stopped = "budget"
                message = (
                    f"stopped at epoch {epoch} of {epochs}: the time budget of {time_budget_s} s "
                    f"was used up ({elapsed:.3g} s)"
                )
                break
            if path is not None and epoch % checkpoint_every == 0 and epoch < epochs:
                _save(path, state(None))
    finally:
        bar.close()
    if path is not None and not finished:
        _save(path, state(stopped))
    if best_state is not None and best_epoch != len(losses):
        with torch.no_grad():
            for p, saved in zip(params, best_state, strict=True):
                p.copy_(saved)
        message += f"; parameters restored to epoch {best_epoch} (best validation loss)"
    return TrainingRecord(
        epochs=len(losses),
        stopped=stopped,
        message=message,
        loss=tuple(losses),
        validation=tuple(vals),
        best_validation=None if best_epoch is None else best,
        best_epoch=best_epoch,
        wall_time_s=before + time.perf_counter() - start,
    )
