"""The ledger benchmark: its two counts and their comparison on synthetic data, its arguments, and a small set on the
real stack whose every figure matches the stand-in's log."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from benchmarks import ledger
from benchmarks.ledger import (
    Config,
    ModelCount,
    TaskEnd,
    compare,
    ledger_count,
    mismatches,
    price_table,
    provider_cost,
    provider_count,
    report,
    run_set,
)
from benchmarks.paid_rate import API_KEY, dashscope_settings
from testkit.dashscope_standin import FakeDashScope, Kind, SubmitRecord
from workflows.contract import (
    CallCause,
    CallOutcome,
    ExportTarget,
    GeneratorRole,
    Ledger,
    ModelPrice,
    PaidCall,
    PriceTable,
)

AT = datetime(2025, 1, 8, tzinfo=UTC)
PRICES = PriceTable(
    models={
        "t2i": ModelPrice(per_image=0.02),
        "i2i": ModelPrice(per_image=0.03),
        "i2v": ModelPrice(per_video_second=0.05),
    },
    per_gpu_second=0.001,
)


def submit(at: float, kind: Kind, model: str, task: str, *, images: int = 0, seconds: int = 0) -> SubmitRecord:
    return SubmitRecord(at, kind, model, "accepted", images=images, seconds=seconds, task_id=task)


def call(
    role: GeneratorRole,
    model: str,
    *,
    images: int = 0,
    seconds: float = 0.0,
    attempts: int | None = 1,
    outcome: CallOutcome = CallOutcome.BILLED,
    cause: CallCause = CallCause.PRODUCTION,
) -> PaidCall:
    billed = outcome is CallOutcome.BILLED
    cost = PRICES.cost(model, images=images, video_seconds=seconds) if billed else None
    return PaidCall(
        role=role,
        action="wave",
        model=model,
        images=images,
        video_seconds=seconds,
        attempts=attempts if billed else None,
        outcome=outcome,
        cause=cause,
        cost=cost,
        at=AT,
    )


def the_log() -> tuple[list[SubmitRecord], dict[str, TaskEnd]]:
    """A set's log: its character, a start frame, a clip that failed once then succeeded, a refused clip, throttled
    submits, and after the final review began (at 100) a new take and a frame edit."""
    log = [
        submit(1.0, "text2image", "t2i", "c", images=2),
        SubmitRecord(1.1, "image2image", "i2i", "throttled"),
        submit(2.0, "image2image", "i2i", "s", images=2),
        submit(3.0, "video", "i2v", "v-failed", seconds=2),
        SubmitRecord(3.1, "video", "i2v", "throttled"),
        submit(3.5, "video", "i2v", "v-refused", seconds=2),
        submit(6.0, "video", "i2v", "v-retry", seconds=2),
        SubmitRecord(7.0, "image2image", "i2i", "refused"),
        submit(100.0, "video", "i2v", "v-new", seconds=2),
        submit(101.0, "image2image", "i2i", "e", images=2),
    ]
    ends = {
        "c": TaskEnd("succeeded", 2),
        "s": TaskEnd("succeeded", 2),
        "v-failed": TaskEnd("failed"),
        "v-refused": TaskEnd("failed"),
        "v-retry": TaskEnd("succeeded"),
        "v-new": TaskEnd("succeeded"),
        "e": TaskEnd("succeeded", 2),
    }
    return log, ends


def the_ledger() -> Ledger:
    """The ledger the same set should have."""
    return Ledger(
        calls=[
            call(GeneratorRole.CHARACTER, "t2i", images=2),
            call(GeneratorRole.START_FRAME, "i2i", images=2),
            call(GeneratorRole.CLIP, "i2v", seconds=2.0, attempts=2),
            call(GeneratorRole.CLIP, "i2v", outcome=CallOutcome.FAILED),
            call(GeneratorRole.CLIP, "i2v", seconds=2.0, cause=CallCause.REGENERATION),
            call(GeneratorRole.EDIT_FRAME, "i2i", images=2, cause=CallCause.REGENERATION),
        ],
        gpu_seconds=12.5,
        gpu_activities=4,
        gpu_cost=0.0125,
    )


def test_the_stand_in_log_is_counted_by_how_its_tasks_ended() -> None:
    log, ends = the_log()

    counted = provider_count(log, ends, review_at=100.0)

    assert (counted.accepted, counted.throttled, counted.refused) == (7, 2, 1)
    assert (counted.succeeded, counted.failed, counted.unfinished) == (5, 2, 0)
    assert counted.by_model == {
        "i2i": ModelCount(2, 4, 0.0),
        "i2v": ModelCount(2, 0, 4.0),
        "t2i": ModelCount(1, 2, 0.0),
    }
    assert counted.by_kind == {"image2image": 2, "text2image": 1, "video": 2}
    assert (counted.images, counted.video_seconds, counted.regenerations) == (6, 4.0, 2)
    assert provider_cost(counted, PRICES) == (pytest.approx(2 * 0.02 + 4 * 0.03 + 4 * 0.05), [])


def test_a_task_never_polled_to_its_end_is_unfinished_and_not_billed() -> None:
    log = [submit(1.0, "video", "i2v", "v", seconds=5), submit(2.0, "text2image", "t2i", "lost", images=1)]

    counted = provider_count(log, {"v": TaskEnd("unfinished")})

    assert (counted.accepted, counted.succeeded, counted.unfinished, counted.regenerations) == (2, 0, 2, 0)
    assert provider_cost(counted, PRICES) == (0.0, [])


def test_a_model_the_table_lacks_is_named_not_priced() -> None:
    counted = provider_count([submit(1.0, "video", "other", "v", seconds=5)], {"v": TaskEnd("succeeded")})

    assert provider_cost(counted, PRICES) == (0.0, ["other"])


def test_the_ledger_is_counted_the_same_ways() -> None:
    counted = ledger_count(the_ledger())

    assert counted.by_model == {"i2i": ModelCount(2, 4, 0.0), "i2v": ModelCount(2, 0, 4.0), "t2i": ModelCount(1, 2)}
    assert counted.by_kind == {"image2image": 2, "text2image": 1, "video": 2}
    assert [c.role for c in counted.failed] == [GeneratorRole.CLIP] and [c.attempts for c in counted.retried] == [2]


def test_a_ledger_that_agrees_with_the_log_matches_in_every_figure() -> None:
    log, ends = the_log()
    mine = ledger_count(the_ledger())

    figures = compare(mine, provider_count(log, ends, review_at=100.0), PRICES, result_cost=mine.summary)

    assert mismatches(figures) == []
    by_name = {figure.name.strip(): figure for figure in figures}
    assert by_name["billed calls"].verdict == by_name["estimated cost (USD)"].verdict == "match"
    assert by_name["throttled answers (429)"].verdict == "log only" and by_name["GPU seconds"].verdict == "ledger only"
    assert by_name["failed tasks (not billed)"].ledger == "2 = 1 failed + 1 retried"
    assert (by_name["estimated cost (USD)"].ledger, by_name["estimated cost (USD)"].provider) == ("0.3725", "0.3725")


def test_a_ledger_that_bills_a_failed_task_differs() -> None:
    log, ends = the_log()
    wrong = the_ledger()
    wrong.calls[3] = call(GeneratorRole.CLIP, "i2v", seconds=2.0)  # the refused clip, billed

    figures = compare(ledger_count(wrong), provider_count(log, ends, review_at=100.0), PRICES, result_cost=None)

    assert {figure.name.strip() for figure in mismatches(figures)} == {
        "billed calls",
        "i2v",
        "image-to-video (clip)",
        "video seconds",
        "video seconds, i2v",
        "failed tasks (not billed)",
        "paid cost (USD)",
        "estimated cost (USD)",
    }


def test_a_result_cost_unlike_the_state_differs() -> None:
    log, ends = the_log()
    mine = ledger_count(the_ledger())
    stale = mine.summary.model_copy(update={"gpu_seconds": 1.0})

    figures = compare(mine, provider_count(log, ends, review_at=100.0), PRICES, result_cost=stale)

    assert [figure.name for figure in mismatches(figures)] == ["result's cost = state's ledger"]


def test_the_price_table_prices_the_configured_models() -> None:
    with FakeDashScope(api_key=API_KEY) as fake:
        settings = dashscope_settings(fake)
    prices = price_table(settings)

    assert set(prices.models) == {
        settings.dashscope_character_model,
        settings.dashscope_start_frame_model,
        settings.dashscope_edit_frame_model,
        settings.dashscope_clip_model,
    }
    assert prices.models[settings.dashscope_clip_model].per_video_second > 0 and prices.per_gpu_second > 0


def test_the_set_is_the_demos_on_dashscope() -> None:
    full, small = Config().set_input(), Config(actions=2, frames=2, image_size=64).set_input()

    assert (full.generator, len(full.actions), full.frames_per_emoji, full.neighbours, full.image_size) == (
        "dashscope",
        8,
        12,
        1,
        256,
    )
    assert ExportTarget.LINE_EMOJI in full.export_targets and small.export_targets == [ExportTarget.GENERIC]


def test_the_arguments_become_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Config] = []

    async def fake_main(config: Config) -> int:
        ran.append(config)
        return 0

    monkeypatch.setattr(ledger, "main", fake_main)
    monkeypatch.setattr(sys, "argv", ["ledger", "--actions", "2", "--frames", "3", "--no-refusal"])
    with pytest.raises(SystemExit) as exited:
        ledger.cli()

    assert exited.value.code == 0
    assert ran == [Config(actions=2, frames=3, refusal=False)]


@pytest.mark.parametrize(
    "argv", [["--actions", "9"], ["--frames", "13"], ["--frames", "1"], ["--provider-rate", "0"], ["--paid-rate", "-1"]]
)
def test_bad_arguments_are_refused(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["ledger", *argv])

    with pytest.raises(SystemExit) as exited:
        ledger.cli()

    assert exited.value.code == 2


async def test_a_small_set_on_the_real_stack_matches_the_stand_in_in_every_figure() -> None:
    run = await run_set(Config(actions=2, frames=2, image_size=64, timeout_s=120))

    lines, figures = report(run)

    assert run.result.status == "completed"
    assert mismatches(figures) == [], "\n".join(lines)
    summary = run.state.ledger.summary()
    # character + 2 start frames + 2 clips (one made by its 2nd attempt, one refused) + a new take + a frame edit
    assert (summary.paid_calls, summary.failed_calls, summary.retried_attempts, summary.regenerations) == (6, 1, 1, 2)
    assert summary.video_seconds == 4.0 and summary.gpu_seconds > 0
    assert lines[-1].startswith("verdict: every figure matches; set completed")
