"""KeepBeating on a real worker and dev server: activities that never heartbeat stay alive past their heartbeat
timeout, and the details an activity heartbeats itself survive the interceptor's own beats."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from core.heartbeats import KeepBeating

BEAT = timedelta(milliseconds=200)
TIMEOUT = timedelta(seconds=1)


@activity.defn
async def silent(seconds: float) -> str:
    """Never heartbeats itself, for several heartbeat timeouts."""
    await asyncio.sleep(seconds)
    return "finished"


@activity.defn
async def resumable(seconds: float) -> list[Any]:
    """Heartbeats a task id once, then fails after several of the interceptor's beats; the retry returns the details
    it finds."""
    if activity.info().attempt == 1:
        activity.heartbeat({"task_id": "task-7"})
        await asyncio.sleep(seconds)
        raise ApplicationError("lost the connection")
    return list(activity.info().heartbeat_details)


@workflow.defn(sandboxed=False)
class Beats:
    @workflow.run
    async def run(self, seconds: float) -> list[Any]:
        options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=30),
            "heartbeat_timeout": TIMEOUT,
            "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2),
        }
        first = await workflow.execute_activity(silent, seconds, **options)
        second = await workflow.execute_activity(resumable, seconds, **options)
        return [first, second]


async def test_activities_heartbeat_on_their_own_and_keep_their_details(dev_server: WorkflowEnvironment) -> None:
    queue = f"beats-{uuid.uuid4().hex[:8]}"
    async with Worker(
        dev_server.client,
        task_queue=queue,
        workflows=[Beats],
        activities=[silent, resumable],
        interceptors=[KeepBeating(BEAT.total_seconds())],
        max_heartbeat_throttle_interval=BEAT,
        default_heartbeat_throttle_interval=BEAT,
    ):
        result = await dev_server.client.execute_workflow(
            Beats.run, 3 * TIMEOUT.total_seconds(), id=queue, task_queue=queue
        )

    assert result == ["finished", [{"task_id": "task-7"}]]
