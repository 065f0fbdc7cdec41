"""Paid generator calls under load: the paid queue's rate limit held, the provider's rate-limit answers absorbed.

``--sets`` sets (12) start at once on a throwaway dev server (:func:`testkit.servers.start_throwaway_server`, fair
task queues as ``popcon dev``) with the real stack in this process (:func:`testkit.stack.run_stack`: the orchestration
worker with the paid queue's worker beside it, the GPU worker with classical matting on the CPU). Every set uses the
``dashscope`` generator, pointed at the DashScope stand-in (:class:`testkit.dashscope_standin.FakeDashScope`) by its
``POPCON_DASHSCOPE_*`` settings (base URL, key, polls every 0.05 s; a task ends after three polls), and runs through
without a person: ``--actions`` actions (2) of 2 frames, one candidate each, 64 px, 1 s clips, generic export, so
1 + 2 x actions generator calls a set. The paid queue is limited to ``--rate`` R calls per second (2) with
``--concurrency`` slots (``POPCON_PAID_CONCURRENCY``'s default). Two phases, each on a fresh server and stand-in:

- **provider above the limit**: the stand-in takes ``--above`` x R submits per second (1.5 R): the queue's limit is
  what binds, so no rate-limit answer is expected;
- **provider below the limit**: it takes ``--below`` x R (0.5 R) and answers the rest ``429 Throttling.RateQuota``
  with ``Retry-After``, as the service does; the generator waits and submits again inside the same activity.

Printed per phase, counted from the stand-in's own log (every submit with its monotonic time and answer): accepted
submits per second over the busy span (first to last accepted submit: (n - 1) / span) and the most accepted in any
sliding 1 s and 5 s window, against R; throttled answers; accepted submits by model, images asked (``n``) and video
seconds asked. From the sets' histories: generator activities started, per second and in the busiest 1 s and 5 s, by
the server's clock (the server's enforcement itself), generator activities that failed an attempt or for good
(expected 0), and accepted submits against generator activities completed (a task paid twice shows as more
submits). Then the sets completed. A phase *held* the limit when its accepted submits per second over the busy span
are at most what the limiter allows over that span, R (1 + 1 s / span), with 2 % for the worker's latency.

The limit is Temporal's: the server dispatches at most R activity tasks a second from ``emoji-paid``, through a GCRA
limiter with a burst of 1 s (the matching service's), so any window of W seconds holds at most R (W + 1) + 1
dispatches: the 1 s window may show twice R and one after a quiet spell; the submits follow the dispatches after the
worker's own latency (preparing the request), which may bunch them a little more. Everything shares this machine's
cores (the load average is printed), which slows the sets, not the limit.

    python -m benchmarks.paid_rate [--sets 12] [--rate 2] [--concurrency 4] [--actions 2] [--above 1.5]
        [--below 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import math
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.generation import GeneratorRegistry
from activities.generation.dashscope import DashScopeGenerator
from activities.settings import DashScopeSettings, OrchestrationSettings, PaidGenerationSettings
from benchmarks.arguments import at_least
from core.settings import ArtifactSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from testkit.dashscope_standin import FakeDashScope, SubmitRecord
from testkit.histories import workflow_runs
from testkit.servers import start_throwaway_server
from testkit.stack import Stack, StackSettings, run_stack
from workflows.contract import (
    ActivityName,
    EmojiSetInput,
    ExportTarget,
    ReviewPolicy,
    StagePolicy,
    TemporalMode,
)

ACTIONS = ["wave", "laugh", "heart", "cry"]
GENERATOR_ACTIVITIES = frozenset(
    {
        ActivityName.GENERATE_CHARACTER,
        ActivityName.GENERATE_START_FRAME,
        ActivityName.GENERATE_CLIP,
        ActivityName.EDIT_FRAME,
    }
)
API_KEY = "sk-paid-rate-benchmark"
JITTER = 1.02
"""Slack for the worker's own latency between a dispatch and its submit (see :func:`rate_bound`)."""


@dataclass(frozen=True)
class Config:
    """The sets, the paid queue's limits and the stand-in's, per phase."""

    sets: int = 12
    rate: float = 2.0
    concurrency: int = PaidGenerationSettings.model_fields["paid_concurrency"].default
    actions: int = 2
    above: float = 1.5
    below: float = 0.5
    timeout_s: float = 900.0
    """How long one phase's sets may take before they are given up on."""

    def set_input(self, seed: int) -> EmojiSetInput:
        """One set: no person, the ``dashscope`` generator, small and short."""
        return EmojiSetInput(
            character_prompt="a round orange cat with a blue scarf",
            actions=ACTIONS[: self.actions],
            temporal=TemporalMode.NONE,  # the emoji's stabilising is not what this measures
            frames_per_emoji=2,
            neighbours=0,
            character_candidates=1,
            start_frame_candidates=1,
            clip_seconds=1.0,
            clip_fps=8,
            image_size=64,
            generator="dashscope",
            matting_pipeline="classical",
            review=ReviewPolicy(character=StagePolicy.AUTO, start_frames=StagePolicy.AUTO, final=StagePolicy.AUTO),
            export_targets=[ExportTarget.GENERIC],
            seed=seed,
        )

    def calls_per_set(self) -> int:
        """Generator calls a set makes: its character, then a start frame and a clip per action."""
        return 1 + 2 * self.actions


@dataclass(frozen=True)
class Submits:
    """What the stand-in's log says of one phase."""

    accepted: int
    throttled: int
    refused: int
    span_s: float
    """First to last accepted submit."""
    rate: float
    """Accepted submits per second over the span: (accepted - 1) / span."""
    max_1s: int
    """The most accepted submits in any 1 s window."""
    max_5s: int
    """The most accepted submits in any 5 s window."""
    by_model: dict[str, int]
    images: int
    """Images asked for (``parameters.n``) by accepted image submits."""
    video_seconds: int
    """Seconds asked for (``parameters.duration``) by accepted video submits."""


def window_max(times: Sequence[float], width_s: float) -> int:
    """The most of ``times`` (sorted) inside any window ``[t, t + width_s)``."""
    return max((bisect.bisect_left(times, t + width_s) - i for i, t in enumerate(times)), default=0)


def rate_bound(rate: float, span_s: float) -> float:
    """The most dispatches per second, (n - 1) / span, Temporal's limiter allows over a busy span of ``span_s``
    (:func:`window_bound`: R (span + 1) + 1 in the span), plus :data:`JITTER`. A phase held the limit when its rate is
    at most this."""
    return rate * (1.0 + 1.0 / span_s) * JITTER if span_s > 0 else math.inf


def window_bound(rate: float, width_s: float) -> int:
    """The most dispatches Temporal's limiter lets into any ``width_s`` window. It is a GCRA limiter with a burst of
    1 s (the matching service's ``defaultBurstDuration``): after a quiet spell it takes R + 1 tasks at once (its own
    test: "can consume 11 tokens immediately" at 10 a second), then one every 1 / R s."""
    return math.floor(rate * (width_s + 1.0)) + 1


def submits(log: Sequence[SubmitRecord]) -> Submits:
    """Count one phase from the stand-in's submit log."""
    accepted = [record for record in log if record.outcome == "accepted"]
    times = sorted(record.at for record in accepted)
    span_s = times[-1] - times[0] if len(times) > 1 else 0.0
    return Submits(
        accepted=len(accepted),
        throttled=sum(1 for record in log if record.outcome == "throttled"),
        refused=sum(1 for record in log if record.outcome == "refused"),
        span_s=span_s,
        rate=(len(times) - 1) / span_s if span_s > 0 else 0.0,
        max_1s=window_max(times, 1.0),
        max_5s=window_max(times, 5.0),
        by_model=dict(sorted(Counter(record.model for record in accepted).items())),
        images=sum(record.images for record in accepted),
        video_seconds=sum(record.seconds for record in accepted),
    )


@dataclass(frozen=True)
class Activities:
    """What the sets' histories say of their generator activities."""

    completed: int
    started: int
    """Attempts started (the last attempt of each activity: earlier ones leave no event)."""
    started_rate: float
    """Started per second over their busy span, by the server's clock: (started - 1) / span."""
    max_started_1s: int
    """The most generator activities Temporal started in any 1 s window (server time)."""
    max_started_5s: int
    retried: int
    """Generator activities whose last attempt was not their first."""
    failed: int
    """Generator activities that failed or timed out for good."""


async def generator_activities(client: Client, set_ids: Sequence[str]) -> Activities:
    """Read every run of every set for its generator activities."""
    started: list[float] = []
    completed = retried = failed = 0
    for set_id in set_ids:
        for history in await workflow_runs(client, set_id):
            types: dict[int, str] = {}
            for event in history.events:
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    types[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    attributes = event.activity_task_started_event_attributes
                    if types.get(attributes.scheduled_event_id) in GENERATOR_ACTIVITIES:
                        started.append(event.event_time.ToMicroseconds() / 1e6)
                        retried += attributes.attempt > 1
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    key = event.activity_task_completed_event_attributes.scheduled_event_id
                    completed += types.get(key) in GENERATOR_ACTIVITIES
                elif event.event_type in (
                    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
                ):
                    attributes_of = (
                        event.activity_task_failed_event_attributes
                        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                        else event.activity_task_timed_out_event_attributes
                    )
                    failed += types.get(attributes_of.scheduled_event_id) in GENERATOR_ACTIVITIES
    started.sort()
    span_s = started[-1] - started[0] if len(started) > 1 else 0.0
    return Activities(
        completed=completed,
        started=len(started),
        started_rate=(len(started) - 1) / span_s if span_s > 0 else 0.0,
        max_started_1s=window_max(started, 1.0),
        max_started_5s=window_max(started, 5.0),
        retried=retried,
        failed=failed,
    )


@dataclass(frozen=True)
class Phase:
    """One phase's figures."""

    name: str
    provider_rate: float
    submits: Submits
    activities: Activities
    sets_completed: int
    sets: int
    wall_s: float


def stack_settings(root: Path, config: Config) -> StackSettings:
    """The stack's default workers, the paid queue at the configured rate and concurrency, its store under ``root``."""
    return StackSettings(
        artifacts=ArtifactSettings(_env_file=None, data_dir=root / "data", artifact_root=(root / "artifacts").as_uri()),
        gpu=GpuWorkerSettings(_env_file=None),
        orchestration=OrchestrationSettings(_env_file=None),
        paid=PaidGenerationSettings(
            _env_file=None, paid_calls_per_second=config.rate, paid_concurrency=config.concurrency
        ),
    )


def dashscope_settings(fake: FakeDashScope) -> DashScopeSettings:
    """The ``POPCON_DASHSCOPE_*`` settings that point the generator at the stand-in."""
    return DashScopeSettings(
        _env_file=None,
        dashscope_api_key=SecretStr(API_KEY),
        dashscope_base_url=fake.base_url,
        dashscope_poll_interval_s=0.05,
        dashscope_poll_max_interval_s=0.2,
    )


async def run_sets(stack: Stack, config: Config) -> tuple[list[str], int]:
    """Start every set at once and wait for them; returns their ids and how many completed."""
    run = uuid.uuid4().hex[:6]
    ids = [f"paid-rate-{run}-{index}" for index in range(config.sets)]
    await asyncio.gather(*(stack.sets.start(config.set_input(seed), set_id=ids[seed]) for seed in range(config.sets)))
    async with asyncio.timeout(config.timeout_s):
        results = await asyncio.gather(*(stack.sets.result(set_id) for set_id in ids), return_exceptions=True)
    return ids, sum(1 for result in results if not isinstance(result, BaseException) and result.status == "completed")


async def measure_phase(name: str, config: Config, provider_rate: float) -> Phase:
    """One phase on a fresh throwaway dev server and a fresh stand-in taking ``provider_rate`` submits a second."""
    began = time.monotonic()
    env = await start_throwaway_server()
    try:
        with FakeDashScope(api_key=API_KEY, submits_per_second=provider_rate) as fake:
            settings = dashscope_settings(fake)
            generators = GeneratorRegistry(
                {DashScopeGenerator.name: lambda: DashScopeGenerator.from_settings(settings)}
            )
            with tempfile.TemporaryDirectory() as root:
                stacks = cast(
                    AsyncGenerator[Stack, None],
                    run_stack(env, stack_settings(Path(root), config), generators=generators),
                )
                async with contextlib.aclosing(stacks):
                    async for stack in stacks:
                        set_ids, completed = await run_sets(stack, config)
                        activities = await generator_activities(stack.client, set_ids)
            log = list(fake.submit_log)
    finally:
        await env.shutdown()
    return Phase(name, provider_rate, submits(log), activities, completed, config.sets, time.monotonic() - began)


def report(phase: Phase, rate: float) -> list[str]:
    """The phase's figures as printed lines."""
    s, a = phase.submits, phase.activities
    bound = rate_bound(rate, s.span_s)
    held = s.rate <= bound
    models = ", ".join(f"{model} {count}" for model, count in s.by_model.items())
    windows = f"Temporal's limiter allows {window_bound(rate, 1)} and {window_bound(rate, 5)}"
    return [
        f"{phase.name}: stand-in takes {phase.provider_rate:g} submits/s, the paid queue {rate:g} calls/s",
        f"  accepted submits (stand-in's log): {s.accepted} over {s.span_s:.1f} s = {s.rate:.2f}/s against the limit "
        f"{rate:g}/s ({'held' if held else 'NOT held'}: at most {bound:.2f}/s over this span); most in any 1 s: "
        f"{s.max_1s}, in any 5 s: {s.max_5s} ({s.max_5s / 5:.2f}/s); {windows}",
        f"  generator activities started (server's clock): {a.started} = {a.started_rate:.2f}/s; most in any 1 s: "
        f"{a.max_started_1s}, in any 5 s: {a.max_started_5s}",
        f"  throttled answers (429 Throttling.RateQuota): {s.throttled}; other refusals: {s.refused}",
        f"  accepted by model: {models}; images asked: {s.images}; video seconds asked: {s.video_seconds}",
        f"  generator activities: {a.completed} completed, accepted submits - completed = "
        f"{s.accepted - a.completed} (a task paid twice shows here); retried: {a.retried}; failed: {a.failed}",
        f"  sets completed: {phase.sets_completed} of {phase.sets}; phase wall time {phase.wall_s:.0f} s",
    ]


async def main(config: Config) -> None:
    print(
        f"{config.sets} sets at once, each {config.actions} actions x 2 frames, 64 px ({config.calls_per_set()} "
        f"generator calls a set, {config.sets * config.calls_per_set()} in all); paid queue: {config.rate:g} calls/s "
        f"deployment-wide, {config.concurrency} at once; {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    phases = [
        ("provider above the limit", config.above * config.rate),
        ("provider below the limit", config.below * config.rate),
    ]
    for name, provider_rate in phases:
        phase = await measure_phase(name, config, provider_rate)
        print("\n".join(report(phase, config.rate)), flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Config()
    parser.add_argument("--sets", type=at_least(1), default=defaults.sets, help="sets started at once")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="the paid queue's calls per second (R)")
    parser.add_argument(
        "--concurrency", type=at_least(1), default=defaults.concurrency, help="paid calls at once in the worker"
    )
    parser.add_argument("--actions", type=at_least(1), default=defaults.actions, help=f"the first N of {ACTIONS}")
    parser.add_argument("--above", type=float, default=defaults.above, help="the stand-in's limit, x R, phase 1")
    parser.add_argument("--below", type=float, default=defaults.below, help="the stand-in's limit, x R, phase 2")
    args = parser.parse_args()
    if args.actions > len(ACTIONS):
        parser.error(f"--actions: at most {len(ACTIONS)}")
    for name in ("rate", "above", "below"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name}: must be above 0")
    config = Config(
        sets=args.sets,
        rate=args.rate,
        concurrency=args.concurrency,
        actions=args.actions,
        above=args.above,
        below=args.below,
    )
    asyncio.run(main(config))


if __name__ == "__main__":
    cli()
