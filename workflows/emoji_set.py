"""The EmojiSet workflow: generate, matte, review, assemble.

A set is one animated emoji per pose preset. The workflow generates ``candidates_per_frame`` images for every frame
(CPU queue), mattes every candidate on the GPU queue with at most ``max_parallel_matting`` in flight, auto-picks the
best cut-out per frame, then waits for people: they pick candidates, regenerate frames with custom prompts, approve or
cancel, and a deadline ends a forgotten review. Approved sets are assembled into stickers and sheets.

Deterministic and light: no I/O, no image libraries; GPU activities are called by name.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows import keys, progress
    from workflows import search_attributes as sa
    from workflows.contract import (
        GPU_TASK_QUEUE,
        MAX_CANDIDATES_PER_FRAME_TOTAL,
        MAX_CANDIDATES_PER_SET,
        NON_RETRYABLE_FAILURES,
        WORKFLOW_TYPE,
        ActivityName,
        ApproveInput,
        ArtifactRef,
        AssembleEmojiInput,
        CancelInput,
        Candidate,
        CandidateStatus,
        CheckExportsInput,
        CheckGeneratorInput,
        ContactSheetInput,
        DeadlinePolicy,
        DescribePipelineInput,
        EmojiFramesRef,
        EmojiOutput,
        EmojiSetInput,
        EmojiSetResult,
        EmojiSetState,
        EmojiState,
        ExportTarget,
        FailureType,
        FrameState,
        FrameStatus,
        GenerateFrameInput,
        GenerateFrameOutput,
        MatteFrameInput,
        MatteFrameOutput,
        Phase,
        PickCandidateInput,
        PickSource,
        PipelineDescription,
        RegenerateFrameInput,
        RegenerateFrameResult,
    )
    from workflows.exports import export_packages, failure_reason
    from workflows.presets import PRESETS

NON_RETRYABLE = sorted(failure.value for failure in NON_RETRYABLE_FAILURES)
"""Listed in every retry policy: workers raise these non-retryable already; the list also covers an activity that
reports one of these types without the flag."""
GENERATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=6,
    non_retryable_error_types=NON_RETRYABLE,
)
MATTE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=NON_RETRYABLE,
)
ASSEMBLE_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE)
CHECK_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE)

PROGRESS_STEPS = 20
"""How many times the EmojiSetFramesDone search attribute is updated while the frames get done."""

TERMINAL_PHASES = (Phase.ASSEMBLING, Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED)


@workflow.defn(name=WORKFLOW_TYPE, failure_exception_types=[pydantic.ValidationError])
class EmojiSetWorkflow:
    """One emoji set from prompt to exported stickers. The set id is the workflow id."""

    @workflow.init
    def __init__(self, input: EmojiSetInput, resume: EmojiSetState | None = None) -> None:
        # A start carries one payload for two parameters, so the SDK cannot apply the type hints and passes the raw
        # JSON: validate it here. An invalid input raises ValidationError, which fails the set with its message.
        input = EmojiSetInput.model_validate(input)
        resume = None if resume is None else EmojiSetState.model_validate(resume)
        self._state = resume or _initial_state(workflow.info().workflow_id, input)
        self._approval: ApproveInput | None = None
        self._cancellation: CancelInput | None = None
        self._regenerations_in_flight = 0
        self._matting_slots = asyncio.Semaphore(input.max_parallel_matting)
        self._next_candidate: dict[tuple[str, int], int] = {}
        self._published: tuple[str, int] | None = None

    @workflow.run
    async def run(self, input: EmojiSetInput, resume: EmojiSetState | None = None) -> EmojiSetResult:
        """Run the set to its end: completed, cancelled or expired."""
        try:
            if resume is None:
                self._publish()
                production = asyncio.create_task(self._produce())
                await workflow.wait_condition(lambda: production.done() or self._cancellation is not None)
                if not production.done():
                    production.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ActivityError):  # activities cancelled
                        await production
                    return self._finish(Phase.CANCELLED, self._cancel_reason())
                await production
            review_end = await self._review()
            if review_end is not Phase.ASSEMBLING:
                return self._finish(review_end, self._state.cancel_reason or self._state.notice)
            return await self._assemble()
        except asyncio.CancelledError:
            self._set_phase(Phase.CANCELLED)
            raise

    # --- Messages ------------------------------------------------------------------------------------------------

    @workflow.query(description="The set's phase, every frame's candidates (references, scores) and the picks.")
    def get_state(self) -> EmojiSetState:
        """Phase, every frame's candidates with references and scores, and the picks."""
        return self._state

    @workflow.update(description='Use a candidate by hand: {"emoji": "wave", "frame": 3, "candidate": 1}.')
    async def pick_candidate(self, pick: PickCandidateInput) -> FrameState:
        """Use a candidate of a frame by hand; returns the frame."""
        frame = self._require_frame(pick.emoji, pick.frame)
        frame.pick, frame.picked_by = pick.candidate, PickSource.HUMAN
        self._state.notice = None
        self._refresh(frame)
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

    @workflow.update(
        unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON,
        description='New candidates from a custom prompt: {"emoji": "wave", "frame": 3, "prompt": "..."}; '
        "omit frame for the whole emoji.",
    )
    async def regenerate_frame(self, request: RegenerateFrameInput) -> RegenerateFrameResult:
        """Generate and matte new candidates from a custom prompt, for one frame or a whole emoji.

        Runs while the set stays reviewable; an approval waits for running regenerations to finish, a cancellation
        abandons them.
        """
        emoji = self._state.emoji(request.emoji)
        assert emoji is not None  # checked by the validator
        frames = emoji.frames if request.frame is None else [emoji.frames[request.frame]]
        count = request.candidates or self._state.input.candidates_per_frame
        self._regenerations_in_flight += 1
        try:
            await asyncio.gather(
                *(self._produce_frame(emoji, frame, count, request.prompt, regeneration=True) for frame in frames)
            )
        finally:
            self._regenerations_in_flight -= 1
            self._publish()
        return RegenerateFrameResult(frames=frames)

    @regenerate_frame.validator
    def _validate_regenerate(self, request: RegenerateFrameInput) -> None:
        self._require_open("regenerations")
        if self._state.phase is not Phase.AWAITING_REVIEW:
            raise ValueError(f"the set is still {self._state.phase.value}; regenerate frames once it awaits review")
        emoji = self._state.emoji(request.emoji)
        if emoji is None:
            raise ValueError(f"unknown emoji {request.emoji!r}; this set has {[e.pose for e in self._state.emojis]}")
        frames = emoji.frames if request.frame is None else [self._require_frame(request.emoji, request.frame)]
        count = request.candidates or self._state.input.candidates_per_frame
        in_set = sum(self._reserved(e.pose, f) for e, f in self._state.frames())
        if in_set + count * len(frames) > MAX_CANDIDATES_PER_SET:
            raise ValueError(f"the set would exceed {MAX_CANDIDATES_PER_SET} candidates")
        for frame in frames:
            if self._reserved(emoji.pose, frame) + count > MAX_CANDIDATES_PER_FRAME_TOTAL:
                raise ValueError(
                    f"{emoji.pose} frame {frame.index} would exceed {MAX_CANDIDATES_PER_FRAME_TOTAL} candidates"
                )

    @workflow.signal(description='Assemble the set with the current picks: {"reviewer": "ana"}.')
    def approve(self, approval: ApproveInput) -> None:
        """Assemble the set with the current picks (refused while a frame has no usable candidate)."""
        self._approval = approval

    @workflow.signal(description='Stop the set, nothing is assembled: {"reason": "..."}.')
    def cancel(self, cancellation: CancelInput) -> None:
        """Stop the set; nothing is assembled."""
        self._cancellation = cancellation

    # --- Production: generate and matte --------------------------------------------------------------------------

    async def _produce(self) -> None:
        await self._check_configuration()
        self._set_phase(Phase.GENERATING)
        count = self._state.input.candidates_per_frame
        generated = await asyncio.gather(
            *(self._generate(emoji, frame, count, prompt=None) for emoji, frame in self._state.frames())
        )
        self._set_phase(Phase.MATTING)
        await asyncio.gather(
            *(
                self._matte_candidates(emoji, frame, candidates)
                for (emoji, frame), candidates in zip(self._state.frames(), generated, strict=True)
            )
        )

    async def _check_configuration(self) -> None:
        """Fail fast on an unknown generator or matting pipeline, asked where they live, before any work; note the
        platform targets that will not take a set of this size (LINE emoji: 8 to 40)."""
        input = self._state.input
        try:
            description, _, refusals = await asyncio.gather(
                workflow.execute_activity(
                    ActivityName.DESCRIBE_PIPELINE,
                    DescribePipelineInput(pipeline=input.matting_pipeline),
                    task_queue=GPU_TASK_QUEUE,
                    result_type=PipelineDescription,
                    start_to_close_timeout=timedelta(minutes=10),
                    retry_policy=CHECK_RETRY,
                    summary=f"check matting pipeline {input.matting_pipeline}",
                ),
                workflow.execute_activity(
                    ActivityName.CHECK_GENERATOR,
                    CheckGeneratorInput(generator=input.generator),
                    start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=CHECK_RETRY,
                    summary=f"check generator {input.generator}",
                ),
                workflow.execute_activity(
                    ActivityName.CHECK_EXPORTS,
                    CheckExportsInput(targets=input.export_targets, emojis=len(input.poses)),
                    result_type=list[str],
                    start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=CHECK_RETRY,
                    summary=f"check export targets {', '.join(input.export_targets)}",
                ),
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            raise FailureType.INVALID_REQUEST.error(failure_reason(err)) from err
        self._state.pipeline_info = f"{description.pipeline} on {description.device} ({description.precision})"
        self._state.export_refusals = refusals

    async def _produce_frame(
        self, emoji: EmojiState, frame: FrameState, count: int, prompt: str, *, regeneration: bool
    ) -> None:
        new = await self._generate(emoji, frame, count, prompt)
        if regeneration:
            frame.regenerations += 1
        await self._matte_candidates(emoji, frame, new, prefer_new=regeneration)

    async def _generate(self, emoji: EmojiState, frame: FrameState, count: int, prompt: str | None) -> list[Candidate]:
        """Generate ``count`` new candidates for a frame; on failure for good, record it on the frame."""
        input = self._state.input
        preset = PRESETS[emoji.pose]
        key = (emoji.pose, frame.index)
        first = self._reserved(emoji.pose, frame)
        self._next_candidate[key] = first + count
        full_prompt = f"{input.character_prompt}, {prompt or preset.prompt}"
        if frame.status is not FrameStatus.READY:
            frame.status = FrameStatus.GENERATING
        self._publish()
        try:
            output = await workflow.execute_activity(
                ActivityName.GENERATE_FRAME,
                GenerateFrameInput(
                    set_id=self._state.set_id,
                    pose=preset,
                    character_prompt=input.character_prompt,
                    style=input.style,
                    prompt=full_prompt,
                    frame=frame.index,
                    frame_count=input.frames_per_emoji,
                    first_candidate=first,
                    count=count,
                    generator=input.generator,
                    image_size=input.image_size,
                    seed=input.seed,
                ),
                result_type=GenerateFrameOutput,
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(minutes=2),
                retry_policy=GENERATE_RETRY,
                summary=f"generate {emoji.pose} frame {frame.index} candidates {first}-{first + count - 1}",
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            frame.error = f"generation failed: {failure_reason(err)}"
            self._refresh(frame)
            return []
        new = [Candidate(index=c.index, prompt=prompt, source=c.image) for c in output.candidates]
        frame.candidates = sorted([*frame.candidates, *new], key=lambda c: c.index)
        frame.error = None
        return new

    async def _matte_candidates(
        self, emoji: EmojiState, frame: FrameState, candidates: list[Candidate], *, prefer_new: bool = False
    ) -> None:
        if not candidates:
            return
        if frame.status is not FrameStatus.READY:
            frame.status = FrameStatus.MATTING
        await asyncio.gather(*(self._matte(emoji, frame, candidate) for candidate in candidates))
        ready = [c for c in candidates if c.status is CandidateStatus.READY]
        if ready and frame.picked_by is not PickSource.HUMAN:
            frame.pick, frame.picked_by = _best(ready if prefer_new else frame.usable()).index, PickSource.AUTO
        self._refresh(frame)

    async def _matte(self, emoji: EmojiState, frame: FrameState, candidate: Candidate) -> None:
        async with self._matting_slots:
            try:
                output = await workflow.execute_activity(
                    ActivityName.MATTE_FRAME,
                    MatteFrameInput(
                        source=candidate.source,
                        output_key=keys.candidate_key(
                            self._state.set_id, emoji.pose, frame.index, candidate.index, "matte.png"
                        ),
                        pipeline=self._state.input.matting_pipeline,
                    ),
                    task_queue=GPU_TASK_QUEUE,
                    result_type=MatteFrameOutput,
                    start_to_close_timeout=timedelta(minutes=10),
                    heartbeat_timeout=timedelta(minutes=1),
                    retry_policy=MATTE_RETRY,
                    summary=f"matte {emoji.pose} frame {frame.index} candidate {candidate.index}",
                )
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    raise
                candidate.status, candidate.error = CandidateStatus.FAILED, f"matting failed: {failure_reason(err)}"
                return
        candidate.status, candidate.matte, candidate.score = CandidateStatus.READY, output.matte, output.score
        self._publish()

    # --- Review --------------------------------------------------------------------------------------------------

    async def _review(self) -> Phase:
        """Wait for a decision; returns ASSEMBLING (approved), CANCELLED or EXPIRED."""
        state = self._state
        if state.review_deadline is None:
            state.review_deadline = workflow.now() + state.input.review.deadline
        self._set_phase(Phase.AWAITING_REVIEW)
        while True:
            remaining = (state.review_deadline - workflow.now()).total_seconds()
            try:
                await workflow.wait_condition(
                    lambda: (
                        self._cancellation is not None
                        or (self._approval is not None and self._regenerations_in_flight == 0)
                        or workflow.info().is_continue_as_new_suggested()
                    ),
                    timeout=max(remaining, 0.001),
                    timeout_summary="review deadline",
                )
            except TimeoutError:
                await workflow.wait_condition(lambda: self._regenerations_in_flight == 0)
                return self._on_deadline()
            if self._cancellation is not None:
                state.cancel_reason = self._cancel_reason()
                return Phase.CANCELLED
            if self._approval is not None:
                approval, self._approval = self._approval, None
                unusable = state.unusable_frames()
                if not unusable:
                    state.approved_by, state.notice = approval.reviewer or "reviewer", None
                    return Phase.ASSEMBLING
                state.notice = f"approval refused: no usable candidate for {', '.join(unusable)}"
                workflow.logger.warning(state.notice)
                self._publish()
                continue
            await workflow.wait_condition(workflow.all_handlers_finished)
            state.runs += 1
            workflow.continue_as_new(args=[state.input, state])

    def _on_deadline(self) -> Phase:
        state = self._state
        if state.input.review.on_deadline is DeadlinePolicy.AUTO_APPROVE:
            unusable = state.unusable_frames()
            if not unusable:
                state.approved_by, state.notice = "review deadline (auto-approve)", None
                return Phase.ASSEMBLING
            state.notice = f"review deadline passed; cannot auto-approve, no usable candidate for {', '.join(unusable)}"
        else:
            state.notice = "review deadline passed without approval"
        return Phase.EXPIRED

    # --- Assembly ------------------------------------------------------------------------------------------------

    async def _assemble(self) -> EmojiSetResult:
        self._set_phase(Phase.ASSEMBLING)
        state = self._state
        rows = [(emoji.pose, [_picked_matte(frame) for frame in emoji.frames]) for emoji in state.emojis]
        sheet_task = workflow.execute_activity(
            ActivityName.ASSEMBLE_CONTACT_SHEET,
            ContactSheetInput(set_id=state.set_id, title=state.input.character_prompt, rows=rows),
            result_type=ArtifactRef,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=ASSEMBLE_RETRY,
            summary="assemble contact sheet",
        )
        emoji_tasks = [
            workflow.execute_activity(
                ActivityName.ASSEMBLE_EMOJI,
                AssembleEmojiInput(
                    set_id=state.set_id,
                    pose=pose,
                    frames=frames,
                    frame_duration_ms=PRESETS[pose].frame_duration_ms,
                ),
                result_type=EmojiOutput,
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=ASSEMBLE_RETRY,
                summary=f"assemble {pose}",
            )
            for pose, frames in rows
        ]
        if ExportTarget.GENERIC not in state.input.export_targets:
            emoji_tasks = []
        approved = [
            EmojiFramesRef(pose=pose, frames=frames, frame_duration_ms=PRESETS[pose].frame_duration_ms)
            for pose, frames in rows
        ]
        packages_task = export_packages(state.set_id, state.input.export_targets, approved)
        sheet, packages, *emojis = await asyncio.gather(sheet_task, packages_task, *emoji_tasks)
        self._set_phase(Phase.COMPLETED)
        return EmojiSetResult(
            set_id=state.set_id,
            status="completed",
            approved_by=state.approved_by,
            emojis=emojis,
            contact_sheet=sheet,
            packages=packages,
        )

    # --- State helpers -------------------------------------------------------------------------------------------

    def _finish(self, phase: Phase, reason: str | None) -> EmojiSetResult:
        self._set_phase(phase)
        status = "cancelled" if phase is Phase.CANCELLED else "expired"
        return EmojiSetResult(set_id=self._state.set_id, status=status, reason=reason)

    def _cancel_reason(self) -> str:
        reason = self._cancellation.reason if self._cancellation else ""
        self._state.cancel_reason = reason or "cancelled by request"
        return self._state.cancel_reason

    def _require_open(self, what: str) -> None:
        if self._state.phase in TERMINAL_PHASES:
            raise ValueError(f"the set is {self._state.phase.value}: {what} are closed")
        if self._approval is not None or self._cancellation is not None:
            raise ValueError(f"the set is being {'approved' if self._approval else 'cancelled'}: {what} are closed")

    def _require_frame(self, pose: str, index: int) -> FrameState:
        emoji = self._state.emoji(pose)
        if emoji is None:
            raise ValueError(f"unknown emoji {pose!r}; this set has {[e.pose for e in self._state.emojis]}")
        if not 0 <= index < len(emoji.frames):
            raise ValueError(f"{pose} has frames 0-{len(emoji.frames) - 1}, not {index}")
        return emoji.frames[index]

    def _reserved(self, pose: str, frame: FrameState) -> int:
        """The next free candidate index of a frame, counting generations still running."""
        existing = max((c.index + 1 for c in frame.candidates), default=0)
        return max(existing, self._next_candidate.get((pose, frame.index), 0))

    def _refresh(self, frame: FrameState) -> None:
        """Recompute a frame's status from its candidates."""
        if frame.usable():
            picked = frame.picked()
            if picked is None or picked.status is not CandidateStatus.READY:
                frame.pick, frame.picked_by = _best(frame.usable()).index, PickSource.AUTO
            frame.status = FrameStatus.READY
        else:
            frame.pick = frame.picked_by = None
            frame.status = FrameStatus.FAILED
            if frame.error is None:
                errors = [c.error for c in frame.candidates if c.error]
                frame.error = errors[-1] if errors else "no usable candidate"
        self._publish()

    def _set_phase(self, phase: Phase) -> None:
        self._state.phase = phase
        self._publish()

    def _publish(self) -> None:
        """Show progress in the Web UI: current details always; search attributes when the phase changes and at
        every twentieth of the frames, since each upsert is a history event and a visibility write."""
        state = self._state
        workflow.set_current_details(progress.details_markdown(state))
        snapshot = (state.phase.value, state.frames_done() * PROGRESS_STEPS // state.frames_total())
        if snapshot == self._published:
            return
        self._published = snapshot
        workflow.upsert_search_attributes(
            [
                sa.PHASE.value_set(state.phase.value),
                sa.FRAMES_DONE.value_set(state.frames_done()),
                sa.FRAMES_TOTAL.value_set(state.frames_total()),
                sa.OWNER.value_set(state.input.owner),
            ]
        )


def _initial_state(set_id: str, input: EmojiSetInput) -> EmojiSetState:
    return EmojiSetState(
        set_id=set_id,
        input=input,
        phase=Phase.GENERATING,
        emojis=[
            EmojiState(pose=pose, frames=[FrameState(index=i) for i in range(input.frames_per_emoji)])
            for pose in input.poses
        ],
    )


def _best(candidates: list[Candidate]) -> Candidate:
    """The auto-pick: highest matting score, the earliest candidate on a tie."""
    return max(candidates, key=lambda c: (c.score or 0.0, -c.index))


def _picked_matte(frame: FrameState) -> ArtifactRef:
    picked = frame.picked()
    assert picked is not None and picked.matte is not None  # approval requires a usable pick on every frame
    return picked.matte
