"""The structure benchmark's summariser (tests/experiments/structure_benchmark.py) on small
synthetic sweep folders: the table's rows, the intervals and the verdict."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

EXPERIMENTS = Path(__file__).parent / "experiments"
Z = 1.959963984540054


@pytest.fixture(scope="module")
def sb():
    """``structure_benchmark`` imported as when it runs as a script (its folder on the path)."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(EXPERIMENTS))
    import structure_benchmark

    yield structure_benchmark
    mp.undo()


def episodes(successes: int, n: int, tracking: float, violations: int = 0) -> list[dict]:
    """``n`` episodes, the first ``successes`` successful, the last ``violations`` off the
    safety limits; tracking RMSEs ``tracking * (1 + 0.01 k)``; solves of 5 and 10 ms at 50 ms."""
    return [
        {
            "success": float(k < successes),
            "violations": int(k >= n - violations),
            "tracking_rmse": tracking * (1 + 0.01 * k),
            "solve_time_median_ms": 5.0,
            "solve_time_p95_ms": 10.0,
            "period_ms": 50.0,
        }
        for k in range(n)
    ]


def fit(one_step: float, drift: float | None = None) -> dict:
    report = {"one_step_rmse": [one_step, one_step], "multi_step_rmse": [3 * one_step] * 2}
    if drift is not None:
        report["long_rollout"] = {"energy_drift_median": drift, "rollout_failed_share": 0.0}
    return report


@pytest.fixture
def folders(sb, tmp_path):
    # the cart-pole: in one cell gp_vi succeeds 20/20 where the best black box does 2/20
    # (a win), tracks worse (a loss), and its one-step errors overlap the black box's (a tie)
    cartpole = [
        {"family": "nominal", "budget": 25, "plant": 0, "episodes": episodes(5, 20, 1.0),
         "fits": [fit(0.1), fit(0.1)]},
        {"family": "gp_vi", "budget": 25, "plant": 0, "episodes": episodes(20, 20, 0.5),
         "fits": [fit(0.010, 1e-3), fit(0.012, 2e-3), fit(0.014, 3e-3)]},
        {"family": "mlp_residual", "budget": 25, "plant": 0,
         "episodes": episodes(2, 20, 0.1, violations=10),
         "fits": [fit(0.011), fit(0.013), fit(0.015)]},
        {"family": "gp_residual", "budget": 25, "plant": 0, "episodes": episodes(1, 20, 0.2),
         "fits": [fit(0.5), fit(0.6)]},
    ]  # fmt: skip
    disk = [
        {"family": "hamel", "budget": 75, "plant": 1, "episodes": episodes(2, 3, 0.1),
         "requested": 6, "complete": False, "fits": [fit(0.01, 1e-4)]},
    ]  # fmt: skip
    return [
        sb.synthetic_sweep(tmp_path, "benchmark_cartpole", "vimpc/CartPole-v0", cartpole),
        sb.synthetic_sweep(tmp_path, "benchmark_rollingdisk", "vimpc/RollingDisk-v0", disk),
    ]


def test_the_rows_and_their_intervals(sb, folders):
    rows = sb.table_rows(sb.read_sweeps(folders))
    keys = [(r["system"], r["world"], r["family"], r["budget"], r["plant"]) for r in rows]
    assert keys == [
        ("cartpole", "vimpc", "nominal", 25, 0),
        ("cartpole", "vimpc", "gp_vi", 25, 0),
        ("cartpole", "vimpc", "gp_residual", 25, 0),
        ("cartpole", "vimpc", "mlp_residual", 25, 0),
        ("rollingdisk", "vimpc", "hamel", 75, 1),
    ]
    gp = rows[1]
    # Wilson at 20 of 20: the lower end is n / (n + z^2)
    assert gp["success"] == 1.0 and gp["success_hi"] == 1.0
    assert gp["success_lo"] == pytest.approx(20 / (20 + Z**2), rel=1e-12)
    box = rows[3]
    assert box["off_limits"] == 0.5
    centre, half = 0.5, Z * math.sqrt(0.25 / 20 + Z**2 / 1600) / (1 + Z**2 / 20)
    assert (box["off_limits_lo"], box["off_limits_hi"]) == pytest.approx(
        ((centre - half), (centre + half)), rel=1e-12
    )
    # one-step error over 3 fits: mean 0.012, t interval with t(0.975, 2) = 4.302653
    assert gp["one_step"] == pytest.approx(0.012)
    half = 4.302652729911275 * 0.002 / math.sqrt(3)
    assert (gp["one_step_lo"], gp["one_step_hi"]) == pytest.approx((0.012 - half, 0.012 + half))
    assert gp["energy_drift"] == pytest.approx(2e-3)
    # drifts 1, 2, 3 (x 1e-3): the t interval's lower end (2 - 2.48) would be negative, and
    # is cut at 0 (a drift is nonnegative); its upper end stays
    half = 4.302652729911275 * 1e-3 / math.sqrt(3)
    assert gp["energy_drift_lo"] == 0.0 and gp["energy_drift_hi"] == pytest.approx(2e-3 + half)
    assert math.isnan(rows[0]["energy_drift"])  # no long rollouts recorded
    # bootstrap over episodes: the mean of 0.5 (1 + 0.01 k), inside its interval
    assert gp["tracking"] == pytest.approx(0.5 * (1 + 0.01 * 9.5))
    assert gp["tracking_lo"] < gp["tracking"] < gp["tracking_hi"]
    assert gp["solve_p95"] == pytest.approx(0.2) and gp["solve_median"] == pytest.approx(0.1)
    disk = rows[4]
    assert disk["episodes"] == "3/6" and disk["fits"] == 1
    assert math.isnan(disk["one_step_lo"])  # one fit: no t interval


def test_the_verdict_against_the_best_black_box(sb, folders):
    rows = sb.table_rows(sb.read_sweeps(folders))
    found = sb.verdicts(rows)
    assert found[("cartpole", "success", "gp_vi")] == {"wins": 1, "ties": 0, "loses": 0}
    # the best black box tracks best (mlp_residual at 0.1): gp_vi's 0.5 loses to it
    assert found[("cartpole", "tracking", "gp_vi")] == {"wins": 0, "ties": 0, "loses": 1}
    # against mlp_residual's one-step errors (the best), which overlap gp_vi's
    assert found[("cartpole", "one_step", "gp_vi")] == {"wins": 0, "ties": 1, "loses": 0}
    # every episode off the limits counts: mlp_residual's 10 of 20 make gp_residual the best
    assert found[("cartpole", "off_limits", "gp_vi")] == {"wins": 0, "ties": 1, "loses": 0}
    # no interval on the black boxes' side: no verdict
    assert ("cartpole", "energy_drift", "gp_vi") not in found
    # nominal is the baseline, not scored; the disk has no black box
    assert not any(family == "nominal" or system == "rollingdisk" for system, _, family in found)
    text = sb.verdict_text(rows)
    assert "success rate: gp_vi 1 won, 0 tied, 0 lost" in text
    assert "tracking RMSE: gp_vi 0 won, 0 tied, 1 lost" in text
    assert "**rollingdisk**: no black-box family in its sweep yet (hamel): no verdict" in text


def test_compare_reads_the_direction_of_each_metric(sb):
    def row(metric, lo, hi):
        return {metric: (lo + hi) / 2, f"{metric}_lo": lo, f"{metric}_hi": hi}

    assert sb.compare(row("success", 0.8, 0.9), row("success", 0.1, 0.5), "success") == "wins"
    assert sb.compare(row("tracking", 0.8, 0.9), row("tracking", 0.1, 0.5), "tracking") == "loses"
    assert sb.compare(row("tracking", 0.4, 0.9), row("tracking", 0.1, 0.5), "tracking") == "ties"
    assert sb.compare(row("tracking", np.nan, 0.9), row("tracking", 0.1, 0.5), "tracking") is None


def test_the_summary_files(sb, folders, tmp_path):
    out = tmp_path / "out"
    rows = sb.summarise(folders, out, "python tests/experiments/structure_benchmark.py")
    with open(out / "structure_benchmark.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) == 5
    assert float(table[1]["success_lo"]) == pytest.approx(20 / (20 + Z**2), rel=1e-12)
    md = (out / "structure_benchmark.md").read_text()
    assert "| cartpole | vimpc | gp_vi | 25 | 0 | 20/20 | 3 | 1 [0.839, 1] |" in md
    assert "## Verdict" in md and "success rate: gp_vi 1 won" in md
    assert {p.name for p in out.glob("*.png")} == {
        "structure_benchmark_cartpole.png",
        "structure_benchmark_rollingdisk.png",
    }
    record = json.loads((out / "structure_benchmark.md.provenance.json").read_text())
    assert record["command"] == "python tests/experiments/structure_benchmark.py"


def test_kept_rows_fill_the_configurations_the_folders_lack(sb, folders, tmp_path):
    earlier = tmp_path / "earlier"
    rows = sb.summarise(folders, earlier, "earlier")
    # summarised again from the cart-pole's folder alone: the disk's row comes from the
    # earlier table, whole and at full precision, and the cart-pole's from its folder
    out = tmp_path / "out"
    again = sb.summarise(folders[:1], out, "again", keep=earlier / "structure_benchmark.csv")
    assert [(r["system"], r["family"]) for r in again] == [(r["system"], r["family"]) for r in rows]
    disk = next(r for r in again if r["system"] == "rollingdisk")
    assert disk["budget"] == 75 and disk["plant"] == 1 and disk["episodes"] == "3/6"
    assert disk["tracking"] == rows[-1]["tracking"] and disk["success_hi"] == rows[-1]["success_hi"]
    md = (out / "structure_benchmark.md").read_text()
    assert "1 rows (configurations those folders lack) are kept from" in md
    # a row the folders hold with a finished episode is theirs, not the kept one
    assert sb.kept_rows(earlier / "structure_benchmark.csv", rows) == []
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="not a structure benchmark table"):
        sb.kept_rows(tmp_path / "other.csv", rows)


def test_a_configuration_not_begun_is_left_out(sb, folders):
    manifest = json.loads((folders[1] / "sweep.json").read_text())
    manifest["configurations"].append({"id": "c01", "overrides": {"model.family": "nominal"}})
    (folders[1] / "sweep.json").write_text(json.dumps(manifest))
    assert [c["family"] for c in sb.read_sweeps([folders[1]])] == ["hamel"]


def test_a_cell_in_two_folders_is_summarised_once_from_the_one_with_more_episodes(sb, tmp_path):
    # a configuration that failed after its fits (no episode) and was run again in a sweep of
    # its own: one row, the second folder's; on a tie the later folder's
    def run(name: str, n: int, tracking: float):
        configuration = {"family": "nominal", "budget": 25, "plant": 0,
                         "episodes": episodes(n, n, tracking), "requested": 4,
                         "complete": n == 4, "fits": [fit(0.1)]}  # fmt: skip
        return sb.synthetic_sweep(tmp_path / name, name, "vimpc/CartPole-v0", [configuration])

    failed, again, tie = run("failed", 0, 1.0), run("again", 4, 0.5), run("tie", 4, 0.25)
    for order, tracking in (([failed, again], 0.5), ([again, failed], 0.5), ([again, tie], 0.25)):
        found = sb.read_sweeps(order)
        assert len(found) == 1 and len(found[0]["episodes"]) == 4
        assert found[0]["episodes"][0]["tracking_rmse"] == tracking
        assert len(sb.table_rows(found)) == 1


def test_a_mujoco_plant_is_its_own_world_with_its_mjcf_as_the_plant(sb):
    plant_of, system_of, where = sb.plant_of, sb.system_of, sb.where

    own = {"id": "vimpc/CartPole-v0", "kwargs": {"param_seed": 1}}
    foreign = {
        "id": "InvertedPendulum-v5",
        "kwargs": {"xml_file": "/x/mujoco/cartpole_variant.xml"},
        "adapter": {"system": "CartPole"},
    }
    assert system_of(own) == ("cartpole", "vimpc") and plant_of(own) == 1
    assert system_of(foreign) == ("cartpole", "mujoco")
    assert plant_of(foreign) == "cartpole_variant"
    rows = [{"system": "cartpole", "world": w} for w in ("vimpc", "mujoco")]
    assert [where(r) for r in rows] == ["cartpole", "cartpole (MuJoCo)"]


def test_a_failed_configuration_says_why_in_its_note(sb, tmp_path):
    # the sweep records the error of a configuration that failed; its row (no episodes, no
    # verdict) names the error's type and cause, CasADi's last line; a finished one has none
    error = (
        "RuntimeError: Error in Function::call for 'rti_condensing' [MXFunction] at "
        ".../casadi/core/function.cpp:514:\n.../casadi/core/function_internal.hpp:1766: "
        "Evaluation failed"
    )
    cells = [
        {"family": "clnn", "budget": 40, "plant": 0, "episodes": episodes(0, 1, 1.0),
         "requested": 4, "complete": False, "fits": [fit(0.1)], "error": error},
        {"family": "gp_residual", "budget": 40, "plant": 0, "episodes": episodes(4, 4, 1.0),
         "fits": [fit(0.1)]},
    ]  # fmt: skip
    sweep = sb.synthetic_sweep(tmp_path, "benchmark_fourbar", "vimpc/FourBar-v0", cells)
    rows = {r["family"]: r for r in sb.table_rows(sb.read_sweeps([sweep]))}
    assert rows["clnn"]["note"] == (
        "failed: RuntimeError: .../casadi/core/function_internal.hpp:1766: Evaluation failed"
    )
    assert rows["gp_residual"]["note"] == ""
    text = sb.verdict_text(sb.table_rows(sb.read_sweeps([sweep])))
    assert (
        "Configurations that failed (no verdict): clnn 1 of 1 (0 before an episode: "
        "RuntimeError: .../casadi/core/function_internal.hpp:1766: Evaluation failed)."
    ) in text
    assert "Not run here: gp_vi, lsi, dlnn, lnn, chnn, hamel" in text
    assert sb.failure_note("ValueError: model.hidden: expected a list") == (
        "failed: ValueError: model.hidden: expected a list"
    )
    assert len(sb.failure_note("KeyError: " + "x" * 400)) == len("failed: ") + 160


def test_the_two_worlds_pool_each_rate_over_the_plants_at_each_budget_multiple(sb):
    def row(world, budget, plant, success, done, off=0.0):
        r = {"system": "pendulum", "world": world, "family": "gp_vi", "budget": budget,
             "plant": plant, "episodes": f"{done}/51"}  # fmt: skip
        for metric, value in (("success", success), ("off_limits", off)):
            r.update({metric: value, f"{metric}_lo": math.nan, f"{metric}_hi": math.nan})
        return r

    own = [row("vimpc", b, p, 1.0, 51) for b in (25, 100, 400) for p in (0, 1)]
    # MuJoCo at its own budgets (x1 = 60): 51 + 20 finished episodes at x1, 40 of them
    # successful; one plant of x4 with no episode yet
    foreign = [
        row("mujoco", 15, "a.xml", 1.0, 51), row("mujoco", 15, "b.xml", 1.0, 51),
        row("mujoco", 60, "a.xml", 30 / 51, 51, off=1 / 51), row("mujoco", 60, "b.xml", 0.5, 20),
        row("mujoco", 240, "a.xml", math.nan, 0), row("mujoco", 240, "b.xml", math.nan, 0),
    ]  # fmt: skip
    text = sb.worlds_text(own + foreign)
    lines = {line.split(" | ")[2]: line for line in text.splitlines() if line.startswith("| pend")}
    assert set(lines) == {"x0.25 (25 / 15)", "x1 (100 / 60)", "x4 (400 / 240)"}
    rate, low, high, n = sb.pooled_rate([r for r in foreign if r["budget"] == 60], "success")
    assert (n, rate) == (71, 40 / 71)
    assert low < rate < high
    assert f"{rate:.3g} [{low:.3g}, {high:.3g}] (n 71)" in lines["x1 (100 / 60)"]
    assert sb.pooled_rate([r for r in foreign if r["budget"] == 60], "off_limits")[:1] == (1 / 71,)
    assert "- (no episode)" in lines["x4 (400 / 240)"]
    # a system run in one world alone has no section
    assert sb.worlds_text(own) == ""


def test_a_failure_since_is_not_hidden_by_a_kept_row_without_episodes(sb, tmp_path):
    # an earlier table holds a configuration not yet begun (0 episodes, no note) and one with
    # episodes; a later folder's run of each failed before its first episode: the first
    # row is the folder's, with its note, the second the earlier table's
    error = "ConfigError: fitting model.family = 'dlnn': the model's step failed"
    cells = [
        {"family": "dlnn", "budget": b, "plant": 0, "episodes": [], "requested": 4,
         "complete": False, "fits": [], "error": error}
        for b in (10, 40)
    ]  # fmt: skip
    later = sb.synthetic_sweep(tmp_path / "later", "benchmark_pendulum", "vimpc/Pendulum-v0", cells)
    rows = sb.table_rows(sb.read_sweeps([later]))
    earlier = [dict(r) for r in rows]
    for r in earlier:
        r["note"] = ""
    earlier[1].update(episodes="4/4", fits=1, success=0.5)
    table = tmp_path / "earlier.csv"
    sb.write_csv_rows(tmp_path, earlier)
    (tmp_path / "structure_benchmark.csv").rename(table)
    kept = sb.kept_rows(table, rows)
    assert [(r["budget"], r["episodes"]) for r in kept] == [(40, "4/4")]
