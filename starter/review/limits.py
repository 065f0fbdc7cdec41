"""What a request may make the review app read, checked before the work it bounds.

- :class:`BodyLimit`: a body over :data:`MAX_BODY_BYTES` is refused (413) before it is read.
- :func:`parse_json`: a JSON body over a byte limit, or nested deeper than a depth limit, is refused before
  ``json.loads`` (which recurses once a level) sees it.
- :func:`is_number`, :func:`parse_number`, :func:`parse_decimal`: numbers in addresses and forms are ASCII digits,
  at most :data:`MAX_DIGITS` of them, before ``int`` or ``float`` sees them (``str.isdigit`` takes ``²``, and
  ``int`` refuses 5,000 digits with an error of its own).
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workflows.contract import MAX_UPLOAD_BYTES

FORM_FIELDS_BYTES = 256 * 1024
"""Room for the start form's fields beside its picture. At their longest (a prompt, a style and an owner, 24 custom
actions of a name and two 500-character prompts, in UTF-8 up to 4 bytes a character, the action and target lists,
and each part's multipart headers) they come to about 120 KB."""
MAX_BODY_BYTES = MAX_UPLOAD_BYTES + FORM_FIELDS_BYTES
"""The largest request body the app reads: the start form with the largest picture an upload may be."""
MAX_JSON_BYTES = 16 * 1024
"""The largest JSON body the app parses. The refine endpoint's (``MAX_REFINE_POINTS`` clicks) is about 1.5 KB."""
MAX_JSON_DEPTH = 8
"""The deepest a JSON body may nest (objects and arrays). The refine endpoint's nests 3 deep."""
MAX_DIGITS = 9
"""The most digits a number in an address or a form may have: every count and index the app takes is smaller."""

_NUMBER = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")
_DECIMAL = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{1,{MAX_DIGITS}}})?|\.[0-9]{{1,{MAX_DIGITS}}}")
_JSON_STRUCTURE = re.compile(r'(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")|(?P<open>[\[{])|(?P<close>[\]}])', re.DOTALL)
"""A JSON string (escapes included: the brackets in it are text), or a bracket that opens or closes a level."""
_SHOWN = 20
"""How much of a refused value an error message repeats."""


class InputRefused(ValueError):
    """A number, or a JSON body, the app does not read; the message says why, for the person who sent it."""


class BodyTooLarge(Exception):
    """Raised into the app by :class:`BodyLimit` when the body read passes the limit; the middleware answers 413.

    Not a ``ValueError``: the app's handlers of bad input must not catch it and answer in its place.
    """


class BodyLimit:
    """ASGI middleware: a request whose body is over ``limit`` bytes is answered 413 before its body is read.

    A ``Content-Length`` over the limit is refused at once: the app is not called. A body without one (chunked), or
    longer than it said, is counted as the app reads it: the read that passes the limit raises :class:`BodyTooLarge`
    into the app instead of returning, nothing more is read, and the middleware answers 413 (unless the app had
    started its answer; then the error goes on to the server, which closes the connection).
    """

    def __init__(self, app: ASGIApp, *, limit: int = MAX_BODY_BYTES) -> None:
        """Wrap ``app``.

        Args:
            app: The ASGI app whose requests are bounded.
            limit: The most body bytes a request may send.
        """
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._declared_over(scope):
            await self._refuse(send)
            return
        received = 0
        answering = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(f"the request body passed {self.limit:,} bytes")
            return message

        async def watched(message: Message) -> None:
            nonlocal answering
            answering = answering or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except* BodyTooLarge:  # grouped when it passes a task group (an ``http`` middleware's receive has one)
            if answering:
                raise
            await self._refuse(send)

    def _declared_over(self, scope: Scope) -> bool:
        """Whether the request's ``Content-Length`` is over the limit (one that is no number is left to the count)."""
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-length" and value.isdigit():
                digits = value.lstrip(b"0") or b"0"
                return len(digits) > len(str(self.limit)) or int(digits) > self.limit
        return False

    async def _refuse(self, send: Send) -> None:
        body = (
            f"the request is over {self.limit:,} bytes, more than this app reads "
            f"(a character picture may be at most {MAX_UPLOAD_BYTES:,} bytes)"
        ).encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def is_number(text: str) -> bool:
    """Whether ``text`` is a whole number as addresses and forms give one: 1 to :data:`MAX_DIGITS` ASCII digits."""
    return _NUMBER.fullmatch(text) is not None


def parse_number(text: str, name: str) -> int:
    """``text`` as a whole number (see :func:`is_number`).

    Args:
        text: The value as sent.
        name: What it is, for the error message.

    Raises:
        InputRefused: It is not 1 to :data:`MAX_DIGITS` ASCII digits.
    """
    if not is_number(text):
        raise InputRefused(f"{name} must be a whole number of at most {MAX_DIGITS} digits (0-9), got {_shown(text)}")
    return int(text)


def parse_decimal(text: str, name: str) -> float:
    """``text`` as a number with an optional decimal point, such as ``2``, ``1.5`` or ``.5`` (ASCII digits only, at
    most :data:`MAX_DIGITS` on either side of the point: no sign, exponent, ``inf`` or ``nan``).

    Args:
        text: The value as sent.
        name: What it is, for the error message.

    Raises:
        InputRefused: It is not such a number.
    """
    if _DECIMAL.fullmatch(text) is None:
        raise InputRefused(
            f"{name} must be a number such as 2 or 1.5 (digits 0-9 and a decimal point), got {_shown(text)}"
        )
    return float(text)


def parse_json(body: bytes, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of ``body``, its size and nesting checked before it is parsed.

    Args:
        body: The request body, UTF-8.
        max_bytes: The most bytes it may have.
        max_depth: The most levels of objects and arrays it may nest.

    Raises:
        InputRefused: It is over ``max_bytes``, not UTF-8, nested deeper than ``max_depth``, or not JSON.
    """
    if len(body) > max_bytes:
        raise InputRefused(f"the JSON body is {len(body):,} bytes; at most {max_bytes:,} are read")
    try:
        text = body.decode()
    except UnicodeDecodeError as err:
        raise InputRefused("the JSON body is not UTF-8 text") from err
    depth = 0
    for token in _JSON_STRUCTURE.finditer(text):
        if token.lastgroup == "open":
            depth += 1
            if depth > max_depth:
                raise InputRefused(f"the JSON body nests deeper than {max_depth} levels")
        elif token.lastgroup == "close":
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as err:
        raise InputRefused(f"the body is not JSON: {err}") from err


def _shown(text: str) -> str:
    """``text`` for an error message: quoted, and cut short when long."""
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text):,} characters)"
