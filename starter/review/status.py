"""A set's state in plain words, for the top of its page: how it stands, who must do what by when, and what then.

The page shows what :func:`set_status` says before anything else, so a failed, cancelled or forgotten set reads as
such at a glance; :func:`review_policy` says which stages wait for a person and what a passed deadline does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from workflows.contract import (
    ActionStage,
    ActivityName,
    DeadlinePolicy,
    EmojiSetState,
    FrameStatus,
    Phase,
    StagePolicy,
    TakeStatus,
)

PHASE_WORDS = {
    Phase.CHARACTER: "making the character",
    Phase.AWAITING_CHARACTER_REVIEW: "waiting for the character review",
    Phase.START_FRAMES: "drawing the start frames",
    Phase.AWAITING_START_FRAME_REVIEW: "waiting for the start frame review",
    Phase.ANIMATING: "animating",
    Phase.MATTING: "cutting out the frames",
    Phase.AWAITING_REVIEW: "waiting for the final review",
    Phase.ASSEMBLING: "assembling the packages",
    Phase.COMPLETED: "completed",
    Phase.CANCELLED: "cancelled",
    Phase.EXPIRED: "expired",
}
STAGE_WORDS = {
    ActionStage.START_FRAME: "drawing its start frame",
    ActionStage.AWAITING_START_FRAME_REVIEW: "start frame to review",
    ActionStage.ANIMATING: "animating",
    ActionStage.MATTING: "cutting out",
    ActionStage.READY: "ready",
    ActionStage.WAITING_FOR_PROMPT: "needs a custom prompt",
}
ACTIVITY_WORDS: dict[str, str] = {
    ActivityName.CHECK_GENERATOR: "checking the generator",
    ActivityName.CHECK_EXPORTS: "checking the export targets",
    ActivityName.DESCRIBE_PIPELINE: "checking the matting pipeline",
    ActivityName.PREPARE_UPLOAD: "preparing the uploaded picture",
    ActivityName.GENERATE_CHARACTER: "drawing the character",
    ActivityName.ASSEMBLE_EMOJI: "assembling an emoji",
    ActivityName.ASSEMBLE_CONTACT_SHEET: "assembling the contact sheet",
    ActivityName.EXPORT_PACKAGE: "exporting a package",
}
"""The activities whose failure fails a set, by what they do (others fail only their frame, take or action)."""
ON_DEADLINE_WORDS = {
    DeadlinePolicy.AUTO_APPROVE: "it goes on by itself with the automatic picks",
    DeadlinePolicy.EXPIRE: "the set ends as expired",
}


@dataclass(frozen=True)
class SetStatus:
    """How a set stands: ``kind`` (failed, cancelled, expired, completed, assembling, approved, waiting, working)
    names the look; ``headline`` and ``details`` are what a person reads."""

    kind: str
    headline: str
    details: list[str] = field(default_factory=list)


def set_status(state: EmojiSetState, now: datetime) -> SetStatus:
    """``state`` in plain words at ``now`` (for the deadline's "in 5 h")."""
    if state.failure is not None:
        failure = state.failure
        step = ACTIVITY_WORDS.get(failure.activity or "")
        where = step or PHASE_WORDS[failure.phase] + (f" (in {failure.activity})" if failure.activity else "")
        return SetStatus(
            "failed",
            f"Failed while {where}: {failure.message}",
            ["Nothing more happens to this set: fix what the error names and start a new one."],
        )
    if state.phase is Phase.CANCELLED:
        by = f" by {state.cancelled_by}" if state.cancelled_by else ""
        why = state.cancel_reason or "cancelled"
        return SetStatus("cancelled", f"Cancelled{by}{_at(state.ended_at)}: {why}", ["Nothing waits."])
    if state.phase is Phase.EXPIRED:
        return SetStatus("expired", f"Expired{_at(state.ended_at)}: {state.notice or 'a review deadline passed'}")
    if state.phase is Phase.COMPLETED:
        return SetStatus("completed", f"Completed{_at(state.ended_at)}, approved by {state.approved_by}.")
    if state.phase is Phase.ASSEMBLING:
        return SetStatus("assembling", f"Approved by {state.approved_by}: assembling the packages.")
    if state.approval_pending_by:
        return SetStatus(
            "approved",
            f"Approved by {state.approval_pending_by}: assembled as soon as the work under way is done.",
            [f"Still under way: {', '.join(under_way(state))}."] if under_way(state) else [],
        )
    waits = waiting_for(state)
    if waits:
        return SetStatus("waiting", f"Waiting for a reviewer {'; and '.join(waits)}.", _deadline(state, now))
    busy = under_way(state)
    return SetStatus("working", f"Working: {', '.join(busy) or PHASE_WORDS[state.phase]}. Nothing needs you yet.")


def waiting_for(state: EmojiSetState) -> list[str]:
    """What people must do now, one phrase per wait."""
    phrases = []
    for wait in state.awaiting():
        if wait == "character_review":
            phrases.append("to pick and approve the character")
        elif wait == "start_frame_review":
            names = [a.name for a in state.actions if a.stage is ActionStage.AWAITING_START_FRAME_REVIEW]
            phrases.append(f"to approve the start frames of {', '.join(names)}")
        elif wait == "custom_prompt":
            needs = [a.name for a in state.actions if a.stage is ActionStage.WAITING_FOR_PROMPT]
            needs += [f"{a.name} frame {f.index}" for a, f in state.frames() if f.status is FrameStatus.FAILED]
            phrases.append(f"to give a custom prompt for {', '.join(needs)}")
        elif wait == "final_review":
            phrases.append("to check the picks and approve the set")
    return phrases


def under_way(state: EmojiSetState) -> list[str]:
    """What the set is making right now, in a few words each."""
    busy = []
    for action in state.actions:
        takes = [t for t in action.takes if t.status in (TakeStatus.ANIMATING, TakeStatus.EXTRACTING)]
        if action.stage is ActionStage.START_FRAME:
            busy.append(f"{action.name}'s start frame")
        busy += [f"{action.name} take {t.index} ({t.status.value})" for t in takes]
        edits = [f.index for f in action.frames if f.status is FrameStatus.MATTING and f.candidates]
        if edits and action.stage is ActionStage.READY:
            busy.append(f"{action.name} frame{'s' if len(edits) > 1 else ''} {', '.join(map(str, edits))}")
    matting = sum(1 for _, f in state.frames() if f.status in (FrameStatus.PENDING, FrameStatus.MATTING))
    if matting and state.phase in (Phase.ANIMATING, Phase.MATTING):
        busy.append(f"{state.frames_done()}/{state.frames_total()} frames cut out")
    return busy


def review_policy(state: EmojiSetState) -> str:
    """Which stages wait for a person, how long each wait may last, and what happens when it passes."""
    review = state.input.review

    def who(policy: StagePolicy) -> str:
        return "a person" if policy is StagePolicy.HUMAN else "automatic"

    character = who(review.character)
    if state.input.character_image is not None:
        character = "none (an uploaded picture is the character as it is)"
    return (
        f"Review: character {character}; start frames {who(review.start_frames)}; final {who(review.final)}. "
        f"Each wait for a person lasts at most {_duration(review.deadline)}; then "
        f"{ON_DEADLINE_WORDS[review.on_deadline]}."
    )


def _deadline(state: EmojiSetState, now: datetime) -> list[str]:
    if state.review_deadline is None:
        return []
    left = state.review_deadline - now
    when = f"{state.review_deadline:%Y-%m-%d %H:%M} UTC"
    timing = f"in {_duration(left)}" if left > timedelta(0) else "now"
    return [f"Until {when} ({timing}); then {ON_DEADLINE_WORDS[state.input.review.on_deadline]}."]


def _duration(span: timedelta) -> str:
    minutes = int(span.total_seconds() // 60)
    if minutes >= 48 * 60:
        return f"{minutes // (24 * 60)} days"
    if minutes >= 60:
        hours, rest = divmod(minutes, 60)
        return f"{hours} h" + (f" {rest} min" if rest else "")
    return f"{max(minutes, 1)} min"


def _at(moment: datetime | None) -> str:
    return f" at {moment:%Y-%m-%d %H:%M} UTC" if moment else ""
