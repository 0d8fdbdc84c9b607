"""Small text helpers shared by the printed summaries (:mod:`vimpc.report`) and the figures
(:mod:`vimpc.plotting`); imports nothing of vimpc."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 episode"``, ``"3 episodes"``: a number with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
