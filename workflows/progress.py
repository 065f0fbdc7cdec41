"""The set's progress as markdown, shown in the Web UI's "current details" while the set runs."""

from __future__ import annotations

from workflows.contract import CandidateStatus, EmojiSetState, FrameStatus, PickSource


def details_markdown(state: EmojiSetState) -> str:
    """A short status page: phase, frames ready, one table row per emoji, and anything a reviewer must know."""
    candidates = [c for _, frame in state.frames() for c in frame.candidates]
    matted = sum(1 for c in candidates if c.status is CandidateStatus.READY)
    lines = [
        f"**{state.phase.value.replace('_', ' ')}** · frames ready **{state.frames_done()}/{state.frames_total()}**"
        f" · candidates matted {matted}/{len(candidates)}",
        "",
        "| emoji | ready | failed | in progress | picked by hand | regenerated |",
        "|---|---|---|---|---|---|",
    ]
    for emoji in state.emojis:
        statuses = [frame.status for frame in emoji.frames]
        lines.append(
            f"| {emoji.pose} | {statuses.count(FrameStatus.READY)}/{len(statuses)}"
            f" | {statuses.count(FrameStatus.FAILED)}"
            f" | {sum(s in (FrameStatus.GENERATING, FrameStatus.MATTING) for s in statuses)}"
            f" | {sum(f.picked_by is PickSource.HUMAN for f in emoji.frames)}"
            f" | {sum(f.regenerations for f in emoji.frames)} |"
        )
    failed = [f"{e.pose}#{f.index}: {f.error}" for e, f in state.frames() if f.status is FrameStatus.FAILED]
    if failed:
        lines += ["", "**Frames waiting for a custom-prompt regeneration:**", *(f"- {line}" for line in failed[:20])]
        if len(failed) > 20:
            lines.append(f"- ... and {len(failed) - 20} more")
    if state.notice:
        lines += ["", f"**Notice:** {state.notice}"]
    if state.review_deadline:
        lines += [
            "",
            f"Review deadline: {state.review_deadline.isoformat(timespec='seconds')}"
            f" ({state.input.review.on_deadline.value.replace('_', '-')} when it passes)",
        ]
    if state.pipeline_info:
        lines.append(f"Matting: {state.pipeline_info}")
    return "\n".join(lines)
