"""Every activity the workflows call, declared once: its task queue, timeouts and retry policy.

A workflow calls an activity through its declaration here (``calls.matte_slot(request, summary=...)``) and reads a
failure for good through :func:`outcome`: a typed result or a :class:`Failed` with the reason a person can act on,
a cancellation going on up. Nothing else in ``workflows/`` schedules an activity (``tests/workflows/test_vocabulary.py``
checks it), so a queue, a timeout or a retry policy is changed in one place.

Changing what a declaration sends (its queue, timeouts, retry policy) changes the commands a set records: released
histories must still replay (docs/architecture.md, "The contract evolves by addition").
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.contract import (
        GPU_TASK_QUEUE,
        HEARTBEAT_TIMEOUT,
        INTERACTIVE_PRIORITY,
        NON_RETRYABLE_FAILURES,
        PAID_TASK_QUEUE,
        ActivityName,
        ArtifactRef,
        AssembleEmojiInput,
        CheckExportsInput,
        CheckGeneratorInput,
        ClipOutput,
        ContactSheetInput,
        DeliverEventInput,
        DeploymentTerms,
        DescribeDeploymentInput,
        DescribePipelineInput,
        EditFrameInput,
        EmojiOutput,
        ExportPackageInput,
        ExtractFramesInput,
        ExtractFramesOutput,
        FailureType,
        GenerateCharacterInput,
        GenerateClipInput,
        GeneratedImages,
        GenerateStartFrameInput,
        MatteSlotInput,
        MatteSlotOutput,
        PackageOutput,
        PipelineDescription,
        PrepareUploadInput,
        RefineMatteInput,
        RefineMatteOutput,
        StabiliseEmojiInput,
        StabiliseEmojiOutput,
    )

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")
T = TypeVar("T")

NON_RETRYABLE = sorted(failure.value for failure in NON_RETRYABLE_FAILURES)
"""Listed in every retry policy: workers raise these non-retryable already; the list also covers an activity that
reports one of these types without the flag."""
GENERATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=6,
    non_retryable_error_types=NON_RETRYABLE,
)
"""Paid generation: a throttled or failing service is given about two minutes over six attempts."""
MATTE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=NON_RETRYABLE,
)
"""GPU work: a lost worker or an out-of-memory turn is tried again on another worker soon."""
STEP_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE)
"""Local steps (checks, decoding, assembly, exports): a third failure is not a blip."""
DELIVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=30),
    maximum_attempts=60,
    non_retryable_error_types=NON_RETRYABLE,
)
"""A webhook event: a receiver that is down is tried again for about a day (the first minute closely)."""
PAID_QUEUE_PATCH = "paid-task-queue"
"""Sets started on a build with it call their generators on :data:`PAID_TASK_QUEUE`; older histories (which called
them on the orchestration queue) replay as they were."""
KNOWN_FAILURES = frozenset(failure.value for failure in FailureType)


@dataclass(frozen=True)
class Activity(Generic[InputT, OutputT]):
    """One activity as the workflows call it: its name, result type, queue, timeout and retry policy.

    Every call also has :data:`HEARTBEAT_TIMEOUT`, so a lost worker's activity is retried within seconds.
    """

    name: ActivityName
    output: type[OutputT] | None
    start_to_close: timedelta
    retry: RetryPolicy
    task_queue: str | None = None
    """None: the calling workflow's own task queue (the orchestration queue)."""
    paid: bool = False
    """A generator call: on :data:`PAID_TASK_QUEUE` (for sets with :data:`PAID_QUEUE_PATCH`)."""

    def __call__(self, request: InputT, *, summary: str, interactive: bool = False) -> Awaitable[OutputT]:
        """Schedule the activity once the result is awaited.

        Args:
            request: Its input.
            summary: What the Web UI shows for it.
            interactive: A reviewer waits for it: it goes ahead of every set's production on its queue
                (:data:`INTERACTIVE_PRIORITY`), within the set owner's fair share. Otherwise it has the set's own
                priority and fairness key, inherited from the workflow.
        """
        paid = self.paid and workflow.patched(PAID_QUEUE_PATCH)
        return workflow.execute_activity(
            self.name,
            request,
            task_queue=PAID_TASK_QUEUE if paid else self.task_queue,
            result_type=self.output,
            start_to_close_timeout=self.start_to_close,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=self.retry,
            summary=summary,
            priority=interactive_priority() if interactive else Priority.default,
        )


def interactive_priority() -> Priority:
    """The workflow's own fairness key and weight, at :data:`INTERACTIVE_PRIORITY`."""
    own = workflow.info().priority
    return Priority(
        priority_key=INTERACTIVE_PRIORITY, fairness_key=own.fairness_key, fairness_weight=own.fairness_weight
    )


check_generator = Activity[CheckGeneratorInput, None](
    ActivityName.CHECK_GENERATOR, None, timedelta(minutes=1), STEP_RETRY
)
describe_deployment = Activity[DescribeDeploymentInput, DeploymentTerms](
    ActivityName.DESCRIBE_DEPLOYMENT, DeploymentTerms, timedelta(minutes=1), STEP_RETRY
)
deliver_event = Activity[DeliverEventInput, int](ActivityName.DELIVER_EVENT, int, timedelta(seconds=150), DELIVER_RETRY)
"""Called by the DeliverSetEvent workflow: the receiver's HTTP status once it took the event."""
check_exports = Activity[CheckExportsInput, list[str]](
    ActivityName.CHECK_EXPORTS, list[str], timedelta(minutes=1), STEP_RETRY
)
describe_pipeline = Activity[DescribePipelineInput, PipelineDescription](
    ActivityName.DESCRIBE_PIPELINE, PipelineDescription, timedelta(minutes=10), STEP_RETRY, GPU_TASK_QUEUE
)
"""On the GPU queue: a pipeline is checked where it runs, and its weights are loaded there before the first slot."""
prepare_upload = Activity[PrepareUploadInput, ArtifactRef](
    ActivityName.PREPARE_UPLOAD, ArtifactRef, timedelta(minutes=2), STEP_RETRY
)
generate_character = Activity[GenerateCharacterInput, GeneratedImages](
    ActivityName.GENERATE_CHARACTER, GeneratedImages, timedelta(minutes=10), GENERATE_RETRY, paid=True
)
generate_start_frame = Activity[GenerateStartFrameInput, GeneratedImages](
    ActivityName.GENERATE_START_FRAME, GeneratedImages, timedelta(minutes=10), GENERATE_RETRY, paid=True
)
generate_clip = Activity[GenerateClipInput, ClipOutput](
    ActivityName.GENERATE_CLIP, ClipOutput, timedelta(minutes=30), GENERATE_RETRY, paid=True
)
extract_frames = Activity[ExtractFramesInput, ExtractFramesOutput](
    ActivityName.EXTRACT_FRAMES, ExtractFramesOutput, timedelta(minutes=5), STEP_RETRY
)
edit_frame = Activity[EditFrameInput, GeneratedImages](
    ActivityName.EDIT_FRAME, GeneratedImages, timedelta(minutes=10), GENERATE_RETRY, paid=True
)
matte_slot = Activity[MatteSlotInput, MatteSlotOutput](
    ActivityName.MATTE_SLOT, MatteSlotOutput, timedelta(minutes=10), MATTE_RETRY, GPU_TASK_QUEUE
)
refine_matte = Activity[RefineMatteInput, RefineMatteOutput](
    ActivityName.REFINE_MATTE, RefineMatteOutput, timedelta(minutes=10), MATTE_RETRY, GPU_TASK_QUEUE
)
stabilise_emoji = Activity[StabiliseEmojiInput, StabiliseEmojiOutput](
    ActivityName.STABILISE_EMOJI, StabiliseEmojiOutput, timedelta(minutes=10), MATTE_RETRY, GPU_TASK_QUEUE
)
assemble_contact_sheet = Activity[ContactSheetInput, ArtifactRef](
    ActivityName.ASSEMBLE_CONTACT_SHEET, ArtifactRef, timedelta(minutes=5), STEP_RETRY
)
assemble_emoji = Activity[AssembleEmojiInput, EmojiOutput](
    ActivityName.ASSEMBLE_EMOJI, EmojiOutput, timedelta(minutes=5), STEP_RETRY
)
export_package = Activity[ExportPackageInput, PackageOutput](
    ActivityName.EXPORT_PACKAGE, PackageOutput, timedelta(minutes=10), STEP_RETRY
)


@dataclass(frozen=True)
class Failed:
    """An activity that failed for good (its retries spent, or a non-retryable failure)."""

    reason: str
    """What a person can act on (:func:`failure_reason`)."""
    error: ActivityError
    """The failure itself, to chain from (``raise ... from failed.error``)."""
    kind: FailureType | None = None
    """The failure's type in the vocabulary (the first one in the error's chain), None for any other failure."""


async def outcome(work: Awaitable[T]) -> T | Failed:
    """The result of an activity call (or of several gathered), or :class:`Failed`.

    A cancellation is not a failure: it goes on up, so the work that awaited it stops too. The call is awaited in
    the caller's own task (no task of its own), so wrapping a call in ``outcome`` changes no command.
    """
    try:
        return await work
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):
            raise
        known = _known_failure(err)
        return Failed(failure_reason(err), err, None if known is None else FailureType(str(known.type)))


def failure_reason(err: FailureError) -> str:
    """The message a person can act on: the first failure of the vocabulary in the error's chain (a worker's own
    words, not the library error it was raised from), else the innermost failure."""
    known = _known_failure(err)
    if known is not None:
        return str(known) or str(known.type)
    cause: BaseException = err
    while isinstance(cause, FailureError) and cause.cause is not None:
        cause = cause.cause
    return str(cause) or type(cause).__name__


def _known_failure(err: FailureError) -> ApplicationError | None:
    """The first failure of the vocabulary in the error's chain."""
    cause: BaseException | None = err
    while isinstance(cause, FailureError):
        if isinstance(cause, ApplicationError) and cause.type in KNOWN_FAILURES:
            return cause
        cause = cause.cause
    return None
