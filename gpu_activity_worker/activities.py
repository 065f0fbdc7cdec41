"""GPU-queue activities with the in-process engines: check a matting pipeline, matte a frame slot's candidates, and
refine cut-outs with clicks (``refine_matte``, :mod:`gpu_activity_worker.refine`).

Matting runs on this worker's threads (one per activity slot) while the activity heartbeats every second, so
Temporal can cancel a matting activity and notices a lost GPU box within the heartbeat timeout. A ``matte_slot``
activity takes one GPU turn for all its candidates (:func:`matting.matte_slot`): at most ``capacity`` slots are on
the GPU at once, and the worker takes up to ``prefetch`` more while the GPU is full (:mod:`.slots`). Within a turn
the candidates run ``batch`` at a time (:class:`~gpu_activity_worker.batching.Lanes`), so a batchable step serves
them in one forward pass and a step that cannot batch takes them one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio import activity

from core.artifacts import ArtifactError, ArtifactStore
from gpu_activity_worker import matting
from gpu_activity_worker.batching import Lanes
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import Refiners, refine_matte
from gpu_activity_worker.slots import FrameCancelledError, GpuGate, PrefetchSlotSupplier
from gpu_activity_worker.temporal import stabilise_emoji
from gpu_activity_worker.vocabulary import MattingError
from workflows.contract import (
    ActivityName,
    DescribePipelineInput,
    FailureType,
    MatteSlotInput,
    MatteSlotOutput,
    PipelineDescription,
    RefineMatteInput,
    RefineMatteOutput,
    StabiliseEmojiInput,
    StabiliseEmojiOutput,
    TemporalMode,
)

T = TypeVar("T")
log = logging.getLogger(__name__)


def _started_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """A thread pool with all its threads running: the pool starts threads on demand, holding its lock while each
    one starts, which would stall a burst of slots arriving together."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
    everyone = threading.Barrier(threads)
    for started in [pool.submit(everyone.wait) for _ in range(threads)]:
        started.result()
    return pool


def _log_late_failure(job: Future[Any]) -> None:
    """Log what a slot's thread raised after its activity was cancelled: nothing else will report it."""
    if job.cancelled():
        return
    err = job.exception()
    if err is not None and not isinstance(err, FrameCancelledError):
        log.warning("matting failed after its activity was cancelled", exc_info=err)


@dataclass
class _GpuTurn:
    """One slot's turn on the GPU: whether it is called off, how long it waited, whether it got it and how long it
    held it (the set's ledger counts that, not the time spent reading, waiting or storing)."""

    gate: GpuGate
    cancelled: threading.Event = field(default_factory=threading.Event)
    waited_s: float = 0.0
    held_s: float = 0.0
    taken: bool = False

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        asked = time.perf_counter()
        with self.gate.slot(self.cancelled):
            got = time.perf_counter()
            self.waited_s = got - asked
            self.taken = True
            try:
                yield
            finally:
                self.held_s += time.perf_counter() - got


class MattingActivities:
    """Matting activities sharing the worker's pipelines (built once, with one device and weights folder) and its GPU.

    Args:
        store: Where sources are read and cut-outs stored.
        pipelines: The worker's pipelines.
        capacity: Frame slots on the GPU at once (each with all its candidates).
        prefetch: Slots taken ahead while the GPU is full; they wait, read and decoded, for a GPU slot.
        batch: Candidates of a slot run at once within its GPU turn: the ``max_batch`` of ``pipelines``' step
            context, so a batchable step serves them in one forward pass (a step that cannot batch takes them one
            at a time); 1 runs them one after another.
    """

    def __init__(
        self, store: ArtifactStore, pipelines: Pipelines, *, capacity: int, prefetch: int, batch: int = 1
    ) -> None:
        self._store = store
        self._pipelines = pipelines
        self._refiners = Refiners(pipelines)
        self.gate = GpuGate(capacity)
        """Slots on this worker's GPU, waiting for it and finishing after it."""
        self.slot_supplier = PrefetchSlotSupplier(self.gate, prefetch)
        """The worker's activity slots: pass it to the worker's tuner."""
        self._executor = _started_pool(self.slot_supplier.max_slots, "matting")
        # Each slot on the GPU runs one lane on its own thread and the others here.
        self._lane_pool = _started_pool(capacity * (batch - 1), "matting-lane") if batch > 1 else None
        self._lanes = Lanes(batch, self._lane_pool)
        # Stores and scores each cut-out while the slot's next candidates are on the GPU: one per slot on the GPU.
        self._finisher = _started_pool(capacity, "matting-store")

    async def _in_thread(self, work: Callable[[], T], turn: _GpuTurn | None = None) -> T:
        """Run blocking ``work`` on this worker's threads (the worker's :class:`~core.heartbeats.KeepBeating`
        heartbeats meanwhile).

        Failures become ApplicationErrors typed by :func:`matting.failure_type`. A slot that has not had its GPU
        ``turn`` yet gives it up when the activity is cancelled, and when the worker starts shutting down: it then
        fails as ``WorkerShutdown`` (retryable), so another worker takes it at once instead of this one finishing
        it during its shutdown. Work already on the GPU finishes; after a cancellation its result is discarded.
        """
        job = self._executor.submit(work)
        future = asyncio.wrap_future(job)
        shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown()) if turn else None
        try:
            if shutdown is not None and turn is not None:
                pending: list[asyncio.Future[Any]] = [future, shutdown]
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if not future.done():
                    self.gate.cancel(turn.cancelled)
            return await future
        except asyncio.CancelledError:
            if turn is not None:
                self.gate.cancel(turn.cancelled)
            if not future.cancel() and not future.cancelled():
                future.exception()  # finished just now; _log_late_failure reports an error
            job.add_done_callback(_log_late_failure)
            raise
        except FrameCancelledError as err:
            raise FailureType.WORKER_SHUTDOWN.error(
                "this GPU worker is shutting down before the slot's turn on the GPU"
            ) from err
        except (MattingError, ArtifactError) as err:
            raise matting.failure_type(err).error(str(err)) from err
        finally:
            if shutdown is not None:
                shutdown.cancel()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._lane_pool is not None:
            self._lane_pool.shutdown(wait=False, cancel_futures=True)
        self._finisher.shutdown(wait=False, cancel_futures=True)

    @activity.defn(name=ActivityName.DESCRIBE_PIPELINE)
    async def describe_pipeline(self, request: DescribePipelineInput) -> PipelineDescription:
        """Build the pipeline (loading its weights) and say where it runs; ``UnknownPipeline`` if it cannot exist."""
        return await self._in_thread(lambda: matting.describe(request, self._pipelines))

    @activity.defn(name=ActivityName.MATTE_SLOT)
    async def matte_slot(self, request: MatteSlotInput) -> MatteSlotOutput:
        """Cut out every candidate of one frame slot in one GPU turn, store and score each (:func:`matting.matte_slot`).

        A candidate whose failure no retry can fix gets it as its own result; a failure a retry may fix (e.g. an
        ``ArtifactError``) fails the activity, so Temporal retries the whole slot.
        """
        started = time.perf_counter()
        turn = _GpuTurn(self.gate)
        try:
            output = await self._in_thread(
                lambda: matting.matte_slot(
                    request, self._store, self._pipelines, turn.hold(), self._lanes, self._finisher
                ),
                turn,
            )
        finally:
            if turn.taken:
                self.gate.reported()
        activity.logger.info(
            "matted slot",
            extra={
                "pipeline": request.pipeline,
                "candidates": len(request.candidates),
                "failed": sum(result.output is None for result in output.results),
                "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
                "gpu_wait_ms": round(turn.waited_s * 1000, 1),
            },
        )
        return output.model_copy(update={"gpu_seconds": round(turn.held_s, 4)})

    @activity.defn(name=ActivityName.REFINE_MATTE)
    async def refine_matte(self, request: RefineMatteInput) -> RefineMatteOutput:
        """Erase or restore the region segmented from clicks in cut-outs, store and score each new version
        (:func:`gpu_activity_worker.refine.refine_matte`). A segmenter with a model (``sam2``) takes a GPU turn; the
        weight-free ``clicks`` does not wait for one."""
        started = time.perf_counter()
        turn = _GpuTurn(self.gate)
        try:
            output = await self._in_thread(
                lambda: refine_matte(request, self._store, self._refiners, turn.hold()), turn
            )
        finally:
            if turn.taken:
                self.gate.reported()
        activity.logger.info(
            "refined mattes",
            extra={
                "refiner": output.refiner,
                "frames": len(request.frames),
                "mode": request.mode.value,
                "points": len(request.points),
                "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        return output.model_copy(update={"gpu_seconds": round(turn.held_s, 4)})

    @activity.defn(name=ActivityName.STABILISE_EMOJI)
    async def stabilise_emoji(self, request: StabiliseEmojiInput) -> StabiliseEmojiOutput:
        """Make an emoji's picked cut-outs consistent with each other and store them
        (:func:`gpu_activity_worker.temporal.stabilise_emoji`). ``sam2`` takes a GPU turn to track the subject; the
        weight-free ``stabilise`` does not wait for one."""
        turn = _GpuTurn(self.gate) if request.mode is TemporalMode.SAM2 else None
        try:
            output = await self._in_thread(
                lambda: stabilise_emoji(request, self._store, self._pipelines, turn.hold() if turn else None), turn
            )
        finally:
            if turn is not None and turn.taken:
                self.gate.reported()
        activity.logger.info(
            "stabilised emoji",
            extra={
                "mode": request.mode.value,
                "frames": len(request.mattes),
                "changed_pixels": output.changed_pixels,
                "elapsed_ms": round(output.elapsed_ms, 1),
            },
        )
        return output.model_copy(update={"gpu_seconds": round(turn.held_s, 4) if turn is not None else 0.0})
