"""Matting frame candidates, the same way wherever they run: a Temporal activity or the RunPod handler.

Read each source from the artifact store, run the named pipeline, store the RGBA cut-out under its deterministic key,
score it for the auto-pick. :func:`matte` does one candidate (a RunPod job); :func:`matte_slot` every candidate of a
frame slot in one turn on the GPU (the GPU worker's ``matte_slot`` activity). Errors are sorted into those that a
retry can fix and those it cannot (:func:`failure_type`), so every entry point reports them alike.

A slot records each finished candidate's result beside its cut-out (``<output key>.result.json``). A retried slot
(its worker was lost, or the server was away when it finished and timed it out) takes those results back instead of
matting them again: a finished frame is never redone.
"""

from __future__ import annotations

import contextlib
import io
import time
from concurrent import futures
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ValidationError

from core.artifacts import ArtifactError, ArtifactStore, get_in_set
from gpu_activity_worker.batching import Lanes
from gpu_activity_worker.pipeline import MatteResult, MattingPipeline, Pipelines
from gpu_activity_worker.scoring import score_matte
from gpu_activity_worker.vocabulary import CorruptImageError, MattingError
from workflows.contract import (
    DescribePipelineInput,
    FailureType,
    MatteCandidateResult,
    MatteFrameInput,
    MatteFrameOutput,
    MatteSlotInput,
    MatteSlotOutput,
    PipelineDescription,
    TemporalMode,
)

SAM2_STEP = "sam2"
"""The step whose model tracks the subject for ``temporal = sam2``."""

RECORD_SUFFIX = ".result.json"


class _Record(BaseModel):
    """A finished candidate's result as its slot recorded it (``elapsed_ms`` 0, so the record's bytes are the same
    on every run)."""

    source_sha256: str
    output: MatteFrameOutput


def failure_type(err: BaseException) -> FailureType:
    """How a matting failure is reported, for Temporal's ApplicationError and RunPod's error string: the error's own
    type for ours, ``MattingError`` (retryable) for anything unforeseen."""
    if isinstance(err, MattingError | ArtifactError):
        return err.failure_type
    return FailureType.MATTING_FAILED


def describe(request: DescribePipelineInput, pipelines: Pipelines) -> PipelineDescription:
    """Build the pipeline (loading its weights), and SAM 2 for ``temporal = sam2``, and say where it runs."""
    pipeline = pipelines.build(request.pipeline)
    steps = pipeline.step_names
    if request.temporal is TemporalMode.SAM2:
        pipelines.step(SAM2_STEP)
        steps = [*steps, f"temporal:{SAM2_STEP}"]
    elif request.temporal is not TemporalMode.NONE:
        steps = [*steps, f"temporal:{request.temporal.value}"]
    return PipelineDescription(
        pipeline=request.pipeline, steps=steps, device=pipeline.device, precision=pipeline.precision
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
    rgb = decode_rgb(get_in_set(store, request.source, request.output_key), request.source.uri)
    result = pipeline.run(rgb, gpu_slot)
    return _stored(request, result, store, time.perf_counter() - started)


@dataclass
class _Candidate:
    """One candidate of a slot on its way through :func:`matte_slot`: its image, then its cut-out or its failure."""

    request: MatteFrameInput
    rgb: np.ndarray | None = None
    cutout: MatteResult | None = None
    result: MatteCandidateResult | None = None
    busy_s: float = 0.0
    """Time spent on this candidate alone (reading, decoding, its pipeline run, storing, scoring)."""


def matte_slot(
    request: MatteSlotInput,
    store: ArtifactStore,
    pipelines: Pipelines,
    gpu_slot: contextlib.AbstractContextManager[object] | None = None,
    lanes: Lanes | None = None,
    finisher: Executor | None = None,
) -> MatteSlotOutput:
    """Cut every candidate of a frame slot out of its background in one GPU turn, store and score each. Blocking.

    Every source is read and decoded first, then ``gpu_slot`` is taken once for the whole slot and the pipeline runs
    over the decoded candidates on ``lanes`` (side by side, so a batchable step serves them in one forward pass; see
    :mod:`gpu_activity_worker.batching`), then each cut-out is stored under its key and scored after the GPU.

    A failure that no retry can fix (a corrupt or unsupported image, an unknown pipeline, missing weights) is that
    candidate's own result and the others go on. A failure a retry may fix (an :class:`ArtifactError`: a shared
    store showing a fresh write late; a ``MattingError`` or anything unforeseen, e.g. the GPU out of memory) is
    raised for the whole slot, as soon as it happens: the workflow takes every result as final, so the activity fails
    and Temporal retries it; the keys are deterministic, so the cut-outs an earlier attempt stored are overwritten.
    A slot whose every candidate failed before the GPU never takes a turn.

    Args:
        request: The pipeline, the candidates and their output keys.
        store: The artifact store holding the sources and receiving the cut-outs.
        pipelines: The worker's pipelines; the request's is built on first use.
        gpu_slot: Held while the candidates' pipelines run (see :class:`gpu_activity_worker.slots.GpuGate`).
        lanes: How many candidates run at once within the turn; ``None`` runs them one after another.
        finisher: Where a cut-out is stored and scored as soon as its pipeline run ends, while the slot's next
            candidates are still on the GPU; ``None`` stores and scores them all after the turn. (With many slots on
            the GPU at once, storing and scoring after each turn would queue every slot's CPU work behind the GPU.)

    Returns:
        One result per candidate, in the order of the request's candidates.

    Raises:
        ArtifactError: A source is missing or does not match its reference, or a cut-out could not be stored.
        MattingError: A matting failure a retry may fix (its ``failure_type`` is retryable); an unforeseen error is
            raised as it is.
    """
    candidates = [_Candidate(frame) for frame in request.frames()]
    try:
        pipeline = pipelines.build(request.pipeline)
    except MattingError as err:
        verdict = _own_failure(err)
        return MatteSlotOutput(results=[verdict] * len(candidates))
    for candidate in candidates:
        _reuse(candidate, store)
        if candidate.result is None:
            _decode(candidate, store)
    decoded = [candidate for candidate in candidates if candidate.result is None]
    finishing: dict[int, Future[MatteFrameOutput]] = {}

    def run(candidate: _Candidate) -> MatteResult:
        cutout = _run(pipeline, candidate)
        if finisher is not None:
            finishing[id(candidate)] = finisher.submit(_finish, candidate.request, cutout, store, candidate.busy_s)
        return cutout

    try:
        if decoded:
            with gpu_slot or contextlib.nullcontext():
                outcomes = (lanes or Lanes()).map(run, decoded)
            for candidate, outcome in zip(decoded, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    candidate.result = _own_failure(outcome)
                else:
                    candidate.cutout = outcome
        results = []
        for candidate in candidates:
            if candidate.cutout is not None:
                finished = finishing.pop(id(candidate), None)
                output = (
                    finished.result()
                    if finished is not None
                    else _finish(candidate.request, candidate.cutout, store, candidate.busy_s)
                )
                candidate.result = MatteCandidateResult(output=output)
            assert candidate.result is not None  # every candidate is failed or matted by now
            results.append(candidate.result)
    finally:
        # A failure left these behind: let them end, so the retry takes their recorded results back.
        futures.wait(finishing.values())
    return MatteSlotOutput(results=results)


def _own_failure(err: Exception) -> MatteCandidateResult:
    """A candidate's failure as its own result when no retry can fix it; otherwise ``err`` is raised again."""
    kind = failure_type(err)
    if kind.retryable:
        raise err
    return MatteCandidateResult(failure=kind, error=str(err))


def _record_key(request: MatteFrameInput) -> str:
    return request.output_key + RECORD_SUFFIX


def _reuse(candidate: _Candidate, store: ArtifactStore) -> None:
    """Take the result an earlier attempt recorded for this candidate: same pipeline, same source, its cut-out
    intact. Anything else (no record, unreadable, stale, the cut-out gone) leaves the candidate to be matted."""
    started = time.perf_counter()
    request = candidate.request
    try:
        data = store.find(_record_key(request))
        if data is None:
            return
        record = _Record.model_validate_json(data)
        if record.output.pipeline != request.pipeline or record.source_sha256 != request.source.sha256:
            return
        store.get(record.output.matte)
    except (ArtifactError, ValidationError):
        return
    elapsed_ms = (time.perf_counter() - started) * 1000
    candidate.result = MatteCandidateResult(output=record.output.model_copy(update={"elapsed_ms": elapsed_ms}))


def _finish(request: MatteFrameInput, cutout: MatteResult, store: ArtifactStore, busy_s: float) -> MatteFrameOutput:
    """Store and score a slot's cut-out (:func:`_stored`), then record its result for a retry (:func:`_reuse`)."""
    output = _stored(request, cutout, store, busy_s)
    record = _Record(source_sha256=request.source.sha256, output=output.model_copy(update={"elapsed_ms": 0.0}))
    store.put(_record_key(request), record.model_dump_json().encode(), "application/json")
    return output


def _decode(candidate: _Candidate, store: ArtifactStore) -> None:
    """Read and decode a candidate's source; a corrupt one gets its failure as its result."""
    started = time.perf_counter()
    source = candidate.request.source
    try:
        candidate.rgb = decode_rgb(get_in_set(store, source, candidate.request.output_key), source.uri)
    except (CorruptImageError, ArtifactError) as err:  # a foreign reference is its own; a missing one is raised
        candidate.result = _own_failure(err)
    candidate.busy_s += time.perf_counter() - started


def _run(pipeline: MattingPipeline, candidate: _Candidate) -> MatteResult:
    """The pipeline's cut-out of a decoded candidate (on a lane, within the slot's GPU turn)."""
    assert candidate.rgb is not None  # only decoded candidates run
    started = time.perf_counter()
    try:
        return pipeline.run(candidate.rgb)
    finally:
        candidate.busy_s += time.perf_counter() - started


def _stored(request: MatteFrameInput, result: MatteResult, store: ArtifactStore, busy_s: float) -> MatteFrameOutput:
    """Store a cut-out under its key and score it; ``elapsed_ms`` is ``busy_s`` (the candidate's time so far) plus
    the time this takes."""
    started = time.perf_counter()
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
        elapsed_ms=(busy_s + time.perf_counter() - started) * 1000,
    )


def decode_rgb(data: bytes, uri: str) -> np.ndarray:
    """uint8 HxWx3 from PNG/JPEG/WebP bytes; :class:`CorruptImageError` when they are not an image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise CorruptImageError(f"{uri}: not a readable image ({err})") from err


def decode_rgba(data: bytes, uri: str) -> np.ndarray:
    """uint8 HxWx4 from image bytes (a cut-out); :class:`CorruptImageError` when they are not an image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray(image.convert("RGBA"))
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise CorruptImageError(f"{uri}: not a readable image ({err})") from err


def encode_png(rgba: np.ndarray) -> bytes:
    """Fast PNG: a matte is an intermediate (the exports re-encode it), so GPU-box CPU matters more than bytes."""
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
