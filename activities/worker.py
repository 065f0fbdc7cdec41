"""The orchestration worker: the EmojiSet workflow and the CPU activities, on task queue ``emoji-orchestration``."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from activities.artifacts import ArtifactStore, open_store
from activities.assemble import AssemblyActivities
from activities.connection import connect
from activities.generate import GenerationActivities
from activities.observability import configure_logging, temporal_runtime
from activities.serve import serve_until_signalled
from activities.settings import Settings
from workflows.contract import ORCHESTRATION_TASK_QUEUE
from workflows.emoji_set import EmojiSetWorkflow


def build_worker(client: Client, settings: Settings, store: ArtifactStore) -> tuple[Worker, GenerationActivities]:
    """The orchestration worker, and its generation activities (close them after the worker stops)."""
    generation = GenerationActivities(settings, store)
    assembly = AssemblyActivities(store)
    worker = Worker(
        client,
        task_queue=ORCHESTRATION_TASK_QUEUE,
        workflows=[EmojiSetWorkflow],
        activities=[
            generation.check_generator,
            generation.generate_frame,
            assembly.assemble_emoji,
            assembly.assemble_contact_sheet,
        ],
        max_concurrent_activities=settings.orchestration_activity_concurrency,
        graceful_shutdown_timeout=timedelta(seconds=30),
    )
    return worker, generation


async def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    client = await connect(settings, temporal_runtime(settings.metrics_bind))
    worker, generation = build_worker(client, settings, open_store(settings))
    try:
        await serve_until_signalled(worker)
    finally:
        await generation.aclose()
