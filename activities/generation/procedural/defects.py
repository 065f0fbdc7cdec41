"""The flaws of a real image-to-video clip, made on purpose: about one source frame in ten is blurred or glitched.

:func:`defect_schedule` picks the damaged frames of a take deterministically: one frame in each run of ten, never the
first frame (the start frame) and never two in a row. :meth:`Defect.apply` damages a frame's RGB the way video models
and their decoders do: a motion blur-like gaussian blur, a band of rows slipped sideways, a blocky smear of
macroblocks, or a colour flash over the whole frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

from activities.generation.procedural.prompt import stable_fraction

DEFECT_RUN = 10
"""One frame in each run of this many source frames is damaged."""

_FLASH_COLOURS = ((255.0, 0.0, 200.0), (0.0, 255.0, 120.0), (255.0, 255.0, 255.0), (40.0, 40.0, 60.0))


class DefectKind(StrEnum):
    """How a clip frame is damaged."""

    BLUR = "blur"
    """Gaussian blur of the whole frame (a frame the model rendered out of focus, or motion blur)."""
    BAND = "band"
    """A horizontal band of rows displaced sideways (a tearing glitch)."""
    SMEAR = "smear"
    """A horizontal strip flattened into blocks of one colour each (lost macroblocks)."""
    FLASH = "flash"
    """The whole frame washed towards one colour (a flash of a wrong frame)."""


@dataclass(frozen=True)
class Defect:
    """One damaged frame: the kind of damage and two numbers in [0, 1) that set how strong it is and where.

    Attributes:
        kind: How the frame is damaged.
        strength: How strong the damage is (blur radius, displacement, block size, flash amount).
        position: Where it is: the band's or strip's height in the frame; the flash's colour.
    """

    kind: DefectKind
    strength: float
    position: float

    def apply(self, rgb: NDArray[np.uint8]) -> NDArray[np.uint8]:
        """``rgb`` (H x W x 3, uint8) damaged by this defect, as a new array."""
        size = rgb.shape[0]
        match self.kind:
            case DefectKind.BLUR:
                sigma = max(1.0, (1.4 + 1.6 * self.strength) * size / 256.0)
                return _to_uint8(ndimage.gaussian_filter(rgb.astype(np.float32), sigma=(sigma, sigma, 0.0)))
            case DefectKind.BAND:
                rows = self._rows(size, 0.06 + 0.08 * self.strength)
                shift = max(2, round((0.04 + 0.08 * self.strength) * size))
                damaged = rgb.copy()
                damaged[rows] = np.roll(rgb[rows], shift if self.position < 0.5 else -shift, axis=1)
                return damaged
            case DefectKind.SMEAR:
                rows = self._rows(size, 0.2 + 0.15 * self.strength)
                block = max(4, round((8 + 8 * self.strength) * size / 256.0))
                damaged = rgb.copy()
                damaged[rows] = _blocky(rgb[rows], block)
                return damaged
            case DefectKind.FLASH:
                colour = np.asarray(_FLASH_COLOURS[int(self.position * len(_FLASH_COLOURS))], dtype=np.float32)
                amount = 0.3 + 0.25 * self.strength
                return _to_uint8(rgb.astype(np.float32) * (1.0 - amount) + colour * amount)

    def _rows(self, size: int, height: float) -> slice:
        """The rows of a band ``height`` (a fraction of the frame) high, at this defect's position."""
        rows = max(2, round(height * size))
        top = round(self.position * (size - rows))
        return slice(top, top + rows)


def _blocky(strip: NDArray[np.uint8], block: int) -> NDArray[np.uint8]:
    """Each ``block`` x ``block`` tile of ``strip`` filled with its mean colour."""
    height, width = strip.shape[:2]
    damaged = strip.astype(np.float32)
    for top in range(0, height, block):
        for left in range(0, width, block):
            tile = damaged[top : top + block, left : left + block]
            tile[...] = tile.mean(axis=(0, 1))
    return _to_uint8(damaged)


def _to_uint8(image: NDArray[np.floating]) -> NDArray[np.uint8]:
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def defect_schedule(frames: int, *key: object) -> dict[int, Defect]:
    """The damaged frames of a clip of ``frames`` source frames, by index, deterministically from ``key``.

    Frame ``DEFECT_RUN * k + r`` is damaged for one ``r`` in 1..8 per run ``k`` (when the clip has that frame), so
    frame 0 never is and no two damaged frames are adjacent.
    """
    schedule = {}
    for run in range(0, frames, DEFECT_RUN):
        index = run + 1 + int(stable_fraction("defect", *key, run) * (DEFECT_RUN - 2))
        if index < frames:
            kinds = list(DefectKind)
            schedule[index] = Defect(
                kind=kinds[int(stable_fraction("kind", *key, index) * len(kinds))],
                strength=stable_fraction("strength", *key, index),
                position=stable_fraction("position", *key, index),
            )
    return schedule
