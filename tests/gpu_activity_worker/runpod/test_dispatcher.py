"""The dispatcher's activities against the RunPod stand-in, playing the endpoint's worker by hand (no processes)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import SecretStr
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from core.artifacts import FileArtifactStore
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.api import RunPodApi
from gpu_activity_worker.runpod.dispatcher import RunPodDispatcher
from gpu_activity_worker.runpod.handler import MattingHandler
from gpu_activity_worker.runpod.jobs import MatteJob, MatteJobOutput
from gpu_activity_worker.runpod.settings import RunPodSettings
from testkit.images import sticker_png
from testkit.runpod_standin import (
    CANCELLED,
    IN_PROGRESS,
    EndpointConfig,
    Job,
    RunPodStandIn,
)
from workflows.contract import ArtifactRef, DescribePipelineInput, MatteFrameInput, MatteFrameOutput

T = TypeVar("T")
SOURCE = ArtifactRef(uri="s3://emoji/sets/s/source.png", sha256="a" * 64, size_bytes=10, media_type="image/png")
REQUEST = MatteFrameInput(source=SOURCE, output_key="sets/s/wave/0/0/matte.png", pipeline="classical")
RESULT = MatteFrameOutput(
    matte=SOURCE.model_copy(update={"uri": "s3://emoji/sets/s/wave/0/0/matte.png"}),
    score=0.9,
    pipeline="classical",
    device="cuda",
    precision="fp16",
    elapsed_ms=12.0,
)


@pytest.fixture(scope="module")
async def endpoint() -> AsyncIterator[RunPodStandIn]:
    async with RunPodStandIn(EndpointConfig(max_workers=0)) as running:
        yield running


def settings_for(endpoint: RunPodStandIn, **overrides: Any) -> RunPodSettings:
    return RunPodSettings(
        _env_file=None,
        runpod_endpoint_id=endpoint.config.endpoint_id,
        runpod_api_key=SecretStr(endpoint.config.api_key),
        runpod_base_url=endpoint.base_url,
        runpod_poll_interval_s=0.02,
        runpod_execution_timeout_ms=30_000,
        runpod_ttl_ms=600_000,
        **overrides,
    )


@pytest.fixture
async def dispatcher(endpoint: RunPodStandIn, tmp_path: Path) -> AsyncIterator[RunPodDispatcher]:
    settings = settings_for(endpoint)
    running = RunPodDispatcher(api_for(endpoint), FileArtifactStore(tmp_path), settings, inline=False)
    yield running
    await running.aclose()


class Attempt:
    """One activity attempt in an :class:`ActivityEnvironment`, with the heartbeats it sent."""

    def __init__(self, heartbeat_details: list[Any] | None = None) -> None:
        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(self.env.info, heartbeat_details=heartbeat_details or [])
        self.heartbeats: list[Any] = []
        self.env.on_heartbeat = lambda *details: self.heartbeats.append(details[0])

    def start(self, call: Any, *args: Any) -> asyncio.Task[Any]:
        return asyncio.create_task(self.env.run(call, *args))


async def new_job(endpoint: RunPodStandIn, before: int) -> Job:
    """The job submitted after the first ``before`` ones."""
    await endpoint.wait_until(lambda: len(endpoint.jobs) > before, timeout=5)
    return endpoint.submitted()[before]


async def settle(task: Awaitable[T]) -> T:
    async with asyncio.timeout(5):
        return await task


def api_for(endpoint: RunPodStandIn) -> RunPodApi:
    return RunPodApi(endpoint.base_url, endpoint.config.endpoint_id, SecretStr(endpoint.config.api_key))


async def abandoned_job(endpoint: RunPodStandIn, dispatcher: RunPodDispatcher) -> Job:
    """The job of an attempt whose worker shut down after submitting it (RunPod keeps the job)."""
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))
    await endpoint.wait_until(lambda: bool(attempt.heartbeats))
    attempt.env.cancel(ActivityCancellationDetails(worker_shutdown=True))
    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    return job


async def test_a_matte_is_one_job_submitted_with_its_policy_and_heartbeated(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))

    assert MatteJob.model_validate(job.input) == MatteJob(op="matte", request=REQUEST), "by reference: no image"
    assert (job.execution_timeout_s, job.ttl_s) == (30.0, 600.0)
    endpoint.start_job(job.id)
    await endpoint.wait_until(lambda: len(attempt.heartbeats) >= 2)
    endpoint.finish_job(job.id, output=MatteJobOutput(result=RESULT).model_dump(mode="json"))

    assert await settle(task) == RESULT
    assert set(attempt.heartbeats) == {job.id}, "the job id, right after the submission and on every poll"


async def test_a_retry_resumes_the_job_of_the_previous_attempt_instead_of_submitting_again(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    job = await abandoned_job(endpoint, dispatcher)
    endpoint.start_job(job.id)
    submitted = len(endpoint.jobs)

    retry = Attempt(heartbeat_details=[job.id])
    retry_task = retry.start(dispatcher.matte_frame, REQUEST)
    await endpoint.wait_until(lambda: bool(retry.heartbeats))
    endpoint.finish_job(job.id, output=MatteJobOutput(result=RESULT).model_dump(mode="json"))

    assert await settle(retry_task) == RESULT
    assert len(endpoint.jobs) == submitted and job.takes == 1, "no second job, and the first one ran once"
    assert set(retry.heartbeats) == {job.id}


async def test_a_retry_returns_at_once_when_the_previous_attempts_job_already_completed(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    job = await abandoned_job(endpoint, dispatcher)
    endpoint.start_job(job.id)
    endpoint.finish_job(job.id, output=MatteJobOutput(result=RESULT).model_dump(mode="json"))
    submitted = len(endpoint.jobs)

    assert await settle(Attempt([job.id]).env.run(dispatcher.matte_frame, REQUEST)) == RESULT
    assert len(endpoint.jobs) == submitted


@pytest.mark.parametrize("ending", ["FAILED", "TIMED_OUT", "CANCELLED", "forgotten"])
async def test_a_retry_submits_a_new_job_when_the_previous_one_cannot_deliver(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, ending: str
) -> None:
    old = await abandoned_job(endpoint, dispatcher)
    endpoint.start_job(old.id)
    if ending == "FAILED":
        endpoint.finish_job(old.id, error="ArtifactError: s3://emoji/sets/s/source.png: artifact is missing")
    elif ending == "TIMED_OUT":
        endpoint.time_out(old.id)
    elif ending == "CANCELLED":
        await api_for(endpoint).cancel(old.id)
    else:
        endpoint.forget(old.id)
    submitted = len(endpoint.jobs)

    retry = Attempt([old.id])
    retry_task = retry.start(dispatcher.matte_frame, REQUEST)
    new = await new_job(endpoint, submitted)
    endpoint.start_job(new.id)
    endpoint.finish_job(new.id, output=MatteJobOutput(result=RESULT).model_dump(mode="json"))

    assert await settle(retry_task) == RESULT
    assert set(retry.heartbeats) == {new.id}, "the new job replaces the old one in the heartbeat"


@pytest.mark.parametrize("started", [False, True], ids=["queued", "running"])
async def test_cancelling_the_activity_cancels_the_job(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, started: bool
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))
    if started:
        endpoint.start_job(job.id)
    await endpoint.wait_until(lambda: bool(attempt.heartbeats))

    attempt.env.cancel()

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    assert job.status == CANCELLED


@pytest.mark.parametrize(
    "details",
    [
        ActivityCancellationDetails(worker_shutdown=True),
        ActivityCancellationDetails(timed_out=True),
    ],
    ids=["worker-shutdown", "attempt-timed-out"],
)
async def test_a_cancellation_the_next_attempt_recovers_from_leaves_the_job_running(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, details: ActivityCancellationDetails
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))
    endpoint.start_job(job.id)
    await endpoint.wait_until(lambda: bool(attempt.heartbeats))

    attempt.env.cancel(details)

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    assert job.status == IN_PROGRESS, "the next attempt resumes it"
    endpoint.time_out(job.id)


async def finished_with(endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, **result: Any) -> ApplicationError:
    """Run an attempt whose job ends with ``result`` (see :meth:`RunPodStandIn.finish_job`); the failure."""
    task = Attempt().start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))
    endpoint.start_job(job.id)
    if result:
        endpoint.finish_job(job.id, **result)
    else:
        endpoint.time_out(job.id)
    with pytest.raises(ApplicationError) as failure:
        await settle(task)
    return failure.value


@pytest.mark.parametrize("kind", ["UnknownPipeline", "UnsupportedImage", "CorruptImage", "WeightsMissing"])
async def test_a_job_failed_for_a_reason_no_retry_fixes_fails_the_activity_for_good(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, kind: str
) -> None:
    failure = await finished_with(endpoint, dispatcher, error=f"{kind}: the reason")

    assert (failure.type, failure.non_retryable) == (kind, True)
    assert "the reason" in failure.message


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("ArtifactError: s3://emoji/x.png: artifact is missing", "ArtifactError"),
        ("OSError: CUDA out of memory", "RunPodJobFailed"),
        ('{"error_type": "<class \'RuntimeError\'>", "error_message": "boom"}', "RunPodJobFailed"),
    ],
    ids=["typed", "untyped-exception", "sdk-report"],
)
async def test_other_job_failures_are_retried(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, error: str, kind: str
) -> None:
    failure = await finished_with(endpoint, dispatcher, error=error)

    assert (failure.type, failure.non_retryable) == (kind, False)


async def test_a_timed_out_job_is_retried(endpoint: RunPodStandIn, dispatcher: RunPodDispatcher) -> None:
    failure = await finished_with(endpoint, dispatcher)

    assert (failure.type, failure.non_retryable) == ("RunPodTimedOut", False)


@pytest.mark.parametrize(
    ("route", "status", "kind"),
    [("run", 429, "RunPodThrottled"), ("run", 502, "RunPodUnavailable"), ("status", 503, "RunPodUnavailable")],
)
async def test_throttling_and_runpod_errors_are_retried(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, route: Any, status: int, kind: str
) -> None:
    endpoint.fail_next(route, status, retry_after_s=3)

    with pytest.raises(ApplicationError) as failure:
        await settle(Attempt().env.run(dispatcher.matte_frame, REQUEST))

    assert (failure.value.type, failure.value.non_retryable) == (kind, False)
    if status == 429:
        assert failure.value.next_retry_delay == timedelta(seconds=3), "RunPod's Retry-After"


async def test_a_job_runpod_lost_track_of_is_retried(endpoint: RunPodStandIn, dispatcher: RunPodDispatcher) -> None:
    task = Attempt().start(dispatcher.matte_frame, REQUEST)
    job = await new_job(endpoint, len(endpoint.jobs))
    endpoint.forget(job.id)

    with pytest.raises(ApplicationError) as failure:
        await settle(task)

    assert (failure.value.type, failure.value.non_retryable) == ("RunPodJobLost", False)


async def test_a_refused_api_key_fails_for_good(endpoint: RunPodStandIn, tmp_path: Path) -> None:
    settings = settings_for(endpoint)
    api = RunPodApi(settings.runpod_base_url, settings.runpod_endpoint_id, SecretStr("wrong-key"))
    dispatcher = RunPodDispatcher(api, FileArtifactStore(tmp_path), settings, inline=False)
    with pytest.raises(ApplicationError) as failure:
        await settle(Attempt().env.run(dispatcher.matte_frame, REQUEST))
    await dispatcher.aclose()

    assert (failure.value.type, failure.value.non_retryable) == ("RunPodRejected", True)
    assert "wrong-key" not in failure.value.message, "the key never appears in a failure"


async def test_describe_checks_the_name_here_without_a_job(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    submitted = len(endpoint.jobs)
    env = ActivityEnvironment()

    description = await env.run(dispatcher.describe_pipeline, DescribePipelineInput(pipeline="classical"))
    with pytest.raises(ApplicationError) as unknown:
        await env.run(dispatcher.describe_pipeline, DescribePipelineInput(pipeline="floodfill+no-such-step"))

    assert (description.steps, description.device) == (["floodfill", "defringe"], "runpod:standin")
    assert (unknown.value.type, unknown.value.non_retryable) == ("UnknownPipeline", True)
    assert len(endpoint.jobs) == submitted


@pytest.fixture
def inline_store(tmp_path: Path) -> FileArtifactStore:
    return FileArtifactStore(tmp_path / "dispatcher-artifacts")


async def test_without_a_shared_store_images_travel_inline_through_the_real_handler(
    endpoint: RunPodStandIn, inline_store: FileArtifactStore
) -> None:
    settings = settings_for(endpoint)
    dispatcher = RunPodDispatcher(api_for(endpoint), inline_store, settings, inline=True)
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu"))
    handler = MattingHandler(inline_store, pipelines, concurrency=1, inline_max_bytes=4_000_000)
    source = inline_store.put("sets/s/wave/0/0/source.png", sticker_png(), "image/png", width=64, height=64)
    request = REQUEST.model_copy(update={"source": source})

    task = Attempt().start(dispatcher.matte_frame, request)
    job = await new_job(endpoint, len(endpoint.jobs))
    endpoint.start_job(job.id)
    endpoint.finish_job(job.id, output=await handler.handle({"id": job.id, "input": job.input}))
    output = await settle(task)
    handler.close()
    await dispatcher.aclose()

    assert dispatcher.inline
    assert base64.b64decode(job.input["inline_source"]) == sticker_png()
    assert output.matte.uri == (inline_store.root / request.output_key).as_uri(), "stored under the dispatcher's key"
    assert hashlib.sha256(inline_store.get(output.matte)).hexdigest() == output.matte.sha256
    assert len(inline_store.get(output.matte)) == output.matte.size_bytes and output.matte.width == 64


async def test_an_inline_source_over_the_limit_fails_for_good_before_any_job(
    endpoint: RunPodStandIn, inline_store: FileArtifactStore
) -> None:
    settings = settings_for(endpoint, runpod_inline_max_bytes=100)
    dispatcher = RunPodDispatcher(api_for(endpoint), inline_store, settings, inline=True)
    source = inline_store.put("big.png", sticker_png(), "image/png")
    submitted = len(endpoint.jobs)

    with pytest.raises(ApplicationError) as failure:
        await settle(Attempt().env.run(dispatcher.matte_frame, REQUEST.model_copy(update={"source": source})))
    await dispatcher.aclose()

    assert (failure.value.type, failure.value.non_retryable) == ("UnsupportedImage", True)
    assert "inline limit" in failure.value.message and "s3://" in failure.value.message
    assert len(endpoint.jobs) == submitted
