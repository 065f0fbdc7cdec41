"""The cost ledger of a demo set, checked against a count made independently from the provider stand-in's own log.

One set is made as ``popcon demo`` makes it (:mod:`starter.demo`: its prompt, the eight default actions, 12 frames
an emoji, one neighbour either side, two character and two start frame candidates, one take, 2 s clips, 256 px,
start frames and the final review by a person, generic files and the LINE emoji package), with one change: the
``dashscope`` generator, pointed at the DashScope stand-in (:class:`testkit.dashscope_standin.FakeDashScope`). It
takes about 30 s on two cores (``--actions``, ``--frames`` and ``--image-size`` make a smaller set). It runs on a
throwaway dev server with the real stack in this process, as :mod:`benchmarks.paid_rate` does (its settings and stack
are reused: the paid queue at ``--paid-rate`` calls a second, ``--concurrency`` at once).

What makes the ledger worth checking is injected:

- the stand-in takes ``--provider-rate`` submits a second and answers the rest ``429 Throttling.RateQuota`` with
  ``Retry-After``: the generator waits inside the call (no new attempt, nothing in the ledger);
- once every start frame awaits review, the next clip task the stand-in creates ends FAILED with a passing error
  (``InternalError.Algo``): the activity retries and its second attempt submits a new task, so the ledger's entry
  says 2 attempts, and the failed task is not billed (DashScope bills succeeded tasks only);
- the clip task after it ends FAILED with ``DataInspectionFailed``: refused for good, a FAILED entry in the ledger
  (refunded, as the original product did), and its action waits for a custom prompt (``--no-refusal`` leaves it out);
- in the final review a reviewer makes a new take of that action (``regenerate_action`` with a motion prompt; of the
  first action without a refusal) and edits one frame of another (``regenerate_frame`` with a custom prompt), then
  approves. (The demo's hand pick of a candidate costs nothing and is left out.)

The prices are illustrative, set for this run through the workers' ``CostSettings(prices=...)`` (what
``POPCON_PRICES`` sets in a deployment): per image of the configured DashScope image models, per video second of the
clip model, per GPU second (:func:`price_table`). They are not DashScope's price list.

Printed side by side: the set's ledger (``get_state``'s ``ledger`` and the result's ``cost``) and the count from the
stand-in's log: every submit it answered (accepted, throttled, refused; model, ``n`` images, ``duration`` seconds) and
how each task it created ended (its own task records: SUCCEEDED, FAILED, unfinished). Billed calls are the accepted
submits whose task SUCCEEDED; their images are the URLs the task returned, their video seconds the ``duration`` its
submit asked; regenerations are the succeeded tasks submitted after the set reached its final review; the estimated
cost is recomputed from those counts with the same price table. Each figure gets a verdict, match or differ. GPU
seconds have no provider-side count: they are printed from the ledger with their cost. The exit status is 1 when a
figure that should match differs (or the set did not complete).

    python -m benchmarks.ledger [--actions 8] [--frames 12] [--image-size 256] [--provider-rate 2]
        [--paid-rate 10] [--concurrency 4] [--no-refusal]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from activities.generation import GeneratorRegistry
from activities.generation.dashscope import DashScopeGenerator
from activities.settings import DashScopeSettings, PaidGenerationSettings
from benchmarks import paid_rate
from benchmarks.arguments import at_least
from benchmarks.paid_rate import API_KEY, dashscope_settings, stack_settings
from core.settings import CostSettings
from starter.demo import DEMO_NEIGHBOURS, DEMO_PROMPT
from testkit.dashscope_standin import CLIP_FRAMES, FakeDashScope, Kind, SubmitRecord, TaskScript
from testkit.servers import start_throwaway_server
from testkit.stack import Stack, run_stack
from workflows.contract import (
    ActionStage,
    CallOutcome,
    EmojiSetInput,
    EmojiSetResult,
    EmojiSetState,
    ExportTarget,
    GeneratorRole,
    Ledger,
    LedgerSummary,
    ModelPrice,
    PaidCall,
    Phase,
    PriceTable,
    RegenerateActionInput,
    RegenerateFrameInput,
)
from workflows.presets import DEFAULT_ACTIONS

IMAGE_PRICES = {
    GeneratorRole.CHARACTER: 0.025,
    GeneratorRole.START_FRAME: 0.03,
    GeneratorRole.EDIT_FRAME: 0.03,
}
"""Illustrative prices per image of each image role's model, in USD (set for this run, not DashScope's list)."""
CLIP_PRICE_PER_SECOND = 0.05
"""Illustrative price per video second of the clip model, in USD."""
GPU_PRICE_PER_SECOND = 0.0004
"""Illustrative price per GPU second (about 1.44 USD an hour), in USD."""
PASSING_FAILURE = ("InternalError.Algo", "An internal error occurred in the algorithm; try again later.")
"""A failed task a retry may fix: the activity's next attempt submits a new task."""
REFUSAL = ("DataInspectionFailed", "Output data may contain inappropriate content.")
"""A failed task a retry cannot fix: the call fails for good."""
KIND_OF_ROLE: dict[GeneratorRole, Kind] = {
    GeneratorRole.CHARACTER: "text2image",
    GeneratorRole.START_FRAME: "image2image",
    GeneratorRole.EDIT_FRAME: "image2image",
    GeneratorRole.CLIP: "video",
}
"""The DashScope endpoint each role calls (docs/dashscope.md): how the ledger's roles meet the stand-in's kinds."""
KIND_NAMES: dict[Kind, str] = {"text2image": "text-to-image", "image2image": "image edit", "video": "image-to-video"}
COST_TOLERANCE = 1e-4
"""Costs are compared to the ledger summary's rounding (4 decimals)."""
SECONDS_TOLERANCE = 1e-3
"""Seconds are compared to the ledger summary's rounding (3 decimals)."""
RETAKE_PROMPT = "waves both arms slowly above the head, then lowers them back to rest"
EDIT_PROMPT = "the same pose with the eyes closed and a wide smile"
REVIEWER = "ledger-benchmark"


@dataclass(frozen=True)
class Config:
    """The demo set as this benchmark makes it, and the limits of the paid queue and the stand-in."""

    actions: int = len(DEFAULT_ACTIONS)
    frames: int = EmojiSetInput.model_fields["frames_per_emoji"].default
    image_size: int = EmojiSetInput.model_fields["image_size"].default
    provider_rate: float = 2.0
    paid_rate: float = 10.0
    concurrency: int = PaidGenerationSettings.model_fields["paid_concurrency"].default
    refusal: bool = True
    timeout_s: float = 900.0
    """How long the set may take before it is given up on."""

    def set_input(self) -> EmojiSetInput:
        """The demo's set (:func:`starter.demo.run_demo`) on the ``dashscope`` generator at ``image_size``; a set of
        fewer than eight actions exports generic files only (LINE takes no fewer than eight emoji)."""
        targets = None if self.actions >= len(DEFAULT_ACTIONS) else [ExportTarget.GENERIC]
        return EmojiSetInput(
            character_prompt=DEMO_PROMPT,
            actions=list(DEFAULT_ACTIONS[: self.actions]),
            frames_per_emoji=self.frames,
            neighbours=DEMO_NEIGHBOURS,
            generator="dashscope",
            image_size=self.image_size,
            owner="demo",
            **({} if targets is None else {"export_targets": targets}),
        )


def price_table(settings: DashScopeSettings) -> PriceTable:
    """The illustrative prices of this run for the models ``settings`` configure (:data:`IMAGE_PRICES`,
    :data:`CLIP_PRICE_PER_SECOND`, :data:`GPU_PRICE_PER_SECOND`)."""
    image_models = {
        GeneratorRole.CHARACTER: settings.dashscope_character_model,
        GeneratorRole.START_FRAME: settings.dashscope_start_frame_model,
        GeneratorRole.EDIT_FRAME: settings.dashscope_edit_frame_model,
    }
    models = {model: ModelPrice(per_image=IMAGE_PRICES[role]) for role, model in image_models.items()}
    models[settings.dashscope_clip_model] = ModelPrice(per_video_second=CLIP_PRICE_PER_SECOND)
    return PriceTable(currency="USD", models=models, per_gpu_second=GPU_PRICE_PER_SECOND)


# --- The two counts -------------------------------------------------------------------------------------------------


TaskStatus = Literal["succeeded", "failed", "unfinished"]


@dataclass(frozen=True)
class TaskEnd:
    """How the stand-in ended one task: its status as its polls answered it, and the image URLs it returned."""

    status: TaskStatus
    images: int = 0


def task_ends(fake: FakeDashScope) -> dict[str, TaskEnd]:
    """Each task the stand-in created, as it ended, read from its own task records: SUCCEEDED (or FAILED, as its
    script says) once polled past its PENDING and RUNNING polls, else unfinished."""
    ends: dict[str, TaskEnd] = {}
    for task_id, task in fake.tasks.items():
        script = task.script
        if script.never_finish or task.polls <= fake.pending_polls + fake.running_polls:
            ends[task_id] = TaskEnd("unfinished")
        elif script.failed is not None:
            ends[task_id] = TaskEnd("failed")
        elif task.kind == "video" or script.no_results:
            ends[task_id] = TaskEnd("succeeded")
        else:
            ends[task_id] = TaskEnd("succeeded", task.n - sum(1 for i in script.image_failures if i < task.n))
    return ends


@dataclass(frozen=True)
class ModelCount:
    """Billed calls of one model and what they made."""

    calls: int = 0
    images: int = 0
    video_seconds: float = 0.0

    def __add__(self, other: ModelCount) -> ModelCount:
        return ModelCount(
            self.calls + other.calls, self.images + other.images, self.video_seconds + other.video_seconds
        )


@dataclass(frozen=True)
class ProviderCount:
    """The stand-in's log, counted: every submit it answered, every task it created and how it ended."""

    accepted: int
    throttled: int
    refused: int
    succeeded: int
    failed: int
    unfinished: int
    by_model: dict[str, ModelCount]
    """Succeeded tasks per model: what DashScope bills."""
    by_kind: dict[Kind, int]
    """Succeeded tasks per endpoint."""
    regenerations: int
    """Succeeded tasks submitted once the set was in its final review (the reviewer's)."""

    @property
    def images(self) -> int:
        return sum(count.images for count in self.by_model.values())

    @property
    def video_seconds(self) -> float:
        return sum(count.video_seconds for count in self.by_model.values())


def provider_count(
    log: Sequence[SubmitRecord], ends: Mapping[str, TaskEnd], *, review_at: float | None = None
) -> ProviderCount:
    """Count the stand-in's submit log with how its tasks ended; ``review_at`` (``time.monotonic()``, the log's
    clock): when the set reached its final review."""
    accepted = [record for record in log if record.outcome == "accepted"]
    status = Counter(ends[task].status for task in (record.task_id or "" for record in accepted) if task in ends)
    by_model: dict[str, ModelCount] = {}
    by_kind: Counter[Kind] = Counter()
    regenerations = 0
    for record in accepted:
        end = ends.get(record.task_id or "")
        if end is None or end.status != "succeeded":
            continue
        made = ModelCount(1, end.images, float(record.seconds) if record.kind == "video" else 0.0)
        by_model[record.model] = by_model.get(record.model, ModelCount()) + made
        by_kind[record.kind] += 1
        regenerations += review_at is not None and record.at >= review_at
    return ProviderCount(
        accepted=len(accepted),
        throttled=sum(1 for record in log if record.outcome == "throttled"),
        refused=sum(1 for record in log if record.outcome == "refused"),
        succeeded=status["succeeded"],
        failed=status["failed"],
        unfinished=len(accepted) - status["succeeded"] - status["failed"],
        by_model=dict(sorted(by_model.items())),
        by_kind=dict(sorted(by_kind.items())),
        regenerations=regenerations,
    )


def provider_cost(count: ProviderCount, prices: PriceTable) -> tuple[float, list[str]]:
    """The estimated cost of the stand-in's billed tasks by ``prices``, and the models it does not price."""
    cost, unpriced = 0.0, []
    for model, made in count.by_model.items():
        priced = prices.cost(model, images=made.images, video_seconds=made.video_seconds)
        if priced is None:
            unpriced.append(model)
        else:
            cost += priced
    return cost, unpriced


@dataclass(frozen=True)
class LedgerCount:
    """The set's ledger, counted the same ways as the stand-in's log."""

    summary: LedgerSummary
    by_model: dict[str, ModelCount]
    """Billed calls per model."""
    by_kind: dict[Kind, int]
    """Billed calls per endpoint their role calls (:data:`KIND_OF_ROLE`)."""
    failed: list[PaidCall] = field(default_factory=list)
    """Calls that failed for good (not billed)."""
    retried: list[PaidCall] = field(default_factory=list)
    """Billed calls made by a later attempt."""


def ledger_count(ledger: Ledger) -> LedgerCount:
    """Count the set's ledger by model and by endpoint."""
    billed = [call for call in ledger.calls if call.outcome is CallOutcome.BILLED]
    by_model: dict[str, ModelCount] = {}
    for call in billed:
        model = call.model or "(no model)"
        by_model[model] = by_model.get(model, ModelCount()) + ModelCount(1, call.images, call.video_seconds)
    by_kind = Counter(KIND_OF_ROLE[call.role] for call in billed)
    return LedgerCount(
        summary=ledger.summary(),
        by_model=dict(sorted(by_model.items())),
        by_kind=dict(sorted(by_kind.items())),
        failed=[call for call in ledger.calls if call.outcome is CallOutcome.FAILED],
        retried=[call for call in billed if (call.attempts or 1) > 1],
    )


# --- The comparison -------------------------------------------------------------------------------------------------


Verdict = Literal["match", "differ", "ledger only", "log only"]


@dataclass(frozen=True)
class Figure:
    """One figure, as the ledger and the stand-in's log give it, and whether they agree."""

    name: str
    ledger: str
    provider: str
    verdict: Verdict
    note: str = ""


def _same(a: float, b: float, tolerance: float = 0.0) -> Verdict:
    return "match" if abs(a - b) <= tolerance + 1e-9 else "differ"


def _number(value: float, digits: int = 0) -> str:
    return f"{value:.{digits}f}" if digits else f"{value:g}"


def compare(
    ledger: LedgerCount,
    provider: ProviderCount,
    prices: PriceTable,
    *,
    result_cost: LedgerSummary | None,
) -> list[Figure]:
    """Every figure side by side with its verdict (see the module's docstring)."""
    s = ledger.summary
    figures = [
        Figure("billed calls", str(s.paid_calls), str(provider.succeeded), _same(s.paid_calls, provider.succeeded)),
    ]
    for model in sorted(set(ledger.by_model) | set(provider.by_model)):
        mine, theirs = ledger.by_model.get(model, ModelCount()), provider.by_model.get(model, ModelCount())
        figures.append(Figure(f"  {model}", str(mine.calls), str(theirs.calls), _same(mine.calls, theirs.calls)))
    for kind in sorted(set(ledger.by_kind) | set(provider.by_kind)):
        roles = "+".join(role.value for role, of in KIND_OF_ROLE.items() if of == kind)
        mine_calls, their_calls = ledger.by_kind.get(kind, 0), provider.by_kind.get(kind, 0)
        figures.append(
            Figure(f"  {KIND_NAMES[kind]} ({roles})", str(mine_calls), str(their_calls), _same(mine_calls, their_calls))
        )
    figures += [
        Figure(
            "regenerations",
            str(s.regenerations),
            str(provider.regenerations),
            _same(s.regenerations, provider.regenerations),
            "log: succeeded tasks submitted after the final review began",
        ),
        Figure("images", str(s.images), str(provider.images), _same(s.images, provider.images)),
        Figure(
            "video seconds",
            _number(s.video_seconds),
            _number(provider.video_seconds),
            _same(s.video_seconds, provider.video_seconds, SECONDS_TOLERANCE),
            "log: duration asked by succeeded clip tasks",
        ),
    ]
    for model in sorted(set(ledger.by_model) | set(provider.by_model)):
        mine, theirs = ledger.by_model.get(model, ModelCount()), provider.by_model.get(model, ModelCount())
        if mine.images or theirs.images:
            figures.append(
                Figure(f"  images, {model}", str(mine.images), str(theirs.images), _same(mine.images, theirs.images))
            )
        if mine.video_seconds or theirs.video_seconds:
            figures.append(
                Figure(
                    f"  video seconds, {model}",
                    _number(mine.video_seconds),
                    _number(theirs.video_seconds),
                    _same(mine.video_seconds, theirs.video_seconds, SECONDS_TOLERANCE),
                )
            )
    failed_at_provider = s.failed_calls + s.retried_attempts
    figures += [
        Figure(
            "failed tasks (not billed)",
            f"{failed_at_provider} = {s.failed_calls} failed + {s.retried_attempts} retried",
            str(provider.failed),
            _same(failed_at_provider, provider.failed),
            "ledger: calls failed for good + extra attempts of billed calls (each retry here follows a failed task)",
        ),
        Figure(
            "tasks created (accepted submits)",
            str(s.paid_calls + failed_at_provider),
            str(provider.accepted),
            _same(s.paid_calls + failed_at_provider, provider.accepted),
            f"log: {provider.succeeded} succeeded, {provider.failed} failed, {provider.unfinished} unfinished",
        ),
        Figure(
            "throttled answers (429)",
            "-",
            str(provider.throttled),
            "log only",
            "absorbed inside the call (back-off): no task, no attempt, no ledger entry",
        ),
        Figure("refused submits", "-", str(provider.refused), "log only", "answered with an error, no task"),
    ]
    recomputed, unpriced = provider_cost(provider, prices)
    currency = prices.currency
    figures += [
        Figure(
            f"paid cost ({currency})",
            f"{s.paid_cost:.4f}",
            f"{recomputed:.4f}",
            _same(s.paid_cost, round(recomputed, 4), COST_TOLERANCE),
            "log: recomputed from its counts with the same price table"
            + (f"; unpriced: {', '.join(unpriced)}" if unpriced else ""),
        ),
        Figure(
            "GPU seconds",
            f"{s.gpu_seconds:.3f}",
            "-",
            "ledger only",
            "no provider-side count: the GPU worker's busy seconds, from the ledger",
        ),
        Figure(
            f"GPU cost ({currency})", f"{s.gpu_cost:.4f}", "-", "ledger only", f"{prices.per_gpu_second:g} a second"
        ),
        Figure(
            f"estimated cost ({currency})",
            f"{s.cost:.4f}",
            f"{recomputed + s.gpu_cost:.4f}",
            _same(s.cost, round(recomputed + s.gpu_cost, 4), COST_TOLERANCE),
            "log: its paid cost + the ledger's GPU cost",
        ),
    ]
    if result_cost is not None:
        same = result_cost == s
        figures.append(
            Figure(
                "result's cost = state's ledger",
                "result.cost",
                "state.ledger.summary()",
                "match" if same else "differ",
                "" if same else f"result {result_cost.model_dump()} vs state {s.model_dump()}",
            )
        )
    return figures


def mismatches(figures: Sequence[Figure]) -> list[Figure]:
    """The figures that should match and do not."""
    return [figure for figure in figures if figure.verdict == "differ"]


# --- The set --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What one run of the set left: its state and result, and the stand-in's log and tasks."""

    state: EmojiSetState
    result: EmojiSetResult
    log: list[SubmitRecord]
    ends: dict[str, TaskEnd]
    review_at: float | None
    prices: PriceTable
    story: list[str]
    wall_s: float


async def _until(stack: Stack, set_id: str, condition: Callable[[EmojiSetState], bool], what: str) -> EmojiSetState:
    """Poll the set until ``condition``; raises when the set ended first."""
    while True:
        state = await stack.sets.state(set_id)
        if condition(state):
            return state
        if state.failure is not None or state.phase in (Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED):
            raise RuntimeError(f"the set ended as {state.phase.value} before {what}: {state.failure or state.notice}")
        await asyncio.sleep(0.2)


async def review(
    stack: Stack, fake: FakeDashScope, config: Config
) -> tuple[EmojiSetState, EmojiSetResult, float, list[str]]:
    """Run the set through its reviews as a person would, scripting the stand-in's clip failures on the way;
    returns the final state and result, when the final review began (monotonic) and what happened, in words."""
    sets, story = stack.sets, []
    set_id = f"ledger-{uuid.uuid4().hex[:6]}"
    await sets.start(config.set_input(), set_id=set_id)
    await _until(
        stack,
        set_id,
        lambda s: all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in s.actions),
        "every start frame awaited review",
    )
    fake.script_task(TaskScript(failed=PASSING_FAILURE))
    if config.refusal:
        fake.script_task(TaskScript(failed=REFUSAL))
    approved = await sets.approve_start_frames(set_id, reviewer=REVIEWER)
    story.append(
        f"approved the start frames of {len(approved)} actions; the next clip task fails once ({PASSING_FAILURE[0]})"
        + (f", the one after it for good ({REFUSAL[0]})" if config.refusal else "")
    )
    state = await _until(stack, set_id, lambda s: s.phase is Phase.AWAITING_REVIEW, "the final review")
    review_at = time.monotonic()
    waiting = [a for a in state.actions if a.stage is ActionStage.WAITING_FOR_PROMPT]
    story.append(
        "final review: "
        + (
            f"{', '.join(f'{a.name} waits for a prompt ({a.error})' for a in waiting)}"
            if waiting
            else "every emoji ready"
        )
    )
    retake = (waiting or state.actions)[0].name
    await sets.regenerate_action(RegenerateActionInput(emoji=retake, motion_prompt=RETAKE_PROMPT), set_id=set_id)
    story.append(f"regenerate_action {retake}: a new take from a custom motion prompt")
    await _until(stack, set_id, lambda s: not s.unusable(), f"the new take of {retake} was usable")
    edited = next((a.name for a in state.actions if a.name != retake), retake)
    await sets.regenerate_frame(RegenerateFrameInput(emoji=edited, frame=0, prompt=EDIT_PROMPT), set_id=set_id)
    story.append(f"regenerate_frame {edited} frame 0: an image edit with a custom prompt")
    await sets.approve(set_id, reviewer=REVIEWER)
    result = await sets.result(set_id)
    story.append(f"approved: the set is {result.status}")
    return await sets.state(set_id), result, review_at, story


async def run_set(config: Config) -> Run:
    """The set on a fresh throwaway dev server and a fresh stand-in, with this run's prices."""
    began = time.monotonic()
    env = await start_throwaway_server()
    try:
        with FakeDashScope(api_key=API_KEY, submits_per_second=config.provider_rate) as fake:
            settings = dashscope_settings(fake)
            prices = price_table(settings)
            generators = GeneratorRegistry(
                {DashScopeGenerator.name: lambda: DashScopeGenerator.from_settings(settings)}
            )
            with tempfile.TemporaryDirectory() as root:
                queue = paid_rate.Config(rate=config.paid_rate, concurrency=config.concurrency)
                stack_config = dataclasses.replace(
                    stack_settings(Path(root), queue), costs=CostSettings(_env_file=None, prices=prices)
                )
                stacks = cast(AsyncGenerator[Stack, None], run_stack(env, stack_config, generators=generators))
                async with contextlib.aclosing(stacks):
                    async for stack in stacks:
                        async with asyncio.timeout(config.timeout_s):
                            state, result, review_at, story = await review(stack, fake, config)
            log, ends = list(fake.submit_log), task_ends(fake)
    finally:
        await env.shutdown()
    return Run(state, result, log, ends, review_at, prices, story, time.monotonic() - began)


# --- The report -----------------------------------------------------------------------------------------------------


def ledger_lines(ledger: Ledger) -> list[str]:
    """The ledger's calls grouped by role, model, cause and outcome."""
    groups: dict[tuple[str, str, str, str], list[PaidCall]] = {}
    for call in ledger.calls:
        key = (call.role.value, call.model or "-", call.cause.value, call.outcome.value)
        groups.setdefault(key, []).append(call)
    lines = [f"  {'role':<12} {'model':<20} {'cause':<13} {'outcome':<8} calls images video_s retries   cost"]
    for (role, model, cause, outcome), calls in sorted(groups.items()):
        billed = outcome == CallOutcome.BILLED.value
        retries = str(sum((c.attempts or 1) - 1 for c in calls)) if billed else "-"
        cost = f"{sum(c.cost or 0.0 for c in calls):.3f}" if billed else "-"
        lines.append(
            f"  {role:<12} {model:<20} {cause:<13} {outcome:<8} {len(calls):>5} "
            f"{sum(c.images for c in calls):>6} {sum(c.video_seconds for c in calls):>7g} {retries:>7} {cost:>6}"
        )
    for call in ledger.calls:
        if call.outcome is CallOutcome.FAILED:
            lines.append(f"  failed for good, refunded: {call.role.value} of {call.action} ({call.model})")
        elif call.attempts and call.attempts > 1:
            lines.append(f"  made by attempt {call.attempts}: {call.role.value} of {call.action} ({call.model})")
    return lines


def report(run: Run) -> tuple[list[str], list[Figure]]:
    """The printed lines and the figures."""
    counted = ledger_count(run.state.ledger)
    provider = provider_count(run.log, run.ends, review_at=run.review_at)
    figures = compare(counted, provider, run.prices, result_cost=run.result.cost)
    prices = ", ".join(
        f"{model} {price.per_image:g}/image" if price.per_image else f"{model} {price.per_video_second:g}/video s"
        for model, price in run.prices.models.items()
    )
    lines = [
        *(f"  {line}" for line in run.story),
        f"prices (illustrative, set for this run through CostSettings(prices=...), {run.prices.currency}): {prices}; "
        f"GPU {run.prices.per_gpu_second:g}/s",
        f"the set's ledger ({len(run.state.ledger.calls)} calls, {run.state.ledger.gpu_activities} GPU activities):",
        *ledger_lines(run.state.ledger),
        f"{'figure':<38} {'set ledger':<32} {'stand-in log':<22} verdict",
    ]
    for figure in figures:
        lines.append(
            f"{figure.name:<38} {figure.ledger:<32} {figure.provider:<22} {figure.verdict}"
            + (f"  ({figure.note})" if figure.note else "")
        )
    wrong = [figure.name.strip() for figure in mismatches(figures)]
    verdict = f"{len(wrong)} figure(s) differ: {', '.join(wrong)}" if wrong else "every figure matches"
    lines.append(f"verdict: {verdict}; set {run.result.status}; wall time {run.wall_s:.0f} s")
    return lines, figures


class OneLineFailures(logging.Filter):
    """Log an activity failure in one line, without its traceback: the failures this benchmark injects are expected,
    and the ledger shows them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}: {type(error).__name__}: {error}", None
            record.exc_info, record.exc_text = None, None
        return True


async def main(config: Config) -> int:
    logging.getLogger("temporalio.activity").addFilter(OneLineFailures())
    print(
        f"the demo set on the dashscope generator against the stand-in: {config.actions} actions x {config.frames} "
        f"frames, {DEMO_NEIGHBOURS} neighbour either side, {config.image_size} px; the stand-in "
        f"takes {config.provider_rate:g} submits/s, the paid queue {config.paid_rate:g} calls/s, {config.concurrency} "
        f"at once; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    run = await run_set(config)
    lines, figures = report(run)
    print("\n".join(lines), flush=True)
    return 1 if mismatches(figures) or run.result.status != "completed" else 0


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Config()
    parser.add_argument(
        "--actions", type=at_least(1), default=defaults.actions, help=f"the first N of {list(DEFAULT_ACTIONS)}"
    )
    parser.add_argument("--frames", type=at_least(2), default=defaults.frames, help="frames per emoji (the demo's)")
    parser.add_argument(
        "--image-size", type=at_least(64), default=defaults.image_size, help="frame edge in px (the demo's)"
    )
    parser.add_argument(
        "--provider-rate", type=float, default=defaults.provider_rate, help="submits/s the stand-in takes (then 429)"
    )
    parser.add_argument("--paid-rate", type=float, default=defaults.paid_rate, help="the paid queue's calls/s")
    parser.add_argument(
        "--concurrency", type=at_least(1), default=defaults.concurrency, help="paid calls at once in the worker"
    )
    parser.add_argument(
        "--no-refusal", dest="refusal", action="store_false", help="no clip refused for good (a FAILED ledger entry)"
    )
    args = parser.parse_args()
    if args.actions > len(DEFAULT_ACTIONS):
        parser.error(f"--actions: at most {len(DEFAULT_ACTIONS)}")
    if args.frames > CLIP_FRAMES:
        parser.error(f"--frames: at most {CLIP_FRAMES} (the stand-in's clips have {CLIP_FRAMES} frames)")
    for name in ("provider_rate", "paid_rate"):
        value = getattr(args, name)
        if not value > 0 or math.isinf(value):
            parser.error(f"--{name.replace('_', '-')}: must be above 0")
    config = Config(
        actions=args.actions,
        frames=args.frames,
        image_size=args.image_size,
        provider_rate=args.provider_rate,
        paid_rate=args.paid_rate,
        concurrency=args.concurrency,
        refusal=args.refusal,
    )
    sys.exit(asyncio.run(main(config)))


if __name__ == "__main__":
    cli()
