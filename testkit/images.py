"""Small test images built in code."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def sticker_png(size: int = 64) -> bytes:
    """A disc on a plain background: what the classical pipeline cuts out."""
    yy, xx = np.indices((size, size))
    disc = np.hypot(yy - size / 2, xx - size / 2) < size / 3
    rgb = np.where(disc[..., None], np.array([240, 120, 40], np.uint8), np.array([250, 250, 250], np.uint8))
    buffer = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8), "RGB").save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
