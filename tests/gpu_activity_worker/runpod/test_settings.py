"""The RunPod settings register the API key they read, so that no text carries it, and keep every job at RunPod as
long as its result may be asked for."""

from __future__ import annotations

import uuid

import pytest
from pydantic import SecretStr, ValidationError

from core.redact import REDACTED, redact
from gpu_activity_worker.runpod.settings import RunPodSettings


def test_the_settings_register_the_api_key() -> None:
    key = f"runpod-{uuid.uuid4().hex}"
    RunPodSettings(_env_file=None, runpod_api_key=SecretStr(key))

    assert redact(f"quoted {key}") == f"quoted {REDACTED}"


def test_a_job_ttl_shorter_than_runpods_result_retention_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as refused:
        RunPodSettings(_env_file=None, runpod_ttl_ms=1_200_000, runpod_execution_timeout_ms=120_000)

    assert "POPCON_RUNPOD_TTL_MS is 1200000 ms" in str(refused.value)
    assert "at least the execution timeout plus RunPod's 30 min result retention, 1920000 ms" in str(refused.value)


def test_the_default_ttl_outlives_a_finished_jobs_result() -> None:
    settings = RunPodSettings(_env_file=None)

    assert settings.runpod_ttl_ms >= settings.runpod_execution_timeout_ms + 30 * 60 * 1000
