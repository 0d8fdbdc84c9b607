"""Typed settings declared once: the scenario schema and every model family's settings.

A :class:`Setting` gives a key's type, default, allowed values and a one-line doc. From
that one declaration follow the validation of scenario files and of model-family keyword
arguments (unknown keys get a "did you mean", wrong types and values name the key, the
value and what was expected), the resolved configuration written next to results, and the
schema tables of ``scenarios/README.md``.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vimpc._probability import Probability
from vimpc.errors import ConfigError, VimpcError


class _Required:
    def __repr__(self) -> str:
        return "required"


#: The default of a setting that has none.
REQUIRED: Any = _Required()

TYPE_NAMES = {
    str: "a string",
    float: "a number",
    int: "an integer",
    bool: "true or false",
    list: "an array",
    dict: "a table",
}
_SHORT_TYPES = {
    str: "string",
    float: "number",
    int: "integer",
    bool: "bool",
    list: "array",
    dict: "table",
}


@dataclass(frozen=True)
class Rule:
    """A condition on a number, with the words that describe it: an ``adjective``
    ("positive": "a positive integer") or a ``phrase`` after the type ("in (0, 1)")."""

    test: Callable[[Any], bool]
    adjective: str = ""
    phrase: str = ""

    def words(self, kind: type) -> str:
        noun = {int: "integer", float: "number"}.get(kind, "value")
        if self.adjective:
            article = "an" if self.adjective[0] in "aeiou" else "a"
            return f"{article} {self.adjective} {noun}" + (f" {self.phrase}" if self.phrase else "")
        return f"{TYPE_NAMES.get(kind, 'a value')} {self.phrase}"


POSITIVE = Rule(lambda v: v > 0, adjective="positive")
NONNEGATIVE = Rule(lambda v: v >= 0, adjective="non-negative")
#: a ``delta``: the one rule of :class:`vimpc._probability.Probability`
PROBABILITY = Rule(Probability.holds, phrase="in (0, 1)")
#: The largest seed: numpy's legacy ``RandomState`` and many seeding APIs take seeds in
#: ``[0, 2**32 - 1]`` (gymnasium refuses negative ones), and results store seeds as
#: integers; a run's last seed (``seed + count - 1``) must stay within it too.
MAX_SEED = 2**32 - 1
SEED = Rule(lambda v: 0 <= v <= MAX_SEED, phrase=f"in [0, {MAX_SEED}] (a seed)")
#: The most integrator substeps in one model step: a step runs them in a loop, about 12 us
#: each for the pendulum's midpoint rule (12 ms per step at 1000), and the controller
#: evaluates the step and its derivatives at every stage of every iteration; 10^9 substeps
#: hung the run without a word.
MAX_SUBSTEPS = 10_000
SUBSTEPS = Rule(
    lambda v: 1 <= v <= MAX_SUBSTEPS,
    adjective="positive",
    phrase=f"<= {MAX_SUBSTEPS} (vimpc._settings.MAX_SUBSTEPS)",
)


@dataclass(frozen=True)
class Acts:
    """Where a setting acts: while the setting ``key`` of the same table has one of
    ``values`` (with ``unless``, none of them). A setting given away from its default where
    one of its conditions fails would be ignored, and is refused by name
    (:func:`inactive`)."""

    key: str
    values: tuple[Any, ...]
    unless: bool = False

    def holds(self, table: Mapping[str, Any]) -> bool:
        return (table[self.key] in self.values) != self.unless

    def words(self, prefix: str) -> str:
        """``"to controller.solver = 'fatrop' or 'ipopt'"``, ``"where model.bound is not
        'none'"``, ``"where metrics.success_index is set"``."""
        key = prefix + self.key
        if self.unless and self.values == (None,):
            return f"where {key} is set"
        shown = " or ".join(_shown(v) for v in self.values)
        return f"where {key} is not {shown}" if self.unless else f"to {key} = {shown}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "not set" if value is None else repr(value)


def inactive(settings: Mapping[str, Any], table: Mapping[str, Any]) -> list[tuple[str, Acts]]:
    """The keys of ``table`` set away from their defaults whose declared condition
    (``acts``) fails there, each with the first condition that fails: settings that would
    be ignored."""
    out = []
    for key, setting in settings.items():
        if key not in table or table[key] == setting.default:
            continue
        failed = next((a for a in getattr(setting, "acts", ()) if not a.holds(table)), None)
        if failed is not None:
            out.append((key, failed))
    return out


def ignored_message(prefix: str, key: str, value: Any, acts: Acts, table: Mapping) -> str:
    """The one message for a setting that cannot act: its value, where it acts, what it
    would be ignored with and the two fixes."""
    shown = repr(value) if isinstance(value, str) else _shown(value)
    condition = prefix + acts.key
    fix = f"set {condition}" if acts.unless else f"set {acts.words(prefix)[3:]}"
    now = table[acts.key]
    now = f"{condition} not set" if now is None else f"{condition} = {_shown(now)}"
    return (
        f"{prefix}{key} = {shown} applies only {acts.words(prefix)}, and would be ignored "
        f"with {now}; remove {prefix}{key} or {fix}"
    )


@dataclass(frozen=True)
class Setting:
    """One key: its type, default, one-line doc and optional constraints.

    Args:
        kind: ``str``, ``int``, ``float``, ``bool``, ``list`` or ``dict``.
        default: the value when the key is absent; :data:`REQUIRED` if it must be given,
            ``None`` for "not set".
        doc: one line for the schema table.
        choices: allowed values of a string.
        rule: a condition on a number (or on each item of an array).
        items: the type of an array's items (``float`` items are finite numbers).
        length: the exact length of an array.
        infinite: the one infinity a ``float`` array accepts as "no bound": ``"inf"`` for
            upper bounds, ``"-inf"`` for lower bounds (the other one excludes every value).
        unset: for a key whose default is ``None``, the string that sets it back to not set
            (TOML has no null: a scenario's value overridden by ``--set``).
        acts: the conditions, on other settings of the same table, under which the setting
            acts at all (:class:`Acts`); elsewhere a value away from the default is refused.
    """

    kind: type
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    rule: Rule | None = None
    items: type | None = None
    length: int | None = None
    infinite: str = ""
    unset: str = ""
    acts: tuple[Acts, ...] = ()

    def check(self, key: str, value: Any, error: type[VimpcError] = ConfigError) -> Any:
        """``value`` converted (int to float where a number is expected), or ``error``
        naming ``key``, the value and what was expected."""
        if self.default is None and (value is None or (self.unset and value == self.unset)):
            return None
        value = _typed(key, value, self.kind, error)
        if self.choices and value not in self.choices:
            hint = difflib.get_close_matches(str(value), list(self.choices), n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise error(f"{key} must be one of {list(self.choices)}, got {value!r}{extra}")
        if self.kind is list:
            if self.length is not None and len(value) != self.length:
                raise error(f"{key} must have {self.length} entries, got {len(value)}: {value!r}")
            if self.items is not None:
                value = [self._item(f"{key}[{i}]", item, error) for i, item in enumerate(value)]
                if self.rule is not None:
                    for i, item in enumerate(value):
                        self._apply_rule(f"{key}[{i}]", item, error)
        elif self.rule is not None:
            self._apply_rule(key, value, error)
        return value

    def _item(self, key: str, item: Any, error: type[VimpcError]) -> Any:
        item = _typed(key, item, self.items, error, finite=not self.infinite)
        if self.items is float and math.isinf(item) and item != float(self.infinite):
            role = "an upper" if self.infinite == "inf" else "a lower"
            raise error(
                f"{key} = {item} excludes every value, so it can never be met: {role} bound "
                f"must be a finite number or {self.infinite} (no bound)"
            )
        return item

    def _apply_rule(self, key: str, value: Any, error: type[VimpcError]) -> None:
        if not self.rule.test(value):
            kind = self.items if self.kind is list else self.kind
            raise error(f"{key} must be {self.rule.words(kind)}, got {value!r}")

    # -- documentation ----------------------------------------------------------------------
    def type_text(self) -> str:
        if self.choices:
            return " \\| ".join(f"`{c!r}`".replace("'", '"') for c in self.choices)
        text = _SHORT_TYPES[self.kind]
        if self.kind is list and self.items is not None:
            text = f"array of {_SHORT_TYPES[self.items]}s"
        if self.length is not None:
            text += f" ({self.length})"
        if self.rule is not None:
            kind = self.items if self.kind is list else self.kind
            words = self.rule.words(kind).split(" ", 1)[1]  # without the article
            text = f"array of {words}s" if self.kind is list else words
            if self.length is not None:
                text += f" ({self.length})"
        if self.unset:
            text += f' or `"{self.unset}"` (not set)'
        return text

    def default_text(self) -> str:
        if self.default is REQUIRED:
            return "required"
        if self.default is None:
            return "not set"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, str):
            return f'`"{self.default}"`'
        if isinstance(self.default, (dict, list)) and not self.default:
            return "`{}`" if isinstance(self.default, dict) else "`[]`"
        return f"`{self.default!r}`"


def _typed(key: str, value: Any, kind: type, error: type[VimpcError], finite: bool = True) -> Any:
    if kind in (int, float) and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return kind(value)  # numpy integers too, stored as plain numbers
    if (kind is not bool and isinstance(value, bool)) or not isinstance(value, kind):
        raise error(f"{key} must be {TYPE_NAMES[kind]}, got {value!r} ({type(value).__name__})")
    if kind is float and (math.isnan(value) or (finite and math.isinf(value))):
        raise error(f"{key} must be a finite number, got {value!r}")
    return value


def unknown_key(where: str, key: str, allowed: Any, error: type[VimpcError] = ConfigError):
    """The error for ``key`` not among ``allowed``, with a "did you mean"."""
    hint = difflib.get_close_matches(key, list(allowed), n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    return error(f"unknown key {where + key!r}{extra} (expected one of {sorted(allowed)})")


def resolve(
    given: Mapping[str, Any],
    settings: Mapping[str, Setting],
    prefix: str = "",
    error: type[VimpcError] = ConfigError,
) -> dict[str, Any]:
    """Check ``given`` against ``settings`` and fill in the defaults.

    Keys are named ``prefix + key`` in messages (``"model.integrator"``).
    """
    for key in given:
        if key not in settings:
            raise unknown_key(prefix, key, settings, error)
    out: dict[str, Any] = {}
    for key, setting in settings.items():
        if key in given:
            out[key] = setting.check(prefix + key, given[key], error)
        elif setting.default is REQUIRED:
            raise error(f"missing required key {prefix + key!r} ({TYPE_NAMES[setting.kind]})")
        else:
            default = setting.default
            out[key] = default.copy() if isinstance(default, (dict, list)) else default
    return out


def markdown_rows(settings: Mapping[str, Setting], prefix: str) -> list[str]:
    """Rows ``| key | type | default | meaning |`` of a schema table."""
    return [
        f"| `{prefix}{key}` | {s.type_text()} | {s.default_text()} | {s.doc} |"
        for key, s in settings.items()
    ]
