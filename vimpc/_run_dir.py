"""The folder of one ``vimpc run``: what it holds while the run goes on, and how an
unfinished one is recognised and resumed.

A run writes into ``<out>/<scenario>/<UTC timestamp>.partial/`` and renames it to
``<UTC timestamp>/`` once complete. Inside, while it runs:

- ``config.resolved.toml``: the configuration (written first);
- ``run.json``: the manifest of an unfinished run: the episodes and seeds it must run,
  those still missing, the model it uses (file and SHA-256), the vimpc version, and the
  command that resumes it. Its presence says "incomplete"; it is removed when the run is
  complete;
- ``episode_<k>.npz`` and ``episode_<k>.json`` (the trajectory's arrays, then its seed,
  metrics and the SHA-256 of both) for every finished episode, written as each one ends.
  An episode is finished when both files exist (the ``.json`` is written second); the
  manifest's list of missing episodes is refreshed after each, but the files are what
  counts. A resume keeps an episode only if its seed is the run's seed for it and its
  digest matches (:func:`check_episodes`);
- ``.lock``: held (``flock``) by the process that runs or resumes the folder, so a
  folder whose lock is free was left by a process that ended (Ctrl-C, an error, killed).

``metrics.json`` is written last, once every episode is finished: its presence marks a
complete run, as it always has.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from vimpc._files import write_atomic
from vimpc.errors import ConfigError

try:
    import fcntl
except ImportError:  # not POSIX: no locks, a running folder looks like a stopped one
    fcntl = None

PARTIAL = ".partial"
MANIFEST = "run.json"
METRICS = "metrics.json"
CONFIG = "config.resolved.toml"
LOCK = ".lock"


def resume_command(stage: Path) -> str:
    return f"vimpc run --resume {stage}"


def episode_files(stage: Path, k: int) -> tuple[Path, Path]:
    return stage / f"episode_{k:03d}.npz", stage / f"episode_{k:03d}.json"


# -- the lock ------------------------------------------------------------------------------


class Lock:
    """The exclusive lock of a run folder, held until :meth:`release` or the process ends
    (the system drops it then, also after a kill)."""

    def __init__(self, stage: Path, *, wait: bool) -> None:
        # ``wait``: a new run's own folder, which another process may be probing for an
        # instant (:func:`is_running`); a resume must not wait for a live run to end
        self.path = stage / LOCK
        try:
            self._handle = open(self.path, "a+b")  # noqa: SIM115  (held for the run's life)
        except OSError as exc:
            raise ConfigError(
                f"the run folder {str(stage)!r} cannot be written ({exc.strerror or exc})"
            ) from None
        if fcntl is not None:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError:
                self._handle.close()
                raise ConfigError(
                    f"the run in {str(stage)!r} is being run by another vimpc process right "
                    "now; wait for it to end (or stop it) before resuming"
                ) from None

    def release(self, remove: bool = False) -> None:
        if self._handle.closed:
            return
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._handle.close()


def is_running(stage: Path) -> bool:
    """Whether a live process holds the folder's lock (or is just creating it)."""
    path = stage / LOCK
    if not path.exists():
        return not (stage / MANIFEST).exists()  # reserved this instant, lock to follow
    if fcntl is None:
        return False
    try:
        with open(path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:  # removed this instant by a run that completed
        return True
    except OSError:
        return True
    return False


# -- the manifest ------------------------------------------------------------------------------


def write_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    write_atomic(stage / MANIFEST, json.dumps(manifest, indent=2) + "\n", overwrite=True)


def read_manifest(stage: Path) -> dict[str, Any] | None:
    try:
        return json.loads((stage / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{str(stage / MANIFEST)!r} cannot be read: {exc}") from None


def finished(stage: Path, count: int) -> list[int]:
    """The episodes (indices) whose two files exist."""
    return [k for k in range(count) if all(p.exists() for p in episode_files(stage, k))]


def check_episodes(stage: Path, ks: list[int], seeds: list[int]) -> None:
    """Refuse a folder whose kept episodes ``ks`` cannot all be read back (a damaged or
    truncated file), or whose files are not those the run wrote: an episode of another
    seed than ``seeds[k]`` (a file copied in from another run), or one whose digest does
    not match (arrays or metrics edited). The run's metrics would take them as they are."""
    unreadable, foreign = [], []
    for k in ks:
        try:
            traj, metrics = load_episode(stage, k)
            record = json.loads(episode_files(stage, k)[1].read_text())
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            unreadable.append((k, f"{type(exc).__name__}: {str(exc)[:120]}"))
            continue
        if not isinstance(record, dict) or record.get("seed") != seeds[k]:
            got = record.get("seed") if isinstance(record, dict) else None
            foreign.append((k, f"seed {got!r}, but the run's episode {k} has seed {seeds[k]}"))
        elif record.get("sha256") != episode_digest(stage, k, record):
            foreign.append((k, "its files do not match the SHA-256 recorded when it was kept"))
    for bad, what in ((unreadable, "cannot be read back"), (foreign, "are not this run's")):
        if bad:
            k, why = bad[0]
            names = " and ".join(p.name for p in episode_files(stage, k))
            raise ConfigError(
                f"--resume: {len(bad)} kept episode(s) in {str(stage)!r} {what} (episodes "
                f"{[b[0] for b in bad][:10]}; episode {k}: {why}); delete {names} (and the "
                "others' files) to run those episodes again, then resume"
            )


def episode_digest(stage: Path, k: int, record: dict[str, Any]) -> str:
    """The SHA-256 of episode ``k``'s arrays file and of its record's seed and metrics."""
    digest = hashlib.sha256()
    with open(episode_files(stage, k)[0], "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    kept = {"seed": record.get("seed"), "metrics": record.get("metrics")}
    digest.update(json.dumps(kept, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def config_digest(stage: Path) -> str | None:
    """The digest of the run's ``config.resolved.toml`` (None: it cannot be read)."""
    try:
        return text_digest((stage / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def tidy(stage: Path, count: int) -> None:
    """Remove what an ended process left half-done in its own folder: temporary files of
    interrupted writes, and the arrays of an episode whose metrics were never written
    (the episode runs again)."""
    for tmp in stage.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    for k in range(count):
        arrays, record = episode_files(stage, k)
        if arrays.exists() and not record.exists():
            arrays.unlink()


# -- episodes ------------------------------------------------------------------------------------


def save_episode(stage: Path, k: int, seed: int, traj, metrics: dict[str, Any]) -> None:
    """Keep one finished episode: its arrays, then its seed, metrics and their digest
    (which mark it finished)."""
    arrays, record = episode_files(stage, k)
    write_atomic(arrays, lambda h: np.savez(h, **traj.arrays()))
    # the metrics as they read back from JSON, so the digest is that of what is kept
    info = json.loads(json.dumps({"seed": int(seed), "metrics": metrics}))
    info["sha256"] = episode_digest(stage, k, info)
    write_atomic(record, json.dumps(info, indent=2) + "\n")


def load_episode(stage: Path, k: int):
    """``(trajectory, metrics)`` of a kept episode."""
    from vimpc.closedloop import Trajectory

    arrays, record = episode_files(stage, k)
    info = json.loads(record.read_text())
    with np.load(arrays) as data:
        traj = Trajectory(**{name: data[name] for name in data.files}, seed=info["seed"])
    return traj, info["metrics"]


# -- configurations ------------------------------------------------------------------------------


def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (a TOML dotted key is a nested table)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out


def config_differences(stage: Path, cfg: dict[str, Any]) -> list[str]:
    """The keys whose value in ``cfg`` differs from the run's ``config.resolved.toml``, as
    ``"key = <there> there, <here> here"`` lines (empty: the same configuration)."""
    from vimpc.scenario import dump_toml

    try:
        there = flat(tomllib.loads((stage / CONFIG).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{str(stage / CONFIG)!r} cannot be read: {exc}") from None
    here = flat(tomllib.loads(dump_toml(cfg)))
    lines = []
    for key in sorted(set(there) | set(here)):
        a, b = there.get(key, "(unset)"), here.get(key, "(unset)")
        if a != b:
            lines.append(f"{key} = {a!r} there, {b!r} here")
    return lines


def unfinished_runs(root: Path, name: str) -> list[tuple[Path, dict[str, Any] | None]]:
    """The ``.partial`` folders of scenario ``name`` under ``root`` that no live process
    holds, with their manifests (``None``: stopped before its manifest was written)."""
    base = root / name
    if not base.is_dir():
        return []
    out = []
    for stage in sorted(base.glob("*" + PARTIAL)):
        if not stage.is_dir() or is_running(stage):
            continue
        try:
            manifest = read_manifest(stage)
        except ConfigError:
            manifest = None
        out.append((stage, manifest))
    return out


def resolve(folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(final, stage)`` of the run folder a user named (either name of it)."""
    if not str(folder).strip():
        raise ConfigError("--resume needs the run folder vimpc run printed, got an empty path")
    path = Path(folder).resolve()  # "." or "run/.." name a folder too
    if path.parent == path:
        raise ConfigError(f"--resume: {str(folder)!r} is the root folder, not a run folder")
    if path.name.endswith(PARTIAL):
        return path.with_name(path.name[: -len(PARTIAL)]), path
    return path, path.with_name(path.name + PARTIAL)
