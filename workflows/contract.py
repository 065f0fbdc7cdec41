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

from workflows.presets import DEFAULT_POSES, PRESETS, PosePreset

ORCHESTRATION_TASK_QUEUE = "emoji-orchestration"
GPU_TASK_QUEUE = "emoji-gpu"
WORKFLOW_TYPE = "EmojiSet"
EXPORT_WORKFLOW_TYPE = "ExportSet"

MAX_POSES = 24
MAX_FRAMES_PER_EMOJI = 48
MAX_CANDIDATES_PER_FRAME = 8
MAX_FRAMES_PER_SET = 600
MAX_CANDIDATES_PER_SET = 1000
MAX_CANDIDATES_PER_FRAME_TOTAL = 40
"""Candidates a frame may accumulate through regenerations. Together with MAX_CANDIDATES_PER_SET (which regenerations
count against too) this keeps the state, carried across continue-as-new and returned by get_state, far below
Temporal's 2 MiB payload limit."""

PIPELINE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]*(:[A-Za-z0-9_.-]+)?(\+[a-z0-9][a-z0-9_.-]*(:[A-Za-z0-9_.-]+)?)*$")
"""A matting pipeline name: steps joined by '+', each ``engine`` or ``engine:variant`` (e.g. ``rembg:isnet-anime``)."""


# --- Vocabulary: activity names and failure types ----------------------------------------------------------------


class ActivityName(StrEnum):
    """Every activity, by the name its worker registers and the workflow calls (workflows never import workers)."""

    CHECK_GENERATOR = "check_generator"
    CHECK_EXPORTS = "check_exports"
    GENERATE_FRAME = "generate_frame"
    DESCRIBE_PIPELINE = "describe_pipeline"
    MATTE_FRAME = "matte_frame"
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
    UNKNOWN_PIPELINE = "UnknownPipeline"
    UNSUPPORTED_IMAGE = "UnsupportedImage"
    """A matting step cannot handle the image (e.g. no plain background for ``classical``); another pipeline may."""
    CORRUPT_IMAGE = "CorruptImage"
    WEIGHTS_MISSING = "WeightsMissing"
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


class _Model(BaseModel):
    """Base of every contract model: unknown fields are an error, so a typo in a JSON input is caught."""

    model_config = ConfigDict(extra="forbid")


# --- Artifacts ---------------------------------------------------------------------------------------------------


class ArtifactRef(_Model):
    """A stored blob (claim check). Workers fetch the bytes by ``uri`` and verify them against ``sha256``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    """What happens when the review deadline passes with no decision."""

    AUTO_APPROVE = "auto_approve"
    EXPIRE = "expire"


class ReviewPolicy(_Model):
    """How long humans get to review, and what the deadline does."""

    deadline: timedelta = Field(default=timedelta(hours=24), gt=timedelta(0), le=timedelta(days=30))
    on_deadline: DeadlinePolicy = DeadlinePolicy.AUTO_APPROVE


class EmojiSetInput(_Model):
    """Start a set: one animated emoji per pose preset, ``frames_per_emoji`` frames each."""

    character_prompt: Prompt = Field(description="Who the character is, e.g. 'a round orange cat with a blue scarf'.")
    style: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = "flat cartoon sticker"
    poses: list[str] = Field(default_factory=lambda: list(DEFAULT_POSES), min_length=1)
    frames_per_emoji: int = Field(default=12, ge=1, le=MAX_FRAMES_PER_EMOJI)
    candidates_per_frame: int = Field(default=2, ge=1, le=MAX_CANDIDATES_PER_FRAME)
    matting_pipeline: str = "classical"
    generator: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$")] = "procedural"
    image_size: int = Field(default=256, ge=64, le=2048, description="Edge of the square frames, in pixels.")
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

    @field_validator("poses")
    @classmethod
    def _known_unique_poses(cls, poses: list[str]) -> list[str]:
        unknown = [p for p in poses if p not in PRESETS]
        if unknown:
            raise ValueError(f"unknown pose preset(s) {unknown}; known presets: {sorted(PRESETS)}")
        if len(set(poses)) != len(poses):
            raise ValueError(f"poses must be unique, got {poses}")
        if len(poses) > MAX_POSES:
            raise ValueError(f"at most {MAX_POSES} poses per set, got {len(poses)}")
        return poses

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
    def _bounded_size(self) -> EmojiSetInput:
        frames = len(self.poses) * self.frames_per_emoji
        if frames > MAX_FRAMES_PER_SET:
            raise ValueError(f"a set has at most {MAX_FRAMES_PER_SET} frames, this one asks for {frames}")
        if frames * self.candidates_per_frame > MAX_CANDIDATES_PER_SET:
            raise ValueError(
                f"a set has at most {MAX_CANDIDATES_PER_SET} candidates (frames x candidates per frame), "
                f"this one asks for {frames * self.candidates_per_frame}"
            )
        return self


# --- Workflow state (the get_state query) ------------------------------------------------------------------------


class Phase(StrEnum):
    """Where a set is. Also the ``EmojiSetPhase`` search attribute."""

    GENERATING = "generating"
    MATTING = "matting"
    AWAITING_REVIEW = "awaiting_review"
    ASSEMBLING = "assembling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class FrameStatus(StrEnum):
    PENDING = "pending"
    GENERATING = "generating"
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


class Candidate(_Model):
    """One generated image for a frame and, once matted, its cut-out and score."""

    index: int
    prompt: str | None = Field(default=None, description="The reviewer's custom prompt; None for the preset's own.")
    source: ArtifactRef
    status: CandidateStatus = CandidateStatus.MATTING
    matte: ArtifactRef | None = None
    score: float | None = None
    error: str | None = None


class FrameState(_Model):
    """One frame of one emoji: its candidates and which one is picked."""

    index: int
    status: FrameStatus = FrameStatus.PENDING
    candidates: list[Candidate] = Field(default_factory=list, description="Sorted by candidate index.")
    pick: int | None = Field(default=None, description="The picked candidate's index.")
    picked_by: PickSource | None = None
    error: str | None = None
    regenerations: int = 0

    def usable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status is CandidateStatus.READY]

    def candidate(self, index: int) -> Candidate | None:
        return next((c for c in self.candidates if c.index == index), None)

    def picked(self) -> Candidate | None:
        return None if self.pick is None else self.candidate(self.pick)


class EmojiState(_Model):
    pose: str
    frames: list[FrameState]


class EmojiSetState(_Model):
    """Everything the workflow knows; carried across continue-as-new and returned by ``get_state``."""

    set_id: str
    input: EmojiSetInput
    phase: Phase
    emojis: list[EmojiState]
    review_deadline: datetime | None = None
    approved_by: str | None = None
    cancel_reason: str | None = None
    notice: str | None = Field(default=None, description="Last thing a reviewer should know, e.g. a refused approval.")
    pipeline_info: str | None = None
    export_refusals: list[str] = Field(
        default_factory=list, description="Platform targets that will not take this set, and why (known at start)."
    )
    runs: int = Field(default=1, description="How many workflow runs (continue-as-new) this set has used.")

    def frames(self) -> list[tuple[EmojiState, FrameState]]:
        return [(emoji, frame) for emoji in self.emojis for frame in emoji.frames]

    def frames_done(self) -> int:
        return sum(1 for _, frame in self.frames() if frame.status is FrameStatus.READY)

    def frames_total(self) -> int:
        return sum(len(emoji.frames) for emoji in self.emojis)

    def unusable_frames(self) -> list[str]:
        """Frames with no usable candidate, as ``pose#frame`` labels."""
        return [f"{e.pose}#{f.index}" for e, f in self.frames() if f.status is not FrameStatus.READY]

    def emoji(self, pose: str) -> EmojiState | None:
        return next((e for e in self.emojis if e.pose == pose), None)


# --- Messages ----------------------------------------------------------------------------------------------------


class PickCandidateInput(_Model):
    """Update ``pick_candidate``: choose by hand which candidate a frame uses."""

    emoji: str
    frame: int = Field(ge=0)
    candidate: int = Field(ge=0)


class RegenerateFrameInput(_Model):
    """Update ``regenerate_frame``: new candidates from a custom prompt, for one frame or (frame omitted) a whole emoji.

    The new candidates are appended; the frame's pick moves to the best new one only if the frame had no usable
    candidate or the pick was automatic.
    """

    emoji: str
    frame: int | None = Field(default=None, ge=0)
    prompt: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
    candidates: int | None = Field(default=None, ge=1, le=MAX_CANDIDATES_PER_FRAME)


class RegenerateFrameResult(_Model):
    frames: list[FrameState]


class ApproveInput(_Model):
    """Signal ``approve``: assemble the set with the current picks."""

    reviewer: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] = ""


class CancelInput(_Model):
    """Signal ``cancel``: stop the set; nothing is assembled."""

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


class GenerateFrameInput(_Model):
    """Activity ``generate_frame``: draw ``count`` candidates for one frame and store them."""

    set_id: str
    pose: PosePreset
    character_prompt: str
    style: str
    prompt: str = Field(description="The full prompt for this frame (character, pose, and any custom reviewer prompt).")
    frame: int
    frame_count: int
    first_candidate: int = Field(description="Index of the first new candidate; keys are deterministic from it.")
    count: int
    generator: str
    image_size: int
    seed: int


class GeneratedCandidate(_Model):
    index: int
    image: ArtifactRef


class GenerateFrameOutput(_Model):
    candidates: list[GeneratedCandidate]
    generator: str


class MatteFrameInput(_Model):
    """Activity ``matte_frame`` (GPU queue): cut one candidate out of its background."""

    source: ArtifactRef
    output_key: str = Field(description="Artifact key for the RGBA result; deterministic, so a retry overwrites.")
    pipeline: str


class MatteFrameOutput(_Model):
    matte: ArtifactRef
    score: float = Field(ge=0.0, le=1.0, description="Auto-pick score of the cut-out, see gpu_activity_worker.scoring.")
    score_parts: dict[str, float] = Field(default_factory=dict)
    pipeline: str
    device: str
    precision: str
    elapsed_ms: float


class DescribePipelineInput(_Model):
    """Activity ``describe_pipeline`` (GPU queue): check a pipeline name where the engines live, before any work."""

    pipeline: str


class PipelineDescription(_Model):
    pipeline: str
    steps: list[str]
    device: str
    precision: str


class CheckGeneratorInput(_Model):
    """Activity ``check_generator``: check a generator name and its configuration before any work."""

    generator: str


class AssembleEmojiInput(_Model):
    """Activity ``assemble_emoji``: export one emoji from its picked, matted frames."""

    set_id: str
    pose: str
    frames: list[ArtifactRef] = Field(min_length=1)
    frame_duration_ms: int


class ContactSheetInput(_Model):
    """Activity ``assemble_contact_sheet``: every emoji's frames on one checkerboard page."""

    set_id: str
    title: str
    rows: list[tuple[str, list[ArtifactRef]]]


class CheckExportsInput(_Model):
    """Activity ``check_exports``: whether the platform targets take a set of this many emoji, before any work."""

    targets: list[ExportTarget]
    emojis: int


class EmojiFramesRef(_Model):
    """One approved emoji for an export: its picked, matted frames in order."""

    pose: str
    frames: list[ArtifactRef] = Field(min_length=1)
    frame_duration_ms: int = Field(ge=1)


class ExportPackageInput(_Model):
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


class ExportSetInput(_Model):
    """Workflow ``ExportSet``: platform packages for a finished set's approved emoji, without redoing anything else."""

    set_id: str = Field(description="The finished set whose picks are exported.")
    targets: list[ExportTarget] = Field(min_length=1)
    emojis: list[EmojiFramesRef] = Field(min_length=1)


class ExportSetResult(_Model):
    set_id: str
    packages: list[PackageOutput]
