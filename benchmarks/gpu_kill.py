"""A GPU worker killed at load: how long until the slots it was running run again (issue 21).

For each N (``--sets``, default 1 and 10) a fresh stack runs as separate processes on a throwaway data folder
(:class:`testkit.chaos.ChaosStack`: the Temporal dev server with fair task queues, :data:`starter.devstack.FAIR_QUEUES`,
on its own SQLite file; the orchestration worker ``python -m activities``; and the GPU worker ``python -m
benchmarks.load_gpu_worker``, the real GPU worker with the ``sleep`` stand-in engine, so a slot's time on the "GPU"
is a fixed ``--gpu-ms`` per candidate and the GPU queue really holds a backlog on 2 cores). N fully automatic sets
are started at once, each its own owner (its own fairness key), 2 actions x 8 frames, 1 neighbour either side (3
candidates a slot), 1 take, 128 px: 16 ``matte_slot`` activities a set.

Once every set's slots are all scheduled (the sets' pending activities, read every 0.25 s) and the GPU worker is
full (at least ``POPCON_GPU_CONCURRENCY`` slots started on it), the GPU worker is SIGKILLed, and started again after
``--pause`` seconds (drawn from a range, ``0-2`` by default: an operator or a supervisor). Measured from the kill:

- the slots *interrupted*: every activity started on the killed worker and not completed (pending, started, its
  last worker the killed process), read right after the kill; beside them the GPU queue's depth then (``matte_slot``
  activities scheduled and not started, all sets, and those of the interrupted slots' own sets);
- when the restarted worker took its first task (its first ActivityTaskStarted, from the histories);
- when each interrupted slot ran again: its next attempt's start (``last_started_time`` of the pending activity at
  attempt + 1, polled every 0.25 s; the history's ActivityTaskStarted of that attempt if it finished between polls):
  min / median / max over the slots, and the max minus the restart;
- where the slowest slot's time went: its last beat before the kill and when its heartbeat timeout was due (that
  beat + :data:`~workflows.contract.HEARTBEAT_TIMEOUT`), when its retry was queued (the pending activity's
  ``scheduled_time``: the timeout plus the retry policy's interval), and when it started; and every interrupted
  slot's wait in the GPU queue (queued -> started), median and max.

Then every set is awaited to the end (nothing lost: every set completes).

``--recover`` says how the GPU workers run, one run per N each (both by default, side by side):

- ``journal``: as deployed, with their journal of running activities (:mod:`gpu_activity_worker.recovery`, the
  default folder under the stack's data folder): the restarted worker, before it polls, raises the activities its
  killed predecessor was running to :data:`~workflows.contract.RECOVERY_PRIORITY` and fails their dead attempts by
  their task tokens, so their retries come at once and ahead of the production backlog. Its figures (activities
  found, raised, failed, stale, and how long it took) are read from its log.
- ``wait``: the journal off (``POPCON_GPU_JOURNAL_DIR=``): each interrupted slot waits for its heartbeat timeout, then
  at its own priority in its owner's part of the queue (the behaviour before the journal).

    python -m benchmarks.gpu_kill [--sets 1 10] [--recover wait journal] [--pause 0-2] [--gpu-ms 300] [--actions 2]
        [--frames 8] [--gpu-concurrency 3] [--gpu-prefetch 3] [--seed 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from benchmarks.arguments import at_least
from gpu_activity_worker.recovery import RECOVERED
from starter.client import EmojiSetClient
from starter.devstack import Service
from testkit.chaos import GPU, ORCHESTRATION, ChaosStack, StrikeMissed, wait_until_closed, worker_starts
from workflows.contract import (
    HEARTBEAT_TIMEOUT,
    ActivityName,
    EmojiSetInput,
    ExportTarget,
    ReviewPolicy,
    TemporalMode,
)

ACTIONS = ["wave", "laugh", "heart", "cry"]
POLL_S = 0.25
BUILD_ID = "gpu-kill"
"""The workers' build (``POPCON_BUILD_ID``)."""
GOAL_S = 10.0
"""Issue 21's goal: every interrupted slot running again within this long of the lost worker's restart."""
RECOVERIES = ("wait", "journal")
"""``wait``: the GPU workers' journal off (each interrupted slot waits for its heartbeat timeout); ``journal``: on, as
deployed (the restarted worker recovers its predecessor's slots before it polls)."""


@dataclass(frozen=True)
class Config:
    """The sets every run starts, the GPU worker's capacity, and the fault."""

    actions: int = 2
    frames: int = 8
    neighbours: int = 1
    image_size: int = 128
    gpu_ms: int = 300
    """The stand-in engine's time per candidate (``sleep:<ms>``)."""
    gpu_concurrency: int = 3
    gpu_prefetch: int = 3
    pause_s: tuple[float, float] = (0.0, 2.0)
    """The restart comes this long after the kill, drawn uniformly from the range."""
    seed: int = 7
    strike_timeout_s: float = 300.0
    timeout_s: float = 600.0
    """How long the sets may take to complete after the kill."""

    @property
    def slots_per_set(self) -> int:
        return self.actions * self.frames

    def set_input(self, index: int) -> EmojiSetInput:
        """Set ``index``: every set the same but for its owner (its fairness key) and seed."""
        return EmojiSetInput(
            character_prompt="a round orange cat with a blue scarf",
            actions=ACTIONS[: self.actions],
            temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
            frames_per_emoji=self.frames,
            neighbours=self.neighbours,
            takes_per_action=1,
            character_candidates=1,
            start_frame_candidates=1,
            image_size=self.image_size,
            clip_seconds=1.0,
            clip_fps=8,
            generator="procedural",
            matting_pipeline=f"sleep:{self.gpu_ms}",
            review=ReviewPolicy.automatic(),
            export_targets=[ExportTarget.GENERIC],
            owner=f"owner-{index}",
            seed=self.seed + index,
        )

    def describe(self) -> str:
        candidates = 2 * self.neighbours + 1
        return (
            f"each set: {self.actions} actions x {self.frames} frames ({self.slots_per_set} matte_slot), "
            f"{candidates} candidates a slot, 1 take, {self.image_size} px, its own owner, fully automatic; "
            f"GPU worker: {self.gpu_concurrency} GPU slots + {self.gpu_prefetch} taken ahead, stand-in engine "
            f"sleep:{self.gpu_ms} ({candidates * self.gpu_ms / 1000:.1f} s a slot on the GPU); restart "
            f"{self.pause_s[0]:g}-{self.pause_s[1]:g} s after the kill; heartbeat timeout "
            f"{HEARTBEAT_TIMEOUT.total_seconds():g} s; {os.cpu_count()} cores"
        )


class SleepGpuStack(ChaosStack):
    """The chaos harness's stack, its GPU worker the real one with the ``sleep`` stand-in engine registered."""

    def _spawn(self, service: Service) -> None:
        if service.name == GPU:
            service = Service(GPU, [sys.executable, "-m", "benchmarks.load_gpu_worker"])
        super()._spawn(service)


# --- Figures ---------------------------------------------------------------------------------------------------


@dataclass
class Slot:
    """An interrupted activity and when its next attempt ran (seconds after the kill)."""

    set_id: str
    activity_id: str
    activity_type: str
    attempt: int
    last_beat_s: float
    """The interrupted attempt's last heartbeat (its start if it never beat), seconds after the kill (negative): the
    server gives up on it :data:`HEARTBEAT_TIMEOUT` later."""
    retry_queued_s: float | None = None
    """When the retry was put in the task queue (after the retry policy's interval)."""
    back_s: float | None = None
    """When the next attempt started on a worker."""
    back_from: str = ""
    """Where ``back_s`` was read: ``pending`` (the workflow's pending activity) or ``history``."""


@dataclass
class Run:
    """One run's figures, seconds after the kill unless said otherwise."""

    sets: int
    recover: str
    queued_at_kill: int
    """``matte_slot`` activities scheduled and not started, all sets, right after the kill."""
    queued_own_sets: int
    """Of those, the ones of the sets that had an interrupted slot."""
    pause_s: float
    restart_s: float
    ready_s: float | None
    """The restarted worker's ``worker started`` log line."""
    first_task_s: float | None
    slots: list[Slot] = field(default_factory=list)
    completed: int = 0
    wall_s: float = 0.0
    recovery: dict[str, Any] | None = None
    """The restarted worker's recovery (its log line's figures); None without a journal."""

    def back(self) -> list[float]:
        """Each interrupted slot's next start that was seen, soonest first."""
        return sorted(slot.back_s for slot in self.slots if slot.back_s is not None)

    @property
    def back_min_s(self) -> float | None:
        return min(self.back(), default=None)

    @property
    def back_median_s(self) -> float | None:
        back = self.back()
        return statistics.median(back) if back else None

    @property
    def back_max_s(self) -> float | None:
        return max(self.back(), default=None)

    @property
    def max_minus_restart_s(self) -> float | None:
        """The last interrupted slot's start, counted from the restart instead of the kill."""
        return None if self.back_max_s is None else self.back_max_s - self.restart_s

    def slowest(self) -> Slot | None:
        backs = [slot for slot in self.slots if slot.back_s is not None]
        return max(backs, key=lambda slot: slot.back_s or 0.0) if backs else None

    def summary(self) -> dict[str, object]:
        """The figures, for ``--json``."""
        return {
            **{name: value for name, value in asdict(self).items() if name != "slots"},
            "interrupted": len(self.slots),
            "back_min_s": self.back_min_s,
            "back_median_s": self.back_median_s,
            "back_max_s": self.back_max_s,
            "max_minus_restart_s": self.max_minus_restart_s,
            "slots": [asdict(slot) for slot in self.slots],
        }


def _seconds(at: datetime, since: datetime) -> float:
    return (at - since).total_seconds()


def _when(server_time: Timestamp, since: datetime) -> float:
    """A server time as seconds after ``since`` (the server runs on this machine: one clock)."""
    return _seconds(server_time.ToDatetime(tzinfo=UTC), since)


# --- Reading the sets ------------------------------------------------------------------------------------------


async def pending(client: Client, set_ids: Iterable[str]) -> dict[str, list[PendingActivityInfo]]:
    """Each set's pending activities (a set that cannot be described now has none)."""

    async def one(set_id: str) -> list[PendingActivityInfo]:
        with contextlib.suppress(RPCError):
            description = await client.get_workflow_handle(set_id).describe()
            return list(description.raw_description.pending_activities)
        return []

    ids = list(set_ids)
    return dict(zip(ids, await asyncio.gather(*(one(set_id) for set_id in ids)), strict=True))


def _started_by(activity: PendingActivityInfo, identity_prefix: str) -> bool:
    return activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED and (
        activity.last_worker_identity.startswith(identity_prefix)
    )


def _queued_slot(activity: PendingActivityInfo) -> bool:
    return (
        activity.activity_type.name == ActivityName.MATTE_SLOT.value
        and activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
    )


async def wait_for_strike(stack: ChaosStack, client: Client, set_ids: list[str], config: Config) -> None:
    """Until every set's slots have all been scheduled and the GPU worker runs at least its GPU slots' worth."""
    seen: dict[str, set[str]] = {set_id: set() for set_id in set_ids}
    deadline = time.monotonic() + config.strike_timeout_s
    while True:
        identity = f"{stack.pid(GPU)}@"
        running = 0
        for set_id, activities in (await pending(client, set_ids)).items():
            for activity in activities:
                if activity.activity_type.name == ActivityName.MATTE_SLOT.value:
                    seen[set_id].add(activity.activity_id)
                    running += _started_by(activity, identity)
        if running >= config.gpu_concurrency and all(len(ids) >= config.slots_per_set for ids in seen.values()):
            return
        if time.monotonic() > deadline:
            counts = sorted(len(ids) for ids in seen.values())
            raise StrikeMissed(f"no strike within {config.strike_timeout_s:.0f} s: slots seen per set {counts}")
        await asyncio.sleep(POLL_S)


async def follow(client: Client, slots: list[Slot], killed_at: datetime, timeout_s: float) -> None:
    """Poll the interrupted slots' sets until each slot's next attempt started (or it left the pending activities:
    then its start is read from the history later)."""
    waiting = {(slot.set_id, slot.activity_id): slot for slot in slots}
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        now = await pending(client, {set_id for set_id, _ in waiting})
        for (set_id, activity_id), slot in list(waiting.items()):
            match = [a for a in now[set_id] if a.activity_id == activity_id]
            if not match:
                del waiting[(set_id, activity_id)]
                continue
            activity = match[0]
            if activity.attempt <= slot.attempt:
                continue
            if activity.HasField("scheduled_time"):
                slot.retry_queued_s = _when(activity.scheduled_time, killed_at)
            if activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                slot.back_s = _when(activity.last_started_time, killed_at)
                slot.back_from = "pending"
                del waiting[(set_id, activity_id)]
        await asyncio.sleep(POLL_S)


def read_history(events: list[HistoryEvent], slots: list[Slot], killed_at: datetime, new_identity: str) -> float | None:
    """Fill in the slots whose next attempt the polling missed; returns when the new worker's first task started."""
    scheduled: dict[int, str] = {}
    by_id = {slot.activity_id: slot for slot in slots}
    first: float | None = None
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_id
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            at = _when(event.event_time, killed_at)
            if attrs.identity.startswith(new_identity) and at > 0:
                first = at if first is None else min(first, at)
            slot = by_id.get(scheduled.get(attrs.scheduled_event_id, ""))
            if slot is not None and slot.back_s is None and attrs.attempt > slot.attempt:
                slot.back_s = at
                slot.back_from = "history"
    return first


# --- One run ---------------------------------------------------------------------------------------------------


def recovery_record(log: str) -> dict[str, Any] | None:
    """The figures of the last GPU worker start's recovery in its ``log`` (None if that start logged none)."""
    record: dict[str, Any] | None = None
    for line in log.splitlines():
        if line.startswith("--- ") and " spawn " in line:
            record = None
        elif f'"msg": "{RECOVERED}"' in line:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
    return record


async def _ready(stack: ChaosStack, name: str, since: datetime, timeout_s: float = 120.0) -> datetime:
    """When the worker ``name`` started after ``since`` logged ``worker started``."""
    deadline = time.monotonic() + timeout_s
    while True:
        starts = worker_starts(stack.logs(name), since)
        if starts and starts[-1][1] is not None:
            ready = starts[-1][1]
            return ready
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start within {timeout_s:.0f} s:\n{stack.log_tail(name)}")
        await asyncio.sleep(0.1)


async def measure(config: Config, sets: int, recover: str, pause_s: float, data_dir: Path) -> Run:
    """One run: a fresh stack, ``sets`` sets, the GPU worker killed under them and restarted after ``pause_s``."""
    began = time.monotonic()
    stack = SleepGpuStack(
        data_dir,
        gpu_concurrency=config.gpu_concurrency,
        env={
            "POPCON_GPU_PREFETCH": str(config.gpu_prefetch),
            "POPCON_MATTING_MAX_BATCH": "1",
            # One build, current from its start, as `popcon dev` runs it: a restarted worker takes work at once even
            # if the checkout changed meanwhile (a build of other code would wait to be made current).
            "POPCON_BUILD_ID": BUILD_ID,
            "POPCON_BUILD_PROMOTION": "always",
            # journal: the default folder, under the stack's data folder.
            **({"POPCON_GPU_JOURNAL_DIR": ""} if recover == "wait" else {}),
        },
    )
    try:
        since = datetime.now(UTC)
        await stack.start()
        client = await stack.connect()
        for name in (ORCHESTRATION, GPU):
            await _ready(stack, name, since)
        run_id = uuid.uuid4().hex[:6]
        set_ids = [f"gpu-kill-{run_id}-{index}" for index in range(sets)]
        client_sets = EmojiSetClient(client)
        for index, set_id in enumerate(set_ids):
            await client_sets.start(config.set_input(index), set_id=set_id)

        await wait_for_strike(stack, client, set_ids, config)
        dead = f"{stack.pid(GPU)}@"
        killed_at = stack.kill(GPU)
        after = await pending(client, set_ids)
        slots = [
            Slot(
                set_id,
                a.activity_id,
                a.activity_type.name,
                a.attempt,
                last_beat_s=_when(
                    a.last_heartbeat_time if a.HasField("last_heartbeat_time") else a.last_started_time, killed_at
                ),
            )
            for set_id, activities in after.items()
            for a in activities
            if _started_by(a, dead)
        ]
        own = {slot.set_id for slot in slots}
        queued = sum(_queued_slot(a) for activities in after.values() for a in activities)
        queued_own = sum(_queued_slot(a) for set_id in own for a in after[set_id])
        await asyncio.sleep(max(0.0, pause_s - _seconds(datetime.now(UTC), killed_at)))
        restarted_at = await stack.restart()
        ready = await _ready(stack, GPU, killed_at)
        new_identity = f"{stack.pid(GPU)}@"
        deadline = time.monotonic() + config.timeout_s
        await follow(client, slots, killed_at, config.timeout_s)

        completed = 0
        first_task_s: float | None = None
        for set_id in set_ids:
            handle = client.get_workflow_handle(set_id)
            status = await wait_until_closed(handle, timeout_s=max(deadline - time.monotonic(), 1.0))
            completed += status is WorkflowExecutionStatus.COMPLETED
            events = [event async for event in handle.fetch_history_events()]
            first = read_history(events, [slot for slot in slots if slot.set_id == set_id], killed_at, new_identity)
            if first is not None:
                first_task_s = first if first_task_s is None else min(first_task_s, first)
    except BaseException:
        for name in (ORCHESTRATION, GPU):
            print(f"--- {name} log (tail)\n{stack.log_tail(name)}", file=sys.stderr)
        raise
    finally:
        stack.shutdown()
    return Run(
        sets=sets,
        recover=recover,
        queued_at_kill=queued,
        queued_own_sets=queued_own,
        pause_s=pause_s,
        restart_s=_seconds(restarted_at, killed_at),
        ready_s=_seconds(ready, killed_at),
        first_task_s=first_task_s,
        slots=slots,
        completed=completed,
        wall_s=time.monotonic() - began,
        recovery=recovery_record(stack.logs(GPU)),
    )


# --- Report ----------------------------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(runs: list[Run]) -> str:
    """One row per run: the queue at the kill, the worker's return and the interrupted slots' (seconds after the
    kill)."""
    lines = [
        "| sets | recover | matte_slot queued at kill (own sets) | slots interrupted | restart (s) | worker ready (s) "
        "| worker's first task (s) | interrupted running again: min / median / max (s) | max - restart (s) "
        "| sets completed |",
        "|--:|---|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    for run in runs:
        missing = len(run.slots) - len(run.back())
        back = f"{_s(run.back_min_s)} / {_s(run.back_median_s)} / {_s(run.back_max_s)}"
        back += f" ({missing} never seen)" if missing else ""
        lines.append(
            f"| {run.sets} | {run.recover} | {run.queued_at_kill} ({run.queued_own_sets}) | {len(run.slots)} "
            f"| {run.restart_s:.1f} | {_s(run.ready_s)} | {_s(run.first_task_s)} | {back} "
            f"| {_s(run.max_minus_restart_s)} | {run.completed}/{run.sets} |"
        )
    return "\n".join(lines)


def breakdown(runs: list[Run]) -> str:
    """Where the slowest interrupted slot's time went, per run."""
    lines = []
    for run in runs:
        slot = run.slowest()
        if slot is None:
            lines.append(f"{run.sets} sets, {run.recover}: no interrupted slot ran again")
            continue
        timeout_s = HEARTBEAT_TIMEOUT.total_seconds()
        parts = [
            f"{run.sets} sets, {run.recover}: slowest {slot.activity_type} {slot.set_id}#{slot.activity_id}: "
            f"last beat {slot.last_beat_s:.1f} s, heartbeat timeout due {slot.last_beat_s + timeout_s:.1f} s"
        ]
        if slot.retry_queued_s is not None:
            parts.append(f"retry queued {slot.retry_queued_s:.1f} s")
        if slot.back_s is not None:
            parts.append(f"running again {slot.back_s:.1f} s (from the {slot.back_from})")
        queue_waits = [
            s.back_s - s.retry_queued_s for s in run.slots if s.back_s is not None and s.retry_queued_s is not None
        ]
        if queue_waits:
            parts.append(
                f"all interrupted slots' wait in the queue: median {statistics.median(queue_waits):.1f} s, "
                f"max {max(queue_waits):.1f} s"
            )
        if run.recovery is not None:
            figures = run.recovery
            parts.append(
                f"the restarted worker's recovery: {figures.get('entries', 0)} journaled activities, "
                f"{figures.get('raised', 0)} raised, {figures.get('failed', 0)} failed, {figures.get('stale', 0)} "
                f"stale, {len(figures.get('errors', []))} errors, {figures.get('elapsed_ms', 0):.0f} ms before it "
                "polled"
            )
        lines.append("; ".join(parts))
    return "\n".join(lines)


def parse_pause(value: str) -> tuple[float, float]:
    """``A`` or ``A-B`` (seconds, ``A <= B``) as a range."""
    low, _, high = value.partition("-")
    try:
        lo, hi = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds or a range A-B, not {value!r}") from None
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError(f"a range 0 <= A <= B, not {value!r}")
    return lo, hi


def goal_lines(runs: list[Run]) -> str:
    """Whether each run brought every interrupted slot back within :data:`GOAL_S` of the restart."""
    lines = []
    for run in runs:
        late = run.max_minus_restart_s
        verdict = "missed" if late is None or late > GOAL_S or len(run.back()) < len(run.slots) else "met"
        lines.append(
            f"{run.sets} sets, {run.recover}: every interrupted slot running again within {GOAL_S:g} s of the "
            f"restart: {verdict} ({_s(late)} s)"
        )
    return "\n".join(lines)


async def main(config: Config, counts: list[int], recoveries: list[str], json_path: Path | None) -> list[Run]:
    began = time.perf_counter()
    print(f"{config.describe()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    draw = random.Random(config.seed)
    runs = []
    for sets in counts:
        for recover in recoveries:
            pause_s = draw.uniform(*config.pause_s)
            with tempfile.TemporaryDirectory(prefix="gpu-kill-") as root:
                run = await measure(config, sets, recover, pause_s, Path(root))
            runs.append(run)
            print(
                f"  {sets} sets, {recover}: {len(run.slots)} interrupted, {run.queued_at_kill} queued at the kill, "
                f"all running again {_s(run.back_max_s)} s after it (restart at {run.restart_s:.1f} s); "
                f"run {run.wall_s:.0f} s",
                flush=True,
            )
    print(table(runs))
    print(breakdown(runs))
    print(goal_lines(runs))
    print(f"wall time: {time.perf_counter() - began:.0f} s")
    if json_path is not None:
        figures = {"config": asdict(config), "runs": [run.summary() for run in runs]}
        json_path.write_text(json.dumps(figures, indent=2))
    return runs


@dataclass(frozen=True)
class Plan:
    """What the command line asks for."""

    config: Config
    counts: list[int]
    recoveries: list[str]
    json_path: Path | None


def parse_args(argv: list[str] | None = None) -> Plan:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=at_least(1), nargs="+", default=[1, 10], help="sets queued: one run per N")
    parser.add_argument(
        "--recover",
        choices=RECOVERIES,
        nargs="+",
        default=list(RECOVERIES),
        help="wait: the GPU workers' journal off; journal: on, as deployed (one run per N each)",
    )
    parser.add_argument("--pause", type=parse_pause, default=(0.0, 2.0), help="restart after A or A-B s (drawn)")
    parser.add_argument("--gpu-ms", type=at_least(0), default=300, help="the stand-in engine's ms per candidate")
    parser.add_argument("--actions", type=at_least(1), default=2, help=f"the first N of {ACTIONS}")
    parser.add_argument("--frames", type=at_least(2), default=8, help="frames per emoji")
    parser.add_argument("--gpu-concurrency", type=at_least(1), default=3, help="the GPU worker's GPU slots")
    parser.add_argument("--gpu-prefetch", type=at_least(0), default=3, help="slots the GPU worker takes ahead")
    parser.add_argument("--seed", type=int, default=7, help="the sets' seeds and the pauses drawn")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.actions > len(ACTIONS):
        parser.error(f"--actions: at most {len(ACTIONS)}")
    config = Config(
        actions=args.actions,
        frames=args.frames,
        gpu_ms=args.gpu_ms,
        gpu_concurrency=args.gpu_concurrency,
        gpu_prefetch=args.gpu_prefetch,
        pause_s=args.pause,
        seed=args.seed,
    )
    return Plan(config, args.sets, args.recover, args.json)


def cli(argv: list[str] | None = None) -> None:
    plan = parse_args(argv)
    asyncio.run(main(plan.config, plan.counts, plan.recoveries, plan.json_path))


if __name__ == "__main__":
    cli()
