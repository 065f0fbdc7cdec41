"""The final-review page's weight: what a reviewer's browser loads to show one set awaiting its final review.

A set of the size the review measures (the 8 default actions x 12 frames, 5 candidates a slot: 2 neighbours either
side, 1 take; procedural generator, classical matting, 128 px frames to keep it quick) runs on a throwaway dev server
with both real workers in this process; its start frames are approved through the client, as a reviewer would, and
it stops at the final review. The review app serves it on a real port (uvicorn, loopback, no token) and headless
Chromium opens ``/sets/<id>`` with a fresh cache at 1280 x 800 (a laptop) and at 390 x 844 (a phone: mobile, touch),
without scrolling. Per width:

- **HTML**: bytes of the page's document;
- **images**: images fetched for the first view (distinct image URLs, after load and network idle), and their bytes;
- **height** / **width**: the page's scroll height and width (a width over the viewport's scrolls sideways);
- **FP** / **FCP** / **DCL** / **load**: first paint, first contentful paint, DOMContentLoaded and load, in ms from
  the navigation's start (the browser's own Performance API).

It only loads the page and measures, so it runs against any version of the review app. ``--screenshots DIR`` saves
the first screen at both widths (``review-final.png``, ``review-phone.png``); ``--failed-set`` also runs a set that
fails (an unknown matting pipeline) and saves its page (``review-failed.png``).

    python -m benchmarks.review_page [--actions 8] [--frames 12] [--neighbours 2] [--takes 1] [--image-size 128]
        [--screenshots docs] [--failed-set]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from temporalio.client import WorkflowExecutionStatus

from benchmarks.arguments import at_least
from core.settings import ArtifactSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from starter.client import EmojiSetClient, MessageRejected
from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.browser import CHROMIUM_ARGS, chromium_executable
from testkit.servers import start_throwaway_server
from testkit.stack import Stack, StackSettings, run_stack, wait_for_phase
from testkit.web import served
from workflows.contract import EmojiSetInput, Phase, TemporalMode
from workflows.presets import DEFAULT_ACTIONS

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Request

SET_TIMEOUT_S = 900.0
"""How long a set may take to reach its final review (480 candidates: about 20 s on two idle cores)."""
PAGE_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class Viewport:
    """A browser window: its size, and whether it is a phone's (mobile layout rules, touch)."""

    name: str
    width: int
    height: int
    phone: bool = False


LAPTOP = Viewport("laptop", 1280, 800)
PHONE = Viewport("phone", 390, 844, phone=True)
FAILED = Viewport("laptop, a failed set", 1280, 800)


@dataclass(frozen=True)
class Config:
    """The set whose page is measured."""

    actions: int = len(DEFAULT_ACTIONS)
    """The first this many of the default actions."""
    frames: int = 12
    neighbours: int = 2
    takes: int = 1
    image_size: int = 128

    def set_input(self, **fields: Any) -> EmojiSetInput:
        """The set's input (start frames and final review by a person); ``fields`` override any of it."""
        request: dict[str, Any] = {
            "character_prompt": "a round orange cat with a blue scarf",
            "actions": list(DEFAULT_ACTIONS[: self.actions]),
            "frames_per_emoji": self.frames,
            "neighbours": self.neighbours,
            "takes_per_action": self.takes,
            "image_size": self.image_size,
            "generator": "procedural",
            "matting_pipeline": "classical",
            "owner": "benchmark",
        }
        return EmojiSetInput(
            **(request | fields), temporal=TemporalMode.NONE
        )  # the emoji's stabilising is not what this measures

    def describe(self) -> str:
        candidates = self.actions * self.frames * self.takes * (2 * self.neighbours + 1)
        return (
            f"{self.actions} actions x {self.frames} frames, {2 * self.neighbours + 1} candidates a slot, "
            f"{self.takes} take(s): up to {candidates} candidates, {self.image_size} px"
        )


@dataclass(frozen=True)
class PageFigures:
    """What one page view loaded and how long it took to show (times in ms from the navigation's start)."""

    viewport: Viewport
    html_bytes: int
    images: int
    image_bytes: int
    page_height: int
    page_width: int
    first_paint_ms: float | None
    first_contentful_paint_ms: float | None
    dom_content_loaded_ms: float
    load_ms: float


_TIMINGS = """() => {
  const paint = Object.fromEntries(performance.getEntriesByType('paint').map(e => [e.name, e.startTime]));
  const nav = performance.getEntriesByType('navigation')[0];
  return {
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    fp: paint['first-paint'] ?? null,
    fcp: paint['first-contentful-paint'] ?? null,
    dcl: nav.domContentLoadedEventEnd,
    load: nav.loadEventEnd,
  };
}"""


async def measure_page(page: Page, url: str, viewport: Viewport, *, screenshot: Path | None = None) -> PageFigures:
    """Open ``url`` in ``page`` and measure its first view, without scrolling.

    Args:
        page: A page of a fresh browser context (its cache empty), already at ``viewport``'s size.
        url: The page to measure.
        viewport: The window ``page`` has (for the figures' label).
        screenshot: Save the first screen (the viewport, not the whole page) here.
    """
    images: dict[str, int] = {}

    async def finished(request: Request) -> None:
        if request.resource_type == "image":
            images[request.url] = (await request.sizes())["responseBodySize"]

    page.on("requestfinished", finished)
    response = await page.goto(url, wait_until="load")
    if response is None or not response.ok:
        raise RuntimeError(f"{url} answered {None if response is None else response.status}")
    html = await response.body()
    await page.wait_for_load_state("networkidle")
    timings = await page.evaluate(_TIMINGS)
    page.remove_listener("requestfinished", finished)
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=screenshot)
    return PageFigures(
        viewport=viewport,
        html_bytes=len(html),
        images=len(images),
        image_bytes=sum(images.values()),
        page_height=int(timings["height"]),
        page_width=int(timings["width"]),
        first_paint_ms=timings["fp"],
        first_contentful_paint_ms=timings["fcp"],
        dom_content_loaded_ms=float(timings["dcl"]),
        load_ms=float(timings["load"]),
    )


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Debian's headless Chromium (see :mod:`testkit.browser`)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(chromium_executable()), headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield browser
        finally:
            await browser.close()


async def view(browser: Browser, url: str, viewport: Viewport, *, screenshot: Path | None = None) -> PageFigures:
    """:func:`measure_page` in a fresh context (an empty cache) of ``viewport``'s size."""
    context = await browser.new_context(
        viewport={"width": viewport.width, "height": viewport.height},
        is_mobile=viewport.phone,
        has_touch=viewport.phone,
    )
    try:
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        return await measure_page(await context.new_page(), url, viewport, screenshot=screenshot)
    finally:
        await context.close()


async def until_final_review(sets: EmojiSetClient, set_id: str, *, timeout: float = SET_TIMEOUT_S) -> None:
    """Approve the set's start frames as they come, until it awaits its final review."""
    async with asyncio.timeout(timeout):
        while True:
            state = await wait_for_phase(
                sets, set_id, Phase.AWAITING_START_FRAME_REVIEW, Phase.AWAITING_REVIEW, timeout=timeout
            )
            if state.phase is Phase.AWAITING_REVIEW:
                return
            with contextlib.suppress(MessageRejected):  # approved since the state was read
                await sets.approve_start_frames(set_id, reviewer="benchmark")


async def until_failed(sets: EmojiSetClient, set_id: str, *, timeout: float = SET_TIMEOUT_S) -> None:
    """Approve the set's start frames as they come, until its workflow has failed."""
    async with asyncio.timeout(timeout):
        while await sets.describe_status(set_id) is not WorkflowExecutionStatus.FAILED:
            with contextlib.suppress(MessageRejected):
                if (await sets.state(set_id)).phase is Phase.AWAITING_START_FRAME_REVIEW:
                    await sets.approve_start_frames(set_id, reviewer="benchmark")
            await asyncio.sleep(0.2)


def review_app(stack: Stack) -> FastAPI:
    return create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")


def table(figures: list[PageFigures]) -> str:
    """The figures as a markdown table, one row per viewport."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    lines = [
        "| viewport | HTML bytes | images (first view) | image bytes | page height | page width | FP ms | FCP ms "
        "| DCL ms | load ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for f in figures:
        lines.append(
            f"| {f.viewport.width} x {f.viewport.height} ({f.viewport.name}) | {f.html_bytes:,} | {f.images} "
            f"| {f.image_bytes:,} | {f.page_height:,} | {f.page_width:,} | {ms(f.first_paint_ms)} "
            f"| {ms(f.first_contentful_paint_ms)} | {ms(f.dom_content_loaded_ms)} | {ms(f.load_ms)} |"
        )
    return "\n".join(lines)


async def measure_sets(
    stack: Stack, config: Config, screenshots: Path | None, failed_set: bool, started: float
) -> list[PageFigures]:
    """Run the set (and the failed one) to its page, then measure the page at both widths (and the failed one's)."""
    set_id = f"review-page-{uuid.uuid4().hex[:8]}"
    await stack.sets.start(config.set_input(), set_id=set_id)
    await until_final_review(stack.sets, set_id)
    print(f"set {set_id}: {config.describe()}; at its final review after {time.perf_counter() - started:.0f} s")
    pages = [(set_id, LAPTOP, "review-final.png"), (set_id, PHONE, "review-phone.png")]
    if failed_set:
        failed_id = f"review-page-failed-{uuid.uuid4().hex[:8]}"
        await stack.sets.start(config.set_input(matting_pipeline="nonsense-pipeline"), set_id=failed_id)
        await until_failed(stack.sets, failed_id)
        pages.append((failed_id, FAILED, "review-failed.png"))
    async with served(review_app(stack)) as url, chromium() as browser:
        return [
            await view(
                browser, f"{url}/sets/{page}", viewport, screenshot=None if screenshots is None else screenshots / name
            )
            for page, viewport, name in pages
        ]


async def main(config: Config, screenshots: Path | None, failed_set: bool) -> None:
    started = time.perf_counter()
    env = await start_throwaway_server()
    try:
        with tempfile.TemporaryDirectory() as root:
            settings = StackSettings(
                artifacts=ArtifactSettings(
                    _env_file=None, data_dir=Path(root) / "data", artifact_root=(Path(root) / "artifacts").as_uri()
                ),
                gpu=GpuWorkerSettings(_env_file=None, gpu_concurrency=4),
            )
            async for stack in run_stack(env, settings):
                figures = await measure_sets(stack, config, screenshots, failed_set, started)
    finally:
        await env.shutdown()
    print(table(figures))
    print(f"run: {time.perf_counter() - started:.0f} s")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=at_least(1), default=len(DEFAULT_ACTIONS), help="the first N default actions")
    parser.add_argument("--frames", type=at_least(2), default=12, help="frames per emoji")
    parser.add_argument("--neighbours", type=at_least(0), default=2, help="clip frames either side of each pick")
    parser.add_argument("--takes", type=at_least(1), default=1, help="clips per action")
    parser.add_argument("--image-size", type=at_least(64), default=128, help="frame edge, px")
    parser.add_argument("--screenshots", type=Path, help="save review-final.png and review-phone.png here")
    parser.add_argument("--failed-set", action="store_true", help="also a failed set's page (review-failed.png)")
    args = parser.parse_args()
    if args.failed_set:  # the failed set's activity failure is expected: no traceback from the worker
        logging.getLogger("temporalio.activity").setLevel(logging.CRITICAL)
    config = Config(args.actions, args.frames, args.neighbours, args.takes, args.image_size)
    asyncio.run(main(config, args.screenshots, args.failed_set))


if __name__ == "__main__":
    cli()
