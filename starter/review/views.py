"""What the pages are made of: the Jinja2 environment, the images' addresses, and a set's page with its refusals.

Every set page and its live fragment is rendered by :func:`render_set`, from the set's state and result; a control's
refusal comes back on the same page, next to the control it names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.responses import Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from temporalio.service import RPCError

from starter.client import EmojiSetError
from starter.review import images
from starter.review.credentials import Reviewer
from starter.review.dependencies import CLOSED, Review
from starter.review.forms import PRESET_NAMES, STAGE_POLICIES, TARGETS
from starter.review.status import PHASE_WORDS, STAGE_WORDS, review_policy, set_status
from workflows.contract import ActionStage, ArtifactRef, Candidate, EmojiSetState, FrameStatus, Phase, PickSource
from workflows.presets import PRESETS
from workflows.progress import cost_line

TEMPLATES = Path(__file__).resolve().parent / "templates"
AWAITING = ("character_review", "start_frame_review", "custom_prompt", "final_review")


def templates() -> Environment:
    """The pages' Jinja2 environment, with the addresses, presets and names every template may use."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]), trim_blocks=True)
    env.globals.update(
        img=image_url,
        presets=PRESETS,
        preset_names=PRESET_NAMES,
        targets=TARGETS,
        stage_policies=STAGE_POLICIES,
        phases=[p.value for p in Phase],
        awaiting_values=AWAITING,
        ActionStage=ActionStage,
        FrameStatus=FrameStatus,
        PickSource=PickSource,
        closed_phases=[p.value for p in CLOSED],
        phase_words=PHASE_WORDS,
        stage_words=STAGE_WORDS,
        in_time_order=in_time_order,
    )
    env.tests["startingwith"] = lambda value, *prefixes: str(value).startswith(prefixes)
    return env


def image_url(
    set_id: str, role: str, *parts: object, ref: ArtifactRef | None = None, version: int | None = None
) -> str:
    """An image's address by role and indices; ``?v=`` names its content (cached forever)."""
    path = "/".join(str(part) for part in (f"/sets/{set_id}/img/{role}", *parts))
    query = [f"version={version}"] if version is not None else []
    if ref is not None:
        query.append(f"v={images.version_tag(ref)}")
    return path + (f"?{'&'.join(query)}" if query else "")


def preview_frames(set_id: str, action: str, picks: list[Candidate | None]) -> list[str | None]:
    """The addresses of an emoji's current picks' cut-outs by frame index, None where a frame has none yet (the
    preview plays the others)."""
    return [
        image_url(set_id, "frame", action, index, pick.index, "matte", ref=pick.matte)
        if pick is not None and pick.matte is not None
        else None
        for index, pick in enumerate(picks)
    ]


def fingerprint(state: EmojiSetState) -> str:
    """A short digest of the whole state: the page's script refreshes what it shows when it changes."""
    return hashlib.sha256(state.model_dump_json().encode()).hexdigest()[:16]


def in_time_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """A slot's candidates as a person compares them: each take's clip frames in clip order, then frame edits in
    the order they were made."""
    return sorted(candidates, key=lambda c: (c.take is None, c.take or 0, c.offset, c.index))


@dataclass(frozen=True)
class PageInput:
    """What a request adds to a set's page: refusals by control, the values typed into the refused controls, the
    emoji whose frame slots are shown, and a note on what the last message changed."""

    errors: dict[str, str] = field(default_factory=dict)
    typed: dict[str, dict[str, str]] = field(default_factory=dict)
    opened: frozenset[str] = frozenset()
    note: str = ""

    @classmethod
    def from_flash(cls, flash: dict[str, Any] | None, opened: Iterable[str] = ()) -> PageInput:
        """The page input a refused post left (``flash``, see :mod:`starter.review.flash`), with ``opened`` too."""
        flash = flash or {}
        return cls(
            errors=dict(flash.get("errors", {})),
            typed=dict(flash.get("typed", {})),
            opened=frozenset([*opened, *flash.get("opened", [])]),
            note=str(flash.get("note", "")),
        )


async def render_set(
    review: Review,
    reviewer: Reviewer,
    set_id: str,
    page: PageInput | None = None,
    *,
    status_code: int = 200,
    fresh: bool = False,
    template: str = "set.html",
    reviewer_name: str = "",
) -> Response:
    """The set's page (or ``template``: its live fragment) as ``reviewer`` sees it, each of ``page.errors`` next to
    the control its key names and listed at the top; an error whose control is not on the page is said at the top.

    Args:
        review: The app's shared objects.
        reviewer: Who asks (a reviewer scoped to owners gets no link to the Temporal Web UI).
        set_id: The set.
        page: What the request adds: errors by control (``character``, ``slot-<emoji>-<frame>``, ...), typed values,
            the emoji whose frame slots are shown (and those an error names), a note.
        status_code: The answer's status.
        fresh: Query the set's state rather than take a cached one.
        template: The template rendered.
        reviewer_name: The name the reviewer signs with (from their cookie), shown in the name field.

    Returns:
        The page, or the page that says why the set could not be read.
    """
    page = page or PageInput()
    state = await review.set_state(set_id, fresh=fresh)
    if not isinstance(state, EmojiSetState):
        return state
    try:
        result = await review.result(set_id, state)
    except (EmojiSetError, RPCError):
        result = None
    named = {a.name for a in state.actions if any(key.startswith(f"slot-{a.name}-") for key in page.errors)}
    context = {
        "state": state,
        "set_id": set_id,
        "result": result,
        # The Temporal Web UI is the operators': a reviewer scoped to owners gets no link to it.
        "web_ui": review.client.web_ui_url(set_id) if reviewer.owners is None else None,
        "signed_as": reviewer.name,
        "reviewer_name": reviewer_name,
        "previews": {a.name: preview_frames(set_id, a.name, [f.picked() for f in a.frames]) for a in state.actions},
        "status": set_status(state, datetime.now(UTC)),
        "policy": review_policy(state),
        "cost": cost_line(state) if state.terms is not None else None,
        "typed_values": page.typed,
        "opened": page.opened | named,
        "note": page.note,
        "fingerprint": fingerprint(state),
        "title": set_id,
    }
    errors = page.errors
    response = review.render(template, status_code, errors=errors, **context)
    unplaced = [key for key in errors if f'data-testid="error-{key}"'.encode() not in response.body]
    if unplaced:  # the control named no slot on this page (an unknown emoji or frame): say it at the top
        errors = {**errors, "page": "; ".join(errors[key] for key in unplaced)}
        response = review.render(template, status_code, errors=errors, **context)
    return response
