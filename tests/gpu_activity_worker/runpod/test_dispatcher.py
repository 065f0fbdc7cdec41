"""The dispatcher's activities against the RunPod stand-in, playing the endpoint's worker by hand (no processes).

``matte_slot`` sends a slot's candidates as jobs of ``frames_per_job`` candidates, side by side. Most tests here use
one candidate per job (and one job per worker), so that each candidate's job can be finished, failed, lost and
cancelled on its own; the slot-job section then puts several candidates in one job. Each test checks what each
candidate, the activity and its retry make of it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import re
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
from gpu_activity_worker.runpod.api import ApiRetry, JobReport, RunPodApi, RunPodApiError
from gpu_activity_worker.runpod.dispatcher import RunPodDispatcher
from gpu_activity_worker.runpod.handler import MattingHandler
from gpu_activity_worker.runpod.jobs import MatteSlotJob, MatteSlotJobOutput
from gpu_activity_worker.runpod.settings import RunPodSettings
from testkit.images import sticker_png
from testkit.runpod_standin import (
    CANCELLED,
    COMPLETED,
    IN_PROGRESS,
    IN_QUEUE,
    EndpointConfig,
    Job,
    RunPodStandIn,
)
from workflows.contract import (
    ArtifactRef,
    DescribePipelineInput,
    FailureType,
    MatteCandidateResult,
    MatteFrameOutput,
    MatteSlotInput,
    MatteSlotOutput,
)

T = TypeVar("T")


def slot_of(candidates: int, name: str = "s") -> MatteSlotInput:
    """A slot of set ``name`` with ``candidates`` candidates, by reference (the endpoint is played by hand)."""
    prefix = f"sets/{name}/wave/frame-000"
    return MatteSlotInput(
        pipeline="classical",
        candidates=[
            ArtifactRef(
                uri=f"s3://emoji/{prefix}/candidate-{i:02d}.source.png",
                sha256="a" * 64,
                size_bytes=10,
                media_type="image/png",
            )
            for i in range(candidates)
        ],
        output_keys=[f"{prefix}/candidate-{i:02d}.matte.png" for i in range(candidates)],
    )


SLOT = slot_of(3)


def keys_of(job: Job) -> list[str]:
    """The output keys of a job's candidates, in order."""
    return list(job.input["request"]["output_keys"])


def index_of(key: str) -> int:
    match = re.search(r"candidate-(\d+)\.matte\.png$", key)
    assert match is not None
    return int(match[1])


def candidate_of(job: Job) -> int:
    """The slot index of a job's first candidate."""
    return index_of(keys_of(job)[0])


def result_for(key: str) -> MatteFrameOutput:
    """The result a handler would report for a candidate: the matte stored under its output key."""
    matte = ArtifactRef(uri=f"s3://emoji/{key}", sha256="b" * 64, size_bytes=20, media_type="image/png")
    return MatteFrameOutput(
        matte=matte, score=0.9, pipeline="classical", device="cuda", precision="fp16", elapsed_ms=12
    )


def result_of(job: Job) -> MatteFrameOutput:
    """The result of a job of one candidate."""
    [key] = keys_of(job)
    return result_for(key)


def execution_ms(job: Job) -> int:
    """A finished job's ``executionTime``, as the stand-in reports it."""
    assert job.started_at is not None and job.finished_at is not None
    return round((job.finished_at - job.started_at) * 1000)


def completed(*jobs: Job) -> MatteSlotOutput:
    """The activity's result when ``jobs`` (in candidate order) all completed; its GPU seconds are their time on the
    endpoint's workers as RunPod reports it (``executionTime``, whole milliseconds)."""
    executed_ms = sum(execution_ms(job) for job in jobs)
    return MatteSlotOutput(
        results=[MatteCandidateResult(output=result_for(key)) for job in jobs for key in keys_of(job)],
        gpu_seconds=round(executed_ms / 1000, 4),
    )


@pytest.fixture(scope="module")
async def endpoint() -> AsyncIterator[RunPodStandIn]:
    async with RunPodStandIn(EndpointConfig(max_workers=0)) as running:
        yield running


def settings_for(endpoint: RunPodStandIn, **overrides: Any) -> RunPodSettings:
    """The endpoint's settings; by default 3 workers holding one job each, one candidate per job."""
    defaults: dict[str, Any] = {
        "runpod_poll_interval_s": 0.02,
        "runpod_execution_timeout_ms": 30_000,
        "runpod_workers": 3,
        "runpod_handler_concurrency": 1,
        "runpod_frames_per_job": 1,
    }
    return RunPodSettings(
        _env_file=None,
        runpod_endpoint_id=endpoint.config.endpoint_id,
        runpod_api_key=SecretStr(endpoint.config.api_key),
        runpod_base_url=endpoint.base_url,
        **{**defaults, **overrides},
    )


QUICK_RETRY = ApiRetry(attempts=3, first_delay_s=0.01, max_delay_s=0.05, max_retry_after_s=1.0)
"""In-place retries as the defaults do them, with back-offs short enough for a test."""


def api_for(endpoint: RunPodStandIn, key: str | None = None, endpoint_id: str | None = None) -> RunPodApi:
    return RunPodApi(
        endpoint.base_url,
        endpoint_id or endpoint.config.endpoint_id,
        SecretStr(key or endpoint.config.api_key),
        retry=QUICK_RETRY,
    )


@pytest.fixture
async def dispatcher(endpoint: RunPodStandIn, tmp_path: Path) -> AsyncIterator[RunPodDispatcher]:
    """A dispatcher for an endpoint of 3 workers of one job each: 3 jobs in flight at most."""
    running = RunPodDispatcher(api_for(endpoint), FileArtifactStore(tmp_path), settings_for(endpoint), inline=False)
    assert running.jobs_at_once == 3
    yield running
    await running.aclose()


class Attempt:
    """One activity attempt in an :class:`ActivityEnvironment`, with the heartbeats it sent."""

    def __init__(self, heartbeat_details: list[Any] | None = None) -> None:
        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(self.env.info, heartbeat_details=heartbeat_details or [])
        self.heartbeats: list[dict[str, str]] = []
        self.env.on_heartbeat = lambda *details: self.heartbeats.append(details[0])

    def start(self, call: Any, *args: Any) -> asyncio.Task[Any]:
        return asyncio.create_task(self.env.run(call, *args))

    @property
    def last(self) -> dict[str, str]:
        return self.heartbeats[-1] if self.heartbeats else {}


async def new_jobs(endpoint: RunPodStandIn, before: int, count: int) -> list[Job]:
    """The ``count`` jobs submitted after the first ``before`` ones, in candidate order."""
    await endpoint.wait_until(lambda: len(endpoint.jobs) >= before + count, timeout=5)
    return sorted(endpoint.submitted()[before:], key=candidate_of)


def ids(*jobs: Job) -> dict[str, str]:
    """The heartbeat of a slot whose candidates have these jobs: each job's id under each of its candidates."""
    return {str(index_of(key)): job.id for job in jobs for key in keys_of(job)}


def complete(endpoint: RunPodStandIn, job: Job, *results: MatteCandidateResult) -> None:
    """Run a job to completion as its worker would: ``results``, or every candidate matted."""
    if job.status == IN_QUEUE:
        endpoint.start_job(job.id)
    if not results:
        results = tuple(MatteCandidateResult(output=result_for(key)) for key in keys_of(job))
    endpoint.finish_job(job.id, output=MatteSlotJobOutput(results=list(results)).model_dump(mode="json"))


def fail(endpoint: RunPodStandIn, job: Job, error: str) -> None:
    if job.status == IN_QUEUE:
        endpoint.start_job(job.id)
    endpoint.finish_job(job.id, error=error)


async def until_submitted(endpoint: RunPodStandIn, count: int) -> None:
    await endpoint.wait_until(lambda: len(endpoint.jobs) == count, timeout=5)


async def settle(task: Awaitable[T]) -> T:
    async with asyncio.timeout(5):
        return await task


async def still_running(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is still running after a few of the dispatcher's polls."""
    await asyncio.sleep(0.2)
    return not task.done()


def share(slot: MatteSlotInput, indices: list[int]) -> MatteSlotInput:
    """The part of ``slot`` that one job mattes."""
    return slot.model_copy(
        update={
            "candidates": [slot.candidates[i] for i in indices],
            "output_keys": [slot.output_keys[i] for i in indices],
        }
    )


async def abandoned_slot(endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, jobs_expected: int = 3) -> list[Job]:
    """The jobs of an attempt whose worker shut down after submitting them all (RunPod keeps the jobs)."""
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), jobs_expected)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))
    attempt.env.cancel(ActivityCancellationDetails(worker_shutdown=True))
    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    return jobs


# --- One job per candidate -------------------------------------------------------------------------------------------


async def test_a_slot_is_one_job_per_candidate_submitted_together_and_heartbeated_as_one_dict(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 3)

    assert [MatteSlotJob.model_validate(job.input) for job in jobs] == [
        MatteSlotJob(op="matte_slot", request=share(SLOT, [index])) for index in range(3)
    ], "one job per candidate, each by reference: no image"
    assert all((job.execution_timeout_s, job.ttl_s) == (30.0, 3600.0) for job in jobs)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))
    for job in reversed(jobs):
        complete(endpoint, job)

    assert await settle(task) == completed(*jobs), "in the order of the candidates, whatever order they finished in"
    assert all(job.takes == 1 for job in jobs)
    assert all(set(beat.items()) <= set(ids(*jobs).items()) for beat in attempt.heartbeats)


async def test_jobs_in_flight_never_exceed_what_the_endpoint_runs_and_slots_keep_their_order(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    before = len(endpoint.jobs)
    big, small = slot_of(5, "big"), slot_of(1, "small")
    attempt = Attempt()
    first = attempt.start(dispatcher.matte_slot, big)
    await until_submitted(endpoint, before + 3)
    second = Attempt().start(dispatcher.matte_slot, small)

    assert await still_running(first) and len(endpoint.jobs) == before + 3, "3 workers: 3 jobs in flight"
    waiting_beats = len(attempt.heartbeats)
    await endpoint.wait_until(lambda: len(attempt.heartbeats) > waiting_beats)  # heartbeats while waiting
    assert len(endpoint.jobs) == before + 3
    for done in range(5):  # each job done lets the next candidate in: big 3 and 4, then small's, then none is left
        queued = [job for job in endpoint.submitted()[before:] if job.status == IN_QUEUE]
        assert len(queued) == min(3, 6 - done), "never more than the endpoint runs, and that many while any wait"
        complete(endpoint, queued[0])
        await until_submitted(endpoint, before + min(4 + done, 6))

    jobs = endpoint.submitted()[before:]
    assert [keys_of(job)[0].split("/")[1] for job in jobs] == ["big"] * 5 + ["small"], (
        "the second slot's job waits for every job of the first"
    )
    complete(endpoint, jobs[5])
    big_output, small_output = await settle(first), await settle(second)
    assert big_output == completed(*sorted(jobs[:5], key=candidate_of)) and small_output == completed(jobs[5])


# --- Retries resume ------------------------------------------------------------------------------------------------


async def test_a_retry_resumes_every_job_of_the_previous_attempt_instead_of_submitting_again(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    jobs = await abandoned_slot(endpoint, dispatcher)
    complete(endpoint, jobs[0])
    endpoint.start_job(jobs[1].id)
    submitted = len(endpoint.jobs)

    retry = Attempt(heartbeat_details=[ids(*jobs)])
    task = retry.start(dispatcher.matte_slot, SLOT)
    await endpoint.wait_until(lambda: bool(retry.heartbeats))
    assert retry.heartbeats[0] == ids(*jobs), "the retry heartbeats every earlier job from its start"
    complete(endpoint, jobs[1])
    complete(endpoint, jobs[2])

    assert await settle(task) == completed(*jobs)
    assert len(endpoint.jobs) == submitted and all(job.takes == 1 for job in jobs), "no second job, each ran once"
    assert all(beat == ids(*jobs) for beat in retry.heartbeats)


@pytest.mark.parametrize("ending", ["FAILED", "TIMED_OUT", "CANCELLED", "forgotten"])
async def test_a_retry_replaces_only_the_jobs_that_cannot_deliver(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, ending: str
) -> None:
    old = await abandoned_slot(endpoint, dispatcher)
    complete(endpoint, old[0])
    complete(endpoint, old[2])
    if ending == "FAILED":
        fail(endpoint, old[1], "ArtifactError: s3://emoji/sets/s/source.png: artifact is missing")
    elif ending == "TIMED_OUT":
        endpoint.time_out(old[1].id)
    elif ending == "CANCELLED":
        await api_for(endpoint).cancel(old[1].id)
    else:
        endpoint.forget(old[1].id)
    submitted = len(endpoint.jobs)

    retry = Attempt([ids(*old)])
    task = retry.start(dispatcher.matte_slot, SLOT)
    [new] = await new_jobs(endpoint, submitted, 1)
    assert candidate_of(new) == 1
    complete(endpoint, new)

    assert await settle(task) == completed(old[0], new, old[2])
    assert len(endpoint.jobs) == submitted + 1
    assert retry.last == ids(old[0], new, old[2]), "the new job replaces the old one in the heartbeat"


async def test_a_job_that_failed_for_good_before_is_its_candidates_result_again_not_a_new_job(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    old = await abandoned_slot(endpoint, dispatcher)
    complete(endpoint, old[0])
    fail(endpoint, old[1], "CorruptImage: s3://emoji/x.png: not a readable image")
    complete(endpoint, old[2])
    submitted = len(endpoint.jobs)

    output = await settle(Attempt([ids(*old)]).env.run(dispatcher.matte_slot, SLOT))

    assert len(endpoint.jobs) == submitted
    assert output.results[1].failure is FailureType.CORRUPT_IMAGE and output.results[1].output is None
    assert [output.results[i] for i in (0, 2)] == [MatteCandidateResult(output=result_of(old[i])) for i in (0, 2)]


# --- Each candidate's failure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["UnknownPipeline", "UnsupportedImage", "CorruptImage", "WeightsMissing"])
async def test_a_job_failed_for_a_reason_no_retry_fixes_is_that_candidates_own_result(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, kind: str
) -> None:
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 3)
    fail(endpoint, jobs[1], f"{kind}: the reason")
    complete(endpoint, jobs[0])
    complete(endpoint, jobs[2])

    output = await settle(task)

    failed = output.results[1]
    assert (failed.failure, failed.output) == (FailureType(kind), None)
    assert failed.error is not None and "the reason" in failed.error and jobs[1].id in failed.error
    assert [output.results[i].output for i in (0, 2)] == [result_of(jobs[0]), result_of(jobs[2])]


async def test_an_output_outside_the_contract_is_that_candidates_own_result(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 3)
    endpoint.start_job(jobs[2].id)
    endpoint.finish_job(jobs[2].id, output={"result": {"matte": "nowhere"}})
    complete(endpoint, jobs[0])
    complete(endpoint, jobs[1])

    output = await settle(task)

    assert output.results[2].failure is FailureType.INVALID_JOB_OUTPUT
    assert [result.output is not None for result in output.results] == [True, True, False]


async def retryable_failure(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, break_one: Any, expected_jobs: int = 3
) -> tuple[ApplicationError, Attempt, list[Job]]:
    """Run a slot whose one candidate ``break_one(jobs)`` breaks in a way a retry may fix; the activity's failure once
    the other jobs were completed, the attempt, and its jobs. Checks that the failure waits for the others."""
    attempt = Attempt()
    before = len(endpoint.jobs)
    task = attempt.start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, before, expected_jobs)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))
    broken = await break_one(jobs)
    assert await still_running(task), "the activity waits for the other candidates' jobs"
    for job in jobs:
        if job is not broken and job.status in (IN_QUEUE, IN_PROGRESS):
            complete(endpoint, job)
    with pytest.raises(ApplicationError) as failure:
        await settle(task)
    assert all(job.status == COMPLETED for job in jobs if job is not broken), "the others settled first"
    return failure.value, attempt, jobs


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("ArtifactError: s3://emoji/x.png: artifact is missing", "ArtifactError"),
        ("OSError: CUDA out of memory", "RunPodJobFailed"),
        ('{"error_type": "<class \'RuntimeError\'>", "error_message": "boom"}', "RunPodJobFailed"),
        (None, "RunPodTimedOut"),
    ],
    ids=["typed", "untyped-exception", "sdk-report", "timed-out"],
)
async def test_a_failure_a_retry_may_fix_fails_the_activity_once_the_others_are_settled(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, error: str | None, kind: str
) -> None:
    async def break_one(jobs: list[Job]) -> Job:
        if error is None:
            endpoint.time_out(jobs[1].id)
        else:
            fail(endpoint, jobs[1], error)
        return jobs[1]

    failure, attempt, jobs = await retryable_failure(endpoint, dispatcher, break_one)

    assert (failure.type, failure.non_retryable) == (kind, False)
    assert "1 of 3 candidates" in failure.message and f"candidate 1: {kind}" in failure.message
    assert attempt.last == ids(*jobs), "the retry finds every job, and resumes the completed ones"


async def test_a_job_runpod_lost_track_of_fails_the_activity_for_a_retry(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    async def lose_one(jobs: list[Job]) -> Job:
        endpoint.forget(jobs[0].id)
        return jobs[0]

    failure, _, _ = await retryable_failure(endpoint, dispatcher, lose_one)

    assert (failure.type, failure.non_retryable) == ("RunPodJobLost", False)


@pytest.mark.parametrize(
    ("route", "status", "retry_after_s"),
    [("run", 429, 0.2), ("status", 502, None), ("status", 503, None), ("status", 429, 0.2), ("status", 500, None)],
)
async def test_a_blip_of_the_hosted_api_is_ridden_out_in_place(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, route: Any, status: int, retry_after_s: float | None
) -> None:
    endpoint.fail_next(route, status, count=QUICK_RETRY.attempts - 1, retry_after_s=retry_after_s)
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    for job in await new_jobs(endpoint, before, 3):
        complete(endpoint, job)

    output = await settle(task)

    assert all(result.output is not None for result in output.results), "no attempt lost, no candidate failed"
    assert len(endpoint.jobs) == before + 3, "a refused submission created no job, and was not doubled"


@pytest.mark.parametrize(
    ("route", "status", "kind"),
    [("run", 429, "RunPodThrottled"), ("status", 502, "RunPodUnavailable"), ("status", 503, "RunPodUnavailable")],
)
async def test_a_blip_that_outlasts_the_retries_in_place_fails_the_activity_for_a_retry(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, route: Any, status: int, kind: str
) -> None:
    endpoint.fail_next(route, status, count=3 * QUICK_RETRY.attempts)  # every try of the 3 jobs' calls
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    submitted = 0 if route == "run" else 3
    for job in await new_jobs(endpoint, before, submitted):
        complete(endpoint, job)

    with pytest.raises(ApplicationError) as failure:
        await settle(task)

    assert (failure.value.type, failure.value.non_retryable) == (kind, False)
    assert len(endpoint.jobs) == before + submitted


async def test_a_retry_after_too_long_to_wait_in_place_becomes_the_activitys_retry_delay(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    endpoint.fail_next("run", 429, retry_after_s=60)
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    for job in await new_jobs(endpoint, before, 2):
        complete(endpoint, job)

    with pytest.raises(ApplicationError) as failure:
        await settle(task)

    assert (failure.value.type, failure.value.next_retry_delay) == ("RunPodThrottled", timedelta(seconds=60))
    assert len(endpoint.jobs) == before + 2, "not waited here: the throttled submission was not tried again"


async def test_a_submission_that_may_have_queued_a_job_is_not_repeated_in_place(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    endpoint.fail_next("run", 502)  # a proxy's 502 may come after RunPod queued the job: no second /run here
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    for job in await new_jobs(endpoint, before, 2):
        complete(endpoint, job)

    with pytest.raises(ApplicationError) as failure:
        await settle(task)

    assert (failure.value.type, failure.value.non_retryable) == ("RunPodUnavailable", False)
    assert len(endpoint.jobs) == before + 2, "the 502'd submission was left to the activity's retry"


def test_a_job_creating_call_is_tried_again_in_place_only_when_runpod_cannot_have_acted() -> None:
    retry = ApiRetry(attempts=3)

    def delay(err: RunPodApiError) -> float | None:
        return retry.delay_s(1, err, repeatable=False)

    assert delay(RunPodApiError("429", status=429, retry_after_s=2)) == 2, "throttled: RunPod refused it"
    assert delay(RunPodApiError("ConnectError", status=None, unsent=True)) is not None, "never sent"
    assert delay(RunPodApiError("ReadTimeout", status=None)) is None, "sent: the job may exist"
    assert delay(RunPodApiError("502", status=502)) is None, "a 5xx may follow the job's creation"


def test_the_back_off_doubles_with_jitter_and_honours_retry_after_within_its_cap() -> None:
    retry = ApiRetry(attempts=4, first_delay_s=1.0, max_delay_s=3.0, max_retry_after_s=10.0)
    blip, throttled, refused = (
        RunPodApiError("502", status=502),
        RunPodApiError("429", status=429, retry_after_s=7),
        RunPodApiError("400", status=400),
    )

    delays = [retry.delay_s(attempt, blip) for attempt in (1, 2, 3)]

    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 1.5 <= delays[2] <= 3.0  # type: ignore[operator]
    assert retry.delay_s(4, blip) is None, "the attempts are spent"
    assert retry.delay_s(1, throttled) == 7
    assert retry.delay_s(1, RunPodApiError("429", status=429, retry_after_s=11)) is None, "past the cap: not here"
    assert retry.delay_s(1, refused) is None, "a refusal is not retried"


async def test_a_job_state_the_dispatcher_does_not_know_is_polled_on(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, before, 3)
    for job in jobs:
        endpoint.start_job(job.id)
        endpoint.report_state(job.id, "RUNNING")
    assert await still_running(task), "RUNNING is not an end"

    for job in jobs:
        complete(endpoint, job)
    output = await settle(task)

    assert all(result.output is not None for result in output.results)
    assert len(endpoint.jobs) == before + 3


@pytest.mark.parametrize(
    ("key", "endpoint_id", "setting"),
    [
        ("wrong-key", None, "set POPCON_RUNPOD_API_KEY"),
        (None, "no-such-endpoint", "set POPCON_RUNPOD_ENDPOINT_ID"),
    ],
    ids=["401-key", "404-endpoint"],
)
async def test_a_misconfigured_endpoint_fails_the_activity_once_naming_the_setting(
    endpoint: RunPodStandIn, tmp_path: Path, key: str | None, endpoint_id: str | None, setting: str
) -> None:
    dispatcher = RunPodDispatcher(
        api_for(endpoint, key, endpoint_id), FileArtifactStore(tmp_path), settings_for(endpoint), inline=False
    )
    before = len(endpoint.jobs)
    endpoint.config.echo_api_key = True  # its 401s quote the key they refused
    try:
        with pytest.raises(ApplicationError) as failure:
            await settle(Attempt().env.run(dispatcher.matte_slot, SLOT))
        with pytest.raises(ApplicationError) as check:
            await ActivityEnvironment().run(dispatcher.describe_pipeline, DescribePipelineInput(pipeline="classical"))
    finally:
        endpoint.config.echo_api_key = False
        await dispatcher.aclose()

    for refused in (failure.value, check.value):
        assert (refused.type, refused.non_retryable) == ("DeploymentMisconfigured", True)
        assert setting in refused.message
        assert "wrong-key" not in refused.message, "the key never appears"
    assert "candidate" not in failure.value.message, "one failure for the slot, not one per candidate"
    assert len(endpoint.jobs) == before


async def test_a_key_without_access_names_the_access_it_needs(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    endpoint.fail_next("run", 403, count=3)

    with pytest.raises(ApplicationError) as failure:
        await settle(Attempt().env.run(dispatcher.matte_slot, SLOT))

    assert (failure.value.type, failure.value.non_retryable) == ("DeploymentMisconfigured", True)
    assert "read/write access to Serverless endpoints" in failure.value.message


async def test_a_refusal_health_does_not_confirm_is_taken_for_a_passing_one(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    endpoint.fail_next("run", 401, count=3)  # RunPod's own trouble; /health still takes the key

    with pytest.raises(ApplicationError) as failure:
        await settle(Attempt().env.run(dispatcher.matte_slot, SLOT))

    assert (failure.value.type, failure.value.non_retryable) == ("RunPodUnavailable", False), "retried, set kept"
    assert "yet /health takes the key and the endpoint id" in failure.value.message


# --- Cancellation ----------------------------------------------------------------------------------------------------


async def test_cancelling_the_activity_cancels_every_job_queued_or_running(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 3)
    endpoint.start_job(jobs[1].id)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))

    attempt.env.cancel()

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    assert [job.status for job in jobs] == [CANCELLED] * 3


async def test_a_cancelled_slot_keeps_its_places_while_the_cancellation_reaches_the_other_slots_of_its_set(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher
) -> None:
    before = len(endpoint.jobs)
    first, second = Attempt(), Attempt()
    cancelled = first.start(dispatcher.matte_slot, SLOT)
    await until_submitted(endpoint, before + 3)
    waiting = second.start(dispatcher.matte_slot, slot_of(1, "other"))
    assert await still_running(waiting)

    first.env.cancel()
    await endpoint.wait_until(lambda: all(job.status == CANCELLED for job in endpoint.submitted()[before:]))
    await asyncio.sleep(0.5)  # the other slot learns of its own cancellation a heartbeat later
    assert len(endpoint.jobs) == before + 3, "no job submitted into a place the cancelled slot freed"
    second.env.cancel()

    for task in (cancelled, waiting):
        with pytest.raises(asyncio.CancelledError):
            await settle(task)
    assert len(endpoint.jobs) == before + 3


async def test_cancelling_a_retry_also_cancels_the_earlier_jobs_it_has_not_resumed_yet(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, tmp_path: Path
) -> None:
    old = await abandoned_slot(endpoint, dispatcher)
    one_at_a_time = RunPodDispatcher(
        api_for(endpoint), FileArtifactStore(tmp_path), settings_for(endpoint, runpod_workers=1), inline=False
    )
    retry = Attempt([ids(*old)])
    task = retry.start(one_at_a_time.matte_slot, SLOT)
    await endpoint.wait_until(lambda: bool(retry.heartbeats))
    assert await still_running(task)

    retry.env.cancel()

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    await one_at_a_time.aclose()
    assert [job.status for job in old] == [CANCELLED] * 3


class HeldSubmissions(RunPodApi):
    """A RunPod API whose submissions reach RunPod only once the test lets them (``answer``)."""

    def __init__(self, endpoint: RunPodStandIn) -> None:
        super().__init__(endpoint.base_url, endpoint.config.endpoint_id, SecretStr(endpoint.config.api_key))
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def run(self, job_input: dict[str, Any], *, execution_timeout_ms: int, ttl_ms: int) -> JobReport:
        self.asked.set()
        await self.answer.wait()
        return await super().run(job_input, execution_timeout_ms=execution_timeout_ms, ttl_ms=ttl_ms)


@pytest.mark.parametrize(
    ("details", "status"),
    [
        (ActivityCancellationDetails(cancel_requested=True), CANCELLED),
        (ActivityCancellationDetails(worker_shutdown=True), IN_QUEUE),
    ],
    ids=["cancelled", "worker-shutdown"],
)
async def test_a_job_whose_submission_was_in_flight_at_a_cancellation_is_not_left_unseen(
    endpoint: RunPodStandIn, tmp_path: Path, details: ActivityCancellationDetails, status: str
) -> None:
    api = HeldSubmissions(endpoint)
    dispatcher = RunPodDispatcher(api, FileArtifactStore(tmp_path), settings_for(endpoint), inline=False)
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_slot, slot_of(1))
    await api.asked.wait()
    submitted = len(endpoint.jobs)

    attempt.env.cancel(details)
    assert await still_running(task), "the cancelled activity waits for RunPod's answer"
    api.answer.set()

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    await dispatcher.aclose()
    [job] = endpoint.submitted()[submitted:]
    assert job.status == status, "cancelled, or left for the next attempt"
    assert attempt.last == {"0": job.id}, "heartbeated either way: the next attempt resumes it"
    endpoint.time_out(job.id)


@pytest.mark.parametrize(
    "details",
    [
        ActivityCancellationDetails(worker_shutdown=True),
        ActivityCancellationDetails(timed_out=True),
    ],
    ids=["worker-shutdown", "attempt-timed-out"],
)
async def test_a_cancellation_the_next_attempt_recovers_from_leaves_the_jobs_running(
    endpoint: RunPodStandIn, dispatcher: RunPodDispatcher, details: ActivityCancellationDetails
) -> None:
    attempt = Attempt()
    task = attempt.start(dispatcher.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 3)
    endpoint.start_job(jobs[0].id)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))

    attempt.env.cancel(details)

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    assert [job.status for job in jobs] == [IN_PROGRESS, IN_QUEUE, IN_QUEUE], "the next attempt resumes them"
    for job in jobs:
        endpoint.time_out(job.id)


# --- Slot jobs: several candidates in one job -----------------------------------------------------------------------


@pytest.fixture
async def pairs(endpoint: RunPodStandIn, tmp_path: Path) -> AsyncIterator[RunPodDispatcher]:
    """A dispatcher sending two candidates per job, to 3 workers holding one job each."""
    running = RunPodDispatcher(
        api_for(endpoint), FileArtifactStore(tmp_path), settings_for(endpoint, runpod_frames_per_job=2), inline=False
    )
    yield running
    await running.aclose()


async def test_a_slot_job_carries_several_candidates_and_each_gets_its_own_result(
    endpoint: RunPodStandIn, pairs: RunPodDispatcher
) -> None:
    attempt = Attempt()
    task = attempt.start(pairs.matte_slot, SLOT)
    first, second = await new_jobs(endpoint, len(endpoint.jobs), 2)

    assert [MatteSlotJob.model_validate(job.input).request for job in (first, second)] == [
        share(SLOT, [0, 1]),
        share(SLOT, [2]),
    ]
    await endpoint.wait_until(lambda: attempt.last == {"0": first.id, "1": first.id, "2": second.id})
    corrupt = MatteCandidateResult(failure=FailureType.CORRUPT_IMAGE, error="not a readable image")
    complete(endpoint, first, MatteCandidateResult(output=result_for(SLOT.output_keys[0])), corrupt)
    complete(endpoint, second)

    output = await settle(task)
    assert output.results == [
        MatteCandidateResult(output=result_for(SLOT.output_keys[0])),
        corrupt,
        MatteCandidateResult(output=result_for(SLOT.output_keys[2])),
    ], "a candidate's own failure in its job's results is its result; the others go on"


async def test_a_slot_job_with_a_result_missing_fails_its_candidates_on_their_own(
    endpoint: RunPodStandIn, pairs: RunPodDispatcher
) -> None:
    task = Attempt().start(pairs.matte_slot, SLOT)
    first, second = await new_jobs(endpoint, len(endpoint.jobs), 2)
    complete(endpoint, first, MatteCandidateResult(output=result_for(SLOT.output_keys[0])))
    complete(endpoint, second)

    output = await settle(task)

    assert [result.failure for result in output.results] == [
        FailureType.INVALID_JOB_OUTPUT,
        FailureType.INVALID_JOB_OUTPUT,
        None,
    ]


async def test_a_retry_resumes_the_completed_slot_job_and_replaces_the_failed_one_whole(
    endpoint: RunPodStandIn, pairs: RunPodDispatcher
) -> None:
    async def break_one(jobs: list[Job]) -> Job:
        fail(endpoint, jobs[0], "ArtifactError: s3://emoji/x.png: artifact is missing")
        return jobs[0]

    failure, attempt, (failed, done) = await retryable_failure(endpoint, pairs, break_one, expected_jobs=2)
    assert (failure.type, failure.non_retryable) == ("ArtifactError", False)
    assert "2 of 3 candidates" in failure.message, "both candidates of the failed job need another attempt"
    submitted = len(endpoint.jobs)

    retry = Attempt([attempt.last])
    task = retry.start(pairs.matte_slot, SLOT)
    [new] = await new_jobs(endpoint, submitted, 1)
    assert keys_of(new) == keys_of(failed), "one new job for the failed job's candidates"
    complete(endpoint, new)

    assert await settle(task) == completed(new, done)
    assert len(endpoint.jobs) == submitted + 1 and done.takes == 1, "the completed job is resumed, not redone"
    assert retry.last == ids(new, done)


async def test_cancelling_the_activity_cancels_its_slot_jobs(endpoint: RunPodStandIn, pairs: RunPodDispatcher) -> None:
    attempt = Attempt()
    task = attempt.start(pairs.matte_slot, SLOT)
    jobs = await new_jobs(endpoint, len(endpoint.jobs), 2)
    endpoint.start_job(jobs[0].id)
    await endpoint.wait_until(lambda: attempt.last == ids(*jobs))

    attempt.env.cancel()

    with pytest.raises(asyncio.CancelledError):
        await settle(task)
    assert [job.status for job in jobs] == [CANCELLED] * 2


async def test_the_jobs_in_flight_are_what_the_workers_hold_not_candidates(
    endpoint: RunPodStandIn, tmp_path: Path
) -> None:
    settings = settings_for(endpoint, runpod_workers=1, runpod_handler_concurrency=2, runpod_frames_per_job=2)
    dispatcher = RunPodDispatcher(api_for(endpoint), FileArtifactStore(tmp_path), settings, inline=False)
    assert dispatcher.jobs_at_once == 2, "one worker holding two jobs"
    before = len(endpoint.jobs)
    task = Attempt().start(dispatcher.matte_slot, slot_of(5))

    held = await new_jobs(endpoint, before, 2)
    assert await still_running(task) and len(endpoint.jobs) == before + 2, "4 candidates in flight, in 2 jobs"
    complete(endpoint, held[0])
    [last] = await new_jobs(endpoint, before + 2, 1)
    complete(endpoint, held[1])
    complete(endpoint, last)

    assert await settle(task) == completed(*held, last)
    await dispatcher.aclose()


# --- describe_pipeline and inline images -----------------------------------------------------------------------------


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
    dispatcher = RunPodDispatcher(api_for(endpoint), inline_store, settings_for(endpoint), inline=True)
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu"))
    handler = MattingHandler(inline_store, pipelines, concurrency=1, inline_max_bytes=4_000_000)
    images = [sticker_png(), sticker_png(48)]
    sources = [inline_store.put(f"sets/s/wave/{i}/source.png", data, "image/png") for i, data in enumerate(images)]
    request = slot_of(2).model_copy(update={"candidates": sources})

    task = Attempt().start(dispatcher.matte_slot, request)
    for job in await new_jobs(endpoint, len(endpoint.jobs), 2):
        endpoint.start_job(job.id)
        endpoint.finish_job(job.id, output=await handler.handle({"id": job.id, "input": job.input}))
        assert base64.b64decode(job.input["inline_sources"][0]) == images[candidate_of(job)]
    output = await settle(task)
    handler.close()
    await dispatcher.aclose()

    assert dispatcher.inline
    for index, result in enumerate(output.results):
        matte = result.output.matte if result.output else None
        assert matte is not None and matte.uri == (inline_store.root / request.output_keys[index]).as_uri(), (
            "stored under the dispatcher's key"
        )
        assert hashlib.sha256(inline_store.get(matte)).hexdigest() == matte.sha256
        assert len(inline_store.get(matte)) == matte.size_bytes and matte.width == (64, 48)[index]


async def test_an_inline_source_over_the_limit_fails_on_its_own_before_any_job(
    endpoint: RunPodStandIn, inline_store: FileArtifactStore
) -> None:
    dispatcher = RunPodDispatcher(
        api_for(endpoint), inline_store, settings_for(endpoint, runpod_inline_max_bytes=100), inline=True
    )
    big = inline_store.put("big.png", sticker_png(), "image/png")
    tiny = inline_store.put("tiny.png", b"tiny", "image/png")
    request = slot_of(2).model_copy(update={"candidates": [big, tiny]})
    submitted = len(endpoint.jobs)

    task = Attempt().start(dispatcher.matte_slot, request)
    [job] = await new_jobs(endpoint, submitted, 1)
    complete(endpoint, job)
    output = await settle(task)
    await dispatcher.aclose()

    too_big = output.results[0]
    assert too_big.failure is FailureType.UNSUPPORTED_IMAGE and too_big.error is not None
    assert "inline limit" in too_big.error and "s3://" in too_big.error
    assert candidate_of(job) == 1 and output.results[1].output == result_of(job)
    assert len(endpoint.jobs) == submitted + 1, "no job for the image over the limit"
