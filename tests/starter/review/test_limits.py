"""What a request may make the review app read: bodies over the limit refused before they are read (declared or
chunked), JSON bounded in bytes and nesting before it is parsed, numbers strictly ASCII digits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.datastructures import UploadFile

from starter.review.limits import (
    FORM_FIELDS_BYTES,
    MAX_BODY_BYTES,
    MAX_JSON_BYTES,
    BodyLimit,
    BodyTooLarge,
    InputRefused,
    is_number,
    parse_decimal,
    parse_json,
    parse_number,
)
from tests.starter.review.conftest import asgi_scope
from workflows.contract import MAX_UPLOAD_BYTES

BOUNDARY = "limits-test-boundary"
FILE_PART = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="character_file"; filename="cat.png"\r\n'
    "Content-Type: image/png\r\n\r\n"
).encode()
CLOSE = f"\r\n--{BOUNDARY}--\r\n".encode()
CHUNK = b"x" * 1000
MEGABYTE = [FILE_PART, *[CHUNK] * 1000, CLOSE]
"""A form whose picture is 1 MB, in 1000-byte chunks."""


def form_app(limit: int) -> FastAPI:
    """An app built as the review app is: a form endpoint, an ``http`` middleware, and :class:`BodyLimit`."""
    app = FastAPI()

    @app.middleware("http")
    async def passing(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        return await call_next(request)

    @app.post("/new")
    async def new(request: Request) -> Response:
        form = await request.form()
        upload = form["character_file"]
        assert isinstance(upload, UploadFile)
        return PlainTextResponse(f"read {len(await upload.read())} bytes")

    app.add_middleware(BodyLimit, limit=limit)
    return app


async def post(app: Any, chunks: list[bytes], *, content_length: str | None = None) -> tuple[int, str, int]:
    """A multipart POST of ``chunks`` (the last one ends the body), as an ASGI server sends it: (status, body, how
    many chunks the app read)."""
    headers = [(b"host", b"127.0.0.1:8300"), (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())]
    if content_length is not None:
        headers.append((b"content-length", content_length.encode()))
    scope = asgi_scope("POST", "/new", headers)
    reads = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        body = chunks[reads] if reads < len(chunks) else b""
        reads += 1
        return {"type": "http.request", "body": body, "more_body": reads < len(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body.decode(), reads


def whole(size: int) -> list[bytes]:
    """A multipart body with a file of ``size`` bytes, in 1000-byte chunks."""
    data = FILE_PART + b"x" * size + CLOSE
    return [data[i : i + 1000] for i in range(0, len(data), 1000)]


# --- BodyLimit ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", ["10001", "9" * 5000], ids=["one-over", "5000-digits"])
async def test_a_declared_body_over_the_limit_is_refused_before_the_app_runs(length: str) -> None:
    called: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope["path"])

    status, body, reads = await post(BodyLimit(app, limit=10_000), [CHUNK], content_length=length)

    assert status == 413 and "over 10,000 bytes" in body
    assert called == [] and reads == 0, "nothing was read"


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit() -> None:
    status, body, reads = await post(form_app(10_000), MEGABYTE)

    assert status == 413 and "over 10,000 bytes" in body
    assert reads == 1 + (10_000 - len(FILE_PART)) // 1000 + 1, "the read that passed the limit was the last"


async def test_a_body_longer_than_it_declared_is_counted_too() -> None:
    status, _, reads = await post(form_app(10_000), MEGABYTE, content_length="5000")

    assert status == 413 and reads == 1 + (10_000 - len(FILE_PART)) // 1000 + 1


async def test_once_the_app_answers_passing_the_limit_is_left_to_the_server() -> None:
    """A second answer would break the protocol: the error goes on, and the server closes the connection."""

    async def early(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while (await receive()).get("more_body"):
            pass

    with pytest.raises(ExceptionGroup) as raised:
        await post(BodyLimit(early, limit=10_000), MEGABYTE)
    assert raised.group_contains(BodyTooLarge)


async def test_a_body_of_the_limit_is_read_and_one_byte_more_is_not() -> None:
    chunks = whole(20_000)
    size = sum(map(len, chunks))

    assert (await post(form_app(size), chunks, content_length=str(size)))[:2] == (200, "read 20000 bytes")
    assert (await post(form_app(size), chunks))[:2] == (200, "read 20000 bytes")
    assert (await post(form_app(size - 1), chunks))[0] == 413


async def test_the_largest_start_form_fits_the_limit() -> None:
    """The picture at its largest and every other field at its longest, in 4-byte UTF-8 characters."""
    wide = "😀"
    fields: dict[str, Any] = {
        "character_prompt": wide * 800,
        "style": wide * 200,
        "owner": wide * 200,
        "actions": [f"action-{n}" for n in range(24)],
        "custom_name": ["a" * 40] * 24,
        "custom_pose": [wide * 500] * 24,
        "custom_motion": [wide * 500] * 24,
        "export_targets": ["generic", "line-emoji", "line-sticker", "telegram", "discord", "slack"],
        **{name: "123456789" for name in ("frames_per_emoji", "takes_per_action", "neighbours", "clip_fps", "seed")},
        **{f"review_{name}": "human" for name in ("character", "start_frames", "final")},
        "deadline_hours": "123456789.123456789",
    }
    files = {"character_file": ("a-long-file-name-" * 8 + ".png", b"\0" * MAX_UPLOAD_BYTES, "image/png")}
    request = httpx.Request("POST", "http://127.0.0.1:8300/new", data=fields, files=files)

    assert MAX_BODY_BYTES == MAX_UPLOAD_BYTES + FORM_FIELDS_BYTES
    assert len(request.read()) <= MAX_BODY_BYTES


# --- numbers -----------------------------------------------------------------------------------------------------

FULLWIDTH_ONE = "\uff11"
NOT_NUMBERS = ["", "²", "٣", FULLWIDTH_ONE, "-1", "+1", " 1", "1 ", "1\n", "1.0", "1e3", "0x1", "1_000", "1234567890"]
NOT_NUMBERS += ["9" * 5000]


@pytest.mark.parametrize("text", ["0", "7", "042", "123456789"])
def test_a_whole_number_is_one_to_nine_ascii_digits(text: str) -> None:
    assert is_number(text) and parse_number(text, "frame") == int(text)


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_anything_else_is_no_whole_number(text: str) -> None:
    assert not is_number(text)
    with pytest.raises(InputRefused, match=r"^frame must be a whole number of at most 9 digits \(0-9\), got ") as err:
        parse_number(text, "frame")
    assert len(str(err.value)) < 120, "a long value is cut short in the message"


@pytest.mark.parametrize(("text", "value"), [("2", 2.0), ("1.5", 1.5), (".5", 0.5), ("24.000000001", 24.000000001)])
def test_a_decimal_is_ascii_digits_and_a_point(text: str, value: float) -> None:
    assert parse_decimal(text, "deadline_hours") == value


NOT_DECIMALS = ["inf", "nan", "1e308", "1.", "1,5", "-0.5", "1.2.3", "1234567890.5", "0.1234567890"]


@pytest.mark.parametrize("text", [*NOT_DECIMALS, *NOT_NUMBERS[:4]])
def test_anything_else_is_no_decimal(text: str) -> None:
    with pytest.raises(InputRefused, match=r"^deadline_hours must be a number such as 2 or 1\.5"):
        parse_decimal(text, "deadline_hours")


# --- JSON --------------------------------------------------------------------------------------------------------


def test_a_refine_body_is_parsed() -> None:
    body = b'{"points": [{"x": 10, "y": 20, "foreground": true}], "mode": "erase", "following": false}'
    assert parse_json(body) == {
        "points": [{"x": 10, "y": 20, "foreground": True}],
        "mode": "erase",
        "following": False,
    }


def test_a_100000_deep_body_is_refused_before_it_is_parsed() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(InputRefused, match="nests deeper than 8 levels"):
        parse_json(deep, max_bytes=len(deep))


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (b"[" * 8 + b"]" * 8, False),
        (b"[" * 9 + b"]" * 9, True),
        (b'{"a": {"b": ' * 4 + b"1" + b"}}" * 4, False),
        (b'{"a": {"b": ' * 4 + b"{}" + b"}}" * 4, True),
        (b'["[[[[[[[[[[[[[[[["]', False),
        (b'["\\"[[[[[[[[[[[[[[[[", "]]]]]]]]]"]', False),
        (b'["\\\\", [[[[[[[[[]]]]]]]]]]', True),
    ],
    ids=["8-deep", "9-deep", "objects-8-deep", "objects-9-deep", "in-a-string", "escaped-quote", "escaped-backslash"],
)
def test_nesting_is_counted_outside_strings(body: bytes, refused: bool) -> None:
    if refused:
        with pytest.raises(InputRefused, match="nests deeper than 8 levels"):
            parse_json(body)
    else:
        parse_json(body)


def test_a_body_over_the_byte_limit_is_refused_unread() -> None:
    body = b'{"points": []}'.ljust(MAX_JSON_BYTES + 1)
    with pytest.raises(InputRefused, match=f"is {MAX_JSON_BYTES + 1:,} bytes; at most {MAX_JSON_BYTES:,} are read"):
        parse_json(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"x": "\xff"}', "not UTF-8"),
        (b'{"points": [', "not JSON"),
        (b"", "not JSON"),
        (b'{"x": ' + b"9" * 5000 + b"}", "not JSON"),
    ],
    ids=["not-utf-8", "cut-short", "empty", "5000-digits"],
)
def test_a_body_that_is_no_json_is_refused_as_bad_input(body: bytes, message: str) -> None:
    with pytest.raises(InputRefused, match=message) as err:
        parse_json(body)
    assert isinstance(err.value, ValueError)
