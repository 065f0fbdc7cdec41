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
from activities.settings import OrchestrationSettings
from activities.worker import build_worker
from core.artifacts import FileArtifactStore
from core.settings import ArtifactSettings, DeploymentSettings
from core.versioning import Role, promote_on_start, worker_deployment
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from workflows.contract import EmojiSetState, Phase


@dataclass(frozen=True)
class StackSettings:
    """What the two workers of a test stack read: their artifact store and each worker's own settings."""

    artifacts: ArtifactSettings
    gpu: GpuWorkerSettings
    orchestration: OrchestrationSettings = field(default_factory=lambda: OrchestrationSettings(_env_file=None))
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
    """Run the orchestration and GPU workers on ``env`` until the caller's iteration ends.

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
