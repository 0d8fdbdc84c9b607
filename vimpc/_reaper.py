"""A watcher that ends a set of processes (and their descendants) when the process that
started it dies without stopping them: a SIGKILL runs no cleanup, and the local Ray
cluster ``vimpc --backend ray`` starts would outlive it (Ray's dashboard and runtime-env
agents did, after their raylet had gone).

Run as ``python .../_reaper.py PID...`` (:func:`start`) with a pipe on its standard
input: while the pipe is open it notes, every :data:`POLL_S`, the descendants of the given
processes; when the pipe closes (its parent closed it after stopping the cluster, or the
parent ended, however) it sends SIGKILL to every noted process still alive. Reads
``/proc``: Linux only. Run as a file, not as a module of vimpc, so it starts in a fraction
of a second.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

POLL_S = 0.5


def _table() -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, start time)}`` of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), fields[19])
    return out


def _tree(roots: dict[int, str], table: dict[int, tuple[int, str]]) -> dict[int, str]:
    """``roots`` (``{pid: start time}``, those still alive) and their descendants."""
    kept = {pid: start for pid, start in roots.items() if table.get(pid, (0, None))[1] == start}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    todo = list(kept)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in kept:
                kept[child] = table[child][1]
                todo.append(child)
    return kept


def watch(pids: list[int]) -> None:
    table = _table()
    roots = {pid: table[pid][1] for pid in pids if pid in table}
    noted = _tree(roots, table)
    while True:
        ready, _, _ = select.select([sys.stdin.buffer], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 64):
            break
        table = _table()
        # processes seen once stay noted while they live (a worker whose parent ended)
        noted = {**_tree(noted, table), **_tree(roots, table)}
    table = _table()
    for pid, start in noted.items():
        if table.get(pid, (0, None))[1] == start:  # the same process, not a reused id
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (empty where there is no ``/proc``)."""
    if not os.path.isdir("/proc"):
        return []
    return [child for child, (parent, _) in _table().items() if parent == pid]


def start(pids: list[int]):
    """A watcher of ``pids`` (a ``subprocess.Popen``; close its ``stdin`` to end it), or
    ``None`` where there is no ``/proc``."""
    if not pids or not os.path.isdir("/proc"):
        return None
    return subprocess.Popen(
        [sys.executable, "-S", str(Path(__file__)), *map(str, pids)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(watcher) -> None:
    """Close the watcher's pipe (it ends what is left of its processes) and wait for it."""
    if watcher is None:
        return
    try:
        watcher.stdin.close()
        watcher.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        watcher.kill()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle
    watch([int(a) for a in sys.argv[1:]])
