"""The ``[env.adapter]`` table read and checked: the catalog system, the observation and
action maps, the true limits and what the env's termination does (see
:mod:`vimpc_envs.adapter`). Nothing here needs the env; :class:`~vimpc_envs.adapter.ForeignPlant`
checks the maps against the env's spaces."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vimpc.errors import InputError
from vimpc.mechanics import MechanicalSystem

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
