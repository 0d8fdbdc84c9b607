"""Scenario files: one TOML file per experiment, validated completely on load.

The schema is declared once (:mod:`vimpc.scenario.schema`): :data:`SCHEMA` for the fixed
tables (its ``[controller]`` table is the controller's own declaration,
:data:`vimpc.mpc.options.SETTINGS`), :data:`MODEL_KEYS` plus the chosen model family's own declaration
(:meth:`vimpc.models.ModelFamily.all_settings`) for ``[model]``. From it follow the
reading (:mod:`vimpc.scenario.load`) and the checks (:mod:`vimpc.scenario.checks`, against
the env and model as :mod:`vimpc.scenario.specs` reads them), the typed, frozen records a
scenario is read into (:class:`Scenario`, :mod:`vimpc.scenario.records`, one record class
per table, generated from the declarations), the resolved configuration written next to
results (:func:`dump_toml`) and the tables of ``scenarios/README.md``
(:func:`schema_markdown`).
"""

from vimpc.scenario.load import load_scenario as load_scenario
from vimpc.scenario.load import parse_override as parse_override
from vimpc.scenario.load import read_toml as read_toml
from vimpc.scenario.records import Scenario as Scenario
from vimpc.scenario.records import as_scenario as as_scenario
from vimpc.scenario.schema import CIRCLE_KEYS as CIRCLE_KEYS
from vimpc.scenario.schema import MODEL_KEYS as MODEL_KEYS
from vimpc.scenario.schema import SCHEMA as SCHEMA
from vimpc.scenario.schema import dump_toml as dump_toml
from vimpc.scenario.schema import schema_markdown as schema_markdown
from vimpc.scenario.specs import EnvSpec as EnvSpec
from vimpc.scenario.specs import ModelSpec as ModelSpec
from vimpc.scenario.specs import build_family as build_family

__all__ = [
    "CIRCLE_KEYS",
    "MODEL_KEYS",
    "SCHEMA",
    "EnvSpec",
    "ModelSpec",
    "Scenario",
    "as_scenario",
    "build_family",
    "dump_toml",
    "load_scenario",
    "parse_override",
    "read_toml",
    "schema_markdown",
]
