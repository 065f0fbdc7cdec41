"""Assembly activities: export an approved emoji as animated stickers and the set as a contact sheet."""

from __future__ import annotations

import asyncio
import io
import json

from PIL import Image
from temporalio import activity

from activities.export.animation import decode_rgba_png, encode_apng, encode_gif, encode_webp
from activities.export.sheets import contact_sheet, sprite_sheet
from core.artifacts import ArtifactError, ArtifactStore, get_in_set
from workflows.contract import (
    ActivityName,
    ArtifactRef,
    AssembleEmojiInput,
    ContactSheetInput,
    EmojiOutput,
    FailureType,
)
from workflows.keys import export_key


class AssemblyActivities:
    """Reads matted frames from the store and writes the exported files back to it."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store

    def _frames(self, set_id: str, refs: list[ArtifactRef]) -> list[Image.Image]:
        """The set's own frames: a reference to another set's file is refused (``ForeignArtifact``)."""
        within = export_key(set_id, "frames")
        frames = []
        for ref in refs:
            try:
                frames.append(decode_rgba_png(get_in_set(self._store, ref, within)))
            except ArtifactError as err:
                raise err.failure_type.error(str(err)) from err
            except ValueError as err:
                raise FailureType.CORRUPT_IMAGE.error(f"{ref.uri}: {err}") from err
        return frames

    def _put(self, set_id: str, name: str, data: bytes, media_type: str, size: tuple[int, int]) -> ArtifactRef:
        return self._store.put(export_key(set_id, name), data, media_type, width=size[0], height=size[1])

    @activity.defn(name=ActivityName.ASSEMBLE_EMOJI)
    async def assemble_emoji(self, request: AssembleEmojiInput) -> EmojiOutput:
        """Write the emoji's animated WebP, APNG and GIF and its sprite sheet."""
        return await asyncio.to_thread(self._assemble_emoji, request)

    def _assemble_emoji(self, request: AssembleEmojiInput) -> EmojiOutput:
        frames = self._frames(request.set_id, request.frames)
        size = frames[0].size
        duration = request.frame_duration_ms
        sheet_png, layout = sprite_sheet(frames)
        sheet_size = (layout["width"], layout["height"])
        layout_json = json.dumps({**layout, "frame_duration_ms": duration}).encode()
        return EmojiOutput(
            pose=request.pose,
            webp=self._put(request.set_id, f"{request.pose}.webp", encode_webp(frames, duration), "image/webp", size),
            apng=self._put(request.set_id, f"{request.pose}.apng", encode_apng(frames, duration), "image/apng", size),
            gif=self._put(request.set_id, f"{request.pose}.gif", encode_gif(frames, duration), "image/gif", size),
            sprite_sheet=self._put(request.set_id, f"{request.pose}-sprite.png", sheet_png, "image/png", sheet_size),
            sprite_layout=self._put(
                request.set_id, f"{request.pose}-sprite.json", layout_json, "application/json", sheet_size
            ),
            frames=request.frames,
        )

    @activity.defn(name=ActivityName.ASSEMBLE_CONTACT_SHEET)
    async def assemble_contact_sheet(self, request: ContactSheetInput) -> ArtifactRef:
        """Write one page with every emoji's frames over a checkerboard."""
        return await asyncio.to_thread(self._assemble_contact_sheet, request)

    def _assemble_contact_sheet(self, request: ContactSheetInput) -> ArtifactRef:
        rows = [(pose, self._frames(request.set_id, refs)) for pose, refs in request.rows]
        page = contact_sheet(request.title, rows)
        with Image.open(io.BytesIO(page)) as image:
            size = image.size
        return self._put(request.set_id, "contact-sheet.png", page, "image/png", size)
