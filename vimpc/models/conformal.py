"""Split conformal calibration: a ``bound`` for any :class:`DiscreteModel` from held-out data.

Given ``n`` calibration transitions ``(x_i, u_i, x_next_i)`` that the model was not fitted
on, and a scale ``s(x, u) > 0`` per state entry (constant, or a state-dependent spread that
a model family provides, such as a GP's posterior standard deviation), each transition gets
the score

    r_i = max_j |x_next_i - step(x_i, u_i, p)|_j / s_j(x_i, u_i).

With ``k = ceil((n + 1)(1 - delta))`` and ``q`` the ``k``-th smallest score, the bound is

    bound(x, u, p) = q s(x, u),

and for a new transition exchangeable with the calibration ones, every entry of its error
lies within the bound at once with probability at least ``1 - delta`` (Vovk et al. 2005;
Angelopoulos & Bates 2023, sec. 1). Taking the maximum over entries gives the joint
guarantee directly, without splitting ``delta`` over the entries. ``k <= n`` needs
``n >= 1/delta - 1`` transitions.

Assumptions, stated plainly: transitions inside one trajectory are not independent, and
closed-loop states come from another distribution than open-loop excitation data; the
guarantee holds exactly only for exchangeable data, so vimpc measures the coverage it
achieves on fresh held-out data and along closed-loop episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import casadi as ca
import numpy as np

from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError
from vimpc.models.evaluation import (
    describe_failures,
    failed_transitions,
    one_step_errors,
    transitions,
)

# a scale below this fraction of the largest one is raised to it (an entry the model
# predicts exactly in the training data must not divide the score by zero)
_SCALE_FLOOR = 1e-9


def minimum_calibration_size(delta: float) -> int:
    """The fewest calibration transitions split conformal needs for ``delta``."""
    return math.ceil(1.0 / delta - 1.0 - 1e-12)


@dataclass(frozen=True)
class ConformalBound:
    """A calibrated bound: ``bound(x, u, p) = quantile * scale`` (constant) or
    ``quantile * spread(x, u, p)`` (state-dependent)."""

    delta: float
    quantile: float
    n_calibration: int
    scale: np.ndarray | None = None
    spread: ca.Function | None = None

    def apply(self, model: DiscreteModel) -> DiscreteModel:
        """``model`` with this bound and its ``delta``."""
        x = ca.MX.sym("x", model.nx)
        u = ca.MX.sym("u", model.nu)
        p = ca.MX.sym("p", model.np)
        if self.spread is not None:
            e = self.quantile * self.spread(x, u, p)
        else:
            e = ca.MX(ca.DM(self.quantile * self.scale))
        bound = ca.Function("bound", [x, u, p], [e], ["x", "u", "p"], ["e"])
        return replace(
            model, bound=bound, delta=self.delta, info={**model.info, "bound": self.describe()}
        )

    def describe(self) -> dict:
        """What the file's ``info["bound"]`` records."""
        return {
            "method": "split conformal",
            "delta": self.delta,
            "quantile": self.quantile,
            "n_calibration": self.n_calibration,
            "scale": "state-dependent spread" if self.spread is not None else self.scale.tolist(),
        }


def residual_scale(model: DiscreteModel, data: Dataset) -> np.ndarray:
    """Per-entry RMS of the model's one-step errors on ``data`` (the constant scale).

    Raises:
        InputError: the model's step failed (NaN) on some of the transitions, named.
    """
    errors = one_step_errors(model, data)
    failed = failed_transitions(errors, data)
    if failed:
        raise InputError(
            f"{describe_failures(failed, len(errors), 'training')}; the bound's scale cannot "
            "be set from them (check the model on those states, or drop the trajectories)"
        )
    rms = np.sqrt(np.mean(errors**2, axis=0))
    return np.maximum(rms, _SCALE_FLOOR * max(float(rms.max()), 1e-300))


def calibrate(
    model: DiscreteModel,
    data: Dataset,
    delta: float,
    *,
    scale: np.ndarray | None = None,
    spread: ca.Function | None = None,
) -> ConformalBound:
    """Calibrate a bound for ``model`` on the held-out transitions of ``data``.

    Args:
        model: the fitted model (its own ``bound``, if any, is ignored).
        data: calibration trajectories the model was not fitted on.
        delta: probability that a transition's error leaves the bound, in (0, 1).
        scale: constant per-entry scale ``(nx,)``, > 0, fixed before looking at ``data``
            (e.g. :func:`residual_scale` on the training data).
        spread: ``(x, u, p) -> s`` (nx entries, > 0), the state-dependent alternative.

    Raises:
        InputError: ``delta`` outside (0, 1); both or neither of ``scale`` and ``spread``;
            a calibration set smaller than ``1/delta - 1`` transitions.
    """
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise InputError(f"delta must be a probability in (0, 1), got {delta!r}")
    if (scale is None) == (spread is None):
        raise InputError(
            "calibrate needs exactly one of scale (constant) and spread (state-dependent)"
        )
    errors = np.abs(one_step_errors(model, data))
    n = len(errors)
    failed = failed_transitions(errors, data)
    if failed:
        raise InputError(
            f"{describe_failures(failed, n, 'calibration')}; a bound cannot be calibrated on "
            "them (check the model on those states, or drop the trajectories)"
        )
    need = minimum_calibration_size(delta)
    if n < need:
        raise InputError(
            f"a calibration set of {n} transitions is too small for delta = {delta}: split "
            f"conformal needs at least 1/delta - 1 = {need}; collect more held-out data or "
            "raise delta"
        )
    if spread is not None:
        if not isinstance(spread, ca.Function):
            raise InputError(
                f"spread must be a casadi.Function (x, u, p) -> s, got {type(spread).__name__}"
            )
        X, U, _ = transitions(model, data)
        P = np.tile(model.p_default, (n, 1))
        s = np.asarray(spread.map(n)(X.T, U.T, P.T), dtype=np.float64).reshape(-1, n).T
        if not np.all(s > 0):
            raise InputError("spread(x, u, p) must be > 0 on the calibration data")
    else:
        scale = np.asarray(scale, dtype=np.float64).reshape(-1)
        if scale.shape != (model.nx,) or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise InputError(
                f"scale must be {model.nx} positive finite numbers, got {scale.tolist()}"
            )
        s = np.broadcast_to(scale, errors.shape)
    scores = np.max(errors / s, axis=1)
    if not np.all(np.isfinite(scores)):
        bad = int(np.count_nonzero(~np.isfinite(scores)))
        raise InputError(
            f"the model's one-step error is not finite on {bad} of {n} calibration transitions "
            "(its step failed there); a bound cannot be calibrated on them"
        )
    k = max(1, math.ceil((n + 1) * (1.0 - delta) - 1e-12))  # k = 0 only for delta ~ 1
    quantile = float(np.sort(scores)[k - 1])
    return ConformalBound(float(delta), quantile, n, scale=scale, spread=spread)
