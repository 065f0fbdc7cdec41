"""Headless Debian Chromium through Playwright, for browser tests, with a screenshot per step.

Playwright's own browser download does not work on these machines (no internet to its CDN), so the browser is
Debian's ``chromium`` package (``make test`` installs it; ``/usr/bin/chromium``, or ``POPCON_CHROMIUM``), launched
with the flags a closed network needs and a fresh profile each time.

In tests, use the fixtures of ``tests/conftest.py`` (``browser`` for async tests, ``sync_browser`` for sync ones):
they skip when Chromium or Playwright is missing, unless ``TESTS_REQUIRE_BROWSER=1`` (set by ``make test``) makes that
an error, and mark the test ``browser``. Each step's screenshot lands in ``tests/.screenshots/<test name>/NN-step.png``
(gitignored; ``TESTS_SCREENSHOT_DIR`` moves the root)::

    async def test_page(browser: BrowserSession) -> None:
        await browser.page.goto("http://127.0.0.1:8233/namespaces/default/workflows")
        await browser.shot("sets list")                            # 01-sets-list.png, the viewport
        await browser.shot("summary", browser.page.locator("h1"))  # 02-summary.png, just that element

Outside pytest, ``async with open_browser(folder) as session:`` (or ``with open_sync_browser(folder)``) does the same.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Locator, Page
    from playwright.sync_api import BrowserContext as SyncBrowserContext
    from playwright.sync_api import Locator as SyncLocator
    from playwright.sync_api import Page as SyncPage

CHROMIUM_ENV = "POPCON_CHROMIUM"
DEFAULT_CHROMIUM = Path("/usr/bin/chromium")
REQUIRE_ENV = "TESTS_REQUIRE_BROWSER"
"""Set (``make test`` does) to make a missing browser an error instead of a skip."""
SCREENSHOT_ENV = "TESTS_SCREENSHOT_DIR"
SCREENSHOT_ROOT = Path(__file__).resolve().parent.parent / "tests" / ".screenshots"

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Without the background-networking flags Chromium keeps opening connections this machine's network refuses."""

VIEWPORT = {"width": 1400, "height": 900}
DEFAULT_TIMEOUT_MS = 20_000


def chromium_executable() -> Path:
    return Path(os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM)


def missing() -> str | None:
    """Why no browser test can run here (no Chromium, no Playwright), or None."""
    path = chromium_executable()
    if not (path.is_file() and os.access(path, os.X_OK)):
        return f"{path} not found: `apt-get install -y chromium` (make test installs it)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[dev]'"
    return None


def screenshot_folder(name: str) -> Path:
    """A fresh folder for one run's screenshots, under ``tests/.screenshots`` (or ``TESTS_SCREENSHOT_DIR``)."""
    root = Path(os.environ.get(SCREENSHOT_ENV) or SCREENSHOT_ROOT)
    folder = root / _slug(name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:100] or "step"


@dataclass
class Screenshots:
    """Numbered screenshot paths in one folder: ``01-sets-list.png``, ``02-summary.png``..."""

    folder: Path
    taken: list[Path] = field(default_factory=list)

    def next_path(self, step: str) -> Path:
        path = self.folder / f"{len(self.taken) + 1:02d}-{_slug(step)}.png"
        self.taken.append(path)
        return path


def _launch_options(profile: str) -> dict[str, Any]:
    return {
        "user_data_dir": profile,
        "executable_path": str(chromium_executable()),
        "headless": True,
        "args": list(CHROMIUM_ARGS),
        "viewport": VIEWPORT,
    }


@dataclass
class BrowserSession:
    """One headless Chromium (async API): its context, a page, and the run's screenshots."""

    context: BrowserContext
    page: Page
    screenshots: Screenshots

    async def shot(self, step: str, target: Locator | None = None, **options: Any) -> Path:
        """Save a screenshot of the page (or of ``target``, one element) as the next step; ``options`` go to
        Playwright's ``screenshot`` (``full_page=True``, ``clip={...}``)."""
        path = self.screenshots.next_path(step)
        await (target or self.page).screenshot(path=path, **options)
        return path


@dataclass
class SyncBrowserSession:
    """One headless Chromium (sync API, for tests without an event loop)."""

    context: SyncBrowserContext
    page: SyncPage
    screenshots: Screenshots

    def shot(self, step: str, target: SyncLocator | None = None, **options: Any) -> Path:
        path = self.screenshots.next_path(step)
        (target or self.page).screenshot(path=path, **options)
        return path


@contextlib.asynccontextmanager
async def open_browser(folder: Path, *, timeout_ms: float = DEFAULT_TIMEOUT_MS) -> AsyncIterator[BrowserSession]:
    """Launch Debian Chromium headless with a fresh profile; screenshots go to ``folder``.

    ``timeout_ms`` is the default for every action and for Playwright's ``expect`` (the Temporal UI fills a set's
    current details from a query the worker answers: several seconds on a busy machine).
    """
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=timeout_ms)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(**_launch_options(profile))
            try:
                context.set_default_timeout(timeout_ms)
                page = context.pages[0] if context.pages else await context.new_page()
                yield BrowserSession(context, page, Screenshots(folder))
            finally:
                await context.close()


@contextlib.contextmanager
def open_sync_browser(folder: Path, *, timeout_ms: float = DEFAULT_TIMEOUT_MS) -> Iterator[SyncBrowserSession]:
    """:func:`open_browser` with Playwright's sync API (not inside a running event loop)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=timeout_ms)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(**_launch_options(profile))
        try:
            context.set_default_timeout(timeout_ms)
            page = context.pages[0] if context.pages else context.new_page()
            yield SyncBrowserSession(context, page, Screenshots(folder))
        finally:
            context.close()
