"""The constrained-NN paper's baselines in angular coordinates (Finzi, Wang & Wilson 2020,
sec. 6): a Neural ODE, a Hamiltonian network (HNN) and a Deep Lagrangian network (DeLaN) for
a chain of point masses (``NPendulum``), trained as the CLNN/CHNN families are (5-step RK4
rollouts at the data's dt, L1 loss, AdamW with a cosine schedule), and evaluated in the
chain's Cartesian coordinates through the known kinematics.

The angular state of link ``i`` is its angle from the downward vertical ``theta_i`` and its
rate ``omega_i``; every network sees the angles as ``(cos theta, sin theta)`` (so the models
are periodic in them, as the authors' ``mod_angles``), and

- ``node``: ``(theta', omega') = f(cos theta, sin theta, omega)``, an MLP;
- ``hnn``: ``H(theta, p) = 1/2 p^T M^-1(theta) p + V(theta)`` with ``M^-1 = L L^T`` (``L``
  lower triangular, softplus diagonal, from an MLP of the angles) and ``V`` an MLP: Hamilton's
  equations on ``(theta, p)``, ``p = M(theta) omega`` at the start and ``omega = M^-1 p``
  for the loss (the authors' ``HNN`` with a mass network);
- ``delan``: ``L(theta, omega) = 1/2 omega^T M(theta) omega - V(theta)``, ``M = L L^T + eps
  I`` the same way: the Euler-Lagrange equations
  ``M omega' = dL/dtheta - (d/dtheta (M omega)) omega`` (Lutter et al. 2019).

Only torch and numpy: the baselines are references for the table, not vimpc families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("node", "hnn", "delan")
# DeLaN's mass matrix floor (M = L L^T + EPS I keeps it invertible at initialisation)
EPS = 1e-3


def to_angles(system, X: np.ndarray) -> np.ndarray:
    """Cartesian chain states ``(..., T, 4n)`` -> angular ``(..., T, 2n)`` (angles unwrapped
    along the time axis, so a rollout's angles are continuous)."""
    n = system.nq // 2
    q, v = X[..., : 2 * n], X[..., 2 * n :]
    pos = q.reshape(*q.shape[:-1], n, 2)
    vel = v.reshape(*v.shape[:-1], n, 2)
    prev = np.concatenate([np.zeros_like(pos[..., :1, :]), pos[..., :-1, :]], axis=-2)
    prev_v = np.concatenate([np.zeros_like(vel[..., :1, :]), vel[..., :-1, :]], axis=-2)
    d, dd = pos - prev, vel - prev_v
    theta = np.unwrap(np.arctan2(d[..., 0], -d[..., 1]), axis=-2)
    omega = (d[..., 0] * dd[..., 1] - d[..., 1] * dd[..., 0]) / np.sum(d**2, axis=-1)
    return np.concatenate([theta, omega], axis=-1)


def to_cartesian(system, Y: np.ndarray) -> np.ndarray:
    """Angular ``(..., 2n)`` -> Cartesian ``(..., 4n)`` (``NPendulum.from_angles``, batched)."""
    n = system.nq // 2
    lengths = np.array([system.params[f"l{i + 1}"] for i in range(n)])
    theta, omega = Y[..., :n], Y[..., n:]
    dx, dy = lengths * np.sin(theta), -lengths * np.cos(theta)
    vx, vy = lengths * omega * np.cos(theta), lengths * omega * np.sin(theta)
    q = np.stack([np.cumsum(dx, -1), np.cumsum(dy, -1)], -1).reshape(*Y.shape[:-1], 2 * n)
    v = np.stack([np.cumsum(vx, -1), np.cumsum(vy, -1)], -1).reshape(*Y.shape[:-1], 2 * n)
    return np.concatenate([q, v], axis=-1)


class _Baseline:
    """An angular-coordinate model: ``field(y)`` of the state it integrates, and maps
    between that state and ``(theta, omega)``."""

    def __init__(self, kind: str, n: int, hidden: list[int], seed: int,
                 init: str = "uniform") -> None:  # fmt: skip
        import torch

        from vimpc.models._torch_casadi import mlp

        self.kind, self.n = kind, n
        self.tril = torch.tril_indices(n, n)
        if kind == "node":
            self.nets = {"f": mlp([3 * n, *hidden, 2 * n], "tanh", seed=seed, init=init)}
        else:
            self.nets = {
                "V": mlp([2 * n, *hidden, 1], "tanh", seed=seed, init=init),
                "L": mlp([2 * n, *hidden, len(self.tril[0])], "tanh", seed=seed + 1, init=init),
            }

    def parameters(self) -> dict:
        return {f"{k}.{name}": p for k, net in self.nets.items()
                for name, p in net.named_parameters()}  # fmt: skip

    def _features(self, theta):
        import torch

        return torch.cat([torch.cos(theta), torch.sin(theta)], -1)

    def _factor(self, theta):
        """Lower-triangular ``L(theta)`` with a softplus (positive) diagonal."""
        import torch

        raw = self.nets["L"](self._features(theta))
        L = torch.zeros(theta.shape[0], self.n, self.n, dtype=theta.dtype)
        L[:, self.tril[0], self.tril[1]] = raw
        diag = torch.nn.functional.softplus(torch.diagonal(L, dim1=1, dim2=2)) + 1e-6
        return torch.tril(L, -1) + torch.diag_embed(diag)

    def _potential(self, theta):
        return self.nets["V"](self._features(theta)).sum()

    def field(self, y):
        import torch

        n = self.n
        theta, w = y[:, :n], y[:, n:]
        if self.kind == "node":
            return self.nets["f"](torch.cat([self._features(theta), w], -1))
        if not theta.requires_grad:
            theta = theta.detach().requires_grad_(True)
        L = self._factor(theta)
        if self.kind == "hnn":  # w = p; H = 1/2 p^T L L^T p + V
            Ltp = torch.einsum("bji,bj->bi", L, w)
            H = 0.5 * (Ltp**2).sum() + self._potential(theta)
            dH_dtheta = torch.autograd.grad(H, theta, create_graph=True)[0]
            dtheta = torch.einsum("bij,bj->bi", L, Ltp)  # dH/dp = M^-1 p
            return torch.cat([dtheta, -dH_dtheta], 1)
        # delan: M = L L^T + eps I, M w' = dT/dtheta - dV/dtheta - (dM/dt) w
        M = L @ L.transpose(1, 2) + EPS * torch.eye(n, dtype=y.dtype)
        Mw = torch.einsum("bij,bj->bi", M, w)
        T = 0.5 * (w * Mw).sum()
        grad_T = torch.autograd.grad(T, theta, create_graph=True)[0]
        grad_V = torch.autograd.grad(self._potential(theta), theta, create_graph=True)[0]
        # (dM/dt) w = (d(M w)/dtheta) w, a Jacobian-vector product written as two
        # vector-Jacobian products (the second one linear in the dummy cotangent u)
        u = torch.zeros_like(Mw, requires_grad=True)
        JTu = torch.autograd.grad(Mw, theta, grad_outputs=u, create_graph=True)[0]
        Mdot_w = torch.autograd.grad(JTu, u, grad_outputs=w, create_graph=True)[0]
        acc = torch.linalg.solve(M, grad_T - grad_V - Mdot_w)
        return torch.cat([w, acc], 1)

    def to_state(self, y):
        """``(theta, omega)`` -> the integrated state (HNN: ``p = M omega``)."""
        import torch

        if self.kind != "hnn":
            return y
        n = self.n
        L = self._factor(y[:, :n])
        p = torch.cholesky_solve(y[:, n:, None], L).squeeze(-1)  # (L L^T)^-1 omega
        return torch.cat([y[:, :n], p], 1)

    def from_state(self, s):
        """The integrated state -> ``(theta, omega)``."""
        import torch

        if self.kind != "hnn":
            return s
        n = self.n
        L = self._factor(s[:, :n])
        omega = torch.einsum("bij,bj->bi", L, torch.einsum("bji,bj->bi", L, s[:, n:]))
        return torch.cat([s[:, :n], omega], 1)


def _rk4(field, y, h):
    """One RK4 step of the unforced ``field`` (the families' training step, no input)."""
    from vimpc.models.families.clnn import _rk4 as forced_rk4

    return forced_rk4(lambda z, _: field(z), y, None, h)


@dataclass
class Fitted:
    """A trained baseline with its training record and wall time."""

    model: _Baseline
    record: object
    train_s: float

    def rollout(
        self, y0: np.ndarray, steps: int, h: float, substeps: int = 1, batch: int = 50
    ) -> np.ndarray:
        """``(trajectories, steps + 1, 2n)`` angular predictions every ``h`` by RK4, in
        ``substeps`` steps of ``h / substeps`` each (float64)."""
        import torch

        out = []
        for i in range(0, len(y0), batch):
            s = self.model.to_state(torch.from_numpy(y0[i : i + batch]))
            traj = [self.model.from_state(s).detach().numpy()]
            for _ in range(steps):
                for _ in range(substeps):
                    s = _rk4(self.model.field, s, h / substeps).detach()
                traj.append(self.model.from_state(s).detach().numpy())
            out.append(np.stack(traj, 1))
        return np.concatenate(out, 0)


def fit(
    kind: str,
    windows: np.ndarray,
    h: float,
    *,
    hidden: list[int],
    epochs: int,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    batch: int = 200,
    seed: int = 0,
    init: str = "uniform",
    progress: bool = False,
) -> Fitted:
    """Train a baseline on angular windows ``(N, chunk + 1, 2n)``: the mean absolute error of
    ``chunk`` RK4 steps from each window's first state, AdamW with a cosine schedule (the
    families' training)."""
    import torch

    from vimpc.models._training import train

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n = windows.shape[2] // 2
    model = _Baseline(kind, n, list(hidden), seed, init)
    W = torch.from_numpy(np.ascontiguousarray(windows, dtype=np.float64))
    chunk = W.shape[1] - 1

    def loss(idx=None):
        x = W if idx is None else W[idx]
        s = model.to_state(x[:, 0])
        preds = []
        for _ in range(chunk):
            s = _rk4(model.field, s, h)
            preds.append(model.from_state(s))
        return torch.mean(torch.abs(torch.stack(preds, 1) - x[:, 1:]))

    use_batch = batch if 0 < batch < len(W) else None
    record = train(
        loss, model.parameters(), optimizer="adamw", lr=lr, weight_decay=weight_decay,
        epochs=epochs, batch_size=use_batch, n_samples=len(W) if use_batch else None,
        schedule="cosine", seed=seed, progress=progress,
    )  # fmt: skip
    # the training's own wall time, summed over the runs that resumed it from a checkpoint
    return Fitted(model, record, record.wall_time_s)
