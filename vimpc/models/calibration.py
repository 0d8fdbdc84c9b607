"""Calibration of bounds on the one-step error: the one :class:`Bound` type, and split
conformal calibration of a bound for any :class:`DiscreteModel` from held-out data.

A :class:`Bound` is a model's ``bound`` function with its ``delta``, how it was obtained and
its calibration figures; a family keeps the one its fit gave as ``calibration_``, and
:meth:`~vimpc.models.ModelFamily.discrete_model` puts it into the exported model, the
figures in ``info["bound"]``. It is obtained either

- ``"conformal"``: calibrated on held-out transitions by split conformal prediction
  (:func:`calibrate`, below), for any model; or
- ``"theorem"``: derived from the fit itself by a theorem, such as a GP's uniform error
  bound (:meth:`~vimpc.models.ModelFamily._own_bound`).

Split conformal calibration: given ``n`` calibration transitions ``(x_i, u_i, x_next_i)``
that the model was not fitted on, and a scale ``s(x, u) > 0`` per state entry (constant, or
a state-dependent spread that a model family provides, such as a GP's posterior standard
deviation), each transition gets the score

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

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

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


#: how a bound was obtained
OBTAINED = ("conformal", "theorem")


@dataclass(frozen=True)
class Bound:
    """A bound on the one-step error: with probability at least ``1 - delta``,
    ``abs(x_next_true - step(x, u, p)) <= function(x, u, p)`` elementwise.

    Attributes:
        function: ``(x, u, p) -> e``, a CasADi function of the model's sizes.
        delta: the probability that an error leaves the bound, in (0, 1).
        obtained: ``"conformal"`` (calibrated on held-out data) or ``"theorem"``
            (derived from the fit).
        method: what it is, in words (``"split conformal"``, the theorem's name).
        figures: its calibration figures (numbers, lists, strings: what the model file
            records). A figure also reads as an attribute: ``bound.quantile``.
    """

    function: ca.Function
    delta: float
    obtained: str
    method: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.function, ca.Function) or (
            self.function.n_in(),
            self.function.n_out(),
        ) != (3, 1):
            raise InputError(
                f"Bound.function must be a casadi.Function (x, u, p) -> e, got {self.function!r}"
            )
        if (
            isinstance(self.delta, bool)
            or not isinstance(self.delta, (int, float))
            or not 0.0 < self.delta < 1.0
        ):
            raise InputError(f"Bound.delta must be a probability in (0, 1), got {self.delta!r}")
        if self.obtained not in OBTAINED:
            raise InputError(f"Bound.obtained must be one of {OBTAINED}, got {self.obtained!r}")
        try:
            json.dumps(dict(self.figures))
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"Bound.figures must be numbers, lists and strings a model file can record, "
                f"got {dict(self.figures)!r} ({exc})"
            ) from None

    def __getattr__(self, name: str) -> Any:
        # reached only for names that are not fields: a figure (bound.quantile)
        if name.startswith("_") or name == "figures":
            raise AttributeError(name)
        try:
            return self.figures[name]
        except KeyError:
            raise AttributeError(
                f"Bound has no field or figure {name!r}; its figures are {sorted(self.figures)}"
            ) from None

    def describe(self) -> dict[str, Any]:
        """What the model's ``info["bound"]`` records."""
        return {
            "method": self.method,
            "obtained": self.obtained,
            "delta": self.delta,
            **self.figures,
        }

    def apply(self, model: DiscreteModel) -> DiscreteModel:
        """``model`` with this bound, its ``delta`` and its record in ``info["bound"]``.

        Raises:
            InputError: a function of other sizes than the model's ``nx``, ``nu``, ``np``.
        """
        f = self.function
        sizes = tuple(f.numel_in(i) for i in range(3))
        if sizes != (model.nx, model.nu, model.np) or f.numel_out(0) != model.nx:
            raise InputError(
                f"the bound takes (x, u, p) of sizes {sizes} and returns {f.numel_out(0)} "
                f"entries; the model has nx, nu, np = {(model.nx, model.nu, model.np)}: a bound "
                "applies to the model it was calibrated on"
            )
        return replace(
            model,
            bound=f,
            delta=float(self.delta),
            info={**model.info, "bound": self.describe()},
        )


def conformal_bound(
    model: DiscreteModel,
    delta: float,
    quantile: float,
    n_calibration: int,
    *,
    scale: np.ndarray | None = None,
    spread: ca.Function | None = None,
) -> Bound:
    """The conformal bound ``quantile * scale`` (constant) or ``quantile * spread(x, u, p)``
    (state-dependent) of ``model``, from ``n_calibration`` calibration transitions.

    Raises:
        InputError: both or neither of ``scale`` and ``spread``; a scale that is not
            ``nx`` positive finite numbers; a spread that is not a casadi.Function.
    """
    if (scale is None) == (spread is None):
        raise InputError("a conformal bound needs exactly one of scale and spread")
    x = ca.MX.sym("x", model.nx)
    u = ca.MX.sym("u", model.nu)
    p = ca.MX.sym("p", model.np)
    if spread is not None:
        _check_spread(spread)
        e, shape = quantile * spread(x, u, p), "state-dependent spread"
    else:
        scale = _checked_scale(scale, model.nx)
        e, shape = ca.MX(ca.DM(quantile * scale)), scale.tolist()
    function = ca.Function("bound", [x, u, p], [e], ["x", "u", "p"], ["e"])
    figures = {"quantile": float(quantile), "n_calibration": int(n_calibration), "scale": shape}
    return Bound(function, float(delta), "conformal", "split conformal", figures)


def _check_spread(spread) -> None:
    if not isinstance(spread, ca.Function):
        raise InputError(
            f"spread must be a casadi.Function (x, u, p) -> s, got {type(spread).__name__}"
        )


def _checked_scale(scale, nx: int) -> np.ndarray:
    scale = np.asarray(scale, dtype=np.float64).reshape(-1)
    if scale.shape != (nx,) or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise InputError(f"scale must be {nx} positive finite numbers, got {scale.tolist()}")
    return scale


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
) -> Bound:
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
        _check_spread(spread)
        X, U, _ = transitions(model, data)
        P = np.tile(model.p_default, (n, 1))
        s = np.asarray(spread.map(n)(X.T, U.T, P.T), dtype=np.float64).reshape(-1, n).T
        if not np.all(s > 0):
            raise InputError("spread(x, u, p) must be > 0 on the calibration data")
    else:
        scale = _checked_scale(scale, model.nx)
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
    return conformal_bound(model, float(delta), quantile, n, scale=scale, spread=spread)
