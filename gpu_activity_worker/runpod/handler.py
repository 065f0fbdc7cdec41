"""The RunPod Serverless handler: matting jobs with the same engines and contract as the GPU worker.

``python -m gpu_activity_worker.runpod.handler`` is the endpoint's entry point. It builds the configured default
pipeline once (``POPCON_RUNPOD_PRELOAD_PIPELINE``: its weights load before the first job, not during it), logs how
long that cold start took, and hands :meth:`MattingHandler.handle` to ``runpod.serverless.start``, RunPod's worker loop.

A job's input is validated with pydantic against the Temporal activity's own contract (:data:`JOB_INPUT`). A slot job
(:class:`MatteSlotJob`) runs :func:`matting.matte_slot`, as the GPU worker's activity does: one result per candidate,
a failure no retry fixes being that candidate's own. Every other failure comes back as ``{"error": "<Type>:
<message>"}`` typed like the activity's (:func:`matting.failure_type`).

A worker holds several jobs at once (``POPCON_RUNPOD_HANDLER_CONCURRENCY``, the worker loop's
``concurrency_modifier``), each on its own thread, but its GPU runs one job's frames at a time (a :class:`GpuGate` of
one): the others read and decode their sources meanwhile and wait at the gate. RunPod's worker loop asks for new jobs
only while it holds fewer than that number, and sleeps a second whenever it holds that many; the jobs waiting at the
gate keep the GPU busy through that second. A job RunPod stops (cancelled, timed out) while it waits gives its turn
up; one already on the GPU finishes there, its result dropped.

Images are read from and written to the shared artifact store (``s3://``), or travel inside the job when the
dispatcher has no store RunPod can reach (:class:`InlineArtifacts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from core.artifacts import ArtifactError, ArtifactStore, check_content, open_store
from core.observability import configure_logging
from core.settings import ArtifactSettings, ObservabilitySettings
from gpu_activity_worker import matting
from gpu_activity_worker.batching import Lanes
from gpu_activity_worker.engines import StepRegistry, builtin_steps
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.jobs import (
    INLINE_SCHEME,
    JOB_INPUT,
    DescribeJob,
    MatteJob,
    MatteJobOutput,
    MatteSlotJob,
    MatteSlotJobOutput,
    decode_inline,
    encode_inline,
    job_error,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.slots import GpuGate
from gpu_activity_worker.vocabulary import MattingError
from workflows.contract import ArtifactRef, DescribePipelineInput, FailureType, MatteCandidateResult

log = logging.getLogger(__name__)


class InlineArtifacts:
    """The artifact store of one inline job: the sources came in the job, the mattes go back in its output."""

    def __init__(self, sources: Sequence[tuple[ArtifactRef, bytes]]) -> None:
        self._sources = {ref.uri: data for ref, data in sources}
        self.stored: dict[str, bytes] = {}
        """What the job stored, by key."""

    def get(self, ref: ArtifactRef) -> bytes:
        data = self._sources.get(ref.uri)
        if data is None:
            raise ArtifactError(f"{ref.uri}: only the job's inline sources are readable here")
        check_content(ref, data)
        return data

    def find(self, key: str) -> bytes | None:
        return self.stored.get(key)

    def key_of(self, ref: ArtifactRef) -> None:
        """None: the sources are addressed by the dispatcher's URIs, and what the job stores never leaves it."""
        return None

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        self.stored[key] = data
        return ArtifactRef(
            uri=f"{INLINE_SCHEME}{key}",
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            media_type=media_type,
            width=width,
            height=height,
        )


def _validation_summary(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'input'}: {e['msg']}" for e in err.errors())


class MattingHandler:
    """Runs RunPod jobs with this worker's engines and store, one job at a time on its GPU.

    Args:
        store: The shared artifact store, for jobs that carry references.
        pipelines: This worker's pipelines, shared with the preloaded one.
        concurrency: Jobs this worker holds at once (the worker loop's concurrency, and a thread each).
        inline_max_bytes: Largest base64 image accepted in a job or returned in its output.
        batch: Candidates of a slot job on the GPU at once (the micro-batch size, see :class:`Lanes`); 1 runs them
            one after another.
    """

    def __init__(
        self, store: ArtifactStore, pipelines: Pipelines, *, concurrency: int, inline_max_bytes: int, batch: int = 1
    ) -> None:
        self._store = store
        self._pipelines = pipelines
        self._concurrency = concurrency
        self._inline_max_bytes = inline_max_bytes
        self._gate = GpuGate(1)
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="runpod-job")
        self._lane_pool = ThreadPoolExecutor(batch - 1, thread_name_prefix="runpod-lane") if batch > 1 else None
        self._lanes = Lanes(batch, self._lane_pool)

    def concurrency(self, current: int) -> int:
        """RunPod's ``concurrency_modifier``: the worker loop holds this many jobs at once."""
        return self._concurrency

    async def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job: ``{"id": ..., "input": <MatteSlotJob | MatteJob | DescribeJob>}`` -> its output, or
        ``{"error": ...}``."""
        try:
            request = JOB_INPUT.validate_python(job.get("input"))
        except ValidationError as err:
            return job_error(
                FailureType.INVALID_REQUEST, f"the job input does not fit the contract: {_validation_summary(err)}"
            )
        started = time.perf_counter()
        stopped = threading.Event()
        try:
            output = await asyncio.get_running_loop().run_in_executor(self._executor, self._run, request, stopped)
        except asyncio.CancelledError:  # RunPod stopped the job: if it is still waiting for the GPU, it gives up
            self._gate.cancel(stopped)
            raise
        except Exception as err:  # the job boundary: every failure becomes a typed error the dispatcher can sort
            kind = matting.failure_type(err)
            foreseen = isinstance(err, MattingError | ArtifactError)
            log.warning(
                "job failed",
                extra={"job_id": job.get("id"), "type": kind.value, "retryable": kind.retryable, "error": str(err)},
                exc_info=not foreseen,  # a traceback only for the unexpected
            )
            return job_error(kind, str(err) if foreseen else f"{type(err).__name__}: {err}")
        log.info("job done", extra={"job_id": job.get("id"), "op": request.op, "ms": _ms_since(started)})
        return output

    @contextlib.contextmanager
    def _gpu(self, stopped: threading.Event) -> Iterator[None]:
        """The worker's GPU for one job's frames, once the jobs ahead have left it.

        Raises:
            FrameCancelledError: The job was stopped before its turn.
        """
        taken = False
        try:
            with self._gate.slot(stopped):
                taken = True
                yield
        finally:
            if taken:
                self._gate.reported()  # nothing here waits for the frames that left the GPU

    def _run(self, request: MatteSlotJob | MatteJob | DescribeJob, stopped: threading.Event) -> dict[str, Any]:
        if isinstance(request, DescribeJob):
            return matting.describe(request.request, self._pipelines).model_dump(mode="json")
        if isinstance(request, MatteSlotJob):
            return self._slot(request, stopped).model_dump(mode="json")
        if request.inline_source is None:
            result = matting.matte(request.request, self._store, self._pipelines, self._gpu(stopped))
            return MatteJobOutput(result=result).model_dump(mode="json")
        source = request.request.source
        inline = InlineArtifacts([(source, decode_inline(request.inline_source, self._inline_max_bytes, source.uri))])
        result = matting.matte(request.request, inline, self._pipelines, self._gpu(stopped))
        matte = encode_inline(
            inline.stored[request.request.output_key], self._inline_max_bytes, f"the matte of {source.uri}"
        )
        return MatteJobOutput(result=result, inline_matte=matte).model_dump(mode="json")

    def _slot(self, job: MatteSlotJob, stopped: threading.Event) -> MatteSlotJobOutput:
        """A slot job's candidates, as the ``matte_slot`` activity mattes them; inline ones bring their mattes back
        (one over the limit is that candidate's own failure)."""
        request = job.request
        if job.inline_sources is None:
            output = matting.matte_slot(request, self._store, self._pipelines, self._gpu(stopped), self._lanes)
            return MatteSlotJobOutput(results=output.results)
        inline = InlineArtifacts(
            [
                (source, decode_inline(text, self._inline_max_bytes, source.uri))
                for source, text in zip(request.candidates, job.inline_sources, strict=True)
            ]
        )
        output = matting.matte_slot(request, inline, self._pipelines, self._gpu(stopped), self._lanes)
        results: list[MatteCandidateResult] = []
        mattes: list[str | None] = []
        for source, key, result in zip(request.candidates, request.output_keys, output.results, strict=True):
            matte = None
            if result.output is not None:
                try:
                    matte = encode_inline(inline.stored[key], self._inline_max_bytes, f"the matte of {source.uri}")
                except MattingError as err:
                    result = MatteCandidateResult(failure=err.failure_type, error=str(err))
            results.append(result)
            mattes.append(matte)
        return MatteSlotJobOutput(results=results, inline_mattes=mattes)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._lane_pool is not None:
            self._lane_pool.shutdown(wait=False, cancel_futures=True)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def main(steps: StepRegistry | None = None) -> None:
    """Load the engines, log the cold start, then run RunPod's worker loop until the platform stops the worker.

    Args:
        steps: The steps pipelines may use; ``None`` is :func:`~gpu_activity_worker.engines.builtin_steps`.
    """
    started = time.perf_counter()
    # Imported here: the SDK takes about 1.4 s to import and installs a root log handler (replaced just below).
    import runpod

    configure_logging(ObservabilitySettings().log_level)
    settings = RunPodSettings()
    matting_settings = GpuWorkerSettings()
    pipelines = Pipelines(builtin_steps() if steps is None else steps, matting_settings.step_context())
    store = open_store(ArtifactSettings())
    preloaded = matting.describe(DescribePipelineInput(pipeline=settings.runpod_preload_pipeline), pipelines)
    log.info(
        "cold start done",
        extra={
            "cold_start_ms": _ms_since(started),
            "pipeline": preloaded.pipeline,
            "device": preloaded.device,
            "precision": preloaded.precision,
            "concurrency": settings.runpod_handler_concurrency,
        },
    )
    handler = MattingHandler(
        store,
        pipelines,
        concurrency=settings.runpod_handler_concurrency,
        inline_max_bytes=settings.runpod_inline_max_bytes,
        batch=matting_settings.matting_max_batch,
    )
    try:
        runpod.serverless.start({"handler": handler.handle, "concurrency_modifier": handler.concurrency})
    finally:
        handler.close()


if __name__ == "__main__":
    main()
