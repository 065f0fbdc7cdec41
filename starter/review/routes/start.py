"""The start form: a blank form, and its post starting a set (or the form again, with an error next to each field).

Post/redirect/get: a post the form refuses (a field in error) or the server would not start is never answered at
its own address, where a reload would send it again, but redirected (303) to ``/new?flash=<token>``. That GET is a
page, answered 200, showing the refused form (kept in ``review.flash``): its typed values, an error summary at the
top and each error beside its field. An unknown or expired token shows the blank form.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from temporalio.service import RPCError

from starter.client import EmojiSetError
from starter.review.dependencies import Review, ReviewDep, ReviewerDep
from starter.review.forms import DEADLINE_CHOICES, LABELS, StartForm, parse_start_form

router = APIRouter()


@router.get("/new", response_class=HTMLResponse)
async def new_set(review: ReviewDep, flash: str | None = None) -> Response:
    """The start form: with the contract's defaults, or the refused post that ``flash`` names."""
    kept = review.flash.get(flash) or {}
    form = kept.get("form")
    return review.render(
        "new.html",
        form=form if isinstance(form, StartForm) else StartForm.blank(),
        labels=LABELS,
        deadline_choices=DEADLINE_CHOICES,
        title="New set",
    )


@router.post("/new", response_class=HTMLResponse)
async def start_set(request: Request, review: ReviewDep, reviewer: ReviewerDep) -> Response:
    """Starts the posted set and goes to its page; a refused form, or a set the server would not start, goes back
    to the form with its errors (see the module's docstring)."""
    form = await request.form()
    try:
        request_model, view = await parse_start_form(form, review.client, reviewer.owners)
    finally:
        await form.close()
    if request_model is None:
        return refused(review, view)
    try:
        set_id = await review.client.start(request_model)
    except (EmojiSetError, RPCError) as err:
        view.error("form", f"the set could not be started: {err}")
        return refused(review, view)
    return RedirectResponse(f"/sets/{set_id}", status_code=303)


def refused(review: Review, view: StartForm) -> RedirectResponse:
    """The redirect to the form's page showing ``view`` (its errors and typed values)."""
    return RedirectResponse(f"/new?flash={review.flash.put({'form': view})}", status_code=303)
