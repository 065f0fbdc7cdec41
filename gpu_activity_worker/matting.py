"""Matting one frame candidate, the same way wherever it runs: a Temporal activity or the RunPod handler.

Read the source from the artifact store, run the named pipeline, store the RGBA cut-out under the deterministic key,
score it for the auto-pick. Errors are sorted into those that a retry can fix and those it cannot
(:func:`failure_type`), so every entry point reports them alike.
"""

from __future__ import annotations

import contextlib
import io
import time

import numpy as np
from PIL import Image, UnidentifiedImageError

from core.artifacts import ArtifactError, ArtifactStore
from gpu_activity_worker.engines.base import CorruptImageError, MattingError
from gpu_activity_worker.pipeline import MattingPipeline, Pipelines
from gpu_activity_worker.scoring import score_matte
from workflows.contract import (
    DescribePipelineInput,
    FailureType,
    MatteFrameInput,
    MatteFrameOutput,
    PipelineDescription,
)


def failure_type(err: BaseException) -> FailureType:
    """How a matting failure is reported, for Temporal's ApplicationError and RunPod's error string: the error's own
    type for ours, ``MattingError`` (retryable) for anything unforeseen."""
    if isinstance(err, MattingError | ArtifactError):
        return err.failure_type
    return FailureType.MATTING_FAILED


def describe(request: DescribePipelineInput, pipelines: Pipelines) -> PipelineDescription:
    """Build the pipeline (loading its weights) and say where it runs."""
    pipeline = pipelines.build(request.pipeline)
    return PipelineDescription(
        pipeline=request.pipeline, steps=pipeline.step_names, device=pipeline.device, precision=pipeline.precision
    )


def matte(
    request: MatteFrameInput,
    store: ArtifactStore,
    pipelines: Pipelines,
    gpu_slot: contextlib.AbstractContextManager[object] | None = None,
) -> MatteFrameOutput:
    """Cut one candidate out of its background, store the RGBA PNG and score it. Blocking: run it in a thread.

    Args:
        request: The candidate, the pipeline, and where to store the cut-out.
        store: The artifact store holding the source and receiving the cut-out.
        pipelines: The worker's pipelines; the request's is built on first use.
        gpu_slot: Held while the pipeline's steps run (see :class:`gpu_activity_worker.slots.GpuGate`); reading,
            decoding and converting happen before, converting, storing and scoring after, so they overlap other
            frames' GPU time.
    """
    started = time.perf_counter()
    pipeline: MattingPipeline = pipelines.build(request.pipeline)
    rgb = decode_rgb(store.get(request.source), request.source.uri)
    result = pipeline.run(rgb, gpu_slot)
    height, width = result.alpha.shape
    stored = store.put(request.output_key, encode_png(result.rgba), "image/png", width=width, height=height)
    score, parts = score_matte(result.alpha)
    return MatteFrameOutput(
        matte=stored,
        score=score,
        score_parts=parts,
        pipeline=request.pipeline,
        device=result.device,
        precision=result.precision,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )


def decode_rgb(data: bytes, uri: str) -> np.ndarray:
    """uint8 HxWx3 from PNG/JPEG/WebP bytes; :class:`CorruptImageError` when they are not an image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise CorruptImageError(f"{uri}: not a readable image ({err})") from err


def encode_png(rgba: np.ndarray) -> bytes:
    """Fast PNG: a matte is an intermediate (the exports re-encode it), so GPU-box CPU matters more than bytes."""
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
