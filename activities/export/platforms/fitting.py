"""Fit an emoji into a platform's byte limit, least loss first: the APNG and GIF ladder.

An emoji comes in as its frames at the target's canvas size. The ladder tries, in order, and stops at the first file
that fits ``rules.max_bytes``:

1. ``lossless``: full colour, assembled by apngasm (each frame stored as the rectangle that changed, with the
   dispose and blend operations that make it smallest) and recompressed by oxipng. (GIF has no lossless rung.)
2. ``palette-256`` ... ``palette-32``: one palette with alpha shared by every frame (libimagequant; a GIF's own
   median cut with 1-bit alpha), fewer colours each rung. One palette keeps flat colours from flickering.
3. ``palette-64-frames-N`` / ``palette-32-frames-N``: fewer frames, evenly spaced, each shown longer so the loop
   keeps its length, down to the platform's minimum.

Every rung's file is decoded again (PyAV, an independent reader) and scored against the lossless frames with SSIM
over white and over a dark background (:mod:`.quality`). When nothing fits, :class:`DoesNotFitError` names the rule
and the smallest file reached.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import av
import libimagequant
import numpy as np
import oxipng
from apngasm_python._apngasm_python import APNGAsm, create_frame_from_rgba
from PIL import Image

from activities.export.animation import encode_gif, resize_premultiplied
from activities.export.platforms.base import DoesNotFitError, Fitted
from activities.export.platforms.quality import ssim_over_backgrounds
from activities.export.platforms.rules import Rules

PALETTE_RUNGS = (256, 128, 64, 32)
"""Colour counts of the palette rungs, tried in this order."""
FEWER_FRAMES_COLOURS = (64, 32)
"""Colour counts tried at each reduced frame count."""
GIF_COLOURS = (255, 128, 64, 32, 16)
"""A GIF is always a palette (255 colours plus the transparent index): its rungs start there."""


def on_canvas(frames: Sequence[Image.Image], size: tuple[int, int]) -> list[np.ndarray]:
    """Frames scaled (in premultiplied space) to fit ``size`` and centred on a transparent canvas of that size."""
    canvases = []
    for frame in frames:
        scale = min(size[0] / frame.width, size[1] / frame.height)
        fitted = (max(1, round(frame.width * scale)), max(1, round(frame.height * scale)))
        scaled = frame if fitted == frame.size else resize_premultiplied(frame, fitted)
        canvas = Image.new("RGBA", size, (0, 0, 0, 0))
        canvas.paste(scaled, ((size[0] - fitted[0]) // 2, (size[1] - fitted[1]) // 2))
        canvases.append(np.array(canvas))
    return canvases


def evenly_spaced(count: int, keep: int) -> list[int]:
    """Indices of ``keep`` of ``count`` frames spread evenly over the loop, starting with the first."""
    return sorted({round(i * count / keep) % count for i in range(keep)})


def reduced_counts(frames: int, minimum: int) -> list[int]:
    """Smaller frame counts to try, about three quarters each step, down to ``minimum``."""
    counts, current = [], frames
    while current > minimum:
        current = max(minimum, min(current - 1, round(current * 0.75)))
        counts.append(current)
    return counts


def shared_palette(frames: Sequence[np.ndarray], colours: int) -> list[np.ndarray]:
    """The frames remapped to one palette of at most ``colours`` RGBA colours (no dithering), as RGBA arrays."""
    attr = libimagequant.Attr()
    attr.max_colors = colours
    attr.speed = 3
    histogram = libimagequant.Histogram(attr)
    images = []
    for frame in frames:
        height, width = frame.shape[:2]
        image = attr.create_rgba(np.ascontiguousarray(frame).tobytes(), width, height, 0)
        histogram.add_image(attr, image)
        images.append(image)
    result = histogram.quantize(attr)
    result.dithering_level = 0.0
    remapped = [np.frombuffer(bytes(result.remap_image(image)), dtype=np.uint8) for image in images]
    palette = np.array([(c.r, c.g, c.b, c.a) for c in result.get_palette()], dtype=np.uint8)
    palette[palette[:, 3] <= 1] = 0  # libimagequant gives the background alpha 1, not 0: make it transparent again
    return [palette[indices].reshape(frame.shape) for indices, frame in zip(remapped, frames, strict=True)]


def encode_apng(frames: Sequence[np.ndarray], loop_s: float, plays: int) -> bytes:
    """An APNG of full-canvas RGBA frames, ``loop_s`` per loop, ``plays`` loops (0 = forever), recompressed.

    apngasm picks each frame's rectangle, dispose and blend operations and stores palette frames as a palette PNG;
    oxipng recompresses every frame's data. A loop of whole seconds keeps exact timing as ``seconds / frames``.
    """
    delay = (round(loop_s), len(frames)) if float(loop_s).is_integer() else (round(loop_s * 1000 / len(frames)), 1000)
    assembler = APNGAsm()
    for frame in frames:
        height, width = frame.shape[:2]
        assembler.add_frame(create_frame_from_rgba(np.array(frame), width, height, *delay))
    assembler.set_loops(plays)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "emoji.png"
        if not assembler.assemble(str(path)):
            raise RuntimeError("apngasm could not assemble the frames")
        data = path.read_bytes()
    optimized: bytes = oxipng.optimize_from_memory(data, level=4)
    return optimized


def decoded(data: bytes, container: str) -> list[tuple[np.ndarray, float]]:
    """The frames an APNG or GIF stores, as PyAV composites them (straight RGBA uint8), each with its duration.

    Encoders merge identical consecutive frames into one longer frame, so there may be fewer than went in.
    """
    with av.open(io.BytesIO(data), mode="r", format=container) as file:
        stream = file.streams.video[0]
        return [
            (frame.to_ndarray(format="rgba"), float((frame.duration or 0) * (frame.time_base or stream.time_base or 0)))
            for frame in file.decode(stream)
        ]


def in_time_steps(shown: Sequence[tuple[np.ndarray, float]], count: int) -> list[np.ndarray]:
    """The frame on show at each of ``count`` equal time steps of the loop: one per frame that went in."""
    total = sum(duration for _, duration in shown) or 1.0
    starts = np.cumsum([0.0, *(duration for _, duration in shown)])[:-1]
    steps = (np.arange(count) + 0.5) * total / count
    return [shown[int(np.searchsorted(starts, step, side="right")) - 1][0] for step in steps]


def _attempts(rules: Rules, canvases: list[np.ndarray]) -> Iterator[tuple[str, list[int], int | None]]:
    """(rung, kept frame indices, colours) in ladder order."""
    every = list(range(len(canvases)))
    minimum = rules.frames[0] if rules.frames else 1
    if rules.container == "apng":
        yield "lossless", every, None
        for colours in PALETTE_RUNGS:
            yield f"palette-{colours}", every, colours
        for count in reduced_counts(len(canvases), minimum):
            for colours in FEWER_FRAMES_COLOURS:
                yield f"palette-{colours}-frames-{count}", evenly_spaced(len(canvases), count), colours
    else:
        for colours in GIF_COLOURS:
            yield f"palette-{colours}", every, colours
        for count in reduced_counts(len(canvases), minimum):
            yield f"palette-32-frames-{count}", evenly_spaced(len(canvases), count), 32


def fit(canvases: list[np.ndarray], loop_s: float, rules: Rules) -> Fitted:
    """The first rung of the ladder whose file fits ``rules.max_bytes``.

    Args:
        canvases: The emoji's frames at the target's canvas size, straight RGBA; more than the platform allows are
            first thinned out evenly.
        loop_s: Length of one loop; the platform's timing rules (whole seconds, total) are applied here.
        rules: The target's rule table (an APNG or GIF container).

    Raises:
        DoesNotFitError: Too few frames for the platform, or no rung fits; the message names the rule and the
            closest figure reached.
    """
    if rules.frames is not None and len(canvases) < rules.frames[0]:
        raise DoesNotFitError(
            f"frames: {rules.platform} needs at least {rules.frames[0]} frames, the emoji has {len(canvases)}"
        )
    allowed = rules.frame_count_for(len(canvases))
    if allowed < len(canvases):
        canvases = [canvases[i] for i in evenly_spaced(len(canvases), allowed)]
    loop_s, plays = rules.timing_for(loop_s)
    smallest: tuple[int, str] | None = None
    for rung, kept, colours in _attempts(rules, canvases):
        frames = [canvases[i] for i in kept]
        if rules.container == "apng":
            data = encode_apng(frames if colours is None else shared_palette(frames, colours), loop_s, plays)
        else:  # the GIF encoder makes its own shared palette of that many colours
            images = [Image.fromarray(frame, "RGBA") for frame in frames]
            data = encode_gif(images, round(loop_s * 1000 / len(images)), colours=colours or 255)
        if smallest is None or len(data) < smallest[0]:
            smallest = (len(data), rung)
        if len(data) > rules.max_bytes:
            continue
        shown = decoded(data, rules.container)
        if rules.frames is not None and len(shown) < rules.frames[0]:
            raise DoesNotFitError(
                f"frames: only {len(shown)} of the {len(frames)} frames differ from the one before (identical frames "
                f"are merged), {rules.platform} needs at least {rules.frames[0]} distinct frames"
            )
        white, dark = ssim_over_backgrounds(frames, in_time_steps(shown, len(frames)))
        height, width = frames[0].shape[:2]
        return Fitted(data, rung, len(frames), colours, loop_s, plays, width, height, white, dark)
    assert smallest is not None
    raise DoesNotFitError(
        f"max_bytes: no rung of the ladder fits {rules.platform}'s {rules.max_bytes:,} bytes; the smallest file "
        f"reached was {smallest[0]:,} bytes ({smallest[1]})"
    )
