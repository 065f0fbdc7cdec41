"""What a set tells its backend: the events of :mod:`workflows.contract.events`, read off its state.

A set announces each wait for a person as it begins (a review with its deadline, an action starting to wait for a
custom prompt) and its end. A wait carried across continue-as-new is not announced again: a review's deadline is kept
in the state, and the new run starts from the actions already waiting.
"""

from __future__ import annotations

from datetime import datetime

from workflows.contract import ActionStage, EmojiSetState, EventType, SetEvent


def waiting_for_prompt(state: EmojiSetState) -> frozenset[str]:
    """The actions that wait for a custom prompt."""
    return frozenset(a.name for a in state.actions if a.stage is ActionStage.WAITING_FOR_PROMPT)


def sends_events(state: EmojiSetState) -> bool:
    """Whether the set has somewhere to send its events: its own webhook, or the deployment's; never before it has
    its terms (a set of an older build sends none)."""
    return state.terms is not None and (state.input.webhook is not None or state.terms.webhook)


def next_event(state: EmojiSetState, kind: EventType, message: str | None, at: datetime) -> SetEvent:
    """The set's next event (its sequence is counted in the state, so it goes on across continue-as-new)."""
    state.events_sent += 1
    return SetEvent(
        id=f"{state.set_id}:{state.events_sent}",
        type=kind,
        set_id=state.set_id,
        sequence=state.events_sent,
        owner=state.input.owner,
        at=at,
        phase=state.phase.value,
        awaiting=state.awaiting(),
        message=message,
        cost=state.ledger.summary(),
    )


def review_message(state: EmojiSetState, kind: EventType) -> str:
    """A review wait in words, with its deadline."""
    deadline = state.review_deadline
    until = f" until {deadline:%Y-%m-%d %H:%M} UTC" if deadline is not None else ""
    if kind is EventType.AWAITING_CHARACTER_REVIEW:
        return f"the character awaits review{until}: pick a candidate and approve it"
    if kind is EventType.AWAITING_START_FRAME_REVIEW:
        names = [a.name for a in state.actions if a.stage is ActionStage.AWAITING_START_FRAME_REVIEW]
        return f"start frames await review{until}: {', '.join(names)}"
    return f"the finished frames await review{until}: approve them, or regenerate what is not right"
