"""Platform exports through the workflow: packages made on approval, refusals known at start, exporting again."""

from __future__ import annotations

import asyncio
import io
import zipfile

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from starter.client import EmojiSetError
from testkit.images import sticker_png
from testkit.stack import Stack, wait_for_phase
from workflows import keys
from workflows.contract import (
    EXPORT_WORKFLOW_TYPE,
    ORCHESTRATION_TASK_QUEUE,
    ArtifactRef,
    EmojiSetInput,
    ExportSetResult,
    ExportTarget,
    Phase,
    ReviewPolicy,
    StagePolicy,
)
from workflows.presets import DEFAULT_ACTIONS

EIGHT = {
    "actions": list(DEFAULT_ACTIONS),
    "frames_per_emoji": 8,
    "neighbours": 0,
    "clip_seconds": 1.0,
    "clip_fps": 16,
    "image_size": 128,
    "review": ReviewPolicy(start_frames=StagePolicy.AUTO),
}


async def approved(stack: Stack, set_id: str, **fields: object) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt="a round orange cat", **fields), set_id=set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.approve(set_id, reviewer="ana")


async def test_an_approved_set_of_eight_gets_its_line_and_slack_packages(stack: Stack, set_id: str) -> None:
    targets = [ExportTarget.GENERIC, ExportTarget.LINE_EMOJI, ExportTarget.SLACK]
    await approved(stack, set_id, export_targets=targets, **EIGHT)

    result = await stack.sets.result(set_id)

    assert result.status == "completed" and len(result.emojis) == 8, "the generic files are made too"
    line, slack = result.packages
    assert (line.target, slack.target) == (ExportTarget.LINE_EMOJI, ExportTarget.SLACK)
    assert [file.name for file in line.files] == [f"{i:03d}.png" for i in range(1, 9)] + ["tab.png"]
    assert all(file.rung and file.file.size_bytes <= 300_000 for file in line.files if file.emoji)
    assert line.archive is not None
    with zipfile.ZipFile(io.BytesIO(stack.store.get(line.archive))) as archive:
        assert archive.namelist() == [file.name for file in line.files]
    assert [file.name for file in slack.files] == [f"{pose}.gif" for pose in DEFAULT_ACTIONS] and slack.archive is None


async def test_a_set_a_platform_does_not_take_is_told_at_start_and_still_completes(stack: Stack, set_id: str) -> None:
    await stack.sets.start(
        EmojiSetInput(character_prompt="a cat", **{**EIGHT, "actions": ["wave", "heart"], "image_size": 64}),
        set_id=set_id,
    )
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.approve(set_id)
    result = await stack.sets.result(set_id)

    assert state.export_refusals == [
        "line-emoji: set_count: LINE animated emoji takes sets of 8 to 40 emoji, this one has 2"
    ]
    [line] = result.packages
    assert line.files == [] and line.error is not None and "set_count" in line.error
    assert result.status == "completed" and len(result.emojis) == 2


async def test_a_completed_set_is_exported_again_without_redoing_anything(stack: Stack, set_id: str) -> None:
    await approved(stack, set_id, export_targets=[ExportTarget.GENERIC], **{**EIGHT, "actions": ["wave", "laugh"]})
    await stack.sets.result(set_id)
    history = await stack.client.get_workflow_handle(set_id).fetch_history()

    exported = await stack.sets.export(set_id, [ExportTarget.SLACK, ExportTarget.DISCORD])

    assert [package.target for package in exported.packages] == [ExportTarget.SLACK, ExportTarget.DISCORD]
    assert [file.name for file in exported.packages[1].files] == ["wave.png", "laugh.png"]
    after = await stack.client.get_workflow_handle(set_id).fetch_history()
    assert len(after.events) == len(history.events), "the set itself did nothing more"


async def test_only_a_completed_set_is_exported(stack: Stack, set_id: str) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt="a cat", export_targets=["generic"], **EIGHT), set_id=set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    with pytest.raises(EmojiSetError, match="only a completed set's approved picks are exported"):
        await stack.sets.export(set_id, [ExportTarget.SLACK])
    await stack.sets.cancel(set_id)


def _raw_emoji(pose: str, frame: ArtifactRef) -> dict[str, object]:
    """An emoji of an ExportSet input as hand-written JSON (the Temporal CLI's ``--input``)."""
    return {"pose": pose, "frames": [frame.model_dump(mode="json")] * 2, "frame_duration_ms": 100}


async def test_an_export_cannot_write_into_another_set_through_a_pose(stack: Stack, set_id: str) -> None:
    victim = stack.store.put(keys.character_key(f"{set_id}-victim", 0), sticker_png(), "image/png")
    frame = stack.store.put(keys.candidate_key(set_id, "wave", 0, 0, "matte.png"), sticker_png(), "image/png")
    pose = f"../../../{keys.key_segment(set_id + '-victim')}/character/candidate-00"

    handle = await stack.client.start_workflow(
        EXPORT_WORKFLOW_TYPE,
        {"set_id": set_id, "targets": ["slack", "discord"], "emojis": [_raw_emoji(pose, frame)]},
        id=f"{set_id}-export",
        task_queue=ORCHESTRATION_TASK_QUEUE,
    )

    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 60)  # not a workflow task failing on every retry
    assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.type == "ValidationError"
    assert "emojis.0.pose" in str(failed.value.cause) and "should match pattern" in str(failed.value.cause)
    assert stack.store.get(victim) == sticker_png(), "the other set's character is untouched"


async def test_an_export_reads_only_its_own_sets_frames(stack: Stack, set_id: str) -> None:
    others = stack.store.put(
        keys.candidate_key(f"{set_id}-other", "wave", 0, 0, "matte.png"), sticker_png(), "image/png"
    )

    result = await stack.client.execute_workflow(
        EXPORT_WORKFLOW_TYPE,
        {"set_id": set_id, "targets": ["slack"], "emojis": [_raw_emoji("wave", others)]},
        id=f"{set_id}-export",
        task_queue=ORCHESTRATION_TASK_QUEUE,
        result_type=ExportSetResult,
    )

    [slack] = result.packages
    assert slack.files == [] and slack.error is not None and slack.error.startswith("ForeignArtifact: ")
    assert "not a file of the set this request writes to" in slack.error
    assert stack.store.find(keys.package_key(set_id, "slack", "wave.gif")) is None
