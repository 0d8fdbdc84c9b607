"""The scenario's typed, frozen records: made from the declared settings, immutable, and
giving back exactly the resolved configuration the dict path gives (the TOML written next
to results, the cache keys); one Probability type for every delta."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pickle
from pathlib import Path

import pytest

from vimpc import __version__, pipeline, scenario
from vimpc._probability import Probability
from vimpc.dynamics import BoundInfo
from vimpc.errors import ConfigError, InputError
from vimpc.scenario.load import resolved_dict
from vimpc.scenario.records import (
    ControllerSettings,
    EnvSettings,
    FrozenMap,
    ModelSettings,
    Scenario,
    as_scenario,
    as_table,
)
from vimpc.scenario.schema import SCHEMA, TABLE_ORDER
from vimpc.scenario.specs import closed_loop_calibration

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))
PENDULUM = ROOT / "scenarios" / "pendulum_swingup.toml"


def _plain_types(value, path="cfg"):
    """Every value of a resolved dict is a plain TOML type: no tuple, no read-only map, no
    float subclass."""
    if isinstance(value, dict):
        assert type(value) is dict, path
        for k, v in value.items():
            _plain_types(v, f"{path}.{k}")
    elif isinstance(value, list):
        assert type(value) is list, path
        for i, v in enumerate(value):
            _plain_types(v, f"{path}[{i}]")
    else:
        assert type(value) in (str, int, float, bool, type(None)), (path, type(value))


def _cache_key_of_dict(cfg: dict) -> str:
    """The cache key as it was computed from the resolved dict before there were records
    (the reference the record's key must equal)."""
    data = dict(cfg["data"])
    data.pop("fits", None)
    if data.get("collection") == "open_loop":  # (and before data around a controller)
        del data["collection"]
    # (and before [env.adapter]: a vimpc env's key leaves its unset adapter out)
    env = {k: v for k, v in cfg["env"].items() if k != "plant" and (k, v) != ("adapter", None)}
    xml = env["kwargs"].get("xml_file")
    if xml is not None:  # a plant's MJCF by its contents
        digest = hashlib.sha256(Path(xml).read_bytes()).hexdigest()
        env["kwargs"] = {**env["kwargs"], "xml_file": None, "xml_file_sha256": digest}
    extra = {}
    if closed_loop_calibration(data):
        env["plant"] = cfg["env"]["plant"]
        extra = {
            "controller": cfg["controller"],
            "episode_steps": cfg["episodes"]["steps"],
            "closed_loop_code": pipeline.closed_loop_code_digest(),
        }
    else:
        for key in ("calibration", "calibration_episodes", "calibration_seed"):
            data.pop(key, None)
    for key in ("path", "heldout_path"):
        if data[key] is not None:
            data[key + "_sha256"] = hashlib.sha256(Path(data[key]).read_bytes()).hexdigest()
            data[key] = None
    payload = {
        "vimpc": __version__,
        "generation": pipeline.FIT_GENERATION,
        "env": env,
        "data": data,
        "model": cfg["model"],
        **extra,
    }
    if cfg["model"]["family"] in pipeline.FAMILY_GENERATION:
        payload["family_generation"] = pipeline.FAMILY_GENERATION[cfg["model"]["family"]]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def test_the_shipped_scenarios_are_there():
    assert len(SHIPPED) >= 10


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_scenario_gives_back_the_resolved_dict_exactly(path):
    """The record of every shipped scenario gives back the dict the dict path resolves, with
    the same types and order; the TOML written next to results and the cache key are
    byte-identical."""
    reference = resolved_dict(path)
    record = scenario.load_scenario(path)
    assert isinstance(record, Scenario)
    plain = record.to_dict()
    assert plain == reference
    assert repr(plain) == repr(reference)  # the same order, ints stay ints, lists stay lists
    _plain_types(plain)
    assert scenario.dump_toml(record) == scenario.dump_toml(reference)
    assert pipeline.cache_key(record) == _cache_key_of_dict(reference)
    assert pipeline.cache_key(reference) == pipeline.cache_key(record)
    assert as_scenario(reference) == record  # a resolved dict makes the same record
    assert as_scenario(record) is record


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_record_pickles(path):
    record = scenario.load_scenario(path)
    back = pickle.loads(pickle.dumps(record))
    assert back == record and back.to_dict() == record.to_dict()
    assert type(back.model.settings) is FrozenMap
    assert type(back.model.delta) is Probability


def test_the_fields_come_from_the_declarations():
    """One field per declared setting, in the declared order; the controller's sub-tables
    after its own settings; the model's family settings in its ``settings`` map."""
    assert [f.name for f in dataclasses.fields(EnvSettings)] == list(SCHEMA["env"])
    assert [f.name for f in dataclasses.fields(ControllerSettings)] == [
        *SCHEMA["controller"],
        "cost",
        "constraints",
    ]
    assert [f.name for f in dataclasses.fields(Scenario)] == list(TABLE_ORDER)
    record = scenario.load_scenario(PENDULUM)
    from vimpc.models import family

    assert list(record.model.settings) == list(family(record.model.family).all_settings())


def test_attributes_read_typed_immutable_values():
    record = scenario.load_scenario(PENDULUM)
    assert isinstance(record.model, ModelSettings)
    assert record.env.dt == 0.05 and type(record.env.dt) is float
    assert isinstance(record.controller.cost.Q, tuple)
    assert isinstance(record.env.kwargs, FrozenMap)
    assert record.model.delta == record.model.settings["delta"]
    assert isinstance(record.model.delta, Probability)
    with pytest.raises(AttributeError, match="model.family = 'nominal' declares"):
        _ = record.model.no_such_setting


def test_records_are_frozen():
    record = scenario.load_scenario(PENDULUM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.env = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.env.dt = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.controller.cost.Q = (1.0,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.model.settings = {}
    with pytest.raises(TypeError):
        record.env.kwargs["perturbation"] = 1.0
    with pytest.raises(TypeError):
        record.controller.cost.R[0] = 2.0


def test_item_access_reads_as_the_resolved_dict():
    """``record[key]`` reads as the dict did (a copy: changing it changes no record)."""
    record = scenario.load_scenario(PENDULUM)
    reference = resolved_dict(PENDULUM)
    assert record["controller"]["cost"]["Q"] == reference["controller"]["cost"]["Q"]
    assert type(record["controller"]["cost"]["Q"]) is list
    assert record["model"]["delta"] == reference["model"]["delta"]
    assert dict(record["env"]) == reference["env"]
    assert {**record["data"]} == reference["data"]
    record["controller"]["cost"]["Q"].append(5.0)
    assert list(record.controller.cost.Q) == reference["controller"]["cost"]["Q"]
    assert "plant" in record["env"] and "nope" not in record["env"]
    with pytest.raises(KeyError):
        record["env"]["nope"]


def test_replace_makes_a_checked_copy():
    record = scenario.load_scenario(PENDULUM)
    changed = record.replace(data={"seed": 7, "fits": 1}, episodes={"count": 3})
    assert (changed.data.seed, changed.episodes.count) == (7, 3)
    assert record.data.seed == 0  # the record it was made from is unchanged
    assert changed.to_dict()["data"] == {**record.to_dict()["data"], "seed": 7, "fits": 1}
    model = record.model.replace(bound_level="step", bound_horizon=0)
    assert model.to_dict() == {**record.model.to_dict(), "bound_level": "step", "bound_horizon": 0}
    with pytest.raises(ConfigError, match=r"data\.seed must be an integer, got 'x'"):
        record.replace(data={"seed": "x"})
    with pytest.raises(ConfigError, match=r"unknown key 'data\.sed'; did you mean 'seed'\?"):
        record.data.replace(sed=1)
    with pytest.raises(ConfigError, match=r"model\.delta must be a number in \(0, 1\), got 1\.5"):
        record.model.replace(delta=1.5)


def test_fit_config_is_the_dict_formula():
    """Fit k's scenario is what ``{**cfg, "data": {**cfg["data"], seeds, "fits": 1}}``
    gave, as a record; its cache key that dict's."""
    from vimpc.scenario.specs import fit_seeds

    reference = resolved_dict(PENDULUM)
    for k in range(3):
        old = {**reference, "data": {**reference["data"], **fit_seeds(reference["data"], k)}}
        old["data"]["fits"] = 1
        new = pipeline.fit_config(reference, k)
        assert isinstance(new, Scenario) and new.to_dict() == old
        assert pipeline.cache_key(new) == _cache_key_of_dict(old)


def test_as_scenario_and_as_table_refuse_what_is_no_configuration():
    with pytest.raises(ConfigError, match=r"missing \['controller', 'episodes', 'metrics'\]"):
        as_scenario({"scenario": {}, "env": {"id": "vimpc/Pendulum-v0"}, "data": {}, "model": {}})
    with pytest.raises(ConfigError, match=r"unknown key 'envs'; did you mean 'env'\?"):
        as_scenario({"envs": {}})
    with pytest.raises(ConfigError, match="a Scenario record or a resolved configuration"):
        as_scenario([1, 2])
    with pytest.raises(ConfigError, match=r"missing required key 'env\.id'"):
        as_table({"env": {}}, "env")
    metrics = as_table({"metrics": {"success_index": 0, "success_target": 1.0}}, "metrics")
    assert metrics.success_window == SCHEMA["metrics"]["success_window"].default


@pytest.mark.parametrize(
    "value, shown",
    [(0, "0"), (0.0, "0.0"), (1, "1"), (1.0, "1.0"), (math.nan, "nan"), (True, "True"),
     ("0.1", "'0.1'"), (None, "None"), (-0.5, "-0.5")],
)  # fmt: skip
def test_probability_refuses_what_is_not_in_the_open_unit_interval(value, shown):
    with pytest.raises(
        InputError, match=rf"^my\.delta must be a probability in \(0, 1\), got {shown}$"
    ):
        Probability(value, "my.delta")


def test_probability_is_the_float_it_holds():
    p = Probability(0.05, "delta")
    assert p == 0.05 and float(p) == 0.05 and repr(p) == "0.05"
    assert json.dumps(p) == "0.05" and scenario.schema.toml_value(p) == "0.05"
    assert pickle.loads(pickle.dumps(p)) == p and type(pickle.loads(pickle.dumps(p))) is Probability
    import numpy as np

    assert Probability(np.float64(0.1)) == 0.1


def test_every_delta_is_checked_by_probability():
    """The bound record, the calibration and the GP's uniform bound refuse a delta by the
    one rule, naming their argument."""
    import numpy as np

    from vimpc.models._gp import uniform_error_bound
    from vimpc.models.calibration import calibrate

    with pytest.raises(InputError, match=r"BoundInfo\.delta must be a probability in \(0, 1\)"):
        BoundInfo(delta=math.nan, level="step", horizon=None, method="m", calibrated_on="heldout")
    with pytest.raises(InputError, match=r"^delta must be a probability in \(0, 1\), got 1$"):
        calibrate(None, None, 1)
    with pytest.raises(InputError, match=r"^delta must be a probability in \(0, 1\), got True$"):
        uniform_error_bound(None, np.zeros(1), np.ones(1), True, std_ref=1.0)
