"""Gaussian-process regression for model families: hyperparameters by maximising the
marginal likelihood (gpytorch, imported only here and only when fitting), the posterior
in numpy, and the posterior mean and variance as CasADi expressions.

One output per GP, an ARD squared-exponential kernel

    k(z, z') = sf2 * exp(-1/2 * sum_i ((z_i - z'_i) / l_i)^2),

Gaussian observation noise ``sn2`` and a zero mean (a family puts its prior model in
front). The posterior is exact (every training sample a support point) or, with fewer
support points ``Z_m`` chosen among the samples, the deterministic-training-conditional
(DTC) approximation with mean ``k(z, Z_m) (sn2 K_mm + K_mn K_nm)^-1 K_mn y``, whose cost in
a controller grows with the support points, not the samples.

:func:`uniform_error_bound` gives the uniform error bound of Lederer et al. (2019, Theorem
3.1) on a box of inputs: ``|f(z) - mean(z)| <= sqrt(beta) std(z) + gamma`` for every ``z``
in the box at once, with probability ``1 - delta``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np

from vimpc._probability import Probability
from vimpc.errors import InputError, SolverError


@dataclass(frozen=True)
class Hyperparameters:
    """One GP's kernel and noise: ``lengthscales (d,)``, ``signal_var``, ``noise_var``, and
    the negative log marginal likelihood per sample they reached (``nll``)."""

    lengthscales: np.ndarray
    signal_var: float
    noise_var: float
    nll: float


def _sq_dist(a: np.ndarray, b: np.ndarray, lengthscales: np.ndarray) -> np.ndarray:
    d = (a[:, None, :] - b[None, :, :]) / lengthscales
    return np.einsum("ijk,ijk->ij", d, d)


def kernel(a: np.ndarray, b: np.ndarray, hp: Hyperparameters) -> np.ndarray:
    """``k(a_i, b_j)`` for rows of ``a (n, d)`` and ``b (m, d)``."""
    return hp.signal_var * np.exp(-0.5 * _sq_dist(a, b, hp.lengthscales))


@dataclass(frozen=True)
class Posterior:
    """A GP's posterior as the support points need it: ``mean(z) = k(z, Z) alpha`` and the
    latent function's variance (the noise is ``hp.noise_var``)

        var(z) = sf2 - |P k(Z, z)|^2 + |R k(Z, z)|^2 = sf2 - k(z, Z) A k(Z, z),

    with ``A = P^T P - R^T R``. The variance is computed from the two factors, never from
    ``A``: with long length scales and little noise ``P`` is the inverse of an
    ill-conditioned Cholesky factor, and ``k^T A k`` formed with ``A`` loses the variance
    to rounding (errors near ``cond(K) eps sf2``, so a variance of ~0 came out as 1e-6 or
    as 0 depending on the BLAS's summation order)."""

    hp: Hyperparameters
    support: np.ndarray  # (m, d)
    alpha: np.ndarray  # (m,)
    P: np.ndarray  # (m, m)
    R: np.ndarray  # (r, m), r = 0 for the exact posterior

    @classmethod
    def exact(cls, Z: np.ndarray, y: np.ndarray, hp: Hyperparameters) -> Posterior:
        """The exact posterior on the samples ``Z (n, d)``, ``y (n,)``: with
        ``K + sn2 I = L L^T``, ``P = L^-1`` and no ``R``."""
        K = kernel(Z, Z, hp) + hp.noise_var * np.eye(len(Z))
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            raise SolverError(
                f"the exact GP posterior over {len(Z)} samples cannot be factored: with the "
                f"fitted noise variance {hp.noise_var:.3g} against the signal variance "
                f"{hp.signal_var:.3g} its kernel matrix is not positive definite in floating "
                "point (samples closer than its length scales resolve); fewer samples "
                "(model.samples) or support points (model.support_points, the DTC "
                "approximation) factor"
            ) from None
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
        return cls(hp, Z.copy(), alpha, np.linalg.solve(L, np.eye(len(Z))), np.zeros((0, len(Z))))

    @classmethod
    def dtc(cls, Z: np.ndarray, y: np.ndarray, hp: Hyperparameters, support: np.ndarray):
        """The DTC approximation with the support points ``support (m, d)``: mean
        ``k_zm (sn2 K_mm + K_mn K_nm)^-1 K_mn y``, variance ``sf2 - k_zm (K_mm^-1 - sn2 S)
        k_mz`` with ``S = (sn2 K_mm + K_mn K_nm)^-1``, computed through Cholesky factors
        (``K_mm = L L^T``, ``B = sn2 I + V V^T = L_B L_B^T`` with ``V = L^-1 K_mn``, so
        ``S = W^T W`` with ``W = L_B^-1 L^-1``; ``P = L^-1``, ``R = sqrt(sn2) W``), since
        ``K_mm`` of long length scales is close to singular."""
        m = len(support)
        Kmm = kernel(support, support, hp) + 1e-10 * hp.signal_var * np.eye(m)
        L = np.linalg.cholesky(Kmm)
        V = np.linalg.solve(L, kernel(support, Z, hp))  # (m, n)
        LB = np.linalg.cholesky(hp.noise_var * np.eye(m) + V @ V.T)
        Linv = np.linalg.solve(L, np.eye(m))
        W = np.linalg.solve(LB, Linv)
        alpha = W.T @ (W @ (kernel(support, Z, hp) @ y))
        return cls(hp, support.copy(), alpha, Linv, math.sqrt(hp.noise_var) * W)

    @property
    def A(self) -> np.ndarray:
        """``P^T P - R^T R`` (for its norm; never for the variance itself)."""
        return self.P.T @ self.P - self.R.T @ self.R

    # -- numpy ----------------------------------------------------------------------------------
    def mean(self, z: np.ndarray) -> np.ndarray:
        return kernel(np.atleast_2d(z), self.support, self.hp) @ self.alpha

    def var(self, z: np.ndarray) -> np.ndarray:
        k = kernel(np.atleast_2d(z), self.support, self.hp)
        explained = np.sum((k @ self.P.T) ** 2, axis=1) - np.sum((k @ self.R.T) ** 2, axis=1)
        return np.maximum(self.hp.signal_var - explained, 0.0)

    # -- CasADi -------------------------------------------------------------------------------
    def _k(self, z):
        scaled = ca.DM(self.support / self.hp.lengthscales)  # (m, d)
        zs = z / ca.DM(self.hp.lengthscales)
        diff = scaled - ca.repmat(zs.T, scaled.shape[0], 1)
        return self.hp.signal_var * ca.exp(-0.5 * ca.sum2(diff * diff))  # (m, 1)

    def casadi_mean(self, z):
        """The posterior mean at the symbolic ``z (d, 1)`` (SX or MX)."""
        return ca.dot(self._k(z), ca.DM(self.alpha))

    def mean_parameters(self) -> np.ndarray:
        """What the mean needs, in one vector: the support points over the length scales
        (column by column), the length scales, the signal variance and ``alpha``; the order of
        :meth:`casadi_mean_of`."""
        hp = self.hp
        scaled = (self.support / hp.lengthscales).ravel(order="F")
        return np.concatenate([scaled, hp.lengthscales, [hp.signal_var], self.alpha])

    def casadi_mean_of(self, z, theta):
        """The posterior mean at the symbolic ``z (d, 1)`` with its numbers read from the
        symbolic ``theta`` (:meth:`mean_parameters`; the same operations as
        :meth:`casadi_mean`, so the same values to the last bit). Only the sizes of this
        posterior are used: any posterior of the same sizes can be put in ``theta``."""
        m, d = self.support.shape
        scaled = ca.reshape(theta[: m * d], m, d)
        lengthscales = theta[m * d : m * d + d]
        signal_var, alpha = theta[m * d + d], theta[m * d + d + 1 :]
        diff = scaled - ca.repmat((z / lengthscales).T, m, 1)
        return ca.dot(signal_var * ca.exp(-0.5 * ca.sum2(diff * diff)), alpha)

    def casadi_var(self, z):
        """The latent variance at the symbolic ``z`` (kept >= 0)."""
        k = self._k(z)
        a, b = ca.mtimes(ca.DM(self.P), k), ca.mtimes(ca.DM(self.R), k)
        return ca.fmax(self.hp.signal_var - (ca.dot(a, a) - ca.dot(b, b)), 0.0)


def support_points(Z: np.ndarray, m: int, lengthscales: np.ndarray, seed: int) -> np.ndarray:
    """``m`` rows of ``Z`` spread over the data: greedy farthest points in the kernel's
    metric, from a seeded first point (deterministic)."""
    if m >= len(Z):
        return Z.copy()
    Zs = Z / lengthscales
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(len(Z)))]
    dist = np.sum((Zs - Zs[chosen[0]]) ** 2, axis=1)
    for _ in range(m - 1):
        i = int(np.argmax(dist))
        chosen.append(i)
        dist = np.minimum(dist, np.sum((Zs - Zs[i]) ** 2, axis=1))
    return Z[np.sort(chosen)]


def draw_samples(n: int, samples: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """The sorted indices of ``samples`` of ``n`` training pairs drawn without replacement
    from ``default_rng(seed)`` (all of them for ``samples = 0`` or more than ``n``), and
    the fit notes of a ``model.samples`` the data cannot meet."""
    if 0 < samples < n:
        rng = np.random.default_rng(seed)
        return np.sort(rng.choice(n, samples, replace=False)), []
    notes = []
    if samples > n:
        notes.append(
            f"model.samples = {samples} exceeds the {n} training transitions: all {n} used"
        )
    return np.arange(n), notes


def varying_columns(Z: np.ndarray) -> np.ndarray:
    """The indices of the columns of ``Z (n, d)`` that vary in the data (a constant input,
    such as an unexcited torque, tells a GP nothing and only makes its kernel singular).

    Raises:
        InputError: every column is constant.
    """
    keep = np.flatnonzero(np.ptp(Z, axis=0) > 0)
    if keep.size == 0:
        raise InputError("every GP input is constant in the training data")
    return keep


def fit_posteriors(
    Z: np.ndarray,
    Y: np.ndarray,
    *,
    restarts: int,
    iterations: int,
    seed: int,
    support: int,
) -> tuple[list[Posterior], list[str]]:
    """One GP per column of ``Y (n, k)`` on the inputs ``Z (n, d)``: hyperparameters by
    :func:`fit_hyperparameters` (column ``j`` from seed ``seed + 1000 j``), the exact
    posterior, or with ``0 < support < n`` its DTC approximation on ``support`` points of
    :func:`support_points` (seed ``seed + j``). Returns the posteriors and the fit note of
    a ``model.support_points`` the data cannot meet."""
    n = len(Z)
    notes = []
    if support >= n:
        notes.append(
            f"model.support_points = {support} is not fewer than the {n} training "
            f"pairs: the exported posterior is the exact GP over all {n} "
            "(model.support_points = 0 says so)"
        )
    posteriors = []
    for j in range(Y.shape[1]):
        hp = fit_hyperparameters(
            Z, Y[:, j], restarts=restarts, iterations=iterations, seed=seed + 1000 * j
        )
        if 0 < support < n:
            chosen = support_points(Z, support, hp.lengthscales, seed + j)
            posteriors.append(Posterior.dtc(Z, Y[:, j], hp, chosen))
        else:
            posteriors.append(Posterior.exact(Z, Y[:, j], hp))
    return posteriors, notes


def fitted_state(
    Z: np.ndarray, Y: np.ndarray, *, restarts: int, iterations: int, seed: int, support: int
) -> tuple[dict[str, Any], list[str]]:
    """:func:`fit_posteriors` on ``Z, Y`` and what a GP family keeps of the fit: its
    ``posteriors_``, ``n_samples_``, the inputs' ``domain_`` (per-column min and max) and
    ``median_std_`` (each posterior's median latent standard deviation on ``Z``), as
    attributes by name; and the fit notes."""
    posteriors, notes = fit_posteriors(
        Z, Y, restarts=restarts, iterations=iterations, seed=seed, support=support
    )
    state = {
        "posteriors_": posteriors,
        "n_samples_": len(Z),
        "domain_": (Z.min(axis=0), Z.max(axis=0)),
        "median_std_": [float(np.median(np.sqrt(post.var(Z)))) for post in posteriors],
    }
    return state, notes


# With more samples than this, the starts are screened on this many of them and only the
# best is optimised on all: the exact marginal likelihood's gradient costs O(n^3) (80 ms
# per evaluation at n = 512 on one core, about 100 evaluations per start), and on
# the screening subset the starts settle in the same basins.
SCREEN_SAMPLES = 256
# L-BFGS stops when the NLL per sample (order 1) or a raw parameter changes by less than
# this (the optimum is then settled to ~1e-9; the old 1e-12 ran ~40 % more evaluations)
_TOLERANCE_CHANGE = 1e-10


def fit_hyperparameters(
    Z: np.ndarray, y: np.ndarray, *, restarts: int, iterations: int, seed: int
) -> Hyperparameters:
    """Maximise the exact marginal likelihood of one GP (gpytorch, L-BFGS, float64) from
    ``restarts`` initial guesses (the first from the data's spreads, the others perturbed
    log-normally); the best finite optimum wins. With more than :data:`SCREEN_SAMPLES`
    samples and several starts, the starts run on a random subset of that size and the
    best of them is then optimised on every sample.

    Raises:
        InputError: fewer than 2 samples, or non-finite data.
    """
    import torch

    Z = np.asarray(Z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(Z) < 2:
        raise InputError(f"a GP needs at least 2 training samples, got {len(Z)}")
    if not (np.all(np.isfinite(Z)) and np.all(np.isfinite(y))):
        raise InputError("the GP's training data contain NaN or inf")
    d = Z.shape[1]
    spread = Z.std(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    y_var = float(np.var(y)) if np.var(y) > 0 else 1e-12
    rng = np.random.default_rng(seed)
    starts = []
    for r in range(restarts):
        factor = np.ones(d + 2) if r == 0 else np.exp(rng.normal(0.0, 0.7, d + 2))
        starts.append(
            Hyperparameters(
                lengthscales=spread * factor[:d],
                signal_var=y_var * factor[d],
                noise_var=max(0.1 * y_var * factor[d + 1], 1e-10),
                nll=np.inf,
            )
        )
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    # one thread: at these sizes (n <= a few thousand) a second thread gains little and,
    # on a machine whose cores are busy, oversubscription made each step 3-4x slower
    torch.set_num_threads(1)
    try:
        if restarts > 1 and len(Z) > SCREEN_SAMPLES:
            subset = rng.choice(len(Z), SCREEN_SAMPLES, replace=False)
            screened = _optimise(Z[subset], y[subset], starts, iterations)
            starts = [screened] if screened is not None else starts
        best = _optimise(Z, y, starts, iterations)
    finally:
        torch.set_num_threads(threads)
    if best is None:
        raise InputError(
            f"the GP's marginal likelihood could not be optimised from any of {restarts} starts "
            "(every Cholesky factorisation failed); check the data for duplicates or scale"
        )
    return best


def _optimise(
    Z: np.ndarray, y: np.ndarray, starts: list[Hyperparameters], iterations: int
) -> Hyperparameters | None:
    """The best finite optimum of L-BFGS runs from ``starts``; None when every run failed."""
    import gpytorch
    import torch

    d = Z.shape[1]
    Zt, yt = torch.as_tensor(Z), torch.as_tensor(y)

    class _GP(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(Zt, yt, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=d)
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    best: Hyperparameters | None = None
    with (
        gpytorch.settings.fast_computations(False, False, False),
        gpytorch.settings.max_cholesky_size(10**7),
    ):
        for start in starts:
            likelihood = gpytorch.likelihoods.GaussianLikelihood(
                noise_constraint=gpytorch.constraints.GreaterThan(1e-12)
            ).double()
            model = _GP(likelihood).double()
            model.covar_module.base_kernel.lengthscale = torch.as_tensor(start.lengthscales)
            model.covar_module.outputscale = torch.as_tensor(start.signal_var)
            likelihood.noise = torch.as_tensor(start.noise_var)
            model.train()
            likelihood.train()
            mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
            optimiser = torch.optim.LBFGS(
                model.parameters(),
                lr=1.0,
                max_iter=iterations,
                tolerance_grad=1e-9,
                tolerance_change=_TOLERANCE_CHANGE,
                line_search_fn="strong_wolfe",
            )

            kept: dict = {}  # the best finite point this start reached

            def closure(optimiser=optimiser, model=model, mll=mll, kept=kept):
                optimiser.zero_grad()
                loss = -mll(model(Zt), yt)
                value = float(loss.detach())
                if np.isfinite(value) and value < kept.get("loss", np.inf):
                    kept["loss"] = value
                    kept["state"] = copy.deepcopy(model.state_dict())
                loss.backward()
                return loss

            try:
                optimiser.step(closure)
            except (RuntimeError, ValueError):
                # a line search that stepped where the kernel matrix is not positive
                # definite (or NaN): go on from the best point reached before it
                if "state" not in kept:
                    continue
                model.load_state_dict(kept["state"])
            try:
                with torch.no_grad():
                    nll = float(-mll(model(Zt), yt))
            except (RuntimeError, ValueError):
                continue
            if not np.isfinite(nll) or (best is not None and nll >= best.nll):
                continue
            best = Hyperparameters(
                lengthscales=model.covar_module.base_kernel.lengthscale.detach()
                .numpy()
                .ravel()
                .copy(),
                signal_var=float(model.covar_module.outputscale.detach()),
                noise_var=float(likelihood.noise.detach()),
                nll=nll,
            )
    return best


# max over t of |t (t^2 - 3)| exp(-t^2 / 2) = 1.38012 (at t = 0.74196), rounded up: the
# largest slope of the SE kernel's second derivative along its own axis
_SLOPE_D2 = 1.3802


@dataclass(frozen=True)
class UniformErrorBound:
    """Lederer et al. (2019), Theorem 3.1, for one GP on the box ``[low, high]``: with
    probability at least ``1 - delta``, ``|f(z) - mean(z)| <= sqrt(beta) std(z) + gamma``
    for all ``z`` in the box at once, where ``f`` is a sample of the GP prior the
    hyperparameters describe. ``tau`` is the grid spacing of the covering,
    ``lipschitz_f`` the sample's Lipschitz constant (Theorem 3.2, with probability
    ``1 - delta_lipschitz`` of the split), ``lipschitz_mean`` the posterior mean's."""

    beta: float
    gamma: float
    tau: float
    lipschitz_f: float
    lipschitz_mean: float
    delta: float
    low: np.ndarray
    high: np.ndarray

    def value(self, std: np.ndarray) -> np.ndarray:
        return math.sqrt(self.beta) * np.asarray(std) + self.gamma


def _log_covering(widths: np.ndarray, tau: float) -> float:
    """log of the number of balls of radius ``tau`` that cover the box of side lengths
    ``widths`` (a grid of cubes of side ``2 tau / sqrt(d)``, each inside one ball)."""
    d = len(widths)
    cells = np.maximum(np.ceil(widths * math.sqrt(d) / (2.0 * tau)), 1.0)
    return float(np.sum(np.log(cells)))


def uniform_error_bound(
    post: Posterior, low: np.ndarray, high: np.ndarray, delta: float, *, std_ref: float
) -> UniformErrorBound:
    """The uniform error bound of one GP on the box ``[low, high]`` (Lederer et al. 2019).

    The ``delta`` is split in halves: one for the covering's union bound
    (``beta = 2 log(M(tau) / (delta / 2))``), one for the sample's Lipschitz constant
    ``L_f`` (their Theorem 3.2 for the squared-exponential kernel). With ``L_k`` the
    kernel's Lipschitz constant, ``N`` the support points and the posterior
    ``mean = k alpha``, ``var = sf2 - k^T A k``:

    - ``L_mean = L_k sqrt(N) |alpha|``,
    - ``omega(tau) = sqrt(2 tau L_k (1 + N |A|_2 sf2))``, the modulus of continuity of the
      posterior standard deviation,
    - ``gamma(tau) = (L_mean + L_f) tau + sqrt(beta(tau)) omega(tau)``.

    ``tau`` minimises ``sqrt(beta) std_ref + gamma`` over a log grid (``std_ref``: a
    typical posterior standard deviation, such as the median over the data).

    The theorem assumes the hyperparameters are the true ones and the function a sample
    of the GP; its coverage on real data is a measurement, not a guarantee.

    Raises:
        InputError: ``delta`` outside (0, 1); an empty or inverted box; a non-finite
            Lipschitz constant.
    """
    Probability(delta, "delta")
    low = np.asarray(low, dtype=np.float64).reshape(-1)
    high = np.asarray(high, dtype=np.float64).reshape(-1)
    hp = post.hp
    d = len(hp.lengthscales)
    if low.shape != (d,) or high.shape != (d,) or not np.all(high >= low):
        raise InputError(
            f"the bound's domain must be a box of {d} inputs with high >= low, got low = "
            f"{low.tolist()} and high = {high.tolist()}"
        )
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise InputError("the bound's domain must be finite")
    ell, sf2 = np.asarray(hp.lengthscales, dtype=np.float64), float(hp.signal_var)
    widths = high - low
    r = float(np.linalg.norm(widths))  # the box's diameter
    # |d k(z, z') / dz| <= sf2 exp(-1/2) / min(l)
    lip_k = sf2 * math.exp(-0.5) / float(ell.min())
    # Theorem 3.2: sqrt(k^{di}(z, z)) = sqrt(sf2) / l_i, and the Lipschitz constant of
    # k^{di}(z, z') = d^2 k / dz_i dz'_i in the pair (z, z') (sqrt 2 times its slope in
    # z - z', which is at most sf2 / l_i^2 times the norm of (1.3802 / l_i, e^-1/2 / l_j))
    delta_lip = 0.5 * delta
    root = math.sqrt(sf2) / ell
    slopes = np.array(
        [
            math.sqrt(2.0)
            * sf2
            / ell[i] ** 2
            * math.sqrt(
                (_SLOPE_D2 / ell[i]) ** 2
                + math.exp(-1.0) * float(np.sum(1.0 / np.delete(ell, i) ** 2))
            )
            for i in range(d)
        ]
    )
    lip_f = float(
        np.linalg.norm(
            math.sqrt(2.0 * math.log(2.0 * d / delta_lip)) * root
            + 12.0 * math.sqrt(6.0 * d) * np.maximum(root, np.sqrt(r * slopes))
        )
    )
    n = len(post.alpha)
    lip_mean = lip_k * math.sqrt(n) * float(np.linalg.norm(post.alpha))
    a_norm = float(np.max(np.abs(np.linalg.eigvalsh(post.A))))
    if not (np.isfinite(lip_f) and np.isfinite(lip_mean) and np.isfinite(a_norm)):
        raise InputError(
            f"the uniform error bound needs finite Lipschitz constants, got L_f = {lip_f}, "
            f"L_mean = {lip_mean} (check the GP's length scales {ell.tolist()})"
        )
    delta_cover = 0.5 * delta

    def terms(tau: float) -> tuple[float, float]:
        beta = 2.0 * (_log_covering(widths, tau) - math.log(delta_cover))
        omega = math.sqrt(2.0 * tau * lip_k * (1.0 + n * a_norm * sf2))
        return beta, (lip_mean + lip_f) * tau + math.sqrt(beta) * omega

    scale = max(r, float(ell.min()))
    taus = scale * np.logspace(-14, 0, 141)
    values = [math.sqrt(b) * std_ref + g for b, g in map(terms, taus)]
    tau = float(taus[int(np.argmin(values))])
    beta, gamma = terms(tau)
    return UniformErrorBound(beta, gamma, tau, lip_f, lip_mean, float(delta), low, high)
