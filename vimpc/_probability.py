"""The one type of a probability ``delta`` in (0, 1): a model's bound fails with probability at
most ``delta``. Every layer that takes a ``delta`` checks it by making a :class:`Probability`
(the scenario's settings, the calibration, the GP's uniform bound, the model's bound record),
so the rule and its message are written once."""

from __future__ import annotations

import math
import numbers
from typing import Any

from vimpc.errors import InputError


class Probability(float):
    """A float in the open interval (0, 1), checked when made.

    ``Probability(value, name)`` refuses a bool, anything that is not a real number (a
    string among them), NaN, and a number outside (0, 1), with an :class:`InputError`
    naming ``name``, the value and the rule. It is a float in every other respect (equal,
    printed, written to JSON and TOML as the float it holds)."""

    __slots__ = ()

    def __new__(cls, value: Any, name: str = "delta") -> Probability:
        if not cls.holds(value):
            raise InputError(f"{name} must be a probability in (0, 1), got {value!r}")
        return super().__new__(cls, float(value))

    @staticmethod
    def holds(value: Any) -> bool:
        """Whether ``value`` is a probability in (0, 1): a real number, not a bool, not NaN."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        value = float(value)
        return not math.isnan(value) and 0.0 < value < 1.0

    def __reduce__(self):
        return (Probability, (float(self),))

    def __repr__(self) -> str:
        return float.__repr__(self)
