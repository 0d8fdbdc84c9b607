"""A :class:`~vimpc.dynamics.DiscreteModel` as a discrete ``do_mpc.model.Model``.

:func:`dompc_model` declares one do-mpc state ``_x`` per model state and one input ``_u``
per model input, under the model's names (``mpc.bounds["upper", "_x", "s"]`` and
``model.x["theta"]`` read as in any do-mpc model), and sets the right-hand side to the
model's ``step``: do-mpc's ``Model("discrete")`` reads it as ``x_next = rhs(x, u)``, so
do-mpc's MPC predicts and its ``Simulator`` steps with exactly vimpc's step (the same CasADi
function, called on do-mpc's symbols). Needs do-mpc (``pip install "do-mpc>=5.0"``, the
``bench`` extra), imported only when :func:`dompc_model` is called.

Parameters ``p`` (``parameters=``): ``"fixed"`` (default) puts the model's ``p_default`` into
the right-hand side as numbers, so do-mpc sees no parameter and asks for none; ``"dompc"``
declares each as a do-mpc parameter ``_p`` under its name (``param_names``), whose values do-mpc
then requires, ``mpc.set_uncertainty_values(...)`` and ``simulator.set_p_fun(...)`` (do-mpc's
robust multi-stage MPC can branch on them). A model without parameters is the same either way.

The bound as tightening (``tighten=``): limits ``{state name: (lower, upper)}`` on states of
the model (``inf`` for an open side), tightened by the model's ``bound`` along do-mpc's own
prediction. do-mpc's nonlinear constraints see one stage at a time (``x_k``, ``u_k``), so a
margin that accumulates over the horizon is carried as an extra do-mpc state per limited
state, named ``<name>_margin``, ``w`` below, which starts at 0 (:meth:`DompcModel.x0`) and
evolves with the model along the plan (``e_k = bound(x_k, u_k, p)``, entry ``i`` of the
limited state):

- ``margin = "sum"`` (default): ``w_{k+1} = w_k + e_k[i]``, the sum of the one-step bounds
  of that entry along the plan (the margin of ``docs/examples/casadi_only_mpc.py``);
- ``margin = "step"``: ``w_{k+1} = e_k[i]``, the one step's bound alone.

:meth:`DompcModel.constrain` then adds to do-mpc's MPC the constraints
``lower + w_{k+1} <= x_{k+1}[i] <= upper - w_{k+1}`` on every predicted state ``k + 1 = 1..N``
(written on the step of stage ``k``, as do-mpc evaluates nonlinear constraints at stages
``0..N-1``: the measured state, which no input can change, is not constrained, and the last
predicted state is), hard or, with ``soft=True``, do-mpc's soft constraints (a slack with a
linear penalty).

What the margin guarantees, and what not. The bound promises (``bound_info``): for a
transition from a true state, ``|x_true_next - step(x, u, p)| <= bound(x, u, p)`` in every
entry with probability at least ``1 - delta`` (per step, or for all steps of a horizon-level
bound's ``horizon`` at once). With ``"step"``, stage 1 is tightened by exactly that promise
from the measured state: the true next state keeps the limit with probability at least ``1 -
delta`` (up to measurement error the bound does not cover); the later stages get only the same
one-step margin. With ``"sum"``, stage ``k`` is tightened by the sum of the entry's one-step
bounds, evaluated along the plan: that is the whole error of that entry only where errors do
not propagate through the dynamics. The true error also grows by how an earlier error of any
entry moves this one (a cart's velocity error moves the cart), and each bound is evaluated at
the planned state rather than the true one, so the summed margin is a heuristic that grows
along the horizon, not a guarantee. A guaranteed first-order tube (the bound propagated
through the plan's linearisation under a feedback) is what vimpc's own controller computes
(``vimpc.mpc.MPC(..., tightening=...)``).

Imports only :mod:`vimpc.dynamics` (and :mod:`vimpc.errors`) of vimpc.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import casadi as ca
import numpy as np

from vimpc.dynamics import DiscreteModel
from vimpc.errors import InputError

#: How a limited state's margin evolves along the plan (module docstring).
MARGINS = ("sum", "step")
#: What becomes of the model's parameters ``p`` (module docstring).
PARAMETERS = ("fixed", "dompc")
#: do-mpc's symbol types; ``"auto"``: ``SX`` where the model's step can be called on ``SX``
#: symbols (scalar graphs, do-mpc's default and faster for small models), else ``MX``.
SYMVAR_TYPES = ("auto", "SX", "MX")
INSTALL = 'pip install "do-mpc>=5.0" (or pip install -e ".[bench]" from a checkout)'
#: The suffix of a margin state's name.
MARGIN_SUFFIX = "_margin"


def import_dompc() -> Any:
    """do-mpc, or an :class:`ImportError` with the command that installs it."""
    try:
        with warnings.catch_warnings():
            # do-mpc warns at import that its optional ONNX and OPC UA features are missing
            warnings.simplefilter("ignore", UserWarning)
            import do_mpc
    except ImportError as error:
        raise ImportError(f"the do-mpc adapter needs do-mpc: {INSTALL}") from error
    return do_mpc


class DompcModel:
    """A :class:`~vimpc.dynamics.DiscreteModel` as a discrete do-mpc model (made by
    :func:`dompc_model`; the module docstring says what is declared and how limits are
    tightened).

    Attributes:
        source: the :class:`~vimpc.dynamics.DiscreteModel`.
        model: the ``do_mpc.model.Model("discrete")``, set up: states ``state_names`` (then
            the margins), inputs ``input_names``, parameters ``param_names`` where
            ``parameters = "dompc"``.
        limits: the limits to tighten, ``{state name: (lower, upper)}``.
        margin: ``"sum"`` or ``"step"``.
        margin_names: the margin states, one per limit (``<name>_margin``), after the model's
            states in do-mpc's state vector.
        parameters: ``"fixed"`` or ``"dompc"``.
    """

    def __init__(
        self,
        source: DiscreteModel,
        model: Any,
        limits: dict[str, tuple[float, float]],
        margin: str,
        parameters: str,
    ) -> None:
        self.source = source
        self.model = model
        self.limits = dict(limits)
        self.margin = margin
        self.margin_names = tuple(name + MARGIN_SUFFIX for name in limits)
        self.parameters = parameters
        self._constrained: set[int] = set()

    @property
    def nx(self) -> int:
        """Size of do-mpc's state: the model's states and the margins."""
        return self.source.nx + len(self.limits)

    def x0(self, x: Any) -> np.ndarray:
        """do-mpc's state for the model state ``x`` (``nx`` numbers): ``x`` and zero margins,
        the value ``mpc.make_step`` and ``mpc.x0`` take."""
        nx = self.source.nx
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or a.size != nx or not np.all(np.isfinite(a)):
            raise InputError(
                f"DompcModel.x0: x must be the model's state, {nx} finite numbers "
                f"({', '.join(self.source.state_names)}), got {x!r:.80}"
            )
        return np.concatenate([a.reshape(nx), np.zeros(len(self.limits))])

    def constrain(
        self,
        mpc: Any,
        *,
        soft: bool = False,
        penalty: float = 1e4,
        maximum_violation: float = math.inf,
    ) -> None:
        """Add the tightened limits to do-mpc's ``mpc`` (built on :attr:`model`, before
        ``mpc.setup()``): ``x_{k+1}[i] + w_{k+1} <= upper`` and ``lower <= x_{k+1}[i] -
        w_{k+1}`` for every limit and predicted state (named ``<name>_upper`` /
        ``<name>_lower`` among do-mpc's nonlinear constraints; an infinite side adds none).
        ``soft=True`` makes them do-mpc's soft constraints, each slack costing ``penalty``
        per unit, at most ``maximum_violation``."""
        do_mpc = import_dompc()
        if not isinstance(mpc, do_mpc.controller.MPC):
            raise InputError(
                f"DompcModel.constrain: mpc must be a do_mpc.controller.MPC, got "
                f"{type(mpc).__name__}"
            )
        if mpc.model is not self.model:
            raise InputError(
                "DompcModel.constrain: mpc must be built on this adapter's model "
                "(do_mpc.controller.MPC(adapter.model)), got an MPC of another model"
            )
        if mpc.flags["setup"]:
            raise InputError(
                "DompcModel.constrain: mpc is already set up; call constrain(mpc) before "
                "mpc.setup()"
            )
        if id(mpc) in self._constrained:
            raise InputError("DompcModel.constrain: the limits are already added to this mpc")
        if not isinstance(soft, bool):
            raise InputError(f"DompcModel.constrain: soft must be True or False, got {soft!r}")
        for name, value in (("penalty", penalty), ("maximum_violation", maximum_violation)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InputError(
                    f"DompcModel.constrain: {name} must be a positive number, got {value!r}"
                )
        if not math.isfinite(penalty):
            raise InputError(f"DompcModel.constrain: penalty must be finite, got {penalty!r}")
        if not self.limits:
            raise InputError(
                "DompcModel.constrain: the adapter has no limits to tighten; give them to "
                "dompc_model(model, tighten={'s': (-0.7, 0.7)})"
            )
        x_next, w_next = self._next(self.model)
        names = list(self.source.state_names)
        options = {
            "soft_constraint": soft,
            "penalty_term_cons": float(penalty),
            "maximum_violation": float(maximum_violation),
        }
        for j, (name, (lower, upper)) in enumerate(self.limits.items()):
            y, w = x_next[names.index(name)], w_next[j]
            if math.isfinite(upper):
                mpc.set_nl_cons(f"{name}_upper", y + w, ub=float(upper), **options)
            if math.isfinite(lower):
                mpc.set_nl_cons(f"{name}_lower", -y + w, ub=float(-lower), **options)
        self._constrained.add(id(mpc))

    def _next(self, model: Any) -> tuple[Any, Any]:
        """The model's next state and the next margins as expressions of ``model``'s
        symbols (after set-up)."""
        x = ca.vertcat(*[model.x[n] for n in self.source.state_names])
        u = ca.vertcat(*[model.u[n] for n in self.source.input_names])
        w = [model.x[n] for n in self.margin_names]
        p = _parameters(self.source, model, self.parameters)
        return _step_and_margins(self.source, x, u, p, w, list(self.limits), self.margin)


def dompc_model(
    model: DiscreteModel,
    *,
    tighten: Mapping[str, tuple[float, float]] | None = None,
    margin: str = "sum",
    parameters: str = "fixed",
    symvar_type: str = "auto",
) -> DompcModel:
    """``model`` as a discrete do-mpc model, set up (module docstring).

    Args:
        model: a :class:`~vimpc.dynamics.DiscreteModel`.
        tighten: limits ``{state name: (lower, upper)}`` to tighten by the model's bound
            (``inf`` for an open side); needs a model with a ``bound``. ``None``: no limits,
            no margin states.
        margin: ``"sum"`` or ``"step"``, how the margin evolves along the plan.
        parameters: ``"fixed"`` (``p_default`` as numbers) or ``"dompc"`` (do-mpc
            parameters ``_p``).
        symvar_type: ``"auto"``, ``"SX"`` or ``"MX"``: do-mpc's symbol type.

    Returns:
        a :class:`DompcModel`; its ``model`` goes to ``do_mpc.controller.MPC`` and
        ``do_mpc.simulator.Simulator``.
    """
    if not isinstance(model, DiscreteModel):
        raise InputError(
            f"dompc_model: model must be a vimpc DiscreteModel (a family's discrete_model(), "
            f"or vimpc.load_model(path)), got {type(model).__name__}"
        )
    for name, value, choices in (
        ("margin", margin, MARGINS),
        ("parameters", parameters, PARAMETERS),
        ("symvar_type", symvar_type, SYMVAR_TYPES),
    ):
        if not isinstance(value, str) or value not in choices:
            raise InputError(f"dompc_model: {name} must be one of {choices}, got {value!r}")
    limits = _limits(model, tighten)
    if symvar_type == "auto":
        symvar_type = "SX" if _takes_sx(model) else "MX"
    do_mpc = import_dompc()
    m = do_mpc.model.Model("discrete", symvar_type=symvar_type)
    x = ca.vertcat(*[m.set_variable("_x", n) for n in model.state_names])
    w = [m.set_variable("_x", n + MARGIN_SUFFIX) for n in limits]
    u = ca.vertcat(*[m.set_variable("_u", n) for n in model.input_names])
    if parameters == "dompc" and model.np:
        p = ca.vertcat(*[m.set_variable("_p", n) for n in model.param_names])
    else:
        p = ca.DM(model.p_default.reshape(-1, 1))
    x_next, w_next = _step_and_margins(model, x, u, p, w, list(limits), margin)
    for i, name in enumerate(model.state_names):
        m.set_rhs(name, x_next[i])
    for j, name in enumerate(limits):
        m.set_rhs(name + MARGIN_SUFFIX, w_next[j])
    m.setup()
    return DompcModel(model, m, limits, margin, parameters)


def _step_and_margins(model, x, u, p, w, limited, margin):
    """``step(x, u, p)`` and the next margins of the limited states (module docstring)."""
    x_next = ca.Function(model.step)(x, u, p)
    if not limited:
        return x_next, []
    e = ca.Function(model.bound)(x, u, p)
    names = list(model.state_names)
    rows = [e[names.index(n)] for n in limited]
    if margin == "sum":
        return x_next, [w[j] + rows[j] for j in range(len(limited))]
    return x_next, rows


def _parameters(model: DiscreteModel, m: Any, parameters: str) -> Any:
    if parameters == "dompc" and model.np:
        return ca.vertcat(*[m.p[n] for n in model.param_names])
    return ca.DM(model.p_default.reshape(-1, 1))


def _takes_sx(model: DiscreteModel) -> bool:
    """True when the model's step (and bound) can be called on SX symbols."""
    x, u, p = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    try:
        ca.Function(model.step)(x, u, p)
        if model.bound is not None:
            ca.Function(model.bound)(x, u, p)
    except (NotImplementedError, RuntimeError):
        # a step with MX-only nodes (a Newton rootfinder, a called network): do-mpc's
        # symbols must then be MX, which is what returning False chooses
        return False
    return True


def _limits(model: DiscreteModel, tighten: Any) -> dict[str, tuple[float, float]]:
    """``tighten`` checked: state names to ``(lower, upper)`` floats."""
    if tighten is None:
        return {}
    if not isinstance(tighten, Mapping):
        raise InputError(
            "dompc_model: tighten must be a mapping {state name: (lower, upper)}, such as "
            f"{{'s': (-0.7, 0.7)}}, got {type(tighten).__name__}: {tighten!r:.80}"
        )
    if model.bound is None:
        raise InputError(
            "dompc_model: tighten needs a model with a bound (bound and bound_info; a family "
            "fitted with bound = 'conformal'), and this model has none; leave tighten = None "
            "and give do-mpc the limits as mpc.bounds"
        )
    names = model.state_names
    limits = {}
    for name, pair in tighten.items():
        if name not in names:
            raise InputError(
                f"dompc_model: tighten names states of the model, got {name!r}; its states are "
                f"{', '.join(names)}"
            )
        try:
            lower, upper = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise InputError(
                f"dompc_model: tighten[{name!r}] must be a pair (lower, upper) of numbers "
                f"(inf for an open side), got {pair!r:.80}"
            ) from None
        if math.isnan(lower) or math.isnan(upper) or not lower < upper:
            raise InputError(
                f"dompc_model: tighten[{name!r}] must have lower < upper, got ({lower!r}, "
                f"{upper!r})"
            )
        if math.isinf(lower) and math.isinf(upper):
            raise InputError(
                f"dompc_model: tighten[{name!r}] = ({lower!r}, {upper!r}) limits nothing; give "
                "at least one finite side"
            )
        limits[name] = (lower, upper)
    clash = sorted(
        n + MARGIN_SUFFIX
        for n in limits
        if n + MARGIN_SUFFIX in (*names, *model.input_names, *model.param_names)
    )
    if clash:
        raise InputError(
            f"dompc_model: the margin states {clash} would repeat names of the model's "
            "variables; rename those states of the model"
        )
    return limits
