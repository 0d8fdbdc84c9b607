"""Reading a scenario file: the TOML document, ``--set`` overrides merged into it, every
table resolved against the schema (unknown keys refused, defaults filled in, the model
family's own settings), then checked completely (:mod:`vimpc.scenario.checks`) before any
work."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from vimpc._settings import resolve, unknown_key
from vimpc.errors import ConfigError
from vimpc.scenario.checks import _check_name, check
from vimpc.scenario.records import Scenario
from vimpc.scenario.schema import MODEL_KEYS, SCHEMA, TABLE_ORDER


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` -> (``["a", "b"]``, value parsed as a TOML value, else a string)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key.sub=value, got {item!r}")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except ValueError as exc:  # TOML, but no value Python reads (an int of 5000 digits)
        shown = raw if len(raw) <= 60 else raw[:60] + "..."
        raise ConfigError(f"--set {key.strip()}={shown} cannot be read: {exc}") from None
    return key.strip().split("."), value


def read_toml(path: str | Path) -> dict[str, Any]:
    """The TOML document at ``path``, or a :class:`ConfigError` saying why it is none (no such
    file, a folder, unreadable, not UTF-8 text, not TOML). The document is not checked: a
    ``scenario`` that is not a table is refused by :func:`load_scenario`."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"scenario file {str(path)!r} is a folder, not a scenario file")
        if not path.is_file():
            raise ConfigError(f"scenario file {str(path)!r} does not exist")
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a scenario file: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except ValueError as exc:  # valid TOML Python cannot read (an int of 5000 digits)
        raise ConfigError(f"{path} cannot be read: {exc}") from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override (``key.sub=value`` strings) and validate a scenario file completely.

    Returns the resolved configuration as a :class:`~vimpc.scenario.records.Scenario`:
    every key with its value, defaults filled in (``to_dict()``: as a plain dict).
    A setting that cannot act in the configuration is refused by name (``Setting.acts``,
    one rule for every table), except a setting of the file that an override turned off:
    an override of ``controller.solver`` drops the file's options that only other solvers
    read (``warm_barrier`` for another solver than fatrop or ipopt, ``qpsol`` for fatrop,
    ...), and ``controller.tightening = "none"`` the tube's; such a setting given by an
    override itself is still refused. An override of ``model.family`` to another family
    drops the file's settings of its family but the bound's (the new family's defaults
    apply; the overrides give its own).
    """
    return Scenario.from_dict(resolved_dict(path, overrides))


def resolved_dict(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """The resolved and checked configuration of :func:`load_scenario` as the plain dict
    the records are made from (the TOML document read, overridden, resolved and checked)."""
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(
            f"overrides must be a list of 'key.sub=value' strings, got {overrides!r:.80}"
        )
    path = Path(path)
    raw = read_toml(path)
    _anchor_file_keys(raw, path.parent)
    file_model = raw.get("model", {})
    file_family = file_model.get("family") if isinstance(file_model, dict) else None
    overridden = set()
    for item in overrides:
        keys, value = parse_override(item)
        if ".".join(keys) in FILE_KEYS:  # a path typed on the command line: the working folder's
            value = _anchored(value, Path.cwd())
        table = raw
        for k in keys[:-1]:
            table = table.setdefault(k, {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {item!r}: {k!r} is not a table")
        table[keys[-1]] = value
        overridden.add(tuple(keys))
    _drop_other_family_settings(raw, file_family, overridden)
    cfg = _resolve_tables(raw)
    _drop_overridden_off(cfg, overridden)
    if cfg["scenario"]["name"] is None:
        cfg["scenario"]["name"] = path.stem
        _check_name(path.stem, f" (from the file name {path.name!r}; set scenario.name)")
    check(cfg)
    return cfg


#: keys that name a file: relative to the scenario (or sweep) file that gives them, to the
#: working folder on the command line; resolved to absolute paths, so a run's resolved
#: configuration names the file wherever it is read
FILE_KEYS = ("env.kwargs.xml_file",)


def _anchored(value: Any, folder: Path) -> Any:
    if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
        return str((folder / value).resolve())
    if isinstance(value, str) and value:
        return str(Path(value).expanduser())
    if isinstance(value, list):
        return [_anchored(v, folder) for v in value]
    return value


def anchor_paths(flat: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``flat`` (dotted keys) with each file key's relative path made absolute from ``folder``
    (a grid's list of paths, each)."""
    return {k: _anchored(v, folder) if k in FILE_KEYS else v for k, v in flat.items()}


def _anchor_file_keys(raw: dict[str, Any], folder: Path) -> None:
    for dotted in FILE_KEYS:
        *parents, last = dotted.split(".")
        table = raw
        for k in parents:
            table = table.get(k) if isinstance(table, dict) else None
        if isinstance(table, dict) and last in table:
            table[last] = _anchored(table[last], folder)


def _drop_other_family_settings(
    raw: dict[str, Any], file_family: Any, overridden: set[tuple[str, ...]]
) -> None:
    """After an override of ``model.family`` to another family than the file's, the file's
    settings of its own family are dropped (the new family starts from its defaults): the
    same name may mean another thing in another family (``hidden`` of ``hamel`` and of
    ``dlnn``), and most do not exist there. The model keys (``path``, ``params``), the bound's
    settings (the same calibration for every family) and the overrides' own settings stay."""
    from vimpc.models.base import BOUND_SETTINGS

    model = raw.get("model")
    if ("model", "family") not in overridden or not isinstance(model, dict):
        return
    if model.get("family") == file_family:
        return
    keep = {*MODEL_KEYS, *BOUND_SETTINGS}
    for key in list(model):
        if key not in keep and ("model", key) not in overridden:
            del model[key]


def _drop_overridden_off(cfg: dict[str, Any], overridden: set[tuple[str, ...]]) -> None:
    """The file's settings that an override of the setting their condition reads turned
    off (``Setting.acts``: the tube's options after ``controller.tightening = "none"``, a
    solver's after another ``controller.solver``) set back to their defaults, so the
    override is all it takes; a setting given by an override itself is still refused."""
    from vimpc.scenario.checks import ignored_settings

    changed = set(overridden)  # a setting set back may turn off others in turn
    while True:
        dropped = False
        for prefix, key, acts, table in ignored_settings(cfg):
            own = (*prefix.rstrip(".").split("."), key)
            cause = (*prefix.rstrip(".").split("."), acts.key)
            if own not in overridden and cause in changed:
                default = _default(prefix, key, cfg)
                table[key] = default.copy() if isinstance(default, (dict, list)) else default
                changed.add(own)
                dropped = True
        if not dropped:
            return


def _default(prefix: str, key: str, cfg: dict[str, Any]) -> Any:
    from vimpc.scenario.checks import setting_tables

    for p, settings, _ in setting_tables(cfg):
        if p == prefix:
            return settings[key].default
    raise KeyError(prefix + key)  # every prefix comes from setting_tables


def _resolve_tables(raw: dict[str, Any]) -> dict[str, Any]:
    for key in raw:
        if key not in TABLE_ORDER:
            raise unknown_key("", key, TABLE_ORDER)
    cfg: dict[str, Any] = {}
    for name in TABLE_ORDER:
        table = raw.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{name} must be a table, got {table!r}")
        if name == "model":
            cfg["model"] = _resolve_model(table)
        elif name == "controller":
            sub = {k: v for k, v in table.items() if k not in ("cost", "constraints")}
            cfg["controller"] = resolve(sub, SCHEMA["controller"], "controller.")
            for part in ("cost", "constraints"):
                inner = table.get(part, {})
                if not isinstance(inner, dict):
                    raise ConfigError(f"controller.{part} must be a table, got {inner!r}")
                cfg["controller"][part] = resolve(
                    inner, SCHEMA[f"controller.{part}"], f"controller.{part}."
                )
        else:
            cfg[name] = resolve(table, SCHEMA[name], f"{name}.")
    return cfg


def _resolve_model(table: dict[str, Any]) -> dict[str, Any]:
    from vimpc.models import family

    base = resolve({k: v for k, v in table.items() if k in MODEL_KEYS}, MODEL_KEYS, "model.")
    cls = family(base["family"])
    own = cls.all_settings()
    allowed = {**MODEL_KEYS, **own}
    rest = {k: v for k, v in table.items() if k not in MODEL_KEYS}
    for key in rest:
        if key not in allowed:
            raise unknown_key("model.", key, allowed)
    if base["path"] is not None and base["params"]:
        raise ConfigError(
            "model.params overrides the system a family is built from, so it has no effect on "
            "a saved model (model.path); remove one of them"
        )
    return {**base, **resolve(rest, own, "model.")}
