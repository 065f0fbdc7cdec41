"""GPU-queue dispatch benchmark: how close parallel matting gets to the ideal makespan.

One 12-frame set with 2 candidates per frame (24 matting activities) runs on the real dev server and real workers; the
GPU engine is a stand-in that sleeps a fixed latency L per frame, on a GPU worker of capacity C. For each C the
benchmark prints the matting makespan (first matting activity scheduled -> last one completed, from the server's
own event times), the ideal ``ceil(24 / C) * L``, the serial time ``24 * L``, the speed-up over serial and the
efficiency ``ideal / makespan``. All figures come from one run.

    python -m benchmarks.dispatch [--latency 0.5] [--capacity 1 3 6 12]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.artifacts import FileArtifactStore
from activities.settings import Settings
from activities.worker import build_worker
from gpu_activity_worker.engines import StepSpec, register_step
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from starter.devstack import temporal_cli
from workflows import search_attributes as sa
from workflows.contract import EmojiSetInput, Phase

FRAMES, CANDIDATES = 12, 2


class SleepStep:
    """A stand-in GPU engine: sleeps ``latency`` seconds per frame, then returns a plain threshold alpha."""

    device, precision = "cpu", "fp32"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def apply(self, state: MatteState) -> MatteState:
        time.sleep(self.latency_s)
        border = np.concatenate([state.image[0], state.image[-1], state.image[:, 0], state.image[:, -1]])
        distance = np.linalg.norm(state.image - np.median(border, axis=0), axis=-1)
        return MatteState(image=state.image, alpha=(distance > 0.1).astype(np.float32))


def _create_sleep_step(variant: str | None, context: StepContext) -> SleepStep:
    return SleepStep(int(variant or "500") / 1000)


register_step(StepSpec("sleep", StepRole.COARSE, _create_sleep_step, variants=None, summary="benchmark stand-in"))


@dataclass(frozen=True)
class Run:
    capacity: int
    makespan_s: float
    set_s: float
    peak_in_flight: int


def _matting_spans(history: WorkflowHistory) -> list[tuple[datetime, datetime]]:
    """(scheduled, completed) server times of every matting activity in a history."""
    scheduled: dict[int, datetime] = {}
    started: dict[int, int] = {}
    spans = []
    for event in history.events:
        when = event.event_time.ToDatetime()
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == "matte_frame":
                scheduled[event.event_id] = when
        elif event.HasField("activity_task_started_event_attributes"):
            started[event.event_id] = event.activity_task_started_event_attributes.scheduled_event_id
        elif event.HasField("activity_task_completed_event_attributes"):
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled_id in scheduled:
                spans.append((scheduled[scheduled_id], when))
    return spans


def _peak_in_flight(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


async def _run_one(client: Client, settings: Settings, store: FileArtifactStore, capacity: int, latency_ms: int) -> Run:
    gpu, matting = build_gpu_worker(client, settings.model_copy(update={"gpu_concurrency": capacity}), store)
    sets = EmojiSetClient(client)
    async with gpu:
        set_id = f"bench-c{capacity}-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        await sets.start(
            EmojiSetInput(
                character_prompt="a round orange cat",
                poses=["wave"],
                frames_per_emoji=FRAMES,
                candidates_per_frame=CANDIDATES,
                image_size=64,
                matting_pipeline=f"sleep:{latency_ms}",
                max_parallel_matting=64,
            ),
            set_id=set_id,
        )
        while (await sets.state(set_id)).phase is not Phase.AWAITING_REVIEW:
            await asyncio.sleep(0.05)
        set_s = time.perf_counter() - started
        await sets.cancel(set_id)
        history = await client.get_workflow_handle(set_id).fetch_history()
    matting.close()
    spans = _matting_spans(history)
    makespan = (max(end for _, end in spans) - min(start for start, _ in spans)).total_seconds()
    return Run(capacity, makespan, set_s, _peak_in_flight(spans))


async def main(latency_s: float, capacities: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, artifact_root=Path(tmp).as_uri(), orchestration_activity_concurrency=8)  # type: ignore[call-arg]
        store = FileArtifactStore(Path(tmp))
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(temporal_cli()),
            search_attributes=list(sa.ALL),
            data_converter=pydantic_data_converter,
            ui=False,
            dev_server_log_level="error",
        )
        orchestration, generation = build_worker(env.client, settings, store)
        async with orchestration:
            await _run_one(env.client, settings, store, 12, 10)  # warm-up: imports, first workflow task
            runs = [await _run_one(env.client, settings, store, c, round(latency_s * 1000)) for c in capacities]
        await generation.aclose()
        await env.shutdown()

    tasks = FRAMES * CANDIDATES
    serial = tasks * latency_s
    print(f"{FRAMES}-frame set x {CANDIDATES} candidates = {tasks} matting activities, L = {latency_s:.2f} s per frame")
    print(f"{'C':>3} {'makespan s':>11} {'ideal s':>8} {'serial s':>9} {'speed-up':>9} {'efficiency':>11}"
          f" {'peak in flight':>15} {'whole set s':>12}")
    for run in runs:
        ideal = math.ceil(tasks / run.capacity) * latency_s
        print(
            f"{run.capacity:>3} {run.makespan_s:>11.3f} {ideal:>8.2f} {serial:>9.2f} {serial / run.makespan_s:>8.2f}x"
            f" {ideal / run.makespan_s:>11.3f} {run.peak_in_flight:>15} {run.set_s:>12.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.5, help="GPU latency per frame, seconds")
    parser.add_argument("--capacity", type=int, nargs="+", default=[1, 3, 6, 12], help="GPU worker capacities")
    args = parser.parse_args()
    asyncio.run(main(args.latency, args.capacity))
