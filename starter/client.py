"""A typed async client for emoji sets: what a backend imports to start and steer them.

Example:
    client = await EmojiSetClient.connect()
    set_id = await client.start(EmojiSetInput(character_prompt="a round orange cat", actions=["wave", "laugh"]))
    # or: EmojiSetInput(character_image=client.upload(Path("cat.png").read_bytes()), ...)
    await client.approve_start_frames(set_id)  # once the start frames await review
    state = await client.state(set_id)
    await client.pick(PickCandidateInput(emoji="wave", frame=3, candidate=1), set_id=set_id)
    await client.approve(set_id, reviewer="ana")
    result = await client.result(set_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import re
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import quote

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.common import (
    Priority,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from activities.uploads import UploadError, check_upload
from core.artifacts import ArtifactStore, open_store
from core.connection import connect, sending_set_fields
from core.settings import ArtifactSettings, FairnessSettings, TemporalSettings, WebhookSettings
from core.webhooks import destination_problem
from workflows import keys
from workflows import search_attributes as sa
from workflows.contract import (
    ORCHESTRATION_TASK_QUEUE,
    PRODUCTION_PRIORITY,
    WORKFLOW_TYPE,
    ActionState,
    ApproveCharacterInput,
    ApproveInput,
    ApproveStartFramesInput,
    ArtifactRef,
    CancelInput,
    DropActionInput,
    DroppedAction,
    EmojiFramesRef,
    EmojiSetInput,
    EmojiSetResult,
    EmojiSetState,
    ExportSetInput,
    ExportSetResult,
    ExportTarget,
    FrameState,
    ImageCandidate,
    Phase,
    PickCandidateInput,
    PickCharacterInput,
    PickStartFrameInput,
    PickTakeInput,
    RefineFrameInput,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    TakeState,
    UndoRefineInput,
    fairness_key,
)
from workflows.emoji_set import EmojiSetWorkflow
from workflows.export_set import ExportSetWorkflow

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
DEPLOYMENT_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")
"""Temporal's own search attribute: the ``deployment:build`` a workflow is pinned to."""
UPDATE_ATTEMPTS = 5
"""How often an update the server dropped unseen (:func:`_workflow_not_ready`) is sent."""


class EmojiSetError(Exception):
    """Base of the client's errors; the message is meant for people."""


class SetNotFound(EmojiSetError):
    """No set with that id exists in the namespace."""


class MessageRejected(EmojiSetError):
    """The workflow refused a message (unknown emoji / frame / candidate, set closed, ...); nothing changed."""


class SetClosed(MessageRejected):
    """The set has ended (completed, cancelled, expired): it takes no more messages."""


class UploadRefused(EmojiSetError):
    """The uploaded character picture cannot be used; nothing was stored or started."""


class StartRefused(EmojiSetError):
    """The set's webhook or budget cannot be used (the message says why); nothing was started."""


@dataclass(frozen=True)
class SetSummary:
    """One set as listed from the visibility store (no workflow query needed)."""

    set_id: str
    status: str
    phase: str | None
    frames_done: int | None
    frames_total: int | None
    owner: str | None
    awaiting: list[str]
    started_at: datetime | None

    @property
    def outcome(self) -> str:
        """How the set stands: Temporal's status, except that a set that ended cancelled or expired says so (its
        workflow completes either way)."""
        if self.status == "completed" and self.phase in (Phase.CANCELLED.value, Phase.EXPIRED.value):
            return self.phase
        return self.status


class EmojiSetClient:
    """Start, steer and read emoji sets. Thin and typed over a Temporal client."""

    def __init__(
        self,
        client: Client,
        *,
        store: ArtifactStore | None = None,
        ui_url: str = "http://localhost:8233",
        webhooks: WebhookSettings | None = None,
        fairness_weights: Mapping[str, float] | None = None,
    ) -> None:
        self.temporal = client
        self._store = store
        self._ui_url = ui_url.rstrip("/")
        self._webhooks = webhooks
        self._weights = dict(fairness_weights or {})

    @classmethod
    async def connect(
        cls, settings: TemporalSettings | None = None, artifacts: ArtifactSettings | None = None
    ) -> EmojiSetClient:
        """Connect to Temporal, and open the artifact store uploads go to (the workers' store); read the
        deployment's webhook settings, which a set's webhook is checked against before it starts."""
        settings = settings or TemporalSettings()
        store = open_store(artifacts or ArtifactSettings())
        return cls(
            await connect(settings),
            store=store,
            ui_url=settings.temporal_ui_url,
            webhooks=WebhookSettings(),
            fairness_weights=FairnessSettings().fairness_weights,
        )

    @functools.cached_property
    def _requests(self) -> Client:
        """The connection for starts and messages: they carry only the fields they set, so a set on an older build
        takes them (:data:`core.connection.set_fields_data_converter`)."""
        return sending_set_fields(self.temporal)

    def upload(self, data: bytes) -> ArtifactRef:
        """Check an uploaded character picture and store it; pass the reference as ``character_image``.

        Raises:
            UploadRefused: Not a picture, truncated, empty, too large or a decompression bomb (the message says which).
        """
        if self._store is None:
            raise EmojiSetError("this client has no artifact store: construct it with store= to upload pictures")
        try:
            info = check_upload(data)
        except UploadError as err:
            raise UploadRefused(f"the character picture cannot be used: {err}") from err
        key = keys.upload_key(hashlib.sha256(data).hexdigest())
        return self._store.put(key, data, info.media_type, width=info.width, height=info.height)

    def web_ui_url(self, set_id: str) -> str:
        """The set's page in the Temporal Web UI."""
        return f"{self._ui_url}/namespaces/{quote(self.temporal.namespace)}/workflows/{quote(set_id, safe='')}"

    async def start(self, request: EmojiSetInput, *, set_id: str | None = None) -> str:
        """Start a set and return its id. Starting again with the same ``set_id`` starts nothing: a set id names one
        set, running or ended (its events and files are keyed by it).

        The set's owner is its fairness key on the task queues: one owner's batch of sets does not hold back
        another owner's set (see docs/architecture.md, "Fair queues per owner").

        Raises:
            StartRefused: Its webhook cannot be used (:meth:`check_request`); nothing was started.
        """
        set_id = set_id or new_set_id(request.character_prompt or "uploaded character")
        await self.check_request(request)
        with contextlib.suppress(WorkflowAlreadyStartedError):  # the set has ended: its id is not used again
            await self._requests.start_workflow(
                EmojiSetWorkflow.run, request, **_start_options(request, set_id, self._weights)
            )
        return set_id

    async def start_or_attach(self, request: EmojiSetInput, *, set_id: str) -> EmojiSetState:
        """Start the set ``set_id`` unless it exists, in one call (update-with-start), and return its state: a
        backend that retries after a lost answer attaches to the set its first call started (ended or not).

        Raises:
            StartRefused: As for :meth:`start`.
        """
        await self.check_request(request)
        start = WithStartWorkflowOperation(
            EmojiSetWorkflow.run, request, **_start_options(request, set_id, self._weights)
        )
        try:
            await self._update(
                self._requests.execute_update_with_start_workflow(
                    EmojiSetWorkflow.attach, start_workflow_operation=start
                )
            )
        except WorkflowAlreadyStartedError:
            # The set has ended: its state is still read. The start operation holds the same error: taken here, it
            # is not logged as a future's exception never retrieved.
            with contextlib.suppress(WorkflowAlreadyStartedError):
                await start.workflow_handle()
        except MessageRejected as refused:
            if "expected but not found" not in str(refused):
                raise  # else a set of a build without the update: attached all the same
        return await self.state(set_id)

    async def check_request(self, request: EmojiSetInput) -> None:
        """Check the set's webhook against the deployment as this client knows it (its ``POPCON_WEBHOOK_*``): an
        address that resolves and is not private unless allowed, a secret that is configured. The workers check
        again at start, with a budget in money against their prices, before any paid call (their settings have the
        last word); a budget in paid calls too small for the set is refused by the request itself.

        Raises:
            StartRefused: The message says what to change.
        """
        webhooks = self._webhooks
        if request.webhook is not None and webhooks is not None:
            if webhooks.webhook_secrets and request.webhook.secret not in webhooks.webhook_secrets:
                raise StartRefused(
                    f"the webhook secret {request.webhook.secret!r} is not configured: the deployment has "
                    f"{sorted(webhooks.webhook_secrets)} (POPCON_WEBHOOK_SECRETS)"
                )
            problem = await asyncio.to_thread(
                destination_problem, request.webhook.url, allow_private=webhooks.webhook_allow_private
            )
            if problem:
                raise StartRefused(problem)

    async def state(self, set_id: str) -> EmojiSetState:
        """The live state: phase, frames, candidates with references and scores, picks.

        Raises:
            SetNotFound: No workflow has that id, or the one that has it is not an emoji set (an export, say).
        """
        handle = self._handle(set_id)
        try:
            return await self._call(handle.query(EmojiSetWorkflow.get_state))
        except WorkflowQueryFailedError as err:
            # Another type of workflow has no such query. Its type is looked up only then: a set's state costs one
            # round trip.
            kind = (await self._call(handle.describe())).workflow_type
            if kind != WORKFLOW_TYPE:
                message = f"no emoji set found: {set_id} is a workflow of type {kind}, not an emoji set"
                raise SetNotFound(message) from err
            raise

    async def pick_character(self, set_id: str, candidate: int) -> ImageCandidate:
        """Use another character candidate (review policy ``character=human``)."""
        return await self._update_call(set_id, EmojiSetWorkflow.pick_character, PickCharacterInput(candidate=candidate))

    async def approve_character(self, set_id: str, *, reviewer: str = "") -> None:
        """Go on with the picked character: start frames are made from it."""
        await self._update_call(set_id, EmojiSetWorkflow.approve_character, ApproveCharacterInput(reviewer=reviewer))

    async def pick_start_frame(self, set_id: str, action: str, candidate: int) -> ActionState:
        """Choose an action's start frame among its candidates (then approve it)."""
        request = PickStartFrameInput(action=action, candidate=candidate)
        return await self._update_call(set_id, EmojiSetWorkflow.pick_start_frame, request)

    async def approve_start_frames(
        self, set_id: str, actions: list[str] | None = None, *, reviewer: str = ""
    ) -> list[str]:
        """Approve start frames (``None``: every one awaiting review); each approved action starts animating."""
        request = ApproveStartFramesInput(actions=actions or [], reviewer=reviewer)
        return await self._update_call(set_id, EmojiSetWorkflow.approve_start_frames, request)

    async def regenerate_start_frame(self, request: RegenerateStartFrameInput, *, set_id: str) -> ActionState:
        """New start frame candidates from a custom pose prompt; returns once they are made."""
        return await self._update_call(set_id, _awaited(EmojiSetWorkflow.regenerate_start_frame), request)

    async def pick(self, pick: PickCandidateInput, *, set_id: str) -> FrameState:
        """Use a candidate of a frame slot by hand."""
        return await self._update_call(set_id, EmojiSetWorkflow.pick_candidate, pick)

    async def pick_take(self, set_id: str, emoji: str, take: int) -> ActionState:
        """Use one take for a whole emoji."""
        return await self._update_call(set_id, EmojiSetWorkflow.pick_take, PickTakeInput(emoji=emoji, take=take))

    async def regenerate_action(self, request: RegenerateActionInput, *, set_id: str) -> TakeState:
        """A new take from a custom motion prompt; returns the accepted take at once (follow it in :meth:`state`)."""
        return await self._update_call(set_id, EmojiSetWorkflow.regenerate_action, request)

    async def regenerate_frame(
        self, request: RegenerateFrameInput, *, set_id: str, wait: bool = True
    ) -> FrameState | None:
        """New candidates for a frame slot: an image edit with a custom prompt.

        With ``wait`` the call returns once the new candidates are made and matted; otherwise once the workflow has
        accepted the request (``None``), and :meth:`state` shows the progress.
        """
        if wait:
            return await self._update_call(set_id, _awaited(EmojiSetWorkflow.regenerate_frame), request)
        handle = self._handle(set_id)
        await self._update(
            handle.start_update(
                _awaited(EmojiSetWorkflow.regenerate_frame), request, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )
        )
        return None

    async def refine_frame(self, request: RefineFrameInput, *, set_id: str) -> FrameState:
        """Correct a matted candidate's cut-out with clicks (erase or restore the clicked region; with
        ``following``, through the emoji's later frames too); returns the slot once refined, the refined candidate
        its pick.

        Raises:
            MessageRejected: unknown emoji, frame or candidate, a candidate not matted yet, points outside the frame,
                a refinement of it under way, the refinement failed, or the set is being approved (the message says
                which).
            SetClosed: the set has ended.
        """
        return await self._update_call(set_id, _awaited(EmojiSetWorkflow.refine_frame), request)

    async def undo_refine(self, request: UndoRefineInput, *, set_id: str) -> FrameState:
        """Bring back a candidate's cut-out from before its last refinement; returns the slot.

        Raises:
            MessageRejected: nothing to undo, unknown emoji, frame or candidate, or the set is being approved.
            SetClosed: the set has ended.
        """
        return await self._update_call(set_id, EmojiSetWorkflow.undo_refine, request)

    async def approve(self, set_id: str, *, reviewer: str = "") -> None:
        """Approve the set for assembly; it is assembled once the regenerations under way are done.

        Raises:
            MessageRejected: a frame has no usable candidate, an emoji is not animated yet, or the set is being
                approved or cancelled already (the message says which).
            SetClosed: the set has ended.
        """
        await self._update_call(set_id, EmojiSetWorkflow.approve, ApproveInput(reviewer=reviewer))

    async def drop_action(self, request: DropActionInput, *, set_id: str) -> DroppedAction:
        """Take an emoji out of the set: everything it has in flight stops (a regeneration or refinement of it then
        fails), its files stay; returns the record kept in :attr:`EmojiSetState.dropped`.

        Raises:
            MessageRejected: the set's last emoji, an unknown one, the set approved or being cancelled, or a platform
                target the smaller set would newly fail (LINE takes 8 to 40; ``force`` drops it anyway).
            SetClosed: the set has ended.
        """
        return await self._update_call(set_id, _awaited(EmojiSetWorkflow.drop_action), request)

    async def cancel(self, set_id: str, *, reason: str = "", reviewer: str = "") -> None:
        """Stop the set; it ends as cancelled with nothing assembled, signed by ``reviewer`` (a set on a build from
        before cancels were signed, 0.4.0 and older, is cancelled unsigned).

        Raises:
            MessageRejected: too late: the set is being assembled (approved), or is being cancelled already.
            SetClosed: the set has ended.
        """
        signed = CancelInput(reason=reason, reviewer=reviewer) if reviewer else CancelInput(reason=reason)
        try:
            await self._update_call(set_id, EmojiSetWorkflow.cancel, signed)
        except MessageRejected as refused:
            # A valid cancel the set's build refuses as input: it knows no reviewer (the only field added since).
            if not reviewer or not _refused_field(refused, "reviewer"):
                raise
            await self._update_call(set_id, EmojiSetWorkflow.cancel, CancelInput(reason=reason))

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
        for action in state.actions:
            assembled = [frame.assembled() for frame in action.frames]
            frames = [matte for matte in assembled if matte is not None]
            emojis.append(
                EmojiFramesRef(pose=action.name, frames=frames, frame_duration_ms=action.action.frame_duration_ms)
            )
        request = ExportSetInput(set_id=set_id, targets=targets, emojis=emojis)
        return await self._call(
            self._requests.execute_workflow(
                ExportSetWorkflow.run,
                request,
                id=f"{set_id}-export-{uuid.uuid4().hex[:8]}",
                task_queue=ORCHESTRATION_TASK_QUEUE,
                static_summary=f"Export {set_id} for {', '.join(targets)}",
            )
        )

    async def check_for_new_build(self, set_id: str) -> None:
        """Wake a set: if it waits for a person with nothing in flight and its deployment has a new current build, it
        moves to it now (continue-as-new) instead of at its next check (``UPGRADE_CHECK_INTERVAL``)."""
        await self._call(self._handle(set_id).signal(EmojiSetWorkflow.check_for_new_build))

    async def running_sets_by_build(self, deployment: str) -> dict[str, list[str]]:
        """The running sets of a Worker Deployment, by the build each is pinned to (from the visibility store)."""
        query = (
            f'WorkflowType = "{WORKFLOW_TYPE}" AND ExecutionStatus = "Running" '
            f'AND TemporalWorkerDeployment = "{_quote(deployment)}"'
        )
        found: dict[str, list[str]] = {}
        async for execution in self.temporal.list_workflows(query):
            version = execution.typed_search_attributes.get(DEPLOYMENT_VERSION)
            if version:
                found.setdefault(version.split(":", 1)[-1], []).append(execution.id)
        return found

    async def describe_status(self, set_id: str) -> WorkflowExecutionStatus | None:
        description = await self._call(self._handle(set_id).describe())
        return description.status

    async def list_sets(
        self, *, phase: Phase | None = None, owner: str | None = None, awaiting: str | None = None, limit: int = 50
    ) -> list[SetSummary]:
        """Sets newest first, filtered by phase, owner and / or what they wait for (e.g. ``start_frame_review``)
        through the search attributes."""
        query = f'WorkflowType = "{WORKFLOW_TYPE}"'
        if phase is not None:
            query += f' AND {sa.PHASE.name} = "{phase.value}"'
        if awaiting is not None:  # only a running set waits (one that ended on an older build may still say it did)
            query += f' AND {sa.AWAITING.name} = "{_quote(awaiting)}" AND ExecutionStatus = "Running"'
        if owner is not None:
            query += f' AND {sa.OWNER.name} = "{_quote(owner)}"'
        summaries = []
        async for execution in self.temporal.list_workflows(query, limit=limit):
            attributes = execution.typed_search_attributes
            running = execution.status is WorkflowExecutionStatus.RUNNING
            summaries.append(
                SetSummary(
                    set_id=execution.id,
                    status=execution.status.name.lower() if execution.status else "unknown",
                    phase=attributes.get(sa.PHASE),
                    frames_done=attributes.get(sa.FRAMES_DONE),
                    frames_total=attributes.get(sa.FRAMES_TOTAL),
                    owner=attributes.get(sa.OWNER),
                    awaiting=list(attributes.get(sa.AWAITING) or []) if running else [],
                    started_at=execution.start_time,
                )
            )
        return summaries

    def _handle(self, set_id: str) -> WorkflowHandle[EmojiSetWorkflow, EmojiSetResult]:
        return self._requests.get_workflow_handle_for(EmojiSetWorkflow.run, set_id)

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND and "already completed" in err.message:
                raise SetClosed("the set has ended; it takes no more picks, regenerations or decisions") from err
            if err.status is RPCStatusCode.NOT_FOUND:
                raise SetNotFound(f"no emoji set found: {err.message}") from err
            raise

    async def _update_call(
        self, set_id: str, update: UpdateMethodMultiParam[[EmojiSetWorkflow, R], T], request: R
    ) -> T:
        """Send an update through the workflow's own method (its name and result type, checked against the request),
        sending it again while the server drops it unseen."""
        handle = self._handle(set_id)
        try:
            attempt = 1
            while True:
                try:
                    return await self._update(handle.execute_update(update, request))
                except RPCError as err:
                    if attempt == UPDATE_ATTEMPTS or not _workflow_not_ready(err):
                        raise
                await asyncio.sleep(0.1 * 2**attempt)
                attempt += 1
        except SetClosed as closed:
            description = await self._call(handle.describe())
            status = description.status.name.lower() if description.status else "closed"
            phase = description.typed_search_attributes.get(sa.PHASE) or status
            raise SetClosed(
                f"the set has ended ({phase}): it takes no more picks, regenerations or decisions"
            ) from closed.__cause__
        except MessageRejected as refused:
            if "expected but not found" not in str(refused):
                raise
            name = getattr(update, "__name__", "this message")
            raise MessageRejected(
                f"this set runs on an older build that has no {name}; it moves to the current build once it waits "
                "for a person with nothing in flight (a message wakes it): try again in a few seconds"
            ) from refused

    async def _update(self, call: Awaitable[T]) -> T:
        try:
            return await self._call(call)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, FailureError) else str(cause)
            raise MessageRejected(message) from err


def _awaited(update: UpdateMethodMultiParam[P, Awaitable[T]]) -> UpdateMethodMultiParam[P, T]:
    """An ``async`` update as a client sees it: its result, not a coroutine.

    The SDK types an update declared with options (``@workflow.update(description=...)``) with the method's own return
    type, which for an ``async`` handler is the coroutine; a client receives what the coroutine returns. The method
    itself is passed on unchanged: its name and its declared result type are what the SDK reads.
    """
    return cast("UpdateMethodMultiParam[P, T]", update)


def _refused_field(refused: MessageRejected, field: str) -> bool:
    """Whether the set refused a message for carrying ``field``, which its build does not know: its message model
    forbids it (a build that fails on a pydantic error, as the set's workflow does), or its payload does not decode."""
    said = str(refused)
    return "Failed decoding arguments" in said or (field in said and "Extra inputs are not permitted" in said)


def _workflow_not_ready(err: RPCError) -> bool:
    """The server dropped the update with the workflow task that carried it (a task that also ended the set while
    new events came in fails as ``UnhandledCommand``): it was never accepted, so sending it again is safe."""
    return err.status is RPCStatusCode.FAILED_PRECONDITION and any(
        detail.type_url.endswith("WorkflowNotReadyFailure") for detail in err.grpc_status.details
    )


def new_set_id(prompt: str) -> str:
    """A readable unique set id, e.g. ``emoji-set-round-orange-cat-1f2e3d4c``."""
    slug = "-".join(re.findall(r"[a-z0-9]+", prompt.lower()))[:32].strip("-") or "set"
    return f"emoji-set-{slug}-{uuid.uuid4().hex[:8]}"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _start_options(request: EmojiSetInput, set_id: str, weights: Mapping[str, float]) -> dict[str, Any]:
    """How a set's workflow is started: by start and by start-or-attach alike."""
    return {
        "id": set_id,
        "task_queue": ORCHESTRATION_TASK_QUEUE,
        "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
        # A set id names one set for good: its events' idempotency keys and its files are keyed by it.
        "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
        "search_attributes": TypedSearchAttributes(
            [
                SearchAttributePair(sa.PHASE, Phase.CHARACTER.value),
                SearchAttributePair(sa.FRAMES_DONE, 0),
                SearchAttributePair(sa.FRAMES_TOTAL, len(request.action_names()) * request.frames_per_emoji),
                SearchAttributePair(sa.OWNER, request.owner),
                SearchAttributePair(sa.AWAITING, []),
            ]
        ),
        "static_summary": f"Emoji set: {_title(request)[:120]}",
        "static_details": _static_details(request),
        # Inherited by every activity of the set (and kept across continue-as-new): each owner gets a fair share of
        # both queues, whatever another owner queued.
        "priority": Priority(
            fairness_key=fairness_key(request.owner, request.tier),
            fairness_weight=weights.get(request.tier, 1.0) if request.tier else None,
            priority_key=PRODUCTION_PRIORITY,
        ),
    }


def _title(request: EmojiSetInput) -> str:
    return request.character_prompt or "uploaded character"


def _static_details(request: EmojiSetInput) -> str:
    review = request.review
    character = (
        request.character_prompt or f"uploaded picture ({request.character_image and request.character_image.uri})"
    )
    return "\n".join(
        [
            f"**Character:** {character}",
            f"**Style:** {request.style}",
            f"**Actions:** {', '.join(request.action_names())}",
            f"**Per emoji:** {request.frames_per_emoji} frames from {request.takes_per_action} take(s) of "
            f"{request.clip_seconds:g} s at {request.clip_fps} fps, ±{request.neighbours} neighbours per frame",
            f"**Generator:** {request.generator} · **matting:** {request.matting_pipeline}",
            f"**Review:** character {review.character.value}, start frames {review.start_frames.value}, "
            f"final {review.final.value}; {review.deadline} per wait, then {review.on_deadline.value}",
            f"**Owner:** {request.owner or '-'}",
        ]
    )
