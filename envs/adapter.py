"""Any gymnasium environment as a vimpc plant.

A foreign environment (a MuJoCo mechanism, a simulator of one's own, a robot behind a
gymnasium API) knows nothing of vimpc's models: its observation is whatever it chose, its
action is whatever its actuators take. A scenario declares, in ``[env.adapter]``, what vimpc
cannot know, and :class:`ForeignPlant` wraps the environment so that it looks like one of
vimpc's own (observation ``(q, v)`` of a catalog system, ``info["state"]``,
``info["safety_margin"]``, the control step ``dt``)::

    [env]
    id = "InvertedPendulum-v5"
    kwargs = { xml_file = "mujoco/cartpole.xml", frame_skip = 5 }

    [env.adapter]
    system = "CartPole"                       # the catalog system the nominal model is
    params = { mc = 1.0, m = 1.0, l = 0.5 }   # written from (its nominal parameters)
    friction = [0.0, 0.0]                     # nominal viscous friction (optional)
    observation = [0, 1, 2, 3]                # one map per entry of (q, v)
    action = { scale = [0.1] }                # env action = scale * u + offset
    limits = { obs_min = [-0.7, -inf, -inf, -inf], obs_max = [0.7, inf, inf, inf] }
    terminal = "continue"                     # what the env's "terminated" does

An observation map entry is an index (``2``); a table ``{ index = i, scale = s, offset =
o }`` (``scale * obs[i] + offset``; ``index`` and ``scale`` may be arrays for a sum of
entries, e.g. an absolute angle from two relative joint angles); or an angle from a cosine
and sine pair ``{ cos = i, sin = j, offset = o, scale = 1 or -1 }``, unwrapped along an
episode so the angle is continuous as in vimpc's own envs. Where a table cannot say it,
``observation = "module:function"`` names a function ``obs -> (q, v)`` and ``action =
"module:function"`` one ``u -> action`` (as gymnasium's entry points).

Data and episodes go through ``reset`` and ``step`` alone: nothing of the simulator's
internals is read or set, and the env's own noise, integrator and contact model are the
truth (the adapter adds nothing). ``info["state"]`` is the mapped observation: vimpc
cannot see a foreign env's noise-free state. An env that reports ``terminated`` or
``truncated`` ends the episode (``terminal = "end"``), or, with ``terminal = "continue"``
(for an env whose physics stay defined past its own task's end, as a MuJoCo env's do: the
stock ``InvertedPendulum-v5`` terminates when the pole leaves 0.2 rad of upright, which a
swing-up must), the episode goes on and ``info["env_terminated"]`` says from which step on
the env had called it over; either way it is recorded, never silently restarted.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from vimpc.errors import InputError
from vimpc.mechanics import MechanicalSystem

from ._base import KeepOutCircle, ObservationBound

#: the largest |cos^2 + sin^2 - 1| accepted on a reset for an angle from a cosine/sine pair
#: (an env's observation noise of up to about 1e-2 passes; entries that are no such pair,
#: say a position and a velocity, almost never do)
UNIT_CIRCLE_TOLERANCE = 0.05
#: resets made to check the observation map before any data are collected
CHECK_RESETS = 3
TERMINAL = ("end", "continue")
KEYS = ("system", "params", "friction", "observation", "action", "limits", "terminal")
LIMIT_KEYS = ("obs_min", "obs_max", "circles")
CIRCLE_KEYS = ("entries", "center", "radius")


def _error(key: str, message: str) -> InputError:
    return InputError(f"{key} {message}")


def entry_point(key: str, text: str) -> Callable[..., Any]:
    """The callable ``"module:function"`` names, or an InputError naming ``key``."""
    module, sep, name = text.partition(":")
    if not sep or not module or not name:
        raise _error(key, f"must be 'module:function' (as gymnasium's entry points), got {text!r}")
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise _error(key, f"= {text!r}: module {module!r} cannot be imported ({exc})") from None
    fn = found
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise _error(key, f"= {text!r}: {module!r} has no {name!r}")
    if not callable(fn):
        raise _error(key, f"= {text!r} is not callable")
    return fn


def _index(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise _error(key, f"must be an observation index (an int >= 0), got {value!r}")
    return int(value)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise _error(key, f"must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise _error(key, f"must be finite, got {value!r}")
    return x


@dataclass(frozen=True)
class EntryMap:
    """One entry of the model's observation from the env's: ``sum(scales * obs[indices]) +
    offset`` (``angle`` False), or ``scale * atan2(obs[sin], obs[cos]) + offset``, unwrapped
    (``angle`` True; ``indices = (cos, sin)``)."""

    indices: tuple[int, ...]
    scales: tuple[float, ...]
    offset: float
    angle: bool

    @classmethod
    def parse(cls, key: str, value: Any) -> EntryMap:
        if isinstance(value, Mapping):
            known = ("index", "cos", "sin", "scale", "offset")
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise _error(key, f"has unknown keys {unknown}; expected some of {list(known)}")
            offset = _number(f"{key}.offset", value.get("offset", 0.0))
            if "cos" in value or "sin" in value:
                if "index" in value:
                    raise _error(key, "gives both an index and a cos/sin pair; give one")
                if "cos" not in value or "sin" not in value:
                    raise _error(
                        key, f"needs both cos and sin indices for an angle, got {dict(value)}"
                    )
                scale = _number(f"{key}.scale", value.get("scale", 1.0))
                if scale not in (1.0, -1.0):
                    raise _error(
                        f"{key}.scale", f"of an angle must be 1 or -1 (a sign), got {scale}"
                    )
                pair = (_index(f"{key}.cos", value["cos"]), _index(f"{key}.sin", value["sin"]))
                if pair[0] == pair[1]:
                    raise _error(key, f"takes cos and sin from the same entry {pair[0]}")
                return cls(pair, (scale,), offset, True)
            if "index" not in value:
                raise _error(key, f"needs an index (or a cos/sin pair), got {dict(value)}")
            raw = value["index"]
            many = isinstance(raw, list)
            indices = [raw] if not many else raw
            if not indices:
                raise _error(f"{key}.index", "must not be empty")
            idx = tuple(_index(f"{key}.index", i) for i in indices)
            scale_raw = value.get("scale", [1.0] * len(idx) if many else 1.0)
            scales = scale_raw if isinstance(scale_raw, list) else [scale_raw]
            if len(scales) != len(idx):
                raise _error(
                    f"{key}.scale", f"must have one value per index ({len(idx)}), got {scale_raw!r}"
                )
            return cls(idx, tuple(_number(f"{key}.scale", s) for s in scales), offset, False)
        return cls((_index(key, value),), (1.0,), 0.0, False)

    def value(self, obs: np.ndarray, previous: float | None) -> float:
        if not self.angle:
            return float(np.dot(self.scales, obs[list(self.indices)])) + self.offset
        c, s = float(obs[self.indices[0]]), float(obs[self.indices[1]])
        theta = self.scales[0] * math.atan2(s, c) + self.offset
        if previous is None:
            return theta
        # the continuous angle: the step's change taken in (-pi, pi]
        return previous + math.remainder(theta - previous, 2.0 * math.pi)


@dataclass(frozen=True)
class ActionMap:
    """The env's action from the model's input: ``action[index] = scale * u + offset``,
    the other action entries held at ``hold``."""

    index: tuple[int, ...]
    scale: np.ndarray
    offset: np.ndarray
    hold: np.ndarray

    def action(self, u: np.ndarray) -> np.ndarray:
        a = self.hold.copy()
        a[list(self.index)] = self.scale * u + self.offset
        return a

    def input(self, action: np.ndarray) -> np.ndarray:
        """The model's input that gives ``action`` (the inverse map, for a clipped action)."""
        return (np.asarray(action, dtype=np.float64)[list(self.index)] - self.offset) / self.scale


@dataclass(frozen=True)
class AdapterSpec:
    """A checked ``[env.adapter]`` table (see the module docstring)."""

    system: MechanicalSystem
    observation: tuple[EntryMap, ...] | Callable[[np.ndarray], Any]
    action: dict[str, Any] | Callable[[np.ndarray], Any]
    limits: dict[str, Any]
    terminal: str
    table: dict[str, Any]

    @classmethod
    def parse(cls, table: Any, key: str = "env.adapter") -> AdapterSpec:
        """``table`` checked against everything it can be checked against without the env."""
        from vimpc.mechanics.catalog import SYSTEMS

        if not isinstance(table, Mapping):
            raise _error(key, f"must be a table, got {table!r}")
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise _error(key, f"has unknown keys {unknown}; expected some of {list(KEYS)}")
        for need in ("system", "observation"):
            if need not in table:
                raise _error(f"{key}.{need}", "is required for an env that is not vimpc's own")
        name = table["system"]
        if name not in SYSTEMS:
            raise _error(f"{key}.system", f"must be one of {sorted(SYSTEMS)}, got {name!r}")
        params = table.get("params", {})
        if not isinstance(params, Mapping):
            raise _error(f"{key}.params", f"must be a table of parameters, got {params!r}")
        try:
            system = SYSTEMS[name](**dict(params))
        except InputError as exc:
            raise _error(f"{key}.params", f"do not make a {name}: {exc}") from None
        except TypeError as exc:
            raise _error(f"{key}.params", f"do not make a {name}: {exc}") from None
        if table.get("friction") is not None:
            friction = table["friction"]
            if not isinstance(friction, list) or len(friction) != system.n_rates:
                raise _error(
                    f"{key}.friction",
                    f"must be {system.n_rates} viscous coefficients (one per rate of the "
                    f"{name}), got {friction!r}",
                )
            values = [_number(f"{key}.friction[{i}]", f) for i, f in enumerate(friction)]
            if any(v < 0 for v in values):
                raise _error(f"{key}.friction", f"must be >= 0, got {values}")
            system = system.with_params(friction=np.asarray(values))
        nobs = system.nq + system.nv
        names = _obs_names(system)
        raw = table["observation"]
        if isinstance(raw, str):
            observation: Any = entry_point(f"{key}.observation", raw)
        elif isinstance(raw, list):
            if len(raw) != nobs:
                raise _error(
                    f"{key}.observation",
                    f"must map each of the {nobs} entries of the {name}'s observation "
                    f"({', '.join(names)}), got {len(raw)} maps",
                )
            observation = tuple(
                EntryMap.parse(f"{key}.observation[{i}]", item) for i, item in enumerate(raw)
            )
        else:
            raise _error(
                f"{key}.observation",
                f"must be an array of {nobs} entry maps or 'module:function', got {raw!r}",
            )
        action = table.get("action", {})
        if isinstance(action, str):
            action = entry_point(f"{key}.action", action)
        elif isinstance(action, Mapping):
            unknown = sorted(set(action) - {"index", "scale", "offset", "hold"})
            if unknown:
                raise _error(
                    f"{key}.action",
                    f"has unknown keys {unknown}; expected index, scale, offset, hold",
                )
            for part in ("index", "scale", "offset"):
                if part in action and (
                    not isinstance(action[part], list) or len(action[part]) != system.nu
                ):
                    raise _error(
                        f"{key}.action.{part}",
                        f"must have one value per input of the {name} ({system.nu}: "
                        f"{', '.join(system.input_names)}), got {action[part]!r}",
                    )
            for i, s in enumerate(action.get("scale", [])):
                if _number(f"{key}.action.scale[{i}]", s) == 0.0:
                    raise _error(
                        f"{key}.action.scale[{i}]", "must not be 0 (the input would not act)"
                    )
            action = dict(action)
        else:
            raise _error(f"{key}.action", f"must be a table or 'module:function', got {action!r}")
        terminal = table.get("terminal", "end")
        if terminal not in TERMINAL:
            raise _error(f"{key}.terminal", f"must be one of {list(TERMINAL)}, got {terminal!r}")
        limits = _parse_limits(f"{key}.limits", table.get("limits", {}), names)
        return cls(system, observation, action, limits, terminal, dict(table))

    @property
    def obs_names(self) -> tuple[str, ...]:
        return _obs_names(self.system)


def _obs_names(system: MechanicalSystem) -> tuple[str, ...]:
    names = system.coordinate_names
    return (*names, *(f"{n}_dot" for n in names))


def _entry(key: str, value: Any, names: tuple[str, ...]) -> int:
    if isinstance(value, str):
        if value not in names:
            raise _error(key, f"= {value!r} is not an observation name ({', '.join(names)})")
        return names.index(value)
    index = _index(key, value)
    if index >= len(names):
        raise _error(
            key, f"= {index} is past the observation ({len(names)} entries: {', '.join(names)})"
        )
    return index


def _parse_limits(key: str, table: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise _error(key, f"must be a table, got {table!r}")
    unknown = sorted(set(table) - set(LIMIT_KEYS))
    if unknown:
        raise _error(key, f"has unknown keys {unknown}; expected some of {list(LIMIT_KEYS)}")
    n = len(names)
    out: dict[str, Any] = {}
    for part, default in (("obs_min", -math.inf), ("obs_max", math.inf)):
        values = table.get(part)
        if values is None:
            out[part] = [default] * n
            continue
        if not isinstance(values, list) or len(values) != n:
            raise _error(
                f"{key}.{part}", f"must have {n} entries ({', '.join(names)}), got {values!r}"
            )
        parsed = []
        for i, v in enumerate(values):
            if isinstance(v, str) and v in ("inf", "-inf", "+inf"):
                v = float(v)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise _error(f"{key}.{part}[{i}]", f"must be a number (or inf), got {v!r}")
            parsed.append(float(v))
        out[part] = parsed
    for i, (lo, hi) in enumerate(zip(out["obs_min"], out["obs_max"], strict=True)):
        if lo > hi:
            raise _error(f"{key}.obs_min[{i}]", f"= {lo} exceeds {key}.obs_max[{i}] = {hi}")
    circles = []
    for j, circle in enumerate(table.get("circles", [])):
        where = f"{key}.circles[{j}]"
        if not isinstance(circle, Mapping) or set(circle) != set(CIRCLE_KEYS):
            raise _error(where, f"must be a table of {list(CIRCLE_KEYS)}, got {circle!r}")
        entries = circle["entries"]
        center = circle["center"]
        if not isinstance(entries, list) or len(entries) != 2:
            raise _error(f"{where}.entries", f"must be two observation entries, got {entries!r}")
        if not isinstance(center, list) or len(center) != 2:
            raise _error(f"{where}.center", f"must be two numbers, got {center!r}")
        radius = _number(f"{where}.radius", circle["radius"])
        if radius <= 0:
            raise _error(f"{where}.radius", f"must be > 0, got {radius}")
        circles.append(
            {
                "indices": [
                    _entry(f"{where}.entries[{i}]", e, names) for i, e in enumerate(entries)
                ],
                "center": [_number(f"{where}.center[{i}]", c) for i, c in enumerate(center)],
                "radius": radius,
            }
        )
    out["circles"] = circles
    return out


class ForeignPlant(gymnasium.Env[np.ndarray, np.ndarray]):
    """A gymnasium environment ``env`` seen through an :class:`AdapterSpec`: observation
    ``(q, v)`` of ``spec.system``, input ``u`` of that system, the vimpc env interface
    (``dt``, ``info["state"]``, ``info["safety_margin"]``, ``nominal_system``,
    ``safety_limits``). Checks the maps against ``env``'s spaces and on ``CHECK_RESETS``
    resets before any data are collected: an :class:`InputError` names the key."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        env: gymnasium.Env,
        spec: AdapterSpec,
        dt: float | None,
        env_id: str = "",
        key: str = "env.adapter",
    ) -> None:
        self._env = env
        self.spec_ = spec
        self._key = key
        self._id = env_id or type(env.unwrapped).__name__
        system = spec.system
        self._nominal = system
        self._nq, self._nx = system.nq, system.nq + system.nv
        space = env.action_space
        if not isinstance(space, gymnasium.spaces.Box):
            raise InputError(
                f"env.id = {self._id!r} has the action space {space}, not a Box: vimpc's "
                "controllers give continuous inputs, so the env must take a Box action"
            )
        self._box_low = np.asarray(space.low, dtype=np.float64).reshape(-1)
        self._box_high = np.asarray(space.high, dtype=np.float64).reshape(-1)
        self._action_shape = space.shape
        self._action_dtype = space.dtype
        na = self._box_low.size
        self._action_map = self._build_action(spec.action, na)
        self._dt = self._check_dt(dt)
        obs_space = env.observation_space
        self._obs_size = (
            int(np.prod(obs_space.shape)) if getattr(obs_space, "shape", None) else None
        )
        if isinstance(spec.observation, tuple) and self._obs_size is not None:
            for i, m in enumerate(spec.observation):
                for j in m.indices:
                    if j >= self._obs_size:
                        raise InputError(
                            f"{key}.observation[{i}] indexes entry {j} of {self._id}'s "
                            f"observation, which has {self._obs_size} entries (0 to "
                            f"{self._obs_size - 1})"
                        )
        low, high = self._input_bounds()
        self.action_space = gymnasium.spaces.Box(low, high, dtype=np.float64)
        self.action_limit = tuple(float(max(-lo, hi)) for lo, hi in zip(low, high, strict=True))
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self._nx,), np.float64)
        self._limits = spec.limits
        self._bounds, self._circles = self._build_limits()
        from ._truth import constraint_residual_function

        self._residual_fn = constraint_residual_function(system)
        self._x: np.ndarray | None = None
        self._steps = 0
        self._terminated_at = -1
        self._check_resets()

    # -- checks -----------------------------------------------------------------------------
    def _build_action(self, action: Any, na: int) -> ActionMap | Callable:
        key, nu = f"{self._key}.action", self._nominal.nu
        if callable(action):
            return action
        index = tuple(int(i) for i in action.get("index", range(nu)))
        if len(index) != nu:
            raise InputError(
                f"{key}.index must name one env action entry per input of the model ({nu}), "
                f"got {list(index)}"
            )
        if nu > na and "index" not in action:
            raise InputError(
                f"{key}: the model has {nu} inputs ({', '.join(self._nominal.input_names)}) but "
                f"{self._id}'s action has {na} entries; the map cannot cover the inputs"
            )
        if na > nu and "index" not in action:
            raise InputError(
                f"{key}: {self._id}'s action has {na} entries but the model {nu} inputs; give "
                f"{key}.index (the action entry each input drives) and {key}.hold (the others)"
            )
        for i in index:
            if not 0 <= i < na:
                raise InputError(
                    f"{key}.index entry {i} is past {self._id}'s action ({na} entries)"
                )
        if len(set(index)) != len(index):
            raise InputError(f"{key}.index drives one action entry twice: {list(index)}")
        hold = np.asarray(action.get("hold", [0.0] * na), dtype=np.float64).reshape(-1)
        if hold.size != na:
            raise InputError(
                f"{key}.hold must have {na} entries (the env's action), got {hold.tolist()}"
            )
        scale = np.asarray(action.get("scale", [1.0] * nu), dtype=np.float64)
        offset = np.asarray(action.get("offset", [0.0] * nu), dtype=np.float64)
        return ActionMap(index, scale, offset, hold)

    def _check_dt(self, dt: float | None) -> float:
        own = getattr(self._env.unwrapped, "dt", None)
        if own is not None:
            own = float(own)
            if dt is not None and abs(dt - own) > 1e-9 * max(own, 1e-12):
                raise InputError(
                    f"env.dt = {dt} s is not the step of {self._id}, which advances {own:g} s per "
                    "step (a MuJoCo env: timestep x frame_skip); set env.dt to it or change the "
                    "env's step through env.kwargs"
                )
            return own
        if dt is None:
            raise InputError(
                f"{self._id} does not say its step (no dt attribute); give env.dt, the seconds "
                "one step of the env advances"
            )
        return float(dt)

    def _input_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        nu = self._nominal.nu
        m = self._action_map
        if not isinstance(m, ActionMap):
            return np.full(nu, -np.inf), np.full(nu, np.inf)
        idx = list(m.index)
        a = (self._box_low[idx] - m.offset) / m.scale
        b = (self._box_high[idx] - m.offset) / m.scale
        return np.minimum(a, b), np.maximum(a, b)

    def _check_resets(self) -> None:
        for seed in range(CHECK_RESETS):
            obs, _ = self._env.reset(seed=seed)
            flat = np.asarray(obs, dtype=np.float64).reshape(-1)
            if isinstance(self.spec_.observation, tuple):
                for i, m in enumerate(self.spec_.observation):
                    for j in m.indices:
                        if j >= flat.size:
                            raise InputError(
                                f"{self._key}.observation[{i}] indexes entry {j} of {self._id}'s "
                                f"observation, which has {flat.size} entries"
                            )
                    if m.angle:
                        c, s = flat[m.indices[0]], flat[m.indices[1]]
                        off = abs(c * c + s * s - 1.0)
                        if not off <= UNIT_CIRCLE_TOLERANCE:
                            raise InputError(
                                f"{self._key}.observation[{i}] takes an angle from entries "
                                f"{m.indices} of {self._id}'s observation as its cosine and "
                                f"sine, but on reset(seed={seed}) they are ({c:.6g}, {s:.6g}): "
                                f"cos^2 + sin^2 is off 1 by {off:.3g} (at most "
                                f"{UNIT_CIRCLE_TOLERANCE}); they are no cosine/sine pair"
                            )
            x = self._map(flat, None)
            if x.size != self._nx or not np.all(np.isfinite(x)):
                raise InputError(
                    f"{self._key}.observation maps {self._id}'s reset observation to "
                    f"{x.tolist()}; expected {self._nx} finite entries "
                    f"({', '.join(self.obs_names)})"
                )

    def _build_limits(self):
        names, units = self.obs_names, self._nominal.state_units
        lo, hi = self._limits["obs_min"], self._limits["obs_max"]
        bounds, row = [], 0
        for i in range(self._nx):
            n = int(math.isfinite(lo[i])) + int(math.isfinite(hi[i]))
            if n:
                bounds.append(
                    ObservationBound(
                        i, names[i], units[i], lo[i], hi[i], tuple(range(row, row + n))
                    )
                )
                row += n
        circles = []
        for c in self._limits["circles"]:
            a, b = c["indices"]
            circles.append(
                KeepOutCircle(
                    (a, b), (names[a], names[b]), units[a], tuple(c["center"]), c["radius"], (row,)
                )  # fmt: skip
            )
            row += 1
        return tuple(bounds), tuple(circles)

    # -- the maps ---------------------------------------------------------------------------
    def _map(self, obs: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
        m = self.spec_.observation
        if callable(m):
            return np.asarray(m(obs), dtype=np.float64).reshape(-1)
        return np.array(
            [e.value(obs, None if previous is None else previous[i]) for i, e in enumerate(m)]
        )

    def _env_action(self, u: np.ndarray) -> np.ndarray:
        m = self._action_map
        a = m.action(u) if isinstance(m, ActionMap) else np.asarray(m(u), dtype=np.float64)
        a = a.reshape(-1)
        if a.size != self._box_low.size:
            raise InputError(
                f"{self._key}.action gave {a.size} action entries for input {u.tolist()}; "
                f"{self._id} takes {self._box_low.size}"
            )
        return a

    # -- the vimpc env interface -----------------------------------------------------------
    @property
    def dt(self) -> float:
        """Control step [s]: the env's own."""
        return self._dt

    @property
    def nominal_system(self) -> MechanicalSystem:
        """The catalog system the scenario declares, at its nominal parameters."""
        return self._nominal

    @property
    def obs_names(self) -> tuple[str, ...]:
        return _obs_names(self._nominal)

    @property
    def draws_plants(self) -> bool:
        """A foreign env's plant is what it is: variants come from its own arguments."""
        return False

    @property
    def param_seed(self) -> int:
        return 0

    def set_plant(self, param_seed: int) -> None:
        raise InputError(
            f"{self._id} is a foreign env: vimpc cannot draw its plant; give plant variants "
            "through env.kwargs (e.g. another xml_file) and keep env.plant = 'fixed'"
        )

    @property
    def safety_limits(self) -> tuple[ObservationBound | KeepOutCircle, ...]:
        """The declared true safety limits (``env.adapter.limits``)."""
        return (*self._bounds, *self._circles)

    def safety_margin(self, obs: Any) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float64)
        parts = [limit.margin(x) for limit in self.safety_limits]
        return np.concatenate(parts) if parts else np.zeros(0)

    @property
    def time(self) -> float:
        return self._steps * self._dt

    @property
    def state(self) -> np.ndarray:
        """The mapped observation (a foreign env's noise-free state is not known)."""
        if self._x is None:
            raise InputError(f"{type(self).__name__}.state needs a state: call reset() first")
        return self._x.copy()

    @property
    def inner(self) -> gymnasium.Env:
        """The wrapped environment."""
        return self._env

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:
            raise InputError(
                f"{self._id} is a foreign env: its episodes start from its own reset, so "
                f"reset options {sorted(options)} cannot be given (start states come from "
                "env.kwargs, e.g. the env's reset noise; data.initial_state = 'env')"
            )
        obs, _ = self._env.reset(seed=seed)
        self._x = self._map(np.asarray(obs, dtype=np.float64).reshape(-1), None)
        self._steps = 0
        self._terminated_at = -1
        return self._x.copy(), self._info()

    def step(self, action: Any):
        if self._x is None:
            raise InputError(f"{type(self).__name__}.step needs a state: call reset() first")
        u = np.asarray(action, dtype=np.float64).reshape(-1)
        if u.size != self._nominal.nu or not np.all(np.isfinite(u)):
            raise InputError(
                f"action must be {self._nominal.nu} finite numbers "
                f"({', '.join(self._nominal.input_names)}), got {u.tolist()}"
            )
        a = self._env_action(u)
        applied_a = np.clip(a, self._box_low, self._box_high)
        clipped = bool(np.any(applied_a != a))
        m = self._action_map
        applied = m.input(applied_a) if isinstance(m, ActionMap) else u
        obs, reward, terminated, truncated, _ = self._env.step(
            applied_a.astype(self._action_dtype, copy=False).reshape(self._action_shape)
        )
        self._x = self._map(np.asarray(obs, dtype=np.float64).reshape(-1), self._x)
        self._steps += 1
        info = self._info()
        if (terminated or truncated) and self._terminated_at < 0:
            self._terminated_at = self._steps
        if self.spec_.terminal == "continue":
            info["env_terminated"] = self._terminated_at >= 0
            terminated = truncated = False
        info["applied_action"] = applied
        info["action_clipped"] = clipped
        return self._x.copy(), float(reward), bool(terminated), bool(truncated), info

    def _info(self) -> dict[str, Any]:
        margin = self.safety_margin(self._x)
        violation = max(0.0, -float(margin.min())) if margin.size else 0.0
        return {
            "state": self._x.copy(),
            "safety_margin": margin,
            "constraint_violation": violation,
            "constraint_residual": float(self._residual_fn(self._x)),
            "time": self.time,
        }

    def close(self) -> None:
        self._env.close()

    def metadata_for_dataset(self) -> dict[str, Any]:
        """What the dataset records of the plant: the foreign env and the declared maps."""
        return {
            "env_class": type(self._env.unwrapped).__name__,
            "foreign_env": self._id,
            "system": self._nominal.name,
            "nominal_params": {k: float(v) for k, v in self._nominal.params.items()},
            "friction": [float(c) for c in self._nominal.friction],
            "dt": self._dt,
            "adapter": _plain(self.spec_.table),
            "coordinate_names": list(self._nominal.coordinate_names),
            "input_names": list(self._nominal.input_names),
            "action_limit": list(self.action_limit),
            "truth": "the foreign env's own step (its integrator, noise and contacts)",
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
