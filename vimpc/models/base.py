"""The abstract model family: settings declared once, ``fit(data) -> self``, ``discrete_model()``.

A family follows scikit-learn's habits. ``__init__`` stores the system the family starts
from, the step ``dt`` and the settings (checked against the family's declaration, so a
misspelt or out-of-range setting fails at once); ``fit`` learns from data and sets fitted
attributes ending in ``_``; ``discrete_model`` exports the result as a
:class:`~vimpc.dynamics.DiscreteModel`. Using a family that needs fitting before
``fit`` raises :class:`~vimpc.errors.NotFittedError` naming it.

Every family also carries the calibration settings of :data:`BOUND_SETTINGS`: with
``bound = "conformal"``, ``fit`` calibrates a bound on held-out data by split conformal
prediction (:mod:`vimpc.models.calibration`), and the exported model carries it with its
``delta``. A family that derives a bound of its own (a GP's uniform error bound) names it
in ``bound_methods`` and returns it from :meth:`ModelFamily._own_bound`. Either way the
fit's bound is one :class:`~vimpc.models.calibration.Bound` (``calibration_``), which
:meth:`ModelFamily.discrete_model` puts into the exported model.

A new family is one module in :mod:`vimpc.models.families`: it subclasses
:class:`ModelFamily`, declares ``name`` and ``settings``, implements
:meth:`~ModelFamily._fit`, :meth:`~ModelFamily._build` and :meth:`~ModelFamily._provides`,
and is registered by one line in :mod:`vimpc.models.registry` (the scenario schema and
:mod:`vimpc.models.families` find it there), with a small case in the family contract
suite (``tests/models/test_family_contract.py``). A neural family starts from
:class:`vimpc.models._neural.NeuralFamily`, which writes the rest of its fit.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, Self

import casadi as ca

from vimpc import _checks, _settings
from vimpc._settings import NONNEGATIVE, PROBABILITY, Acts, Setting
from vimpc.data.dataset import Dataset
from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError, NotFittedError
from vimpc.mechanics.system import MechanicalSystem
from vimpc.models.calibration import (
    LEVELS,
    Bound,
    calibrate,
    choose_scale,
    log_state_scale,
    residual_scale,
    state_scale,
)
from vimpc.models.evaluation import check_data

#: Settings every family has: the calibrated bound.
BOUND_SETTINGS: dict[str, Setting] = {
    "bound": Setting(
        str,
        "none",
        "`conformal`: calibrate a bound on the one-step error from held-out data",
        choices=("none", "conformal"),
    ),
    "delta": Setting(
        float,
        0.05,
        "probability that a one-step error leaves the bound",
        rule=PROBABILITY,
        acts=(Acts("bound", ("none",), unless=True),),
    ),
    "conformal_scale": Setting(
        str,
        "constant",
        "bound shape: per-entry RMS of the training errors, the family's state-dependent "
        "spread, `state`: max(a + b abs(v) + c abs(u), floor) per entry, fitted on the "
        "training errors, `log_state`: the spread (or 1) times exp(w0 + w1 abs(v) + w2 v^2 "
        "+ w3 abs(u)) per entry, w fitted to the log of the training errors, or `auto`: "
        "the narrowest of constant, spread and state at equal coverage on the training data",
        choices=("constant", "spread", "state", "log_state", "auto"),
        acts=(Acts("bound", ("conformal",)),),
    ),
    "bound_level": Setting(
        str,
        "step",
        "what delta refers to: one step, or `horizon`: all bound_horizon consecutive one-step "
        "errors inside the bound at once (conformal bounds)",
        choices=LEVELS,
        acts=(Acts("bound", ("conformal",)),),
    ),
    "bound_horizon": Setting(
        int,
        0,
        "steps of a horizon-level bound (>= controller.horizon; 0: none, for bound_level = `step`)",
        rule=NONNEGATIVE,
        acts=(Acts("bound_level", ("horizon",)),),
    ),
}


class ModelFamily(abc.ABC):
    """Abstract base of model families.

    Args:
        system: the mechanical system the family starts from: its structure (coordinates,
            constraints, input map) and, for families with a prior model, its parameters.
        dt: the model step [s].
        **settings: the family's settings (:meth:`all_settings`); unknown keys are refused
            with a "did you mean".
    """

    #: the family's name in scenario files (``model.family``)
    name: ClassVar[str]
    #: the family's own settings (the bound settings are added by :meth:`all_settings`)
    settings: ClassVar[Mapping[str, Setting]] = {}
    #: values of ``bound`` besides "none" and "conformal" that the family derives itself
    bound_methods: ClassVar[Mapping[str, str]] = {}

    def __init__(self, system: MechanicalSystem, dt: float, **settings: Any) -> None:
        if not isinstance(system, MechanicalSystem):
            raise InputError(f"system must be a MechanicalSystem, got {type(system).__name__}")
        self.system = system
        self.dt = _checks.positive("dt", dt)
        self._apply_settings(_settings.resolve(settings, self.all_settings(), error=InputError))

    @classmethod
    def all_settings(cls) -> dict[str, Setting]:
        """The family's settings followed by the bound settings (with the family's own
        bound methods among the choices of ``bound``)."""
        out = {**cls.settings, **BOUND_SETTINGS}
        if cls.bound_methods:
            base = BOUND_SETTINGS["bound"]
            docs = "; ".join(f"`{k}`: {v}" for k, v in cls.bound_methods.items())
            out["bound"] = replace(
                base, choices=(*base.choices, *cls.bound_methods), doc=f"{base.doc}; {docs}"
            )
        return out

    def get_settings(self) -> dict[str, Any]:
        """The settings as given or defaulted (what a scenario's resolved file records)."""
        return dict(self._settings)

    # -- what a family implements -----------------------------------------------------------
    @abc.abstractmethod
    def _fit(self, data: Dataset | None) -> None:
        """Learn from the training data (``None`` when the family learns nothing)."""

    @abc.abstractmethod
    def _build(self) -> DiscreteModel:
        """The fitted model without a calibrated bound."""

    @abc.abstractmethod
    def _provides(self) -> set[str]:
        """The optional DiscreteModel fields the exported model will have (without
        ``bound``), known from the settings alone."""

    def needs_training_data(self) -> bool:
        """Whether :meth:`fit` needs training data (families that learn: True)."""
        return True

    def _own_bound(self) -> Bound:
        """The bound named by ``self.bound`` among :attr:`bound_methods`, from the fit."""
        # reached only by a family that names bound_methods without implementing them
        raise NotImplementedError(
            f"{type(self).__name__} lists bound_methods {sorted(self.bound_methods)} but does "
            "not implement _own_bound"
        )

    def _is_fitted(self) -> bool:
        return hasattr(self, "fit_time_")

    # -- the public verbs ---------------------------------------------------------------------
    def provides(self) -> frozenset[str]:
        """The optional fields (``residual``, ``bound``, ``energy``, ``constraint``,
        ``velocity_constraint``) of the model :meth:`discrete_model` will export; cheap,
        so a scenario is checked before any data are collected."""
        fields = set(self._provides())
        if self.bound != "none":
            fields.add("bound")
        return frozenset(fields)

    def needs_fit(self) -> bool:
        """Whether :meth:`discrete_model` needs :meth:`fit` first."""
        return self.needs_training_data() or self.bound != "none"

    def fit(self, data: Dataset | None = None, calibration: Dataset | None = None) -> Self:
        """Fit on ``data`` and, with ``bound = "conformal"``, calibrate on ``calibration``
        (trajectories the fit did not see). Returns ``self``.

        Raises:
            InputError: missing data; data of another step, system or size.
        """
        start = time.perf_counter()
        for what, d in (("data", data), ("calibration", calibration)):
            if d is not None:
                self._check_data(what, d)
        # every argument is checked before anything changes (or is learned in vain); a fit
        # that fails after that leaves the family unfitted, never with new parameters under
        # the previous bound or without the bound its settings promise
        if data is None and self.needs_training_data():
            raise InputError(f"{type(self).__name__}.fit needs training data: fit(data)")
        self._check_bound_inputs(data, calibration, "fit(data, calibration)")
        for attribute in ("fit_time_", "calibration_"):
            self.__dict__.pop(attribute, None)
        #: what the fit used instead of a setting it could not follow, in words
        self.fit_notes_: list[str] = []
        self._fit(data)
        self.calibration_ = self._calibrate(data, calibration)
        self.fit_time_ = time.perf_counter() - start
        return self

    def recalibrate(
        self, data: Dataset | None = None, calibration: Dataset | None = None, **bound: Any
    ) -> Self:
        """Derive the bound again with other bound settings (``bound``, ``delta``,
        ``conformal_scale``, ``bound_level``, ``bound_horizon``) on the fitted model, without
        fitting it again: ``data`` are the training data (needed by ``conformal_scale =
        "constant"`` and ``"state"``), ``calibration``
        the held-out trajectories of a conformal bound. Returns ``self``.

        Raises:
            NotFittedError: before :meth:`fit`.
            InputError: a key that is not a bound setting; a value out of range; missing
                data.
        """
        self._require_fitted("recalibrate()")
        unknown = sorted(set(bound) - set(BOUND_SETTINGS))
        if unknown:
            raise InputError(
                f"recalibrate takes the bound settings {sorted(BOUND_SETTINGS)}, got {unknown}"
            )
        for what, d in (("data", data), ("calibration", calibration)):
            if d is not None:
                self._check_data(what, d)
        merged = {**self._settings, **bound}
        values = _settings.resolve(merged, self.all_settings(), error=InputError)
        previous = dict(self._settings)
        self._apply_settings(values)  # refuses a bad combination before anything changes
        try:
            self._check_bound_inputs(data, calibration, "recalibrate(data, calibration)")
            self.calibration_ = self._calibrate(data, calibration)
        except BaseException:
            self._apply_settings(previous)
            raise
        return self

    def _apply_settings(self, values: dict[str, Any]) -> None:
        if values["conformal_scale"] == "spread" and not isinstance(self, SpreadFamily):
            raise InputError(
                f"conformal_scale = 'spread' needs a family with a state-dependent spread; "
                f"{self.name!r} has none, use conformal_scale = 'constant'"
            )
        level, horizon = values["bound_level"], values["bound_horizon"]
        if level == "horizon" and values["bound"] != "conformal":
            raise InputError(
                f"bound_level = 'horizon' is for a conformal bound, got bound = "
                f"{values['bound']!r}; set bound = 'conformal' or bound_level = 'step'"
            )
        if level == "horizon" and horizon < 1:
            raise InputError(
                "bound_level = 'horizon' needs bound_horizon, the number of consecutive steps "
                f"the bound covers at once (the controller's horizon), got {horizon}"
            )
        if level == "step" and horizon != 0:
            raise InputError(
                f"bound_horizon = {horizon} is for bound_level = 'horizon'; set bound_level = "
                "'horizon' or leave bound_horizon at 0"
            )
        self._settings = values
        for key, value in values.items():
            setattr(self, key, value)

    def _check_bound_inputs(
        self, data: Dataset | None, calibration: Dataset | None, call: str
    ) -> None:
        if self.bound != "conformal":
            return
        if calibration is None:
            raise InputError(
                f"{type(self).__name__} with bound = 'conformal' needs held-out "
                f"calibration data: {call}"
            )
        if self.conformal_scale in ("constant", "state", "log_state", "auto") and data is None:
            raise InputError(
                f"conformal_scale = {self.conformal_scale!r} sets the bound's shape from the "
                f"training errors: {call} needs training data"
            )

    def _calibrate(self, data: Dataset | None, calibration: Dataset | None) -> Bound | None:
        """The bound the settings ask for, on the fitted model (None for "none")."""
        if self.bound in self.bound_methods:
            return replace(self._own_bound(), name=self.bound)
        if self.bound != "conformal":
            return None
        model = self._build()
        scale, spread, shape, figures = None, None, None, {}
        kind = self.conformal_scale
        horizon = self.bound_horizon if self.bound_level == "horizon" else None
        if kind == "auto":
            state, record = state_scale(model, data)
            candidates = {"constant": (residual_scale(model, data), None), "state": (None, state)}
            if isinstance(self, SpreadFamily):
                candidates["spread"] = (None, self._spread())
            kind, ratios = choose_scale(model, data, self.delta, candidates, horizon=horizon)
            figures = {"scale_chosen": kind, "width_vs_constant_on_training": ratios}
            scale, spread = candidates[kind]
            shape = record if kind == "state" else None
        elif kind == "spread":
            spread = self._spread()
        elif kind == "state":
            spread, shape = state_scale(model, data)
        elif kind == "log_state":
            own = self._spread() if isinstance(self, SpreadFamily) else None
            spread, shape = log_state_scale(model, data, own)
        else:
            scale = residual_scale(model, data)
        level = {"figures": figures}
        if self.bound_level == "horizon":
            # windows or Bonferroni, the tighter one measured on the training data (or, for
            # a family fitted without them, the windows: never looser in the population).
            # Closed-loop episodes (metadata "closed_loop") are exchangeable as episodes, not
            # step by step, which Bonferroni's pooled steps would assume: the windows
            level.update({"level": "horizon", "horizon": horizon})
            windows = data is None or bool(calibration.metadata.get("closed_loop"))
            level.update({"method": "windows"} if windows else {"choose_on": data})
        return calibrate(
            model, calibration, self.delta, scale=scale, spread=spread, shape=shape, **level
        )

    def discrete_model(self) -> DiscreteModel:
        """The fitted model as a :class:`DiscreteModel` (with its bound, if calibrated)."""
        self._require_fitted("discrete_model()")
        model = self._build()
        bound = getattr(self, "calibration_", None)
        return model if bound is None else bound.apply(model)

    # -- helpers --------------------------------------------------------------------------------
    def _require_fitted(self, call: str) -> None:
        if not self._is_fitted():
            raise NotFittedError(
                f"this {type(self).__name__} (family {self.name!r}) is not fitted yet: call "
                f"fit(data) before {call}"
            )

    def _check_data(self, what: str, data: Dataset) -> None:
        s = self.system
        check_data(self.dt, s.nq + s.nv, s.nu, data, what)
        system = data.metadata.get("system")
        if system is not None and system != s.name:
            raise InputError(f"{what} were collected from a {system}, the model is of a {s.name}")

    def info(self) -> dict[str, Any]:
        """Provenance every exported model records."""
        out = {
            "model": self.name,
            "system": self.system.name,
            "params": dict(self.system.params),
            "friction": self.system.friction.tolist(),
            "settings": self.get_settings(),
        }
        if hasattr(self, "fit_time_"):
            out["fit_time_s"] = self.fit_time_
        if getattr(self, "fit_notes_", None):
            out["fit_notes"] = list(self.fit_notes_)
        return out

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self._settings.items())
        return f"{type(self).__name__}({self.system!r}, dt={self.dt}, {settings})"


class SpreadFamily(ModelFamily):
    """A family whose models know a state-dependent spread of their one-step error (a GP's
    posterior standard deviation), which shapes a conformal bound
    (``conformal_scale = "spread"``)."""

    @abc.abstractmethod
    def _spread(self) -> ca.Function:
        """``(x, u, p) -> s``: the spread of each state entry's one-step error, > 0."""
