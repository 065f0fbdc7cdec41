"""The contract's compatibility rules (docs/deploy.md): readers of results ignore fields they do not know, requests
refuse them, and a client's requests carry only the fields it set, so builds of different age work together."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from core.connection import sending_set_fields
from testkit.histories import payload_positions
from testkit.stack import Stack, wait_for_phase
from workflows import keys
from workflows.contract import (
    ArtifactRef,
    EmojiSetInput,
    EmojiSetState,
    FrameState,
    MatteSlotInput,
    MatteSlotOutput,
    Phase,
    PickCandidateInput,
    RefineMatteInput,
    RefineMode,
    RefinePoint,
    RefineTarget,
    ReviewPolicy,
    StagePolicy,
)

RESULTS = [
    hint
    for position, hint in payload_positions().items()
    if position.endswith(" result") or position == "workflow EmojiSet input 1"
]
"""What a reader of another build's payload decodes: every result, and the state carried across continue-as-new."""
REQUESTS = [
    hint
    for position, hint in payload_positions().items()
    if position.startswith(("update ", "activity ")) and position.endswith(" input")
]


def _models(hint: Any, seen: set[type[BaseModel]] | None = None) -> set[type[BaseModel]]:
    """Every model a type hint reaches through fields, containers and unions."""
    seen = set() if seen is None else seen
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        if hint not in seen:
            seen.add(hint)
            for field in hint.model_fields.values():
                _models(field.annotation, seen)
        return seen
    if typing.get_origin(hint) in (typing.Union, types.UnionType, list, tuple, dict, set, typing.Annotated):
        for arg in typing.get_args(hint):
            _models(arg, seen)
    return seen


def test_every_model_a_result_holds_ignores_fields_it_does_not_know() -> None:
    """A set pinned to an older build reads a newer GPU worker's result; an older client reads a newer set's state."""
    models = set().union(*(_models(hint) for hint in RESULTS))
    strict = sorted(model.__name__ for model in models if model.model_config.get("extra") != "ignore")
    assert len(models) > 20
    assert not strict, f"results that would refuse a newer build's field: {strict}"


def test_every_request_refuses_fields_it_does_not_know() -> None:
    """A message or an activity input with a field its reader lacks asks for something that reader cannot do."""
    lenient = sorted(
        hint.__name__ for hint in REQUESTS if hint is not None and hint.model_config.get("extra") != "forbid"
    )
    assert len(REQUESTS) > 25
    assert not lenient, f"requests that would drop a field they do not know: {lenient}"


def test_a_newer_workers_result_decodes_without_its_new_fields() -> None:
    reference = ArtifactRef(uri="file:///a.png", sha256="0" * 64, size_bytes=1, media_type="image/png")
    newer = {
        "results": [
            {
                "output": {
                    "matte": {**reference.model_dump(), "etag": "x"},
                    "score": 0.9,
                    "pipeline": "p",
                    "device": "cpu",
                    "precision": "fp32",
                    "elapsed_ms": 1.0,
                    "gpu_ms": 2.0,
                }
            }
        ],
        "worker": "gpu-7",
    }
    [payload] = pydantic_data_converter.payload_converter.to_payloads([newer])

    [output] = pydantic_data_converter.payload_converter.from_payloads([payload], [MatteSlotOutput])

    assert output.results[0].output is not None and output.results[0].output.matte == reference


def test_a_start_request_refuses_an_unknown_field_and_a_state_holding_one_still_reads() -> None:
    with pytest.raises(ValidationError, match="colour\n  Extra inputs are not permitted"):
        EmojiSetInput.of_request({"character_prompt": "a cat", "colour": "red"})

    read = EmojiSetInput.model_validate({"character_prompt": "a cat", "colour": "red"})

    assert read.character_prompt == "a cat"
    assert EmojiSetState.model_config.get("extra") == "ignore"


class PickFromANewerClient(PickCandidateInput):
    """``pick_candidate``'s input as a later release might have it, with a field this build does not know."""

    note: str = ""


async def test_a_newer_clients_message_reaches_an_older_set_unless_it_asks_for_what_the_set_cannot_do(
    stack: Stack, set_id: str
) -> None:
    await stack.sets.start(
        EmojiSetInput(
            character_prompt="a cat",
            actions=["wave"],
            frames_per_emoji=2,
            neighbours=1,
            clip_seconds=1.0,
            clip_fps=12,
            image_size=64,
            review=ReviewPolicy(start_frames=StagePolicy.AUTO),
        ),
        set_id=set_id,
    )
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    newer = sending_set_fields(stack.client).get_workflow_handle(set_id)
    everything = stack.client.get_workflow_handle(set_id)
    pick = PickFromANewerClient(emoji="wave", frame=0, candidate=1)

    slot = await newer.execute_update("pick_candidate", pick, result_type=FrameState)

    assert slot.pick == 1
    with pytest.raises(WorkflowUpdateFailedError) as sent_all:
        await everything.execute_update("pick_candidate", pick, result_type=FrameState)
    with pytest.raises(WorkflowUpdateFailedError) as asked_more:
        await newer.execute_update(
            "pick_candidate", PickFromANewerClient(emoji="wave", frame=0, candidate=1, note="x"), result_type=FrameState
        )
    for refused in (sent_all, asked_more):
        assert "note" in str(refused.value.cause) and "Extra inputs are not permitted" in str(refused.value.cause)
    await stack.sets.cancel(set_id)


def test_a_gpu_request_writes_only_cut_outs_of_one_set() -> None:
    ref = ArtifactRef(uri="file:///a.png", sha256="0" * 64, size_bytes=1, media_type="image/png")
    mine, other = (
        keys.candidate_key("mine", "wave", 0, 0, "matte.png"),
        keys.candidate_key("other", "wave", 0, 1, "matte.png"),
    )
    MatteSlotInput(pipeline="classical", candidates=[ref], output_keys=[mine])
    with pytest.raises(ValidationError, match="lie in one set, these in 2"):
        MatteSlotInput(pipeline="classical", candidates=[ref, ref], output_keys=[mine, other])
    with pytest.raises(ValidationError, match="should match pattern"):
        MatteSlotInput(pipeline="classical", candidates=[ref], output_keys=[keys.character_key("mine", 0)])
    version = keys.matte_version_key("mine", "wave", 0, 0, 2)
    other_version = keys.matte_version_key("other", "wave", 0, 0, 2)
    target = {"source": ref, "matte": ref}
    with pytest.raises(ValidationError, match="lie in one set, these in 2"):
        RefineMatteInput(
            frames=[RefineTarget(**target, output_key=version), RefineTarget(**target, output_key=other_version)],
            points=[RefinePoint(x=0, y=0, foreground=True)],
            mode=RefineMode.ERASE,
        )
