"""GPU-queue activities with the in-process engines: check a matting pipeline, and matte one frame candidate.

Inference runs on this worker's threads (one per activity slot) while the activity heartbeats, so Temporal can
cancel a matting activity and notices a lost GPU box within the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactError, ArtifactStore
from gpu_activity_worker import matting
from gpu_activity_worker.engines.base import MattingError, StepContext
from workflows.contract import DescribePipelineInput, MatteFrameInput, MatteFrameOutput, PipelineDescription

T = TypeVar("T")
HEARTBEAT_EVERY_S = 5.0


class MattingActivities:
    """Matting activities sharing one step context (device, weights folder) and the pipelines built from it."""

    def __init__(self, store: ArtifactStore, context: StepContext, *, concurrency: int) -> None:
        self._store = store
        self._context = context
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="matting")

    async def _in_thread(self, work: Callable[[], T]) -> T:
        """Run blocking ``work`` on this worker's threads, heartbeating until it returns; failures become
        ApplicationErrors typed by :func:`matting.failure_type`."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, work)
        try:
            while True:
                done, _ = await asyncio.wait([future], timeout=HEARTBEAT_EVERY_S)
                if done:
                    return future.result()
                activity.heartbeat()
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
        output = await self._in_thread(lambda: matting.matte(request, self._store, self._context))
        activity.logger.info(
            "matted",
            extra={"pipeline": output.pipeline, "device": output.device, "elapsed_ms": round(output.elapsed_ms, 1)},
        )
        return output
