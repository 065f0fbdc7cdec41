"""The GPU worker: matting activities on task queue ``emoji-gpu``, ``gpu_concurrency`` slots on the GPU at once."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import (
    FixedSizeSlotSupplier,
    PollerBehaviorSimpleMaximum,
    Worker,
    WorkerDeploymentConfig,
    WorkerTuner,
)

from core.artifacts import ArtifactStore, open_store
from core.connection import connect
from core.heartbeats import KeepBeating
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, DeploymentSettings, ObservabilitySettings, TemporalSettings
from core.versioning import Role, promote_on_start, worker_deployment
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines import StepRegistry, builtin_steps
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.recovery import JournalRunning, RunningJournal, start_journal
from gpu_activity_worker.settings import GpuWorkerSettings
from workflows.contract import GPU_TASK_QUEUE, HEARTBEAT_INTERVAL


def build_gpu_worker(
    client: Client,
    settings: GpuWorkerSettings,
    store: ArtifactStore,
    *,
    steps: StepRegistry | None = None,
    deployment: WorkerDeploymentConfig | None = None,
    journal: RunningJournal | None = None,
) -> tuple[Worker, MattingActivities]:
    """A worker serving the GPU queue with the in-process engines: ``gpu_concurrency`` frame slots on the GPU (each
    ``matte_slot`` activity one turn for all its candidates, ``matting_max_batch`` of them at once), and up to
    ``gpu_prefetch`` more slots taken ahead while it is full (see :mod:`gpu_activity_worker.slots`).

    Args:
        client: The Temporal client the worker polls with.
        settings: Device, weights folder, batching, GPU capacity and prefetch.
        store: Where sources are read and cut-outs stored.
        steps: The steps pipelines may use; ``None`` is :func:`~gpu_activity_worker.engines.builtin_steps`.
        deployment: The Worker Deployment Version it serves (:func:`core.versioning.worker_deployment`); ``None`` is
            an unversioned worker.
        journal: This process's journal of running activities (:mod:`gpu_activity_worker.recovery`): every activity
            is recorded there while it runs, so the next GPU worker started on this machine brings it back at once if
            this one is lost; ``None``: none is kept.

    Returns:
        The worker and its activities (close them once the worker has stopped).
    """
    # A slot runs max_batch candidates side by side, so one slot alone can fill a batch.
    context = settings.step_context()
    matting = MattingActivities(
        store,
        Pipelines(builtin_steps() if steps is None else steps, context),
        capacity=settings.gpu_concurrency,
        prefetch=settings.gpu_prefetch_frames(),
        batch=context.max_batch,
    )
    unused = FixedSizeSlotSupplier(1)  # this worker runs no workflows, local activities or Nexus tasks
    worker = Worker(
        client,
        task_queue=GPU_TASK_QUEUE,
        activities=[matting.describe_pipeline, matting.matte_slot, matting.refine_matte, matting.stabilise_emoji],
        tuner=WorkerTuner.create_composite(
            workflow_supplier=unused,
            activity_supplier=matting.slot_supplier,
            local_activity_supplier=unused,
            nexus_supplier=unused,
        ),
        # One open poll per activity slot: one that frees up takes the next frame slot at once, not after a poller.
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(maximum=matting.slot_supplier.max_slots),
        interceptors=[KeepBeating(), *([JournalRunning(journal)] if journal is not None else [])],
        max_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        default_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        graceful_shutdown_timeout=timedelta(seconds=60),
        deployment_config=deployment,
    )
    return worker, matting


async def main(steps: StepRegistry | None = None) -> None:
    """Run the GPU worker from its settings until SIGTERM / SIGINT; ``steps`` as for :func:`build_gpu_worker`.

    Before it polls, it opens its journal of running activities and brings back what its lost predecessors on this
    machine were running (:func:`~gpu_activity_worker.recovery.start_journal`), unless ``POPCON_GPU_JOURNAL_DIR`` is
    empty.
    """
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    deployment = DeploymentSettings()
    settings, artifacts = GpuWorkerSettings(), ArtifactSettings()
    folder = settings.journal_folder(artifacts.data_dir)
    journal = await start_journal(client, folder) if folder is not None else None
    worker, matting = build_gpu_worker(
        client,
        settings,
        open_store(artifacts),
        steps=steps,
        deployment=worker_deployment(deployment, Role.GPU),
        journal=journal,
    )
    try:
        await serve_until_signalled(worker, lambda: promote_on_start(client, deployment, Role.GPU))
    finally:
        matting.close()
        if journal is not None:
            journal.close()
