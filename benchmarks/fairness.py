"""Fair task queues per owner: how long one small owner waits for a review while another owner's batch runs.

Owner A starts ``--a-sets`` sets (20) at once, owner B starts one set ``--b-delay`` seconds (0.5) later, and B's
*time to review* is measured: from just before its start call until its set reaches ``Phase.AWAITING_REVIEW`` (all
its frames matted, waiting for a person), read by polling :meth:`EmojiSetClient.state` (B's set every 0.1 s, A's
every second). Three runs, each on a fresh throwaway dev server (:func:`testkit.servers.start_throwaway_server`) with
both real workers in this process (:func:`testkit.stack.run_stack`: the procedural generator, classical matting on
the CPU):

- **B alone**: only B's set (on a fair server), the reference;
- **fairness off**: ``fair=False``, every task in arrival order, as before issue 21;
- **fairness on**: ``fair=True``, the dev server's :data:`~starter.devstack.FAIR_QUEUES` (the new matcher, fairness,
  one partition per task queue); each set's workflow and activities carry its owner as fairness key.

Every set is the same but for its owner: 2 actions x 8 frames, 1 neighbour either side (3 candidates a slot), 1 take,
128 px, 1 s clips at 8 fps; character and start frames picked automatically, the final review by a person, so a set
stops at its review. Printed per run: B's time to review and its ratio to B alone, A's median and p95 time to review,
the makespan (first start -> last set awaiting review), and from B's history where its time went, summed over its
activities: waiting in a task queue (scheduled -> started: what fairness orders) and started -> completed (running,
slowed by whatever shares the cores; for ``matte_slot`` also the wait for a GPU slot in the worker after being taken
ahead). Then whether fairness on keeps B within 1.5x of alone (the goal).

The figures depend on the workers' capacity against the batch: the stack's defaults are kept, 8 orchestration
activity slots (``OrchestrationSettings``) and a GPU worker with 3 frame slots and 3 taken ahead
(``GpuWorkerSettings``), so A's 20 sets (320 ``matte_slot`` activities, 40 clips) queue on both task queues; and on
the machine: everything, the server included, shares its cores, which may be busy with other work (the load average
is printed). B's set has 16 frame slots, more than the GPU worker runs at once, so even alone it queues on its own
slots, and with fairness on it gets about half of them; and A's activities that run beside B's share the cores with
them: fairness orders the task queues, not the cores. ``--repeat N`` runs each configuration N times and prints the
median of each figure.

    python -m benchmarks.fairness [--a-sets 20] [--b-delay 0.5] [--repeat 1] [--actions 2] [--frames 8]
        [--image-size 128]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.settings import OrchestrationSettings
from benchmarks.arguments import at_least
from core.settings import ArtifactSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from starter.client import EmojiSetClient
from testkit.servers import start_throwaway_server
from testkit.stack import Stack, StackSettings, run_stack
from workflows.contract import EmojiSetInput, Phase, ReviewPolicy, StagePolicy, TemporalMode

GOAL_RATIO = 1.5
"""Fairness on keeps B's time to review within this many times B's time alone."""
B_POLL_S = 0.1
A_POLL_S = 1.0
ACTIONS = ["wave", "laugh", "heart", "cry"]


@dataclass(frozen=True)
class Config:
    """The sets both owners start, and how many A starts."""

    a_sets: int = 20
    b_delay_s: float = 0.5
    actions: int = 2
    frames: int = 8
    neighbours: int = 1
    image_size: int = 128
    timeout_s: float = 600.0
    """How long one run may take before its sets are given up on."""

    def set_input(self, owner: str) -> EmojiSetInput:
        """A set of ``owner``'s: the same for both owners but for the owner."""
        return EmojiSetInput(
            character_prompt="a round orange cat with a blue scarf",
            actions=ACTIONS[: self.actions],
            temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
            frames_per_emoji=self.frames,
            neighbours=self.neighbours,
            takes_per_action=1,
            image_size=self.image_size,
            clip_seconds=1.0,
            clip_fps=8,
            generator="procedural",
            matting_pipeline="classical",
            review=ReviewPolicy(character=StagePolicy.AUTO, start_frames=StagePolicy.AUTO, final=StagePolicy.HUMAN),
            owner=owner,
        )

    def describe(self) -> str:
        return (
            f"{self.actions} actions x {self.frames} frames, {2 * self.neighbours + 1} candidates a slot, 1 take, "
            f"{self.image_size} px, 1 s clips at 8 fps"
        )


@dataclass(frozen=True)
class Run:
    """What one run measured, in seconds."""

    name: str
    b_s: float
    """B's time to review."""
    a_s: list[float]
    """Each of A's sets' time to review (none in the run of B alone)."""
    makespan_s: float
    """First start -> the last set awaiting its review."""
    b_queued_s: float
    """B's activities' time in task queues (scheduled -> started), summed."""
    b_running_s: float
    """B's activities' time started -> completed, summed."""


def stack_settings(root: Path) -> StackSettings:
    """The stack's default worker settings, its store under ``root``."""
    return StackSettings(
        artifacts=ArtifactSettings(_env_file=None, data_dir=root / "data", artifact_root=(root / "artifacts").as_uri()),
        gpu=GpuWorkerSettings(_env_file=None),
        orchestration=OrchestrationSettings(_env_file=None),
    )


async def until_review(sets: EmojiSetClient, set_id: str, started: float, poll_s: float) -> float:
    """Poll the set's state until it awaits its final review; returns when that was seen, ``started`` being 0.

    Raises:
        RuntimeError: The set ended (failed, cancelled) without reaching its review.
    """
    while True:
        state = await sets.state(set_id)
        if state.phase is Phase.AWAITING_REVIEW:
            return time.monotonic() - started
        if state.failure is not None or state.phase in (Phase.CANCELLED, Phase.EXPIRED, Phase.COMPLETED):
            raise RuntimeError(f"{set_id} ended at {state.phase.value} without its review: {state.failure}")
        await asyncio.sleep(poll_s)


@dataclass(frozen=True)
class Race:
    """Times to review (monotonic seconds) of one run's sets."""

    b_set_id: str
    b_s: float
    a_s: list[float]
    makespan_s: float


async def race(sets: EmojiSetClient, config: Config, *, a_sets: int) -> Race:
    """A starts ``a_sets`` sets at once, B one set ``config.b_delay_s`` later (at once when A starts none)."""
    run = uuid.uuid4().hex[:6]
    first = time.monotonic()

    async def one(owner: str, index: int, poll_s: float) -> tuple[float, float]:
        started = time.monotonic()
        await sets.start(config.set_input(owner), set_id=f"fairness-{run}-{owner}-{index}")
        took = await until_review(sets, f"fairness-{run}-{owner}-{index}", started, poll_s)
        return took, started + took - first

    async with asyncio.timeout(config.timeout_s):
        a_tasks = [asyncio.create_task(one("owner-a", i, A_POLL_S)) for i in range(a_sets)]
        if a_sets:
            await asyncio.sleep(config.b_delay_s)
        b_took, b_done = await one("owner-b", 0, B_POLL_S)
        a_results = await asyncio.gather(*a_tasks)
    makespan_s = max([b_done, *(done for _, done in a_results)])
    return Race(f"fairness-{run}-owner-b-0", b_took, [took for took, _ in a_results], makespan_s)


async def activity_times(client: Client, workflow_id: str) -> tuple[float, float]:
    """The workflow's activities' time in task queues (scheduled -> started) and started -> completed, summed over
    the activities that completed, from its history's server times."""
    scheduled: dict[int, float] = {}
    started: dict[int, float] = {}
    queued = running = 0.0
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        at = event.event_time.ToMicroseconds() / 1e6
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[event.activity_task_started_event_attributes.scheduled_event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            key = event.activity_task_completed_event_attributes.scheduled_event_id
            queued += started[key] - scheduled[key]
            running += at - started[key]
    return queued, running


async def measure_run(name: str, config: Config, *, fair: bool, a_sets: int) -> Run:
    """One run on a fresh throwaway dev server (fair task queues or not) with the real stack in this process."""
    env = await start_throwaway_server(fair=fair)
    try:
        with tempfile.TemporaryDirectory() as root:
            # Closed on an error too, so the workers stop before the server.
            stacks = cast(AsyncGenerator[Stack, None], run_stack(env, stack_settings(Path(root))))
            async with contextlib.aclosing(stacks):
                async for stack in stacks:
                    result = await race(stack.sets, config, a_sets=a_sets)
                    queued, running = await activity_times(stack.client, result.b_set_id)
    finally:
        await env.shutdown()
    return Run(name, result.b_s, result.a_s, result.makespan_s, queued, running)


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


@dataclass(frozen=True)
class Row:
    """One configuration's figures: the median of each over its runs."""

    name: str
    b_s: float
    a_median_s: float | None
    a_p95_s: float | None
    makespan_s: float
    b_queued_s: float
    b_running_s: float


def row(runs: list[Run]) -> Row:
    """The median of each figure over one configuration's runs."""
    with_a = [run for run in runs if run.a_s]
    return Row(
        name=runs[0].name,
        b_s=statistics.median(run.b_s for run in runs),
        a_median_s=statistics.median(statistics.median(run.a_s) for run in with_a) if with_a else None,
        a_p95_s=statistics.median(p95(run.a_s) for run in with_a) if with_a else None,
        makespan_s=statistics.median(run.makespan_s for run in runs),
        b_queued_s=statistics.median(run.b_queued_s for run in runs),
        b_running_s=statistics.median(run.b_running_s for run in runs),
    )


def table(rows: list[Row], alone_s: float) -> str:
    """The rows as a markdown table, B's time also as a ratio to ``alone_s``."""

    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    lines = [
        "| run | B's time to review (s) | ratio to alone | A's median (s) | A's p95 (s) | makespan, all sets (s) "
        "| B's activities queued (s, summed) | B's activities started -> completed (s, summed) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {r.name} | {s(r.b_s)} | {r.b_s / alone_s:.2f}x | {s(r.a_median_s)} | {s(r.a_p95_s)} | {s(r.makespan_s)} "
        f"| {s(r.b_queued_s)} | {s(r.b_running_s)} |"
        for r in rows
    ]
    return "\n".join(lines)


def goal_line(fair: Row, alone_s: float) -> str:
    """Whether fairness on kept B within :data:`GOAL_RATIO` of alone."""
    ratio = fair.b_s / alone_s
    return f"fairness on within {GOAL_RATIO}x of alone: {'met' if ratio <= GOAL_RATIO else 'missed'} ({ratio:.2f}x)"


async def main(config: Config, repeat: int) -> None:
    began = time.perf_counter()
    gpu, orchestration = GpuWorkerSettings(_env_file=None), OrchestrationSettings(_env_file=None)
    print(
        f"each set: {config.describe()}; A starts {config.a_sets} sets, B 1 set {config.b_delay_s} s later; "
        f"orchestration worker: {orchestration.orchestration_activity_concurrency} activity slots; GPU worker: "
        f"{gpu.gpu_concurrency} frame slots + {gpu.gpu_prefetch_frames()} taken ahead (classical, on the CPU); "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; median of {repeat} run(s) each",
        flush=True,
    )
    plan = [("B alone", True, 0), ("fairness off", False, config.a_sets), ("fairness on", True, config.a_sets)]
    runs: dict[str, list[Run]] = {name: [] for name, _, _ in plan}
    for index in range(repeat):
        for name, fair, a_sets in plan:
            run = await measure_run(name, config, fair=fair, a_sets=a_sets)
            runs[name].append(run)
            print(f"  run {index + 1}, {name}: B {run.b_s:.1f} s, makespan {run.makespan_s:.1f} s", flush=True)
    rows = [row(runs[name]) for name, _, _ in plan]
    print(table(rows, rows[0].b_s))
    print(goal_line(rows[2], rows[0].b_s))
    print(f"wall time: {time.perf_counter() - began:.0f} s")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-sets", type=at_least(1), default=20, help="sets owner A starts at once")
    parser.add_argument("--b-delay", type=float, default=0.5, help="seconds between A's starts and B's")
    parser.add_argument("--repeat", type=at_least(1), default=1, help="runs per configuration (their median)")
    parser.add_argument("--actions", type=at_least(1), default=2, help=f"the first N of {ACTIONS}")
    parser.add_argument("--frames", type=at_least(2), default=8, help="frames per emoji")
    parser.add_argument("--image-size", type=at_least(64), default=128, help="frame edge, px")
    args = parser.parse_args()
    if args.actions > len(ACTIONS):
        parser.error(f"--actions: at most {len(ACTIONS)}")
    config = Config(
        a_sets=args.a_sets, b_delay_s=args.b_delay, actions=args.actions, frames=args.frames, image_size=args.image_size
    )
    asyncio.run(main(config, args.repeat))


if __name__ == "__main__":
    cli()
