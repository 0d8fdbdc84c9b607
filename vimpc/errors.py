"""The exceptions vimpc raises.

Every message says the rule, what was received and, where there is one, the fix.
"""

from __future__ import annotations


class VimpcError(Exception):
    """Base of every error raised by vimpc."""


class InputError(VimpcError, ValueError):
    """An argument has the wrong type, shape or value."""


class ConfigError(VimpcError, ValueError):
    """A scenario file or configuration mapping is invalid."""


class OutputExistsError(VimpcError, FileExistsError):
    """A file would be written where one exists, and replacing it was not asked for."""


class NotFittedError(VimpcError, RuntimeError):
    """A learned model was used before ``fit``."""


class SolverError(VimpcError, RuntimeError):
    """A numerical solve (Newton, NLP) failed where no fallback exists."""


class FitWarning(UserWarning):
    """A fit finished, but its result rests on a choice the data did not make (a
    minimum-norm solution of a nearly empty system, a scale no force fixed) or is
    degenerate somewhere it will be used."""


class WorkerError(VimpcError, RuntimeError):
    """A worker process ended before its work did (killed, out of memory)."""
