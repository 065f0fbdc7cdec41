"""Who may use the app, as whom: credentials beyond loopback, throttled failures, requests only from its own pages.

- Credentials: the shared token (``POPCON_REVIEW_TOKEN``: every owner's sets, the reviewer named by the form) and
  scoped tokens signed with ``POPCON_REVIEW_SECRET`` (:mod:`.credentials`: a named reviewer and the owners they may
  see). A request carries one as ``Authorization: Bearer <token>``, or a first visit opens ``?token=<token>``: the
  app answers with a session cookie (HttpOnly, SameSite=Lax, ``Secure`` over HTTPS, an expiry; a signed session, not
  the token) and redirects to the same address without it. Missing: 401; wrong or expired: 403.
- Throttled: after :data:`FAILURES_ALLOWED` wrong credentials from one client within :data:`FAILURE_WINDOW_S`, that
  client gets 429 (with ``Retry-After``) until the window has passed, right credentials included.
- Bound to loopback without credentials, requests must name a loopback host (``Host``): a page of another site that
  resolves its own name to 127.0.0.1 (DNS rebinding) is refused.
- A form posted from another origin (``Origin`` differing in scheme, host or port) is refused, credentials or not.

The reviewer a request comes from is left in the request's state (``request.state.reviewer``, a
:class:`~.credentials.Reviewer`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from starter.review.credentials import EVERYONE, Credentials, Reviewer
from starter.review.settings import is_loopback

COOKIE = "popcon_review"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FAILURES_ALLOWED = 10
FAILURE_WINDOW_S = 60.0
DEFAULT_PORTS = {"http": 80, "https": 443}


class Throttle:
    """Wrong credentials counted per client: past :data:`FAILURES_ALLOWED` within :data:`FAILURE_WINDOW_S`, the
    client waits. At most ``max_clients`` are remembered (the oldest forgotten first), so a flood cannot fill memory.
    """

    def __init__(
        self,
        failures: int = FAILURES_ALLOWED,
        window_s: float = FAILURE_WINDOW_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self._failures, self._window_s, self._clock, self._max_clients = failures, window_s, clock, max_clients
        self._seen: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int:
        """Seconds ``client`` must wait before its next try (0: it may try now)."""
        times = self._seen.get(client)
        if times is None:
            return 0
        cutoff = self._clock() - self._window_s
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._seen[client]
            return 0
        return int(times[0] - cutoff) + 1 if len(times) >= self._failures else 0

    def failed(self, client: str) -> None:
        times = self._seen.pop(client, deque())
        times.append(self._clock())
        self._seen[client] = times  # last in the dict: the most recently seen
        while len(self._seen) > self._max_clients:
            del self._seen[next(iter(self._seen))]


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether a request's ``Origin`` is this app as the request reached it: same scheme, host name and port."""
    given = urlsplit(origin)
    try:
        given_port = given.port or DEFAULT_PORTS.get(given.scheme)
        ours = urlsplit(f"{scheme}://{host}")
        our_port = ours.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return False
    return (
        given.scheme == scheme
        and given.hostname is not None
        and given.hostname == ours.hostname
        and given_port == our_port
    )


class Gate:
    """ASGI middleware: credentials (when there are any), the throttle, the loopback ``Host`` rule, the ``Origin``
    rule."""

    def __init__(
        self, app: ASGIApp, *, credentials: Credentials | None, loopback_only: bool, throttle: Throttle | None = None
    ) -> None:
        self.app = app
        self.credentials = credentials
        self.loopback_only = loopback_only
        self.throttle = throttle or Throttle()

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
        if (
            scope["method"] not in SAFE_METHODS
            and origin is not None
            and not same_origin(origin, scope["scheme"], host)
        ):
            await _plain(send, 403, "cross-site request refused")
            return
        state = scope.setdefault("state", {})
        if self.credentials is None:
            state["reviewer"] = EVERYONE
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown",))[0]
        wait = self.throttle.retry_after(client)
        if wait:
            await _plain(send, 429, f"too many wrong credentials: try again in {wait} s", retry_after=wait)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given_tokens = [value for key, value in query if key.lower() == "token"]
        reviewer, refusal = self._reviewer(headers, given_tokens)
        if reviewer is None:
            if refusal is None:
                await _plain(
                    send,
                    401,
                    "a token is needed: open this address with ?token=<token>, or send 'Authorization: Bearer'",
                )
                return
            self.throttle.failed(client)
            await _plain(send, 403, refusal)
            return
        state["reviewer"] = reviewer
        if given_tokens:  # a first visit: the token becomes a session cookie
            await self._sign_in(send, scope, query, reviewer)
            return
        await self.app(scope, receive, send)

    def _reviewer(self, headers: dict[str, str], given_tokens: list[str]) -> tuple[Reviewer | None, str | None]:
        """Who the request's credential names (header, ``?token=``, session cookie), or None and why (None, None: it
        carries none)."""
        assert self.credentials is not None
        authorization = headers.get("authorization", "")
        if authorization:
            scheme, _, given = authorization.partition(" ")
            reviewer = self.credentials.reviewer_for(given.strip()) if scheme.lower() == "bearer" else None
            return reviewer, None if reviewer else "wrong or expired token"
        if given_tokens:
            reviewer = self.credentials.reviewer_for(given_tokens[-1])
            return reviewer, None if reviewer else "wrong or expired token"
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:
            cookies = SimpleCookie()
        if COOKIE in cookies:
            reviewer = self.credentials.sessions.read(cookies[COOKIE].value)
            refusal = "wrong or expired session: open the app's address with ?token=<token> again"
            return reviewer, None if reviewer else refusal
        return None, None

    async def _sign_in(self, send: Send, scope: Scope, query: list[tuple[str, str]], reviewer: Reviewer) -> None:
        assert self.credentials is not None
        rest = urlencode([(key, value) for key, value in query if key.lower() != "token"])
        raw_path = scope.get("raw_path") or scope["path"].encode()
        # One leading slash: "//host/..." would send the browser to another site.
        path = "/" + raw_path.decode("latin-1").lstrip("/")
        location = path + (f"?{rest}" if rest else "")
        sessions = self.credentials.sessions
        cookie = (
            f"{COOKIE}={sessions.issue(reviewer)}; HttpOnly; SameSite=Lax; Path=/; Max-Age={int(sessions.lifetime_s)}"
        )
        if scope["scheme"] == "https":
            cookie += "; Secure"
        await _redirect(send, location, cookie)


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header (``127.0.0.1:8300``, ``[::1]:8300``, ``localhost``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _plain(send: Send, status: int, message: str, *, retry_after: int | None = None) -> None:
    body = message.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="popcon review"'))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
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
