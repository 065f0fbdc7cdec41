"""The clip pipeline benchmark: its lower bound from the inputs alone, and both designs run on a tiny set.

No timing is asserted beyond what holds by construction: a true lower bound is below every measured makespan.
"""

from __future__ import annotations

import pytest

from benchmarks.clip_pipeline import (
    Config,
    clips_done,
    lower_bound,
    matting_work_s,
    measure,
    report,
    turns_bound,
)


def test_the_bound_follows_the_providers_schedule_of_clips() -> None:
    """Clips 6, 9, 12, 15 s after a 1 s start frame, two at once; 12 slots of 0.5 s per action on 3 GPU slots.

    In that order the clips finish at 7, 10, 19, 25, and the last action's 12 slots take 4 turns after 25: 27.
    Longest first they finish at 16, 13, 22, 22, and the two last actions' 24 slots take 8 turns after 22: 26.
    """
    in_order, longest_first = Config(), Config(clip_s=(15.0, 12.0, 9.0, 6.0))

    assert clips_done(in_order) == [7.0, 10.0, 19.0, 25.0]
    assert lower_bound(in_order, in_order.full_slots()) == 27.0
    assert clips_done(longest_first) == [16.0, 13.0, 22.0, 22.0]
    assert lower_bound(longest_first, longest_first.full_slots()) == 26.0


def test_the_bound_is_the_larger_of_the_critical_path_and_the_matting_work() -> None:
    """One provider slot: the last clip ends at 1 + 6 + 9 = 16, then its 12 slots take 4 turns (18). With slow
    matting (3 s a slot) all 24 slots after the first clip (7) take 8 turns (31) and bound the set instead."""
    fast, slow = Config(clip_s=(6.0, 9.0), provider_slots=1), Config(clip_s=(6.0, 9.0), provider_slots=1, latency_s=0.6)

    assert lower_bound(fast, fast.full_slots()) == 18.0
    assert lower_bound(slow, slow.full_slots()) == pytest.approx(7.0 + 8 * 3.0)


def test_slots_short_of_candidates_lower_the_bound_by_their_own_work() -> None:
    """Slots near a clip's end have fewer candidates: the bound counts each slot's own time, whichever of its
    terms (the longest slot, slots sharing a GPU slot, the total over C) is the largest."""
    assert turns_bound([0.5] * 12, 3) == 2.0
    assert turns_bound([0.5, 0.3, 0.3, 0.3], 3) == pytest.approx(0.6)  # two of the three shortest share one
    assert turns_bound([2.0, 0.1, 0.1], 3) == 2.0  # the longest alone
    assert turns_bound([1.0] * 3 + [0.1] * 30, 3) == pytest.approx(2.0)  # the total over C
    config = Config(clip_s=(6.0,), capacity=12)
    ends_short = ((3, *(5,) * 10, 4),)

    assert lower_bound(config, ends_short) == lower_bound(config, config.full_slots()) == 7.5
    assert matting_work_s(config, ends_short) == pytest.approx(5.7)


async def test_both_designs_run_side_by_side_within_the_bound() -> None:
    config = Config(start_frame_s=0.05, clip_s=(0.2, 1.5), provider_slots=1, latency_s=0.01, capacity=2, frames=4)

    measured = await measure(config)

    for run in (measured.pipelined, measured.barrier):
        assert measured.bound_s <= run.makespan_s
        assert run.clips_in_s < run.makespan_s
        # Every slot held a GPU slot for its candidates' sleeps, and never more than C at once.
        assert matting_work_s(config, run.workload) <= run.held_s <= config.capacity * run.makespan_s
        assert len(run.workload) == 2 and all(len(slots) == 4 for slots in run.workload)
        assert 0 < run.gpu_busy(config.capacity) <= 1
    assert measured.barrier.first_matte_s >= measured.barrier.clips_in_s, "the barrier run mattes once all clips are in"
    assert measured.pipelined.first_matte_s < measured.pipelined.clips_in_s, (
        "the pipelined run mattes while one animates"
    )
    table = report(measured).splitlines()
    rows = [line.split(" | ")[0] for line in table if line.startswith("| ") and "---" not in line]
    assert rows == ["| design", "| lower bound (inputs alone)", "| pipelined (the workflow)", "| barrier (run)"]
