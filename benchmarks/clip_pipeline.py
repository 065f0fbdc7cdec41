"""Clip pipeline benchmark: matting pipelined per action against the barrier design, and the lower bound.

A 4-action set runs on the real dev server with both real workers in this process. Generation has stand-in
latencies: each start frame takes S seconds, each clip V seconds (a different V per action, as real clips vary), and
the provider runs at most ``--provider-slots`` clips at once, as a real account does. The GPU engine is the dispatch
benchmark's stand-in: L seconds per candidate on a GPU worker of capacity C. Each action's clip gives 12 frame slots
of 5 candidates (the chosen clip frame and 2 neighbours either side), matted one activity per slot.

From the server's own event times, side by side in one run:

- **pipelined**: the set's makespan (start -> the last matting activity done), as the workflow schedules it: an
  action's slots are matted as soon as its clip is extracted, while later clips still animate;
- **barrier**: what the design that mattes only once every clip is in would take: the same run's generation
  critical path (start -> the last extraction done) plus the makespan of matting all four actions at once, measured
  on a second set whose clips are instant (so all its slots queue together);
- **lower bound**: the generation critical path plus the last action's matting at the ideal
  ``ceil(12 / C) * 5 * L``;
- **GPU busy**: the matting activities' time on the worker (started -> completed) over ``C x makespan``.

    python -m benchmarks.clip_pipeline [--start-frame 1] [--clips 6 9 12 15] [--provider-slots 2] [--latency 0.1]
        [--capacity 3]
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

from temporalio.client import WorkflowHistory

from activities.generation import builtin_generators
from activities.generation.base import GeneratedClip, GeneratedImage
from activities.generation.procedural import ProceduralGenerator
from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from benchmarks.sleep_engine import sleep_steps
from core.artifacts import FileArtifactStore
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from testkit.servers import start_throwaway_server
from workflows.contract import ActivityName, EmojiSetInput, GenerateClipInput, GenerateStartFrameInput, ReviewPolicy

ACTIONS = ["wave", "laugh", "heart", "cry"]
FRAMES, NEIGHBOURS = 12, 2
CANDIDATES = 2 * NEIGHBOURS + 1


class TimedGenerator(ProceduralGenerator):
    """The procedural generator at a hosted provider's pace: S per start frame, V per clip, few clips at once."""

    name = "timed"

    def __init__(self, start_frame_s: float, clip_s: dict[str, float], provider_slots: int) -> None:
        self._start_frame_s = start_frame_s
        self._clip_s = clip_s
        self._provider = asyncio.Semaphore(provider_slots)

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        began = time.perf_counter()
        images = await super().start_frame(request, character)
        await asyncio.sleep(max(0.0, self._start_frame_s - (time.perf_counter() - began)))
        return images

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        async with self._provider:
            began = time.perf_counter()
            clip = await super().clip(request, start_frame)
            await asyncio.sleep(max(0.0, self._clip_s.get(request.action.name, 0.0) - (time.perf_counter() - began)))
        return clip


@dataclass(frozen=True)
class SetTimes:
    makespan_s: float
    """Start -> the last matting activity done."""
    generation_s: float
    """Start -> the last frame extraction done: the generation critical path."""
    matting_s: float
    """The first matting activity scheduled -> the last done."""
    gpu_s: float
    """Sum of the matting activities' started -> completed."""


def _times(history: WorkflowHistory) -> SetTimes:
    names: dict[int, str] = {}
    started: dict[int, datetime] = {}
    scheduled: dict[int, datetime] = {}
    begin = history.events[0].event_time.ToDatetime()
    last_extract = last_matte = begin
    first_matte: datetime | None = None
    gpu_s = 0.0
    for event in history.events:
        when = event.event_time.ToDatetime()
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = when
            if names[event.event_id] == ActivityName.MATTE_SLOT and first_matte is None:
                first_matte = when
        elif event.HasField("activity_task_started_event_attributes"):
            started[event.activity_task_started_event_attributes.scheduled_event_id] = when
        elif event.HasField("activity_task_completed_event_attributes"):
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            if names[scheduled_id] == ActivityName.EXTRACT_FRAMES:
                last_extract = max(last_extract, when)
            elif names[scheduled_id] == ActivityName.MATTE_SLOT:
                last_matte = max(last_matte, when)
                gpu_s += (when - started[scheduled_id]).total_seconds()
    assert first_matte is not None
    return SetTimes(
        makespan_s=(last_matte - begin).total_seconds(),
        generation_s=(last_extract - begin).total_seconds(),
        matting_s=(last_matte - first_matte).total_seconds(),
        gpu_s=gpu_s,
    )


async def run_set(sets: EmojiSetClient, generator: str, latency_ms: int) -> SetTimes:
    set_id = f"bench-clips-{uuid.uuid4().hex[:8]}"
    request = EmojiSetInput(
        character_prompt="a round orange cat",
        actions=ACTIONS,
        frames_per_emoji=FRAMES,
        neighbours=NEIGHBOURS,
        clip_seconds=1.0,
        clip_fps=24,
        image_size=96,
        generator=generator,
        matting_pipeline=f"sleep:{latency_ms}",
        review=ReviewPolicy.automatic(),
        export_targets=["generic"],
    )
    await sets.start(request, set_id=set_id)
    await sets.result(set_id)
    return _times(await sets.temporal.get_workflow_handle(set_id).fetch_history())


async def main(start_frame_s: float, clip_s: list[float], provider_slots: int, latency_s: float, capacity: int) -> None:
    env = await start_throwaway_server()
    generators = builtin_generators()
    clips = dict(zip(ACTIONS, clip_s, strict=True))
    generators.register("timed", lambda: TimedGenerator(start_frame_s, clips, provider_slots))
    generators.register("instant", lambda: TimedGenerator(0.0, {}, len(ACTIONS)))
    with tempfile.TemporaryDirectory() as root:
        store = FileArtifactStore(Path(root))
        orchestration, production = build_worker(
            env.client, OrchestrationSettings(_env_file=None), store, generators=generators
        )
        gpu_settings = GpuWorkerSettings(_env_file=None, gpu_concurrency=capacity, gpu_prefetch=capacity)
        gpu, matting = build_gpu_worker(env.client, gpu_settings, store, steps=sleep_steps())
        try:
            async with orchestration, gpu:
                sets = EmojiSetClient(env.client, store=store)
                latency_ms = round(latency_s * 1000)
                pipelined = await run_set(sets, "timed", latency_ms)
                all_at_once = await run_set(sets, "instant", latency_ms)
        finally:
            await production.aclose()
            matting.close()
            await env.shutdown()
    slot_s = CANDIDATES * latency_s
    bound = pipelined.generation_s + math.ceil(FRAMES / capacity) * slot_s
    barrier = pipelined.generation_s + all_at_once.matting_s
    print(
        f"4 actions x {FRAMES} slots x {CANDIDATES} candidates; start frame S = {start_frame_s:g} s, clips V = "
        f"{', '.join(f'{v:g}' for v in clip_s)} s ({provider_slots} at once), matting L = {latency_s:g} s per "
        f"candidate, C = {capacity}"
    )
    print(f"generation critical path (start -> last clip extracted): {pipelined.generation_s:6.1f} s")
    print(
        f"all 48 slots matted at once (instant clips): {all_at_once.matting_s:6.1f} s "
        f"(ideal {math.ceil(len(ACTIONS) * FRAMES / capacity) * slot_s:.1f} s)"
    )
    print()
    print("| design | makespan (s) | vs lower bound | GPU busy |")
    print("|---|---|---|---|")
    print(f"| lower bound | {bound:.1f} | 1.00 | - |")
    print(
        f"| pipelined (this workflow) | {pipelined.makespan_s:.1f} | {pipelined.makespan_s / bound:.2f} | "
        f"{pipelined.gpu_s / (capacity * pipelined.makespan_s):.0%} |"
    )
    print(
        f"| barrier (matte after all clips) | {barrier:.1f} | {barrier / bound:.2f} | "
        f"{pipelined.gpu_s / (capacity * barrier):.0%} |"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start-frame", type=float, default=1.0, help="S: seconds per start frame")
    parser.add_argument("--clips", type=float, nargs=4, default=[6.0, 9.0, 12.0, 15.0], help="V per action (s)")
    parser.add_argument("--provider-slots", type=int, default=2, help="clips the provider runs at once")
    parser.add_argument("--latency", type=float, default=0.1, help="L: matting seconds per candidate")
    parser.add_argument("--capacity", type=int, default=3, help="C: GPU slots")
    args = parser.parse_args()
    asyncio.run(main(args.start_frame, args.clips, args.provider_slots, args.latency, args.capacity))
