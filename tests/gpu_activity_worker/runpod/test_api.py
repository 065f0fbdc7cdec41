"""The RunPod queue client against the stand-in endpoint: an error answer that quotes the key never carries it into
an exception."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from core.redact import REDACTED
from gpu_activity_worker.runpod.api import ApiRetry, RunPodApi, RunPodApiError
from testkit.runpod_standin import EndpointConfig, RunPodStandIn


def unique_key(prefix: str) -> str:
    """A key no pattern of core.redact recognises (so only its registration redacts it), new to the process."""
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
async def endpoint() -> AsyncIterator[RunPodStandIn]:
    config = EndpointConfig(max_workers=0, api_key=unique_key("runpod"), echo_api_key=True)
    async with RunPodStandIn(config) as running:
        yield running


async def refusal(endpoint: RunPodStandIn, key: str) -> RunPodApiError:
    api = RunPodApi(endpoint.base_url, endpoint.config.endpoint_id, SecretStr(key), retry=ApiRetry(attempts=1))
    try:
        with pytest.raises(RunPodApiError) as caught:
            await api.health()
    finally:
        await api.aclose()
    return caught.value


async def test_a_refused_key_quoted_in_the_answer_is_not_in_the_exception(endpoint: RunPodStandIn) -> None:
    wrong_key = unique_key("wrong")

    error = await refusal(endpoint, wrong_key)

    assert error.status == 401 and f"Unauthorized (key {REDACTED})" in str(error)
    assert wrong_key not in str(error)


async def test_an_error_quoting_the_accepted_key_is_not_in_the_exception(endpoint: RunPodStandIn) -> None:
    endpoint.fail_next("health", 500)

    error = await refusal(endpoint, endpoint.config.api_key)

    assert error.status == 500 and f"injected 500 (key {REDACTED})" in str(error)
    assert endpoint.config.api_key not in str(error)
