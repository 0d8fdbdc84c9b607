"""A griffe extension for the API reference (``extensions`` in ``mkdocs.yml``): the doctest
lines of a docstring (``>>> ...`` and the output under them) become a Python code block, as
Sphinx shows them, rather than Markdown text (where ``x[0]["y"]`` reads as a link); and the
docstrings' Sphinx roles (``:class:`~vimpc.X` ``) show as the code they name."""

from __future__ import annotations

import re

import griffe

#: a Sphinx cross-reference role before its backquoted target (``~`` shortens it)
_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?")


def fenced(text: str) -> str:
    """``text`` with each run of doctest lines wrapped in a fenced ``pycon`` block."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith(">>>") or (block and line.strip()):
            block.append(line.strip())
            continue
        if block:
            out += ["```pycon", *block, "```"]
            block = []
        out.append(line)
    return "\n".join(out[:-1])


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is None:
            return
        value = _ROLE.sub("`", obj.docstring.value)
        obj.docstring.value = fenced(value) if ">>>" in value else value
