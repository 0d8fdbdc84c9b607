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

import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import numpy as np

from vimpc.errors import InputError
from vimpc.mechanics import MechanicalSystem

from ._adapter_spec import (
    CHECK_RESETS,
    UNIT_CIRCLE_TOLERANCE,
    ActionMap,
    AdapterSpec,
    EntryMap,
    _obs_names,
)
from ._base import KeepOutCircle, ObservationBound

__all__ = ["ActionMap", "AdapterSpec", "EntryMap", "ForeignPlant"]


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
