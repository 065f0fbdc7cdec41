"""Dropping an emoji from a set: its work in flight stops, the rest of the set goes on, its exports are rechecked."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.worker import Worker
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.client import MessageRejected, SetClosed
from testkit.generator_standins import SlowRegenerations
from testkit.stack import Stack, wait_for_phase
from workflows.contract import (
    WORKFLOW_TYPE,
    ActionStage,
    ActionState,
    CallOutcome,
    DropActionInput,
    EmojiSetInput,
    EmojiSetState,
    ExportTarget,
    Phase,
    RegenerateActionInput,
    RegenerateFrameInput,
    ReviewPolicy,
    StagePolicy,
    TakeStatus,
)

SMALL: dict[str, Any] = {
    "character_prompt": "a round orange cat with a blue scarf",
    "actions": ["wave", "heart"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
    "review": ReviewPolicy(start_frames=StagePolicy.AUTO),
}


async def start(stack: Stack, set_id: str, **overrides: Any) -> None:
    await stack.sets.start(EmojiSetInput(**{**SMALL, **overrides}), set_id=set_id)


async def wait_until(stack: Stack, set_id: str, done: Any, timeout: float = 60) -> EmojiSetState:
    async with asyncio.timeout(timeout):
        while not done(state := await stack.sets.state(set_id)):
            await asyncio.sleep(0.1)
    return state


def action(state: EmojiSetState, name: str) -> ActionState:
    found = state.action(name)
    assert found is not None
    return found


async def cancel_requested(stack: Stack, set_id: str) -> list[str]:
    """The activity types whose cancellation the set requested, in the order it did."""
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    scheduled = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    }
    return [
        scheduled[event.activity_task_cancel_requested_event_attributes.scheduled_event_id]
        for event in history.events
        if event.HasField("activity_task_cancel_requested_event_attributes")
    ]


async def test_a_dropped_emoji_stops_its_work_and_the_set_completes_without_it(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, generator=SlowRegenerations.name)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    # In flight for heart: a new take (background work) and a frame edit (a reviewer's message, awaited).
    await stack.sets.regenerate_action(RegenerateActionInput(emoji="heart", motion_prompt="a slow wave"), set_id=set_id)
    handle = stack.client.get_workflow_handle(set_id)
    edit = await handle.start_update(
        "regenerate_frame",
        RegenerateFrameInput(emoji="heart", frame=0, prompt="a bigger heart"),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    await wait_until(stack, set_id, lambda s: action(s, "heart").takes[-1].status is TakeStatus.ANIMATING)

    dropped = await stack.sets.drop_action(DropActionInput(action="heart", reviewer="ana"), set_id=set_id)

    assert (dropped.action, dropped.dropped_by) == ("heart", "ana")
    with pytest.raises(WorkflowUpdateFailedError) as stopped:
        await edit.result()
    assert "heart was dropped from the set" in str(stopped.value.cause)
    state = await stack.sets.state(set_id)
    assert [a.name for a in state.actions] == ["wave"] and state.dropped == [dropped]
    assert state.frames_total() == 4 and state.awaiting() == ["final_review"]
    assert sorted(await cancel_requested(stack, set_id)) == ["edit_frame", "generate_clip"]
    stopped_calls = [(c.role.value, c.action) for c in state.ledger.calls if c.outcome is CallOutcome.STOPPED]
    assert sorted(stopped_calls) == [("clip", "heart"), ("edit_frame", "heart")], "the provider may bill them"
    metadata = await stack.client.get_workflow_handle(set_id).query("__temporal_workflow_metadata")
    assert "| ~~heart~~ | dropped by ana |" in metadata.current_details  # the Web UI's current details
    with pytest.raises(MessageRejected, match="unknown emoji 'heart'"):
        await stack.sets.drop_action(DropActionInput(action="heart"), set_id=set_id)

    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)

    assert result.status == "completed" and [emoji.pose for emoji in result.emojis] == ["wave"]


async def test_a_drop_while_animating_leaves_the_other_actions_running(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["wave", "laugh", "cry"], frames_per_emoji=24, clip_seconds=4, image_size=256)
    await wait_until(stack, set_id, lambda s: action(s, "cry").stage in (ActionStage.ANIMATING, ActionStage.MATTING))

    await stack.sets.drop_action(DropActionInput(action="cry", reason="off-brand"), set_id=set_id)

    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW, timeout=180)
    assert [a.name for a in state.actions] == ["wave", "laugh"]
    assert all(a.stage is ActionStage.READY for a in state.actions)
    assert [(d.action, d.dropped_by, d.reason) for d in state.dropped] == [("cry", "reviewer", "off-brand")]
    await stack.sets.cancel(set_id)


async def test_drops_that_cannot_be_are_refused(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["wave"])
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)

    with pytest.raises(MessageRejected, match="wave is the set's last emoji: cancel the set instead"):
        await stack.sets.drop_action(DropActionInput(action="wave"), set_id=set_id)
    with pytest.raises(MessageRejected, match="unknown emoji 'cry'"):
        await stack.sets.drop_action(DropActionInput(action="cry"), set_id=set_id)
    with pytest.raises(ValueError, match="should match pattern"):
        DropActionInput(action="../wave")

    await stack.sets.approve(set_id)
    await stack.sets.result(set_id)
    with pytest.raises(SetClosed, match="the set has ended"):
        await stack.sets.drop_action(DropActionInput(action="wave"), set_id=set_id)


async def test_two_drops_at_once_never_empty_the_set(stack: Stack, set_id: str) -> None:
    await start(stack, set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)

    async with asyncio.timeout(30):  # a set emptied by both would fail its workflow tasks: the updates hang
        outcomes = await asyncio.gather(
            stack.sets.drop_action(DropActionInput(action="wave"), set_id=set_id),
            stack.sets.drop_action(DropActionInput(action="heart"), set_id=set_id),
            return_exceptions=True,
        )

    refused = [o for o in outcomes if isinstance(o, MessageRejected)]
    assert len(refused) == 1 and "last emoji" in str(refused[0])
    assert len((await stack.sets.state(set_id)).actions) == 1
    await stack.sets.cancel(set_id)


async def test_a_drop_that_would_break_an_export_target_needs_force(stack: Stack, set_id: str) -> None:
    eight = ["happy", "laugh", "cry", "wave", "wink", "angry", "jump", "nod"]
    await start(
        stack,
        set_id,
        actions=eight,
        export_targets=[ExportTarget.GENERIC, ExportTarget.LINE_EMOJI],
        review=ReviewPolicy(),  # start frames wait for review: nothing animates
    )
    state = await wait_until(
        stack, set_id, lambda s: all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in s.actions)
    )
    assert state.export_refusals == []

    refused = r"nod was not dropped: the set would have 7 emoji and then line-emoji: .*8"
    with pytest.raises(MessageRejected, match=refused):
        await stack.sets.drop_action(DropActionInput(action="nod"), set_id=set_id)
    assert len((await stack.sets.state(set_id)).actions) == 8

    await stack.sets.drop_action(DropActionInput(action="nod", force=True), set_id=set_id)

    state = await stack.sets.state(set_id)
    assert len(state.actions) == 7 and [r.partition(":")[0] for r in state.export_refusals] == ["line-emoji"]
    assert [a.name for a in state.actions if a.stage is ActionStage.AWAITING_START_FRAME_REVIEW] == eight[:7]
    await stack.sets.cancel(set_id)


async def test_popcon_drop_drops_an_emoji_and_says_what_is_left(stack: Stack, set_id: str) -> None:
    await start(stack, set_id, actions=["wave", "heart", "nod"])
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    env = {"POPCON_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host, "COLUMNS": "200"}

    reason = "off-brand [/] | not ours"  # rich markup and a table's column break, shown as typed
    said = await asyncio.to_thread(CliRunner().invoke, cli, ["drop", set_id, "heart", "--reason", reason], env=env)
    refused = await asyncio.to_thread(CliRunner().invoke, cli, ["drop", set_id, "Heart!"], env=env)

    assert said.exit_code == 0 and "heart dropped; the set has wave, nod" in said.output
    assert refused.exit_code == 1 and "error:" in refused.output and "action" in refused.output
    shown = await asyncio.to_thread(CliRunner().invoke, cli, ["state", set_id], env=env)
    assert re.search(r"heart\s+.*dropped\s+.*by reviewer: off-brand \[/\] \| not ours", shown.output)
    metadata = await stack.client.get_workflow_handle(set_id).query("__temporal_workflow_metadata")
    assert "| ~~heart~~ | dropped by reviewer (off-brand [/] \\| not ours) |" in metadata.current_details
    await stack.sets.cancel(set_id)


@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False)
class BuildWithoutDrop:
    """A set's workflow as a build before ``drop_action`` ran it: it knows no such update."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> None:
        await workflow.wait_condition(lambda: False)


async def test_a_set_on_a_build_without_drop_action_says_so(stack: Stack, set_id: str) -> None:
    queue = f"older-build-{set_id}"
    async with Worker(stack.client, task_queue=queue, workflows=[BuildWithoutDrop]):
        await stack.client.start_workflow(WORKFLOW_TYPE, {}, id=set_id, task_queue=queue)

        with pytest.raises(MessageRejected, match="this set runs on an older build that has no drop_action"):
            await stack.sets.drop_action(DropActionInput(action="wave"), set_id=set_id)

        await stack.client.get_workflow_handle(set_id).terminate("test over")
