"""Structured logs (one JSON object per line, scrubbed of secrets) and the optional Prometheus endpoint of the
Temporal runtime."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from core.redact import redact

_STANDARD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _scrubbed(value: Any) -> Any:
    """``value`` with every string in it redacted (:func:`core.redact.redact`), dict keys and nested items included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_scrubbed(key): _scrubbed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(item) for item in value]
    return value


class JsonLineFormatter(logging.Formatter):
    """Formats a record as one JSON line with its extra fields (Temporal adds workflow / activity context).

    Every text of the line is scrubbed of secrets: the message, the extra fields (other values as their ``str``) and
    the exception.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                line[key] = _scrubbed(value)
        if record.exc_info:
            line["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, default=lambda value: redact(str(value)))


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as a JSON line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def temporal_runtime(metrics_bind: str) -> Runtime | None:
    """A runtime serving Prometheus ``/metrics`` on ``metrics_bind`` (host:port), or None to use the default."""
    if not metrics_bind:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_bind)))
