"""The documentation site as a reader sees it: built strict, served on 127.0.0.1, opened in
headless Chromium (Debian's ``chromium``), with screenshots of the landing page, one
tutorial and one API page, and a check in the page itself that every image loaded
(``naturalWidth > 0``) and nothing overflows sideways (``scrollWidth <= clientWidth``).

The check needs no DevTools: a copy of each page gets a script that writes the verdict
into the page on load, and ``chromium --dump-dom`` prints the page after its scripts ran.

    python tests/experiments/docs_screenshots.py [--quick] [--out results/docs]

``--quick`` builds the quick site (``VIMPC_DOCS_QUICK=1``); the committed screenshots come
from the full build.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _tables import write_table

ROOT = Path(__file__).resolve().parents[2]
#: the pages photographed: (name, path in the site)
PAGES = (
    ("landing", "index.html"),
    ("tutorial", "tutorials/nominal/index.html"),
    ("api", "reference/dynamics/index.html"),
)
WINDOW = (1280, 900)
CHECK = """
<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const el = document.documentElement;
  const verdict = {
    images: images.length,
    broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt || i.src.slice(0, 60)),
    scroll_width: el.scrollWidth,
    client_width: el.clientWidth,
  };
  const out = document.createElement("pre");
  out.id = "vimpc-check";
  out.textContent = JSON.stringify(verdict);
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("chromium is not installed: apt-get install -y chromium (Debian)")


def build_site(target: Path, quick: bool) -> float:
    """``mkdocs build --strict`` of the site (quick: ``VIMPC_DOCS_QUICK=1``) into ``target``;
    the wall time in seconds. A failed build raises :class:`RuntimeError` with mkdocs's
    messages (tests/test_docs.py builds with this too)."""
    env = {
        **os.environ,
        "VIMPC_DOCS_QUICK": "1" if quick else "0",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",
    }
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(target)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{done.stderr[-6000:]}")
    return time.perf_counter() - start


def _browser(*args: str) -> str:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=5000", *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def look(site: Path, out: Path) -> list[dict]:
    """Serve ``site`` on 127.0.0.1, photograph and check each of :data:`PAGES`."""
    for _, page in PAGES:
        html = (site / page).read_text(encoding="utf-8")
        checked = site / page.replace("index.html", "checked.html")
        checked.write_text(html.replace("</body>", CHECK + "</body>"), encoding="utf-8")
    handler = functools.partial(
        type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
        directory=str(site),
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    rows = []
    try:
        for name, page in PAGES:
            png = out / f"{name}.png"
            _browser(f"--screenshot={png}", base + page)
            dom = _browser("--dump-dom", base + page.replace("index.html", "checked.html"))
            found = re.search(r'<pre id="vimpc-check">(.*?)</pre>', dom, re.S)
            if found is None:
                raise SystemExit(f"{page}: the check did not run (no verdict in the DOM)")
            verdict = json.loads(found.group(1).replace("&quot;", '"'))
            rows.append({
                "page": page,
                "screenshot": png.name,
                "images": verdict["images"],
                "broken_images": len(verdict["broken"]),
                "scroll_width_px": verdict["scroll_width"],
                "client_width_px": verdict["client_width"],
                "overflows": verdict["scroll_width"] > verdict["client_width"],
                "screenshot_bytes": png.stat().st_size,
            })  # fmt: skip
    finally:
        server.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the quick site")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "docs")
    args = parser.parse_args(argv)
    chromium()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        seconds = build_site(Path(tmp) / "site", args.quick)
        rows = look(Path(tmp) / "site", args.out)
    command = "python tests/experiments/docs_screenshots.py" + (" --quick" if args.quick else "")
    write_table(
        args.out,
        "screenshots",
        "The documentation site in headless Chromium",
        command,
        f"The site built with `mkdocs build --strict` ({'quick' if args.quick else 'full'} "
        f"build, {seconds:.0f} s on this machine), served on 127.0.0.1 and opened in "
        f"headless Chromium at {WINDOW[0]}x{WINDOW[1]}; each page's images checked loaded "
        "(`naturalWidth > 0`) and its width checked (`scrollWidth <= clientWidth`).",
        rows,
        outputs=[r["screenshot"] for r in rows],
    )
    bad = [r["page"] for r in rows if r["broken_images"] or r["overflows"]]
    for r in rows:
        print(r)
    if bad:
        print(f"pages with broken images or overflow: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
