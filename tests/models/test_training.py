"""The neural families' shared training loop: seeded, float64, stops for a stated reason."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from vimpc.errors import InputError, SolverError
from vimpc.models._torch_casadi import mlp
from vimpc.models._training import train


def _regression(n=64, seed=0):
    """A least-squares problem ``y = A w*`` with its exact solution."""
    rng = np.random.default_rng(seed)
    A = torch.as_tensor(rng.normal(size=(n, 3)))
    y = A @ torch.tensor([1.5, -2.0, 0.5], dtype=torch.float64) + 0.01 * torch.as_tensor(
        rng.normal(size=n)
    )
    w_star = torch.linalg.lstsq(A, y.unsqueeze(1)).solution.squeeze(1)
    return A, y, w_star


def _mlp_problem(seed=0):
    x = torch.linspace(-2.0, 2.0, 40, dtype=torch.float64).unsqueeze(1)
    y = torch.sin(x)
    net = mlp([1, 8, 1], "tanh", seed=seed)

    def loss(idx=None):
        xi, yi = (x, y) if idx is None else (x[idx], y[idx])
        return torch.mean((net(xi) - yi) ** 2)

    return net, loss


def test_same_seed_bit_identical_other_seed_differs():
    weights = []
    for seed in (3, 3, 4):
        net, loss = _mlp_problem()
        train(loss, net, lr=1e-2, epochs=4, batch_size=8, n_samples=40, seed=seed, progress=False)
        weights.append(torch.cat([p.detach().ravel() for p in net.parameters()]))
    assert torch.equal(weights[0], weights[1])
    assert not torch.allclose(weights[0], weights[2], rtol=0, atol=1e-8)


def test_lbfgs_reaches_least_squares_solution_and_converges():
    A, y, w_star = _regression()
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    record = train(
        lambda: torch.mean((A @ w - y) ** 2),
        {"w": w},
        optimizer="lbfgs",
        lr=1.0,
        epochs=50,
        tol=1e-14,
        progress=False,
    )
    assert torch.allclose(w.detach(), w_star, rtol=0, atol=1e-10)
    assert record.stopped == "converged" and record.epochs < 50
    assert "converged at epoch" in record.message


def test_adamw_fits_regression_and_mlp():
    A, y, w_star = _regression()
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    record = train(lambda: torch.mean((A @ w - y) ** 2), [w], lr=0.05, epochs=600, progress=False)
    assert torch.allclose(w.detach(), w_star, rtol=0, atol=1e-4)
    assert record.stopped == "epochs" and record.epochs == 600 and len(record.loss) == 600
    net, loss = _mlp_problem()
    first = float(loss().detach())
    record = train(loss, net, lr=0.02, epochs=300, schedule="cosine", progress=False)
    assert float(loss().detach()) < 2e-3 < first / 100


def test_early_stopping_on_a_crafted_curve_restores_best_weights():
    A, y, _ = _regression()
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    # best at epoch 3; 2.95 at epoch 5 is not better by more than min_delta = 0.1
    curve = iter([5.0, 4.0, 3.0, 3.5, 2.95, 3.2, 1.0, 1.0])
    snapshots = []

    def validation():
        snapshots.append(w.detach().clone())
        return next(curve)

    record = train(
        lambda: torch.mean((A @ w - y) ** 2),
        [w],
        lr=0.1,
        epochs=100,
        validation=validation,
        patience=3,
        min_delta=0.1,
        progress=False,
    )
    assert record.stopped == "patience" and record.epochs == 6 and len(snapshots) == 6
    assert record.best_epoch == 3 and record.best_validation == 3.0
    assert record.validation == (5.0, 4.0, 3.0, 3.5, 2.95, 3.2)
    assert torch.equal(w.detach(), snapshots[2]) and not torch.equal(w.detach(), snapshots[5])
    assert "restored to epoch 3" in record.message


def test_time_budget_stops_and_is_reported():
    A, y, _ = _regression()
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)

    def slow_loss():
        time.sleep(0.03)
        return torch.mean((A @ w - y) ** 2)

    record = train(slow_loss, [w], lr=0.1, epochs=10_000, time_budget_s=0.1, progress=False)
    # every epoch sleeps 0.03 s, so the fourth ends past 0.1 s however busy the machine: the
    # run stops there at the latest (and earlier where the machine slows the epochs)
    assert record.stopped == "budget" and 1 <= record.epochs <= 4
    assert "time budget of 0.1 s" in record.message and 0.1 <= record.wall_time_s < 5.0


@pytest.mark.parametrize("optimizer", ["adamw", "lbfgs"])
def test_nan_loss_raises_naming_the_epoch(optimizer):
    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    epoch = [1]  # advanced by the validation callable, which runs after every epoch

    def loss():
        return torch.sum(w**2) * (float("nan") if epoch[0] >= 4 else 1.0)

    def validation():
        epoch[0] += 1
        return 0.0

    with pytest.raises(SolverError, match="training loss became nan at epoch 4"):
        train(
            loss, [w], optimizer=optimizer, lr=0.1, epochs=10, validation=validation, progress=False
        )


def test_nan_validation_raises():
    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(SolverError, match="validation loss became inf at epoch 1"):
        train(
            lambda: torch.sum(w**2), [w], epochs=3, validation=lambda: float("inf"), progress=False
        )


def test_step_schedule_changes_the_learning_rate():
    A, y, _ = _regression()
    runs = []
    for schedule in ("none", ("step", 1, 1e-12)):
        w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        record = train(
            lambda w=w: torch.mean((A @ w - y) ** 2),
            [w],
            lr=0.1,
            epochs=6,
            schedule=schedule,
            progress=False,
        )
        runs.append(record.loss)
    # after epoch 1 the step rule leaves lr ~ 1e-13: the loss stops moving
    assert abs(runs[1][5] - runs[1][2]) < 1e-9 < abs(runs[0][5] - runs[0][2])


def test_progress_bar_shows_the_loss(capsys):
    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    train(lambda: torch.sum(w**2), [w], epochs=3, validation=lambda: 1.0, progress=True)
    err = capsys.readouterr().err
    assert "loss=" in err and "val=" in err and "3/3" in err


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(optimizer="sgd"), "optimizer must be one of .* got 'sgd'"),
        (dict(lr=0.0), "lr must be a positive finite number, got 0.0"),
        (dict(lr=float("nan")), "lr must be a positive finite number, got nan"),
        (dict(weight_decay=-1e-3), "weight_decay must be a non-negative finite number"),
        (dict(epochs=0), "epochs must be an integer >= 1, got 0"),
        (dict(epochs=2.5), "epochs must be an integer >= 1, got 2.5"),
        (dict(batch_size=8), "batch_size=8 needs n_samples"),
        (dict(batch_size=65, n_samples=64), "batch_size must be at most n_samples=64, got 65"),
        (dict(batch_size=0, n_samples=64), "batch_size must be an integer >= 1, got 0"),
        (dict(optimizer="lbfgs", batch_size=8, n_samples=64), "'lbfgs' trains full batch"),
        (dict(optimizer="lbfgs", weight_decay=0.1), "'lbfgs' has no weight_decay, got 0.1"),
        (dict(schedule="linear"), "schedule must be .* got 'linear'"),
        (dict(schedule=("step", 0, 0.5)), "schedule's step every must be an integer >= 1"),
        (dict(patience=3), "patience=3 needs a validation callable"),
        (dict(validation=1.0), "validation must be callable or None, got 1.0"),
        (dict(min_delta=-1.0), "min_delta must be a non-negative"),
        (dict(time_budget_s=0), "time_budget_s must be a positive finite number, got 0"),
        (dict(seed=-1), "seed must be an integer >= 0, got -1"),
        (dict(progress="yes"), "progress must be True or False, got 'yes'"),
        (dict(parameters=[]), "parameters is empty"),
        (dict(parameters=mlp([2, 3, 1]).float()), "parameter 0.weight is torch.float32"),
        (
            dict(parameters={"w": torch.zeros(2, dtype=torch.float32, requires_grad=True)}),
            "parameter w is torch.float32",
        ),
        (
            dict(parameters=[torch.zeros(2, dtype=torch.float64)]),
            "parameter parameters\\[0\\] must be a tensor with requires_grad=True",
        ),
        (dict(loss_fn="mse"), "loss_fn must be callable, got 'mse'"),
    ],
)
def test_bad_settings_refused_before_any_step(kwargs, match):
    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    calls = []

    def loss(idx=None):
        calls.append(idx)
        return torch.sum(w**2)

    args = {"loss_fn": loss, "parameters": [w], "progress": False} | kwargs
    with pytest.raises(InputError, match=match):
        train(args.pop("loss_fn"), args.pop("parameters"), **args)
    assert calls == [] and torch.equal(w.detach(), torch.ones(2, dtype=torch.float64))


def test_loss_must_be_a_scalar_tensor():
    w = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(InputError, match="loss_fn must return a scalar tensor"):
        train(lambda: w**2, [w], epochs=2, progress=False)


# -- checkpoints -----------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _noisy_problem(stop_at=None):
    """The MLP problem with a loss that also draws from its own generator (as a symmetry
    term drawing fresh points does), validation and a cosine schedule; ``stop_at``: raise
    at that epoch's first loss, as a stopped process would."""
    net, base = _mlp_problem()
    draws = torch.Generator().manual_seed(7)
    calls = {"n": 0}

    def loss(idx):
        calls["n"] += 1
        if stop_at is not None and calls["n"] > (stop_at - 1) * 5:  # 5 minibatches an epoch
            raise _Stop
        return base(idx) + 1e-3 * torch.rand(1, generator=draws, dtype=torch.float64)[0]

    settings = dict(lr=1e-2, epochs=30, batch_size=8, n_samples=40, schedule="cosine",
                    validation=lambda: base(), seed=2, progress=False, generators=(draws,))  # fmt: skip
    return net, loss, settings


def _weights(net):
    return torch.cat([p.detach().ravel() for p in net.parameters()])


def test_a_stopped_training_resumes_to_the_uninterrupted_result(tmp_path):
    net, loss, settings = _noisy_problem()
    whole = train(loss, net, **settings)
    path = tmp_path / "fit.pt"
    net2, loss2, settings2 = _noisy_problem(stop_at=14)
    with pytest.raises(_Stop):
        train(loss2, net2, checkpoint=path, checkpoint_every=5, **settings2)
    assert path.exists() and torch.load(path, weights_only=True)["losses"].__len__() == 10
    net3, loss3, settings3 = _noisy_problem()  # a fresh process, resumed at epoch 11
    resumed = train(loss3, net3, checkpoint=path, checkpoint_every=5, **settings3)
    assert torch.equal(_weights(net3), _weights(net))
    assert resumed.loss == whole.loss and resumed.validation == whole.validation
    assert resumed.best_epoch == whole.best_epoch and resumed.epochs == 30
    # a finished checkpoint gives the finished result without a step
    net4, loss4, settings4 = _noisy_problem(stop_at=1)
    again = train(loss4, net4, checkpoint=path, **settings4)
    assert torch.equal(_weights(net4), _weights(net)) and again.loss == whole.loss


def test_a_checkpoint_of_another_training_is_refused_and_kept(tmp_path):
    path = tmp_path / "fit.pt"
    net, loss, settings = _noisy_problem()
    train(loss, net, checkpoint=path, **{**settings, "epochs": 3})
    before = path.read_bytes()
    net, loss, settings = _noisy_problem()
    with pytest.raises(InputError, match=r"fit\.pt.*another training \(epochs: 3 there, 30 here"):
        train(loss, net, checkpoint=path, **settings)
    other, loss_other, settings = _noisy_problem()
    with torch.no_grad():
        next(other.parameters()).add_(1.0)
    with pytest.raises(InputError, match="other initial parameters"):
        train(loss_other, other, checkpoint=path, **{**settings, "epochs": 3})
    assert path.read_bytes() == before
    path.write_text("not a checkpoint")
    with pytest.raises(InputError, match="cannot be read"):
        train(loss, net, checkpoint=path, **settings)


def test_a_checkpoints_block_numbers_the_calls_of_a_fit(tmp_path):
    from vimpc.models._training import checkpoints

    with checkpoints(tmp_path, "cart-seed0"):
        for _ in range(2):
            net, loss, settings = _noisy_problem()
            train(loss, net, **{**settings, "epochs": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cart-seed0-0.pt", "cart-seed0-1.pt"]
    with pytest.raises(InputError, match="key must be"):
        with checkpoints(tmp_path, "a/b"):
            pass


def test_a_training_stopped_by_its_budget_goes_on_with_more_time(tmp_path):
    path = tmp_path / "fit.pt"
    net, loss, settings = _noisy_problem()
    whole = train(loss, net, **settings)
    net2, loss2, settings2 = _noisy_problem()
    slow = {"n": 0}

    def slowed(idx):  # about 10 ms an epoch: a budget of 0.05 s stops it early
        slow["n"] += 1
        if slow["n"] % 5 == 0:
            time.sleep(0.01)
        return loss2(idx)

    first = train(slowed, net2, checkpoint=path, time_budget_s=0.05, **settings2)
    assert first.stopped == "budget" and first.epochs < 30
    net3, loss3, settings3 = _noisy_problem()
    rest = train(loss3, net3, checkpoint=path, **settings3)  # no budget: on to the end
    assert rest.epochs == 30 and rest.loss == whole.loss
    assert torch.equal(_weights(net3), _weights(net))
