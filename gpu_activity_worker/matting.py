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

from activities.artifacts import ArtifactError, ArtifactStore
from gpu_activity_worker.engines.base import MattingError, PipelineError, StepContext, UnsupportedImageError
from gpu_activity_worker.pipeline import MattingPipeline, build_pipeline
from gpu_activity_worker.scoring import score_matte
from gpu_activity_worker.weights import WeightsMissingError
from workflows.contract import DescribePipelineInput, MatteFrameInput, MatteFrameOutput, PipelineDescription

NON_RETRYABLE_TYPES = ("UnknownPipeline", "UnsupportedImage", "CorruptImage", "WeightsMissing")
"""Failure types a retry cannot fix; the workflow's retry policy lists the same names."""


class CorruptImageError(MattingError):
    """The source bytes are not a readable image."""


def failure_type(err: BaseException) -> tuple[str, bool]:
    """(type name, retryable) of a matting failure, for Temporal's ApplicationError and RunPod's error string."""
    for cls, name in (
        (PipelineError, "UnknownPipeline"),
        (UnsupportedImageError, "UnsupportedImage"),
        (CorruptImageError, "CorruptImage"),
        (WeightsMissingError, "WeightsMissing"),
        (ArtifactError, "ArtifactError"),
    ):
        if isinstance(err, cls):
            return name, name not in NON_RETRYABLE_TYPES
    return type(err).__name__, True


def describe(request: DescribePipelineInput, context: StepContext) -> PipelineDescription:
    """Build the pipeline (loading its weights) and say where it runs."""
    pipeline = build_pipeline(request.pipeline, context)
    return PipelineDescription(
        pipeline=request.pipeline, steps=pipeline.step_names, device=pipeline.device, precision=pipeline.precision
    )


def matte(
    request: MatteFrameInput,
    store: ArtifactStore,
    context: StepContext,
    gpu_slot: contextlib.AbstractContextManager[object] | None = None,
) -> MatteFrameOutput:
    """Cut one candidate out of its background, store the RGBA PNG and score it. Blocking: run it in a thread.

    Args:
        request: The candidate, the pipeline, and where to store the cut-out.
        store: The artifact store holding the source and receiving the cut-out.
        context: Device and weights folder of the pipeline's steps.
        gpu_slot: Held while the pipeline's steps run (see :class:`gpu_activity_worker.slots.GpuGate`); reading,
            decoding and converting happen before, converting, storing and scoring after, so they overlap other
            frames' GPU time.
    """
    started = time.perf_counter()
    pipeline: MattingPipeline = build_pipeline(request.pipeline, context)
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
