"""The deliver_event activity, run for real in Temporal's ActivityEnvironment against a receiver a backend would be
(testkit/webhook_receiver.py): real HTTP (and HTTPS) on loopback, no mocks. Each test plays the attempts the
DeliverSetEvent workflow's retry policy would make."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.notify import MAX_RETRY_AFTER, USER_AGENT, EventDelivery, retry_after
from core.redact import REDACTED
from core.settings import WebhookSettings
from core.webhooks import verify
from testkit.webhook_receiver import WebhookReceiver
from workflows.contract import DeliverEventInput, EventType, FailureType, SetEvent, Webhook

SECRET = f"whsec-{uuid.uuid4().hex}"
"""Unique: registered for redaction when the settings read it (the registry is process-wide)."""


def settings(*, secret: str = SECRET, allow_private: bool = True, timeout_s: float = 2.0) -> WebhookSettings:
    return WebhookSettings(
        webhook_secrets={"default": secret}, webhook_allow_private=allow_private, webhook_timeout_s=timeout_s
    )


def event(sequence: int = 1, kind: EventType = EventType.AWAITING_REVIEW) -> SetEvent:
    return SetEvent(
        id=f"set-notify:{sequence}",
        type=kind,
        set_id="set-notify",
        sequence=sequence,
        owner="acme",
        at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        phase="review",
        awaiting=["final_review"],
        message="the finished frames wait for a review",
    )


def request(url: str, *, secret: str = "default", sequence: int = 1) -> DeliverEventInput:
    return DeliverEventInput(webhook=Webhook(url=url, secret=secret), event=event(sequence))


async def attempt(delivery: EventDelivery, payload: DeliverEventInput, number: int = 1) -> int:
    """One attempt of the activity, as the ``number``-th attempt of its retry policy."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=number)
    return await env.run(delivery.deliver_event, payload)


async def failed(delivery: EventDelivery, payload: DeliverEventInput, number: int = 1) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await attempt(delivery, payload, number)
    return caught.value


def unavailable(failure: ApplicationError) -> bool:
    return failure.type == FailureType.WEBHOOK_UNAVAILABLE and not failure.non_retryable


def refused(failure: ApplicationError) -> bool:
    return failure.type == FailureType.WEBHOOK_REFUSED and failure.non_retryable


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET) as running:
        yield running


@pytest.fixture
async def delivery() -> AsyncIterator[EventDelivery]:
    delivering = EventDelivery(settings())
    yield delivering
    await delivering.aclose()


async def test_an_event_is_posted_signed_with_its_idempotency_key_and_taken(
    receiver: WebhookReceiver, delivery: EventDelivery
) -> None:
    payload = request(receiver.url)

    assert await attempt(delivery, payload) == 200

    [received] = receiver.requests
    assert received.signature_valid
    assert received.body == payload.event.model_dump_json().encode()
    assert SetEvent.model_validate_json(received.body) == payload.event
    assert received.path == "/hooks/popcon"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["user-agent"] == USER_AGENT
    assert received.headers["host"] == receiver.origin.removeprefix("http://")
    assert received.headers["idempotency-key"] == received.headers["popcon-event-id"] == "set-notify:1"
    assert received.headers["popcon-event-type"] == "set.awaiting_review"
    assert received.headers["popcon-delivery-attempt"] == "1"
    assert not verify("whsec-another-secret", received.headers["popcon-signature"], received.body)
    assert receiver.events() == [payload.event.model_dump(mode="json")]


async def test_a_receiver_that_is_down_is_unavailable_and_takes_the_event_once_it_is_up(
    receiver: WebhookReceiver, delivery: EventDelivery
) -> None:
    payload = request(receiver.url)
    receiver.down()

    failure = await failed(delivery, payload)

    assert unavailable(failure)
    assert failure.message == (
        f"could not connect to the webhook at {receiver.origin}: 127.0.0.1 refused the connection"
    )
    assert failure.next_retry_delay is None, "the retry policy's back-off decides"

    receiver.up()
    assert await attempt(delivery, payload, 2) == 200
    assert [r.headers["popcon-delivery-attempt"] for r in receiver.requests] == ["2"]
    assert receiver.events() == [payload.event.model_dump(mode="json")]


async def test_a_receiver_slower_than_the_timeout_is_unavailable_and_the_retry_is_deduplicated(
    receiver: WebhookReceiver,
) -> None:
    payload = request(receiver.url)
    delivery = EventDelivery(settings(timeout_s=0.5))
    try:
        receiver.slow(1.5)
        failure = await failed(delivery, payload)
        assert unavailable(failure)
        assert failure.message == f"the webhook at {receiver.origin} did not answer within 0.5s"

        receiver.slow(0)
        assert await attempt(delivery, payload, 2) == 200
    finally:
        await delivery.aclose()
    receiver.wait_answered()

    first, second = receiver.requests
    assert first.status == second.status == 200, "the backend took the first one too, after the client gave up"
    assert first.idempotency_key == second.idempotency_key == "set-notify:1"
    assert first.body == second.body
    assert (first.headers["popcon-delivery-attempt"], second.headers["popcon-delivery-attempt"]) == ("1", "2")
    assert receiver.deliveries("set-notify:1") == 2
    assert receiver.events() == [payload.event.model_dump(mode="json")]


async def test_a_failed_attempt_then_a_retry_carry_the_same_key_and_body_and_the_event_is_taken_once(
    receiver: WebhookReceiver, delivery: EventDelivery
) -> None:
    first_event, second_event = request(receiver.url, sequence=1), request(receiver.url, sequence=2)
    receiver.fail(1, status=503)

    assert unavailable(await failed(delivery, first_event, 1))
    assert await attempt(delivery, first_event, 2) == 200
    assert await attempt(delivery, second_event, 1) == 200

    assert [r.idempotency_key for r in receiver.requests] == ["set-notify:1", "set-notify:1", "set-notify:2"]
    assert [r.status for r in receiver.requests] == [503, 200, 200]
    assert receiver.deliveries("set-notify:1") == 2
    assert [e["id"] for e in receiver.events()] == ["set-notify:1", "set-notify:2"]


@pytest.mark.parametrize(
    ("status", "retry_after_value", "delay"),
    [
        (500, None, None),
        (503, "30", timedelta(seconds=30)),
        (502, "0", timedelta(seconds=1)),
        (429, "3600", MAX_RETRY_AFTER),
        (408, None, None),
        (409, None, None),
        (425, "2", timedelta(seconds=2)),
    ],
)
async def test_5xx_and_not_now_answers_are_unavailable_after_retry_after(
    receiver: WebhookReceiver,
    delivery: EventDelivery,
    status: int,
    retry_after_value: str | None,
    delay: timedelta | None,
) -> None:
    receiver.fail(1, status=status, retry_after=retry_after_value, body="try later")

    failure = await failed(delivery, request(receiver.url))

    assert unavailable(failure)
    assert failure.message.startswith(f"the webhook at {receiver.origin} answered HTTP {status} ('try later')")
    assert failure.next_retry_delay == delay
    assert failure.message.endswith(
        "('try later')" if delay is None else f"; next attempt in {delay.total_seconds():g}s (Retry-After)"
    )
    assert receiver.events() == []


@pytest.mark.parametrize("status", [410, 400, 403, 404, 413, 301])
async def test_other_4xx_and_redirects_are_refused_for_good(
    receiver: WebhookReceiver, delivery: EventDelivery, status: int
) -> None:
    receiver.refuse(status, body="this   hook\nwas removed")

    failure = await failed(delivery, request(receiver.url))

    assert refused(failure)
    assert failure.message.startswith(
        f"the webhook at {receiver.origin} answered HTTP {status} ('this hook was removed')"
    )
    assert ("a redirect" in failure.message) == (status == 301)


async def test_a_wrong_secret_is_refused_by_the_receiver_and_so_for_good(receiver: WebhookReceiver) -> None:
    delivery = EventDelivery(settings(secret="whsec-not-the-receivers-one"))
    try:
        failure = await failed(delivery, request(receiver.url))
    finally:
        await delivery.aclose()

    assert refused(failure)
    assert "answered HTTP 401 ('invalid signature'): it will not take the event" in failure.message
    assert [r.signature_valid for r in receiver.requests] == [False]


async def test_a_secret_that_is_not_configured_is_refused_before_anything_is_sent(
    receiver: WebhookReceiver, delivery: EventDelivery
) -> None:
    failure = await failed(delivery, request(receiver.url, secret="billing"))

    assert refused(failure)
    assert failure.message == "the webhook secret 'billing' is not configured: set POPCON_WEBHOOK_SECRETS"
    assert receiver.requests == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_private_address_is_refused_unless_the_deployment_allows_it(
    receiver: WebhookReceiver, host: str
) -> None:
    delivery = EventDelivery(settings(allow_private=False))
    try:
        failure = await failed(delivery, request(receiver.url.replace("127.0.0.1", host)))
    finally:
        await delivery.aclose()

    assert refused(failure)
    assert "a loopback address: webhooks go to public addresses only" in failure.message
    assert receiver.requests == []


async def test_a_host_that_does_not_resolve_is_refused(delivery: EventDelivery) -> None:
    failure = await failed(delivery, request("https://no-such-host.invalid/hooks"))

    assert refused(failure)
    assert failure.message == "the webhook host no-such-host.invalid does not resolve"


async def test_a_name_is_posted_to_its_checked_address_with_its_own_host_header(
    receiver: WebhookReceiver, delivery: EventDelivery
) -> None:
    url = receiver.url.replace("127.0.0.1", "localhost")

    assert await attempt(delivery, request(url)) == 200

    [received] = receiver.requests
    assert received.headers["host"] == url.removeprefix("http://").removesuffix(receiver.path)
    assert received.signature_valid


async def test_over_https_the_certificate_is_checked_against_the_urls_host() -> None:
    with WebhookReceiver(SECRET, tls=True) as receiver:
        url = receiver.url.replace("127.0.0.1", "localhost")
        trusting = EventDelivery(settings(), client=lambda: httpx.AsyncClient(verify=receiver.client_context()))
        untrusting = EventDelivery(settings())
        try:
            assert await attempt(trusting, request(url)) == 200
            failure = await failed(untrusting, request(url))
        finally:
            await trusting.aclose()
            await untrusting.aclose()

        assert receiver.events() == [event().model_dump(mode="json")]
    assert unavailable(failure)
    assert failure.message.startswith(
        f"could not connect to the webhook at https://localhost:{url.split(':')[2].split('/')[0]}: "
        "its TLS certificate was not accepted (self-signed certificate"
    )


async def test_no_secret_or_signature_reaches_a_message_or_the_log(
    receiver: WebhookReceiver, delivery: EventDelivery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="activities.notify")
    assert await attempt(delivery, request(receiver.url, sequence=1)) == 200
    receiver.refuse(403, body=f"signature mismatch: we hold {SECRET}, Authorization: Bearer abcdef0123456789")
    failure = await failed(delivery, request(receiver.url, sequence=2))
    await failed(delivery, request(receiver.url, secret="missing", sequence=3))

    signatures = [r.headers["popcon-signature"] for r in receiver.requests]
    assert len(signatures) == 2
    assert f"we hold {REDACTED}" in failure.message
    assert "abcdef0123456789" not in failure.message
    logged = caplog.text
    assert "event set-notify:1 (set.awaiting_review) attempt 1 delivered to http://127.0.0.1" in logged
    assert "event set-notify:2 (set.awaiting_review) attempt 1 to http://127.0.0.1" in logged
    assert "WebhookRefused: the webhook secret 'missing' is not configured" in logged
    for text in (failure.message, logged):
        assert SECRET not in text
        for signature in signatures:
            assert signature not in text
            assert signature.split("v1=")[1] not in text


@pytest.mark.parametrize(
    ("value", "delay"),
    [
        (None, None),
        ("soon", None),
        ("nan", None),
        ("12", timedelta(seconds=12)),
        (" 1.5 ", timedelta(seconds=1.5)),
        ("-4", timedelta(seconds=1)),
        ("86400", MAX_RETRY_AFTER),
        ("Thu, 01 Jan 2026 00:01:00 GMT", timedelta(seconds=60)),
        ("Wed, 31 Dec 2025 23:00:00 GMT", timedelta(seconds=1)),
    ],
)
def test_retry_after_in_seconds_or_as_a_date_is_kept_within_bounds(value: str | None, delay: timedelta | None) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    assert retry_after(value, now=now) == delay


async def test_an_event_without_a_webhook_of_its_own_goes_to_the_deployments_read_when_delivered(
    receiver: WebhookReceiver,
) -> None:
    deployment = EventDelivery(settings().model_copy(update={"webhook_url": receiver.url}))
    nowhere = EventDelivery(settings())
    try:
        assert await attempt(deployment, DeliverEventInput(event=event())) == 200
        failure = await failed(nowhere, DeliverEventInput(event=event(2)))
    finally:
        await deployment.aclose()
        await nowhere.aclose()

    assert [e["id"] for e in receiver.events()] == ["set-notify:1"] and receiver.requests[0].signature_valid
    assert refused(failure) and failure.message == "the set names no webhook and POPCON_WEBHOOK_URL is empty"
