"""The scenario files that ship with vimpc, and what a scenario argument names.

The files live in the repository's ``scenarios/`` folder, which installs as the data package
``vimpc_scenarios`` (``package-dir`` in ``pyproject.toml``), so an editable and a regular
install both find them through :mod:`importlib.resources`.

A scenario argument (``vimpc run X``, ``vimpc fit X``) is, in this order:

1. the path of an existing file: it is used as it is, so a local file wins over a shipped
   scenario of the same name;
2. the name of a shipped scenario (its file name, with or without ``.toml``) when it has no
   folder part: ``pendulum_swingup`` from any folder;
3. otherwise an error that says which, with the shipped names and a "did you mean".

A sweep argument (``vimpc sweep X``) follows the same rule with the sweep files of the
``sweeps/`` folder (:func:`find_sweep`).
"""

from __future__ import annotations

import difflib
import importlib.resources
from pathlib import Path
from typing import NoReturn

from vimpc.errors import ConfigError

PACKAGE = "vimpc_scenarios"
#: where a source checkout keeps them, next to the vimpc package
FALLBACK = "scenarios"
SUFFIX = ".toml"
#: the shipped sweep files' folder inside the scenarios' (``vimpc sweep NAME``)
SWEEPS = "sweeps"


def shipped_folder() -> Path:
    """The folder that holds the shipped scenario files (:class:`ConfigError` when the
    installation carries none)."""
    try:
        folder = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:
        # an editable install made before the scenarios became package data: its source tree
        import vimpc

        folder = Path(vimpc.__file__).resolve().parents[1] / FALLBACK
    folder = Path(str(folder))
    if not folder.is_dir():
        raise ConfigError(
            f"the shipped scenarios are missing ({PACKAGE} is not installed and "
            f"{str(folder)!r} is not a folder); reinstall vimpc (pip install vimpc, or "
            'pip install -e ".[dev]" in a source checkout)'
        )
    return folder


def shipped_scenarios() -> dict[str, Path]:
    """Every shipped scenario: its name (the file name without ``.toml``) -> its file."""
    return {p.stem: p for p in sorted(shipped_folder().glob(f"*{SUFFIX}")) if p.is_file()}


def shipped_sweeps() -> dict[str, Path]:
    """Every shipped sweep file (the ``sweeps/`` folder beside the scenarios): its name
    (the file name without ``.toml``) -> its file."""
    folder = shipped_folder() / SWEEPS
    return {p.stem: p for p in sorted(folder.glob(f"*{SUFFIX}")) if p.is_file()}


def find_sweep(arg: str | Path) -> Path:
    """The sweep file ``arg`` names, by the rule of scenarios (module docstring): an
    existing file at that path, else a shipped sweep of that name when ``arg`` has no
    folder part; :class:`ConfigError` naming ``arg``, the shipped sweeps and the closest
    one otherwise."""
    path, text = Path(arg), str(arg)
    try:
        if path.is_file() or path.is_dir():
            return path  # a folder is refused by the sweep reader, naming it
    except OSError as exc:
        raise ConfigError(
            f"sweep {text[:200]!r} is no file that can be read ({exc.strerror or exc})"
        ) from None
    shipped = shipped_sweeps()
    return _shipped(text, path, shipped) or _unknown(text, path, shipped, "sweep")


def find_scenario(arg: str | Path) -> Path:
    """The scenario file ``arg`` names: an existing file at that path, else a shipped
    scenario of that name (module docstring). Raises :class:`ConfigError` naming ``arg``,
    the shipped names and the closest one when it is neither."""
    path = Path(arg)
    text = str(arg)
    try:
        if path.is_file():
            return path
        path.is_dir()
    except OSError as exc:  # a name too long for the file system, a loop of links, ...
        raise ConfigError(
            f"scenario {text[:200]!r}{'...' if len(text) > 200 else ''} is no file that can be "
            f"read ({exc.strerror or exc}); give the path to a scenario .toml file or the "
            "name of a shipped scenario (vimpc list)"
        ) from None
    shipped = shipped_scenarios()
    found = _shipped(text, path, shipped)
    if found is not None:
        return found
    if path.is_dir():
        raise ConfigError(
            f"scenario {text!r} is a folder, not a scenario file; give the path to a .toml file "
            f"or the name of a shipped scenario ({', '.join(shipped) or 'none'})"
        )
    return _unknown(text, path, shipped, "scenario")


def _bare(text: str, path: Path) -> bool:
    """Whether ``text`` is a name alone, without a folder part."""
    return path.name == text and text not in ("", ".", "..")


def _shipped(text: str, path: Path, shipped: dict[str, Path]) -> Path | None:
    """The shipped file that the bare name ``text`` (with or without ``.toml``) names."""
    if not _bare(text, path):
        return None
    return shipped.get(text[: -len(SUFFIX)] if text.endswith(SUFFIX) else text)


def _unknown(text: str, path: Path, shipped: dict[str, Path], kind: str) -> NoReturn:
    """Raise the :class:`ConfigError` for a ``kind`` ("scenario", "sweep") that is neither
    a file nor a shipped name: the shipped names, and the closest one to a bare name."""
    names = ", ".join(shipped) or "none"
    command = "run" if kind == "scenario" else kind
    if not _bare(text, path):
        hint = ""
        if path.suffix == SUFFIX and path.stem in shipped:
            hint = (
                f"; the shipped {kind} {path.stem!r} runs from any folder by its name "
                f"(vimpc {command} {path.stem})"
            )
        raise ConfigError(
            f"{kind} file {text!r} does not exist (relative to {str(Path.cwd())!r}){hint}; "
            f"shipped {kind}s, run by name: {names}"
        )
    name = text[: -len(SUFFIX)] if text.endswith(SUFFIX) else text
    close = difflib.get_close_matches(name, list(shipped), n=1)
    extra = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"{kind} {text!r} is neither a file in {str(Path.cwd())!r} nor the name of a shipped "
        f"{kind}{extra} (shipped: {names}; or give the path to a {kind} .toml file)"
    )
