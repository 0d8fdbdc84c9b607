"""Ctrl-C inside CasADi calls.

CasADi's solvers poll Python's signal handlers while they iterate. When the handler
raises ``KeyboardInterrupt`` there, CasADi catches it and ends the solve as a failure
(``NonIpopt_Exception_Thrown``, a ``RuntimeError``), so the interrupt is lost and a
closed loop goes on with its fallback input. :class:`deferred_interrupts` holds a Ctrl-C
that arrives during such a call and raises it as soon as the call returns.
"""

from __future__ import annotations

import signal
import threading


class deferred_interrupts:  # noqa: N801  (used like a function: ``with deferred_interrupts():``)
    """Run the body with SIGINT recorded instead of raised; raise ``KeyboardInterrupt``
    after the body if one arrived.

    Applies only where Python's default SIGINT handler is in place and only in the main
    thread (where signal handlers can be set); a program with its own handler keeps it.
    """

    __slots__ = ("_caught", "_active")

    def __enter__(self) -> None:
        self._caught = False
        self._active = threading.current_thread() is threading.main_thread()
        if self._active:
            previous = signal.signal(signal.SIGINT, self._record)
            if previous is not signal.default_int_handler:
                signal.signal(signal.SIGINT, previous)
                self._active = False

    def _record(self, signum, frame) -> None:
        self._caught = True

    def __exit__(self, *exc) -> None:
        if self._active:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if self._caught:
                raise KeyboardInterrupt
