"""The shared ground truth of vimpc's environments.

:class:`MechanicalEnv` turns a catalog system of :mod:`vimpc.mechanics` into a
gymnasium environment: the TRUE system is the catalog system with perturbed masses
and inertias and viscous friction (both drawn from ``param_seed``), integrated by
the midpoint variational integrator at a fine substep, and observed with
Gaussian noise. Subclasses add only the task (stage cost, safety margin, start
distribution), the spaces and the drawing.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium
import numpy as np

from vimpc import _checks
from vimpc.errors import InputError, SolverError
from vimpc.mechanics import MechanicalSystem

from . import _truth
from ._render import Renderer

# Tolerance on the constraint residual of a state given in ``reset(options=...)``.
STATE_TOLERANCE = 1e-8
# Largest integrator residual accepted after a step, on the residual weighed against its
# round-off level (which grows with |q| / substep; see _truth.RESIDUAL_RTOL): converged
# Newton solves end orders of magnitude below, anywhere in the observation space.
INTEGRATOR_TOLERANCE = _truth.RESIDUAL_ABSTOL


def _number(x: float) -> str:
    return f"{x:g}"


def _with_unit(text: str, unit: str) -> str:
    return f"{text} {unit}" if unit else text


@dataclass(frozen=True)
class ObservationBound:
    """A true safety limit ``lower <= obs[index] <= upper`` on one observation entry
    (``entry``, in ``unit``; an infinite end is absent). Its margins, ``upper - obs[index]``
    then ``obs[index] - lower`` for the finite ends, are the rows ``rows`` of the env's
    :meth:`~MechanicalEnv.safety_margin`."""

    index: int
    entry: str
    unit: str
    lower: float
    upper: float
    rows: tuple[int, ...]

    @property
    def name(self) -> str:
        """The limit as a person writes it, e.g. ``|theta_dot| <= 10 rad/s``."""
        lo, hi, x = self.lower, self.upper, self.entry
        if math.isfinite(lo) and math.isfinite(hi) and lo == -hi:
            text = f"|{x}| <= {_number(hi)}"
        elif math.isfinite(lo) and math.isfinite(hi):
            text = f"{_number(lo)} <= {x} <= {_number(hi)}"
        elif math.isfinite(hi):
            text = f"{x} <= {_number(hi)}"
        else:
            text = f"{x} >= {_number(lo)}"
        return _with_unit(text, self.unit)

    def margin(self, obs: Any) -> np.ndarray:
        """The limit's margins at ``obs`` (``>= 0`` inside), in the order of ``rows``."""
        x = float(obs[self.index])
        ends = [(self.upper, self.upper - x), (self.lower, x - self.lower)]
        return np.array([m for end, m in ends if math.isfinite(end)])


@dataclass(frozen=True)
class KeepOutCircle:
    """A true safety limit: the point ``(obs[indices[0]], obs[indices[1]])`` (entries
    ``entries``, in ``unit``) stays at least ``radius`` from ``center``. Its margin
    ``|point - center| - radius`` is the row ``rows[0]`` of the env's
    :meth:`~MechanicalEnv.safety_margin`."""

    indices: tuple[int, int]
    entries: tuple[str, str]
    unit: str
    center: tuple[float, float]
    radius: float
    rows: tuple[int, ...]

    @property
    def name(self) -> str:
        """The limit as a person writes it, e.g. ``|(x, y) - (1, 0)| >= 0.3 m``."""
        point = ", ".join(self.entries)
        centre = ", ".join(_number(c) for c in self.center)
        return _with_unit(f"|({point}) - ({centre})| >= {_number(self.radius)}", self.unit)

    def margin(self, obs: Any) -> np.ndarray:
        """The limit's margin at ``obs`` (``>= 0`` outside the circle)."""
        i, j = self.indices
        dx, dy = float(obs[i]) - self.center[0], float(obs[j]) - self.center[1]
        return np.array([math.hypot(dx, dy) - self.radius])


class MechanicalEnv(gymnasium.Env[np.ndarray, np.ndarray], abc.ABC):
    """Abstract gymnasium environment whose ground truth is a :class:`MechanicalSystem`.

    Subclasses declare ``system_type`` (the catalog class), ``friction_max`` (upper
    ends of the uniform friction draws, one per dissipation rate, named in
    ``friction_rates``), ``action_limit`` (symmetric bounds of the Box action space,
    physical units), ``observation_limit`` (symmetric bounds of each ``(q, v)``
    entry), the task methods :meth:`stage_cost`, :meth:`safety_margin`,
    :meth:`_sample_state` and the drawing (:meth:`_view`, :meth:`_decorate`), and
    :attr:`safety_limits`: the true limits behind the safety margin, for plots and
    summaries.

    Observation ``(q, v)`` plus ``N(0, obs_noise^2)`` noise on every entry; the
    reward of a step is ``-stage_cost(x_next, u, t_next)`` on the noise-free state
    after the step. Actions outside the Box are clipped (reported in ``info``).
    The environment never terminates or truncates by itself.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 100}

    system_type: ClassVar[type[MechanicalSystem]]
    friction_max: ClassVar[tuple[float, ...]]
    friction_rates: ClassVar[tuple[str, ...]]
    action_limit: ClassVar[tuple[float, ...]]
    observation_limit: ClassVar[tuple[float, ...]]

    def __init__(
        self,
        *,
        dt: float = 0.01,
        substep: float = 1e-4,
        perturbation: float = 0.1,
        friction: Any = None,
        obs_noise: float = 1e-3,
        param_seed: int = 0,
        params: Mapping[str, float] | None = None,
        jit: bool = True,
        render_mode: str | None = None,
    ) -> None:
        # Every argument is checked before the integrator is built.
        self._substeps = _checks.steps_per("dt", dt, substep)
        self._dt = float(dt)
        self._substep = float(substep)
        self._perturbation = _checks.nonnegative("perturbation", perturbation)
        if self._perturbation >= 1.0:
            raise InputError(
                f"perturbation must be in [0, 1) so masses stay positive, got {perturbation!r}"
            )
        self._obs_noise = _checks.nonnegative("obs_noise", obs_noise)
        self._param_seed = _seed(param_seed)
        if render_mode is not None:
            _checks.one_of("render_mode", render_mode, self.metadata["render_modes"])
        self.render_mode = render_mode
        self._params_override = self._check_params(params)
        if not isinstance(jit, (bool, np.bool_)):
            raise InputError(f"jit must be True or False, got {jit!r}")

        self._nominal = self.system_type(**self._params_override)
        self._friction_given = None
        if friction is not None:
            coefficients = _checks.finite_vector("friction", friction, self._nominal.n_rates)
            if np.any(coefficients < 0.0):
                raise InputError(
                    f"friction must be >= 0 (viscous coefficients, one per rate "
                    f"{self._rate_units()}), got {coefficients.tolist()}"
                )
            self._friction_given = coefficients
        self._jit = bool(jit)
        self._true = self._draw_plant(self._param_seed)

        system = self._true
        self._nq, self._nv = system.nq, system.nv
        self._nx = system.nq + system.nv
        limit = np.asarray(self.action_limit, dtype=np.float64)
        self.action_space = gymnasium.spaces.Box(-limit, limit, dtype=np.float64)
        bound = np.asarray(self.observation_limit, dtype=np.float64)
        self.observation_space = gymnasium.spaces.Box(-bound, bound, dtype=np.float64)
        self._action_low, self._action_high = -limit, limit.copy()
        self.metadata = {**type(self).metadata, "render_fps": 1.0 / self._dt}

        self._build_step(system)

        self._x: np.ndarray | None = None  # set by reset
        self._residual = 0.0
        self._steps = 0
        self._renderer = None

    # -- the plant ---------------------------------------------------------------------
    def _draw_plant(self, param_seed: int) -> MechanicalSystem:
        """The true system of ``param_seed``: masses and inertias within the perturbation,
        friction drawn (or the given one)."""
        rng = np.random.default_rng(param_seed)
        # perturbation first, so the masses do not depend on whether friction is given
        perturbed = self._nominal.perturbed(self._perturbation, rng)
        drawn = rng.uniform(0.0, np.asarray(self.friction_max, dtype=np.float64))
        coefficients = drawn if self._friction_given is None else self._friction_given
        return perturbed.with_params(friction=coefficients)

    def _build_step(self, system: MechanicalSystem) -> None:
        # One CasADi call per step: the flow over dt, the constraint residual after it and
        # the integrator's own residual (a Newton failure check that also holds compiled).
        self._step_fn, self._compiled = _truth.step_function(
            system, self._dt, self._substep, self._substeps, jit=self._jit
        )
        self._residual_fn = _truth.constraint_residual_function(system)

    @property
    def param_seed(self) -> int:
        """The seed the true system's perturbation and friction were drawn from."""
        return self._param_seed

    @property
    def draws_plants(self) -> bool:
        """Whether another ``param_seed`` gives another true system: a perturbation above 0,
        or friction drawn from a range above 0."""
        drawn = self._friction_given is None and any(f > 0 for f in self.friction_max)
        return self._perturbation > 0.0 or drawn

    def set_plant(self, param_seed: int) -> None:
        """Make the true system the one ``param_seed`` draws (within the same perturbation
        and friction ranges, or with the given friction), as if the env had been built with
        it; the state is cleared, so :meth:`reset` comes next. Used to draw the plant per
        episode."""
        self._param_seed = _seed(param_seed)
        self._true = self._draw_plant(self._param_seed)
        self._build_step(self._true)
        self._x = None

    # -- arguments ---------------------------------------------------------------------
    def _check_params(self, params: Mapping[str, float] | None) -> dict[str, float]:
        if params is None:
            return {}
        if not isinstance(params, Mapping):
            raise InputError(f"params must be a dict of parameter values, got {params!r}")
        cls = self.system_type
        _checks.known_keys("params", params, cls.defaults)
        checked = dict(params)
        for key in (*cls.inertial, *cls.lengths):
            if key in checked:
                checked[key] = _checks.positive(f"params[{key!r}]", checked[key])
        return checked

    def _rate_units(self) -> str:
        return "(" + ", ".join(self.friction_rates) + ")"

    # -- the ground truth ------------------------------------------------------------------
    @property
    def dt(self) -> float:
        """Control step [s]: one :meth:`step` advances the true system by ``dt``."""
        return self._dt

    @property
    def substep(self) -> float:
        """Integrator substep [s] of the ground truth."""
        return self._substep

    @property
    def compiled(self) -> bool:
        """Whether the step function runs as compiled C (``jit=True`` and a C compiler
        found); either way the numbers are the same."""
        return self._compiled

    @property
    def true_system(self) -> MechanicalSystem:
        """The simulated system: perturbed masses and inertias, drawn (or given) friction."""
        return self._true

    @property
    def nominal_system(self) -> MechanicalSystem:
        """The catalog system with the nominal parameters (defaults updated by
        ``params``), unperturbed and frictionless: what a nominal model believes."""
        return self._nominal

    # -- the task (subclasses) -------------------------------------------------------------
    @abc.abstractmethod
    def stage_cost(self, obs: Any, u: Any, t: float = 0.0) -> float:
        """Stage cost of observation ``obs = (q, v)`` and input ``u`` at time ``t`` [s]."""

    @abc.abstractmethod
    def safety_margin(self, obs: Any) -> np.ndarray:
        """Safety margins of ``obs``: a 1-D array, ``>= 0`` where the constraint holds."""

    @property
    def safety_limits(self) -> tuple[ObservationBound | KeepOutCircle, ...]:
        """The task's true safety limits, which :meth:`safety_margin` measures, each naming
        the rows of the margin that belong to it (none declared here)."""
        return ()

    def _bound(self, index: int, lower: float, upper: float, rows: tuple[int, ...]):
        """An :class:`ObservationBound` on observation entry ``index``, named and in units
        from the system's declarations."""
        return ObservationBound(
            index, self.obs_names[index], self._true.state_units[index], lower, upper, rows
        )

    @abc.abstractmethod
    def _sample_state(self) -> np.ndarray:
        """A random start state ``(q, v)`` on the constraints, drawn from ``self.np_random``."""

    def _on_reset(self) -> None:
        """Hook run after the start state is set (e.g. to anchor a reference)."""

    def _task_metadata(self) -> dict[str, Any]:
        """Task arguments recorded with datasets."""
        return {}

    # -- gymnasium API ---------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = {} if options is None else options
        if not isinstance(options, Mapping):
            raise InputError(f"options must be a dict or None, got {options!r}")
        _checks.known_keys("options", options, ("state",))
        if "state" in options:
            x = self._check_state(options["state"])
        else:
            x = np.asarray(self._sample_state(), dtype=np.float64)
        self._x = x
        self._residual = float(self._residual_fn(x))
        self._steps = 0
        self._on_reset()
        return self._observe(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._x is None:
            raise self._reset_needed("step")
        u = self._check_action(action)
        applied = np.minimum(np.maximum(u, self._action_low), self._action_high)
        clipped = bool(np.any(applied != u))
        try:
            x_next, residual, integrator_residual = self._step_fn(self._x, applied)
        except RuntimeError as error:
            if "KeyboardInterrupt" in str(error):  # a Ctrl-C that CasADi turned into an error
                raise KeyboardInterrupt from None
            raise self._newton_failure(applied) from error
        if not float(integrator_residual) <= INTEGRATOR_TOLERANCE:
            if np.isnan(float(integrator_residual)):
                raise self._nonfinite(applied, np.asarray(x_next).ravel())
            raise self._newton_failure(applied, float(integrator_residual))
        x_next = np.asarray(x_next).ravel()
        if not np.all(np.isfinite(x_next)):
            raise self._nonfinite(applied, x_next)
        self._x = x_next
        self._residual = float(residual)
        self._steps += 1
        cost = float(self.stage_cost(x_next, applied, self.time))
        info = self._info()
        info["applied_action"] = applied
        info["action_clipped"] = clipped
        info["stage_cost"] = cost
        return self._observe(), -cost, False, False, info

    def _newton_failure(self, applied: np.ndarray, residual: float | None = None) -> SolverError:
        detail = "" if residual is None else f" (largest residual {residual:.3e})"
        return SolverError(
            f"{type(self).__name__}: the Newton solve of the midpoint variational integrator "
            f"failed{detail} at t = {self.time:.6g} s from state {self._x.tolist()} with action "
            f"{applied.tolist()}: the iteration did not converge (its tolerance already grows "
            f"with the round-off of large coordinates, ~ |q| / substep); a smaller substep "
            f"(now {self._substep:g} s) starts it nearer the solution"
        )

    def _nonfinite(self, applied: np.ndarray, x_next: np.ndarray) -> SolverError:
        return SolverError(
            f"{type(self).__name__}: the true state became non-finite at t = "
            f"{self.time + self._dt:.6g} s (from state {self._x.tolist()} with action "
            f"{applied.tolist()}): {x_next.tolist()}"
        )

    @property
    def time(self) -> float:
        """Time since the last reset [s]."""
        return self._steps * self._dt

    @property
    def state(self) -> np.ndarray:
        """The noise-free true state ``(q, v)`` (a copy)."""
        if self._x is None:
            raise self._reset_needed("state")
        return self._x.copy()

    def _reset_needed(self, what: str) -> InputError:
        return InputError(f"{type(self).__name__}.{what} needs a state: call reset() first")

    def _observe(self) -> np.ndarray:
        noise = self.np_random.standard_normal(self._nx)
        return self._x + self._obs_noise * noise

    def _info(self) -> dict[str, Any]:
        margin = np.asarray(self.safety_margin(self._x), dtype=np.float64).reshape(-1)
        violation = max(0.0, -float(margin.min())) if margin.size else 0.0
        return {
            "state": self._x.copy(),
            "safety_margin": margin,
            "constraint_violation": violation,
            "constraint_residual": self._residual,
            "time": self.time,
        }

    def _check_action(self, action: Any) -> np.ndarray:
        expected = (
            f"expected shape {self.action_space.shape} with values in "
            f"[{self._action_low.tolist()}, {self._action_high.tolist()}] "
            f"{self._action_doc()} (values outside are clipped)"
        )
        try:
            u = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"action must be numeric, got {action!r}; {expected}") from None
        if u.shape != self.action_space.shape:
            raise InputError(f"action has the wrong shape {u.shape}, got {action!r}; {expected}")
        if not np.all(np.isfinite(u)):
            raise InputError(f"action must be finite (no NaN or inf), got {u.tolist()}; {expected}")
        return u

    @property
    def obs_names(self) -> tuple[str, ...]:
        """The observation's entries: the coordinates, then their velocities (``_dot``)."""
        names = self._true.coordinate_names
        return (*names, *(f"{n}_dot" for n in names))

    def _action_doc(self) -> str:
        return "(" + ", ".join(self._true.input_names) + ")"

    def _check_state(self, state: Any) -> np.ndarray:
        x = _checks.finite_vector("options['state']", state, self._nx)
        bound = self.observation_space.high
        outside = np.flatnonzero(np.abs(x) > bound)
        if outside.size:
            i = int(outside[0])
            raise InputError(
                f"options['state'] must lie inside the observation bounds: entry {i} "
                f"({self.obs_names[i]}) is {x[i]!r}, expected |value| <= {bound[i]:g}"
            )
        s = self._true
        q, v = x[: self._nq], x[self._nq :]
        checks = []
        if s.n_holonomic:
            checks.append(("holonomic residual ||g(q)||", s.holonomic(q)))
            checks.append(("velocity residual ||G(q) v||", s.holonomic_jacobian(q) @ v))
        if s.n_nonholonomic:
            checks.append(("nonholonomic residual ||A(q) v||", s.nonholonomic(q) @ v))
        for what, value in checks:
            norm = float(np.linalg.norm(value))
            if not norm <= STATE_TOLERANCE:
                raise InputError(
                    f"options['state'] must lie on the constraints: its {what} is {norm:.3e}, "
                    f"expected <= {STATE_TOLERANCE:g}; {self._consistent_state_hint()}"
                )
        return x.copy()

    def _consistent_state_hint(self) -> str:
        return "build the state from the system's consistent-state helper"

    # -- rendering -------------------------------------------------------------------------
    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gymnasium.logger.warn(
                f"{type(self).__name__}.render() needs render_mode='rgb_array' at construction"
            )
            return None
        if self._x is None:
            raise self._reset_needed("render()")
        if self._renderer is None:
            self._renderer = Renderer(*self._view())
        q = self._x[: self._nq]
        return self._renderer.draw(
            self._true.sketch(q),
            lambda ax: self._decorate(ax, self._x),
            caption=f"t = {self.time:.2f} s",
        )

    @abc.abstractmethod
    def _view(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """``(xlim, ylim)`` of the drawing, in metres."""

    def _decorate(self, ax: Any, state: np.ndarray) -> None:
        """Draw task elements (limits, references, obstacles) on a matplotlib Axes."""

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # -- provenance ------------------------------------------------------------------------
    def metadata_for_dataset(self) -> dict[str, Any]:
        """JSON-serialisable description of the ground truth, recorded with datasets."""
        return {
            "env_class": type(self).__name__,
            "system": self._true.name,
            "true_params": {k: float(v) for k, v in self._true.params.items()},
            "nominal_params": {k: float(v) for k, v in self._nominal.params.items()},
            "friction": [float(c) for c in self._true.friction],
            "friction_rates": list(self.friction_rates),
            "perturbation": self._perturbation,
            "param_seed": self._param_seed,
            "obs_noise": self._obs_noise,
            "dt": self._dt,
            "substep": self._substep,
            "integrator": "midpoint variational, position-momentum form",
            "coordinate_names": list(self._true.coordinate_names),
            "input_names": list(self._true.input_names),
            "action_limit": [float(a) for a in self.action_limit],
            "task": self._task_metadata(),
        }


def finite_number(name: str, value: Any) -> float:
    """Return ``value`` as a finite float or raise :class:`InputError` naming ``name``."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(x):
        raise InputError(f"{name} must be a finite number, got {value!r}")
    return x


def angle_cost(angle: float, target: float) -> float:
    """``2 (1 - cos(angle - target))``: ``(angle - target)^2`` near the target, smooth
    and periodic, so no wrapping of the continuous angle is needed."""
    return 2.0 * (1.0 - math.cos(angle - target))


def _seed(param_seed: Any) -> int:
    """``param_seed`` checked: a non-negative int."""
    if isinstance(param_seed, bool) or not isinstance(param_seed, (int, np.integer)):
        raise InputError(f"param_seed must be a non-negative int, got {param_seed!r}")
    if param_seed < 0:
        raise InputError(f"param_seed must be a non-negative int, got {param_seed!r}")
    return int(param_seed)
