"""The seed-paired ratio table of the constrained-NN paper (tests/experiments/clnn_ratios.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "experiments"))
import clnn_ratios  # noqa: E402


def test_the_geometric_mean_and_its_interval_are_taken_on_the_logs():
    mean, lo, hi = clnn_ratios.geometric_interval([2.0, 8.0])
    assert mean == pytest.approx(4.0)
    # symmetric about the mean on the log scale (lo * hi = mean^2), t(0.975, 1) = 12.706
    assert lo * hi == pytest.approx(16.0)
    # log ratios ln 2 and ln 8: standard deviation sqrt(2) ln 2, standard error ln 2
    assert np.log(hi / mean) == pytest.approx(12.706 * np.log(2.0), rel=1e-4)
    assert np.isnan(clnn_ratios.geometric_interval([3.0])[1])


def _copy(table: Path, folder: Path, seed: int | None) -> Path:
    """``table`` and its record in ``folder``, the record's command with ``--seed seed``."""
    folder.mkdir(exist_ok=True)
    out = folder / table.name
    shutil.copy(table, out)
    record = json.loads(table.with_suffix(".md.provenance.json").read_text())
    command = re.sub(r" --seed \d+", "", record["command"])
    record["command"] = command if seed is None else f"{command} --seed {seed}"
    out.with_suffix(".md.provenance.json").write_text(json.dumps(record))
    return out


def test_tables_are_paired_by_their_seed_and_an_unpaired_seed_is_refused(tmp_path):
    results = ROOT / "results" / "clnn"
    base = _copy(results / "chain_paper_n2_seed0.csv", tmp_path / "a", 3)
    ours = _copy(results / "chain_paper_n2_seed0_lr1e-2.csv", tmp_path / "b", 3)
    assert clnn_ratios.paired([base], [ours]) == [(3, base, ours)]
    other = _copy(results / "chain_paper_n2_seed0_lr1e-2.csv", tmp_path / "c", 4)
    with pytest.raises(
        SystemExit, match=r"the seeds do not pair: baseline tables \[3\], constrained \[4\]"
    ):
        clnn_ratios.paired([base], [other])
    # the ratio is the baseline's error over the family's, per evaluation
    hnn = clnn_ratios.error(base, "2-pendulum", "hnn", "fine_error")
    clnn = clnn_ratios.error(ours, "2-pendulum", "clnn", "fine_error")
    assert hnn / clnn == pytest.approx(0.001214442918931229 / clnn)
    with pytest.raises(SystemExit, match="hnn has no vi_error"):
        clnn_ratios.error(base, "2-pendulum", "hnn", "vi_error")


def test_the_goal_is_met_by_the_interval_by_the_mean_or_not():
    assert clnn_ratios.verdict(9.0, 8.5, 8.0) == "met (the interval above it)"
    assert clnn_ratios.verdict(9.0, 1.4, 8.0).startswith("met by the mean, not by")
    assert clnn_ratios.verdict(7.9, float("nan"), 8.0) == "not met"
    # one seed: no interval, the mean alone
    assert clnn_ratios.verdict(9.0, float("nan"), 8.0).startswith("met by the mean")
