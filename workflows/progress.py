"""The set's progress as markdown, shown in the Web UI's "current details" while the set runs."""

from __future__ import annotations

from workflows.contract import ActionStage, CandidateStatus, EmojiSetState, FrameStatus, PickSource, TakeStatus

MAX_LISTED = 20


def details_markdown(state: EmojiSetState) -> str:
    """A short status page: phase, one table row per action (its stage, takes, frames), and what people must do."""
    candidates = [c for _, frame in state.frames() for c in frame.candidates]
    matted = sum(1 for c in candidates if c.status is CandidateStatus.READY)
    character = "uploaded" if state.character.uploaded else f"{len(state.character.candidates)} candidates"
    lines = [
        f"**{state.phase.value.replace('_', ' ')}** · frames ready **{state.frames_done()}/{state.frames_total()}**"
        f" · candidates matted {matted}/{len(candidates)} · character {character}",
        "",
        "| emoji | stage | start frame | takes | frames ready | failed | picked by hand | edits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for action in state.actions:
        statuses = [frame.status for frame in action.frames]
        takes = sum(take.status is TakeStatus.READY for take in action.takes)
        start = (
            f"approved ({action.start_frame_approved_by})"
            if action.start_frame_approved_by
            else f"{len(action.start_frames)} to review"
            if action.stage is ActionStage.AWAITING_START_FRAME_REVIEW
            else "-"
        )
        lines.append(
            f"| {action.name} | {action.stage.value.replace('_', ' ')} | {start} | {takes}/{len(action.takes)}"
            f" | {statuses.count(FrameStatus.READY)}/{len(statuses)} | {statuses.count(FrameStatus.FAILED)}"
            f" | {sum(f.picked_by is PickSource.HUMAN for f in action.frames)}"
            f" | {sum(f.edits for f in action.frames)} |"
        )
    for dropped in state.dropped:
        why = f" ({dropped.reason})" if dropped.reason else ""
        lines.append(f"| ~~{dropped.action}~~ | dropped by {_cell(dropped.dropped_by + why)} | | | | | | |")
    waiting = [f"{a.name}: {a.error}" for a in state.actions if a.stage is ActionStage.WAITING_FOR_PROMPT]
    waiting += [f"{a.name}#{f.index}: {f.error}" for a, f in state.frames() if f.status is FrameStatus.FAILED]
    if waiting:
        lines += [
            "",
            "**Waiting for a custom-prompt regeneration:**",
            "",
            *(f"- {line}" for line in waiting[:MAX_LISTED]),
        ]
        if len(waiting) > MAX_LISTED:
            lines.append(f"- ... and {len(waiting) - MAX_LISTED} more")
    if state.failure:
        where = f" in {state.failure.activity}" if state.failure.activity else ""
        lines += ["", f"**Failed** while {state.failure.phase.value.replace('_', ' ')}{where}: {state.failure.message}"]
    if state.cancel_reason:
        lines += ["", f"**Cancelled** by {state.cancelled_by or 'request'}: {state.cancel_reason}"]
    if state.notice:
        lines += ["", f"**Notice:** {state.notice}"]
    if state.review_deadline:
        lines += [
            "",
            f"Waiting for {', '.join(state.awaiting()) or 'a person'} until "
            f"{state.review_deadline.isoformat(timespec='seconds')}"
            f" ({state.input.review.on_deadline.value.replace('_', '-')} when it passes)",
        ]
    if state.pipeline_info:
        lines.append(f"Matting: {state.pipeline_info}")
    if state.terms is not None:
        lines += ["", f"**Cost:** {cost_line(state)}"]
    return "\n".join(lines)


def cost_line(state: EmojiSetState) -> str:
    """What the set has spent, in one line: billed calls, what they made, GPU time, the estimate against the
    budget, and what was not billed (failed calls, retried attempts)."""
    spent = state.ledger.summary()
    budget = state.input.budget or (state.terms.budget if state.terms is not None else None)
    parts = [
        f"{spent.paid_calls} paid calls" + (f" ({spent.regenerations} regenerations)" if spent.regenerations else ""),
        f"{spent.images} images",
        f"{spent.video_seconds:g} s of video",
        f"GPU {spent.gpu_seconds:.1f} s",
        f"about {spent.cost:.2f} {spent.currency}"
        + (f" (budget {budget.describe(spent.currency)})" if budget is not None else ""),
    ]
    line = " · ".join(parts)
    if spent.unpriced_models:
        line += f" · not in the price table: {', '.join(spent.unpriced_models)}"
    if spent.stopped_calls:
        line += f" · {spent.stopped_calls} calls stopped before they ended (counted at their estimate)"
    if spent.failed_calls or spent.retried_attempts:
        line += f" · not billed: {spent.failed_calls} failed calls, {spent.retried_attempts} retried attempts"
    return line


def _cell(text: str) -> str:
    """Free text (a reviewer's name, a reason) as one markdown table cell: no column breaks, no new lines."""
    return " ".join(text.split()).replace("|", "\\|")
