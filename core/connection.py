"""One way to reach Temporal for every process: the pydantic data converter and the configured address."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from core.settings import TemporalSettings


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect to the configured Temporal frontend with the pydantic data converter."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )
