"""The one way vimpc writes a file: atomically, and never over an existing file unless asked.

A reader never sees a partial file: the content goes to a temporary file in the target's
directory, is flushed to disk, and is then linked (or, with ``overwrite``, renamed) into
place. Without ``overwrite`` an existing file is never replaced, also not by a concurrent
writer: the final link fails instead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vimpc.errors import OutputExistsError

Content = str | bytes | Callable[[BinaryIO], None]


def _exists(target: Path) -> OutputExistsError:
    return OutputExistsError(
        f"{str(target)!r} already exists and is kept; write to another path, or allow "
        "replacing it (overwrite=True)"
    )


def write_atomic(
    path: str | os.PathLike[str], content: Content, *, overwrite: bool = False
) -> Path:
    """Write ``content`` to ``path`` atomically; returns the path.

    ``content`` is text (written as UTF-8), bytes, or a function that writes to a binary
    file handle (``numpy.savez``, ``Figure.savefig``).

    Raises:
        OutputExistsError: ``path`` exists and ``overwrite`` is false (a ``FileExistsError``).
        FileNotFoundError: the directory of ``path`` does not exist.
    """
    target = Path(os.fspath(path))
    if not overwrite and target.exists():
        raise _exists(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(content, str):
                handle.write(content.encode("utf-8"))
            elif isinstance(content, bytes):
                handle.write(content)
            else:
                content(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        if overwrite:
            os.replace(tmp, target)
            _sync_folder(target.parent)
            return target
        try:
            os.link(tmp, target)  # atomic, and never replaces an existing file
        except FileExistsError:
            raise _exists(target) from None
        except OSError:  # a file system without hard links
            if target.exists():
                raise _exists(target) from None
            os.replace(tmp, target)
        _sync_folder(target.parent)
        return target
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entry of a new file to disk too (its content already is), so a
    file reported written survives a crash of the machine (best effort: not every system
    can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
