"""The start form: a blank form, and its post starting a set (or the form again, with an error next to each field)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from temporalio.service import RPCError

from starter.client import EmojiSetError
from starter.review.dependencies import ReviewDep, ReviewerDep
from starter.review.forms import StartForm, parse_start_form

router = APIRouter()


@router.get("/new", response_class=HTMLResponse)
async def new_set(review: ReviewDep) -> Response:
    """The start form with the contract's defaults."""
    return review.render("new.html", form=StartForm.blank(), title="New set")


@router.post("/new", response_class=HTMLResponse)
async def start_set(request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Response:
    """Starts the posted set and goes to its page; a refused form comes back with its errors (422), a set the
    server would not start with the reason (503)."""
    form = await request.form()
    try:
        request_model, view = await parse_start_form(form, review.client, reviewer.owners)
    finally:
        await form.close()
    if request_model is None:
        return review.render("new.html", 422, form=view, title="New set")
    try:
        set_id = await review.client.start(request_model)
    except (EmojiSetError, RPCError) as err:
        view.error("form", f"the set could not be started: {err}")
        return review.render("new.html", 503, form=view, title="New set")
    return RedirectResponse(f"/sets/{set_id}", status_code=303)
