"""Bad input at the set's edges, for the rows of docs/bad-input.md that no other test backs: set inputs the client
refuses and a raw start fails on, pipeline names the GPU worker's check refuses, references to changed or missing
bytes, messages the validators refuse (against the real dev server and workers, or, for states a live set reaches
only by chance, against a validator directly), and the CLI's one-line errors."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any, cast

import pytest
from PIL import Image
from pydantic import ValidationError
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from core.artifacts import FileArtifactStore
from starter import cli
from starter.client import EmojiSetClient, MessageRejected
from testkit.stack import Stack, wait_for_phase
from workflows.contract import (
    MAX_CANDIDATES_PER_FRAME_TOTAL,
    MAX_CANDIDATES_PER_SET,
    MAX_TAKES_PER_ACTION_TOTAL,
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    ActionSpec,
    ActionStage,
    ActionState,
    ArtifactRef,
    Candidate,
    CandidateStatus,
    EmojiSetInput,
    EmojiSetState,
    FailureType,
    FrameState,
    Phase,
    PickCandidateInput,
    PickTakeInput,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    ReviewPolicy,
    StagePolicy,
    TakeState,
    TakeStatus,
)
from workflows.emoji_set import EmojiSetWorkflow
from workflows.presets import PRESETS

CAT = "a round orange cat with a blue scarf"
SMALL: dict[str, Any] = {
    "actions": ["wave", "heart"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
}
REF = {"uri": "file:///artifacts/x.png", "sha256": "0" * 64, "size_bytes": 1, "media_type": "image/png"}
"""A well-formed reference, as JSON: these inputs fail before anything reads it."""


def picture() -> bytes:
    image = Image.new("RGB", (300, 200), (40, 160, 220))
    image.paste((250, 120, 30), (100, 40, 200, 180))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def scheduled_activities(history: Any) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def set_failure(failure: pytest.ExceptionInfo[WorkflowFailureError]) -> ApplicationError:
    """The error a failed set ended with, checked to be an ApplicationError."""
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError), cause
    return cause


# --- Set inputs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"character_image": REF}, "give the character either as character_prompt or as character_image"),
        (
            {"character_prompt": None, "character_image": {**REF, "media_type": "image/svg+xml"}},
            "character_image is image/svg+xml; uploads are one of ['image/bmp', 'image/gif', 'image/jpeg',",
        ),
        (
            {"character_prompt": None, "character_image": {**REF, "sha256": "abc"}},
            "character_image.sha256\n  String should match pattern '^[0-9a-f]{64}$'",
        ),
        ({"character_prompt": "x" * 801}, "String should have at most 800 characters"),
        (
            {"export_targets": ["instagram"]},
            "Input should be 'generic', 'line-emoji', 'line-sticker', 'telegram', 'discord' or 'slack'",
        ),
        ({"export_targets": ["slack", "slack"]}, "export targets must be unique, got ['slack', 'slack']"),
        ({"export_targets": []}, "List should have at least 1 item"),
        (
            {"actions": list(PRESETS), "custom_actions": [{"name": "extra", "pose_prompt": "p", "motion_prompt": "m"}]},
            "at most 24 actions per set, got 25",
        ),
        (
            {"actions": list(PRESETS), "frames_per_emoji": 26, "neighbours": 0},
            "a set has at most 600 frames, this one asks for 624",
        ),
        (
            {"custom_actions": [{"name": "spin", "pose_prompt": "p", "motion_prompt": "m", "frame_duration_ms": 5}]},
            "custom_actions.0.frame_duration_ms\n  Input should be greater than or equal to 20",
        ),
        ({"character_candidates": 5}, "character_candidates\n  Input should be less than or equal to 4"),
        ({"start_frame_candidates": 0}, "start_frame_candidates\n  Input should be greater than or equal to 1"),
        ({"neighbours": 5}, "neighbours\n  Input should be less than or equal to 4"),
        ({"clip_seconds": 11}, "clip_seconds\n  Input should be less than or equal to 10"),
        ({"image_size": 2048}, "image_size\n  Input should be less than or equal to 1024"),
        ({"max_parallel_matting": 0}, "max_parallel_matting\n  Input should be greater than or equal to 1"),
        ({"seed": -1}, "seed\n  Input should be greater than or equal to 0"),
        ({"generator": "Dash Scope"}, "generator\n  String should match pattern '^[a-z0-9_-]+$'"),
        ({"review": {"deadline": "P31D"}}, "review.deadline\n  Input should be less than or equal to 30 days"),
        ({"review": {"final": "maybe"}}, "review.final\n  Input should be 'auto' or 'human'"),
    ],
    ids=[
        "prompt-and-image",
        "upload-media-type",
        "malformed-sha256",
        "long-prompt",
        "unknown-target",
        "duplicate-targets",
        "no-targets",
        "25-actions",
        "624-frames",
        "frame-duration",
        "5-characters",
        "0-start-frames",
        "5-neighbours",
        "11-s-clip",
        "2048-px",
        "no-matting-slots",
        "negative-seed",
        "generator-name",
        "31-day-deadline",
        "unknown-policy",
    ],
)
async def test_an_invalid_set_input_is_refused_before_start_and_fails_a_raw_start(
    stack: Stack, set_id: str, overrides: dict[str, Any], message: str
) -> None:
    """The client builds EmojiSetInput before it starts anything; a raw start (CLI, another SDK) fails the set with
    the same message, typed ValidationError."""
    raw = {"character_prompt": CAT, **overrides}
    with pytest.raises(ValidationError, match=re.escape(message)):
        EmojiSetInput.model_validate(raw)

    handle = await stack.client.start_workflow(
        WORKFLOW_TYPE, raw, id=set_id, task_queue=ORCHESTRATION_TASK_QUEUE, result_type=dict
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()

    cause = set_failure(failure)
    assert cause.type == "ValidationError" and message in cause.message
    assert scheduled_activities(await handle.fetch_history()) == [], "nothing ran"


# --- The check step ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("classical:fancy", "'classical' is an alias of floodfill+defringe and takes no variant"),
        ("floodfill:nope", "step 'floodfill' has no variant 'nope' (variants: none)"),
        ("defringe", "pipeline 'defringe' starts with defringe, a refiner: it needs a coarse step before it"),
        ("floodfill+defringe+defringe", "pipeline 'floodfill+defringe+defringe' uses defringe more than once"),
    ],
)
async def test_a_pipeline_the_gpu_worker_cannot_build_fails_the_set_before_any_work(
    stack: Stack, set_id: str, pipeline: str, message: str
) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt=CAT, matting_pipeline=pipeline, **SMALL), set_id=set_id)

    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)

    cause = set_failure(failure)
    assert cause.type == FailureType.INVALID_REQUEST.value and cause.non_retryable
    assert message in cause.message
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    assert sorted(scheduled_activities(history)) == [
        "check_exports",
        "check_generator",
        "describe_deployment",
        "describe_pipeline",
    ]


# --- References ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tampered", ["wrong-sha256", "missing", "not-a-picture"])
async def test_a_reference_to_changed_missing_or_unusable_bytes_fails_the_set_at_its_character(
    stack: Stack, set_id: str, tampered: str
) -> None:
    """Changed or missing bytes are retried (a shared store may show a fresh write late), then fail the set after the
    step's three attempts; bytes that are no picture (a backend that skipped the client's check) fail it at once."""
    upload = stack.sets.upload(picture())
    if tampered == "wrong-sha256":
        crafted = upload.model_copy(update={"sha256": "0" * 64})
        shown = re.escape(f"ArtifactError: {upload.uri}: the stored content does not match the reference's sha256")
        attempts = 3
    elif tampered == "missing":
        crafted = upload.model_copy(update={"uri": f"{stack.store.root.as_uri()}/uploads/{set_id}-missing.png"})
        shown = re.escape(f"ArtifactError: {crafted.uri}: artifact is missing")
        attempts = 3
    else:
        crafted = stack.store.put(f"uploads/{set_id}", b"GIF89a but not really", "image/gif")
        shown = re.escape("InvalidUpload: the upload is not a picture in an accepted format (PNG, JPEG, WebP, GIF, BMP")
        attempts = 1
    await stack.sets.start(EmojiSetInput(character_prompt=None, character_image=crafted, **SMALL), set_id=set_id)

    with pytest.raises(WorkflowFailureError) as failure:
        await stack.sets.result(set_id)

    cause = set_failure(failure)
    assert cause.type == FailureType.INVALID_REQUEST.value and cause.non_retryable
    assert re.match(f"the character could not be made: {shown}", cause.message), cause.message
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert max(e.attempt for e in started) == attempts
    assert "generate_start_frame" not in scheduled_activities(history)


# --- Messages: against a live set ----------------------------------------------------------------------------------


async def test_messages_that_do_not_fit_the_stage_are_rejected_and_change_nothing(stack: Stack, set_id: str) -> None:
    review = ReviewPolicy(character=StagePolicy.HUMAN, start_frames=StagePolicy.HUMAN)
    await stack.sets.start(EmojiSetInput(character_prompt=CAT, review=review, **SMALL), set_id=set_id)
    handle = stack.client.get_workflow_handle(set_id)
    try:
        await wait_for_phase(stack.sets, set_id, Phase.AWAITING_CHARACTER_REVIEW)
        sets, sid = stack.sets, set_id
        for call, message in [
            (
                lambda: sets.pick_start_frame(set_id, "wave", 0),
                "wave's start frame does not await review (wave is start_frame)",
            ),
            (lambda: sets.approve_start_frames(set_id, ["wave"]), "wave's start frame does not await review"),
            (
                lambda: sets.regenerate_start_frame(RegenerateStartFrameInput(action="wave", prompt="x"), set_id=sid),
                "wave is start_frame with its start frame being made; regenerate_action makes a new take",
            ),
            (
                lambda: sets.regenerate_action(RegenerateActionInput(emoji="wave", motion_prompt="x"), set_id=set_id),
                "wave has no approved start frame yet: approve or regenerate it first",
            ),
            (
                lambda: sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=0, prompt="x"), set_id=set_id),
                "wave frame 0 has no frame to edit yet (its clip is not in)",
            ),
            (
                lambda: sets.pick(PickCandidateInput(emoji="wave", frame=0, candidate=0), set_id=set_id),
                "wave frame 0 has no candidate 0; candidates: []",
            ),
            (lambda: sets.pick_take(set_id, "wave", 0), "wave has no take 0; takes: []"),
        ]:
            with pytest.raises(MessageRejected, match=re.escape(message)):
                await call()

        await sets.approve_character(set_id)
        state = await wait_for_phase(sets, set_id, Phase.AWAITING_START_FRAME_REVIEW)
        async with asyncio.timeout(60):
            while not all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in state.actions):
                await asyncio.sleep(0.1)
                state = await sets.state(set_id)
        for call, message in [
            (
                lambda: sets.approve_character(set_id),
                "the character does not await review (the set is awaiting_start_frame_review)",
            ),
            (lambda: sets.pick_start_frame(set_id, "wave", 7), "wave has no start frame 7; candidates: [0, 1]"),
            (lambda: sets.pick_start_frame(set_id, "cry", 0), "unknown emoji 'cry'; this set has ['wave', 'heart']"),
            (
                lambda: sets.regenerate_action(RegenerateActionInput(emoji="wave", motion_prompt="x"), set_id=set_id),
                "wave has no approved start frame yet",
            ),
        ]:
            with pytest.raises(MessageRejected, match=re.escape(message)):
                await call()

        # Payloads that do not fit the message's model: the client cannot build them, a raw update is rejected.
        with pytest.raises(ValidationError, match="greater than or equal to 0"):
            PickCandidateInput(emoji="wave", frame=-1, candidate=0)
        with pytest.raises(ValidationError, match="at most 500 characters"):
            RegenerateActionInput(emoji="wave", motion_prompt="x" * 501)
        for name, payload, message in [
            ("pick_start_frame", {"action": "wave", "candidate": 0, "colour": "red"}, "Extra inputs are not permitted"),
            ("pick_candidate", {"emoji": "wave", "frame": -1, "candidate": 0}, "greater than or equal to 0"),
            ("regenerate_start_frame", {"action": "wave", "prompt": "x", "candidates": 5}, "less than or equal to 4"),
            ("pick_take", {"emoji": "wave"}, "Field required"),
        ]:
            with pytest.raises(WorkflowUpdateFailedError) as rejected:
                await handle.execute_update(name, payload)
            assert message in str(rejected.value.cause)

        after = await sets.state(set_id)
        assert after.actions == state.actions and after.phase is Phase.AWAITING_START_FRAME_REVIEW
    finally:
        await handle.terminate("test done")


# --- Messages: validators in states a live set reaches only by chance ----------------------------------------------

SOURCE = ArtifactRef.model_validate(REF)


def a_set(*, frames: int = 2, neighbours: int = 0, phase: Phase = Phase.AWAITING_REVIEW) -> EmojiSetState:
    """A set of one action, ``wave``, animated from an approved start frame, with no candidates yet."""
    input = EmojiSetInput(character_prompt=CAT, actions=["wave"], frames_per_emoji=frames, neighbours=neighbours)
    action = ActionState(
        action=ActionSpec.of_preset(PRESETS["wave"]),
        stage=ActionStage.READY,
        start_frame_approved_by="auto",
        frames=[FrameState(index=i) for i in range(frames)],
    )
    return EmojiSetState(set_id="set-under-test", input=input, phase=phase, actions=[action])


def candidates(count: int, status: CandidateStatus = CandidateStatus.READY, **fields: Any) -> list[Candidate]:
    return [Candidate(index=i, source=SOURCE, take=0, status=status, **fields) for i in range(count)]


def validate(state: EmojiSetState, update: str, request: object) -> None:
    """Run the validator Temporal runs before update ``update`` on a set in ``state`` (a resumed run's state, so no
    workflow context is needed to build it)."""
    validator = workflow._Definition.must_from_class(EmojiSetWorkflow).updates[update].validator
    assert validator is not None
    validator(EmojiSetWorkflow(state.input, state), request)


def test_a_candidate_that_is_not_matted_is_not_picked() -> None:
    state = a_set()
    frame = state.actions[0].frames[0]
    frame.candidates = [
        *candidates(1, CandidateStatus.MATTING),
        Candidate(
            index=1,
            source=SOURCE,
            status=CandidateStatus.FAILED,
            error="matting failed: UnsupportedImage: the frame border is not a plain background",
        ),
    ]
    with pytest.raises(ValueError, match=re.escape("wave frame 0 candidate 0 is matting, not ready")):
        validate(state, "pick_candidate", PickCandidateInput(emoji="wave", frame=0, candidate=0))
    with pytest.raises(
        ValueError, match=re.escape("wave frame 0 candidate 1 is failed, not ready: matting failed: UnsupportedImage")
    ):
        validate(state, "pick_candidate", PickCandidateInput(emoji="wave", frame=0, candidate=1))


def test_a_take_that_is_not_ready_is_not_picked() -> None:
    state = a_set()
    action = state.actions[0]
    action.takes = [
        TakeState(index=0, status=TakeStatus.READY),
        TakeState(index=1, status=TakeStatus.ANIMATING),
        TakeState(index=2, status=TakeStatus.FAILED, error="InvalidClip: wave take 2: the clip is 0 bytes"),
    ]
    for frame in action.frames:
        frame.candidates = candidates(1, CandidateStatus.MATTING)
    for take, message in [
        (1, "wave take 1 is animating"),
        (2, "wave take 2 is failed: InvalidClip: wave take 2: the clip is 0 bytes"),
        (0, "wave take 0 has no usable frame yet (its frames are being matted)"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            validate(state, "pick_take", PickTakeInput(emoji="wave", take=take))


def test_an_action_with_the_most_takes_gets_no_new_one() -> None:
    state = a_set()
    state.actions[0].takes = [TakeState(index=i, status=TakeStatus.READY) for i in range(MAX_TAKES_PER_ACTION_TOTAL)]
    with pytest.raises(ValueError, match=re.escape("wave already has 8 takes, the most an action may have")):
        validate(state, "regenerate_action", RegenerateActionInput(emoji="wave", motion_prompt="x"))


def test_a_full_frame_slot_gets_no_new_candidates() -> None:
    state = a_set()
    state.actions[0].frames[0].candidates = candidates(MAX_CANDIDATES_PER_FRAME_TOTAL)
    state.actions[0].frames[1].candidates = candidates(1)
    message = f"wave frame 0 would exceed {MAX_CANDIDATES_PER_FRAME_TOTAL} candidates"
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "regenerate_frame", RegenerateFrameInput(emoji="wave", frame=0, prompt="x", candidates=1))
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "regenerate_action", RegenerateActionInput(emoji="wave", motion_prompt="x"))
    validate(state, "regenerate_frame", RegenerateFrameInput(emoji="wave", frame=1, prompt="x", candidates=1))  # room


def test_a_full_set_gets_no_new_candidates() -> None:
    state = a_set()
    for frame in state.actions[0].frames:
        frame.candidates = candidates(MAX_CANDIDATES_PER_SET // 2)
    message = f"the set would exceed {MAX_CANDIDATES_PER_SET} candidates"
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "regenerate_action", RegenerateActionInput(emoji="wave", motion_prompt="x"))
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "regenerate_frame", RegenerateFrameInput(emoji="wave", frame=0, prompt="x", candidates=1))


@pytest.mark.parametrize("phase", [Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED, Phase.ASSEMBLING])
def test_a_closed_set_takes_no_picks_or_regenerations(phase: Phase) -> None:
    state = a_set(phase=phase)
    state.actions[0].frames[0].candidates = candidates(1)
    with pytest.raises(ValueError, match=re.escape(f"the set is {phase.value}: picks are closed")):
        validate(state, "pick_candidate", PickCandidateInput(emoji="wave", frame=0, candidate=0))
    with pytest.raises(ValueError, match=re.escape(f"the set is {phase.value}: regenerations are closed")):
        validate(state, "regenerate_frame", RegenerateFrameInput(emoji="wave", frame=0, prompt="x"))


# --- The CLI -------------------------------------------------------------------------------------------------------


def test_the_cli_prints_a_refused_input_or_upload_on_one_line_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``popcon start`` builds the same EmojiSetInput and uploads through the same client: nothing is started."""
    client = EmojiSetClient(cast(Client, None), store=FileArtifactStore(tmp_path / "store"))

    async def offline() -> EmojiSetClient:
        return client

    monkeypatch.setattr(cli, "_client", offline)
    runner = CliRunner()
    a_picture, not_a_picture = tmp_path / "cat.png", tmp_path / "cat-in-words.png"
    a_picture.write_bytes(picture())
    not_a_picture.write_bytes(b"a cat, in words")

    for args, message in [
        (["--prompt", CAT, "--frames", "49"], "frames_per_emoji\n  Input should be less than or equal to 48"),
        (["--prompt", CAT, "--action", "moonwalk"], "unknown action preset(s) ['moonwalk']"),
        (["--prompt", CAT, "--custom", "Big Wave|p|m"], "String should match pattern"),
        (["--prompt", CAT, "--character", str(a_picture)], "give the character either as character_prompt or"),
        (
            ["--character", str(not_a_picture)],
            "error: the character picture cannot be used: the upload is not a picture in an accepted format",
        ),
    ]:
        result = runner.invoke(cli.app, ["start", *args])
        assert result.exit_code == 1, result.output
        assert result.output.startswith("error: ") and message in result.output

    unknown_target = runner.invoke(cli.app, ["start", "--prompt", CAT, "--target", "instagram"])
    assert unknown_target.exit_code == 2 and "Invalid value for '--target'" in unknown_target.output
