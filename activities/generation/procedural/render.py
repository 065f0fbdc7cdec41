"""Drawing one frame of a :class:`.scene.Scene` on white, with its exact alpha.

All geometry is laid out on a 256 x 256 design grid and scaled to the requested size. Because the drawing's alpha is
exactly the coverage used to composite it, :func:`render` returns each frame's true alpha beside its colour, and the
part of it that the effects around the character add (sparkles, sweat drops, motion lines, zzz: what segmentation
models tend to drop), so matting tests can score how many of the effects a pipeline kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from activities.generation.drawing import Affine, Canvas, FloatArray
from activities.generation.procedural.painter import CharacterPainter
from activities.generation.procedural.scene import Scene

DESIGN_SIZE = 256.0
"""Edge of the design grid all geometry is laid out on."""

MARGIN = 0.06
"""Fraction of the frame edge the character and its props always stay clear of."""

FRAMING = Affine.translation(0.0, 4.0).then(Affine.scaling(1.08, 1.08, 128.0, 128.0))
"""Design grid -> frame (in design units): centres and enlarges the envelope of every kind, accessory, pose and prop
over the whole loop so that it fills the frame but stays inside ``MARGIN``."""


@dataclass(frozen=True)
class RenderedFrame:
    """A frame before compositing: premultiplied colour (float32, H x W x 3, 0..255) and its alpha (float32, H x W,
    0..1), shown over plain white.

    Attributes:
        premultiplied: The colour, premultiplied by ``alpha``.
        alpha: The coverage of everything drawn.
        effect_alpha: How much of ``alpha`` the effects drawn around the character add over the character's own
            coverage (float32, H x W, 0..1; ``alpha - effect_alpha`` is the character alone); ``None`` when the frame
            has no separate effects (an uploaded picture).
    """

    premultiplied: FloatArray
    alpha: FloatArray
    effect_alpha: FloatArray | None = None

    def composite(self) -> NDArray[np.uint8]:
        """``premultiplied + (1 - alpha) * white`` in float, rounded once to uint8 RGB."""
        image = self.premultiplied + (255.0 * (1.0 - self.alpha))[..., None]
        return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def render(scene: Scene, size: int, t: float) -> RenderedFrame:
    """Draw ``scene`` at phase ``t`` of its loop on a ``size`` x ``size`` canvas, deterministically."""
    pixels_per_unit = size / DESIGN_SIZE
    canvas = Canvas(size, FRAMING.then(Affine.scaling(pixels_per_unit, pixels_per_unit)))
    painter = CharacterPainter(canvas, scene, t)
    painter.paint_character()
    character = canvas.alpha
    painter.paint_effects()
    alpha = canvas.alpha
    return RenderedFrame(canvas.premultiplied, alpha, alpha - character)
