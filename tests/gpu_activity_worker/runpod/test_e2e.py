"""Whole EmojiSet runs whose GPU queue is served only by the RunPod dispatcher.

The real workflow and orchestration worker run on the dev server, in a namespace of their own (so no in-process GPU
worker of another test module can take a matting task); the dispatcher sends each ``matte_slot`` activity's
candidates to the RunPod stand-in as one slot job (the settings' defaults), which runs in a worker process with
RunPod's real worker loop and our real handler, each worker holding several jobs; every artifact lives in an
S3-compatible server on loopback, which every process (the worker processes through their environment) uses. The last
tests run worker processes of their own.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from pydantic import SecretStr
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from core.artifacts import ArtifactStore, FileArtifactStore, open_store
from core.settings import ArtifactSettings
from gpu_activity_worker.runpod.api import JobStatus, RunPodApi
from gpu_activity_worker.runpod.dispatcher import build_dispatcher_worker
from gpu_activity_worker.runpod.jobs import DescribeJob, MatteJob, MatteSlotJob, MatteSlotJobOutput
from gpu_activity_worker.runpod.settings import RunPodSettings
from starter.client import EmojiSetClient
from starter.devstack import ensure_search_attributes
from testkit.images import sticker_png
from testkit.runpod_standin import (
    CANCELLED,
    COMPLETED,
    FINISHED,
    GATE_FIFO_ENV,
    GATED_HANDLER_COMMAND,
    IN_PROGRESS,
    IN_QUEUE,
    TIMED_OUT,
    EndpointConfig,
    Job,
    RunPodStandIn,
)
from testkit.s3 import S3_KEYS, s3_server
from testkit.set_keys import matte_key, source_key
from testkit.stack import standin_paid_queue, wait_for_phase
from workflows.contract import (
    ArtifactRef,
    CandidateStatus,
    DescribePipelineInput,
    EmojiSetInput,
    FailureType,
    MatteFrameInput,
    MatteSlotInput,
    Phase,
    RegenerateFrameInput,
    ReviewPolicy,
    StagePolicy,
)

pytestmark = pytest.mark.slow  # real RunPod worker processes

WORKERS = 3
FRAMES = 2
SET = {
    "actions": ["wave"],
    "frames_per_emoji": FRAMES,
    "takes_per_action": 1,
    "neighbours": 1,
    "image_size": 64,
    "review": ReviewPolicy(start_frames=StagePolicy.AUTO),  # the set waits for a person at the final review only
}
"""Two frame slots (two ``matte_slot`` activities) of up to three candidates (the chosen clip frame and one neighbour
either side, where the clip has one), one RunPod job each."""
SETTINGS = RunPodSettings(_env_file=None)
assert SETTINGS.runpod_frames_per_job >= 3 and SETTINGS.runpod_handler_concurrency > 1, "a slot is one job, held"


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """An S3-compatible server on loopback with a bucket; the POPCON_* variables that point at it."""
    with s3_server("emoji", "e2e") as env:
        yield env


@pytest.fixture(scope="module")
async def endpoint(s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunPodStandIn]:
    config = EndpointConfig(
        max_workers=WORKERS,
        idle_timeout_s=120,
        worker_env={
            **s3_env,
            "OMP_NUM_THREADS": "1",
            "POPCON_RUNPOD_HANDLER_CONCURRENCY": str(SETTINGS.runpod_handler_concurrency),
        },
        log_dir=tmp_path_factory.mktemp("runpod-workers"),
    )
    async with RunPodStandIn(config) as running:
        yield running


@dataclass
class RunPodStack:
    client: Client
    sets: EmojiSetClient
    store: ArtifactStore
    endpoint: RunPodStandIn


async def namespace_client(dev_server: WorkflowEnvironment) -> Client:
    namespace = f"runpod-e2e-{uuid.uuid4().hex[:8]}"
    await dev_server.client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86_400))
    )
    client = await Client.connect(
        dev_server.client.service_client.config.target_host,
        namespace=namespace,
        data_converter=pydantic_data_converter,
    )
    await ensure_search_attributes(client)
    return client


@pytest.fixture(scope="module")
async def runpod_stack(
    dev_server: WorkflowEnvironment,
    endpoint: RunPodStandIn,
    s3_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[RunPodStack]:
    """The orchestration worker and the dispatcher (no GPU worker), both on the S3 store."""
    artifacts = ArtifactSettings(
        _env_file=None,
        data_dir=tmp_path_factory.mktemp("runpod-data"),
        artifact_root=s3_env["POPCON_ARTIFACT_ROOT"],
        s3_endpoint_url=s3_env["POPCON_S3_ENDPOINT_URL"],
        s3_access_key_id=S3_KEYS["POPCON_S3_ACCESS_KEY_ID"],
        s3_secret_access_key=SecretStr(S3_KEYS["POPCON_S3_SECRET_ACCESS_KEY"]),
        s3_region=S3_KEYS["POPCON_S3_REGION"],
    )
    settings = RunPodSettings(
        _env_file=None,
        runpod_endpoint_id=endpoint.config.endpoint_id,
        runpod_api_key=SecretStr(endpoint.config.api_key),
        runpod_base_url=endpoint.base_url,
        runpod_poll_interval_s=0.05,
        runpod_execution_timeout_ms=5_000,
        runpod_workers=WORKERS,
        runpod_api_attempts=1,  # a blip fails the activity, whose retry resumes the jobs (in place: test_dispatcher)
    )
    client = await namespace_client(dev_server)
    store = open_store(artifacts)
    orchestration, generation = build_worker(
        client, OrchestrationSettings(_env_file=None), store, paid=standin_paid_queue()
    )
    dispatcher_worker, dispatcher = build_dispatcher_worker(client, settings, store, inline=False)
    async with orchestration, dispatcher_worker:
        yield RunPodStack(client, EmojiSetClient(client), store, endpoint)
    await generation.aclose()
    await dispatcher.aclose()


def keys_of(job: Job) -> list[str]:
    """The output keys of a job's candidates (none for a describe job)."""
    request = job.input["request"]
    return list(request.get("output_keys") or [request.get("output_key", "")])


def jobs_of(endpoint: RunPodStandIn, set_id: str) -> list[Job]:
    return endpoint.submitted(lambda job: any(f"/{set_id}/" in key for key in keys_of(job)))


def all_keys(jobs: list[Job]) -> list[str]:
    return [key for job in jobs for key in keys_of(job)]


@contextmanager
def revoked_key(endpoint: RunPodStandIn) -> Iterator[None]:
    """The endpoint takes another key than the dispatcher's from now on, and quotes the refused one in its 401s."""
    key = endpoint.config.api_key
    endpoint.config.api_key, endpoint.config.echo_api_key = "rotated-key", True
    try:
        yield
    finally:
        endpoint.config.api_key, endpoint.config.echo_api_key = key, False


async def start(stack: RunPodStack, set_id: str) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt="a round orange cat", **SET), set_id=set_id)


async def test_a_set_completes_with_every_candidate_matted_exactly_once_on_runpod(
    runpod_stack: RunPodStack, set_id: str
) -> None:
    endpoint = runpod_stack.endpoint
    endpoint.fail_next("status", 503)  # one attempt fails mid-poll: its retry must resume the same job

    await start(runpod_stack, set_id)
    state = await wait_for_phase(runpod_stack.sets, set_id, Phase.AWAITING_REVIEW, timeout=45)
    await runpod_stack.sets.approve(set_id, reviewer="ana")
    result = await runpod_stack.sets.result(set_id)

    assert result.status == "completed" and len(result.emojis[0].frames) == FRAMES
    assert state.pipeline_info == f"classical on runpod:{endpoint.config.endpoint_id} (unknown)"
    candidates = [c for _, frame in state.frames() for c in frame.candidates]
    assert len(candidates) >= FRAMES + 2 and all(c.status is CandidateStatus.READY for c in candidates)
    for candidate in candidates:
        assert candidate.matte is not None and candidate.matte.uri.startswith("s3://emoji/e2e/")
        runpod_stack.store.get(candidate.matte)  # the worker process wrote it where everyone reads it
    jobs = jobs_of(endpoint, set_id)
    assert len(jobs) == FRAMES, "one job per slot"
    assert len(all_keys(jobs)) == len(set(all_keys(jobs))) == len(candidates), "each candidate in one job"
    assert all(job.status == COMPLETED and job.takes == 1 for job in jobs), "each job run once"
    history = await runpod_stack.client.get_workflow_handle(set_id).fetch_history()
    attempts = [
        event.activity_task_started_event_attributes.attempt
        for event in history.events
        if event.HasField("activity_task_started_event_attributes")
    ]
    assert max(attempts) == 2, "the slot whose poll failed on the 503 was retried, and resumed its jobs"


async def test_a_worker_lost_mid_job_times_out_and_the_retry_runs_a_new_job(
    runpod_stack: RunPodStack, set_id: str
) -> None:
    endpoint = runpod_stack.endpoint
    endpoint.kill_next_taker()

    await start(runpod_stack, set_id)
    state = await wait_for_phase(runpod_stack.sets, set_id, Phase.AWAITING_REVIEW, timeout=45)
    await runpod_stack.sets.cancel(set_id)

    candidates = [c for _, frame in state.frames() for c in frame.candidates]
    assert all(c.status is CandidateStatus.READY for c in candidates) and len(candidates) >= FRAMES + 2
    jobs = jobs_of(endpoint, set_id)
    lost = [job for job in jobs if job.status == TIMED_OUT]
    completed = [job for job in jobs if job.status == COMPLETED]
    assert lost and len(jobs) == len(lost) + len(completed), "the killed worker's jobs timed out, the rest completed"
    assert sorted(all_keys(completed)) == sorted(set(all_keys(jobs))), "nothing lost, nothing matted twice"
    assert all(job.takes == 1 for job in completed)
    killed = next(worker for worker in endpoint.worker_history if worker.exit_code == -9)
    assert {job.worker_id for job in lost} == {killed.id}


async def test_a_key_revoked_mid_set_fails_the_set_once_with_the_setting_to_fix(
    runpod_stack: RunPodStack, set_id: str
) -> None:
    endpoint, key = runpod_stack.endpoint, runpod_stack.endpoint.config.api_key
    review = ReviewPolicy(start_frames=StagePolicy.HUMAN)
    await runpod_stack.sets.start(
        EmojiSetInput(character_prompt="a round orange cat", **{**SET, "review": review}), set_id=set_id
    )
    await wait_for_phase(runpod_stack.sets, set_id, Phase.AWAITING_START_FRAME_REVIEW, timeout=45)
    with revoked_key(endpoint):  # the deployment's key is revoked while the set waits for a person
        await runpod_stack.sets.approve_start_frames(set_id, reviewer="ana")
        with pytest.raises(WorkflowFailureError) as failed:
            async with asyncio.timeout(60):  # a set that did not stop waits for custom prompts instead
                await runpod_stack.sets.result(set_id)

    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.DEPLOYMENT_MISCONFIGURED
    assert "set POPCON_RUNPOD_API_KEY" in cause.message
    assert key not in str(failed.value.cause), "the key RunPod quoted back is never in the failure"
    assert not jobs_of(endpoint, set_id), "no job was created with the refused key"


async def test_a_key_revoked_during_the_final_review_fails_the_reviewers_edit_and_the_set_waits(
    runpod_stack: RunPodStack, set_id: str
) -> None:
    endpoint = runpod_stack.endpoint
    await start(runpod_stack, set_id)
    await wait_for_phase(runpod_stack.sets, set_id, Phase.AWAITING_REVIEW, timeout=45)
    with revoked_key(endpoint):
        frame = await runpod_stack.sets.regenerate_frame(
            RegenerateFrameInput(emoji="wave", frame=0, prompt="raise the hand higher", candidates=1), set_id=set_id
        )
        state = await runpod_stack.sets.state(set_id)
    await runpod_stack.sets.cancel(set_id)

    assert frame is not None
    edited = frame.candidates[-1]
    assert edited.status is CandidateStatus.FAILED and "set POPCON_RUNPOD_API_KEY" in (edited.error or "")
    assert state.phase is Phase.AWAITING_REVIEW, "a reviewed set is not given up for a key an operator can fix"


async def test_a_refused_key_fails_a_new_set_at_its_start_up_check_before_anything_is_paid(
    runpod_stack: RunPodStack, set_id: str
) -> None:
    with revoked_key(runpod_stack.endpoint):
        await start(runpod_stack, set_id)
        with pytest.raises(WorkflowFailureError) as failed:
            async with asyncio.timeout(60):
                await runpod_stack.sets.result(set_id)
        state = await runpod_stack.sets.state(set_id)

    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.DEPLOYMENT_MISCONFIGURED
    assert "set POPCON_RUNPOD_API_KEY" in cause.message, "not an InvalidRequest: the request was fine"
    assert not state.character.candidates, "failed before the character was generated"


async def test_cancelling_the_set_cancels_its_runpod_jobs(runpod_stack: RunPodStack, set_id: str) -> None:
    endpoint = runpod_stack.endpoint
    endpoint.pause()
    try:
        await start(runpod_stack, set_id)
        await endpoint.wait_until(lambda: len(jobs_of(endpoint, set_id)) == FRAMES)
        assert {job.status for job in jobs_of(endpoint, set_id)} == {IN_QUEUE}, "every slot's job is submitted"

        await runpod_stack.sets.cancel(set_id, reason="changed my mind")
        result = await runpod_stack.sets.result(set_id)
        await endpoint.wait_until(lambda: all(job.status == CANCELLED for job in jobs_of(endpoint, set_id)))
    finally:
        endpoint.resume()

    assert result.status == "cancelled"
    jobs = jobs_of(endpoint, set_id)
    assert len(jobs) == FRAMES and all(job.takes == 0 for job in jobs), "cancelled in the queue, none ran"


def api_of(endpoint: RunPodStandIn) -> RunPodApi:
    return RunPodApi(endpoint.base_url, endpoint.config.endpoint_id, SecretStr(endpoint.config.api_key))


def matte_job(source: ArtifactRef, output_key: str) -> dict[str, object]:
    request = MatteFrameInput(source=source, output_key=output_key, pipeline="classical")
    return MatteJob(op="matte", request=request).model_dump(mode="json")


async def open_for_writing_once_read(fifo: Path, timeout: float = 30.0) -> int:
    """Open ``fifo`` for writing as soon as a reader has it open (without blocking the loop); a blocking fd."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads it
            except OSError as err:
                if err.errno != errno.ENXIO:
                    raise
                await asyncio.sleep(0.05)
                continue
            os.set_blocking(fd, True)
            return fd


async def test_cancelling_a_running_job_stops_it_on_its_worker(tmp_path: Path) -> None:
    # One worker of its own, on a file:// store, and a job whose source is a named pipe: the handler's read of it
    # blocks until this test writes the image, so the job is running in the handler for as long as the test wants,
    # however fast the CPU.
    store = FileArtifactStore(tmp_path / "artifacts")
    (tmp_path / "workers").mkdir()
    config = EndpointConfig(
        max_workers=1,
        worker_env={
            "POPCON_ARTIFACT_ROOT": store.root.as_uri(),
            "OMP_NUM_THREADS": "1",
            "POPCON_RUNPOD_HANDLER_CONCURRENCY": "1",
        },
        log_dir=tmp_path / "workers",
    )
    data = sticker_png()
    fifo = store.root / source_key("source.png", "held")  # inside the store: a store reads nothing outside its root
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    held = ArtifactRef(
        uri=fifo.as_uri(), sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), media_type="image/png"
    )
    next_source = store.put(source_key("source.png", "next"), data, "image/png")

    async with RunPodStandIn(config) as endpoint:
        api = api_of(endpoint)
        try:
            submitted = await api.run(
                matte_job(held, matte_key(0, set_id="held")), execution_timeout_ms=60_000, ttl_ms=60_000
            )
            job = endpoint.jobs[submitted.id]
            writer = await open_for_writing_once_read(fifo)  # the handler is reading the source: the job runs
            try:
                assert job.status == IN_PROGRESS
                worker_log = worker_log_of(endpoint, job.worker_id or "")
                cancelled = await api.cancel(job.id)
                await endpoint.wait_until(lambda: f"{job.id} | Job stopped." in worker_log.read_text())
                health = await api.health()
            finally:
                with os.fdopen(writer, "wb") as pipe:  # let the stopped job's thread finish
                    pipe.write(data)
            # The worker takes its next job; with one handler thread that runs only after the stopped job's thread
            # has finished, so a result the stopped handler posted would have come back before this one.
            following = await api.run(
                matte_job(next_source, matte_key(0, set_id="next")), execution_timeout_ms=60_000, ttl_ms=60_000
            )
            await endpoint.wait_until(lambda: endpoint.jobs[following.id].status in FINISHED, timeout=30)
        finally:
            await api.aclose()

    assert cancelled.status is JobStatus.CANCELLED and job.status == CANCELLED and job.output is None
    assert health["jobs"]["inProgress"] == 0
    assert endpoint.jobs[following.id].status == COMPLETED
    assert endpoint.jobs[following.id].worker_id == job.worker_id, "the same worker went on after the stop"
    assert endpoint.dropped_results == 0, "the stopped handler posted no result"


def worker_log_of(endpoint: RunPodStandIn, worker_id: str) -> Path:
    assert endpoint.config.log_dir is not None
    return endpoint.config.log_dir / f"{worker_id}.log"


async def test_worker_processes_load_their_engines_before_taking_jobs(endpoint: RunPodStandIn) -> None:
    describe = DescribeJob(op="describe", request=DescribePipelineInput(pipeline="classical")).model_dump(mode="json")
    api = api_of(endpoint)
    endpoint.pause()  # the queued jobs scale the endpoint up to every worker it may have, whatever ran before
    try:
        submitted = [await api.run(describe, execution_timeout_ms=60_000, ttl_ms=60_000) for _ in range(WORKERS)]
        await endpoint.wait_until(
            lambda: sum(w.asked_at is not None and not w.stopping for w in endpoint.workers.values()) >= WORKERS,
            timeout=60,
        )
    finally:
        endpoint.resume()
    jobs = [endpoint.jobs[report.id] for report in submitted]
    await endpoint.wait_until(lambda: all(job.status in FINISHED for job in jobs), timeout=30)
    await api.aclose()

    assert all(job.status == COMPLETED for job in jobs), [job.report() for job in jobs]
    ready = [worker for worker in endpoint.worker_history if worker.asked_at is not None]
    assert len(ready) >= WORKERS
    for worker in ready:
        log = worker_log_of(endpoint, worker.id).read_text()
        assert '"msg": "cold start done"' in log and '"pipeline": "classical"' in log, log
    for job in jobs:
        log = worker_log_of(endpoint, job.worker_id or "").read_text()
        assert log.index('"msg": "cold start done"') < log.index(f"{job.id} | Started."), "engines load first"


async def finished(endpoint: RunPodStandIn, job_id: str) -> Job:
    await endpoint.wait_until(lambda: endpoint.jobs[job_id].status in FINISHED, timeout=30)
    return endpoint.jobs[job_id]


async def test_a_slot_job_on_a_worker_gives_each_candidate_its_own_result(runpod_stack: RunPodStack) -> None:
    store = runpod_stack.store
    sticker = store.put(source_key("sticker.png", "direct"), sticker_png(), "image/png", width=64, height=64)
    corrupt = store.put(source_key("corrupt.png", "direct"), b"not an image", "image/png")
    request = MatteSlotInput(
        pipeline="classical",
        candidates=[sticker, corrupt],
        output_keys=[matte_key(0, set_id="direct"), matte_key(1, set_id="direct")],
    )
    api = api_of(runpod_stack.endpoint)
    try:
        submitted = await api.run(
            MatteSlotJob(op="matte_slot", request=request).model_dump(mode="json"),
            execution_timeout_ms=60_000,
            ttl_ms=60_000,
        )
    finally:
        await api.aclose()
    job = await finished(runpod_stack.endpoint, submitted.id)

    assert job.status == COMPLETED, job.report()
    output = MatteSlotJobOutput.model_validate(job.output)
    assert output.results[0].output is not None and output.results[1].failure is FailureType.CORRUPT_IMAGE
    store.get(output.results[0].output.matte)


def slot_job(source: ArtifactRef, frame: int) -> dict[str, object]:
    request = MatteSlotInput(pipeline="gated", candidates=[source], output_keys=[matte_key(0, frame=frame)])
    return MatteSlotJob(op="matte_slot", request=request).model_dump(mode="json")


async def let_one_frame_through(fifo: Path) -> None:
    """Wait until a frame is on the gated step (it opened the pipe), then let it go."""
    writer = await open_for_writing_once_read(fifo)
    with os.fdopen(writer, "wb") as pipe:
        pipe.write(b"x")


async def test_a_worker_holds_a_second_job_while_the_first_is_on_its_gpu_and_a_stopped_one_never_runs(
    tmp_path: Path,
) -> None:
    # One worker holding two jobs; its GPU step waits on a named pipe, so a frame stays on the GPU until this test
    # lets it go, however fast the CPU.
    store = FileArtifactStore(tmp_path / "artifacts")
    (tmp_path / "workers").mkdir()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    config = EndpointConfig(
        max_workers=1,
        worker_command=GATED_HANDLER_COMMAND,
        worker_env={
            "POPCON_ARTIFACT_ROOT": store.root.as_uri(),
            "OMP_NUM_THREADS": "1",
            "POPCON_RUNPOD_HANDLER_CONCURRENCY": "2",
            GATE_FIFO_ENV: str(gate),
        },
        log_dir=tmp_path / "workers",
    )
    source = store.put(source_key("source.png"), sticker_png(), "image/png", width=64, height=64)

    async with RunPodStandIn(config) as endpoint:
        api = api_of(endpoint)
        try:
            first = await api.run(slot_job(source, 1), execution_timeout_ms=60_000, ttl_ms=60_000)
            writer = await open_for_writing_once_read(gate, timeout=60)  # the first job's frame is on the GPU
            try:
                second = await api.run(slot_job(source, 2), execution_timeout_ms=60_000, ttl_ms=60_000)
                await endpoint.wait_until(lambda: endpoint.jobs[second.id].status == IN_PROGRESS)
                assert endpoint.jobs[first.id].status == IN_PROGRESS, "taken while the first is on the GPU"
                assert endpoint.jobs[second.id].worker_id == endpoint.jobs[first.id].worker_id

                await api.cancel(second.id)  # stopped while it waits for the GPU
                worker_log = worker_log_of(endpoint, endpoint.jobs[second.id].worker_id or "")
                await endpoint.wait_until(lambda: f"{second.id} | Job stopped." in worker_log.read_text())
            finally:
                with os.fdopen(writer, "wb") as pipe:
                    pipe.write(b"x")
            first_job = await finished(endpoint, first.id)
            # The stopped job gave its turn up: the next frame on the GPU is the third job's, and one byte lets it
            # finish (were the stopped job's frame next, the third would wait for a second byte and time out).
            third = await api.run(slot_job(source, 3), execution_timeout_ms=60_000, ttl_ms=60_000)
            await let_one_frame_through(gate)
            third_job = await finished(endpoint, third.id)
        finally:
            await api.aclose()

    assert first_job.status == COMPLETED and third_job.status == COMPLETED
    assert endpoint.jobs[second.id].status == CANCELLED and endpoint.jobs[second.id].output is None
    assert endpoint.dropped_results == 0, "the stopped job posted no result"
    assert (store.root / matte_key(0, frame=3)).exists() and not (store.root / matte_key(0, frame=2)).exists()
