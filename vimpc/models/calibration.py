"""Calibration of bounds on the one-step error: the one :class:`Bound` type, and split
conformal calibration of a bound for any :class:`DiscreteModel` from held-out data.

A :class:`Bound` is a model's ``bound`` function with its ``delta``, how it was obtained and
its calibration figures; a family keeps the one its fit gave as ``calibration_``, and
:meth:`~vimpc.models.ModelFamily.discrete_model` puts it into the exported model, with its
:class:`~vimpc.dynamics.BoundInfo` record (:meth:`Bound.record`). It is obtained either

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

Two refinements (:func:`calibrate`'s ``level`` and :func:`state_scale`):

- **Horizon level** (``level = "horizon"``, ``horizon = N``): the probability refers to
  ``N`` consecutive one-step errors, each measured from the true state (what a plan's tube
  propagates), all inside the bound at once. Two calibrations, the tighter one chosen by
  measurement on data the bound is not calibrated on (the training data):

  * ``"windows"``: the score of a window of ``N`` consecutive transitions is the largest
    score of its steps, and every window of every calibration trajectory counts. A
    trajectory's loss at ``q`` is the share of its windows whose score exceeds ``q``; the
    trajectories are exchangeable (their windows are not), and conformal risk control
    (Angelopoulos et al. 2024, Theorem 1) with the smallest ``q`` whose losses sum to at
    most ``(n + 1) delta - 1`` over the ``n`` trajectories bounds the expected share of a
    fresh trajectory's windows that leave the bound by ``delta``: a window at a uniformly
    drawn start of a fresh trajectory has all ``N`` errors inside with probability at least
    ``1 - delta`` (for continuous scores also at most ``1 - delta + 2/(n + 1)``, their
    Theorem 2). With one window per trajectory (``T = N``) it is split conformal on the
    window scores. It needs ``1/delta - 1`` trajectories of at least ``N`` steps;
  * ``"bonferroni"``: the per-step calibration above at ``delta / N`` on all the
    transitions; the union bound over the ``N`` steps gives ``1 - delta`` (it needs
    ``N/delta - 1`` transitions, and inherits the per-step calibration's assumption that
    transitions are exchangeable).

  In the population the window quantile is never larger (the union bound is loose); with
  few trajectories its finite-sample rank can be, hence the measurement. The choice is
  made on the training scores at the ranks the calibration set will use, so choosing
  does not spend the calibration set's guarantee.
- **State-dependent scale** (:func:`state_scale`): ``s_j(x, u) = max(a_j + b_j . |v| +
  c_j . |u|, floor_j)``, an affine function of the absolute velocities (the observation's
  second half) and inputs per state entry, fitted by non-negative least squares to the
  absolute training errors and floored at :data:`STATE_SCALE_FLOOR` times the entry's
  mean absolute training error; or (:func:`log_state_scale`) ``s_j(x, u) = g_j(x, u)
  exp(w_j . [1, |v|, v^2, |u|])``, the family's spread ``g`` (or 1) times a power-law
  correction fitted by least squares to the log of the absolute training errors over
  ``g``; a CasADi function, so the bound stays one of ``(x, u, p)``. Any scale fixed before the calibration data keeps the guarantee; a
  better shape gives a narrower bound at the same coverage, and :func:`choose_scale`
  measures which one on the training data.

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

from vimpc._probability import Probability
from vimpc.data.dataset import Dataset
from vimpc.dynamics import BOUND_CALIBRATED_ON, BoundInfo, DiscreteModel
from vimpc.errors import InputError
from vimpc.integrators import _newton
from vimpc.models.evaluation import (
    bound_values,
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
#: what a conformal bound's probability refers to: one transition, or N consecutive ones
LEVELS = ("step", "horizon")
#: how a horizon-level bound is calibrated (``"auto"``: the tighter one, measured)
HORIZON_METHODS = ("auto", "windows", "bonferroni")
#: the state-dependent scale of an entry is at least this fraction of the entry's mean
#: absolute training error (an affine fit that reaches zero at rest must not divide a
#: score by zero, nor promise an error-free step there)
STATE_SCALE_FLOOR = 0.1


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
            records), a conformal bound's ``level`` (and ``horizon``) among them. A figure
            also reads as an attribute: ``bound.quantile``.
        calibrated_on: where it was calibrated, one of
            :data:`~vimpc.dynamics.BOUND_CALIBRATED_ON`; ``None``: ``"heldout"`` for a
            conformal bound, ``"training"`` for a theorem's.
        name: the short name of how it was obtained in the model's record (the family's
            ``bound`` setting, ``"theorem1"``); ``None``: ``obtained``.
    """

    function: ca.Function
    delta: float
    obtained: str
    method: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    calibrated_on: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.function, ca.Function) or (
            self.function.n_in(),
            self.function.n_out(),
        ) != (3, 1):
            raise InputError(
                f"Bound.function must be a casadi.Function (x, u, p) -> e, got {self.function!r}"
            )
        Probability(self.delta, "Bound.delta")
        if self.obtained not in OBTAINED:
            raise InputError(f"Bound.obtained must be one of {OBTAINED}, got {self.obtained!r}")
        if self.calibrated_on is None:
            on = "heldout" if self.obtained == "conformal" else "training"
            object.__setattr__(self, "calibrated_on", on)
        if self.calibrated_on not in BOUND_CALIBRATED_ON:
            raise InputError(
                f"Bound.calibrated_on must be one of {BOUND_CALIBRATED_ON}, got "
                f"{self.calibrated_on!r}"
            )
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise InputError(f"Bound.name must be None or a non-empty str, got {self.name!r}")
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
        """The bound in words and figures: what the model files of format 2 recorded as
        ``info["bound"]`` (:func:`vimpc.model_file.bound_info_from_v2` reads it back)."""
        return {
            "method": self.method,
            "obtained": self.obtained,
            "delta": self.delta,
            **self.figures,
        }

    def record(self) -> BoundInfo:
        """The model's :class:`~vimpc.dynamics.BoundInfo`: ``delta``, the level and horizon
        of the figures, ``name`` (or ``obtained``) as the method, ``calibrated_on``, and in
        ``extra`` the other figures with the description (``method``) and ``obtained``."""
        figures = dict(self.figures)
        level = figures.pop("level", "step")
        horizon = figures.pop("horizon", None)
        return BoundInfo(
            delta=float(self.delta),
            level=level,
            horizon=horizon,
            method=self.name or self.obtained,
            calibrated_on=self.calibrated_on,
            extra={"description": self.method, "obtained": self.obtained, **figures},
        )

    def apply(self, model: DiscreteModel) -> DiscreteModel:
        """``model`` with this bound, its ``delta`` and its record (``bound_info``). The
        model's bound is NaN wherever ``x``, ``u`` or ``p`` has a NaN or inf entry, as its
        step is: a clipped variance or scale (``fmax(NaN, floor)`` is the floor) would
        otherwise claim its smallest error at a state that is no state.

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
            bound=_nan_at_nonfinite(f),
            delta=float(self.delta),
            bound_info=self.record(),
        )


def _nan_at_nonfinite(f: ca.Function) -> ca.Function:
    """``f(x, u, p)``, NaN where an argument is not finite."""
    args = [ca.MX.sym(name, f.sparsity_in(i)) for i, name in enumerate(("x", "u", "p"))]
    ok = _newton.all_finite(ca.vertcat(*(ca.vec(a) for a in args)))
    return ca.Function(f.name(), args, [_newton.accepted(f(*args), ok)], ["x", "u", "p"], ["e"])


def conformal_bound(
    model: DiscreteModel,
    delta: float,
    quantile: float,
    n_calibration: int,
    *,
    scale: np.ndarray | None = None,
    spread: ca.Function | None = None,
    shape: Mapping[str, Any] | None = None,
    level: str = "step",
    horizon: int | None = None,
    figures: Mapping[str, Any] | None = None,
    calibrated_on: str = "heldout",
) -> Bound:
    """The conformal bound ``quantile * scale`` (constant) or ``quantile * spread(x, u, p)``
    (state-dependent) of ``model``, from ``n_calibration`` calibration transitions.

    ``shape`` describes a spread in the record (default ``"state-dependent spread"``);
    ``level`` and ``horizon`` say what the probability refers to; ``figures`` are further
    calibration figures to record; ``calibrated_on`` where the calibration transitions came
    from (``"heldout"``, ``"closed_loop"``).

    Raises:
        InputError: both or neither of ``scale`` and ``spread``; a scale that is not
            ``nx`` positive finite numbers; a spread that is not a casadi.Function; a
            level or horizon out of range.
    """
    if (scale is None) == (spread is None):
        raise InputError("a conformal bound needs exactly one of scale and spread")
    horizon = _checked_level(level, horizon)
    x = ca.MX.sym("x", model.nx)
    u = ca.MX.sym("u", model.nu)
    p = ca.MX.sym("p", model.np)
    if spread is not None:
        _check_spread(spread)
        e = quantile * spread(x, u, p)
        described: Any = "state-dependent spread" if shape is None else dict(shape)
    else:
        scale = _checked_scale(scale, model.nx)
        e, described = ca.MX(ca.DM(quantile * scale)), scale.tolist()
    function = ca.Function("bound", [x, u, p], [e], ["x", "u", "p"], ["e"])
    record: dict[str, Any] = {
        "quantile": float(quantile),
        "n_calibration": int(n_calibration),
        "scale": described,
        "level": level,
    }
    method = "split conformal"
    if horizon is not None:
        record["horizon"] = horizon
        chosen = (figures or {}).get("horizon_method", "windows")
        how = (
            "conformal risk control of the share of each trajectory's windows outside"
            if chosen == "windows"
            else f"Bonferroni, delta/{horizon} per step"
        )
        method = f"split conformal over {horizon}-step horizons ({how})"
    record.update(figures or {})
    return Bound(function, float(delta), "conformal", method, record, calibrated_on)


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


def _checked_level(level: Any, horizon: Any) -> int | None:
    """``horizon`` as an int for ``level = "horizon"`` (None for ``"step"``)."""
    if level not in LEVELS:
        raise InputError(
            f"level must be one of {LEVELS} (what the bound's probability refers to: one "
            f"transition, or a horizon of consecutive ones), got {level!r}"
        )
    if level == "step":
        if horizon is not None:
            raise InputError(
                f"horizon = {horizon!r} is for level = 'horizon'; a step-level bound takes none"
            )
        return None
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise InputError(
            "level = 'horizon' needs horizon, the number of consecutive steps the bound "
            f"covers at once (a positive integer, the controller's horizon), got {horizon!r}"
        )
    return int(horizon)


def _training_errors(model: DiscreteModel, data: Dataset) -> np.ndarray:
    errors = one_step_errors(model, data)
    failed = failed_transitions(errors, data)
    if failed:
        raise InputError(
            f"{describe_failures(failed, len(errors), 'training')}; the bound's scale cannot "
            "be set from them (check the model on those states, or drop the trajectories)"
        )
    return errors


def residual_scale(model: DiscreteModel, data: Dataset) -> np.ndarray:
    """Per-entry RMS of the model's one-step errors on ``data`` (the constant scale).

    Raises:
        InputError: the model's step failed (NaN) on some of the transitions, named.
    """
    errors = _training_errors(model, data)
    rms = np.sqrt(np.mean(errors**2, axis=0))
    return np.maximum(rms, _SCALE_FLOOR * max(float(rms.max()), 1e-300))


def _velocity_entries(model: DiscreteModel) -> slice:
    # the observation is (q, v) with nv = nq (vimpc.mechanics): v is its second half
    if model.nobs % 2:
        raise InputError(
            f"a state-dependent scale reads the velocities from the observation (q, v), "
            f"which has an even size; this model's has {model.nobs}"
        )
    return slice(model.nobs // 2, model.nobs)


def state_features(model: DiscreteModel, X: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The state scale's features ``[1, |v|, |u|]`` of the rows of ``X`` (model states) and
    ``U``, ``(m, 1 + nv + nu)``; ``v`` is the second half of ``to_obs(x)``."""
    m = len(U)
    obs = np.asarray(model.to_obs.map(m)(X.T), dtype=np.float64).reshape(-1, m).T
    v = obs[:, _velocity_entries(model)]
    return np.hstack([np.ones((m, 1)), np.abs(v), np.abs(np.asarray(U, dtype=np.float64))])


def state_scale(model: DiscreteModel, data: Dataset) -> tuple[ca.Function, dict[str, Any]]:
    """The state-dependent scale ``s_j(x, u) = max(a_j + b_j . |v| + c_j . |u|, floor_j)``
    fitted on the training transitions ``data`` (module docstring), and its record.

    Each entry's coefficients ``(a_j, b_j, c_j) >= 0`` minimise the squared difference to
    the entry's absolute errors (non-negative least squares on features scaled to unit
    RMS); ``floor_j`` is :data:`STATE_SCALE_FLOOR` times the entry's mean absolute error
    (and at least ``1e-9`` of the largest, as for the constant scale).

    Raises:
        InputError: the model's step failed (NaN) on some of the transitions, named; an
            observation of odd size (no velocities to read).
    """
    from scipy.optimize import nnls

    velocities = _velocity_entries(model)
    errors = np.abs(_training_errors(model, data))
    X, U, _ = transitions(model, data)
    F = state_features(model, X, U)
    norms = np.sqrt(np.mean(F**2, axis=0))
    norms = np.where(norms > 0, norms, 1.0)
    coef = np.empty((model.nx, F.shape[1]))
    for j in range(model.nx):
        c, _ = nnls(F / norms, errors[:, j])
        coef[j] = c / norms
    mean_abs = errors.mean(axis=0)
    floor = np.maximum(
        STATE_SCALE_FLOOR * mean_abs, _SCALE_FLOOR * max(float(mean_abs.max()), 1e-300)
    )
    x = ca.MX.sym("x", model.nx)
    u = ca.MX.sym("u", model.nu)
    p = ca.MX.sym("p", model.np)
    v = model.to_obs(x)[velocities.start : velocities.stop]
    features = ca.vertcat(1.0, ca.fabs(v), ca.fabs(u))
    s = ca.fmax(ca.mtimes(ca.DM(coef), features), ca.DM(floor))
    function = ca.Function("state_scale", [x, u, p], [s], ["x", "u", "p"], ["s"])
    nv = velocities.stop - velocities.start
    record = {
        "kind": "state: max(a + b.|v| + c.|u|, floor) per entry, fitted on the training errors",
        "intercept": coef[:, 0].tolist(),
        "per_abs_velocity": coef[:, 1 : 1 + nv].tolist(),
        "per_abs_input": coef[:, 1 + nv :].tolist(),
        "floor": floor.tolist(),
        "floor_fraction_of_mean_abs_error": STATE_SCALE_FLOOR,
    }
    return function, record


def log_state_scale(
    model: DiscreteModel, data: Dataset, spread: ca.Function | None = None
) -> tuple[ca.Function, dict[str, Any]]:
    """The multiplicative state-dependent scale ``s_j(x, u) = g_j(x, u) exp(w_j . phi(x, u))``
    fitted on the training transitions ``data`` (module docstring), and its record.

    ``g`` is ``spread`` (a family's own spread, such as a GP's posterior standard
    deviation) or 1; ``phi = [1, |v|, v^2, |u|]`` with ``|v|`` and ``|u|`` clipped, entry
    by entry, to the largest value in ``data`` (the scale does not extrapolate past the
    data: outside their box it keeps its value at the box's edge). Each entry's ``w_j``
    minimises the squared difference of ``w_j . phi`` to ``log(|e_j| / g_j)`` (least
    squares on the log of the absolute errors: for errors ``sigma_j(x, u) z`` with a fixed
    distribution of ``z`` it estimates ``log sigma_j`` up to a constant shared by the
    entries, so the entries' scores stay balanced and the error's growth with speed and
    input is followed by a power law, not a line). An absolute error below ``1e-9`` of the
    entry's mean absolute error is raised to it before the log (an exact prediction has no
    log).

    Raises:
        InputError: the model's step failed (NaN) on some of the transitions, named; an
            observation of odd size (no velocities to read); a spread that is not > 0 on
            the training data.
    """
    velocities = _velocity_entries(model)
    errors = np.abs(_training_errors(model, data))
    X, U, _ = transitions(model, data)
    g = (
        np.ones_like(errors)
        if spread is None
        else _scale_values(model, None, spread, X, U, "training")
    )
    m = len(U)
    obs = np.asarray(model.to_obs.map(m)(X.T), dtype=np.float64).reshape(-1, m).T
    v_max = np.abs(obs[:, velocities]).max(axis=0)
    u_max = np.abs(np.asarray(U, dtype=np.float64)).max(axis=0)

    av = np.minimum(np.abs(obs[:, velocities]), v_max)
    au = np.minimum(np.abs(np.asarray(U, dtype=np.float64)), u_max)
    F = np.hstack([np.ones((m, 1)), av, av**2, au])
    tiny = 1e-9 * np.maximum(errors.mean(axis=0), 1e-300)
    target = np.log(np.maximum(errors, tiny) / g)
    w, *_ = np.linalg.lstsq(F, target, rcond=None)  # (features, nx)
    x = ca.MX.sym("x", model.nx)
    u = ca.MX.sym("u", model.nu)
    p = ca.MX.sym("p", model.np)
    v = model.to_obs(x)[velocities.start : velocities.stop]
    cv, cu = ca.fmin(ca.fabs(v), ca.DM(v_max)), ca.fmin(ca.fabs(u), ca.DM(u_max))
    features = ca.vertcat(1.0, cv, cv**2, cu)
    s = ca.exp(ca.mtimes(ca.DM(w.T), features))
    if spread is not None:
        s = s * spread(x, u, p)
    function = ca.Function("log_state_scale", [x, u, p], [s], ["x", "u", "p"], ["s"])
    nv = velocities.stop - velocities.start
    record = {
        "kind": (
            ("spread" if spread is not None else "1")
            + " * exp(w0 + w1.|v| + w2.v^2 + w3.|u|) per entry, w fitted to the log of the "
            "training errors"
        ),
        "log_intercept": w[0].tolist(),
        "per_abs_velocity": w[1 : 1 + nv].T.tolist(),
        "per_squared_velocity": w[1 + nv : 1 + 2 * nv].T.tolist(),
        "per_abs_input": w[1 + 2 * nv :].T.tolist(),
        "abs_velocity_clipped_at": v_max.tolist(),
        "abs_input_clipped_at": u_max.tolist(),
    }
    return function, record


def _scale_values(
    model: DiscreteModel,
    scale: np.ndarray | None,
    spread: ca.Function | None,
    X: np.ndarray,
    U: np.ndarray,
    what: str,
) -> np.ndarray:
    n = len(U)
    if spread is None:
        return np.broadcast_to(_checked_scale(scale, model.nx), (n, model.nx))
    _check_spread(spread)
    P = np.tile(model.p_default, (n, 1))
    s = np.asarray(spread.map(n)(X.T, U.T, P.T), dtype=np.float64).reshape(-1, n).T
    if not np.all(s > 0):
        raise InputError(f"spread(x, u, p) must be > 0 on the {what} data")
    return s


def step_scores(
    model: DiscreteModel,
    data: Dataset,
    *,
    scale: np.ndarray | None = None,
    spread: ca.Function | None = None,
    what: str = "calibration",
) -> np.ndarray:
    """The score ``max_j |e_j| / s_j(x, u)`` of every transition of ``data``, shaped
    ``(trajectories, steps)``.

    Raises:
        InputError: the model's step failed (NaN) on some transitions (named); a spread
            that is not > 0 there.
    """
    if (scale is None) == (spread is None):
        raise InputError("scores need exactly one of scale (constant) and spread")
    errors = np.abs(one_step_errors(model, data))
    failed = failed_transitions(errors, data)
    if failed:
        raise InputError(
            f"{describe_failures(failed, len(errors), what)}; a bound cannot be calibrated on "
            "them (check the model on those states, or drop the trajectories)"
        )
    X, U, _ = transitions(model, data)
    s = _scale_values(model, scale, spread, X, U, what)
    scores = np.max(errors / s, axis=1)
    if not np.all(np.isfinite(scores)):
        bad = int(np.count_nonzero(~np.isfinite(scores)))
        raise InputError(
            f"the model's one-step error is not finite on {bad} of {len(scores)} {what} "
            "transitions (its step failed there); a bound cannot be calibrated on them"
        )
    return scores.reshape(data.n_trajectories, data.n_steps)


def window_scores(scores: np.ndarray, horizon: int) -> np.ndarray:
    """The score of every window of ``horizon`` consecutive steps of every trajectory: the
    largest of its step scores (rows of ``scores``, ``(trajectories, steps)``), shaped
    ``(trajectories, steps - horizon + 1)`` (no columns when the trajectories are shorter
    than ``horizon``)."""
    n, T = scores.shape
    if T < horizon:
        return np.zeros((n, 0))
    return np.stack([scores[:, s : s + horizon].max(axis=1) for s in range(T - horizon + 1)], 1)


def windows_outside(n: int, m: int, delta: float) -> int | None:
    """How many of ``n`` trajectories' ``m`` windows each conformal risk control may leave
    above its quantile: the most with ``sum_i L_i(q) <= (n + 1) delta - 1`` (``L_i`` the
    share of trajectory ``i``'s windows above ``q``; the sum is that count over ``m``), or
    None when ``n < 1/delta - 1`` (too few trajectories) or there are no windows."""
    budget = (n + 1) * delta - 1.0
    if n == 0 or m == 0 or budget < -1e-12:
        return None
    return min(n * m - 1, math.floor(m * max(budget, 0.0) + 1e-9))


def risk_control_quantile(windows: np.ndarray, delta: float) -> float:
    """Conformal risk control of the share of a trajectory's windows outside the bound: the
    smallest window score ``q`` that leaves at most :func:`windows_outside` of the windows
    (``(n, m)``, every row a trajectory) above it (inf when too few trajectories)."""
    n, m = windows.shape
    above = windows_outside(n, m, delta)
    if above is None:
        return math.inf
    return float(np.sort(windows.ravel())[n * m - 1 - above])


def conformal_rank(n: int, delta: float) -> int:
    """``k = ceil((n + 1)(1 - delta))``: the rank of the conformal quantile among ``n``
    scores (``k > n``: too few scores for ``delta``)."""
    return max(1, math.ceil((n + 1) * (1.0 - delta) - 1e-12))  # k = 0 only for delta ~ 1


def _check_delta(delta: Any) -> None:
    Probability(delta, "delta")


def calibrate(
    model: DiscreteModel,
    data: Dataset,
    delta: float,
    *,
    scale: np.ndarray | None = None,
    spread: ca.Function | None = None,
    shape: Mapping[str, Any] | None = None,
    level: str = "step",
    horizon: int | None = None,
    method: str = "auto",
    choose_on: Dataset | None = None,
    figures: Mapping[str, Any] | None = None,
) -> Bound:
    """Calibrate a bound for ``model`` on the held-out transitions of ``data``.

    Args:
        model: the fitted model (its own ``bound``, if any, is ignored).
        data: calibration trajectories the model was not fitted on.
        delta: probability that a transition's error (``level = "step"``) or any of
            ``horizon`` consecutive ones (``level = "horizon"``) leaves the bound, in (0, 1).
        scale: constant per-entry scale ``(nx,)``, > 0, fixed before looking at ``data``
            (e.g. :func:`residual_scale` on the training data).
        spread: ``(x, u, p) -> s`` (nx entries, > 0), the state-dependent alternative
            (a family's own spread, or :func:`state_scale`); ``shape`` describes it in the
            record.
        level: ``"step"`` or ``"horizon"`` (module docstring).
        horizon: the horizon's number of steps (``level = "horizon"`` only).
        method: for ``level = "horizon"``: ``"windows"``, ``"bonferroni"`` or ``"auto"``
            (the one with the smaller quantile on ``choose_on``, at the ranks ``data``
            will use; a method ``data`` is too small for is not chosen).
        choose_on: data the bound is not calibrated on (the training data), for
            ``method = "auto"``.
        figures: further figures to record with the bound (how its scale was chosen).

    The bound records ``calibrated_on = "closed_loop"`` when ``data`` says it holds
    closed-loop episodes (``metadata["closed_loop"]``), else ``"heldout"``.

    Raises:
        InputError: ``delta`` outside (0, 1); both or neither of ``scale`` and ``spread``;
            a level, horizon or method out of range; ``method = "auto"`` without
            ``choose_on``; a calibration set too small for ``delta`` (and the horizon).
    """
    _check_delta(delta)
    if (scale is None) == (spread is None):
        raise InputError(
            "calibrate needs exactly one of scale (constant) and spread (state-dependent)"
        )
    horizon = _checked_level(level, horizon)
    if horizon is not None:
        if method not in HORIZON_METHODS:
            raise InputError(
                f"method must be one of {HORIZON_METHODS} for a horizon-level bound, got {method!r}"
            )
        if method == "auto" and choose_on is None:
            raise InputError(
                "method = 'auto' chooses between windows and bonferroni on data the bound "
                "is not calibrated on: pass choose_on (the training data), or name the method"
            )
    if spread is not None:
        _check_spread(spread)
    else:
        scale = _checked_scale(scale, model.nx)
    scores = step_scores(model, data, scale=scale, spread=spread)
    n = scores.size
    # the controller's own episodes (vimpc.pipeline.calibrate_closed_loop) say so
    on = "closed_loop" if data.metadata.get("closed_loop") else "heldout"
    kw = {"scale": scale, "spread": spread, "shape": shape, "calibrated_on": on}
    if horizon is None:
        k = conformal_rank(n, delta)
        if k > n:
            need = minimum_calibration_size(delta)
            raise InputError(
                f"a calibration set of {n} transitions is too small for delta = {delta}: split "
                f"conformal needs at least 1/delta - 1 = {need}; collect more held-out data or "
                "raise delta"
            )
        quantile = float(np.sort(scores.ravel())[k - 1])
        return conformal_bound(model, float(delta), quantile, n, figures=figures, **kw)

    windows = window_scores(scores, horizon)
    q_windows, k_b = risk_control_quantile(windows, delta), conformal_rank(n, delta / horizon)
    feasible = {"windows": math.isfinite(q_windows), "bonferroni": k_b <= n}
    if not any(feasible.values()):
        raise InputError(
            f"the calibration set ({data.n_trajectories} trajectories of {data.n_steps} steps) "
            f"is too small for a {horizon}-step horizon at delta = {delta}: the window "
            f"calibration needs at least {minimum_calibration_size(delta)} trajectories of "
            f"at least {horizon} steps, the Bonferroni one at least "
            f"{minimum_calibration_size(delta / horizon)} transitions; collect more held-out "
            "data, raise delta or use level = 'step'"
        )
    record: dict[str, Any] = {
        **(figures or {}),
        "windows": int(windows.size),
        "window_trajectories": int(len(windows)) if windows.size else 0,
    }
    if method == "auto":
        # the quantiles the two calibrations would give, measured on other data at the
        # ranks this calibration set will use
        train = step_scores(model, choose_on, scale=scale, spread=spread, what="training")
        predicted = {}
        if feasible["windows"]:
            # the share of windows the calibration will leave outside, at most delta
            above = windows_outside(*windows.shape, delta)
            w = window_scores(train, horizon)
            predicted["windows"] = _quantile_at(w.ravel(), 1.0 - above / windows.size)
        if feasible["bonferroni"]:
            predicted["bonferroni"] = _quantile_at(train.ravel(), k_b / n)
        finite = {m: q for m, q in predicted.items() if np.isfinite(q)}
        method = min(finite or predicted, key=lambda m: (finite or predicted)[m])
        record["horizon_method_chosen_on"] = "training data"
        # None: not measurable on the training data (trajectories shorter than the horizon)
        record["predicted_quantile"] = {
            m: float(q) if np.isfinite(q) else None for m, q in predicted.items()
        }
    elif not feasible[method]:
        raise InputError(
            f"method = {method!r} needs at least "
            + (
                f"{minimum_calibration_size(delta)} calibration trajectories of at least "
                f"{horizon} steps, got {data.n_trajectories} of {data.n_steps}"
                if method == "windows"
                else f"{minimum_calibration_size(delta / horizon)} calibration transitions, got {n}"
            )
        )
    if method == "windows":
        quantile = q_windows
    else:
        quantile = float(np.sort(scores.ravel())[k_b - 1])
    record["horizon_method"] = method
    return conformal_bound(
        model, float(delta), quantile, n, level="horizon", horizon=horizon, figures=record, **kw
    )


def choose_scale(
    model: DiscreteModel,
    data: Dataset,
    delta: float,
    candidates: Mapping[str, tuple[np.ndarray | None, ca.Function | None]],
    *,
    horizon: int | None = None,
) -> tuple[str, dict[str, float]]:
    """The candidate scale whose bound is narrowest at equal coverage on ``data`` (the
    training data: the choice must not look at the calibration set), and each candidate's
    mean width relative to the first one's.

    For each candidate ``name: (scale, spread)`` (exactly one of the two), the quantile
    ``q`` that covers ``1 - delta`` of the scores on ``data`` (of the steps, or with
    ``horizon``, of every window of that many consecutive steps, where the trajectories
    are long enough) makes the bound ``q s(x, u)``; its width is that bound averaged over
    the transitions of ``data``, per entry, and the ratio the mean over entries of the
    width over the first candidate's.

    Raises:
        InputError: no candidate; a candidate without exactly one of scale and spread.
    """
    if not candidates:
        raise InputError("choose_scale needs at least one candidate scale")
    X, U, _ = transitions(model, data)
    widths = {}
    for name, (scale, spread) in candidates.items():
        scores = step_scores(model, data, scale=scale, spread=spread, what="training")
        if horizon is not None and scores.shape[1] >= horizon:
            scores = window_scores(scores, horizon)
        q = _quantile_at(scores.ravel(), 1.0 - delta)
        widths[name] = q * _scale_values(model, scale, spread, X, U, "training").mean(axis=0)
    first = widths[next(iter(widths))]
    ratios = {name: float(np.mean(w / first)) for name, w in widths.items()}
    return min(ratios, key=ratios.__getitem__), ratios


def _quantile_at(scores: np.ndarray, fraction: float) -> float:
    """The smallest score with at least ``fraction`` of ``scores`` at or below it (inf for
    none: a window set that is empty)."""
    if scores.size == 0:
        return math.inf
    k = min(scores.size, max(1, math.ceil(fraction * scores.size - 1e-12)))
    return float(np.sort(scores)[k - 1])


def horizon_coverage(model: DiscreteModel, data: Dataset, horizon: int) -> float:
    """Share of the windows of ``horizon`` consecutive transitions of ``data`` (every start
    in every trajectory) whose errors all lie within the model's bound in every entry: the
    event a horizon-level bound promises with probability ``1 - delta``.

    Raises:
        InputError: a model without a bound; a horizon that is not a positive integer no
            longer than the trajectories.
    """
    if model.bound is None:
        raise InputError("the model has no bound")
    T = data.n_steps
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)):
        raise InputError(f"horizon must be a positive integer, got {horizon!r}")
    if not 1 <= horizon <= T:
        raise InputError(f"horizon must be in [1, {T}] (the trajectories' length), got {horizon}")
    X, U, _ = transitions(model, data)
    errors = np.abs(one_step_errors(model, data))
    bound = bound_values(model, X, U)
    inside = np.all(errors <= bound, axis=1).reshape(data.n_trajectories, T)
    return float(windows_inside(inside, horizon).mean())


def windows_inside(inside: np.ndarray, horizon: int) -> np.ndarray:
    """For step flags ``inside`` (``(T,)`` or ``(trajectories, T)``), whether every step of
    each window of ``horizon`` consecutive steps is inside: ``(..., T - horizon + 1)``
    (empty when ``T < horizon``)."""
    inside = np.asarray(inside, dtype=bool)
    T = inside.shape[-1]
    if T < horizon:
        return np.zeros((*inside.shape[:-1], 0), dtype=bool)
    outside = np.concatenate(
        [np.zeros((*inside.shape[:-1], 1)), np.cumsum(~inside, axis=-1)], axis=-1
    )
    return (outside[..., horizon:] - outside[..., : T - horizon + 1]) == 0
