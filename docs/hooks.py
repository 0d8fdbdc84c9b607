"""MkDocs hooks of the documentation site (``hooks:`` in ``mkdocs.yml``).

- The figures of ``results/`` join the site under ``assets/results/`` (the same relative
  paths), so the results pages show the committed figures themselves, not copies.
- ``VIMPC_DOCS_QUICK=1`` builds the site without running the long tutorials: a page whose
  front matter says ``execute: full`` keeps its code, shown but not run, under a note that
  says so; hidden blocks (run without showing their source) are dropped. Every other
  page runs as in the full build, and the build is as strict.
- The tutorials' controllers run interpreted (``VIMPC_JIT=none`` unless set): compiling
  each tutorial's NLP to C would cost the build more time than its short episodes save.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
#: where the figures of results/ appear in the site
ASSETS = "assets/results"
#: the opening line of a fenced block run by markdown-exec
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<lang>\w+)(?P<opts>[^\n]*)$", re.MULTILINE)
_EXEC = re.compile(r'\bexec="(?:on|1|true|yes)"')


def quick() -> bool:
    """Whether this build skips the long tutorials (``VIMPC_DOCS_QUICK=1``)."""
    value = os.environ.get("VIMPC_DOCS_QUICK", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"VIMPC_DOCS_QUICK must be 0 or 1 (or unset), got {value!r}")
    return value == "1"


def on_config(config):
    quick()  # a bad value fails the build before any page runs
    os.environ.setdefault("VIMPC_JIT", "none")
    return config


def on_files(files, config):
    for path in sorted((ROOT / "results").rglob("*.png")):
        rel = path.relative_to(ROOT / "results")
        if rel.parts[0] in ("runs", "sweeps"):  # run folders, not results
            continue
        files.append(File.generated(config, f"{ASSETS}/{rel.as_posix()}", abs_src_path=str(path)))
    return files


def _without_execution(markdown: str) -> str:
    """``markdown`` with every executed block made a plain code block (a hidden one,
    which shows no source, removed)."""
    out, at = [], 0
    for m in _FENCE.finditer(markdown):
        if m.start() < at or not _EXEC.search(m.group("opts")):
            continue
        close = re.compile(rf"^{re.escape(m.group('fence'))}\s*$", re.MULTILINE)
        end = close.search(markdown, m.end())
        if end is None:
            raise ValueError(f"an executed block at offset {m.start()} is never closed")
        out.append(markdown[at : m.start()])
        if 'source="' in m.group("opts"):
            body = markdown[m.end() : end.start()]
            out.append(f"{m.group('fence')}{m.group('lang')}{body}{m.group('fence')}")
        at = end.end()
    out.append(markdown[at:])
    return "".join(out)


def on_page_markdown(markdown, page, config, files):
    if quick() and page.meta.get("execute") == "full":
        note = (
            '!!! note "Not run in this build"\n'
            "    This build of the site (`VIMPC_DOCS_QUICK=1`) shows this tutorial's code "
            "without running it; the full build runs it and shows its output.\n\n"
        )
        title, _, rest = markdown.partition("\n")
        return f"{title}\n\n{note}{_without_execution(rest)}"
    return markdown
