"""The procedural generator: an offline, deterministic cartoon character, the default backend.

The character is read from the prompt (body colour, creature kind, accessories), posed per preset (expression, prop,
motion) and drawn with the signed-distance shapes of :mod:`activities.generation.drawing` over a uniform background.
Because the drawing's alpha is exactly the coverage used to composite it, :func:`render_frame` also returns each
frame's true alpha, which quality tests and benchmarks compare matting results against.

All geometry is laid out on a 256 x 256 design grid and scaled to the requested size. Frame ``f`` of ``n`` is the phase
``t = (f mod n) / n`` of a loop, so the last frame leads smoothly back to the first.

This module renders frames and registers the generator; the work is split over its submodules:

- :mod:`.prompt`: reading the character and the style from text (:class:`CharacterSpec`, :class:`StyleTweaks`);
- :mod:`.motion`: the looping :class:`Pose` and the per-candidate :class:`CandidateLook`;
- :mod:`.painter`: painting the character, with the layers of :mod:`.face`, :mod:`.accessories` and :mod:`.props`
  over the shared state and helpers of :mod:`.brush`.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from activities.generation.base import GeneratedImage
from activities.generation.drawing import Affine, Canvas, Colour, FloatArray
from activities.generation.procedural.motion import GROUND_X, GROUND_Y, CandidateLook, Pose
from activities.generation.procedural.painter import CharacterPainter
from activities.generation.procedural.prompt import (
    ACCESSORY_WORDS,
    ANATOMY,
    COLOUR_WORDS,
    KIND_WORDS,
    WHITE,
    Accessory,
    Anatomy,
    CharacterSpec,
    Ears,
    Kind,
    Nose,
    Silhouette,
    StyleTweaks,
    character_for,
    stable_fraction,
)
from workflows.contract import GenerateFrameInput

__all__ = [
    "ACCESSORY_WORDS",
    "ANATOMY",
    "COLOUR_WORDS",
    "DESIGN_SIZE",
    "FRAMING",
    "GROUND_X",
    "GROUND_Y",
    "KIND_WORDS",
    "MARGIN",
    "WHITE",
    "Accessory",
    "Anatomy",
    "CandidateLook",
    "CharacterSpec",
    "Ears",
    "Kind",
    "Nose",
    "Pose",
    "ProceduralGenerator",
    "RenderedFrame",
    "Silhouette",
    "StyleTweaks",
    "character_for",
    "render_frame",
    "render_layers",
    "stable_fraction",
]

DESIGN_SIZE = 256.0
"""Edge of the design grid all geometry is laid out on."""

MARGIN = 0.06
"""Fraction of the frame edge the character and its props always stay clear of."""

FRAMING = Affine.translation(0.0, 4.0).then(Affine.scaling(1.08, 1.08, 128.0, 128.0))
"""Design grid -> frame (in design units): centres and enlarges the envelope of every kind, accessory, pose and prop
over the whole loop so that it fills the frame but stays inside ``MARGIN``."""


@dataclass(frozen=True)
class RenderedFrame:
    """A drawn frame before compositing: premultiplied character colour, its exact alpha, and the background."""

    premultiplied: FloatArray
    alpha: FloatArray
    background: Colour

    def composite(self) -> NDArray[np.uint8]:
        """``alpha * character + (1 - alpha) * background`` in float, rounded once to uint8 RGB."""
        background = np.asarray(self.background, dtype=np.float32)
        image = self.premultiplied + (1.0 - self.alpha)[..., None] * background
        return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def render_layers(request: GenerateFrameInput, candidate: int) -> RenderedFrame:
    """Draw candidate ``candidate`` of the requested frame, deterministically."""
    spec = character_for(request)
    look = CandidateLook.for_candidate(spec, request.seed, candidate)
    t = (request.frame % request.frame_count) / request.frame_count if request.frame_count > 0 else 0.0
    pixels_per_unit = request.image_size / DESIGN_SIZE
    canvas = Canvas(request.image_size, FRAMING.then(Affine.scaling(pixels_per_unit, pixels_per_unit)))
    CharacterPainter(canvas, spec, look, StyleTweaks.from_style(request.style), request.pose, t).paint()
    return RenderedFrame(canvas.premultiplied, canvas.alpha, look.background)


def render_frame(request: GenerateFrameInput, candidate: int) -> tuple[NDArray[np.uint8], FloatArray]:
    """Draw one candidate frame.

    Returns:
        The RGB image (uint8, H x W x 3) composited over its background, and the true alpha (float32, H x W, 0..1)
        that was used to composite it.
    """
    frame = render_layers(request, candidate)
    return frame.composite(), frame.alpha


def _png(array: NDArray[np.uint8]) -> bytes:
    """PNG bytes of an RGB (H x W x 3) or greyscale (H x W) uint8 image."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


class ProceduralGenerator:
    """The offline generator: cartoon frames drawn from the prompt."""

    name: ClassVar[str] = "procedural"

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """Draw ``request.count`` candidates off the event loop, as PNGs."""
        return await asyncio.to_thread(self.generate_now, request)

    def generate_now(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """The blocking work of :meth:`generate`."""
        images = []
        for candidate in range(request.first_candidate, request.first_candidate + request.count):
            rgb, _ = render_frame(request, candidate)
            images.append(
                GeneratedImage(
                    data=_png(rgb), media_type="image/png", width=request.image_size, height=request.image_size
                )
            )
        return images
