"""A scenario as typed, frozen records, generated from the settings declared once.

Each table of the schema (:data:`vimpc.scenario.schema.SCHEMA`) is one frozen dataclass
whose fields are the table's settings, in their declared order: :class:`ScenarioSettings`
(``[scenario]``), :class:`EnvSettings`, :class:`DataSettings`, :class:`ControllerSettings`
(with :class:`CostSettings` and :class:`ConstraintsSettings`, whose ``circles`` are
:class:`CircleSettings`), :class:`EpisodesSettings` and :class:`MetricsSettings`.
:class:`ModelSettings` holds the keys every ``[model]`` has (:data:`MODEL_KEYS`) and the
chosen family's own settings as one read-only mapping, ``settings`` (the family decides
which there are); its attributes reach them too (``s.model.delta``). :class:`Scenario`
holds the tables: ``s.env.dt``, ``s.controller.cost.Q``.

Values are immutable: arrays are tuples, tables (``env.kwargs``, ``model.params``) read-only
mappings. :meth:`Scenario.to_dict` gives back the resolved configuration as plain lists and
dicts, exactly as the scenario file resolved (what :func:`~vimpc.scenario.dump_toml`, the
digests and the cache keys read). :meth:`Scenario.replace` (and each table's ``replace``)
makes a changed copy, each new value checked against its declaration.

``record[key]`` reads a record as the resolved dict reads (a table as its record, a value
as the plain list or dict :meth:`to_dict` gives), for code that has not moved to attribute
access yet; :func:`as_scenario` makes a record of a resolved configuration dict, once, where
such a dict still arrives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from vimpc._probability import Probability
from vimpc._settings import PROBABILITY, REQUIRED, TYPE_NAMES, unknown_key
from vimpc.errors import ConfigError
from vimpc.scenario.schema import CIRCLE_KEYS, MODEL_KEYS, SCHEMA, TABLE_ORDER


class FrozenMap(Mapping):
    """A read-only mapping (a free-form table of a scenario: ``env.kwargs``, ``model.params``,
    a model family's settings); it pickles, hashes and equals a dict of the same items."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] = ()) -> None:
        object.__setattr__(self, "_items", dict(items))

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"a FrozenMap is read-only: cannot set {name!r}")

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __reduce__(self):
        return (FrozenMap, (self._items,))

    def to_dict(self) -> dict[str, Any]:
        """The table as a plain dict (lists, dicts: a copy)."""
        return thaw(self)


def freeze(value: Any) -> Any:
    """``value`` with every list a tuple and every table a :class:`FrozenMap` (records and
    other values as they are)."""
    if isinstance(value, Record):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    return value


def typed(key: str, setting: Any, value: Any) -> Any:
    """``value`` of the setting ``key`` checked against its declaration (``setting.check``)
    and frozen; a ``delta`` (rule :data:`~vimpc._settings.PROBABILITY`) a
    :class:`~vimpc._probability.Probability`."""
    value = setting.check(key, thaw(value))
    if setting.rule is PROBABILITY and value is not None:
        return Probability(value, key)
    return freeze(value)


def thaw(value: Any) -> Any:
    """The plain form of a value of a record: tuples as lists, mappings as dicts, records as
    their :meth:`Record.to_dict` (a copy: changing it changes no record), a
    :class:`~vimpc._probability.Probability` as its float."""
    if isinstance(value, Probability):
        return float(value)
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


class Record:
    """Base of the scenario's records: frozen dataclasses of one table's settings.

    ``SETTINGS`` are the declarations the fields come from; ``PREFIX`` names the keys in
    messages (``"env."``); ``TABLES`` maps a field holding a sub-table to its record."""

    SETTINGS: ClassVar[Mapping[str, Any]] = {}
    PREFIX: ClassVar[str] = ""
    TABLES: ClassVar[Mapping[str, type[Record]]] = {}
    #: an array field whose items are tables, to the record of an item
    ITEMS: ClassVar[Mapping[str, type[Record]]] = {}

    # -- making records -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> Record:
        """The record of a resolved table: each value checked against its declaration,
        an absent key given its default (a required one refused), an unknown key refused
        with a "did you mean"."""
        if isinstance(table, cls):
            return table
        if not isinstance(table, Mapping):
            raise ConfigError(f"{cls.PREFIX.rstrip('.')} must be a table, got {table!r:.80}")
        return cls(**cls._values(table))

    @classmethod
    def _values(cls, table: Mapping[str, Any]) -> dict[str, Any]:
        allowed = {*cls.SETTINGS, *cls.TABLES}
        for key in table:
            if key not in allowed:
                raise unknown_key(cls.PREFIX, key, allowed)
        out: dict[str, Any] = {}
        for key, setting in cls.SETTINGS.items():
            if key in table:
                out[key] = cls._checked(key, table[key])
            elif setting.default is REQUIRED:
                raise ConfigError(
                    f"missing required key {cls.PREFIX + key!r} ({TYPE_NAMES[setting.kind]})"
                )
            else:
                out[key] = freeze(setting.default)
        for key, sub in cls.TABLES.items():
            out[key] = sub.from_dict(table.get(key, {}))
        return out

    @classmethod
    def _checked(cls, key: str, value: Any) -> Any:
        if key in cls.TABLES:
            return cls.TABLES[key].from_dict(value)
        if key in cls.ITEMS:
            value = cls.SETTINGS[key].check(cls.PREFIX + key, thaw(value))
            return tuple(cls.ITEMS[key].from_dict(item) for item in value)
        return typed(cls.PREFIX + key, cls.SETTINGS[key], value)

    def replace(self, **changes: Any) -> Record:
        """A copy with ``changes`` (each checked against its declaration; a sub-table given
        as its record, or as a mapping of the keys to change in it)."""
        new = {}
        for key, value in changes.items():
            if key in self.TABLES and isinstance(value, Mapping) and not isinstance(value, Record):
                new[key] = getattr(self, key).replace(**value)
            elif key in self.SETTINGS or key in self.TABLES:
                new[key] = self._checked(key, value)
            else:
                raise unknown_key(self.PREFIX, key, [*self.SETTINGS, *self.TABLES])
        return dataclasses.replace(self, **new)

    # -- reading records ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The table as a plain dict (lists, dicts), in its declared order: the resolved
        configuration the scenario file gave."""
        return {f.name: thaw(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str) -> Any:
        """The value of ``key`` as the resolved dict holds it (a sub-table as its record)."""
        if key not in self.keys():
            raise KeyError(key)
        value = getattr(self, key)
        return value if isinstance(value, Record) else thaw(value)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def items(self) -> list[tuple[str, Any]]:
        return [(key, self[key]) for key in self.keys()]


def _record(
    name: str,
    settings: Mapping[str, Any],
    prefix: str,
    doc: str,
    tables: Mapping[str, type[Record]] | None = None,
    items: Mapping[str, type[Record]] | None = None,
) -> type[Record]:
    """A frozen dataclass of ``settings`` (then ``tables``), one field per key in the declared
    order, under this module (so records pickle)."""
    fields = [(key, Any) for key in settings] + [(key, Record) for key in tables or {}]
    cls = dataclasses.make_dataclass(
        name,
        fields,
        bases=(Record,),
        frozen=True,
        namespace={
            "SETTINGS": settings,
            "PREFIX": prefix,
            "TABLES": dict(tables or {}),
            "ITEMS": dict(items or {}),
            "__doc__": doc,
        },
    )
    cls.__module__ = __name__
    return cls


def _doc(table: str) -> str:
    return f"The ``[{table}]`` table of a scenario: one field per setting, declared order."


ScenarioSettings = _record("ScenarioSettings", SCHEMA["scenario"], "scenario.", _doc("scenario"))
EnvSettings = _record("EnvSettings", SCHEMA["env"], "env.", _doc("env"))
DataSettings = _record("DataSettings", SCHEMA["data"], "data.", _doc("data"))
CostSettings = _record(
    "CostSettings", SCHEMA["controller.cost"], "controller.cost.", _doc("controller.cost")
)
CircleSettings = _record(
    "CircleSettings",
    CIRCLE_KEYS,
    "controller.constraints.circles[].",
    "A keep-out circle of ``controller.constraints.circles``.",
)
ConstraintsSettings = _record(
    "ConstraintsSettings",
    SCHEMA["controller.constraints"],
    "controller.constraints.",
    _doc("controller.constraints"),
    items={"circles": CircleSettings},
)
ControllerSettings = _record(
    "ControllerSettings",
    SCHEMA["controller"],
    "controller.",
    _doc("controller"),
    {"cost": CostSettings, "constraints": ConstraintsSettings},
)
EpisodesSettings = _record("EpisodesSettings", SCHEMA["episodes"], "episodes.", _doc("episodes"))
MetricsSettings = _record("MetricsSettings", SCHEMA["metrics"], "metrics.", _doc("metrics"))


@dataclasses.dataclass(frozen=True)
class ModelSettings(Record):
    """The ``[model]`` table: the keys of :data:`MODEL_KEYS` as fields, the family's own
    settings (:meth:`vimpc.models.ModelFamily.all_settings`, their declared order) as the
    read-only mapping ``settings``, each also an attribute (``model.bound``)."""

    family: str
    path: str | None
    params: Mapping[str, Any]
    settings: Mapping[str, Any]

    PREFIX: ClassVar[str] = "model."

    def __getattr__(self, name: str) -> Any:
        # only for what is not a field: the family's settings
        if name.startswith("_") or name == "settings":
            raise AttributeError(name)
        settings = self.__dict__.get("settings", {})
        if name in settings:
            return settings[name]
        raise AttributeError(
            f"{type(self).__name__} has no {name!r}: model.family = {self.family!r} declares "
            f"{sorted(settings)}"
        )

    @staticmethod
    def _declared(name: str) -> dict[str, Any]:
        from vimpc.models import family

        return family(name).all_settings()

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> ModelSettings:
        if isinstance(table, cls):
            return table
        if not isinstance(table, Mapping):
            raise ConfigError(f"model must be a table, got {table!r:.80}")
        family = MODEL_KEYS["family"].check("model.family", table.get("family", "nominal"))
        own = cls._declared(family)
        allowed = {**MODEL_KEYS, **own}
        for key in table:
            if key not in allowed:
                raise unknown_key("model.", key, allowed)
        values = {}
        for key, setting in allowed.items():
            if key in table:
                values[key] = typed("model." + key, setting, table[key])
            elif setting.default is REQUIRED:  # no family declares one today
                raise ConfigError(f"missing required key {'model.' + key!r}")
            else:
                values[key] = freeze(setting.default)
        base = {key: values.pop(key) for key in MODEL_KEYS}
        return cls(**base, settings=FrozenMap(values))

    def replace(self, **changes: Any) -> ModelSettings:
        """A copy with ``changes``: keys of :data:`MODEL_KEYS` or of the family's settings,
        each checked against its declaration (with another ``family``, a setting that family
        does not declare is refused)."""
        return ModelSettings.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "path": self.path,
            "params": thaw(self.params),
            **thaw(self.settings),
        }

    def keys(self) -> list[str]:
        return [*MODEL_KEYS, *self.settings]

    def __getitem__(self, key: str) -> Any:
        if key in MODEL_KEYS:
            return thaw(getattr(self, key))
        return thaw(self.settings[key])


@dataclasses.dataclass(frozen=True)
class Scenario(Record):
    """A resolved, checked scenario: one record per table (:data:`TABLE_ORDER`)."""

    scenario: ScenarioSettings
    env: EnvSettings
    data: DataSettings
    model: ModelSettings
    controller: ControllerSettings
    episodes: EpisodesSettings
    metrics: MetricsSettings

    TABLES: ClassVar[Mapping[str, type[Record]]] = {
        "scenario": ScenarioSettings,
        "env": EnvSettings,
        "data": DataSettings,
        "model": ModelSettings,
        "controller": ControllerSettings,
        "episodes": EpisodesSettings,
        "metrics": MetricsSettings,
    }

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> Scenario:
        """The record of a resolved configuration (every table; see :func:`as_scenario`)."""
        if isinstance(cfg, cls):
            return cfg
        if not isinstance(cfg, Mapping):
            raise ConfigError(
                f"a scenario must be a Scenario record or a resolved configuration mapping, "
                f"got {type(cfg).__name__}"
            )
        for key in cfg:
            if key not in TABLE_ORDER:
                raise unknown_key("", key, TABLE_ORDER)
        missing = [name for name in TABLE_ORDER if name not in cfg]
        if missing:
            raise ConfigError(
                f"a resolved configuration has every table {list(TABLE_ORDER)}; missing {missing}"
            )
        return cls(**{name: cls.TABLES[name].from_dict(cfg[name]) for name in TABLE_ORDER})

    def replace(self, **changes: Any) -> Scenario:
        """A copy with tables changed: each given as its record, or as a mapping of the
        keys to change (``s.replace(data={"seed": 3, "fits": 1})``)."""
        return super().replace(**changes)


def as_scenario(cfg: Scenario | Mapping[str, Any]) -> Scenario:
    """``cfg`` as a :class:`Scenario`: a record as it is, a resolved configuration dict
    (every table, as :func:`~vimpc.scenario.load_scenario` resolved it) made one."""
    return Scenario.from_dict(cfg)


def as_table(cfg: Scenario | Mapping[str, Any], name: str) -> Record:
    """Table ``name`` of ``cfg`` as its record: from a :class:`Scenario`, or from a mapping
    that holds that table (resolved; absent keys take their defaults)."""
    if isinstance(cfg, Scenario):
        return getattr(cfg, name)
    if not isinstance(cfg, Mapping) or name not in cfg:
        raise ConfigError(f"a configuration with a [{name}] table expected, got {cfg!r:.80}")
    return Scenario.TABLES[name].from_dict(cfg[name])
