"""The procedural generator itself: the four roles of :class:`~activities.generation.base.Generator`, each run off the
event loop."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from activities.generation.base import GeneratedClip, GeneratedImage
from activities.generation.procedural.clip import clip_mp4
from activities.generation.procedural.stills import character_images, edited_frames, start_frame_images
from workflows.contract import (
    EditFrameInput,
    GenerateCharacterInput,
    GenerateClipInput,
    GenerateStartFrameInput,
    GeneratorRole,
)


class ProceduralGenerator:
    """The offline, deterministic backend: a cartoon character drawn from the prompt, animated in code.

    Every output is a function of its request (and input bytes) alone, so a retried activity stores the same bytes.
    """

    name: ClassVar[str] = "procedural"

    def model(self, role: GeneratorRole) -> str:
        """One model for every role, ``procedural`` (free: the default price table prices it at 0)."""
        return "procedural"

    def clip_seconds(self, asked: float) -> float:
        """Clips of the length asked."""
        return asked

    async def character(self, request: GenerateCharacterInput) -> list[GeneratedImage]:
        """``request.count`` characters of ``request.prompt`` standing at rest on white (see
        :func:`.stills.character_images`)."""
        return await asyncio.to_thread(character_images, request)

    async def start_frame(self, request: GenerateStartFrameInput, character: bytes) -> list[GeneratedImage]:
        """``request.count`` start frames: the character in the action's pose (see
        :func:`.stills.start_frame_images`)."""
        return await asyncio.to_thread(start_frame_images, request, character)

    async def edit_frame(self, request: EditFrameInput, source: bytes) -> list[GeneratedImage]:
        """``request.count`` new candidates for one frame slot (see :func:`.stills.edited_frames`)."""
        return await asyncio.to_thread(edited_frames, request, source)

    async def clip(self, request: GenerateClipInput, start_frame: bytes) -> GeneratedClip:
        """One take of the action's motion from ``start_frame``, as an H.264 MP4 (see :func:`.clip.clip_mp4`)."""
        return GeneratedClip(data=await asyncio.to_thread(clip_mp4, request, start_frame))
