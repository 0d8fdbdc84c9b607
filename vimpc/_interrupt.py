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
program with its own handler keeps it. :func:`exit_if_command` turns a Ctrl-C during the
imports of the ``vimpc`` command (before ``main`` can catch anything) into its one-line
message and exit code 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

MESSAGE = "vimpc: interrupted; no result was written as complete"
EXIT_INTERRUPTED = 130

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
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not _ours(handler):
        yield
        return
    if handler is not _latch:  # else latched since the imports (latch_early): keep theirs
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


def _is_command() -> bool:
    """Whether this process is the ``vimpc`` command: its console script, or
    ``python -m vimpc.cli`` (a program that imports vimpc is not)."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name in ("vimpc", "vimpc.exe", "vimpc-script.py"):
        return True
    argv = list(getattr(sys, "orig_argv", ()))
    return any(
        a == "-m" and b in ("vimpc.cli", "vimpc") for a, b in zip(argv, argv[1:], strict=False)
    )


def _unraisable(hook):
    """``sys.unraisablehook`` that drops a latched SIGINT's ``KeyboardInterrupt`` raised
    where Python cannot raise it on (a weakref callback of the import machinery, a
    ``__del__``): the latch remembers it, and the command ends with its one line; any other
    unraisable exception goes to ``hook``."""

    def quiet(unraisable) -> None:
        if _pending and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        hook(unraisable)

    return quiet


def latch_early() -> None:
    """In the ``vimpc`` command, latch SIGINTs from before the heavy imports on: CasADi,
    called while they run, could swallow one (the command then went on to the end), and
    one that lands in a callback of the import machinery would print a traceback."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        and _is_command()
    ):
        signal.signal(signal.SIGINT, _latch)
        sys.unraisablehook = _unraisable(sys.unraisablehook)


def exit_if_command() -> None:
    """In the ``vimpc`` command, end with the interrupt's message and exit code 130 (called
    where a Ctrl-C lands during the imports, before ``main`` runs); elsewhere return, and
    the caller raises the ``KeyboardInterrupt`` on."""
    if _is_command():
        print(MESSAGE, file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
