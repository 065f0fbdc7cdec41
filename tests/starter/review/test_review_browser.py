"""The review app end to end in headless Chromium, served by a real uvicorn server on a free port, on the real stack
(dev server and both workers, the procedural generator, classical matting): start a set from the form with an
uploaded picture, review its start frames, follow the matting live, pick and regenerate frames, refine one with
clicks on the canvas, approve, and download the LINE emoji package.

LINE animated emoji need 8 to 40 emoji of 5 to 20 frames each, so the set is the form's 8 default actions at 5 frames
of 64 px (one take each, one neighbour frame per slot). Each step saves a screenshot in
``tests/.screenshots/<test name>/``.
"""

from __future__ import annotations

import io
import re
import time
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import numpy as np
import pytest
from PIL import Image, ImageDraw
from playwright.async_api import Page, Position, expect

from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.browser import BrowserSession
from testkit.stack import Stack
from testkit.web import served

pytestmark = pytest.mark.browser

MINUTE_MS = 60_000
FIELDS = {
    "frames_per_emoji": "5",
    "takes_per_action": "1",
    "neighbours": "1",
    "start_frame_candidates": "2",
    "matting_pipeline": "classical",
}
ADVANCED = {"image_size": "64", "clip_seconds": "1", "clip_fps": "8", "character_candidates": "1"}
DEFAULT_ACTIONS = ("wave", "laugh", "heart", "thumbs-up", "cry", "angry", "sleep", "surprised")


def character_png() -> bytes:
    """A drawn character on white: an orange round body with a dark outline, eyes and feet."""
    picture = Image.new("RGB", (240, 240), "white")
    draw = ImageDraw.Draw(picture)
    draw.ellipse((50, 40, 190, 190), fill=(250, 140, 40), outline=(40, 30, 30), width=5)
    for x in (95, 145):
        draw.ellipse((x - 10, 90, x + 10, 115), fill=(30, 30, 40))
    draw.arc((90, 120, 150, 160), 20, 160, fill=(40, 30, 30), width=4)
    for x in (80, 140):
        draw.ellipse((x, 180, x + 30, 205), fill=(60, 110, 220), outline=(40, 30, 30), width=3)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def opaque_point(png: bytes) -> tuple[int, int]:
    """The opaque pixel of a cut-out nearest the centre of its opaque area."""
    alpha = np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))[..., 3]
    ys, xs = np.nonzero(alpha > 250)
    assert len(xs), "the cut-out has no opaque pixel"
    nearest = int(np.argmin((ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2))
    return int(xs[nearest]), int(ys[nearest])


class Steps:
    """Timed, screenshotted steps."""

    def __init__(self, browser: BrowserSession) -> None:
        self.browser = browser
        self.started = time.monotonic()
        self.times: list[tuple[str, float]] = []
        self.last = self.started

    async def done(self, step: str, target: Any = None, **options: Any) -> Path:
        """The step's screenshot (of ``target``, or the viewport), once every image in it has loaded (lazy ones
        below the fold too: an element screenshot shows them, but scrolls to them only once)."""
        scope = target or self.browser.page.locator("body")
        await scope.evaluate(
            """async (root) => {
              const images = Array.from(root.tagName === "IMG" ? [root] : root.querySelectorAll("img"));
              images.forEach((img) => { img.loading = "eager"; });
              await Promise.all(images.map((img) => img.decode().catch(() => null)));
            }"""
        )
        broken = await scope.evaluate(
            """(root) => Array.from(root.tagName === "IMG" ? [root] : root.querySelectorAll("img"))
                .filter((img) => img.getAttribute("src") && !img.naturalWidth).map((img) => img.src)"""
        )
        assert not broken, f"{step}: images that did not load: {broken}"
        path = await self.browser.shot(step, target, **options)
        # After a screenshot of more than the viewport Chromium hit-tests the next mouseup against a stale layout
        # (a click on the start form's submit button lands on the form): a real scroll puts it right.
        await self.browser.page.evaluate("window.scrollTo(0, 0)")
        now = time.monotonic()
        self.times.append((step, now - self.last))
        self.last = now
        return path

    def report(self) -> str:
        rows = [f"{seconds:6.1f}s  {step}" for step, seconds in self.times]
        return "\n".join([*rows, f"{time.monotonic() - self.started:6.1f}s  in all"])


async def image_bytes(page: Page, url: str) -> bytes:
    """An image the page shows (``url`` relative to the page), as the browser gets it."""
    response = await page.request.get(urljoin(page.url, url))
    assert response.ok, (url, response.status)
    return await response.body()


async def test_a_set_is_started_reviewed_refined_approved_and_downloaded_in_the_browser(
    stack: Stack, browser: BrowserSession, tmp_path: Path
) -> None:
    app = create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")
    page, steps = browser.page, Steps(browser)
    async with served(app) as url:
        # 1. The start form, with an uploaded picture and a small set of the 8 default actions (LINE's minimum).
        await page.goto(f"{url}/new")
        await expect(page.get_by_test_id("start-form")).to_be_visible()
        for action in DEFAULT_ACTIONS:
            await expect(page.get_by_test_id(f"action-item-{action}")).to_be_visible()
        await page.get_by_test_id("field-character_file").set_input_files(
            {"name": "character.png", "mimeType": "image/png", "buffer": character_png()}
        )
        for name, value in FIELDS.items():
            await page.get_by_test_id(f"field-{name}").fill(value)
        await page.get_by_test_id("field-review_start_frames").select_option("human")
        await page.get_by_test_id("field-review_final").select_option("human")
        await expect(page.get_by_test_id("target-line-emoji")).to_be_checked()
        await page.locator("details > summary").click()
        for name, value in ADVANCED.items():
            await page.get_by_test_id(f"field-{name}").fill(value)
        await steps.done("start form, filled", page.get_by_test_id("start-form"))
        async with page.expect_response(lambda r: r.request.method == "POST", timeout=MINUTE_MS) as posted:
            await page.get_by_test_id("start-submit").click()
        if (await posted.value).status != 303:
            await page.wait_for_load_state()
            errors = [text.strip() for text in await page.locator(".error").all_inner_texts() if text.strip()]
            errors += await page.eval_on_selector_all(
                ":invalid", "els => els.map(el => `${el.name}=${el.value}: ${el.validationMessage}`)"
            )
            await steps.done("start form refused")
            pytest.fail(f"the form was refused: {errors}")
        await page.wait_for_url(re.compile(r"/sets/emoji-set-[^/]+$"))
        set_id = page.url.rsplit("/", 1)[-1]
        await expect(page.get_by_test_id("set-id")).to_have_text(set_id)

        # 2. Start frames: the tile grid fills in live; pick one, approve them all.
        for action in DEFAULT_ACTIONS:
            await expect(page.get_by_test_id(f"start-tile-{action}-1")).to_be_visible(timeout=2 * MINUTE_MS)
        await expect(page.get_by_test_id("start-approve-all")).to_contain_text("(8)", timeout=MINUTE_MS)
        await steps.done("start frame grid", page.locator("#start-frames"))
        await page.get_by_test_id("start-tile-wave-1").click()
        await expect(page.get_by_test_id("start-tile-wave-1")).to_have_class(re.compile(r"\bpicked\b"))
        await expect(page.get_by_test_id("start-tile-wave-1")).to_contain_text("picked")
        await steps.done("start frame picked", page.get_by_test_id("start-frames-wave"))
        await page.get_by_test_id("start-approve-all").click()
        await expect(page.get_by_test_id("start-approve-all")).to_have_count(0)

        # 3. Matting reaches the review: the page polls and swaps in each change.
        await expect(page.get_by_test_id("set-phase")).to_have_attribute(
            "data-phase", "awaiting_review", timeout=3 * MINUTE_MS
        )
        await expect(page.get_by_test_id("set-progress")).to_have_text("40/40 frames ready")
        await page.get_by_test_id("frames-wave").locator("summary").click()
        await expect(page.get_by_test_id("candidate-wave-1-1")).to_be_visible(timeout=MINUTE_MS)
        await steps.done("set review with candidates", page.get_by_test_id("emoji-wave"))

        # 4. The animated preview cycles through the picks (while it is on the screen).
        preview = page.get_by_test_id("preview-wave")
        await preview.scroll_into_view_if_needed()
        await expect(preview).to_have_attribute("data-frame", re.compile(r"^\d+$"))
        first = await preview.get_attribute("data-frame")
        await page.wait_for_function(
            "([el, first]) => el.dataset.frame !== first", arg=[await preview.element_handle(), first]
        )
        sources = set()
        for _ in range(3):
            sources.add(await preview.get_attribute("src"))
            now = await preview.get_attribute("data-frame")
            await page.wait_for_function(
                "([el, now]) => el.dataset.frame !== now", arg=[await preview.element_handle(), now]
            )
        assert len(sources) > 1, "the preview shows different frames"

        # 5. Pick a candidate by clicking it.
        slot = page.get_by_test_id("slot-wave-1")
        picked = slot.locator("button.tile.picked")
        await expect(picked).to_have_count(1)
        was = await picked.get_attribute("data-testid")
        other = slot.locator("button.tile:not(.picked)").first
        chosen = await other.get_attribute("data-testid")
        await other.click()
        await expect(page.get_by_test_id(chosen or "")).to_have_class(re.compile(r"\bpicked\b"))
        await expect(page.get_by_test_id(was or "")).not_to_have_class(re.compile(r"\bpicked\b"))
        await expect(slot).to_contain_text("(by hand)")
        await steps.done("candidate picked by hand", slot)

        # 6. Regenerate a frame with a custom prompt: new candidates appear and are cut out.
        frame2 = page.get_by_test_id("slot-wave-2")
        count = await frame2.locator("button.tile").count()
        await page.get_by_test_id("frame-regenerate-prompt-wave-2").fill("eyes closed, smiling")
        await page.get_by_test_id("frame-regenerate-submit-wave-2").click()
        new = page.get_by_test_id(f"candidate-wave-2-{count}")  # the edit's first candidate (an edit makes 2)
        await expect(new).to_be_visible(timeout=2 * MINUTE_MS)
        await expect(new).to_contain_text("edit")
        await expect(new).to_have_attribute("data-label", "edit: eyes closed, smiling")
        assert await frame2.locator("button.tile").count() > count
        await expect(page.get_by_test_id(f"refine-link-wave-2-{count}")).to_be_visible(timeout=2 * MINUTE_MS)
        await steps.done("frame regenerated with a custom prompt", frame2)

        # 7. Refine a frame: click on the cut-out, erase, see the matte change; restore; undo both.
        slot0 = page.get_by_test_id("slot-wave-0")
        pick0 = await slot0.locator("button.tile.picked").get_attribute("value")
        await page.get_by_test_id(f"refine-link-wave-0-{pick0}").click()
        await page.wait_for_url(re.compile(rf"/refine/wave/0/{pick0}$"))
        refine = page.get_by_test_id("refine")
        await expect(refine).to_have_attribute("data-matte-shown", re.compile(r"/matte\?v="))
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 1")
        await expect(page.get_by_test_id("refine-version-1")).to_be_visible()
        matte_url = await refine.get_attribute("data-matte-shown")
        assert matte_url is not None
        before = await image_bytes(page, matte_url)
        width = int(await refine.get_attribute("data-width") or 0)
        height = int(await refine.get_attribute("data-height") or 0)
        x, y = opaque_point(before)
        canvas = page.get_by_test_id("refine-canvas-matte")
        box = await canvas.bounding_box()
        assert box is not None and box["width"] > width, "the canvas is shown larger than the 64 px frame"

        def at(px: float, py: float) -> Position:
            return {"x": (px + 0.5) * box["width"] / width, "y": (py + 0.5) * box["height"] / height}

        await canvas.click(position=at(x, y))
        await canvas.click(position=at(2, 2), modifiers=["Shift"])  # a background point, in the corner
        await expect(page.get_by_test_id("refine-points")).to_have_text("1 foreground, 1 background point(s)")
        await page.mouse.move(1, 1)  # off the canvas: no crosshair over the points in the screenshot
        await steps.done("refine: points on the canvas, before erasing", refine)
        await page.get_by_test_id("refine-apply").click()
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 2", timeout=MINUTE_MS)
        await expect(page.get_by_test_id("error-refine")).to_have_text("")
        await expect(refine).not_to_have_attribute("data-matte-shown", matte_url)
        erased_url = await refine.get_attribute("data-matte-shown")
        assert erased_url is not None
        erased = await image_bytes(page, erased_url)
        assert erased != before
        alpha = np.asarray(Image.open(io.BytesIO(erased)).convert("RGBA"))[..., 3]
        assert alpha[y, x] == 0, "the clicked region is erased"
        await expect(page.get_by_test_id("refine-version-2")).to_be_visible()
        await expect(page.get_by_test_id("refine-points")).to_have_text("no points")
        await steps.done("refine: after erasing", refine)

        await page.get_by_test_id("refine-restore").click()
        await expect(page.get_by_test_id("refine-restore")).to_have_attribute("aria-pressed", "true")
        await canvas.click(position=at(x, y))
        await page.get_by_test_id("refine-apply").click()
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 3", timeout=MINUTE_MS)
        await expect(refine).not_to_have_attribute("data-matte-shown", erased_url)
        restored_url = await refine.get_attribute("data-matte-shown")
        assert restored_url is not None
        restored = np.asarray(Image.open(io.BytesIO(await image_bytes(page, restored_url))).convert("RGBA"))
        assert restored[y, x, 3] == 255, "the region is back"
        await steps.done("refine: after restoring", refine)

        await page.get_by_test_id("refine-undo").click()
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 2", timeout=MINUTE_MS)
        await expect(refine).to_have_attribute("data-matte-shown", erased_url)
        await expect(page.get_by_test_id("refine-version-3")).to_have_count(0)
        await page.get_by_test_id("refine-undo").click()
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 1", timeout=MINUTE_MS)
        await expect(refine).to_have_attribute("data-matte-shown", matte_url)
        assert await image_bytes(page, matte_url) == before
        await steps.done("refine: both undone, the first cut-out is back", refine)

        # 8. Approve, and download the LINE emoji package.
        await page.get_by_test_id("refine-back").click()
        await page.wait_for_url(re.compile(rf"/sets/{set_id}(\?open=wave)?#slot-wave-0$"))
        await expect(page.get_by_test_id("approve-submit")).to_be_visible()
        await page.get_by_test_id("reviewer-name").fill("ana")
        await page.get_by_test_id("approve-submit").click()
        await expect(page.get_by_test_id("downloads")).to_be_visible(timeout=3 * MINUTE_MS)
        await expect(page.get_by_test_id("set-phase")).to_have_attribute("data-phase", "completed")
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text("approved by ana")
        downloads_y = (await page.get_by_test_id("downloads").bounding_box() or {"y": 1e9})["y"]
        index_y = (await page.get_by_test_id("emoji-index").bounding_box() or {"y": 0.0})["y"]
        assert downloads_y < index_y, "a finished set shows its downloads first"
        await expect(page.get_by_test_id("package-error-line-emoji")).to_have_count(0)
        await steps.done("downloads", page.get_by_test_id("downloads"))
        async with page.expect_download() as event:
            await page.get_by_test_id("download-line-emoji").click()
        download = await event.value
        assert download.suggested_filename == f"{set_id}-line-emoji.zip"
        saved = tmp_path / download.suggested_filename
        await download.save_as(saved)
        with zipfile.ZipFile(saved) as archive:
            assert archive.testzip() is None
            names = sorted(archive.namelist())
            assert names == [*(f"{n:03d}.png" for n in range(1, 9)), "tab.png"], names
            first_emoji = archive.read("001.png")
        assert first_emoji.startswith(b"\x89PNG") and b"acTL" in first_emoji, "an animated PNG"
    print(steps.report())
