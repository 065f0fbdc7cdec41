"""Recorded histories: they replay deterministically, carry no image bytes, and continue-as-new keeps the state."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from testkit.servers import UNVERSIONED, start_eager_continue_as_new_server
from testkit.stack import Stack, StackSettings, run_stack, wait_for_phase
from workflows.contract import (
    EmojiSetInput,
    Phase,
    PickCandidateInput,
    PickSource,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    ReviewPolicy,
)
from workflows.emoji_set import EmojiSetWorkflow

IMAGE_SIGNATURES = [b"\x89PNG", b"GIF8", b"RIFF", b"\xff\xd8\xff", b"ftypisom", b"ftypmp4"]
"""PNG, GIF, WebP, JPEG and MP4 (clips)."""
MAX_PAYLOAD_BYTES = 16 * 1024


SMALL = {"frames_per_emoji": 3, "neighbours": 1, "clip_seconds": 1.0, "clip_fps": 12, "image_size": 96}


async def run_reviewed_set(stack: Stack, set_id: str) -> WorkflowHistory:
    """A set through every kind of message: start frame review, picks, a new take, a frame edit, approval."""
    request = EmojiSetInput(
        character_prompt="a purple robot", actions=["wave", "sleep"], review=ReviewPolicy(), **SMALL
    )
    await stack.sets.start(request, set_id=set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_START_FRAME_REVIEW)
    async with asyncio.timeout(30):
        while len((await stack.sets.state(set_id)).awaiting()) == 0:
            await asyncio.sleep(0.1)
    await stack.sets.regenerate_start_frame(
        RegenerateStartFrameInput(action="sleep", prompt="curled up"), set_id=set_id
    )
    await stack.sets.approve_start_frames(set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.pick(PickCandidateInput(emoji="sleep", frame=0, candidate=1), set_id=set_id)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=2, prompt="waving shyly"), set_id=set_id)
    await stack.sets.regenerate_action(RegenerateActionInput(emoji="sleep", motion_prompt="snores"), set_id=set_id)
    await stack.sets.approve(set_id)
    await stack.sets.result(set_id)
    return await stack.client.get_workflow_handle(set_id).fetch_history()


async def test_recorded_history_replays_deterministically(stack: Stack, set_id: str) -> None:
    history = await run_reviewed_set(stack, set_id)
    recorded = WorkflowHistory.from_json(set_id, history.to_json())

    replay = await Replayer(workflows=[EmojiSetWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        recorded
    )

    assert replay.replay_failure is None


async def test_payloads_never_carry_image_bytes(stack: Stack, set_id: str) -> None:
    history = await run_reviewed_set(stack, set_id)
    payloads = [p for event in history.events for p in _payloads(event)]

    assert payloads, "the history has payloads"
    assert max(len(p) for p in payloads) < MAX_PAYLOAD_BYTES
    for payload in payloads:
        for signature in IMAGE_SIGNATURES:
            assert signature not in payload
            assert base64.b64encode(signature)[:4] not in payload
    assert any(b'"sha256"' in p and b'"uri":"file://' in p for p in payloads), "images travel as references"


def _payloads(message: Message) -> Iterator[bytes]:
    """The data of every payload anywhere inside a protobuf message (a history event)."""
    if isinstance(message, Payload):
        yield message.data
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif field.is_repeated:
            values = list(value)
        else:
            values = [value]
        for item in values:
            if isinstance(item, Message):
                yield from _payloads(item)


@pytest.fixture(scope="module")
async def eager_continue_as_new(settings: StackSettings) -> AsyncIterator[Stack]:
    """A dev server that suggests continue-as-new after 40 events, so a review continues as new several times."""
    env = await start_eager_continue_as_new_server()
    async for running in run_stack(env, replace(settings, deployment=UNVERSIONED)):
        yield running
    await env.shutdown()


async def test_continue_as_new_carries_the_whole_state(eager_continue_as_new: Stack) -> None:
    stack, set_id = eager_continue_as_new, f"can-{uuid.uuid4().hex[:8]}"
    await stack.sets.start(
        EmojiSetInput(character_prompt="a cat", actions=["wave"], review=ReviewPolicy(start_frames="auto"), **SMALL),
        set_id=set_id,
    )
    async with asyncio.timeout(60):
        while (state := await stack.sets.state(set_id)).phase is not Phase.AWAITING_REVIEW or state.runs < 2:
            await asyncio.sleep(0.1)
    deadline = state.review_deadline
    for frame in range(3):
        await stack.sets.pick(PickCandidateInput(emoji="wave", frame=frame, candidate=1), set_id=set_id)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=2, prompt="waving twice"), set_id=set_id)
    await stack.sets.approve(set_id)

    result = await stack.sets.result(set_id)

    final = await stack.sets.state(set_id)
    assert result.status == "completed" and final.runs >= 2
    assert final.review_deadline == deadline, "the review deadline does not restart with each run"
    frames = final.actions[0].frames
    assert [(f.pick, f.picked_by) for f in frames[:2]] == [(1, PickSource.HUMAN)] * 2
    assert frames[2].edits == 1 and frames[2].picked_by is PickSource.HUMAN
