"""Running work in local worker processes: a process pool that says when a worker died, and
workers that end with their parent however it ends; the worker count a machine supports.

The episodes of a run (:func:`vimpc.pipeline.run_episodes`) and the configurations of a
sweep (:mod:`vimpc.runs.backends`) run here."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from vimpc.errors import WorkerError


def in_processes(
    function: Callable[[Any], Any],
    items: Sequence[Any],
    workers: int,
    on_done: Callable[[Any], None],
    what: str,
    *,
    initializer: Callable[..., None],
    initargs: tuple = (),
) -> None:
    """``function(item)`` for every item in ``workers`` spawned processes, ``on_done`` called
    with each result in this process as it comes. An executor, not a ``multiprocessing.Pool``:
    a Pool replaces a worker that died (killed, out of memory) and waits for its item for
    ever; the executor says it broke, which is a :class:`WorkerError` naming how many
    ``what``s had finished. A Ctrl-C or an error here ends the workers at once, and a
    worker ends by itself when this process ends otherwise (killed: :func:`end_with_parent`)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.getpid(), initializer, initargs),
    )
    finished = 0
    try:
        for future in as_completed([pool.submit(function, item) for item in items]):
            result = future.result()
            finished += 1
            on_done(result)
    except BrokenProcessPool:
        _end_workers(pool)
        raise WorkerError(
            f"a worker process ended before its {what} did (killed, or out of memory?); "
            f"{finished} of {len(items)} {what}s had finished. Run again with fewer "
            "--workers if memory is short"
        ) from None
    except BaseException:
        _end_workers(pool)
        raise
    pool.shutdown()


def _start_worker(parent: int, initializer: Callable[..., None], initargs: tuple) -> None:
    end_with_parent(parent)
    initializer(*initargs)


PARENT_POLL_S = 0.5  # how often a worker checks that its parent is alive


def end_with_parent(parent: int) -> None:
    """End this process when its parent ``parent`` ends, however it ends: a SIGKILL runs
    no cleanup in the parent, and a worker left alive would go on writing results into
    the run's folder. On Linux the kernel sends SIGKILL on the parent's death
    (``PR_SET_PDEATHSIG``); a thread that polls the parent's id covers other systems and
    the parent that died before the request was made."""
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        except (OSError, AttributeError):  # no prctl in this C library: the thread remains
            pass
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent,), name="vimpc-parent-watch", daemon=True
    ).start()


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _watch_parent(parent: int) -> None:
    import time

    while os.getppid() == parent:  # an orphan is handed to another process
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _end_workers(pool) -> None:
    """Stop an executor's workers now (a Ctrl-C or an error must not wait for the episodes
    they are running)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    # before 3.14 the executor has no public way; shutdown() forgets the processes
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system says it, else
    the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_count(requested: int, episodes: int) -> tuple[int, str | None]:
    """``(processes, why)``: the worker processes for ``episodes`` episodes when
    ``requested`` were asked for, at most one per episode and one per usable core (more
    would only share cores and slow every solve, so the solve times would measure the
    sharing); ``why`` says what capped it (``None`` when nothing did)."""
    cores = usable_cores()
    used = max(1, min(requested, episodes, cores))
    if used == requested:
        return used, None
    reasons = []  # the limits that bind
    if episodes == used:
        reasons.append(f"{episodes} episode{'s' if episodes != 1 else ''} to run")
    if cores == used:
        reasons.append(f"{cores} usable core{'s' if cores != 1 else ''}")
    return used, " and ".join(reasons)
