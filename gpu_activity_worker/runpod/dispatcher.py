"""The dispatcher: the GPU queue served by a RunPod Serverless endpoint instead of a GPU in this process.

A Temporal worker on ``emoji-gpu`` whose ``matte_frame`` runs as one RunPod job: submit (``POST /run`` with the
execution policy), then poll ``/status`` until the job has finished.
``python -m gpu_activity_worker.runpod.dispatcher``.

- The job id is heartbeated right after the submission and on every poll. RunPod has no idempotency key, so a retried
  attempt reads the id back from its heartbeat details and resumes polling that job instead of submitting a second
  one; it submits anew only if that job ended FAILED, TIMED_OUT or CANCELLED, or RunPod no longer knows it.
- A Temporal cancellation (delivered through the heartbeat) cancels the job. A worker shutdown or an attempt that
  timed out does not: the next attempt resumes the job.
- A FAILED job whose type a retry cannot fix (``UnknownPipeline``, ``UnsupportedImage`` ...) fails the activity for
  good with that type; TIMED_OUT, throttling (429), RunPod errors (5xx), lost jobs and network errors are retried.
- The worker runs as many activities as the endpoint runs jobs (max workers x jobs per worker), so the workflow's
  fan-out fills the endpoint and nothing waits in RunPod's queue, where no Temporal cancellation or priority reaches.
- Images travel by reference through a shared ``s3://`` store, or inline in the job when this dispatcher's store is
  a ``file://`` root RunPod cannot read.

``describe_pipeline`` checks the pipeline name against the engine registry here, without loading a model or waking an
endpoint worker, and reports the device as ``runpod:<endpoint id>``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker

from core.artifacts import ArtifactError, ArtifactStore, open_store
from core.connection import connect
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, ObservabilitySettings, TemporalSettings
from gpu_activity_worker.engines import StepRegistry, builtin_steps
from gpu_activity_worker.engines.base import MattingError
from gpu_activity_worker.matting import failure_type
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.api import JobNotFoundError, JobReport, JobStatus, RunPodApi, RunPodApiError
from gpu_activity_worker.runpod.jobs import (
    MatteJob,
    MatteJobOutput,
    decode_inline,
    encode_inline,
    parse_job_error,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from workflows.contract import (
    GPU_TASK_QUEUE,
    ActivityName,
    DescribePipelineInput,
    FailureType,
    MatteFrameInput,
    MatteFrameOutput,
    PipelineDescription,
)

CANCEL_DELAY = timedelta(seconds=2)
"""Longest heartbeat throttle: how soon a cancellation reaches a polling activity (the SDK's default is 80% of the
heartbeat timeout, a minute here), so a cancelled set stops paying for GPU time within seconds."""

RESUBMIT = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED)
"""States of a previous attempt's job that a retry replaces with a new job instead of resuming."""


def _matting_failure(err: MattingError | ArtifactError) -> ApplicationError:
    return failure_type(err).error(str(err))


def _api_failure(err: RunPodApiError) -> ApplicationError:
    """A failed RunPod request as a Temporal failure: retried unless RunPod refused the request itself."""
    if isinstance(err, JobNotFoundError):
        return FailureType.RUNPOD_JOB_LOST.error(f"the RunPod job was lost: {err}")
    if err.status == 429:
        delay = timedelta(seconds=err.retry_after_s) if err.retry_after_s else None
        return FailureType.RUNPOD_THROTTLED.error(str(err), next_retry_delay=delay)
    if err.retryable:
        return FailureType.RUNPOD_UNAVAILABLE.error(str(err))
    return FailureType.RUNPOD_REJECTED.error(str(err))


def _job_failure(report: JobReport) -> ApplicationError:
    """A finished job that did not complete, as a Temporal failure."""
    if report.status is JobStatus.FAILED:
        kind, message = parse_job_error(report.error)
        return kind.error(f"RunPod job {report.id} failed: {message}")
    if report.status is JobStatus.TIMED_OUT:
        return FailureType.RUNPOD_TIMED_OUT.error(
            f"RunPod job {report.id} timed out (queued {report.delay_ms} ms, ran {report.execution_ms} ms); "
            "its worker was lost or the job outran the execution timeout"
        )
    return FailureType.RUNPOD_CANCELLED.error(f"RunPod job {report.id} was cancelled at RunPod")


def _cancels_job(details: activity.ActivityCancellationDetails | None) -> bool:
    """Whether a cancellation ends the RunPod job: not when the next attempt may resume it."""
    return details is None or not (details.worker_shutdown or details.timed_out or details.paused)


class RunPodDispatcher:
    """The GPU-queue activities, each forwarded to one RunPod endpoint.

    Args:
        api: The endpoint's queue API.
        store: This dispatcher's artifact store: where inline sources are read and inline mattes stored.
        settings: Endpoint id, poll interval, job policy, inline limit.
        inline: Carry images inside the jobs: ``store`` is not one RunPod's workers can reach (a ``file://`` root).
        steps: The steps pipeline names may use (the endpoint's); ``None`` is
            :func:`~gpu_activity_worker.engines.builtin_steps`.
    """

    def __init__(
        self,
        api: RunPodApi,
        store: ArtifactStore,
        settings: RunPodSettings,
        *,
        inline: bool,
        steps: StepRegistry | None = None,
    ) -> None:
        self._api = api
        self._store = store
        self._endpoint = settings.runpod_endpoint_id
        self._poll_s = settings.runpod_poll_interval_s
        self._execution_timeout_ms = settings.runpod_execution_timeout_ms
        self._ttl_ms = settings.runpod_ttl_ms
        self._inline_max_bytes = settings.runpod_inline_max_bytes
        self.inline = inline
        self._pipelines = Pipelines(builtin_steps() if steps is None else steps)  # only parses: RunPod builds them

    async def aclose(self) -> None:
        await self._api.aclose()

    @activity.defn(name=ActivityName.DESCRIBE_PIPELINE)
    async def describe_pipeline(self, request: DescribePipelineInput) -> PipelineDescription:
        """Check the pipeline name against the engine registry; ``UnknownPipeline`` if it cannot exist."""
        try:
            steps = self._pipelines.parse(request.pipeline)
        except MattingError as err:
            raise _matting_failure(err) from err
        return PipelineDescription(
            pipeline=request.pipeline,
            steps=[str(step) for step in steps],
            device=f"runpod:{self._endpoint}",
            precision="unknown",
        )

    @activity.defn(name=ActivityName.MATTE_FRAME)
    async def matte_frame(self, request: MatteFrameInput) -> MatteFrameOutput:
        """Cut one candidate out of its background as a RunPod job; see the module docstring."""
        try:
            report = await self._finished_job(request)
            output = MatteJobOutput.model_validate(report.output)
            if output.inline_matte is None:
                return output.result
            return await self._store_inline(request, output.result, output.inline_matte)
        except (MattingError, ArtifactError) as err:
            raise _matting_failure(err) from err
        except RunPodApiError as err:
            raise _api_failure(err) from err
        except ValidationError as err:
            raise FailureType.INVALID_JOB_OUTPUT.error(
                f"the RunPod job's output does not fit the contract: {err}"
            ) from err

    async def _finished_job(self, request: MatteFrameInput) -> JobReport:
        """Submit (or resume) the job and poll it until it completed; raises for any other end."""
        job_id = await self._resumable_job(activity.info().heartbeat_details)
        if job_id is None:
            job_input = await self._job_input(request)
            job_id = (
                await self._api.run(job_input, execution_timeout_ms=self._execution_timeout_ms, ttl_ms=self._ttl_ms)
            ).id
            activity.logger.info("RunPod job submitted", extra={"job_id": job_id, "inline": self.inline})
        else:
            activity.logger.info("RunPod job resumed", extra={"job_id": job_id})
        activity.heartbeat(job_id)
        try:
            report = await self._poll(job_id)
        except asyncio.CancelledError:
            if _cancels_job(activity.cancellation_details()):
                await self._cancel(job_id)
            raise
        if report.status is not JobStatus.COMPLETED:
            raise _job_failure(report)
        activity.logger.info(
            "RunPod job completed",
            extra={"job_id": job_id, "delay_ms": report.delay_ms, "execution_ms": report.execution_ms},
        )
        return report

    async def _resumable_job(self, heartbeat_details: Sequence[Any]) -> str | None:
        """The previous attempt's job, if it can still deliver its result."""
        if not heartbeat_details or not isinstance(heartbeat_details[0], str):
            return None
        try:
            report = await self._api.status(heartbeat_details[0])
        except JobNotFoundError:
            return None
        return None if report.status in RESUBMIT else report.id

    async def _job_input(self, request: MatteFrameInput) -> dict[str, Any]:
        inline_source = None
        if self.inline:
            data = await asyncio.to_thread(self._store.get, request.source)
            inline_source = encode_inline(data, self._inline_max_bytes, request.source.uri)
        return MatteJob(op="matte", request=request, inline_source=inline_source).model_dump(mode="json")

    async def _poll(self, job_id: str) -> JobReport:
        while True:
            report = await self._api.status(job_id)
            activity.heartbeat(job_id)
            if report.status.finished:
                return report
            await asyncio.sleep(self._poll_s)

    async def _cancel(self, job_id: str) -> None:
        try:
            await self._api.cancel(job_id)
        except RunPodApiError as err:
            activity.logger.warning("could not cancel the RunPod job", extra={"job_id": job_id, "error": str(err)})
        else:
            activity.logger.info("RunPod job cancelled", extra={"job_id": job_id})

    async def _store_inline(self, request: MatteFrameInput, result: MatteFrameOutput, matte: str) -> MatteFrameOutput:
        """Store an inline matte under the request's key in this dispatcher's store; the result then points there."""
        data = decode_inline(matte, self._inline_max_bytes, f"the matte of {request.source.uri}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != result.matte.sha256:
            raise ArtifactError(
                f"{result.matte.uri}: inline matte differs (sha256 {digest}, expected {result.matte.sha256})"
            )
        stored = await asyncio.to_thread(
            self._store.put,
            request.output_key,
            data,
            result.matte.media_type,
            width=result.matte.width,
            height=result.matte.height,
        )
        return result.model_copy(update={"matte": stored})


def build_dispatcher_worker(
    client: Client, settings: RunPodSettings, store: ArtifactStore, *, inline: bool, steps: StepRegistry | None = None
) -> tuple[Worker, RunPodDispatcher]:
    """A worker serving the GPU queue through the configured RunPod endpoint (close the dispatcher after it stops).

    ``inline`` and ``steps`` are as for :class:`RunPodDispatcher`.

    Raises:
        ValueError: No endpoint id or API key is configured.
    """
    if not settings.runpod_endpoint_id or settings.runpod_api_key is None:
        raise ValueError("the dispatcher needs POPCON_RUNPOD_ENDPOINT_ID and POPCON_RUNPOD_API_KEY")
    api = RunPodApi(settings.runpod_base_url, settings.runpod_endpoint_id, settings.runpod_api_key)
    dispatcher = RunPodDispatcher(api, store, settings, inline=inline, steps=steps)
    slots = settings.runpod_workers * settings.runpod_handler_concurrency
    worker = Worker(
        client,
        task_queue=GPU_TASK_QUEUE,
        activities=[dispatcher.describe_pipeline, dispatcher.matte_frame],
        max_concurrent_activities=slots,
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=slots),
        max_heartbeat_throttle_interval=CANCEL_DELAY,
        graceful_shutdown_timeout=timedelta(seconds=30),
    )
    return worker, dispatcher


async def main() -> None:
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per status poll otherwise
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    artifacts = ArtifactSettings()
    worker, dispatcher = build_dispatcher_worker(
        client, RunPodSettings(), open_store(artifacts), inline=not artifacts.is_shared()
    )
    try:
        await serve_until_signalled(worker)
    finally:
        await dispatcher.aclose()


if __name__ == "__main__":
    asyncio.run(main())
