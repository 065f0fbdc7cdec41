"""The review app's own settings (``POPCON_REVIEW_*``); Temporal and the artifact store come from the shared ones."""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr

from core.settings import PopconSettings


class ReviewSettings(PopconSettings):
    """``popcon review``: where it listens and the token it asks for when it listens beyond this machine."""

    review_host: str = Field(default="127.0.0.1", description="Bind address; not loopback needs a token.")
    review_port: int = Field(default=8300, ge=1, le=65535)
    review_token: SecretStr | None = Field(
        default=None,
        description="Asked of every request when the app is bound to a non-loopback address: once as ?token= "
        "(which sets an HttpOnly cookie) or as an 'Authorization: Bearer' header. Never logged.",
    )


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
    """The app would listen beyond this machine without a token: it refuses to start."""


def required_token(host: str, token: SecretStr | None) -> str | None:
    """The token requests must carry when bound to ``host`` (None on loopback without one).

    Raises:
        TokenMissing: ``host`` is not loopback and no (non-empty) token is set.
    """
    secret = token.get_secret_value() if token is not None else ""
    if secret:
        return secret
    if is_loopback(host):
        return None
    raise TokenMissing(
        f"refusing to listen on {host} without a token: set POPCON_REVIEW_TOKEN (every request must then carry it), "
        "or bind to 127.0.0.1"
    )
