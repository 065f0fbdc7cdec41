"""A local stand-in for RunPod Serverless: the hosted queue API on 127.0.0.1, with real worker processes behind it.

Each worker is a subprocess running RunPod's own worker loop (``runpod.serverless.start``) with our handler
(``python -m gpu_activity_worker.runpod.handler``), pointed at this server through the variables the platform sets.
:data:`GATED_HANDLER_COMMAND` is that handler with one more step, ``gated`` (:class:`FifoGatedStep`): each image
stays on the worker's GPU until the test writes a byte to a named pipe, so what a worker process holds, and when, is
the test's.

Client routes, as the hosted API ``https://api.runpod.ai/v2`` (API key as ``Bearer`` or bare, else 401):
  ``POST /v2/{endpoint}/run``          ``{"input", "policy": {"executionTimeout", "ttl"}}`` -> ``{"id", "status"}``
  ``GET  /v2/{endpoint}/status/{id}``  ``{"id", "status", "delayTime", "executionTime", "output" | "error"}``; 404
  ``POST /v2/{endpoint}/cancel/{id}``  ``{"id", "status"}``
  ``GET  /v2/{endpoint}/health``       ``{"jobs": {completed, failed, inProgress, inQueue, retried}, "workers": ...}``

Worker routes, as runpod 1.12.0's worker loop calls them (serverless/modules/rp_job.py, rp_http.py): the URLs come
from ``RUNPOD_WEBHOOK_GET_JOB`` (``$ID`` = the worker id), ``RUNPOD_WEBHOOK_POST_OUTPUT`` and
``RUNPOD_WEBHOOK_POST_STREAM`` (``$RUNPOD_POD_ID``, ``$ID`` = the job id), the SDK appends query parameters, and it
derives the stop channel from the job-take URL:
  ``GET  .../job-take/{worker}?..&job_in_progress=0|1``                   long poll -> ``{"id", "input"}`` or 204
  ``GET  .../job-take-batch/{worker}?..&batch_size=N&job_in_progress=..``  long poll -> ``[{"id", "input"}]`` or 204
  ``POST .../job-done/{worker}/{id}?..&isStream=false``  body: JSON ``{"output"}`` or ``{"error"}`` (form content type)
  ``POST .../job-stream/{worker}/{id}?..&isStream=true``  body: JSON ``{"output"}``
  ``GET  .../job-stop/{worker}?..``                       long poll -> ``{"jobsToStop": [ids]}`` or 204

RunPod behaviours modelled (docs.runpod.io, serverless/endpoints: job-states, send-requests, operation-reference,
endpoint-configurations):
- Jobs queue until a worker takes one. Workers scale up to ``max_workers`` with the scaler ``popcon runpod deploy``
  sets (:data:`~gpu_activity_worker.runpod.provision.QUEUE_SCALING`): QUEUE_DELAY, "with zero workers initially, the
  first request adds one worker; subsequent requests add workers only after waiting in the queue for the defined
  number of delay seconds" (one worker per job that has waited that long), or REQUEST_COUNT, ``ceil((in queue + in
  progress) / scaler value)`` workers. Each takes jobs only after ``cold_start_s`` (the container start) and its own
  start-up, and scales down after ``idle_timeout_s`` without a job; ``min_workers`` stay.
- ``executionTimeout`` (ms, at least 5000, default the endpoint's) counts from when a worker takes the job: past it
  the job is TIMED_OUT and its worker told to stop it. ``ttl`` (ms, at least 10000, default 24 h) counts from the
  submission: a job still queued then is TIMED_OUT, any other is forgotten (404). A finished job is kept 30 minutes.
- A worker that dies mid-job never reports back: its job stays IN_PROGRESS until the execution timeout, then is
  TIMED_OUT ("the worker failed to report back before reaching the timeout threshold", job-states). RunPod's own
  retries (the health ``retried`` counter, ``/retry``) are not modelled: ``retried`` stays 0.
- The failure answers of the hosted API, on demand (:meth:`RunPodStandIn.fail_next`): 429 with ``Retry-After``,
  5xx; a wrong key is 401, an endpoint id it does not serve 404; a running job can report a state outside the
  job-states page (:meth:`RunPodStandIn.report_state`, e.g. ``RUNNING``).
- ``/cancel`` ends a queued or running job as CANCELLED and tells the running worker to stop it; a result posted for
  a job that has already ended is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from aiohttp import web

from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepRole
from gpu_activity_worker.runpod.provision import QUEUE_SCALING
from testkit.held_step import opaque

PROJECT_DIR = Path(__file__).resolve().parents[1]
HANDLER_COMMAND = (sys.executable, "-m", "gpu_activity_worker.runpod.handler")
GATE_FIFO_ENV = "POPCON_TEST_GATE_FIFO"
"""The named pipe a worker process's ``gated`` step waits on."""
GATED_HANDLER_COMMAND = (
    sys.executable,
    "-c",
    "from testkit.runpod_standin import gated_steps; from gpu_activity_worker.runpod.handler import main; "
    "main(gated_steps())",
)
"""A worker process: our real handler, with the ``gated`` step of :func:`gated_steps`."""


class FifoGatedStep:
    """A stand-in GPU step for worker processes: each image waits until one byte (or end of file) comes through the
    named pipe ``$POPCON_TEST_GATE_FIFO``; the pipe is opened for each image, so a test that opens it for writing
    knows an image is on the step."""

    device, precision = "cpu", "fp32"

    def apply(self, state: MatteState) -> MatteState:
        with open(os.environ[GATE_FIFO_ENV], "rb") as pipe:
            pipe.read(1)
        return opaque(state)


def gated_steps() -> StepRegistry:
    """The built-in steps and ``gated`` (:class:`FifoGatedStep`)."""
    steps = builtin_steps()
    steps.register(
        StepSpec("gated", StepRole.COARSE, lambda variant, context: FifoGatedStep(), variants=None, summary="test")
    )
    return steps


IN_QUEUE, IN_PROGRESS, COMPLETED, FAILED, CANCELLED, TIMED_OUT = (
    "IN_QUEUE",
    "IN_PROGRESS",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMED_OUT",
)
FINISHED = (COMPLETED, FAILED, CANCELLED, TIMED_OUT)
RUN_PAYLOAD_LIMIT = 10 * 1024 * 1024
RESULT_RETENTION_S = 30 * 60
MIN_EXECUTION_TIMEOUT_MS, MIN_TTL_MS, DEFAULT_TTL_MS = 5_000, 10_000, 86_400_000
TICK_S = 0.05

Route = Literal["run", "status", "cancel", "health"]


@dataclass
class EndpointConfig:
    """The endpoint's settings, and how its workers are started.

    Attributes:
        worker_command: The worker process; by default our handler module.
        worker_env: Extra environment of every worker (artifact store, settings), over this process's own.
        log_dir: Where each worker's output goes (``<worker id>.log``); None discards it.
        long_poll_s: How long job-take and job-stop requests are held open when there is nothing to give.
        echo_api_key: Error answers to clients (401, injected faults) quote the key the request carried, as an API
            may: what a client puts in its exceptions must still never show it.
        scaler: ``QUEUE_DELAY`` or ``REQUEST_COUNT``; by default what ``popcon runpod deploy`` sets.
        scaler_value: Seconds in the queue (QUEUE_DELAY) or requests per worker (REQUEST_COUNT).
    """

    endpoint_id: str = "standin"
    api_key: str = "standin-key"
    max_workers: int = 3
    min_workers: int = 0
    idle_timeout_s: float = 5.0
    cold_start_s: float = 0.0
    execution_timeout_ms: int = 600_000
    worker_command: Sequence[str] = HANDLER_COMMAND
    worker_env: Mapping[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    long_poll_s: float = 1.0
    echo_api_key: bool = False
    scaler: Literal["QUEUE_DELAY", "REQUEST_COUNT"] = QUEUE_SCALING["type"]
    scaler_value: float = QUEUE_SCALING["queueDelay"]


@dataclass
class Job:
    """A job and everything that happened to it; ``takes`` counts how often a worker took it."""

    id: str
    input: Any
    execution_timeout_s: float
    ttl_s: float
    submitted_at: float
    status: str = IN_QUEUE
    worker_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    output: Any = None
    error: Any = None
    takes: int = 0
    stream: list[Any] = field(default_factory=list)
    reported_status: str | None = None
    """What ``/status`` reports instead of the state until the job finishes (:meth:`~RunPodStandIn.report_state`)."""
    added_worker: bool = False
    """The QUEUE_DELAY scaler added a worker for this job."""

    def report(self) -> dict[str, Any]:
        shown = self.reported_status if self.reported_status and self.status not in FINISHED else self.status
        body: dict[str, Any] = {"id": self.id, "status": shown}
        if self.started_at is not None:
            body["delayTime"] = round((self.started_at - self.submitted_at) * 1000)
            if self.finished_at is not None:
                body["executionTime"] = round((self.finished_at - self.started_at) * 1000)
        if self.output is not None:
            body["output"] = self.output
        if self.error is not None:
            body["error"] = self.error
        return body


@dataclass
class Worker:
    """One worker process. ``ready_at``: when the platform lets it take jobs; ``asked_at``: its first job-take."""

    id: str
    process: asyncio.subprocess.Process
    spawned_at: float
    ready_at: float
    asked_at: float | None = None
    last_active: float | None = None
    jobs: set[str] = field(default_factory=set)
    stop_signals: list[str] = field(default_factory=list)
    stopping: bool = False
    exit_code: int | None = None

    @property
    def cold_start_s(self) -> float | None:
        """Spawn to first job-take: the container start plus the handler's own start-up."""
        return None if self.asked_at is None else self.asked_at - self.spawned_at


@dataclass
class _Fault:
    status: int
    retry_after_s: float | None


class RunPodStandIn:
    """The stand-in endpoint. ``async with RunPodStandIn(config) as endpoint:``; ``base_url`` is the API base.

    ``jobs`` keeps every job ever submitted (forgotten ones too) and ``worker_history`` every worker ever started,
    for tests to count. Test hooks: :meth:`pause` / :meth:`resume` job hand-out, :meth:`kill_next_taker`,
    :meth:`time_out`, :meth:`forget`, :meth:`fail_next`, and :meth:`start_job` / :meth:`finish_job` to play the
    worker by hand (with ``max_workers=0``).
    """

    def __init__(self, config: EndpointConfig | None = None) -> None:
        self.config = config or EndpointConfig()
        self.jobs: dict[str, Job] = {}
        self.forgotten: set[str] = set()
        self.workers: dict[str, Worker] = {}
        self.worker_history: list[Worker] = []
        self.dropped_results = 0
        self.dispatching = True
        self._queue: deque[str] = deque()
        self._kill_on_take = 0
        self._faults: dict[Route, deque[_Fault]] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None

    # --- Lifecycle ---------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The hosted API base, as ``POPCON_RUNPOD_BASE_URL``."""
        return f"http://127.0.0.1:{self._port}/v2"

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=2 * RUN_PAYLOAD_LIMIT)
        prefix = f"/v2/{self.config.endpoint_id}"
        app.add_routes(
            [
                web.post(f"{prefix}/run", self._run),
                web.get(f"{prefix}/status/{{job}}", self._status),
                web.post(f"{prefix}/cancel/{{job}}", self._cancel),
                web.get(f"{prefix}/health", self._health),
                web.get(f"{prefix}/job-take/{{worker}}", self._job_take),
                web.get(f"{prefix}/job-take-batch/{{worker}}", self._job_take),
                web.post(f"{prefix}/job-done/{{worker}}/{{job}}", self._job_done),
                web.post(f"{prefix}/job-stream/{{worker}}/{{job}}", self._job_stream),
                web.get(f"{prefix}/job-stop/{{worker}}", self._job_stop),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._supervisor = asyncio.create_task(self._supervise())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for worker in list(self.workers.values()):
            self._stop_worker(worker)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    # --- Test hooks --------------------------------------------------------------------------------------------

    def pause(self) -> None:
        """Hand no jobs to workers: submitted jobs stay IN_QUEUE."""
        self.dispatching = False

    def resume(self) -> None:
        self.dispatching = True

    def kill_next_taker(self, count: int = 1) -> None:
        """SIGKILL the worker of each of the next ``count`` jobs handed out, as it takes the job (a lost worker)."""
        self._kill_on_take += count

    def time_out(self, job_id: str) -> None:
        """End a queued or running job as TIMED_OUT now, as if its execution timeout had passed."""
        job = self.jobs[job_id]
        if job.status not in FINISHED:
            self._end(job, TIMED_OUT)

    def forget(self, job_id: str) -> None:
        """Forget a job as RunPod does once its ttl or its result's retention has passed (a running one times out)."""
        self._forget(self.jobs[job_id])

    def fail_next(self, route: Route, status: int, count: int = 1, retry_after_s: float | None = None) -> None:
        """Answer the next ``count`` client requests to ``route`` with ``status`` (and a Retry-After header)."""
        self._faults.setdefault(route, deque()).extend(_Fault(status, retry_after_s) for _ in range(count))

    def report_state(self, job_id: str, state: str) -> None:
        """Report ``state`` for the job in ``/status`` until it finishes (a state RunPod has, unknown to clients)."""
        self.jobs[job_id].reported_status = state

    def start_job(self, job_id: str, worker_id: str = "by-hand") -> None:
        """Take a queued job as a worker would, without a worker process."""
        self._queue.remove(job_id)
        self._hand_out(self.jobs[job_id], worker_id, time.monotonic())

    def finish_job(self, job_id: str, *, output: Any = None, error: str | None = None) -> None:
        """Report a running job's result as its worker would: COMPLETED with ``output``, or FAILED with ``error``."""
        job = self.jobs[job_id]
        assert job.status == IN_PROGRESS, f"job {job_id} is {job.status}"
        job.output, job.error = output, error
        self._end(job, FAILED if error is not None else COMPLETED)

    def submitted(self, predicate: Callable[[Job], bool] = lambda job: True) -> list[Job]:
        """Every job ever submitted that matches ``predicate``, in submission order."""
        return [job for job in self.jobs.values() if predicate(job)]

    async def wait_until(self, condition: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait until ``condition()`` holds (checked every tick)."""
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(TICK_S)

    # --- Client routes -----------------------------------------------------------------------------------------

    def _refusal(self, request: web.Request, route: Route) -> web.Response | None:
        key = self.config.api_key
        given = request.headers.get("Authorization", "")
        quoted = f" (key {given.removeprefix('Bearer ')})" if self.config.echo_api_key else ""
        if given not in (f"Bearer {key}", key):
            return web.json_response({"error": f"Unauthorized{quoted}"}, status=401)
        faults = self._faults.get(route)
        if faults:
            fault = faults.popleft()
            headers = {} if fault.retry_after_s is None else {"Retry-After": str(fault.retry_after_s)}
            return web.json_response(
                {"error": f"injected {fault.status}{quoted}"}, status=fault.status, headers=headers
            )
        return None

    async def _run(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "run"):
            return refusal
        raw = await request.read()
        if len(raw) > RUN_PAYLOAD_LIMIT:
            return web.json_response({"error": "payload exceeds the 10 MB limit of /run"}, status=400)
        try:
            body = json.loads(raw)
            job_input = body["input"]
            policy = body.get("policy") or {}
            execution_timeout_ms = int(policy.get("executionTimeout", self.config.execution_timeout_ms))
            ttl_ms = int(policy.get("ttl", DEFAULT_TTL_MS))
        except (ValueError, KeyError, TypeError) as err:
            return web.json_response({"error": f"invalid request: {err!r}"}, status=400)
        if execution_timeout_ms < MIN_EXECUTION_TIMEOUT_MS or ttl_ms < MIN_TTL_MS:
            return web.json_response({"error": "executionTimeout must be >= 5000 ms, ttl >= 10000 ms"}, status=400)
        job = Job(
            id=f"{uuid.uuid4()}-u1",
            input=job_input,
            execution_timeout_s=execution_timeout_ms / 1000,
            ttl_s=ttl_ms / 1000,
            submitted_at=time.monotonic(),
        )
        self.jobs[job.id] = job
        self._queue.append(job.id)
        await self._notify()
        return web.json_response({"id": job.id, "status": job.status})

    def _known_job(self, request: web.Request) -> Job | None:
        job_id = request.match_info["job"]
        return None if job_id in self.forgotten else self.jobs.get(job_id)

    async def _status(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "status"):
            return refusal
        job = self._known_job(request)
        if job is None:
            return web.json_response({"error": "request does not exist"}, status=404)
        return web.json_response(job.report())

    async def _cancel(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "cancel"):
            return refusal
        job = self._known_job(request)
        if job is None:
            return web.json_response({"error": "request does not exist"}, status=404)
        if job.status not in FINISHED:
            self._end(job, CANCELLED)
            await self._notify()
        return web.json_response({"id": job.id, "status": job.status})

    async def _health(self, request: web.Request) -> web.Response:
        if refusal := self._refusal(request, "health"):
            return refusal
        live = [job for job in self.jobs.values() if job.id not in self.forgotten]
        workers = [worker for worker in self.workers.values() if not worker.stopping]
        return web.json_response(
            {
                "jobs": {
                    "completed": sum(job.status == COMPLETED for job in live),
                    "failed": sum(job.status == FAILED for job in live),
                    "inProgress": sum(job.status == IN_PROGRESS for job in live),
                    "inQueue": sum(job.status == IN_QUEUE for job in live),
                    "retried": 0,
                },
                "workers": {
                    "idle": sum(worker.asked_at is not None and not worker.jobs for worker in workers),
                    "running": sum(bool(worker.jobs) for worker in workers),
                    "initializing": sum(worker.asked_at is None for worker in workers),
                },
            }
        )

    # --- Worker routes -----------------------------------------------------------------------------------------

    async def _job_take(self, request: web.Request) -> web.Response:
        worker_id = request.match_info["worker"]
        count = int(request.query.get("batch_size", "1"))
        jobs = await self._take(worker_id, count)
        if not jobs:
            return web.Response(status=204)
        bodies = [{"id": job.id, "input": job.input} for job in jobs]
        return web.json_response(bodies if "batch_size" in request.query else bodies[0])

    async def _take(self, worker_id: str, count: int) -> list[Job]:
        deadline = time.monotonic() + self.config.long_poll_s
        async with self._changed:
            while True:
                now = time.monotonic()
                worker = self.workers.get(worker_id)
                if worker is None or worker.stopping:
                    return []
                if worker.asked_at is None:
                    worker.asked_at = worker.last_active = now
                if self.dispatching and self._queue and now >= worker.ready_at:
                    jobs = [self.jobs[self._queue.popleft()] for _ in range(min(count, len(self._queue)))]
                    for job in jobs:
                        self._hand_out(job, worker_id, now)
                    if self._kill_on_take:
                        self._kill_on_take -= 1
                        worker.process.kill()
                    return jobs
                if now >= deadline:
                    return []
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), deadline - now)

    def _hand_out(self, job: Job, worker_id: str, now: float) -> None:
        job.status, job.worker_id, job.started_at, job.takes = IN_PROGRESS, worker_id, now, job.takes + 1
        worker = self.workers.get(worker_id)
        if worker is not None:
            worker.jobs.add(job.id)
            worker.last_active = now

    async def _job_done(self, request: web.Request) -> web.Response:
        worker_id, job_id = request.match_info["worker"], request.match_info["job"]
        body = json.loads(await request.text())
        worker = self.workers.get(worker_id)
        if worker is not None:
            worker.jobs.discard(job_id)
            worker.last_active = time.monotonic()
        job = self.jobs.get(job_id)
        if job is None or job.id in self.forgotten or job.status != IN_PROGRESS or job.worker_id != worker_id:
            self.dropped_results += 1
        elif body.get("error") is not None:
            job.error = body["error"]
            self._end(job, FAILED)
        else:
            job.output = body.get("output")
            self._end(job, COMPLETED)
        await self._notify()
        return web.json_response({})

    async def _job_stream(self, request: web.Request) -> web.Response:
        job = self.jobs.get(request.match_info["job"])
        if job is not None and job.status == IN_PROGRESS:
            job.stream.append(json.loads(await request.text()).get("output"))
        return web.json_response({})

    async def _job_stop(self, request: web.Request) -> web.Response:
        deadline = time.monotonic() + self.config.long_poll_s
        async with self._changed:
            while True:
                worker = self.workers.get(request.match_info["worker"])
                if worker is None or worker.stopping:
                    return web.Response(status=204)
                if worker.stop_signals:
                    job_ids, worker.stop_signals = worker.stop_signals, []
                    return web.json_response({"jobsToStop": job_ids})
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return web.Response(status=204)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    # --- The platform: timeouts, scaling, lost workers -----------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _end(self, job: Job, status: str) -> None:
        """Finish a job; a worker still running it is told to stop."""
        if job.status == IN_QUEUE:
            self._queue.remove(job.id)
        job.status, job.finished_at = status, time.monotonic()
        worker = self.workers.get(job.worker_id or "")
        if worker is not None and job.id in worker.jobs:
            worker.jobs.discard(job.id)  # the worker loop frees the job's slot once told to stop it
            worker.stop_signals.append(job.id)

    async def _supervise(self) -> None:
        """The platform's clock: execution timeouts and ttl, scaling up and down; wakes every long poll each tick."""
        while True:
            now = time.monotonic()
            self._expire(now)
            await self._scale(now)
            await self._notify()
            await asyncio.sleep(TICK_S)

    def _expire(self, now: float) -> None:
        for job in self.jobs.values():
            if job.id in self.forgotten:
                continue
            running_s = now - job.started_at if job.status == IN_PROGRESS and job.started_at is not None else 0.0
            if running_s > job.execution_timeout_s:
                self._end(job, TIMED_OUT)
            if now - job.submitted_at > job.ttl_s:
                if job.status == IN_QUEUE:
                    self._end(job, TIMED_OUT)
                else:
                    self._forget(job)
            elif job.finished_at is not None and now - job.finished_at > RESULT_RETENTION_S:
                self._forget(job)

    def _forget(self, job: Job) -> None:
        if job.status not in FINISHED:
            self._end(job, TIMED_OUT)
        self.forgotten.add(job.id)

    async def _scale(self, now: float) -> None:
        config = self.config
        live = [worker for worker in self.workers.values() if not worker.stopping]
        wanted = min(config.max_workers, max(config.min_workers, self._scaled(live, now)))
        for _ in range(wanted - len(live)):
            await self._spawn(now)
        surplus = len(live) - config.min_workers
        for worker in live:
            if surplus <= 0:
                break
            if not worker.jobs and worker.last_active is not None and now - worker.last_active > config.idle_timeout_s:
                self._stop_worker(worker)
                surplus -= 1

    def _scaled(self, live: list[Worker], now: float) -> int:
        """The workers the endpoint's scaler asks for (before min and max workers)."""
        queued = [self.jobs[job_id] for job_id in self._queue]
        running = sum(len(worker.jobs) for worker in live)
        if self.config.scaler == "REQUEST_COUNT":
            return math.ceil((len(queued) + running) / self.config.scaler_value)
        if not live:
            return 1 if queued else 0  # the first request adds one worker
        waited = [job for job in queued if not job.added_worker and now - job.submitted_at >= self.config.scaler_value]
        for job in waited:
            job.added_worker = True
        return len(live) + len(waited)

    async def _spawn(self, now: float) -> None:
        config = self.config
        worker_id = f"worker-{len(self.worker_history) + 1}-{uuid.uuid4().hex[:6]}"
        root = f"http://127.0.0.1:{self._port}/v2/{config.endpoint_id}"
        env = {
            **os.environ,
            "RUNPOD_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",  # the worker log follows the job as it runs
            **config.worker_env,
            "RUNPOD_POD_ID": worker_id,
            "RUNPOD_WEBHOOK_GET_JOB": f"{root}/job-take/$ID?gpu=standin",
            "RUNPOD_WEBHOOK_POST_OUTPUT": f"{root}/job-done/$RUNPOD_POD_ID/$ID?gpu=standin",
            "RUNPOD_WEBHOOK_POST_STREAM": f"{root}/job-stream/$RUNPOD_POD_ID/$ID?gpu=standin",
            "RUNPOD_SKIP_GPU_CHECK": "true",
            "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
        }
        env.pop("RUNPOD_AI_API_KEY", None)  # no key: the worker sends no liveness pings (a process of their own)
        log_path = config.log_dir / f"{worker_id}.log" if config.log_dir else None
        with open(log_path or os.devnull, "ab") as log:
            process = await asyncio.create_subprocess_exec(
                *config.worker_command, cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        worker = Worker(worker_id, process, spawned_at=now, ready_at=now + config.cold_start_s)
        self.workers[worker_id] = worker
        self.worker_history.append(worker)
        self._track(self._watch(worker))

    def _stop_worker(self, worker: Worker) -> None:
        """Scale a worker down: it takes no more jobs and gets SIGTERM (SIGKILL if it lingers)."""
        if worker.stopping:
            return
        worker.stopping = True

        async def stop() -> None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(10):
                    await worker.process.wait()
            except TimeoutError:
                worker.process.kill()

        self._track(stop())

    async def _watch(self, worker: Worker) -> None:
        """When a worker process ends, forget it. A job it was running stays IN_PROGRESS until its execution timeout."""
        worker.exit_code = await worker.process.wait()
        self.workers.pop(worker.id, None)
        worker.jobs.clear()
        await self._notify()

    def _track(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
