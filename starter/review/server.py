"""Run the review app with uvicorn (``popcon review``)."""

from __future__ import annotations

import logging

import uvicorn

from core.redact import redact
from core.settings import ArtifactSettings, TemporalSettings
from starter.review.app import create_app
from starter.review.settings import ReviewSettings, is_loopback, required_credentials

log = logging.getLogger(__name__)


class RedactToken(logging.Filter):
    """The access log never shows a token (uvicorn logs the full path): the message and its arguments are redacted
    (:func:`core.redact.redact`), so a ``token`` query value is replaced whatever the case and percent-encoding of
    its name (``?tok%65n=`` reaches the auth gate as ``token``), as is any secret or credential."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def plain_http_warning(host: str, settings: ReviewSettings) -> str | None:
    """Why serving on ``host`` as configured exposes credentials, or None: beyond loopback without HTTPS, tokens and
    session cookies cross the network in clear text."""
    if is_loopback(host) or settings.serves_tls():
        return None
    return (
        f"the review app listens on {host} over plain HTTP: tokens and session cookies cross the network in clear "
        "text. Set POPCON_REVIEW_TLS_CERTFILE and POPCON_REVIEW_TLS_KEYFILE, or serve it behind a TLS proxy "
        "(POPCON_REVIEW_FORWARDED_ALLOW_IPS); see README, 'The review app on a network'"
    )


def serve(host: str | None = None, port: int | None = None, *, settings: ReviewSettings | None = None) -> None:
    """Serve the app until interrupted, over HTTPS when a certificate is configured.

    Raises:
        TokenMissing: ``host`` is not loopback and no credentials are set (before anything listens).
        WeakSecret: The token or secret is too short or too plain.
    """
    settings = settings or ReviewSettings()
    host = host or settings.review_host
    port = port or settings.review_port
    required_credentials(host, settings)
    warning = plain_http_warning(host, settings)
    if warning:
        log.warning(warning)
    app = create_app(settings=settings, host=host, temporal=TemporalSettings(), artifacts=ArtifactSettings())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        ssl_certfile=settings.review_tls_certfile,
        ssl_keyfile=settings.review_tls_keyfile,
        proxy_headers=settings.review_forwarded_allow_ips is not None,
        forwarded_allow_ips=settings.review_forwarded_allow_ips,
    )
    # After the config set up uvicorn's loggers (it does so when built).
    logging.getLogger("uvicorn.access").addFilter(RedactToken())
    uvicorn.Server(config).run()
