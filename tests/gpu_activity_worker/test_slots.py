"""GPU slots: the gate that keeps at most ``capacity`` frames on the GPU, and the prefetching slot supplier."""

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
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.slots import FrameCancelledError, GpuGate, PrefetchSlotSupplier
from gpu_activity_worker.worker import build_gpu_worker
from testkit.servers import start_throwaway_server
from workflows.contract import GPU_TASK_QUEUE, MatteFrameInput, MatteFrameOutput

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


@dataclass
class HeldStep:
    """A stand-in GPU step that runs until the test lets it go, recording which frames ran (by their colour)."""

    device: str = "cpu"
    precision: str = "fp32"
    entered: list[int] = field(default_factory=list)
    running: int = 0
    peak: int = 0
    release: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, state: MatteState) -> MatteState:
        with self.lock:
            self.entered.append(round(float(state.image[0, 0, 0]) * 255))
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            assert self.release.acquire(timeout=30), "the test never let this frame go"
        finally:
            with self.lock:
                self.running -= 1
        return MatteState(image=state.image, alpha=np.ones(state.image.shape[:2], dtype=np.float32))


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


def _frames(store: FileArtifactStore, count: int) -> list[MatteFrameInput]:
    """``count`` frame requests for the ``held`` pipeline; frame i is a flat image of red value i + 1."""
    requests = []
    for index in range(count):
        buffer = io.BytesIO()
        Image.new("RGB", (16, 16), (index + 1, 0, 0)).save(buffer, format="PNG")
        source = store.put(f"slots/{uuid.uuid4().hex}.png", buffer.getvalue(), "image/png", width=16, height=16)
        requests.append(MatteFrameInput(source=source, output_key=f"slots/out-{uuid.uuid4().hex}.png", pipeline="held"))
    return requests


async def _until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class _GpuQueue:
    """A GPU of capacity 1 with prefetch 1: one frame on it (held), one taken ahead waiting, one more to send."""

    matting: MattingActivities
    running: asyncio.Task[MatteFrameOutput]
    waiting_env: ActivityEnvironment
    waiting: asyncio.Task[MatteFrameOutput]
    spare: MatteFrameInput


@contextlib.asynccontextmanager
async def _one_on_the_gpu_one_waiting(held: HeldStep, tmp_path: Path) -> AsyncIterator[_GpuQueue]:
    store = FileArtifactStore(tmp_path)
    first, second, spare = _frames(store, 3)
    matting = MattingActivities(store, Pipelines(_steps_with(held)), capacity=1, prefetch=1)
    try:
        running = asyncio.create_task(ActivityEnvironment().run(matting.matte_frame, first))
        await _until(lambda: held.entered == [1], "the first frame on the GPU")
        waiting_env = ActivityEnvironment()
        waiting = asyncio.create_task(waiting_env.run(matting.matte_frame, second))
        await _until(lambda: matting.gate.waiting == 1, "the second frame waiting for the GPU")
        yield _GpuQueue(matting, running, waiting_env, waiting, spare)
    finally:
        matting.close()


async def test_a_frame_cancelled_before_its_gpu_turn_never_runs(held: HeldStep, tmp_path: Path) -> None:
    async with _one_on_the_gpu_one_waiting(held, tmp_path) as queue:
        queue.waiting_env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queue.waiting

        held.release.release()
        await queue.running
        # The GPU is free again: the next frame runs, and the cancelled one never did.
        later = asyncio.create_task(ActivityEnvironment().run(queue.matting.matte_frame, queue.spare))
        await _until(lambda: len(held.entered) == 2, "the third frame on the GPU")
        held.release.release()
        await later
        assert held.entered == [1, 3]


async def test_a_frame_waiting_for_the_gpu_goes_back_to_the_queue_when_its_worker_stops(
    held: HeldStep, tmp_path: Path
) -> None:
    async with _one_on_the_gpu_one_waiting(held, tmp_path) as queue:
        queue.waiting_env.worker_shutdown()
        with pytest.raises(ApplicationError) as raised:
            await queue.waiting
        assert raised.value.type == "WorkerShutdown" and not raised.value.non_retryable
        # The frame already on the GPU finishes, and is reported as it left the GPU.
        held.release.release()
        await queue.running
        assert held.entered == [1]
        assert queue.matting.gate.finishing == 0


@workflow.defn(sandboxed=False)
class FanOutMatting:
    """Mattes frames all at once on the GPU queue (this test's own workflow, so it needs no generation)."""

    @workflow.run
    async def run(self, requests: list[MatteFrameInput]) -> list[MatteFrameOutput]:
        return list(
            await asyncio.gather(
                *(
                    workflow.execute_activity(
                        "matte_frame",
                        request,
                        task_queue=GPU_TASK_QUEUE,
                        result_type=MatteFrameOutput,
                        start_to_close_timeout=timedelta(minutes=1),
                    )
                    for request in requests
                )
            )
        )


@pytest.fixture(scope="module")
async def own_server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of this module's own: the session's stack has a GPU worker that would take these frames."""
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

    The SDK reserves a slot before each poll, so a refusal is the worker asking for one more frame and not getting it.
    """

    granted: list[int] = field(default_factory=list)
    refused_while_full: list[int] = field(default_factory=list)

    @classmethod
    def observe(cls, supplier: PrefetchSlotSupplier, monkeypatch: pytest.MonkeyPatch) -> _Reservations:
        seen = cls()
        take = supplier._take

        def observed_take() -> SlotPermit | None:
            full = supplier._gate.full  # read first: while a frame stays on the GPU it stays full
            permit = take()
            if permit is not None:
                seen.granted.append(supplier._held)
            elif full:
                seen.refused_while_full.append(supplier._held)
            return permit

        monkeypatch.setattr(supplier, "_take", observed_take)
        return seen


@pytest.mark.parametrize("prefetch", [0, 1])
async def test_the_gpu_worker_takes_frames_ahead_only_while_its_gpu_is_full(
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
                FanOutMatting.run, _frames(store, 3), id=workflow_id, task_queue=probe_queue
            )
            await _until(lambda: len(held.entered) == 1, "the first frame on the GPU")
            # One frame on the GPU, and with prefetch one more taken ahead (read, decoded, waiting); no more. While
            # the frame stays on the GPU the limit cannot rise, so once the worker holds that many slots and is
            # refused the next it asks for, it can take no further frame: the third stays on the server.
            await _until(
                lambda: 1 + prefetch in reservations.refused_while_full,
                "the worker refused a slot while holding 1 + prefetch",
            )
            async with asyncio.timeout(10):
                while (started := await _started(client, workflow_id)) < 1 + prefetch:
                    await asyncio.sleep(0.05)
            assert started == 1 + prefetch and max(reservations.granted) == 1 + prefetch
            assert len(held.entered) == 1

            for count in range(1, 4):
                await _until(lambda count=count: len(held.entered) == count, f"frame {count} on the GPU")
                held.release.release()
            assert len(await handle.result()) == 3
    finally:
        matting.close()
    assert held.peak == 1
    assert sorted(held.entered) == [1, 2, 3]
