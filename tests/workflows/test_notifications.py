"""A set's events reach its backend's webhook: signed, each once in the backend's view, whatever the receiver does;
the set never waits for them (real dev server, both workers, a loopback receiver)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from core.settings import WebhookSettings
from starter.client import EmojiSetClient, SetNotFound, StartRefused
from testkit.generator_standins import REFUSED_ACTION
from testkit.stack import WEBHOOK_SECRET, Stack, wait_for_phase
from testkit.webhook_receiver import WebhookReceiver
from workflows.contract import (
    DELIVER_EVENT_WORKFLOW_TYPE,
    ActionStage,
    EmojiSetInput,
    EmojiSetState,
    EventType,
    Phase,
    RegenerateActionInput,
    ReviewPolicy,
    StagePolicy,
    Webhook,
)

CAT = "a round orange cat with a blue scarf"
SMALL: dict[str, Any] = {
    "actions": ["wave", REFUSED_ACTION],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
}


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(WEBHOOK_SECRET) as running:
        yield running


async def start(stack: Stack, set_id: str, receiver: WebhookReceiver, **overrides: Any) -> None:
    fields = {"character_prompt": CAT, **SMALL, "webhook": Webhook(url=receiver.url), **overrides}
    await stack.sets.start(EmojiSetInput(**fields), set_id=set_id)


async def events_of(receiver: WebhookReceiver, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    """The backend's view once it holds ``count`` events."""
    async with asyncio.timeout(timeout):
        while len(events := receiver.events()) < count:
            await asyncio.sleep(0.2)
    return events


async def wait_for_failure(stack: Stack, set_id: str, timeout: float = 60) -> EmojiSetState:
    async with asyncio.timeout(timeout):
        while (state := await stack.sets.state(set_id)).failure is None:
            await asyncio.sleep(0.1)
    return state


async def test_each_wait_for_a_person_and_the_end_reach_the_backend_once_signed_in_order(
    stack: Stack, set_id: str, receiver: WebhookReceiver
) -> None:
    await start(stack, set_id, receiver)
    async with asyncio.timeout(60):  # both actions' start frames, so one approval settles them
        while not all(
            a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in (await stack.sets.state(set_id)).actions
        ):
            await asyncio.sleep(0.1)
    await stack.sets.approve_start_frames(set_id, reviewer="ana")
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)

    events = await events_of(receiver, 3)

    assert [e["type"] for e in events] == [
        EventType.AWAITING_START_FRAME_REVIEW,
        EventType.AWAITING_REVIEW,
        EventType.COMPLETED,
    ]
    assert [e["id"] for e in events] == [f"{set_id}:1", f"{set_id}:2", f"{set_id}:3"]
    assert all(r.signature_valid for r in receiver.requests) and len(receiver.requests) == 3
    assert events[0]["awaiting"] == ["start_frame_review"] and "until" in events[0]["message"]
    assert events[1]["awaiting"] == ["final_review"]
    assert result.cost is not None and events[2]["cost"] == result.cost.model_dump(mode="json")
    assert events[2]["phase"] == "completed"
    headers = receiver.requests[0].headers
    assert headers["idempotency-key"] == f"{set_id}:1"
    assert headers["popcon-event-type"] == "set.awaiting_start_frame_review"


async def test_a_receiver_down_slow_or_failing_delays_only_the_events_never_the_set(
    stack: Stack, set_id: str, receiver: WebhookReceiver
) -> None:
    receiver.down()
    await start(stack, set_id, receiver, review=ReviewPolicy.automatic())
    result = await stack.sets.result(set_id)  # completes with its receiver down
    assert result.status == "completed"
    receiver.slow(stack.settings.webhooks.webhook_timeout_s + 1)  # the next attempt times out, then is processed
    receiver.fail(2, status=503, retry_after=1)
    receiver.up()

    [event] = await events_of(receiver, 1)
    receiver.slow(0)
    receiver.wait_answered()

    assert event["type"] == EventType.COMPLETED and event["id"] == f"{set_id}:1"
    assert receiver.deliveries(event["id"]) >= 2, "retried: the slow answer came after the client gave up"
    assert len(receiver.events()) == 1, "each event once in the backend's view"


async def test_an_action_waiting_for_a_custom_prompt_and_a_cancel_are_announced(
    stack: Stack, set_id: str, receiver: WebhookReceiver
) -> None:
    await start(stack, set_id, receiver, generator="refuses-clip", review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.cancel(set_id, reason="wrong character", reviewer="bo")
    await stack.sets.result(set_id)

    events = await events_of(receiver, 3)

    assert [e["type"] for e in events] == [
        EventType.WAITING_FOR_PROMPT,
        EventType.AWAITING_REVIEW,
        EventType.CANCELLED,
    ]
    assert events[0]["message"].startswith(f"{REFUSED_ACTION} waits for a custom prompt: every take failed")
    assert events[2]["message"] == "wrong character"


async def test_a_failed_set_is_announced_with_its_reason(stack: Stack, set_id: str, receiver: WebhookReceiver) -> None:
    await start(stack, set_id, receiver, matting_pipeline="nonsense-pipeline")

    [event] = await events_of(receiver, 1)

    assert event["type"] == EventType.FAILED and "nonsense-pipeline" in event["message"]
    assert (await stack.sets.describe_status(set_id)) is WorkflowExecutionStatus.FAILED


async def test_a_refusing_receiver_fails_only_the_delivery(
    stack: Stack, set_id: str, receiver: WebhookReceiver
) -> None:
    receiver.refuse(410)
    await start(stack, set_id, receiver, review=ReviewPolicy.automatic())

    assert (await stack.sets.result(set_id)).status == "completed"
    delivery = stack.client.get_workflow_handle(f"{set_id}/event-1")
    async with asyncio.timeout(30):
        while (await delivery.describe()).status is WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(0.2)
    description = await delivery.describe()
    assert description.workflow_type == DELIVER_EVENT_WORKFLOW_TYPE
    assert description.status is WorkflowExecutionStatus.FAILED and receiver.deliveries(f"{set_id}:1") == 1


async def test_a_bad_webhook_is_refused_before_anything_starts(stack: Stack, set_id: str) -> None:
    with pytest.raises(ValueError, match="must start with http:// or https://"):
        Webhook(url="ftp://example.com/hook")
    with pytest.raises(ValueError, match="may not carry a user or password"):
        Webhook(url="https://user:pw@example.com/hook")
    backend = EmojiSetClient(
        stack.client,
        store=stack.store,
        webhooks=WebhookSettings(_env_file=None, webhook_secrets={"default": WEBHOOK_SECRET}),
    )
    private = EmojiSetInput(character_prompt=CAT, **SMALL, webhook=Webhook(url="http://127.0.0.1:9/hook"))
    unknown_secret = private.model_copy(update={"webhook": Webhook(url="https://example.com/hook", secret="other")})

    with pytest.raises(StartRefused, match=r"the webhook address 127\.0\.0\.1 is (a )?loopback"):
        await backend.start(private, set_id=set_id)
    with pytest.raises(StartRefused, match="the webhook secret 'other' is not configured"):
        await backend.start(unknown_secret, set_id=set_id)
    with pytest.raises(SetNotFound):  # nothing started
        await stack.sets.state(set_id)


async def test_the_workers_refuse_a_webhook_secret_they_lack_before_any_paid_call(stack: Stack, set_id: str) -> None:
    await stack.sets.start(
        EmojiSetInput(character_prompt=CAT, **SMALL, webhook=Webhook(url="http://127.0.0.1:9/hook", secret="other")),
        set_id=set_id,
    )

    state = await wait_for_failure(stack, set_id)

    assert state.failure is not None and "the webhook secret 'other' is not configured" in state.failure.message
    assert state.ledger.calls == [] and state.character.candidates == []


async def test_a_set_cancelled_in_temporal_while_it_works_is_announced_and_stops(
    stack: Stack, set_id: str, receiver: WebhookReceiver
) -> None:
    await start(
        stack, set_id, receiver, generator="slow-regenerations", review=ReviewPolicy(start_frames=StagePolicy.AUTO)
    )
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.regenerate_action(
        RegenerateActionInput(emoji=REFUSED_ACTION, motion_prompt="slowly"), set_id=set_id
    )

    await stack.client.get_workflow_handle(set_id).cancel()  # an operator, in the Web UI or the Temporal CLI

    events = await events_of(receiver, 2)
    state = await stack.sets.state(set_id)
    assert [e["type"] for e in events] == [EventType.AWAITING_REVIEW, EventType.CANCELLED]
    assert events[1]["message"] == "cancelled in Temporal" and state.phase is Phase.CANCELLED
    assert (await stack.sets.describe_status(set_id)) is WorkflowExecutionStatus.CANCELED
    stopped = [(c.role.value, c.outcome.value) for c in state.ledger.calls if c.cause.value == "regeneration"]
    assert stopped == [("clip", "stopped")], "the new take's clip, stopped: the provider may bill it"
