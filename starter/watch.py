"""A live progress bar for a running set."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from starter.client import EmojiSetClient
from workflows.contract import CandidateStatus, EmojiSetState, Phase

STOP_PHASES = (Phase.AWAITING_REVIEW, Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED)


async def watch_until(
    client: EmojiSetClient, set_id: str, console: Console, *, until: tuple[Phase, ...] = STOP_PHASES
) -> EmojiSetState:
    """Poll the set's state and draw frames and candidates progress until it reaches one of ``until``."""
    with Progress(
        TextColumn("[bold]{task.description:<16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[phase]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        candidates_bar = progress.add_task("candidates", total=None, phase="")
        frames_bar = progress.add_task("frames ready", total=None, phase="")
        while True:
            state = await client.state(set_id)
            candidates = [c for _, frame in state.frames() for c in frame.candidates]
            matted = sum(c.status is not CandidateStatus.MATTING for c in candidates)
            expected = max(len(candidates), state.frames_total() * state.input.candidates_per_frame)
            progress.update(candidates_bar, completed=matted, total=expected, phase="matted")
            progress.update(
                frames_bar, completed=state.frames_done(), total=state.frames_total(), phase=state.phase.value
            )
            if state.phase in until:
                return state
            await asyncio.sleep(0.5)
