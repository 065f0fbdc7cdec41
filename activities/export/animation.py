"""Encode one emoji's frames as looping animated stickers: WebP, APNG and GIF.

Frames are straight (unpremultiplied) RGBA images of one size, shown ``duration_ms`` each, looping forever. Each
encoder makes every decoded frame replace the previous one entirely, so transparent areas never show an earlier frame.
Resizing happens in premultiplied space (colours weighted by their alpha), so edges get no dark or white fringe.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image, PngImagePlugin

GIF_ALPHA_THRESHOLD = 128
"""GIF pixels with alpha at or above this (0.5) are drawn, the others are transparent."""

GIF_MATTE = (128, 128, 128)
"""What the kept semi-transparent GIF edge pixels are composited onto.

A kept edge pixel of alpha ``a`` (at least 0.5) shown over a chat background ``B`` should look like
``a * F + (1 - a) * B``; composited onto matte ``M`` it is off by ``(1 - a) * |M - B|``. Mid grey halves the worst
case over both white and near-black chat themes, where a white or black matte gives a bright halo on dark themes or
a dark one on light themes.
"""

GIF_MIN_DELAY_MS = 20
"""Browsers play GIF delays under 2 centiseconds as 100 ms, so faster frames are slowed to 20 ms instead."""

_RESAMPLE = Image.Resampling.LANCZOS


def validate_frames(frames: Sequence[Image.Image]) -> tuple[int, int]:
    """Check that ``frames`` is a non-empty list of same-size RGBA images.

    Args:
        frames: The animation frames.

    Returns:
        The common ``(width, height)``.

    Raises:
        ValueError: No frames, a frame not in mode ``RGBA``, or frames of different sizes.
    """
    if not frames:
        raise ValueError("an animation needs at least one frame, got none")
    size = frames[0].size
    for index, frame in enumerate(frames):
        if frame.mode != "RGBA":
            raise ValueError(f"frame {index} is mode {frame.mode!r}; frames must be straight RGBA ('RGBA')")
        if frame.size != size:
            raise ValueError(f"frame {index} is {frame.size[0]}x{frame.size[1]}, frame 0 is {size[0]}x{size[1]}")
    return size


def resize_premultiplied(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Resize a straight RGBA image with LANCZOS in premultiplied space.

    Resampling straight RGBA mixes the colour hidden under transparent pixels into the edge (dark or white
    fringes); premultiplying weights every colour by its alpha first. This works in float: Pillow's own RGBA resize
    premultiplies in 8 bits, which garbles the colour of low-alpha edge pixels and leaves black under alpha 0. Where
    the new alpha rounds to 0 the colour is taken from a straight resize, which keeps the foreground colour there.

    Args:
        image: A straight RGBA image.
        size: The new ``(width, height)``.

    Returns:
        A straight RGBA image of ``size``.
    """
    rgba = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255.0
    alpha = np.clip(_resize_channel(rgba[..., 3], size), 0.0, 1.0)
    visible = alpha >= 0.5 / 255.0
    safe_alpha = np.where(visible, alpha, 1.0)
    channels = []
    for c in range(3):
        unpremultiplied = _resize_channel(rgba[..., c] * rgba[..., 3], size) / safe_alpha
        channels.append(np.where(visible, unpremultiplied, _resize_channel(rgba[..., c], size)))
    channels.append(alpha)
    out = np.clip(np.stack(channels, axis=-1) * 255.0 + 0.5, 0.0, 255.0).astype(np.uint8)
    return Image.fromarray(out)


def fit_size(size: tuple[int, int], box: int) -> tuple[int, int]:
    """The largest size with the aspect ratio of ``size`` that fits in a ``box`` x ``box`` square."""
    scale = box / max(size)
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def encode_webp(
    frames: Sequence[Image.Image], duration_ms: int, max_size: int | None = None, *, quality: int | None = None
) -> bytes:
    """Encode a looping animated WebP: lossless by default, or lossy colour with lossless (exact) alpha.

    Lossless is the default because stickers are small and mostly flat cartoon colours, where it is also the smaller
    choice (26 KiB lossless vs 57 KiB at quality 90 for 12 frames of 256 px), and it keeps edge colours exact with no
    drift between frames. Shaded or noisy art compresses badly losslessly (470 KiB vs 87 KiB at quality 90): pass
    ``quality`` to fit a platform's byte limit. Alpha stays exact either way (``alpha_quality=100``).

    libwebp's animation encoder takes every frame as a full canvas and picks each sub-frame's blend and dispose mode
    so that the decoded frame equals it: frames never accumulate. Identical consecutive frames are merged into one
    longer frame; the loop time is unchanged.

    Args:
        frames: Straight RGBA frames, all the same size.
        duration_ms: How long each frame is shown, in milliseconds.
        max_size: When set, frames larger than this on their longest side are scaled down to it.
        quality: ``None`` for lossless, else the lossy colour quality, 0 to 100.

    Returns:
        The WebP file. A single frame gives a still WebP.

    Raises:
        ValueError: Invalid frames, duration, ``max_size`` or ``quality``.
    """
    if quality is not None and not 0 <= quality <= 100:
        raise ValueError(f"WebP quality must be from 0 to 100 (or None for lossless), got {quality}")
    prepared = _prepare(frames, duration_ms, max_size)
    out = io.BytesIO()
    prepared[0].save(
        out,
        format="WEBP",
        save_all=True,
        append_images=prepared[1:],
        duration=[duration_ms] * len(prepared),
        loop=0,
        lossless=quality is None,
        quality=100 if quality is None else quality,
        alpha_quality=100,
        method=4,
        background=(0, 0, 0, 0),
    )
    return out.getvalue()


def encode_apng(frames: Sequence[Image.Image], duration_ms: int, max_size: int | None = None) -> bytes:
    """Encode a looping APNG with full 8-bit alpha.

    Every frame uses dispose ``OP_NONE`` and blend ``OP_SOURCE``: Pillow stores only the rectangle that differs from
    the previous frame, and ``OP_SOURCE`` makes that rectangle replace the canvas pixels, alpha included, instead of
    being drawn over them. So the canvas after frame N is exactly frame N. Identical consecutive frames are merged by
    Pillow into one frame with the summed duration; the loop time is unchanged.

    Args:
        frames: Straight RGBA frames, all the same size.
        duration_ms: How long each frame is shown, in milliseconds.
        max_size: When set, frames larger than this on their longest side are scaled down to it.

    Returns:
        The PNG file. A single frame (or all frames identical) gives a plain PNG.

    Raises:
        ValueError: Invalid frames, duration or ``max_size``.
    """
    prepared = _prepare(frames, duration_ms, max_size)
    out = io.BytesIO()
    prepared[0].save(
        out,
        format="PNG",
        save_all=True,
        append_images=prepared[1:],
        duration=[duration_ms] * len(prepared),
        loop=0,
        disposal=PngImagePlugin.Disposal.OP_NONE,
        blend=PngImagePlugin.Blend.OP_SOURCE,
    )
    return out.getvalue()


def encode_gif(
    frames: Sequence[Image.Image], duration_ms: int, max_size: int | None = None, *, colours: int = 255
) -> bytes:
    """Encode a looping GIF: 1-bit transparency, one shared palette (255 colours at most) plus a transparent index.

    Alpha is thresholded at :data:`GIF_ALPHA_THRESHOLD` and kept edge pixels are composited onto :data:`GIF_MATTE`.
    One palette for all frames keeps flat colours from flickering between frames, and no dithering keeps the
    animation from shimmering. Disposal 2 (restore to background) clears each frame before the next is drawn.
    GIF delays are centiseconds: they are rounded so that the loop time stays right (frames may alternate, e.g.
    40 and 50 ms for 45 ms), and raised to :data:`GIF_MIN_DELAY_MS`.

    Args:
        frames: Straight RGBA frames, all the same size.
        duration_ms: How long each frame is shown, in milliseconds.
        max_size: When set, frames larger than this on their longest side are scaled down to it.
        colours: Most colours of the shared palette, 1 to 255 (fewer make smaller files).

    Returns:
        The GIF file. A single frame gives a still GIF.

    Raises:
        ValueError: Invalid frames, duration or ``max_size``.
    """
    if not 1 <= colours <= 255:
        raise ValueError(f"a GIF palette has 1 to 255 colours besides the transparent index, got {colours}")
    prepared = _prepare(frames, duration_ms, max_size)
    flattened = [_flatten_on_matte(frame) for frame in prepared]
    entries = _shared_palette(flattened, colours)
    transparent = len(entries)
    palette = bytes(value for colour in [*entries, _unused_grey(entries)] for value in colour)
    lookup = Image.new("P", (1, 1))
    lookup.putpalette(palette[: 3 * transparent])
    indexed = [_index_frame(rgb, opaque, lookup, palette, transparent) for rgb, opaque in flattened]
    out = io.BytesIO()
    indexed[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=indexed[1:],
        duration=gif_delays_ms(len(indexed), duration_ms),
        loop=0,
        disposal=2,
        transparency=transparent,
        palette=palette,
        optimize=False,
    )
    return out.getvalue()


def gif_delays_ms(count: int, duration_ms: int) -> list[int]:
    """Per-frame GIF delays in whole centiseconds (as ms) whose running sum tracks ``count * duration_ms``.

    Args:
        count: Number of frames.
        duration_ms: The wanted duration of each frame; raised to :data:`GIF_MIN_DELAY_MS`.

    Returns:
        ``count`` delays, each a multiple of 10 ms.
    """
    step = max(duration_ms, GIF_MIN_DELAY_MS)
    ends = [((i + 1) * step + 5) // 10 for i in range(count)]
    return [10 * (end - start) for start, end in zip([0, *ends], ends, strict=False)]


def decode_rgba_png(data: bytes) -> Image.Image:
    """Decode PNG bytes to a loaded straight RGBA image.

    Args:
        data: The PNG file.

    Returns:
        The (first frame of the) image in mode ``RGBA``.

    Raises:
        ValueError: The bytes are not a readable PNG image (empty, truncated, corrupt or another format).
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != "PNG":
                raise ValueError(f"expected a PNG image, got {image.format or 'an unknown format'}")
            image.load()
            return image.convert("RGBA")
    except (OSError, SyntaxError, Image.DecompressionBombError) as error:
        raise ValueError(f"not a readable PNG image ({len(data)} bytes): {error}") from error


def encode_png(image: Image.Image) -> bytes:
    """Encode an image as PNG, keeping its mode (RGBA stays RGBA).

    Args:
        image: Any PIL image PNG can store.

    Returns:
        The PNG file.
    """
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _prepare(frames: Sequence[Image.Image], duration_ms: int, max_size: int | None) -> list[Image.Image]:
    size = validate_frames(frames)
    if duration_ms <= 0:
        raise ValueError(f"frame duration must be a positive number of milliseconds, got {duration_ms}")
    if max_size is not None and max_size <= 0:
        raise ValueError(f"max_size must be a positive number of pixels, got {max_size}")
    if max_size is None or max(size) <= max_size:
        return list(frames)
    new_size = fit_size(size, max_size)
    return [resize_premultiplied(frame, new_size) for frame in frames]


def _resize_channel(channel: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(channel.astype(np.float32)).resize(size, _RESAMPLE), dtype=np.float32)


def _flatten_on_matte(frame: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """The frame's colours composited onto :data:`GIF_MATTE` (uint8 HxWx3) and its opaque mask (bool HxW)."""
    rgba = np.asarray(frame, dtype=np.float32)
    alpha = rgba[..., 3:] / 255.0
    rgb = rgba[..., :3] * alpha + np.asarray(GIF_MATTE, dtype=np.float32) * (1.0 - alpha)
    return (rgb + 0.5).astype(np.uint8), rgba[..., 3] >= GIF_ALPHA_THRESHOLD


def _shared_palette(flattened: Sequence[tuple[np.ndarray, np.ndarray]], colours: int) -> list[tuple[int, int, int]]:
    """At most ``colours`` distinct colours for the opaque pixels of all frames (median cut)."""
    samples = np.concatenate([rgb[opaque] for rgb, opaque in flattened])
    if len(samples) == 0:
        return [GIF_MATTE]
    quantized = Image.fromarray(samples.reshape(-1, 1, 3)).quantize(
        colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    entries = np.asarray(quantized.getpalette() or [], dtype=np.uint8).reshape(-1, 3)
    used = entries[np.unique(np.asarray(quantized))]
    return [(int(r), int(g), int(b)) for r, g, b in np.unique(used, axis=0)]


def _unused_grey(colours: Sequence[tuple[int, int, int]]) -> tuple[int, int, int]:
    """A grey near the matte that no opaque colour uses, for the transparent index.

    Palette colours must be distinct: Pillow's GIF writer matches palette entries by colour.
    """
    taken = set(colours)
    greys = sorted(range(256), key=lambda value: abs(value - GIF_MATTE[0]))
    return next((v, v, v) for v in greys if (v, v, v) not in taken)


def _index_frame(
    rgb: np.ndarray, opaque: np.ndarray, lookup: Image.Image, palette: bytes, transparent: int
) -> Image.Image:
    indices = np.array(Image.fromarray(rgb).quantize(palette=lookup, dither=Image.Dither.NONE))
    indices[~opaque] = transparent
    frame = Image.frombytes("P", (rgb.shape[1], rgb.shape[0]), indices.tobytes())
    frame.putpalette(palette)
    frame.info["transparency"] = transparent
    return frame
