"""core.observability's JSON lines: every text of a line is scrubbed of secrets, the extra fields included."""

from __future__ import annotations

import json
import logging
import sys
import uuid

from core.observability import JsonLineFormatter
from core.redact import REDACTED, register_secret

SECRET = f"log-secret-{uuid.uuid4().hex}"
register_secret(SECRET)


class Holder:
    """An extra field's value that JSON does not know: logged as its ``str``."""

    def __str__(self) -> str:
        return f"holder of {SECRET}"


def test_every_text_of_a_log_line_is_redacted() -> None:
    try:
        raise RuntimeError(f"provider answered {SECRET}")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "popcon.test", logging.WARNING, __file__, 1, "refused %s with %s", (SECRET, "Bearer xyz"), exc_info
    )
    extra = {"error": f"refused: {SECRET}", "details": {SECRET: [f"?token={SECRET}"]}, "holder": Holder()}
    record.__dict__.update(extra)

    line = JsonLineFormatter().format(record)

    assert SECRET not in line and "xyz" not in line
    logged = json.loads(line)
    assert logged["msg"] == f"refused {REDACTED} with Bearer {REDACTED}"
    assert logged["error"] == f"refused: {REDACTED}"
    assert logged["details"] == {REDACTED: [f"?token={REDACTED}"]}
    assert logged["holder"] == f"holder of {REDACTED}"
    assert f"RuntimeError: provider answered {REDACTED}" in logged["exc"]
