"""The start form, its errors and the refine page as a person sees them in headless Chromium, on a desktop (1280 px)
and on a phone (390 px): errors on the first screen with links to their fields, typed values kept, a reload that
posts nothing, plain words, an uploaded picture's review turned off, the deadline's choice reaching the set, no page
wider than the screen, and refine points added by touch."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from fastapi import FastAPI
from playwright.async_api import Page, Position, Request, async_playwright, expect

from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit import browser as browsers
from testkit.browser import BrowserSession, Screenshots
from testkit.stack import Stack, wait_for_phase
from testkit.web import served
from tests.starter.review.test_review_app import start_set
from tests.starter.review.test_review_browser import character_png, opaque_point
from workflows.contract import DeadlinePolicy, EmojiSetState, ExportTarget, Phase, ReviewPolicy, StagePolicy

pytestmark = pytest.mark.browser

WIDTHS = {"desktop": 1280, "phone": 390}
HEIGHT = 800
CODE_WORDS = ("String should", "List should", "Input should", "character_prompt", "character_image", "^[a-z")


@pytest.fixture(params=list(WIDTHS.values()), ids=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> int:
    """The screen's width: a desktop's and a phone's."""
    width: int = request.param
    return width


@pytest.fixture
def app(stack: Stack) -> FastAPI:
    return create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")


@pytest.fixture
async def page(browser: BrowserSession, width: int) -> Page:
    """The browser's page at ``width``."""
    await browser.page.set_viewport_size({"width": width, "height": HEIGHT})
    return browser.page


@pytest.fixture(scope="module")
async def refine_path(stack: Stack) -> AsyncIterator[tuple[str, tuple[int, int]]]:
    """The refine page of a tiny set's first frame (its pick), and an opaque pixel of its cut-out; cancelled after."""
    set_id = f"test-form-browser-{uuid.uuid4().hex[:8]}"
    small = {"frames_per_emoji": 2, "neighbours": 0, "image_size": 64, "clip_fps": 8, "character_candidates": 1}
    review = ReviewPolicy(start_frames=StagePolicy.AUTO)
    await start_set(stack, set_id, review=review, export_targets=[ExportTarget.GENERIC], **small)
    state: EmojiSetState = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    pick = state.actions[0].frames[0].picked()
    assert pick is not None and pick.matte is not None
    yield f"/sets/{set_id}/refine/wave/0/{pick.index}", opaque_point(stack.store.get(pick.matte))
    await stack.sets.cancel(set_id)


async def page_width(page: Page) -> int:
    """How wide the page is laid out: more than the screen, and it scrolls sideways."""
    scroll: int = await page.evaluate("document.documentElement.scrollWidth")
    return scroll


async def test_a_refused_form_shows_its_errors_on_the_first_screen_and_a_reload_posts_nothing(
    app: FastAPI, browser: BrowserSession, page: Page, width: int
) -> None:
    async with served(app) as url:
        await page.goto(f"{url}/new")
        await page.get_by_test_id("field-character_prompt").fill("a round orange cat")
        await page.locator("details > summary").click()
        await page.get_by_test_id("field-image_size").fill("99999")
        await page.get_by_test_id("field-clip_fps").fill("0")
        for target in await page.locator("input[name=export_targets]").all():
            await target.uncheck()
        await page.get_by_test_id("start-submit").click()

        await page.wait_for_url(re.compile(r"/new\?flash=[\w-]+$"))
        summary = page.get_by_test_id("error-summary")
        await expect(summary).to_be_in_viewport(ratio=1)
        await expect(summary).to_have_attribute("role", "alert")
        for text, field in (
            ("Frame size (px): at most 1,024 (not 99,999)", "image_size"),
            ("Clip fps: at least 8 (not 0)", "clip_fps"),
            ("Export targets: choose at least one platform", "export_targets"),
        ):
            await expect(summary.get_by_role("link", name=text)).to_have_attribute("href", f"#field-{field}")
        await expect(page.get_by_test_id("advanced")).to_have_attribute("open", "")
        await expect(page.get_by_test_id("error-image_size")).to_be_visible()
        await expect(page.get_by_test_id("error-clip_fps")).to_have_text("at least 8 (not 0)")
        await expect(page.get_by_test_id("field-character_prompt")).to_have_value("a round orange cat")
        await expect(page.get_by_test_id("field-image_size")).to_have_value("99999")
        await browser.shot(f"errors at {width}")

        await summary.get_by_role("link", name=re.compile("^Clip fps")).click()
        await expect(page.get_by_test_id("field-clip_fps")).to_be_in_viewport()
        posts: list[Request] = []
        page.on("request", lambda request: posts.append(request) if request.method == "POST" else None)
        await page.reload()
        await expect(summary).to_be_visible()
        await expect(page.get_by_test_id("field-image_size")).to_have_value("99999")
        assert posts == [], "a reload sends nothing again"


async def test_the_forms_messages_name_their_field_in_plain_words(app: FastAPI, page: Page) -> None:
    async with served(app) as url:
        await page.goto(f"{url}/new")
        await page.get_by_test_id("custom-name-0").fill("Bad Name!")
        await page.get_by_test_id("custom-pose-0").fill("dancing")
        await page.get_by_test_id("custom-motion-0").fill("spins around")
        await page.get_by_test_id("add-custom").click()
        await expect(page.locator("#field-custom-1")).to_have_attribute("data-testid", "custom-name-1")
        for target in await page.locator("input[name=export_targets]").all():
            await target.uncheck()
        await page.get_by_test_id("start-submit").click()

        await page.wait_for_url(re.compile(r"/new\?flash="))
        items = await page.get_by_test_id("error-summary").locator("li").all_inner_texts()
        assert sorted(item.split(": ")[0] + ": " for item in items) == sorted(
            ("Custom action 1: ", "Character prompt: ", "Export targets: ")
        ), items
        await expect(page.get_by_test_id("error-custom-0")).to_have_text(
            "Name: use lower-case letters, digits and hyphens, starting with a letter or digit, at most 40 characters"
        )
        await expect(page.get_by_test_id("error-character_prompt")).to_be_visible()
        shown = await page.locator("main").inner_text()
        assert not [word for word in CODE_WORDS if word in shown], shown


async def test_choosing_a_picture_turns_the_characters_review_off_and_says_why(app: FastAPI, page: Page) -> None:
    async with served(app) as url:
        await page.goto(f"{url}/new")
        review = page.get_by_test_id("field-review_character")
        note = page.get_by_test_id("character-review-note")
        await review.select_option("human")
        await expect(note).to_be_hidden()

        await page.get_by_test_id("field-character_file").set_input_files(
            {"name": "cat.png", "mimeType": "image/png", "buffer": character_png()}
        )
        await expect(review).to_be_disabled()
        await expect(review).to_have_value("auto")
        await expect(note).to_be_visible()
        await expect(note).to_have_text("An uploaded picture is the character as it is: there is nothing to review.")

        await page.get_by_test_id("field-character_file").set_input_files([])
        await expect(review).to_be_enabled()
        await expect(review).to_have_value("human")
        await expect(note).to_be_hidden()


async def test_what_a_passed_deadline_does_is_chosen_on_the_form_and_reaches_the_set(
    stack: Stack, app: FastAPI, page: Page
) -> None:
    async with served(app) as url:
        await page.goto(f"{url}/new")
        choice = page.get_by_test_id("field-review_on_deadline")
        await expect(choice.locator("option")).to_have_text(["go on with the automatic picks", "end the set (expired)"])
        await expect(page.get_by_test_id("deadline-note")).to_be_visible()
        await page.get_by_test_id("field-character_prompt").fill("a round orange cat")
        for action in ("laugh", "heart", "thumbs-up", "cry", "angry", "sleep", "surprised"):
            await page.get_by_test_id(f"action-remove-{action}").click()
        for name, value in {"frames_per_emoji": "2", "neighbours": "0", "deadline_hours": "2"}.items():
            await page.get_by_test_id(f"field-{name}").fill(value)
        await page.get_by_test_id("target-line-emoji").uncheck()
        await choice.select_option(label="end the set (expired)")
        await page.locator("details > summary").click()
        await page.get_by_test_id("field-image_size").fill("64")
        await page.get_by_test_id("start-submit").click()

        await page.wait_for_url(re.compile(r"/sets/[^/?#]+$"))
        set_id = page.url.rsplit("/", 1)[-1]
        await page.goto("about:blank")
        state = await stack.sets.state(set_id)
        await stack.sets.cancel(set_id)
    assert state.input.review.on_deadline is DeadlinePolicy.EXPIRE
    assert state.input.review.deadline == timedelta(hours=2)


async def test_no_page_scrolls_sideways(
    app: FastAPI, browser: BrowserSession, page: Page, width: int, refine_path: tuple[str, tuple[int, int]]
) -> None:
    unbroken = "emojiset" + uuid.uuid4().hex * 4  # no hyphen to break the 404 page's message at
    pages = {"form": "/new", "set list": "/sets", "404": f"/sets/{unbroken}", "refine": refine_path[0]}
    async with served(app) as url:
        for name, path in pages.items():
            await page.goto(f"{url}{path}")
            await browser.shot(f"{name} at {width}", full_page=True)
            assert await page_width(page) <= width, name
        await expect(page.get_by_test_id("refine-canvas-matte")).to_be_in_viewport()
        await page.goto(f"{url}/new")
        await page.get_by_test_id("custom-name-0").fill("Bad Name!")
        await page.get_by_test_id("start-submit").click()
        await page.wait_for_url(re.compile(r"/new\?flash="))
        await expect(page.get_by_test_id("error-summary")).to_be_visible()
        assert await page_width(page) <= width, "the form with its errors"


@asynccontextmanager
async def touch_screen(name: str, width: int) -> AsyncIterator[BrowserSession]:
    """Headless Chromium as a touch screen ``width`` wide (a phone's, or a tablet's), its screenshots under ``name``."""
    if reason := browsers.missing():
        if os.environ.get(browsers.REQUIRE_ENV):
            pytest.fail(reason)
        pytest.skip(reason)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=str(browsers.chromium_executable()), args=list(browsers.CHROMIUM_ARGS), headless=True
        )
        try:
            context = await chromium.new_context(
                viewport={"width": width, "height": HEIGHT}, has_touch=True, is_mobile=True
            )
            context.set_default_timeout(browsers.DEFAULT_TIMEOUT_MS)
            page = await context.new_page()
            yield BrowserSession(context, page, Screenshots(browsers.screenshot_folder(name)))
        finally:
            await chromium.close()


async def test_refine_points_are_added_by_touch_and_an_undo_says_so(
    app: FastAPI, width: int, refine_path: tuple[str, tuple[int, int]], request: pytest.FixtureRequest
) -> None:
    path, (x, y) = refine_path
    async with served(app) as url, touch_screen(request.node.name, width) as touch:
        page = touch.page
        await page.goto(f"{url}{path}")
        refine = page.get_by_test_id("refine")
        await expect(refine).to_have_attribute("data-matte-shown", re.compile(r"/matte\?v="))
        canvas = page.get_by_test_id("refine-canvas-matte")
        box = await canvas.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, "the canvas fits the screen"
        assert box["width"] >= min(384, 0.9 * width), "and takes the screen's width on a phone"

        def at(px: int, py: int) -> Position:
            return {"x": (px + 0.5) * box["width"] / 64, "y": (py + 0.5) * box["height"] / 64}

        points = page.get_by_test_id("refine-points")
        await page.get_by_test_id("refine-point-remove").tap()
        await expect(page.get_by_test_id("refine-point-remove")).to_have_attribute("aria-pressed", "true")
        await expect(page.get_by_test_id("refine-point-keep")).to_have_attribute("aria-pressed", "false")
        await canvas.tap(position=at(1, 1))
        await expect(points).to_have_text("0 foreground, 1 background point(s)")
        await page.get_by_test_id("refine-point-keep").tap()
        await canvas.tap(position=at(x, y))
        await expect(points).to_have_text("1 foreground, 1 background point(s)")
        await touch.shot("points added by touch")

        status = page.get_by_test_id("refine-status")
        await page.get_by_test_id("refine-apply").tap()
        await expect(status).to_have_text("applied: now version 2")
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 2")
        await page.get_by_test_id("refine-undo").tap()
        await expect(status).to_have_text("undone: back to version 1")
        await expect(page.get_by_test_id("refine-version")).to_have_text("version 1")
        await expect(page.get_by_test_id("error-refine")).to_have_text("")
        await touch.shot("undone")
        assert await page_width(page) <= width
