"""Binomial limits for tests of a bound's coverage: how many of ``n`` draws a bound that
holds with probability ``1 - delta`` can leave uncovered before the count refutes it.

Each is a one-sided exact binomial test at the level ``alpha`` (default 1e-3): a correct
bound fails the assert with probability below ``alpha``, and a bound that holds less often
than promised fails it the more surely the larger ``n``. The draws are taken as
independent; transitions of one trajectory are not quite, so tests use a small ``alpha``.
"""

from __future__ import annotations

from scipy.stats import binom

ALPHA = 1e-3


def fewest_covered(n: int, delta: float, alpha: float = ALPHA) -> int:
    """The smallest count of covered draws out of ``n`` that coverage ``1 - delta`` gives
    with probability at least ``alpha`` (``P(covered < this) < alpha``)."""
    return int(binom.ppf(alpha, n, 1.0 - delta))


def most_violated(n: int, delta: float, alpha: float = ALPHA) -> int:
    """The largest count of violations out of ``n`` that a violation probability ``delta``
    exceeds with probability at most ``alpha`` (``P(violated > this) <= alpha``)."""
    return int(binom.ppf(1.0 - alpha, n, delta))
