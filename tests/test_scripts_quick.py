"""Every benchmark and experiment script runs end to end in its quick mode.

The scripts in ``tests/benchmarks`` and ``tests/experiments`` are run by hand and write the
committed tables under ``results/``; nothing else runs them, so a change to the package
that breaks one would go unnoticed until the next person reruns it. Each takes ``--quick``
(its whole code path on tiny sizes, in seconds) and ``--out`` (``tests/experiments/
_quick.py``). The scripts are found by listing the two folders, so a new script without a
quick mode fails here. They run in this process (``main(argv)``), sharing its imports;
those that need other processes (``vimpc run`` for the interrupt and workers benchmarks)
start them themselves.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (ROOT / "tests" / "benchmarks", ROOT / "tests" / "experiments")
SCRIPTS = sorted(
    (p for folder in FOLDERS for p in folder.glob("*.py") if not p.name.startswith("_")),
    key=lambda p: p.stem,
)
RESULTS = ROOT / "results"

# arguments added to --quick --out DIR; do-mpc is an optional extra (.[bench]): its half of
# the comparison runs in test_bench_dompc_quick_with_dompc when it is installed
EXTRA = {"bench_dompc": ["--without-dompc"]}
# quick modes too slow for the default suite (pytest -m slow runs them), with the reason
SLOW: dict[str, str] = {
    "docs_screenshots": "~30 s (the quick documentation site built and opened in headless "
    "Chromium, which only Debian's chromium package provides); tests/test_docs.py builds the "
    "site in the default suite",
    "bench_ray_fault": "~25 s (a local sweep and a sweep on its own Ray cluster, twelve model "
    "fits); the same kill-and-compare path runs on the module's cluster in "
    "test_ray_backend.py::test_a_sweep_with_a_killed_worker_completes_with_the_local_results",
}


def _module(script: Path, monkeypatch: pytest.MonkeyPatch):
    """The script imported as a module, its folder and the other's (private helpers) on
    the path as when it runs as a script."""
    for folder in FOLDERS:
        monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(script.stem)


def _results() -> dict[str, tuple[int, int]]:
    """Size and modification time of every committed result file (``results/runs`` is
    where ``vimpc run`` writes by default, not committed)."""
    return {
        str(p.relative_to(RESULTS)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in RESULTS.rglob("*")
        if p.is_file() and p.relative_to(RESULTS).parts[0] != "runs"
    }


def _run_quick(script: Path, out: Path, monkeypatch, extra: list[str]) -> list[str]:
    module = _module(script, monkeypatch)
    before = _results()
    code = module.main(["--quick", "--out", str(out), *extra])
    assert code in (None, 0), f"{script.name} --quick returned {code}"
    assert _results() == before, f"{script.name} --quick changed files under results/"
    return sorted(p.name for p in out.iterdir())


def _rows(table: Path) -> dict[str, int]:
    """How many rows of the markdown ``table`` name a vimpc and a do-mpc controller."""
    lines = table.read_text().splitlines()
    return {
        "vimpc": sum(line.startswith("| vimpc ") for line in lines),
        "do-mpc": sum(line.startswith("| do-mpc,") for line in lines),
    }


def test_scripts_found():
    names = {p.stem for p in SCRIPTS}
    assert {"bench_dompc", "bench_tube", "gp_vi_samples", "structure_preservation"} <= names
    assert set(EXTRA) | set(SLOW) <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_script_takes_quick_and_out(script, monkeypatch, capsys):
    module = _module(script, monkeypatch)
    assert callable(getattr(module, "main", None)), f"{script.name} has no main(argv)"
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"])
    assert stop.value.code == 0
    usage = capsys.readouterr().out
    assert "--quick" in usage and "--out" in usage, f"{script.name} lacks --quick or --out"


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in SLOW else [])
        for p in SCRIPTS
    ],
)
@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")  # tiny fits are warned about
def test_quick_mode_runs(script, tmp_path, monkeypatch):
    if script.stem == "bench_ray_fault":
        pytest.importorskip("ray", reason='Ray is the optional extra .[ray] (pip install "ray")')
    out = tmp_path / "out"
    written = _run_quick(script, out, monkeypatch, EXTRA.get(script.stem, []))
    assert any(name.endswith(".md") for name in written), written
    if script.stem == "bench_dompc":  # the vimpc half of the comparison, without do-mpc
        assert _rows(out / "dompc.md") == {"vimpc": 3, "do-mpc": 0}
    if script.stem == "scenarios_summary":  # a row per scenario, with its model's origin
        _check_summary(out / "summary.csv")
    if script.stem == "gp_vi_closed_loop":  # the success test's error and threshold sweep
        _check_gp_vi_closed_loop(out, _module(script, monkeypatch))
    if script.stem == "hamel_closed_loop":  # the three models on the same short episode
        _check_hamel_closed_loop(out / "summary.csv")
    if script.stem == "bench_ray_fault":  # a worker killed, the same episodes as local
        text = (out / "ray_fault.md").read_text()
        assert "A worker killed: yes" in text
        assert "per-episode results identical to the uninterrupted run: met" in text


def _check_summary(table: Path) -> None:
    """The quick summary: its two scenarios, the nominal model built, the bounded one fitted
    (or its cached fit reused), every count within its total."""
    import csv

    with open(table, newline="") as f:
        rows = {r["scenario"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["pendulum_swingup", "cartpole_safe"]
    assert rows["pendulum_swingup"]["provenance"] == "built from the scenario (nothing to fit)"
    fitted = rows["cartpole_safe"]["provenance"]
    assert fitted.startswith(("fitted by this run", "fit reused from the cache")), fitted
    assert rows["cartpole_safe"]["model"].endswith("conformal bound at delta 0.05")
    for r in rows.values():
        assert (r["episodes"], r["steps"], r["solves"]) == ("1", "3", "3")
        assert 0 <= int(r["solves_over_dt"]) <= int(r["solves"])


def _check_hamel_closed_loop(table: Path) -> None:
    """The quick rolling-disk comparison: a row per model, each one episode of 3 solves,
    its final errors and counts within range, and the paths figure."""
    import csv

    with open(table, newline="") as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["hamel", "nominal", "free rigid body"]
    for r in rows.values():
        assert (r["episodes"], r["solves"]) == ("1", "3")
        assert 0 <= int(r["failed_solves"]) <= 3 and 0 <= int(r["touched"]) <= 1
        assert float(r["final_position_error_mean_m"]) > 0.0
    assert (table.parent / "paths.png").stat().st_size > 0


def _check_gp_vi_closed_loop(out: Path, module) -> None:
    """The quick GP-VI closed loop: an error and a threshold figure per scenario; 15
    thresholds per model, the scenario's giving each run's recorded success count and no
    rate falling as the threshold grows; --report-only rewrites the same tables from the
    stored errors."""
    import csv

    meta, kept = module.load_store(out / module.STORE)
    with open(out / "closed_loop_threshold.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 15 * len(kept) == 15 * len(meta["rows"])
    for run in meta["rows"]:
        name, model = run["scenario"], run["model"]
        assert {f"closed_loop_error_{name}.png", f"closed_loop_threshold_{name}.png"} <= {
            p.name for p in out.iterdir()
        }
        mine = [r for r in rows if (r["scenario"], r["model"]) == (name, model)]
        at_scenario = [r for r in mine if float(r["times_scenario_threshold"]) == 1.0]
        recorded = round(run["success"] * run["episodes"])
        assert [int(r["successes"]) for r in at_scenario] == [recorded]
        rates = [float(r["success_rate"]) for r in mine]
        assert rates == sorted(rates), rates
    before = {n: (out / n).read_text() for n in ("closed_loop.md", "closed_loop_threshold.csv")}
    module.main(["--quick", "--out", str(out), "--report-only"])
    assert {n: (out / n).read_text() for n in before} == before


def test_scenarios_summary_refuses_unknown_episode_count(tmp_path, monkeypatch):
    """A misspelt --episodes-for stops the summary before any run, naming the scenarios."""
    module = _module(FOLDERS[1] / "scenarios_summary.py", monkeypatch)
    with pytest.raises(SystemExit, match="--episodes-for takes NAME=N .*'pendulm_swingup=5'"):
        module.main(["--quick", "--out", str(tmp_path), "--episodes-for", "pendulm_swingup=5"])
    assert not any(tmp_path.iterdir())


@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_bench_dompc_quick_with_dompc(tmp_path, monkeypatch):
    pytest.importorskip(
        "do_mpc", reason='do-mpc is the optional extra .[bench] (pip install "do-mpc>=5.0")'
    )
    _run_quick(FOLDERS[0] / "bench_dompc.py", tmp_path, monkeypatch, [])
    # do-mpc: two rows in the table and two in the ratios
    assert _rows(tmp_path / "dompc.md") == {"vimpc": 3, "do-mpc": 2 * 2}


@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_gp_vi_samples_figure_from_its_table_is_the_runs_figure(tmp_path, monkeypatch):
    """``--plot-from`` draws from the CSV alone the figure the run drew from its rows, and
    refuses a CSV that is not this script's table."""
    import json

    from vimpc.errors import InputError

    script = FOLDERS[1] / "gp_vi_samples.py"
    run, redrawn = tmp_path / "run", tmp_path / "redrawn"
    _run_quick(script, run, monkeypatch, [])
    table = run / "samples.csv"
    names = _run_quick(script, redrawn, monkeypatch, ["--plot-from", str(table)])
    assert names == ["samples.png", "samples.png.provenance.json"]
    assert (redrawn / "samples.png").read_bytes() == (run / "samples.png").read_bytes()
    record = json.loads((redrawn / "samples.png.provenance.json").read_text())
    assert f"--plot-from {table}" in record["command"]
    other = tmp_path / "other.csv"
    other.write_text("system,model\npendulum,x\n")
    with pytest.raises(InputError, match="--plot-from .*other.csv: expected a samples.csv"):
        _module(script, monkeypatch).main(
            ["--quick", "--out", str(tmp_path / "x"), "--plot-from", str(other)]
        )


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_bench_lsi_quick_compiled(tmp_path, monkeypatch):
    """The opt-in rows of the step compiled to C (a C compile of several seconds)."""
    _run_quick(FOLDERS[0] / "bench_lsi.py", tmp_path, monkeypatch, ["--compiled"])
    assert "step compiled" in (tmp_path / "lsi.md").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--quick"], "--quick needs --out DIR"),
        (["--quick", "--out", str(RESULTS / "scenarios")], "must be outside results"),
    ],
)
def test_quick_writes_only_outside_results(argv, message, monkeypatch, capsys):
    module = _module(FOLDERS[1] / "structure_preservation.py", monkeypatch)
    before = _results()
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    assert _results() == before


def test_quick_keeps_explicit_arguments(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FOLDERS[1]))
    from _quick import add_options, parse

    def parser():
        p = argparse.ArgumentParser()
        p.add_argument("--steps", type=int, default=1000)
        add_options(p, RESULTS / "x")
        return p

    quick = {"steps": 5}
    assert parse(parser(), ["--quick", "--out", str(tmp_path)], RESULTS, quick).steps == 5
    argv = ["--quick", "--out", str(tmp_path), "--steps", "7"]
    assert parse(parser(), argv, RESULTS, quick).steps == 7
    full = parse(parser(), [], RESULTS / "x", quick)
    assert (full.steps, full.out, full.quick) == (1000, RESULTS / "x", False)


def test_the_gp_vi_rollouts_go_on_past_their_first_chunk(monkeypatch):
    # the runs of Figs. 1a and 1b go in chunks of CHUNK steps; a quick run (100 steps) is one
    # chunk, and a full run's second chunk once failed on a name the first had rebound
    import numpy as np

    monkeypatch.syspath_prepend(str(FOLDERS[1]))
    energy = importlib.import_module("gp_vi_energy")
    constraints = importlib.import_module("gp_vi_constraints")
    from vimpc.integrators import ExplicitIntegrator
    from vimpc.mechanics import DoublePendulum, Pendulum

    system = Pendulum()
    step = ExplicitIntegrator(system, "euler").step_function(energy.H)
    xs, errs = energy.rollout(system, step, 25, chunk=10)
    whole, _ = energy.rollout(system, step, 25, chunk=25)
    assert xs.shape == (26, 2) and errs.shape == (26,)
    np.testing.assert_allclose(xs, whole, rtol=0, atol=1e-12)
    maximal = DoublePendulum().maximal()
    x0 = constraints.start(DoublePendulum())
    step = ExplicitIntegrator(maximal, "rk4").step_function(constraints.H)
    run = constraints.rollout(maximal, step, x0, 25, chunk=10)
    assert run.res.shape[0] == 26 and run.failed is None
    # a maximum quoted as "max |g| <= b" is rounded up, never below what it bounds
    for x in (1.2455e-11, 1.2e-11, 9.99e-5, 3.0):
        quoted = float(constraints.rounded_up(x))
        assert x <= quoted <= x * 1.1, (x, quoted)
    assert constraints.rounded_up(1.2455e-11) == "1.3e-11"


def test_the_chain_metric_and_the_authors_test_starts(monkeypatch):
    # clnn_chain's two readings of the geometric mean on a prediction whose relative error is
    # the same e at every step after the start, and its two kinds of test start
    import argparse

    import numpy as np

    monkeypatch.syspath_prepend(str(FOLDERS[1]))
    chain = importlib.import_module("clnn_chain")
    steps, e = 100, 3e-4
    true = np.ones((2, steps + 1, 4))
    pred = true * (1 + 2 * e / (1 - e))  # |p - t| / (|p| + |t|) = e
    pred[:, 0] = true[:, 0]
    np.testing.assert_allclose(chain.geometric_error(pred, true, "steps"), e + 1e-8, rtol=1e-9)
    # the trapezoid rule on t = 0 .. (steps - 1) dt over T = steps dt: the start, where the
    # error is 0 (log 1e-8), and the last point it reaches weigh dt / 2
    logs = (0.5 * np.log(1e-8) + (steps - 1.5) * np.log(e + 1e-8)) / steps
    np.testing.assert_allclose(chain.geometric_error(pred, true, "trapezoid"), np.exp(logs),
                               rtol=1e-9)  # fmt: skip
    # a rollout that blew up counts at the metric's largest value, 1, whether its states
    # became NaN or so large that their norm overflows
    for bad in (np.nan, 1e300):
        blown = pred.copy()
        blown[1, steps // 2 :] = bad
        err = chain.geometric_error(blown, true, "steps")
        good = steps // 2 - 1  # steps 1 .. steps // 2 - 1 of the steps after the start
        expected = np.exp((good * np.log(e + 1e-8) + (steps - good) * np.log(1 + 1e-8)) / steps)
        np.testing.assert_allclose(err, [e + 1e-8, expected], rtol=1e-9)
    system = chain.chain(2)
    args = argparse.Namespace(test=3, steps=12, chunk=4, test_starts="initial")
    initial = chain.test_starts(system, args, np.random.default_rng(5))
    np.testing.assert_array_equal(
        initial, chain.initial_conditions(system, 3, np.random.default_rng(5))
    )
    args.test_starts = "chunk"
    starts = chain.test_starts(system, args, np.random.default_rng(5))
    X = chain.trajectories(system, initial, args.steps)
    # each start is a state of its own trajectory, at a step a whole window fits after
    for i in range(3):
        k = np.flatnonzero(np.all(np.isclose(X[i], starts[i], rtol=0, atol=1e-15), axis=1))
        assert len(k) == 1 and k[0] <= args.steps - args.chunk, k
