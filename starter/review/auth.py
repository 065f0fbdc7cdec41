"""Who may use the app: a token when it listens beyond this machine, and requests only from its own pages.

- With a token, every request carries it: an ``Authorization: Bearer <token>`` header, or the cookie set by a first
  visit with ``?token=<token>`` (the app then redirects to the same address without it, so the token leaves the
  address bar and the history). The cookie is HttpOnly and SameSite=Lax and holds a value derived from the token,
  not the token. Missing: 401; wrong: 403. Compared in constant time; never logged (see :mod:`.server`).
- Bound to loopback, requests must name a loopback host (``Host``): a page of another site that resolves its own
  name to 127.0.0.1 (DNS rebinding) is refused.
- A form posted from another site (``Origin`` not this app) is refused, token or not.
"""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from starter.review.settings import is_loopback

COOKIE = "popcon_review"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def session_value(token: str) -> str:
    """What the cookie holds: derived from the token, so the cookie jar never holds the token itself."""
    return hmac.new(token.encode(), b"popcon-review-session", hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class Gate:
    """ASGI middleware: the token (when there is one), the loopback ``Host`` rule and the ``Origin`` rule."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback_only: bool) -> None:
        self.app = app
        self.token = token
        self.session = session_value(token) if token else None
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if self.loopback_only and not is_loopback(_hostname(host)):
            await _plain(send, 400, "this app answers only to 127.0.0.1 / localhost")
            return
        origin = headers.get("origin")
        if scope["method"] not in SAFE_METHODS and origin is not None and urlsplit(origin).netloc != host:
            await _plain(send, 403, "cross-site request refused")
            return
        if self.token is None:
            await self.app(scope, receive, send)
            return
        authorization = headers.get("authorization", "")
        if authorization:
            scheme, _, given = authorization.partition(" ")
            if scheme.lower() != "bearer" or not _same(given.strip(), self.token):
                await _plain(send, 403, "wrong token")
                return
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given_tokens = [value for key, value in query if key == "token"]
        if given_tokens:
            if not _same(given_tokens[-1], self.token):
                await _plain(send, 403, "wrong token")
                return
            rest = urlencode([(key, value) for key, value in query if key != "token"])
            raw_path = scope.get("raw_path") or scope["path"].encode()
            # One leading slash: "//host/..." would send the browser to another site.
            path = "/" + raw_path.decode("latin-1").lstrip("/")
            location = path + (f"?{rest}" if rest else "")
            cookie = f"{COOKIE}={self.session}; HttpOnly; SameSite=Lax; Path=/"
            await _redirect(send, location, cookie)
            return
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:
            cookies = SimpleCookie()
        if COOKIE in cookies:
            if self.session is None or not _same(cookies[COOKIE].value, self.session):
                await _plain(send, 403, "wrong or stale token: open the app's address with ?token=<token> again")
                return
            await self.app(scope, receive, send)
            return
        await _plain(
            send, 401, "a token is needed: open this address with ?token=<token>, or send 'Authorization: Bearer'"
        )


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header (``127.0.0.1:8300``, ``[::1]:8300``, ``localhost``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _plain(send: Send, status: int, message: str) -> None:
    body = message.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="popcon review"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str, cookie: str) -> None:
    headers = [
        (b"location", location.encode("latin-1")),
        (b"set-cookie", cookie.encode("latin-1")),
        (b"cache-control", b"no-store"),
        (b"referrer-policy", b"no-referrer"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
