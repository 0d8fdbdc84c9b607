"""The Wilson score interval of a rate (vimpc.closedloop.metrics.wilson_interval)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vimpc.closedloop.metrics import wilson_interval

Z = 1.959963984540054


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 17, 20, 51, 100])
def test_the_ends_at_a_rate_of_zero_and_one_are_exact(n):
    # at k = 0 the interval is [0, z^2 / (n + z^2)]; a computed lower end of a few 1e-17
    # (above the rate 0 itself) made the sweep summary's error bars negative
    low, high = wilson_interval(0, n)
    assert low == 0.0
    assert high == pytest.approx(Z**2 / (n + Z**2), rel=1e-12)
    low, high = wilson_interval(n, n)
    assert high == 1.0
    assert low == pytest.approx(n / (n + Z**2), rel=1e-12)


def test_the_interval_holds_the_rate_and_matches_the_formula():
    for n in (3, 20, 51):
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            p = k / n
            assert low <= p <= high
            centre = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
            half = Z * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n * n)) / (1 + Z**2 / n)
            assert (low, high) == pytest.approx(
                (max(0.0, centre - half), min(1.0, centre + half)), abs=1e-15
            )
    assert all(np.isnan(wilson_interval(0, 0)))
