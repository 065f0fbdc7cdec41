"""GPU-queue dispatch benchmark: how close parallel matting gets to the ideal makespan.

One one-action set of 12 frame slots, each with 5 candidates (one take, 2 neighbours either side of each chosen
frame: 60 candidates in 12 ``matte_slot`` activities), runs on the real dev server and real workers, reviewed
automatically; the GPU engine is a stand-in that sleeps a fixed latency L per candidate, on a GPU worker of capacity C
running in its own process, as it does on a GPU box. A slot takes one GPU turn and runs its candidates one after
another in it (the stand-in does not batch), so a slot holds its GPU slot 5 L. For each C, side by side: the GPU
worker as configured by default (prefetch C: slots taken ahead while the GPU is full, see
gpu_activity_worker/slots.py) and without prefetch; with ``--floor`` also a ``matte_slot`` activity that only sleeps
5 L (no image work, no threads: what the SDK and the server alone cost).

Each row is the median of ``--repeat`` sets (this machine is shared and noisy; the range is printed too) of the
matting makespan (first matting activity scheduled -> last one completed, from the server's own event times), with
the ideal ``ceil(12 / C) * 5 * L`` (one slot per GPU turn, C turns at once), the serial time ``60 * L``, the speed-up
over serial and the efficiency ``ideal / makespan``; "peak in flight" counts the slots the worker held at once (on
the GPU or taken ahead). All figures come from one run.

    python -m benchmarks.dispatch [--latency 0.5] [--capacity 1 3 6 12] [--repeat 5] [--floor]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker

from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from benchmarks.arguments import at_least
from benchmarks.sleep_engine import sleep_steps
from core.artifacts import FileArtifactStore, open_store
from core.connection import connect
from core.observability import configure_logging
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, TemporalSettings
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from testkit.servers import start_throwaway_server
from testkit.stack import standin_paid_queue
from workflows.contract import (
    GPU_TASK_QUEUE,
    ActivityName,
    EmojiSetInput,
    ExportTarget,
    MatteCandidateResult,
    MatteFrameOutput,
    MatteSlotInput,
    MatteSlotOutput,
    ReviewPolicy,
    TemporalMode,
)

SLOTS, NEIGHBOURS = 12, 2
"""Frame slots of the set (its one action's frames) and clip frames kept either side of each chosen one."""
CANDIDATES = 2 * NEIGHBOURS + 1
"""Candidates per slot (one take): the chosen frame and its neighbours."""


@dataclass(frozen=True)
class WorkerConfig:
    """The GPU worker of one row: its capacity C, its prefetch, or the sleep-only floor."""

    capacity: int
    prefetch: int
    floor: bool = False

    @property
    def label(self) -> str:
        return "sleep-only" if self.floor else f"prefetch {self.prefetch}"


@dataclass(frozen=True)
class SetTimes:
    makespan_s: float
    set_s: float
    """Workflow start to the last matting activity done: generation, checks and matting."""
    peak_in_flight: int


@dataclass(frozen=True)
class Row:
    config: WorkerConfig
    sets: list[SetTimes]

    @property
    def makespan_s(self) -> float:
        return statistics.median(times.makespan_s for times in self.sets)


def _matting_spans(history: WorkflowHistory) -> list[tuple[datetime, datetime, datetime]]:
    """(scheduled, started, completed) server times of every matting activity in a history."""
    scheduled: dict[int, datetime] = {}
    started: dict[int, datetime] = {}
    spans = []
    for event in history.events:
        when = event.event_time.ToDatetime()
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == ActivityName.MATTE_SLOT:
                scheduled[event.event_id] = when
        elif event.HasField("activity_task_started_event_attributes"):
            started[event.activity_task_started_event_attributes.scheduled_event_id] = when
        elif event.HasField("activity_task_completed_event_attributes"):
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled_id in scheduled:
                spans.append((scheduled[scheduled_id], started[scheduled_id], when))
    return spans


def _peak_in_flight(spans: list[tuple[datetime, datetime, datetime]]) -> int:
    """Most matting activities (slots) running (started, not completed) at once."""
    edges = sorted([(start, 1) for _, start, _ in spans] + [(end, -1) for _, _, end in spans])
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


@activity.defn(name=ActivityName.MATTE_SLOT)
async def _sleep_only_matte(request: MatteSlotInput) -> MatteSlotOutput:
    """The floor: a matting activity that only sleeps L per candidate (no store, no image work); what the SDK and
    server cost."""
    latency_s = int(request.pipeline.removeprefix("sleep:")) / 1000
    await asyncio.sleep(latency_s * len(request.candidates))
    return MatteSlotOutput(
        results=[
            MatteCandidateResult(
                output=MatteFrameOutput(
                    matte=source, score=0.5, pipeline=request.pipeline, device="cpu", precision="fp32", elapsed_ms=0
                )
            )
            for source in request.candidates
        ]
    )


async def _serve_gpu(address: str, artifact_root: str, config: WorkerConfig) -> None:
    """The GPU worker process: the real GPU worker serving the stand-in engine, or the sleep-only floor."""
    configure_logging("INFO")
    settings = GpuWorkerSettings(_env_file=None, gpu_concurrency=config.capacity, gpu_prefetch=config.prefetch)
    client = await connect(TemporalSettings(_env_file=None, temporal_address=address))
    store = open_store(ArtifactSettings(_env_file=None, artifact_root=artifact_root))
    if config.floor:
        matting = MattingActivities(store, Pipelines(sleep_steps()), capacity=config.capacity, prefetch=0)
        worker = Worker(
            client,
            task_queue=GPU_TASK_QUEUE,
            activities=[matting.describe_pipeline, _sleep_only_matte],
            max_concurrent_activities=config.capacity,
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=config.capacity),
        )
    else:
        worker, matting = build_gpu_worker(client, settings, store, steps=sleep_steps())
    try:
        await serve_until_signalled(worker)
    finally:
        matting.close()


@contextlib.asynccontextmanager
async def _gpu_worker_process(
    client: Client, config: WorkerConfig, artifact_root: str, log_path: Path
) -> AsyncIterator[None]:
    """A GPU worker in its own process, as on a GPU box: started, serving, then stopped with SIGTERM.

    Its log goes to a file, as a container's would: a pipe read by this process would wake it for every line.
    """
    address = client.service_client.config.target_host
    log_path.touch()
    log_start = log_path.stat().st_size
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.dispatch",
            "--serve-gpu",
            address,
            artifact_root,
            "--capacity",
            str(config.capacity),
            "--prefetch",
            str(config.prefetch),
            *(["--floor"] if config.floor else []),
            stderr=log,
        )
    try:
        async with asyncio.timeout(60):
            while b"worker started" not in log_path.read_bytes()[log_start:]:
                if process.returncode is not None:
                    raise RuntimeError(f"the GPU worker exited with {process.returncode}; see {log_path}")
                await asyncio.sleep(0.1)
        yield
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


def bench_set(latency_ms: int) -> EmojiSetInput:
    """The benchmark's set: one action of ``SLOTS`` slots x ``CANDIDATES`` candidates, matted with the ``sleep``
    stand-in at ``latency_ms`` per candidate, with no stage waiting for a person."""
    return EmojiSetInput(
        character_prompt="a round orange cat",
        actions=["wave"],
        temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
        frames_per_emoji=SLOTS,
        takes_per_action=1,
        neighbours=NEIGHBOURS,
        review=ReviewPolicy.automatic(),
        image_size=64,
        matting_pipeline=f"sleep:{latency_ms}",
        max_parallel_matting=64,
        export_targets=[ExportTarget.GENERIC],  # the set's end after matting kept short
    )


def ideal_makespan_s(slots: int, candidates: int, latency_s: float, capacity: int) -> float:
    """The shortest matting makespan: ``capacity`` slots on the GPU at once, each slot one turn of ``candidates * L``
    (its candidates one after another)."""
    return math.ceil(slots / capacity) * candidates * latency_s


async def run_set(client: Client, latency_ms: int) -> tuple[float, float, int]:
    """One set, to its end; returns (matting makespan, set time to the last matting done, peak slots in flight)."""
    sets = EmojiSetClient(client)
    set_id = f"bench-{uuid.uuid4().hex[:8]}"
    await sets.start(bench_set(latency_ms), set_id=set_id)
    # The set is reviewed automatically: it is assembled and completes on its own.
    await sets.result(set_id)
    history = await client.get_workflow_handle(set_id).fetch_history()
    spans = _matting_spans(history)
    last_done = max(end for *_, end in spans)
    makespan = (last_done - min(scheduled for scheduled, *_ in spans)).total_seconds()
    set_s = (last_done - history.events[0].event_time.ToDatetime()).total_seconds()
    return makespan, set_s, _peak_in_flight(spans)


async def _measure(
    client: Client, artifact_root: str, config: WorkerConfig, latency_ms: int, repeat: int, log_path: Path
) -> Row:
    """One GPU worker process: a short warm-up set (threads, first calls), then ``repeat`` measured sets."""
    async with _gpu_worker_process(client, config, artifact_root, log_path):
        await run_set(client, 10)
        return Row(config, [SetTimes(*await run_set(client, latency_ms)) for _ in range(repeat)])


async def main(latency_s: float, capacities: list[int], repeat: int, floor: bool) -> None:
    latency_ms = round(latency_s * 1000)
    configs = [
        config
        for capacity in capacities
        for config in (
            WorkerConfig(capacity, prefetch=capacity),
            WorkerConfig(capacity, prefetch=0),
            *([WorkerConfig(capacity, prefetch=0, floor=True)] if floor else []),
        )
    ]
    with tempfile.TemporaryDirectory() as tmp:
        artifact_root = Path(tmp).as_uri()
        settings = OrchestrationSettings(_env_file=None, orchestration_activity_concurrency=8)
        env = await start_throwaway_server()
        orchestration, generation = build_worker(
            env.client, settings, FileArtifactStore(Path(tmp)), paid=standin_paid_queue()
        )
        async with orchestration:
            rows = [
                await _measure(env.client, artifact_root, config, latency_ms, repeat, Path(tmp) / "gpu-worker.log")
                for config in configs
            ]
        await generation.aclose()
        await env.shutdown()

    serial = SLOTS * CANDIDATES * latency_s
    print(
        f"{SLOTS} frame slots x {CANDIDATES} candidates = {SLOTS} matte_slot activities, {SLOTS * CANDIDATES}"
        f" candidates, L = {latency_s:.2f} s per candidate (a slot's turn {CANDIDATES} L); median of {repeat} sets"
        " per row"
    )
    print(
        f"{'C':>3} {'GPU worker':>11} {'makespan s':>11} {'(range)':>13} {'ideal s':>8} {'serial s':>9}"
        f" {'speed-up':>9} {'efficiency':>11} {'peak in flight':>15} {'whole set s':>12}"
    )
    for row in rows:
        ideal = ideal_makespan_s(SLOTS, CANDIDATES, latency_s, row.config.capacity)
        spans = [times.makespan_s for times in row.sets]
        print(
            f"{row.config.capacity:>3} {row.config.label:>11} {row.makespan_s:>11.3f}"
            f" {f'{min(spans):.3f}-{max(spans):.3f}':>13} {ideal:>8.2f} {serial:>9.2f}"
            f" {serial / row.makespan_s:>8.2f}x {ideal / row.makespan_s:>11.3f}"
            f" {max(times.peak_in_flight for times in row.sets):>15}"
            f" {statistics.median(times.set_s for times in row.sets):>12.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.5, help="GPU latency per candidate, seconds")
    parser.add_argument("--capacity", type=at_least(1), nargs="+", default=[1, 3, 6, 12], help="GPU worker capacities")
    parser.add_argument("--repeat", type=at_least(1), default=5, help="measured sets per row (the median is printed)")
    parser.add_argument(
        "--floor", action="store_true", help="also measure a sleep-only activity: what the SDK and server alone cost"
    )
    parser.add_argument("--serve-gpu", nargs=2, metavar=("ADDRESS", "ARTIFACT_ROOT"), help=argparse.SUPPRESS)
    parser.add_argument("--prefetch", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gpu:
        address, artifact_root = args.serve_gpu
        config = WorkerConfig(args.capacity[0], args.prefetch, args.floor)
        asyncio.run(_serve_gpu(address, artifact_root, config))
    else:
        asyncio.run(main(args.latency, args.capacity, args.repeat, args.floor))
