"""The EmojiSet workflow: character, start frames, clips, frames, matting, review, assembly.

A set is one animated emoji per action. The character comes from a prompt (generated candidates, auto-picked) or from
an upload (cleaned). Per action, start frames show the character in the action's pose; a person approves, picks or
regenerates them (or the ``auto`` policy goes on with the first). Each approved action is animated by
``takes_per_action`` image-to-video clips; each clip is decoded and ``frames_per_emoji`` frames spread over a loop that
closes smoothly, every slot keeping the chosen clip frame, its neighbours and the same slot of the other takes as its
candidates. Each slot's candidates are matted together by one activity on the GPU queue, as soon as its clip is
extracted (actions are pipelined: one action mattes while another still animates). The auto-pick takes the best
cut-outs that also read as one smooth animation (:mod:`workflows.picking`). People then pick candidates and takes,
regenerate actions and frames with custom prompts, approve or cancel; deadlines end forgotten waits. Approved sets are
assembled and exported.

Deterministic and light: no I/O, no image libraries; activities are called by name.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows import announcements, calls, keys, picking, progress
    from workflows import search_attributes as sa
    from workflows.action_work import ActionWork
    from workflows.contract import (
        DELIVER_EVENT_WORKFLOW_TYPE,
        MAX_CANDIDATES_PER_FRAME_TOTAL,
        MAX_CANDIDATES_PER_SET,
        MAX_MATTE_VERSIONS,
        MAX_TAKES_PER_ACTION_TOTAL,
        UPGRADE_CHECK_INTERVAL,
        WORKFLOW_TYPE,
        ActionStage,
        ActionState,
        ApproveCharacterInput,
        ApproveInput,
        ApproveStartFramesInput,
        ArtifactRef,
        AssembleEmojiInput,
        CallCause,
        CancelInput,
        Candidate,
        CandidateStatus,
        CharacterRef,
        CheckExportsInput,
        CheckGeneratorInput,
        ClipOutput,
        ContactSheetInput,
        DeadlinePolicy,
        DeliverEventInput,
        DescribeDeploymentInput,
        DescribePipelineInput,
        DropActionInput,
        DroppedAction,
        EditFrameInput,
        EmojiFramesRef,
        EmojiSetInput,
        EmojiSetResult,
        EmojiSetState,
        EventType,
        ExportTarget,
        ExtractFramesInput,
        ExtractFramesOutput,
        FailureType,
        FrameState,
        FrameStatus,
        GenerateCharacterInput,
        GenerateClipInput,
        GeneratedImages,
        GenerateStartFrameInput,
        GeneratorRole,
        ImageCandidate,
        MatteSlotInput,
        MatteVersion,
        Phase,
        PickCandidateInput,
        PickCharacterInput,
        PickSource,
        PickStartFrameInput,
        PickTakeInput,
        PrepareUploadInput,
        RefineFrameInput,
        RefineMatteInput,
        RefineTarget,
        RegenerateActionInput,
        RegenerateFrameInput,
        RegenerateStartFrameInput,
        SetEvent,
        SetFailure,
        StabiliseEmojiInput,
        StagePolicy,
        TakeState,
        TakeStatus,
        TemporalMode,
        UndoRefineInput,
        Webhook,
    )
    from workflows.exports import export_packages
    from workflows.spending import Call, Spending

MATTE = "matte.png"
LEDGER_PATCH = "cost-ledger"
"""Sets started on a build with it ask the deployment for its terms at start (``describe_deployment``: prices, default
budget and webhook) and send events to their webhook; older histories replay as they were (no terms, no events)."""
PROGRESS_STEPS = 20
"""How many times the EmojiSetFramesDone search attribute is updated while the frames get done."""

END_EVENTS = {"completed": EventType.COMPLETED, "cancelled": EventType.CANCELLED, "expired": EventType.EXPIRED}
CLOSED_PHASES = (Phase.ASSEMBLING, Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED)
PRODUCTION_PHASES = (Phase.START_FRAMES, Phase.ANIMATING, Phase.MATTING, Phase.AWAITING_START_FRAME_REVIEW)


T = TypeVar("T")
Paid = TypeVar("Paid", GeneratedImages, ClipOutput)


class _Expired(Exception):
    """A deadline passed on a wait whose policy is to expire the set."""


@workflow.defn(name=WORKFLOW_TYPE, failure_exception_types=[pydantic.ValidationError])
class EmojiSetWorkflow:
    """One emoji set from a character to exported stickers. The set id is the workflow id.

    Pinned to the build it started on (its worker's deployment says so: ``core.versioning``, because an unversioned
    worker may not run a workflow that declares a versioning behavior); while it waits for a person with nothing in
    flight, it moves to a newer current build by continuing as new with its state (docs/deploy.md).
    """

    @workflow.init
    def __init__(self, input: EmojiSetInput, resume: EmojiSetState | None = None) -> None:
        # A start carries one payload for two parameters, so the SDK cannot apply the type hints and passes the raw
        # JSON: validate it here. An invalid request raises ValidationError, which fails the set with its message. A
        # continued run reads what an earlier run (maybe of an older build) carried over, as any reader does.
        if resume is None:
            input = EmojiSetInput.of_request(input)
        else:
            input, resume = EmojiSetInput.model_validate(input), EmojiSetState.model_validate(resume)
        self._state = resume or _initial_state(workflow.info().workflow_id, input)
        self._character_approved = resume is not None and resume.phase is not Phase.AWAITING_CHARACTER_REVIEW
        self._approval: ApproveInput | None = None
        self._cancellation: CancelInput | None = None
        self._producing = True
        """Production has not ended: the set's own work is running, not a reviewer's message."""
        self._misconfigured: calls.Failed | None = None
        """A GPU call during production that the deployment's own configuration refused: the set stops with its
        reason (none of its work can run). In the final review only the candidates of the reviewer's message fail,
        with that reason, and the set waits: a reviewed set is not given up for a key an operator can fix."""
        self._busy = 0
        self._work = {action.name: ActionWork(action.name) for action in self._state.actions}
        """Each action's work in flight, by action name: what stops when it is dropped."""
        self._matting_slots = asyncio.Semaphore(input.max_parallel_matting)
        self._reserved: dict[tuple[str, int], int] = {}
        self._dropping: dict[str, None] = {}
        """The actions being dropped (their export targets checked, then their work stopped)."""
        self._one_drop_at_a_time = asyncio.Lock()
        self._refining: set[tuple[str, int, int]] = set()
        """(emoji, frame, candidate) of the cut-outs a refine_frame is changing right now."""
        self._published: tuple[Any, ...] | None = None
        self._stabilising: set[tuple[str, str]] = set()
        """(emoji, picks digest) of the stabilisations in flight."""
        self._spending = Spending(self._state)
        self._current: asyncio.Task[Any] | None = None
        """The set's own work: production, then the review (:meth:`_until_cancelled`)."""
        self._deliveries: list[asyncio.Task[None]] = []
        """The starts of the event deliveries (each a workflow of its own, abandoned by the set)."""
        self._prompts_announced = announcements.waiting_for_prompt(self._state)

    @workflow.run
    async def run(self, input: EmojiSetInput, resume: EmojiSetState | None = None) -> EmojiSetResult:
        """Run the set to its end: completed, cancelled or expired; failed when its request cannot be made or the
        deployment's configuration is refused during production."""
        try:
            try:
                await self._until_cancelled(self._produce(fresh=resume is None))
                self._producing = False
                end = await self._until_cancelled(self._review())
            except _Expired as expired:
                result = self._finish(Phase.EXPIRED, str(expired))
            else:
                if end is Phase.CANCELLED:
                    result = self._finish(Phase.CANCELLED, self._cancel_reason())
                else:
                    result = await self._assemble()
            await self._announce_end(END_EVENTS[result.status], result.reason)
            return result
        except asyncio.CancelledError:
            await self._cancelled_in_temporal()
            raise
        except (FailureError, pydantic.ValidationError) as failed:
            # Kept in the state (no command: released histories replay), so the set's page and `popcon state` say
            # why it failed and where, as the Web UI does. A cancellation from Temporal (met while an activity was
            # awaited) is no failure.
            if is_cancelled_exception(failed):
                await self._cancelled_in_temporal()
            else:
                self._state.failure = _failure(failed, self._state.phase)
                self._state.ended_at, self._state.approval_pending_by = workflow.now(), None
                workflow.set_current_details(progress.details_markdown(self._state))
                await self._announce_end(EventType.FAILED, self._state.failure.message)
            raise

    async def _until_cancelled(self, work: Coroutine[Any, Any, Phase | None]) -> Phase | None:
        """Run ``work``; a cancel signal stops it and everything it spawned (returns CANCELLED), and so does a refused
        deployment configuration (raises it: the set fails with one reason, not a failure per frame)."""
        task = self._current = asyncio.create_task(work)
        await workflow.wait_condition(
            lambda: task.done() or self._cancellation is not None or self._misconfigured is not None
        )
        if task.done():
            return task.result()
        running = self._running()
        for each in running:
            each.cancel()
        for each in running:
            with contextlib.suppress(asyncio.CancelledError, ActivityError, _Expired):
                await each
        if self._misconfigured is not None:
            raise FailureType.DEPLOYMENT_MISCONFIGURED.error(
                f"the set stopped: {self._misconfigured.reason}"
            ) from self._misconfigured.error
        return Phase.CANCELLED

    def _running(self) -> list[asyncio.Task[Any]]:
        """The set's own work (production or the review) and every action's work in the background."""
        current = [self._current] if self._current is not None else []
        return [*current, *(spawned for work in self._work.values() for spawned in work.background())]

    async def _cancelled_in_temporal(self) -> None:
        """The set was cancelled in Temporal (not by the cancel update): its state says so and, when it has a
        webhook, its work is stopped first (no new paid call while the event's delivery starts), then the event."""
        state = self._state
        state.ended_at, state.approval_pending_by = workflow.now(), None
        state.cancel_reason = state.cancel_reason or "cancelled in Temporal"
        self._set_phase(Phase.CANCELLED)
        if announcements.sends_events(state):
            for task in self._running():
                task.cancel()
            await self._announce_end(EventType.CANCELLED, state.cancel_reason)

    # --- Queries and messages ------------------------------------------------------------------------------------

    @workflow.query(description="The set's phase, the character, every action's start frames, takes and frame slots.")
    def get_state(self) -> EmojiSetState:
        """Phase, character, each action's start frames, takes and frame slots with candidates, scores and picks."""
        return self._state

    @workflow.update(
        description="The set's phase, for a backend that starts or attaches to it in one call (update-with-start)."
    )
    def attach(self) -> Phase:
        """The set's phase: an update, so it can ride with the set's start; small, since every update's result is
        kept in the history (the state is the get_state query's)."""
        return self._state.phase

    @workflow.signal(
        description="Check now whether the deployment has a new current build, and move to it if the set waits for "
        "a person with nothing in flight (it checks by itself every 15 minutes)."
    )
    def check_for_new_build(self) -> None:
        """Wake the set: its wait for a person looks at the current build again. Nothing else changes."""

    @workflow.update(description='Use another character candidate: {"candidate": 1}.')
    def pick_character(self, pick: PickCharacterInput) -> ImageCandidate:
        """Use another character candidate, while the character awaits review."""
        character = self._state.character
        character.pick, character.picked_by = pick.candidate, PickSource.HUMAN
        self._publish()
        picked = character.picked()
        assert picked is not None  # checked by the validator
        return picked

    @pick_character.validator
    def _validate_pick_character(self, pick: PickCharacterInput) -> None:
        self._require_open("character picks")
        if self._state.phase is not Phase.AWAITING_CHARACTER_REVIEW:
            raise ValueError(
                "the character is settled: start frames are made from it (review policy character=human lets a "
                "person pick before that)"
            )
        known = [c.index for c in self._state.character.candidates]
        if pick.candidate not in known:
            raise ValueError(f"there is no character candidate {pick.candidate}; candidates: {known}")

    @workflow.update(description='Go on with the picked character: {"reviewer": "ana"}.')
    def approve_character(self, approval: ApproveCharacterInput) -> None:
        """Make start frames from the picked character."""
        self._character_approved = True

    @approve_character.validator
    def _validate_approve_character(self, approval: ApproveCharacterInput) -> None:
        self._require_open("character approvals")
        if self._state.phase is not Phase.AWAITING_CHARACTER_REVIEW:
            raise ValueError(f"the character does not await review (the set is {self._state.phase.value})")

    @workflow.update(description='Use another start frame for an action: {"action": "wave", "candidate": 1}.')
    def pick_start_frame(self, pick: PickStartFrameInput) -> ActionState:
        """Choose an action's start frame (approve it with approve_start_frames)."""
        action = self._require_action(pick.action)
        action.start_frame_pick = pick.candidate
        self._publish()
        return action

    @pick_start_frame.validator
    def _validate_pick_start_frame(self, pick: PickStartFrameInput) -> None:
        self._require_open("start frame picks")
        action = self._require_start_frame_review(pick.action)
        known = [c.index for c in action.start_frames]
        if pick.candidate not in known:
            raise ValueError(f"{pick.action} has no start frame {pick.candidate}; candidates: {known}")

    @workflow.update(
        description='Animate actions from their picked start frames: {"actions": ["wave"]}; [] for every action '
        "whose start frame awaits review."
    )
    def approve_start_frames(self, approval: ApproveStartFramesInput) -> list[str]:
        """Approve start frames: each approved action starts animating at once. Returns the approved actions."""
        names = approval.actions or [a.name for a in self._awaiting_start_frames()]
        for name in names:
            self._approve_start_frame(self._require_action(name), approval.reviewer or "reviewer")
        return names

    @approve_start_frames.validator
    def _validate_approve_start_frames(self, approval: ApproveStartFramesInput) -> None:
        self._require_open("start frame approvals")
        if not approval.actions and not self._awaiting_start_frames():
            raise ValueError("no start frame awaits review")
        for name in approval.actions:
            self._require_start_frame_review(name)

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='New start frames from a custom pose prompt: {"action": "wave", "prompt": "..."}.',
    )
    async def regenerate_start_frame(self, request: RegenerateStartFrameInput) -> ActionState:
        """Make new start frame candidates for an action (awaiting review, or waiting after a failure); returns
        the action once they are made."""
        action = self._require_action(request.action)
        count = request.candidates or self._state.input.start_frame_candidates
        paid = self._reserve_regeneration(self._regeneration(GeneratorRole.START_FRAME, action, count))
        await self._work[action.name].run(self._busy_with(self._start_frames(action, count, request.prompt, paid)))
        return action

    @regenerate_start_frame.validator
    def _validate_regenerate_start_frame(self, request: RegenerateStartFrameInput) -> None:
        self._require_open("regenerations")
        action = self._require_action(request.action)
        if action.stage not in (ActionStage.AWAITING_START_FRAME_REVIEW, ActionStage.WAITING_FOR_PROMPT) or (
            action.start_frame_approved_by is not None
        ):
            raise ValueError(
                f"{request.action} is {action.stage.value} with its start frame "
                f"{'approved' if action.start_frame_approved_by else 'being made'}; "
                "regenerate_action makes a new take with a custom motion prompt"
            )
        count = request.candidates or self._state.input.start_frame_candidates
        self._require_budget(
            f"new start frames for {action.name}", self._regeneration(GeneratorRole.START_FRAME, action, count)
        )

    @workflow.update(description='Use a candidate by hand: {"emoji": "wave", "frame": 3, "candidate": 1}.')
    def pick_candidate(self, pick: PickCandidateInput) -> FrameState:
        """Use a candidate of a frame slot by hand; returns the slot."""
        action = self._require_action(pick.emoji)
        frame = action.frames[pick.frame]
        frame.pick, frame.picked_by = pick.candidate, PickSource.HUMAN
        self._state.notice = None
        self._refresh(action)
        return frame

    @pick_candidate.validator
    def _validate_pick(self, pick: PickCandidateInput) -> None:
        self._require_open("picks")
        frame = self._require_frame(pick.emoji, pick.frame)
        candidate = frame.candidate(pick.candidate)
        if candidate is None:
            known = [c.index for c in frame.candidates]
            raise ValueError(f"{pick.emoji} frame {pick.frame} has no candidate {pick.candidate}; candidates: {known}")
        if candidate.status is not CandidateStatus.READY:
            raise ValueError(
                f"{pick.emoji} frame {pick.frame} candidate {pick.candidate} is {candidate.status.value}, not ready"
                + (f": {candidate.error}" if candidate.error else "")
            )

    @workflow.update(description='Use one take for a whole emoji: {"emoji": "wave", "take": 1}.')
    def pick_take(self, pick: PickTakeInput) -> ActionState:
        """Pick, in every slot, the take's best-placed usable candidate (its chosen clip frame when usable)."""
        action = self._require_action(pick.emoji)
        action.take_pick = pick.take
        for frame in action.frames:
            own = [c for c in frame.usable() if c.take == pick.take]
            if own:
                best = min(own, key=lambda c: (abs(c.offset), -picking.merit(c), c.index))
                frame.pick, frame.picked_by = best.index, PickSource.HUMAN
        self._refresh(action)
        return action

    @pick_take.validator
    def _validate_pick_take(self, pick: PickTakeInput) -> None:
        self._require_open("picks")
        action = self._require_action(pick.emoji)
        take = next((t for t in action.takes if t.index == pick.take), None)
        if take is None:
            raise ValueError(f"{pick.emoji} has no take {pick.take}; takes: {[t.index for t in action.takes]}")
        if take.status is not TakeStatus.READY:
            raise ValueError(
                f"{pick.emoji} take {pick.take} is {take.status.value}" + (f": {take.error}" if take.error else "")
            )
        if not any(c.take == pick.take for f in action.frames for c in f.usable()):
            raise ValueError(f"{pick.emoji} take {pick.take} has no usable frame yet (its frames are being matted)")

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='A new take from a custom motion prompt: {"emoji": "wave", "motion_prompt": "..."}; returns '
        "the take at once (it animates for minutes: follow it with get_state).",
    )
    def regenerate_action(self, request: RegenerateActionInput) -> TakeState:
        """Start a new take of an emoji's clip with a custom motion prompt; its frames join every slot's
        candidates once extracted and matted."""
        action = self._require_action(request.emoji)
        paid = self._reserve_regeneration(self._regeneration(GeneratorRole.CLIP, action))
        take = TakeState(index=len(action.takes), motion_prompt=request.motion_prompt)
        action.takes.append(take)
        if action.stage is not ActionStage.READY:
            action.stage, action.error = ActionStage.ANIMATING, None
        self._spawn(action, self._take(action, take, paid))
        self._publish()
        return take

    @regenerate_action.validator
    def _validate_regenerate_action(self, request: RegenerateActionInput) -> None:
        self._require_open("regenerations")
        action = self._require_action(request.emoji)
        if action.start_frame_approved_by is None:
            raise ValueError(f"{request.emoji} has no approved start frame yet: approve or regenerate it first")
        if len(action.takes) >= MAX_TAKES_PER_ACTION_TOTAL:
            raise ValueError(f"{request.emoji} already has {len(action.takes)} takes, the most an action may have")
        new = self._state.input.frames_per_emoji * (2 * self._state.input.neighbours + 1)
        self._require_room(action, new, per_slot=2 * self._state.input.neighbours + 1)
        self._require_budget(f"a new take of {action.name}", self._regeneration(GeneratorRole.CLIP, action))

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='New candidates for a frame, an image edit with a custom prompt: {"emoji": "wave", "frame": 3, '
        '"prompt": "..."}; returns the slot once they are matted.',
    )
    async def regenerate_frame(self, request: RegenerateFrameInput) -> FrameState:
        """Edit a frame slot's picked (or chosen) frame with a custom prompt; the best new candidate becomes the
        pick."""
        action = self._require_action(request.emoji)
        frame = action.frames[request.frame]
        count = request.candidates or self._state.input.start_frame_candidates
        paid = self._reserve_regeneration(self._regeneration(GeneratorRole.EDIT_FRAME, action, count))
        await self._work[action.name].run(self._busy_with(self._edit_frame(action, frame, count, request.prompt, paid)))
        return frame

    @regenerate_frame.validator
    def _validate_regenerate_frame(self, request: RegenerateFrameInput) -> None:
        self._require_open("regenerations")
        frame = self._require_frame(request.emoji, request.frame)
        if not frame.candidates:
            raise ValueError(f"{request.emoji} frame {request.frame} has no frame to edit yet (its clip is not in)")
        action = self._require_action(request.emoji)
        count = request.candidates or self._state.input.start_frame_candidates
        self._require_room(action, count, per_slot=count, frame=frame)
        self._require_budget(
            f"an edit of {action.name} frame {frame.index}", self._regeneration(GeneratorRole.EDIT_FRAME, action, count)
        )

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='Correct a cut-out with clicks: {"emoji": "wave", "frame": 3, "candidate": 1, "mode": "erase", '
        '"points": [{"x": 40, "y": 12}]}; "following": true carries it through the later frames. Returns the slot '
        "once refined.",
    )
    async def refine_frame(self, request: RefineFrameInput) -> FrameState:
        """Erase or restore the region segmented from the clicks in a candidate's cut-out (and, with ``following``,
        in the picks of the emoji's later frames); each refined candidate becomes its slot's pick by hand."""
        action = self._require_action(request.emoji)
        frame = action.frames[request.frame]
        await self._work[action.name].run(self._busy_with(self._refine(action, frame, request)))
        return frame

    @refine_frame.validator
    def _validate_refine_frame(self, request: RefineFrameInput) -> None:
        self._require_open("refinements")
        candidate = self._require_refinable(request.emoji, request.frame, request.candidate)
        matte = candidate.matte
        assert matte is not None  # checked above
        if matte.width is None or matte.height is None:
            raise ValueError(
                f"{request.emoji} frame {request.frame} candidate {request.candidate}'s cut-out has no recorded size, "
                "so clicks on it cannot be checked: matte it again (regenerate_frame) to refine it"
            )
        outside = [p for p in request.points if p.x >= matte.width or p.y >= matte.height]
        if outside:
            where = ", ".join(f"({p.x}, {p.y})" for p in outside)
            raise ValueError(
                f"points outside the {matte.width}x{matte.height} frame: {where} "
                f"(x from 0 to {matte.width - 1}, y from 0 to {matte.height - 1})"
            )

    @workflow.update(
        description='Take back a cut-out\'s last refinement: {"emoji": "wave", "frame": 3, "candidate": 1}; '
        '"following": true also undoes the last one of the later frames\' picks.'
    )
    def undo_refine(self, request: UndoRefineInput) -> FrameState:
        """Bring back a candidate's cut-out (and score) from before its last refinement; returns the slot."""
        action = self._require_action(request.emoji)
        frame = action.frames[request.frame]
        targets = [frame.candidate(request.candidate)]
        if request.following:
            targets += [self._refinable_pick(action, later) for later in action.frames[request.frame + 1 :]]
        for candidate in targets:
            if candidate is not None and candidate.versions:
                last = candidate.versions.pop()
                candidate.matte, candidate.score = last.matte, last.score
        self._state.notice = None
        self._refresh(action)
        return frame

    @undo_refine.validator
    def _validate_undo_refine(self, request: UndoRefineInput) -> None:
        self._require_open("refinements")
        candidate = self._require_refinable(request.emoji, request.frame, request.candidate)
        if not candidate.versions:
            raise ValueError(
                f"{request.emoji} frame {request.frame} candidate {request.candidate} has no refinement to undo"
            )

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='Take an emoji out of the set, its work in flight stopped: {"action": "cry", "reviewer": "ana"}; '
        '"force": true drops it even when a platform target then refuses the set (LINE takes 8 to 40 emoji).',
    )
    async def drop_action(self, request: DropActionInput) -> DroppedAction:
        """Stop everything the action has in flight (its start frames, takes, matting, a reviewer's regeneration or
        refinement of it) and take it out of the set; the set's export targets are checked again for the new size.
        Its files stay in the store."""
        action = self._require_action(request.action)  # before it counts as being dropped
        self._dropping[action.name] = None
        try:
            async with self._one_drop_at_a_time:  # each drop checks the exports for the set the last one left
                return await self._busy_with(self._drop(action, request))
        finally:
            del self._dropping[action.name]

    @drop_action.validator
    def _validate_drop_action(self, request: DropActionInput) -> None:
        self._require_open("drops")
        if self._state.pipeline_info is None:
            raise ValueError("the set's request is still being checked: drop an emoji once its character is made")
        self._require_action(request.action)
        if not [a for a in self._state.actions if a.name != request.action and a.name not in self._dropping]:
            raise ValueError(f"{request.action} is the set's last emoji: cancel the set instead")

    async def _drop(self, action: ActionState, request: DropActionInput) -> DroppedAction:
        state = self._state
        left = len(state.actions) - 1
        refusals = await calls.outcome(
            calls.check_exports(
                CheckExportsInput(targets=state.input.export_targets, emojis=left),
                summary=f"check export targets for {left} emoji, without {action.name}",
            )
        )
        if isinstance(refusals, calls.Failed):
            message = f"{action.name} was not dropped: its export targets could not be checked: {refusals.reason}"
            raise FailureType.INVALID_REQUEST.error(message) from refusals.error
        refused_before = {refusal.partition(":")[0] for refusal in state.export_refusals}
        newly = [refusal for refusal in refusals if refusal.partition(":")[0] not in refused_before]
        if newly and not request.force:
            raise FailureType.INVALID_REQUEST.error(
                f"{action.name} was not dropped: the set would have {left} emoji and then "
                f"{'; '.join(newly)}. Regenerate it instead, or drop it with force (those packages are then refused)"
            )
        # Out of the set first, so nothing (a deadline's approval, a message) reaches it while its work stops.
        state.actions = [kept for kept in state.actions if kept is not action]
        dropped = DroppedAction(
            action=action.name, dropped_by=request.reviewer or "reviewer", reason=request.reason or None
        )
        state.dropped.append(dropped)
        state.export_refusals = refusals
        state.notice = None
        self._publish()
        await self._work[action.name].stop()
        self._spending.stop_action(action.name, workflow.now())  # a regeneration's, stopped before it began
        return dropped

    @workflow.update(description='Assemble the set with the current picks: {"reviewer": "ana"}.')
    def approve(self, approval: ApproveInput) -> None:
        """Assemble the set with the current picks, once the regenerations under way are done."""
        self._approval = approval
        self._state.approval_pending_by = approval.reviewer or "reviewer"

    @approve.validator
    def _validate_approve(self, approval: ApproveInput) -> None:
        self._require_open("approvals")
        unusable = self._state.unusable()
        if unusable:
            raise ValueError(f"not usable yet: {', '.join(unusable)}; regenerate them with a custom prompt first")

    @workflow.update(description='Stop the set, nothing is assembled: {"reason": "..."}.')
    def cancel(self, cancellation: CancelInput) -> None:
        """Stop the set and everything it is making; nothing is assembled."""
        self._cancellation = cancellation

    @cancel.validator
    def _validate_cancel(self, cancellation: CancelInput) -> None:
        state = self._state
        if state.phase is Phase.ASSEMBLING:
            raise ValueError(f"too late to cancel: the set was approved by {state.approved_by} and is being assembled")
        if state.phase in CLOSED_PHASES:
            raise ValueError(f"the set is {state.phase.value}: there is nothing to cancel")
        if self._cancellation is not None:
            raise ValueError("the set is being cancelled already")

    # --- Production ----------------------------------------------------------------------------------------------

    async def _produce(self, *, fresh: bool) -> None:
        """Check the request, settle the character, then start every action; returns when no work is left and no
        start frame awaits review (actions that failed for good wait for a custom prompt in the final review).

        A continued run (``fresh`` false) picks up where its state is: at the character review, at the start frame
        reviews, or past them (then there is nothing to do here).
        """
        state = self._state
        self._publish()
        if fresh:
            await self._check_configuration()
            await self._character()
        if state.phase is Phase.AWAITING_CHARACTER_REVIEW:
            await self._wait_for_person(
                lambda: self._character_approved,
                on_deadline=self._approve_character_on_deadline,
                what="character review",
                announce=EventType.AWAITING_CHARACTER_REVIEW,
            )
            state.review_deadline = None
        if all(action.stage is ActionStage.START_FRAME and not action.start_frames for action in state.actions):
            state.phase = Phase.START_FRAMES
            for action in state.actions:
                self._spawn(action, self._start_frames(action, state.input.start_frame_candidates, None))
        while True:
            await workflow.wait_condition(lambda: self._busy == 0 or bool(self._awaiting_start_frames()))
            if not self._awaiting_start_frames():
                return
            await self._wait_for_person(
                lambda: not self._awaiting_start_frames(),
                on_deadline=self._approve_waiting_start_frames,
                what="start frame review",
                announce=EventType.AWAITING_START_FRAME_REVIEW,
            )
            if not self._awaiting_start_frames():
                state.review_deadline = None

    async def _check_configuration(self) -> None:
        """Fail fast on an unknown generator or matting pipeline, asked where they live, before any work; note the
        platform targets that will not take a set of this size (LINE emoji: 8 to 40)."""
        input = self._state.input
        if workflow.patched(LEDGER_PATCH):
            # First: a set whose other checks fail still tells its webhook why.
            terms = await calls.outcome(
                calls.describe_deployment(
                    DescribeDeploymentInput(
                        generator=input.generator,
                        webhook=input.webhook,
                        budget=input.budget,
                        clip_seconds=input.clip_seconds,
                    ),
                    summary="check the deployment's terms: prices, budget, webhook",
                )
            )
            if isinstance(terms, calls.Failed):
                _refuse_configuration(terms)
            self._state.terms = terms
            self._state.ledger.currency = terms.prices.currency
            if terms.temporal is not None and "temporal" not in input.model_fields_set:
                # The deployment's mode for a set that names none; set in the input, so it is carried as set.
                input = self._state.input = input.model_copy(update={"temporal": terms.temporal})
            self._require_budget_at_start()
        checks = await calls.outcome(
            asyncio.gather(
                calls.describe_pipeline(
                    DescribePipelineInput(pipeline=input.matting_pipeline, temporal=input.temporal),
                    summary=f"check matting pipeline {input.matting_pipeline}",
                ),
                calls.check_generator(
                    CheckGeneratorInput(generator=input.generator), summary=f"check generator {input.generator}"
                ),
                calls.check_exports(
                    CheckExportsInput(targets=input.export_targets, emojis=len(self._state.actions)),
                    summary=f"check export targets {', '.join(input.export_targets)}",
                ),
            )
        )
        if isinstance(checks, calls.Failed):
            _refuse_configuration(checks)
        description, _, refusals = checks
        self._state.pipeline_info = f"{description.pipeline} on {description.device} ({description.precision})"
        self._state.export_refusals = refusals

    def _require_budget_at_start(self) -> None:
        """Fail the set, before any paid call, when its budget cannot pay for its own production."""
        shortfall = self._spending.shortfall_at_start()
        if shortfall is not None:
            raise FailureType.INVALID_REQUEST.error(shortfall)

    async def _character(self) -> None:
        """The character: the cleaned upload, or generated candidates with the first picked (under review policy
        ``character=human`` the set then awaits a person's pick). A character that cannot be made fails the set:
        nothing else has been done yet."""
        state, input = self._state, self._state.input
        self._set_phase(Phase.CHARACTER)
        made: ArtifactRef | GeneratedImages | calls.Failed
        if input.character_image is not None:
            made = await calls.outcome(
                calls.prepare_upload(
                    PrepareUploadInput(set_id=state.set_id, upload=input.character_image, size=input.image_size),
                    summary="clean the uploaded character",
                )
            )
        else:
            assert input.character_prompt is not None  # the input has one or the other
            paid = self._spending.start(
                Call(GeneratorRole.CHARACTER, None, CallCause.PRODUCTION, images=input.character_candidates)
            )
            made = await self._paid(
                paid,
                calls.generate_character(
                    GenerateCharacterInput(
                        set_id=state.set_id,
                        prompt=input.character_prompt,
                        style=input.style,
                        first_candidate=0,
                        count=input.character_candidates,
                        generator=input.generator,
                        size=input.image_size,
                        seed=input.seed,
                    ),
                    summary=f"generate {input.character_candidates} character candidates",
                ),
            )
        if isinstance(made, calls.Failed):
            state.character.error = made.reason
            message = f"the character could not be made: {made.reason}"
            raise FailureType.INVALID_REQUEST.error(message) from made.error
        if isinstance(made, ArtifactRef):
            state.character.candidates = [ImageCandidate(index=0, image=made)]
            state.character.uploaded = True
        else:
            state.character.candidates = [ImageCandidate(index=c.index, image=c.image) for c in made.candidates]
        state.character.pick, state.character.picked_by = state.character.candidates[0].index, PickSource.AUTO
        if input.review.character is StagePolicy.HUMAN and not state.character.uploaded:
            self._set_phase(Phase.AWAITING_CHARACTER_REVIEW)

    def _approve_character_on_deadline(self) -> None:
        self._character_approved = True

    async def _start_frames(self, action: ActionState, count: int, prompt: str | None, paid: int | None = None) -> None:
        """Make start frame candidates for an action (``paid``: the reservation of a reviewer's regeneration); then
        it awaits review, or (policy ``auto``) animates from the first new one. A failure for good leaves it waiting
        for a custom prompt."""
        input = self._state.input
        first = len(action.start_frames)
        action.stage, action.error = ActionStage.START_FRAME, None
        self._publish()
        if paid is None:
            paid = self._spending.start(
                Call(GeneratorRole.START_FRAME, action.name, CallCause.PRODUCTION, images=count)
            )
        output = await self._paid(
            paid,
            calls.generate_start_frame(
                GenerateStartFrameInput(
                    set_id=self._state.set_id,
                    action=action.action,
                    character=self._character_ref(),
                    prompt=prompt or action.action.pose_prompt,
                    style=input.style,
                    first_candidate=first,
                    count=count,
                    generator=input.generator,
                    size=input.image_size,
                    seed=input.seed,
                ),
                summary=f"start frames {first}-{first + count - 1} for {action.name}",
                interactive=prompt is not None,
            ),
        )
        if isinstance(output, calls.Failed):
            action.stage = ActionStage.WAITING_FOR_PROMPT
            action.error = f"start frame failed: {output.reason}"
            self._publish()
            return
        action.start_frames += [ImageCandidate(index=c.index, image=c.image, prompt=prompt) for c in output.candidates]
        action.start_frame_pick = output.candidates[0].index
        if input.review.start_frames is StagePolicy.AUTO:
            self._approve_start_frame(action, "auto")
        else:
            action.stage = ActionStage.AWAITING_START_FRAME_REVIEW
            self._publish()

    def _approve_start_frame(self, action: ActionState, approved_by: str) -> None:
        action.start_frame_approved_by = approved_by
        action.stage = ActionStage.ANIMATING
        action.takes = [TakeState(index=i) for i in range(self._state.input.takes_per_action)]
        for take in action.takes:
            self._spawn(action, self._take(action, take))
        self._publish()

    def _approve_waiting_start_frames(self) -> None:
        for action in self._awaiting_start_frames():
            self._approve_start_frame(action, "review deadline (auto-approve)")

    async def _take(self, action: ActionState, take: TakeState, paid: int | None = None) -> None:
        """One take (``paid``: the reservation of a reviewer's new take): its clip, its frames, then every slot's new
        candidates matted."""
        frames = await self._animate(action, take, paid)
        if isinstance(frames, calls.Failed):
            take.status, take.error = TakeStatus.FAILED, frames.reason
            self._settle(action)
            return
        take.status, take.source_frames, take.fps, take.loop = (
            TakeStatus.READY,
            frames.source_frames,
            frames.fps,
            frames.loop,
        )
        if action.stage is not ActionStage.READY:
            action.stage = ActionStage.MATTING
        new_per_slot = []
        for frame, slot in zip(action.frames, frames.slots, strict=True):
            first = self._reserve(action, frame, len(slot))
            new = [
                Candidate(
                    index=first + i,
                    source=clip_frame.image,
                    take=take.index,
                    source_frame=clip_frame.source_frame,
                    offset=clip_frame.offset,
                    quality=clip_frame.quality,
                )
                for i, clip_frame in enumerate(slot)
            ]
            frame.candidates += new
            new_per_slot.append(new)
        self._publish()
        asked = take.motion_prompt is not None  # a reviewer's new take
        await asyncio.gather(
            *(
                self._matte(action, frame, new, interactive=asked)
                for frame, new in zip(action.frames, new_per_slot, strict=True)
            )
        )
        self._settle(action)

    async def _animate(
        self, action: ActionState, take: TakeState, paid: int | None
    ) -> ExtractFramesOutput | calls.Failed:
        """The take's clip, then its frames."""
        input, set_id = self._state.input, self._state.set_id
        start_frame = action.start_frame()
        assert start_frame is not None  # approved
        if paid is None:
            production = Call(GeneratorRole.CLIP, action.name, CallCause.PRODUCTION, video_seconds=input.clip_seconds)
            paid = self._spending.start(production)
        clip = await self._paid(
            paid,
            calls.generate_clip(
                GenerateClipInput(
                    set_id=set_id,
                    action=action.action,
                    character=self._character_ref(),
                    start_frame=start_frame.image,
                    motion_prompt=take.motion_prompt or action.action.motion_prompt,
                    take=take.index,
                    seconds=input.clip_seconds,
                    fps=input.clip_fps,
                    generator=input.generator,
                    size=input.image_size,
                    seed=input.seed,
                ),
                summary=f"clip of {action.name} take {take.index}",
                interactive=take.motion_prompt is not None,
            ),
        )
        if isinstance(clip, calls.Failed):
            return clip
        take.clip, take.status = clip.clip, TakeStatus.EXTRACTING
        self._publish()
        return await calls.outcome(
            calls.extract_frames(
                ExtractFramesInput(
                    set_id=set_id,
                    action=action.name,
                    take=take.index,
                    clip=clip.clip,
                    frames=input.frames_per_emoji,
                    neighbours=input.neighbours,
                    size=input.image_size,
                ),
                summary=f"frames of {action.name} take {take.index}",
                interactive=take.motion_prompt is not None,
            )
        )

    async def _edit_frame(self, action: ActionState, frame: FrameState, count: int, prompt: str, paid: int) -> None:
        input = self._state.input
        base = frame.picked() or frame.candidates[0]
        first = self._reserve(action, frame, count)
        output = await self._paid(
            paid,
            calls.edit_frame(
                EditFrameInput(
                    set_id=self._state.set_id,
                    action=action.action,
                    character=self._character_ref(),
                    frame=frame.index,
                    frames=input.frames_per_emoji,
                    source=base.source,
                    prompt=prompt,
                    style=input.style,
                    first_candidate=first,
                    count=count,
                    generator=input.generator,
                    size=input.image_size,
                    seed=input.seed,
                ),
                summary=f"edit {action.name} frame {frame.index}: candidates {first}-{first + count - 1}",
                interactive=True,
            ),
        )
        if isinstance(output, calls.Failed):
            frame.error = f"frame edit failed: {output.reason}"
            self._refresh(action)
            return
        new = [Candidate(index=c.index, source=c.image, prompt=prompt) for c in output.candidates]
        frame.candidates += new
        frame.edits += 1
        await self._matte(action, frame, new, interactive=True)
        ready = [c for c in new if c.status is CandidateStatus.READY]
        if ready:
            best = max(ready, key=lambda c: (picking.merit(c), -c.index))
            frame.pick, frame.picked_by = best.index, PickSource.HUMAN
        self._refresh(action)

    async def _matte(
        self, action: ActionState, frame: FrameState, candidates: list[Candidate], *, interactive: bool = False
    ) -> None:
        """Matte a slot's new candidates in one GPU activity (``interactive``: a reviewer waits for them); each
        candidate's failure is its own."""
        if not candidates:
            return
        if frame.status is not FrameStatus.READY:
            frame.status = FrameStatus.MATTING
        set_id = self._state.set_id
        request = MatteSlotInput(
            pipeline=self._state.input.matting_pipeline,
            candidates=[c.source for c in candidates],
            output_keys=[keys.candidate_key(set_id, action.name, frame.index, c.index, MATTE) for c in candidates],
        )
        async with self._matting_slots:
            output = await calls.outcome(
                calls.matte_slot(
                    request,
                    summary=f"matte {action.name} frame {frame.index}: {len(candidates)} candidates",
                    interactive=interactive,
                )
            )
            if isinstance(output, calls.Failed):
                for candidate in candidates:
                    candidate.status, candidate.error = CandidateStatus.FAILED, f"matting failed: {output.reason}"
                if output.kind is FailureType.DEPLOYMENT_MISCONFIGURED and self._producing:
                    self._misconfigured = self._misconfigured or output
                self._refresh(action)  # before the GPU slot is let go: the order of commands is recorded
                return
        self._spending.record_gpu(output.gpu_seconds)
        for candidate, result in zip(candidates, output.results, strict=True):
            if result.output is None:
                candidate.status = CandidateStatus.FAILED
                candidate.error = f"matting failed: {result.failure or 'error'}: {result.error}"
            else:
                candidate.status, candidate.matte = CandidateStatus.READY, result.output.matte
                candidate.score = result.output.score
        self._refresh(action)

    async def _refine(self, action: ActionState, frame: FrameState, request: RefineFrameInput) -> None:
        """Refine the candidate's cut-out (and the later frames' picks, with ``following``) in one GPU activity; each
        new version is recorded with its score and its candidate becomes the slot's pick by hand. A failure leaves
        every cut-out as it was and fails the update with the reason."""
        origin = frame.candidate(request.candidate)
        assert origin is not None  # checked by the validator
        targets = [(frame, origin)]
        if request.following:
            for later in action.frames[frame.index + 1 :]:
                picked = self._refinable_pick(action, later)
                if picked is not None:
                    targets.append((later, picked))
        set_id = self._state.set_id
        refine_targets = []
        for slot, candidate in targets:
            assert candidate.matte is not None  # a ready candidate has its cut-out
            candidate.refinements += 1  # reserved now: two refinements never share a key
            key = keys.matte_version_key(set_id, action.name, slot.index, candidate.index, candidate.refinements + 1)
            refine_targets.append(RefineTarget(source=candidate.source, matte=candidate.matte, output_key=key))
            self._refining.add((action.name, slot.index, candidate.index))
        summary = (
            f"refine {action.name} frame {frame.index} candidate {origin.index}: {request.mode.value}, "
            f"{len(request.points)} point{'s' if len(request.points) != 1 else ''}"
            + (f", {len(targets) - 1} following frames" if request.following else "")
        )
        try:
            refining = RefineMatteInput(
                frames=refine_targets, points=request.points, mode=request.mode, refiner=self._refiner()
            )
            output = await calls.outcome(calls.refine_matte(refining, summary=summary, interactive=True))
        finally:
            for slot, candidate in targets:
                self._refining.discard((action.name, slot.index, candidate.index))
        if isinstance(output, calls.Failed):
            raise FailureType.MATTING_FAILED.error(f"{summary} failed: {output.reason}") from output.error
        self._spending.record_gpu(output.gpu_seconds)
        for (slot, candidate), result in zip(targets, output.frames, strict=True):
            assert candidate.matte is not None
            candidate.versions.append(MatteVersion(matte=candidate.matte, score=candidate.score))
            if len(candidate.versions) > MAX_MATTE_VERSIONS:
                del candidate.versions[1]  # the matting's own cut-out stays; its file is never deleted
            candidate.matte, candidate.score = result.matte, result.score
            slot.pick, slot.picked_by = candidate.index, PickSource.HUMAN
        self._state.notice = None
        self._refresh(action)

    def _refiner(self) -> str:
        """The click segmenter of this set: SAM2 (with the pipeline's variant) when the set's matting pipeline uses
        it, since describe_pipeline has then loaded its weights where the set is matted; else the weight-free
        ``clicks``. A worker without SAM2's weights falls back to ``clicks`` itself."""
        for step in self._state.input.matting_pipeline.split("+"):
            if step.partition(":")[0] == "sam2":
                return step
        return "clicks"

    # --- Review --------------------------------------------------------------------------------------------------

    async def _review(self) -> Phase:
        """Wait for a decision on the finished frames; returns ASSEMBLING once the regenerations under way are done
        (CANCELLED is the caller's; raises _Expired). A long review continues as new, its state carried over."""
        state = self._state
        self._set_phase(Phase.AWAITING_REVIEW)
        automatic = state.input.review.final is StagePolicy.AUTO

        def decided() -> bool:
            return (
                self._approval is not None
                or state.approved_by is not None  # by the deadline
                or (automatic and self._busy == 0 and not state.unusable())
            )

        await self._wait_for_person(
            lambda: decided() or workflow.info().is_continue_as_new_suggested(),
            on_deadline=self._approve_on_deadline,
            what="review",
            announce=None if automatic else EventType.AWAITING_REVIEW,
        )
        if not decided():
            await workflow.wait_condition(self._idle)
            if not decided():
                self._continue_as_new()
        await workflow.wait_condition(lambda: self._busy == 0)
        if state.approved_by is None:
            state.approved_by = (self._approval.reviewer or "reviewer") if self._approval else "auto"
        state.notice, state.approval_pending_by = None, None
        return Phase.ASSEMBLING

    def _approve_on_deadline(self) -> None:
        unusable = self._state.unusable()
        if unusable:
            raise _Expired(f"review deadline passed; cannot auto-approve, not usable: {', '.join(unusable)}")
        self._state.approved_by, self._state.notice = "review deadline (auto-approve)", None

    async def _wait_for_person(
        self,
        done: Callable[[], bool],
        *,
        on_deadline: Callable[[], None],
        what: str,
        announce: EventType | None,
    ) -> None:
        """Wait until ``done()``, at most until the current wait's deadline (set when the wait begins, and then
        ``announce`` sent to the set's webhook). At the deadline, policy ``auto_approve`` calls ``on_deadline``;
        ``expire`` ends the set. The caller clears the deadline when its stage is over (a continue-as-new keeps it).

        While it waits, the set wakes every UPGRADE_CHECK_INTERVAL (and on every message or ``check_for_new_build``)
        to see whether its deployment has a new current build: if it has and nothing is in flight, the set continues
        as new on that build, its wait and deadline carried over. (The server tells a pinned run of a new build only
        in a workflow task, and a set asleep on one timer for its deadline would run none for a day.)
        """
        state = self._state
        if state.review_deadline is None:
            state.review_deadline = workflow.now() + state.input.review.deadline
            self._publish()
            if announce is not None and not done():
                self._announce(announce, announcements.review_message(state, announce))
        # Replays histories of release 0.1.0 (one timer for the deadline) unpatched: when their timer fires, the
        # deadline has passed, and a wake-up timer that fires at the deadline leads to the same commands.
        while not done():
            remaining = (state.review_deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                await self._deadline_passed(on_deadline, what)
                return
            check = UPGRADE_CHECK_INTERVAL.total_seconds()
            try:
                await workflow.wait_condition(
                    lambda: done() or self._new_build_waiting(),
                    timeout=min(remaining, check),
                    timeout_summary=f"{what} deadline" if remaining <= check else f"{what}: check for a new build",
                )
            except TimeoutError:
                continue
            if not done():
                self._continue_as_new()

    async def _deadline_passed(self, on_deadline: Callable[[], None], what: str) -> None:
        state = self._state
        await workflow.wait_condition(lambda: self._busy == 0 or bool(self._awaiting_start_frames()))
        if state.input.review.on_deadline is DeadlinePolicy.EXPIRE:
            raise _Expired(f"{what} deadline passed without a decision")
        on_deadline()

    def _idle(self) -> bool:
        """Nothing in flight: no activity, no message being handled, no event delivery being started. Only then may
        the run end for a new one."""
        return (
            self._busy == 0
            and workflow.all_handlers_finished()
            and all(delivery.done() for delivery in self._deliveries)
        )

    def _new_build_waiting(self) -> bool:
        return self._idle() and workflow.info().is_target_worker_deployment_version_changed()

    def _continue_as_new(self) -> NoReturn:
        """Go on in a new run with the whole state, on the deployment's current build (the same one unless a new
        build was made current): a long review's history stays short, and a waiting set leaves an old build."""
        self._state.runs += 1
        workflow.continue_as_new(
            args=[self._state.input, self._state],
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    # --- Assembly ------------------------------------------------------------------------------------------------

    async def _assemble(self) -> EmojiSetResult:
        self._set_phase(Phase.ASSEMBLING)
        state = self._state
        rows = [(action.name, [_picked_matte(frame) for frame in action.frames]) for action in state.actions]
        durations = {action.name: action.action.frame_duration_ms for action in state.actions}
        sheet = calls.assemble_contact_sheet(
            ContactSheetInput(set_id=state.set_id, title=_title(state), rows=rows), summary="assemble contact sheet"
        )
        approved = [
            EmojiFramesRef(pose=name, frames=frames, frame_duration_ms=durations[name]) for name, frames in rows
        ]
        packages = export_packages(state.set_id, state.input.export_targets, approved)
        emojis = [
            calls.assemble_emoji(
                AssembleEmojiInput(set_id=state.set_id, pose=name, frames=frames, frame_duration_ms=durations[name]),
                summary=f"assemble {name}",
            )
            for name, frames in rows
            if ExportTarget.GENERIC in state.input.export_targets
        ]
        sheet_ref, package_outputs, *emoji_outputs = await asyncio.gather(sheet, packages, *emojis)
        state.ended_at = workflow.now()
        self._set_phase(Phase.COMPLETED)
        return EmojiSetResult(
            set_id=state.set_id,
            status="completed",
            approved_by=state.approved_by,
            emojis=emoji_outputs,
            contact_sheet=sheet_ref,
            packages=package_outputs,
            cost=state.ledger.summary(),
        )

    # --- State helpers -------------------------------------------------------------------------------------------

    def _spawn(self, action: ActionState, work: Coroutine[Any, Any, None]) -> None:
        """Run an action's production work in the background, counted as busy until it ends (a dropped action's
        work never starts)."""
        owner = self._work[action.name]
        if owner.stopping:
            work.close()
            return
        owner.spawn(self._busy_with(work))

    async def _busy_with(self, work: Awaitable[T]) -> T:
        self._busy += 1
        try:
            return await work
        finally:
            self._busy -= 1
            self._publish()

    # --- Spending and events --------------------------------------------------------------------------------------

    async def _paid(self, token: int, work: Awaitable[Paid]) -> Paid | calls.Failed:
        """A generator call counted in flight (``token``, from :meth:`Spending.start`) until it ends, then in the
        ledger."""
        try:
            output = await calls.outcome(work)
        except BaseException:
            self._spending.stop(token, workflow.now())  # a dropped action, a cancelled set
            raise
        self._spending.record(token, None if isinstance(output, calls.Failed) else output, workflow.now())
        return output

    def _regeneration(self, role: GeneratorRole, action: ActionState, images: int = 0) -> Call:
        """A reviewer's generator call: new start frames or a frame edit of ``images`` candidates, or a new take."""
        seconds = self._state.input.clip_seconds if role is GeneratorRole.CLIP else 0.0
        return Call(role, action.name, CallCause.REGENERATION, images=images, video_seconds=seconds)

    def _require_budget(self, what: str, call: Call) -> None:
        """Refuse a reviewer's regeneration that would take the set past its budget (a validator)."""
        refusal = self._spending.refusal(what, call)
        if refusal is not None:
            raise ValueError(refusal)

    def _reserve_regeneration(self, call: Call) -> int:
        """Count a reviewer's regeneration in flight from its handler's first step: a message's validator and its
        handler up to its first ``await`` run as one step of the workflow, so the next message's validator already
        counts this one (regenerations sent together cannot pass a budget only one of them fits)."""
        return self._spending.start(call)

    def _announce(self, kind: EventType, message: str | None) -> None:
        """Send an event to the set's webhook, if it has one: a DeliverSetEvent workflow of its own posts it with
        retries, so a receiver that is down never holds the set up."""
        if not announcements.sends_events(self._state):
            return
        event = announcements.next_event(self._state, kind, message, workflow.now())
        self._deliveries.append(asyncio.create_task(self._start_delivery(self._state.input.webhook, event)))

    async def _start_delivery(self, webhook: Webhook | None, event: SetEvent) -> None:
        # Already started: this event's delivery began before (a reset set replaying its way here); once is enough.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await workflow.start_child_workflow(
                DELIVER_EVENT_WORKFLOW_TYPE,
                DeliverEventInput(webhook=webhook, event=event),
                id=f"{event.set_id}/event-{event.sequence}",
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"{event.type.value} of {event.set_id}",
            )

    async def _announce_end(self, kind: EventType, message: str | None) -> None:
        """Send the set's last event, and wait until every delivery of the set has started (not until delivered).

        A cancel from Temporal meanwhile comes too late to change how the set ended: the wait goes on."""
        self._announce(kind, message)
        while not all(delivery.done() for delivery in self._deliveries):
            with contextlib.suppress(asyncio.CancelledError):
                await workflow.wait_condition(lambda: all(delivery.done() for delivery in self._deliveries))

    def _character_ref(self) -> CharacterRef:
        character = self._state.character
        picked = character.picked()
        assert picked is not None  # settled before any action starts
        return CharacterRef(image=picked.image, prompt=self._state.input.character_prompt, candidate=picked.index)

    def _awaiting_start_frames(self) -> list[ActionState]:
        """The actions whose start frames await review (one being dropped awaits nothing)."""
        return [
            a
            for a in self._state.actions
            if a.stage is ActionStage.AWAITING_START_FRAME_REVIEW and a.name not in self._dropping
        ]

    def _settle(self, action: ActionState) -> None:
        """An action whose takes are all done: ready if it has frames, else it waits for a custom prompt."""
        if any(take.status in (TakeStatus.ANIMATING, TakeStatus.EXTRACTING) for take in action.takes):
            self._refresh(action)
            return
        if any(take.status is TakeStatus.READY for take in action.takes):
            action.stage, action.error = ActionStage.READY, None
        else:
            action.stage = ActionStage.WAITING_FOR_PROMPT
            errors = [take.error for take in action.takes if take.error]
            action.error = f"every take failed: {errors[-1] if errors else 'no clip'}"
        self._refresh(action)

    def _refresh(self, action: ActionState) -> None:
        """Re-run the action's auto-pick and recompute its slots' status."""
        picks = picking.auto_picks(action.frames)
        for frame in action.frames:
            if frame.index in picks:
                if frame.picked_by is not PickSource.HUMAN or frame.pick != picks[frame.index]:
                    frame.pick, frame.picked_by = picks[frame.index], PickSource.AUTO
                frame.status, frame.error = FrameStatus.READY, None
            elif any(c.status is CandidateStatus.MATTING for c in frame.candidates):
                frame.status = FrameStatus.MATTING
            elif frame.candidates:
                frame.pick = frame.picked_by = None
                frame.status = FrameStatus.FAILED
                errors = [c.error for c in frame.candidates if c.error]
                frame.error = frame.error or (errors[-1] if errors else "no usable candidate")
        self._restabilise(action)
        self._publish()

    # --- Temporal consistency ------------------------------------------------------------------------------------

    def _picks_digest(self, action: ActionState) -> str | None:
        """The digest of the emoji's current picks once they are settled (every take in, nothing being matted, a
        cut-out picked in every slot), for ``temporal`` other than ``none``; None otherwise."""
        mode = self._state.input.temporal
        if mode is TemporalMode.NONE or action.stage is not ActionStage.READY:
            return None
        if any(c.status is CandidateStatus.MATTING for frame in action.frames for c in frame.candidates):
            return None
        mattes = [picked.matte for picked in (frame.picked() for frame in action.frames) if picked is not None]
        if len(mattes) != len(action.frames) or any(matte is None for matte in mattes):
            return None
        return keys.picks_digest(mode.value, [matte.sha256 for matte in mattes if matte is not None])

    def _restabilise(self, action: ActionState) -> None:
        """Keep the emoji's stabilised cut-outs those of its current picks: stale ones are dropped at once (the
        reviewer never sees frames that will not be assembled), and settled new picks are stabilised."""
        digest = self._picks_digest(action)
        if digest == action.stabilised_for:
            return
        if action.stabilised_for is not None:
            action.stabilised_for = None
            for frame in action.frames:
                frame.stabilised = None
        if digest is None or (action.name, digest) in self._stabilising:
            return
        self._stabilising.add((action.name, digest))
        self._spawn(action, self._stabilise(action, digest))

    async def _stabilise(self, action: ActionState, digest: str) -> None:
        """Stabilise the emoji's picks (one GPU activity) and show the result, if the picks are still the same. A
        failure leaves the frames as matted, with a notice."""
        mode, set_id = self._state.input.temporal, self._state.set_id
        picks = [frame.picked() for frame in action.frames]
        request = StabiliseEmojiInput(
            mode=mode,
            sources=[picked.source for picked in picks if picked is not None],
            mattes=[picked.matte for picked in picks if picked is not None and picked.matte is not None],
            output_keys=[keys.stabilised_key(set_id, action.name, digest, frame.index) for frame in action.frames],
        )
        summary = f"stabilise {action.name}: {len(action.frames)} frames ({mode.value})"
        try:
            output = await calls.outcome(calls.stabilise_emoji(request, summary=summary))
        finally:
            self._stabilising.discard((action.name, digest))
        if not isinstance(output, calls.Failed) and output.gpu_seconds:
            self._spending.record_gpu(output.gpu_seconds)
        if isinstance(output, calls.Failed):
            if self._picks_digest(action) == digest:
                self._state.notice = (
                    f"{action.name} keeps its frames as matted: stabilising them failed: {output.reason}"
                )
            return
        if self._picks_digest(action) != digest:
            return  # the picks changed meanwhile: their own stabilisation is under way
        for frame, matte in zip(action.frames, output.mattes, strict=True):
            frame.stabilised = matte
        action.stabilised_for = digest
        self._publish()

    def _reserve(self, action: ActionState, frame: FrameState, count: int) -> int:
        """The first of ``count`` new candidate indices of a slot, counting work still running."""
        key = (action.name, frame.index)
        first = max(max((c.index + 1 for c in frame.candidates), default=0), self._reserved.get(key, 0))
        self._reserved[key] = first + count
        return first

    def _require_room(self, action: ActionState, new: int, *, per_slot: int, frame: FrameState | None = None) -> None:
        in_set = sum(len(f.candidates) for _, f in self._state.frames())
        if in_set + new > MAX_CANDIDATES_PER_SET:
            raise ValueError(f"the set would exceed {MAX_CANDIDATES_PER_SET} candidates")
        for slot in [frame] if frame is not None else action.frames:
            if len(slot.candidates) + per_slot > MAX_CANDIDATES_PER_FRAME_TOTAL:
                raise ValueError(
                    f"{action.name} frame {slot.index} would exceed {MAX_CANDIDATES_PER_FRAME_TOTAL} candidates"
                )

    def _finish(self, phase: Phase, reason: str | None) -> EmojiSetResult:
        self._state.ended_at, self._state.approval_pending_by = workflow.now(), None
        self._set_phase(phase)
        if phase is Phase.EXPIRED:
            self._state.notice = reason
        status = "cancelled" if phase is Phase.CANCELLED else "expired"
        return EmojiSetResult(
            set_id=self._state.set_id, status=status, reason=reason, cost=self._state.ledger.summary()
        )

    def _cancel_reason(self) -> str:
        reason = self._cancellation.reason if self._cancellation else ""
        self._state.cancel_reason = reason or "cancelled by request"
        self._state.cancelled_by = (self._cancellation.reviewer if self._cancellation else "") or None
        return self._state.cancel_reason

    def _require_open(self, what: str) -> None:
        if self._state.phase in CLOSED_PHASES:
            raise ValueError(f"the set is {self._state.phase.value}: {what} are closed")
        if self._approval is not None or self._cancellation is not None:
            raise ValueError(f"the set is being {'approved' if self._approval else 'cancelled'}: {what} are closed")

    def _require_action(self, name: str) -> ActionState:
        if name in self._dropping:
            raise ValueError(f"{name} is being dropped from the set")
        action = self._state.action(name)
        if action is None:
            raise ValueError(f"unknown emoji {name!r}; this set has {[a.name for a in self._state.actions]}")
        return action

    def _require_start_frame_review(self, name: str) -> ActionState:
        action = self._require_action(name)
        if action.stage is not ActionStage.AWAITING_START_FRAME_REVIEW:
            raise ValueError(f"{name}'s start frame does not await review ({name} is {action.stage.value})")
        return action

    def _require_frame(self, name: str, index: int) -> FrameState:
        action = self._require_action(name)
        if not 0 <= index < len(action.frames):
            raise ValueError(f"{name} has frames 0-{len(action.frames) - 1}, not {index}")
        return action.frames[index]

    def _require_refinable(self, name: str, index: int, number: int) -> Candidate:
        """The candidate, once it has a cut-out and no refinement of it is under way."""
        frame = self._require_frame(name, index)
        candidate = frame.candidate(number)
        if candidate is None:
            known = [c.index for c in frame.candidates]
            raise ValueError(f"{name} frame {index} has no candidate {number}; candidates: {known}")
        if candidate.status is not CandidateStatus.READY or candidate.matte is None:
            raise ValueError(
                f"{name} frame {index} candidate {number} is {candidate.status.value}, not matted yet: only a cut-out "
                "can be refined" + (f" ({candidate.error})" if candidate.error else "")
            )
        if (name, index, number) in self._refining:
            raise ValueError(f"{name} frame {index} candidate {number} is being refined already: wait for it")
        return candidate

    def _refinable_pick(self, action: ActionState, frame: FrameState) -> Candidate | None:
        """A later frame's pick, for a correction carried through the following frames: None when it has no
        cut-out or is being refined."""
        picked = frame.picked()
        if picked is None or picked.status is not CandidateStatus.READY or picked.matte is None:
            return None
        return None if (action.name, frame.index, picked.index) in self._refining else picked

    def _set_phase(self, phase: Phase) -> None:
        self._state.phase = phase
        self._publish()

    def _publish(self) -> None:
        """Show progress in the Web UI: current details always; search attributes when the phase or what the set
        awaits changes and at every twentieth of the frames, since each upsert is a history event and a
        visibility write."""
        state = self._state
        if state.phase in PRODUCTION_PHASES:
            state.phase = _production_phase(state)
        workflow.set_current_details(progress.details_markdown(state))
        waiting = announcements.waiting_for_prompt(state)
        for action in state.actions:
            if action.name in waiting - self._prompts_announced:
                self._announce(EventType.WAITING_FOR_PROMPT, f"{action.name} waits for a custom prompt: {action.error}")
        self._prompts_announced = waiting
        awaiting = state.awaiting()
        snapshot = (state.phase.value, tuple(awaiting), state.frames_done() * PROGRESS_STEPS // state.frames_total())
        if snapshot == self._published:
            return
        self._published = snapshot
        workflow.upsert_search_attributes(
            [
                sa.PHASE.value_set(state.phase.value),
                sa.FRAMES_DONE.value_set(state.frames_done()),
                sa.FRAMES_TOTAL.value_set(state.frames_total()),
                sa.OWNER.value_set(state.input.owner),
                sa.AWAITING.value_set(awaiting),
            ]
        )


def _initial_state(set_id: str, input: EmojiSetInput) -> EmojiSetState:
    return EmojiSetState(
        set_id=set_id,
        input=input,
        phase=Phase.CHARACTER,
        actions=[
            ActionState(action=spec, frames=[FrameState(index=i) for i in range(input.frames_per_emoji)])
            for spec in input.action_specs()
        ],
    )


def _production_phase(state: EmojiSetState) -> Phase:
    """The set's phase while its actions are produced: the earliest stage any action is at, a waiting start frame
    review first (a person is needed)."""
    stages = {action.stage for action in state.actions}
    if ActionStage.AWAITING_START_FRAME_REVIEW in stages:
        return Phase.AWAITING_START_FRAME_REVIEW
    if ActionStage.START_FRAME in stages:
        return Phase.START_FRAMES
    if ActionStage.ANIMATING in stages:
        return Phase.ANIMATING
    return Phase.MATTING


def _failure(error: BaseException, phase: Phase) -> SetFailure:
    """The set's failure as a person reads it: the innermost cause's message, the activity and the failure type
    (FailureType) on the way to it."""
    activity = kind = None
    cause: BaseException | None = error
    while cause is not None:
        error = cause
        if isinstance(cause, ActivityError):
            activity = cause.activity_type
        if isinstance(cause, ApplicationError) and cause.type and kind is None:
            kind = cause.type  # the outermost: the set's own failure type, not the Python error it wraps
        cause = cause.__cause__
    message = error.message if isinstance(error, FailureError) else str(error)
    return SetFailure(message=message or type(error).__name__, phase=phase, activity=activity, kind=kind)


def _refuse_configuration(failed: calls.Failed) -> NoReturn:
    """Fail the set for a check that refused its request (or the deployment's own configuration)."""
    kind = failed.kind if failed.kind is FailureType.DEPLOYMENT_MISCONFIGURED else FailureType.INVALID_REQUEST
    raise kind.error(failed.reason) from failed.error


def _title(state: EmojiSetState) -> str:
    return state.input.character_prompt or "uploaded character"


def _picked_matte(frame: FrameState) -> ArtifactRef:
    """What is assembled for a slot: its pick's stabilised cut-out when the set asked for one, else the pick's own."""
    matte = frame.assembled()
    assert matte is not None  # approval requires a usable pick on every frame
    return matte
