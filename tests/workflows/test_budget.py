"""A set's ledger and budget on the real stack: what a set spent, regenerations refused past the budget, never
overrun by regenerations sent together, and start-or-attach in one call."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from typing import Any

import pytest

from starter.client import MessageRejected
from testkit.stack import Stack, wait_for_phase
from workflows.contract import (
    Budget,
    CallOutcome,
    EmojiSetInput,
    GeneratorRole,
    Phase,
    RegenerateFrameInput,
    ReviewPolicy,
    StagePolicy,
)

CAT = "a round orange cat with a blue scarf"
SMALL: dict[str, Any] = {
    "actions": ["wave", "heart"],
    "frames_per_emoji": 4,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
    "review": ReviewPolicy(start_frames=StagePolicy.AUTO),
}
AT_START = 5
"""1 character + 2 actions x (1 start frame call + 1 clip)."""


async def start_and_review(stack: Stack, set_id: str, **overrides: Any) -> None:
    await stack.sets.start(EmojiSetInput(character_prompt=CAT, **SMALL, **overrides), set_id=set_id)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)


async def test_a_sets_ledger_counts_every_generator_call_and_its_gpu_time(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=1, prompt="wink"), set_id=set_id)
    await stack.sets.approve(set_id, reviewer="ana")
    result = await stack.sets.result(set_id)
    state = await stack.sets.state(set_id)

    calls = state.ledger.calls
    assert sorted((c.role.value, c.cause.value) for c in calls) == [
        ("character", "production"),
        ("clip", "production"),
        ("clip", "production"),
        ("edit_frame", "regeneration"),
        ("start_frame", "production"),
        ("start_frame", "production"),
    ]
    assert all(c.outcome is CallOutcome.BILLED and c.model == "procedural" and c.attempts == 1 for c in calls)
    # The test stack's prices: 0.01 an image, 0.05 a second of video, 0.001 a GPU second.
    assert [c.cost for c in calls if c.role is GeneratorRole.CLIP] == [pytest.approx(0.05)] * 2
    summary = state.ledger.summary()
    # 2 characters + 2 x 2 start frames + 2 edits; 2 clips of 1 s
    assert (summary.paid_calls, summary.images, summary.video_seconds, summary.regenerations) == (6, 8, 2.0, 1)
    assert summary.paid_cost == pytest.approx(8 * 0.01 + 2 * 0.05)
    # every frame slot's matting (2 x 4 slots, then the edit's slot) held the GPU for some time
    assert state.ledger.gpu_activities == 9 and summary.gpu_seconds > 0
    assert summary.gpu_cost == pytest.approx(summary.gpu_seconds * 0.001, abs=1e-4)
    assert result.cost == summary and state.terms is not None and state.terms.models[GeneratorRole.CLIP] == "procedural"


async def test_a_regeneration_past_the_budget_is_refused_naming_the_budget(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id, budget=Budget(paid_calls=AT_START + 1))
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=1, prompt="wink"), set_id=set_id)

    with pytest.raises(MessageRejected) as refused:
        await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=2, prompt="wink"), set_id=set_id)

    assert re.fullmatch(
        r"an edit of wave frame 2 would pass the set's budget of 6 paid calls: it has spent or committed 6 paid calls "
        r"and 0\.\d\d USD, and this one is 1 call of about 0\.02 USD",
        str(refused.value),
    ), refused.value
    assert (await stack.sets.state(set_id)).ledger.summary().paid_calls == AT_START + 1


async def test_regenerations_sent_together_never_overrun_the_budget(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id, budget=Budget(paid_calls=AT_START + 2))
    asked = [RegenerateFrameInput(emoji="wave", frame=frame, prompt="wink") for frame in range(4)]
    asked += [RegenerateFrameInput(emoji="heart", frame=frame, prompt="wink") for frame in range(4)]

    answers = await asyncio.gather(
        *(stack.sets.regenerate_frame(request, set_id=set_id) for request in asked), return_exceptions=True
    )

    refused = [a for a in answers if isinstance(a, MessageRejected)]
    assert len(refused) == len(asked) - 2, answers
    assert all("would pass the set's budget of 7 paid calls" in str(r) for r in refused)
    assert (await stack.sets.state(set_id)).ledger.summary().paid_calls == AT_START + 2


async def test_a_budget_in_money_the_set_cannot_meet_fails_it_before_any_paid_call(stack: Stack, set_id: str) -> None:
    # At the test stack's prices the set needs 2 x 0.01 (character) + 4 x 0.01 (start frames) + 2 x 0.05 (clips).
    await stack.sets.start(EmojiSetInput(character_prompt=CAT, **SMALL, budget=Budget(cost=0.1)), set_id=set_id)

    async with asyncio.timeout(30):
        while (state := await stack.sets.state(set_id)).failure is None:
            await asyncio.sleep(0.1)

    assert state.failure.message == (
        "its budget of 0.10 USD is below what the set needs at start: about 0.16 USD for 5 paid calls "
        "(character, start frames, clips)"
    )
    assert state.ledger.calls == [] and state.character.candidates == []


async def test_start_or_attach_starts_once_and_attaches_after(
    stack: Stack, set_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    request = EmojiSetInput(character_prompt=CAT, **SMALL)

    first = await stack.sets.start_or_attach(request, set_id=set_id)
    again = await stack.sets.start_or_attach(request.model_copy(update={"actions": ["cry"]}), set_id=set_id)

    assert first.set_id == again.set_id == set_id
    assert [a.name for a in again.actions] == ["wave", "heart"], "attached to the set the first call started"
    assert (await stack.sets.state(set_id)).runs == 1
    await stack.sets.cancel(set_id, reason="done with it")
    await stack.sets.result(set_id)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        ended = await stack.sets.start_or_attach(request, set_id=set_id)
        gc.collect()
    assert "never retrieved" not in caplog.text, "the start operation's error was taken"
    assert await stack.sets.start(request, set_id=set_id) == set_id

    assert ended.phase is Phase.CANCELLED, "a set id names one set for good: nothing new started"
    runs = [r async for r in stack.client.list_workflows(f'WorkflowId = "{set_id}"')]
    assert len(runs) == 1


async def test_a_call_that_failed_for_good_is_counted_apart_and_not_billed(stack: Stack, set_id: str) -> None:
    await start_and_review(stack, set_id, generator="refuses-clip")

    ledger = (await stack.sets.state(set_id)).ledger
    [failed] = [c for c in ledger.calls if c.outcome is CallOutcome.FAILED]

    assert (failed.role, failed.action, failed.cost, failed.attempts) == (GeneratorRole.CLIP, "heart", None, None)
    assert (ledger.summary().paid_calls, ledger.summary().failed_calls) == (AT_START - 1, 1)
    await stack.sets.cancel(set_id)
