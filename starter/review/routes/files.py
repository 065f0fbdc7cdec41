"""Images and downloads, by role and indices, each resolved through the set's state (or its result once finished).

An address names no store key: the file is looked up in the state, so only a file of the set can be served. A file
is answered with its digest as its ``ETag``, and cacheable forever when ``?v=`` names its content.
"""

from __future__ import annotations

import asyncio
import re

from fastapi import APIRouter, Request
from fastapi.responses import Response

from core.artifacts import ArtifactError
from starter.review import images
from starter.review.dependencies import Review, ReviewDep
from starter.review.forms import TARGETS
from starter.review.limits import is_number
from workflows.contract import ArtifactRef, EmojiSetResult, EmojiSetState, ExportTarget

IMMUTABLE = "private, max-age=31536000, immutable"
REVALIDATE = "private, no-cache"

router = APIRouter()


async def serve_ref(
    review: Review, request: Request, ref: ArtifactRef | None, *, download: str | None = None
) -> Response:
    """The stored file ``ref`` (304 when the request already has it), as an attachment named ``download`` if given.

    Args:
        review: The app's shared objects (the store is read).
        request: The request (its ``?v=`` and ``If-None-Match``).
        ref: The file; None (or, when not a download, a file that is not an image) answers 404.
        download: The attachment's file name; None serves an image inline.

    Returns:
        The file, 304, or the 404 page.
    """
    if ref is None or (download is None and not images.is_image(ref)):
        return review.not_found()
    etag = f'"{ref.sha256}"'
    named = request.query_params.get("v", "")
    cache = IMMUTABLE if len(named) >= images.VERSION_CHARS and ref.sha256.startswith(named) else REVALIDATE
    headers = {"ETag": etag, "Cache-Control": cache}
    if download is not None:
        headers["Content-Disposition"] = f'attachment; filename="{download}"'
    if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    try:
        data = await asyncio.to_thread(review.store.get, ref)
    except ArtifactError:
        return review.not_found("the image is not in the store")
    return Response(data, media_type=ref.media_type, headers=headers)


@router.get("/sets/{set_id}/img/character/{candidate}")
async def character_image(set_id: str, candidate: str, request: Request, review: ReviewDep) -> Response:
    """A character candidate's image."""
    state = await review.set_state(set_id)
    if not isinstance(state, EmojiSetState) or not is_number(candidate):
        return review.not_found()
    return await serve_ref(review, request, images.character_image(state, int(candidate)))


@router.get("/sets/{set_id}/img/start/{action}/{candidate}")
async def start_image(set_id: str, action: str, candidate: str, request: Request, review: ReviewDep) -> Response:
    """An action's start frame candidate."""
    if not images.valid_action(action) or not is_number(candidate):
        return review.not_found()
    state = await review.set_state(set_id)
    if not isinstance(state, EmojiSetState):
        return state
    return await serve_ref(review, request, images.start_frame_image(state, action, int(candidate)))


@router.get("/sets/{set_id}/img/frame/{action}/{frame}/{candidate}/{kind}")
async def frame_image(
    set_id: str, action: str, frame: str, candidate: str, kind: str, request: Request, review: ReviewDep
) -> Response:
    """A frame candidate's source or cut-out (``matte``; ``?version=`` one from its undo history)."""
    version = request.query_params.get("version")
    if (
        not images.valid_action(action)
        or not is_number(frame)
        or not is_number(candidate)
        or kind not in ("source", "matte")
        or (version is not None and not is_number(version))
    ):
        return review.not_found()
    state = await review.set_state(set_id)
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
    return await serve_ref(review, request, ref)


async def finished(review: Review, set_id: str) -> EmojiSetResult | Response | None:
    """The set's result once it has completed (None before), or the page that says why the set could not be read."""
    state = await review.set_state(set_id)
    if not isinstance(state, EmojiSetState):
        return state
    return await review.result(set_id, state)


@router.get("/sets/{set_id}/img/contact-sheet")
async def contact_sheet(set_id: str, request: Request, review: ReviewDep) -> Response:
    """The finished set's contact sheet."""
    result = await finished(review, set_id)
    if isinstance(result, Response):
        return result
    return await serve_ref(review, request, result.contact_sheet if result else None)


@router.get("/sets/{set_id}/download/{target}")
async def download(set_id: str, target: str, request: Request, review: ReviewDep) -> Response:
    """The finished set's package for ``target``, as ``<set>-<target>.zip``."""
    if target not in TARGETS:
        return review.not_found()
    result = await finished(review, set_id)
    if isinstance(result, Response):
        return result
    package = next((p for p in result.packages if p.target is ExportTarget(target)), None) if result else None
    archive = package.archive if package is not None else None
    return await serve_ref(review, request, archive, download=f"{set_id}-{target}.zip")


@router.get("/sets/{set_id}/download/{target}/files/{number}")
async def download_file(set_id: str, target: str, number: str, request: Request, review: ReviewDep) -> Response:
    """One file of the finished set's package for ``target``."""
    if target not in TARGETS or not is_number(number):
        return review.not_found()
    result = await finished(review, set_id)
    if isinstance(result, Response):
        return result
    package = next((p for p in result.packages if p.target is ExportTarget(target)), None) if result else None
    if package is None or int(number) >= len(package.files):
        return review.not_found()
    file = package.files[int(number)]
    name = re.sub(r"[^A-Za-z0-9._-]", "-", file.name)
    return await serve_ref(review, request, file.file, download=f"{target}-{name}")


@router.get("/sets/{set_id}/download/emoji/{pose}/{kind}")
async def download_emoji(set_id: str, pose: str, kind: str, request: Request, review: ReviewDep) -> Response:
    """One finished emoji as ``webp``, ``apng``, ``gif`` or ``sprite_sheet``.

    Registered after :func:`download_file`, whose address ``download/emoji/files/<n>`` also matches (as the 404 of
    a target named ``emoji``).
    """
    formats = {"webp": "webp", "apng": "png", "gif": "gif", "sprite_sheet": "png"}
    if not images.valid_action(pose) or kind not in formats:
        return review.not_found()
    result = await finished(review, set_id)
    if isinstance(result, Response):
        return result
    emoji = next((e for e in result.emojis if e.pose == pose), None) if result else None
    ref = getattr(emoji, kind) if emoji is not None else None
    return await serve_ref(
        review, request, ref, download=f"{pose}{'-sprite' if kind == 'sprite_sheet' else ''}.{formats[kind]}"
    )
