"""The neural families fit and export the same models as the fixture's: the same random
draws in the same order, the same weights, the same exported step and residual, the same
info and the same warnings (``tests/_neural_reference.py`` says how the fixture was made).

A moved draw or a reordered term changes the step by far more than round-off; the
comparison allows 1e-12 relative (another BLAS may round the dense products differently).
"""

from __future__ import annotations

import json

import _neural_reference as ref
import numpy as np
import pytest

pytest.importorskip("torch")

RTOL = 1e-12


@pytest.fixture(scope="module")
def fixture():
    with np.load(ref.FIXTURE) as data:
        return {k: data[k] for k in data.files}


def _close(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=0.0, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("case", list(ref.CASES))
def test_fit_exports_the_reference(case, fixture):
    got = ref.fit_case(case)
    assert sorted(got) == sorted(k for k in fixture if k.startswith(f"{case}/"))
    for key in ("x", "u", "step", "residual"):
        name = f"{case}/{key}"
        if name in fixture:
            np.testing.assert_allclose(got[name], fixture[name], rtol=RTOL, atol=1e-300,
                                       equal_nan=True, err_msg=name)  # fmt: skip
    _close(json.loads(str(got[f"{case}/info"])), json.loads(str(fixture[f"{case}/info"])),
           f"{case}.info")  # fmt: skip
    assert json.loads(str(got[f"{case}/warnings"])) == json.loads(str(fixture[f"{case}/warnings"]))
