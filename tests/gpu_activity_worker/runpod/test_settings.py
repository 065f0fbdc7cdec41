"""The RunPod settings register the API key they read, so that no text carries it."""

from __future__ import annotations

import uuid

from pydantic import SecretStr

from core.redact import REDACTED, redact
from gpu_activity_worker.runpod.settings import RunPodSettings


def test_the_settings_register_the_api_key() -> None:
    key = f"runpod-{uuid.uuid4().hex}"
    RunPodSettings(_env_file=None, runpod_api_key=SecretStr(key))

    assert redact(f"quoted {key}") == f"quoted {REDACTED}"
