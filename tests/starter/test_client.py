"""The typed client on the real stack: a set's state, and what it says of an id that names no set."""

from __future__ import annotations

import asyncio
import io
from typing import Any, NoReturn

import pydantic
import pytest
from PIL import Image
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.worker import Worker
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.client import SetNotFound
from testkit.stack import Stack
from workflows import keys
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    EmojiFramesRef,
    EmojiSetInput,
    ExportSetInput,
    ExportTarget,
    ReviewPolicy,
    StagePolicy,
)
from workflows.contract.base import _Request
from workflows.export_set import ExportSetWorkflow


def rgba_png(size: int = 64) -> bytes:
    """An opaque orange square on a transparent frame: a cut-out an export packs."""
    picture = Image.new("RGBA", (size, size))
    picture.paste((240, 120, 40, 255), (size // 4, size // 4, 3 * size // 4, 3 * size // 4))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


async def test_the_state_of_an_export_is_no_sets_state(stack: Stack, set_id: str) -> None:
    """An ExportSet's id (a review page's address may name one) is no set: ``SetNotFound``, not the failed query."""
    frame = stack.store.put(keys.candidate_key(set_id, "wave", 0, 0, "matte.png"), rgba_png(), "image/png")
    emoji = EmojiFramesRef(pose="wave", frames=[frame, frame], frame_duration_ms=100)
    export_id = f"{set_id}-export"
    await stack.client.execute_workflow(
        ExportSetWorkflow.run,
        ExportSetInput(set_id=set_id, targets=[ExportTarget.SLACK], emojis=[emoji]),
        id=export_id,
        task_queue=ORCHESTRATION_TASK_QUEUE,
    )

    with pytest.raises(SetNotFound, match=f"^no emoji set found: {export_id} is a workflow of type ExportSet, not an"):
        await stack.sets.state(export_id)


async def test_the_state_of_an_id_no_workflow_has_is_not_found(stack: Stack, set_id: str) -> None:
    with pytest.raises(SetNotFound, match=r"^no emoji set found: "):
        await stack.sets.state(set_id)


async def test_a_sets_state_is_read_without_looking_up_its_type(
    stack: Stack, set_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await stack.sets.start(
        EmojiSetInput(
            character_prompt="a round orange cat",
            actions=["wave"],
            frames_per_emoji=2,
            review=ReviewPolicy(character=StagePolicy.HUMAN),
        ),
        set_id=set_id,
    )

    def no_describe(*_: Any, **__: Any) -> NoReturn:
        raise AssertionError("a set's state was read with a describe")

    with monkeypatch.context() as patched:
        patched.setattr(WorkflowHandle, "describe", no_describe)
        state = await stack.sets.state(set_id)
    await stack.sets.cancel(set_id)

    assert state.set_id == set_id


async def test_a_failed_set_says_why_in_its_state_popcon_state_and_the_web_ui(stack: Stack, set_id: str) -> None:
    request = EmojiSetInput(character_prompt="a cat", actions=["wave"], matting_pipeline="nonsense-pipeline")
    await stack.sets.start(request, set_id=set_id)
    with pytest.raises(WorkflowFailureError):
        await stack.sets.result(set_id)

    state = await stack.sets.state(set_id)
    assert state.failure is not None and state.failure.activity == "describe_pipeline"
    assert state.failure.kind == "InvalidRequest"
    assert "unknown matting step 'nonsense-pipeline'" in state.failure.message
    assert state.awaiting() == []
    env = {"POPCON_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host, "COLUMNS": "200"}
    shown = await asyncio.to_thread(CliRunner().invoke, cli, ["state", set_id], env=env)
    assert f"{set_id} failed" in shown.output and "failed while character in describe_pipeline" in shown.output
    metadata = await stack.client.get_workflow_handle(set_id).query("__temporal_workflow_metadata")
    assert "**Failed** while character in describe_pipeline: unknown matting step" in metadata.current_details


async def test_a_set_that_ended_while_it_waited_is_not_listed_as_waiting(stack: Stack, set_id: str) -> None:
    request = EmojiSetInput(character_prompt="a cat", actions=["wave"], review=ReviewPolicy())
    await stack.sets.start(request, set_id=set_id)
    while "start_frame_review" not in (await stack.sets.state(set_id)).awaiting():
        await asyncio.sleep(0.1)
    await stack.client.get_workflow_handle(set_id).terminate("an operator stopped it")  # its attributes stay

    [ended] = [s for s in await stack.sets.list_sets(limit=500) if s.set_id == set_id]
    assert (ended.outcome, ended.awaiting) == ("terminated", [])
    assert set_id not in [s.set_id for s in await stack.sets.list_sets(awaiting="start_frame_review", limit=500)]


class CancelBefore050(_Request):
    """``cancel``'s input before cancels were signed (release 0.4.0 and older)."""

    reason: str = ""


@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False, failure_exception_types=[pydantic.ValidationError])
class BuildWithUnsignedCancels:
    """A set's workflow as a build before 0.5.0 ran it (a pydantic error refuses a message, as the real one does):
    its cancel takes no reviewer."""

    def __init__(self) -> None:
        self.reason: str | None = None

    @workflow.run
    async def run(self, request: dict[str, Any]) -> str:
        await workflow.wait_condition(lambda: self.reason is not None)
        return self.reason or ""

    @workflow.update(name="cancel")
    def cancel(self, cancellation: CancelBefore050) -> None:
        self.reason = cancellation.reason


async def test_a_signed_cancel_reaches_a_set_on_a_build_that_signs_none(stack: Stack, set_id: str) -> None:
    queue = f"older-build-{set_id}"
    async with Worker(stack.client, task_queue=queue, workflows=[BuildWithUnsignedCancels]):
        await stack.client.start_workflow(WORKFLOW_TYPE, {}, id=set_id, task_queue=queue)

        await stack.sets.cancel(set_id, reason="wrong cat", reviewer="bo")

        assert await stack.client.get_workflow_handle(set_id).result() == "wrong cat"
