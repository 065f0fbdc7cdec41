"""What the routes share, and the dependencies that hand it to them.

:class:`Review` (the client, the artifact store, the cache of sets' states, the templates) is built once per app and
kept in ``app.state.review``. A handler asks for it with :data:`ReviewDep`, and for the reviewer the auth gate let in
with :data:`ReviewerDep`, instead of closing over them.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment
from temporalio.service import RPCError

from core.artifacts import ArtifactStore
from starter.client import EmojiSetClient, SetNotFound
from starter.review import images
from starter.review.credentials import Reviewer
from starter.review.flash import FlashStore
from workflows.contract import EmojiSetResult, EmojiSetState, Phase

CLOSED = frozenset({Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED})
RESULTS_KEPT = 256
"""Finished sets' results kept in memory (they never change; the oldest asked is dropped first)."""


class StateCache:
    """``get_state`` per set, kept ``ttl`` seconds (longer once the set has ended); concurrent asks share a query."""

    def __init__(self, client: EmojiSetClient, *, ttl: float = 1.0, closed_ttl: float = 30.0, size: int = 256):
        self.client = client
        self.ttl, self.closed_ttl, self.size = ttl, closed_ttl, size
        self._entries: OrderedDict[str, tuple[float, EmojiSetState]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, set_id: str, *, fresh: bool = False) -> EmojiSetState:
        """The set's state: the cached one while it is recent enough, else (or when ``fresh``) queried.

        Raises:
            SetNotFound: There is no such set.
            RPCError: The server could not be asked.
        """
        lock = self._locks.setdefault(set_id, asyncio.Lock())
        async with lock:
            entry = self._entries.get(set_id)
            if entry is not None and not fresh:
                fetched, state = entry
                ended = state.phase in CLOSED or state.failure is not None
                if time.monotonic() - fetched < (self.closed_ttl if ended else self.ttl):
                    return state
            state = await self.client.state(set_id)
            self._entries[set_id] = (time.monotonic(), state)
            self._entries.move_to_end(set_id)
            while len(self._entries) > self.size:
                old, _ = self._entries.popitem(last=False)
                self._locks.pop(old, None)
            return state

    def forget(self, set_id: str) -> None:
        """Drops the set's cached state: the next ask queries it (after a message changed it)."""
        self._entries.pop(set_id, None)


@dataclass
class Review:
    """What the routes share: built once per app, kept in ``app.state.review``."""

    client: EmojiSetClient
    store: ArtifactStore
    cache: StateCache
    templates: Environment
    results: dict[str, EmojiSetResult] = field(default_factory=dict)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    """Start-frame regenerations still under way after their page went back (cancelled when the app stops)."""
    flash: FlashStore = field(default_factory=FlashStore)
    """Refused posts' errors and typed values, for the page they redirect to."""

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        """The template ``name`` rendered with ``context``."""
        return HTMLResponse(self.templates.get_template(name).render(**context), status_code=status_code)

    def not_found(self, message: str = "not found") -> Response:
        """The 404 page, saying ``message``."""
        return self.render("error.html", 404, message=message, title="Not found")

    async def set_state(self, set_id: str, *, fresh: bool = False) -> EmojiSetState | Response:
        """The set's state (through the cache), or the page that says why there is none: 404 for an id that names
        no set, 503 when the server could not be asked."""
        if not images.valid_set_id(set_id):
            return self.not_found("no such set")
        try:
            return await self.cache.get(set_id, fresh=fresh)
        except SetNotFound:
            return self.not_found(f"no emoji set {set_id!r}")
        except RPCError as err:
            return self.render("error.html", 503, message=f"the set could not be read: {err.message}")

    async def result(self, set_id: str, state: EmojiSetState) -> EmojiSetResult | None:
        """The finished set's result (its exported files); None while it runs."""
        if state.phase is not Phase.COMPLETED:
            return None
        if set_id not in self.results:
            if len(self.results) >= RESULTS_KEPT:
                self.results.pop(next(iter(self.results)))
            self.results[set_id] = await self.client.result(set_id)
        return self.results[set_id]

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Keeps ``task`` running after the request that started it, until it ends or the app stops."""
        self.background.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a late refusal is shown by the state, not logged as unhandled

    def stop(self) -> None:
        """Cancels the tasks still kept running (the app stops)."""
        for task in self.background:
            task.cancel()


async def get_review(request: Request) -> Review:
    """The app's shared objects (``app.state.review``)."""
    review: Review = request.app.state.review
    return review


async def current_reviewer(request: Request) -> Reviewer:
    """Who sent ``request`` (the auth gate put it in the request's state)."""
    reviewer: Reviewer = request.state.reviewer
    return reviewer


ReviewDep = Annotated[Review, Depends(get_review)]
"""A handler's parameter typed so gets the app's :class:`Review`."""
ReviewerDep = Annotated[Reviewer, Depends(current_reviewer)]
"""A handler's parameter typed so gets the request's :class:`~starter.review.credentials.Reviewer`."""
