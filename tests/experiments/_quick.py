"""The two options every benchmark and experiment script takes (not a test module).

- ``--quick``: the script's whole code path, end to end, on tiny sizes (a few steps,
  episodes, samples; one timing call), in seconds. Its numbers mean nothing; it exists so
  that ``tests/test_scripts_quick.py`` notices when a change breaks a script.
- ``--out DIR``: the folder the tables and figures go to, instead of the script's folder
  under ``results/``. ``--quick`` needs it, outside ``results/``, so a quick run never
  touches the committed results.

``parse`` reads the command line: with ``--quick`` the script's quick sizes become the
defaults, so an argument given explicitly still wins.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def add_options(parser: argparse.ArgumentParser, default_out: Path) -> None:
    """Add ``--quick`` and ``--out`` to ``parser`` (``default_out``: the script's results
    folder)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the same code path on tiny sizes, in seconds (a smoke test: the numbers mean "
        "nothing); needs --out outside results/",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"folder for the tables and figures (default: {_shown(default_out)})",
    )


def parse(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    default_out: Path,
    quick: Mapping[str, Any] | None = None,
) -> argparse.Namespace:
    """Parse ``argv`` (``sys.argv[1:]`` when None). With ``--quick`` the defaults become
    ``quick`` (arguments given explicitly still win) and ``--out`` must name a folder
    outside ``results/``; without ``--out`` the outputs go to ``default_out``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**(quick or {}))
        args = parser.parse_args(argv)
        if args.out is None:
            parser.error(
                "--quick needs --out DIR, a folder outside results/ for its throwaway tables "
                "and figures (e.g. --out /tmp/quick)"
            )
        if _inside(args.out, RESULTS):
            parser.error(
                f"--quick writes throwaway tables and figures, so --out must be outside "
                f"{_shown(RESULTS)}; got --out {args.out}"
            )
    args.out = Path(default_out if args.out is None else args.out)
    args.argv = argv
    return args


def command(script: str, argv: Sequence[str]) -> str:
    """The command line ``python <script> <argv>``, the script relative to the repository."""
    path = os.path.relpath(os.path.abspath(script), ROOT)
    return "python " + shlex.join([path, *argv])


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.abspath(path)).resolve().is_relative_to(folder.resolve())


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
