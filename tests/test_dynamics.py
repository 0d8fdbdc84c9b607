"""The bound's record (:class:`vimpc.dynamics.BoundInfo`): its validation, its place in the
contract (present exactly when the bound is), the model file (format 3 writes it, format 2
files give it from their ``info["bound"]``) and the consumers that read it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from _bound_fixture import datasets, fitted_family

from vimpc import report, scenario
from vimpc.dynamics import BoundInfo, DiscreteModel
from vimpc.errors import ConfigError, InputError
from vimpc.mechanics import Pendulum
from vimpc.model_file import FILE_FORMAT, bound_info_from_v2, document, load, save
from vimpc.models import NominalModel
from vimpc.models.calibration import Bound
from vimpc.mpc.tube import bound_steps

ROOT = Path(__file__).parents[1]
OLD_FILE = Path(__file__).parent / "fixtures" / "pendulum_v2.vimpc"
PENDULUM = str(ROOT / "scenarios" / "pendulum_swingup.toml")
STEP = {"delta": 0.1, "level": "step", "horizon": None, "method": "conformal",
        "calibrated_on": "heldout"}  # fmt: skip


def _record(**changes) -> BoundInfo:
    return BoundInfo(**{**STEP, **changes})


# -- the record ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"delta": 0.0}, r"BoundInfo.delta must be a probability in \(0, 1\).*got 0.0"),
        ({"delta": 1.0}, r"BoundInfo.delta must be a probability in \(0, 1\).*got 1.0"),
        ({"delta": True}, r"BoundInfo.delta must be .*got True"),
        ({"delta": "0.1"}, r"BoundInfo.delta must be .*got '0.1'"),
        ({"level": "steps"}, r"BoundInfo.level must be one of \('step', 'horizon'\).*'steps'"),
        ({"horizon": 5}, r"BoundInfo.horizon must be None for level = 'step', got 5"),
        (
            {"level": "horizon"},
            r"BoundInfo.horizon must be a positive int for level = "
            r"'horizon'.*got None",
        ),  # fmt: skip
        ({"level": "horizon", "horizon": 0}, r"BoundInfo.horizon must be a positive int.*got 0"),
        ({"level": "horizon", "horizon": 2.0}, r"BoundInfo.horizon must be a positive int.*2.0"),
        ({"level": "horizon", "horizon": True}, r"BoundInfo.horizon .*got True"),
        ({"method": ""}, r"BoundInfo.method must be a non-empty str .*got ''"),
        ({"method": None}, r"BoundInfo.method must be a non-empty str .*got None"),
        (
            {"calibrated_on": "held-out"},
            r"BoundInfo.calibrated_on must be one of \('heldout', "
            r"'closed_loop', 'training', 'assumed'\), got 'held-out'",
        ),  # fmt: skip
        ({"extra": [1, 2]}, r"BoundInfo.extra must be a mapping .*got list"),
        (
            {"extra": {"delta": 0.2}},
            r"BoundInfo.extra must not repeat the record's fields, got "
            r"the keys \['delta'\]",
        ),  # fmt: skip
        ({"extra": {"q": object()}}, r"BoundInfo.extra\['q'\] must hold JSON values .*object"),
        ({"extra": {"q": [1.0, float("nan")]}}, r"BoundInfo.extra\['q'\]\[1\] must hold finite"),
        ({"extra": {"q": {1: 2}}}, r"BoundInfo.extra\['q'\] must have str keys, got 1"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field_and_the_value(changes, message):
    with pytest.raises(InputError, match=message):
        _record(**changes)


def test_the_record_is_read_only_and_plain_json_again():
    record = _record(
        level="horizon", horizon=np.int64(8), delta=np.float64(0.05),
        extra={"quantile": np.float64(2.5), "scale": [1.0, 2.0], "shape": {"a": [1]}},
    )  # fmt: skip
    assert type(record.horizon) is int and type(record.delta) is float and record.steps() == 8
    assert record.extra["scale"] == (1.0, 2.0) and type(record.extra["quantile"]) is float
    with pytest.raises(TypeError):
        record.extra["quantile"] = 3.0
    with pytest.raises(TypeError):
        record.extra["shape"]["a"] = [2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.level = "step"
    assert record.as_dict() == {
        "delta": 0.05, "level": "horizon", "horizon": 8, "method": "conformal",
        "calibrated_on": "heldout", "quantile": 2.5, "scale": [1.0, 2.0], "shape": {"a": [1]},
    }  # fmt: skip
    json.dumps(record.as_dict())
    assert pickle.loads(pickle.dumps(record)) == record
    assert _record().steps() == 1


# -- the contract --------------------------------------------------------------------------


def _pendulum() -> DiscreteModel:
    return NominalModel(Pendulum(), 0.05).discrete_model()


def _bound(model: DiscreteModel) -> ca.Function:
    x, u, p = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    return ca.Function("bound", [x, u, p], [ca.DM([1e-3, 1e-2])])


def test_a_bound_without_its_record_and_a_record_without_its_bound_are_refused():
    model = _pendulum()
    with pytest.raises(InputError, match=r"bound and DiscreteModel.bound_info go together: a "
                                         r"bound needs its record .*bound=a function and "
                                         r"bound_info=None"):  # fmt: skip
        dataclasses.replace(model, bound=_bound(model), delta=0.1)
    with pytest.raises(InputError, match=r"go together.*got bound=None and bound_info="
                                         r"BoundInfo\(delta=0.1"):  # fmt: skip
        dataclasses.replace(model, bound_info=_record())
    with pytest.raises(InputError, match=r"bound_info must be a BoundInfo record .*got dict"):
        dataclasses.replace(model, bound=_bound(model), bound_info=STEP)
    with pytest.raises(InputError, match=r"DiscreteModel.delta = 0.2 differs from its bound "
                                         r"record's delta = 0.1"):  # fmt: skip
        dataclasses.replace(model, bound=_bound(model), delta=0.2, bound_info=_record())
    # delta left out is the record's; given the same, it is kept
    bounded = dataclasses.replace(model, bound=_bound(model), bound_info=_record())
    assert bounded.delta == 0.1 and bounded.bound_info == _record()
    assert dataclasses.replace(bounded, delta=0.1).bound_info == _record()
    bare = dataclasses.replace(bounded, bound=None, delta=None, bound_info=None)
    assert bare.bound is None and bare.bound_info is None


def test_a_fitted_bound_gives_its_record_and_the_tube_reads_it():
    family = fitted_family()
    model = family.discrete_model()
    record = model.bound_info
    assert (record.delta, record.level, record.horizon) == (0.2, "horizon", 5)
    assert (record.method, record.calibrated_on) == ("conformal", "heldout")
    assert record.extra["quantile"] == family.calibration_.quantile
    assert record.extra["horizon_method"] == family.calibration_.horizon_method
    assert record.extra["description"] == family.calibration_.method
    assert "bound" not in model.info  # not repeated in the free-form provenance
    assert bound_steps(model) == 5
    # the tube reads the record, not what info may say
    stale = {**model.info, "bound": {"level": "step"}}
    assert bound_steps(dataclasses.replace(model, info=stale)) == 5
    step = dataclasses.replace(model, bound_info=dataclasses.replace(record, level="step",
                                                                     horizon=None))  # fmt: skip
    assert bound_steps(step) == 1


def test_a_theorem_bound_records_its_method_and_the_training_data():
    model = _pendulum()
    bound = Bound(_bound(model), 0.05, "theorem", "a theorem", {"domain_low": [0.0]}, name="thm")
    record = bound.apply(model).bound_info
    assert (record.method, record.calibrated_on, record.level) == ("thm", "training", "step")
    assert report.bound_holds_only_on(record) == report.TRAINING_BOX
    assert Bound(_bound(model), 0.05, "theorem", "t").record().method == "theorem"
    with pytest.raises(InputError, match=r"Bound.calibrated_on must be one of .*got 'train'"):
        Bound(_bound(model), 0.05, "conformal", "c", calibrated_on="train")


# -- the model file ------------------------------------------------------------------------


def test_save_and_load_keep_the_record(tmp_path):
    model = fitted_family().discrete_model()
    path = save(model, tmp_path / "m.vimpc")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == FILE_FORMAT == "vimpc.DiscreteModel/3"
    assert doc["bound_info"]["level"] == "horizon" and doc["bound_info"]["horizon"] == 5
    assert doc["bound_info"]["extra"]["quantile"] == model.bound_info.extra["quantile"]
    assert "bound" not in doc["info"]
    loaded = load(path)
    assert loaded.bound_info == model.bound_info and loaded.delta == model.delta
    bare = load(save(_pendulum(), tmp_path / "bare.vimpc"))
    assert bare.bound_info is None and bare.delta is None


def _resealed(doc: dict) -> dict:
    doc.pop("sha256", None)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return {**doc, "sha256": hashlib.sha256(text.encode()).hexdigest()}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.update(level="steps"), r"its bound's record: BoundInfo.level must be one of"),
        (
            lambda r: r.pop("extra"),
            r"its bound's record: 'bound_info' must be null or an object "
            r"with the keys",
        ),  # fmt: skip
        (lambda r: r.update(delta=0.3), r"DiscreteModel.delta = 0.2 differs from its bound"),
    ],
)
def test_a_file_with_a_bad_record_is_refused(tmp_path, edit, message):
    path = save(fitted_family().discrete_model(), tmp_path / "m.vimpc")
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc["bound_info"])
    path.write_text(json.dumps(_resealed(doc)), encoding="utf-8")
    with pytest.raises(InputError, match=message):
        load(path)


def test_a_format_2_file_loads_with_the_record_the_same_fit_gives_now(tmp_path):
    # the fixture was written by the format-2 writer (its bound described in info["bound"])
    doc = json.loads(OLD_FILE.read_text(encoding="utf-8"))
    assert doc["format"] == "vimpc.DiscreteModel/2" and "bound_info" not in doc
    described = doc["info"]["bound"]
    old = load(OLD_FILE)
    new = fitted_family().discrete_model()
    assert old.bound_info == new.bound_info
    record = old.bound_info
    assert (record.delta, record.level, record.horizon) == (0.2, "horizon", 5)
    assert (record.method, record.calibrated_on) == ("conformal", "heldout")
    assert record.extra["quantile"] == described["quantile"]
    assert (
        record.extra["predicted_quantile"]["windows"] == described["predicted_quantile"]["windows"]
    )
    assert record.extra["description"] == described["method"]
    assert "bound" not in old.info and old.delta == 0.2
    assert bound_steps(old) == 5
    # the same functions: the same bound and step, bit for bit
    x, u = np.array([0.3, -0.7]), np.array([0.4])
    for name in ("step", "bound"):
        a, b = (np.asarray(getattr(m, name)(x, u, [])) for m in (old, new))
        assert a.tobytes() == b.tobytes(), name
    # written again, it is a format-3 file with the same record
    again = load(save(old, tmp_path / "again.vimpc"))
    assert again.bound_info == record


def _v2(model: DiscreteModel, described: dict | None, **info) -> dict:
    """``model``'s document as the format-2 writer wrote it."""
    doc = document(model)
    doc.pop("bound_info")
    doc["format"] = "vimpc.DiscreteModel/2"
    doc["info"] = {**doc["info"], **info}
    if described is not None:
        doc["info"]["bound"] = described
    return _resealed(doc)


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "old.vimpc"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_format_2_files_of_theorem_closed_loop_and_hand_made_bounds(tmp_path):
    model = _pendulum()
    bounded = dataclasses.replace(model, bound=_bound(model), bound_info=_record(delta=0.05))
    theorem = {"method": "GP uniform error bound", "obtained": "theorem", "delta": 0.05,
               "sqrt_beta": [1.5], "domain_low": [0.0], "domain_high": [1.0]}  # fmt: skip
    doc = _v2(bounded, theorem, settings={"bound": "theorem1", "delta": 0.05})
    record = load(_write(tmp_path, doc)).bound_info
    assert record == BoundInfo(
        0.05, "step", None, "theorem1", "training",
        {"description": "GP uniform error bound", "obtained": "theorem", "sqrt_beta": [1.5],
         "domain_low": [0.0], "domain_high": [1.0]},
    )  # fmt: skip
    assert report.bound_holds_only_on(record) == report.TRAINING_BOX
    # a bound calibrated in closed loop: the fit report says where
    closed = {"method": "split conformal over 8-step horizons", "obtained": "conformal",
              "delta": 0.05, "quantile": 2.0, "level": "horizon", "horizon": 8}  # fmt: skip
    doc = _v2(bounded, closed, fit={"calibration": "closed_loop"})
    record = load(_write(tmp_path, doc)).bound_info
    assert (record.level, record.horizon, record.calibrated_on) == ("horizon", 8, "closed_loop")
    assert bound_steps(load(_write(tmp_path, doc))) == 8
    # a bound given by hand, nothing recorded of it: per step, as the tube read it
    record = load(_write(tmp_path, _v2(bounded, None))).bound_info
    assert record == BoundInfo(0.05, "step", None, "unrecorded", "assumed")
    # a format-2 model without a bound has no record
    assert load(_write(tmp_path, _v2(model, None))).bound_info is None


def test_the_format_2_reader_gives_the_record_a_bound_gives_now():
    family = fitted_family()
    bound, model = family.calibration_, family.discrete_model()
    assert bound_info_from_v2(bound.describe(), bound.delta, model.info) == bound.record()
    step = family.recalibrate(*datasets(), bound_level="step", bound_horizon=0).calibration_
    assert bound_info_from_v2(step.describe(), step.delta, {}) == step.record()


# -- the consumers -------------------------------------------------------------------------


def test_a_saved_model_whose_bound_covers_fewer_steps_than_the_horizon_is_refused(tmp_path):
    model = _pendulum()
    short = BoundInfo(0.1, "horizon", 5, "conformal", "heldout")
    path = save(dataclasses.replace(model, bound=_bound(model), bound_info=short),
                tmp_path / "short.vimpc")  # fmt: skip
    with pytest.raises(ConfigError, match=r"its bound: a horizon-level bound covers 5 "
                                          r"consecutive steps, fewer than the controller's "
                                          r"horizon of 40"):  # fmt: skip
        scenario.load_scenario(PENDULUM, [f'model.path="{path}"'])
    full = BoundInfo(0.1, "horizon", 40, "conformal", "heldout")
    path = save(dataclasses.replace(model, bound=_bound(model), bound_info=full),
                tmp_path / "full.vimpc")  # fmt: skip
    assert scenario.load_scenario(PENDULUM, [f'model.path="{path}"'])["model"]["path"] == str(path)
