"""Released histories: record a corpus of every path a set can take, and read a recorded corpus back.

A release's corpus lives in ``tests/workflows/histories/<release>/``: one gzipped JSON history per workflow run
(``<scenario>.json.gz``, or ``<scenario>.run-<n>.json.gz`` for each run of a set that continued as new),
``manifest.json`` (the release, the commit it was recorded from, each scenario's summary and files) and
``contract.json`` (the JSON schema of every payload position at that release: see :func:`payload_positions`).
``make test`` replays every history against the current code and decodes every payload with today's models
(``tests/workflows/test_released_histories.py``).

Record a new corpus at release time, from the commit being released, and commit it unchanged::

    .venv/bin/python -m testkit.histories record --release 0.2.0

A corpus, once committed, is never rewritten: a change that cannot replay it is patched (``workflow.patched``) or
shipped as a new pinned build (see docs/deploy.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gzip
import json
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHistory, WorkflowUpdateStage
from temporalio.testing import WorkflowEnvironment

from activities.assemble import AssemblyActivities
from activities.notify import EventDelivery
from activities.platform_exports import PlatformExportActivities
from activities.production import ProductionActivities
from activities.worker import build_worker
from core.settings import PROJECT_DIR, ArtifactSettings, DeploymentSettings
from core.versioning import Role, set_current, worker_deployment, worker_version
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.matting import decode_rgba
from gpu_activity_worker.settings import GpuWorkerSettings
from testkit.generator_standins import RefusesClip, RefusesStartFrame, SlowRegenerations, standin_generators
from testkit.images import sticker_png
from testkit.servers import (
    UNVERSIONED,
    start_eager_continue_as_new_server,
    start_throwaway_server,
    start_time_skipping_server,
)
from testkit.stack import WEBHOOK_SECRET, Stack, StackSettings, run_stack, wait_for_phase
from testkit.webhook_receiver import WebhookReceiver
from workflows.contract import (
    EXPORT_WORKFLOW_TYPE,
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    ActionStage,
    Budget,
    DropActionInput,
    EmojiSetInput,
    EmojiSetState,
    ExportTarget,
    Phase,
    PickCandidateInput,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    ReviewPolicy,
    StagePolicy,
    TakeStatus,
    TemporalMode,
    UndoRefineInput,
    Webhook,
)
from workflows.deliver_event import DeliverEventWorkflow
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow

CORPUS_DIR = PROJECT_DIR / "tests" / "workflows" / "histories"
WORKFLOWS = (EmojiSetWorkflow, ExportSetWorkflow, DeliverEventWorkflow)
RETIRED_FROM_REPLAY: dict[str, str] = {}
"""Releases today's code no longer replays, each with why: a change that could not be patched and shipped as a new
pinned build instead (docs/deploy.md). Their corpus stays, unchanged; their payloads and schemas are still checked."""
ACTIVITY_CLASSES = (
    ProductionActivities,
    AssemblyActivities,
    PlatformExportActivities,
    EventDelivery,
    MattingActivities,
)
"""Every class whose methods are activities (the RunPod dispatcher registers the GPU names with the same types)."""

SMALL: dict[str, Any] = {
    "character_prompt": "a round orange cat with a blue scarf",
    "actions": ["wave", "heart"],
    "frames_per_emoji": 3,
    "neighbours": 1,
    "clip_seconds": 1.0,
    "clip_fps": 12,
    "image_size": 96,
    "character_candidates": 2,
    "start_frame_candidates": 2,
    "export_targets": [ExportTarget.GENERIC],
}
"""A set small enough to record in seconds, with every kind of candidate (neighbours, takes, edits)."""
AUTO_START = ReviewPolicy(start_frames=StagePolicy.AUTO)


# --- Payload positions -------------------------------------------------------------------------------------------


def payload_positions() -> dict[str, Any]:
    """Every place a payload of the contract appears in a history, with the type it is decoded as.

    Keys are wire names: ``workflow EmojiSet input 0``, ``workflow EmojiSet result``, ``update pick_candidate input``,
    ``update pick_candidate result``, ``query get_state result``, ``activity matte_slot input``, ``activity
    matte_slot result``. Renaming a model class changes nothing here; renaming a field, an activity or an update does.
    """
    positions: dict[str, Any] = {}
    for cls in WORKFLOWS:
        positions.update(_workflow_positions(workflow._Definition.must_from_class(cls)))
    for activities in ACTIVITY_CLASSES:
        for attribute in sorted(vars(activities)):
            defn = activity._Definition.from_callable(getattr(activities, attribute))
            if defn is not None and defn.name is not None:
                positions[f"activity {defn.name} input"] = _only_arg(defn.arg_types)
                positions[f"activity {defn.name} result"] = defn.ret_type
    return positions


def _workflow_positions(defn: workflow._Definition) -> dict[str, Any]:
    positions: dict[str, Any] = {}
    for index, arg_type in enumerate(defn.arg_types or []):
        positions[f"workflow {defn.name} input {index}"] = arg_type
    positions[f"workflow {defn.name} result"] = defn.ret_type
    for name, update in sorted(defn.updates.items()):
        positions[f"update {name} input"] = _only_arg(update.arg_types)
        positions[f"update {name} result"] = update.ret_type
    for name, query in sorted(defn.queries.items()):
        positions[f"query {name} result"] = query.ret_type
    for name, signal in sorted(defn.signals.items()):
        for index, arg_type in enumerate(signal.arg_types or []):
            positions[f"signal {name} input {index}"] = arg_type
    return positions


def _only_arg(arg_types: list[type] | None) -> Any:
    """The type of a handler's one argument (every message and activity of the contract takes one model)."""
    return arg_types[0] if arg_types else None


def contract_schema() -> dict[str, Any]:
    """The JSON schema of every payload position (``positions``), the models' schemas once each (``$defs``): what
    ``contract.json`` of a release holds."""
    positions: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for position, hint in payload_positions().items():
        schema = TypeAdapter(type(None) if hint is None else hint).json_schema(ref_template="#/$defs/{model}")
        for name, definition in schema.pop("$defs", {}).items():
            if definitions.setdefault(name, definition) != definition:
                raise ValueError(f"two models named {name} in the contract")
        positions[position] = schema
    return {"positions": positions, "$defs": definitions}


# --- Reading a corpus --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedHistory:
    """One recorded workflow run of a release's corpus."""

    release: str
    scenario: str
    path: Path
    history: WorkflowHistory


def releases() -> list[str]:
    """Every release with a recorded corpus, oldest first."""
    found = [path.parent.name for path in CORPUS_DIR.glob("*/manifest.json")]
    return sorted(found, key=lambda name: tuple(int(part) for part in name.split(".")))


def manifest(release: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CORPUS_DIR / release / "manifest.json").read_text())
    return loaded


def recorded_histories(release: str) -> Iterator[RecordedHistory]:
    """The recorded runs of a release, in manifest order."""
    for scenario in manifest(release)["scenarios"]:
        for file in scenario["files"]:
            path = CORPUS_DIR / release / file
            loaded = json.loads(gzip.decompress(path.read_bytes()))
            history = WorkflowHistory.from_json(loaded["workflow_id"], loaded["history"])
            yield RecordedHistory(release=release, scenario=scenario["name"], path=path, history=history)


def released_schema(release: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CORPUS_DIR / release / "contract.json").read_text())
    return loaded


# --- Scenarios ---------------------------------------------------------------------------------------------------

Drive = Callable[[Stack, str], Awaitable[list[str]]]
"""Takes a set through a scenario on a running stack; returns the workflow ids whose runs are recorded."""


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    server: str
    """``dev`` (the dev server), ``time-skipping`` (deadlines pass at once) or ``eager-can`` (a dev server that
    suggests continue-as-new after 40 events)."""
    drive: Drive


async def _start(stack: Stack, set_id: str, **fields: Any) -> None:
    await stack.sets.start(EmojiSetInput(**{**SMALL, **fields}), set_id=set_id)


async def _until(stack: Stack, set_id: str, done: Callable[[EmojiSetState], bool], timeout: float = 120) -> None:
    async with asyncio.timeout(timeout):
        while not done(await stack.sets.state(set_id)):
            await asyncio.sleep(0.1)


async def _finish(stack: Stack, set_id: str) -> list[str]:
    await stack.sets.result(set_id)
    return [set_id]


async def _approve(stack: Stack, set_id: str) -> list[str]:
    await stack.sets.approve(set_id, reviewer="ana")
    return await _finish(stack, set_id)


async def start_frame_review(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=ReviewPolicy())
    await _until(stack, set_id, lambda s: all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in s.actions))
    await stack.sets.pick_start_frame(set_id, "wave", 1)
    await stack.sets.regenerate_start_frame(
        RegenerateStartFrameInput(action="heart", prompt="hugging a big red heart"), set_id=set_id
    )
    await stack.sets.approve_start_frames(set_id, ["wave"], reviewer="ana")
    await stack.sets.approve_start_frames(set_id, reviewer="ana")
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.pick(PickCandidateInput(emoji="heart", frame=0, candidate=1), set_id=set_id)
    return await _approve(stack, set_id)


async def final_review(stack: Stack, set_id: str) -> list[str]:
    await _start(
        stack,
        set_id,
        review=AUTO_START,
        takes_per_action=2,
        export_targets=[ExportTarget.GENERIC, ExportTarget.LINE_EMOJI, ExportTarget.SLACK],
    )
    state = await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.pick(PickCandidateInput(emoji="wave", frame=1, candidate=2), set_id=set_id)
    await stack.sets.pick_take(set_id, "heart", 1)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=2, prompt="waving shyly"), set_id=set_id)
    await stack.sets.regenerate_action(
        RegenerateActionInput(emoji="heart", motion_prompt="a slow pulse"), set_id=set_id
    )
    await _until(
        stack,
        set_id,
        lambda s: all(t.status in (TakeStatus.READY, TakeStatus.FAILED) for a in s.actions for t in a.takes),
    )
    state = await stack.sets.state(set_id)
    frame = state.actions[0].frames[0]
    picked = frame.picked()
    assert picked is not None and picked.matte is not None
    alpha = decode_rgba(stack.store.get(picked.matte), picked.matte.uri)[..., 3]
    y, x = np.unravel_index(int(np.argmax(alpha)), alpha.shape)
    point = RefinePoint(x=int(x), y=int(y))
    await stack.sets.refine_frame(
        RefineFrameInput(
            emoji="wave", frame=0, candidate=picked.index, points=[point], mode=RefineMode.ERASE, following=True
        ),
        set_id=set_id,
    )
    await stack.sets.undo_refine(
        UndoRefineInput(emoji="wave", frame=0, candidate=picked.index, following=True), set_id=set_id
    )
    await stack.sets.refine_frame(
        RefineFrameInput(emoji="wave", frame=0, candidate=picked.index, points=[point], mode=RefineMode.RESTORE),
        set_id=set_id,
    )
    await _until(stack, set_id, lambda s: not s.unusable())
    ids = await _approve(stack, set_id)
    return ids + await _export_again(stack, set_id)


async def _export_again(stack: Stack, set_id: str) -> list[str]:
    """Export the completed set again (the ExportSet workflow); returns that workflow's id."""
    await stack.sets.export(set_id, [ExportTarget.DISCORD, ExportTarget.SLACK])
    query = f'WorkflowType = "{EXPORT_WORKFLOW_TYPE}" AND WorkflowId STARTS_WITH "{set_id}-export-"'
    async with asyncio.timeout(30):
        while True:
            found = [execution.id async for execution in stack.client.list_workflows(query)]
            if found:
                return found
            await asyncio.sleep(0.2)


async def notifications(stack: Stack, set_id: str) -> list[str]:
    """A set with a budget and a webhook, started and then attached to (update-with-start); its events, one retried
    once (a 503), each delivered by its own DeliverSetEvent workflow, recorded too."""
    with WebhookReceiver(WEBHOOK_SECRET) as receiver:
        receiver.fail(1, status=503, retry_after=1)
        request = EmojiSetInput(
            **{**SMALL, "review": ReviewPolicy(), "budget": Budget(paid_calls=6), "webhook": Webhook(url=receiver.url)}
        )
        await stack.sets.start_or_attach(request, set_id=set_id)
        await stack.sets.start_or_attach(request, set_id=set_id)
        await _until(
            stack, set_id, lambda s: all(a.stage is ActionStage.AWAITING_START_FRAME_REVIEW for a in s.actions)
        )
        await stack.sets.approve_start_frames(set_id, reviewer="ana")
        await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
        await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=1, prompt="a wink"), set_id=set_id)
        ids = await _approve(stack, set_id)
        events = [f"{set_id}/event-{sequence}" for sequence in (1, 2, 3)]
        for event in events:
            await stack.client.get_workflow_handle(event).result()
    return ids + events


async def character_review(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=ReviewPolicy(character=StagePolicy.HUMAN, start_frames=StagePolicy.AUTO))
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_CHARACTER_REVIEW)
    await stack.sets.pick_character(set_id, 1)
    await stack.sets.approve_character(set_id, reviewer="ana")
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    return await _approve(stack, set_id)


async def upload(stack: Stack, set_id: str) -> list[str]:
    picture = stack.sets.upload(sticker_png(128))
    await _start(stack, set_id, character_prompt=None, character_image=picture, review=ReviewPolicy.automatic())
    return await _finish(stack, set_id)


async def automatic(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=ReviewPolicy.automatic(), actions=["nod"])
    return await _finish(stack, set_id)


async def failed_take_recovered(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=AUTO_START, generator=RefusesClip.name)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.regenerate_action(
        RegenerateActionInput(emoji="heart", motion_prompt="the heart beats twice"), set_id=set_id
    )
    await _until(stack, set_id, lambda s: not s.unusable())
    return await _approve(stack, set_id)


async def failed_start_frame_recovered(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=ReviewPolicy(), generator=RefusesStartFrame.name)
    waiting = [ActionStage.AWAITING_START_FRAME_REVIEW, ActionStage.WAITING_FOR_PROMPT]
    await _until(stack, set_id, lambda s: [a.stage for a in s.actions] == waiting)
    await stack.sets.regenerate_start_frame(
        RegenerateStartFrameInput(action="heart", prompt="holding a heart-shaped balloon"), set_id=set_id
    )
    await stack.sets.approve_start_frames(set_id, reviewer="ana")
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    return await _approve(stack, set_id)


async def stabilised(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=AUTO_START, actions=["wave"], temporal=TemporalMode.STABILISE)
    await _until(stack, set_id, lambda s: s.phase is Phase.AWAITING_REVIEW and s.actions[0].stabilised_for is not None)
    await stack.sets.pick(PickCandidateInput(emoji="wave", frame=1, candidate=2), set_id=set_id)
    await _until(stack, set_id, lambda s: s.actions[0].stabilised_for is not None)
    return await _approve(stack, set_id)


async def drop_action(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=AUTO_START, actions=["wave", "heart", "nod"], generator=SlowRegenerations.name)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    await stack.sets.regenerate_action(RegenerateActionInput(emoji="heart", motion_prompt="slowly"), set_id=set_id)
    edit = await stack.client.get_workflow_handle(set_id).start_update(
        "regenerate_frame",
        RegenerateFrameInput(emoji="heart", frame=0, prompt="a bigger heart"),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    await stack.sets.drop_action(DropActionInput(action="heart", reviewer="ana", reason="off-brand"), set_id=set_id)
    await _failed(edit.result())
    await stack.sets.drop_action(DropActionInput(action="nod", force=True), set_id=set_id)
    return await _approve(stack, set_id)


def _cancel_at(phase: Phase, **fields: Any) -> Drive:
    async def drive(stack: Stack, set_id: str) -> list[str]:
        await _start(stack, set_id, **fields)
        await wait_for_phase(stack.sets, set_id, phase, timeout=120)
        await stack.sets.cancel(set_id, reason=f"cancelled at {phase.value}")
        return await _finish(stack, set_id)

    return drive


LONG_PRODUCTION: dict[str, Any] = {
    "actions": ["wave", "laugh", "cry"],
    "frames_per_emoji": 24,
    "neighbours": 2,
    "clip_seconds": 4.0,
    "image_size": 256,
    "review": AUTO_START,
}
"""Production long enough that a poll catches the set animating and then matting."""


async def upgrade_while_waiting(stack: Stack, set_id: str) -> list[str]:
    """A set waiting for its final review moves to a new current build (the same code under another build id):
    the first run ends by continuing as new onto it, the second finishes there."""
    await _start(stack, set_id, review=AUTO_START)
    await wait_for_phase(stack.sets, set_id, Phase.AWAITING_REVIEW)
    other = DeploymentSettings(_env_file=None, build_id="recorded-next-build")
    worker, production = build_worker(
        stack.client,
        stack.settings.orchestration,
        stack.store,
        generators=standin_generators(),
        deployment=worker_deployment(other, Role.ORCHESTRATION),
        paid=stack.settings.paid,
    )
    async with worker:
        await set_current(stack.client, worker_version(other, Role.ORCHESTRATION))
        await stack.sets.check_for_new_build(set_id)
        await _until(stack, set_id, lambda s: s.runs == 2)
        await stack.sets.pick(PickCandidateInput(emoji="wave", frame=0, candidate=1), set_id=set_id)
        ids = await _approve(stack, set_id)
        await set_current(stack.client, worker_version(stack.deployment, Role.ORCHESTRATION))
    await production.aclose()
    return ids


async def invalid_input(stack: Stack, set_id: str) -> list[str]:
    """A raw start with an input the contract refuses (as the Temporal CLI could send): the set fails at once."""
    handle = await stack.client.start_workflow(
        WORKFLOW_TYPE,
        {"character_prompt": "a cat", "actions": ["moonwalk"]},
        id=set_id,
        task_queue=ORCHESTRATION_TASK_QUEUE,
        result_type=dict,
    )
    await _failed(handle.result())
    return [set_id]


async def unknown_pipeline(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, matting_pipeline="no-such-engine")
    await _failed(stack.sets.result(set_id))
    return [set_id]


async def _failed(result: Awaitable[object]) -> None:
    try:
        await result
    except Exception:
        return
    raise AssertionError("the set was expected to fail")


async def continue_as_new(stack: Stack, set_id: str) -> list[str]:
    await _start(stack, set_id, review=AUTO_START, actions=["wave"])
    await _until(stack, set_id, lambda s: s.phase is Phase.AWAITING_REVIEW and s.runs >= 2)
    for frame in range(3):
        await stack.sets.pick(PickCandidateInput(emoji="wave", frame=frame, candidate=1), set_id=set_id)
    await stack.sets.regenerate_frame(RegenerateFrameInput(emoji="wave", frame=2, prompt="waving twice"), set_id=set_id)
    return await _approve(stack, set_id)


def _deadline(review: ReviewPolicy, **fields: Any) -> Drive:
    """Let every wait for a person run out: the time-skipping server skips past each deadline."""

    async def drive(stack: Stack, set_id: str) -> list[str]:
        await _start(stack, set_id, review=review, **fields)
        waits = (Phase.AWAITING_START_FRAME_REVIEW, Phase.AWAITING_REVIEW)
        while (state := await wait_for_phase(stack.sets, set_id, *waits, *ENDS)).phase in waits:
            await stack.env.sleep(review.deadline + datetime.timedelta(minutes=1))
            await _until(stack, set_id, _left(state.phase))
        return await _finish(stack, set_id)

    return drive


ENDS = (Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED)


def _left(phase: Phase) -> Callable[[EmojiSetState], bool]:
    return lambda state: state.phase is not phase


HOURS = datetime.timedelta(hours=1)
SCENARIOS = [
    Scenario(
        "start-frame-review",
        "start frames reviewed: pick, regenerate with a custom pose prompt, approve one "
        "action then the rest; a pick by hand; approved",
        "dev",
        start_frame_review,
    ),
    Scenario(
        "final-review",
        "two takes; pick_candidate, pick_take, regenerate_frame, regenerate_action, refine_frame "
        "(erase, following) and undo_refine, refine_frame (restore); approved; generic, line-emoji (refused: too "
        "few emoji) and slack; then ExportSet for discord and slack",
        "dev",
        final_review,
    ),
    Scenario(
        "character-review", "character review: pick_character, approve_character; approved", "dev", character_review
    ),
    Scenario("upload", "an uploaded character (prepare_upload); fully automatic", "dev", upload),
    Scenario(
        "notifications",
        "start-or-attach twice (the attach update), a budget, a webhook: three events each delivered by a "
        "DeliverSetEvent workflow (the first retried after a 503); a frame edit; approved",
        "dev",
        notifications,
    ),
    Scenario("automatic", "a fully automatic set from a prompt", "dev", automatic),
    Scenario(
        "failed-take-recovered",
        "every take of heart refused: waits for a custom motion prompt, regenerate_action recovers it; approved",
        "dev",
        failed_take_recovered,
    ),
    Scenario(
        "failed-start-frame-recovered",
        "heart's start frame refused: waits for a custom pose prompt, regenerate_start_frame recovers it; approved",
        "dev",
        failed_start_frame_recovered,
    ),
    Scenario(
        "stabilised",
        "temporal stabilise: stabilise_emoji after matting and again after a pick by hand; approved",
        "dev",
        stabilised,
    ),
    Scenario(
        "drop-action",
        "at the final review, heart's new take and frame edit in flight: drop_action stops both (the edit fails as "
        "dropped), nod dropped with force; approved with wave alone",
        "dev",
        drop_action,
    ),
    Scenario(
        "cancel-character-review",
        "cancelled while the character awaits review",
        "dev",
        _cancel_at(Phase.AWAITING_CHARACTER_REVIEW, review=ReviewPolicy(character=StagePolicy.HUMAN)),
    ),
    Scenario(
        "cancel-start-frame-review",
        "cancelled while start frames await review",
        "dev",
        _cancel_at(Phase.AWAITING_START_FRAME_REVIEW, review=ReviewPolicy()),
    ),
    Scenario(
        "cancel-animating", "cancelled while clips are made", "dev", _cancel_at(Phase.ANIMATING, **LONG_PRODUCTION)
    ),
    Scenario(
        "cancel-matting", "cancelled while frames are matted", "dev", _cancel_at(Phase.MATTING, **LONG_PRODUCTION)
    ),
    Scenario(
        "cancel-final-review",
        "cancelled at the final review",
        "dev",
        _cancel_at(Phase.AWAITING_REVIEW, review=AUTO_START),
    ),
    Scenario("invalid-input", "a raw start the contract refuses: failed at once", "dev", invalid_input),
    Scenario(
        "unknown-pipeline",
        "a matting pipeline the GPU worker does not know: failed at the check",
        "dev",
        unknown_pipeline,
    ),
    Scenario(
        "upgrade-while-waiting",
        "a new build made current while the set waits for its final review: woken by check_for_new_build, it "
        "continues as new onto that build, a pick there; approved",
        "dev",
        upgrade_while_waiting,
    ),
    Scenario(
        "continue-as-new",
        "the final review continues as new (the server suggests it after 40 events); picks "
        "and a frame edit across runs; approved",
        "eager-can",
        continue_as_new,
    ),
    Scenario(
        "deadline-auto-approve",
        "start frames and then the final review auto-approved by their deadlines",
        "time-skipping",
        _deadline(ReviewPolicy(deadline=2 * HOURS)),
    ),
    Scenario(
        "deadline-expire",
        "the final review expires at its deadline",
        "time-skipping",
        _deadline(ReviewPolicy(start_frames=StagePolicy.AUTO, deadline=3 * HOURS, on_deadline="expire")),
    ),
    Scenario(
        "deadline-unusable",
        "the deadline cannot auto-approve a set with an action waiting for a custom prompt: expired",
        "time-skipping",
        _deadline(ReviewPolicy(start_frames=StagePolicy.AUTO, deadline=HOURS), generator=RefusesClip.name),
    ),
]


# --- Recording ---------------------------------------------------------------------------------------------------


async def _servers(kind: str) -> WorkflowEnvironment:
    if kind == "time-skipping":
        return await start_time_skipping_server()
    if kind == "eager-can":
        return await start_eager_continue_as_new_server()
    return await start_throwaway_server()


async def _stack(kind: str, data: Path) -> AsyncIterator[tuple[WorkflowEnvironment, Stack]]:
    env = await _servers(kind)
    settings = StackSettings(
        artifacts=ArtifactSettings(_env_file=None, data_dir=data, artifact_root=(data / "artifacts").as_uri()),
        gpu=GpuWorkerSettings(_env_file=None, gpu_concurrency=4),
        deployment=UNVERSIONED if kind == "eager-can" else None,
    )
    try:
        async for stack in run_stack(env, settings, generators=standin_generators()):
            yield env, stack
    finally:
        await env.shutdown()


async def workflow_runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a workflow, first to last (following continue-as-new back from the latest run)."""
    runs = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs[::-1]
        run_id = started.continued_execution_run_id


async def record(out: Path, only: list[str] | None = None) -> dict[str, Any]:
    """Run every scenario (or those named in ``only``) on fresh servers and write the corpus to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if only is None or s.name in only]
    written: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="popcon-histories-") as scratch:
        for kind in ("dev", "eager-can", "time-skipping"):
            group = [s for s in chosen if s.server == kind]
            if not group:
                continue
            async for _, stack in _stack(kind, Path(scratch) / kind):
                for scenario in group:
                    files = []
                    ids = await scenario.drive(stack, f"history-{scenario.name}")
                    for workflow_id in ids:
                        runs = await workflow_runs(stack.client, workflow_id)
                        for number, run in enumerate(runs, start=1):
                            # Another workflow of the set: an export ("<set>-export-..."), an event ("<set>/event-n").
                            kind = workflow_id.rpartition("/")[2] if "/" in workflow_id else "export"
                            stem = scenario.name if workflow_id == ids[0] else f"{scenario.name}.{kind}"
                            name = f"{stem}.json.gz" if len(runs) == 1 else f"{stem}.run-{number}.json.gz"
                            document = {"workflow_id": workflow_id, "history": json.loads(run.to_json())}
                            _write_gzip(out / name, json.dumps(document, separators=(",", ":")) + "\n")
                            files.append(name)
                    written.append(
                        {"name": scenario.name, "summary": scenario.summary, "server": scenario.server, "files": files}
                    )
                    print(f"{scenario.name}: {', '.join(files)}", flush=True)
    return {"scenarios": written}


def _write_gzip(path: Path, text: str) -> None:
    """Gzip with no name and no time in the header: the same history gives the same bytes."""
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed:
        compressed.write(text.encode())


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "workflows"], cwd=PROJECT_DIR, capture_output=True, text=True
    )
    return done.stdout.strip() + (" (workflows/ modified)" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.histories", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="record a release's corpus into tests/workflows/histories/")
    recording.add_argument("--release", required=True, help="the release's version, e.g. 0.2.0")
    recording.add_argument("--only", nargs="*", help="only these scenarios (a trial: use with --out)")
    recording.add_argument("--out", type=Path, help="write here instead of tests/workflows/histories/<release>")
    args = parser.parse_args()
    out = args.out or CORPUS_DIR / args.release
    if (out / "manifest.json").exists():
        parser.error(f"{out} holds a recorded corpus already: a released corpus is never rewritten")
    recorded = asyncio.run(record(out, args.only))
    document = {
        "release": args.release,
        "commit": _commit(),
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **recorded,
    }
    (out / "manifest.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "contract.json").write_text(json.dumps(contract_schema(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
