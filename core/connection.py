"""One way to reach Temporal for every process: the pydantic data converter and the configured address."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import RetryConfig

from core.settings import TemporalSettings


def outlasting(outage: timedelta) -> RetryConfig:
    """Retry every call to the server, a finished activity's completion included, through an outage this long.

    The SDK's default gives up after 10 s: a result finished while the server restarts is then dropped and its work
    done again. Retries back off to one a second, so a call lands within about a second of the server's return.
    """
    return RetryConfig(
        initial_interval_millis=100,
        multiplier=1.5,
        max_interval_millis=1000,
        max_elapsed_time_millis=int(outage.total_seconds() * 1000),
        max_retries=int(outage.total_seconds()) + 10,
    )


async def connect(
    settings: TemporalSettings, runtime: Runtime | None = None, *, retry: RetryConfig | None = None
) -> Client:
    """Connect to the configured Temporal frontend with the pydantic data converter.

    Args:
        settings: The server's address and namespace.
        runtime: The SDK runtime (metrics); ``None`` is the default one.
        retry: How calls are retried while the server is unreachable; ``None`` is the SDK's default (about 10 s),
            right for a person's command. Workers pass :func:`outlasting` of their outage tolerance.
    """
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
        retry_config=retry,
    )


async def connect_worker(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect a worker: its calls, completions included, outlast a server outage of
    ``worker_outage_tolerance_s``."""
    return await connect(settings, runtime, retry=outlasting(timedelta(seconds=settings.worker_outage_tolerance_s)))
