"""The orchestration worker: the EmojiSet workflow and the CPU activities, on task queue ``emoji-orchestration``."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from activities.assemble import AssemblyActivities
from activities.generation import GeneratorRegistry
from activities.platform_exports import PlatformExportActivities
from activities.production import ProductionActivities
from activities.settings import OrchestrationSettings
from core.artifacts import ArtifactStore, open_store
from core.connection import connect
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import ArtifactSettings, ObservabilitySettings, TemporalSettings
from workflows.contract import ORCHESTRATION_TASK_QUEUE
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow


def build_worker(
    client: Client,
    settings: OrchestrationSettings,
    store: ArtifactStore,
    *,
    generators: GeneratorRegistry | None = None,
) -> tuple[Worker, ProductionActivities]:
    """The orchestration worker, and its production activities (close them after the worker stops).

    ``generators`` are the backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
    """
    production = ProductionActivities(store, generators)
    assembly = AssemblyActivities(store)
    exports = PlatformExportActivities(store)
    worker = Worker(
        client,
        task_queue=ORCHESTRATION_TASK_QUEUE,
        workflows=[EmojiSetWorkflow, ExportSetWorkflow],
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
        graceful_shutdown_timeout=timedelta(seconds=30),
    )
    return worker, production


async def main() -> None:
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    worker, production = build_worker(client, OrchestrationSettings(), open_store(ArtifactSettings()))
    try:
        await serve_until_signalled(worker)
    finally:
        await production.aclose()
