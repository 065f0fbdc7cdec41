"""Who a reviewer is and whose sets they may see: signed, owner-scoped tokens and the app's session cookies.

A scoped token (``popcon review token --reviewer ana --owner acme``) is ``prv1.<payload>.<signature>``: the payload
(base64url JSON) names the reviewer, the owners whose sets they may see and act on (or every owner) and when it
expires; the signature is HMAC-SHA256 with ``POPCON_REVIEW_SECRET``. Nothing is stored on the server: a token is
revoked by its expiry, or all at once by a new secret. A session cookie is the same shape with its own purpose and a
lifetime of hours, so the cookie changes on every sign-in and stops working by itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

PREFIX = "prv1"
MIN_SECRET_LENGTH = 32
"""The shortest token or secret accepted: 32 characters of ``secrets.token_urlsafe`` are about 190 bits."""
MIN_DISTINCT = 10
"""A secret of fewer distinct characters (``aaaa...``, ``abababab...``) is refused whatever its length."""
MAX_TOKEN_LENGTH = 4096


@dataclass(frozen=True)
class Reviewer:
    """Who a request comes from.

    Attributes:
        name: The reviewer's name, written into every message they send; None: the form's own field (a shared token,
            or one person on loopback).
        owners: The owners whose sets they may see and act on; None: every owner.
    """

    name: str | None
    owners: frozenset[str] | None

    def may_see(self, owner: str | None) -> bool:
        return self.owners is None or (owner or "") in self.owners


EVERYONE = Reviewer(name=None, owners=None)
"""A reviewer of every owner's sets, named by the form: loopback without a token, or the shared token."""


class WeakSecret(ValueError):
    """A token or secret too short or too plain to stand on a network: the app refuses to start."""


def check_strength(name: str, value: str) -> None:
    """Refuse a token or secret that could be guessed.

    Raises:
        WeakSecret: Under :data:`MIN_SECRET_LENGTH` characters, with whitespace, or of under :data:`MIN_DISTINCT`
            distinct characters.
    """
    if len(value) < MIN_SECRET_LENGTH or any(c.isspace() for c in value) or len(set(value)) < MIN_DISTINCT:
        raise WeakSecret(
            f"{name} must be at least {MIN_SECRET_LENGTH} characters without spaces and not repetitive; make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, purpose: str, payload: str) -> str:
    return _b64(hmac.new(key, f"{purpose}.{payload}".encode(), hashlib.sha256).digest())


def _issue(key: bytes, purpose: str, reviewer: Reviewer, expires: float) -> str:
    body = {
        "r": reviewer.name,
        "o": None if reviewer.owners is None else sorted(reviewer.owners),
        "exp": int(expires),
        "n": secrets.token_urlsafe(8),  # every one issued differs, however close in time
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{PREFIX}.{payload}.{_sign(key, purpose, payload)}"


def _read(key: bytes, purpose: str, text: str, now: float) -> Reviewer | None:
    if len(text) > MAX_TOKEN_LENGTH or text.count(".") != 2:
        return None
    prefix, payload, signature = text.split(".")
    if prefix != PREFIX or not hmac.compare_digest(signature, _sign(key, purpose, payload)):
        return None
    try:
        body = json.loads(_unb64(payload))
        name, owners, expires = body["r"], body["o"], body["exp"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    if not isinstance(expires, int) or expires <= now:
        return None
    if not (name is None or isinstance(name, str)) or not (owners is None or isinstance(owners, list)):
        return None
    return Reviewer(name=name, owners=None if owners is None else frozenset(str(owner) for owner in owners))


def issue_token(secret: str, reviewer: Reviewer, lifetime_s: float, *, now: float | None = None) -> str:
    """A scoped token for ``reviewer``, valid for ``lifetime_s`` seconds (for ``popcon review token``)."""
    if not reviewer.name:
        raise ValueError("a scoped token names its reviewer")
    return _issue(secret.encode(), "token", reviewer, (time.time() if now is None else now) + lifetime_s)


def read_token(secret: str, token: str, *, now: float | None = None) -> Reviewer | None:
    """The reviewer a scoped token names, or None when it is not one signed with ``secret`` or has expired."""
    return _read(secret.encode(), "token", token, time.time() if now is None else now)


class Sessions:
    """The app's session cookies: a signed reviewer with an expiry, under a key derived from the app's credentials.

    Args:
        credential: The shared token or the scoped tokens' secret; the cookie key is derived from it, so the cookie
            never holds it and a new credential ends every session.
        lifetime_s: How long a session lasts.
    """

    def __init__(self, credential: str, lifetime_s: float) -> None:
        self._key = hmac.new(credential.encode(), b"popcon-review-session", hashlib.sha256).digest()
        self.lifetime_s = lifetime_s

    def issue(self, reviewer: Reviewer, *, now: float | None = None) -> str:
        return _issue(self._key, "session", reviewer, (time.time() if now is None else now) + self.lifetime_s)

    def read(self, cookie: str, *, now: float | None = None) -> Reviewer | None:
        return _read(self._key, "session", cookie, time.time() if now is None else now)


@dataclass
class Credentials:
    """What the app accepts: the shared token, the scoped tokens' secret, or both; sessions keyed from them."""

    token: str | None
    secret: str | None
    session_lifetime_s: float

    def __post_init__(self) -> None:
        key = self.secret or self.token
        if key is None:
            raise ValueError("credentials need a token or a secret")
        self.sessions = Sessions(key, self.session_lifetime_s)

    def reviewer_for(self, given: str) -> Reviewer | None:
        """The reviewer a token stands for, or None."""
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return EVERYONE
        if self.secret is not None:
            return read_token(self.secret, given)
        return None
