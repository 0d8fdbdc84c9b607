"""Typed settings declared once (``vimpc._settings``): types, choices with "did you mean",
arrays, rules, required keys and defaults."""

from __future__ import annotations

import numpy as np
import pytest

from vimpc._settings import NONNEGATIVE, POSITIVE, PROBABILITY, REQUIRED, Setting, resolve
from vimpc.errors import ConfigError, InputError


def test_setting_choices_and_types():
    s = Setting(str, "midpoint", "doc", choices=("midpoint", "trapezoidal"))
    assert s.check("k", "trapezoidal") == "trapezoidal"
    with pytest.raises(
        ConfigError, match=r"k must be one of .*got 'midpiont'; did you mean 'midpoint'\?$"
    ):
        s.check("k", "midpiont")
    with pytest.raises(
        ConfigError, match=r"k must be one of \['midpoint', 'trapezoidal'\], got 'zz'$"
    ):
        s.check("k", "zz")
    number = Setting(float, 1.0, "doc")
    assert number.check("k", 3) == 3.0 and type(number.check("k", 3)) is float
    assert type(number.check("k", np.int64(3))) is float
    for bad, shown in (
        (True, r"True \(bool\)"),
        ("1", r"'1' \(str\)"),
        (None, r"None \(NoneType\)"),
    ):
        with pytest.raises(ConfigError, match=rf"k must be a number, got {shown}"):
            number.check("k", bad)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="k must be a finite number"):
            number.check("k", bad)
    integer = Setting(int, 1, "doc")
    assert integer.check("k", np.int32(7)) == 7 and type(integer.check("k", np.int32(7))) is int
    for bad in (2.0, False, np.bool_(True)):
        with pytest.raises(ConfigError, match="k must be an integer"):
            integer.check("k", bad)
    flag = Setting(bool, False, "doc")
    assert flag.check("k", True) is True
    with pytest.raises(ConfigError, match=r"k must be true or false, got 1 \(int\)"):
        flag.check("k", 1)
    # "not set": None is accepted where it is the default, refused elsewhere
    assert Setting(float, None, "doc").check("k", None) is None
    with pytest.raises(InputError, match="k must be a table"):
        Setting(dict, {}, "doc").check("k", [], error=InputError)


def test_setting_arrays():
    s = Setting(list, None, "doc", items=float, length=3, rule=NONNEGATIVE)
    assert s.check("Q", [1, 2.5, 3]) == [1.0, 2.5, 3.0]
    with pytest.raises(ConfigError, match=r"Q\[2\] must be a finite number, got inf"):
        s.check("Q", [1.0, 2.0, float("inf")])
    upper = Setting(list, None, "doc", items=float, infinite="inf")
    assert upper.check("hi", [1.0, float("inf")]) == [1.0, float("inf")]
    with pytest.raises(ConfigError, match=r"hi\[0\] = -inf excludes every value"):
        upper.check("hi", [float("-inf"), 1.0])
    with pytest.raises(ConfigError, match=r"Q\[0\] must be a number, got 'a' \(str\)"):
        s.check("Q", ["a", 1.0, 2.0])
    with pytest.raises(ConfigError, match=r"Q\[2\] must be a number, got True \(bool\)"):
        s.check("Q", [1.0, 2.0, True])
    with pytest.raises(ConfigError, match=r"Q\[1\] must be a number, got \[1\.0\] \(list\)"):
        s.check("Q", [1.0, [1.0], 2.0])
    with pytest.raises(ConfigError, match=r"Q\[1\] must be a finite number, got nan"):
        s.check("Q", [1.0, float("nan"), 2.0])
    with pytest.raises(ConfigError, match=r"Q\[1\] must be a non-negative number, got -1\.0"):
        s.check("Q", [1.0, -1, 2.0])
    with pytest.raises(ConfigError, match=r"Q must have 3 entries, got 2: \[1\.0, 2\.0\]"):
        s.check("Q", [1.0, 2.0])
    with pytest.raises(
        ConfigError, match=r"Q must be an array, got \(1\.0, 2\.0, 3\.0\) \(tuple\)"
    ):
        s.check("Q", (1.0, 2.0, 3.0))
    with pytest.raises(ConfigError, match=r"angles\[1\] must be an integer, got 2\.0"):
        Setting(list, [], "doc", items=int).check("angles", [1, 2.0])
    assert s.type_text() == "array of non-negative numbers (3)"


def test_setting_rules():
    cases = [
        (Setting(int, 1, "doc", rule=POSITIVE), 0, r"k must be a positive integer, got 0$"),
        (Setting(float, 1.0, "doc", rule=POSITIVE), -2, r"k must be a positive number, got -2\.0$"),
        (Setting(float, 0.0, "doc", rule=NONNEGATIVE), -1e-9, r"non-negative number, got -1e-09$"),
        (
            Setting(float, 0.1, "doc", rule=PROBABILITY),
            1,
            r"k must be a number in \(0, 1\), got 1\.0$",
        ),
    ]
    for setting, bad, message in cases:
        with pytest.raises(ConfigError, match=message):
            setting.check("k", bad)
    assert Setting(float, 0.1, "doc", rule=PROBABILITY).check("k", 0.999) == 0.999


def test_resolve():
    schema = {
        "horizon": Setting(int, REQUIRED, "doc", rule=POSITIVE),
        "Q": Setting(list, [1.0, 2.0], "doc", items=float),
        "options": Setting(dict, {}, "doc"),
        "name": Setting(str, None, "doc"),
    }
    with pytest.raises(ConfigError, match=r"missing required key 'mpc.horizon' \(an integer\)"):
        resolve({}, schema, prefix="mpc.")
    with pytest.raises(
        ConfigError, match=r"unknown key 'mpc.horizn'; did you mean 'horizon'\? \(expected one of"
    ):
        resolve({"horizon": 5, "horizn": 5}, schema, prefix="mpc.")
    with pytest.raises(InputError, match=r"mpc.horizon must be a positive integer, got 0"):
        resolve({"horizon": 0}, schema, prefix="mpc.", error=InputError)
    first = resolve({"horizon": 5}, schema)
    assert first == {"horizon": 5, "Q": [1.0, 2.0], "options": {}, "name": None}
    # defaults are copies: changing one resolved configuration changes neither the next
    # one nor the declaration
    first["Q"].append(3.0)
    first["options"]["x"] = 1
    second = resolve({"horizon": 5}, schema)
    assert second["Q"] == [1.0, 2.0] and second["options"] == {}
    assert schema["Q"].default == [1.0, 2.0] and schema["options"].default == {}
