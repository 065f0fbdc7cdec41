"""Guessing the review app's token: what 3,000 wrong tokens get from a real server (uvicorn on loopback, token mode).

One client sends ``--guesses`` wrong tokens one after another, then the right one; the answers are counted by status.
The gate answers 403 to the first wrong ones, then 429 (with ``Retry-After``) to everything from that client, the
right token included, until its window has passed: a guesser gets :data:`~starter.review.auth.FAILURES_ALLOWED`
guesses a minute, whatever its speed. Figures only, no assertion (the tests check the behaviour).

    python -m benchmarks.review_guessing [--guesses 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import secrets
import socket
import time
from typing import cast

import httpx
import uvicorn
from pydantic import SecretStr

from core.artifacts import ArtifactStore
from starter.client import EmojiSetClient
from starter.review.app import create_app
from starter.review.settings import ReviewSettings

PAGE = "/static/review.css"


async def run(guesses: int) -> None:
    token = secrets.token_urlsafe(32)
    settings = ReviewSettings(_env_file=None, review_token=SecretStr(token))
    app = create_app(cast(EmojiSetClient, object()), cast(ArtifactStore, object()), settings=settings, host="0.0.0.0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            statuses: collections.Counter[int] = collections.Counter()
            started = time.perf_counter()
            for _ in range(guesses):
                answer = await http.get(PAGE, headers={"Authorization": f"Bearer {secrets.token_urlsafe(32)}"})
                statuses[answer.status_code] += 1
            elapsed = time.perf_counter() - started
            right = await http.get(PAGE, headers={"Authorization": f"Bearer {token}"})
    finally:
        server.should_exit = True
        await task
    print(
        f"{guesses} wrong tokens in {elapsed:.1f} s ({guesses / elapsed:.0f}/s): "
        + ", ".join(f"{count} x {status}" for status, count in sorted(statuses.items()))
    )
    print(f"then the right token: {right.status_code} (Retry-After {right.headers.get('retry-after')} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guesses", type=int, default=3000)
    asyncio.run(run(parser.parse_args().guesses))


if __name__ == "__main__":
    main()
