"""The name a reviewer signs their messages with, kept in a cookie of their browser.

A reviewer whose credential names them signs with that name. Anyone else types a name once on a set's page; it is
kept in the ``popcon_reviewer`` cookie and signs every approval, start-frame approval and cancel they send after.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import Response

COOKIE = "popcon_reviewer"
NAME_MAX = 200
"""As the messages' ``reviewer`` fields allow."""
SET_PAGE = re.compile(r"/sets/[A-Za-z0-9._-]+")
"""Where the name form may go back to: a set's page (never another site)."""


def reviewer_name(request: Request) -> str:
    """The name kept in the request's cookie ("" when none)."""
    return " ".join(unquote(request.cookies.get(COOKIE, "")).split())[:NAME_MAX]


def remember_name(response: Response, name: str) -> None:
    """Keeps ``name`` in the cookie for a year (a blank one forgets it)."""
    name = " ".join(name.split())[:NAME_MAX]
    if not name:
        response.delete_cookie(COOKIE, path="/")
        return
    response.set_cookie(COOKIE, quote(name), max_age=365 * 24 * 3600, path="/", samesite="strict", httponly=True)
