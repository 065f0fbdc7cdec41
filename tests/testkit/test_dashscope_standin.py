"""The DashScope stand-in's own rate limit and submit log (what benchmarks/paid_rate.py counts from)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.dashscope_standin import RATE_QUOTA_MESSAGE, TEXT_TO_IMAGE_PATH, FakeDashScope, TokenBucket

KEY = "sk-standin-test"


def test_the_bucket_holds_at_most_one_second_of_its_rate() -> None:
    bucket = TokenBucket(2.0, now=0.0)

    assert [bucket.take(0.0), bucket.take(0.0)] == [None, None]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) is None
    assert bucket.take(10.0) is None and bucket.take(10.0) is None and bucket.take(10.0) == pytest.approx(0.5)


def test_a_rate_below_one_holds_one_submit() -> None:
    bucket = TokenBucket(0.5, now=0.0)

    assert bucket.take(0.0) is None
    assert bucket.take(1.0) == pytest.approx(1.0)
    assert bucket.take(2.0) is None


@pytest.fixture
def limited() -> Iterator[FakeDashScope]:
    with FakeDashScope(api_key=KEY, submits_per_second=1.0) as fake:
        yield fake


def submit(fake: FakeDashScope, body: dict[str, Any]) -> httpx.Response:
    origin = fake.base_url.removesuffix("/api/v1")
    headers = {"Authorization": f"Bearer {KEY}", "X-DashScope-Async": "enable"}
    return httpx.post(origin + TEXT_TO_IMAGE_PATH, json=body, headers=headers)


BODY = {"model": "wan2.2-t2i-flash", "input": {"prompt": "a cat"}, "parameters": {"size": "1024*1024", "n": 3}}


def test_a_submit_past_the_rate_is_throttled_like_the_service_and_logged(limited: FakeDashScope) -> None:
    first, second = submit(limited, BODY), submit(limited, BODY)

    assert first.status_code == 200
    assert second.status_code == 429
    assert second.headers["Retry-After"] == "1"
    assert second.json()["code"] == "Throttling.RateQuota" and second.json()["message"] == RATE_QUOTA_MESSAGE
    accepted, throttled = limited.submit_log
    assert (accepted.outcome, accepted.model, accepted.images, accepted.task_id) == (
        "accepted",
        "wan2.2-t2i-flash",
        3,
        first.json()["output"]["task_id"],
    )
    assert (throttled.outcome, throttled.model, throttled.task_id) == ("throttled", "wan2.2-t2i-flash", None)
    assert accepted.at <= throttled.at
    assert len(limited.tasks) == 1, "a throttled submit creates no task"


def test_a_refused_submit_is_logged_as_refused(limited: FakeDashScope) -> None:
    answer = submit(limited, {"model": "wan2.2-t2i-flash", "input": {"prompt": ""}})

    assert answer.status_code == 400
    (refused,) = limited.submit_log
    assert refused.outcome == "refused"
