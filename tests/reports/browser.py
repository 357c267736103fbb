"""Open an HTML file in headless Chromium and list what went wrong (test helper).

A report that renders without errors in a real browser is the only proof that its HTML
works: a string check cannot see a broken image or a resource the page refuses to load.
Uses Playwright with the system's Chromium (Debian's ``chromium`` package), so nothing
is downloaded during tests; tests call :func:`require_browser` first and skip without it.
One Chromium is started per test process, on first use, and each page is opened in a
browser context of its own (fresh cookies, storage and cache), as pytest-playwright's
session browser does: starting Chromium is most of what a check costs.
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

SKIP_MESSAGE = (
    "headless Chromium not found: install Debian's chromium (apt-get install chromium) "
    "or set TRAINSCOPE_CHROMIUM"
)

# Upper bound for loading one local file; a report with embedded images loads in well
# under a second, so hitting this means something hangs.
LOAD_TIMEOUT_MS = 30_000

# Runs in the page after "load": every <img> that did not decode to a real picture.
_BROKEN_IMAGES_JS = """
() => Array.from(document.images)
    .filter(img => !(img.complete && img.naturalWidth > 0))
    .map(img => (img.getAttribute('src') || '').slice(0, 80))
"""


def find_chromium() -> str | None:
    """The Chromium binary to use: ``$TRAINSCOPE_CHROMIUM``, else the first on PATH."""
    env = os.environ.get("TRAINSCOPE_CHROMIUM")
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser() -> None:
    """Skip the calling test unless Playwright and a Chromium binary are available."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip(f"{SKIP_MESSAGE} (and install playwright: pip install -e '.[dev]')")
    if find_chromium() is None:
        pytest.skip(SKIP_MESSAGE)


# This process's Playwright and Chromium, started by _browser() (a forked child starts
# its own).
_STARTED: dict[str, Any] = {}


def _close() -> None:
    if _STARTED.pop("pid", None) == os.getpid():
        try:
            _STARTED.pop("browser").close()
        finally:
            _STARTED.pop("playwright").stop()


def _browser(executable: str) -> Any:
    """This process's headless Chromium, started on first use (again if it went away)."""
    browser = _STARTED.get("browser")
    if _STARTED.get("pid") == os.getpid() and browser is not None and browser.is_connected():
        return browser
    if _STARTED.get("pid") == os.getpid():
        _close()
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    # --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
    browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
    if "registered" not in _STARTED:
        atexit.register(_close)
        _STARTED["registered"] = True
    _STARTED.update(pid=os.getpid(), playwright=pw, browser=browser)
    return browser


_WIDE_PRE_JS = """() => Array.from(document.querySelectorAll('pre'))
  .filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.textContent.slice(0, 60))"""


def browser_problems(
    html_path: Path, screenshot: Path | None = None, visible: Sequence[str] = ()
) -> list[str]:
    """Load ``html_path`` in headless Chromium; return every problem seen ([] = clean).

    Problems are console messages of type error, uncaught page errors, failed requests
    and ``<img>`` elements that are not ``complete`` with a non-zero natural width; and,
    for each CSS selector in ``visible``, no such element, or one a reader cannot see
    (Playwright's ``is_visible``: a non-empty box, not ``visibility: hidden``) at the
    screenshot's width. With ``screenshot``, the whole page is also saved there as a PNG,
    as a reader would see it.
    """
    executable = find_chromium()
    if executable is None:
        raise RuntimeError(SKIP_MESSAGE)
    problems: list[str] = []
    context = _browser(executable).new_context()
    try:
        page = context.new_page()
        page.on(
            "console",
            lambda msg: (
                problems.append(f"console error: {msg.text}") if msg.type == "error" else None
            ),
        )
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on(
            "requestfailed",
            lambda req: problems.append(f"request failed: {req.url} ({req.failure})"),
        )
        page.goto(Path(html_path).resolve().as_uri(), wait_until="load", timeout=LOAD_TIMEOUT_MS)
        problems += [f"broken image: {src}" for src in page.evaluate(_BROKEN_IMAGES_JS)]
        # A code block wider than the page (a long command) must wrap, not scroll.
        page.set_viewport_size({"width": 800, "height": 900})
        problems += [f"code block overflows: {t}" for t in page.evaluate(_WIDE_PRE_JS)]
        page.set_viewport_size({"width": 1200, "height": 900})
        for selector in visible:
            found = page.locator(selector)
            if found.count() == 0:
                problems.append(f"missing: {selector}")
            elif not found.first.is_visible():
                problems.append(f"not visible: {selector}")
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
    finally:
        context.close()
    return problems
