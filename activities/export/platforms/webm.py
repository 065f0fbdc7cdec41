"""WebM with VP9 and alpha, in memory: encode, decode and the bitrate ladder that fits a file to its rules.

VP9 carries alpha as a second stream beside the colour one (``yuva420p``; the WebM muxer tags the track
``alpha_mode=1``). FFmpeg's native ``vp9`` decoder drops that stream, so :func:`decode_webm` forces ``libvpx-vp9``.
Odd canvas sides are fine: VP9 rounds the subsampled chroma planes up.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Final

import av
import numpy as np

from activities.export.platforms.base import DoesNotFitError, Fitted
from activities.export.platforms.fitting import evenly_spaced
from activities.export.platforms.rules import Rules
from activities.export.platforms.validate import vp9_rgba

CODEC: Final = "libvpx-vp9"
CRFS = (18, 24, 30, 36, 42, 48, 56, 63)
"""Constant-quality rungs, best first (libvpx-vp9's crf runs 0 to 63)."""
BITRATES = (256_000, 128_000, 64_000, 32_000, 16_000)
"""Then the worst crf under falling bitrate caps, in bit/s (FFmpeg gives the alpha stream the same cap again)."""
LADDER: tuple[tuple[str, int, int | None], ...] = (
    *((f"crf-{crf}", crf, None) for crf in CRFS),
    *((f"bitrate-{rate // 1000}k", CRFS[-1], rate) for rate in BITRATES),
)
"""(rung, crf, bit rate or None) from least to most loss: :func:`fit_webm` takes the first that fits."""

Quality = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], tuple[float, float]]
"""(source frames, decoded frames) -> (SSIM over white, SSIM over dark)."""


def encode_webm(frames: Sequence[np.ndarray], fps: float, *, crf: int, bit_rate: int | None = None) -> bytes:
    """A looping-ready WebM of ``frames``: VP9 with alpha, no audio, byte-identical for the same input.

    Args:
        frames: HxWx4 uint8 straight RGBA frames, all one size.
        fps: Frames per second (kept to millisecond timestamps, WebM's time base).
        crf: libvpx-vp9 constant quality, 0 (best) to 63 (worst).
        bit_rate: A bitrate cap in bit/s on top of ``crf`` (constrained quality), or None for constant quality.

    Raises:
        ValueError: No frames, frames that are not HxWx4 uint8 of one size, or a frame rate that is not positive.
    """
    if not frames:
        raise ValueError("no frames to encode")
    height, width = frames[0].shape[:2]
    if any(frame.dtype != np.uint8 or frame.shape != (height, width, 4) for frame in frames):
        raise ValueError(f"frames must all be {height}x{width}x4 uint8 RGBA")
    if fps <= 0:
        raise ValueError(f"fps must be positive, is {fps}")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="webm", options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream(CODEC, rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuva420p"
        if bit_rate is None:
            stream.options = {"crf": str(crf), "b": "0"}
        else:
            stream.bit_rate = bit_rate
            stream.options = {"crf": str(crf)}
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgba")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def decode_webm(data: bytes) -> list[np.ndarray]:
    """The HxWx4 uint8 straight RGBA frames of a VP9 WebM, alpha included (through the forced libvpx-vp9 decoder)."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.video[0]
        decoder = av.CodecContext.create(CODEC, "r")
        return [vp9_rgba(frame) for packet in container.demux(stream) for frame in decoder.decode(packet)]


def fit_webm(frames: Sequence[np.ndarray], loop_s: float, rules: Rules, *, quality: Quality) -> Fitted:
    """The least lossy WebM of one loop that fits ``rules``, retimed to their length and frame rate limits.

    A loop longer than ``rules.max_total_s`` is played faster to last exactly that long; where that would pass
    ``rules.max_fps``, frames are dropped evenly. Then the :data:`LADDER` is walked down to the first rung within
    ``rules.max_bytes``, and only that file is decoded and scored.

    Args:
        frames: HxWx4 uint8 straight RGBA frames of one loop, already at the target canvas size.
        loop_s: Length of the loop in seconds.
        rules: The target's rules.
        quality: Scores the decoded frames against the frames that went in.

    Raises:
        DoesNotFitError: Even the last rung is larger than ``rules.max_bytes``.
        ValueError: No frames or a loop that is not positive.
    """
    if not frames or loop_s <= 0:
        raise ValueError(f"need frames and a positive loop, got {len(frames)} frames over {loop_s} s")
    kept, loop = retime(frames, loop_s, rules)
    fps = float(len(kept) / loop)
    tried: list[tuple[int, str]] = []
    for rung, crf, bit_rate in LADDER:
        data = encode_webm(kept, fps, crf=crf, bit_rate=bit_rate)
        if len(data) <= rules.max_bytes:
            ssim_white, ssim_dark = quality(kept, decode_webm(data))
            height, width = kept[0].shape[:2]
            return Fitted(data, rung, len(kept), None, float(loop), 0, width, height, ssim_white, ssim_dark)
        tried.append((len(data), rung))
    size, rung = min(tried)
    raise DoesNotFitError(f"{rules.platform}: max_bytes is {rules.max_bytes} B, the smallest WebM ({rung}) is {size} B")


def retime(frames: Sequence[np.ndarray], loop_s: float, rules: Rules) -> tuple[list[np.ndarray], Fraction]:
    """(frames, loop length in seconds) of a loop within ``rules.max_total_s`` and ``rules.max_fps``.

    The loop shortens to the longest allowed playback; frames are dropped evenly only where the frame rate would
    otherwise pass the maximum.
    """
    loop = Fraction(loop_s).limit_denominator(1000)
    if rules.max_total_s is not None:
        loop = min(loop, Fraction(rules.max_total_s).limit_denominator(1000))
    if rules.max_fps is None:
        return list(frames), loop
    keep = min(len(frames), max(1, math.floor(loop * Fraction(rules.max_fps).limit_denominator(1000))))
    return [frames[index] for index in evenly_spaced(len(frames), keep)], loop
