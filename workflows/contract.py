"""The EmojiSet contract: every model that crosses a Temporal boundary.

Workflow input and result, each message's input, each activity's input and output. Plain pydantic with no heavy
imports, shared by the workflow, both workers, the client and the RunPod handler. Images never travel here: only
:class:`ArtifactRef` references to stored bytes.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator
from temporalio.exceptions import ApplicationError

from workflows.keys import MATTE_KEY_PATTERN, MATTE_VERSION_KEY_PATTERN, STABILISED_KEY_PATTERN, set_of_key
from workflows.presets import DEFAULT_ACTIONS, PRESETS, ActionPreset, Expression, Motion, Prop

ORCHESTRATION_TASK_QUEUE = "emoji-orchestration"
GPU_TASK_QUEUE = "emoji-gpu"
WORKFLOW_TYPE = "EmojiSet"
EXPORT_WORKFLOW_TYPE = "ExportSet"

HEARTBEAT_INTERVAL = timedelta(seconds=1)
"""How often a running activity heartbeats, and the workers' heartbeat throttle: every beat reaches the server, so
the time since the last one is never more than about a second when a worker is lost."""
HEARTBEAT_TIMEOUT = timedelta(seconds=6)
"""Every activity's heartbeat timeout: a lost worker's activity is retried this long after its last beat. Six beats
are missed first, so a busy event loop is not mistaken for a lost worker."""
UPGRADE_CHECK_INTERVAL = timedelta(minutes=15)
"""How often a set waiting for a person wakes to see whether its deployment has a new current build (and moves to it,
continuing as new, when nothing is in flight). Old builds drain within this after their sets' production ends; each
wake is five history events."""
STICKY_WORKFLOW_TIMEOUT = timedelta(seconds=3)
"""How long a set's next workflow task waits for the worker that has the set cached before any worker takes it (and
replays the history): a lost orchestration worker costs this, not the SDK's default 10 s."""

MAX_ACTIONS = 24
"""The original product's cap, and its catalogue's size."""
MAX_FRAMES_PER_EMOJI = 48
MAX_TAKES_PER_ACTION = 4
MAX_TAKES_PER_ACTION_TOTAL = 8
"""Takes an action may accumulate through regenerate_action."""
MAX_FRAMES_PER_SET = 600
MAX_CANDIDATES_PER_SET = 4000
MAX_CANDIDATES_PER_FRAME_TOTAL = 48
"""Candidates a frame slot may accumulate through new takes and frame edits. Together with MAX_CANDIDATES_PER_SET
(which regenerations count against too) this keeps the state, carried across continue-as-new and returned by
get_state, below Temporal's 2 MiB payload limit (a candidate is about 0.5 KB of JSON)."""
MAX_REFINE_POINTS = 32
"""Clicks one refine_frame may carry."""
MAX_MATTE_VERSIONS = 6
"""Earlier cut-outs a candidate keeps for undo_refine (about 0.3 KB each in the state). Beyond it the oldest
refinement leaves the undo history (the matting's own cut-out, the first, always stays); its file stays in the store."""
UPLOAD_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp", "image/tiff"})
"""The picture formats a character upload may be (the original's list)."""
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_UPLOAD_PIXELS = 40_000_000
"""An upload larger than this many pixels is refused before it is decoded (a decompression bomb)."""

PIPELINE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]*(:[A-Za-z0-9_.-]+)?(\+[a-z0-9][a-z0-9_.-]*(:[A-Za-z0-9_.-]+)?)*$")
"""A matting pipeline name: steps joined by '+', each ``engine`` or ``engine:variant`` (e.g. ``rembg:isnet-anime``)."""


# --- Vocabulary: activity names and failure types ----------------------------------------------------------------


class ActivityName(StrEnum):
    """Every activity, by the name its worker registers and the workflow calls (workflows never import workers)."""

    CHECK_GENERATOR = "check_generator"
    CHECK_EXPORTS = "check_exports"
    PREPARE_UPLOAD = "prepare_upload"
    GENERATE_CHARACTER = "generate_character"
    GENERATE_START_FRAME = "generate_start_frame"
    GENERATE_CLIP = "generate_clip"
    EXTRACT_FRAMES = "extract_frames"
    EDIT_FRAME = "edit_frame"
    DESCRIBE_PIPELINE = "describe_pipeline"
    MATTE_SLOT = "matte_slot"
    REFINE_MATTE = "refine_matte"
    STABILISE_EMOJI = "stabilise_emoji"
    ASSEMBLE_EMOJI = "assemble_emoji"
    ASSEMBLE_CONTACT_SHEET = "assemble_contact_sheet"
    EXPORT_PACKAGE = "export_package"


class FailureType(StrEnum):
    """Every typed failure an activity reports, and whether trying again can fix it (:attr:`retryable`).

    Workers raise them with :meth:`error`; the workflow's retry policies list :data:`NON_RETRYABLE_FAILURES`; the
    RunPod handler reports them as ``"<type>: <message>"`` and the dispatcher reads them back.
    """

    INVALID_REQUEST = "InvalidRequest"
    """The request does not fit the contract, or names a generator or pipeline that does not exist."""
    UNKNOWN_GENERATOR = "UnknownGenerator"
    GENERATION_REFUSED = "GenerationRefused"
    """The image service refused the prompt (content policy, invalid parameters): the same request fails again."""
    GENERATION_THROTTLED = "GenerationThrottled"
    GENERATION_FAILED = "GenerationError"
    INVALID_UPLOAD = "InvalidUpload"
    """An uploaded picture cannot be used (not an image, truncated, empty, too large, a decompression bomb)."""
    INVALID_CLIP = "InvalidClip"
    """A clip cannot be decoded or has too few frames for the emoji: the same clip fails again (a new take may not)."""
    UNKNOWN_PIPELINE = "UnknownPipeline"
    UNSUPPORTED_IMAGE = "UnsupportedImage"
    """A matting step cannot handle the image (e.g. no plain background for ``classical``); another pipeline may."""
    CORRUPT_IMAGE = "CorruptImage"
    WEIGHTS_MISSING = "WeightsMissing"
    FOREIGN_ARTIFACT = "ForeignArtifact"
    """A reference points outside the artifact store (another folder, bucket or prefix, another scheme): a store reads
    only what it holds, whatever sha256 the reference carries."""
    ARTIFACT_ERROR = "ArtifactError"
    """A stored artifact is missing or does not match its reference (sha256). Retried: a store shared by several
    machines may show a fresh write late."""
    MATTING_FAILED = "MattingError"
    WORKER_SHUTDOWN = "WorkerShutdown"
    """The GPU worker stopped before the frame's turn on its GPU: another worker takes it at once."""
    RUNPOD_JOB_FAILED = "RunPodJobFailed"
    RUNPOD_JOB_LOST = "RunPodJobLost"
    RUNPOD_THROTTLED = "RunPodThrottled"
    RUNPOD_UNAVAILABLE = "RunPodUnavailable"
    RUNPOD_REJECTED = "RunPodRejected"
    RUNPOD_TIMED_OUT = "RunPodTimedOut"
    RUNPOD_CANCELLED = "RunPodCancelled"
    INVALID_JOB_OUTPUT = "InvalidJobOutput"
    EXPORT_DOES_NOT_FIT = "ExportDoesNotFit"
    """A set cannot meet a platform's rule (bytes, frames, set size): the message names the rule and the closest
    figure reached. Encoding the same frames again gives the same."""

    @property
    def retryable(self) -> bool:
        """Whether another attempt of the same activity can succeed."""
        return self not in NON_RETRYABLE_FAILURES

    def error(self, message: str, *, next_retry_delay: timedelta | None = None) -> ApplicationError:
        """This failure as the ``ApplicationError`` an activity raises: typed, and non-retryable when it is."""
        return ApplicationError(
            message, type=self.value, non_retryable=not self.retryable, next_retry_delay=next_retry_delay
        )


NON_RETRYABLE_FAILURES: frozenset[FailureType] = frozenset(
    {
        FailureType.INVALID_REQUEST,
        FailureType.UNKNOWN_GENERATOR,
        FailureType.GENERATION_REFUSED,
        FailureType.INVALID_UPLOAD,
        FailureType.INVALID_CLIP,
        FailureType.FOREIGN_ARTIFACT,
        FailureType.UNKNOWN_PIPELINE,
        FailureType.UNSUPPORTED_IMAGE,
        FailureType.CORRUPT_IMAGE,
        FailureType.WEIGHTS_MISSING,
        FailureType.RUNPOD_REJECTED,
        FailureType.INVALID_JOB_OUTPUT,
        FailureType.EXPORT_DOES_NOT_FIT,
    }
)
"""The failures a retry cannot fix: the workflow's retry policies list exactly these."""

Prompt = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=800)]


class TemporalMode(StrEnum):
    """How an emoji's picked frames are made consistent with each other (``EmojiSetInput.temporal``)."""

    NONE = "none"
    """Each frame as it was matted."""
    STABILISE = "stabilise"
    """Weight-free: where the picture did not change between consecutive frames, the alpha takes the temporal median
    of the unchanged run; moving parts keep their own (``gpu_activity_worker.temporal``)."""
    SAM2 = "sam2"
    """SAM 2 tracks the first frame's subject through the frames, each frame's alpha is reconciled with it beyond its
    edge band, then ``stabilise`` runs (needs the SAM 2.1 tiny weights on an in-process GPU worker)."""


class _Model(BaseModel):
    """Base of every contract model: a reader ignores fields it does not know.

    Builds of different age read each other's payloads: a set pinned to an older build reads the results of a newer
    GPU worker, an older client reads the state of a set on a newer build, a build reads the state an older one
    carried across continue-as-new. A field they do not know was added after them (fields are only ever added, with a
    default: docs/deploy.md), so they go on without it; refusing it would fail the set (a result that does not decode
    fails the workflow task) or the client.
    """

    model_config = ConfigDict(extra="ignore")


class _Request(_Model):
    """A request a person, a backend or the workflow writes for one reader: a message, an activity's input, an
    export. Unknown fields are refused, so a typo in hand-written JSON is an error, and a request whose new field an
    older reader cannot honour is refused with the field's name instead of being half done. The typed client sends only
    the fields it sets (``starter.client``), so a newer client's default-valued fields never reach an older set."""

    model_config = ConfigDict(extra="forbid")


# --- Artifacts ---------------------------------------------------------------------------------------------------


class ArtifactRef(_Model):
    """A stored blob (claim check). Workers fetch the bytes by ``uri`` and verify them against ``sha256``."""

    model_config = ConfigDict(frozen=True)

    uri: str
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    size_bytes: int = Field(ge=0)
    media_type: str
    width: int | None = None
    height: int | None = None


# --- Workflow input ----------------------------------------------------------------------------------------------


class ExportTarget(StrEnum):
    """Where a finished set goes: the generic files, or one platform's upload package within its limits."""

    GENERIC = "generic"
    """Animated WebP, APNG and GIF and a sprite sheet per emoji, at the frames' own size."""
    LINE_EMOJI = "line-emoji"
    LINE_STICKER = "line-sticker"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    SLACK = "slack"


class DeadlinePolicy(StrEnum):
    """What happens when a review deadline passes with no decision."""

    AUTO_APPROVE = "auto_approve"
    """Go on with the automatic picks (the set is assembled if every frame has a usable candidate)."""
    EXPIRE = "expire"


class StagePolicy(StrEnum):
    """Whether a stage waits for a person or goes on with its automatic pick."""

    AUTO = "auto"
    HUMAN = "human"


class ReviewPolicy(_Model):
    """Which stages wait for people, how long they get, and what a passed deadline does.

    The deadline runs from the moment the set starts waiting for a person at a stage (the character, the first start
    frame, the final review) and starts again at the next stage.
    """

    character: StagePolicy = Field(default=StagePolicy.AUTO, description="Wait for pick_character / approve.")
    start_frames: StagePolicy = Field(
        default=StagePolicy.HUMAN, description="Each action's start frame waits for approve_start_frames."
    )
    final: StagePolicy = Field(default=StagePolicy.HUMAN, description="The finished frames wait for approve.")
    deadline: timedelta = Field(default=timedelta(hours=24), gt=timedelta(0), le=timedelta(days=30))
    on_deadline: DeadlinePolicy = DeadlinePolicy.AUTO_APPROVE

    @classmethod
    def automatic(cls) -> ReviewPolicy:
        """No stage waits: a fully automatic set, for backends and the demo."""
        return cls(character=StagePolicy.AUTO, start_frames=StagePolicy.AUTO, final=StagePolicy.AUTO)


ActionId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")]
"""An action's name: lower-case letters, digits and dashes (it names files in every package)."""


class CustomAction(_Model):
    """An action of the set's own beside the presets: its name and both prompts."""

    name: ActionId
    pose_prompt: Prompt = Field(description="The start frame: the character in this pose.")
    motion_prompt: Prompt = Field(description="The clip: the movement, best written as body mechanics.")
    frame_duration_ms: int = Field(default=83, ge=20, le=1000)


class ActionSpec(_Model):
    """One action as production uses it: a preset, or a custom action (whose motion hints are left to generators)."""

    name: str
    pose_prompt: str
    motion_prompt: str
    frame_duration_ms: int
    motion: Motion | None = None
    expression: Expression | None = None
    prop: Prop | None = None
    preset: bool = True

    @classmethod
    def of_preset(cls, preset: ActionPreset) -> ActionSpec:
        return cls(**preset.model_dump())

    @classmethod
    def of_custom(cls, action: CustomAction) -> ActionSpec:
        return cls(**action.model_dump(), preset=False)


class EmojiSetInput(_Model):
    """Start a set: a character (a prompt, or an uploaded picture) and the actions to animate, one emoji each.

    Also part of the set's state, which clients of any age read, so unknown fields are ignored when it is read back;
    a start request is validated with :meth:`of_request`, which refuses them.
    """

    character_prompt: Prompt | None = Field(
        default=None, description="Who the character is, e.g. 'a round orange cat with a blue scarf'."
    )
    character_image: ArtifactRef | None = Field(
        default=None, description="An uploaded character picture, stored by the client (see EmojiSetClient.upload)."
    )
    style: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = "flat cartoon sticker"
    actions: list[ActionId] = Field(default_factory=lambda: list(DEFAULT_ACTIONS))
    custom_actions: list[CustomAction] = Field(default_factory=list)
    takes_per_action: int = Field(default=1, ge=1, le=MAX_TAKES_PER_ACTION, description="Clips per action.")
    frames_per_emoji: int = Field(default=12, ge=2, le=MAX_FRAMES_PER_EMOJI)
    neighbours: int = Field(
        default=2, ge=0, le=4, description="Clip frames either side of each chosen frame kept as its candidates."
    )
    clip_seconds: float = Field(default=2.0, ge=1.0, le=10.0, description="Asked of the image-to-video model.")
    clip_fps: int = Field(default=24, ge=8, le=60, description="Asked of the image-to-video model.")
    character_candidates: int = Field(default=2, ge=1, le=4, description="Characters drawn from the prompt.")
    start_frame_candidates: int = Field(default=2, ge=1, le=4, description="Start frames drawn per action.")
    matting_pipeline: str = "classical"
    temporal: TemporalMode = Field(
        default=TemporalMode.NONE,
        description="Make each emoji's picked frames consistent with each other after matting (less flicker): "
        "none, stabilise (weight-free) or sam2 (SAM 2 video tracking, then stabilise).",
    )
    generator: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$")] = "procedural"
    image_size: int = Field(default=256, ge=64, le=1024, description="Edge of the square emoji frames, in pixels.")
    seed: int = Field(default=0, ge=0, lt=2**31)
    owner: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""
    max_parallel_matting: int = Field(default=32, ge=1, le=512, description="Matting activities in flight at once.")
    review: ReviewPolicy = Field(default_factory=ReviewPolicy)
    export_targets: list[ExportTarget] = Field(
        default_factory=lambda: [ExportTarget.GENERIC, ExportTarget.LINE_EMOJI],
        min_length=1,
        description="The generic files and / or platform packages made when the set is approved.",
    )

    @field_validator("export_targets")
    @classmethod
    def _unique_targets(cls, targets: list[ExportTarget]) -> list[ExportTarget]:
        if len(set(targets)) != len(targets):
            raise ValueError(f"export targets must be unique, got {[t.value for t in targets]}")
        return targets

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        unknown = [a for a in actions if a not in PRESETS]
        if unknown:
            raise ValueError(
                f"unknown action preset(s) {unknown}; known presets: {list(PRESETS)} (or add a custom action)"
            )
        return actions

    @field_validator("matting_pipeline")
    @classmethod
    def _pipeline_syntax(cls, name: str) -> str:
        if not PIPELINE_PATTERN.match(name):
            raise ValueError(
                f"matting pipeline {name!r} is not a valid name: steps joined by '+', each 'engine' or "
                "'engine:variant', e.g. 'classical' or 'rembg:isnet-anime+defringe'"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> EmojiSetInput:
        if (self.character_prompt is None) == (self.character_image is None):
            raise ValueError("give the character either as character_prompt or as character_image (an upload)")
        if self.character_image is not None and self.character_image.media_type not in UPLOAD_MEDIA_TYPES:
            raise ValueError(
                f"character_image is {self.character_image.media_type}; uploads are one of {sorted(UPLOAD_MEDIA_TYPES)}"
            )
        names = self.action_names()
        if not names:
            raise ValueError("a set needs at least one action (a preset or a custom action)")
        doubles = sorted({n for n in names if names.count(n) > 1})
        if doubles:
            raise ValueError(f"action names must be unique, got {doubles} twice (a custom action may not reuse one)")
        if len(names) > MAX_ACTIONS:
            raise ValueError(f"at most {MAX_ACTIONS} actions per set, got {len(names)}")
        slots = len(names) * self.frames_per_emoji
        if slots > MAX_FRAMES_PER_SET:
            raise ValueError(f"a set has at most {MAX_FRAMES_PER_SET} frames, this one asks for {slots}")
        candidates = slots * self.takes_per_action * (2 * self.neighbours + 1)
        if candidates > MAX_CANDIDATES_PER_SET:
            raise ValueError(
                f"a set has at most {MAX_CANDIDATES_PER_SET} frame candidates (frames x takes x (2 x neighbours + 1)), "
                f"this one asks for {candidates}"
            )
        return self

    @classmethod
    def of_request(cls, data: object) -> EmojiSetInput:
        """A start request as a person or a backend wrote it: unknown fields (a typo) are refused."""
        return cls.model_validate(data, extra="forbid")

    def action_names(self) -> list[str]:
        return [*self.actions, *(custom.name for custom in self.custom_actions)]

    def action_specs(self) -> list[ActionSpec]:
        """Presets first, in the order asked, then the custom actions."""
        return [ActionSpec.of_preset(PRESETS[name]) for name in self.actions] + [
            ActionSpec.of_custom(custom) for custom in self.custom_actions
        ]


# --- Workflow state (the get_state query) ------------------------------------------------------------------------


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


class EmojiSetState(_Model):
    """Everything the workflow knows; carried across continue-as-new and returned by ``get_state``."""

    set_id: str
    input: EmojiSetInput
    phase: Phase
    character: CharacterState = Field(default_factory=CharacterState)
    actions: list[ActionState]
    review_deadline: datetime | None = Field(default=None, description="When the current wait for a person ends.")
    approved_by: str | None = None
    cancel_reason: str | None = None
    notice: str | None = Field(default=None, description="Last thing a reviewer should know, e.g. a refused approval.")
    pipeline_info: str | None = None
    export_refusals: list[str] = Field(
        default_factory=list, description="Platform targets that will not take this set, and why (known at start)."
    )
    runs: int = Field(default=1, description="How many workflow runs (continue-as-new) this set has used.")

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
        """What the set waits for people to do: the ``EmojiSetAwaiting`` search attribute."""
        waits = []
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


# --- Messages ----------------------------------------------------------------------------------------------------

CustomPrompt = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


class PickCharacterInput(_Request):
    """Update ``pick_character``: use another character candidate (before start frames are made from it)."""

    candidate: int = Field(ge=0)


class ApproveCharacterInput(_Request):
    """Update ``approve_character``: go on with the picked character (policy ``human``)."""

    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class PickStartFrameInput(_Request):
    """Update ``pick_start_frame``: choose which start frame candidate an action uses (not yet approving it)."""

    action: str
    candidate: int = Field(ge=0)


class ApproveStartFramesInput(_Request):
    """Update ``approve_start_frames``: animate these actions from their picked start frames (empty: every action
    whose start frame awaits review)."""

    actions: list[str] = Field(default_factory=list)
    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class RegenerateStartFrameInput(_Request):
    """Update ``regenerate_start_frame``: new start frame candidates for an action from a custom pose prompt."""

    action: str
    prompt: CustomPrompt
    candidates: int | None = Field(default=None, ge=1, le=4)


class PickCandidateInput(_Request):
    """Update ``pick_candidate``: choose by hand which candidate a frame slot uses."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)


class PickTakeInput(_Request):
    """Update ``pick_take``: use one take for a whole emoji (each slot's chosen frame of that take)."""

    emoji: str
    take: int = Field(ge=0)


class RegenerateActionInput(_Request):
    """Update ``regenerate_action``: a new take of an emoji's clip from a custom motion prompt; its frames join
    every slot's candidates."""

    emoji: str
    motion_prompt: CustomPrompt


class RegenerateFrameInput(_Request):
    """Update ``regenerate_frame``: new candidates for one frame slot, an image edit of its picked (or chosen) frame
    with a custom prompt."""

    emoji: str
    frame: int = Field(ge=0)
    prompt: CustomPrompt
    candidates: int | None = Field(default=None, ge=1, le=4)


class RefineMode(StrEnum):
    """What ``refine_frame`` does with the region it segments from the clicks."""

    ERASE = "erase"
    """Remove the region from the cut-out (alpha 0 there): a kept background blob, a stray shadow."""
    RESTORE = "restore"
    """Add the region back, opaque, with the colours of the pristine source frame: a part the matting dropped."""


class RefinePoint(_Request):
    """One click on a frame, in its pixel coordinates (x to the right, y down, from the top-left pixel)."""

    x: int = Field(ge=0)
    y: int = Field(ge=0)
    foreground: bool = Field(
        default=True, description="On the region to erase or restore; False: beside it, a barrier it stops at."
    )


class RefineFrameInput(_Request):
    """Update ``refine_frame``: correct a matted candidate's cut-out with clicks; the refined candidate becomes the
    slot's pick (by hand), and ``undo_refine`` takes the correction back."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)
    points: list[RefinePoint] = Field(min_length=1, max_length=MAX_REFINE_POINTS)
    mode: RefineMode
    following: bool = Field(
        default=False, description="Carry the same correction through the emoji's following frames (their picks)."
    )

    @model_validator(mode="after")
    def _has_foreground(self) -> RefineFrameInput:
        if not any(point.foreground for point in self.points):
            raise ValueError("at least one point must be on the region (foreground); background points only bound it")
        return self


class UndoRefineInput(_Request):
    """Update ``undo_refine``: bring back a candidate's cut-out from before its last refinement."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)
    following: bool = Field(
        default=False, description="Also undo the last refinement of the following frames' picks, if they have one."
    )


class ApproveInput(_Request):
    """Update ``approve``: assemble the set with the current picks."""

    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class CancelInput(_Request):
    """Update ``cancel``: stop the set; nothing is assembled."""

    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=500)] = ""


# --- Result ------------------------------------------------------------------------------------------------------


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


# --- Activities --------------------------------------------------------------------------------------------------


class CheckGeneratorInput(_Request):
    """Activity ``check_generator``: check a generator name and its configuration before any work."""

    generator: str


class PrepareUploadInput(_Request):
    """Activity ``prepare_upload``: check an uploaded character picture and clean it as the original did (cut out,
    on plain white, cropped to its content and padded square)."""

    set_id: str
    upload: ArtifactRef
    size: int = Field(ge=64, le=2048)


class GenerateCharacterInput(_Request):
    """Activity ``generate_character``: ``count`` character candidates from the prompt, on white, full body."""

    set_id: str
    prompt: str
    style: str
    first_candidate: int
    count: int = Field(ge=1, le=4)
    generator: str
    size: int
    seed: int


class CharacterRef(_Request):
    """The picked character as generators see it: its image, and the prompt and candidate it came from (a drawing
    generator draws the same character again from them; an image model edits the image)."""

    image: ArtifactRef
    prompt: str | None = None
    candidate: int = 0


class GenerateStartFrameInput(_Request):
    """Activity ``generate_start_frame``: ``count`` start frames, the character in the action's pose."""

    set_id: str
    action: ActionSpec
    character: CharacterRef
    prompt: str = Field(description="The pose prompt: the action's own, or a reviewer's custom one.")
    style: str
    first_candidate: int
    count: int = Field(ge=1, le=4)
    generator: str
    size: int
    seed: int


class GeneratedCandidate(_Model):
    index: int
    image: ArtifactRef


class GeneratedImages(_Model):
    candidates: list[GeneratedCandidate]
    generator: str


class GenerateClipInput(_Request):
    """Activity ``generate_clip``: one image-to-video take from the approved start frame (seconds to minutes; the
    provider's task id is heartbeated, so a retried attempt resumes the same paid task)."""

    set_id: str
    action: ActionSpec
    character: CharacterRef
    start_frame: ArtifactRef
    motion_prompt: str = Field(description="The motion prompt: the action's own, or a reviewer's custom one.")
    take: int
    seconds: float
    fps: int
    generator: str
    size: int
    seed: int


class ClipOutput(_Model):
    clip: ArtifactRef
    generator: str
    task_id: str | None = Field(default=None, description="The provider's task, for the operator.")


class ExtractFramesInput(_Request):
    """Activity ``extract_frames``: decode a clip, choose ``frames`` frames over a loop that closes smoothly, and
    store each slot's chosen frame with ``neighbours`` clip frames either side as its candidates."""

    set_id: str
    action: str
    take: int
    clip: ArtifactRef
    frames: int = Field(ge=2, le=MAX_FRAMES_PER_EMOJI)
    neighbours: int = Field(ge=0, le=4)
    size: int


class ClipFrame(_Model):
    """One extracted clip frame offered as a candidate."""

    source_frame: int
    offset: int
    image: ArtifactRef
    quality: float = Field(ge=0.0, le=1.0)


class ExtractFramesOutput(_Model):
    slots: list[list[ClipFrame]] = Field(description="Per frame slot: its chosen frame first, then its neighbours.")
    source_frames: int
    fps: float
    loop: tuple[int, int]


class EditFrameInput(_Request):
    """Activity ``edit_frame``: ``count`` new candidates for a frame slot, an image edit of ``source``."""

    set_id: str
    action: ActionSpec
    character: CharacterRef
    frame: int
    frames: int
    source: ArtifactRef
    prompt: str
    style: str
    first_candidate: int
    count: int = Field(ge=1, le=4)
    generator: str
    size: int
    seed: int


MatteKey = Annotated[str, StringConstraints(pattern=MATTE_KEY_PATTERN)]
"""Where a cut-out is written: a frame slot candidate's ``sets/<set>/<action>/frame-NNN/candidate-NN.matte.png``, and
nothing else (a matting request, a RunPod job's included, can never overwrite a set's character, sources or
packages)."""
MatteVersionKey = Annotated[str, StringConstraints(pattern=MATTE_VERSION_KEY_PATTERN)]
StabilisedKey = Annotated[str, StringConstraints(pattern=STABILISED_KEY_PATTERN)]


def _one_set(keys: list[str]) -> None:
    """Every output key of one request lies in one set."""
    sets = sorted({str(set_of_key(key)) for key in keys})
    if len(sets) > 1:
        raise ValueError(f"the output keys of one request lie in one set, these in {len(sets)}")


class MatteFrameInput(_Request):
    """One candidate to cut out of its background (inside ``matte_slot``, and one RunPod job)."""

    source: ArtifactRef = Field(description="A file of the set the output key lies in.")
    output_key: MatteKey = Field(description="Artifact key for the RGBA result; deterministic, so a retry overwrites.")
    pipeline: str


class MatteFrameOutput(_Model):
    matte: ArtifactRef
    score: float = Field(ge=0.0, le=1.0, description="Auto-pick score of the cut-out, see gpu_activity_worker.scoring.")
    score_parts: dict[str, float] = Field(default_factory=dict)
    pipeline: str
    device: str
    precision: str
    elapsed_ms: float


class MatteSlotInput(_Request):
    """Activity ``matte_slot`` (GPU queue): cut out every candidate of one frame slot, in one turn on the GPU."""

    pipeline: str
    candidates: list[ArtifactRef] = Field(min_length=1, max_length=MAX_CANDIDATES_PER_FRAME_TOTAL)
    output_keys: list[MatteKey] = Field(min_length=1, max_length=MAX_CANDIDATES_PER_FRAME_TOTAL)

    @model_validator(mode="after")
    def _paired(self) -> MatteSlotInput:
        if len(self.candidates) != len(self.output_keys):
            raise ValueError(f"{len(self.candidates)} candidates but {len(self.output_keys)} output keys")
        _one_set(self.output_keys)
        return self

    def frames(self) -> list[MatteFrameInput]:
        return [
            MatteFrameInput(source=source, output_key=key, pipeline=self.pipeline)
            for source, key in zip(self.candidates, self.output_keys, strict=True)
        ]


class MatteCandidateResult(_Model):
    """One candidate's outcome: its cut-out, or its own failure (the others of the slot are unaffected)."""

    output: MatteFrameOutput | None = None
    failure: FailureType | None = None
    error: str | None = None


class StabiliseEmojiInput(_Request):
    """Activity ``stabilise_emoji`` (GPU queue): make one emoji's picked frames consistent with each other."""

    mode: TemporalMode
    sources: list[ArtifactRef] = Field(min_length=2, max_length=MAX_FRAMES_PER_EMOJI, description="In frame order.")
    mattes: list[ArtifactRef] = Field(min_length=2, max_length=MAX_FRAMES_PER_EMOJI)
    output_keys: list[StabilisedKey] = Field(min_length=2, max_length=MAX_FRAMES_PER_EMOJI)

    @model_validator(mode="after")
    def _paired(self) -> StabiliseEmojiInput:
        if self.mode is TemporalMode.NONE:
            raise ValueError("temporal mode none stabilises nothing")
        if not len(self.sources) == len(self.mattes) == len(self.output_keys):
            raise ValueError(
                f"{len(self.sources)} sources, {len(self.mattes)} mattes and {len(self.output_keys)} output keys"
            )
        _one_set(self.output_keys)
        return self


class StabiliseEmojiOutput(_Model):
    mattes: list[ArtifactRef] = Field(description="The stabilised cut-outs, in frame order.")
    changed_pixels: int = Field(default=0, description="Alpha values (0..255) that changed, over all frames.")
    elapsed_ms: float = 0.0


class MatteSlotOutput(_Model):
    results: list[MatteCandidateResult] = Field(description="In the order of the input's candidates.")


class RefineTarget(_Request):
    """One cut-out to refine inside ``refine_matte``."""

    source: ArtifactRef = Field(description="The pristine source frame (the candidate's image before matting).")
    matte: ArtifactRef = Field(description="The current RGBA cut-out.")
    output_key: MatteVersionKey = Field(
        description="Artifact key of the new version; deterministic, so a retry overwrites."
    )


class RefineMatteInput(_Request):
    """Activity ``refine_matte`` (GPU queue): erase a region segmented from clicks from cut-outs, or restore it.

    The clicks are on the first frame; the others are the following frames of its emoji, which get the same
    correction (tracked by SAM2's video memory, or the same clicks segmented again on each frame).
    """

    frames: list[RefineTarget] = Field(min_length=1, max_length=MAX_FRAMES_PER_EMOJI)
    points: list[RefinePoint] = Field(min_length=1, max_length=MAX_REFINE_POINTS)
    mode: RefineMode
    refiner: str = Field(
        default="clicks",
        description="The click segmenter: 'clicks' (weight-free region growing) or 'sam2[:variant]' (where its weights "
        "are, else 'clicks').",
    )

    @model_validator(mode="after")
    def _outputs_in_one_set(self) -> RefineMatteInput:
        _one_set([frame.output_key for frame in self.frames])
        return self


class RefineMatteOutput(_Model):
    frames: list[MatteFrameOutput] = Field(description="The new versions, in the order of the input's frames.")
    refiner: str = Field(description="The click segmenter that ran.")


class DescribePipelineInput(_Request):
    """Activity ``describe_pipeline`` (GPU queue): check a pipeline name where the engines live, before any work."""

    pipeline: str
    temporal: TemporalMode = Field(
        default=TemporalMode.NONE, description="Also check (and load) what this temporal mode needs, e.g. SAM 2."
    )


class PipelineDescription(_Model):
    pipeline: str
    steps: list[str]
    device: str
    precision: str


class AssembleEmojiInput(_Request):
    """Activity ``assemble_emoji``: export one emoji from its picked, matted frames."""

    set_id: str
    pose: ActionId
    frames: list[ArtifactRef] = Field(min_length=1)
    frame_duration_ms: int


class ContactSheetInput(_Request):
    """Activity ``assemble_contact_sheet``: every emoji's frames on one checkerboard page."""

    set_id: str
    title: str
    rows: list[tuple[str, list[ArtifactRef]]]


class CheckExportsInput(_Request):
    """Activity ``check_exports``: whether the platform targets take a set of this many emoji, before any work."""

    targets: list[ExportTarget]
    emojis: int


class EmojiFramesRef(_Request):
    """One approved emoji for an export: its picked, matted frames in order."""

    pose: ActionId = Field(description="The action's name; it names the emoji's files in a package.")
    frames: list[ArtifactRef] = Field(min_length=1)
    frame_duration_ms: int = Field(ge=1)


class ExportPackageInput(_Request):
    """Activity ``export_package``: one platform target's upload package for the set's approved emoji."""

    set_id: str
    target: ExportTarget
    emojis: list[EmojiFramesRef] = Field(min_length=1)


class PackageFileOutput(_Model):
    """One file of a package, with how it was fitted into the platform's limits (emoji files only)."""

    name: str
    file: ArtifactRef
    emoji: str | None = None
    rung: str | None = Field(default=None, description="The ladder rung that first fitted, e.g. palette-64.")
    frames: int | None = None
    loop_s: float | None = None
    plays: int | None = Field(default=None, description="How often the loop plays; 0 = forever.")
    ssim_white: float | None = None
    ssim_dark: float | None = None


class PackageOutput(_Model):
    """One platform target's upload package: its files as the platform expects them, and the ZIP if it takes one."""

    target: ExportTarget
    files: list[PackageFileOutput] = Field(default_factory=list)
    archive: ArtifactRef | None = None
    error: str | None = Field(default=None, description="Why the set could not be fitted to this platform.")


class ExportSetInput(_Request):
    """Workflow ``ExportSet``: platform packages for a finished set's approved emoji, without redoing anything else."""

    set_id: str = Field(description="The finished set whose picks are exported.")
    targets: list[ExportTarget] = Field(min_length=1)
    emojis: list[EmojiFramesRef] = Field(min_length=1)


class ExportSetResult(_Model):
    set_id: str
    packages: list[PackageOutput]
