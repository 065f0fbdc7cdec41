"""Secrets never leave in text: :func:`redact` scrubs a message before it is logged, printed or sent to Temporal.

Two kinds of secret are replaced with :data:`REDACTED`:

- every configured secret value: the settings fields typed :data:`RegisteredSecret` (the S3 secret key, the RunPod
  and DashScope API keys) and the clients that hold a key (:func:`register_secret`) add theirs to one process-wide
  registry, in the raw and the percent-encoded form;
- what looks like a credential even when it was never configured: an ``Authorization`` header's value, a ``Bearer``
  token, DashScope / OpenAI keys (``sk-...``), RunPod keys (``rpa_...``), and the value of a ``token``, ``api_key`` or
  ``key`` query parameter, whatever the percent-encoding of its name (decoded as :func:`urllib.parse.parse_qsl` does).

The patterns are narrow on purpose: digests, ids, paths and ordinary words stay as they are.
"""

from __future__ import annotations

import re
import threading
from typing import Annotated
from urllib.parse import quote, unquote_plus

from pydantic import AfterValidator, SecretStr

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 8
"""Shorter configured values are not registered: replacing them everywhere would mangle ordinary text."""
QUERY_CREDENTIALS = frozenset({"token", "access_token", "api_key", "api-key", "apikey", "key"})
"""Query parameter names (decoded, lower-cased) whose values are credentials."""

_SCHEME = r"(?:bearer|basic|digest|token)"
_AUTHORIZATION = re.compile(
    rf"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)(?:{_SCHEME}\s+)?(?!{_SCHEME}\b|{re.escape(REDACTED)})"
    r"[^\s\"'\\,;&})\]>]+"
)
_BEARER = re.compile(r"(?i)(\bbearer\s+)(?!token\b)[A-Za-z0-9._~+/=-]+")
_PROVIDER_KEYS = re.compile(r"\bsk-(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{16,}|\brpa_[A-Za-z0-9]{16,}")
_QUERY_PARAMETER = re.compile(r"([?&])([^=&#\s\"'\\]+)=([^&#\s\"'\\]+)")


class _Registry:
    """The configured secret values, and one pattern matching any of them (longest first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, None] = {}
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        forms = dict.fromkeys((value, quote(value, safe="")))
        with self._lock:
            if forms.keys() <= self._values.keys():
                return
            self._values |= forms
            # Longest first: a secret that extends another is replaced whole, not up to the other's end.
            alternatives = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(form) for form in alternatives))

    def scrub(self, text: str) -> str:
        pattern = self._pattern
        return text if pattern is None else pattern.sub(REDACTED, text)


_registry = _Registry()


def register_secret(secret: SecretStr | str | None) -> None:
    """Add a secret value to the process-wide registry, so that :func:`redact` scrubs it from any text.

    ``None``, empty values and values shorter than :data:`MIN_SECRET_CHARS` are ignored.
    """
    value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    if value and len(value) >= MIN_SECRET_CHARS:
        _registry.add(value)


def _registered(secret: SecretStr) -> SecretStr:
    register_secret(secret)
    return secret


RegisteredSecret = Annotated[SecretStr, AfterValidator(_registered)]
"""The type of a settings field holding a secret: every value read is registered (:func:`register_secret`)."""


def _query_value(match: re.Match[str]) -> str:
    separator, name, _ = match.groups()
    if unquote_plus(name).strip().lower() in QUERY_CREDENTIALS:
        return f"{separator}{name}={REDACTED}"
    return match.group(0)


def redact(text: str) -> str:
    """``text`` with every registered secret and every credential-looking value replaced by :data:`REDACTED`.

    Redacting twice changes nothing more (a failure's causes may pass twice).
    """
    text = _registry.scrub(text)
    text = _AUTHORIZATION.sub(rf"\1{REDACTED}", text)
    text = _BEARER.sub(rf"\1{REDACTED}", text)
    text = _PROVIDER_KEYS.sub(REDACTED, text)
    return _QUERY_PARAMETER.sub(_query_value, text)
