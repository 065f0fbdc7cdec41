"""Who may use the review app: a token beyond loopback (header or a first visit's ?token= that sets a cookie),
loopback hosts only without one, no cross-site posts; and the token never reaches the log."""

from __future__ import annotations

import logging
from typing import cast

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from core.artifacts import ArtifactStore
from starter.cli import app as cli
from starter.client import EmojiSetClient
from starter.review.app import create_app
from starter.review.auth import COOKIE, session_value
from starter.review.server import RedactToken
from starter.review.settings import ReviewSettings, TokenMissing, is_loopback, required_token
from tests.starter.review.conftest import raw_request

TOKEN = "s3cret-token-for-tests"
PAGE = "/static/review.css"
"""A page that needs no Temporal: these tests are about the gate in front of every page."""


def app_on(host: str, token: str | None) -> httpx.AsyncClient:
    settings = ReviewSettings(_env_file=None, review_token=SecretStr(token) if token else None)
    client, store = cast(EmojiSetClient, object()), cast(ArtifactStore, object())
    app = create_app(client, store, settings=settings, host=host)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://review.example.org:8300")


def test_a_non_loopback_host_without_a_token_is_refused_before_anything_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for host in ("0.0.0.0", "192.168.1.20", "review.example.org", "::"):
        with pytest.raises(TokenMissing, match="POPCON_REVIEW_TOKEN"):
            create_app(
                cast(EmojiSetClient, object()),
                cast(ArtifactStore, object()),
                settings=ReviewSettings(_env_file=None),
                host=host,
            )
    assert required_token("127.0.0.1", None) is None and required_token("::1", None) is None
    assert required_token("0.0.0.0", SecretStr(TOKEN)) == TOKEN
    with pytest.raises(TokenMissing):
        required_token("0.0.0.0", SecretStr(""))
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")

    monkeypatch.delenv("POPCON_REVIEW_TOKEN", raising=False)
    monkeypatch.chdir("/")  # no .env
    outcome = CliRunner().invoke(cli, ["review", "--host", "0.0.0.0", "--port", "1"])
    assert outcome.exit_code == 1 and "refusing to listen on 0.0.0.0" in outcome.output


async def test_without_a_token_the_request_is_401_and_a_wrong_one_403() -> None:
    async with app_on("0.0.0.0", TOKEN) as http:
        missing = await http.get(PAGE)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in missing.text
        for headers in ({"Authorization": "Bearer nope"}, {"Authorization": f"Basic {TOKEN}"}):
            assert (await http.get(PAGE, headers=headers)).status_code == 403
        assert (await http.get(PAGE, params={"token": "nope"})).status_code == 403
        assert (await http.get(PAGE, headers={"Cookie": f"{COOKIE}=forged"})).status_code == 403
        raw = await http.get(PAGE, headers={"Cookie": f"{COOKIE}={TOKEN}"})
        assert raw.status_code == 403, "the cookie holds no raw token"
        assert (await http.post("/sets/x/approve", data={})).status_code == 401


async def test_the_token_as_a_header_or_once_in_the_address_then_as_a_cookie() -> None:
    async with app_on("0.0.0.0", TOKEN) as http:
        assert (await http.get(PAGE, headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200

        first = await http.get(PAGE, params={"token": TOKEN, "x": "1"})
        assert first.status_code == 303 and first.headers["location"] == f"{PAGE}?x=1", "the token leaves the address"
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={session_value(TOKEN)};") and "HttpOnly" in cookie
        assert "SameSite=Lax" in cookie and TOKEN not in cookie
        assert (await http.get(PAGE)).status_code == 200, "the cookie is enough from now on"

    # An address made to bounce elsewhere stays on this app.
    app = create_app(
        cast(EmojiSetClient, object()),
        cast(ArtifactStore, object()),
        settings=ReviewSettings(_env_file=None, review_token=SecretStr(TOKEN)),
        host="0.0.0.0",
    )
    status, _, headers = await raw_request(app, f"//evil.example/x?token={TOKEN}")
    assert status == 303 and headers["location"] == "/evil.example/x"


async def test_on_loopback_no_token_is_needed_but_only_loopback_hosts_and_own_origin_are_served() -> None:
    async with app_on("127.0.0.1", None) as http:
        assert (await http.get(PAGE)).status_code == 400, "a rebinding host name is refused"
        for host in ("127.0.0.1:8300", "localhost:8300", "[::1]:8300", "localhost"):
            assert (await http.get(PAGE, headers={"Host": host})).status_code == 200, host
        cross = await http.post(
            "/sets/x/approve", headers={"Host": "127.0.0.1:8300", "Origin": "https://evil.example"}, data={}
        )
        assert cross.status_code == 403


def test_the_access_log_never_shows_the_token() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', ("1.2.3.4:5", "GET",
        f"/sets?x=1&token={TOKEN}&y=2", "1.1", 303), None,
    )  # fmt: skip
    assert RedactToken().filter(record)
    assert TOKEN not in record.getMessage() and "token=[redacted]&y=2" in record.getMessage()
