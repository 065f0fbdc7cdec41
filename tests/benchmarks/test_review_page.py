"""The review page benchmark's measuring, on a tiny set awaiting its final review (a real server, headless Chromium)."""

from __future__ import annotations

from benchmarks.review_page import LAPTOP, Config, measure_page, review_app, table, until_final_review
from testkit.browser import BrowserSession
from testkit.stack import Stack
from testkit.web import served


async def test_the_page_of_a_tiny_set_is_measured(stack: Stack, browser: BrowserSession, set_id: str) -> None:
    config = Config(actions=1, frames=3, neighbours=1, image_size=64)
    await stack.sets.start(config.set_input(), set_id=set_id)
    await until_final_review(stack.sets, set_id, timeout=60)
    await browser.page.set_viewport_size({"width": LAPTOP.width, "height": LAPTOP.height})

    async with served(review_app(stack)) as url:
        figures = await measure_page(browser.page, f"{url}/sets/{set_id}", LAPTOP)
    await browser.shot("measured")

    assert figures.html_bytes > 1000 and figures.images >= 1 and figures.image_bytes > 0
    assert figures.page_width == LAPTOP.width and figures.page_height >= LAPTOP.height
    assert figures.first_contentful_paint_ms is not None and 0 < figures.dom_content_loaded_ms <= figures.load_ms
    assert table([figures]).splitlines()[2].startswith("| 1280 x 800 (laptop) |")
