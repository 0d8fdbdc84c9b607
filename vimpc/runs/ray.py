"""The Ray backend of runs and sweeps (``backend="ray"``, ``--backend ray``):
:class:`vimpc.runs.backends.RayBackend` calls these.

Ray is an optional extra (``pip install "vimpc[ray]"``), imported only here and only when
the backend is asked for. Where the work runs:

- without ``--address``, a local Ray cluster that vimpc starts and stops: ``num_cpus`` =
  the worker count, every server bound to the loopback interface (127.0.0.1), no
  dashboard, usage statistics off (``RAY_USAGE_STATS_ENABLED=0``);
- ``--address auto`` (the cluster of ``RAY_ADDRESS`` or the last ``ray start`` on this
  machine), ``--address HOST:PORT`` (a cluster's GCS) or ``--address ray://HOST:PORT``
  (Ray Client; needs ``ray[client]``): an existing cluster, left running. Its nodes need the
  same vimpc installed. The address is checked with a TCP connection first
  (:data:`CONNECT_TIMEOUT_S`), then by a trial connection in a child process ended after
  :data:`PROBE_TIMEOUT_S`, so an unreachable address, or a port where no Ray cluster
  answers, is an error within 30 s, not a hang.

The unit of work is an episode (and, for a sweep, a fit): the sweep's process keeps every
file. A model travels to the workers as the bytes of its ``.vimpc`` file (put once in the
object store), which a worker writes to a temporary file of its own and loads, so no
worker reads the driver's disk and none imports torch unless a fit runs there. A worker
keeps the runners (env, model, controller) of the last :data:`RUNNERS_KEPT`
configurations it ran, so the episodes of one configuration build its controller once per
worker. An episode is a pure function of its configuration, model, seed and fit: its
results are those of the local backend, whatever the number of workers.

Faults: a worker process that dies (killed, out of memory) has its task run again, up to
:data:`MAX_RETRIES` times (Ray's ``max_retries``; an exception raised by the episode itself
is not retried: it would be raised again). Each episode is kept by the driver once, when its
result arrives. A Ctrl-C or an error in the driver ends every task not finished before the
exception goes on: a local cluster the command started is stopped with its workers; on a
cluster it connected to, the tasks are cancelled (``ray.cancel``, which raises
``KeyboardInterrupt`` in a running task). Not ``force=True``: Ray (2.60) aborts the driver
when a task it force-cancels completes at the same moment.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vimpc.errors import ConfigError, WorkerError

#: the oldest Ray vimpc is tested with (the loopback binding of a local cluster needs it)
MIN_RAY = (2, 30)
INSTALL = 'pip install "vimpc[ray]" (from a checkout: pip install -e ".[ray]")'
#: times a task whose worker process died is run again
MAX_RETRIES = 3
#: seconds to wait for a TCP connection to a cluster's address
CONNECT_TIMEOUT_S = 5.0
#: seconds a trial connection to an existing cluster may take (TCP check included: < 30 s)
PROBE_TIMEOUT_S = 20.0
#: runners (controllers) a worker keeps, most recently used first
RUNNERS_KEPT = 4
#: seconds between two looks at the tasks (and at a pending Ctrl-C)
POLL_S = 0.2
LOOPBACK = "127.0.0.1"
BACKENDS = ("local", "ray")


# -- options -------------------------------------------------------------------------------


def check_options(backend: str, address: str | None) -> None:
    """Refuse a combination of ``--backend`` and ``--address`` that cannot work, before any
    work and without importing Ray."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if address is None:
        return
    if backend != "ray":
        raise ConfigError(
            f"--address {address!r} applies to --backend ray only, got --backend {backend}; "
            "add --backend ray, or leave out --address"
        )
    if address == "auto":
        return
    _host_port(address)


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--address must be auto, HOST:PORT (a Ray cluster's GCS address) or "
            f"ray://HOST:PORT (Ray Client), got {address!r}"
        )
    return host.strip("[]"), int(port)


# -- importing Ray ---------------------------------------------------------------------------


def check_version(version: str) -> None:
    """Refuse a Ray older than :data:`MIN_RAY`, naming the version found."""
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    if tuple(parts) < MIN_RAY:
        need = ".".join(map(str, MIN_RAY))
        raise ConfigError(
            f"--backend ray needs Ray >= {need}, found Ray {version}; upgrade it: "
            f'pip install "ray>={need}"'
        )


def import_ray():
    """The ``ray`` module, usage statistics off; a :class:`ConfigError` with the install
    command when it is missing or too old."""
    # before the import: the setting is read then, and by every process Ray starts
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"--backend ray needs Ray, which is not installed ({exc}); install it with {INSTALL}"
        ) from None
    check_version(getattr(ray, "__version__", "0"))
    return ray


# -- the cluster -------------------------------------------------------------------------------


class Cluster:
    """A connection to Ray for one command: a local cluster this process started (and stops
    on :meth:`close`), an existing cluster it connected to, or a connection this process
    already had (a program that called ``ray.init`` itself), left as it was."""

    def __init__(self, ray, *, owned: bool, cpus: int, address: str, reaper=None) -> None:
        self.ray = ray
        self.owned = owned
        self.cpus = cpus
        self.address = address
        self.reaper = reaper  # ends the local cluster's processes if this one is killed

    def close(self) -> None:
        from vimpc import _reaper

        try:
            if self.owned and self.ray.is_initialized():
                self.ray.shutdown()
        finally:
            _reaper.stop(self.reaper)  # and whatever the shutdown left
            self.reaper = None


_CLUSTER: Cluster | None = None


def current() -> Cluster:
    if _CLUSTER is None:
        raise RuntimeError("no Ray cluster is open: wrap the work in vimpc.runs.ray.connected()")
    return _CLUSTER


@contextlib.contextmanager
def connected(address: str | None, workers: int) -> Iterator[Cluster]:
    """Open the cluster of ``--address`` (``None``: start a local one with ``workers``
    CPUs) for the body, and close it after (a local cluster is stopped)."""
    global _CLUSTER
    check_options("ray", address)
    if address not in (None, "auto"):  # an unreachable address fails fast, not in Ray
        _check_reachable(*_host_port(address), address)
    ray = import_ray()
    # ray.init installs a SIGTERM handler (exit, so the run keeps its episodes) and leaves
    # it after shutdown: the process gets its own back at the end
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if ray.is_initialized():
            cluster = _reuse(ray, address)
        elif address is None:
            cluster = _start_local(ray, workers)
        else:
            cluster = _connect(ray, address)
        previous, _CLUSTER = _CLUSTER, cluster
        try:
            yield cluster
        finally:
            _CLUSTER = previous
            cluster.close()
    finally:
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)


def _cpus(ray) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _reuse(ray, address: str | None) -> Cluster:
    here = ray.get_runtime_context().gcs_address
    if address not in (None, "auto", here):
        raise ConfigError(
            f"--address {address!r}: this process is connected to the Ray cluster at {here} "
            "already; give that address or none"
        )
    return Cluster(ray, owned=False, cpus=_cpus(ray), address=here)


@contextlib.contextmanager
def _loopback_node(ray) -> Iterator[None]:
    """Ray replaces a loopback node address by the machine's outward one unless told that
    this machine is no cluster node; while set, its servers bind to 127.0.0.1 only."""
    from ray._private import ray_constants

    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _start_local(ray, workers: int) -> Cluster:
    from vimpc import _reaper
    from vimpc._processes import usable_cores

    cpus = max(1, min(int(workers), usable_cores()))
    # the cluster's processes are the children ray.init starts: Ray ends its raylet and
    # workers with this process, but not its agents, so a watcher ends them if this
    # process is killed
    before = set(_reaper.children(os.getpid()))
    with _loopback_node(ray):
        ray.init(
            address="local",
            num_cpus=cpus,
            _node_ip_address=LOOPBACK,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="warning",
            namespace="vimpc",
        )
    started = sorted(set(_reaper.children(os.getpid())) - before)
    cluster = Cluster(
        ray,
        owned=True,
        cpus=cpus,
        address=ray.get_runtime_context().gcs_address,
        reaper=_reaper.start(started),
    )
    node = ray.nodes()[0]["NodeManagerAddress"]
    if node != LOOPBACK or not cluster.address.startswith(LOOPBACK + ":"):
        cluster.close()
        raise ConfigError(
            f"the local Ray cluster was to bind to {LOOPBACK} only, but it reports node "
            f"{node} and GCS {cluster.address} (Ray {ray.__version__}); it was stopped. Start "
            "a cluster bound to loopback yourself and pass its address with --address"
        )
    return cluster


def _check_reachable(host: str, port: int, address: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--address {address!r}: no Ray cluster answers at {host}:{port} "
            f"({exc.strerror or type(exc).__name__}, {CONNECT_TIMEOUT_S:g} s timeout); start "
            "one (ray start --head), fix the address, or leave out --address for a local one"
        ) from None


def _auto_address() -> str:
    """The address ``--address auto`` means: ``RAY_ADDRESS``, else the cluster ``ray start``
    recorded on this machine."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    record = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    try:
        return record.read_text().strip()
    except OSError:
        raise ConfigError(
            "--address auto: no running Ray cluster was found (RAY_ADDRESS is not set and "
            f"{str(record)!r} does not exist); start one with ray start --head, or leave out "
            "--address for a local cluster"
        ) from None


def _connect(ray, address: str) -> Cluster:
    target = _auto_address() if address == "auto" else address
    host, port = _host_port(target)
    if address == "auto":
        _check_reachable(host, port, address)
    if target.startswith("ray://"):
        import importlib.util

        if importlib.util.find_spec("grpc") is None:
            raise ConfigError(
                f"--address {address!r} is a Ray Client address, which needs the client "
                'extra of Ray: pip install "ray[client]"'
            )
    # a cluster bound to loopback is reached as 127.0.0.1, not as the outward address
    loopback = host in (LOOPBACK, "localhost")
    _probe(target, address, loopback)
    guard = _loopback_node(ray) if loopback else contextlib.nullcontext()
    try:
        with guard:
            ray.init(address=target, log_to_driver=False, logging_level="warning")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"--address {address!r}: cannot connect to Ray: {exc}{_AUTH}") from None
    return Cluster(ray, owned=False, cpus=_cpus(ray), address=target)


_AUTH = (
    " (a cluster with token authentication needs RAY_AUTH_MODE=token and its token in this "
    "environment: https://docs.ray.io/en/latest/ray-security/token-auth.html)"
)


def _probe(target: str, address: str, loopback: bool) -> None:
    """Connect to ``target`` once in a child process that is ended after
    :data:`PROBE_TIMEOUT_S`: Ray retries a port that accepts connections but does not
    answer as a cluster (another service, a refused token) for minutes."""
    import subprocess
    import sys

    code = (
        "import sys, ray\n"
        "ray.init(address=sys.argv[1], log_to_driver=False, logging_level='error')\n"
        "ray.shutdown()\n"
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if loopback:  # as _loopback_node does in this process
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, target],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"--address {address!r}: {target} accepts connections, but no Ray cluster "
            f"answered there within {PROBE_TIMEOUT_S:g} s (another service on that port?)"
            f"{_AUTH}"
        ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1][:300] if lines else f"exit code {done.returncode}"
        raise ConfigError(f"--address {address!r}: cannot connect to Ray: {why}{_AUTH}")


def worker_count(requested: int, tasks: int) -> tuple[int, str | None]:
    """``(tasks in flight, why capped)``: at most one per task and one per CPU of the
    cluster (a local cluster has the requested CPUs, capped by the usable cores)."""
    cpus = current().cpus
    used = max(1, min(requested, tasks, cpus))
    if used == requested:
        return used, None
    reasons = []
    if tasks == used:
        reasons.append(f"{tasks} task{'s' if tasks != 1 else ''} to run")
    if cpus == used:
        reasons.append(f"{cpus} CPU{'s' if cpus != 1 else ''} in the Ray cluster")
    return used, " and ".join(reasons)


# -- the workers' side ---------------------------------------------------------------------------

_RUNNERS: OrderedDict[str, Any] = OrderedDict()
_MODEL_DIR: tempfile.TemporaryDirectory | None = None


def _model_file(data: bytes) -> str:
    """A file of this process holding the model ``data`` (a ``.vimpc`` document)."""
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = tempfile.TemporaryDirectory(prefix="vimpc-ray-models-")
    path = Path(_MODEL_DIR.name) / f"{hashlib.sha256(data).hexdigest()}.vimpc"
    if not path.exists():
        from vimpc._files import write_atomic

        write_atomic(path, data)
    return str(path)


def _runner(cfg: dict[str, Any], key: str, models: Sequence[bytes | None]):
    from vimpc.pipeline import EpisodeRunner

    if key in _RUNNERS:
        _RUNNERS.move_to_end(key)
        return _RUNNERS[key]
    paths = [None if m is None else _model_file(m) for m in models]
    runner = EpisodeRunner(cfg, paths if len(paths) > 1 else paths[0])
    _RUNNERS[key] = runner
    while len(_RUNNERS) > RUNNERS_KEPT:
        _RUNNERS.popitem(last=False)
    return runner


def episode(cfg: dict[str, Any], key: str, seed: int, fit: int, *models: bytes | None):
    """One episode on a worker: ``(trajectory, metrics)`` of ``seed`` with fit ``fit``;
    ``key`` names the configuration and its models (the runner kept for them)."""
    return _runner(cfg, key, models).run(seed, fit=fit)


def fit(cfg: dict[str, Any]) -> tuple[bytes, list[str]]:
    """Fit one model on a worker (``cfg`` is a fit's configuration, as from
    :func:`vimpc.pipeline.fit_config`): the bytes of its ``.vimpc`` file and what the fit
    logged. It goes through a cache of the worker's own, always fitting."""
    from vimpc import pipeline

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vimpc-ray-fit-") as folder:
        before = os.environ.get("VIMPC_CACHE")
        os.environ["VIMPC_CACHE"] = folder
        try:
            env = pipeline.build_env(cfg)
            source = pipeline.obtain_model(cfg, env, refit=True, log=lines.append)
            return Path(source.path).read_bytes(), lines
        finally:
            if before is None:
                os.environ.pop("VIMPC_CACHE", None)
            else:
                os.environ["VIMPC_CACHE"] = before


# -- the driver's side ---------------------------------------------------------------------------


def _remote(function: Callable):
    """``function`` as a Ray task of one CPU, run again when its worker dies (not when it
    raises: it would raise again)."""
    ray = current().ray
    return ray.remote(function).options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)


def run_tasks(
    calls: Sequence[tuple[Callable, tuple]],
    workers: int,
    on_done: Callable[[int, Any, BaseException | None], None],
    what: str,
) -> None:
    """Run ``function(*args)`` of every call as a Ray task, at most ``workers`` at once, in
    the order given; ``on_done(i, result, error)`` is called in this process once per call
    as it ends (``error``: what the task raised, ``result`` then ``None``). A worker death
    beyond :data:`MAX_RETRIES` is a :class:`WorkerError`; a Ctrl-C or an error here ends
    the tasks not finished (see the module's text)."""
    from vimpc._interrupt import check

    cluster = current()
    ray = cluster.ray
    pending: dict[Any, int] = {}
    queue = list(range(len(calls)))[::-1]
    remotes: dict[Callable, Any] = {}
    finished = 0
    try:
        while queue or pending:
            while queue and len(pending) < workers:
                i = queue.pop()
                function, args = calls[i]
                if function not in remotes:
                    remotes[function] = _remote(function)
                pending[remotes[function].remote(*args)] = i
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            check()  # a Ctrl-C swallowed while waiting
            for ref in ready:
                i = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # what the task itself raised
                    cause = getattr(exc, "cause", None)
                    on_done(i, None, cause if isinstance(cause, Exception) else exc)
                except ray.exceptions.RayError as exc:  # the task's worker or node died
                    raise WorkerError(
                        f"a Ray task of a {what} failed {MAX_RETRIES + 1} times "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                        f"{finished} of {len(calls)} {what}s had finished. Run again with "
                        "fewer --workers if memory is short"
                    ) from None
                else:
                    on_done(i, result, None)
                finished += 1
    except BaseException:
        if not cluster.owned:  # an owned cluster is stopped next, its tasks with it
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
        raise


def put(data: Any):
    """``data`` in the cluster's object store (sent once, read by every task given it)."""
    return current().ray.put(data)


def model_bytes(paths: Sequence[str | None]) -> list[Any]:
    """The object-store references of the model files' bytes (``None`` stays: the model is
    built from the scenario on the worker)."""
    return [None if p is None else put(Path(p).read_bytes()) for p in paths]


def run_episodes(
    cfg: dict[str, Any],
    model_path: str | Path | None | Sequence[str | None],
    seeds: Sequence[int],
    *,
    fits: Sequence[int] | None = None,
    workers: int = 1,
    on_episode: Callable[[int], None] | None = None,
    on_result: Callable[[int, tuple[Any, dict[str, Any]]], None] | None = None,
) -> list[tuple[Any, dict[str, Any]]]:
    """:func:`vimpc.pipeline.run_episodes` on the open Ray cluster: one task per episode, at
    most ``workers`` at once, the same results. An episode's exception is raised here (the
    other tasks are ended)."""
    from vimpc import scenario

    paths = list(model_path) if isinstance(model_path, (list, tuple)) else [model_path]
    paths = [None if p is None else str(p) for p in paths]
    fits = [0] * len(seeds) if fits is None else [int(k) for k in fits]
    refs = model_bytes(paths)
    key = _runner_key(scenario.dump_toml(cfg), paths)
    cfg_ref = put(cfg)
    calls = [(episode, (cfg_ref, key, int(s), fits[i], *refs)) for i, s in enumerate(seeds)]
    results: dict[int, Any] = {}

    def done(i: int, result: Any, error: BaseException | None) -> None:
        if error is not None:
            raise error
        results[i] = result
        if on_result is not None:
            on_result(i, result)
        if on_episode is not None:
            on_episode(len(result[0].inputs))

    run_tasks(calls, workers, done, "episode")
    return [results[i] for i in range(len(seeds))]


def _runner_key(config_text: str, paths: Sequence[str | None]) -> str:
    from vimpc.pipeline import file_digest

    digest = hashlib.sha256(config_text.encode("utf-8"))
    for p in paths:
        digest.update(b"\0" + (b"-" if p is None else file_digest(p).encode()))
    return digest.hexdigest()


def describe() -> str:
    """One line on the open cluster, for what a command prints."""
    cluster = current()
    kind = "local Ray cluster" if cluster.owned else "Ray cluster"
    return f"{kind} at {cluster.address} ({cluster.cpus} CPU{'s' if cluster.cpus != 1 else ''})"


# -- a sweep on Ray --------------------------------------------------------------------------------


def fit_sweep(
    stage: Path, todo: Sequence[str], refit: bool, refitted: set[str], workers: int
) -> tuple[set[str], dict[str, str]]:
    """Fit, as Ray tasks (at most ``workers`` at once), the models the configurations ``todo`` of the sweep in
    ``stage`` still need that the cache lacks (all of them with ``refit``): one task per
    distinct fit, each written to the cache as a fit in this process would be. Fits whose
    data are files (``data.path``) stay for the sweep's process. Returns the cached files
    written (``fresh``) and ``{configuration: error}`` for the configurations whose fit
    failed. The keys fitted are added to ``refitted`` (not fitted again)."""
    from vimpc import pipeline, scenario
    from vimpc._files import write_atomic
    from vimpc.runs import store

    wanted: dict[str, tuple[dict[str, Any], str]] = {}  # cache file -> (fit config, key)
    users: dict[str, list[str]] = {}
    for cid in todo:
        run_stage = stage / (cid + store.PARTIAL)
        manifest = store.read_manifest(run_stage) if run_stage.is_dir() else None
        if manifest is None or manifest.get("model") is not None:
            continue
        cfg = scenario.load_scenario(run_stage / store.CONFIG)
        for k in range(cfg.data.fits):
            fit_cfg = pipeline.fit_config(cfg, k)
            files = (fit_cfg.model.path, fit_cfg.data.path)
            if any(f is not None for f in files) or fit_cfg.data.heldout_path is not None:
                continue
            env = pipeline.build_env(fit_cfg)
            if not pipeline.build_family(fit_cfg, env.nominal_system).needs_fit():
                continue
            key = pipeline.cache_key(fit_cfg)
            target = pipeline.cache_dir() / f"{fit_cfg.scenario.name}-{key}.vimpc"
            if target.exists() and (not refit or key in refitted):  # --refit: once a sweep
                continue
            wanted.setdefault(str(target), (fit_cfg, key))
            users.setdefault(str(target), []).append(cid)
    if not wanted:
        return set(), {}
    pipeline.check_cache_writable()
    targets = list(wanted)
    fresh: set[str] = set()
    failed: dict[str, str] = {}

    def done(i: int, result: Any, error: BaseException | None) -> None:
        target = targets[i]
        if error is not None:
            for cid in users[target]:
                failed.setdefault(cid, f"{type(error).__name__}: {error}")
            return
        data, lines = result
        try:
            write_atomic(target, data, overwrite=refit)
        except FileExistsError:  # cached meanwhile by another process: the same fit
            pass
        fresh.add(target)
        refitted.add(wanted[target][1])
        for cid in users[target]:
            with open(stage / f"{cid}.log", "a", encoding="utf-8") as log:
                print("\n".join(lines), file=log)

    used, _ = worker_count(workers, len(targets))
    print(f"fitting {len(targets)} model(s) as Ray tasks ({used} at once) on the {describe()}")
    calls = [(fit, (wanted[t][0],)) for t in targets]
    run_tasks(calls, used, done, "fit")
    return fresh, failed


class _OpenRun:
    """A configuration's run folder while its episodes run on Ray (locked here)."""

    def __init__(self, task, stage: Path, cfg, manifest, lock, missing: list[int]) -> None:
        self.task, self.stage, self.cfg = task, stage, cfg
        self.manifest, self.lock = manifest, lock
        self.left = set(missing)
        self.pending = len(missing)
        self.error: str | None = None
        self.session: dict[str, Any] = {}
        self.started = time.perf_counter()
        self.closed = False


def run_sweep(
    tasks: Sequence[Any],
    workers: int,
    on_done: Callable[[Any], None],
    session: dict[str, Any] | None = None,
    on_episode: Callable[[], None] | None = None,
) -> list[Any]:
    """The sweep's runs (:class:`vimpc.runs.tasks.Task`) on the open Ray cluster: every
    missing episode of every run is one Ray task (at most ``workers`` at once, the runs in
    order), kept in its run folder here as it ends; a run whose episodes are all kept is
    finished here (metrics, figures, rename) and ``on_done`` gets its outcome. An episode
    that raises fails its run (its other episodes still run and are kept)."""
    from datetime import UTC, datetime

    from vimpc import scenario
    from vimpc.runs import store

    outcomes: list[Any] = []

    def finish(task, error: str | None) -> None:
        if error is None:
            outcome = task.run()  # the metrics and figures from the kept episodes
        else:
            outcome = task.failed(error)
        outcomes.append(outcome)
        on_done(outcome)

    runs: dict[str, _OpenRun] = {}
    calls: list[tuple[Callable, tuple]] = []
    index: list[tuple[str, int]] = []
    try:
        for task in tasks:
            stage = Path(task.stage)
            try:
                opened = store.open_run(stage)
            except Exception as exc:
                finish(task, f"{type(exc).__name__}: {exc}")
                continue
            if opened is None:
                finish(task, None)
                continue
            cfg, manifest, lock = opened
            count = manifest["episodes"]
            missing = sorted(set(range(count)) - set(store.finished(stage, count)))
            if not missing:
                lock.release()
                finish(task, None)
                continue
            records = manifest.get("fits") or [manifest["model"]]
            paths = [r["path"] for r in records]
            try:  # the model files are read here: one gone fails its configuration only
                refs = model_bytes(paths)
                key = _runner_key(scenario.dump_toml(cfg), paths)
            except (OSError, ValueError) as exc:
                lock.release()
                finish(task, f"{type(exc).__name__}: {exc}")
                continue
            runs[task.id] = _OpenRun(task, stage, cfg, manifest, lock, missing)
            cfg_ref = put(cfg)
            for k in missing:
                seed, fit_k = manifest["seeds"][k], k % len(records)
                calls.append((episode, (cfg_ref, key, seed, fit_k, *refs)))
                index.append((task.id, k))
        used, why = worker_count(workers, max(1, len(calls)))
        if why is not None and calls:
            print(f"--workers {workers} capped to {used} ({why})")
        if session is not None:
            session["processes"] = used
        for run in runs.values():
            run.session = {
                "started": datetime.now(UTC).isoformat(timespec="seconds"),
                "backend": "ray",
                "ray_cluster": describe(),
                "workers_requested": workers,
                "processes": used,
                "cores": current().cpus,
                "load_average": [store.load_average()],
                "episodes_run": 0,
            }
            run.manifest["sessions"].append(run.session)

        def done(i: int, result: Any, error: BaseException | None) -> None:
            cid, k = index[i]
            run = runs[cid]
            run.pending -= 1
            if error is not None:
                if run.error is None:
                    run.error = f"{type(error).__name__}: {error}"
            else:
                traj, metrics = result
                store.save_episode(run.stage, k, run.manifest["seeds"][k], traj, metrics)
                run.left.discard(k)
                run.session["episodes_run"] += 1
                _keep_manifest(run)
                if on_episode is not None:
                    on_episode()
            if run.pending == 0:
                _close(run, "complete" if run.error is None else f"error: {run.error:.300}")
                finish(run.task, run.error)

        run_tasks(calls, used, done, "episode")
    except BaseException as exc:
        for run in runs.values():
            if not run.closed:
                ended = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc!r}"
                with contextlib.suppress(Exception):
                    _close(run, ended[:300])
        raise
    return outcomes


def _keep_manifest(run: _OpenRun) -> None:
    from vimpc.runs import store

    count = run.manifest["episodes"]
    run.manifest["finished"] = count - len(run.left)
    run.manifest["missing"] = sorted(run.left)
    store.write_manifest(run.stage, run.manifest)


def _close(run: _OpenRun, ended: str) -> None:
    """Record how the run's Ray session ended and release its folder."""
    from vimpc.runs import store

    try:
        # the files count: an episode written just before an interrupt is in them
        count = run.manifest["episodes"]
        run.left = set(range(count)) - set(store.finished(run.stage, count))
        run.session["ended"] = ended
        run.session["wall_time_s"] = time.perf_counter() - run.started
        run.session["load_average"].append(store.load_average())
        _keep_manifest(run)
    finally:
        run.closed = True
        run.lock.release()
