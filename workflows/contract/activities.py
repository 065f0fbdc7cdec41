"""Every activity's input and output, in the order a set needs them: the checks before any work, generation,
clips, matting and refinement (on the GPU queue), assembly and platform packages.

Inputs are requests (:class:`~workflows.contract.base._Request`), outputs results
(:class:`~workflows.contract.base._Model`); :class:`~workflows.contract.vocabulary.ActivityName` names each activity.
A GPU request writes only cut-outs of one set (:data:`MatteKey`, :data:`MatteVersionKey`, :data:`StabilisedKey`).
An export's models (:class:`EmojiFramesRef`, :class:`PackageOutput`) are also part of the EmojiSet workflow's result
and of the ExportSet workflow's input and result.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from workflows.contract.base import ArtifactRef, _Model, _Request
from workflows.contract.events import Webhook
from workflows.contract.ledger import Budget, Usage
from workflows.contract.messages import RefinePoint
from workflows.contract.set_input import ActionSpec
from workflows.contract.vocabulary import (
    MAX_CANDIDATES_PER_FRAME_TOTAL,
    MAX_FRAMES_PER_EMOJI,
    MAX_REFINE_POINTS,
    ActionId,
    ExportTarget,
    FailureType,
    RefineMode,
    TemporalMode,
)
from workflows.keys import MATTE_KEY_PATTERN, MATTE_VERSION_KEY_PATTERN, STABILISED_KEY_PATTERN, set_of_key


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
    usage: Usage | None = Field(default=None, description="What the call made, for the set's ledger.")


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
    usage: Usage | None = Field(default=None, description="What the call made, for the set's ledger.")


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
    gpu_seconds: float = Field(default=0.0, description="How long it held a GPU (sam2 only; the set's ledger).")


class MatteSlotOutput(_Model):
    results: list[MatteCandidateResult] = Field(description="In the order of the input's candidates.")
    gpu_seconds: float = Field(default=0.0, description="How long the slot held its GPU (the set's ledger).")


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
    gpu_seconds: float = Field(default=0.0, description="How long the refinement held its GPU (the set's ledger).")


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


class DescribeDeploymentInput(_Request):
    """Activity ``describe_deployment``: the deployment's terms for a new set (prices, default budget and webhook),
    and a check of the set's own budget and webhook against them, before any paid work."""

    generator: str
    webhook: Webhook | None = None
    budget: Budget | None = None
    clip_seconds: float | None = Field(default=None, description="The set's clip length, to be priced as billed.")


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
