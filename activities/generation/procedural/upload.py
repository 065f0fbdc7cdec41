"""Posing a picture instead of a drawing: an uploaded character (RGB on white) keyed against white and moved by the
affine part of a :class:`.motion.Pose`.

:func:`key_white` splits a picture on white into premultiplied colour and alpha; :func:`warped` moves both by an
affine map (bilinearly, both alike, so the alpha stays the exact coverage of what is composited over white); and
:class:`PicturePose` maps a pose of the design grid onto the picture, about the point between the character's feet.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from PIL import Image, UnidentifiedImageError
from scipy import ndimage

from activities.generation.base import GenerationRefused
from activities.generation.drawing import Affine, FloatArray
from activities.generation.procedural.motion import GROUND_X, GROUND_Y, Pose
from activities.generation.procedural.render import DESIGN_SIZE, FRAMING, RenderedFrame

KEY_FLOOR = 3.0
"""Distance from white (255 minus the darkest channel) at or below which a background pixel is clear."""
KEY_OPAQUE = 48.0
"""Distance from white from which a pixel is opaque; between the two, alpha ramps linearly."""


def decode_rgb(data: bytes, size: int, what: str) -> NDArray[np.uint8]:
    """An encoded picture as ``size`` x ``size`` RGB (uint8), flattened over white and resized if need be.

    Raises:
        GenerationRefused: ``data`` is not a picture (the same request fails again).
    """
    try:
        with Image.open(io.BytesIO(data)) as opened:
            picture = opened.convert("RGBA")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise GenerationRefused(f"the {what} is not a readable picture: {error}") from error
    flat = Image.alpha_composite(Image.new("RGBA", picture.size, (255, 255, 255, 255)), picture).convert("RGB")
    if flat.size != (size, size):
        flat = flat.resize((size, size), Image.Resampling.LANCZOS)
    return np.asarray(flat, dtype=np.uint8)


def key_white(rgb: NDArray[np.uint8]) -> RenderedFrame:
    """Split a picture on white into premultiplied colour and alpha.

    Alpha ramps with the distance from white between :data:`KEY_FLOOR` and :data:`KEY_OPAQUE`, but only in the
    near-white regions that reach the picture's border: white enclosed by the character (eyes, a belly) stays opaque.
    The colour is what remains after taking the white out, so compositing over white gives the picture back (to within
    the floor, in the faintest pixels).
    """
    distance = 255.0 - rgb.min(axis=2).astype(np.float32)
    ramp = np.clip((distance - KEY_FLOOR) / (KEY_OPAQUE - KEY_FLOOR), 0.0, 1.0)
    regions, _ = ndimage.label(distance < KEY_OPAQUE)
    outside = np.unique(np.concatenate([regions[0], regions[-1], regions[:, 0], regions[:, -1]]))
    reaches_border = np.isin(regions, outside[outside > 0])
    alpha = np.where(reaches_border, ramp, np.float32(1.0)).astype(np.float32)
    premultiplied = np.clip(rgb.astype(np.float32) - (255.0 * (1.0 - alpha))[..., None], 0.0, None)
    return RenderedFrame(premultiplied.astype(np.float32), alpha)


def warped(layers: RenderedFrame, warp: Affine) -> RenderedFrame:
    """``layers`` moved by ``warp`` (pixel coordinates of the picture -> of the result), sampled bilinearly; what
    comes from outside the picture is clear."""
    inverse = warp.inverse()
    height, width = layers.alpha.shape
    # Pillow maps each result pixel centre through these coefficients to the source, as the affine maps points.
    coefficients = (inverse.a, inverse.b, inverse.e, inverse.c, inverse.d, inverse.f)

    def moved(channel: FloatArray) -> FloatArray:
        image = Image.fromarray(np.ascontiguousarray(channel, dtype=np.float32), "F")
        result = image.transform(
            (width, height), Image.Transform.AFFINE, coefficients, Image.Resampling.BILINEAR, fillcolor=0.0
        )
        return np.asarray(result, dtype=np.float32)

    premultiplied = np.dstack([moved(layers.premultiplied[..., channel]) for channel in range(3)])
    return RenderedFrame(premultiplied, np.clip(moved(layers.alpha), 0.0, 1.0))


@dataclass(frozen=True)
class PicturePose:
    """Poses of the design grid mapped onto a picture: the grid's ground point onto the picture's, its scale onto the
    picture's (as the drawn character fills a frame).

    Attributes:
        to_design: Pixel coordinates of the picture -> design coordinates of the character at rest.
    """

    to_design: Affine

    @classmethod
    def of(cls, layers: RenderedFrame, posed_as: Pose | None = None) -> PicturePose:
        """The mapping for the picture ``layers``, whose character stands as ``posed_as`` (at rest when None).

        The picture's ground point is the bottom middle of what is mostly opaque (the bottom middle of the frame when
        nothing is); it is where ``posed_as`` puts the design grid's ground point.
        """
        size = layers.alpha.shape[0]
        rows, columns = np.nonzero(layers.alpha > 0.5)
        if rows.size:
            ground_x, ground_y = (float(columns.min()) + float(columns.max()) + 1.0) / 2.0, float(rows.max()) + 1.0
        else:
            ground_x, ground_y = size / 2.0, float(size)
        scale = DESIGN_SIZE / (size * FRAMING.scale)
        posed_x, posed_y = (posed_as or Pose()).transform().apply(GROUND_X, GROUND_Y)
        to_design = (
            Affine.translation(-ground_x, -ground_y)
            .then(Affine.scaling(scale, scale))
            .then(Affine.translation(posed_x, posed_y))
        )
        return cls(to_design)

    def warp(self, pose: Pose) -> Affine:
        """The picture's pixels -> the picture posed as ``pose``."""
        return self.to_design.then(pose.transform()).then(self.to_design.inverse())

    def between(self, start: Pose, pose: Pose) -> Affine:
        """The picture already posed as ``start`` -> posed as ``pose`` instead."""
        in_design = start.transform().inverse().then(pose.transform())
        return self.to_design.then(in_design).then(self.to_design.inverse())
