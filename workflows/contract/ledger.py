"""What a set costs: every generator call and the GPU time it used, priced by the deployment, and its budget.

A generator activity returns its :class:`Usage` (the model it called, the images or video seconds it made, the
attempt that made them); the GPU activities their GPU seconds. The workflow records each call in the set's
:class:`Ledger` (:class:`PaidCall`), priced with the deployment's :class:`PriceTable` as the set found it at start
(:class:`DeploymentTerms`), and refuses a reviewer's regeneration that would take the set past its :class:`Budget`.
A call that failed for good is counted apart and costs nothing, as the original product refunded a failed stage.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field, model_validator

from workflows.contract.base import _Model
from workflows.contract.vocabulary import TemporalMode


class GeneratorRole(StrEnum):
    """The four calls a generator answers (``activities.generation.base.Generator``)."""

    CHARACTER = "character"
    START_FRAME = "start_frame"
    CLIP = "clip"
    EDIT_FRAME = "edit_frame"


class Usage(_Model):
    """What one generator call made, as its provider bills it."""

    model: str = Field(description="The provider's model, as priced in the price table.")
    images: int = Field(default=0, ge=0)
    video_seconds: float = Field(default=0.0, ge=0.0)
    attempt: int = Field(default=1, ge=1, description="The activity attempt that made it (earlier ones failed).")


class ModelPrice(_Model):
    """One model's price, in the price table's currency."""

    per_image: float = Field(default=0.0, ge=0.0)
    per_video_second: float = Field(default=0.0, ge=0.0)


class PriceTable(_Model):
    """The deployment's prices (``POPCON_PRICES``): per model, and per GPU second."""

    currency: str = Field(default="USD", min_length=1, max_length=8)
    models: dict[str, ModelPrice] = Field(default_factory=lambda: {"procedural": ModelPrice()})
    per_gpu_second: float = Field(default=0.0, ge=0.0)

    def cost(self, model: str, *, images: int = 0, video_seconds: float = 0.0) -> float | None:
        """The estimated cost of a call; None when the table has no price for ``model``."""
        price = self.models.get(model)
        if price is None:
            return None
        return images * price.per_image + video_seconds * price.per_video_second


class Budget(_Model):
    """The most a set may spend: generator calls and / or estimated cost (in the price table's currency)."""

    paid_calls: int | None = Field(default=None, ge=1, le=100_000, description="Generator calls that made something.")
    cost: float | None = Field(default=None, gt=0.0, le=1_000_000.0)

    @model_validator(mode="after")
    def _something(self) -> Budget:
        if self.paid_calls is None and self.cost is None:
            raise ValueError("a budget limits paid_calls, cost or both")
        return self

    def describe(self, currency: str) -> str:
        parts = []
        if self.paid_calls is not None:
            parts.append(f"{self.paid_calls} paid calls")
        if self.cost is not None:
            parts.append(f"{self.cost:.2f} {currency}")
        return " and ".join(parts)


class DeploymentTerms(_Model):
    """What the deployment tells a set at start (activity ``describe_deployment``): its prices, the models of the
    set's generator, the budget of a set that brings none, the webhook and the temporal mode of a set that names
    none."""

    prices: PriceTable = Field(default_factory=PriceTable)
    models: dict[GeneratorRole, str] = Field(default_factory=dict, description="The set's generator's model per role.")
    budget: Budget | None = Field(default=None, description="The deployment's default budget.")
    webhook: bool = Field(
        default=False,
        description="The deployment has a webhook (POPCON_WEBHOOK_URL, resolved when an event is delivered: its URL "
        "never enters a history).",
    )
    clip_seconds: float | None = Field(
        default=None, description="What the set's generator makes and bills for the clip length the set asks."
    )
    temporal: TemporalMode | None = Field(
        default=None,
        description="The temporal mode of a set that names none (POPCON_DEFAULT_TEMPORAL); None from a build before "
        "it: the input's default, none.",
    )


class CallOutcome(StrEnum):
    BILLED = "billed"
    """It made what was asked: paid for."""
    FAILED = "failed"
    """It failed for good: nothing made, nothing paid (the provider bills only finished tasks)."""
    STOPPED = "stopped"
    """Stopped before it ended (its emoji dropped, the set cancelled): the provider may still finish and bill it, so
    it is counted at its estimate."""


class CallCause(StrEnum):
    PRODUCTION = "production"
    """The set's own work: the character, the first start frames, the first takes."""
    REGENERATION = "regeneration"
    """A reviewer asked for it: new start frames, a new take, a frame edit."""


class PaidCall(_Model):
    """One generator call in the ledger."""

    role: GeneratorRole
    action: str | None = None
    model: str | None = Field(default=None, description="None when the call failed before naming one.")
    images: int = 0
    video_seconds: float = 0.0
    attempts: int | None = Field(
        default=None, description="Activity attempts of a billed call; None for a failed one (Temporal does not say)."
    )
    outcome: CallOutcome
    cause: CallCause
    cost: float | None = Field(default=None, description="Estimated; None when the price table lacks the model.")
    at: datetime


class LedgerSummary(_Model):
    """A set's ledger in figures (the result carries it; the state's ledger gives it with ``summary()``)."""

    paid_calls: int = Field(default=0, description="Billed generator calls.")
    failed_calls: int = Field(default=0, description="Calls that failed for good: not billed.")
    stopped_calls: int = Field(default=0, description="Calls stopped before they ended: counted at their estimate.")
    retried_attempts: int = Field(default=0, description="Extra attempts of billed calls: not billed twice.")
    regenerations: int = Field(default=0, description="Billed calls a reviewer asked for.")
    images: int = 0
    video_seconds: float = 0.0
    gpu_seconds: float = 0.0
    paid_cost: float = Field(default=0.0, description="Billed calls' cost, and stopped calls' estimates.")
    gpu_cost: float = 0.0
    cost: float = Field(default=0.0, description="paid_cost + gpu_cost: the estimated cost.")
    currency: str = "USD"
    unpriced_models: list[str] = Field(default_factory=list, description="Models the price table lacks (not in cost).")


class Ledger(_Model):
    """Every generator call of a set and the GPU time of its matting, refinements and stabilisations."""

    calls: list[PaidCall] = Field(default_factory=list)
    gpu_seconds: float = 0.0
    gpu_activities: int = 0
    gpu_cost: float = 0.0
    currency: str = "USD"

    def summary(self) -> LedgerSummary:
        billed = [call for call in self.calls if call.outcome is CallOutcome.BILLED]
        stopped = [call for call in self.calls if call.outcome is CallOutcome.STOPPED]
        paid_cost = sum(call.cost or 0.0 for call in billed + stopped)
        return LedgerSummary(
            paid_calls=len(billed),
            failed_calls=len(self.calls) - len(billed) - len(stopped),
            stopped_calls=len(stopped),
            retried_attempts=sum((call.attempts or 1) - 1 for call in billed),
            regenerations=sum(call.cause is CallCause.REGENERATION for call in billed),
            images=sum(call.images for call in billed),
            video_seconds=round(sum(call.video_seconds for call in billed), 3),
            gpu_seconds=round(self.gpu_seconds, 3),
            paid_cost=round(paid_cost, 4),
            gpu_cost=round(self.gpu_cost, 4),
            cost=round(paid_cost + self.gpu_cost, 4),
            currency=self.currency,
            unpriced_models=sorted({call.model for call in billed if call.cost is None and call.model}),
        )


def calls_at_start(*, prompt: bool, actions: int, takes: int) -> int:
    """The generator calls a set makes with no regeneration: its character (unless uploaded), one start frame call
    per action and its takes."""
    return int(prompt) + actions * (1 + takes)
