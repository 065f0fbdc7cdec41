"""Reviewer actions: every control of a set's page posts here (pick, approve, regenerate, drop, cancel).

Each handler takes the post as a :class:`Message` (:data:`MessageDep`: the form, who sends it, the app's shared
objects) and returns ``message.send(set_id, slot, anchor, call)``, where ``call`` sends the set its message through
the client. The page's script posts in place (``Accept: application/json``) and gets JSON: ``{"ok": true, "note"}``,
or the refusal with the control it names (422 for a field that is not what the control sends, 409 for a message the
set refuses). A plain form post is redirected (post/redirect/get) to the page: at the control's anchor once the
message is taken, or with the refusal next to the control and the typed text kept (``?flash=``), so a reload never
sends it again. A new action is one more handler here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from starter.client import EmojiSetClient, EmojiSetError, SetNotFound
from starter.review import fields, images
from starter.review.credentials import Reviewer
from starter.review.dependencies import Review, ReviewDep, ReviewerDep
from starter.review.fields import BadInput
from starter.review.signature import remember_name, reviewer_name
from workflows.contract import (
    DropActionInput,
    EmojiSetState,
    PickCandidateInput,
    PickSource,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
)

START_WAIT_S = 2.0
"""How long a start-frame regeneration is waited for before the page goes back (it goes on in the background; its
validator's refusal comes within milliseconds)."""

TYPED_FIELDS = ("prompt", "motion_prompt", "reason")
"""The text a reviewer types into a control: kept for the page when the set refuses it."""
PickNote = Callable[[EmojiSetState, EmojiSetState], str]
"""What a taken message changed beyond what it asked, from the set's state before and after it ("" for nothing)."""

router = APIRouter()


@dataclass
class Message:
    """A control's post to a set: the app's shared objects, who sends it, the posted form and the request."""

    review: Review
    reviewer: Reviewer
    form: FormData
    request: Request

    @property
    def client(self) -> EmojiSetClient:
        """The client the message is sent through."""
        return self.review.client

    @property
    def signature(self) -> str:
        """The name the message is signed with: the credential's when it names one, else the form's own field,
        else the name this browser keeps (:mod:`starter.review.signature`)."""
        return self.reviewer.name or self.text("reviewer").strip() or reviewer_name(self.request)

    @property
    def in_place(self) -> bool:
        """Whether the page's script sent it (and wants JSON), not a plain form post."""
        return "application/json" in self.request.headers.get("accept", "")

    def text(self, name: str) -> str:
        """The posted field ``name`` ("" when missing)."""
        return fields.text(self.form, name)

    def number(self, name: str) -> int:
        """The posted field ``name`` as a whole number.

        Raises:
            BadInput: It is not one.
        """
        return fields.number(self.text(name), name)

    async def send(
        self,
        set_id: str,
        slot: str,
        anchor: str,
        call: Callable[[], Awaitable[object]],
        *,
        emoji: str | None = None,
        note: PickNote | None = None,
    ) -> Response:
        """Sends the set its message (``call``) and answers the page's script or the plain form.

        Args:
            set_id: The set.
            slot: The control a refusal is shown next to.
            anchor: Where on the page a plain post goes back to once the message is taken.
            call: Sends the message; raises what the input or the set refuses.
            emoji: The emoji whose frame slots the page keeps shown (the control is one of them).
            note: What to tell the reviewer about the set's state after the message (see :data:`PickNote`).

        Returns:
            For the script: JSON ``{"ok": true, "note"}``, or ``{"ok": false, "control", "error"}`` with 422 for
            input that is not what the control sends and 409 for a message the set refuses. For a plain post: a
            redirect (303) to the page's ``anchor``, or to the page with the refusal (``?flash=``). 404 for no set.
        """
        if not images.valid_set_id(set_id):
            return self._not_found("no such set")
        before = await self._state(set_id) if note else None
        try:
            await call()
        except SetNotFound:
            return self._not_found(f"no emoji set {set_id!r}")
        except (BadInput, ValidationError) as err:
            return self._refused(set_id, slot, fields.problem(err), 422, emoji)
        except EmojiSetError as err:
            return self._refused(set_id, slot, str(err), 409, emoji)
        self.review.cache.forget(set_id)
        after = await self._state(set_id) if note else None
        said = note(before, after) if note and before and after else ""
        if self.in_place:
            return self._signed(JSONResponse({"ok": True, "note": said}))
        flash = f"flash={self.review.flash.put({'note': said})}" if said else ""
        query = "&".join(part for part in (f"open={emoji}" if emoji else "", flash) if part)
        return self._signed(RedirectResponse(f"/sets/{set_id}{'?' + query if query else ''}#{anchor}", 303))

    def _not_found(self, message: str) -> Response:
        if self.in_place:
            return JSONResponse({"ok": False, "control": "page", "error": message}, status_code=404)
        return self.review.not_found(message)

    def _refused(self, set_id: str, slot: str, error: str, status: int, emoji: str | None) -> Response:
        self.review.cache.forget(set_id)
        if self.in_place:
            return JSONResponse({"ok": False, "control": slot, "error": error}, status_code=status)
        typed = {name: self.text(name) for name in TYPED_FIELDS if self.text(name)}
        token = self.review.flash.put(
            {"errors": {slot: error}, "typed": {slot: typed}, "opened": [emoji] if emoji else []}
        )
        return RedirectResponse(f"/sets/{set_id}?flash={token}#error-{slot}", status_code=303)

    def _signed(self, response: Response) -> Response:
        """``response``, keeping the name the form was signed with for this browser's next messages."""
        if self.text("reviewer").strip() and not self.reviewer.name:
            remember_name(response, self.text("reviewer"))
        return response

    async def _state(self, set_id: str) -> EmojiSetState | None:
        state = await self.review.set_state(set_id, fresh=True)
        return state if isinstance(state, EmojiSetState) else None


async def posted_message(request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Message:
    """The control's post, its form read."""
    return Message(review, reviewer, await request.form(), request)


MessageDep = Annotated[Message, Depends(posted_message)]
"""A handler's parameter typed so gets the post as a :class:`Message`."""


async def under_way(review: Review, call: Coroutine[Any, Any, object]) -> None:
    """Runs ``call`` for at most :data:`START_WAIT_S`: a refusal within that is raised; after it, the call is kept
    running while the page goes back and follows it."""
    task = asyncio.create_task(call)
    done, _ = await asyncio.wait({task}, timeout=START_WAIT_S)
    if task in done:
        task.result()
    else:  # accepted and under way: the page follows it
        review.keep(task)


@router.post("/sets/{set_id}/character/pick")
async def pick_character(set_id: str, message: MessageDep) -> Response:
    """Picks the character candidate posted as ``candidate``."""
    return await message.send(
        set_id, "character", "character", lambda: message.client.pick_character(set_id, message.number("candidate"))
    )


@router.post("/sets/{set_id}/character/approve")
async def approve_character(set_id: str, message: MessageDep) -> Response:
    """Goes on with the picked character: start frames are made from it."""
    return await message.send(
        set_id,
        "character",
        "character",
        lambda: message.client.approve_character(set_id, reviewer=message.signature),
    )


@router.post("/sets/{set_id}/start-frames/approve")
async def approve_all_start_frames(set_id: str, message: MessageDep) -> Response:
    """Approves every start frame awaiting review; each approved action starts animating."""
    return await message.send(
        set_id,
        "start-all",
        "start-frames",
        lambda: message.client.approve_start_frames(set_id, None, reviewer=message.signature),
    )


@router.post("/sets/{set_id}/start-frames/{action}/pick")
async def pick_start_frame(set_id: str, action: str, message: MessageDep) -> Response:
    """Picks the action's start frame candidate posted as ``candidate``."""
    return await message.send(
        set_id,
        f"start-{action}",
        f"start-{action}",
        lambda: message.client.pick_start_frame(set_id, action, message.number("candidate")),
    )


@router.post("/sets/{set_id}/start-frames/{action}/approve")
async def approve_start_frame(set_id: str, action: str, message: MessageDep) -> Response:
    """Approves the action's picked start frame."""
    return await message.send(
        set_id,
        f"start-{action}",
        f"start-{action}",
        lambda: message.client.approve_start_frames(set_id, [action], reviewer=message.signature),
    )


@router.post("/sets/{set_id}/start-frames/{action}/regenerate")
async def regenerate_start_frame(set_id: str, action: str, message: MessageDep) -> Response:
    """New start frame candidates for the action from the posted pose ``prompt``; the page goes back once they are
    made, or after :data:`START_WAIT_S` while they are still being made."""
    return await message.send(
        set_id,
        f"start-{action}",
        f"start-{action}",
        lambda: under_way(
            message.review,
            message.client.regenerate_start_frame(
                RegenerateStartFrameInput(action=action, prompt=message.text("prompt")), set_id=set_id
            ),
        ),
    )


@router.post("/sets/{set_id}/emoji/{emoji}/take")
async def pick_take(set_id: str, emoji: str, message: MessageDep) -> Response:
    """Uses the take posted as ``take`` for the whole emoji."""
    return await message.send(
        set_id,
        f"take-{emoji}",
        f"emoji-{emoji}",
        lambda: message.client.pick_take(set_id, emoji, message.number("take")),
    )


@router.post("/sets/{set_id}/emoji/{emoji}/regenerate")
async def regenerate_action(set_id: str, emoji: str, message: MessageDep) -> Response:
    """A new take of the emoji from the posted ``motion_prompt``."""
    return await message.send(
        set_id,
        f"action-{emoji}",
        f"emoji-{emoji}",
        lambda: message.client.regenerate_action(
            RegenerateActionInput(emoji=emoji, motion_prompt=message.text("motion_prompt")), set_id=set_id
        ),
    )


@router.post("/sets/{set_id}/emoji/{emoji}/frames/{frame}/pick")
async def pick_candidate(set_id: str, emoji: str, frame: str, message: MessageDep) -> Response:
    """Picks the frame's cut-out candidate posted as ``candidate``."""
    slot = f"slot-{emoji}-{frame}"
    return await message.send(
        set_id,
        slot,
        slot,
        lambda: message.client.pick(
            PickCandidateInput(emoji=emoji, frame=fields.number(frame), candidate=message.number("candidate")),
            set_id=set_id,
        ),
        emoji=emoji,
        note=lambda before, after: moved_picks(before, after, emoji, frame),
    )


@router.post("/sets/{set_id}/emoji/{emoji}/frames/{frame}/regenerate")
async def regenerate_frame(set_id: str, emoji: str, frame: str, message: MessageDep) -> Response:
    """New candidates for the frame slot, an image edit with the posted ``prompt`` (the page goes back at once)."""
    slot = f"slot-{emoji}-{frame}"
    return await message.send(
        set_id,
        slot,
        slot,
        lambda: message.client.regenerate_frame(
            RegenerateFrameInput(emoji=emoji, frame=fields.number(frame), prompt=message.text("prompt")),
            set_id=set_id,
            wait=False,
        ),
        emoji=emoji,
    )


@router.post("/sets/{set_id}/emoji/{emoji}/drop")
async def drop_action(set_id: str, emoji: str, message: MessageDep) -> Response:
    """Takes the emoji out of the set for the posted ``reason`` (``force``: even if a platform then refuses it)."""
    return await message.send(
        set_id,
        f"drop-{emoji}",
        "start-frames",
        lambda: message.client.drop_action(
            DropActionInput(
                action=emoji,
                reviewer=message.signature,
                reason=message.text("reason"),
                force=message.text("force") == "yes",
            ),
            set_id=set_id,
        ),
    )


@router.post("/sets/{set_id}/approve")
async def approve(set_id: str, message: MessageDep) -> Response:
    """Approves the set for assembly (the final review)."""
    return await message.send(
        set_id, "approve", "decide", lambda: message.client.approve(set_id, reviewer=message.signature)
    )


@router.post("/sets/{set_id}/cancel")
async def cancel(set_id: str, message: MessageDep) -> Response:
    """Stops the set for the posted ``reason``, once the post confirms it (``confirm=yes``); it ends as cancelled,
    signed by the reviewer."""

    async def confirmed_cancel() -> None:
        if message.text("confirm") != "yes":
            raise BadInput("tick “yes, cancel this set” to cancel it: nothing was cancelled")
        await message.client.cancel(set_id, reason=message.text("reason"), reviewer=message.signature)

    return await message.send(set_id, "cancel", "decide", confirmed_cancel)


def moved_picks(before: EmojiSetState, after: EmojiSetState, emoji: str, frame: str) -> str:
    """The automatic picks a hand pick of ``emoji`` frame ``frame`` moved (they follow the hand-picked frames so the
    motion stays smooth), in a sentence; "" when none moved."""
    old, new = before.action(emoji), after.action(emoji)
    if old is None or new is None:
        return ""
    moved = [
        f.index
        for f, was in zip(new.frames, old.frames, strict=False)
        if was.pick is not None and f.pick != was.pick and str(f.index) != frame and f.picked_by is not PickSource.HUMAN
    ]
    if not moved:
        return ""
    return (
        f"Your pick of {emoji} frame {frame} moved the automatic picks of {emoji} frames {spans(moved)}, "
        "so the motion stays smooth around it."
    )


def spans(indices: list[int]) -> str:
    """Frame indices as runs: [0, 1, 2, 4, 5, 7] → "0-2, 4-5, 7"."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)
