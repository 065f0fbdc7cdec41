"""A set's state in plain words (starter/review/status.py), its in-place posts' answers, and the notes on moved picks:
each rule here fails its test when it is switched off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from starter.review.routes.actions import moved_picks, spans
from starter.review.status import review_policy, set_status
from testkit.stack import Stack, wait_for_phase
from tests.starter.review.test_review_app import start_set
from workflows.contract import (
    ActionStage,
    ArtifactRef,
    DeadlinePolicy,
    EmojiSetInput,
    EmojiSetState,
    FrameState,
    Phase,
    PickSource,
    ReviewPolicy,
    SetFailure,
    StagePolicy,
    TakeState,
    TakeStatus,
)
from workflows.emoji_set import _failure, _initial_state

NOW = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)


def state(**review: object) -> EmojiSetState:
    request = EmojiSetInput(character_prompt="a cat", actions=["wave", "heart"], review=ReviewPolicy(**review))
    return _initial_state("s", request)


def test_a_failed_set_says_where_and_why_even_while_its_phase_looks_alive() -> None:
    failed = state()
    failed.actions[0].stage = ActionStage.AWAITING_START_FRAME_REVIEW  # where it stopped
    failed.failure = SetFailure(message="unknown pipeline 'x'", phase=Phase.CHARACTER, activity="describe_pipeline")
    status = set_status(failed, NOW)
    assert status.kind == "failed"
    assert status.headline == "Failed while checking the matting pipeline: unknown pipeline 'x'"
    failed.failure = SetFailure(message="boom", phase=Phase.MATTING, activity="matte_slot")
    assert set_status(failed, NOW).headline == "Failed while cutting out the frames (in matte_slot): boom"
    assert failed.awaiting() == [], "a failed set waits for nobody"


def test_a_cancelled_set_says_by_whom_and_when_and_waits_for_nothing() -> None:
    cancelled = state()
    cancelled.actions[0].stage = ActionStage.AWAITING_START_FRAME_REVIEW
    cancelled.phase, cancelled.cancel_reason, cancelled.cancelled_by = Phase.CANCELLED, "wrong cat", "bo"
    cancelled.ended_at = NOW
    status = set_status(cancelled, NOW)
    assert (status.kind, status.headline) == ("cancelled", "Cancelled by bo at 2026-12-05 06:00 UTC: wrong cat")
    assert cancelled.awaiting() == [], "an ended set is no longer listed as awaiting a review"


def test_a_wait_says_for_what_until_when_and_what_happens_then() -> None:
    waiting = state(on_deadline=DeadlinePolicy.EXPIRE)
    waiting.actions[1].stage = ActionStage.AWAITING_START_FRAME_REVIEW
    waiting.phase, waiting.review_deadline = Phase.AWAITING_START_FRAME_REVIEW, NOW + timedelta(hours=5, minutes=3)
    status = set_status(waiting, NOW)
    assert (status.kind, status.headline) == ("waiting", "Waiting for a reviewer to approve the start frames of heart.")
    assert status.details == ["Until 2026-12-05 11:03 UTC (in 5 h 3 min); then the set ends as expired."]


def test_an_approval_while_a_take_animates_shows_as_pending_with_what_is_under_way() -> None:
    approved = state()
    approved.phase, approved.approval_pending_by = Phase.AWAITING_REVIEW, "ana"
    approved.actions[0].stage = approved.actions[1].stage = ActionStage.READY
    approved.actions[0].takes = [TakeState(index=1, status=TakeStatus.ANIMATING, motion_prompt="spins")]
    status = set_status(approved, NOW)
    assert status.kind == "approved" and status.headline.startswith("Approved by ana")
    assert status.details == ["Still under way: wave take 1 (animating)."]


def test_the_policy_says_an_upload_has_no_character_review_and_what_a_deadline_does() -> None:
    upload = state(character=StagePolicy.HUMAN, deadline=timedelta(hours=2))
    picture = ArtifactRef(uri="file:///a.png", sha256="0" * 64, size_bytes=1, media_type="image/png")
    upload.input = upload.input.model_copy(update={"character_prompt": None, "character_image": picture})
    assert review_policy(upload) == (
        "Review: character none (an uploaded picture is the character as it is); start frames a person; final a "
        "person. Each wait for a person lasts at most 2 h; then it goes on by itself with the automatic picks."
    )


def test_a_failure_is_told_by_its_innermost_cause_with_the_activity_and_type_on_the_way() -> None:
    cause = ApplicationError("unknown matting pipeline 'x'", type="BadInput", non_retryable=True)
    wrapper = ActivityError(
        "Activity task failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type="describe_pipeline",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    wrapper.__cause__ = cause
    failure = _failure(wrapper, Phase.CHARACTER)
    assert (failure.message, failure.activity, failure.kind) == (
        "unknown matting pipeline 'x'",
        "describe_pipeline",
        "BadInput",
    )


def test_a_hand_pick_names_the_automatic_picks_it_moved_in_runs() -> None:
    before, after = state(), state()
    for old, new in zip(before.actions[0].frames, after.actions[0].frames, strict=True):
        old.pick, old.picked_by = 0, PickSource.AUTO
        new.pick, new.picked_by = 0, PickSource.AUTO
    moved = [0, 1, 2, 4]
    after.actions[0].frames = [
        FrameState(index=f.index, pick=1 if f.index in moved else 0, picked_by=PickSource.AUTO)
        for f in after.actions[0].frames
    ]
    after.actions[0].frames[3] = FrameState(index=3, pick=2, picked_by=PickSource.HUMAN)
    assert moved_picks(before, after, "wave", "3") == (
        "Your pick of wave frame 3 moved the automatic picks of wave frames 0-2, 4, so the motion stays smooth "
        "around it."
    )
    assert moved_picks(before, before, "wave", "3") == ""
    unpicked = state()
    assert moved_picks(unpicked, after, "wave", "3") == "", "a pick made where there was none is not a move"
    assert spans([0, 1, 2, 4, 5, 7]) == "0-2, 4-5, 7"


async def test_in_place_posts_answer_json_with_the_control_and_the_status(
    stack: Stack, http: httpx.AsyncClient, set_id: str
) -> None:
    await start_set(stack, set_id, review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    script = {"Accept": "application/json"}
    refused = await http.post(f"/sets/{set_id}/emoji/wave/frames/2/pick", data={"candidate": "99"}, headers=script)
    assert refused.status_code == 409
    assert refused.json() == {"ok": False, "control": "slot-wave-2", "error": refused.json()["error"]}
    bad = await http.post(f"/sets/{set_id}/emoji/wave/frames/2/regenerate", data={"prompt": ""}, headers=script)
    assert bad.status_code == 422 and bad.json()["control"] == "slot-wave-2"
    missing = await http.post("/sets/no-such-set/emoji/wave/frames/2/pick", data={"candidate": "0"}, headers=script)
    assert missing.status_code == 404 and missing.json()["control"] == "page"
    taken = await http.post(f"/sets/{set_id}/emoji/wave/frames/2/pick", data={"candidate": "0"}, headers=script)
    assert taken.status_code == 200 and taken.json()["ok"] is True

    named = await http.post(
        f"/sets/{set_id}/cancel", data={"confirm": "yes", "reason": "done", "reviewer": "cy"}, headers=script
    )
    assert named.json()["ok"] is True and "popcon_reviewer=cy" in named.headers["set-cookie"]
    cancelled = await wait_for_phase(stack.sets, set_id, Phase.CANCELLED)
    assert (cancelled.cancelled_by, cancelled.cancel_reason, cancelled.awaiting()) == ("cy", "done", [])
    assert cancelled.ended_at is not None
