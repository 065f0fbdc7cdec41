"""The EmojiSet workflow against the real dev server, with both real workers: every stage and every message."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageSequence
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from starter.client import MessageRejected, SetClosed, UploadRefused
from testkit.generator_standins import RefusesClip, RefusesStartFrame, ThrottledOnce
from testkit.stack import Stack, wait_for_phase
from workflows import keys
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    ActionStage,
    ActionState,
    ArtifactRef,
    CandidateStatus,
    EmojiSetInput,
    EmojiSetState,
    FrameStatus,
    Phase,
    PickCandidateInput,
    PickSource,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    ReviewPolicy,
    StagePolicy,
    TakeStatus,
    TemporalMode,
)
from workflows.emoji_set import EmojiSetWorkflow

AUTO_START = ReviewPolicy(start_frames=StagePolicy.AUTO)
SMALL: dict[str, Any] = {
    "actions": ["wave", "heart"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
    "review": AUTO_START,
}
CAT = "a round orange cat with a blue scarf"


async def start(stack: Stack, set_id: str, **overrides: Any) -> None:
    fields = {"character_prompt": CAT, **SMALL, **overrides}
    await stack.sets.start(EmojiSetInput(**fields), set_id=set_id)


async def start_and_review(stack: Stack, set_id: str, **overrides: Any) -> EmojiSetState:
    await start(stack, set_id, **overrides)
    return await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)


async def wait_until(stack: Stack, set_id: str, done: Any, timeout: float = 60) -> EmojiSetState:
    async with asyncio.timeout(timeout):
        while not done(state := await stack.sets.state(set_id)):
            await asyncio.sleep(0.1)
    return state


def assert_one_clip_in_order(action: ActionState) -> None:
    """Every pick is a frame of one take's clip, and the picks move forward through it."""
    picks = [frame.picked() for frame in action.frames]
    assert all(p is not None and p.take is not None and p.source_frame is not None for p in picks)
    takes = {p.take for p in picks if p is not None}
    assert len(takes) == 1, f"{action.name} mixes takes {takes}"
    frames = [p.source_frame for p in picks if p is not None and p.source_frame is not None]
    assert frames == sorted(frames) and len(set(frames)) == len(frames), f"{action.name}: {frames}"


async def test_happy_path_from_prompt_to_exported_clips(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id)

    assert state.pipeline_info and state.pipeline_info.startswith("classical on cpu")
    assert [c.index for c in state.character.candidates] == [0, 1] and state.character.pick == 0
    for action in state.actions:
        assert action.stage is ActionStage.READY and action.start_frame_approved_by == "auto"
        [take] = action.takes
        assert take.status is TakeStatus.READY and take.clip is not None and take.clip.media_type == "video/mp4"
        assert take.source_frames == 12 and take.fps == 12 and take.loop == (0, 12)
        for frame in action.frames:
            assert frame.status is FrameStatus.READY and frame.picked_by is PickSource.AUTO
            chosen, *neighbours = frame.candidates
            assert chosen.offset == 0 and {c.offset for c in neighbours} <= {-1, 1}
            assert all(c.status is CandidateStatus.READY and c.matte and c.score is not None for c in frame.candidates)
        assert_one_clip_in_order(action)
    assert state.awaiting() == ["final_review"]

    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)

    assert result.status == "completed" and result.approved_by == "ana"
    assert [e.pose for e in result.emojis] == ["wave", "heart"]
    for emoji in result.emojis:
        with Image.open(io.BytesIO(stack.store.get(emoji.apng))) as image:
            assert image.size == (96, 96) and sum(1 for _ in ImageSequence.Iterator(image)) == 4
    assert (await stack.sets.describe_status(set_id)) is WorkflowExecutionStatus.COMPLETED


async def test_a_fully_automatic_set_completes_without_a_person(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["nod"], review=ReviewPolicy.automatic())

    result = await stack.sets.result(set_id)

    assert result.status == "completed" and result.approved_by == "auto"


async def test_start_frames_wait_for_review_pick_regenerate_approve(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, review=ReviewPolicy(), start_frame_candidates=2)
    state = await wait_until(
        stack, set_id, lambda s: all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in s.actions)
    )
    assert state.phase is Phase.AWAITING_START_FRAME_REVIEW and "start_frame_review" in state.awaiting()
    assert all([c.index for c in a.start_frames] == [0, 1] and not a.takes for a in state.actions)
    async with asyncio.timeout(30):
        while set_id not in [s.set_id for s in await stack.sets.list_sets(awaiting="start_frame_review")]:
            await asyncio.sleep(0.2)

    wave = await stack.sets.pick_start_frame(set_id, "wave", 1)
    assert wave.start_frame_pick == 1
    heart = await stack.sets.regenerate_start_frame(
        RegenerateStartFrameInput(action="heart", prompt="hugging a big red heart, eyes closed"), set_id=set_id
    )
    prompt = "hugging a big red heart, eyes closed"
    assert [(c.index, c.prompt) for c in heart.start_frames] == [(0, None), (1, None), (2, prompt), (3, prompt)]
    assert heart.start_frame_pick == 2 and heart.stage is ActionStage.AWAITING_START_FRAME_REVIEW

    assert await stack.sets.approve_start_frames(set_id, ["wave"], reviewer="ana") == ["wave"]
    state = await wait_until(stack, set_id, lambda s: s.actions[0].stage is ActionStage.READY)
    assert state.actions[1].stage is ActionStage.AWAITING_START_FRAME_REVIEW, "one action animates, one waits"
    assert state.actions[0].start_frame_approved_by == "ana"
    with pytest.raises(MessageRejected, match="wave's start frame does not await review"):
        await stack.sets.pick_start_frame(set_id, "wave", 0)

    assert await stack.sets.approve_start_frames(set_id) == ["heart"]
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    assert state.actions[1].start_frame() is not None and state.actions[1].start_frame_pick == 2
    with pytest.raises(MessageRejected, match="no start frame awaits review"):
        await stack.sets.approve_start_frames(set_id)
    await stack.sets.cancel(set_id)


def _picture() -> bytes:
    picture = Image.new("RGB", (300, 200), (40, 160, 220))
    picture.paste((250, 120, 30), (100, 40, 200, 180))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


PICTURE = _picture()
"""An orange block on a blue backdrop: an upload the cleaning cuts out."""


async def test_upload_makes_a_set_and_bad_uploads_are_refused(stack: Stack, set_id: str) -> None:
    data = PICTURE
    for bad, message in (
        (b"", "0 bytes"),
        (data[: len(data) // 2], "truncated"),
        (b"%PDF-1.4 not a picture", "not a picture"),
    ):
        with pytest.raises(UploadRefused, match=message):
            stack.sets.upload(bad)

    await start(stack, set_id, character_prompt=None, character_image=stack.sets.upload(data), actions=["wave"])
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)

    assert state.character.uploaded and len(state.character.candidates) == 1
    assert state.actions[0].stage is ActionStage.READY
    assert_one_clip_in_order(state.actions[0])
    await stack.sets.cancel(set_id)


async def test_a_bad_upload_started_raw_fails_the_set_before_any_production(stack: Stack, set_id: str) -> None:
    """A reference to bytes that are no picture (a backend that skipped the client's check) fails at the character."""
    garbage = stack.store.put(f"uploads/{set_id}", b"GIF89a but not really", "image/gif")
    await start(stack, set_id, character_prompt=None, character_image=garbage)

    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)

    assert "the character could not be made" in str(failure.value.cause)
    state = await stack.sets.state(set_id)
    assert state.character.error and all(not a.start_frames for a in state.actions)


async def test_a_crafted_reference_outside_the_store_is_never_read(stack: Stack, set_id: str, tmp_path: Path) -> None:
    """A reference to a file outside the store, with its true sha256 (sent raw, e.g. through the Temporal CLI)."""
    secret = tmp_path / "secret.png"
    secret.write_bytes(stack.store.get(stack.sets.upload(PICTURE)))
    crafted = ArtifactRef(
        uri=secret.as_uri(),
        sha256=hashlib.sha256(secret.read_bytes()).hexdigest(),
        size_bytes=secret.stat().st_size,
        media_type="image/png",
    )
    await start(stack, set_id, character_prompt=None, character_image=crafted)

    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)

    assert "outside the artifact store" in str(failure.value.cause)
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    attempts = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    assert max(e.activity_task_started_event_attributes.attempt for e in attempts) == 1, "refused, not retried"


async def test_a_new_take_with_a_custom_motion_prompt_and_pick_take(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)

    take = await stack.sets.regenerate_action(
        RegenerateActionInput(emoji="wave", motion_prompt="waves with both arms high"), set_id=set_id
    )
    assert take.index == 1 and take.motion_prompt == "waves with both arms high"
    state = await wait_until(
        stack,
        set_id,
        lambda s: all(
            any(c.take == 1 and c.status is CandidateStatus.READY for c in f.candidates) for f in s.actions[0].frames
        ),
    )
    wave = state.actions[0]
    assert all({c.take for c in frame.candidates} == {0, 1} for frame in wave.frames)

    wave = await stack.sets.pick_take(set_id, "wave", 1)

    assert wave.take_pick == 1
    picks = [f.picked() for f in wave.frames]
    assert all(f.picked_by is PickSource.HUMAN for f in wave.frames)
    assert all(p is not None and p.take == 1 for p in picks)
    assert_one_clip_in_order(wave)
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_pick_among_neighbours_and_across_takes(stack: Stack, set_id: str) -> None:
    # Unstabilised, so that the picked cut-outs themselves are assembled.
    state = await start_and_review(stack, set_id, actions=["wave"], takes_per_action=2, temporal=TemporalMode.NONE)
    frame = state.actions[0].frames[2]
    assert {(c.take, c.offset) for c in frame.candidates} == {(t, o) for t in (0, 1) for o in (-1, 0, 1)}
    neighbour = next(c for c in frame.candidates if c.offset == 1 and c.index != frame.pick)
    other_take = next(c for c in frame.candidates if c.take != neighbour.take)

    picked = await stack.sets.pick(PickCandidateInput(emoji="wave", frame=2, candidate=neighbour.index), set_id=set_id)
    assert (picked.pick, picked.picked_by) == (neighbour.index, PickSource.HUMAN)
    picked = await stack.sets.pick(PickCandidateInput(emoji="wave", frame=2, candidate=other_take.index), set_id=set_id)
    assert picked.pick == other_take.index

    for (emoji, index, candidate), message in {
        ("laugh", 0, 0): "unknown emoji 'laugh'",
        ("wave", 4, 0): "wave has frames 0-3, not 4",
        ("wave", 0, 17): "wave frame 0 has no candidate 17",
    }.items():
        with pytest.raises(MessageRejected, match=re.escape(message)):
            await stack.sets.pick(PickCandidateInput(emoji=emoji, frame=index, candidate=candidate), set_id=set_id)
    await stack.sets.approve(set_id)
    result = await stack.sets.result(set_id)
    slot = (await stack.sets.state(set_id)).actions[0].frames[2]
    chosen = slot.picked()
    assert chosen is not None and result.emojis[0].frames[2] == chosen.matte


async def test_frame_edit_with_a_custom_prompt_adds_candidates(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)

    frame = await stack.sets.regenerate_frame(
        RegenerateFrameInput(emoji="heart", frame=1, prompt="the heart in gold", candidates=2), set_id=set_id
    )

    assert frame is not None and frame.edits == 1
    new = [c for c in frame.candidates if c.take is None]
    assert [c.prompt for c in new] == ["the heart in gold"] * 2
    assert all(c.status is CandidateStatus.READY for c in new)
    assert frame.pick in {c.index for c in new} and frame.picked_by is PickSource.HUMAN
    with pytest.raises(MessageRejected, match="wave has frames 0-3, not 9"):
        await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=9, prompt="x"), set_id=set_id)
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_a_failed_clip_waits_for_a_custom_motion_prompt_then_completes(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, generator=RefusesClip.name)

    heart = state.actions[1]
    assert heart.stage is ActionStage.WAITING_FOR_PROMPT and "DataInspectionFailed" in (heart.error or "")
    assert state.actions[0].stage is ActionStage.READY and "custom_prompt" in state.awaiting()
    with pytest.raises(MessageRejected, match="not usable yet: heart; regenerate them with a custom prompt"):
        await stack.sets.approve(set_id)

    await stack.sets.regenerate_action(
        RegenerateActionInput(emoji="heart", motion_prompt="the heart beats gently"), set_id=set_id
    )
    state = await wait_until(stack, set_id, lambda s: s.actions[1].stage is ActionStage.READY and not s.unusable())
    assert [t.status for t in state.actions[1].takes] == [TakeStatus.FAILED, TakeStatus.READY]

    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_a_refused_start_frame_waits_for_a_custom_pose_prompt(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, generator=RefusesStartFrame.name)
    heart = state.actions[1]
    assert heart.stage is ActionStage.WAITING_FOR_PROMPT and "start frame failed" in (heart.error or "")

    await stack.sets.regenerate_start_frame(
        RegenerateStartFrameInput(action="heart", prompt="holding a heart-shaped balloon"), set_id=set_id
    )
    state = await wait_until(stack, set_id, lambda s: not s.unusable())

    assert state.actions[1].start_frame_approved_by == "auto"
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_throttled_clips_are_retried(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, generator=ThrottledOnce.name, actions=["wave"])
    assert state.actions[0].stage is ActionStage.READY
    await stack.sets.cancel(set_id)


async def test_bad_messages_are_rejected_and_the_set_stays_healthy(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    with pytest.raises(MessageRejected, match="unknown emoji 'cry'"):
        await stack.sets.regenerate_action(RegenerateActionInput(emoji="cry", motion_prompt="x"), set_id=set_id)
    with pytest.raises(MessageRejected, match="wave has no take 3"):
        await stack.sets.pick_take(set_id, "wave", 3)
    with pytest.raises(MessageRejected, match="regenerate_action makes a new take"):
        await stack.sets.regenerate_start_frame(RegenerateStartFrameInput(action="wave", prompt="x"), set_id=set_id)
    with pytest.raises(MessageRejected, match="the character is settled"):
        await stack.sets.pick_character(set_id, 1)
    handle = stack.client.get_workflow_handle(set_id)
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("regenerate_frame", {"emoji": "wave", "frame": 0, "prompt": ""})
    assert "at least 1 character" in str(rejected.value.cause)
    # A malformed approval is rejected; the set stays healthy and completes.
    for malformed in (
        RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")),
        {"reviewer": ["not", "a", "name"]},
    ):
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("approve", malformed)
    await stack.sets.approve(set_id)
    assert (await stack.sets.result(set_id)).status == "completed"


async def test_character_review_pick_and_approve(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["wave"], review=ReviewPolicy(character=StagePolicy.HUMAN, start_frames="auto"))
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_CHARACTER_REVIEW)
    assert state.awaiting() == ["character_review"]

    picked = await stack.sets.pick_character(set_id, 1)
    assert picked.index == 1
    with pytest.raises(MessageRejected, match="no character candidate 5"):
        await stack.sets.pick_character(set_id, 5)
    await stack.sets.approve_character(set_id)

    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    assert state.character.pick == 1 and state.character.picked_by is PickSource.HUMAN
    await stack.sets.cancel(set_id)


async def test_cancel_during_review(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    await stack.sets.cancel(set_id, reason="customer changed their mind")

    result = await stack.sets.result(set_id)

    assert (result.status, result.reason) == ("cancelled", "customer changed their mind")
    assert result.emojis == [] and (await stack.sets.state(set_id)).phase is Phase.CANCELLED
    with pytest.raises(SetClosed, match="the set has ended"):
        await stack.sets.pick(PickCandidateInput(emoji="wave", frame=0, candidate=0), set_id=set_id)


async def test_a_cancel_during_assembly_is_refused_as_too_late(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id, actions=["wave"])
    # A directory where the contact sheet goes: its writes fail (retried) until the test removes it.
    blocker = stack.store.root / keys.export_key(set_id, "contact-sheet.png")
    blocker.mkdir(parents=True)
    await stack.sets.approve(set_id, reviewer="ana")
    await wait_for_phase(stack.sets, set_id, Phase.ASSEMBLING)

    with pytest.raises(MessageRejected, match="too late to cancel: the set was approved by ana and is being assembled"):
        await stack.sets.cancel(set_id)
    blocker.rmdir()

    assert (await stack.sets.result(set_id)).status == "completed"
    with pytest.raises(SetClosed, match=r"the set has ended \(completed\)"):
        await stack.sets.cancel(set_id)


async def test_cancel_while_animating_stops_at_once(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["wave", "laugh", "cry"], frames_per_emoji=24, clip_seconds=4, image_size=256)
    await wait_until(stack, set_id, lambda s: s.phase in (Phase.ANIMATING, Phase.MATTING))
    await stack.sets.cancel(set_id)

    result = await stack.sets.result(set_id)

    state = await stack.sets.state(set_id)
    assert result.status == "cancelled" and state.phase is Phase.CANCELLED
    assert state.frames_done() < state.frames_total()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"actions": ["wave", "moonwalk"]}, "unknown action preset"),
        ({"actions": ["wave", "wave"]}, "action names must be unique"),
        ({"actions": []}, "at least one action"),
        ({"custom_actions": [{"name": "wave", "pose_prompt": "p", "motion_prompt": "m"}]}, "must be unique"),
        ({"custom_actions": [{"name": "Big Wave", "pose_prompt": "p", "motion_prompt": "m"}]}, "should match"),
        ({"frames_per_emoji": 1}, "greater than or equal to 2"),
        ({"frames_per_emoji": 49}, "less than or equal to 48"),
        ({"takes_per_action": 9}, "less than or equal to 4"),
        ({"clip_fps": 500}, "less than or equal to 60"),
        ({"character_prompt": "   "}, "at least 1 character"),
        ({"character_prompt": None}, "either as character_prompt or as character_image"),
        ({"matting_pipeline": "birefnet++defringe"}, "is not a valid name"),
        (
            {
                "actions": ["wave", "laugh", "cry", "heart", "sleep", "jump", "nod"],
                "frames_per_emoji": 48,
                "takes_per_action": 4,
                "neighbours": 2,
            },
            "at most 4000 frame candidates",
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
        EmojiSetInput.of_request(raw)

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
    await start(stack, set_id, **overrides)
    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)
    assert message in str(failure.value.cause)
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert sorted(scheduled) == ["check_exports", "check_generator", "describe_deployment", "describe_pipeline"]


async def test_start_is_idempotent_for_the_same_set_id(stack: Stack, set_id: str) -> None:
    await start(stack, set_id)
    first = await stack.client.get_workflow_handle(set_id).describe()
    await start(stack, set_id)
    second = await stack.client.get_workflow_handle(set_id).describe()

    assert second.run_id == first.run_id, "the second start must attach to the running set, not start a new run"
    await stack.sets.cancel(set_id)
    assert (await stack.sets.result(set_id)).status == "cancelled"


async def test_final_deadline_auto_approves(time_skipping: Stack, set_id: str) -> None:
    review = ReviewPolicy(start_frames=StagePolicy.AUTO, deadline=timedelta(hours=2))
    await start(time_skipping, set_id, review=review)
    await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(hours=2, minutes=1))

    result = await time_skipping.sets.result(set_id)

    assert (result.status, result.approved_by) == ("completed", "review deadline (auto-approve)")


async def test_start_frame_deadline_auto_approves_then_the_final_one_expires(time_skipping: Stack, set_id: str) -> None:
    review = ReviewPolicy(deadline=timedelta(hours=3), on_deadline="auto_approve")
    await start(time_skipping, set_id, review=review, actions=["wave"])
    first = await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_START_FRAME_REVIEW)
    await time_skipping.env.sleep(timedelta(hours=3, minutes=1))
    state = await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    assert state.actions[0].start_frame_approved_by == "review deadline (auto-approve)"
    assert first.review_deadline is not None and state.review_deadline is not None
    assert state.review_deadline > first.review_deadline, "the final review gets its own deadline"
    await time_skipping.sets.cancel(set_id)


async def test_deadline_expires(time_skipping: Stack, set_id: str) -> None:
    review = ReviewPolicy(start_frames=StagePolicy.AUTO, deadline=timedelta(days=3), on_deadline="expire")
    await start(time_skipping, set_id, review=review)
    await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(days=2, hours=23))
    assert (await time_skipping.sets.state(set_id)).phase is Phase.AWAITING_REVIEW, "not before the deadline"
    await time_skipping.env.sleep(timedelta(hours=2))

    result = await time_skipping.sets.result(set_id)

    assert (result.status, result.reason) == ("expired", "review deadline passed without a decision")
    assert result.emojis == [] and (await time_skipping.sets.state(set_id)).phase is Phase.EXPIRED


async def test_deadline_cannot_auto_approve_an_unusable_set(time_skipping: Stack, set_id: str) -> None:
    review = ReviewPolicy(start_frames=StagePolicy.AUTO, deadline=timedelta(hours=1))
    await start(time_skipping, set_id, review=review, generator=RefusesClip.name)
    await wait_for_phase(time_skipping.sets, set_id, Phase.AWAITING_REVIEW)
    await time_skipping.env.sleep(timedelta(hours=1, minutes=1))

    result = await time_skipping.sets.result(set_id)

    assert result.status == "expired"
    assert result.reason == "review deadline passed; cannot auto-approve, not usable: heart"


async def test_a_set_that_names_no_temporal_mode_takes_the_deployments(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["wave"])

    assert state.terms is not None and state.terms.temporal is TemporalMode.STABILISE
    assert state.input.temporal is TemporalMode.STABILISE
    [action] = state.actions
    assert action.stabilised_for is not None
    assert all(frame.stabilised is not None and frame.assembled() == frame.stabilised for frame in action.frames)


async def test_a_set_that_names_its_temporal_mode_keeps_it(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["wave"], temporal=TemporalMode.NONE)

    assert state.input.temporal is TemporalMode.NONE
    [action] = state.actions
    assert action.stabilised_for is None and all(frame.stabilised is None for frame in action.frames)


async def test_temporal_stabilisation_follows_the_picks_and_is_assembled(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["wave"], temporal=TemporalMode.STABILISE)

    [action] = state.actions
    first = action.stabilised_for
    assert first is not None
    for frame in action.frames:
        assert (
            frame.stabilised is not None
            and f"/wave/stabilised/{first}/frame-{frame.index:03d}.png" in frame.stabilised.uri
        )
        picked = frame.picked()
        assert picked is not None and picked.matte is not None and frame.assembled() == frame.stabilised
        with Image.open(io.BytesIO(stack.store.get(frame.stabilised))) as image:
            assert image.mode == "RGBA" and image.size == (96, 96)

    # A pick by hand drops the stale stabilised cut-outs at once and stabilises the new picks.
    neighbour = next(c for c in action.frames[2].candidates if c.index != action.frames[2].pick)
    slot = await stack.sets.pick(PickCandidateInput(emoji="wave", frame=2, candidate=neighbour.index), set_id=set_id)
    assert slot.stabilised is None
    state = await wait_until(stack, set_id, lambda s: s.actions[0].stabilised_for not in (None, first))
    [action] = state.actions
    second = action.stabilised_for
    assert second is not None
    assert all(frame.stabilised is not None and second in frame.stabilised.uri for frame in action.frames)

    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)

    assert result.status == "completed"
    [emoji] = result.emojis
    assert emoji.frames == [frame.stabilised for frame in action.frames]
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    replay = await Replayer(workflows=[EmojiSetWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        WorkflowHistory.from_json(set_id, history.to_json())
    )
    assert replay.replay_failure is None
