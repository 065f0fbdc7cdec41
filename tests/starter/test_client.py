"""The typed client on the real stack: a set's state, and what it says of an id that names no set."""

from __future__ import annotations

import io
from typing import Any, NoReturn

import pytest
from PIL import Image
from temporalio.client import WorkflowHandle

from starter.client import SetNotFound
from testkit.stack import Stack
from workflows import keys
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    EmojiFramesRef,
    EmojiSetInput,
    ExportSetInput,
    ExportTarget,
    ReviewPolicy,
    StagePolicy,
)
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
