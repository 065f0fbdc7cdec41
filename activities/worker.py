"""The orchestration worker process: the EmojiSet workflow and the CPU activities on task queue
``emoji-orchestration``, and the paid generator calls on task queue ``emoji-paid``.

The four generator activities (character, start frames, clips, frame edits) call a provider that bills each call and
rate-limits us, so sets call them on a queue of their own (:data:`~workflows.contract.PAID_TASK_QUEUE`, from
``workflows.calls``), served by a second Temporal worker in the same process with the same activities instance:

- ``max_task_queue_activities_per_second`` = ``POPCON_PAID_CALLS_PER_SECOND``: how many generator calls start per
  second across the whole deployment, enforced by Temporal's server for the queue (the last poller's value wins, so
  give every worker the same);
- ``max_concurrent_activities`` = ``POPCON_PAID_CONCURRENCY``: how many run at once in this process.

The four stay registered on the orchestration queue too: sets started before the paid queue existed call them there
until they finish. :class:`OrchestrationWorkers` runs both workers as one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from temporalio.client import Client
from temporalio.worker import Worker, WorkerDeploymentConfig

from activities.assemble import AssemblyActivities
from activities.generation import GeneratorRegistry
from activities.notify import EventDelivery
from activities.platform_exports import PlatformExportActivities
from activities.production import ProductionActivities
from activities.settings import OrchestrationSettings, PaidGenerationSettings
from core.artifacts import ArtifactStore, open_store
from core.connection import connect
from core.heartbeats import KeepBeating
from core.observability import configure_logging, temporal_runtime
from core.serve import serve_until_signalled
from core.settings import (
    ArtifactSettings,
    CostSettings,
    DeploymentSettings,
    ObservabilitySettings,
    TemporalSettings,
    WebhookSettings,
)
from core.versioning import Role, promote_on_start, worker_deployment
from workflows.contract import HEARTBEAT_INTERVAL, ORCHESTRATION_TASK_QUEUE, PAID_TASK_QUEUE, STICKY_WORKFLOW_TIMEOUT
from workflows.deliver_event import DeliverEventWorkflow
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow

GRACEFUL_SHUTDOWN = timedelta(seconds=30)
"""How long running activities may finish once a worker is told to stop (both workers stop together)."""


class OrchestrationWorkers:
    """The two Temporal workers of an orchestration worker process, run as one.

    ``async with workers:`` runs both for the block; ``await workers.run()`` runs both until :meth:`shutdown` (or a
    fatal error of either, which stops the other too); :meth:`shutdown` stops both at once, each letting its running
    activities finish for up to :data:`GRACEFUL_SHUTDOWN`.

    Attributes:
        orchestration: The workflows and every activity of ``emoji-orchestration``.
        paid: The generator activities on ``emoji-paid``, rate-limited and bounded.
    """

    def __init__(
        self, orchestration: Worker, paid: Worker, closing: Sequence[Callable[[], Awaitable[None]]] = ()
    ) -> None:
        self.orchestration = orchestration
        self.paid = paid
        self._closing = closing
        """Released once both workers have stopped (the event delivery's HTTP client)."""

    @property
    def workers(self) -> tuple[Worker, Worker]:
        """Both workers, the orchestration one first."""
        return self.orchestration, self.paid

    @property
    def task_queue(self) -> str:
        """The task queues served, for logs."""
        return f"{self.orchestration.task_queue}, {self.paid.task_queue}"

    async def __aenter__(self) -> Self:
        await self.orchestration.__aenter__()
        try:
            await self.paid.__aenter__()
        except BaseException:
            await self.orchestration.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        outcomes = await asyncio.gather(
            *(worker.__aexit__(exc_type, exc, traceback) for worker in self.workers), return_exceptions=True
        )
        await self._close()
        _raise_first(outcomes)

    async def run(self) -> None:
        """Run both workers until both are shut down; a fatal error of one shuts the other down, then is raised."""
        runs = [asyncio.create_task(worker.run()) for worker in self.workers]
        try:
            await asyncio.wait(runs, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            if not all(run.done() for run in runs):
                await self.shutdown()
            outcomes = await asyncio.gather(*runs, return_exceptions=True)
            await self._close()
        _raise_first(outcomes)

    async def shutdown(self) -> None:
        """Stop both workers and wait until they have stopped (safe to call again, or before they run)."""
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))

    async def _close(self) -> None:
        for close in self._closing:
            await close()


def _raise_first(outcomes: Sequence[object]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def build_worker(
    client: Client,
    settings: OrchestrationSettings,
    store: ArtifactStore,
    *,
    generators: GeneratorRegistry | None = None,
    deployment: WorkerDeploymentConfig | None = None,
    workflows: Sequence[type] = (EmojiSetWorkflow, ExportSetWorkflow, DeliverEventWorkflow),
    paid: PaidGenerationSettings | None = None,
    costs: CostSettings | None = None,
    webhooks: WebhookSettings | None = None,
) -> tuple[OrchestrationWorkers, ProductionActivities]:
    """The orchestration worker process's workers, and its production activities (close them after the workers
    stop).

    Args:
        client: The Temporal client both workers poll with.
        settings: The orchestration worker's settings.
        store: The artifact store of every activity.
        generators: The backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
        deployment: The Worker Deployment Version both workers serve (:func:`core.versioning.worker_deployment`);
            ``None`` is an unversioned worker.
        workflows: The workflow classes it runs (a test's other build of them).
        paid: The paid queue's rate and concurrency; ``None`` reads ``POPCON_PAID_*``.
        costs: The prices and default budget new sets are told; ``None`` reads ``POPCON_PRICES`` and
            ``POPCON_BUDGET_*``.
        webhooks: The deployment's webhook and the secrets events are signed with; ``None`` reads
            ``POPCON_WEBHOOK_*``.
    """
    paid = PaidGenerationSettings() if paid is None else paid
    webhooks = WebhookSettings() if webhooks is None else webhooks
    production = ProductionActivities(
        store, generators, costs=costs, webhooks=webhooks, default_temporal=settings.default_temporal
    )
    delivery = EventDelivery(webhooks)
    assembly = AssemblyActivities(store)
    exports = PlatformExportActivities(store)
    generation: list[Callable[..., Any]] = [
        production.generate_character,
        production.generate_start_frame,
        production.generate_clip,
        production.edit_frame,
    ]
    common: dict[str, Any] = {
        "interceptors": [KeepBeating()],
        "max_heartbeat_throttle_interval": HEARTBEAT_INTERVAL,
        "default_heartbeat_throttle_interval": HEARTBEAT_INTERVAL,
        "graceful_shutdown_timeout": GRACEFUL_SHUTDOWN,
        "deployment_config": deployment,
    }
    orchestration = Worker(
        client,
        task_queue=ORCHESTRATION_TASK_QUEUE,
        workflows=list(workflows),
        activities=[
            production.check_generator,
            production.describe_deployment,
            production.prepare_upload,
            *generation,  # sets started before the paid queue call them here
            production.extract_frames,
            assembly.assemble_emoji,
            assembly.assemble_contact_sheet,
            exports.check_exports,
            exports.export_package,
            delivery.deliver_event,
        ],
        max_concurrent_activities=settings.orchestration_activity_concurrency,
        sticky_queue_schedule_to_start_timeout=STICKY_WORKFLOW_TIMEOUT,
        **common,
    )
    paid_worker = Worker(
        client,
        task_queue=PAID_TASK_QUEUE,
        activities=generation,
        max_task_queue_activities_per_second=paid.paid_calls_per_second,
        max_concurrent_activities=paid.paid_concurrency,
        **common,
    )
    return OrchestrationWorkers(orchestration, paid_worker, closing=[delivery.aclose]), production


async def main() -> None:
    observability = ObservabilitySettings()
    configure_logging(observability.log_level)
    client = await connect(TemporalSettings(), temporal_runtime(observability.metrics_bind))
    deployment = DeploymentSettings()
    workers, production = build_worker(
        client,
        OrchestrationSettings(),
        open_store(ArtifactSettings()),
        deployment=worker_deployment(deployment, Role.ORCHESTRATION),
        paid=PaidGenerationSettings(),
    )
    try:
        await serve_until_signalled(workers, lambda: promote_on_start(client, deployment, Role.ORCHESTRATION))
    finally:
        await production.aclose()
