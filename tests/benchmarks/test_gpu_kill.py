"""The GPU-kill benchmark: its command line, its reading of histories and its report, and (slow) a tiny run of the
real stack with the GPU worker killed under one set.

Only that it produces figures: no timing is asserted on these shared machines.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskStartedEventAttributes, HistoryEvent

from benchmarks.gpu_kill import (
    Config,
    Run,
    Slot,
    breakdown,
    goal_lines,
    measure,
    parse_args,
    read_history,
    recovery_record,
    table,
)
from gpu_activity_worker.recovery import RECOVERED

KILLED = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_the_defaults_run_one_set_and_ten_without_and_with_the_journal() -> None:
    plan = parse_args([])

    assert plan.counts == [1, 10] and plan.recoveries == ["wait", "journal"] and plan.json_path is None
    assert plan.config.pause_s == (0.0, 2.0) and plan.config.slots_per_set == 16


def test_arguments_are_read_and_bad_ones_refused(capsys: pytest.CaptureFixture[str]) -> None:
    plan = parse_args(["--sets", "10", "--recover", "journal", "--pause", "1", "--json", "out.json"])
    assert plan.counts == [10] and plan.recoveries == ["journal"]
    assert plan.config.pause_s == (1.0, 1.0) and plan.json_path == Path("out.json")

    for bad in (["--sets", "0"], ["--pause", "2-1"], ["--pause", "soon"], ["--recover", "raise"], ["--actions", "5"]):
        with pytest.raises(SystemExit) as exit_:
            parse_args(bad)
        assert exit_.value.code == 2, bad
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--help"])
    assert exit_.value.code == 0 and "--recover" in capsys.readouterr().out


def _scheduled(event_id: int, activity_id: str) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    event.event_time.FromDatetime(KILLED - timedelta(seconds=20))
    event.activity_task_scheduled_event_attributes.activity_id = activity_id
    return event


def _started(event_id: int, after_s: float, scheduled_event_id: int, attempt: int, identity: str) -> HistoryEvent:
    event = HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    event.event_time.FromDatetime(KILLED + timedelta(seconds=after_s))
    event.activity_task_started_event_attributes.CopyFrom(
        ActivityTaskStartedEventAttributes(scheduled_event_id=scheduled_event_id, attempt=attempt, identity=identity)
    )
    return event


def test_a_retry_the_polling_missed_and_the_new_workers_first_task_are_read_from_the_history() -> None:
    events = [
        _scheduled(5, "7"),
        _scheduled(6, "8"),
        _started(9, -3, scheduled_event_id=6, attempt=1, identity="100@host"),
        _started(10, 2.5, scheduled_event_id=6, attempt=1, identity="200@host"),
        _started(11, 7.5, scheduled_event_id=5, attempt=2, identity="200@host"),
    ]
    slot = Slot("set", "7", "matte_slot", attempt=1, last_beat_s=-0.4)

    first = read_history(events, [slot], KILLED, "200@")

    assert first == pytest.approx(2.5), "the restarted worker's first start, not the killed one's"
    assert slot.back_s == pytest.approx(7.5) and slot.back_from == "history"


def test_the_report_has_a_row_the_slowest_slot_and_the_goal_per_run() -> None:
    slots = [
        Slot("s-0", "3", "matte_slot", 1, last_beat_s=-0.5, retry_queued_s=6.5, back_s=7.0, back_from="pending"),
        Slot("s-1", "4", "matte_slot", 1, last_beat_s=-0.2, retry_queued_s=6.8, back_s=40.0, back_from="pending"),
        Slot("s-1", "5", "matte_slot", 1, last_beat_s=-0.9),
    ]
    run = Run(10, "wait", 140, 30, pause_s=1.0, restart_s=1.0, ready_s=2.0, first_task_s=2.1, slots=slots, completed=10)

    assert run.back_min_s == 7.0 and run.back_max_s == 40.0 and run.max_minus_restart_s == 39.0
    row = table([run]).splitlines()[2]
    assert row.startswith("| 10 | wait | 140 (30) | 3 | 1.0 | 2.0 | 2.1 | 7.0 / 23.5 / 40.0 (1 never seen) | 39.0 |")
    assert "slowest matte_slot s-1#4" in breakdown([run]) and "running again 40.0 s" in breakdown([run])
    assert goal_lines([run]).endswith("missed (39.0 s)")
    assert run.summary()["interrupted"] == 3
    assert "recovery" not in breakdown([run])

    run.recover, run.recovery = "journal", {"entries": 6, "raised": 6, "failed": 5, "stale": 1, "elapsed_ms": 12.3}
    assert "6 journaled activities, 6 raised, 5 failed, 1 stale, 0 errors, 12 ms before it polled" in breakdown([run])


def test_the_restarted_workers_recovery_is_read_from_its_log() -> None:
    def line(entries: int) -> str:
        return f'{{"ts": "t", "level": "info", "msg": "{RECOVERED}", "entries": {entries}, "failed": {entries}}}'

    first = ["--- 2026-01-01T12:00:00+00:00 spawn gpu-worker", line(0), '{"msg": "worker started"}']
    log = "\n".join([*first, "--- 2026-01-01T12:00:30+00:00 spawn gpu-worker", line(6), "{torn"])

    assert recovery_record(log) == {"ts": "t", "level": "info", "msg": RECOVERED, "entries": 6, "failed": 6}
    assert recovery_record(log + "\n--- 2026-01-01T12:01:00+00:00 spawn gpu-worker") is None, "that start logged none"


@pytest.mark.slow
async def test_a_tiny_run_kills_the_gpu_worker_and_sees_its_slot_run_again(tmp_path: Path) -> None:
    config = Config(actions=1, frames=4, gpu_ms=150, gpu_concurrency=1, gpu_prefetch=0, pause_s=(0.0, 0.0))

    run = await measure(config, 1, "journal", 0.0, tmp_path)

    assert len(run.slots) == 1 and run.completed == 1
    assert run.first_task_s is not None and run.first_task_s > 0
    (slot,) = run.slots
    assert slot.back_s is not None and slot.back_s > 0 and slot.last_beat_s <= 0
    assert run.recovery is not None and run.recovery["entries"] >= 1, "the restarted worker found the slot journaled"
