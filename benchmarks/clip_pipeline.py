"""Clip pipeline benchmark: matting pipelined per action against the barrier design, both run, and a lower bound.

A set of up to 4 actions runs on a throwaway dev server with both real workers in this process. Generation has
stand-in latencies: each start frame takes S seconds, each clip V seconds (a different V per action, as real clips
vary), and the provider runs at most P clips at once (``--provider-slots``), as a real account does, starting a
set's clips in the order of its actions (so the generation schedule is an input, the same in both runs). The GPU
engine is the dispatch benchmark's stand-in (:mod:`benchmarks.sleep_engine`): L seconds per candidate on a GPU worker of
capacity C. Each action's clip gives F frame slots of up to 5 candidates (the chosen clip frame and 2 neighbours
either side; fewer near the clip's ends), matted one activity per slot: a slot of m candidates holds a GPU slot for
m x L (one after another).

Side by side in one run, on the same server, workers and stand-ins, one set after the other:

- **pipelined**: the workflow as it is: an action's slots are matted as soon as its clip is extracted, while later
  clips still animate;
- **barrier**: the design that generates everything, then mattes everything: the same workflow, activities and
  stand-ins, with each frame extraction held (by an activity interceptor on the orchestration worker) until every
  action's frames are extracted, so no slot is matted before every clip is in and extracted.

Their makespans (start -> the last matting activity done) come from the server's own event times; **GPU busy** is
the GPU slot-time the frames held (:meth:`~gpu_activity_worker.slots.GpuGate.held_seconds`: the engine's runs only,
not frames waiting in prefetch, reading or storing) over ``C x makespan``.

**Lower bound**, from the inputs alone: S, V, P, L, C and the set's workload (the candidates of each slot, which
the extraction decides from the clip; read from the set, and the same in both runs). No Temporal round trip,
extraction, store I/O or character is counted, so the gap to it is what a design and the platform add.

- Generation: clips start no earlier than S, in the actions' order, and take V each on P provider slots; each
  started on the first provider slot free gives the earliest finish ``c_a`` each clip can have.
- Matting: an action's slots cannot start before ``c_a``, so the slots ``J(r)`` of the actions with ``c_a >= r``
  all run after ``r``, each on one GPU slot throughout: at least ``T(J(r))``, the larger of their total time over C
  and, for every ``k``, the ``k + 1`` shortest of their ``k C + 1`` longest slots (one GPU slot runs ``k + 1`` of
  those, by pigeonhole; for slots all of time p, ``ceil(|J| / C) x p``).

So::

    bound = max over r in {c_a} of (r + T(J(r)))

The last clip's term is the generation critical path plus that action's matting, which cannot overlap it; the first
clip's is all matting on C slots after the earliest clip. Any design, pipelined or barrier, takes at least this.

    python -m benchmarks.clip_pipeline [--start-frame 1] [--clips 6 9 12 15] [--provider-slots 2] [--latency 0.1]
        [--capacity 3] [--frames 12]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import heapq
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import temporalio.client
from temporalio import activity
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from activities.generation import builtin_generators
from activities.generation.base import GeneratedClip, GeneratedImage
from activities.generation.procedural import ProceduralGenerator
from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from benchmarks.sleep_engine import sleep_steps
from core.artifacts import FileArtifactStore
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.slots import GpuGate
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from testkit.servers import start_throwaway_server
from testkit.stack import standin_paid_queue
from workflows.contract import (
    ActivityName,
    EmojiSetInput,
    GenerateClipInput,
    GenerateStartFrameInput,
    ReviewPolicy,
    TemporalMode,
)

ACTIONS = ("wave", "laugh", "heart", "cry")
NEIGHBOURS = 2
CANDIDATES = 2 * NEIGHBOURS + 1

Workload = tuple[tuple[int, ...], ...]
"""Per action, per frame slot: how many candidates it has."""


@dataclass(frozen=True)
class Config:
    """The inputs of a run: generation latencies, the provider's and the GPU's capacity, the set's size."""

    start_frame_s: float = 1.0
    """S: seconds per start frame."""
    clip_s: tuple[float, ...] = (6.0, 9.0, 12.0, 15.0)
    """V per action, one for each of the first ``len(clip_s)`` of :data:`ACTIONS`."""
    provider_slots: int = 2
    """P: clips the provider runs at once."""
    latency_s: float = 0.1
    """L: matting seconds per candidate."""
    capacity: int = 3
    """C: frame slots on the GPU at once."""
    frames: int = 12
    """F: frame slots per action."""

    def __post_init__(self) -> None:
        if not 1 <= len(self.clip_s) <= len(ACTIONS):
            raise ValueError(f"1 to {len(ACTIONS)} clip latencies, one per action, not {len(self.clip_s)}")

    @property
    def actions(self) -> list[str]:
        """The set's actions, one per clip latency."""
        return list(ACTIONS[: len(self.clip_s)])

    def full_slots(self) -> Workload:
        """The workload of a set whose slots all have their 5 candidates."""
        return tuple((CANDIDATES,) * self.frames for _ in self.clip_s)


def clips_done(config: Config) -> list[float]:
    """The earliest each action's clip can be done: started in the actions' order on the first provider slot free."""
    free = [config.start_frame_s] * config.provider_slots
    done = []
    for clip_s in config.clip_s:
        done.append(heapq.heappop(free) + clip_s)
        heapq.heappush(free, done[-1])
    return done


def turns_bound(slots_s: list[float], capacity: int) -> float:
    """The least time ``capacity`` GPU slots take for frame slots of these times, each on one GPU slot throughout.

    The larger of their total over ``capacity`` and, for every ``k``, the ``k + 1`` shortest of the ``k x capacity +
    1`` longest (one GPU slot runs ``k + 1`` of those, by pigeonhole).
    """
    longest = sorted(slots_s, reverse=True)
    rounds = range((len(longest) - 1) // capacity + 1)
    shared = max(sum(longest[k * (capacity - 1) : k * capacity + 1]) for k in rounds)
    return max(shared, sum(longest) / capacity)


def lower_bound(config: Config, workload: Workload) -> float:
    """The set's makespan no design can beat, from the inputs alone (the module's docstring derives it)."""
    done = clips_done(config)
    latest = []
    for r in done:
        after = [m * config.latency_s for c, slots in zip(done, workload, strict=True) if c >= r for m in slots]
        latest.append(r + turns_bound(after, config.capacity))
    return max(latest)


def matting_work_s(config: Config, workload: Workload) -> float:
    """The GPU slot-time every slot of the set needs."""
    return sum(map(sum, workload)) * config.latency_s


class TimedGenerator(ProceduralGenerator):
    """The procedural generator at a hosted provider's pace: S per start frame, V per clip, P clips at once, a set's
    clips started in the order of its actions."""

    name = "timed"

    def __init__(self, config: Config) -> None:
        self._start_frame_s = config.start_frame_s
        self._clip_s = dict(zip(config.actions, config.clip_s, strict=True))
        self._turn = {action: turn for turn, action in enumerate(config.actions)}
        self._provider = asyncio.Semaphore(config.provider_slots)
        self._started: Counter[str] = Counter()
        """Clips started per set."""
        self._turns = asyncio.Condition()

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        began = time.perf_counter()
        images = await super().start_frame(request, character)
        await asyncio.sleep(max(0.0, self._start_frame_s - (time.perf_counter() - began)))
        return images

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        async with self._turns:
            await self._turns.wait_for(lambda: self._started[request.set_id] == self._turn[request.action.name])
            await self._provider.acquire()
            self._started[request.set_id] += 1
            self._turns.notify_all()
        try:
            began = time.perf_counter()
            clip = await super().clip(request, start_frame)
            await asyncio.sleep(max(0.0, self._clip_s[request.action.name] - (time.perf_counter() - began)))
        finally:
            self._provider.release()
        return clip


class MatteOnceAllExtracted(temporalio.client.Interceptor, Interceptor):
    """The barrier design on the workflow as it is: a held set's frame extractions return only once all its actions'
    frames are extracted, so none of its slots is matted before then. Other activities and sets pass through.

    Given to a client, it intercepts the activities of the workers built on that client.
    """

    def __init__(self) -> None:
        self._barriers: dict[str, asyncio.Barrier] = {}

    def hold(self, set_id: str, actions: int) -> None:
        """Hold the extractions of set ``set_id`` until its ``actions`` actions' frames are all extracted."""
        self._barriers[set_id] = asyncio.Barrier(actions)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _HeldExtraction(next, self._barriers)


class _HeldExtraction(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, barriers: dict[str, asyncio.Barrier]) -> None:
        super().__init__(next)
        self._barriers = barriers

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        barrier = self._barriers.get(info.workflow_id or "")
        if info.activity_type != ActivityName.EXTRACT_FRAMES or barrier is None:
            return await super().execute_activity(input)
        extract = input.fn

        async def held(*args: Any) -> Any:
            # Inside the activity, so the worker's interceptors keep it heartbeating while it waits.
            output = await extract(*args)
            await barrier.wait()
            return output

        return await super().execute_activity(dataclasses.replace(input, fn=held))


@dataclass(frozen=True)
class Run:
    """One set's measured times, and its workload."""

    makespan_s: float
    """Start -> the last matting activity done (server event times)."""
    clips_in_s: float
    """Start -> the last clip done."""
    first_matte_s: float
    """Start -> the first matting activity scheduled."""
    held_s: float
    """GPU slot-time the set's frames held (the engine's runs)."""
    workload: Workload

    def gpu_busy(self, capacity: int) -> float:
        """The share of the GPU's capacity in use over the makespan."""
        return self.held_s / (capacity * self.makespan_s)


@dataclass(frozen=True)
class Measured:
    """Both designs run side by side on one configuration and one workload, and their lower bound."""

    config: Config
    pipelined: Run
    barrier: Run

    def __post_init__(self) -> None:
        if self.pipelined.workload != self.barrier.workload:
            raise ValueError("the two designs matted different workloads")

    @property
    def bound_s(self) -> float:
        return lower_bound(self.config, self.pipelined.workload)


def _times(history: WorkflowHistory) -> tuple[float, float, float]:
    """Start -> the last clip done, the first matting activity scheduled, the last matting activity done."""
    names: dict[int, str] = {}
    begin = history.events[0].event_time.ToDatetime()
    last_clip = last_matte = begin
    first_matte = None
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            if names[event.event_id] == ActivityName.MATTE_SLOT and first_matte is None:
                first_matte = event.event_time.ToDatetime()
        elif event.HasField("activity_task_completed_event_attributes"):
            name = names[event.activity_task_completed_event_attributes.scheduled_event_id]
            when = event.event_time.ToDatetime()
            if name == ActivityName.GENERATE_CLIP:
                last_clip = max(last_clip, when)
            elif name == ActivityName.MATTE_SLOT:
                last_matte = max(last_matte, when)
    assert first_matte is not None, "the set matted nothing"
    return (
        (last_clip - begin).total_seconds(),
        (first_matte - begin).total_seconds(),
        (last_matte - begin).total_seconds(),
    )


async def _run_set(
    sets: EmojiSetClient, gate: GpuGate, config: Config, barrier: MatteOnceAllExtracted | None = None
) -> Run:
    """Run one set to its end; with ``barrier``, held there."""
    set_id = f"bench-clips-{uuid.uuid4().hex[:8]}"
    if barrier is not None:
        barrier.hold(set_id, len(config.actions))
    request = EmojiSetInput(
        character_prompt="a round orange cat",
        actions=config.actions,
        temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
        frames_per_emoji=config.frames,
        neighbours=NEIGHBOURS,
        clip_seconds=1.0,
        clip_fps=24,
        image_size=96,
        generator=TimedGenerator.name,
        matting_pipeline=f"sleep:{round(config.latency_s * 1000)}",
        review=ReviewPolicy.automatic(),
        export_targets=["generic"],
    )
    held_before = gate.held_seconds()
    await sets.start(request, set_id=set_id)
    await sets.result(set_id)
    held_s = gate.held_seconds() - held_before
    clips_in_s, first_matte_s, makespan_s = _times(await sets.temporal.get_workflow_handle(set_id).fetch_history())
    state = await sets.state(set_id)
    workload = tuple(tuple(len(frame.candidates) for frame in action.frames) for action in state.actions)
    return Run(
        makespan_s=makespan_s, clips_in_s=clips_in_s, first_matte_s=first_matte_s, held_s=held_s, workload=workload
    )


async def measure(config: Config) -> Measured:
    """Run the set pipelined, then with the barrier, on a throwaway server with both workers in this process."""
    env = await start_throwaway_server()
    generators = builtin_generators()
    generators.register(TimedGenerator.name, lambda: TimedGenerator(config))
    barrier = MatteOnceAllExtracted()
    orchestration_config = env.client.config()
    orchestration_config["interceptors"] = [barrier]
    with tempfile.TemporaryDirectory() as root:
        store = FileArtifactStore(Path(root))
        orchestration, production = build_worker(
            Client(**orchestration_config),
            OrchestrationSettings(_env_file=None),
            store,
            generators=generators,
            paid=standin_paid_queue(),
        )
        gpu_settings = GpuWorkerSettings(_env_file=None, gpu_concurrency=config.capacity, gpu_prefetch=config.capacity)
        gpu, matting = build_gpu_worker(env.client, gpu_settings, store, steps=sleep_steps())
        try:
            async with orchestration, gpu:
                sets = EmojiSetClient(env.client, store=store)
                pipelined = await _run_set(sets, matting.gate, config)
                barriered = await _run_set(sets, matting.gate, config, barrier)
        finally:
            await production.aclose()
            matting.close()
            await env.shutdown()
    return Measured(config, pipelined, barriered)


def report(measured: Measured) -> str:
    """The configuration and the table: bound, pipelined, barrier, each with its ratio to the bound and GPU busy."""
    config, bound, workload = measured.config, measured.bound_s, measured.pipelined.workload
    work_s = matting_work_s(config, workload)
    lines = [
        f"{len(config.actions)} actions x {config.frames} slots; start frame S = {config.start_frame_s:g} s, clips "
        f"V = {', '.join(f'{v:g}' for v in config.clip_s)} s ({config.provider_slots} at once), matting L = "
        f"{config.latency_s:g} s per candidate, C = {config.capacity}",
        f"matting work: {sum(map(sum, workload))} candidates (up to {CANDIDATES} a slot) = {work_s:.1f} s of GPU "
        f"slot-time; held: pipelined {measured.pipelined.held_s:.1f} s, barrier {measured.barrier.held_s:.1f} s",
        "",
        "| design | makespan (s) | x bound | last clip in (s) | GPU busy |",
        "|---|---|---|---|---|",
        f"| lower bound (inputs alone) | {bound:.2f} | 1.00 | {max(clips_done(config)):.2f} | "
        f"{work_s / (config.capacity * bound):.0%} |",
    ]
    for name, run in (("pipelined (the workflow)", measured.pipelined), ("barrier (run)", measured.barrier)):
        lines.append(
            f"| {name} | {run.makespan_s:.2f} | {run.makespan_s / bound:.2f} | {run.clips_in_s:.2f} | "
            f"{run.gpu_busy(config.capacity):.0%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start-frame", type=float, default=1.0, help="S: seconds per start frame")
    parser.add_argument(
        "--clips",
        type=float,
        nargs="+",
        default=[6.0, 9.0, 12.0, 15.0],
        help="V per action (s), 1 to 4, in the order the provider starts them",
    )
    parser.add_argument("--provider-slots", type=int, default=2, help="P: clips the provider runs at once")
    parser.add_argument("--latency", type=float, default=0.1, help="L: matting seconds per candidate")
    parser.add_argument("--capacity", type=int, default=3, help="C: GPU slots")
    parser.add_argument("--frames", type=int, default=12, help="F: frame slots per action")
    args = parser.parse_args()
    run_config = Config(
        start_frame_s=args.start_frame,
        clip_s=tuple(args.clips),
        provider_slots=args.provider_slots,
        latency_s=args.latency,
        capacity=args.capacity,
        frames=args.frames,
    )
    print(report(asyncio.run(measure(run_config))))
