"""The scenario schema, declared once as :class:`~vimpc._settings.Setting` tables, and what
follows from it without reading a file: the resolved configuration as TOML
(:func:`dump_toml`) and the tables of ``scenarios/README.md`` (:func:`schema_markdown`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, final

from vimpc._settings import (
    NONNEGATIVE,
    POSITIVE,
    REQUIRED,
    SEED,
    TYPE_NAMES,
    Acts,
    Rule,
    Setting,
    markdown_rows,
)
from vimpc.data.excitation import EXCITATION_KINDS
from vimpc.errors import ConfigError, VimpcError
from vimpc.mpc.options import SETTINGS as CONTROLLER_SETTINGS

INITIAL_STATES = ("env", "uniform", "halton")
#: where a conformal bound is calibrated (``data.calibration``)
CALIBRATIONS = ("heldout", "closed_loop")

#: the item kind of :class:`Entries` that names an entry of the env's observation
OBSERVATION: Any = "observation"
#: where the settings of a closed-loop calibration and of the success test act
CLOSED_LOOP = Acts("calibration", ("closed_loop",))
WITH_SUCCESS = Acts("success_index", (None,), unless=True)


@final
@dataclass(frozen=True)
class Entries:
    """A key that takes observation entries, or one value per entry, declared like a
    :class:`~vimpc._settings.Setting` (same ``default``, ``doc``, ``check``).

    ``kind`` is :data:`OBSERVATION` (an entry of the env's observation, by index or by the
    name the env gives it: ``2`` or ``"x"``; names become indices when the scenario is checked
    against its env), ``float`` or ``bool``. ``one`` allows a single item, ``array`` an array
    of them (``length`` fixes its length; an array standing for one item has at least one);
    ``rule`` is a condition on each number; ``acts`` as a setting's.
    """

    kind: Any
    default: Any
    doc: str
    one: bool = True
    array: bool = True
    length: int | None = None
    rule: Rule | None = None
    acts: tuple[Acts, ...] = ()

    def check(self, key: str, value: Any, error: type[VimpcError] = ConfigError) -> Any:
        """``value`` with each item checked (an index stays an int, a name a string; a number
        becomes a float), or ``error`` naming ``key``, the value and what was expected."""
        if value is None and self.default is None:
            return None
        if isinstance(value, list):
            if not self.array:
                raise error(f"{key} must be {self._one_words()}, got {value!r}")
            if self.length is not None and len(value) != self.length:
                raise error(f"{key} must have {self.length} entries, got {len(value)}: {value!r}")
            if self.one and not value:
                raise error(f"{key} must be {self._one_words()} or a non-empty array, got []")
            return [self._item(f"{key}[{i}]", item, error) for i, item in enumerate(value)]
        if not self.one:
            raise error(f"{key} must be an array of {self._plural()}, got {value!r}")
        return self._item(key, value, error)

    def _item(self, key: str, value: Any, error: type[VimpcError]) -> Any:
        if self.kind is OBSERVATION:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and value:
                return value
            raise error(
                f"{key} must be an observation index or name, got {value!r} "
                f"({type(value).__name__})"
            )
        return Setting(self.kind, REQUIRED, "", rule=self.rule).check(key, value, error)

    def _one_words(self) -> str:
        if self.kind is OBSERVATION:
            return "an observation index or name"
        if self.rule is not None:
            return self.rule.words(self.kind)
        return TYPE_NAMES[self.kind]

    def _plural(self) -> str:
        if self.kind is OBSERVATION:
            return "observation indices or names"
        words = self._one_words().split(" ", 1)[1]  # without the article
        return "true or false values" if self.kind is bool else words + "s"

    # -- documentation ----------------------------------------------------------------------
    def type_text(self) -> str:
        if self.kind is OBSERVATION:
            one, many = "index or name", "indices or names"
        elif self.kind is bool:
            one, many = "bool", "bools"
        else:
            one = self._one_words().split(" ", 1)[1]  # without the article
            many = self._plural()
        size = f" ({self.length})" if self.length is not None else ""
        if self.one and self.array:
            return f"{one}, or array of {many}"
        return f"array of {many}{size}" if self.array else one

    def default_text(self) -> str:
        return Setting(list, self.default, "").default_text()


# the fixed tables; [model] is MODEL_KEYS plus the chosen family's settings
SCHEMA: dict[str, dict[str, Any]] = {
    "scenario": {
        "name": Setting(
            str,
            None,
            "results folder name under `--out` (default: the file name): one folder of letters, "
            "digits, `-`, `_`, `.`",
        ),
        "description": Setting(str, "", "one line for `vimpc list`"),
    },
    "env": {
        "id": Setting(str, REQUIRED, "a registered id, e.g. `vimpc/CartPole-v0`"),
        "dt": Setting(
            float,
            None,
            "control step [s]; vimpc's envs: a multiple of the env's substep (1e-4 s), 0.01 "
            "when unset; a foreign env: its own step (`dt` of the env; given, it must agree)",
            rule=POSITIVE,
        ),
        "kwargs": Setting(
            dict,
            {},
            "constructor arguments of the env (`perturbation`, `friction`, `obs_noise`, "
            "`param_seed`, `params`, task options)",
        ),
        "adapter": Setting(
            dict,
            None,
            "for an env that is not vimpc's own (any gymnasium env with a Box action, MuJoCo "
            "included): the catalog `system` and its nominal `params` (and `friction`) the "
            "models are written from, the `observation` map to its `(q, v)`, the `action` map "
            "from its inputs, the true safety `limits`, `terminal` (see `vimpc_envs.adapter`)",
        ),
        "plant": Setting(
            str,
            "fixed",
            "the true plant of the episodes: `fixed` (the one of `env.kwargs.param_seed`, "
            "which the data come from) or `per_episode` (each episode's own draw within the "
            "perturbation, its `param_seed` derived from the episode's seed and recorded in "
            "its metrics; the data still come from the fixed plant)",
            choices=("fixed", "per_episode"),
        ),
    },
    "data": {
        "path": Setting(
            str,
            None,
            "a saved training dataset (`.npz` of `vimpc.data.Dataset`) instead of collecting one",
        ),
        "trajectories": Setting(
            int, 50, "training trajectories collected from the env's true system", rule=POSITIVE
        ),
        "steps": Setting(int, 40, "steps per trajectory (training and held-out)", rule=POSITIVE),
        "seed": Setting(int, 0, "reset seed of training trajectory i is `seed + i`", rule=SEED),
        "initial_state": Setting(
            str,
            "env",
            "where trajectories start: the env's reset distribution, or a box (`low`, `high`)",
            choices=INITIAL_STATES,
        ),
        "low": Setting(
            list, None, "lower corner of the initial-state box (per observation)", items=float
        ),
        "high": Setting(
            list, None, "upper corner of the initial-state box (per observation)", items=float
        ),
        "collection": Setting(
            str,
            "open_loop",
            "how trajectories are driven: `open_loop`, the excitation alone; "
            "`nominal_controller`, the scenario's controller on the nominal model (no "
            "tightening) with the excitation added to its input as a dither, from the env's "
            "reset (data gathered around a controller, as on a rig whose open-loop "
            "excitation would drive it into its end stops)",
            choices=("open_loop", "nominal_controller"),
        ),
        "excitation": Setting(
            str, "random_steps", "input applied while collecting", choices=tuple(EXCITATION_KINDS)
        ),
        "excitation_options": Setting(
            dict,
            {},
            "options of the excitation (`random_steps`: `low`, `high` default to the action "
            "bounds, `hold`; `chirp`: `amplitude` default to the action bound, `f0`, `f1`)",
        ),
        "obs_noise": Setting(
            float, None, "observation noise std of the data (default: the env's)", rule=NONNEGATIVE
        ),
        "heldout_path": Setting(str, None, "a saved held-out dataset instead of collecting one"),
        "heldout_trajectories": Setting(
            int,
            100,
            "held-out trajectories: the first half calibrates the bound, the rest validates "
            "(transitions of one trajectory are dependent: many short ones calibrate better)",
            rule=POSITIVE,
        ),
        "heldout_seed": Setting(
            int, 1_000_000, "reset seed of held-out trajectory i is `heldout_seed + i`", rule=SEED
        ),
        "calibration": Setting(
            str,
            "heldout",
            "where a conformal bound is calibrated: `heldout`, the first half of the held-out "
            "open-loop trajectories; `closed_loop`, `calibration_episodes` episodes of the "
            "scenario's own controller on the true system (as the episodes run: `episodes.steps`, "
            "the env's plants), its model's bound first calibrated per step on the held-out "
            "trajectories, so that the calibration transitions come from the states and inputs "
            "the controller visits",
            choices=CALIBRATIONS,
        ),
        "calibration_episodes": Setting(
            int,
            100,
            'closed-loop calibration episodes (`calibration = "closed_loop"`); a horizon-level '
            "bound is calibrated on every window of them (conformal risk control over the "
            "episodes)",
            rule=POSITIVE,
            acts=(CLOSED_LOOP,),
        ),
        "calibration_seed": Setting(
            int,
            2_000_000,
            "reset seed of closed-loop calibration episode i is `calibration_seed + i` (apart "
            'from the episodes\' seeds; with `env.plant = "per_episode"` each draws its own plant)',
            rule=SEED,
            acts=(CLOSED_LOOP,),
        ),
        "fits": Setting(
            int,
            1,
            "independent fits K: fit k collects its training and held-out data (and its "
            "closed-loop calibration episodes) with `seed`, `heldout_seed` (and "
            "`calibration_seed`) plus k * 10^7, fits and calibrates; episode i uses fit i mod K "
            "(recorded per episode) and the summary gives rates per fit and their spread",
            rule=POSITIVE,
        ),
    },
    # the controller's options are declared once, with the controller
    "controller": CONTROLLER_SETTINGS,
    "controller.cost": {
        "Q": Setting(
            list,
            REQUIRED,
            "diagonal weights on the observation error",
            items=float,
            rule=NONNEGATIVE,
        ),
        "R": Setting(
            list, REQUIRED, "diagonal weights on the input", items=float, rule=NONNEGATIVE
        ),
        "Q_terminal": Setting(
            list, None, "terminal weights (default `Q`)", items=float, rule=NONNEGATIVE
        ),
        "reference": Setting(list, None, "the observation to reach (default zeros)", items=float),
        "reference_from_env": Setting(
            bool, False, "use the env's `reference(t)` (a scalar fills `reference_index`)"
        ),
        "reference_index": Entries(
            OBSERVATION,
            0,
            "see `reference_from_env` (checked also when that is false)",
            array=False,
            acts=(Acts("reference_from_env", (True,)),),
        ),
        "periodic": Entries(
            OBSERVATION, [], "observation entries that are angles (error `2 sin(e/2)`)", one=False
        ),
        "R_rate": Setting(list, None, "weights on input changes", items=float, rule=NONNEGATIVE),
        "energy_weight": Setting(
            float,
            0.0,
            "weight of `(E(x) - E(reference))^2` with the model's energy (swing-up)",
            rule=NONNEGATIVE,
        ),
    },
    "controller.constraints": {
        "u_min": Setting(
            list,
            None,
            "input lower bounds within the env's action bounds (default: those bounds)",
            items=float,
            infinite="-inf",
        ),
        "u_max": Setting(
            list,
            None,
            "input upper bounds within the env's action bounds (default: those bounds)",
            items=float,
            infinite="inf",
        ),
        "obs_min": Setting(
            list,
            None,
            "observation lower bounds within the env's observation range (`-inf`: none)",
            items=float,
            infinite="-inf",
        ),
        "obs_max": Setting(
            list,
            None,
            "observation upper bounds within the env's observation range (`inf`: none)",
            items=float,
            infinite="inf",
        ),
        "soft_bounds": Setting(bool, False, "observation bounds with exact-penalty slacks"),
        "bound_weight": Setting(float, 1e3, "their penalty weight", rule=POSITIVE),
        "circles": Setting(
            list,
            [],
            "keep-out circles `{center, radius, indices, soft, weight}` on two observation "
            "entries (indices or names)",
        ),
    },
    "episodes": {
        "count": Setting(int, 1, "episodes; episode k uses seed `seed + k`", rule=POSITIVE),
        "steps": Setting(int, REQUIRED, "steps per episode", rule=POSITIVE),
        "seed": Setting(int, 0, "seed of the first episode", rule=SEED),
    },
    "metrics": {
        "success_index": Entries(
            OBSERVATION, None, "observation entry, or entries, of the success test"
        ),
        "success_target": Entries(
            float, None, "target value per entry (one number: the same for every entry)"
        ),
        "success_against_reference": Setting(
            bool, False, "compare with the controller's reference instead (tracking tasks)"
        ),
        "success_tolerance": Entries(
            float,
            0.1,
            "allowed distance from the target, per entry or one for all",
            rule=POSITIVE,
            acts=(WITH_SUCCESS,),
        ),
        "success_window": Setting(
            float,
            1.0,
            "success: every entry within tolerance over the last window [s]",
            rule=POSITIVE,
            acts=(WITH_SUCCESS,),
        ),
        "success_periodic": Entries(
            bool,
            False,
            "the entry is an angle (wrap the error), per entry or one for all",
            acts=(WITH_SUCCESS,),
        ),
    },
}

#: the keys of [model] every scenario has; the family's own settings come with it
MODEL_KEYS: dict[str, Setting] = {
    "family": Setting(str, "nominal", "the model family (see the tables below)"),
    "path": Setting(
        str,
        None,
        "a saved `.vimpc` model to use instead of building one (its recorded family settings "
        "must agree with this table's)",
    ),
    "params": Setting(dict, {}, "nominal parameter overrides of the system the family starts from"),
}

CIRCLE_KEYS: dict[str, Setting] = {
    "center": Setting(list, REQUIRED, "centre", items=float, length=2),
    "radius": Setting(float, REQUIRED, "radius", rule=POSITIVE),
    "indices": Entries(
        OBSERVATION, REQUIRED, "the two observation entries (indices or names)", one=False, length=2
    ),
    "soft": Setting(bool, True, "exact-penalty slack"),
    "weight": Setting(float, 1e3, "penalty weight", rule=POSITIVE),
}

TABLE_ORDER = ("scenario", "env", "data", "model", "controller", "episodes", "metrics")


def toml_value(v: Any) -> str:
    """``v`` (bool, number, str, list, table) as one inline TOML value that TOML reads back
    as ``v`` (``None`` entries of a table omitted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        items = (f"{_toml_key(k)} = {toml_value(x)}" for k, x in v.items() if x is not None)
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def dump_toml(cfg: Any) -> str:
    """A TOML text of a resolved configuration, a :class:`~vimpc.scenario.records.Scenario`
    or its dict (tables, scalars, arrays; ``None`` omitted)."""
    if not isinstance(cfg, dict):  # a Scenario record (records.py builds on this module)
        cfg = cfg.to_dict()
    value = toml_value
    lines: list[str] = []
    for name in TABLE_ORDER:
        table = cfg[name]
        subtables = ("cost", "constraints") if name == "controller" else ()
        lines.append(f"[{name}]")
        lines += [
            f"{k} = {value(v)}" for k, v in table.items() if k not in subtables and v is not None
        ]
        lines.append("")
        for sub in subtables:
            lines.append(f"[{name}.{sub}]")
            lines += [f"{k} = {value(v)}" for k, v in table[sub].items() if v is not None]
            lines.append("")
    return "\n".join(lines).strip() + "\n"


def schema_markdown() -> str:
    """The schema tables of ``scenarios/README.md``, made from the declarations."""
    from vimpc.models import FAMILIES, family

    header = ["| key | type | default | meaning |", "|---|---|---|---|"]
    out = ["### Every scenario", "", *header]
    for name in TABLE_ORDER:
        if name == "model":
            out += markdown_rows(MODEL_KEYS, "model.")
        elif name == "controller":
            out += markdown_rows(SCHEMA["controller"], "controller.")
            for sub in ("cost", "constraints"):
                out += markdown_rows(SCHEMA[f"controller.{sub}"], f"controller.{sub}.")
        else:
            out += markdown_rows(SCHEMA[name], f"{name}.")
    for fam in sorted(FAMILIES):
        cls = family(fam)
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        out += ["", f'### `model.family = "{fam}"`', "", doc, "", *header]
        out += markdown_rows(cls.all_settings(), "model.")
    return "\n".join(out) + "\n"
