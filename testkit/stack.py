"""Both real workers running against a Temporal server, for tests and benchmarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.generation import GeneratorRegistry
from activities.settings import OrchestrationSettings, PaidGenerationSettings
from activities.worker import build_worker
from core.artifacts import FileArtifactStore
from core.settings import ArtifactSettings, CostSettings, DeploymentSettings, WebhookSettings
from core.versioning import Role, promote_on_start, worker_deployment
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from workflows.contract import EmojiSetState, ModelPrice, Phase, PriceTable

STANDIN_PAID_CALLS_PER_SECOND = 100.0
WEBHOOK_SECRET = "test-webhook-secret-7f3a9c"
"""The secret ``default`` of a test stack's webhooks (testkit.webhook_receiver checks it)."""
STANDIN_PRICES = PriceTable(
    models={"procedural": ModelPrice(per_image=0.01, per_video_second=0.05)}, per_gpu_second=0.001
)
"""A test stack's prices: the free procedural model priced, so its sets' ledgers have costs to add up."""


def standin_paid_queue(concurrency: int = 8) -> PaidGenerationSettings:
    """The paid queue of workers whose generators cost nothing (procedural, the stand-ins): rate-limited as in
    production, but far above what they call (:data:`STANDIN_PAID_CALLS_PER_SECOND`), and ``concurrency`` at a time
    (8: the orchestration worker's slots, which ran them before the paid queue). benchmarks/paid_rate.py measures the
    limit itself."""
    return PaidGenerationSettings(
        _env_file=None, paid_calls_per_second=STANDIN_PAID_CALLS_PER_SECOND, paid_concurrency=concurrency
    )


@dataclass(frozen=True)
class StackSettings:
    """What the two workers of a test stack read: their artifact store and each worker's own settings."""

    artifacts: ArtifactSettings
    gpu: GpuWorkerSettings
    orchestration: OrchestrationSettings = field(default_factory=lambda: OrchestrationSettings(_env_file=None))
    paid: PaidGenerationSettings = field(default_factory=standin_paid_queue)
    """The generator calls' task queue, served by the orchestration worker beside its own."""
    costs: CostSettings = field(default_factory=lambda: CostSettings(_env_file=None, prices=STANDIN_PRICES))
    webhooks: WebhookSettings = field(
        default_factory=lambda: WebhookSettings(
            _env_file=None,
            webhook_secrets={"default": WEBHOOK_SECRET},
            webhook_allow_private=True,  # the receivers listen on loopback
            webhook_timeout_s=2.0,
        )
    )
    deployment: DeploymentSettings | None = None
    """The workers' builds; ``None``: versioned on a dev server (their builds made current at start), unversioned on
    the time-skipping server (which has no worker versioning)."""


@dataclass
class Stack:
    """A Temporal server with both workers running against it."""

    client: Client
    sets: EmojiSetClient
    store: FileArtifactStore
    settings: StackSettings
    env: WorkflowEnvironment
    deployment: DeploymentSettings
    """The workers' builds (versioned or not)."""


async def run_stack(
    env: WorkflowEnvironment, settings: StackSettings, *, generators: GeneratorRegistry | None = None
) -> AsyncIterator[Stack]:
    """Run the orchestration workers (its task queue and the paid generator calls') and the GPU worker on ``env``
    until the caller's iteration ends.

    ``generators`` are the backends a set may name; ``None`` is :func:`~activities.generation.builtin_generators`.
    """
    client = env.client
    store = FileArtifactStore(Path(urlparse(settings.artifacts.artifact_root_uri()).path))
    deployment = settings.deployment or DeploymentSettings(
        _env_file=None, worker_versioning=not env.supports_time_skipping, build_promotion="always"
    )
    orchestration, production = build_worker(
        client,
        settings.orchestration,
        store,
        generators=generators,
        deployment=worker_deployment(deployment, Role.ORCHESTRATION),
        paid=settings.paid,
        costs=settings.costs,
        webhooks=settings.webhooks,
    )
    gpu, matting = build_gpu_worker(client, settings.gpu, store, deployment=worker_deployment(deployment, Role.GPU))
    async with orchestration, gpu:
        for role in Role:
            await promote_on_start(client, deployment, role)
        yield Stack(
            client=client,
            sets=EmojiSetClient(client, store=store),
            store=store,
            settings=settings,
            env=env,
            deployment=deployment,
        )
    await production.aclose()
    matting.close()


async def wait_for_phase(sets: EmojiSetClient, set_id: str, *phases: Phase, timeout: float = 60) -> EmojiSetState:
    """Poll the set's state until it reaches one of ``phases``."""
    async with asyncio.timeout(timeout):
        while True:
            state = await sets.state(set_id)
            if state.phase in phases:
                return state
            await asyncio.sleep(0.1)
