"""The GPU worker: matting activities on task queue ``emoji-gpu``, ``gpu_concurrency`` frames on the GPU at once."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import FixedSizeSlotSupplier, PollerBehaviorSimpleMaximum, Worker, WorkerTuner

from activities.artifacts import ArtifactStore, open_store
from activities.connection import connect
from activities.observability import configure_logging, temporal_runtime
from activities.serve import serve_until_signalled
from activities.settings import Settings
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines.base import StepContext
from workflows.contract import GPU_TASK_QUEUE


def build_gpu_worker(client: Client, settings: Settings, store: ArtifactStore) -> tuple[Worker, MattingActivities]:
    """A worker serving the GPU queue with the in-process engines: ``gpu_concurrency`` frames on the GPU, and up to
    ``gpu_prefetch`` more taken ahead while it is full (see :mod:`gpu_activity_worker.slots`).

    Returns the worker and its activities (close them once the worker has stopped).
    """
    matting = MattingActivities(
        store,
        StepContext(
            device=settings.matting_device,
            model_dir=settings.model_dir,
            # A batch can only fill from concurrent activities: a larger one would wait out its timeout every time.
            max_batch=min(settings.matting_max_batch, settings.gpu_concurrency),
            max_batch_wait_ms=settings.matting_batch_wait_ms,
        ),
        capacity=settings.gpu_concurrency,
        prefetch=settings.gpu_prefetch_frames(),
    )
    unused = FixedSizeSlotSupplier(1)  # this worker runs no workflows, local activities or Nexus tasks
    worker = Worker(
        client,
        task_queue=GPU_TASK_QUEUE,
        activities=[matting.describe_pipeline, matting.matte_frame],
        tuner=WorkerTuner.create_composite(
            workflow_supplier=unused,
            activity_supplier=matting.slot_supplier,
            local_activity_supplier=unused,
            nexus_supplier=unused,
        ),
        # One open poll per slot: a slot that frees up takes the next frame at once instead of waiting for a poller.
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=matting.slot_supplier.max_slots),
        graceful_shutdown_timeout=timedelta(seconds=60),
    )
    return worker, matting


async def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    client = await connect(settings, temporal_runtime(settings.metrics_bind))
    worker, matting = build_gpu_worker(client, settings, open_store(settings))
    try:
        await serve_until_signalled(worker)
    finally:
        matting.close()
