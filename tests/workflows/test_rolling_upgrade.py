"""A rolling upgrade on the real dev server, as docs/deploy.md runs one.

Build A serves six sets, held at the character review, at the start frame review, while animating, while matting,
at the final review and while assembling. Build B (``testkit.upgrade``: one more activity before assembly, a command
order A's histories cannot replay) starts and becomes current. Every set of A completes with no nondeterminism error:
the three waiting for a person continue as new onto B, the three with work in flight finish on A, pinned. New sets run
on B, and A's worker stops once the server reports A drained. Every set did the same work as a set of the same input
that saw no upgrade, and its artifacts are sha256-identical to that set's.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from activities.settings import OrchestrationSettings
from activities.worker import OrchestrationWorkers, build_worker
from core.settings import DeploymentSettings
from core.versioning import Role, describe_deployment, set_current, worker_deployment, worker_version
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.worker import build_gpu_worker
from starter.client import EmojiSetClient
from testkit.chaos import compare, set_dir
from testkit.held_store import HeldStore
from testkit.histories import workflow_runs
from testkit.servers import start_throwaway_server
from testkit.stack import standin_paid_queue, wait_for_phase
from testkit.upgrade import EmojiSetWorkflowB
from workflows.contract import EmojiSetInput, ExportTarget, Phase, ReviewPolicy, StagePolicy
from workflows.export_set import ExportSetWorkflow

FAST_DRAINAGE = (
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
    "--dynamic-config-value",
    'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
)
GPU = DeploymentSettings(_env_file=None, build_id="gpu-1")
BUILD_A = DeploymentSettings(_env_file=None, build_id="build-a")
BUILD_B = DeploymentSettings(_env_file=None, build_id="build-b")
SMALL: dict[str, Any] = {
    "character_prompt": "a round orange cat with a blue scarf",
    "actions": ["wave"],
    "frames_per_emoji": 3,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
    "character_candidates": 1,
    "start_frame_candidates": 1,
    "export_targets": [ExportTarget.GENERIC],
}
AUTO_START = ReviewPolicy(start_frames=StagePolicy.AUTO)


@dataclass(frozen=True)
class Case:
    """A set at one point of its life when build B becomes current."""

    name: str
    review: ReviewPolicy
    held: str | None
    """The writes held until after the upgrade (a key pattern under the set's prefix), keeping work in flight."""
    finishes_on: str


CASES = [
    Case(
        "character-review",
        ReviewPolicy(character=StagePolicy.HUMAN, start_frames=StagePolicy.AUTO, final=StagePolicy.AUTO),
        None,
        "build-b",
    ),
    Case("start-frame-review", ReviewPolicy(final=StagePolicy.AUTO), None, "build-b"),
    Case("animating", ReviewPolicy.automatic(), "*/take-*/clip.mp4", "build-a"),
    Case("matting", ReviewPolicy.automatic(), "*/frame-000/candidate-00.matte.png", "build-a"),
    Case("final-review", AUTO_START, None, "build-b"),
    Case("assembling", AUTO_START, "export/contact-sheet.png", "build-a"),
]


Check = Callable[[], Awaitable[bool]]


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server that reports a build drained a second after its last pinned set closes (3 minutes by default)."""
    env = await start_throwaway_server(*FAST_DRAINAGE)
    yield env
    await env.shutdown()


async def _until(check: Check, what: str, timeout: float = 90) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g} s: {what}") from None


async def _build_of(client: Client, set_id: str) -> str:
    """The build the set's latest run is pinned to."""
    info = (await client.get_workflow_handle(set_id).describe()).raw_description.workflow_execution_info
    return info.versioning_info.deployment_version.build_id


async def _nondeterminism_errors(client: Client, set_id: str) -> int:
    cause = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
    return sum(
        1
        for run in await workflow_runs(client, set_id)
        for event in run.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and event.workflow_task_failed_event_attributes.cause == cause
    )


async def _scheduled(client: Client, set_id: str) -> Counter[str]:
    """Activities scheduled over all the set's runs, by type: a set that lost finished work would do it again."""
    return Counter(
        event.activity_task_scheduled_event_attributes.activity_type.name
        for run in await workflow_runs(client, set_id)
        for event in run.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )


async def _start(sets: EmojiSetClient, set_id: str, case: Case) -> None:
    await sets.start(EmojiSetInput(**SMALL, review=case.review), set_id=set_id)


async def _decide(sets: EmojiSetClient, set_id: str, case: Case) -> None:
    """What a person does for the set (the same for a set that saw no upgrade)."""
    if case.review.character is StagePolicy.HUMAN:
        await wait_for_phase(sets, set_id, Phase.AWAITING_CHARACTER_REVIEW)
        await sets.approve_character(set_id, reviewer="ana")
    if case.review.start_frames is StagePolicy.HUMAN:
        await wait_for_phase(sets, set_id, Phase.AWAITING_START_FRAME_REVIEW)
        await sets.approve_start_frames(set_id, reviewer="ana")
    if case.review.final is StagePolicy.HUMAN:
        await wait_for_phase(sets, set_id, Phase.AWAITING_REVIEW)
        await sets.approve(set_id, reviewer="ana")


async def test_a_rolling_upgrade_finishes_every_set_and_drains_the_old_build(
    server: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = server.client
    store = HeldStore(tmp_path / "artifacts")
    sets = EmojiSetClient(client, store=store)
    orchestration = OrchestrationSettings(_env_file=None)
    gpu, matting = build_gpu_worker(
        client, GpuWorkerSettings(_env_file=None, gpu_concurrency=8), store, deployment=worker_deployment(GPU, Role.GPU)
    )
    worker_a, production_a = build_worker(
        client,
        orchestration,
        store,
        deployment=worker_deployment(BUILD_A, Role.ORCHESTRATION),
        paid=standin_paid_queue(),
    )
    worker_b, production_b = build_worker(
        client,
        orchestration,
        store,
        deployment=worker_deployment(BUILD_B, Role.ORCHESTRATION),
        workflows=[EmojiSetWorkflowB, ExportSetWorkflow],
        paid=standin_paid_queue(),
    )
    runs: dict[Worker | OrchestrationWorkers, asyncio.Task[None]] = {}
    try:
        for worker in (gpu, worker_a):
            runs[worker] = asyncio.create_task(worker.run())
        await set_current(client, worker_version(GPU, Role.GPU))
        await set_current(client, worker_version(BUILD_A, Role.ORCHESTRATION))

        # Build A takes every set to its point, holding the writes that keep work in flight.
        phases = {}
        for case in CASES:
            set_id = f"upgrade-{case.name}"
            if case.held:
                store.hold(f"sets/{set_id}/{case.held}")
            await _start(sets, set_id, case)
        for case in CASES:
            set_id = f"upgrade-{case.name}"
            if case.name == "assembling":
                await wait_for_phase(sets, set_id, Phase.AWAITING_REVIEW)
                await sets.approve(set_id, reviewer="ana")
            if case.held:
                await _until(_held(store, f"sets/{set_id}/{case.held}"), f"{case.name} held")
            else:
                waiting = (Phase.AWAITING_CHARACTER_REVIEW, Phase.AWAITING_START_FRAME_REVIEW, Phase.AWAITING_REVIEW)
                await _until(_in_phase(sets, set_id, waiting), f"{case.name} waiting for a person")
            phases[case.name] = (await sets.state(set_id)).phase
        assert phases == {
            "character-review": Phase.AWAITING_CHARACTER_REVIEW,
            "start-frame-review": Phase.AWAITING_START_FRAME_REVIEW,
            "animating": Phase.ANIMATING,
            "matting": Phase.MATTING,
            "final-review": Phase.AWAITING_REVIEW,
            "assembling": Phase.ASSEMBLING,
        }

        # Build B starts and becomes current; the sets waiting for a person are woken and move to it.
        runs[worker_b] = asyncio.create_task(worker_b.run())
        await set_current(client, worker_version(BUILD_B, Role.ORCHESTRATION))
        for case in CASES:
            if case.finishes_on == "build-b":
                set_id = f"upgrade-{case.name}"
                await sets.check_for_new_build(set_id)
                await _until(_on(client, set_id, "build-b"), f"{case.name} on build B")
        for case in CASES:
            if case.held:
                store.release(f"sets/upgrade-{case.name}/{case.held}")
            if case.name != "assembling":  # approved before the upgrade
                await _decide(sets, f"upgrade-{case.name}", case)
        results = {case.name: await sets.result(f"upgrade-{case.name}") for case in CASES}

        # Build A drains; its worker stops; new sets (the same inputs) run on build B alone.
        await _until(_drained(client, "build-a"), "build A drained")
        await worker_a.shutdown()
        for case in CASES:
            await _start(sets, f"fresh-{case.name}", case)
        for case in CASES:
            await _decide(sets, f"fresh-{case.name}", case)
            assert (await sets.result(f"fresh-{case.name}")).status == "completed"

        rows = []
        for case in CASES:
            upgraded, fresh = f"upgrade-{case.name}", f"fresh-{case.name}"
            done, again = await _scheduled(client, upgraded), await _scheduled(client, fresh)
            row = (
                case.name,
                phases[case.name].value,
                await _build_of(client, upgraded),
                results[case.name].status,
                await _nondeterminism_errors(client, upgraded),
                len(await workflow_runs(client, upgraded)),
                sum(done.values()) - done["check_exports"],
                sum(again.values()) - again["check_exports"],
                done["check_exports"],
                compare(_artifacts(store.root, fresh), _artifacts(store.root, upgraded)).describe(),
                await _build_of(client, fresh),
            )
            rows.append(row)
        print(
            "\nset | phase at the upgrade | finished on | status | nondeterminism errors | runs | activities | "
            "activities of a set that saw no upgrade | check_exports (B adds one) | artifacts vs that set | "
            "the same input started after"
        )
        for row in rows:
            print(" | ".join(str(cell) for cell in row))
        for case, (_, _, build, status, errors, _, work, fresh_work, checks, artifacts, fresh_build) in zip(
            CASES, rows, strict=True
        ):
            assert (build, status, errors, work, checks, artifacts, fresh_build) == (
                case.finishes_on,
                "completed",
                0,
                fresh_work,
                2 if case.finishes_on == "build-b" else 1,
                "identical",
                "build-b",
            ), case.name

        # The change is one build A's histories cannot replay: without pinning, the assembling set would have failed.
        [history] = await workflow_runs(client, "upgrade-assembling")
        replay = await Replayer(workflows=[EmojiSetWorkflowB], data_converter=pydantic_data_converter).replay_workflow(
            history, raise_on_replay_failure=False
        )
        assert "Nondeterminism" in str(replay.replay_failure)
    finally:
        for worker, task in runs.items():
            if not task.done():
                await worker.shutdown()
            await task
        await production_a.aclose()
        await production_b.aclose()
        matting.close()


def _artifacts(root: Path, set_id: str) -> dict[str, str]:
    """Every file of the set: relative path -> sha256, with the set id in a file's bytes (a matte's recorded result
    names its key) read as ``<set>``, so that two sets of the same input compare equal."""
    base = set_dir(root, set_id)
    return {
        path.relative_to(base).as_posix(): hashlib.sha256(
            path.read_bytes().replace(set_id.encode(), b"<set>")
        ).hexdigest()
        for path in sorted(base.rglob("*"))
        if path.is_file()
    }


def _held(store: HeldStore, pattern: str) -> Check:
    async def check() -> bool:
        return store.waiting[pattern] > 0

    return check


def _in_phase(sets: EmojiSetClient, set_id: str, phases: tuple[Phase, ...]) -> Check:
    async def check() -> bool:
        return (await sets.state(set_id)).phase in phases

    return check


def _on(client: Client, set_id: str, build: str) -> Check:
    async def check() -> bool:
        return await _build_of(client, set_id) == build

    return check


def _drained(client: Client, build: str) -> Check:
    async def check() -> bool:
        found = await describe_deployment(client, BUILD_A.deployment_name)
        version = found.version(build) if found else None
        return version is not None and version.drainage == "drained"

    return check
