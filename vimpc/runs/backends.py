"""Where the work of a run or a sweep runs: one :class:`Backend` protocol that local worker
processes (:class:`LocalBackend`) and a Ray cluster (:class:`RayBackend`, Ray imported only
in :mod:`vimpc.runs.ray`) implement. The caller chooses one by name (:func:`backend_for`)
and calls the same methods whichever it is: open it for the work, count the workers it
uses, fit models, run episodes, run a sweep's configurations. An episode's results are the
same on every backend and with any number of workers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from vimpc.runs import ray as ray_backend

#: the backends by name
BACKENDS = ray_backend.BACKENDS


class ConfigurationTask(Protocol):
    """One configuration's run of a sweep, as a backend sees it (``vimpc.runs.tasks.Task``):
    its id, its ``.partial`` run folder and log, and how it is finished in this process."""

    id: str
    stage: str
    log: str

    def run(self) -> Any:
        """Run (or finish) the configuration's run folder here: its outcome."""

    def failed(self, error: str) -> Any:
        """The outcome of the run stopped by ``error`` (logged in its log)."""


class Backend(Protocol):
    """Where episodes, fits and a sweep's configurations run."""

    name: str

    def connected(self, workers: int) -> AbstractContextManager[Any]:
        """The context the work needs (for Ray the cluster, opened before any folder is
        made and closed after)."""

    def worker_count(self, requested: int, episodes: int) -> tuple[int, str | None]:
        """``(used, why capped)``: the processes or tasks at once for ``episodes`` episodes."""

    def cores(self) -> int:
        """The cores the episodes' solve times shared."""

    def describe(self) -> dict[str, Any]:
        """What a run's session records of the backend (nothing for local processes)."""

    def capped_note(self, workers: int, cores: int) -> str:
        """Said after ``--workers N capped to M (why)``."""

    def in_this_process(self, workers: int) -> bool:
        """Whether episodes run by ``workers`` run in this process (one runner serves them
        and the figures)."""

    def run_episodes(
        self,
        cfg: dict[str, Any],
        model_path: Any,
        seeds: Sequence[int],
        *,
        fits: Sequence[int],
        workers: int,
        on_step: Callable[[], None],
        on_episode: Callable[[int], None],
        on_result: Callable[[int, tuple[Any, dict[str, Any]]], None],
        runner: Any = None,
    ) -> list[tuple[Any, dict[str, Any]]]:
        """One episode per seed (:func:`vimpc.pipeline.run_episodes`); ``on_step`` or
        ``on_episode(steps)`` advance a progress bar, ``on_result(i, result)`` keeps one."""

    def sweep_workers(self, requested: int, configurations: int) -> int:
        """The worker count a sweep of ``configurations`` runs with (a cap is printed)."""

    def fit_models(
        self, stage: Path, todo: Sequence[str], refit: bool, refitted: set[str], workers: int
    ) -> tuple[set[str], dict[str, str]]:
        """Fit ahead the models the sweep's configurations ``todo`` need: ``(fresh cache
        files, {configuration: error})``; the rest are obtained in the sweep's process."""

    def run_configurations(
        self,
        tasks: Sequence[ConfigurationTask],
        workers: int,
        on_done: Callable[[Any], None],
        session: dict[str, Any],
        on_episode: Callable[[], None],
    ) -> list[Any]:
        """Run a sweep's configurations; ``on_done(outcome)`` for each as it ends,
        ``on_episode()`` after each episode kept in this process."""


def _run_task(task: ConfigurationTask) -> Any:
    return task.run()


def _ignore_interrupts() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the workers


class LocalBackend:
    """Local worker processes (spawned; one at most per episode and per usable core)."""

    name = "local"

    def connected(self, workers: int) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def worker_count(self, requested: int, episodes: int) -> tuple[int, str | None]:
        from vimpc._processes import worker_count

        return worker_count(requested, episodes)

    def cores(self) -> int:
        from vimpc._processes import usable_cores

        return usable_cores()

    def describe(self) -> dict[str, Any]:
        return {}

    def capped_note(self, workers: int, cores: int) -> str:
        shared = ": more processes would share the cores and slow every solve"
        return shared if workers == cores else ""

    def in_this_process(self, workers: int) -> bool:
        return workers == 1

    def run_episodes(
        self, cfg, model_path, seeds, *, fits, workers, on_step, on_episode, on_result, runner=None
    ):
        from vimpc import pipeline

        return pipeline.run_episodes(
            cfg,
            model_path,
            seeds,
            fits=fits,
            workers=workers,
            on_step=on_step if workers == 1 else None,
            on_episode=on_episode if workers > 1 else None,
            on_result=on_result,
            runner=runner,
        )

    def sweep_workers(self, requested: int, configurations: int) -> int:
        workers, why = self.worker_count(requested, configurations)
        if configurations and why is not None:
            # the count is of configurations here, where worker_count says episodes
            print(f"--workers {requested} capped to {workers} ({why})".replace("episode", "run"))
        return workers

    def fit_models(self, stage, todo, refit, refitted, workers):
        # every model is obtained in the sweep's process, one at a time
        return set(), {}

    def run_configurations(self, tasks, workers, on_done, session, on_episode):
        """The tasks in this process (``workers == 1``) or in ``workers`` spawned processes,
        one configuration each at a time, its episodes in turn. A Ctrl-C or an error in this
        process ends the workers at once (their runs keep what they finished); each run
        keeps its episodes in its own process (``session``, ``on_episode`` are not used)."""
        from vimpc._processes import in_processes

        outcomes: list[Any] = []
        if workers <= 1:
            for task in tasks:
                outcomes.append(task.run())
                on_done(outcomes[-1])
            return outcomes

        def done(outcome) -> None:
            outcomes.append(outcome)
            on_done(outcome)

        in_processes(
            _run_task, tasks, workers, done, "configuration", initializer=_ignore_interrupts
        )
        return outcomes


class RayBackend:
    """Ray tasks on a local cluster started here or the cluster at ``address``
    (:mod:`vimpc.runs.ray`): an episode, or a fit, is a task."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def connected(self, workers: int) -> AbstractContextManager[Any]:
        return ray_backend.connected(self.address, workers)

    def worker_count(self, requested: int, episodes: int) -> tuple[int, str | None]:
        return ray_backend.worker_count(requested, episodes)

    def cores(self) -> int:
        from vimpc._processes import usable_cores

        cluster = ray_backend.current()  # the machine's cores for a local cluster
        return usable_cores() if cluster.owned else cluster.cpus

    def describe(self) -> dict[str, Any]:
        return {"backend": "ray", "ray_cluster": ray_backend.describe()}

    def capped_note(self, workers: int, cores: int) -> str:
        return ""

    def in_this_process(self, workers: int) -> bool:
        return False

    def run_episodes(
        self, cfg, model_path, seeds, *, fits, workers, on_step, on_episode, on_result, runner=None
    ):
        # one Ray task per episode, the model sent as its file's bytes
        return ray_backend.run_episodes(
            cfg, model_path, seeds, fits=fits, workers=workers,
            on_episode=on_episode, on_result=on_result,
        )  # fmt: skip

    def sweep_workers(self, requested: int, configurations: int) -> int:
        return requested  # Ray tasks are episodes and fits; their count is capped there

    def fit_models(self, stage, todo, refit, refitted, workers):
        # the fits of different settings at once, as Ray tasks
        return ray_backend.fit_sweep(stage, todo, refit, refitted, workers)

    def run_configurations(self, tasks, workers, on_done, session, on_episode):
        return ray_backend.run_sweep(tasks, workers, on_done, session, on_episode)


def check_options(backend: str, address: str | None) -> None:
    """Refuse a ``backend``/``address`` pair that cannot work (without importing Ray)."""
    ray_backend.check_options(backend, address)


def backend_for(name: str, address: str | None = None) -> Backend:
    """The backend called ``name`` (:data:`BACKENDS`); ``address``: Ray's cluster."""
    check_options(name, address)
    return RayBackend(address) if name == "ray" else LocalBackend()
