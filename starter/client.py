"""A typed async client for emoji sets: what a backend imports to start and steer them.

Example:
    client = await EmojiSetClient.connect()
    set_id = await client.start(EmojiSetInput(character_prompt="a round orange cat", poses=["wave", "laugh"]))
    state = await client.state(set_id)
    await client.pick(PickCandidateInput(emoji="wave", frame=3, candidate=1), set_id=set_id)
    await client.approve(set_id, reviewer="ana")
    result = await client.result(set_id)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar
from urllib.parse import quote

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from core.connection import connect
from core.settings import TemporalSettings
from workflows import search_attributes as sa
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    WORKFLOW_TYPE,
    ApproveInput,
    CancelInput,
    EmojiFramesRef,
    EmojiSetInput,
    EmojiSetResult,
    EmojiSetState,
    ExportSetInput,
    ExportSetResult,
    ExportTarget,
    FrameState,
    Phase,
    PickCandidateInput,
    RegenerateFrameInput,
    RegenerateFrameResult,
)
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow
from workflows.presets import PRESETS

T = TypeVar("T")


class EmojiSetError(Exception):
    """Base of the client's errors; the message is meant for people."""


class SetNotFound(EmojiSetError):
    """No set with that id exists in the namespace."""


class MessageRejected(EmojiSetError):
    """The workflow refused a message (unknown emoji / frame / candidate, set closed, ...); nothing changed."""


class SetClosed(MessageRejected):
    """The set has ended (completed, cancelled, expired): it takes no more messages."""


class ApprovalRefused(EmojiSetError):
    """Approval was refused because some frames have no usable candidate yet."""


@dataclass(frozen=True)
class SetSummary:
    """One set as listed from the visibility store (no workflow query needed)."""

    set_id: str
    status: str
    phase: str | None
    frames_done: int | None
    frames_total: int | None
    owner: str | None
    started_at: datetime | None


class EmojiSetClient:
    """Start, steer and read emoji sets. Thin and typed over a Temporal client."""

    def __init__(self, client: Client, *, ui_url: str = "http://localhost:8233") -> None:
        self.temporal = client
        self._ui_url = ui_url.rstrip("/")

    @classmethod
    async def connect(cls, settings: TemporalSettings | None = None) -> EmojiSetClient:
        settings = settings or TemporalSettings()
        return cls(await connect(settings), ui_url=settings.temporal_ui_url)

    def web_ui_url(self, set_id: str) -> str:
        """The set's page in the Temporal Web UI."""
        return f"{self._ui_url}/namespaces/{quote(self.temporal.namespace)}/workflows/{quote(set_id, safe='')}"

    async def start(self, request: EmojiSetInput, *, set_id: str | None = None) -> str:
        """Start a set and return its id. Starting again with the same ``set_id`` returns the running set."""
        set_id = set_id or new_set_id(request.character_prompt)
        await self.temporal.start_workflow(
            EmojiSetWorkflow.run,
            request,
            id=set_id,
            task_queue=ORCHESTRATION_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.PHASE, Phase.GENERATING.value),
                    SearchAttributePair(sa.FRAMES_DONE, 0),
                    SearchAttributePair(sa.FRAMES_TOTAL, len(request.poses) * request.frames_per_emoji),
                    SearchAttributePair(sa.OWNER, request.owner),
                ]
            ),
            static_summary=f"Emoji set: {request.character_prompt[:120]}",
            static_details=_static_details(request),
        )
        return set_id

    async def state(self, set_id: str) -> EmojiSetState:
        """The live state: phase, frames, candidates with references and scores, picks."""
        return await self._call(self._handle(set_id).query(EmojiSetWorkflow.get_state))

    async def pick(self, pick: PickCandidateInput, *, set_id: str) -> FrameState:
        """Use a candidate of a frame by hand."""
        handle = self._handle(set_id)
        return await self._update(handle.execute_update("pick_candidate", pick, result_type=FrameState))

    async def regenerate(
        self, request: RegenerateFrameInput, *, set_id: str, wait: bool = True
    ) -> RegenerateFrameResult | None:
        """Regenerate a frame (or a whole emoji) from a custom prompt.

        With ``wait`` the call returns once the new candidates are generated and matted; otherwise once the workflow
        has accepted the request (``None``), and :meth:`state` shows the progress.
        """
        handle = self._handle(set_id)
        if wait:
            return await self._update(
                handle.execute_update("regenerate_frame", request, result_type=RegenerateFrameResult)
            )
        await self._update(
            handle.start_update(EmojiSetWorkflow.regenerate_frame, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        )
        return None

    async def approve(self, set_id: str, *, reviewer: str = "") -> None:
        """Approve the set for assembly.

        Raises:
            ApprovalRefused: a frame has no usable candidate (the workflow would refuse it too).
        """
        state = await self.state(set_id)
        unusable = state.unusable_frames()
        if state.phase is Phase.AWAITING_REVIEW and unusable:
            raise ApprovalRefused(f"no usable candidate yet for {', '.join(unusable)}; regenerate them first")
        await self._call(self._handle(set_id).signal(EmojiSetWorkflow.approve, ApproveInput(reviewer=reviewer)))

    async def cancel(self, set_id: str, *, reason: str = "") -> None:
        """Stop the set; it ends as cancelled with nothing assembled."""
        await self._call(self._handle(set_id).signal(EmojiSetWorkflow.cancel, CancelInput(reason=reason)))

    async def result(self, set_id: str) -> EmojiSetResult:
        """Wait for the set to end and return its result (references to every exported file)."""
        return await self._call(self._handle(set_id).result())

    async def export(self, set_id: str, targets: list[ExportTarget]) -> ExportSetResult:
        """Export a completed set again for other targets, from its approved picks; nothing else is redone.

        Raises:
            EmojiSetError: The set has not completed (only approved picks are exported).
        """
        state = await self.state(set_id)
        if state.phase is not Phase.COMPLETED:
            raise EmojiSetError(f"{set_id} is {state.phase.value}: only a completed set's approved picks are exported")
        emojis = []
        for emoji in state.emojis:
            picks = [frame.picked() for frame in emoji.frames]
            frames = [pick.matte for pick in picks if pick is not None and pick.matte is not None]
            emojis.append(
                EmojiFramesRef(pose=emoji.pose, frames=frames, frame_duration_ms=PRESETS[emoji.pose].frame_duration_ms)
            )
        request = ExportSetInput(set_id=set_id, targets=targets, emojis=emojis)
        return await self._call(
            self.temporal.execute_workflow(
                ExportSetWorkflow.run,
                request,
                id=f"{set_id}-export-{uuid.uuid4().hex[:8]}",
                task_queue=ORCHESTRATION_TASK_QUEUE,
                static_summary=f"Export {set_id} for {', '.join(targets)}",
            )
        )

    async def describe_status(self, set_id: str) -> WorkflowExecutionStatus | None:
        description = await self._call(self._handle(set_id).describe())
        return description.status

    async def list_sets(
        self, *, phase: Phase | None = None, owner: str | None = None, limit: int = 50
    ) -> list[SetSummary]:
        """Sets newest first, filtered by phase and / or owner through the search attributes."""
        query = f'WorkflowType = "{WORKFLOW_TYPE}"'
        if phase is not None:
            query += f' AND {sa.PHASE.name} = "{phase.value}"'
        if owner is not None:
            query += f' AND {sa.OWNER.name} = "{_quote(owner)}"'
        summaries = []
        async for execution in self.temporal.list_workflows(query, limit=limit):
            attributes = execution.typed_search_attributes
            summaries.append(
                SetSummary(
                    set_id=execution.id,
                    status=execution.status.name.lower() if execution.status else "unknown",
                    phase=attributes.get(sa.PHASE),
                    frames_done=attributes.get(sa.FRAMES_DONE),
                    frames_total=attributes.get(sa.FRAMES_TOTAL),
                    owner=attributes.get(sa.OWNER),
                    started_at=execution.start_time,
                )
            )
        return summaries

    def _handle(self, set_id: str) -> WorkflowHandle[EmojiSetWorkflow, EmojiSetResult]:
        # Updates are called by name: the SDK's typing of an update declared with options (a description) does not
        # match execute_update's signature.
        return self.temporal.get_workflow_handle_for(EmojiSetWorkflow.run, set_id)

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND and "already completed" in err.message:
                raise SetClosed("the set has ended; it takes no more picks, regenerations or decisions") from err
            if err.status is RPCStatusCode.NOT_FOUND:
                raise SetNotFound(f"no emoji set found: {err.message}") from err
            raise

    async def _update(self, call: Awaitable[T]) -> T:
        try:
            return await self._call(call)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, FailureError) else str(cause)
            raise MessageRejected(message) from err


def new_set_id(prompt: str) -> str:
    """A readable unique set id, e.g. ``emoji-set-round-orange-cat-1f2e3d4c``."""
    slug = "-".join(re.findall(r"[a-z0-9]+", prompt.lower()))[:32].strip("-") or "set"
    return f"emoji-set-{slug}-{uuid.uuid4().hex[:8]}"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _static_details(request: EmojiSetInput) -> str:
    return "\n".join(
        [
            f"**Character:** {request.character_prompt}",
            f"**Style:** {request.style}",
            f"**Poses:** {', '.join(request.poses)}",
            f"**Frames per emoji:** {request.frames_per_emoji} · **candidates per frame:** "
            f"{request.candidates_per_frame}",
            f"**Generator:** {request.generator} · **matting:** {request.matting_pipeline}",
            f"**Review:** {request.review.deadline} then {request.review.on_deadline.value.replace('_', '-')}",
            f"**Owner:** {request.owner or '-'}",
        ]
    )
