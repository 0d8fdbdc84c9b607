"""Shared test set-up: fitted models are cached in a temporary folder, never in the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _model_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VIMPC_CACHE", str(tmp_path_factory.mktemp("vimpc_cache")))
    yield
    mp.undo()
