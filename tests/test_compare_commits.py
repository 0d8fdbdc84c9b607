"""The comparison of two commits' runs (``tests/experiments/compare_commits.py``) on two
copies of one real run folder, one of them edited: what it calls the same and what
DIFFERENT, and the arguments it refuses before any work."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

EXPERIMENTS = Path(__file__).parent / "experiments"


@pytest.fixture(scope="module")
def compare():
    """``compare_commits`` imported as when it runs as a script (its folder on the path)."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(EXPERIMENTS))
    import compare_commits

    yield compare_commits
    mp.undo()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One real run: the pendulum swing-up, one episode of 4 steps."""
    from vimpc import cli

    out = tmp_path_factory.mktemp("runs")
    argv = ["run", "pendulum_swingup", "--set", "episodes.count=1", "--set", "episodes.steps=4"]
    assert cli.main([*argv, "--no-plots", "--quiet", "--out", str(out)]) == 0
    (folder,) = [p for p in out.glob("*/*") if (p / "metrics.json").exists()]
    return folder


@pytest.fixture
def pair(run, tmp_path) -> tuple[Path, Path]:
    base, head = tmp_path / "base", tmp_path / "head"
    shutil.copytree(run, base)
    shutil.copytree(run, head)
    return base, head


def edit_metrics(folder: Path, edit) -> None:
    path = folder / "metrics.json"
    metrics = json.loads(path.read_text())
    edit(metrics)
    path.write_text(json.dumps(metrics, indent=2))


def edit_array(folder: Path, name: str, edit) -> None:
    path = folder / "episode_000.npz"
    with np.load(path) as data:
        arrays = {k: data[k].copy() for k in data.files}
    arrays[name] = edit(arrays[name])
    np.savez(path, **arrays)


def test_identical_runs_are_the_same(compare, pair):
    cmp = compare.compare_runs(*pair)
    assert cmp.same and cmp.differences == []
    assert cmp.episodes == 1 and cmp.largest == 0.0
    assert cmp.figures > 50 and cmp.array_values > 100  # the metrics and the trajectory


def test_a_float_within_the_tolerance_is_the_same(compare, pair):
    base, head = pair

    def nudge(m):
        m["per_episode"][0]["cost"] *= 1 + 1e-9

    edit_metrics(head, nudge)
    edit_array(head, "states", lambda x: x * (1 + 1e-9))
    cmp = compare.compare_runs(base, head)
    assert cmp.same, cmp.differences
    assert 5e-10 < cmp.largest < 2e-9  # the relative differences were seen, and allowed


@pytest.mark.parametrize("where", ["metrics", "trajectory"])
def test_a_float_off_by_1e_4_is_different_and_named(compare, pair, where):
    base, head = pair
    if where == "metrics":
        edit_metrics(
            head,
            lambda m: m["per_episode"][0].update(cost=m["per_episode"][0]["cost"] * (1 + 1e-4)),
        )
        expected = "per_episode[0].cost"
    else:

        def one_entry(x):
            x = x.copy()
            x[2, 1] *= 1 + 1e-4
            return x

        edit_array(head, "states", one_entry)
        expected = "episode_000.npz:states[2, 1]"
    cmp = compare.compare_runs(base, head)
    assert not cmp.same
    assert [d.where for d in cmp.differences] == [expected]
    assert cmp.largest_where == expected and cmp.largest == pytest.approx(1e-4, rel=1e-3)
    assert cmp.differences[0].count == 1  # of the array's entries, one differs
    assert compare.compare_runs(base, head, rtol=1e-3).same  # a looser tolerance takes it


def test_a_flipped_success_and_a_changed_count_are_different(compare, pair):
    base, head = pair

    def flip(m):
        m["per_episode"][0]["success"] = 1.0 - m["per_episode"][0]["success"]
        m["per_episode"][0]["steps"] += 1  # an integer: exact, whatever the tolerance

    edit_metrics(head, flip)
    cmp = compare.compare_runs(base, head, rtol=0.5)
    assert {d.where for d in cmp.differences} == {"per_episode[0].success", "per_episode[0].steps"}


def test_a_declared_change_is_listed_and_not_a_difference(compare, pair):
    base, head = pair

    def rename(m):
        m["model"]["renamed_key"] = "new"  # a record's layout that changed on purpose
        m["per_episode"][0]["steps"] += 1

    edit_metrics(head, rename)
    cmp = compare.compare_runs(base, head, expect=("model.*",))
    assert [d.where for d in cmp.expected] == ["model.renamed_key"]
    # what the pattern does not name is still a difference
    assert [d.where for d in cmp.differences] == ["per_episode[0].steps"]
    assert not compare.compare_runs(base, head, expect=("model.*", "per_episode*")).differences


def test_the_solve_times_are_set_side_by_side(compare, pair):
    base, head = pair
    edit_array(head, "solve_times", lambda a: 2.0 * a)
    cells = compare.timing_cells(base, head)
    assert cells["median_ratio"] == "2.00"
    times = compare.solve_times_ms(base)
    assert times.size > 0 and cells["solve_median_ms"] == (
        f"{np.median(times):.3g} / {np.median(2 * times):.3g}"
    )
    assert compare.compare_runs(base, head).same  # timing is never a difference


def test_timing_figures_are_skipped_by_name(compare, pair):
    base, head = pair

    def slower(m):
        for row in (m, m["per_episode"][0]):
            row["solve_time_median_ms"] *= 3
            row["late_solves"] += 2
        m["wall_time_s"] += 10.0
        m["sessions"][0]["load_average"] = [9.0]

    edit_metrics(head, slower)
    edit_array(head, "solve_times", lambda x: x * 3)
    edit_array(head, "late", lambda x: ~x)
    cmp = compare.compare_runs(base, head)
    assert cmp.same, cmp.differences
    assert {
        "solve_time_median_ms",
        "per_episode.solve_time_median_ms",
        "per_episode.late_solves",
        "wall_time_s",
        "sessions",
        "npz.solve_times",
        "npz.late",
    } <= cmp.skipped["timing"]
    assert "model.path" in cmp.skipped["context"]
    assert not cmp.skipped["timing"] & {"per_episode.cost", "npz.states"}


def test_nan_equals_nan_only(compare, pair):
    base, head = pair
    for folder in pair:
        edit_metrics(folder, lambda m: m["per_episode"][0].update(cost=math.nan))
    assert compare.compare_runs(base, head).same
    edit_metrics(head, lambda m: m["per_episode"][0].update(cost=1.0))
    (d,) = compare.compare_runs(base, head).differences
    assert d.where == "per_episode[0].cost" and d.rel == math.inf


def test_a_missing_figure_is_different(compare, pair):
    base, head = pair
    edit_metrics(head, lambda m: m["per_episode"][0].pop("violations"))
    (d,) = compare.compare_runs(base, head).differences
    assert (d.where, d.head) == ("per_episode[0].violations", "(missing)")


def test_the_report_names_the_commits_and_the_differing_figure(compare, pair, tmp_path):
    base, head = pair
    edit_metrics(head, lambda m: m["per_episode"][0].update(cost=m["per_episode"][0]["cost"] * 2))
    cmp = compare.compare_runs(base, head)
    row = {
        "scenario": "pendulum_swingup", "episodes": cmp.episodes, "figures": cmp.figures,
        "array_values": cmp.array_values, "largest_rel_diff": "0.5", "where": cmp.largest_where,
        "verdict": "DIFFERENT", "base_s": 1.0, "head_s": 1.0,
        **compare.timing_cells(base, head), "notes": "",
    }  # fmt: skip
    commits = {"BASE": "a" * 40, "HEAD": "b" * 40}
    out = tmp_path / "out"
    compare.write_report(out, [row], {"pendulum_swingup": cmp}, "python x.py", commits, "rtol")
    text = (out / "compare.md").read_text()
    assert "a" * 40 in text and "b" * 40 in text and "`python x.py`" in text
    assert "| pendulum_swingup | 1 |" in text and "| DIFFERENT |" in text
    assert "`per_episode[0].cost`" in text and "solve_time_median_ms" in text  # and skipped
    with open(out / "compare.csv", newline="") as f:
        (got,) = list(csv.DictReader(f))
    assert (got["verdict"], got["head_commit"], got["where"]) == (
        "DIFFERENT",
        "b" * 40,
        "per_episode[0].cost",
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no-such-commit", "HEAD"], "BASE: unknown commit 'no-such-commit'"),
        (["HEAD", "HEAD~100000"], "HEAD: unknown commit 'HEAD~100000'"),
        (["HEAD", "HEAD", "--only", "pendulum_swingp"], "did you mean 'pendulum_swingup'"),
        (["HEAD", "HEAD", "--episodes", "0"], "--episodes must be a positive integer, got 0"),
        (["HEAD", "HEAD", "--rtol", "-1"], "--rtol must be a non-negative finite number"),
        (["HEAD"], "BASE and HEAD are required"),
    ],
)
def test_bad_input_is_refused_before_any_work(
    compare, tmp_path, capsys, monkeypatch, argv, message
):
    def started(self):
        raise AssertionError(f"{self.label} checked out before the arguments were checked")

    monkeypatch.setattr(compare.Checkout, "create", started)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        compare.main([*argv, "--out", str(out)])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
