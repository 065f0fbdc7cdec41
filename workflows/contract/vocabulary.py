"""The contract's vocabulary: the names, values and limits that every kind of model and every process shares.

Task queues and workflow types, timeouts, the limits a set is held to, every activity's name (:class:`ActivityName`),
every typed failure (:class:`FailureType`), and the enums and constrained strings that more than one kind of model
uses (an action's name, a temporal mode, an export target, a refinement's mode). No models: they are in the other
modules of :mod:`workflows.contract`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import StringConstraints
from temporalio.exceptions import ApplicationError

# --- Task queues, workflow types, timeouts -------------------------------------------------------------------------

ORCHESTRATION_TASK_QUEUE = "emoji-orchestration"
GPU_TASK_QUEUE = "emoji-gpu"
PAID_TASK_QUEUE = "emoji-paid"
"""The generator calls (character, start frames, clips, frame edits): the provider is paid per call and rate-limits
us, so the deployment bounds them on a queue of their own (``activities.settings.PaidGenerationSettings``)."""
WORKFLOW_TYPE = "EmojiSet"
EXPORT_WORKFLOW_TYPE = "ExportSet"
DELIVER_EVENT_WORKFLOW_TYPE = "DeliverSetEvent"

PRODUCTION_PRIORITY = 3
"""A set's task queue priority (Temporal's keys run from 1, first, to 5; 3 is its default): every activity of the
set has it unless it is :data:`INTERACTIVE_PRIORITY`."""
INTERACTIVE_PRIORITY = 1
"""The priority of work a reviewer waits for (a regenerated start frame, a new take, a frame edit, a refinement):
ahead of every set's production, on both queues."""
RECOVERY_PRIORITY = 2
"""The priority a restarted GPU worker gives the slots its lost predecessor was running (``gpu_activity_worker``
recovery): ahead of every set's production, behind a reviewer's work, so interrupted work does not wait at the back of
the queue."""
ANONYMOUS_OWNER = "-"
"""The fairness key of a set without an owner: such sets share one key."""


FAIRNESS_KEY_BYTES = 64
"""The longest fairness key Temporal takes, in UTF-8 bytes (an owner may be longer)."""


def fairness_key(owner: str, tier: str = "") -> str:
    """The fairness key of an owner's sets (in a tier, ``<tier>:<owner>``): each key's tasks get their share of a
    queue (its tier's weight), however many it queued (Temporal's task queue fairness). A key too long is cut and told
    apart by a digest."""
    key = f"{tier}:{owner or ANONYMOUS_OWNER}" if tier else owner or ANONYMOUS_OWNER
    if len(key.encode()) <= FAIRNESS_KEY_BYTES:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    kept = key.encode()[: FAIRNESS_KEY_BYTES - len(digest) - 1].decode(errors="ignore")
    return f"{kept}~{digest}"


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


# --- Limits --------------------------------------------------------------------------------------------------------

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


# --- Activity names and failure types ------------------------------------------------------------------------------


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
    DESCRIBE_DEPLOYMENT = "describe_deployment"
    DELIVER_EVENT = "deliver_event"


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
    DEPLOYMENT_MISCONFIGURED = "DeploymentMisconfigured"
    """The deployment's own configuration is refused (RunPod: the API key, or an endpoint id it does not know): no
    set's work of that kind can run until an operator changes the setting the message names. It fails a set in
    production; in the final review only the reviewer's regeneration fails."""
    EXPORT_DOES_NOT_FIT = "ExportDoesNotFit"
    """A set cannot meet a platform's rule (bytes, frames, set size): the message names the rule and the closest
    figure reached. Encoding the same frames again gives the same."""
    WEBHOOK_UNAVAILABLE = "WebhookUnavailable"
    """A webhook did not take the event this time (down, slow, a 5xx, 408, 409, 425 or 429, a DNS lookup that failed
    for now, a TLS certificate refused): delivered again later."""
    WEBHOOK_REFUSED = "WebhookRefused"
    """A webhook cannot take the event: its secret is not configured, its host does not exist or its address is not
    allowed (a private one), or the receiver answered that it never will (a redirect, a 4xx other than 408, 409, 425
    and 429)."""

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
        FailureType.DEPLOYMENT_MISCONFIGURED,
        FailureType.EXPORT_DOES_NOT_FIT,
        FailureType.WEBHOOK_REFUSED,
    }
)
"""The failures a retry cannot fix: the workflow's retry policies list exactly these."""


# --- Shared by several kinds of model ------------------------------------------------------------------------------


ActionId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")]
"""An action's name: lower-case letters, digits and dashes (it names files in every package)."""


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


class ExportTarget(StrEnum):
    """Where a finished set goes: the generic files, or one platform's upload package within its limits."""

    GENERIC = "generic"
    """Animated WebP, APNG and GIF and a sprite sheet per emoji, at the frames' own size."""
    LINE_EMOJI = "line-emoji"
    LINE_STICKER = "line-sticker"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    SLACK = "slack"


class RefineMode(StrEnum):
    """What ``refine_frame`` does with the region it segments from the clicks."""

    ERASE = "erase"
    """Remove the region from the cut-out (alpha 0 there): a kept background blob, a stray shadow."""
    RESTORE = "restore"
    """Add the region back, opaque, with the colours of the pristine source frame: a part the matting dropped."""
