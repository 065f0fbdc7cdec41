"""Run the review app with uvicorn (``popcon review``)."""

from __future__ import annotations

import logging
import re

import uvicorn

from core.settings import ArtifactSettings, TemporalSettings
from starter.review.app import create_app
from starter.review.settings import ReviewSettings, required_token

TOKEN_IN_QUERY = re.compile(r"(?i)([?&]token=)[^&#\s]*")


class RedactToken(logging.Filter):
    """The access log never shows a ``?token=``: its value is replaced (uvicorn logs the full path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                TOKEN_IN_QUERY.sub(r"\1[redacted]", a) if isinstance(a, str) else a for a in record.args
            )
        if isinstance(record.msg, str):
            record.msg = TOKEN_IN_QUERY.sub(r"\1[redacted]", record.msg)
        return True


def serve(host: str | None = None, port: int | None = None, *, settings: ReviewSettings | None = None) -> None:
    """Serve the app until interrupted.

    Raises:
        TokenMissing: ``host`` is not loopback and ``POPCON_REVIEW_TOKEN`` is not set (before anything listens).
    """
    settings = settings or ReviewSettings()
    host = host or settings.review_host
    port = port or settings.review_port
    required_token(host, settings.review_token)
    app = create_app(settings=settings, host=host, temporal=TemporalSettings(), artifacts=ArtifactSettings())
    config = uvicorn.Config(app, host=host, port=port, log_level="info", server_header=False)
    # After the config set up uvicorn's loggers (it does so when built).
    logging.getLogger("uvicorn.access").addFilter(RedactToken())
    uvicorn.Server(config).run()
