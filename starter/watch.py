"""Live progress of a running set, stage by stage, until it waits for a person or ends."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from starter.client import EmojiSetClient
from workflows.contract import CandidateStatus, EmojiSetState, Phase, TakeStatus

END_PHASES = (Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED)
WAIT_PHASES = (Phase.AWAITING_CHARACTER_REVIEW, Phase.AWAITING_START_FRAME_REVIEW, Phase.AWAITING_REVIEW)


def waits_for_person(state: EmojiSetState) -> bool:
    """Whether nothing moves until a person acts (or a deadline passes)."""
    if state.phase is Phase.AWAITING_START_FRAME_REVIEW:
        return not any(
            t.status in (TakeStatus.ANIMATING, TakeStatus.EXTRACTING) for a in state.actions for t in a.takes
        )
    return state.phase in WAIT_PHASES


async def watch_until(
    client: EmojiSetClient, set_id: str, console: Console, *, until: tuple[Phase, ...] = END_PHASES
) -> EmojiSetState:
    """Poll the set's state and draw each stage's progress until it waits for a person or reaches ``until``."""
    with Progress(
        TextColumn("[bold]{task.description:<16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bars = {
            name: progress.add_task(name, total=None, note="")
            for name in ("start frames", "clips", "candidates", "frames ready")
        }
        while True:
            state = await client.state(set_id)
            actions = state.actions
            takes = [take for action in actions for take in action.takes]
            candidates = [c for _, frame in state.frames() for c in frame.candidates]
            approved = sum(a.start_frame_approved_by is not None for a in actions)
            awaiting = ", ".join(state.awaiting())
            progress.update(bars["start frames"], completed=approved, total=len(actions), note=awaiting)
            progress.update(
                bars["clips"],
                completed=sum(t.status is TakeStatus.READY for t in takes),
                total=max(len(takes), len(actions) * state.input.takes_per_action),
                note=f"{sum(t.status is TakeStatus.FAILED for t in takes)} failed" if takes else "",
            )
            progress.update(
                bars["candidates"],
                completed=sum(c.status is not CandidateStatus.MATTING for c in candidates),
                total=len(candidates) or None,
                note="matted",
            )
            progress.update(
                bars["frames ready"], completed=state.frames_done(), total=state.frames_total(), note=state.phase.value
            )
            if state.phase in until or waits_for_person(state):
                return state
            await asyncio.sleep(0.5)
