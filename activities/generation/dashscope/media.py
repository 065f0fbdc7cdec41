"""Images in and out of DashScope: our PNGs as the base64 data URIs the edit and video endpoints take, and results
scaled to the frame size.

The image edit (``input.images``) and image-to-video (``input.img_url``) endpoints take a public URL or a base64
string ``data:{MIME_type};base64,{base64_data}``; the image may be JPEG, JPG, PNG (without transparency), BMP or
WEBP, of at most 10 MB; its sides must be 384 to 5000 pixels for the Wan 2.5 image edit and 360 to 2000 pixels for
image-to-video. Our images are sent inline, never uploaded anywhere: an image above 10 MB is refused (not
retryable), a transparent one is flattened on white, and one whose sides are out of range is scaled into it.

Sources: https://www.alibabacloud.com/help/en/model-studio/image-to-video-api-reference (``img_url``),
https://www.alibabacloud.com/help/en/model-studio/wan-image-edit-2-5 (``images``).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from PIL import Image, ImageOps

from activities.generation.base import GenerationError, GenerationRefused

MAX_INPUT_IMAGE_BYTES = 10_000_000
"""The documented 10 MB per input image, read as decimal megabytes (the stricter reading)."""
WHITE = (255, 255, 255)
_MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "BMP": "image/bmp"}


@dataclass(frozen=True)
class InputLimits:
    """What an endpoint takes as an input image.

    Attributes:
        min_edge: The shortest side allowed, in pixels.
        max_edge: The longest side allowed, in pixels.
        max_bytes: The largest file allowed.
    """

    min_edge: int
    max_edge: int
    max_bytes: int = MAX_INPUT_IMAGE_BYTES


IMAGE_EDIT_INPUT = InputLimits(min_edge=384, max_edge=5000)
"""``input.images`` of the Wan 2.5 image edit."""
CLIP_INPUT = InputLimits(min_edge=360, max_edge=2000)
"""``input.img_url`` of Wan image-to-video."""


def input_data_uri(data: bytes, limits: InputLimits, what: str) -> str:
    """An input image as a data URI the endpoint accepts: as it is when it fits, else flattened and scaled into range.

    Args:
        data: The encoded image (one of our PNGs, or a JPEG, WEBP, BMP).
        limits: The endpoint's limits.
        what: What the image is, for messages (e.g. ``"the start frame"``).

    Raises:
        GenerationRefused: The image is larger than ``limits.max_bytes``, cannot be read, or cannot be scaled into the
            side limits (an extreme aspect ratio). The same bytes fail again, so this is not retryable.
    """
    if len(data) > limits.max_bytes:
        raise GenerationRefused(
            f"{what} is {len(data)} bytes; DashScope takes input images of at most {limits.max_bytes} bytes (10 MB)"
        )
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            fmt, size, transparent = image.format, image.size, _has_alpha(image)
            fitted = _fitted_size(size, limits)
            if fmt in _MEDIA_TYPES and not transparent and fitted == size:
                return _data_uri(_MEDIA_TYPES[fmt], data)
            rgb = _on_white(image)
            if fitted != size:
                rgb = rgb.resize(fitted, Image.Resampling.LANCZOS)
    except (OSError, Image.DecompressionBombError) as exc:
        raise GenerationRefused(f"{what} cannot be read as an image: {exc}") from exc
    out = io.BytesIO()
    rgb.save(out, format="PNG")
    if out.tell() > limits.max_bytes:
        raise GenerationRefused(
            f"{what} is {out.tell()} bytes once prepared; DashScope takes at most {limits.max_bytes}"
        )
    return _data_uri("image/png", out.getvalue())


def square_png(data: bytes, size: int, what: str) -> bytes:
    """A result image as a ``size`` x ``size`` RGB PNG: scaled to fit, padded with white if it was not square.

    Raises:
        GenerationError: The service returned something that is not a readable image.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            frame = ImageOps.pad(_on_white(image), (size, size), Image.Resampling.LANCZOS, color=WHITE)
    except (OSError, Image.DecompressionBombError) as exc:
        raise GenerationError(f"DashScope returned {what} that is not a readable image: {exc}") from exc
    out = io.BytesIO()
    frame.save(out, format="PNG")
    return out.getvalue()


def _fitted_size(size: tuple[int, int], limits: InputLimits) -> tuple[int, int]:
    """The size itself when its sides are in range, else scaled (keeping its aspect ratio) to the nearest in range."""
    width, height = size
    short, long = min(size), max(size)
    if short >= limits.min_edge and long <= limits.max_edge:
        return size
    scale = limits.min_edge / short if short < limits.min_edge else limits.max_edge / long
    fitted = (max(round(width * scale), 1), max(round(height * scale), 1))
    if min(fitted) < limits.min_edge or max(fitted) > limits.max_edge:
        raise GenerationRefused(
            f"a {width}x{height} image cannot be scaled to sides of {limits.min_edge} to {limits.max_edge} pixels"
        )
    return fitted


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _on_white(image: Image.Image) -> Image.Image:
    """The image as RGB, its transparent parts white."""
    if not _has_alpha(image):
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, WHITE)
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


def _data_uri(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
