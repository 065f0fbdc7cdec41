"""What operators see in the dev server's own Web UI (2.54), in headless Chromium: a set's summary, static and current
details and search attributes on its page, and the sets list filtered by the README's saved-view queries, each query
also run for real through the client and the Temporal CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Locator, Page, expect

from starter.devstack import temporal_cli
from testkit.browser import BrowserSession
from testkit.generator_standins import RefusesStartFrame, standin_generators
from testkit.servers import start_throwaway_server
from testkit.stack import Stack, StackSettings, run_stack, wait_for_phase
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    ActionStage,
    EmojiSetInput,
    Phase,
    ReviewPolicy,
    StagePolicy,
)

pytestmark = pytest.mark.browser

README = Path(__file__).resolve().parents[2] / "README.md"
SMALL: dict[str, Any] = {
    "actions": ["wave", "heart"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
}
AUTO_START = ReviewPolicy(start_frames=StagePolicy.AUTO)

SAVED_VIEWS: dict[str, tuple[str, set[str]]] = {
    "sets waiting for a start-frame review": ('EmojiSetAwaiting = "start_frame_review"', {"start"}),
    "sets waiting for the final review": ('EmojiSetAwaiting = "final_review"', {"final", "prompt"}),
    "sets with an action or frame waiting for a custom prompt": ('EmojiSetAwaiting = "custom_prompt"', {"prompt"}),
    "failed sets": ('WorkflowType = "EmojiSet" AND ExecutionStatus = "Failed"', {"failed"}),
    "one owner's sets": ('EmojiSetOwner = "ana"', {"start", "final"}),
    "sets in a review phase": (
        'EmojiSetPhase IN ("awaiting_start_frame_review", "awaiting_review")',
        {"start", "final", "prompt"},
    ),
    "one owner's sets waiting for a person": (
        'EmojiSetOwner = "ana" AND ExecutionStatus = "Running" AND EmojiSetAwaiting IS NOT NULL',
        {"start", "final"},
    ),
}
"""The README's saved views ("Saved views in the Temporal Web UI"): query and which of the module's sets it finds."""


@dataclass
class UiStack:
    stack: Stack
    ui: str
    """The Web UI's namespace URL, ``http://127.0.0.1:PORT/namespaces/default``."""
    address: str
    ids: dict[str, str]
    """The module's sets by role: ``start``, ``final``, ``prompt``, ``failed``."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
async def ui_stack(settings: StackSettings) -> AsyncIterator[UiStack]:
    """A dev server with its Web UI, both workers, and four sets: one waiting for a start-frame review, one for the
    final review, one (owner bo) whose ``heart`` waits for a custom prompt, and one failed on a bad raw input."""
    ui_port = free_port()
    env = await start_throwaway_server(ui_port=ui_port)
    try:
        async for stack in run_stack(env, settings, generators=standin_generators()):
            run = uuid.uuid4().hex[:6]
            ids = {role: f"ui-{role}-{run}" for role in ("start", "final", "prompt", "failed")}
            sets = stack.sets
            await sets.start(
                EmojiSetInput(character_prompt="a round orange cat", owner="ana", review=ReviewPolicy(), **SMALL),
                set_id=ids["start"],
            )
            await sets.start(
                EmojiSetInput(character_prompt="a teal ghost", owner="ana", review=AUTO_START, **SMALL),
                set_id=ids["final"],
            )
            await sets.start(
                EmojiSetInput(
                    character_prompt="a green frog",
                    owner="bo",
                    generator=RefusesStartFrame.name,
                    review=AUTO_START,
                    **SMALL,
                ),
                set_id=ids["prompt"],
            )
            await stack.client.start_workflow(
                WORKFLOW_TYPE,
                {"character_prompt": "a robot", "actions": ["moonwalk"]},
                id=ids["failed"],
                task_queue=ORCHESTRATION_TASK_QUEUE,
                result_type=dict,
            )
            await wait_for_phase(sets, ids["start"], Phase.AWAITING_START_FRAME_REVIEW, timeout=120)
            await wait_for_phase(sets, ids["final"], Phase.AWAITING_REVIEW, timeout=120)
            await wait_for_phase(sets, ids["prompt"], Phase.AWAITING_REVIEW, timeout=120)
            async with asyncio.timeout(120):
                while not all(
                    a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in (await sets.state(ids["start"])).actions
                ):
                    await asyncio.sleep(0.2)
            yield UiStack(
                stack,
                f"http://127.0.0.1:{ui_port}/namespaces/{env.client.namespace}",
                env.client.service_client.config.target_host,
                ids,
            )
    finally:
        await env.shutdown()


async def ids_found(ui_stack: UiStack, query: str) -> set[str]:
    return {execution.id async for execution in ui_stack.stack.client.list_workflows(query)}


def cli_ids_found(ui_stack: UiStack, query: str) -> set[str]:
    listed = subprocess.run(
        [str(temporal_cli()), "workflow", "list", "--address", ui_stack.address, "--query", query, "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return {execution["execution"]["workflowId"] for execution in json.loads(listed.stdout or "[]")}


async def test_the_readme_saved_view_queries_find_the_right_sets(ui_stack: UiStack) -> None:
    readme = README.read_text()
    for view, (query, roles) in SAVED_VIEWS.items():
        assert f"`{query}`" in readme, f"the README's saved views lack {view}: {query}"
        expected = {ui_stack.ids[role] for role in roles}
        async with asyncio.timeout(30):  # visibility is eventually consistent
            while (found := await ids_found(ui_stack, query)) != expected:
                await asyncio.sleep(0.2)
        assert found == expected, view
        assert await asyncio.to_thread(cli_ids_found, ui_stack, query) == expected, f"temporal workflow list: {view}"


def metadata(page: Page, part: str) -> Locator:
    """The body of one of the User Metadata tab's panes (``summary``, ``details``, ``current-details``): the UI
    renders each piece of markdown in an iframe of its own."""
    return page.frame_locator(f"#user-metadata-{part}").locator("body")


async def open_tab(browser: BrowserSession, url: str, tab: str) -> None:
    page = browser.page
    await page.goto(url)
    await page.get_by_text(tab, exact=True).click()


async def test_a_sets_page_shows_its_summary_details_current_details_and_search_attributes(
    ui_stack: UiStack, browser: BrowserSession
) -> None:
    page, final = browser.page, ui_stack.ids["final"]
    main = page.locator("main")

    await open_tab(browser, f"{ui_stack.ui}/workflows/{final}", "User Metadata")
    await expect(page.get_by_role("heading", name=final)).to_be_visible()
    await expect(metadata(page, "summary")).to_have_text("Emoji set: a teal ghost")  # static_summary
    details = metadata(page, "details")  # static_details, markdown
    await expect(details).to_contain_text("Actions: wave, heart")
    await expect(details).to_contain_text("Owner: ana")
    await expect(details.locator("strong", has_text="Owner:")).to_be_visible()
    current = metadata(page, "current-details")  # workflow.set_current_details, the markdown of workflows/progress.py
    await expect(current).to_contain_text("awaiting review · frames ready")
    await expect(current.locator("table tr")).to_have_count(3)  # the header and a row per action
    await expect(current.locator("table tr").nth(1)).to_contain_text("wave")
    await expect(current).to_contain_text("Waiting for final_review until")
    await expect(current).to_contain_text("Matting: classical on cpu")
    await browser.shot("final review: summary, details, current details", main)

    await page.get_by_text("Search Attributes", exact=True).click()
    for text in (
        '"EmojiSetPhase": "awaiting_review"',
        '"EmojiSetOwner": "ana"',
        '"EmojiSetFramesDone": 8',
        '"EmojiSetFramesTotal": 8',
        '"final_review"',
    ):
        await expect(main).to_contain_text(text)
    await browser.shot("final review: search attributes", main)

    await open_tab(browser, f"{ui_stack.ui}/workflows/{ui_stack.ids['start']}", "User Metadata")
    current = metadata(page, "current-details")
    await expect(current).to_contain_text("awaiting start frame review")
    await expect(current).to_contain_text("2 to review")
    await expect(current).to_contain_text("Waiting for start_frame_review until")
    await browser.shot("start-frame review: current details", main)

    await open_tab(browser, f"{ui_stack.ui}/workflows/{ui_stack.ids['prompt']}", "User Metadata")
    current = metadata(page, "current-details")
    await expect(current).to_contain_text("Waiting for a custom-prompt regeneration:")
    await expect(current).to_contain_text("the pose prompt was refused")
    await browser.shot("custom prompt: current details", main)
    await page.get_by_text("Search Attributes", exact=True).click()
    await expect(main).to_contain_text('"custom_prompt"')
    await expect(main).to_contain_text('"EmojiSetOwner": "bo"')


async def test_the_sets_list_filtered_by_a_query_saves_as_a_view(ui_stack: UiStack, browser: BrowserSession) -> None:
    page, ids = browser.page, ui_stack.ids
    query, _ = SAVED_VIEWS["sets waiting for the final review"]

    await page.goto(f"{ui_stack.ui}/workflows?query={quote(query)}")
    rows = page.locator("main table tbody tr")
    await expect(rows).to_have_count(2)
    await expect(page.locator("main table")).to_contain_text(ids["final"])
    await expect(page.locator("main table")).to_contain_text(ids["prompt"])
    await browser.shot("sets waiting for the final review", page.locator("main"))

    await page.get_by_role("button", name="Save as New").click()
    await page.get_by_test_id("workflow-save-view-modal-input").fill("Final review")
    await page.get_by_role("button", name="Save", exact=True).click()
    await expect(page.get_by_role("button", name="Final review")).to_be_visible()
    await browser.shot("saved as the view 'Final review'", page.locator("main"))
    saved = json.loads(await page.evaluate("localStorage.getItem('saved-workflow-queries')"))
    assert [(v["name"], v["query"]) for v in saved["default"]] == [("Final review", query)], "kept by the browser"

    failed, _ = SAVED_VIEWS["failed sets"]
    await page.goto(f"{ui_stack.ui}/workflows?query={quote(failed)}")
    await expect(rows).to_have_count(1)
    await expect(rows).to_contain_text(ids["failed"])
    await expect(rows).to_contain_text("Failed")
    await browser.shot("failed sets", page.locator("main"))
