"""core.redact: configured secrets and credential-looking values leave no text, ordinary text stays as it is."""

from __future__ import annotations

import uuid

import pytest
from pydantic import SecretStr

from core.redact import MIN_SECRET_CHARS, REDACTED, redact, register_secret
from core.settings import ArtifactSettings


def unique_secret(prefix: str = "secret") -> str:
    """A value no pattern recognises, so only the registry can redact it (unique: the registry is process-wide)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def test_a_registered_secret_is_redacted_raw_and_percent_encoded() -> None:
    secret = f"{unique_secret()}/with+slash"
    assert redact(f"refused {secret}") == f"refused {secret}", "not registered yet"

    register_secret(SecretStr(secret))

    assert redact(f"refused {secret} ({secret.replace('/', '%2F').replace('+', '%2B')})") == (
        f"refused {REDACTED} ({REDACTED})"
    )


def test_a_secret_that_extends_another_is_redacted_whole() -> None:
    secret = unique_secret()
    register_secret(secret)
    register_secret(f"{secret}-longer-tail")

    assert redact(f"got {secret}-longer-tail") == f"got {REDACTED}"


def test_values_too_short_to_be_secrets_are_not_registered() -> None:
    short = "w" * (MIN_SECRET_CHARS - 1)
    register_secret(short)
    register_secret("")
    register_secret(None)

    assert redact(f"a {short} wave") == f"a {short} wave"


def test_settings_register_the_secret_they_read() -> None:
    secret = unique_secret("s3")
    ArtifactSettings(_env_file=None, s3_secret_access_key=SecretStr(secret))

    assert redact(f"S3 said {secret}") == f"S3 said {REDACTED}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-123", f"Authorization: {REDACTED}"),
        (
            "{'authorization': 'Basic dXNlcjpwYXNz', 'accept': '*/*'}",
            f"{{'authorization': '{REDACTED}', 'accept': '*/*'}}",
        ),
        ('{"Authorization": "rawtoken123"}', f'{{"Authorization": "{REDACTED}"}}'),
        ("sent Bearer xyz", f"sent Bearer {REDACTED}"),
        ("sent bearer eyJhbGciOi.eyJzdWIi.c2ln", f"sent bearer {REDACTED}"),
        ("Invalid API-key provided: sk-4f9c2a7e01b34d8e9f6a5b4c3d2e1f00", f"Invalid API-key provided: {REDACTED}"),
        ("key sk-proj-Ab12Cd34Ef56Gh78Ij90 refused", f"key {REDACTED} refused"),
        ("RunPod key rpa_0A1B2C3D4E5F6G7H8I9J0K1L2M3N refused", f"RunPod key {REDACTED} refused"),
        ("GET /sets?token=abc123 HTTP/1.1", f"GET /sets?token={REDACTED} HTTP/1.1"),
        ("GET /sets?a=1&token=abc123&b=2", f"GET /sets?a=1&token={REDACTED}&b=2"),
        ("GET /sets?tok%65n=abc123", f"GET /sets?tok%65n={REDACTED}"),
        ("GET /sets?TOKEN=abc123", f"GET /sets?TOKEN={REDACTED}"),
        ("GET /sets?+token=abc123", f"GET /sets?+token={REDACTED}"),
        ("https://api.example/v1?api_key=abc123#top", f"https://api.example/v1?api_key={REDACTED}#top"),
        ("https://api.example/v1?x=1&key=abc123", f"https://api.example/v1?x=1&key={REDACTED}"),
        ("https://api.example/v1?access_token=abc123", f"https://api.example/v1?access_token={REDACTED}"),
        (
            "https://api.example/v1?apikey=abc123&api-key=def456",
            f"https://api.example/v1?apikey={REDACTED}&api-key={REDACTED}",
        ),
    ],
)
def test_credentials_are_redacted_without_being_configured(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected, "redacting again changes nothing"


@pytest.mark.parametrize(
    "text",
    [
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "action wave, frame 3, candidate 2",
        "file:///data/artifacts/sets/test-1/wave/frames/003/candidate-2.png",
        "s3://emoji/smoke-root/smoke/source.png",
        "/sets/set-1/frames?frame=3&candidate=2",
        "output_key=smoke/matte.png, monkey=3",
        "a token is needed: send 'Authorization: Bearer'",
        "missing bearer token",
        "Authorization header missing",
        "task-0123456789abcdef0123 and sk-learn-pipeline-components",
        "rpa_short and sk-short",
        "DashScope task 8a5c7f0e-2b1d-4c3a-9e8f-7d6c5b4a3f21 is RUNNING",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text
