"""What the pages are made of: the Jinja2 environment, the images' addresses, and a set's page with its refusals.

Every set page and its live fragment is rendered by :func:`render_set`, from the set's state and result; a control's
refusal comes back on the same page, next to the control it names.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.responses import Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from temporalio.service import RPCError

from starter.client import EmojiSetError
from starter.review import images
from starter.review.credentials import Reviewer
from starter.review.dependencies import CLOSED, Review
from starter.review.forms import PRESET_NAMES, STAGE_POLICIES, TARGETS
from workflows.contract import ActionStage, ArtifactRef, Candidate, EmojiSetState, Phase
from workflows.presets import PRESETS

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
        closed_phases=[p.value for p in CLOSED],
    )
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


def preview_frames(set_id: str, action: str, picks: list[Candidate | None]) -> list[str]:
    """The addresses of an emoji's current picks' cut-outs, in order (the preview cycles through them)."""
    return [
        image_url(set_id, "frame", action, index, pick.index, "matte", ref=pick.matte)
        for index, pick in enumerate(picks)
        if pick is not None and pick.matte is not None
    ]


async def render_set(
    review: Review,
    reviewer: Reviewer,
    set_id: str,
    errors: dict[str, str],
    *,
    status_code: int = 200,
    fresh: bool = False,
    template: str = "set.html",
) -> Response:
    """The set's page (or ``template``: its live fragment) as ``reviewer`` sees it, each of ``errors`` next to the
    control its key names; an error whose control is not on the page is shown at the top.

    Args:
        review: The app's shared objects.
        reviewer: Who asks (a reviewer scoped to owners gets no link to the Temporal Web UI).
        set_id: The set.
        errors: Messages by control (``character``, ``slot-<emoji>-<frame>``, ...).
        status_code: The answer's status.
        fresh: Query the set's state rather than take a cached one.
        template: The template rendered.

    Returns:
        The page, or the page that says why the set could not be read.
    """
    state = await review.set_state(set_id, fresh=fresh)
    if not isinstance(state, EmojiSetState):
        return state
    try:
        result = await review.result(set_id, state)
    except (EmojiSetError, RPCError):
        result = None
    context = {
        "state": state,
        "set_id": set_id,
        "result": result,
        # The Temporal Web UI is the operators': a reviewer scoped to owners gets no link to it.
        "web_ui": review.client.web_ui_url(set_id) if reviewer.owners is None else None,
        "signed_as": reviewer.name,
        "previews": {a.name: preview_frames(set_id, a.name, [f.picked() for f in a.frames]) for a in state.actions},
        "title": set_id,
    }
    response = review.render(template, status_code, errors=errors, **context)
    unplaced = [key for key in errors if f'data-testid="error-{key}"'.encode() not in response.body]
    if unplaced:  # the control named no slot on this page (an unknown emoji or frame): say it at the top
        page = {"page": "; ".join(errors[key] for key in unplaced)}
        response = review.render(template, status_code, errors={**errors, **page}, **context)
    return response
