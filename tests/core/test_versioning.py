"""Worker versioning: build ids that name the code, and what a starting worker does with its build (dev server)."""

from __future__ import annotations

import importlib.metadata
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.common import VersioningBehavior
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from core.settings import DeploymentSettings
from core.versioning import (
    ROLE_PACKAGES,
    Role,
    build_id,
    code_digest,
    deployment_name,
    describe_deployment,
    package_version,
    promote_on_start,
    worker_deployment,
)
from testkit.servers import start_throwaway_server


def test_a_build_id_names_the_code_of_its_role(tmp_path: Path) -> None:
    settings = DeploymentSettings(_env_file=None)
    orchestration, gpu = build_id(settings, Role.ORCHESTRATION), build_id(settings, Role.GPU)
    assert orchestration.startswith("0.") and orchestration != gpu, "each role's build names its own packages"
    assert build_id(DeploymentSettings(_env_file=None, build_id="2026-12-04.1"), Role.GPU) == "2026-12-04.1"

    for copy, line in (("a", "A = 1\n"), ("same", "A = 1\n"), ("changed", "A = 2\n")):
        (tmp_path / copy / "workflows").mkdir(parents=True)
        (tmp_path / copy / "workflows" / "emoji_set.py").write_text(line)
    a, same, changed = (code_digest(("workflows",), tmp_path / copy) for copy in ("a", "same", "changed"))
    assert a == same, "two copies of the same code are one build"
    assert a != changed, "a changed line is a new build"
    assert set(ROLE_PACKAGES[Role.GPU]) == {"workflows", "core", "gpu_activity_worker"}


def test_the_version_in_a_build_id_is_the_one_beside_the_code(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "popcon-emoji-pipeline"\nversion = "9.8.7"\n')
    assert package_version(tmp_path) == "9.8.7", "the copy the code runs from, not whatever metadata is installed"
    assert package_version(tmp_path / "elsewhere") == importlib.metadata.version("popcon-emoji-pipeline")


def test_each_role_has_its_deployment_and_the_workflows_are_pinned() -> None:
    settings = DeploymentSettings(_env_file=None, deployment_name="stickers")
    assert (deployment_name(settings, Role.ORCHESTRATION), deployment_name(settings, Role.GPU)) == (
        "stickers",
        "stickers-gpu",
    )
    config = worker_deployment(settings, Role.ORCHESTRATION)
    assert config is not None and config.use_worker_versioning
    assert config.default_versioning_behavior is VersioningBehavior.PINNED
    assert worker_deployment(DeploymentSettings(_env_file=None, worker_versioning=False), Role.GPU) is None


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_throwaway_server()
    yield env
    await env.shutdown()


@activity.defn(name="noop")
async def noop() -> None:
    """An activity for a worker that only has to poll."""


async def _current_after_start(client: Client, settings: DeploymentSettings) -> str | None:
    """Start a worker of ``settings``' GPU build, run its start-up promotion, return the deployment's current build."""
    config = worker_deployment(settings, Role.GPU)
    async with Worker(client, task_queue="versioning-test", activities=[noop], deployment_config=config):
        await promote_on_start(client, settings, Role.GPU)
        status = await describe_deployment(client, deployment_name(settings, Role.GPU))
    assert status is not None
    return status.current


async def test_a_first_worker_makes_its_build_current_and_a_later_one_waits_for_the_operator(
    server: WorkflowEnvironment, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"

    def settings(build: str, promotion: str) -> DeploymentSettings:
        return DeploymentSettings(_env_file=None, deployment_name=name, build_id=build, build_promotion=promotion)

    client = server.client
    assert await _current_after_start(client, settings("b-1", "if-none")) == "b-1", "a first deploy needs no step"
    with caplog.at_level(logging.WARNING, logger="core.versioning"):
        assert await _current_after_start(client, settings("b-2", "if-none")) == "b-1"
    assert f"build {name}-gpu.b-2 is not current (b-1 is)" in caplog.text
    assert await _current_after_start(client, settings("b-3", "never")) == "b-1"
    assert await _current_after_start(client, settings("b-3", "always")) == "b-3"
