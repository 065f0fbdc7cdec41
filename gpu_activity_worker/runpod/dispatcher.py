"""The dispatcher: the GPU queue served by a RunPod Serverless endpoint instead of a GPU in this process.

A Temporal worker on ``emoji-gpu`` whose ``matte_slot`` sends the frame slot's candidates to RunPod as slot jobs of up
to ``POPCON_RUNPOD_FRAMES_PER_JOB`` candidates each (a :class:`~gpu_activity_worker.runpod.jobs.MatteSlotJob`, one
result per candidate back), the slot's jobs side by side: submit (``POST /run`` with the execution policy), then poll
``/status`` until the job has finished. ``python -m gpu_activity_worker.runpod.dispatcher``.

- The job ids are heartbeated as one dict, ``{"<candidate index>": "<job id>"}`` (a job's id under each of its
  candidates), right after each submission and every :data:`~workflows.contract.HEARTBEAT_INTERVAL`. RunPod has no
  idempotency key, so a retried attempt reads the dict back from its heartbeat details and resumes each job (the
  candidates that share a job id stay one job) instead of submitting a second one (a job that already completed
  gives its results at once); it submits anew only for a job that ended TIMED_OUT or CANCELLED, FAILED for a reason
  a retry may fix, or that RunPod no longer knows. A job that FAILED for a reason no retry fixes is its candidates'
  result again, not resubmitted. The new attempt heartbeats the whole dict from its start, so an attempt that ends
  early loses no job of an earlier one.
- Each candidate's outcome is settled on its own. A failure no retry fixes (a candidate's own failure in its job's
  results, a FAILED job typed ``UnsupportedImage``, ``CorruptImage``, ``UnknownPipeline`` ..., an output that does
  not fit the contract, an inline image over the limit, RunPod refusing the request) is that candidate's result (a
  failed job's, each of its candidates'), and the others go on. A failure a retry may fix (TIMED_OUT, throttling
  (429), RunPod errors (5xx), lost jobs, network errors, an ``ArtifactError``) fails the activity, but only once
  every other job of the slot has finished too: the workflow takes every result as final, and the retry then resumes
  the finished jobs from the heartbeat (no work is lost or paid twice) and replaces only the failed ones. Failing at
  once instead would leave the other jobs running unwatched, outside the concurrency bound below. A throttled
  candidate's Retry-After becomes the retry's delay.
- A Temporal cancellation (delivered through the heartbeat) cancels every job of the slot, also one whose submission
  was in flight (its answer is awaited) and one of an earlier attempt not yet resumed; the slot's places in flight
  stay taken for :data:`CANCEL_DELAY` more, so the set's other slots, cancelled with it but told only at their next
  heartbeat, do not start jobs in them meanwhile. A worker shutdown or an attempt that timed out cancels no job: the
  next attempt resumes them.
- At most as many jobs are in flight as the endpoint's workers hold at once (max workers x jobs per worker,
  ``POPCON_RUNPOD_HANDLER_CONCURRENCY``: one on each GPU, the others taken and waiting behind it), across every slot
  of this dispatcher; the worker also runs that many activities. A job beyond that waits here, for the first job of
  any slot to finish (slots in the order they came), while its activity heartbeats: nothing waits in RunPod's queue,
  where no Temporal cancellation or priority reaches.
- Images travel by reference through a shared ``s3://`` store, or inline in the job, one candidate per job (RunPod's
  10 MB payload limit), when this dispatcher's store is a ``file://`` root RunPod cannot read.

``describe_pipeline`` checks the pipeline name against the engine registry here, without loading a model or waking an
endpoint worker, and reports the device as ``runpod:<endpoint id>``. ``refine_matte`` runs here too, with the
weight-free ``clicks`` segmenter whatever the set asks for (a fraction of a second on this CPU, no endpoint job and
no model): SAM2 refinement needs an in-process GPU worker on the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker, WorkerDeploymentConfig

from core.artifacts import ArtifactError, ArtifactStore, check_content, open_store
from core.connection import connect
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, DeploymentSettings, ObservabilitySettings, TemporalSettings
from core.versioning import Role, promote_on_start, worker_deployment
from gpu_activity_worker.engines import StepRegistry, builtin_steps
from gpu_activity_worker.matting import failure_type
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import BUILTIN_SEGMENTERS, FALLBACK, Refiners, refine_matte
from gpu_activity_worker.runpod.api import (
    ApiRetry,
    EndpointMisconfiguredError,
    JobNotFoundError,
    JobReport,
    JobStatus,
    RunPodApi,
    RunPodApiError,
)
from gpu_activity_worker.runpod.jobs import (
    MatteSlotJob,
    MatteSlotJobOutput,
    decode_inline,
    encode_inline,
    parse_job_error,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.temporal import stabilise_emoji
from gpu_activity_worker.vocabulary import MattingError
from workflows.contract import (
    GPU_TASK_QUEUE,
    HEARTBEAT_INTERVAL,
    ActivityName,
    DescribePipelineInput,
    FailureType,
    MatteCandidateResult,
    MatteFrameInput,
    MatteFrameOutput,
    MatteSlotInput,
    MatteSlotOutput,
    PipelineDescription,
    RefineMatteInput,
    RefineMatteOutput,
    StabiliseEmojiInput,
    StabiliseEmojiOutput,
    TemporalMode,
)

logger = logging.getLogger(__name__)

CANCEL_DELAY = 2 * HEARTBEAT_INTERVAL
"""How long a cancelled slot keeps its places in flight, for its set's other slots to learn of their own
cancellation: each heartbeats every :data:`HEARTBEAT_INTERVAL`, and the worker's heartbeat throttle is that interval
too, so a beat reaches the server, and the cancellation comes back, within two of them."""

RESUBMIT = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED)
"""States of a previous attempt's job that a retry replaces with a new job instead of resuming (FAILED only for a
failure a retry may fix: any other is the candidate's result again)."""


def _matting_failure(err: MattingError | ArtifactError) -> ApplicationError:
    return failure_type(err).error(str(err))


def _api_failure(err: RunPodApiError) -> ApplicationError:
    """A failed RunPod request (already tried again in place, :class:`~gpu_activity_worker.runpod.api.ApiRetry`) as a
    Temporal failure: retried unless RunPod refused the request itself."""
    if isinstance(err, EndpointMisconfiguredError):
        return FailureType.DEPLOYMENT_MISCONFIGURED.error(str(err))
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


def _cancels_jobs() -> bool:
    """Whether the activity's cancellation ends its RunPod jobs: not when the next attempt may resume them (a worker
    shutdown, an attempt that timed out, a pause)."""
    if not activity.is_cancelled():
        return False
    details = activity.cancellation_details()
    return details is None or not (details.worker_shutdown or details.timed_out or details.paused)


def _heartbeated_jobs(heartbeat_details: Sequence[Any], candidates: int) -> dict[int, str]:
    """The job ids an earlier attempt heartbeated, by candidate index (:func:`_details`); anything else is ignored."""
    if not heartbeat_details or not isinstance(heartbeat_details[0], dict):
        return {}
    return {
        int(index): job_id
        for index, job_id in heartbeat_details[0].items()
        if isinstance(job_id, str) and str(index).isdigit() and int(index) < candidates
    }


def _details(jobs: dict[int, str]) -> dict[str, str]:
    """The heartbeat details of a slot's jobs: JSON object keys are strings, so the candidate index is one too."""
    return {str(index): job_id for index, job_id in sorted(jobs.items())}


def _shares(previous: dict[int, str], candidates: int, per_job: int) -> list[list[int]]:
    """The slot's candidates by job, in candidate order: those of each earlier job together (it is resumed whole, or
    replaced by one job for the same candidates), the others ``per_job`` at a time."""
    earlier: dict[str, list[int]] = {}
    for index, job_id in sorted(previous.items()):
        earlier.setdefault(job_id, []).append(index)
    rest = [index for index in range(candidates) if index not in previous]
    return sorted([*earlier.values(), *(rest[i : i + per_job] for i in range(0, len(rest), per_job))])


def _share_of(request: MatteSlotInput, indices: list[int]) -> MatteSlotInput:
    """The part of a slot one job mattes: the candidates at ``indices``."""
    return request.model_copy(
        update={
            "candidates": [request.candidates[i] for i in indices],
            "output_keys": [request.output_keys[i] for i in indices],
        }
    )


def _settled(err: ApplicationError) -> MatteCandidateResult | ApplicationError:
    """A candidate's failure as its own result when no retry fixes it; else ``err``, to fail the activity with (also
    a misconfigured deployment: not the candidate's failure, and the same for every other)."""
    if err.non_retryable and err.type != FailureType.DEPLOYMENT_MISCONFIGURED:
        return MatteCandidateResult(failure=_kind(err), error=err.message)
    return err


def _kind(err: ApplicationError) -> FailureType:
    """The type of a failure of this module (each is made by :meth:`FailureType.error`)."""
    assert err.type is not None
    return FailureType(err.type)


def _slot_failure(retry: dict[int, ApplicationError], candidates: int) -> ApplicationError:
    """The activity's failure when candidates need another attempt: the first one's type, every candidate's reason,
    and the longest delay RunPod asked for."""
    first = next(iter(retry.values()))
    reasons = "; ".join(f"candidate {index}: {err.type}: {err.message}" for index, err in retry.items())
    delays = [err.next_retry_delay for err in retry.values() if err.next_retry_delay is not None]
    return _kind(first).error(
        f"{len(retry)} of {candidates} candidates need another attempt, which resumes the finished jobs of the "
        f"others: {reasons}",
        next_retry_delay=max(delays, default=None),
    )


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
        self.frames_per_job = 1 if inline else settings.runpod_frames_per_job
        """Candidates of a slot in one job (inline: one, for RunPod's payload limit)."""
        self.jobs_at_once = settings.runpod_workers * settings.runpod_handler_concurrency
        """Jobs the endpoint's workers hold at once, and the most this dispatcher has in flight."""
        self._in_flight = asyncio.Semaphore(self.jobs_at_once)
        self._pipelines = Pipelines(builtin_steps() if steps is None else steps)  # only parses: RunPod builds them
        self._refiners = Refiners(self._pipelines, {FALLBACK: BUILTIN_SEGMENTERS[FALLBACK]})  # no model here

    async def aclose(self) -> None:
        await self._api.aclose()

    async def check_endpoint(self) -> None:
        """Ask the endpoint's ``/health`` whether RunPod takes this deployment's key and endpoint id.

        Raises:
            EndpointMisconfiguredError: RunPod refused them; the message names the setting to fix. Any other failure
                (RunPod unreachable for now) is only logged: the jobs' own calls ride it out or fail for a retry.
        """
        try:
            await self._api.health()
        except EndpointMisconfiguredError:
            raise
        except RunPodApiError as err:
            logger.warning("could not check the RunPod endpoint", extra={"endpoint": self._endpoint, "error": str(err)})

    @activity.defn(name=ActivityName.DESCRIBE_PIPELINE)
    async def describe_pipeline(self, request: DescribePipelineInput) -> PipelineDescription:
        """Check the pipeline name against the engine registry (``UnknownPipeline`` if it cannot exist) and the
        endpoint's key and id against RunPod (``DeploymentMisconfigured``), before a set spends anything."""
        try:
            steps = self._pipelines.parse(request.pipeline)
            await self.check_endpoint()
        except MattingError as err:
            raise _matting_failure(err) from err
        except EndpointMisconfiguredError as err:
            raise _api_failure(err) from err
        names = [str(step) for step in steps]
        if request.temporal is not TemporalMode.NONE:
            # SAM 2's video tracking does not run through RunPod: stabilise_emoji runs here, weight-free.
            names.append(f"temporal:{TemporalMode.STABILISE.value}")
        return PipelineDescription(
            pipeline=request.pipeline,
            steps=names,
            device=f"runpod:{self._endpoint}",
            precision="unknown",
        )

    @activity.defn(name=ActivityName.MATTE_SLOT)
    async def matte_slot(self, request: MatteSlotInput) -> MatteSlotOutput:
        """Cut out every candidate of one frame slot, in RunPod jobs of up to ``frames_per_job`` candidates; see the
        module docstring."""
        started = time.perf_counter()
        count = len(request.candidates)
        jobs = _heartbeated_jobs(activity.info().heartbeat_details, count)
        resumable = dict(jobs)
        beating = asyncio.create_task(self._heartbeat(jobs))
        executed_ms: list[float] = []
        try:
            outcomes = await asyncio.gather(
                *(
                    self._share(indices, _share_of(request, indices), resumable.get(indices[0]), jobs, executed_ms)
                    for indices in _shares(resumable, count, self.frames_per_job)
                ),
                return_exceptions=True,
            )
        finally:
            beating.cancel()
        settled: dict[int, MatteCandidateResult | ApplicationError] = {}
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # unforeseen: the others are settled, the retry resumes their jobs
            settled.update(outcome)
        retry = {index: err for index, err in sorted(settled.items()) if isinstance(err, ApplicationError)}
        for err in retry.values():
            if err.type == FailureType.DEPLOYMENT_MISCONFIGURED:
                raise err  # one failure for the slot, naming the setting to fix, not one per candidate
        if retry:
            raise _slot_failure(retry, count)
        results = [result for _, result in sorted(settled.items()) if isinstance(result, MatteCandidateResult)]
        activity.logger.info(
            "matted slot",
            extra={
                "pipeline": request.pipeline,
                "candidates": count,
                "jobs": len(set(jobs.values())),
                "failed": sum(result.output is None for result in results),
                "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return MatteSlotOutput(results=results, gpu_seconds=round(sum(executed_ms) / 1000, 4))

    @activity.defn(name=ActivityName.REFINE_MATTE)
    async def refine_matte(self, request: RefineMatteInput) -> RefineMatteOutput:
        """Refine cut-outs with clicks in this process, with the weight-free ``clicks`` segmenter (see the module
        docstring), heartbeating while it runs."""
        weight_free = request.model_copy(update={"refiner": FALLBACK})
        work = asyncio.ensure_future(asyncio.to_thread(refine_matte, weight_free, self._store, self._refiners))
        try:
            while not (await asyncio.wait([work], timeout=HEARTBEAT_INTERVAL.total_seconds()))[0]:
                activity.heartbeat()
            return work.result()
        except (MattingError, ArtifactError) as err:
            raise _matting_failure(err) from err

    @activity.defn(name=ActivityName.STABILISE_EMOJI)
    async def stabilise_emoji(self, request: StabiliseEmojiInput) -> StabiliseEmojiOutput:
        """Stabilise an emoji's picked cut-outs in this process with the weight-free stabiliser (``sam2`` falls back
        to it: SAM 2's video tracking is not a RunPod job), heartbeating while it runs."""
        weight_free = request.model_copy(update={"mode": TemporalMode.STABILISE})
        work = asyncio.ensure_future(asyncio.to_thread(stabilise_emoji, weight_free, self._store, self._pipelines))
        try:
            while not (await asyncio.wait([work], timeout=HEARTBEAT_INTERVAL.total_seconds()))[0]:
                activity.heartbeat()
            return work.result()
        except (MattingError, ArtifactError) as err:
            raise _matting_failure(err) from err

    async def _heartbeat(self, jobs: dict[int, str]) -> None:
        """Heartbeat the slot's job ids every heartbeat interval, also while its jobs wait for their turn."""
        while True:
            activity.heartbeat(_details(jobs))
            await asyncio.sleep(HEARTBEAT_INTERVAL.total_seconds())

    async def _share(
        self,
        indices: list[int],
        share: MatteSlotInput,
        previous: str | None,
        jobs: dict[int, str],
        executed_ms: list[float],
    ) -> dict[int, MatteCandidateResult | ApplicationError]:
        """One job's candidates (at ``indices`` in the slot), from its submission (or resumption) to their results:
        each a :class:`MatteCandidateResult`, or the failure a retry may fix, which fails the activity once the
        other jobs are settled. The job's time on its worker (what RunPod bills) is added to ``executed_ms``."""
        try:
            report = await self._job_in_turn(indices, share, previous, jobs)
            executed_ms.append(report.execution_ms or 0.0)
            output = MatteSlotJobOutput.model_validate(report.output)
            if len(output.results) != len(indices):
                raise FailureType.INVALID_JOB_OUTPUT.error(
                    f"RunPod job {report.id} returned {len(output.results)} results for {len(indices)} candidates"
                )
            mattes = output.inline_mattes or [None] * len(indices)
            return {
                index: await self._candidate(frame, result, matte)
                for index, frame, result, matte in zip(indices, share.frames(), output.results, mattes, strict=True)
            }
        except ApplicationError as err:
            verdict = _settled(err)
        except (MattingError, ArtifactError) as err:
            verdict = _settled(_matting_failure(err))
        except EndpointMisconfiguredError as err:
            verdict = _settled(await self._confirmed(err))
        except RunPodApiError as err:
            verdict = _settled(_api_failure(err))
        except ValidationError as err:
            verdict = _settled(
                FailureType.INVALID_JOB_OUTPUT.error(f"the RunPod job's output does not fit the contract: {err}")
            )
        return dict.fromkeys(indices, verdict)

    async def _confirmed(self, err: EndpointMisconfiguredError) -> ApplicationError:
        """A refused key or unknown endpoint (401, 404), asked again of ``/health`` before it fails a set: a moment of
        RunPod's own trouble can answer so too. Confirmed (or a 403: the key is known and lacks the access), it is
        ``DeploymentMisconfigured``; else a failure a retry may fix."""
        if err.status == 403:
            return _api_failure(err)
        try:
            await self._api.health()
        except EndpointMisconfiguredError:
            return _api_failure(err)
        except RunPodApiError:
            pass  # RunPod does not answer: the refusal is not confirmed
        return FailureType.RUNPOD_UNAVAILABLE.error(f"{err}; yet /health takes the key and the endpoint id")

    async def _candidate(
        self, request: MatteFrameInput, result: MatteCandidateResult, inline_matte: str | None
    ) -> MatteCandidateResult | ApplicationError:
        """A candidate's result in its job's output; an inline matte is stored in this dispatcher's store first."""
        if result.output is None:
            if result.failure is not None and result.failure.retryable:  # the handler raises these for the job
                return result.failure.error(result.error or "")
            return result
        if inline_matte is None:
            return result
        try:
            return MatteCandidateResult(output=await self._store_inline(request, result.output, inline_matte))
        except (MattingError, ArtifactError) as err:
            return _settled(_matting_failure(err))

    async def _job_in_turn(
        self, indices: list[int], share: MatteSlotInput, previous: str | None, jobs: dict[int, str]
    ) -> JobReport:
        """:meth:`_finished_job` once the jobs in flight leave room.

        A cancellation that ends the slot's jobs cancels this one (also one of an earlier attempt that has not been
        resumed yet). A job that had its place keeps it for :data:`CANCEL_DELAY` more: a set is cancelled as a whole,
        and its other slots, waiting here for places, learn of their own cancellation only at their next heartbeat;
        without the pause they would submit jobs into the places this one frees, to run until then.
        """
        try:
            await self._in_flight.acquire()
        except asyncio.CancelledError:
            await self._cancel_if_ending(jobs.get(indices[0]))
            raise
        try:
            return await self._finished_job(indices, share, previous, jobs)
        except asyncio.CancelledError:
            if await self._cancel_if_ending(jobs.get(indices[0])):
                await asyncio.sleep(CANCEL_DELAY.total_seconds())
            raise
        finally:
            self._in_flight.release()

    async def _cancel_if_ending(self, job_id: str | None) -> bool:
        """Cancel the job if the activity's cancellation ends its jobs (see :func:`_cancels_jobs`); whether it did."""
        if job_id is None or not _cancels_jobs():
            return False
        await self._cancel(job_id)
        return True

    async def _finished_job(
        self, indices: list[int], share: MatteSlotInput, previous: str | None, jobs: dict[int, str]
    ) -> JobReport:
        """Resume the previous attempt's job or submit a new one, and poll it until it completed; raises for any other
        end."""
        report = await self._resumable_job(previous)
        if report is None:
            job_id = await self._submit(indices, share, jobs)
            activity.logger.info(
                "RunPod job submitted", extra={"job_id": job_id, "candidates": indices, "inline": self.inline}
            )
            report = await self._poll(job_id)
        else:
            job_id = report.id
            activity.logger.info("RunPod job resumed", extra={"job_id": job_id, "candidates": indices})
            if not report.status.finished:
                report = await self._poll(job_id)
        if report.status is not JobStatus.COMPLETED:
            raise _job_failure(report)
        activity.logger.info(
            "RunPod job completed",
            extra={
                "job_id": job_id,
                "candidates": indices,
                "delay_ms": report.delay_ms,
                "execution_ms": report.execution_ms,
            },
        )
        return report

    async def _resumable_job(self, job_id: str | None) -> JobReport | None:
        """The previous attempt's job if it can still deliver the candidate's result: queued, running, completed, or
        failed for a reason no retry fixes (that failure is then the result); ``None`` if a new job must replace it."""
        if job_id is None:
            return None
        try:
            report = await self._api.status(job_id)
        except JobNotFoundError:
            return None
        if report.status is JobStatus.FAILED and not parse_job_error(report.error)[0].retryable:
            return report
        return None if report.status in RESUBMIT else report

    async def _submit(self, indices: list[int], share: MatteSlotInput, jobs: dict[int, str]) -> str:
        """Submit the job of the candidates at ``indices`` and heartbeat its id with the slot's others.

        A cancellation while RunPod answers the submission waits for the answer first: the job it created is then
        known, so it is cancelled (or, after a worker shutdown, resumed by the next attempt) instead of running
        unseen.
        """
        job_input = await self._job_input(share)
        submission = asyncio.ensure_future(
            self._api.run(job_input, execution_timeout_ms=self._execution_timeout_ms, ttl_ms=self._ttl_ms)
        )
        try:
            report = await asyncio.shield(submission)
        except asyncio.CancelledError:
            with contextlib.suppress(RunPodApiError):
                jobs.update(dict.fromkeys(indices, (await submission).id))
                activity.heartbeat(_details(jobs))
            raise
        jobs.update(dict.fromkeys(indices, report.id))
        activity.heartbeat(_details(jobs))
        return report.id

    async def _job_input(self, share: MatteSlotInput) -> dict[str, Any]:
        inline_sources = None
        if self.inline:
            inline_sources = []
            for source in share.candidates:
                data = await asyncio.to_thread(self._store.get, source)
                inline_sources.append(encode_inline(data, self._inline_max_bytes, source.uri))
        return MatteSlotJob(op="matte_slot", request=share, inline_sources=inline_sources).model_dump(mode="json")

    async def _poll(self, job_id: str) -> JobReport:
        """The job's report once it has finished; a state this dispatcher does not know is logged and polled on (the
        activity's start-to-close timeout bounds the wait, as for a job that never leaves IN_PROGRESS)."""
        unknown = ""
        while True:
            report = await self._api.status(job_id)
            if report.status.finished:
                return report
            if report.status is JobStatus.UNKNOWN and report.reported_status != unknown:
                unknown = report.reported_status
                activity.logger.warning(
                    "RunPod reports a job state this dispatcher does not know; polling on",
                    extra={"job_id": job_id, "state": unknown},
                )
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
        check_content(result.matte, data)
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
    client: Client,
    settings: RunPodSettings,
    store: ArtifactStore,
    *,
    inline: bool,
    steps: StepRegistry | None = None,
    deployment: WorkerDeploymentConfig | None = None,
) -> tuple[Worker, RunPodDispatcher]:
    """A worker serving the GPU queue through the configured RunPod endpoint (close the dispatcher after it stops).

    ``inline`` and ``steps`` are as for :class:`RunPodDispatcher`; ``deployment`` is the GPU deployment's version it
    serves (``None``: unversioned).

    Raises:
        ValueError: No endpoint id or API key is configured.
    """
    if not settings.runpod_endpoint_id or settings.runpod_api_key is None:
        raise ValueError("the dispatcher needs POPCON_RUNPOD_ENDPOINT_ID and POPCON_RUNPOD_API_KEY")
    api = RunPodApi(
        settings.runpod_base_url,
        settings.runpod_endpoint_id,
        settings.runpod_api_key,
        retry=ApiRetry(attempts=settings.runpod_api_attempts),
    )
    dispatcher = RunPodDispatcher(api, store, settings, inline=inline, steps=steps)
    slots = dispatcher.jobs_at_once
    worker = Worker(
        client,
        task_queue=GPU_TASK_QUEUE,
        activities=[
            dispatcher.describe_pipeline,
            dispatcher.matte_slot,
            dispatcher.refine_matte,
            dispatcher.stabilise_emoji,
        ],
        max_concurrent_activities=slots,
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=slots),
        max_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        default_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        graceful_shutdown_timeout=timedelta(seconds=30),
        deployment_config=deployment,
    )
    return worker, dispatcher


async def main() -> None:
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per status poll otherwise
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    artifacts = ArtifactSettings()
    deployment = DeploymentSettings()
    worker, dispatcher = build_dispatcher_worker(
        client,
        RunPodSettings(),
        open_store(artifacts),
        inline=not artifacts.is_shared(),
        deployment=worker_deployment(deployment, Role.GPU),
    )
    try:
        await dispatcher.check_endpoint()
    except EndpointMisconfiguredError as err:
        await dispatcher.aclose()
        raise SystemExit(f"the dispatcher cannot serve the GPU queue: {err}") from None
    try:
        await serve_until_signalled(worker, lambda: promote_on_start(client, deployment, Role.GPU))
    finally:
        await dispatcher.aclose()


if __name__ == "__main__":
    asyncio.run(main())
