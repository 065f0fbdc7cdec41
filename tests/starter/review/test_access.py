"""Who may use the review app: credentials beyond loopback (header or a first visit's ?token= that sets a session
cookie), strong ones only, wrong ones throttled, loopback hosts only without any, no cross-origin posts, a CSP on every
page; and the token never reaches the log."""

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
from starter.review.app import CONTENT_SECURITY_POLICY, create_app
from starter.review.auth import COOKIE, FAILURES_ALLOWED, Throttle, same_origin
from starter.review.credentials import WeakSecret
from starter.review.server import RedactToken, plain_http_warning
from starter.review.settings import ReviewSettings, TokenMissing, is_loopback, required_credentials
from tests.starter.review.conftest import raw_request

TOKEN = "s3cret-token-for-tests-2Qx7LkP9vRm4WzJ8"
PAGE = "/static/review.css"
"""A page that needs no Temporal: these tests are about the gate in front of every page."""


def app_on(host: str, token: str | None, *, scheme: str = "http") -> httpx.AsyncClient:
    settings = ReviewSettings(_env_file=None, review_token=SecretStr(token) if token else None)
    client, store = cast(EmojiSetClient, object()), cast(ArtifactStore, object())
    app = create_app(client, store, settings=settings, host=host)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"{scheme}://review.example.org:8300")


def test_a_non_loopback_host_without_a_token_is_refused_before_anything_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for host in ("0.0.0.0", "192.168.1.20", "review.example.org", "::"):
        with pytest.raises(TokenMissing, match="POPCON_REVIEW_SECRET"):
            create_app(
                cast(EmojiSetClient, object()),
                cast(ArtifactStore, object()),
                settings=ReviewSettings(_env_file=None),
                host=host,
            )
    for host in ("127.0.0.1", "::1"):
        assert required_credentials(host, ReviewSettings(_env_file=None)) is None
    credentials = required_credentials("0.0.0.0", ReviewSettings(_env_file=None, review_token=SecretStr(TOKEN)))
    assert credentials is not None and credentials.token == TOKEN
    with pytest.raises(TokenMissing):
        required_credentials("0.0.0.0", ReviewSettings(_env_file=None, review_token=SecretStr("")))
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
        assert cookie.startswith(f"{COOKIE}=prv1.") and "HttpOnly" in cookie and "Max-Age=43200" in cookie
        assert "SameSite=Lax" in cookie and TOKEN not in cookie and "Secure" not in cookie, "plain HTTP: no Secure"
        assert (await http.get(PAGE)).status_code == 200, "the cookie is enough from now on"
        again = await http.get(PAGE, params={"token": TOKEN})
        assert again.headers["set-cookie"] != cookie, "every sign-in gets a session of its own"

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


@pytest.mark.parametrize(
    "weak", ["short-token", "a" * 40, "ab" * 20, "correct horse battery staple and more words"], ids=str.__len__
)
def test_a_weak_token_or_secret_is_refused_before_anything_listens(weak: str) -> None:
    for settings in (
        ReviewSettings(_env_file=None, review_token=SecretStr(weak)),
        ReviewSettings(_env_file=None, review_secret=SecretStr(weak)),
    ):
        with pytest.raises(WeakSecret, match="at least 32 characters without spaces"):
            required_credentials("0.0.0.0", settings)


async def test_over_https_the_session_cookie_is_secure_and_the_browser_told_to_stay() -> None:
    async with app_on("0.0.0.0", TOKEN, scheme="https") as http:
        first = await http.get(PAGE, params={"token": TOKEN})
        assert "; Secure" in first.headers["set-cookie"]
        page = await http.get(PAGE)
        assert page.headers["strict-transport-security"] == "max-age=31536000"


async def test_wrong_tokens_are_throttled_per_client_right_ones_too_until_the_window_passes() -> None:
    async with app_on("0.0.0.0", TOKEN) as http:
        statuses = [(await http.get(PAGE, params={"token": f"guess-{i}"})).status_code for i in range(3000)]
        throttled = await http.get(PAGE, headers={"Authorization": f"Bearer {TOKEN}"})

    assert statuses[:FAILURES_ALLOWED] == [403] * FAILURES_ALLOWED
    assert set(statuses[FAILURES_ALLOWED:]) == {429}, "no more guesses are even checked"
    assert throttled.status_code == 429 and 1 <= int(throttled.headers["retry-after"]) <= 61


def test_the_throttle_forgets_failures_once_the_window_has_passed() -> None:
    now = [1000.0]
    throttle = Throttle(failures=3, window_s=60, clock=lambda: now[0], max_clients=2)
    for _ in range(3):
        assert throttle.retry_after("a") == 0
        throttle.failed("a")
    assert throttle.retry_after("a") == 61 and throttle.retry_after("b") == 0, "per client"
    now[0] += 30
    assert throttle.retry_after("a") == 31
    now[0] += 31
    assert throttle.retry_after("a") == 0
    for client in ("b", "c", "d"):
        throttle.failed(client)
    assert len(throttle._seen) == 2, "a flood of clients cannot fill memory"


def test_the_origin_must_match_scheme_host_and_port() -> None:
    assert same_origin("http://127.0.0.1:8300", "http", "127.0.0.1:8300")
    assert same_origin("https://review.example.org", "https", "review.example.org:443")
    for origin in ("https://127.0.0.1:8300", "http://127.0.0.1:8301", "http://127.0.0.2:8300", "null", "x"):
        assert not same_origin(origin, "http", "127.0.0.1:8300"), origin


async def test_every_page_carries_a_content_security_policy() -> None:
    async with app_on("127.0.0.1", None) as http:
        for page in (PAGE, "/new", "/no-such-page"):
            answer = await http.get(page, headers={"Host": "127.0.0.1:8300"})
            assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, page
    async with app_on("0.0.0.0", TOKEN) as http:
        refused = await http.get("/sets", headers={"Host": "review.example:8300"})  # no credential: the gate's answer
        assert refused.status_code == 401 and refused.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY


def test_serving_beyond_loopback_over_plain_http_is_warned_about() -> None:
    plain = ReviewSettings(_env_file=None, review_token=SecretStr(TOKEN))
    assert plain_http_warning("127.0.0.1", plain) is None
    assert "plain HTTP" in (plain_http_warning("0.0.0.0", plain) or "")
    tls = plain.model_copy(update={"review_tls_certfile": "cert.pem", "review_tls_keyfile": "key.pem"})
    proxied = plain.model_copy(update={"review_forwarded_allow_ips": "10.0.0.2"})
    assert plain_http_warning("0.0.0.0", tls) is None and plain_http_warning("0.0.0.0", proxied) is None
