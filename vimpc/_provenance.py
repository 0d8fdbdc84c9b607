"""Where a committed result came from: a record beside each table that names the command,
the commit, the date and a hash of the sources it depends on.

A script that writes a table under ``results/`` calls :func:`write_record` with the table's
path; the record ``<table>.provenance.json`` lists the script and every module of the
project it had imported (``vimpc``, ``vimpc_envs``, ``vimpc_scenarios`` and the script's
own helpers), each hashed by content. :mod:`vimpc.results` recomputes those hashes from the
files as they are now and says which tables are fresh and which are stale.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vimpc.errors import VimpcError

#: a record's file name is the table's with this appended
SUFFIX = ".provenance.json"
#: the packages whose imported modules a result depends on, wherever they are installed
PACKAGES = ("vimpc", "vimpc_envs", "vimpc_scenarios")
#: the verdicts a record may give (a paper reproduction's, or what kind of result it is)
VERDICTS = ("reproduced", "partial", "not reproduced", "benchmark", "project goal")
#: ``sources_hash`` of a record written after the fact, whose sources were not hashed
UNKNOWN = "unknown"


class ProvenanceError(VimpcError):
    """A provenance record that cannot be written or read as asked."""


def record_path(table: Path) -> Path:
    return table.with_name(table.name + SUFFIX)


def repo_root(path: Path) -> Path:
    """The nearest folder at or above ``path`` that holds a ``pyproject.toml``."""
    path = Path(path).resolve()
    for folder in [path, *path.parents]:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise ProvenanceError(f"no pyproject.toml at or above {path}: not inside the repository")


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def combined_hash(sources: Mapping[str, str]) -> str:
    """One hash of ``{path: content hash}``, independent of the mapping's order."""
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(f"{name}\0{sources[name]}\n".encode())
    return digest.hexdigest()


def _relative(file: Path, root: Path) -> str | None:
    """``file`` as a path inside the repository: relative to ``root``, or, for a package
    installed from another checkout of it, relative to that checkout (``envs/x.py``)."""
    file = file.resolve()
    if file.is_relative_to(root):
        return file.relative_to(root).as_posix()
    try:
        return file.relative_to(repo_root(file.parent)).as_posix()
    except ProvenanceError:
        return None


def imported_sources(root: Path, script: Path | None = None) -> dict[str, str]:
    """``{path relative to root: sha256}`` of ``script`` and every module in
    ``sys.modules`` of the project's packages or under ``root`` (test modules left out: a
    script run inside pytest still depends only on what it imports)."""
    root = Path(root).resolve()
    files: set[Path] = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        stem = path.stem
        if stem.startswith("test_") or stem == "conftest":
            continue
        if name.split(".")[0] in PACKAGES or path.is_relative_to(root):
            files.add(path)
    if script is not None:
        files.add(Path(script).resolve())
    sources = {}
    for path in files:
        rel = _relative(path, root)
        if rel is not None and path.is_file():
            sources[rel] = file_hash(path)
    return dict(sorted(sources.items()))


def git(root: Path, *args: str) -> str:
    """``git args`` in ``root``'s output, stripped; empty when git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit_state(root: Path) -> tuple[str, bool | None]:
    """The checked-out commit and whether tracked files differ from it (None: unknown)."""
    commit = git(root, "rev-parse", "HEAD")
    if not commit:
        return "", None
    return commit, bool(git(root, "status", "--porcelain", "--untracked-files=no"))


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that started this process: ``python`` and ``sys.argv``."""
    return "python " + shlex.join(list(sys.argv if argv is None else argv))


def caller_script(folders: Iterable[Path]) -> Path | None:
    """The first file up the call stack that is a script in one of ``folders`` (a file
    whose name does not start with ``_``): the script a shared table writer was called
    from, also when a test imports it and calls its ``main``."""
    wanted = {Path(f).resolve() for f in folders}
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.suffix == ".py" and not path.name.startswith("_"):
            resolved = path.resolve()
            if resolved.parent in wanted:
                return resolved
        frame = frame.f_back
    return None


def write_record(
    table: Path | str,
    *,
    command: str | None = None,
    script: Path | str | None = None,
    outputs: Iterable[Path | str] = (),
    paper: str | None = None,
    verdict: str | None = None,
    settings_differ: str | None = None,
    root: Path | str | None = None,
) -> Path:
    """Write ``<table>.provenance.json`` beside ``table`` and return its path.

    ``command``: the command line (default: this process's). ``script``: the script that
    made the table, hashed with the modules it imported.
    ``outputs``: other files of the table (its CSV, figures), recorded by name. ``paper``:
    the paper's figure or table it reproduces; ``verdict``: one of :data:`VERDICTS`;
    ``settings_differ``: how the settings differ from the paper's. Fields not given are
    kept from the record a previous run wrote (a verdict kept so says which run it judged).
    ``root``: the repository (default: the one holding ``script``, else the table).
    """
    table = Path(table).resolve()
    if verdict is not None and verdict not in VERDICTS:
        raise ProvenanceError(f"verdict={verdict!r}: expected one of {', '.join(VERDICTS)}")
    anchor = Path(script).resolve().parent if script is not None else table.parent
    root_path = Path(root).resolve() if root is not None else repo_root(anchor)
    sources = imported_sources(root_path, Path(script) if script is not None else None)
    commit, dirty = commit_state(root_path)
    path = record_path(table)
    old: dict[str, Any] = {}
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
    names = sorted({table.name, *(Path(p).name for p in outputs)})
    record: dict[str, Any] = {
        "table": table.name,
        "outputs": names,
        "command": command or command_line(),
        "script": _relative(Path(script), root_path) if script is not None else None,
        "commit": commit,
        "dirty": dirty,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sources": sources,
        "sources_hash": combined_hash(sources),
    }
    for key, value in (("paper", paper), ("settings_differ", settings_differ)):
        if value is None:
            value = old.get(key)
        if value is not None:
            record[key] = value
    if verdict is not None:
        record["verdict"], record["verdict_commit"] = verdict, commit
    elif old.get("verdict"):
        record["verdict"] = old["verdict"]
        record["verdict_commit"] = old.get("verdict_commit") or old.get("commit", "")
        if old.get("verdict_note"):
            record["verdict_note"] = old["verdict_note"]
    text = json.dumps(record, indent=1) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
