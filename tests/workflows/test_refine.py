"""Refining cut-outs with clicks (``refine_frame``, ``undo_refine``) against the real dev server, with both real
workers: new versions and back, the correction carried through the following frames, and the refusals."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from temporalio import workflow
from typer.testing import CliRunner

from gpu_activity_worker.matting import decode_rgba
from starter import cli
from starter.client import MessageRejected, SetClosed
from testkit.stack import Stack
from tests.workflows.test_bad_input import SOURCE, a_set, candidates, validate
from tests.workflows.test_emoji_set import start_and_review
from workflows.contract import (
    MAX_MATTE_VERSIONS,
    ArtifactRef,
    Candidate,
    CandidateStatus,
    EmojiSetState,
    FrameState,
    MatteVersion,
    Phase,
    PickSource,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    TemporalMode,
    UndoRefineInput,
)
from workflows.emoji_set import EmojiSetWorkflow


def _alpha(stack: Stack, matte: ArtifactRef | None) -> np.ndarray:
    assert matte is not None
    return decode_rgba(stack.store.get(matte), matte.uri)[..., 3]


def _opaque_point(stack: Stack, candidate: Candidate) -> RefinePoint:
    """A pixel deep inside the candidate's cut-out."""
    alpha = _alpha(stack, candidate.matte)
    y, x = np.unravel_index(int(np.argmax(alpha)), alpha.shape)
    return RefinePoint(x=int(x), y=int(y))


def _picked(frame: FrameState) -> Candidate:
    picked = frame.picked()
    assert picked is not None and picked.matte is not None
    return picked


async def test_refine_then_undo_changes_the_cut_out_and_back(stack: Stack, set_id: str) -> None:
    # Unstabilised, so that the refined cut-out itself is assembled.
    state = await start_and_review(stack, set_id, actions=["wave"], temporal=TemporalMode.NONE)
    frame = state.actions[0].frames[1]
    other = next(c for c in frame.candidates if c.index != frame.pick)
    before = other.model_copy()
    point = _opaque_point(stack, other)

    refined = await stack.sets.refine_frame(
        RefineFrameInput(emoji="wave", frame=1, candidate=other.index, points=[point], mode=RefineMode.ERASE),
        set_id=set_id,
    )

    candidate = refined.candidate(other.index)
    assert candidate is not None and candidate.matte is not None and before.matte is not None
    assert candidate.matte.uri.endswith(f"candidate-{other.index:02d}.matte.v2.png")
    assert candidate.versions[0].matte == before.matte and candidate.versions[0].score == before.score
    assert candidate.refinements == 1
    assert (refined.pick, refined.picked_by) == (other.index, PickSource.HUMAN), "a refined candidate is the pick"
    assert _alpha(stack, candidate.matte)[point.y, point.x] == 0
    assert _alpha(stack, before.matte)[point.y, point.x] > 0, "the earlier version stays in the store"

    undone = await stack.sets.undo_refine(UndoRefineInput(emoji="wave", frame=1, candidate=other.index), set_id=set_id)

    back = undone.candidate(other.index)
    assert back is not None and (back.matte, back.score, back.versions) == (before.matte, before.score, [])
    assert undone.pick == other.index and undone.picked_by is PickSource.HUMAN
    with pytest.raises(MessageRejected, match=f"wave frame 1 candidate {other.index} has no refinement to undo"):
        await stack.sets.undo_refine(UndoRefineInput(emoji="wave", frame=1, candidate=other.index), set_id=set_id)

    again = await stack.sets.refine_frame(
        RefineFrameInput(emoji="wave", frame=1, candidate=other.index, points=[point], mode=RefineMode.RESTORE),
        set_id=set_id,
    )
    candidate = again.candidate(other.index)
    assert candidate is not None and candidate.matte is not None
    assert candidate.matte.uri.endswith(".matte.v3.png"), "an undone version's key is never reused"
    await stack.sets.approve(set_id)
    result = await stack.sets.result(set_id)
    assert result.emojis[0].frames[1] == candidate.matte, "the refined cut-out is assembled"


async def test_following_carries_the_correction_through_the_later_frames(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["wave"])
    frames = state.actions[0].frames
    picks = [_picked(frame) for frame in frames]
    point = _opaque_point(stack, picks[1])

    refined = await stack.sets.refine_frame(
        RefineFrameInput(
            emoji="wave", frame=1, candidate=picks[1].index, points=[point], mode=RefineMode.ERASE, following=True
        ),
        set_id=set_id,
    )

    assert refined.pick == picks[1].index
    after = (await stack.sets.state(set_id)).actions[0].frames
    assert _picked(after[0]).matte == picks[0].matte, "an earlier frame is left alone"
    for frame, pick in zip(after[1:], picks[1:], strict=True):
        now = _picked(frame)
        assert now.index == pick.index and frame.picked_by is PickSource.HUMAN
        assert now.matte is not None and now.matte.uri.endswith(".matte.v2.png")
        assert [v.matte for v in now.versions] == [pick.matte]
    history = await stack.client.get_workflow_handle(set_id).fetch_history()
    summaries = [
        event.user_metadata.summary.data.decode()
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == "refine_matte"
    ]
    assert summaries == [f'"refine wave frame 1 candidate {picks[1].index}: erase, 1 point, 2 following frames"']

    undone = await stack.sets.undo_refine(
        UndoRefineInput(emoji="wave", frame=1, candidate=picks[1].index, following=True), set_id=set_id
    )
    assert _picked(undone).matte == picks[1].matte
    final = (await stack.sets.state(set_id)).actions[0].frames
    assert [_picked(frame).matte for frame in final] == [pick.matte for pick in picks]
    await stack.sets.cancel(set_id)


async def test_refinements_that_do_not_fit_are_refused(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["wave"])
    frame = state.actions[0].frames[0]
    pick = _picked(frame)
    assert pick.matte is not None and (pick.matte.width, pick.matte.height) == (96, 96)
    inside = RefinePoint(x=10, y=10)

    def refine(**fields: object) -> RefineFrameInput:
        return RefineFrameInput(
            **{"emoji": "wave", "frame": 0, "candidate": pick.index, "points": [inside], "mode": "erase", **fields}
        )

    for request, message in [
        (refine(points=[inside, RefinePoint(x=96, y=3)]), "points outside the 96x96 frame: (96, 3) (x from 0 to 95"),
        (refine(candidate=17), "wave frame 0 has no candidate 17; candidates: ["),
        (refine(emoji="cry"), "unknown emoji 'cry'"),
        (refine(frame=4), "wave has frames 0-3, not 4"),
    ]:
        with pytest.raises(MessageRejected, match=re.escape(message)):
            await stack.sets.refine_frame(request, set_id=set_id)
    with pytest.raises(ValueError, match="at least one point must be on the region"):
        refine(points=[RefinePoint(x=1, y=1, foreground=False)])
    with pytest.raises(ValueError, match="at most 32 items"):
        refine(points=[inside] * 33)
    with pytest.raises(MessageRejected, match=f"wave frame 0 candidate {pick.index} has no refinement to undo"):
        await stack.sets.undo_refine(UndoRefineInput(emoji="wave", frame=0, candidate=pick.index), set_id=set_id)
    assert (await stack.sets.state(set_id)).actions[0].frames[0] == frame, "nothing changed"

    await stack.sets.approve(set_id)
    await stack.sets.result(set_id)
    with pytest.raises(SetClosed, match="the set has ended"):
        await stack.sets.refine_frame(refine(), set_id=set_id)
    with pytest.raises(SetClosed, match="the set has ended"):
        await stack.sets.undo_refine(UndoRefineInput(emoji="wave", frame=0, candidate=pick.index), set_id=set_id)


async def test_the_undo_history_keeps_the_matting_s_own_cut_out(stack: Stack, set_id: str) -> None:
    state = await start_and_review(stack, set_id, actions=["nod"], frames_per_emoji=2)
    pick = _picked(state.actions[0].frames[0])
    request = RefineFrameInput(
        emoji="nod", frame=0, candidate=pick.index, points=[RefinePoint(x=1, y=1)], mode=RefineMode.RESTORE
    )
    for _ in range(MAX_MATTE_VERSIONS + 1):
        frame = await stack.sets.refine_frame(request, set_id=set_id)

    candidate = frame.candidate(pick.index)
    assert candidate is not None and candidate.refinements == MAX_MATTE_VERSIONS + 1
    assert len(candidate.versions) == MAX_MATTE_VERSIONS and candidate.versions[0].matte == pick.matte
    assert [v.matte.uri.rsplit(".", 2)[-2] for v in candidate.versions[1:]] == ["v3", "v4", "v5", "v6", "v7"]
    await stack.sets.cancel(set_id)


# --- Validators in states a live set reaches only by chance ----------------------------------------------------------


def _matted(state: EmojiSetState, **matte: Any) -> Candidate:
    candidate = candidates(1, matte=SOURCE.model_copy(update={"width": 64, "height": 48, **matte}))[0]
    state.actions[0].frames[0].candidates = [candidate, *candidates(1, CandidateStatus.MATTING)]
    state.actions[0].frames[0].candidates[1].index = 1
    return candidate


def test_a_candidate_not_matted_or_without_its_size_is_not_refined() -> None:
    state = a_set()
    _matted(state, width=None)
    refine = RefineFrameInput(emoji="wave", frame=0, candidate=0, points=[RefinePoint(x=1, y=1)], mode="erase")
    with pytest.raises(ValueError, match=re.escape("wave frame 0 candidate 0's cut-out has no recorded size")):
        validate(state, "refine_frame", refine)
    message = "wave frame 0 candidate 1 is matting, not matted yet: only a cut-out can be refined"
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "refine_frame", refine.model_copy(update={"candidate": 1}))
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(state, "undo_refine", UndoRefineInput(emoji="wave", frame=0, candidate=1))


def test_points_are_checked_against_the_cut_out_s_size() -> None:
    state = a_set()
    _matted(state)
    points = [RefinePoint(x=63, y=47), RefinePoint(x=10, y=48), RefinePoint(x=64, y=0, foreground=False)]
    refine = RefineFrameInput(emoji="wave", frame=0, candidate=0, points=points, mode="restore")
    with pytest.raises(ValueError, match=re.escape("points outside the 64x48 frame: (10, 48), (64, 0)")):
        validate(state, "refine_frame", refine)
    validate(state, "refine_frame", refine.model_copy(update={"points": points[:1]}))


def test_a_candidate_being_refined_and_a_set_being_assembled_refuse_refinements() -> None:
    state = a_set()
    _matted(state).versions = [MatteVersion(matte=SOURCE)]
    refine = RefineFrameInput(emoji="wave", frame=0, candidate=0, points=[RefinePoint(x=1, y=1)], mode="erase")
    undo = UndoRefineInput(emoji="wave", frame=0, candidate=0)
    running = EmojiSetWorkflow(state.input, state)
    running._refining.add(("wave", 0, 0))
    definition = workflow._Definition.must_from_class(EmojiSetWorkflow)
    for update, request in (("refine_frame", refine), ("undo_refine", undo)):
        validator = definition.updates[update].validator
        assert validator is not None
        with pytest.raises(ValueError, match=re.escape("wave frame 0 candidate 0 is being refined already")):
            validator(running, request)
        validate(state, update, request)  # fine once it is done
        assembling = state.model_copy(update={"phase": Phase.ASSEMBLING})
        with pytest.raises(ValueError, match=re.escape("the set is assembling: refinements are closed")):
            validate(assembling, update, request)


class _RecordingClient:
    """Stands in for the client behind ``popcon refine`` / ``popcon undo-refine``: records the requests."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def refine_frame(self, request: RefineFrameInput, *, set_id: str) -> FrameState:
        self.requests.append(request)
        return _slot(request.candidate)

    async def undo_refine(self, request: UndoRefineInput, *, set_id: str) -> FrameState:
        self.requests.append(request)
        return _slot(request.candidate)


def _slot(candidate: int) -> FrameState:
    matted = candidates(1, matte=SOURCE, score=0.5, versions=[MatteVersion(matte=SOURCE)])[0]
    return FrameState(index=3, candidates=[matted.model_copy(update={"index": candidate})], pick=candidate)


def test_the_cli_refines_and_undoes_with_points_as_x_y_or_x_y_bg(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = _RecordingClient()

    async def offline() -> _RecordingClient:
        return recording

    monkeypatch.setattr(cli, "_client", offline)
    runner = CliRunner()
    refined = runner.invoke(
        cli.app,
        ["refine", "set-1", "wave", "3", "1", "--mode", "erase", "--point", "4,5", "--point", "6, 7,bg", "--following"],
    )
    assert refined.exit_code == 0, refined.output
    assert "wave frame 3: candidate 1 picked, 1 earlier version(s), score 0.50" in refined.output
    assert recording.requests == [
        RefineFrameInput(
            emoji="wave",
            frame=3,
            candidate=1,
            points=[RefinePoint(x=4, y=5), RefinePoint(x=6, y=7, foreground=False)],
            mode=RefineMode.ERASE,
            following=True,
        )
    ]
    undone = runner.invoke(cli.app, ["undo-refine", "set-1", "wave", "3", "1"])
    assert undone.exit_code == 0 and recording.requests[-1] == UndoRefineInput(emoji="wave", frame=3, candidate=1)

    bad_point = runner.invoke(cli.app, ["refine", "s", "wave", "3", "1", "--mode", "erase", "--point", "4,5,fg"])
    assert bad_point.exit_code == 2 and "a point is 'x,y' or 'x,y,bg'" in bad_point.output
    background = runner.invoke(cli.app, ["refine", "s", "wave", "3", "1", "--mode", "restore", "--point", "4,5,bg"])
    assert background.exit_code == 1 and "at least one point must be on the region" in background.output
