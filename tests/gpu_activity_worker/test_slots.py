"""GPU slots: the gate that keeps at most ``capacity`` frame slots on the GPU, the prefetching slot supplier, and
``matte_slot`` activities waiting for the GPU (cancelled, handed back at shutdown, taken ahead by a real worker)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from temporalio import workflow
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import SlotPermit, Worker

from core.artifacts import FileArtifactStore
from gpu_activity_worker import slots
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.slots import FrameCancelledError, GpuGate, PrefetchSlotSupplier
from gpu_activity_worker.worker import build_gpu_worker
from testkit.held_step import HeldStep
from testkit.servers import start_throwaway_server
from testkit.set_keys import matte_key, source_key
from workflows.contract import GPU_TASK_QUEUE, ActivityName, MatteSlotInput, MatteSlotOutput

# --- The gate --------------------------------------------------------------------------------------------------------


def _hold(gate: GpuGate, cancelled: threading.Event, inside: threading.Event, leave: threading.Event) -> None:
    with gate.slot(cancelled):
        inside.set()
        leave.wait(10)


def _until_true(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("timed out")


def test_the_gate_never_lets_more_than_its_capacity_on_the_gpu() -> None:
    gate = GpuGate(2)
    lock = threading.Lock()
    running, peak = 0, 0
    both_inside = threading.Barrier(2, timeout=10)

    def frame() -> None:
        nonlocal running, peak
        with gate.slot(threading.Event()):
            with lock:
                running += 1
                peak = max(peak, running)
            with contextlib.suppress(threading.BrokenBarrierError):
                both_inside.wait()  # two frames are on the GPU together; the last ones find no partner
            with lock:
                running -= 1

    threads = [threading.Thread(target=frame) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert peak == 2
    assert not gate.full
    assert gate.finishing == 8


def test_a_frame_cancelled_while_waiting_gives_up_its_turn() -> None:
    gate = GpuGate(1)
    inside, leave = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=(gate, threading.Event(), inside, leave))
    holder.start()
    assert inside.wait(10)
    cancelled = threading.Event()
    outcome: list[BaseException | None] = []

    def waiter() -> None:
        try:
            with gate.slot(cancelled):
                outcome.append(None)
        except FrameCancelledError as err:
            outcome.append(err)

    waiting = threading.Thread(target=waiter)
    waiting.start()
    _until_true(lambda: gate.waiting == 1)
    gate.cancel(cancelled)
    waiting.join(10)
    assert gate.waiting == 0
    leave.set()
    holder.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], FrameCancelledError)


def test_a_frame_cancelled_before_it_reaches_the_gate_does_not_take_a_free_slot() -> None:
    gate = GpuGate(1)
    cancelled = threading.Event()
    gate.cancel(cancelled)
    with pytest.raises(FrameCancelledError), gate.slot(cancelled):
        pass
    assert not gate.full


def test_the_gate_counts_frames_finishing_after_the_gpu_and_says_when_it_changes() -> None:
    gate = GpuGate(2)
    calls: list[tuple[bool, int]] = []
    gate.on_change(lambda: calls.append((gate.full, gate.finishing)))
    with gate.slot(threading.Event()):
        assert calls == []
        with gate.slot(threading.Event()):
            assert calls == [(True, 0)]
        assert calls == [(True, 0), (False, 1)]
    assert gate.finishing == 2
    gate.reported()
    assert gate.finishing == 1


def test_the_gates_busy_and_held_time_count_only_while_frames_hold_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Busy time counts overlapping slots once, held time once per slot; time with no frame on the GPU (waiting,
    storing) counts in neither."""
    now = [10.0]
    monkeypatch.setattr(slots.time, "perf_counter", lambda: now[0])
    gate = GpuGate(2)
    with gate.slot(threading.Event()):  # 10 .. 13
        now[0] = 11.0
        with gate.slot(threading.Event()):  # 11 .. 12: two frames on the GPU
            now[0] = 12.0
        now[0] = 13.0
    now[0] = 20.0  # idle from 13 until 20
    with gate.slot(threading.Event()):  # 20 .. 21
        now[0] = 21.0

    assert gate.busy_seconds() == 3.0 + 1.0
    assert gate.held_seconds() == 3.0 + 1.0 + 1.0
    with gate.slot(threading.Event()):  # a frame still on the GPU counts up to now
        now[0] = 21.5
        assert (gate.busy_seconds(), gate.held_seconds()) == (4.5, 5.5)


def test_a_failing_listener_does_not_lose_a_gpu_slot() -> None:
    gate = GpuGate(1)

    def broken() -> None:
        raise RuntimeError("event loop is closed")

    gate.on_change(broken)
    with gate.slot(threading.Event()):
        assert gate.full
    assert not gate.full


def test_a_gate_needs_room_for_a_frame_and_prefetch_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        GpuGate(0)
    with pytest.raises(ValueError, match="prefetch"):
        PrefetchSlotSupplier(GpuGate(1), prefetch=-1)


# --- The slot supplier -----------------------------------------------------------------------------------------------


@dataclass
class _Context:
    """What the SDK passes to a slot supplier; the supplier reads none of it."""

    slot_type: str = "activity"
    task_queue: str = GPU_TASK_QUEUE
    worker_identity: str = "test"
    worker_build_id: str = ""
    worker_deployment_version: None = None
    is_sticky: bool = False
    slot_info: Any = None
    permit: Any = None


async def _blocked(reservation: asyncio.Task[Any]) -> bool:
    """Whether a reservation is still waiting after the event loop has had every chance to run it."""
    for _ in range(20):
        await asyncio.sleep(0)
    return not reservation.done()


async def test_the_supplier_opens_prefetch_slots_only_while_the_gpu_is_full() -> None:
    gate = GpuGate(2)
    supplier = PrefetchSlotSupplier(gate, prefetch=1)
    context: Any = _Context()
    assert supplier.max_slots == 5
    await supplier.reserve_slot(context)
    await supplier.reserve_slot(context)
    third = asyncio.create_task(supplier.reserve_slot(context))
    assert await _blocked(third), "a third slot while the GPU has room"
    assert supplier.try_reserve_slot(context) is None

    # Both frames go on the GPU (on their threads): now one more frame may be taken ahead, and no more.
    leave = threading.Event()
    entered = [threading.Event(), threading.Event()]
    holders = [threading.Thread(target=_hold, args=(gate, threading.Event(), inside, leave)) for inside in entered]
    for holder in holders:
        holder.start()
    for inside in entered:
        assert inside.wait(10)
    await asyncio.wait_for(third, 10)
    fourth = asyncio.create_task(supplier.reserve_slot(context))
    assert await _blocked(fourth), "more than capacity + prefetch slots"

    # A slot released from another thread (as the SDK does) lets the waiting reservation through.
    await asyncio.to_thread(supplier.release_slot, context)
    await asyncio.wait_for(fourth, 10)

    # Frames that left the GPU and are still being stored do not count against the GPU's share: two more polls.
    leave.set()
    for holder in holders:
        holder.join(10)
    assert gate.finishing == 2
    await asyncio.wait_for(supplier.reserve_slot(context), 10)
    sixth = asyncio.create_task(supplier.reserve_slot(context))
    assert await _blocked(sixth), "frames finishing count against the GPU's share"
    sixth.cancel()


# --- The activities and the worker -----------------------------------------------------------------------------------


@pytest.fixture
def held() -> Iterator[HeldStep]:
    """The step of the ``held`` pipeline (see :func:`_steps_with`)."""
    step = HeldStep()
    yield step
    step.release.release(100)


def _steps_with(step: HeldStep) -> StepRegistry:
    """The built-in steps and ``held``, which is ``step``."""
    steps = builtin_steps()
    steps.register(StepSpec("held", StepRole.COARSE, lambda variant, context: step))
    return steps


def _slots(store: FileArtifactStore, count: int, candidates: int = 1) -> list[MatteSlotInput]:
    """``count`` slots of ``candidates`` each for the ``held`` pipeline; the candidates are flat images of red value
    1, 2, 3 ... in order, over every slot."""
    slots = []
    for slot in range(count):
        sources, keys = [], []
        set_id = f"slot-{uuid.uuid4().hex}"
        for candidate in range(candidates):
            buffer = io.BytesIO()
            Image.new("RGB", (16, 16), (slot * candidates + candidate + 1, 0, 0)).save(buffer, format="PNG")
            sources.append(
                store.put(source_key(f"{candidate}.png", set_id), buffer.getvalue(), "image/png", width=16, height=16)
            )
            keys.append(matte_key(candidate, set_id=set_id))
        slots.append(MatteSlotInput(pipeline="held", candidates=sources, output_keys=keys))
    return slots


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class _GpuQueue:
    """A GPU of capacity 1 with prefetch 1: one slot of two candidates on it (the first held), one slot of two taken
    ahead waiting, one more slot of two to send."""

    matting: MattingActivities
    running: asyncio.Task[MatteSlotOutput]
    waiting_env: ActivityEnvironment
    waiting: asyncio.Task[MatteSlotOutput]
    spare: MatteSlotInput


@contextlib.asynccontextmanager
async def _one_on_the_gpu_one_waiting(held: HeldStep, tmp_path: Path) -> AsyncIterator[_GpuQueue]:
    store = FileArtifactStore(tmp_path)
    first, second, spare = _slots(store, 3, candidates=2)
    matting = MattingActivities(store, Pipelines(_steps_with(held)), capacity=1, prefetch=1)
    try:
        running = asyncio.create_task(ActivityEnvironment().run(matting.matte_slot, first))
        await _until(lambda: held.entered == [1], "the first slot on the GPU")
        waiting_env = ActivityEnvironment()
        waiting = asyncio.create_task(waiting_env.run(matting.matte_slot, second))
        await _until(lambda: matting.gate.waiting == 1, "the second slot waiting for the GPU")
        yield _GpuQueue(matting, running, waiting_env, waiting, spare)
    finally:
        matting.close()


async def test_a_slot_cancelled_before_its_gpu_turn_never_runs(held: HeldStep, tmp_path: Path) -> None:
    async with _one_on_the_gpu_one_waiting(held, tmp_path) as queue:
        queue.waiting_env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queue.waiting

        held.release.release(2)
        await queue.running
        # The GPU is free again: the next slot runs, and the cancelled one never did.
        later = asyncio.create_task(ActivityEnvironment().run(queue.matting.matte_slot, queue.spare))
        await _until(lambda: len(held.entered) == 3, "the third slot on the GPU")
        held.release.release(2)
        assert all(result.output is not None for result in (await later).results)
        assert held.entered == [1, 2, 5, 6]


async def test_a_slot_waiting_for_the_gpu_goes_back_to_the_queue_when_its_worker_stops(
    held: HeldStep, tmp_path: Path
) -> None:
    async with _one_on_the_gpu_one_waiting(held, tmp_path) as queue:
        queue.waiting_env.worker_shutdown()
        with pytest.raises(ApplicationError) as raised:
            await queue.waiting
        assert raised.value.type == "WorkerShutdown" and not raised.value.non_retryable
        # The slot already on the GPU finishes every candidate, and is reported as it left the GPU.
        held.release.release(2)
        assert len((await queue.running).results) == 2
        assert held.entered == [1, 2]
        assert queue.matting.gate.finishing == 0


@workflow.defn(sandboxed=False)
class FanOutMatting:
    """Mattes slots all at once on the GPU queue (this test's own workflow, so it needs no generation)."""

    @workflow.run
    async def run(self, requests: list[MatteSlotInput]) -> list[MatteSlotOutput]:
        return list(
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        ActivityName.MATTE_SLOT,
                        request,
                        task_queue=GPU_TASK_QUEUE,
                        result_type=MatteSlotOutput,
                        start_to_close_timeout=timedelta(minutes=1),
                    )
                    for request in requests
                )
            )
        )


@pytest.fixture(scope="module")
async def own_server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of this module's own: the session's stack has a GPU worker that would take these slots."""
    env = await start_throwaway_server()
    yield env
    await env.shutdown()


async def _started(client: Client, workflow_id: str) -> int:
    description = await client.get_workflow_handle(workflow_id).describe()
    return sum(
        activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for activity in description.raw_description.pending_activities
    )


@dataclass
class _Reservations:
    """The slots a supplier grants, and refuses while its GPU is full, each noted with the slots held at the time.

    The SDK reserves a slot before each poll, so a refusal is the worker asking for one more frame slot and not getting
    it.
    """

    granted: list[int] = field(default_factory=list)
    refused_while_full: list[int] = field(default_factory=list)

    @classmethod
    def observe(cls, supplier: PrefetchSlotSupplier, monkeypatch: pytest.MonkeyPatch) -> _Reservations:
        seen = cls()
        take = supplier._take

        def observed_take() -> SlotPermit | None:
            full = supplier._gate.full  # read first: while a slot stays on the GPU it stays full
            permit = take()
            if permit is not None:
                seen.granted.append(supplier._held)
            elif full:
                seen.refused_while_full.append(supplier._held)
            return permit

        monkeypatch.setattr(supplier, "_take", observed_take)
        return seen


@pytest.mark.parametrize("prefetch", [0, 1])
async def test_the_gpu_worker_takes_slots_ahead_only_while_its_gpu_is_full(
    own_server: WorkflowEnvironment, held: HeldStep, tmp_path: Path, prefetch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = own_server.client
    store = FileArtifactStore(tmp_path)
    settings = GpuWorkerSettings(_env_file=None, gpu_concurrency=1, gpu_prefetch=prefetch)
    gpu, matting = build_gpu_worker(client, settings, store, steps=_steps_with(held))
    reservations = _Reservations.observe(matting.slot_supplier, monkeypatch)
    probe_queue = f"slots-{uuid.uuid4().hex[:8]}"
    probe = Worker(client, task_queue=probe_queue, workflows=[FanOutMatting])
    try:
        async with gpu, probe:
            workflow_id = f"fan-out-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(
                FanOutMatting.run, _slots(store, 3, candidates=2), id=workflow_id, task_queue=probe_queue
            )
            await _until(lambda: len(held.entered) == 1, "the first slot on the GPU")
            # One slot on the GPU, and with prefetch one more taken ahead (read, decoded, waiting); no more. While
            # the slot stays on the GPU the limit cannot rise, so once the worker holds that many slots and is
            # refused the next it asks for, it can take no further slot: the third stays on the server.
            await _until(
                lambda: 1 + prefetch in reservations.refused_while_full,
                "the worker refused a slot while holding 1 + prefetch",
            )
            async with asyncio.timeout(10):
                while (started := await _started(client, workflow_id)) < 1 + prefetch:
                    await asyncio.sleep(0.05)
            assert started == 1 + prefetch and max(reservations.granted) == 1 + prefetch
            assert len(held.entered) == 1

            for count in range(1, 7):
                await _until(lambda count=count: len(held.entered) == count, f"candidate {count} on the GPU")
                held.release.release()
            outputs = await handle.result()
    finally:
        matting.close()
    assert [len(output.results) for output in outputs] == [2, 2, 2]
    assert all(result.output is not None for output in outputs for result in output.results)
    assert held.peak == 1
    assert sorted(held.entered) == [1, 2, 3, 4, 5, 6]
    assert held.entered[held.entered.index(1) + 1] == 2, "a slot's candidates run in its one turn, one after another"


@dataclass
class BatchStep:
    """A stand-in batchable GPU step that records the size of every batch."""

    device: str = "cpu"
    precision: str = "fp32"
    batch_sizes: list[int] = field(default_factory=list)

    def apply(self, state: MatteState) -> MatteState:
        return self.apply_batch([state])[0]

    def apply_batch(self, states: list[MatteState]) -> list[MatteState]:
        self.batch_sizes.append(len(states))
        return [MatteState(image=s.image, alpha=np.ones(s.image.shape[:2], dtype=np.float32)) for s in states]


async def test_the_gpu_worker_serves_a_slots_candidates_in_one_batch_even_with_one_slot_on_its_gpu(
    own_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = own_server.client
    store = FileArtifactStore(tmp_path)
    step = BatchStep()
    steps = builtin_steps()
    steps.register(StepSpec("batch", StepRole.COARSE, lambda variant, context: step))
    settings = GpuWorkerSettings(
        _env_file=None, gpu_concurrency=1, matting_max_batch=4, matting_batch_wait_ms=1000, matting_device="cpu"
    )
    gpu, matting = build_gpu_worker(client, settings, store, steps=steps)
    [slot] = _slots(store, 1, candidates=4)
    probe_queue = f"batch-{uuid.uuid4().hex[:8]}"
    try:
        async with gpu, Worker(client, task_queue=probe_queue, workflows=[FanOutMatting]):
            [output] = await client.execute_workflow(
                FanOutMatting.run,
                [slot.model_copy(update={"pipeline": "batch"})],
                id=f"batch-{uuid.uuid4().hex[:8]}",
                task_queue=probe_queue,
            )
    finally:
        matting.close()
    assert all(result.output is not None for result in output.results)
    assert step.batch_sizes == [4], "the slot's four candidates in one forward pass"
