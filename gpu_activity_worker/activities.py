"""GPU-queue activities with the in-process engines: check a matting pipeline, and matte one frame candidate.

Matting runs on this worker's threads (one per activity slot) while the activity heartbeats, so Temporal can
cancel a matting activity and notices a lost GPU box within the heartbeat timeout. At most ``capacity`` frames run
their pipeline at once; the worker takes up to ``prefetch`` more while the GPU is full (:mod:`.slots`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactError, ArtifactStore
from gpu_activity_worker import matting
from gpu_activity_worker.engines.base import MattingError, StepContext
from gpu_activity_worker.slots import GpuGate, PrefetchSlotSupplier
from workflows.contract import DescribePipelineInput, MatteFrameInput, MatteFrameOutput, PipelineDescription

T = TypeVar("T")
HEARTBEAT_EVERY_S = 5.0


def _started_pool(threads: int) -> ThreadPoolExecutor:
    """A thread pool with all its threads running: the pool starts threads on demand, holding its lock while each
    one starts, which would stall a burst of frames arriving together."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="matting")
    everyone = threading.Barrier(threads)
    for started in [pool.submit(everyone.wait) for _ in range(threads)]:
        started.result()
    return pool


class MattingActivities:
    """Matting activities sharing one step context (device, weights folder), the pipelines built from it and the GPU.

    Args:
        store: Where sources are read and cut-outs stored.
        context: Device and weights folder of the pipelines' steps.
        capacity: Frames on the GPU at once.
        prefetch: Frames taken ahead while the GPU is full; they wait, read and decoded, for a GPU slot.
    """

    def __init__(self, store: ArtifactStore, context: StepContext, *, capacity: int, prefetch: int = 0) -> None:
        self._store = store
        self._context = context
        self._gate = GpuGate(capacity)
        self.slot_supplier = PrefetchSlotSupplier(self._gate, prefetch)
        """The worker's activity slots: pass it to the worker's tuner."""
        self._executor = _started_pool(self.slot_supplier.max_slots)

    async def _in_thread(self, work: Callable[[], T], cancelled: threading.Event | None = None) -> T:
        """Run blocking ``work`` on this worker's threads, heartbeating until it returns; failures become
        ApplicationErrors typed by :func:`matting.failure_type`. On cancellation, work not yet on the GPU is
        dropped (``cancelled`` is set); work already running finishes and its result is discarded."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, work)
        try:
            while True:
                done, _ = await asyncio.wait([future], timeout=HEARTBEAT_EVERY_S)
                if done:
                    return future.result()
                activity.heartbeat()
        except asyncio.CancelledError:
            future.cancel()
            if cancelled is not None:
                self._gate.cancel(cancelled)
            raise
        except (MattingError, ArtifactError) as err:
            kind, retryable = matting.failure_type(err)
            raise ApplicationError(str(err), type=kind, non_retryable=not retryable) from err

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    @activity.defn(name="describe_pipeline")
    async def describe_pipeline(self, request: DescribePipelineInput) -> PipelineDescription:
        """Build the pipeline (loading its weights) and say where it runs; ``UnknownPipeline`` if it cannot exist."""
        return await self._in_thread(lambda: matting.describe(request, self._context))

    @activity.defn(name="matte_frame")
    async def matte_frame(self, request: MatteFrameInput) -> MatteFrameOutput:
        """Cut one candidate out of its background, store the RGBA PNG and score it for the auto-pick."""
        cancelled = threading.Event()
        output = await self._in_thread(
            lambda: matting.matte(request, self._store, self._context, self._gate.slot(cancelled)), cancelled
        )
        activity.logger.info(
            "matted",
            extra={
                "pipeline": output.pipeline,
                "device": output.device,
                "elapsed_ms": round(output.elapsed_ms, 1),
                "gpu_wait_ms": round(output.gpu_wait_ms, 1),
            },
        )
        return output
