"""``vimpc run`` and ``vimpc sweep`` with ``--backend ray``: the same per-episode results as
the local backend, a local cluster bound to loopback, a killed worker's episode run again
with nothing lost or kept twice, a Ctrl-C that stops the tasks and leaves the run
incomplete and resumable, bad input refused before any work, and Ray imported only when
asked for.

One local cluster (2 CPUs) serves the module; commands run in this process reuse it."""

from __future__ import annotations

import _thread
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from vimpc import cli
from vimpc.closedloop.episode import WALL_CLOCK
from vimpc.errors import ConfigError
from vimpc.runs import ray as ray_backend
from vimpc.runs import store

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from _common import descendants, process_title, timeless  # noqa: E402
from test_sweep import _interrupt_after  # noqa: E402  (a Ctrl-C after the k-th episode)

HAVE_RAY = importlib.util.find_spec("ray") is not None

TINY = ["--set", "episodes.count=4", "--set", "episodes.steps=5"]
SWEEP = """
scenario = "pendulum_swingup"

[sweep]
name = "horizons"

[set]
episodes.count = 3
episodes.steps = 30

[grid]
controller.horizon = [4, 5]
"""


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs for the module (Ray imported only here)."""
    if not HAVE_RAY:
        pytest.skip("the Ray backend needs ray: pip install -e '.[ray]'")
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with ray_backend.connected(None, 2) as opened:
        yield opened
    # ray.init's SIGTERM handler does not outlive the cluster
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


@pytest.fixture(scope="module")
def local_tiny(tmp_path_factory) -> Path:
    """The run folder of the tiny run on the local backend."""
    out = tmp_path_factory.mktemp("local_tiny")
    assert _run(out) == 0
    return _only(out / "pendulum_swingup")


def _run(out: Path, *extra: str) -> int:
    return cli.main(["run", "pendulum_swingup", *TINY, "--out", str(out), "--quiet", "--no-plots",
                     *extra])  # fmt: skip


def _same_episodes(a: Path, b: Path) -> int:
    """Assert the episodes kept in run folders ``a`` and ``b`` are equal, bit for bit but
    for the measured times; returns how many there are."""
    names = sorted(p.name for p in a.glob("episode_*.json"))
    assert names == sorted(p.name for p in b.glob("episode_*.json")) and names
    for name in names:
        ja, jb = (json.loads((f / name).read_text()) for f in (a, b))
        assert timeless(ja) == timeless(jb), name
        with np.load(a / name.replace(".json", ".npz")) as na:
            with np.load(b / name.replace(".json", ".npz")) as nb:
                assert na.files == nb.files
                for key in set(na.files) - set(WALL_CLOCK):
                    assert np.array_equal(na[key], nb[key], equal_nan=na[key].dtype.kind == "f")
    return len(names)


def _only(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


# -- the cluster ---------------------------------------------------------------------------------


def test_the_local_cluster_binds_to_loopback(cluster):
    assert cluster.owned and cluster.cpus == min(2, len(os.sched_getaffinity(0)))
    nodes = cluster.ray.nodes()
    assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]
    assert cluster.address.startswith("127.0.0.1:")
    assert cluster.ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"


# -- the same results ----------------------------------------------------------------------------


def test_a_run_on_ray_keeps_the_episodes_of_a_local_run(cluster, local_tiny, tmp_path):
    assert _run(tmp_path / "ray", "--backend", "ray", "--workers", "2") == 0
    local = local_tiny
    on_ray = _only(tmp_path / "ray" / "pendulum_swingup")
    assert _same_episodes(local, on_ray) == 4
    ma, mb = (json.loads((f / "metrics.json").read_text()) for f in (local, on_ray))
    assert timeless(ma["per_episode"]) == timeless(mb["per_episode"])
    (session,) = mb["sessions"]
    assert session["backend"] == "ray" and session["processes"] == cluster.cpus
    assert session["episodes_run"] == 4 and "127.0.0.1" in session["ray_cluster"]


def test_auto_is_the_cluster_of_ray_address(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert ray_backend._auto_address() == "127.0.0.1:6379"


def test_a_run_on_an_existing_cluster_leaves_it_running(cluster, local_tiny, tmp_path):
    # another process connects to the module's cluster with --address auto (its token mode
    # is inherited)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_ADDRESS": cluster.address}
    address = "auto"
    done = subprocess.run(
        [sys.executable, "-m", "vimpc.cli", "run", "pendulum_swingup", *TINY, "--out",
         str(tmp_path / "ray"), "--quiet", "--no-plots", "--backend", "ray", "--address",
         address, "--workers", "2"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    on_ray = _only(tmp_path / "ray" / "pendulum_swingup")
    assert _same_episodes(local_tiny, on_ray) == 4
    (session,) = json.loads((on_ray / "metrics.json").read_text())["sessions"]
    assert session["ray_cluster"] == f"Ray cluster at {cluster.address} ({cluster.cpus} CPUs)"
    assert [n["Alive"] for n in cluster.ray.nodes()] == [True]  # not stopped by the run


class _KillOneEpisodeWorker(threading.Thread):
    """SIGKILL the first Ray worker of this process's cluster seen running an episode."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.killed: int | None = None
        self.stop = False

    def run(self) -> None:
        while not self.stop and self.killed is None:
            for pid in descendants(os.getpid()):
                if process_title(pid) == "ray::episode":
                    os.kill(pid, signal.SIGKILL)
                    self.killed = pid
                    return
            time.sleep(0.02)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds workers in /proc")
def test_a_sweep_with_a_killed_worker_completes_with_the_local_results(cluster, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP, encoding="utf-8")
    base = ["sweep", str(path), "--quiet", "--no-plots"]
    assert cli.main([*base, "--out", str(tmp_path / "local")]) == 0
    killer = _KillOneEpisodeWorker()
    killer.start()
    try:
        code = cli.main([*base, "--out", str(tmp_path / "ray"), "--backend", "ray",
                         "--workers", "2"])  # fmt: skip
    finally:
        killer.stop = True
        killer.join()
    assert code == 0 and killer.killed is not None, "no episode worker was killed"
    final = tmp_path / "ray" / "horizons"
    manifest = json.loads((final / "sweep.json").read_text())
    assert manifest["complete"] is True and manifest["failed"] == {}
    for cid in ("c00", "c01"):
        assert _same_episodes(tmp_path / "local" / "horizons" / cid, final / cid) == 3
        metrics = json.loads((final / cid / "metrics.json").read_text())
        assert metrics["seeds"] == [0, 1, 2] and len(metrics["per_episode"]) == 3
        ray_sessions = [s for s in metrics["sessions"] if s.get("backend") == "ray"]
        # each episode kept once, the killed one included
        assert [s["episodes_run"] for s in ray_sessions] == [3]
    assert "Ray processes at once" in (final / "summary.md").read_text()


def test_an_interrupted_sweep_on_ray_resumes_only_what_is_missing(
    cluster, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.replace("episodes.steps = 30", "episodes.steps = 4"), encoding="utf-8")
    args = ["--quiet", "--no-plots", "--backend", "ray", "--workers", "2"]
    _interrupt_after(monkeypatch, 4)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "out"), *args]) == 130
    stage = tmp_path / "out" / "horizons.partial"
    assert f"vimpc sweep --resume {stage}" in capsys.readouterr().err
    assert not list(stage.glob("summary.*")) and not (tmp_path / "out" / "horizons").exists()
    # episodes end in any order: a configuration whose 3 were among the 4 is complete
    complete = [c for c in ("c00", "c01") if (stage / c / "metrics.json").is_file()]
    assert json.loads((stage / "sweep.json").read_text())["missing"] == [
        c for c in ("c00", "c01") if c not in complete
    ]
    kept = {c: store.finished(stage / f"{c}.partial", 3) for c in ("c00", "c01")}
    assert sum(len(k) for k in kept.values()) + 3 * len(complete) == 4
    for cid, done in kept.items():
        if cid in complete:
            continue
        run = json.loads((stage / f"{cid}.partial" / "run.json").read_text())
        assert run["missing"] == sorted(set(range(3)) - set(done))
        assert run["sessions"][-1]["ended"] == "interrupted"
        assert not (stage / f"{cid}.partial" / "metrics.json").exists()
    monkeypatch.undo()
    calls = _interrupt_after(monkeypatch, 100)
    capsys.readouterr()
    assert cli.main(["sweep", "--resume", str(stage), *args[1:]]) == 0  # with the bar
    assert len(calls) == 2  # the two missing episodes, nothing else
    bar = capsys.readouterr().err.splitlines()[-1]
    assert "2/2" in bar and "episodes=2" in bar and "failed=0" in bar, bar
    assert (tmp_path / "out" / "horizons" / "summary.csv").is_file()


def test_fits_of_different_settings_run_as_ray_tasks_and_are_cached(cluster, tmp_path, capsys):
    text = """
scenario = "cartpole_safe"

[sweep]
name = "fits"

[set]
data.trajectories = 6
data.heldout_trajectories = 20
episodes.count = 1
episodes.steps = 2
controller.horizon = 5
data.calibration = "heldout"
model.bound_level = "step"
model.bound_horizon = 0

[grid]
data.seed = [101, 202]
episodes.seed = [0, 10]
"""
    path = tmp_path / "sweep.toml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    args = ["sweep", str(path), "--out", str(out), "--quiet", "--no-plots", "--backend", "ray"]
    assert cli.main([*args, "--workers", "2", "--refit"]) == 0
    assert "fitting 2 model(s) as Ray tasks (2 at once)" in capsys.readouterr().out
    models = [
        json.loads((out / "fits" / c / "metrics.json").read_text())["model"]
        for c in ("c00", "c01", "c02", "c03")
    ]
    # one fit per data.seed, recorded as made now by its first configuration only
    assert [m["fitted_now"] for m in models] == [True, False, True, False]
    assert [m["data_seed"] for m in models] == [101, 101, 202, 202]
    assert models[0]["sha256"] == models[1]["sha256"] != models[2]["sha256"]
    assert all(Path(m["path"]).is_file() for m in models)
    assert "(fitted as a Ray task" in (out / "fits" / "c00.log").read_text()


def _corrupt(data: bytes) -> bytes:
    return data.replace(b'"dt": ', b'"dt": 1', 1)


def test_an_episode_error_on_a_worker_is_raised_with_its_own_type(cluster, tmp_path):
    from vimpc import model_file, pipeline, scenario
    from vimpc.errors import InputError
    from vimpc.scenario.catalog import find_scenario

    cfg = scenario.load_scenario(find_scenario("pendulum_swingup"), ["episodes.steps=2"])
    path = model_file.save(pipeline.build_model(cfg, pipeline.build_env(cfg)), tmp_path / "m.vimpc")
    path.write_bytes(_corrupt(path.read_bytes()))
    with pytest.raises(InputError, match="is corrupt"):
        ray_backend.run_episodes(cfg, path, [0, 1], workers=2)


def test_a_configuration_whose_episodes_fail_on_ray_is_counted_and_resumed(
    cluster, tmp_path, monkeypatch, capsys
):
    from vimpc import model_file, pipeline, scenario
    from vimpc.scenario.catalog import find_scenario

    cfg = scenario.load_scenario(find_scenario("pendulum_swingup"))
    model = model_file.save(
        pipeline.build_model(cfg, pipeline.build_env(cfg)), tmp_path / "pendulum.vimpc"
    )
    path = tmp_path / "sweep.toml"
    text = SWEEP.replace("episodes.steps = 30", f"episodes.steps = 2\nmodel.path = {str(model)!r}")
    path.write_text(text, encoding="utf-8")

    def corrupted(paths):  # the model file, corrupted on its way to the workers
        return [ray_backend.put(_corrupt(Path(p).read_bytes())) for p in paths]

    monkeypatch.setattr(ray_backend, "model_bytes", corrupted)
    args = ["--quiet", "--no-plots", "--backend", "ray", "--workers", "2"]
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    stage = tmp_path / "out" / "horizons.partial"
    assert "2 of 2 configurations failed" in err and "c00: InputError" in err
    manifest = json.loads((stage / "sweep.json").read_text())
    assert manifest["missing"] == ["c00", "c01"] and set(manifest["failed"]) == {"c00", "c01"}
    assert "is corrupt" in (stage / "c01.log").read_text()
    monkeypatch.undo()
    assert cli.main(["sweep", "--resume", str(stage), *args]) == 0
    assert (tmp_path / "out" / "horizons" / "summary.csv").is_file()


# -- a Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_stops_a_run_on_ray_and_its_tasks_and_the_run_resumes(cluster, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vimpc.cli", "run", "pendulum_swingup", "--set",
         "episodes.count=8", "--set", "episodes.steps=150", "--out", str(out), "--quiet",
         "--no-plots", "--backend", "ray", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.perf_counter() + 60
    stage = None
    while time.perf_counter() < deadline and proc.poll() is None:
        stages = list((out / "pendulum_swingup").glob("*.partial")) if out.exists() else []
        if stages and store.finished(stages[0], 8):
            stage = stages[0]
            break
        time.sleep(0.05)
    assert stage is not None and proc.poll() is None, "no episode was kept before the end"
    helpers = descendants(proc.pid)  # the cluster: GCS, raylet, workers, agents
    assert any(process_title(p).startswith("ray::") for p in helpers), "the run has no Ray workers"
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("one SIGINT did not stop the run within 30 s") from None
    assert code == 130 and time.perf_counter() - sent < 20
    assert f"vimpc run --resume {stage}" in proc.stderr.read()
    # the cluster this run started is gone with its workers
    for _ in range(100):
        alive = [p for p in helpers if Path(f"/proc/{p}").exists() and process_title(p)]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"Ray processes {alive} outlived the interrupted run"
    assert [p.name for p in (out / "pendulum_swingup").iterdir()] == [stage.name]
    assert not (stage / "metrics.json").exists()
    manifest = json.loads((stage / "run.json").read_text())
    done = store.finished(stage, 8)
    assert 0 < len(done) < 8 and manifest["missing"] == sorted(set(range(8)) - set(done))
    assert manifest["sessions"][0]["ended"] == "interrupted"
    # resumed on the module's cluster: only the missing episodes run
    code = cli.main(["run", "--resume", str(stage), "--quiet", "--no-plots", "--backend", "ray",
                     "--workers", "2"])  # fmt: skip
    assert code == 0
    final = stage.with_name(stage.name[: -len(".partial")])
    metrics = json.loads((final / "metrics.json").read_text())
    assert [s["episodes_run"] for s in metrics["sessions"]] == [len(done), 8 - len(done)]


def test_ctrl_c_on_a_cluster_the_run_connected_to_cancels_its_running_tasks(cluster, tmp_path):
    # the module's cluster outlives the run, so its tasks must be cancelled, not stopped with
    # it: both run an episode of some 20 s (20000 steps) when the Ctrl-C comes
    ray = cluster.ray
    fired = threading.Event()

    def interrupt_when_both_run() -> None:
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline:
            busy = [p for p in descendants(os.getpid()) if process_title(p) == "ray::episode"]
            if len(busy) == 2:
                time.sleep(0.5)  # inside the closed loop, past the controller's start-up
                fired.set()
                _thread.interrupt_main()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=interrupt_when_both_run, daemon=True)
    watcher.start()
    code = cli.main(["run", "pendulum_swingup", "--set", "episodes.count=2", "--set",
                     "episodes.steps=20000", "--out", str(tmp_path / "out"), "--quiet",
                     "--no-plots", "--backend", "ray", "--workers", "2"])  # fmt: skip
    returned = time.perf_counter()
    assert fired.is_set() and code == 130
    while ray.available_resources().get("CPU", 0) < cluster.cpus:
        assert time.perf_counter() - returned < 5, "a cancelled episode still holds its CPU"
        time.sleep(0.05)
    # no episode finished: nothing is kept that could look like a result
    assert not list((tmp_path / "out" / "pendulum_swingup").iterdir())


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["ray://127.0.0.1:1", "127.0.0.1:1"])
def test_an_unreachable_address_is_an_error_within_30_s(address, tmp_path, capsys):
    started = time.perf_counter()
    assert _run(tmp_path / "out", "--backend", "ray", "--address", address) == 2
    assert time.perf_counter() - started < 30
    err = capsys.readouterr().err
    assert f"--address {address!r}: no Ray cluster answers at 127.0.0.1:1" in err
    assert not (tmp_path / "out" / "pendulum_swingup").exists()


def test_a_port_where_no_ray_cluster_answers_is_an_error_not_a_hang(monkeypatch):
    import socket

    if not HAVE_RAY:
        pytest.skip("the trial connection is a Ray client: ray is the optional extra .[ray]")
    monkeypatch.setattr(ray_backend, "PROBE_TIMEOUT_S", 3.0)
    with socket.socket() as server:  # accepts connections and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        started = time.perf_counter()
        with pytest.raises(ConfigError) as error:
            ray_backend._probe(address, address, loopback=True)
        assert time.perf_counter() - started < 10
    assert f"{address} accepts connections, but no Ray cluster answered there within 3 s" in str(
        error.value
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--address", "auto"], "--address 'auto' applies to --backend ray only"),
        (["--backend", "ray", "--address", "nowhere"], "--address must be auto, HOST:PORT"),
        (["--backend", "ray", "--address", "ray://host:99999"], "got 'ray://host:99999'"),
    ],
)
def test_bad_backend_options_are_refused_before_any_work(extra, message, tmp_path, capsys):
    assert _run(tmp_path / "out", *extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_two_sweeps_into_one_folder_are_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the bad input was refused")

    monkeypatch.setattr(ray_backend, "connected", refuse)
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP, encoding="utf-8")
    (tmp_path / "out" / "horizons").mkdir(parents=True)
    args = ["sweep", str(path), "--out", str(tmp_path / "out"), "--backend", "ray"]
    assert cli.main(args) == 2
    assert "holds a sweep already" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["2.9.3", "1.13.0", "2.29.1"])
def test_a_ray_too_old_is_refused_naming_its_version(version):
    with pytest.raises(ConfigError, match=rf"needs Ray >= 2\.30, found Ray {version}"):
        ray_backend.check_version(version)


@pytest.mark.parametrize("version", ["2.30.0", "2.60.0", "3.0.0.dev0"])
def test_a_recent_ray_is_accepted(version):
    ray_backend.check_version(version)


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )


def test_without_ray_the_backend_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from vimpc import cli\n"
        f"sys.exit(cli.main(['run', 'pendulum_swingup', '--out', {str(tmp_path / 'o')!r}, "
        "'--backend', 'ray']))\n"
    )
    done = _python(code, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "needs Ray, which is not installed" in done.stderr
    assert 'pip install "vimpc[ray]"' in done.stderr
    assert not (tmp_path / "o" / "pendulum_swingup").exists()


def test_import_vimpc_and_a_local_run_do_not_import_ray(tmp_path):
    code = (
        "import sys\n"
        "import vimpc\n"
        "assert 'ray' not in sys.modules, 'import vimpc imported ray'\n"
        "from vimpc import cli\n"
        f"code = cli.main(['run', 'pendulum_swingup', '--set', 'episodes.count=1', '--set', "
        f"'episodes.steps=2', '--out', {str(tmp_path / 'o')!r}, '--quiet', '--no-plots'])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.filterwarnings("ignore::vimpc.errors.FitWarning")
def test_an_episode_task_of_a_network_model_does_not_import_torch(tmp_path):
    """A worker gets a torch-trained model as its ``.vimpc`` bytes and runs the episode with
    CasADi alone: the episode task (what a Ray worker runs) in a fresh process leaves torch
    unimported."""
    import pickle

    from vimpc import pipeline, scenario
    from vimpc.model_file import save
    from vimpc.models.families.dlnn import DLNNModel

    sets = ["episodes.steps=3", "controller.horizon=5", "data.trajectories=4", "data.steps=10"]
    cfg = scenario.load_scenario(Path("scenarios/pendulum_swingup.toml"), sets)
    env = pipeline.build_env(cfg)
    data = pipeline.collect(cfg, env, "train")
    model = DLNNModel(env.nominal_system, env.dt, hidden=[8], epochs=5).fit(data).discrete_model()
    save(model, tmp_path / "dlnn.vimpc")
    (tmp_path / "cfg.pickle").write_bytes(pickle.dumps(cfg))
    code = (
        "import pickle, sys\n"
        "from pathlib import Path\n"
        "from vimpc.runs import ray as ray_backend\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "cfg = pickle.loads((folder / 'cfg.pickle').read_bytes())\n"
        "_, metrics = ray_backend.episode(cfg, 'k', 0, 0, (folder / 'dlnn.vimpc').read_bytes())\n"
        "print(metrics['steps'], 'torch' in sys.modules, 'ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "False", "False"]
