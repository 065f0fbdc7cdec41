"""The auto-pick of an emoji's frames: each slot's best candidate, and the slots smooth together.

A slot's own merit is its matting score times its clip-frame quality (a blurred or glitched clip frame scores low
however clean its cut-out). Picks of neighbouring slots should read as one animation: frames of one take, in clip
order, evenly spaced. The pick is therefore a shortest path over the slots (Viterbi): per slot a cost of
``1 - merit``, between consecutive slots a cost for leaving the take and for uneven spacing, and no path at all where
two consecutive picks of one take would not move forward in the clip. Slots picked by hand are fixed points of the
path. Pure, deterministic and cheap (12 slots x ~5 candidates): safe in workflow code.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.contract import Candidate, CandidateStatus, FrameState, PickSource

TAKE_CHANGE_COST = 0.3
"""Between two consecutive picks of different takes (or a take and a frame edit): a visible jump in the motion."""
SPACING_COST = 0.08
"""Per source frame of spacing between consecutive picks away from the slots' even spacing."""
EDIT_MERIT_BONUS = 0.05
"""A frame edit was asked for by a person: on a tie it wins over the clip frame it replaces."""


def merit(candidate: Candidate) -> float:
    """A candidate's own worth in [0, 1]: matting score times clip-frame quality."""
    bonus = EDIT_MERIT_BONUS if candidate.take is None else 0.0
    return min(1.0, (candidate.score or 0.0) * candidate.quality + bonus)


def _link_cost(before: Candidate, after: Candidate) -> float | None:
    """The cost of ``after`` following ``before`` in consecutive slots, or None where it may not."""
    if before.take is None or after.take is None or before.take != after.take:
        return TAKE_CHANGE_COST
    assert before.source_frame is not None and after.source_frame is not None
    if after.source_frame <= before.source_frame:
        return None
    return SPACING_COST * abs(after.offset - before.offset)


def auto_picks(frames: Sequence[FrameState]) -> dict[int, int]:
    """The candidate each slot should use: ``{slot index: candidate index}`` for every slot with a usable candidate.

    Slots picked by hand keep their pick. Slots with no usable candidate break the chain (they are left out and the
    slots either side are chosen independently of each other).
    """
    picks: dict[int, int] = {}
    for run in _runs(frames):
        picks.update(_best_path(run))
    return picks


def _runs(frames: Sequence[FrameState]) -> list[list[tuple[FrameState, list[Candidate]]]]:
    """Consecutive slots that have usable candidates, each with the candidates it may pick from."""
    runs: list[list[tuple[FrameState, list[Candidate]]]] = [[]]
    for frame in frames:
        options = [c for c in frame.candidates if c.status is CandidateStatus.READY]
        if frame.picked_by is PickSource.HUMAN:
            options = [c for c in options if c.index == frame.pick] or options
        if options:
            runs[-1].append((frame, options))
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _best_path(run: list[tuple[FrameState, list[Candidate]]]) -> dict[int, int]:
    # cost[i][j]: cheapest path ending with candidate j of slot i; back[i][j]: its predecessor in slot i-1.
    cost: list[list[float]] = [[1.0 - merit(c) for c in run[0][1]]]
    back: list[list[int]] = [[-1] * len(run[0][1])]
    for i in range(1, len(run)):
        before, after = run[i - 1][1], run[i][1]
        row_cost, row_back = [], []
        for candidate in after:
            best, best_from = float("inf"), -1
            for j, previous in enumerate(before):
                link = _link_cost(previous, candidate)
                if link is not None and cost[i - 1][j] + link < best:
                    best, best_from = cost[i - 1][j] + link, j
            if best_from < 0:  # nothing may precede it: start afresh (the chain is as good as broken here)
                best_from = min(range(len(before)), key=lambda j: cost[i - 1][j])
                best = cost[i - 1][best_from] + 1.0
            row_cost.append(best + 1.0 - merit(candidate))
            row_back.append(best_from)
        cost.append(row_cost)
        back.append(row_back)
    j = min(range(len(cost[-1])), key=lambda k: (cost[-1][k], k))
    picks: dict[int, int] = {}
    for i in range(len(run) - 1, -1, -1):
        frame, options = run[i]
        picks[frame.index] = options[j].index
        j = back[i][j]
    return picks
