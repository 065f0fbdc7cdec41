"""The review app: pages, form posts, the live-progress JSON and the image routes.

:func:`create_app` builds it around an :class:`EmojiSetClient` and the artifact store (given, as in tests, or
connected when it starts), kept in ``app.state`` (:class:`~starter.review.dependencies.Review`), and includes the
routers of :mod:`starter.review.routes`. Every page and image is resolved through the set's state, fetched with
``get_state`` (cached for about a second, so a page's images cost one query, not one each).

Middleware, outermost first: :func:`security_headers` (so every refusal below carries them too), the auth gate
(:class:`~starter.review.auth.Gate`), the body limit (:class:`~starter.review.limits.BodyLimit`), :func:`owners_only`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment

from core.artifacts import ArtifactStore, open_store
from core.settings import ArtifactSettings, TemporalSettings
from starter.client import EmojiSetClient
from starter.review.auth import Gate
from starter.review.dependencies import Review, StateCache, current_reviewer, get_review
from starter.review.limits import BodyLimit
from starter.review.routes import actions, files, refine, sets, start
from starter.review.settings import ReviewSettings, is_loopback, required_credentials
from starter.review.views import templates
from workflows.contract import EmojiSetState

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Every page: scripts, styles and images only from the app itself, no plugins, no framing, forms only to itself."""
SET_PATH = re.compile(r"^/sets/([^/]+)")


def create_app(
    client: EmojiSetClient | None = None,
    store: ArtifactStore | None = None,
    *,
    settings: ReviewSettings | None = None,
    host: str | None = None,
    temporal: TemporalSettings | None = None,
    artifacts: ArtifactSettings | None = None,
) -> FastAPI:
    """The review app, bound (for its access rules) to ``host``.

    With ``client`` and ``store`` given it uses them; otherwise it connects to Temporal and opens the store when it
    starts (``temporal`` / ``artifacts`` settings, from the environment by default).

    Raises:
        TokenMissing: ``host`` is not loopback and neither ``POPCON_REVIEW_TOKEN`` nor ``POPCON_REVIEW_SECRET`` is set.
        WeakSecret: The token or secret is too short or too plain.
    """
    settings = settings or ReviewSettings()
    host = host or settings.review_host
    credentials = required_credentials(host, settings)
    env = templates()
    app = FastAPI(
        title="popcon review",
        lifespan=partial(lifespan, store=store, temporal=temporal, artifacts=artifacts, env=env),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    if client is not None:
        if store is None:
            raise ValueError("give the artifact store with the client (store=): images are read from it")
        app.state.review = Review(client, store, StateCache(client), env)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in (sets.router, start.router, actions.router, refine.router, files.router):
        app.include_router(router)
    app.middleware("http")(owners_only)
    app.add_middleware(BodyLimit)
    app.add_middleware(Gate, credentials=credentials, loopback_only=credentials is None and is_loopback(host))
    app.middleware("http")(security_headers)  # added last, so outermost: the refusals above carry the headers too
    return app


@asynccontextmanager
async def lifespan(
    app: FastAPI,
    *,
    store: ArtifactStore | None,
    temporal: TemporalSettings | None,
    artifacts: ArtifactSettings | None,
    env: Environment,
) -> AsyncIterator[None]:
    """While the app serves: connects to Temporal and opens the store first unless :func:`create_app` was given
    them; cancels the work still kept running when it stops.

    Args:
        app: The app; its ``state.review`` is set here when it has none.
        store: The artifact store (None: opened from ``artifacts``).
        temporal: The Temporal connection's settings (None: from the environment).
        artifacts: The artifact store's settings (None: from the environment).
        env: The pages' templates.
    """
    if not hasattr(app.state, "review"):
        connected = await EmojiSetClient.connect(temporal or TemporalSettings(), artifacts or ArtifactSettings())
        opened = store or open_store(artifacts or ArtifactSettings())
        app.state.review = Review(connected, opened, StateCache(connected), env)
    yield
    review: Review = app.state.review
    review.stop()


async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Every answer (the routes', and the refusals of the gate, the body limit and the owner check): no sniffing, no
    framing, the referrer only to the app, the content security policy, and (over HTTPS) a browser told to stay on
    HTTPS."""
    response = await call_next(request)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    if request.url.scheme == "https":
        response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
    return response


async def owners_only(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """A set of an owner the reviewer may not see answers as a set that does not exist: its pages, images,
    downloads and every message to it (checked before any route runs)."""
    found = SET_PATH.match(request.url.path)
    if found:
        reviewer = await current_reviewer(request)
        if reviewer.owners is not None:
            review = await get_review(request)
            state = await review.set_state(found[1])
            if not isinstance(state, EmojiSetState):
                return state
            if not reviewer.may_see(state.input.owner):
                return review.not_found(f"no emoji set {found[1]!r}")
    return await call_next(request)
