"""Reviewer actions: every control of a set's page posts here (pick, approve, regenerate, drop, cancel).

Each handler takes the post as a :class:`Message` (:data:`MessageDep`: the form, who sends it, the app's shared
objects) and returns ``message.send(set_id, slot, anchor, call)``, where ``call`` sends the set its message through
the client. The answer is the page again: redirected to the control's anchor once the message is taken, or with the
refusal next to the control named by ``slot`` (422 for a field that is not what the control sends, 409 for a message
the set refuses). A new action is one more handler here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from starter.client import EmojiSetClient, EmojiSetError, SetNotFound
from starter.review import fields, images
from starter.review.credentials import Reviewer
from starter.review.dependencies import Review, ReviewDep, ReviewerDep
from starter.review.fields import BadInput
from starter.review.views import render_set
from workflows.contract import (
    DropActionInput,
    PickCandidateInput,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
)

START_WAIT_S = 2.0
"""How long a start-frame regeneration is waited for before the page goes back (it goes on in the background; its
validator's refusal comes within milliseconds)."""

router = APIRouter()


@dataclass
class Message:
    """A control's post to a set: the app's shared objects, who sends it, and the posted form."""

    review: Review
    reviewer: Reviewer
    form: FormData

    @property
    def client(self) -> EmojiSetClient:
        """The client the message is sent through."""
        return self.review.client

    @property
    def signature(self) -> str:
        """The name the message is signed with: the credential's when it names one, else the form's own field."""
        return self.reviewer.name or self.text("reviewer")

    def text(self, name: str) -> str:
        """The posted field ``name`` ("" when missing)."""
        return fields.text(self.form, name)

    def number(self, name: str) -> int:
        """The posted field ``name`` as a whole number.

        Raises:
            BadInput: It is not one.
        """
        return fields.number(self.text(name), name)

    async def send(self, set_id: str, slot: str, anchor: str, call: Callable[[], Awaitable[object]]) -> Response:
        """Sends the set its message (``call``) and answers with its page.

        Args:
            set_id: The set.
            slot: The control a refusal is shown next to.
            anchor: Where on the page the redirect goes once the message is taken.
            call: Sends the message; raises what the input or the set refuses.

        Returns:
            A redirect (303) to the page's ``anchor``; or the page with the refusal next to ``slot``: 422 for input
            that is not what the control sends, 409 for a message the set refuses; 404 for no such set.
        """
        if not images.valid_set_id(set_id):
            return self.review.not_found("no such set")
        try:
            await call()
        except SetNotFound:
            return self.review.not_found(f"no emoji set {set_id!r}")
        except (BadInput, ValidationError) as err:
            self.review.cache.forget(set_id)
            errors = {slot: fields.problem(err)}
            return await render_set(self.review, self.reviewer, set_id, errors, status_code=422, fresh=True)
        except EmojiSetError as err:
            return await render_set(self.review, self.reviewer, set_id, {slot: str(err)}, status_code=409, fresh=True)
        self.review.cache.forget(set_id)
        return RedirectResponse(f"/sets/{set_id}#{anchor}", status_code=303)


async def posted_message(request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Message:
    """The control's post, its form read."""
    return Message(review, reviewer, await request.form())


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
    """Stops the set for the posted ``reason``; it ends as cancelled."""
    return await message.send(
        set_id, "cancel", "decide", lambda: message.client.cancel(set_id, reason=message.text("reason"))
    )
