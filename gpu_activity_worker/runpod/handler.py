"""The RunPod Serverless handler: one matting job per call, with the same engines and contract as the GPU worker.

``python -m gpu_activity_worker.runpod.handler`` is the endpoint's entry point. It builds the configured default
pipeline once (``POPCON_RUNPOD_PRELOAD_PIPELINE``: its weights load before the first job, not during it), logs how
long that cold start took, and hands :meth:`MattingHandler.handle` to ``runpod.serverless.start``, RunPod's worker loop.

A job's input is validated with pydantic against the Temporal activity's own contract (:data:`JOB_INPUT`). Inference
runs on a thread pool sized to the jobs one worker takes at once (``POPCON_RUNPOD_HANDLER_CONCURRENCY``, also the
worker loop's concurrency), off the event loop that takes and returns jobs. Every failure comes back as
``{"error": "<Type>: <message>"}`` typed like the activity's (:func:`matting.failure_type`).

Images are read from and written to the shared artifact store (``s3://``), or travel inside the job when the
dispatcher has no store RunPod can reach (:class:`InlineArtifacts`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from core.artifacts import ArtifactError, ArtifactStore, open_store
from core.observability import configure_logging
from core.settings import ArtifactSettings, ObservabilitySettings
from gpu_activity_worker import matting
from gpu_activity_worker.engines import StepRegistry, builtin_steps
from gpu_activity_worker.engines.base import MattingError
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod.jobs import (
    INLINE_SCHEME,
    JOB_INPUT,
    DescribeJob,
    MatteJob,
    MatteJobOutput,
    decode_inline,
    encode_inline,
    job_error,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from workflows.contract import ArtifactRef, DescribePipelineInput, FailureType

log = logging.getLogger(__name__)


class InlineArtifacts:
    """The artifact store of one inline job: the source came in the job, the matte goes back in its output."""

    def __init__(self, source: ArtifactRef, data: bytes) -> None:
        self._source = source
        self._data = data
        self.stored: bytes | None = None

    def get(self, ref: ArtifactRef) -> bytes:
        if ref.uri != self._source.uri:
            raise ArtifactError(f"{ref.uri}: only the job's inline source {self._source.uri} is readable here")
        digest = hashlib.sha256(self._data).hexdigest()
        if digest != ref.sha256:
            raise ArtifactError(f"{ref.uri}: inline bytes differ (sha256 {digest}, expected {ref.sha256})")
        return self._data

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        self.stored = data
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
    """Runs RunPod jobs with this worker's engines and store.

    Args:
        store: The shared artifact store, for jobs that carry references.
        pipelines: This worker's pipelines, shared with the preloaded one.
        concurrency: Jobs this worker runs at once (threads, and the worker loop's concurrency).
        inline_max_bytes: Largest base64 image accepted in a job or returned in its output.
    """

    def __init__(self, store: ArtifactStore, pipelines: Pipelines, *, concurrency: int, inline_max_bytes: int) -> None:
        self._store = store
        self._pipelines = pipelines
        self._concurrency = concurrency
        self._inline_max_bytes = inline_max_bytes
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="runpod-job")

    def concurrency(self, current: int) -> int:
        """RunPod's ``concurrency_modifier``: the worker loop takes this many jobs at once."""
        return self._concurrency

    async def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job: ``{"id": ..., "input": <MatteJob | DescribeJob>}`` -> its output, or ``{"error": ...}``."""
        try:
            request = JOB_INPUT.validate_python(job.get("input"))
        except ValidationError as err:
            return job_error(
                FailureType.INVALID_REQUEST, f"the job input does not fit the contract: {_validation_summary(err)}"
            )
        started = time.perf_counter()
        try:
            output = await asyncio.get_running_loop().run_in_executor(self._executor, self._run, request)
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

    def _run(self, request: MatteJob | DescribeJob) -> dict[str, Any]:
        if isinstance(request, DescribeJob):
            return matting.describe(request.request, self._pipelines).model_dump(mode="json")
        if request.inline_source is None:
            result = matting.matte(request.request, self._store, self._pipelines)
            return MatteJobOutput(result=result).model_dump(mode="json")
        source = request.request.source
        inline = InlineArtifacts(source, decode_inline(request.inline_source, self._inline_max_bytes, source.uri))
        result = matting.matte(request.request, inline, self._pipelines)
        assert inline.stored is not None  # matte() stores its cut-out before it returns
        matte = encode_inline(inline.stored, self._inline_max_bytes, f"the matte of {source.uri}")
        return MatteJobOutput(result=result, inline_matte=matte).model_dump(mode="json")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


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
    pipelines = Pipelines(builtin_steps() if steps is None else steps, GpuWorkerSettings().step_context())
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
    )
    try:
        runpod.serverless.start({"handler": handler.handle, "concurrency_modifier": handler.concurrency})
    finally:
        handler.close()


if __name__ == "__main__":
    main()
