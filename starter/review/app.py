"""The review app: pages, form posts, the live-progress JSON and the image routes.

:func:`create_app` builds it around an :class:`EmojiSetClient` and the artifact store (given, as in tests, or
connected when it starts). Every page and image is resolved through the set's state, fetched with ``get_state``
(cached for about a second, so a page's images cost one query, not one each).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from PIL import Image
from pydantic import ValidationError
from starlette.datastructures import FormData
from temporalio.service import RPCError

from core.artifacts import ArtifactError, ArtifactStore, open_store
from core.settings import ArtifactSettings, TemporalSettings
from starter.client import EmojiSetClient, EmojiSetError, SetNotFound, SetSummary
from starter.review import images
from starter.review.auth import Gate
from starter.review.credentials import Reviewer
from starter.review.forms import PRESET_NAMES, STAGE_POLICIES, TARGETS, StartForm, parse_start_form
from starter.review.limits import BodyLimit, InputRefused, is_number, parse_json, parse_number
from starter.review.settings import ReviewSettings, is_loopback, required_credentials
from workflows.contract import (
    ActionStage,
    ArtifactRef,
    Candidate,
    EmojiSetResult,
    EmojiSetState,
    ExportTarget,
    FrameState,
    Phase,
    PickCandidateInput,
    RefineFrameInput,
    RefineMode,
    RefinePoint,
    RegenerateActionInput,
    RegenerateFrameInput,
    RegenerateStartFrameInput,
    UndoRefineInput,
)
from workflows.presets import PRESETS

HERE = Path(__file__).resolve().parent
CLOSED = frozenset({Phase.COMPLETED, Phase.CANCELLED, Phase.EXPIRED})
AWAITING = ("character_review", "start_frame_review", "custom_prompt", "final_review")
IMMUTABLE = "private, max-age=31536000, immutable"
REVALIDATE = "private, no-cache"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Every page: scripts, styles and images only from the app itself, no plugins, no framing, forms only to itself."""
SET_PATH = re.compile(r"^/sets/([^/]+)")
SETS_LISTED = 50
"""The most sets the list shows (newest first)."""
EPOCH = datetime.min.replace(tzinfo=UTC)
RESULTS_KEPT = 256
"""Finished sets' results kept in memory (they never change; the oldest asked is dropped first)."""
START_WAIT_S = 2.0
"""How long a start-frame regeneration is waited for before the page goes back (it goes on in the background; its
validator's refusal comes within milliseconds)."""


class BadInput(ValueError):
    """A posted field that is not what the control sends (not a number, missing)."""


class StateCache:
    """``get_state`` per set, kept ``ttl`` seconds (longer once the set has ended); concurrent asks share a query."""

    def __init__(self, client: EmojiSetClient, *, ttl: float = 1.0, closed_ttl: float = 30.0, size: int = 256):
        self.client = client
        self.ttl, self.closed_ttl, self.size = ttl, closed_ttl, size
        self._entries: OrderedDict[str, tuple[float, EmojiSetState]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, set_id: str, *, fresh: bool = False) -> EmojiSetState:
        lock = self._locks.setdefault(set_id, asyncio.Lock())
        async with lock:
            entry = self._entries.get(set_id)
            if entry is not None and not fresh:
                fetched, state = entry
                if time.monotonic() - fetched < (self.closed_ttl if state.phase in CLOSED else self.ttl):
                    return state
            state = await self.client.state(set_id)
            self._entries[set_id] = (time.monotonic(), state)
            self._entries.move_to_end(set_id)
            while len(self._entries) > self.size:
                old, _ = self._entries.popitem(last=False)
                self._locks.pop(old, None)
            return state

    def forget(self, set_id: str) -> None:
        self._entries.pop(set_id, None)


@dataclass
class Review:
    """What the routes share."""

    client: EmojiSetClient
    store: ArtifactStore
    cache: StateCache
    templates: Environment
    results: dict[str, EmojiSetResult] = field(default_factory=dict)
    background: set[asyncio.Task[Any]] = field(default_factory=set)

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.templates.get_template(name).render(**context), status_code=status_code)

    async def result(self, set_id: str, state: EmojiSetState) -> EmojiSetResult | None:
        """The finished set's result (its exported files); None while it runs."""
        if state.phase is not Phase.COMPLETED:
            return None
        if set_id not in self.results:
            if len(self.results) >= RESULTS_KEPT:
                self.results.pop(next(iter(self.results)))
            self.results[set_id] = await self.client.result(set_id)
        return self.results[set_id]


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), trim_blocks=True
    )
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


def create_app(
    client: EmojiSetClient | None = None,
    store: ArtifactStore | None = None,
    *,
    settings: ReviewSettings | None = None,
    host: str | None = None,
    temporal: TemporalSettings | None = None,
    artifacts: ArtifactSettings | None = None,
) -> FastAPI:
    """The review app, bound (for its access rules) to ``host``.

    With ``client`` and ``store`` given it uses them; otherwise it connects to Temporal and opens the store when it
    starts (``temporal`` / ``artifacts`` settings, from the environment by default).

    Raises:
        TokenMissing: ``host`` is not loopback and neither ``POPCON_REVIEW_TOKEN`` nor ``POPCON_REVIEW_SECRET`` is set.
        WeakSecret: The token or secret is too short or too plain.
    """
    settings = settings or ReviewSettings()
    host = host or settings.review_host
    credentials = required_credentials(host, settings)
    env = templates()
    holder: dict[str, Review] = {}
    if client is not None:
        if store is None:
            raise ValueError("give the artifact store with the client (store=): images are read from it")
        holder["review"] = Review(client, store, StateCache(client), env)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if "review" not in holder:
            connected = await EmojiSetClient.connect(temporal or TemporalSettings(), artifacts or ArtifactSettings())
            opened = store or open_store(artifacts or ArtifactSettings())
            holder["review"] = Review(connected, opened, StateCache(connected), env)
        yield
        for task in holder["review"].background:
            task.cancel()

    app = FastAPI(title="popcon review", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def review() -> Review:
        return holder["review"]

    @app.middleware("http")
    async def headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        if request.url.scheme == "https":
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        return response

    @app.middleware("http")
    async def owners_only(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """A set of an owner the reviewer may not see answers as a set that does not exist: its pages, images,
        downloads and every message to it (checked before any route runs)."""
        found = SET_PATH.match(request.url.path)
        if found and reviewer_of(request).owners is not None:
            state = await set_state(found[1])
            if not isinstance(state, EmojiSetState):
                return state
            if not reviewer_of(request).may_see(state.input.owner):
                return not_found(f"no emoji set {found[1]!r}")
        return await call_next(request)

    # --- pages ---------------------------------------------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse("/sets", status_code=303)

    @app.get("/sets", response_class=HTMLResponse)
    async def list_sets(request: Request) -> Response:
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
                sets = await visible_sets(reviewer_of(request), phase, owner, awaiting)
            except RPCError as err:
                errors["filter"] = f"the set list could not be read: {err.message}"
        filters = {"phase": phase_text, "owner": owner, "awaiting": awaiting}
        return review().render(
            "sets.html", 422 if errors else 200, sets=sets, filters=filters, errors=errors, title="Sets"
        )

    async def visible_sets(reviewer: Reviewer, phase: Phase | None, owner: str, awaiting: str) -> list[SetSummary]:
        """The sets of the list: of the owner asked for, or of every owner the reviewer may see, newest first."""
        client = review().client
        if reviewer.owners is None:
            return await client.list_sets(
                phase=phase, owner=owner or None, awaiting=awaiting or None, limit=SETS_LISTED
            )
        owners = [owner] if owner else sorted(reviewer.owners)
        found = [
            summary
            for name in owners
            if reviewer.may_see(name)
            for summary in await client.list_sets(phase=phase, owner=name, awaiting=awaiting or None, limit=SETS_LISTED)
        ]
        newest_first = sorted(found, key=lambda summary: summary.started_at or EPOCH, reverse=True)
        return newest_first[:SETS_LISTED]

    @app.get("/new", response_class=HTMLResponse)
    async def new_set() -> Response:
        return review().render("new.html", form=StartForm.blank(), title="New set")

    @app.post("/new", response_class=HTMLResponse)
    async def start_set(request: Request) -> Response:
        r = review()
        form = await request.form()
        try:
            request_model, view = await parse_start_form(form, r.client, reviewer_of(request).owners)
        finally:
            await form.close()
        if request_model is None:
            return r.render("new.html", 422, form=view, title="New set")
        try:
            set_id = await r.client.start(request_model)
        except (EmojiSetError, RPCError) as err:
            view.error("form", f"the set could not be started: {err}")
            return r.render("new.html", 503, form=view, title="New set")
        return RedirectResponse(f"/sets/{set_id}", status_code=303)

    @app.get("/sets/{set_id}", response_class=HTMLResponse)
    async def set_page(set_id: str, request: Request) -> Response:
        return await render_set(request, set_id, {}, fresh=True)

    @app.get("/sets/{set_id}/fragment", response_class=HTMLResponse)
    async def set_fragment(set_id: str, request: Request) -> Response:
        return await render_set(request, set_id, {}, template="_set_body.html")

    @app.get("/sets/{set_id}/state.json")
    async def set_progress(set_id: str) -> Response:
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return JSONResponse({"error": "no such set"}, status_code=404)
        body = state.model_dump_json()
        return JSONResponse(
            {
                "set_id": state.set_id,
                "phase": state.phase.value,
                "closed": state.phase in CLOSED,
                "frames_done": state.frames_done(),
                "frames_total": state.frames_total(),
                "awaiting": state.awaiting(),
                "notice": state.notice,
                "actions": {a.name: a.stage.value for a in state.actions},
                "fingerprint": hashlib.sha256(body.encode()).hexdigest()[:16],
            },
            headers={"Cache-Control": "no-store"},
        )

    async def set_state(set_id: str, *, fresh: bool = False) -> EmojiSetState | Response:
        if not images.valid_set_id(set_id):
            return not_found("no such set")
        try:
            return await review().cache.get(set_id, fresh=fresh)
        except SetNotFound:
            return not_found(f"no emoji set {set_id!r}")
        except RPCError as err:
            return review().render("error.html", 503, message=f"the set could not be read: {err.message}")

    def not_found(message: str = "not found") -> Response:
        return review().render("error.html", 404, message=message, title="Not found")

    async def render_set(
        request: Request,
        set_id: str,
        errors: dict[str, str],
        *,
        status_code: int = 200,
        fresh: bool = False,
        template: str = "set.html",
    ) -> Response:
        state = await set_state(set_id, fresh=fresh)
        if not isinstance(state, EmojiSetState):
            return state
        r = review()
        try:
            result = await r.result(set_id, state)
        except (EmojiSetError, RPCError):
            result = None
        context = {
            "state": state,
            "set_id": set_id,
            "result": result,
            # The Temporal Web UI is the operators': a reviewer scoped to owners gets no link to it.
            "web_ui": r.client.web_ui_url(set_id) if reviewer_of(request).owners is None else None,
            "signed_as": reviewer_of(request).name,
            "previews": {a.name: preview_frames(set_id, a.name, [f.picked() for f in a.frames]) for a in state.actions},
            "title": set_id,
        }
        response = r.render(template, status_code, errors=errors, **context)
        unplaced = [key for key in errors if f'data-testid="error-{key}"'.encode() not in response.body]
        if unplaced:  # the control named no slot on this page (an unknown emoji or frame): say it at the top
            page = {"page": "; ".join(errors[key] for key in unplaced)}
            response = r.render(template, status_code, errors={**errors, **page}, **context)
        return response

    # --- steering: every control posts here, refusals come back next to it ---------------------------------------

    async def act(
        request: Request, set_id: str, slot: str, anchor: str, call: Callable[[], Awaitable[object]]
    ) -> Response:
        if not images.valid_set_id(set_id):
            return not_found("no such set")
        try:
            await call()
        except SetNotFound:
            return not_found(f"no emoji set {set_id!r}")
        except (BadInput, ValidationError) as err:
            review().cache.forget(set_id)
            return await render_set(request, set_id, {slot: _problem(err)}, status_code=422, fresh=True)
        except EmojiSetError as err:
            return await render_set(request, set_id, {slot: str(err)}, status_code=409, fresh=True)
        review().cache.forget(set_id)
        return RedirectResponse(f"/sets/{set_id}#{anchor}", status_code=303)

    @app.post("/sets/{set_id}/character/pick")
    async def pick_character(set_id: str, request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            set_id,
            "character",
            "character",
            lambda: review().client.pick_character(set_id, _int(form, "candidate")),
        )

    @app.post("/sets/{set_id}/character/approve")
    async def approve_character(set_id: str, request: Request) -> Response:
        form = await request.form()
        reviewer = reviewer_name(request, form)
        return await act(
            request,
            set_id,
            "character",
            "character",
            lambda: review().client.approve_character(set_id, reviewer=reviewer),
        )

    @app.post("/sets/{set_id}/start-frames/approve")
    async def approve_all_start_frames(set_id: str, request: Request) -> Response:
        form = await request.form()
        reviewer = reviewer_name(request, form)
        return await act(
            request,
            set_id,
            "start-all",
            "start-frames",
            lambda: review().client.approve_start_frames(set_id, None, reviewer=reviewer),
        )

    @app.post("/sets/{set_id}/start-frames/{action}/pick")
    async def pick_start_frame(set_id: str, action: str, request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            set_id,
            f"start-{action}",
            f"start-{action}",
            lambda: review().client.pick_start_frame(set_id, action, _int(form, "candidate")),
        )

    @app.post("/sets/{set_id}/start-frames/{action}/approve")
    async def approve_start_frame(set_id: str, action: str, request: Request) -> Response:
        form = await request.form()
        reviewer = reviewer_name(request, form)
        return await act(
            request,
            set_id,
            f"start-{action}",
            f"start-{action}",
            lambda: review().client.approve_start_frames(set_id, [action], reviewer=reviewer),
        )

    @app.post("/sets/{set_id}/start-frames/{action}/regenerate")
    async def regenerate_start_frame(set_id: str, action: str, request: Request) -> Response:
        form = await request.form()

        async def call() -> None:
            regenerate = RegenerateStartFrameInput(action=action, prompt=_str(form, "prompt"))
            task = asyncio.create_task(review().client.regenerate_start_frame(regenerate, set_id=set_id))
            done, _ = await asyncio.wait({task}, timeout=START_WAIT_S)
            if task in done:
                task.result()
            else:  # accepted and under way: the page follows it
                review().background.add(task)
                task.add_done_callback(_forget_task(review().background))

        return await act(request, set_id, f"start-{action}", f"start-{action}", call)

    @app.post("/sets/{set_id}/emoji/{emoji}/take")
    async def pick_take(set_id: str, emoji: str, request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            set_id,
            f"take-{emoji}",
            f"emoji-{emoji}",
            lambda: review().client.pick_take(set_id, emoji, _int(form, "take")),
        )

    @app.post("/sets/{set_id}/emoji/{emoji}/regenerate")
    async def regenerate_action(set_id: str, emoji: str, request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            set_id,
            f"action-{emoji}",
            f"emoji-{emoji}",
            lambda: review().client.regenerate_action(
                RegenerateActionInput(emoji=emoji, motion_prompt=_str(form, "motion_prompt")), set_id=set_id
            ),
        )

    @app.post("/sets/{set_id}/emoji/{emoji}/frames/{frame}/pick")
    async def pick_candidate(set_id: str, emoji: str, frame: str, request: Request) -> Response:
        form = await request.form()
        slot = f"slot-{emoji}-{frame}"
        return await act(
            request,
            set_id,
            slot,
            slot,
            lambda: review().client.pick(
                PickCandidateInput(emoji=emoji, frame=_number(frame), candidate=_int(form, "candidate")), set_id=set_id
            ),
        )

    @app.post("/sets/{set_id}/emoji/{emoji}/frames/{frame}/regenerate")
    async def regenerate_frame(set_id: str, emoji: str, frame: str, request: Request) -> Response:
        form = await request.form()
        slot = f"slot-{emoji}-{frame}"
        return await act(
            request,
            set_id,
            slot,
            slot,
            lambda: review().client.regenerate_frame(
                RegenerateFrameInput(emoji=emoji, frame=_number(frame), prompt=_str(form, "prompt")),
                set_id=set_id,
                wait=False,
            ),
        )

    @app.post("/sets/{set_id}/approve")
    async def approve(set_id: str, request: Request) -> Response:
        form = await request.form()
        reviewer = reviewer_name(request, form)
        return await act(
            request, set_id, "approve", "decide", lambda: review().client.approve(set_id, reviewer=reviewer)
        )

    @app.post("/sets/{set_id}/cancel")
    async def cancel(set_id: str, request: Request) -> Response:
        form = await request.form()
        reason = _str(form, "reason")
        return await act(request, set_id, "cancel", "decide", lambda: review().client.cancel(set_id, reason=reason))

    # --- refine: one frame's matte beside its source, points, erase / restore, undo --------------------------------

    @app.get("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}", response_class=HTMLResponse)
    async def refine_page(set_id: str, emoji: str, frame: str, candidate: str) -> Response:
        if not images.valid_action(emoji) or not is_number(frame) or not is_number(candidate):
            return not_found()
        state = await set_state(set_id, fresh=True)
        if not isinstance(state, EmojiSetState):
            return state
        slot = images.frame_slot(state, emoji, int(frame))
        found = slot.candidate(int(candidate)) if slot is not None else None
        if slot is None or found is None or found.matte is None:
            return not_found(f"{emoji} frame {frame} has no cut-out candidate {candidate}")
        width, height = await frame_size(found)
        action = state.action(emoji)
        assert action is not None
        neighbours = {step: refine_url(set_id, emoji, action.frames, slot.index + step) for step in (-1, 1)}
        versions = matte_version_urls(set_id, emoji, slot.index, found)
        return review().render(
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

    async def frame_size(candidate: Candidate) -> tuple[int, int]:
        for ref in (candidate.source, candidate.matte):
            if ref is not None and ref.width and ref.height:
                return ref.width, ref.height
        data = await asyncio.to_thread(review().store.get, candidate.source)
        with Image.open(io.BytesIO(data)) as picture:
            return picture.size

    async def refine_target(
        set_id: str, emoji: str, frame: str, candidate: str
    ) -> tuple[EmojiSetState, Candidate] | Response:
        if not images.valid_action(emoji) or not is_number(frame) or not is_number(candidate):
            return JSONResponse({"error": "not found"}, status_code=404)
        state = await set_state(set_id, fresh=True)
        if not isinstance(state, EmojiSetState):
            return JSONResponse({"error": f"no emoji set {set_id!r}"}, status_code=404)
        found = images.frame_candidate(state, emoji, int(frame), int(candidate))
        if found is None:
            return JSONResponse({"error": f"{emoji} frame {frame} has no candidate {candidate}"}, status_code=404)
        return state, found

    async def refined(set_id: str, emoji: str, frame: int, candidate: int, call: Awaitable[FrameState]) -> Response:
        try:
            await call
        except SetNotFound:
            return JSONResponse({"error": f"no emoji set {set_id!r}"}, status_code=404)
        except EmojiSetError as err:
            return JSONResponse({"error": str(err)}, status_code=409)
        review().cache.forget(set_id)
        state = await review().cache.get(set_id, fresh=True)
        found = images.frame_candidate(state, emoji, frame, candidate)
        matte = found.matte if found is not None else None
        return JSONResponse(
            {
                "ok": True,
                "message": "applied",
                "matte_url": image_url(set_id, "frame", emoji, frame, candidate, "matte", ref=matte) if matte else None,
                "versions": len(images.matte_versions(found)) if found is not None else 0,
                "version_urls": matte_version_urls(set_id, emoji, frame, found) if found is not None else [],
            }
        )

    @app.post("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}")
    async def refine_apply(set_id: str, emoji: str, frame: str, candidate: str, request: Request) -> Response:
        target = await refine_target(set_id, emoji, frame, candidate)
        if isinstance(target, Response):
            return target
        _, found = target
        width, height = await frame_size(found)
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
            return JSONResponse({"error": _problem(err)}, status_code=422)
        return await refined(
            set_id, emoji, int(frame), int(candidate), review().client.refine_frame(request_model, set_id=set_id)
        )

    @app.post("/sets/{set_id}/refine/{emoji}/{frame}/{candidate}/undo")
    async def refine_undo(set_id: str, emoji: str, frame: str, candidate: str) -> Response:
        target = await refine_target(set_id, emoji, frame, candidate)
        if isinstance(target, Response):
            return target
        undo = UndoRefineInput(emoji=emoji, frame=int(frame), candidate=int(candidate))
        return await refined(
            set_id, emoji, int(frame), int(candidate), review().client.undo_refine(undo, set_id=set_id)
        )

    # --- images and downloads: by role and indices, resolved through the state ------------------------------------

    async def serve_ref(request: Request, ref: ArtifactRef | None, *, download: str | None = None) -> Response:
        if ref is None or (download is None and not images.is_image(ref)):
            return not_found()
        etag = f'"{ref.sha256}"'
        named = request.query_params.get("v", "")
        cache = IMMUTABLE if len(named) >= images.VERSION_CHARS and ref.sha256.startswith(named) else REVALIDATE
        headers = {"ETag": etag, "Cache-Control": cache}
        if download is not None:
            headers["Content-Disposition"] = f'attachment; filename="{download}"'
        if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        try:
            data = await asyncio.to_thread(review().store.get, ref)
        except ArtifactError:
            return not_found("the image is not in the store")
        return Response(data, media_type=ref.media_type, headers=headers)

    @app.get("/sets/{set_id}/img/character/{candidate}")
    async def character_image(set_id: str, candidate: str, request: Request) -> Response:
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState) or not is_number(candidate):
            return not_found()
        return await serve_ref(request, images.character_image(state, int(candidate)))

    @app.get("/sets/{set_id}/img/start/{action}/{candidate}")
    async def start_image(set_id: str, action: str, candidate: str, request: Request) -> Response:
        if not images.valid_action(action) or not is_number(candidate):
            return not_found()
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        return await serve_ref(request, images.start_frame_image(state, action, int(candidate)))

    @app.get("/sets/{set_id}/img/frame/{action}/{frame}/{candidate}/{kind}")
    async def frame_image(
        set_id: str, action: str, frame: str, candidate: str, kind: str, request: Request
    ) -> Response:
        version = request.query_params.get("version")
        if (
            not images.valid_action(action)
            or not is_number(frame)
            or not is_number(candidate)
            or kind not in ("source", "matte")
            or (version is not None and not is_number(version))
        ):
            return not_found()
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        ref = images.frame_image(
            state,
            action,
            int(frame),
            int(candidate),
            "source" if kind == "source" else "matte",
            None if version is None else int(version),
        )
        return await serve_ref(request, ref)

    @app.get("/sets/{set_id}/img/contact-sheet")
    async def contact_sheet(set_id: str, request: Request) -> Response:
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        result = await review().result(set_id, state)
        return await serve_ref(request, result.contact_sheet if result else None)

    @app.get("/sets/{set_id}/download/{target}")
    async def download(set_id: str, target: str, request: Request) -> Response:
        if target not in TARGETS:
            return not_found()
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        result = await review().result(set_id, state)
        package = next((p for p in result.packages if p.target is ExportTarget(target)), None) if result else None
        archive = package.archive if package is not None else None
        return await serve_ref(request, archive, download=f"{set_id}-{target}.zip")

    @app.get("/sets/{set_id}/download/{target}/files/{number}")
    async def download_file(set_id: str, target: str, number: str, request: Request) -> Response:
        if target not in TARGETS or not is_number(number):
            return not_found()
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        result = await review().result(set_id, state)
        package = next((p for p in result.packages if p.target is ExportTarget(target)), None) if result else None
        if package is None or int(number) >= len(package.files):
            return not_found()
        file = package.files[int(number)]
        return await serve_ref(request, file.file, download=f"{target}-{re.sub(r'[^A-Za-z0-9._-]', '-', file.name)}")

    @app.get("/sets/{set_id}/download/emoji/{pose}/{kind}")
    async def download_emoji(set_id: str, pose: str, kind: str, request: Request) -> Response:
        formats = {"webp": "webp", "apng": "png", "gif": "gif", "sprite_sheet": "png"}
        if not images.valid_action(pose) or kind not in formats:
            return not_found()
        state = await set_state(set_id)
        if not isinstance(state, EmojiSetState):
            return state
        result = await review().result(set_id, state)
        emoji = next((e for e in result.emojis if e.pose == pose), None) if result else None
        ref = getattr(emoji, kind) if emoji is not None else None
        return await serve_ref(
            request, ref, download=f"{pose}{'-sprite' if kind == 'sprite_sheet' else ''}.{formats[kind]}"
        )

    app.add_middleware(BodyLimit)
    app.add_middleware(Gate, credentials=credentials, loopback_only=credentials is None and is_loopback(host))
    return app


def preview_frames(set_id: str, action: str, picks: list[Candidate | None]) -> list[str]:
    """The addresses of an emoji's current picks' cut-outs, in order (the preview cycles through them)."""
    return [
        image_url(set_id, "frame", action, index, pick.index, "matte", ref=pick.matte)
        for index, pick in enumerate(picks)
        if pick is not None and pick.matte is not None
    ]


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


def _forget_task(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a late refusal is shown by the state, not logged as unhandled

    return done


def reviewer_of(request: Request) -> Reviewer:
    """Who sent ``request`` (the gate put it in the request's state)."""
    reviewer: Reviewer = request.state.reviewer
    return reviewer


def reviewer_name(request: Request, form: FormData) -> str:
    """The name a message is signed with: the credential's when it names one, else the form's own field."""
    return reviewer_of(request).name or _str(form, "reviewer")


def _str(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _int(form: FormData, name: str) -> int:
    return _number(_str(form, name), name)


def _number(text: str, name: str = "frame") -> int:
    try:
        return parse_number(text, name)
    except InputRefused as err:
        raise BadInput(str(err)) from err


def _problem(err: Exception) -> str:
    if isinstance(err, ValidationError):
        return "; ".join(
            f"{'.'.join(str(part) for part in p['loc']) or 'input'}: {p['msg'].removeprefix('Value error, ')}"
            for p in err.errors()
        )
    return str(err)
