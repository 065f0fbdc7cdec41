"""A set's spending: its ledger, the estimate of a call, and the budget a regeneration must fit.

Deterministic and light, like the workflow that holds it. The budget counts what can no longer be taken back: billed
calls, calls in flight (at their estimate) and the set's own production not started yet (at its estimate), plus the
GPU time already used. A reviewer's regeneration is refused by its validator when it would not fit, and counted in
flight by its handler's first step (which runs with the validator as one step of the workflow): two regenerations sent
together cannot both pass a budget only one of them fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import count

from workflows.contract import (
    Budget,
    CallCause,
    CallOutcome,
    ClipOutput,
    EmojiSetState,
    GeneratedImages,
    GeneratorRole,
    PaidCall,
)


@dataclass(frozen=True)
class Spend:
    """Calls and their estimated cost."""

    calls: int = 0
    cost: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.calls + other.calls, self.cost + other.cost)


@dataclass(frozen=True)
class Call:
    """A generator call about to be made: what the ledger and the budget know of it beforehand."""

    role: GeneratorRole
    action: str | None
    cause: CallCause
    images: int = 0
    video_seconds: float = 0.0


class Spending:
    """The ledger of one set (in its state) and the calls it has in flight (in this run only: a set continues as new
    only when nothing is in flight).

    Args:
        state: The set's state, whose ``ledger`` this writes.
    """

    def __init__(self, state: EmojiSetState) -> None:
        self._state = state
        self._tokens = count()
        self._in_flight: dict[int, Call] = {}

    def budget(self) -> Budget | None:
        """The set's own budget, else the deployment's default (once the set has its terms)."""
        state = self._state
        return state.input.budget or (state.terms.budget if state.terms is not None else None)

    def estimate(self, call: Call) -> float:
        """The call's cost by the set's price table (0 for a model it does not price, or before the terms); a clip
        at the length the generator bills for the set's clips."""
        terms = self._state.terms
        if terms is None or call.role not in terms.models:
            return 0.0
        seconds = call.video_seconds
        if call.role is GeneratorRole.CLIP and terms.clip_seconds is not None:
            seconds = terms.clip_seconds
        return terms.prices.cost(terms.models[call.role], images=call.images, video_seconds=seconds) or 0.0

    def committed(self) -> Spend:
        """What the set has spent or will spend without another regeneration (a stopped call counts: the provider
        may bill it)."""
        ledger = self._state.ledger
        paid = [c for c in ledger.calls if c.outcome in (CallOutcome.BILLED, CallOutcome.STOPPED)]
        spent = Spend(len(paid), sum(c.cost or 0.0 for c in paid) + ledger.gpu_cost)
        for call in [*self._in_flight.values(), *self._production_to_come()]:
            spent += Spend(1, self.estimate(call))
        return spent

    def refusal(self, what: str, call: Call) -> str | None:
        """Why ``call`` would take the set past its budget, in words naming the budget and what is spent; None when
        it fits (or the set has no budget)."""
        budget = self.budget()
        if budget is None:
            return None
        committed, cost = self.committed(), self.estimate(call)
        currency = self._state.ledger.currency
        over = (budget.paid_calls is not None and committed.calls + 1 > budget.paid_calls) or (
            budget.cost is not None and committed.cost + cost > budget.cost + 1e-9
        )
        if not over:
            return None
        return (
            f"{what} would pass the set's budget of {budget.describe(currency)}: it has spent or committed "
            f"{committed.calls} paid calls and {committed.cost:.2f} {currency}, and this one is 1 call"
            + (f" of about {cost:.2f} {currency}" if cost else "")
        )

    def shortfall_at_start(self) -> str | None:
        """Why the set's budget (its own, or the deployment's default) cannot pay for its own production, or None."""
        budget, needed = self.budget(), self.committed()
        if budget is None:
            return None
        calls_short = budget.paid_calls is not None and needed.calls > budget.paid_calls
        cost_short = budget.cost is not None and needed.cost > budget.cost + 1e-9
        if not (calls_short or cost_short):
            return None
        whose = "its budget" if self._state.input.budget is not None else "the deployment's default budget"
        currency = self._state.ledger.currency
        return (
            f"{whose} of {budget.describe(currency)} is below what the set needs at start: about "
            f"{needed.cost:.2f} {currency} for {needed.calls} paid calls (character, start frames, clips)"
        )

    def start(self, call: Call) -> int:
        """Count ``call`` as in flight; returns the token :meth:`record` takes."""
        token = next(self._tokens)
        self._in_flight[token] = call
        return token

    def stop(self, token: int, at: datetime) -> None:
        """Put a call stopped before it ended in the ledger, at its estimate (the provider may still bill it); a call
        already put there is left as it is."""
        call = self._in_flight.pop(token, None)
        if call is None:
            return
        terms = self._state.terms
        model = terms.models.get(call.role) if terms is not None else None
        entry = PaidCall(
            role=call.role,
            action=call.action,
            model=model,
            images=call.images,
            video_seconds=call.video_seconds,
            outcome=CallOutcome.STOPPED,
            cause=call.cause,
            cost=self.estimate(call),
            at=at,
        )
        self._state.ledger.calls.append(entry)

    def stop_action(self, action: str, at: datetime) -> None:
        """Put every call of ``action`` still in flight in the ledger as stopped (its work was stopped, some of it
        perhaps before it began)."""
        for token in [token for token, call in self._in_flight.items() if call.action == action]:
            self.stop(token, at)

    def record(self, token: int, made: GeneratedImages | ClipOutput | None, at: datetime) -> None:
        """Put the finished call in the ledger: billed with what it ``made``, or failed for good (None: not billed)."""
        call = self._in_flight.pop(token)
        terms = self._state.terms
        model = terms.models.get(call.role) if terms is not None else None
        entry = PaidCall(
            role=call.role, action=call.action, model=model, outcome=CallOutcome.FAILED, cause=call.cause, at=at
        )
        if made is not None:
            entry.outcome = CallOutcome.BILLED  # a worker of a build without usage: counted, not priced
        usage = None if made is None else made.usage
        if usage is not None:
            entry.model, entry.attempts = usage.model, usage.attempt
            entry.images, entry.video_seconds = usage.images, usage.video_seconds
            if terms is not None:
                entry.cost = terms.prices.cost(usage.model, images=usage.images, video_seconds=usage.video_seconds)
        self._state.ledger.calls.append(entry)

    def record_gpu(self, seconds: float) -> None:
        """Add one GPU activity's busy time (and its cost by the price table)."""
        ledger, terms = self._state.ledger, self._state.terms
        ledger.gpu_seconds += seconds
        ledger.gpu_activities += 1
        if terms is not None:
            ledger.gpu_cost += seconds * terms.prices.per_gpu_second

    def _production_to_come(self) -> list[Call]:
        """The calls of the set's own production not made yet (and not in flight): its character, a start frame
        call per action, its takes. Counted at full size until made, dropped actions included (never too low)."""
        state, input = self._state, self._state.input
        actions = len(state.actions) + len(state.dropped)
        planned = [
            (Call(GeneratorRole.START_FRAME, None, CallCause.PRODUCTION, images=input.start_frame_candidates), actions),
            (
                Call(GeneratorRole.CLIP, None, CallCause.PRODUCTION, video_seconds=input.clip_seconds),
                actions * input.takes_per_action,
            ),
        ]
        if input.character_prompt is not None:
            character = Call(GeneratorRole.CHARACTER, None, CallCause.PRODUCTION, images=input.character_candidates)
            planned.append((character, 1))
        started = [c.role for c in state.ledger.calls if c.cause is CallCause.PRODUCTION]
        started += [c.role for c in self._in_flight.values() if c.cause is CallCause.PRODUCTION]
        return [call for call, times in planned for _ in range(times - started.count(call.role))]
