"""What a set spent, where people look: the review page, ``popcon state`` and the Temporal Web UI's current details."""

from __future__ import annotations

import asyncio
import re

import httpx
from typer.testing import CliRunner

from starter.cli import app as cli
from testkit.stack import Stack, wait_for_phase
from workflows.contract import Budget, EmojiSetInput, Phase, ReviewPolicy, StagePolicy

COST = re.compile(r"5 paid calls · 6 images · 2 s of video · GPU \d+\.\d s · about 0\.\d\d USD \(budget 9 paid calls\)")
"""A character call (2 images), 2 start frame calls (2 images each), 2 clips of 1 s, at the test stack's prices."""


async def test_the_cost_of_a_set_shows_on_its_page_in_popcon_state_and_in_the_web_ui(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    request = EmojiSetInput(
        character_prompt="a cat",
        actions=["wave", "heart"],
        frames_per_emoji=3,
        clip_seconds=1.0,
        clip_fps=12,
        image_size=96,
        start_frame_candidates=2,
        budget=Budget(paid_calls=9),
        review=ReviewPolicy(start_frames=StagePolicy.AUTO),
    )
    await stack.sets.start(request, set_id=set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)

    page = (await http.get(f"/sets/{set_id}")).text
    env = {"POPCON_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host, "COLUMNS": "250"}
    shown = (await asyncio.to_thread(CliRunner().invoke, cli, ["state", set_id], env=env)).output
    metadata = await stack.client.get_workflow_handle(set_id).query("__temporal_workflow_metadata")

    assert COST.search(page), page[:3000]
    assert COST.search(shown), shown
    assert COST.search(metadata.current_details), metadata.current_details
    await stack.sets.cancel(set_id)
