"""Refine: one frame's cut-out beside its source, corrected by points (erase or restore), and undone.

The page is HTML; the corrections are JSON posts from its script, answered with JSON (the new cut-out's address and
its versions, or the error).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from PIL import Image
from pydantic import ValidationError

from starter.client import EmojiSetError, SetNotFound
from starter.review import images
from starter.review.dependencies import Review, ReviewDep
from starter.review.fields import BadInput, problem
from starter.review.limits import InputRefused, is_number, parse_json
from starter.review.views import image_url
from workflows.contract import (
    Candidate,
    EmojiSetState,
    FrameState,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    UndoRefineInput,
)

router = APIRouter()


@router.get("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}", response_class=HTMLResponse)
async def refine_page(set_id: str, emoji: str, frame: str, candidate: str, review: ReviewDep) -> Response:
    """The refine page of a frame's cut-out candidate, with its versions and links to the neighbouring frames."""
    if not images.valid_action(emoji) or not is_number(frame) or not is_number(candidate):
        return review.not_found()
    state = await review.set_state(set_id, fresh=True)
    if not isinstance(state, EmojiSetState):
        return state
    slot = images.frame_slot(state, emoji, int(frame))
    found = slot.candidate(int(candidate)) if slot is not None else None
    if slot is None or found is None or found.matte is None:
        return review.not_found(f"{emoji} frame {frame} has no cut-out candidate {candidate}")
    width, height = await frame_size(review, found)
    action = state.action(emoji)
    assert action is not None
    neighbours = {step: refine_url(set_id, emoji, action.frames, slot.index + step) for step in (-1, 1)}
    versions = matte_version_urls(set_id, emoji, slot.index, found)
    return review.render(
        "refine.html",
        set_id=set_id,
        emoji=emoji,
        frame=slot,
        candidate=found,
        width=width,
        height=height,
        source_url=image_url(set_id, "frame", emoji, slot.index, found.index, "source", ref=found.source),
        matte_url=image_url(set_id, "frame", emoji, slot.index, found.index, "matte", ref=found.matte),
        versions=versions,
        prev_url=neighbours[-1],
        next_url=neighbours[1],
        title=f"refine {emoji} {slot.index}",
    )


@router.post("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}")
async def refine_apply(
    set_id: str, emoji: str, frame: str, candidate: str, request: Request, review: ReviewDep
) -> Response:
    """Applies the posted points (JSON: ``points``, ``mode``, ``following``) to the candidate's cut-out."""
    target = await refine_target(review, set_id, emoji, frame, candidate)
    if isinstance(target, Response):
        return target
    _, found = target
    width, height = await frame_size(review, found)
    try:
        body = parse_json(await request.body())
    except InputRefused as err:
        return JSONResponse({"error": f"send the points as JSON: {err}"}, status_code=422)
    try:
        points = refine_points(body, width, height)
        request_model = RefineFrameInput(
            emoji=emoji,
            frame=int(frame),
            candidate=int(candidate),
            points=points,
            mode=RefineMode(body.get("mode", "erase")),
            following=bool(body.get("following", False)),
        )
    except (BadInput, ValidationError, ValueError, AttributeError) as err:
        return JSONResponse({"error": problem(err, control="Points")}, status_code=422)
    call = review.client.refine_frame(request_model, set_id=set_id)
    return await refined(review, set_id, emoji, int(frame), int(candidate), call, "applied: now version {}")


@router.post("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}/undo")
async def refine_undo(set_id: str, emoji: str, frame: str, candidate: str, review: ReviewDep) -> Response:
    """Brings back the candidate's cut-out from before its last refinement."""
    target = await refine_target(review, set_id, emoji, frame, candidate)
    if isinstance(target, Response):
        return target
    undo = UndoRefineInput(emoji=emoji, frame=int(frame), candidate=int(candidate))
    call = review.client.undo_refine(undo, set_id=set_id)
    return await refined(review, set_id, emoji, int(frame), int(candidate), call, "undone: back to version {}")


async def refine_target(
    review: Review, set_id: str, emoji: str, frame: str, candidate: str
) -> tuple[EmojiSetState, Candidate] | Response:
    """The set's current state and the candidate a refinement names, or the JSON 404 saying what is not there."""
    if not images.valid_action(emoji) or not is_number(frame) or not is_number(candidate):
        return JSONResponse({"error": "not found"}, status_code=404)
    state = await review.set_state(set_id, fresh=True)
    if not isinstance(state, EmojiSetState):
        return JSONResponse({"error": f"no emoji set {set_id!r}"}, status_code=404)
    found = images.frame_candidate(state, emoji, int(frame), int(candidate))
    if found is None:
        return JSONResponse({"error": f"{emoji} frame {frame} has no candidate {candidate}"}, status_code=404)
    return state, found


async def refined(
    review: Review, set_id: str, emoji: str, frame: int, candidate: int, call: Awaitable[FrameState], done: str
) -> Response:
    """Awaits the refinement or its undo (``call``) and answers with the candidate's new cut-out and versions, and
    what happened (``done``, formatted with the version now shown); or the set's refusal (409)."""
    try:
        await call
    except SetNotFound:
        return JSONResponse({"error": f"no emoji set {set_id!r}"}, status_code=404)
    except EmojiSetError as err:
        return JSONResponse({"error": str(err)}, status_code=409)
    review.cache.forget(set_id)
    state = await review.cache.get(set_id, fresh=True)
    found = images.frame_candidate(state, emoji, frame, candidate)
    matte = found.matte if found is not None else None
    versions = len(images.matte_versions(found)) if found is not None else 0
    return JSONResponse(
        {
            "ok": True,
            "message": done.format(versions),
            "matte_url": image_url(set_id, "frame", emoji, frame, candidate, "matte", ref=matte) if matte else None,
            "versions": versions,
            "version_urls": matte_version_urls(set_id, emoji, frame, found) if found is not None else [],
        }
    )


async def frame_size(review: Review, candidate: Candidate) -> tuple[int, int]:
    """The candidate's frame size in pixels: recorded on its files, else read from its source."""
    for ref in (candidate.source, candidate.matte):
        if ref is not None and ref.width and ref.height:
            return ref.width, ref.height
    data = await asyncio.to_thread(review.store.get, candidate.source)
    with Image.open(io.BytesIO(data)) as picture:
        return picture.size


def matte_version_urls(set_id: str, emoji: str, frame: int, candidate: Candidate) -> list[str]:
    """The addresses of the candidate's cut-outs in its undo history, oldest first, the current one last."""
    return [
        image_url(set_id, "frame", emoji, frame, candidate.index, "matte", ref=ref, version=number)
        for number, ref in enumerate(images.matte_versions(candidate))
    ]


def refine_url(set_id: str, emoji: str, frames: list[FrameState], index: int) -> str | None:
    """The refine page of slot ``index``: its picked cut-out (or its first one), None if there is none."""
    if not 0 <= index < len(frames):
        return None
    slot = frames[index]
    picked = slot.picked()
    target = (
        picked
        if picked is not None and picked.matte is not None
        else next((c for c in slot.candidates if c.matte is not None), None)
    )
    return f"/sets/{set_id}/refine/{emoji}/{index}/{target.index}" if target is not None else None


def refine_points(body: object, width: int, height: int) -> list[RefinePoint]:
    """The posted points, each inside the frame (``0 <= x < width``, ``0 <= y < height``).

    Raises:
        BadInput: Not a list of points, or a point outside the frame.
    """
    if not isinstance(body, dict) or not isinstance(body.get("points"), list) or not body["points"]:
        raise BadInput("send at least one point: {'points': [{'x': 10, 'y': 20, 'foreground': true}], ...}")
    points = []
    for number, point in enumerate(body["points"]):
        if not isinstance(point, dict):
            raise BadInput(f"point {number} is not an object with x, y and foreground")
        x, y = point.get("x"), point.get("y")
        if not isinstance(x, int) or not isinstance(y, int) or isinstance(x, bool) or isinstance(y, bool):
            raise BadInput(f"point {number}: x and y must be whole pixel numbers, got {x!r}, {y!r}")
        if not (0 <= x < width and 0 <= y < height):
            raise BadInput(f"point {number} ({x}, {y}) is outside the frame ({width} x {height} pixels)")
        points.append(RefinePoint(x=x, y=y, foreground=bool(point.get("foreground", True))))
    return points
