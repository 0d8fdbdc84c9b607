"""Ctrl-C inside CasADi calls.

CasADi polls Python's signal handlers while it computes (a solver between iterations, its
Python bindings around many calls). When the handler raises ``KeyboardInterrupt`` there,
CasADi stops the call, but turns the interrupt into a failure of the call (a failed
solve, a ``RuntimeError``, at worst a ``SystemError``) or drops it, and a closed loop
goes on with its fallback input. Two tools keep a Ctrl-C:

- :class:`kept_interrupts` around a long CasADi call (a solve) lets a SIGINT stop the
  call as CasADi does, and raises ``KeyboardInterrupt`` when the call returns, whatever
  CasADi made of it;
- :func:`interrupt_latch` around a whole command remembers every SIGINT (and raises it
  as usual), so one that CasADi swallowed elsewhere is raised again by :func:`check` at
  the next step of a closed loop, and an error it caused is recognised by
  :func:`interrupted`.

Both act only where Python's default SIGINT handler is in place, in the main thread; a
program with its own handler keeps it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pending = False  # a SIGINT arrived under interrupt_latch() and was not acted on yet


def _latch(signum, frame) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def _ours(handler) -> bool:
    return handler is signal.default_int_handler or handler is _latch


@contextmanager
def interrupt_latch() -> Iterator[None]:
    """Remember every SIGINT while the body runs (see the module's text)."""
    global _pending
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    _pending = False
    signal.signal(signal.SIGINT, _latch)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _pending = False


def interrupted() -> bool:
    """Whether a SIGINT arrived under :func:`interrupt_latch` (whatever became of it)."""
    return _pending


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a SIGINT arrived under :func:`interrupt_latch` and was
    swallowed on its way (cheap: call it at every step of a loop)."""
    if _pending:
        raise KeyboardInterrupt


class kept_interrupts:  # noqa: N801  (used like a function: ``with kept_interrupts():``)
    """Raise ``KeyboardInterrupt`` after the body if a SIGINT arrived during it (the
    SIGINT also raises where it lands, so CasADi stops at its next poll)."""

    __slots__ = ("_caught", "_previous")

    def __enter__(self) -> None:
        self._caught = False
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if _ours(previous):  # else someone else's handler: leave it in charge
                self._previous = previous
                signal.signal(signal.SIGINT, self._record)

    def _record(self, signum, frame) -> None:
        global _pending
        self._caught = True
        # the previous handler is back at once: a SIGINT that lands before the body starts
        # raises out of __enter__, and __exit__ never runs to restore it (this handler, left
        # in place, would then keep every later SIGINT from the next kept_interrupts)
        signal.signal(signal.SIGINT, self._previous)
        if self._previous is _latch:
            _pending = True
        raise KeyboardInterrupt

    def __exit__(self, kind, value, traceback) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            if self._caught and kind is not KeyboardInterrupt:
                raise KeyboardInterrupt  # what CasADi made of it (if anything) is the context
        return False
