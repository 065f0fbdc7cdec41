"""The webhook receiver refuses what a backend must (bad or old signatures, other paths), keeps its port across
down/up, and catches a sender that sends two different bodies under one idempotency key: the activity tests rely on
all of it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from core.webhooks import DEFAULT_TOLERANCE_S, SIGNATURE_HEADER, sign
from testkit.webhook_receiver import WebhookReceiver

SECRET = "whsec-receiver-test-4e1f"


def post(receiver: WebhookReceiver, key: str, payload: object, *, secret: str = SECRET, age_s: float = 0) -> int:
    body = json.dumps(payload).encode()
    signature = sign(secret, body, int(time.time() - age_s))
    headers = {"Idempotency-Key": key, SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
    return httpx.post(receiver.url, content=body, headers=headers, timeout=5).status_code


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET) as running:
        yield running


def test_bad_and_old_signatures_get_401_and_are_not_events(receiver: WebhookReceiver) -> None:
    assert post(receiver, "s:1", {"id": "s:1"}, secret="whsec-someone-else") == 401
    assert post(receiver, "s:1", {"id": "s:1"}, age_s=DEFAULT_TOLERANCE_S + 60) == 401
    assert post(receiver, "s:1", {"id": "s:1"}) == 200

    assert [r.signature_valid for r in receiver.requests] == [False, False, True]
    assert receiver.deliveries("s:1") == 3
    assert receiver.events() == [{"id": "s:1"}]


def test_another_path_is_404(receiver: WebhookReceiver) -> None:
    body = b"{}"
    headers = {SIGNATURE_HEADER: sign(SECRET, body, int(time.time()))}

    assert httpx.post(receiver.origin + "/elsewhere", content=body, headers=headers).status_code == 404
    assert receiver.events() == []


def test_two_bodies_under_one_idempotency_key_fail_the_backends_check(receiver: WebhookReceiver) -> None:
    assert post(receiver, "s:1", {"id": "s:1", "phase": "review"}) == 200
    assert post(receiver, "s:1", {"id": "s:1", "phase": "done"}) == 200

    with pytest.raises(AssertionError, match="two deliveries of s:1 carried different bodies"):
        receiver.events()


def test_down_refuses_connections_and_up_listens_on_the_same_port(receiver: WebhookReceiver) -> None:
    url = receiver.url
    receiver.down()
    with pytest.raises(httpx.ConnectError):
        post(receiver, "s:1", {"id": "s:1"})

    receiver.up()
    assert receiver.url == url
    assert post(receiver, "s:1", {"id": "s:1"}) == 200


def test_failures_are_answered_in_turn_and_a_refusal_holds_until_reset(receiver: WebhookReceiver) -> None:
    receiver.fail(2, status=503, retry_after=7)

    assert [post(receiver, f"s:{n}", {"n": n}) for n in range(3)] == [503, 503, 200]
    receiver.refuse(410)
    assert [post(receiver, f"s:{n}", {"n": n}) for n in range(3, 5)] == [410, 410]
    receiver.reset()
    assert post(receiver, "s:5", {"n": 5}) == 200
    assert [e["n"] for e in receiver.events()] == [2, 5]
