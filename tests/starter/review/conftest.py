"""The review app on the real stack (dev server + both workers, from tests/conftest.py), through httpx's ASGI
transport in the tests' own event loop; and raw ASGI requests for addresses httpx would tidy up."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from core.artifacts import FileArtifactStore
from starter.review.app import create_app
from starter.review.settings import ReviewSettings
from testkit.stack import Stack
from workflows.contract import ArtifactRef

BASE = "http://127.0.0.1:8300"


class SpyStore:
    """The stack's store, recording every read: image requests that must not touch files leave it empty."""

    def __init__(self, inner: FileArtifactStore) -> None:
        self.inner = inner
        self.reads: list[str] = []

    def put(
        self, key: str, data: bytes, media_type: str, *, width: int | None = None, height: int | None = None
    ) -> ArtifactRef:
        return self.inner.put(key, data, media_type, width=width, height=height)

    def get(self, ref: ArtifactRef) -> bytes:
        self.reads.append(ref.uri)
        return self.inner.get(ref)

    def find(self, key: str) -> bytes | None:
        self.reads.append(key)
        return self.inner.find(key)

    def key_of(self, ref: ArtifactRef) -> str:
        return self.inner.key_of(ref)


def png(size: tuple[int, int] = (300, 200)) -> bytes:
    """An orange block on a blue backdrop: an upload the cleaning cuts out."""
    picture = Image.new("RGB", size, (40, 160, 220))
    picture.paste((250, 120, 30), (size[0] // 3, size[1] // 5, 2 * size[0] // 3, 9 * size[1] // 10))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def spy_store(stack: Stack) -> SpyStore:
    return SpyStore(stack.store)


@pytest.fixture
def app(stack: Stack, spy_store: SpyStore) -> FastAPI:
    return create_app(stack.sets, spy_store, settings=ReviewSettings(_env_file=None), host="127.0.0.1")


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


async def raw_get(app: Any, raw_path: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, bytes]:
    """A GET of ``raw_path`` exactly as sent (no dot-segment clean-up), decoded as uvicorn decodes it."""
    status, body, _ = await raw_request(app, raw_path, headers)
    return status, body


def asgi_scope(method: str, raw_path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An HTTP request's ASGI scope as uvicorn builds it from the client's ``raw_path`` (decoded as uvicorn does)."""
    path, _, query = raw_path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8300),
    }


async def raw_request(
    app: Any, raw_path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """:func:`raw_get`, with the response's headers."""
    scope = asgi_scope("GET", raw_path, headers or [(b"host", b"127.0.0.1:8300")])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, {k.decode(): v.decode() for k, v in start["headers"]}
