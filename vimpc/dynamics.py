"""The one contract between models and controllers: :class:`DiscreteModel`.

Every model, analytic or learned, ends as a frozen record of CasADi functions.
The controller, the metrics and the export see nothing else. This module imports
nothing of vimpc; the ``.vimpc`` file format lives in :mod:`vimpc.model_file`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import casadi as ca
import numpy as np

#: The CasADi function fields of a DiscreteModel, in file order.
FUNCTION_FIELDS = (
    "step",
    "residual",
    "bound",
    "energy",
    "from_obs",
    "to_obs",
    "constraint",
    "velocity_constraint",
)


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
    got_in, got_out = _sizes(fn)
    if outs is None:
        outs = got_out[:1]
    if got_in != ins or got_out != outs:
        raise ValueError(
            f"DiscreteModel.{name} must map inputs of sizes {ins} to outputs of sizes {outs}, "
            f"got inputs {got_in} and outputs {got_out}"
        )


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
        bound, delta: ``bound(x, u, p) -> e`` and a probability ``delta`` in (0, 1): for a
            transition ``(x, u, x_next)`` of the system the model was calibrated on,
            ``abs(x_next - step(x, u, p)) <= e`` holds in every entry at once with
            probability at least ``1 - delta``. ``x`` and ``x_next`` are states as the
            model receives them (``from_obs`` of the measured observations), so the bound
            covers measurement noise too. Both ``None`` for a model without a bound.
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
    bound: ca.Function | None = None
    delta: float | None = None
    energy: ca.Function | None = None
    constraint: ca.Function | None = None
    velocity_constraint: ca.Function | None = None
    p_default: np.ndarray = field(default_factory=lambda: np.zeros(0))
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.dt, (int, float)) and self.dt > 0 and np.isfinite(self.dt)):
            raise ValueError(f"DiscreteModel.dt must be a positive finite float, got {self.dt!r}")
        for name in ("nx", "nu", "np", "nobs"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"DiscreteModel.{name} must be a non-negative int, got {value!r}")
        nx, nu, npar = self.nx, self.nu, self.np
        _expect("step", self.step, [nx, nu, npar], [nx])
        _expect("residual", self.residual, [nx, nu, nx, npar], [nx])
        _expect("bound", self.bound, [nx, nu, npar], [nx])
        _expect("energy", self.energy, [nx, npar], [1])
        _expect("from_obs", self.from_obs, [self.nobs], [nx])
        _expect("to_obs", self.to_obs, [nx], [self.nobs])
        _expect("constraint", self.constraint, [nx], None)
        _expect("velocity_constraint", self.velocity_constraint, [nx], None)
        if (self.bound is None) != (self.delta is None):
            raise ValueError(
                "DiscreteModel.bound and DiscreteModel.delta go together: give both or neither, "
                f"got bound={'a function' if self.bound is not None else None} and "
                f"delta={self.delta!r}"
            )
        if self.delta is not None:
            if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)):
                raise ValueError(
                    f"DiscreteModel.delta must be a number in (0, 1), got {self.delta!r}"
                )
            if not 0.0 < float(self.delta) < 1.0:
                raise ValueError(f"DiscreteModel.delta must be in (0, 1), got {self.delta!r}")
            object.__setattr__(self, "delta", float(self.delta))
        for name, size in (
            ("state_names", nx),
            ("input_names", nu),
            ("param_names", npar),
        ):
            names = getattr(self, name)
            if len(names) != size:
                raise ValueError(f"DiscreteModel.{name} must have {size} entries, got {names!r}")
        p_default = np.asarray(self.p_default, dtype=np.float64).reshape(-1)
        if p_default.shape != (npar,):
            raise ValueError(
                f"DiscreteModel.p_default must have shape ({npar},), got {p_default.shape}"
            )
        object.__setattr__(self, "p_default", p_default)
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    @property
    def implicit(self) -> bool:
        """True when the model carries the integrator's residual."""
        return self.residual is not None

    def simulate(self, x0: Any, inputs: Any, p: Any = None) -> np.ndarray:
        """Roll ``step`` forward from ``x0`` under ``inputs`` (shape ``(N, nu)``); returns
        the ``(N + 1, nx)`` states. A numerical convenience for tests and plots."""
        p = self.p_default if p is None else np.asarray(p, dtype=np.float64)
        inputs = np.asarray(inputs, dtype=np.float64).reshape(-1, self.nu)
        xs = np.empty((len(inputs) + 1, self.nx))
        xs[0] = np.asarray(x0, dtype=np.float64).reshape(self.nx)
        for k, u in enumerate(inputs):
            xs[k + 1] = np.asarray(self.step(xs[k], u, p)).reshape(self.nx)
        return xs
