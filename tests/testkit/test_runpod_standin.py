"""The RunPod stand-in scales as the endpoint ``popcon runpod deploy`` creates: the scaler the tests run against is
the scaler production runs."""

from __future__ import annotations

import sys

from pydantic import SecretStr

from gpu_activity_worker.runpod.api import RunPodApi
from gpu_activity_worker.runpod.provision import QUEUE_SCALING
from testkit.runpod_standin import EndpointConfig, RunPodStandIn

IDLE_WORKER = (sys.executable, "-c", "import time; time.sleep(60)")
"""A worker process that never asks for a job: what was submitted stays queued, so only the scaler acts."""


def test_the_stand_in_scales_with_the_scaler_the_deploy_sets() -> None:
    config = EndpointConfig()

    assert {"type": config.scaler, "queueDelay": config.scaler_value} == QUEUE_SCALING


async def submit(endpoint: RunPodStandIn, count: int) -> None:
    api = RunPodApi(endpoint.base_url, endpoint.config.endpoint_id, SecretStr(endpoint.config.api_key))
    try:
        for _ in range(count):
            await api.run({"op": "noop"}, execution_timeout_ms=60_000, ttl_ms=600_000)
    finally:
        await api.aclose()


async def test_queue_delay_adds_one_worker_at_once_and_more_only_for_jobs_that_waited_the_delay() -> None:
    delay_s = 2.0
    config = EndpointConfig(max_workers=3, worker_command=IDLE_WORKER, scaler="QUEUE_DELAY", scaler_value=delay_s)
    async with RunPodStandIn(config) as endpoint:
        await submit(endpoint, 3)
        await endpoint.wait_until(lambda: len(endpoint.worker_history) == 3, timeout=20)

    first_submitted = min(job.submitted_at for job in endpoint.jobs.values())
    spawned = [worker.spawned_at - first_submitted for worker in endpoint.worker_history]
    assert spawned[0] < delay_s, "with zero workers, the first request adds one worker"
    assert all(at >= delay_s for at in spawned[1:]), "the others only once a job has waited the delay"


async def test_request_count_keeps_one_worker_per_scaler_value_requests() -> None:
    config = EndpointConfig(max_workers=5, worker_command=IDLE_WORKER, scaler="REQUEST_COUNT", scaler_value=2)
    async with RunPodStandIn(config) as endpoint:
        await submit(endpoint, 5)
        await endpoint.wait_until(lambda: len(endpoint.worker_history) == 3, timeout=20)
        first_submitted = min(job.submitted_at for job in endpoint.jobs.values())

    assert all(worker.spawned_at - first_submitted < 2.0 for worker in endpoint.worker_history), "no wait"
    assert len(endpoint.worker_history) == 3, "ceil(5 / 2)"
