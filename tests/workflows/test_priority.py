"""Each owner's sets are fair to each other on both queues, and work a reviewer waits for goes first: the set's
workflow carries its owner as fairness key (its production activities inherit it), a reviewer's frame edit and
refinement are scheduled at the interactive priority with the same key."""

from __future__ import annotations

from collections import defaultdict

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskScheduledEventAttributes

from starter.client import EmojiSetClient
from testkit.stack import Stack, wait_for_phase
from tests.starter.review.test_review_app import start_set
from workflows.contract import (
    INTERACTIVE_PRIORITY,
    PRODUCTION_PRIORITY,
    EmojiSetInput,
    Phase,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    RegenerateFrameInput,
    ReviewPolicy,
    StagePolicy,
    fairness_key,
)


async def test_a_sets_owner_is_its_fairness_key_and_a_reviewers_work_goes_first(stack: Stack, set_id: str) -> None:
    await start_set(stack, set_id, owner="acme", review=ReviewPolicy(start_frames=StagePolicy.AUTO))
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=1, prompt="eyes closed"), set_id=set_id)
    pick = state.actions[0].frames[0].picked()
    assert pick is not None
    await stack.sets.refine_frame(
        RefineFrameInput(
            emoji="wave",
            frame=0,
            candidate=pick.index,
            points=[RefinePoint(x=48, y=48, foreground=True)],
            mode=RefineMode.ERASE,
        ),
        set_id=set_id,
    )

    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.priority
    assert (started.fairness_key, started.priority_key) == ("acme", PRODUCTION_PRIORITY)
    scheduled: dict[str, list[ActivityTaskScheduledEventAttributes]] = defaultdict(list)
    for event in history.events:
        if event.event_type is EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[attributes.activity_type.name].append(attributes)
    for name in ("edit_frame", "refine_matte"):
        [asked] = scheduled[name]
        assert (asked.priority.priority_key, asked.priority.fairness_key) == (INTERACTIVE_PRIORITY, "acme"), name
    mattes = [(m.priority.priority_key, m.priority.fairness_key) for m in scheduled["matte_slot"]]
    assert mattes.count((INTERACTIVE_PRIORITY, "acme")) == 1, "the edit's candidates are matted first"
    assert mattes.count((0, "")) == len(mattes) - 1, "production inherits the set's own priority"
    for name in ("generate_clip", "extract_frames", "generate_start_frame"):
        assert all(a.priority.priority_key == 0 for a in scheduled[name]), name
    await stack.sets.cancel(set_id)


async def test_an_owner_too_long_for_a_fairness_key_is_cut_and_told_apart(stack: Stack, set_id: str) -> None:
    long_owner = "é" * 100  # 200 bytes; Temporal takes 64
    await start_set(stack, set_id, owner=long_owner)
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    key = history.events[0].workflow_execution_started_event_attributes.priority.fairness_key
    assert key == fairness_key(long_owner) and len(key.encode()) <= 64
    assert fairness_key(long_owner) != fairness_key(long_owner[:-1]), "owners sharing a prefix keep their own key"
    assert fairness_key("") == "-" and fairness_key("acme") == "acme"
    await stack.sets.cancel(set_id)


async def test_a_tier_joins_the_fairness_key_and_weighs_its_share(stack: Stack, set_id: str) -> None:
    backend = EmojiSetClient(stack.client, store=stack.store, fairness_weights={"pro": 3.0})
    await backend.start(
        EmojiSetInput(character_prompt="a cat", owner="acme", tier="pro", actions=["wave"]), set_id=set_id
    )

    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    priority = history.events[0].workflow_execution_started_event_attributes.priority

    assert (priority.fairness_key, priority.fairness_weight) == ("pro:acme", 3.0)
    assert fairness_key("acme", "pro") == "pro:acme" and fairness_key("", "pro") == "pro:-"
    await stack.sets.cancel(set_id)
