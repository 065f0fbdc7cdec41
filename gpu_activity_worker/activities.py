"""GPU-queue activities: check a matting pipeline, and matte one frame candidate.

Inference runs in a worker thread while the activity heartbeats, so Temporal can cancel a matting activity and
notices a lost GPU box within the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
from PIL import Image, UnidentifiedImageError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.artifacts import ArtifactStore
from gpu_activity_worker.engines.base import MatteResult, PipelineError, StepContext, UnsupportedImageError
from gpu_activity_worker.pipeline import MattingPipeline, build_pipeline
from gpu_activity_worker.scoring import score_matte
from workflows.contract import (
    ArtifactRef,
    DescribePipelineInput,
    MatteFrameInput,
    MatteFrameOutput,
    PipelineDescription,
)

T = TypeVar("T")
HEARTBEAT_EVERY_S = 5.0


class MattingActivities:
    """Matting activities sharing one step context (device, weights folder) and the pipelines built from it."""

    def __init__(self, store: ArtifactStore, context: StepContext, *, concurrency: int) -> None:
        self._store = store
        self._context = context
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="matting")

    async def _in_thread(self, work: Callable[[], T]) -> T:
        """Run blocking ``work`` on this worker's threads (one per activity slot), heartbeating until it returns."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, work)
        while True:
            done, _ = await asyncio.wait([future], timeout=HEARTBEAT_EVERY_S)
            if done:
                return future.result()
            activity.heartbeat()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _pipeline(self, name: str) -> MattingPipeline:
        try:
            return build_pipeline(name, self._context)
        except PipelineError as err:
            raise ApplicationError(str(err), type="UnknownPipeline", non_retryable=True) from err

    @activity.defn(name="describe_pipeline")
    async def describe_pipeline(self, request: DescribePipelineInput) -> PipelineDescription:
        """Build the pipeline (loading its weights) and say where it runs; ``UnknownPipeline`` if it cannot exist."""
        pipeline = await self._in_thread(lambda: self._pipeline(request.pipeline))
        return PipelineDescription(
            pipeline=request.pipeline,
            steps=pipeline.step_names,
            device=pipeline.device,
            precision=pipeline.precision,
        )

    @activity.defn(name="matte_frame")
    async def matte_frame(self, request: MatteFrameInput) -> MatteFrameOutput:
        """Cut one candidate out of its background, store the RGBA PNG and score it for the auto-pick."""
        started = time.perf_counter()
        matte, result, (score, parts) = await self._in_thread(lambda: self._matte(request))
        elapsed_ms = (time.perf_counter() - started) * 1000
        activity.logger.info(
            "matted", extra={"pipeline": request.pipeline, "device": result.device, "elapsed_ms": round(elapsed_ms, 1)}
        )
        return MatteFrameOutput(
            matte=matte,
            score=score,
            score_parts=parts,
            pipeline=request.pipeline,
            device=result.device,
            precision=result.precision,
            elapsed_ms=elapsed_ms,
        )

    def _matte(self, request: MatteFrameInput) -> tuple[ArtifactRef, MatteResult, tuple[float, dict[str, float]]]:
        pipeline = self._pipeline(request.pipeline)
        rgb = _decode_rgb(self._store.get(request.source), request.source.uri)
        try:
            result = pipeline.run(rgb)
        except UnsupportedImageError as err:
            raise ApplicationError(str(err), type="UnsupportedImage", non_retryable=True) from err
        height, width = result.alpha.shape
        matte = self._store.put(request.output_key, _encode_png(result.rgba), "image/png", width=width, height=height)
        return matte, result, score_matte(result.alpha)


def _decode_rgb(data: bytes, uri: str) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise ApplicationError(f"{uri}: not a readable image ({err})", type="CorruptImage", non_retryable=True) from err


def _encode_png(rgba: np.ndarray) -> bytes:
    """Fast PNG: a matte is an intermediate (the exports re-encode it), so GPU-box CPU matters more than bytes."""
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
