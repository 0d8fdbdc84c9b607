"""Shared test set-up: fitted models and compiled controllers are cached in a temporary
folder, never in the user's; controllers left at ``jit = "auto"`` run interpreted
(``VIMPC_JIT=none``: compiling every test's own NLP would take longer than the suite), and the
tests of compiling ask for it by name."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _model_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VIMPC_CACHE", str(tmp_path_factory.mktemp("vimpc_cache")))
    mp.setenv("VIMPC_JIT", "none")
    yield
    mp.undo()
