"""A set's page as a reviewer sees it in headless Chromium, at 1280 px and on a 390 px phone, on the real stack:
every state plain at the top (failed, cancelled, waiting until when, approved while work goes on, completed), the
final review folded into an index and per-emoji frames, candidates in clip order and swapped into the preview, live
updates that keep what is typed, refusals beside their control in plain words, notes on picks that moved, and no
sideways scroll. Each test names the finding of issue 20 it checks."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from playwright.async_api import Page, Route, expect
from temporalio.client import WorkflowExecutionStatus

from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.browser import BrowserSession
from testkit.generator_standins import SlowRegenerations
from testkit.stack import Stack, wait_for_phase
from testkit.web import served
from tests.starter.review.test_review_app import SMALL
from workflows.contract import (
    EmojiSetInput,
    Phase,
    PickCandidateInput,
    RegenerateActionInput,
    ReviewPolicy,
    StagePolicy,
)

pytestmark = pytest.mark.browser

WIDTHS = {"laptop": (1280, 800), "phone": (390, 844)}
MINUTE_MS = 60_000


@pytest.fixture(params=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def on_page(stack: Stack, browser: BrowserSession, width: str, set_id: str) -> AsyncIterator[Page]:
    """The set's page in the browser at ``width``, served by a real server; its scripts must raise nothing."""
    app = create_app(stack.sets, stack.store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")
    page = browser.page
    await page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))  # type: ignore[arg-type]
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    async with served(app) as url:
        await page.goto(f"{url}/sets/{set_id}")
        yield page
    assert not errors, f"the page's scripts failed: {errors}"


async def no_sideways_scroll(page: Page) -> None:
    """Nothing on the page is wider than the window (at 390 px, a phone)."""
    overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"


async def in_view(page: Page, testid: str) -> None:
    """The element is visible within the window as it stands (no scrolling needed)."""
    box = await page.get_by_test_id(testid).bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    assert box["y"] >= 0 and box["y"] + min(box["height"], 40) <= size["height"], (testid, box)


def new_id(kind: str) -> str:
    return f"page-{kind}-{uuid.uuid4().hex[:8]}"


async def start(stack: Stack, set_id: str, **fields: Any) -> None:
    await stack.sets.start(
        EmojiSetInput(**{"character_prompt": "a round orange cat", **SMALL, **fields}), set_id=set_id
    )


async def test_finding_1_a_failed_set_says_why_on_its_page_and_in_the_list(
    stack: Stack, browser: BrowserSession, width: str
) -> None:
    set_id = new_id("failed")
    await start(stack, set_id, matting_pipeline="nonsense-pipeline")
    while await stack.sets.describe_status(set_id) is WorkflowExecutionStatus.RUNNING:
        await browser.page.wait_for_timeout(100)
    sent = asyncio.Event()

    async def slowly(route: Route) -> None:  # the script's first look at the set comes after the tag below
        await asyncio.sleep(1)
        await route.continue_()
        sent.set()

    await browser.page.route("**/fragment*", slowly)
    async with on_page(stack, browser, width, set_id) as page:
        await page.evaluate("document.querySelector('[data-part=summary]').dataset.kept = 'yes'")
        await sent.wait()
        async with page.expect_response(lambda response: "/state.json" in response.url):
            pass  # the script polls once it has taken the fragment in
        kept = await page.evaluate("document.querySelector('[data-part=summary]').dataset.kept")
        assert kept == "yes", "a part the server rendered is not replaced by the same part"
        status = page.get_by_test_id("set-status")
        await expect(status).to_have_attribute("data-kind", "failed")
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text("Failed while")
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text("nonsense-pipeline")
        await in_view(page, "set-status-headline")
        await expect(page.get_by_test_id("set-phase")).to_have_text("failed")
        await expect(page.get_by_text("drawing…")).to_have_count(0)
        await expect(page.get_by_test_id("set-live")).to_have_text("")
        await expect(page.get_by_test_id("approve-submit")).to_have_count(0)
        await no_sideways_scroll(page)
        await browser.shot(f"failed set at {width}")
        await page.goto(page.url.replace(f"/sets/{set_id}", "/sets"))
        await expect(page.get_by_test_id(f"set-status-{set_id}")).to_have_text("failed")
        await expect(page.get_by_test_id(f"set-awaiting-{set_id}")).to_have_text("")


async def test_finding_2_a_cancelled_set_says_by_whom_and_waits_for_nothing(
    stack: Stack, browser: BrowserSession, width: str
) -> None:
    set_id = new_id("cancelled")
    await start(stack, set_id, actions=["wave", "heart"], review=ReviewPolicy())
    while len((await stack.sets.state(set_id)).awaiting()) == 0 or not all(
        a.start_frames for a in (await stack.sets.state(set_id)).actions
    ):
        await browser.page.wait_for_timeout(100)
    async with on_page(stack, browser, width, set_id) as page:
        await expect(page.get_by_test_id("set-status")).to_have_attribute("data-kind", "waiting")
        # 10. The name typed once signs every message: here a start frame's approval.
        await page.get_by_test_id("reviewer-name").fill("bo")
        await page.get_by_test_id("reviewer-save").click()
        await expect(page.get_by_test_id("reviewer-note")).to_contain_text("Kept")
        await page.get_by_test_id("start-approve-wave").click()
        await expect(page.get_by_test_id("start-frames-wave")).to_contain_text("approved by bo", timeout=MINUTE_MS)
        await page.reload()
        await expect(page.get_by_test_id("reviewer-name")).to_have_value("bo")
        await page.get_by_test_id("cancel-submit").click()  # one click, nothing ticked: the browser asks first
        await page.wait_for_timeout(500)
        assert (await stack.sets.state(set_id)).phase is Phase.AWAITING_START_FRAME_REVIEW, "one click cancels nothing"
        await page.get_by_test_id("cancel-reason").fill("wrong character")
        await page.get_by_test_id("cancel-confirm").check()
        await page.get_by_test_id("cancel-submit").click()
        await expect(page.get_by_test_id("set-status")).to_have_attribute("data-kind", "cancelled", timeout=MINUTE_MS)
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text(
            re.compile(r"Cancelled by bo at \d{4}-\d\d-\d\d \d\d:\d\d UTC: wrong character")
        )
        await expect(page.get_by_test_id("set-status-detail-0")).to_have_text("Nothing waits.")
        await expect(page.get_by_test_id("start-approve-all")).to_have_count(0)
        await no_sideways_scroll(page)
        await browser.shot(f"cancelled set at {width}")
        listed = page.url.replace(f"/sets/{set_id}", "/sets")
        await page.goto(f"{listed}?awaiting=start_frame_review")
        await expect(page.get_by_test_id(f"set-row-{set_id}")).to_have_count(0)
        await page.goto(listed)
        await expect(page.get_by_test_id(f"set-status-{set_id}")).to_have_text("cancelled")
    summaries = await stack.sets.list_sets(awaiting="start_frame_review", limit=200)
    assert set_id not in [s.set_id for s in summaries]
    [mine] = [s for s in await stack.sets.list_sets(limit=200) if s.set_id == set_id]
    assert mine.awaiting == [] and mine.outcome == "cancelled"


async def test_findings_3_to_10_the_final_review_page(stack: Stack, browser: BrowserSession, width: str) -> None:
    set_id = new_id("review")
    await start(
        stack,
        set_id,
        actions=["wave", "heart"],
        frames_per_emoji=6,
        neighbours=2,
        review=ReviewPolicy(start_frames=StagePolicy.AUTO),
        generator=SlowRegenerations.name,  # heart's new takes take ten minutes: an approval waits for them
    )
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW, timeout=120)
    async with on_page(stack, browser, width, set_id) as page:
        # 7. The wait, until when, and what happens then; the review policy.
        await expect(page.get_by_test_id("set-status")).to_have_attribute("data-kind", "waiting")
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text("to check the picks and approve")
        await expect(page.get_by_test_id("set-status-detail-0")).to_contain_text(
            re.compile(r"Until .* UTC \(in 23 h \d+ min\); then it goes on by itself with the automatic picks")
        )
        await expect(page.get_by_test_id("review-policy")).to_contain_text("final a person")
        await in_view(page, "set-status-detail-0")

        # 8. The start frames are folded, every emoji is in the index, frames load when opened.
        await expect(page.get_by_test_id("start-frames-details")).not_to_have_attribute("open", "")
        await expect(page.get_by_test_id("start-tile-wave-0")).not_to_be_visible()
        for name in ("wave", "heart"):
            await expect(page.get_by_test_id(f"index-link-{name}")).to_be_visible()
        await expect(page.get_by_test_id("candidate-wave-0-0")).to_have_count(0)
        await page.get_by_test_id("index-link-heart").click()
        await expect(page).to_have_url(re.compile("#emoji-heart$"))
        await page.get_by_test_id("strip-frame-wave-3").click()
        slot = page.get_by_test_id("slot-wave-3")
        await expect(slot).to_be_visible()
        await expect(slot).to_be_in_viewport()

        # 9. Candidates in clip order, and swapped into the preview before picking.
        captions = await slot.locator(".caption").all_inner_texts()
        places = [caption.split("·")[0].strip() for caption in captions]
        assert places[:5] == ["t0 -2", "t0 -1", "t0", "t0 +1", "t0 +2"], places
        preview = page.get_by_test_id("preview-wave")
        await page.get_by_test_id("player-toggle-wave").click()  # pause, then step to frame 3
        while await preview.get_attribute("data-frame") != "3":
            await page.get_by_test_id("player-next-wave").click()
        frame = state.actions[0].frames[3]
        # The earliest clip frame: picked by hand, frame 2's pick (later in the clip) can no longer come before it.
        other = min(frame.usable(), key=lambda c: (c.take or 0, c.offset))
        assert other.index != frame.pick
        candidate = page.get_by_test_id(f"candidate-wave-3-{other.index}")
        await candidate.hover()
        await expect(preview).to_have_attribute("src", await candidate.get_attribute("data-image") or "")
        await expect(page.get_by_test_id("player-swap-wave")).to_contain_text(f"candidate {other.index}")
        await browser.shot(f"final review, candidate compared, at {width}")

        # 6. A hand pick says which automatic picks it moved; the page updates in place.
        before = page.url
        await candidate.click()
        await expect(candidate).to_have_class(re.compile(r"\bpicked\b"))
        assert page.url == before, "picked in place, no reload"
        after = (await stack.sets.state(set_id)).actions[0]
        moved = [f.index for f, was in zip(after.frames, state.actions[0].frames, strict=True) if f.pick != was.pick]
        assert set(moved) - {3}, "the pick moves other frames' automatic picks"
        await expect(page.get_by_test_id("note").last).to_contain_text("moved the automatic picks of wave frames")

        # 3 and 10. A refused frame edit: the plain refusal beside the control, the typed text kept, no reload.
        prompt = page.get_by_test_id("frame-regenerate-prompt-wave-3")
        too_long = "a wide smile " * 80
        await prompt.fill(too_long)
        await page.get_by_test_id("frame-regenerate-submit-wave-3").click()
        error = page.get_by_test_id("error-slot-wave-3")
        await expect(error).to_contain_text("Frame prompt")
        await expect(error).not_to_contain_text("String should")
        await expect(error).to_be_in_viewport()
        await expect(prompt).to_have_value(too_long)
        assert page.url == before
        await prompt.fill("eyes closed")  # sent again, taken: the refusal and the text go
        await page.get_by_test_id("frame-regenerate-submit-wave-3").click()
        await expect(error).to_have_text("")
        await expect(prompt).to_have_value("")

        # 4. Live updates keep what is typed: type a motion prompt, let the set change underneath.
        await page.evaluate("document.querySelector('[data-part=start-frames]').dataset.kept = 'yes'")
        motion = page.get_by_test_id("action-regenerate-prompt-heart")
        await motion.click()
        await motion.type("bounces")
        await stack.sets.pick(PickCandidateInput(emoji="heart", frame=0, candidate=1), set_id=set_id)
        await expect(page.get_by_test_id("strip-frame-heart-0")).to_have_class(re.compile(r"\bhand\b"))
        await expect(motion).to_have_value("bounces")
        await expect(motion).to_be_focused()
        kept = await page.evaluate("document.querySelector('[data-part=start-frames]').dataset.kept")
        assert kept == "yes", "only the parts that changed are replaced"
        await motion.fill("")

        # 5. Approving while a new take animates says so, and what it waits for.
        await stack.sets.regenerate_action(
            RegenerateActionInput(emoji="heart", motion_prompt="bounces twice"), set_id=set_id
        )
        await page.get_by_test_id("reviewer-name").fill("ana")
        await page.get_by_test_id("approve-submit").click()
        await expect(page.get_by_test_id("set-status")).to_have_attribute("data-kind", "approved")
        await expect(page.get_by_test_id("set-status-headline")).to_contain_text("Approved by ana")
        await expect(page.get_by_test_id("set-status-detail-0")).to_contain_text("heart take 1")
        await expect(page.get_by_test_id("approval-pending")).to_be_visible()
        await expect(page.get_by_test_id("approve-submit")).to_have_count(0)
        await no_sideways_scroll(page)
        await browser.shot(f"approved while a take animates, at {width}")
    await stack.sets.cancel(set_id)
    cancelled = await wait_for_phase(stack.sets, set_id, Phase.CANCELLED)
    assert cancelled.approval_pending_by is None, "a cancelled set waits for no assembly"
