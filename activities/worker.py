"""The orchestration worker: the EmojiSet workflow and the CPU activities, on task queue ``emoji-orchestration``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker, WorkerDeploymentConfig

from activities.assemble import AssemblyActivities
from activities.generation import GeneratorRegistry
from activities.platform_exports import PlatformExportActivities
from activities.production import ProductionActivities
from activities.settings import OrchestrationSettings
from core.artifacts import ArtifactStore, open_store
from core.connection import connect
from core.heartbeats import KeepBeating
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, DeploymentSettings, ObservabilitySettings, TemporalSettings
from core.versioning import Role, promote_on_start, worker_deployment
from workflows.contract import HEARTBEAT_INTERVAL, ORCHESTRATION_TASK_QUEUE, STICKY_WORKFLOW_TIMEOUT
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow


def build_worker(
    client: Client,
    settings: OrchestrationSettings,
    store: ArtifactStore,
    *,
    generators: GeneratorRegistry | None = None,
    deployment: WorkerDeploymentConfig | None = None,
    workflows: Sequence[type] = (EmojiSetWorkflow, ExportSetWorkflow),
) -> tuple[Worker, ProductionActivities]:
    """The orchestration worker, and its production activities (close them after the worker stops).

    ``generators`` are the backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
    ``deployment`` is the Worker Deployment Version it serves (:func:`core.versioning.worker_deployment`); ``None``
    is an unversioned worker. ``workflows`` are the workflow classes it runs (a test's other build of them).
    """
    production = ProductionActivities(store, generators)
    assembly = AssemblyActivities(store)
    exports = PlatformExportActivities(store)
    worker = Worker(
        client,
        task_queue=ORCHESTRATION_TASK_QUEUE,
        workflows=list(workflows),
        activities=[
            production.check_generator,
            production.prepare_upload,
            production.generate_character,
            production.generate_start_frame,
            production.generate_clip,
            production.extract_frames,
            production.edit_frame,
            assembly.assemble_emoji,
            assembly.assemble_contact_sheet,
            exports.check_exports,
            exports.export_package,
        ],
        max_concurrent_activities=settings.orchestration_activity_concurrency,
        interceptors=[KeepBeating()],
        max_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        default_heartbeat_throttle_interval=HEARTBEAT_INTERVAL,
        sticky_queue_schedule_to_start_timeout=STICKY_WORKFLOW_TIMEOUT,
        graceful_shutdown_timeout=timedelta(seconds=30),
        deployment_config=deployment,
    )
    return worker, production


async def main() -> None:
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    deployment = DeploymentSettings()
    worker, production = build_worker(
        client,
        OrchestrationSettings(),
        open_store(ArtifactSettings()),
        deployment=worker_deployment(deployment, Role.ORCHESTRATION),
    )
    try:
        await serve_until_signalled(worker, lambda: promote_on_start(client, deployment, Role.ORCHESTRATION))
    finally:
        await production.aclose()
