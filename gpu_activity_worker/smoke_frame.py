"""The smoke test's frame, and what a matte of it must look like: one check for the image build and the endpoint.

The GPU image's build mattes it with every pipeline it bakes (``python -m gpu_activity_worker.check_image``) and
``popcon runpod smoke`` sends it through the endpoint: both accept a matte only when it cuts the subject out.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

OPAQUE_MIN = 224
"""Lowest alpha at the centre of the subject."""
CLEAR_MAX = 31
"""Highest alpha in the background corners."""


def smoke_frame(size: int = 96) -> bytes:
    """A small cartoon face on a white background, as PNG: a subject the classical pipeline cuts out cleanly."""
    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    margin = size // 6
    draw.ellipse((margin, margin, size - margin, size - margin), fill=(255, 140, 40), outline=(90, 40, 10), width=3)
    eye = size // 14
    for x in (size * 3 // 8, size * 5 // 8):
        draw.ellipse((x - eye, size * 2 // 5 - eye, x + eye, size * 2 // 5 + eye), fill=(30, 20, 10))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def cut_out_problem(alpha: np.ndarray) -> str | None:
    """Why ``alpha`` (uint8, H x W) is not a cut-out of the smoke frame's subject, or ``None`` when it is one."""
    height, width = alpha.shape
    centre, corners = alpha[height // 2, width // 2], alpha[[0, 0, -1, -1], [0, -1, 0, -1]]
    if centre < OPAQUE_MIN or corners.max() > CLEAR_MAX:
        return f"the matte does not cut the test subject out: centre alpha {centre}, corner alphas {corners.tolist()}"
    return None
