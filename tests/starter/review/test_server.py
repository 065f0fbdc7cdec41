"""The review server's access log: a token never shows, whatever the spelling of its query key."""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

import pytest

from starter.review.server import RedactToken

TOKEN = "review-token-5a1f0c9e"


def access_record(path: str) -> logging.LogRecord:
    """A record as uvicorn's access logger makes it: the full path with its query is one argument."""
    args = ("1.2.3.4:5", "GET", path, "1.1", 303)
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        (f"tok%65n={TOKEN}", "tok%65n=[redacted]"),
        (f"%74oken={TOKEN}&a=1", "%74oken=[redacted]&a=1"),
        (f"a=1&token={TOKEN}", "a=1&token=[redacted]"),
    ],
)
def test_a_token_the_gate_reads_is_never_in_the_access_log(query: str, shown: str) -> None:
    assert ("token", TOKEN) in parse_qsl(query), "the auth gate reads this token"
    record = access_record(f"/sets?{query}")

    assert RedactToken().filter(record)

    assert TOKEN not in record.getMessage() and f"/sets?{shown} HTTP/1.1" in record.getMessage()


def test_a_token_key_in_capitals_is_redacted_too() -> None:
    record = access_record(f"/sets?TOKEN={TOKEN}")

    assert RedactToken().filter(record)

    assert TOKEN not in record.getMessage() and "/sets?TOKEN=[redacted]" in record.getMessage()


def test_a_token_in_the_message_itself_is_redacted() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, f"GET /sets?tok%65n={TOKEN} 303", None, None
    )

    assert RedactToken().filter(record)

    assert record.getMessage() == "GET /sets?tok%65n=[redacted] 303"
