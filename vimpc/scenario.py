"""Scenario files: one TOML file per experiment, validated on load.

The schema (documented for users in ``scenarios/README.md``) is the table
:data:`SCHEMA`: each key has a type and a default (``REQUIRED`` when it has none).
Unknown keys get a "did you mean", wrong types and missing fields name the key,
the value and what was expected, all before any long work starts.
"""

from __future__ import annotations

import copy
import difflib
import math
import tomllib
from pathlib import Path
from typing import Any

from vimpc.errors import ConfigError

REQUIRED = object()

# key -> (expected type(s), default); nested dicts are sub-tables
SCHEMA: dict[str, Any] = {
    "scenario": {
        "name": (str, None),
        "description": (str, ""),
    },
    "env": {
        "id": (str, REQUIRED),
        "dt": (float, 0.01),
        "kwargs": (dict, {}),
    },
    "model": {
        "type": (str, "nominal"),
        "integrator": (str, "midpoint"),
        "form": (str, "position_momentum"),
        "substeps": (int, 1),
        "params": (dict, {}),
    },
    "controller": {
        "horizon": (int, REQUIRED),
        "solver": (str, "sqpmethod"),
        "transcription": (str, "implicit"),
        "qpsol": (str, "qrqp"),
        "hessian": (str, "gauss-newton"),
        "max_iter": (int, 30),
        "tol": (float, 1e-4),
        "time_budget": (float, None),
        "jit": (bool, False),
        "cost": {
            "Q": (list, REQUIRED),
            "R": (list, REQUIRED),
            "Q_terminal": (list, None),
            "reference": (list, None),
            "reference_from_env": (bool, False),
            "reference_index": (int, 0),
            "periodic": (list, []),
            "R_rate": (list, None),
            "energy_weight": (float, 0.0),
        },
        "constraints": {
            "u_min": (list, None),
            "u_max": (list, None),
            "obs_min": (list, None),
            "obs_max": (list, None),
            "soft_bounds": (bool, False),
            "bound_weight": (float, 1e3),
            "circles": (list, []),
        },
    },
    "episodes": {
        "count": (int, 1),
        "steps": (int, REQUIRED),
        "seed": (int, 0),
    },
    "metrics": {
        "success_index": (int, None),
        "success_target": (float, None),
        "success_against_reference": (bool, False),
        "success_tolerance": (float, 0.1),
        "success_window": (float, 1.0),
        "success_periodic": (bool, False),
    },
}

CIRCLE_KEYS = {"center": list, "radius": float, "indices": list, "soft": bool, "weight": float}

_TYPE_NAMES = {
    str: "a string",
    float: "a number",
    int: "an integer",
    bool: "true or false",
    list: "an array",
    dict: "a table",
}


def _fail_unknown(path: str, key: str, allowed) -> None:
    hint = difflib.get_close_matches(key, list(allowed), n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(
        f"unknown key {path + key!r} in the scenario{extra} (expected one of {sorted(allowed)})"
    )


def _check_type(path: str, value: Any, expected: type) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (expected is not bool and isinstance(value, bool)) or not isinstance(value, expected):
        raise ConfigError(
            f"{path} must be {_TYPE_NAMES[expected]}, got {value!r} ({type(value).__name__})"
        )
    if expected is float and not math.isfinite(value):
        raise ConfigError(f"{path} must be finite, got {value!r}")
    return value


def _resolve(table: dict[str, Any], schema: dict[str, Any], path: str) -> dict[str, Any]:
    for key in table:
        if key not in schema:
            _fail_unknown(path, key, schema)
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        where = path + key
        if isinstance(spec, dict):
            sub = table.get(key, {})
            if not isinstance(sub, dict):
                raise ConfigError(f"{where} must be a table, got {sub!r}")
            out[key] = _resolve(sub, spec, where + ".")
            continue
        expected, default = spec
        if key not in table:
            if default is REQUIRED:
                raise ConfigError(f"missing required key {where!r} ({_TYPE_NAMES[expected]})")
            out[key] = copy.deepcopy(default)
        else:
            out[key] = _check_type(where, table[key], expected)
    return out


def _check_values(cfg: dict[str, Any]) -> None:
    def positive(path: str, value, integer=False):
        if value is not None and value <= 0:
            kind = "a positive integer" if integer else "a positive number"
            raise ConfigError(f"{path} must be {kind}, got {value!r}")

    positive("env.dt", cfg["env"]["dt"])
    positive("model.substeps", cfg["model"]["substeps"], True)
    positive("controller.horizon", cfg["controller"]["horizon"], True)
    positive("controller.max_iter", cfg["controller"]["max_iter"], True)
    positive("controller.tol", cfg["controller"]["tol"])
    positive("controller.time_budget", cfg["controller"]["time_budget"])
    positive("episodes.count", cfg["episodes"]["count"], True)
    positive("episodes.steps", cfg["episodes"]["steps"], True)
    if cfg["model"]["type"] != "nominal":
        _fail_unknown("model.type = ", cfg["model"]["type"], ["nominal"])
    cons = cfg["controller"]["constraints"]
    for lo_key, hi_key in (("u_min", "u_max"), ("obs_min", "obs_max")):
        lo, hi = cons[lo_key], cons[hi_key]
        if lo is not None and hi is not None:
            if len(lo) != len(hi):
                raise ConfigError(
                    f"controller.constraints.{lo_key} and .{hi_key} must have the same length, "
                    f"got {len(lo)} and {len(hi)}"
                )
            for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
                if a > b:
                    raise ConfigError(
                        f"controller.constraints.{lo_key}[{i}] = {a} exceeds "
                        f"controller.constraints.{hi_key}[{i}] = {b}: infeasible bounds"
                    )
    for i, circle in enumerate(cons["circles"]):
        where = f"controller.constraints.circles[{i}]"
        if not isinstance(circle, dict):
            raise ConfigError(f"{where} must be a table, got {circle!r}")
        for key in circle:
            if key not in CIRCLE_KEYS:
                _fail_unknown(where + ".", key, CIRCLE_KEYS)
        for key in ("center", "radius", "indices"):
            if key not in circle:
                raise ConfigError(f"missing required key {where + '.' + key!r}")
        for key, expected in CIRCLE_KEYS.items():
            if key in circle:
                circle[key] = _check_type(f"{where}.{key}", circle[key], expected)
        positive(f"{where}.radius", circle["radius"])
    metrics = cfg["metrics"]
    has_target = metrics["success_target"] is not None or metrics["success_against_reference"]
    if (metrics["success_index"] is None) == has_target:
        raise ConfigError(
            "metrics.success_index goes with metrics.success_target or "
            "metrics.success_against_reference = true; set both or neither"
        )


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` -> (``["a", "b"]``, value parsed as a TOML value, else a string)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key.sub=value, got {item!r}")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def load_scenario(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """Read, override (``key.sub=value`` strings) and validate a scenario file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"scenario file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    for item in overrides:
        keys, value = parse_override(item)
        table = raw
        for k in keys[:-1]:
            table = table.setdefault(k, {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {item!r}: {k!r} is not a table")
        table[keys[-1]] = value
    cfg = _resolve(raw, SCHEMA, "")
    _check_values(cfg)
    if cfg["scenario"]["name"] is None:
        cfg["scenario"]["name"] = path.stem
    return cfg


def dump_toml(cfg: dict[str, Any]) -> str:
    """A TOML text of a resolved configuration (tables, scalars, arrays; ``None`` omitted)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items() if x is not None) + "}"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {
            k: v for k, v in d.items() if not isinstance(v, dict) or not _is_schema_table(prefix, k)
        }
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            if v is not None:
                lines.append(f"{k} = {value(v)}")
        lines.append("")
        for k, v in d.items():
            if isinstance(v, dict) and _is_schema_table(prefix, k):
                table(f"{prefix}.{k}" if prefix else k, v)

    table("", cfg)
    return "\n".join(lines).strip() + "\n"


def _is_schema_table(prefix: str, key: str) -> bool:
    node: Any = SCHEMA
    for part in [p for p in prefix.split(".") if p]:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return isinstance(node, dict) and isinstance(node.get(key), dict)


# -- wiring the pipeline -------------------------------------------------------------------


def build_env(cfg: dict[str, Any]):
    """The environment of a scenario (unwrapped, no time limit: episodes set the length)."""
    import gymnasium

    import vimpc  # noqa: F401  (registers the environment ids)

    env_cfg = cfg["env"]
    if env_cfg["id"] not in gymnasium.registry:
        ids = [k for k in gymnasium.registry if k.startswith("vimpc/")]
        hint = difflib.get_close_matches(env_cfg["id"], ids, n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(
            f"env.id {env_cfg['id']!r} is not a registered environment{extra} (vimpc ids: {ids})"
        )
    kwargs = dict(env_cfg["kwargs"])
    if "dt" in kwargs:
        raise ConfigError("set the control step as env.dt, not env.kwargs.dt")
    try:
        return gymnasium.make(env_cfg["id"], dt=env_cfg["dt"], **kwargs).unwrapped
    except TypeError as exc:
        raise ConfigError(f"env.kwargs do not fit {env_cfg['id']}: {exc}") from None


def build_model(cfg: dict[str, Any], env):
    """The scenario's :class:`DiscreteModel`; the nominal system is the env's with overrides."""
    from vimpc.models import NominalModel

    mcfg = cfg["model"]
    system = env.nominal_system
    if mcfg["params"]:
        system = system.with_params(**mcfg["params"])
    model = NominalModel(
        system,
        cfg["env"]["dt"],
        integrator=mcfg["integrator"],
        substeps=mcfg["substeps"],
        form=mcfg["form"],
    ).discrete_model()
    if abs(model.dt - env.dt) > 1e-12:
        raise ConfigError(f"the model's dt {model.dt} differs from the env's control step {env.dt}")
    return model


def build_controller(cfg: dict[str, Any], model, env):
    """The MPC of a scenario: costs and constraints on the observation."""
    import casadi as ca
    import numpy as np

    from vimpc.mpc import MPC, Constraints, Cost, EnergyShaping, PathConstraint

    ccfg = cfg["controller"]
    cost_cfg, cons_cfg = ccfg["cost"], ccfg["constraints"]
    obs = ca.SX.sym("obs", model.nobs)
    reference: Any = cost_cfg["reference"]
    if cost_cfg["reference_from_env"]:
        if not hasattr(env, "reference"):
            raise ConfigError(
                f"controller.cost.reference_from_env: {cfg['env']['id']} has no reference(t)"
            )
        base = (
            np.zeros(model.nobs)
            if cost_cfg["reference"] is None
            else np.asarray(cost_cfg["reference"], float)
        )
        index = cost_cfg["reference_index"]

        def reference(t, env=env, base=base, index=index):
            value = np.asarray(env.reference(t), dtype=float)
            if value.shape == (model.nobs,):
                return value
            out = base.copy()
            out[index] = float(value)  # a scalar reference fills one observation entry
            return out

    energy = None
    if cost_cfg["energy_weight"] > 0:
        if cost_cfg["reference"] is None:
            raise ConfigError(
                "controller.cost.energy_weight needs controller.cost.reference (its energy is the target)"
            )
        system = env.nominal_system
        nq = system.nq
        E = ca.Function("energy", [obs], [system.function("E")(obs[:nq], obs[nq:])])
        target = float(E(np.asarray(cost_cfg["reference"], dtype=float)))
        energy = EnergyShaping(E, target, cost_cfg["energy_weight"])
    cost = Cost(
        Q=cost_cfg["Q"],
        R=cost_cfg["R"],
        Q_terminal=cost_cfg["Q_terminal"],
        reference=reference,
        R_rate=cost_cfg["R_rate"],
        periodic=tuple(cost_cfg["periodic"]),
        energy=energy,
    )
    low, high = env.action_space.low, env.action_space.high
    circles = []
    for i, c in enumerate(cons_cfg["circles"]):
        ix, iy = c["indices"]
        (cx, cy), r = c["center"], c["radius"]
        h = ca.Function(f"circle{i}", [obs], [(obs[ix] - cx) ** 2 + (obs[iy] - cy) ** 2 - r**2])
        circles.append(
            PathConstraint(f"circle{i}", h, soft=c.get("soft", True), weight=c.get("weight", 1e3))
        )
    constraints = Constraints(
        u_min=low if cons_cfg["u_min"] is None else cons_cfg["u_min"],
        u_max=high if cons_cfg["u_max"] is None else cons_cfg["u_max"],
        obs_min=cons_cfg["obs_min"],
        obs_max=cons_cfg["obs_max"],
        soft_bounds=cons_cfg["soft_bounds"],
        bound_weight=cons_cfg["bound_weight"],
        path=tuple(circles),
    )
    return MPC(
        model,
        ccfg["horizon"],
        cost,
        constraints,
        solver=ccfg["solver"],
        transcription=ccfg["transcription"],
        qpsol=ccfg["qpsol"],
        hessian=ccfg["hessian"],
        max_iter=ccfg["max_iter"],
        tol=ccfg["tol"],
        time_budget=ccfg["time_budget"],
        jit=ccfg["jit"],
    )


def success_test(cfg: dict[str, Any]):
    """The scenario's success criterion on a trajectory, or None."""
    import numpy as np

    m = cfg["metrics"]
    if m["success_index"] is None:
        return None
    i, target, tol, window = (
        m["success_index"],
        m["success_target"],
        m["success_tolerance"],
        m["success_window"],
    )

    def success(traj) -> bool:
        recent = traj.t >= traj.t[-1] - window
        goal = traj.reference[recent, i] if m["success_against_reference"] else target
        tail = traj.states[recent, i] - goal
        if m["success_periodic"]:
            tail = np.angle(np.exp(1j * tail))
        return bool(np.all(np.abs(tail) <= tol))

    return success
