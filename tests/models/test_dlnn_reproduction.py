"""The committed discrete-Lagrangian reproduction (``results/dlnn``), re-checked on seeds it
did not use: the same settings (epochs, network, symmetry points, budget) read from the
committed records, new initialisations. Slow (about 15 minutes on one free core: five
fits): ``pytest -m slow``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from vimpc.errors import FitWarning

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "results" / "dlnn" / "records"
sys.path.insert(0, str(ROOT / "tests" / "experiments"))

pytest.importorskip("torch")
NEW_SEED = 11
#: SymDLNN's new seeds (NEW_SEED first): its recreation is checked as a fraction of them
SYM_SEEDS = (NEW_SEED, 12, 13)


def _committed(system: str, model: str) -> list[dict]:
    rows = [json.loads(p.read_text()) for p in sorted(RECORDS.glob(f"{system}_{model}_seed*.json"))]
    if not rows:
        pytest.fail(f"no committed records for {system} {model} under {RECORDS}")
    assert not set(SYM_SEEDS) & {r["seed"] for r in rows}
    return rows


def _option(command: str, name: str, default, kind):
    words = command.split()
    return kind(words[words.index(name) + 1]) if name in words else default


def _fit(system: str, model: str, committed: list[dict], seed: int = NEW_SEED) -> dict:
    import dlnn_reproduction as d

    epochs = committed[0]["epochs_set"]
    command = committed[0]["command"]
    args = argparse.Namespace(quick=False, cart_epochs=epochs, kepler_epochs=epochs,
                              hidden=[128, 128, 128],
                              budget=_option(command, "--budget", 300.0, float),
                              symmetry_points=_option(command, "--symmetry-points", None, int))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        row, arrays = d.fit_one(system, model, seed, args)
    return {**row, "notes": arrays["notes"]}


@pytest.mark.slow
@pytest.mark.parametrize("system", ["cart", "kepler"])
def test_dlnn_recreates_the_training_trajectory_on_a_new_seed(system):
    # DLNN's recreation error (RMS over the training steps, predicted from (q0, q1)) on a new
    # seed is within 10x of the committed seeds' worst, and at least 10x below the committed
    # LNN's best (the continuous baseline)
    committed = _committed(system, "DLNN")
    row = _fit(system, "DLNN", committed)
    worst = max(r["rmse_recreation"] for r in committed)
    lnn = [r["rmse_recreation"] for r in _committed(system, "LNN")]
    lnn_best = min((x for x in lnn if np.isfinite(x)), default=np.inf)
    assert row["diverged_at"] == ""
    assert row["rmse_recreation"] <= 10 * worst, (row["rmse_recreation"], worst)
    assert row["rmse_recreation"] <= lnn_best / 10, (row["rmse_recreation"], lnn_best)


@pytest.mark.slow
def test_symdlnn_on_the_cart_recreates_or_says_its_scale_collapsed_on_new_seeds():
    # SymDLNN on the cart is unstable across seeds: on unforced data the degeneracy term is
    # the only scale-setter, and on some initialisations the warm-up collapses L_d's scale
    # (the loss sits at the term's 0.5 from about epoch 100: committed seed 4, recreation
    # NaN; seed 11, RMSE 1.02; seed 12, diverged at step 148; with a non-binding budget).
    # What holds on every new seed: it recreates the training trajectory within 10x the
    # committed worst finite RMSE and better than the committed LNN's best, or the family
    # warned that the scale collapsed
    committed = _committed("cart", "SymDLNN")
    finite = [r["rmse_recreation"] for r in committed if np.isfinite(r["rmse_recreation"])]
    worst = max(finite)
    lnn = [r["rmse_recreation"] for r in _committed("cart", "LNN")]
    lnn_best = min((x for x in lnn if np.isfinite(x)), default=np.inf)
    for seed in SYM_SEEDS:
        row = _fit("cart", "SymDLNN", committed, seed)
        rmse = row["rmse_recreation"]
        recreates = np.isfinite(rmse) and rmse <= 10 * worst and rmse < lnn_best
        collapsed = any("scale collapsed" in note for note in row["notes"])
        assert recreates or collapsed, (seed, rmse, worst, lnn_best, row["notes"])
