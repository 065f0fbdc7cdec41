"""A set's ledger and budget (workflows.spending, workflows.contract.ledger): what is counted, what is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pydantic
import pytest

from workflows.contract import (
    ActionState,
    ArtifactRef,
    Budget,
    CallCause,
    CallOutcome,
    ClipOutput,
    DeploymentTerms,
    EmojiSetInput,
    EmojiSetState,
    GeneratedImages,
    GeneratorRole,
    ModelPrice,
    Phase,
    PriceTable,
    Usage,
)
from workflows.spending import Call, Spending

AT = datetime(2026, 12, 5, tzinfo=UTC)
PRICES = PriceTable(
    currency="USD",
    models={
        "t2i": ModelPrice(per_image=0.02),
        "i2i": ModelPrice(per_image=0.03),
        "i2v": ModelPrice(per_video_second=0.1),
    },
    per_gpu_second=0.001,
)
MODELS = {
    GeneratorRole.CHARACTER: "t2i",
    GeneratorRole.START_FRAME: "i2i",
    GeneratorRole.EDIT_FRAME: "i2i",
    GeneratorRole.CLIP: "i2v",
}
CLIP = ArtifactRef(uri="file:///x.mp4", sha256="0" * 64, size_bytes=1, media_type="video/mp4")


def state(budget: Budget | None = None, *, terms: bool = True, **fields: object) -> EmojiSetState:
    """A set of two actions, one take each, from a prompt: 1 + 2 x (1 + 1) = 5 calls at start."""
    input = EmojiSetInput(character_prompt="a cat", actions=["wave", "heart"], budget=budget, **fields)
    return EmojiSetState(
        set_id="s",
        input=input,
        phase=Phase.AWAITING_REVIEW,
        actions=[ActionState(action=spec) for spec in input.action_specs()],
        terms=DeploymentTerms(prices=PRICES, models=MODELS) if terms else None,
    )


def clip(seconds: float, attempt: int = 1, model: str = "i2v") -> ClipOutput:
    return ClipOutput(clip=CLIP, generator="g", usage=Usage(model=model, video_seconds=seconds, attempt=attempt))


def produce_everything(spending: Spending) -> None:
    """The set's own production, billed: the character, a start frame call and a clip per action."""
    for role, usage in [
        (GeneratorRole.CHARACTER, Usage(model="t2i", images=2)),
        (GeneratorRole.START_FRAME, Usage(model="i2i", images=2)),
        (GeneratorRole.START_FRAME, Usage(model="i2i", images=2)),
        (GeneratorRole.CLIP, Usage(model="i2v", video_seconds=2.0)),
        (GeneratorRole.CLIP, Usage(model="i2v", video_seconds=2.0)),
    ]:
        token = spending.start(Call(role, None, CallCause.PRODUCTION))
        output: GeneratedImages | ClipOutput = (
            ClipOutput(clip=CLIP, generator="g", usage=usage)
            if role is GeneratorRole.CLIP
            else GeneratedImages(candidates=[], generator="g", usage=usage)
        )
        spending.record(token, output, AT)


def test_the_production_to_come_is_committed_from_the_start_and_counted_once_made() -> None:
    spending = Spending(state())

    at_start = spending.committed()
    produce_everything(spending)

    # 2 character images x 0.02 + 2 x 2 start frames x 0.03 + 2 clips x 2 s x 0.1
    assert at_start.calls == 5 and at_start.cost == pytest.approx(0.04 + 0.12 + 0.4)
    assert spending.committed() == at_start


def test_a_regeneration_past_the_call_budget_is_refused_naming_the_budget_and_what_is_spent() -> None:
    spending = Spending(state(Budget(paid_calls=6)))
    produce_everything(spending)
    new_take = Call(GeneratorRole.CLIP, "wave", CallCause.REGENERATION, video_seconds=2.0)

    assert spending.refusal("a new take of wave", new_take) is None
    token = spending.start(new_take)  # reserved: in flight, not billed yet
    refusal = spending.refusal("a new take of heart", new_take)

    assert refusal == (
        "a new take of heart would pass the set's budget of 6 paid calls: it has spent or committed 6 paid calls "
        "and 0.76 USD, and this one is 1 call of about 0.20 USD"
    )
    spending.record(token, None, AT)
    assert spending.refusal("a new take of heart", new_take) is None, "a failed call is refunded"


def test_a_cost_budget_counts_calls_in_flight_at_their_estimate_and_gpu_time_as_spent() -> None:
    spending = Spending(state(Budget(cost=1.0)))
    produce_everything(spending)  # 0.56
    spending.record_gpu(100.0)  # 0.10
    edit = Call(GeneratorRole.EDIT_FRAME, "wave", CallCause.REGENERATION, images=4)  # 0.12

    spending.start(edit)
    spending.start(edit)

    assert spending.committed().cost == pytest.approx(0.56 + 0.10 + 0.24)
    assert spending.refusal("an edit", edit) is not None
    assert spending.refusal("an edit", Call(GeneratorRole.EDIT_FRAME, "wave", CallCause.REGENERATION, images=3)) is None


def test_the_ledger_counts_failed_calls_and_retried_attempts_apart_and_names_unpriced_models() -> None:
    current = state()
    spending = Spending(current)
    billed = spending.start(Call(GeneratorRole.CLIP, "wave", CallCause.REGENERATION, video_seconds=2.0))
    spending.record(billed, clip(5.0, attempt=3), AT)
    lost = spending.start(Call(GeneratorRole.CLIP, "heart", CallCause.PRODUCTION))
    spending.record(lost, None, AT)
    unpriced = spending.start(Call(GeneratorRole.CLIP, "heart", CallCause.REGENERATION))
    spending.record(unpriced, clip(4.0, model="new-model"), AT)
    spending.record_gpu(12.5)

    summary = current.ledger.summary()

    assert [c.outcome for c in current.ledger.calls] == [CallOutcome.BILLED, CallOutcome.FAILED, CallOutcome.BILLED]
    assert current.ledger.calls[1].attempts is None and current.ledger.calls[1].model == "i2v"
    assert (summary.paid_calls, summary.failed_calls, summary.retried_attempts, summary.regenerations) == (2, 1, 2, 2)
    assert summary.video_seconds == 9.0 and summary.gpu_seconds == 12.5
    assert summary.paid_cost == pytest.approx(0.5) and summary.gpu_cost == pytest.approx(0.0125)
    assert summary.cost == pytest.approx(0.5125) and summary.unpriced_models == ["new-model"]


def test_a_set_without_terms_counts_calls_and_prices_nothing() -> None:
    current = state(terms=False)
    spending = Spending(current)
    token = spending.start(Call(GeneratorRole.CLIP, "wave", CallCause.PRODUCTION))
    spending.record(token, clip(2.0), AT)
    spending.record_gpu(3.0)

    assert current.ledger.summary().paid_calls == 1 and current.ledger.summary().cost == 0.0
    assert spending.budget() is None


def test_the_deployments_default_budget_applies_to_a_set_without_its_own() -> None:
    current = state()
    assert current.terms is not None
    current.terms.budget = Budget(paid_calls=5)

    assert Spending(current).refusal("a new take", Call(GeneratorRole.CLIP, "w", CallCause.REGENERATION)) is not None
    assert Spending(state(Budget(paid_calls=9))).budget() == Budget(paid_calls=9)


def test_a_budget_below_what_the_set_needs_at_start_is_refused_before_it_starts() -> None:
    with pytest.raises(pydantic.ValidationError) as refused:
        state(Budget(paid_calls=4), takes_per_action=1)

    assert (
        "a budget of 4 paid calls is below what the set needs at start: 5 (1 character, 2 start frame calls and "
        "2 clips)" in str(refused.value)
    )
    with pytest.raises(pydantic.ValidationError, match="a budget limits paid_calls, cost or both"):
        Budget()
    with pytest.raises(pydantic.ValidationError):
        Budget(cost=0)


def test_a_default_budget_too_small_for_the_sets_production_is_its_shortfall_at_start() -> None:
    current = state()
    assert current.terms is not None
    current.terms.budget = Budget(paid_calls=4)

    assert Spending(current).shortfall_at_start() == (
        "the deployment's default budget of 4 paid calls is below what the set needs at start: about 0.56 USD for 5 "
        "paid calls (character, start frames, clips)"
    )
    current.terms.budget = Budget(paid_calls=5, cost=0.5)
    assert Spending(current).shortfall_at_start() is not None, "0.56 USD of production is more than 0.50"
    current.terms.budget = Budget(paid_calls=5, cost=0.6)
    assert Spending(current).shortfall_at_start() is None


def test_a_clip_is_estimated_at_the_length_the_generator_bills() -> None:
    current = state()
    assert current.terms is not None
    current.terms.clip_seconds = 5.0  # a model that makes 5 s clips whatever is asked

    clip = Call(GeneratorRole.CLIP, "wave", CallCause.REGENERATION, video_seconds=2.0)

    assert Spending(current).estimate(clip) == pytest.approx(0.5)


def test_a_call_stopped_before_it_ended_is_counted_at_its_estimate_once() -> None:
    current = state(Budget(paid_calls=7))
    spending = Spending(current)
    produce_everything(spending)
    take = spending.start(Call(GeneratorRole.CLIP, "wave", CallCause.REGENERATION, video_seconds=2.0))
    edit = spending.start(Call(GeneratorRole.EDIT_FRAME, "heart", CallCause.REGENERATION, images=2))

    spending.stop(take, AT)
    spending.stop(take, AT)  # its task stopped too: already in the ledger
    spending.stop_action("heart", AT)

    stopped = [c for c in current.ledger.calls if c.outcome is CallOutcome.STOPPED]
    assert [(c.role, c.action, c.cost) for c in stopped] == [
        (GeneratorRole.CLIP, "wave", pytest.approx(0.2)),
        (GeneratorRole.EDIT_FRAME, "heart", pytest.approx(0.06)),
    ]
    assert current.ledger.summary().stopped_calls == 2 and current.ledger.summary().paid_cost == pytest.approx(0.82)
    assert spending.committed().calls == 7, "the provider may bill them: they count against the budget"
    assert spending.refusal("another take", Call(GeneratorRole.CLIP, "wave", CallCause.REGENERATION)) is not None
    spending.stop(edit, AT)
    assert len(current.ledger.calls) == 7
