"""The one contract between models and controllers: :class:`DiscreteModel`.

Every model, analytic or learned, ends as a frozen record of CasADi functions.
The controller, the metrics and the export see nothing else. This module imports
nothing of vimpc but its exceptions and the one type of a probability ``delta``
(:class:`Probability`, from :mod:`vimpc._probability`); the ``.vimpc`` file format lives
in :mod:`vimpc.model_file`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import casadi as ca
import numpy as np

from vimpc._probability import Probability as Probability
from vimpc.errors import InputError

#: The CasADi function fields of a DiscreteModel, in file order.
FUNCTION_FIELDS = (
    "step",
    "residual",
    "residual_jacobian",
    "bound",
    "energy",
    "from_obs",
    "to_obs",
    "constraint",
    "velocity_constraint",
)


#: The arguments of each function field, as the contract names them.
ARGUMENTS = {
    "step": ("x", "u", "p"),
    "residual": ("x", "u", "x_next", "p"),
    "residual_jacobian": ("x", "u", "x_next", "p"),
    "bound": ("x", "u", "p"),
    "energy": ("x", "p"),
    "from_obs": ("obs",),
    "to_obs": ("x",),
    "constraint": ("x",),
    "velocity_constraint": ("x",),
}
_SYMBOLIC = (ca.MX, ca.SX)


class CheckedFunction(ca.Function):
    """A model's CasADi function whose numeric calls check their arguments first.

    It is a :class:`casadi.Function` (the same function, not a copy of its graph): symbolic
    calls (``MX``/``SX`` arguments, as the controller makes once when it builds its problem),
    ``map``, ``expand``, ``serialize`` and code generation are CasADi's own. A call with
    numbers checks, before CasADi sees them, the number of arguments and that each is
    numeric with the size the contract gives it (a vector of that size, or a matrix with
    that many rows for several evaluations at once), and raises
    :class:`~vimpc.errors.InputError` naming the function, the argument, the size expected
    and the value received. The check costs about 2 us against CasADi's 25 us per call;
    a hot loop can call ``casadi.Function(f)``, the same function without the check.

    NumPy at the edges: numbers given as NumPy arrays, lists or floats (no ``casadi.DM``
    among them) come back as NumPy arrays. Given vectors (1-D arrays, flat lists, floats),
    a column comes back as a 1-D array (``(nx,)`` for a step) and one number as a 0-d
    array (``float()`` reads it); given a matrix among the arguments (a column ``(n, 1)``,
    or the columns of several evaluations), every result keeps CasADi's 2-D shape; a
    matrix result is 2-D either way; several outputs come as a tuple of them. A call with a
    ``casadi.DM`` among its arguments gets ``DM`` back, symbols get symbols (``MX``/``SX``),
    as CasADi gives them. With ``default`` (the model's ``p_default``) the last argument
    ``p`` may be left out, positionally or by name.
    """

    def __init__(
        self,
        fn: ca.Function,
        label: str,
        arguments: tuple[str, ...],
        default: np.ndarray | None = None,
    ) -> None:
        super().__init__(fn)
        self.label = label
        self.arguments = tuple(arguments)
        self.default = None if default is None else np.asarray(default, dtype=np.float64)

    def __reduce__(self):
        return (CheckedFunction, (ca.Function(self), self.label, self.arguments, self.default))

    def __copy__(self) -> CheckedFunction:
        return CheckedFunction(ca.Function(self), self.label, self.arguments, self.default)

    def __deepcopy__(self, memo: Any = None) -> CheckedFunction:
        return self.__copy__()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.default is not None:  # p left out: the model's p_default
            if not kwargs and len(args) == self.n_in() - 1:
                args = (*args, self.default)
            elif kwargs and not args and self.name_in(self.n_in() - 1) not in kwargs:
                kwargs = {**kwargs, self.name_in(self.n_in() - 1): self.default}
        out = self._call(args, kwargs)
        if any(isinstance(v, (ca.DM, *_SYMBOLIC)) for v in (*args, *kwargs.values())):
            return out
        return _numpy(out, self._several(args, kwargs))

    def _several(self, args: tuple, kwargs: dict) -> bool:
        """True when a numeric argument is a matrix (a column, or the columns of several
        evaluations): the results keep CasADi's matrix shape."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], Iterable):
                try:
                    value = np.asarray(value, dtype=np.float64)
                except (TypeError, ValueError):
                    continue
            if isinstance(value, np.ndarray) and value.ndim == 2:
                return True
        return False

    def _call(self, args: tuple, kwargs: dict) -> Any:
        if args and kwargs:
            raise InputError(
                f"{self.label} takes its arguments by position ({self._signature()}) or by "
                "name, not both"
            )
        if kwargs:
            names = list(self.name_in())
            for key in kwargs:
                if key not in names:
                    raise InputError(
                        f"{self.label} got an unknown argument {key!r}; its arguments are "
                        f"{', '.join(names)}"
                    )
            pairs = [(names.index(k), v) for k, v in kwargs.items()]
        else:
            if len(args) != self.n_in():
                raise InputError(
                    f"{self.label} takes {self.n_in()} arguments ({self._signature()}), got "
                    f"{len(args)}"
                )
            pairs = list(enumerate(args))
        if any(isinstance(v, _SYMBOLIC) for _, v in pairs):
            return super().__call__(*args, **kwargs)
        for i, value in pairs:
            if not self._numeric(i, value):  # not numbers: CasADi decides, or says no
                try:
                    return super().__call__(*args, **kwargs)
                except (NotImplementedError, RuntimeError, TypeError):
                    raise InputError(
                        f"{self.label}: argument {self._name(i)} must be numeric "
                        f"({_count(self._size(i))}), got {value!r:.80} ({type(value).__name__})"
                    ) from None
        return super().__call__(*args, **kwargs)

    def _numeric(self, i: int, value: Any) -> bool:
        """True for numbers of the right size; False for what numpy cannot read as numbers;
        an :class:`InputError` for numbers of the wrong size."""
        if isinstance(value, (str, bytes)) or value is None:
            return False
        if not isinstance(value, ca.DM) and np.iscomplexobj(value):  # numpy would drop the
            # imaginary part with a warning, CasADi name no argument
            raise InputError(
                f"{self.label}: argument {self._name(i)} must be real numbers "
                f"({_count(self._size(i))}, float64), got dtype "
                f"{np.asarray(value).dtype}: {value!r:.80}"
            )
        try:
            a = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        n = self._size(i)
        # a vector of n numbers, or n rows of several evaluations (CasADi's own rule)
        if a.ndim <= 1 and a.size == n or a.ndim == 2 and (a.shape[0] == n or a.shape == (1, n)):
            return True
        raise InputError(
            f"{self.label}: argument {self._name(i)} must be {_count(n)} (a vector, or a "
            f"matrix of {n} rows for several evaluations), got shape {a.shape}"
            + (f": {a.tolist()!r:.80}" if a.size <= 12 else "")
        )

    def _size(self, i: int) -> int:
        return self.size1_in(i) * self.size2_in(i)

    def _name(self, i: int) -> str:
        name = self.arguments[i] if i < len(self.arguments) else self.name_in(i)
        return f"{name} (input {i})"

    def _signature(self) -> str:
        names = self.arguments if len(self.arguments) == self.n_in() else self.name_in()
        return ", ".join(names)


def _checked_with(fn: ca.Function, default: np.ndarray | None) -> bool:
    """True for a :class:`CheckedFunction` that fills ``p`` with ``default`` (or none)."""
    if not isinstance(fn, CheckedFunction):
        return False
    if fn.default is None or default is None:
        return fn.default is None and default is None
    return fn.default.shape == default.shape and bool(np.all(fn.default == default))


def _numpy(out: Any, several: bool) -> Any:
    """CasADi's numeric result as NumPy (see :class:`CheckedFunction`)."""
    if isinstance(out, ca.DM):
        a = out.full()
        if several or a.shape[1] != 1:
            return a
        return a.reshape(()) if a.shape[0] == 1 else a.reshape(-1)
    if isinstance(out, dict):
        return {k: _numpy(v, several) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return tuple(_numpy(v, several) for v in out)
    return out


def _count(n: int) -> str:
    return f"{n} number" + ("" if n == 1 else "s")


def _sizes(fn: ca.Function) -> tuple[list[int], list[int]]:
    return (
        [fn.size1_in(i) * fn.size2_in(i) for i in range(fn.n_in())],
        [fn.size1_out(i) * fn.size2_out(i) for i in range(fn.n_out())],
    )


def _expect(name: str, fn: ca.Function | None, ins: list[int], outs: list[int] | None) -> None:
    """Check the signature of ``fn`` (``outs=None``: one output of any size)."""
    if fn is None:
        return
    if not isinstance(fn, ca.Function):
        raise TypeError(f"DiscreteModel.{name} must be a casadi.Function, got {type(fn).__name__}")
    if fn.is_null():
        raise InputError(f"DiscreteModel.{name} is an empty casadi.Function")
    got_in, got_out = _sizes(fn)
    if outs is None:
        outs = got_out[:1]
    if got_in != ins or got_out != outs:
        raise InputError(
            f"DiscreteModel.{name} must map inputs of sizes {ins} to outputs of sizes {outs}, "
            f"got inputs {got_in} and outputs {got_out}"
        )


#: What a bound's probability refers to: one transition, or ``horizon`` consecutive ones.
BOUND_LEVELS = ("step", "horizon")
#: Where a bound was calibrated: held-out open-loop trajectories, the controller's own
#: closed-loop episodes, the training data (a bound a theorem derives from the fit), or
#: nowhere (a bound assumed, given by hand).
BOUND_CALIBRATED_ON = ("heldout", "closed_loop", "training", "assumed")


@dataclass(frozen=True)
class BoundInfo:
    """What a model's ``bound`` promises and how it was obtained, as the controller reads it.

    Fields:
        delta: the probability, in (0, 1), that the promise fails.
        level: ``"step"``: one transition's error lies inside the bound in every entry with
            probability at least ``1 - delta``; ``"horizon"``: ``horizon`` consecutive
            one-step errors (each from the true state) all do at once.
        horizon: the number of steps ``N`` of a horizon-level bound (a positive int), ``None``
            for a step-level one.
        method: how the bound was obtained, a short name: ``"conformal"`` (calibrated on
            data), or the name of the theorem a family derives it by (``"theorem1"``).
        calibrated_on: one of :data:`BOUND_CALIBRATED_ON`.
        extra: the family's own figures (quantiles, scale, support box, a description), for
            reports only: str keys, JSON values; kept read-only (mappings as read-only
            mappings, lists as tuples). Its keys must not repeat a field's name.
    """

    delta: float
    level: str
    horizon: int | None
    method: str
    calibrated_on: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", float(Probability(self.delta, "BoundInfo.delta")))
        if self.level not in BOUND_LEVELS:
            raise InputError(
                f"BoundInfo.level must be one of {BOUND_LEVELS} (what the bound's probability "
                f"refers to: one transition, or a horizon of consecutive ones), got "
                f"{self.level!r}"
            )
        horizon = self.horizon
        if self.level == "step":
            if horizon is not None:
                raise InputError(
                    f"BoundInfo.horizon must be None for level = 'step', got {horizon!r}"
                )
        elif isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise InputError(
                "BoundInfo.horizon must be a positive int for level = 'horizon' (the number of "
                f"consecutive steps the bound covers at once), got {horizon!r}"
            )
        else:
            object.__setattr__(self, "horizon", int(horizon))
        if not isinstance(self.method, str) or not self.method.strip():
            raise InputError(
                "BoundInfo.method must be a non-empty str naming how the bound was obtained "
                f"('conformal', 'theorem1', ...), got {self.method!r}"
            )
        if self.calibrated_on not in BOUND_CALIBRATED_ON:
            raise InputError(
                f"BoundInfo.calibrated_on must be one of {BOUND_CALIBRATED_ON}, got "
                f"{self.calibrated_on!r}"
            )
        if not isinstance(self.extra, Mapping):
            raise InputError(
                f"BoundInfo.extra must be a mapping of str keys to JSON values, got "
                f"{type(self.extra).__name__}"
            )
        names = {f.name for f in fields(self)}
        clash = sorted(str(k) for k in self.extra if k in names)
        if clash:
            raise InputError(
                f"BoundInfo.extra must not repeat the record's fields, got the keys {clash}"
            )
        object.__setattr__(self, "extra", _frozen(self.extra, "BoundInfo.extra"))

    def __reduce__(self):  # read-only mappings do not pickle; the record does
        fixed = (self.delta, self.level, self.horizon, self.method, self.calibrated_on)
        return (type(self), (*fixed, _thawed(self.extra)))

    def as_dict(self) -> dict[str, Any]:
        """The record as plain JSON: the fields, then the figures of ``extra`` (lists and
        dicts again)."""
        return {
            "delta": self.delta,
            "level": self.level,
            "horizon": self.horizon,
            "method": self.method,
            "calibrated_on": self.calibrated_on,
            **_thawed(self.extra),
        }

    def steps(self) -> int:
        """How many consecutive one-step errors the bound holds at once with probability
        ``1 - delta``: its horizon for a horizon-level bound, else 1."""
        return self.horizon if self.level == "horizon" else 1


def _frozen(value: Any, where: str) -> Any:
    """``value`` (JSON) with mappings as read-only mappings and lists as tuples."""
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        value = value.item()
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where} must hold finite numbers, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"{where} must have str keys, got {key!r}")
            out[key] = _frozen(item, f"{where}[{key!r}]")
        return MappingProxyType(out)
    raise InputError(
        f"{where} must hold JSON values (str, numbers, bool, None, lists, str-keyed "
        f"mappings), got a {type(value).__name__} ({value!r:.60})"
    )


def _thawed(value: Any) -> Any:
    """The plain JSON of a :func:`_frozen` value."""
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class DiscreteModel:
    """Discrete-time dynamics ``x_next = step(x, u, p)`` as CasADi functions.

    Fields (see DESIGN.md, "The one contract"):
        dt: the model's step in seconds.
        nx, nu, np: state, input and parameter sizes.
        nobs: size of the environment observation ``(q, v)``.
        step: ``(x, u, p) -> x_next``; implicit integrators solve inside
            (rootfinder, derivatives by the implicit function theorem).
        residual: ``(x, u, x_next, p) -> r`` for implicit models; ``r == 0``
            exactly when ``x_next == step(x, u, p)``. ``None`` otherwise.
        residual_jacobian: optional, with ``residual``: ``(x, u, x_next, p) -> (r, J)``, the
            residual and its Jacobian ``J = [dr/dx, dr/du, dr/dx_next]`` (``nx x (2 nx +
            nu)``) written out, for a model whose automatic derivatives cost much more (a
            network's); the controller then differentiates the residual by it.
        bound, delta: ``bound(x, u, p) -> e`` and a probability ``delta`` in (0, 1): for a
            transition ``(x, u, x_next)`` of the system the model was calibrated on,
            ``abs(x_next - step(x, u, p)) <= e`` holds in every entry at once with
            probability at least ``1 - delta`` (for a horizon-level bound, for all the
            transitions of ``horizon`` consecutive steps at once). ``x`` and ``x_next`` are
            states as the model receives them (``from_obs`` of the measured observations), so
            the bound covers measurement noise too. Both ``None`` for a model without a bound.
        bound_info: the bound's :class:`BoundInfo` (its ``delta``, level and horizon, how and
            on what it was calibrated), present exactly when ``bound`` is. ``delta`` may be
            left ``None`` with a record: it is then the record's; given, it must equal it.
        energy: ``(x, p) -> E`` [J], the model's mechanical energy, where it knows one.
        from_obs, to_obs: ``obs -> x`` and ``x -> obs``.
        constraint: ``x -> g``, holonomic constraint residual, or ``None``.
        velocity_constraint: ``x -> A(q) v``, nonholonomic constraint residual, or ``None``.
        state_names, input_names, param_names: for plots and messages.
        p_default: parameter values to use when the caller has none.
        info: free-form provenance (system, integrator, data, fit settings).

    A model is written to and read from one ``.vimpc`` file by
    :func:`vimpc.model_file.save` and :func:`vimpc.model_file.load`.
    """

    dt: float
    nx: int
    nu: int
    np: int
    nobs: int
    step: ca.Function
    from_obs: ca.Function
    to_obs: ca.Function
    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    param_names: tuple[str, ...] = ()
    residual: ca.Function | None = None
    residual_jacobian: ca.Function | None = None
    bound: ca.Function | None = None
    delta: float | None = None
    bound_info: BoundInfo | None = None
    energy: ca.Function | None = None
    constraint: ca.Function | None = None
    velocity_constraint: ca.Function | None = None
    p_default: np.ndarray = field(default_factory=lambda: np.zeros(0))
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.dt, bool) or not (
            isinstance(self.dt, (int, float)) and self.dt > 0 and np.isfinite(self.dt)
        ):
            raise InputError(f"DiscreteModel.dt must be a positive finite float, got {self.dt!r}")
        for name in ("nx", "nu", "np", "nobs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise InputError(f"DiscreteModel.{name} must be a non-negative int, got {value!r}")
        nx, nu, npar = self.nx, self.nu, self.np
        _expect("step", self.step, [nx, nu, npar], [nx])
        _expect("residual", self.residual, [nx, nu, nx, npar], [nx])
        _expect("residual_jacobian", self.residual_jacobian, [nx, nu, nx, npar],
                [nx, nx * (2 * nx + nu)])  # fmt: skip
        if self.residual_jacobian is not None and self.residual is None:
            raise InputError(
                "DiscreteModel.residual_jacobian is the residual's Jacobian: it needs a model "
                "with a residual, got residual = None"
            )
        _expect("bound", self.bound, [nx, nu, npar], [nx])
        _expect("energy", self.energy, [nx, npar], [1])
        _expect("from_obs", self.from_obs, [self.nobs], [nx])
        _expect("to_obs", self.to_obs, [nx], [self.nobs])
        _expect("constraint", self.constraint, [nx], None)
        _expect("velocity_constraint", self.velocity_constraint, [nx], None)
        if self.bound_info is not None and not isinstance(self.bound_info, BoundInfo):
            raise InputError(
                "DiscreteModel.bound_info must be a BoundInfo record (or None), got "
                f"{type(self.bound_info).__name__}"
            )
        if (self.bound is None) != (self.bound_info is None):
            raise InputError(
                "DiscreteModel.bound and DiscreteModel.bound_info go together: a bound needs "
                "its record (BoundInfo(delta=..., level='step', horizon=None, method=..., "
                "calibrated_on=...)) and a record its bound, got "
                f"bound={'a function' if self.bound is not None else None} and "
                f"bound_info={self.bound_info!r:.200}"
            )
        if self.bound_info is not None and self.delta is None:
            object.__setattr__(self, "delta", self.bound_info.delta)
        if (self.bound is None) != (self.delta is None):
            raise InputError(
                "DiscreteModel.bound and DiscreteModel.delta go together: give both or neither, "
                f"got bound={'a function' if self.bound is not None else None} and "
                f"delta={self.delta!r}"
            )
        if self.delta is not None:
            delta = Probability(self.delta, "DiscreteModel.delta")
            object.__setattr__(self, "delta", float(delta))
            if self.delta != self.bound_info.delta:
                raise InputError(
                    f"DiscreteModel.delta = {self.delta!r} differs from its bound record's "
                    f"delta = {self.bound_info.delta!r}: give the same, or delta=None to take "
                    "the record's"
                )
        for name, size in (
            ("state_names", nx),
            ("input_names", nu),
            ("param_names", npar),
        ):
            names = getattr(self, name)
            if len(names) != size:
                raise InputError(f"DiscreteModel.{name} must have {size} entries, got {names!r}")
        p_default = np.asarray(self.p_default, dtype=np.float64).reshape(-1)
        if p_default.shape != (npar,):
            raise InputError(
                f"DiscreteModel.p_default must have shape ({npar},), got {p_default.shape}"
            )
        if not np.all(np.isfinite(p_default)):
            raise InputError(f"DiscreteModel.p_default must be finite, got {p_default.tolist()}")
        object.__setattr__(self, "p_default", p_default)
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))
        for name in FUNCTION_FIELDS:
            fn = getattr(self, name)
            if fn is None:
                continue
            default = self.p_default if ARGUMENTS[name][-1] == "p" else None
            if not _checked_with(fn, default):  # kept as it is when checked with this default
                fn = CheckedFunction(
                    ca.Function(fn), f"DiscreteModel.{name}", ARGUMENTS[name], default
                )
                object.__setattr__(self, name, fn)

    @property
    def implicit(self) -> bool:
        """True when the model carries the integrator's residual."""
        return self.residual is not None

    def step_many(self, X: Any, U: Any, P: Any = None) -> np.ndarray:
        """``step`` on many samples at once, rows = samples: ``X`` of shape ``(N, nx)``,
        ``U`` of shape ``(N, nu)`` (``(N,)`` when ``nu == 1``), ``P`` of shape ``(N, np)``,
        or one row ``(np,)`` for all, default ``p_default``; returns the ``(N, nx)`` next
        states. One call of CasADi's ``map`` of the step over the ``N`` columns (serial), so
        the same numbers as ``N`` calls of ``step``. Raises
        :class:`~vimpc.errors.InputError` naming an argument of another shape or not
        finite."""
        X = _array("DiscreteModel.step_many: X", X, None, "")
        if X.ndim != 2 or X.shape[1] != self.nx:
            raise InputError(
                f"DiscreteModel.step_many: X must have shape (N, {self.nx}) (one row of nx = "
                f"{self.nx} states per sample), got shape {X.shape}"
            )
        n = X.shape[0]
        U = _array("DiscreteModel.step_many: U", U, None, "")
        if U.ndim == 1 and self.nu == 1:
            U = U.reshape(-1, 1)
        if U.shape != (n, self.nu):
            raise InputError(
                f"DiscreteModel.step_many: U must have shape ({n}, {self.nu}) (one row of nu = "
                f"{self.nu} inputs per row of X), got shape {U.shape}"
            )
        if P is None:
            P = np.tile(self.p_default, (n, 1))
        else:
            P = _array("DiscreteModel.step_many: P", P, None, "")
            if P.ndim == 1 and P.shape == (self.np,):
                P = np.tile(P, (n, 1))
            if P.shape != (n, self.np):
                raise InputError(
                    f"DiscreteModel.step_many: P must have shape ({n}, {self.np}) or "
                    f"({self.np},) (parameters per row, or one row for all), got shape {P.shape}"
                )
        if n == 0:
            return np.zeros((0, self.nx))
        mapped = ca.Function(self.step).map(n)
        return np.asarray(mapped(X.T, U.T, P.T), dtype=np.float64).reshape(self.nx, n).T

    def simulate(self, x0: Any, inputs: Any, p: Any = None) -> np.ndarray:
        """Roll ``step`` forward from ``x0`` under ``inputs`` (shape ``(N, nu)``; ``(N,)``
        when ``nu == 1``); returns the ``(N + 1, nx)`` states. A numerical convenience for
        tests and plots. ``x0``, ``inputs`` and ``p`` must be finite numbers of those
        shapes (:class:`~vimpc.errors.InputError` names the one that is not)."""
        x0 = _array("DiscreteModel.simulate: x0", x0, (self.nx,), f"nx = {self.nx}")
        p = (
            self.p_default
            if p is None
            else _array("DiscreteModel.simulate: p", p, (self.np,), f"np = {self.np}")
        )
        u = _array("DiscreteModel.simulate: inputs", inputs, None, "")
        if u.ndim == 1 and self.nu == 1:
            u = u.reshape(-1, 1)
        if u.ndim != 2 or u.shape[1] != self.nu:
            raise InputError(
                f"DiscreteModel.simulate: inputs must have shape (N, {self.nu}) (one row of "
                f"nu = {self.nu} inputs per step), got shape {u.shape}"
            )
        step = ca.Function(self.step)  # checked once above, not at every step
        xs = np.empty((len(u) + 1, self.nx))
        xs[0] = x0
        for k, uk in enumerate(u):
            xs[k + 1] = np.asarray(step(xs[k], uk, p)).reshape(self.nx)
        return xs


def _array(name: str, value: Any, shape: tuple[int, ...] | None, what: str) -> np.ndarray:
    """``value`` as a finite float64 array (of ``shape``, where given), or an InputError."""
    if not isinstance(value, ca.DM) and np.iscomplexobj(value):
        raise InputError(
            f"{name} must be real numbers (float64), got dtype {np.asarray(value).dtype}: "
            f"{value!r:.80}"
        )
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        a = None
    if a is None or isinstance(value, (str, bytes)):
        raise InputError(f"{name} must be numeric, got {value!r:.80} ({type(value).__name__})")
    if shape is not None:
        if a.size == int(np.prod(shape)) and a.ndim <= 2:
            a = a.reshape(shape)
        else:
            raise InputError(f"{name} must have shape {shape} ({what}), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))[0]
        raise InputError(
            f"{name} must be finite, got {float(a[tuple(bad)])!r} at index {tuple(bad.tolist())}"
        )
    return a
