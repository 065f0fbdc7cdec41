"""What the EmojiSet workflow knows, and what it returns.

:class:`EmojiSetState` (the ``get_state`` query, carried across continue-as-new) with its phases, actions, takes,
frame slots and candidates, parts of which the updates return; :class:`EmojiSetResult`, how a set ended and what it
exported. Clients and builds of other ages read them all, so each is a :class:`~workflows.contract.base._Model`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from workflows.contract.activities import PackageOutput
from workflows.contract.base import ArtifactRef, _Model
from workflows.contract.ledger import DeploymentTerms, Ledger, LedgerSummary
from workflows.contract.set_input import ActionSpec, EmojiSetInput

# --- The state (the get_state query) -------------------------------------------------------------------------------


class Phase(StrEnum):
    """Where a set is as a whole. Also the ``EmojiSetPhase`` search attribute."""

    CHARACTER = "character"
    AWAITING_CHARACTER_REVIEW = "awaiting_character_review"
    START_FRAMES = "start_frames"
    AWAITING_START_FRAME_REVIEW = "awaiting_start_frame_review"
    """At least one action's start frame waits for a person (other actions may be animating meanwhile)."""
    ANIMATING = "animating"
    MATTING = "matting"
    AWAITING_REVIEW = "awaiting_review"
    ASSEMBLING = "assembling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class ActionStage(StrEnum):
    """Where one action is. The ``EmojiSetAwaiting`` search attribute lists what the set waits for."""

    START_FRAME = "start_frame"
    AWAITING_START_FRAME_REVIEW = "awaiting_start_frame_review"
    ANIMATING = "animating"
    MATTING = "matting"
    READY = "ready"
    WAITING_FOR_PROMPT = "waiting_for_prompt"
    """Its start frame or every clip failed for good: it waits for a regeneration with a custom prompt."""


class FrameStatus(StrEnum):
    PENDING = "pending"
    MATTING = "matting"
    READY = "ready"
    FAILED = "failed"


class CandidateStatus(StrEnum):
    MATTING = "matting"
    READY = "ready"
    FAILED = "failed"


class PickSource(StrEnum):
    AUTO = "auto"
    HUMAN = "human"


class ImageCandidate(_Model):
    """A generated still: a character or a start frame candidate."""

    index: int
    image: ArtifactRef
    prompt: str | None = Field(default=None, description="The reviewer's custom prompt; None for the preset's own.")


class CharacterState(_Model):
    """The character every start frame is made from."""

    candidates: list[ImageCandidate] = Field(default_factory=list)
    pick: int | None = None
    picked_by: PickSource | None = None
    uploaded: bool = False
    error: str | None = None

    def picked(self) -> ImageCandidate | None:
        return next((c for c in self.candidates if c.index == self.pick), None)


class TakeStatus(StrEnum):
    ANIMATING = "animating"
    EXTRACTING = "extracting"
    READY = "ready"
    FAILED = "failed"


class TakeState(_Model):
    """One image-to-video clip of an action and what was extracted from it."""

    index: int
    motion_prompt: str | None = Field(default=None, description="The reviewer's custom prompt; None for the preset's.")
    status: TakeStatus = TakeStatus.ANIMATING
    clip: ArtifactRef | None = None
    source_frames: int | None = Field(default=None, description="Frames decoded from the clip.")
    fps: float | None = None
    loop: tuple[int, int] | None = Field(default=None, description="The clip frames [start, end) the emoji loops.")
    error: str | None = None


class MatteVersion(_Model):
    """An earlier cut-out of a candidate, kept so that ``undo_refine`` can bring it back."""

    matte: ArtifactRef
    score: float | None = None


class Candidate(_Model):
    """One candidate image of a frame slot (a clip frame or a frame edit) and, once matted, its cut-out and score."""

    index: int
    source: ArtifactRef
    take: int | None = Field(default=None, description="The take it was extracted from; None for a frame edit.")
    source_frame: int | None = Field(default=None, description="Its index among the take's decoded clip frames.")
    offset: int = Field(default=0, description="Source frames from the slot's chosen frame (0: the chosen one).")
    prompt: str | None = Field(default=None, description="A frame edit's custom prompt.")
    quality: float = Field(default=1.0, description="How clean the clip frame is (blur, glitches), 0..1.")
    status: CandidateStatus = CandidateStatus.MATTING
    matte: ArtifactRef | None = Field(default=None, description="The current cut-out (refined, if it was).")
    score: float | None = None
    error: str | None = None
    versions: list[MatteVersion] = Field(
        default_factory=list,
        description="Earlier cut-outs, oldest first: refine_frame adds the one it replaces, undo_refine takes the "
        "last back. Their files are never deleted.",
    )
    refinements: int = Field(default=0, description="Refinements made so far, undone ones included (numbers keys).")


class FrameState(_Model):
    """One frame slot of one emoji: its candidates and which one is picked."""

    index: int
    status: FrameStatus = FrameStatus.PENDING
    candidates: list[Candidate] = Field(default_factory=list, description="Sorted by candidate index.")
    pick: int | None = Field(default=None, description="The picked candidate's index.")
    picked_by: PickSource | None = None
    error: str | None = None
    edits: int = Field(default=0, description="Frame edits (regenerate_frame) so far.")
    stabilised: ArtifactRef | None = Field(
        default=None,
        description="The picked cut-out made consistent with the emoji's other picks (EmojiSetInput.temporal): what "
        "is assembled. None when not asked for, or while the emoji's picks are not settled or are being stabilised.",
    )

    def usable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status is CandidateStatus.READY]

    def candidate(self, index: int) -> Candidate | None:
        return next((c for c in self.candidates if c.index == index), None)

    def picked(self) -> Candidate | None:
        return None if self.pick is None else self.candidate(self.pick)

    def assembled(self) -> ArtifactRef | None:
        """The cut-out an export of this slot uses: the pick's stabilised one when there is one, else the pick's."""
        if self.stabilised is not None:
            return self.stabilised
        picked = self.picked()
        return None if picked is None else picked.matte


class ActionState(_Model):
    """One action, one emoji: its start frames, its takes and its frame slots."""

    action: ActionSpec
    stage: ActionStage = ActionStage.START_FRAME
    start_frames: list[ImageCandidate] = Field(default_factory=list)
    start_frame_pick: int | None = None
    start_frame_approved_by: str | None = None
    takes: list[TakeState] = Field(default_factory=list)
    take_pick: int | None = Field(default=None, description="A take chosen by hand for the whole emoji.")
    frames: list[FrameState] = Field(default_factory=list)
    error: str | None = Field(default=None, description="Why the action waits for a custom prompt.")
    stabilised_for: str | None = Field(
        default=None, description="The picks (a digest) the frames' stabilised cut-outs were made from."
    )

    @property
    def name(self) -> str:
        return self.action.name

    def start_frame(self) -> ImageCandidate | None:
        return next((c for c in self.start_frames if c.index == self.start_frame_pick), None)


class DroppedAction(_Model):
    """An emoji a reviewer took out of the set (``drop_action``): its files stay in the store."""

    action: str
    dropped_by: str
    reason: str | None = None


class SetFailure(_Model):
    """Why a set failed: its first failure's own words, where in the set it came from, and what failed."""

    message: str = Field(description="The root cause's message (an activity's own error, not its wrapper's).")
    phase: Phase = Field(description="The phase the set was in when it failed.")
    activity: str | None = Field(default=None, description="The activity that failed, when one did.")
    kind: str | None = Field(default=None, description="The failure type (FailureType), when the error names one.")


class EmojiSetState(_Model):
    """Everything the workflow knows; carried across continue-as-new and returned by ``get_state``."""

    set_id: str
    input: EmojiSetInput
    phase: Phase
    character: CharacterState = Field(default_factory=CharacterState)
    actions: list[ActionState]
    review_deadline: datetime | None = Field(default=None, description="When the current wait for a person ends.")
    approved_by: str | None = None
    approval_pending_by: str | None = Field(
        default=None, description="Who approved the set while work was still under way: it is assembled once done."
    )
    cancel_reason: str | None = None
    cancelled_by: str | None = Field(default=None, description="Who cancelled the set (the cancel's reviewer).")
    ended_at: datetime | None = Field(default=None, description="When the set ended: completed, cancelled, expired.")
    failure: SetFailure | None = Field(default=None, description="Why the set failed; None unless it did.")
    notice: str | None = Field(default=None, description="Last thing a reviewer should know, e.g. a refused approval.")
    pipeline_info: str | None = None
    export_refusals: list[str] = Field(
        default_factory=list, description="Platform targets that will not take this set, and why (known at start)."
    )
    runs: int = Field(default=1, description="How many workflow runs (continue-as-new) this set has used.")
    dropped: list[DroppedAction] = Field(default_factory=list, description="Emoji taken out of the set, in order.")
    ledger: Ledger = Field(default_factory=Ledger, description="What the set has spent: generator calls, GPU time.")
    terms: DeploymentTerms | None = Field(
        default=None, description="The deployment's prices, default budget and webhook, as the set found them."
    )
    events_sent: int = Field(default=0, description="Events sent to the set's webhook so far.")

    def frames(self) -> list[tuple[ActionState, FrameState]]:
        return [(action, frame) for action in self.actions for frame in action.frames]

    def frames_done(self) -> int:
        return sum(1 for _, frame in self.frames() if frame.status is FrameStatus.READY)

    def frames_total(self) -> int:
        return len(self.actions) * self.input.frames_per_emoji

    def unusable(self) -> list[str]:
        """What keeps the set from being assembled: actions not yet animated, ``action#frame`` slots with no usable
        candidate."""
        blocked = [a.name for a in self.actions if a.stage is not ActionStage.READY]
        ready = [(a, f) for a, f in self.frames() if a.stage is ActionStage.READY]
        return blocked + [f"{a.name}#{f.index}" for a, f in ready if f.status is not FrameStatus.READY]

    def action(self, name: str) -> ActionState | None:
        return next((a for a in self.actions if a.name == name), None)

    def awaiting(self) -> list[str]:
        """What the set waits for people to do: the ``EmojiSetAwaiting`` search attribute (nothing once it has
        ended or failed)."""
        waits: list[str] = []
        if self.phase in (Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED) or self.failure is not None:
            return waits
        if self.phase is Phase.AWAITING_CHARACTER_REVIEW:
            waits.append("character_review")
        if any(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in self.actions):
            waits.append("start_frame_review")
        if any(a.stage is ActionStage.WAITING_FOR_PROMPT for a in self.actions) or any(
            f.status is FrameStatus.FAILED for _, f in self.frames()
        ):
            waits.append("custom_prompt")
        if self.phase is Phase.AWAITING_REVIEW:
            waits.append("final_review")
        return waits


# --- The result ----------------------------------------------------------------------------------------------------


class EmojiOutput(_Model):
    """The exported files of one emoji."""

    pose: str
    webp: ArtifactRef
    apng: ArtifactRef
    gif: ArtifactRef
    sprite_sheet: ArtifactRef
    sprite_layout: ArtifactRef = Field(description="JSON: the sheet's grid, every frame's rectangle, frame timing.")
    frames: list[ArtifactRef]


class EmojiSetResult(_Model):
    """How the set ended and, when completed, the references to everything exported.

    The full state (every candidate) stays queryable with ``get_state`` after the set ended.
    """

    set_id: str
    status: Literal["completed", "cancelled", "expired"]
    reason: str | None = None
    approved_by: str | None = None
    emojis: list[EmojiOutput] = Field(default_factory=list)
    contact_sheet: ArtifactRef | None = None
    packages: list[PackageOutput] = Field(default_factory=list, description="One per platform export target.")
    cost: LedgerSummary | None = Field(default=None, description="What the set spent (its ledger in figures).")
