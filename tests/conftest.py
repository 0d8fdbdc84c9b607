"""Shared test set-up: fitted models and compiled controllers are cached in a temporary
folder, never in the user's; controllers left at ``jit = "auto"`` run interpreted
(``VIMPC_JIT=none``: compiling every test's own NLP would take longer than the suite), and the
tests of compiling ask for it by name. A suite started with SIGINT ignored (as a shell
without job control starts a command in the background) gives Python's handler back to the
processes the Ctrl-C tests start, which press Ctrl-C as a user in a terminal would.

The suite's BLAS and torch run one thread each (``OMP_NUM_THREADS=1`` unless set, before
numpy or torch is imported): its problems are small, and on a 2-core machine their threads
spin against each other and against the suite's worker processes (the LSI and CLNN
baseline tests: 65 s with the default threads, 25 s with one, on a busy machine)."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # an ignored SIGINT is inherited through exec; a handler is not (the child starts with
    # the default, and Python installs its own)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _model_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VIMPC_CACHE", str(tmp_path_factory.mktemp("vimpc_cache")))
    mp.setenv("VIMPC_JIT", "none")
    yield
    mp.undo()
