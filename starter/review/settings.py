"""The review app's own settings (``POPCON_REVIEW_*``); Temporal and the artifact store come from the shared ones."""

from __future__ import annotations

import ipaddress

from pydantic import Field

from core.redact import RegisteredSecret
from core.settings import PopconSettings
from starter.review.credentials import Credentials, check_strength


class ReviewSettings(PopconSettings):
    """``popcon review``: where it listens, the credentials it asks for beyond this machine, and its TLS."""

    review_host: str = Field(default="127.0.0.1", description="Bind address; not loopback needs credentials.")
    review_port: int = Field(default=8300, ge=1, le=65535)
    review_token: RegisteredSecret | None = Field(
        default=None,
        description="A shared token for every owner's sets (the reviewer names themself in the form): once as "
        "?token= (which sets a session cookie) or as an 'Authorization: Bearer' header. At least 32 characters. Never "
        "logged.",
    )
    review_secret: RegisteredSecret | None = Field(
        default=None,
        description="Signs owner-scoped reviewer tokens (popcon review-token); at least 32 characters. Never logged.",
    )
    review_session_hours: float = Field(default=12.0, gt=0, le=24 * 30, description="How long a sign-in lasts.")
    review_tls_certfile: str | None = Field(default=None, description="Serve HTTPS with this certificate (PEM).")
    review_tls_keyfile: str | None = Field(default=None, description="The certificate's private key (PEM).")
    review_forwarded_allow_ips: str | None = Field(
        default=None,
        description="Behind a TLS-terminating proxy: its address(es), whose X-Forwarded-Proto / -For are trusted "
        "(uvicorn's forwarded_allow_ips).",
    )

    def serves_tls(self) -> bool:
        """Whether browsers reach the app over HTTPS: its own certificate, or a trusted proxy in front."""
        return bool(self.review_tls_certfile or self.review_forwarded_allow_ips)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a host name) is this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class TokenMissing(ValueError):
    """The app would listen beyond this machine without credentials: it refuses to start."""


def required_credentials(host: str, settings: ReviewSettings) -> Credentials | None:
    """The credentials requests must carry when bound to ``host`` (None on loopback without any).

    Raises:
        TokenMissing: ``host`` is not loopback and neither a token nor a secret is set.
        WeakSecret: The token or the secret is too short or too plain.
    """
    token, secret = (
        value.get_secret_value() if value is not None else ""
        for value in (settings.review_token, settings.review_secret)
    )
    for name, value in (("POPCON_REVIEW_TOKEN", token), ("POPCON_REVIEW_SECRET", secret)):
        if value:
            check_strength(name, value)
    if token or secret:
        return Credentials(token or None, secret or None, settings.review_session_hours * 3600)
    if is_loopback(host):
        return None
    raise TokenMissing(
        f"refusing to listen on {host} without credentials: set POPCON_REVIEW_SECRET (owner-scoped reviewer tokens) "
        "or POPCON_REVIEW_TOKEN (one shared token), or bind to 127.0.0.1"
    )
