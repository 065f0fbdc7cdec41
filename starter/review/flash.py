"""What a refused post leaves for the page it redirects to (post/redirect/get): its errors and the values typed.

A refused form is not answered at the post's address (a reload would send it again) but redirected to its page with
``?flash=<token>``; the page shows what the token names. Tokens are random and kept a few minutes in memory, so a
reload of that page shows the same errors, and an old one shows the plain page.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any

FLASH_TTL_S = 600.0
FLASH_KEPT = 1024


class FlashStore:
    """Refused posts' errors and typed values by token, the oldest dropped first."""

    def __init__(self, *, ttl: float = FLASH_TTL_S, size: int = FLASH_KEPT) -> None:
        self.ttl, self.size = ttl, size
        self._entries: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def put(self, payload: dict[str, Any]) -> str:
        """Keeps ``payload`` and returns its token."""
        token = secrets.token_urlsafe(16)
        self._entries[token] = (time.monotonic(), payload)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return token

    def get(self, token: str | None) -> dict[str, Any] | None:
        """The payload ``token`` names, or None for no token, an unknown or an expired one."""
        entry = self._entries.get(token or "")
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            return None
        return entry[1]
