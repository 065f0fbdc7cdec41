"""The paid-rate benchmark: its counting on synthetic logs, its arguments, and a tiny phase on the real stack.

Only that it produces figures: no timing is asserted on these shared machines.
"""

from __future__ import annotations

import sys

import pytest

from benchmarks import paid_rate
from benchmarks.paid_rate import (
    Activities,
    Config,
    Phase,
    measure_phase,
    rate_bound,
    report,
    submits,
    window_bound,
    window_max,
)
from testkit.dashscope_standin import Kind, SubmitRecord


def accepted(at: float, model: str = "wan2.5-i2i-preview", images: int = 1, seconds: int = 0) -> SubmitRecord:
    kind: Kind = "video" if seconds else "image2image"
    return SubmitRecord(at, kind, model, "accepted", images=images, seconds=seconds, task_id=f"task-{at}")


def test_the_busiest_window_counts_every_time_inside_it() -> None:
    times = [0.0, 0.2, 0.9, 1.0, 1.1, 5.0]

    assert window_max(times, 1.0) == 4  # 0.2, 0.9, 1.0, 1.1
    assert window_max(times, 0.5) == 3
    assert window_max(times, 10.0) == 6
    assert window_max([], 1.0) == 0


def test_the_submit_log_is_counted_by_outcome_model_and_what_was_asked() -> None:
    log = [
        accepted(10.0, "wan2.2-t2i-flash", images=2),
        SubmitRecord(10.1, "video", "wan2.6-i2v-flash", "throttled"),
        accepted(10.5, "wan2.6-i2v-flash", images=0, seconds=2),
        SubmitRecord(10.6, "image2image", "wan2.5-i2i-preview", "refused"),
        accepted(12.0),
        accepted(14.0, "wan2.6-i2v-flash", images=0, seconds=5),
    ]

    counted = submits(log)

    assert (counted.accepted, counted.throttled, counted.refused) == (4, 1, 1)
    assert counted.span_s == pytest.approx(4.0) and counted.rate == pytest.approx(0.75)
    assert (counted.max_1s, counted.max_5s) == (2, 4)
    assert counted.by_model == {"wan2.2-t2i-flash": 1, "wan2.5-i2i-preview": 1, "wan2.6-i2v-flash": 2}
    assert (counted.images, counted.video_seconds) == (3, 7)


def test_the_limiter_bounds_allow_its_one_second_burst() -> None:
    assert (window_bound(2.0, 1), window_bound(2.0, 5)) == (5, 13)
    assert window_bound(10.0, 0) == 11  # Temporal's own test: 11 at once at 10 a second
    assert rate_bound(2.0, 20.0) == pytest.approx(2.0 * 1.05 * 1.02)
    assert rate_bound(2.0, 0.0) == float("inf")


def phase(rate_per_s: float) -> Phase:
    count = 41
    log = [accepted(index / rate_per_s) for index in range(count)]
    activities = Activities(
        completed=count,
        started=count,
        started_rate=rate_per_s,
        max_started_1s=2,
        max_started_5s=10,
        retried=0,
        failed=0,
    )
    return Phase("provider below the limit", 1.0, submits(log), activities, sets_completed=3, sets=3, wall_s=30.0)


def test_the_report_says_whether_the_limit_held() -> None:
    held = report(phase(2.0), rate=2.0)
    broken = report(phase(3.0), rate=2.0)

    assert held[0] == "provider below the limit: stand-in takes 1 submits/s, the paid queue 2 calls/s"
    assert "41 over 20.0 s = 2.00/s against the limit 2/s (held: at most 2.14/s over this span)" in held[1]
    assert "(NOT held: at most" in broken[1]
    assert "accepted submits - completed = 0" in held[5]
    assert held[-1].startswith("  sets completed: 3 of 3")


def test_the_arguments_become_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Config] = []

    async def fake_main(config: Config) -> None:
        ran.append(config)

    monkeypatch.setattr(paid_rate, "main", fake_main)
    monkeypatch.setattr(sys, "argv", ["paid_rate", "--sets", "3", "--rate", "1.5", "--actions", "1", "--below", "0.25"])
    paid_rate.cli()

    assert ran == [Config(sets=3, rate=1.5, actions=1, below=0.25)]


@pytest.mark.parametrize("argv", [["--actions", "5"], ["--rate", "0"], ["--sets", "0"]])
def test_bad_arguments_are_refused(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["paid_rate", *argv])

    with pytest.raises(SystemExit):
        paid_rate.cli()


async def test_a_tiny_phase_on_the_real_stack_produces_every_figure() -> None:
    config = Config(sets=2, rate=5.0, actions=1, timeout_s=120)

    measured = await measure_phase("tiny", config, provider_rate=2.0)

    assert measured.sets_completed == 2
    assert measured.submits.accepted == measured.activities.completed == 2 * config.calls_per_set()
    assert measured.submits.by_model == {"wan2.2-t2i-flash": 2, "wan2.5-i2i-preview": 2, "wan2.6-i2v-flash": 2}
    assert measured.submits.video_seconds == 2 * 2  # 1 s clips: the shortest the clip model makes, 2 s
    assert measured.activities.failed == 0
    assert len(report(measured, config.rate)) == 7
