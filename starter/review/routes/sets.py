"""Pages of sets: the list (filtered by phase, owner and wait), a set's page, its live fragment and progress JSON."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from temporalio.service import RPCError

from starter.client import EmojiSetClient, SetSummary
from starter.review import fields
from starter.review.credentials import Reviewer
from starter.review.dependencies import CLOSED, ReviewDep, ReviewerDep
from starter.review.signature import SET_PAGE, remember_name, reviewer_name
from starter.review.views import AWAITING, PageInput, fingerprint, render_set
from workflows.contract import EmojiSetState, Phase

SETS_LISTED = 50
"""The most sets the list shows (newest first)."""
EPOCH = datetime.min.replace(tzinfo=UTC)

router = APIRouter()


@router.get("/", include_in_schema=False)
async def home() -> Response:
    """The set list is the home page."""
    return RedirectResponse("/sets", status_code=303)


@router.get("/sets", response_class=HTMLResponse)
async def list_sets(request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Response:
    """The sets the reviewer may see, newest first, filtered by ``?phase=``, ``?owner=`` and ``?awaiting=`` (422
    with the filter's error when one is not a phase or a wait)."""
    query = request.query_params
    phase_text, owner, awaiting = (query.get(name, "").strip() for name in ("phase", "owner", "awaiting"))
    errors: dict[str, str] = {}
    phase = None
    if phase_text:
        try:
            phase = Phase(phase_text)
        except ValueError:
            errors["filter-phase"] = f"unknown phase {phase_text!r}"
    if awaiting and awaiting not in AWAITING:
        errors["filter-awaiting"] = f"unknown wait {awaiting!r}; one of {', '.join(AWAITING)}"
    sets = []
    if not errors:
        try:
            sets = await visible_sets(review.client, reviewer, phase, owner, awaiting)
        except RPCError as err:
            errors["filter"] = f"the set list could not be read: {err.message}"
    filters = {"phase": phase_text, "owner": owner, "awaiting": awaiting}
    return review.render("sets.html", 422 if errors else 200, sets=sets, filters=filters, errors=errors, title="Sets")


async def visible_sets(
    client: EmojiSetClient, reviewer: Reviewer, phase: Phase | None, owner: str, awaiting: str
) -> list[SetSummary]:
    """The sets of the list: of the owner asked for, or of every owner the reviewer may see, newest first."""
    if reviewer.owners is None:
        return await client.list_sets(phase=phase, owner=owner or None, awaiting=awaiting or None, limit=SETS_LISTED)
    owners = [owner] if owner else sorted(reviewer.owners)
    found = [
        summary
        for name in owners
        if reviewer.may_see(name)
        for summary in await client.list_sets(phase=phase, owner=name, awaiting=awaiting or None, limit=SETS_LISTED)
    ]
    newest_first = sorted(found, key=lambda summary: summary.started_at or EPOCH, reverse=True)
    return newest_first[:SETS_LISTED]


@router.get("/sets/{set_id}", response_class=HTMLResponse)
async def set_page(set_id: str, request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Response:
    """The set's page, from its current state: with the frame slots of the emoji named by ``?open=`` shown, and
    what a refused post left (``?flash=``)."""
    flash = review.flash.get(request.query_params.get("flash"))
    page = PageInput.from_flash(flash, opened_emoji(request))
    name = reviewer_name(request)
    return await render_set(review, reviewer, set_id, page, fresh=True, reviewer_name=name)


@router.get("/sets/{set_id}/fragment", response_class=HTMLResponse)
async def set_fragment(set_id: str, request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Response:
    """The body of the set's page (with the slots of the emoji named by ``?open=``), whose changed parts the page's
    script swaps in when the progress JSON changes."""
    page = PageInput(opened=frozenset(opened_emoji(request)))
    return await render_set(review, reviewer, set_id, page, template="_set_body.html")


@router.post("/reviewer")
async def remember_reviewer(request: Request) -> Response:
    """Keeps the posted ``reviewer`` name in a cookie, which signs every later message of this browser; goes back
    to the posted ``back`` page (a set's page; the list otherwise)."""
    form = await request.form()
    back = fields.text(form, "back")
    response = RedirectResponse(back if SET_PAGE.fullmatch(back) else "/sets", status_code=303)
    remember_name(response, fields.text(form, "reviewer"))
    return response


def opened_emoji(request: Request) -> list[str]:
    """The emoji named by ``?open=`` (repeated, or comma-separated)."""
    return [name for value in request.query_params.getlist("open") for name in value.split(",") if name]


@router.get("/sets/{set_id}/state.json")
async def set_progress(set_id: str, review: ReviewDep) -> Response:
    """The set's progress for the page's script: phase, frames, wait, notice, stages and a fingerprint of the
    state (404 JSON for no such set)."""
    state = await review.set_state(set_id)
    if not isinstance(state, EmojiSetState):
        return JSONResponse({"error": "no such set"}, status_code=404)
    return JSONResponse(
        {
            "set_id": state.set_id,
            "phase": state.phase.value,
            "closed": state.phase in CLOSED or state.failure is not None,
            "frames_done": state.frames_done(),
            "frames_total": state.frames_total(),
            "awaiting": state.awaiting(),
            "notice": state.notice,
            "actions": {a.name: a.stage.value for a in state.actions},
            "picks": {a.name: [[f.pick, f.picked_by] for f in a.frames] for a in state.actions},
            "fingerprint": fingerprint(state),
        },
        headers={"Cache-Control": "no-store"},
    )
