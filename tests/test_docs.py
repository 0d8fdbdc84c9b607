"""The documentation site (``mkdocs.yml``, ``docs/``) builds strict, its tutorials run, and
what it shows is real: every page of the navigation is built, the API pages document
symbols that exist, every image a page shows exists (a file of the site, or a PNG inline),
and no executed block printed a traceback.

The default suite builds the quick site (``VIMPC_DOCS_QUICK=1``: the long tutorials shown,
not run); ``pytest -m slow`` builds all of it."""

from __future__ import annotations

import base64
import html
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]')")
pytest.importorskip("markdown_exec", reason="the docs extra (pip install -e '.[docs]')")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "experiments"))
from docs_screenshots import build_site  # noqa: E402

NOT_RUN = "Not run in this build"


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _html_of(site: Path, page: str) -> Path:
    stem = page[: -len(".md")]
    if stem == "index":
        return site / "index.html"
    if stem.endswith("/index"):
        return site / stem[: -len("index")] / "index.html"
    return site / stem / "index.html"


def _front_matter(page: str) -> dict:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return {}
    return yaml.safe_load(text[4 : text.index("\n---\n", 4)]) or {}


def build(target: Path, *, quick: bool) -> float:
    """``mkdocs build --strict`` into ``target``; the wall time in seconds (the screenshot
    script's build, so both build the site alike)."""
    try:
        return build_site(target, quick)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def check_site(site: Path, *, quick: bool) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    pages = _nav_pages(config["nav"])
    assert len(pages) >= 20 and "index.md" in pages
    for page in pages:
        path = _html_of(site, page)
        assert path.is_file(), f"{page} was not built ({path})"
        text = path.read_text(encoding="utf-8")
        assert "Traceback (most recent call last)" not in text, f"{page} shows a traceback"
        skipped = quick and _front_matter(page).get("execute") == "full"
        assert (NOT_RUN in text) == skipped, f"{page}: the note {NOT_RUN!r} where it should not"
        for src in re.findall(r'<img[^>]*\ssrc="([^"]+)"', text):
            if src.startswith("data:image/png;base64,"):
                png = base64.b64decode(src.split(",", 1)[1])
                assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, f"{page}: a bad PNG"
            else:
                target = (path.parent / html.unescape(src)).resolve()
                assert target.is_file(), f"{page} shows {src}, which the site does not have"


def check_reference(site: Path) -> None:
    """Each API page documents real symbols: every heading anchor of an object names a
    module, class, function or attribute that imports."""
    documented = set()
    for path in (site / "reference").rglob("index.html"):
        ids = re.findall(
            r'<h[1-6] id="((?:vimpc|vimpc_envs)(?:\.[A-Za-z0-9_.]+)?)" class="doc', path.read_text()
        )
        assert ids, f"{path.relative_to(site)} documents no symbol"
        documented |= set(ids)
    for name in sorted(documented):
        parts = name.split(".")
        for k in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
            except ImportError:
                continue
            for attr in parts[k:]:
                obj = getattr(obj, attr)
            break
        else:
            pytest.fail(f"the API reference documents {name}, which does not import")
    expected = {
        "vimpc.dynamics.DiscreteModel",
        "vimpc.runs.run.run_scenario",
        "vimpc.mpc.MPC",
        "vimpc.models.families.gp_vi.GPVIModel",
        "vimpc.closedloop.run_episode",
    }
    assert expected <= documented, f"missing from the API reference: {expected - documented}"


def test_the_quick_site_builds_strict_with_real_pages(tmp_path):
    site = tmp_path / "site"
    seconds = build(site, quick=True)
    print(f"quick docs build: {seconds:.1f} s")
    check_site(site, quick=True)
    check_reference(site)
    # the committed figures of results/ are the site's own
    assert any((site / "assets" / "results").rglob("*.png"))


@pytest.mark.slow
def test_the_full_site_builds_strict_with_every_tutorial_run(tmp_path):
    site = tmp_path / "site"
    seconds = build(site, quick=False)
    print(f"full docs build: {seconds:.1f} s")
    check_site(site, quick=False)
    check_reference(site)


def test_a_failing_tutorial_fails_the_strict_build(tmp_path):
    """A block that raises aborts ``mkdocs build --strict`` (markdown-exec's warning)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        '# T\n\n```python exec="on"\nraise ValueError("boom")\n```\n'
    )
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\nplugins:\n  - markdown-exec\n"
        "markdown_extensions:\n  - pymdownx.superfences\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode != 0 and "boom" in done.stderr


def test_a_quick_build_shows_the_long_tutorials_code_without_running_it():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        hooks = importlib.import_module("hooks")
    finally:
        sys.path.remove(str(ROOT / "docs"))
    text = (
        "intro\n\n"
        '```python exec="on" session="a"\nhidden = 1\n```\n\n'
        '```python exec="on" source="above" result="text" session="a"\nprint(2)\n```\n\n'
        "```python\nplain = 3\n```\n"
    )
    out = hooks._without_execution(text)
    assert "hidden" not in out and "```python\nprint(2)\n```" in out
    assert "```python\nplain = 3\n```" in out and 'exec="on"' not in out
    with pytest.raises(ValueError, match="never closed"):
        hooks._without_execution('```python exec="on"\nprint(1)\n')
