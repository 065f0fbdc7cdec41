"""The EmojiSet workflow against the real dev server, with both real workers."""

from __future__ import annotations

import asyncio
import io
import re
from datetime import timedelta

import pytest
from PIL import Image, ImageSequence
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue

from starter.client import ApprovalRefused, MessageRejected, SetClosed
from testkit.generator_standins import RefusesFrameOne, ThrottledOnce
from testkit.stack import Stack, wait_for_phase
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    CandidateStatus,
    EmojiSetInput,
    EmojiSetState,
    FrameStatus,
    Phase,
    PickCandidateInput,
    PickSource,
    RegenerateFrameInput,
)

SMALL = {"poses": ["wave", "heart"], "frames_per_emoji": 3, "candidates_per_frame": 2, "image_size": 96}


async def start_and_review(stack: Stack, set_id: str, **overrides: object) -> EmojiSetState:
    request = EmojiSetInput(character_prompt="a round orange cat with a blue scarf", **{**SMALL, **overrides})
    await stack.sets.start(request, set_id=set_id)
    return await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)


async def test_happy_path_generates_mattes_picks_and_assembles(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id)

    assert state.frames_done() == state.frames_total() == 6
    assert state.pipeline_info and state.pipeline_info.startswith("classical on cpu")
    for _, frame in state.frames():
        assert frame.status is FrameStatus.READY and frame.picked_by is PickSource.AUTO
        assert [c.index for c in frame.candidates] == [0, 1]
        assert all(c.status is CandidateStatus.READY and c.matte and c.score is not None for c in frame.candidates)
        picked = frame.picked()
        assert picked is not None and picked.score == max(c.score or 0 for c in frame.candidates)

    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)

    assert result.status == "completed" and result.approved_by == "ana"
    assert [e.pose for e in result.emojis] == ["wave", "heart"]
    for emoji in result.emojis:
        for ref, fmt in ((emoji.webp, "WEBP"), (emoji.apng, "PNG"), (emoji.gif, "GIF")):
            with Image.open(io.BytesIO(stack.store.get(ref))) as image:
                assert image.format == fmt and image.size == (96, 96)
                assert sum(1 for _ in ImageSequence.Iterator(image)) == 3
    assert result.contact_sheet is not None
    assert (await stack.sets.describe_status(set_id)) is WorkflowExecutionStatus.COMPLETED


async def test_search_attributes_find_sets_awaiting_review(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id, owner=f"owner-{set_id}")

    async with asyncio.timeout(30):
        while not (found := await stack.sets.list_sets(phase=Phase.AWAITING_REVIEW, owner=f"owner-{set_id}")):
            await asyncio.sleep(0.2)
    assert [s.set_id for s in found] == [set_id]
    assert (found[0].frames_done, found[0].frames_total) == (6, 6)
    await stack.sets.cancel(set_id)


async def test_pick_by_hand_and_invalid_picks_are_rejected(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id)
    frame = state.emojis[0].frames[2]
    other = next(c.index for c in frame.candidates if c.index != frame.pick)

    picked = await stack.sets.pick(PickCandidateInput(emoji="wave", frame=2, candidate=other), set_id=set_id)
    assert (picked.pick, picked.picked_by) == (other, PickSource.HUMAN)

    bad_picks = {
        ("laugh", 0, 0): "unknown emoji 'laugh'",
        ("wave", 3, 0): "wave has frames 0-2, not 3",
        ("wave", 0, 7): "wave frame 0 has no candidate 7; candidates: [0, 1]",
    }
    for (emoji, frame_index, candidate), message in bad_picks.items():
        with pytest.raises(MessageRejected, match=re.escape(message)):
            await stack.sets.pick(
                PickCandidateInput(emoji=emoji, frame=frame_index, candidate=candidate), set_id=set_id
            )

    await stack.sets.approve(set_id)
    result = await stack.sets.result(set_id)
    frame_two = (await stack.sets.state(set_id)).emojis[0].frames[2]
    assert (frame_two.pick, frame_two.picked_by) == (other, PickSource.HUMAN)
    chosen = frame_two.picked()
    assert chosen is not None and result.emojis[0].frames[2] == chosen.matte


async def test_regenerate_one_frame_with_a_custom_prompt(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)

    result = await stack.sets.regenerate(
        RegenerateFrameInput(emoji="heart", frame=1, prompt="holding a tiny golden heart", candidates=3),
        set_id=set_id,
    )

    assert result is not None
    [frame] = result.frames
    assert [c.index for c in frame.candidates] == [0, 1, 2, 3, 4]
    new = frame.candidates[2:]
    assert all(c.prompt == "holding a tiny golden heart" and c.status is CandidateStatus.READY for c in new)
    assert all(c.prompt is None for c in frame.candidates[:2])
    assert frame.pick in {c.index for c in new} and frame.picked_by is PickSource.AUTO
    assert frame.regenerations == 1
    state = await stack.sets.state(set_id)
    assert state.phase is Phase.AWAITING_REVIEW
    assert [len(f.candidates) for f in state.emojis[1].frames] == [2, 5, 2]
    await stack.sets.cancel(set_id)


async def test_regenerate_a_whole_emoji_keeps_human_picks(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    await stack.sets.pick(PickCandidateInput(emoji="wave", frame=0, candidate=1), set_id=set_id)

    result = await stack.sets.regenerate(
        RegenerateFrameInput(emoji="wave", prompt="waving with both hands"), set_id=set_id
    )

    assert result is not None and [f.index for f in result.frames] == [0, 1, 2]
    assert all(len(f.candidates) == 4 for f in result.frames)
    assert (result.frames[0].pick, result.frames[0].picked_by) == (1, PickSource.HUMAN)
    assert all(f.pick in (2, 3) for f in result.frames[1:])
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_regenerate_rejects_bad_requests(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    with pytest.raises(MessageRejected, match="unknown emoji 'cry'"):
        await stack.sets.regenerate(RegenerateFrameInput(emoji="cry", prompt="x"), set_id=set_id)
    with pytest.raises(MessageRejected, match="wave has frames 0-2, not 9"):
        await stack.sets.regenerate(RegenerateFrameInput(emoji="wave", frame=9, prompt="x"), set_id=set_id)
    # A payload that does not decode as RegenerateFrameInput (what a raw client could send) is rejected too.
    handle = stack.client.get_workflow_handle(set_id)
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("regenerate_frame", {"emoji": "wave", "prompt": ""})
    assert "prompt" in str(rejected.value.cause) and "at least 1 character" in str(rejected.value.cause)
    # A malformed signal is dropped; the set stays healthy and completes.
    await handle.signal("approve", RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")))
    await handle.signal("approve", {"reviewer": ["not", "a", "name"]})
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_cancel_during_review(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    await stack.sets.cancel(set_id, reason="customer changed their mind")

    result = await stack.sets.result(set_id)

    assert (result.status, result.reason) == ("cancelled", "customer changed their mind")
    assert result.emojis == [] and (await stack.sets.state(set_id)).phase is Phase.CANCELLED
    with pytest.raises(SetClosed, match="the set has ended"):
        await stack.sets.pick(PickCandidateInput(emoji="wave", frame=0, candidate=0), set_id=set_id)


async def test_cancel_while_generating_stops_at_once(stack: Stack, set_id: str) -> None:
    request = EmojiSetInput(character_prompt="a green frog", poses=["wave"], frames_per_emoji=24, image_size=256)
    await stack.sets.start(request, set_id=set_id)
    await stack.sets.cancel(set_id)

    result = await stack.sets.result(set_id)

    state = await stack.sets.state(set_id)
    assert result.status == "cancelled" and state.phase is Phase.CANCELLED
    assert state.frames_done() < 24


async def test_failed_generation_waits_for_a_custom_prompt_then_completes(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, generator=RefusesFrameOne.name)

    failed = [(e.pose, f) for e, f in state.frames() if f.status is FrameStatus.FAILED]
    assert [(pose, f.index) for pose, f in failed] == [("wave", 1), ("heart", 1)]
    assert all("DataInspectionFailed" in (f.error or "") and not f.candidates for _, f in failed)
    assert state.frames_done() == 4

    with pytest.raises(ApprovalRefused, match="wave#1, heart#1"):
        await stack.sets.approve(set_id)
    # The raw signal (bypassing the client's check) is refused by the workflow itself, which says why.
    await stack.client.get_workflow_handle(set_id).signal("approve", {"reviewer": "eve"})
    async with asyncio.timeout(20):
        while not (notice := (await stack.sets.state(set_id)).notice):
            await asyncio.sleep(0.1)
    assert notice == "approval refused: no usable candidate for wave#1, heart#1"

    for pose in ("wave", "heart"):
        await stack.sets.regenerate(RegenerateFrameInput(emoji=pose, frame=1, prompt="smiling calmly"), set_id=set_id)
    state = await stack.sets.state(set_id)
    assert state.unusable_frames() == [] and state.emojis[0].frames[1].error is None

    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_throttled_generation_is_retried(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, generator=ThrottledOnce.name, poses=["wave"], frames_per_emoji=2)
    assert state.frames_done() == 2
    await stack.sets.cancel(set_id)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"poses": ["wave", "moonwalk"]}, "unknown pose preset"),
        ({"poses": ["wave", "wave"]}, "poses must be unique"),
        ({"poses": []}, "at least 1 item"),
        ({"frames_per_emoji": 0}, "greater than or equal to 1"),
        ({"frames_per_emoji": 49}, "less than or equal to 48"),
        ({"candidates_per_frame": 9}, "less than or equal to 8"),
        ({"character_prompt": "   "}, "at least 1 character"),
        ({"matting_pipeline": "birefnet++defringe"}, "is not a valid name"),
        (
            {"poses": ["wave", "laugh", "cry", "heart", "sleep"], "frames_per_emoji": 48, "candidates_per_frame": 8},
            "at most 1000 candidates",
        ),
        ({"colour": "red"}, "Extra inputs are not permitted"),
    ],
)
async def test_invalid_input_fails_the_set_with_a_clear_message(
    stack: Stack, set_id: str, overrides: dict[str, object], message: str
) -> None:
    """What the client refuses before starting, the workflow refuses too when started raw (e.g. by the CLI)."""
    raw = {"character_prompt": "a round orange cat", **overrides}
    with pytest.raises(ValueError, match=re.escape(message)):
        EmojiSetInput.model_validate(raw)

    handle = await stack.client.start_workflow(
        WORKFLOW_TYPE, raw, id=set_id, task_queue=ORCHESTRATION_TASK_QUEUE, result_type=dict
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert message in str(failure.value.cause)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"matting_pipeline": "no-such-engine"}, "unknown matting step 'no-such-engine'"),
        ({"generator": "no-such-generator"}, "unknown generator 'no-such-generator'"),
    ],
)
async def test_unknown_pipeline_or_generator_fails_before_any_work(
    stack: Stack, set_id: str, overrides: dict[str, object], message: str
) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt="a cat", **{**SMALL, **overrides}), set_id=set_id)
    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)
    assert message in str(failure.value.cause)
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert sorted(scheduled) == ["check_exports", "check_generator", "describe_pipeline"]


async def test_start_is_idempotent_for_the_same_set_id(stack: Stack, set_id: str) -> None:
    request = EmojiSetInput(character_prompt="a cat", **SMALL)
    assert await stack.sets.start(request, set_id=set_id) == set_id
    first = await stack.client.get_workflow_handle(set_id).describe()
    assert await stack.sets.start(request, set_id=set_id) == set_id
    second = await stack.client.get_workflow_handle(set_id).describe()

    assert second.run_id == first.run_id, "the second start must attach to the running set, not start a new run"
    assert second.status is WorkflowExecutionStatus.RUNNING
    history = await stack.client.get_workflow_handle(set_id, run_id=first.run_id).fetch_history()
    started = [e for e in history.events if e.HasField("workflow_execution_started_event_attributes")]
    assert len(started) == 1
    await stack.sets.cancel(set_id)
    assert (await stack.sets.result(set_id)).status == "cancelled"


async def test_deadline_auto_approves(time_skipping: Stack, set_id: str) -> None:
    review = {"deadline": timedelta(hours=2), "on_deadline": "auto_approve"}
    await time_skipping.sets.start(EmojiSetInput(character_prompt="a cat", review=review, **SMALL), set_id=set_id)
    await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(hours=2, minutes=1))

    result = await time_skipping.sets.result(set_id)

    assert result.status == "completed"
    assert result.approved_by == "review deadline (auto-approve)"


async def test_deadline_expires(time_skipping: Stack, set_id: str) -> None:
    review = {"deadline": timedelta(days=3), "on_deadline": "expire"}
    await time_skipping.sets.start(EmojiSetInput(character_prompt="a cat", review=review, **SMALL), set_id=set_id)
    state = await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(days=2, hours=23))
    assert (await time_skipping.sets.state(set_id)).phase is Phase.AWAITING_REVIEW, "not before the deadline"
    await time_skipping.env.sleep(timedelta(hours=2))

    result = await time_skipping.sets.result(set_id)

    assert (result.status, result.reason) == ("expired", "review deadline passed without approval")
    final = await time_skipping.sets.state(set_id)
    assert result.emojis == [] and final.phase is Phase.EXPIRED
    assert final.review_deadline == state.review_deadline


async def test_deadline_cannot_auto_approve_unusable_frames(time_skipping: Stack, set_id: str) -> None:
    review = {"deadline": timedelta(hours=1), "on_deadline": "auto_approve"}
    request = EmojiSetInput(character_prompt="a cat", review=review, generator=RefusesFrameOne.name, **SMALL)
    await time_skipping.sets.start(request, set_id=set_id)
    await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(hours=1, minutes=1))

    result = await time_skipping.sets.result(set_id)

    assert result.status == "expired"
    assert result.reason == "review deadline passed; cannot auto-approve, no usable candidate for wave#1, heart#1"
