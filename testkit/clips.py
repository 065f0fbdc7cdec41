"""Small test clips built in code: H.264 MP4s of shapes moving periodically on white, as an image-to-video model
returns them, optionally with blurred or glitched frames and black lines along the edges."""

from __future__ import annotations

import io
import struct
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageFilter

WHITE = 255.0
DISC_COLOUR = np.array([230, 90, 30], np.float32)
BAR_COLOUR = np.array([40, 70, 200], np.float32)


def encode_mp4(
    frames: Sequence[np.ndarray], fps: float, *, crf: int = 18, container: str = "mp4", faststart: bool = False
) -> bytes:
    """An H.264 clip (libx264, yuv420p) of ``frames``, no audio: an MP4 unless ``container`` says otherwise.

    Args:
        frames: HxWx3 uint8 RGB frames of one size, both sides even.
        fps: Frames per second, stored as the stream's rate (to a millisecond's precision).
        crf: libx264 constant quality (0 lossless, 51 worst).
        container: FFmpeg's muxer, e.g. ``matroska`` (states no frame count) or ``h264`` (a raw stream: no length,
            and a frame rate FFmpeg guesses).
        faststart: An MP4 with its index (``moov``) before the frames, as streamed files are: cut short, it still
            opens and its first frames decode.
    """
    if faststart:
        with tempfile.TemporaryDirectory() as folder:  # the muxer moves the index by reading the file back
            path = Path(folder) / "clip.mp4"
            _encode(str(path), frames, fps, crf, container, {"movflags": "faststart"})
            return path.read_bytes()
    buffer = io.BytesIO()
    _encode(buffer, frames, fps, crf, container, {})
    return buffer.getvalue()


def _encode(
    target: io.BytesIO | str,
    frames: Sequence[np.ndarray],
    fps: float,
    crf: int,
    container: str,
    options: dict[str, str],
) -> None:
    height, width = frames[0].shape[:2]
    with av.open(target, "w", format=container, options=options) as output:
        stream = output.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf)}
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            frame.pts = index
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))


def with_matroska_duration(data: bytes, seconds: float) -> bytes:
    """A Matroska clip of :func:`encode_mp4` whose header states it lasts ``seconds`` (its frames unchanged): the
    segment's 8-byte float ``Duration`` element (ID ``0x4489``, in the default 1 ms timecode scale) rewritten."""
    at = data.find(b"\x44\x89\x88")
    if at < 0:
        raise ValueError("no 8-byte Duration element in this Matroska clip")
    return data[: at + 3] + struct.pack(">d", seconds * 1000.0) + data[at + 11 :]


def looping_frames(
    count: int = 48,
    *,
    period: float | None = None,
    width: int = 256,
    height: int | None = None,
    blurred: Sequence[int] = (),
    glitched: Sequence[int] = (),
    edge_lines: int = 0,
) -> list[np.ndarray]:
    """HxWx3 uint8 RGB frames of a disc circling and a bar swinging on white, periodic over ``period`` frames.

    Frame ``i`` shows phase ``i / period``: with the default period (``count``) the clip is one loop, the frame after
    its last (not rendered) being frame 0 again.

    Args:
        count: Frames to render.
        period: Frames per cycle of the motion; ``count`` when None.
        width: Frame width in pixels.
        height: Frame height in pixels; ``width`` when None.
        blurred: Frames to blur (a Gaussian blur of 4% of the shorter side, a defocused frame).
        glitched: Frames to glitch (see :func:`glitch`).
        edge_lines: Width in pixels of a black line along each edge of every frame (0 for none).
    """
    height = width if height is None else height
    period = float(count) if period is None else period
    edge = min(width, height)
    frames = []
    for index in range(count):
        angle = 2 * np.pi * index / period
        pixels = np.full((height, width, 3), WHITE, np.float32)
        centre = (width / 2 + 0.2 * edge * np.cos(angle), height / 2 + 0.2 * edge * np.sin(angle))
        paint_disc(pixels, DISC_COLOUR, centre, 0.12 * edge)
        bar = (width / 2 + 0.25 * edge * np.sin(angle), 0.78 * height)
        paint_bar(pixels, BAR_COLOUR, bar, 0.03 * edge, 0.08 * edge)
        image = np.rint(pixels).astype(np.uint8)
        if index in blurred:
            image = np.asarray(Image.fromarray(image).filter(ImageFilter.GaussianBlur(0.04 * edge)))
        if index in glitched:
            image = glitch(image, seed=index)
        if edge_lines:
            image[:edge_lines], image[-edge_lines:] = 0, 0
            image[:, :edge_lines], image[:, -edge_lines:] = 0, 0
        frames.append(image)
    return frames


def paint_disc(pixels: np.ndarray, colour: np.ndarray, centre: tuple[float, float], radius: float) -> None:
    """Paint an anti-aliased disc onto float HxWx3 ``pixels`` in place."""
    window, yy, xx = _window(pixels, centre, radius, radius)
    _cover(window, colour, np.clip(radius + 0.5 - np.hypot(xx - centre[0], yy - centre[1]), 0, 1))


def paint_bar(
    pixels: np.ndarray, colour: np.ndarray, centre: tuple[float, float], half_width: float, half_height: float
) -> None:
    """Paint an anti-aliased upright bar onto float HxWx3 ``pixels`` in place."""
    window, yy, xx = _window(pixels, centre, half_width, half_height)
    across = np.clip(half_width + 0.5 - np.abs(xx - centre[0]), 0, 1)
    _cover(window, colour, across * np.clip(half_height + 0.5 - np.abs(yy - centre[1]), 0, 1))


def _window(
    pixels: np.ndarray, centre: tuple[float, float], half_width: float, half_height: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The view of ``pixels`` around a shape and its pixel centres' row and column coordinates."""
    height, width = pixels.shape[:2]
    top, bottom = max(0, int(centre[1] - half_height - 1)), min(height, int(centre[1] + half_height + 2))
    left, right = max(0, int(centre[0] - half_width - 1)), min(width, int(centre[0] + half_width + 2))
    yy, xx = np.mgrid[top:bottom, left:right].astype(np.float32)
    return pixels[top:bottom, left:right], yy, xx


def _cover(window: np.ndarray, colour: np.ndarray, coverage: np.ndarray) -> None:
    window += coverage[..., None] * (colour - window)


def glitch(image: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """``image`` with its middle third of rows shifted sideways by a quarter of its width and a block of coloured
    noise: a frame as a decoder or video model garbles it."""
    height, width = image.shape[:2]
    out = image.copy()
    band = slice(height // 3, 2 * height // 3)
    out[band] = np.roll(image[band], width // 4, axis=1)
    block = (slice(height // 8, height // 3), slice(width // 8, width // 2))
    out[block] = np.random.default_rng(seed).integers(0, 256, out[block].shape, dtype=np.uint8)
    return out


def looping_clip(
    count: int = 48,
    fps: float = 24,
    *,
    period: float | None = None,
    width: int = 256,
    height: int | None = None,
    blurred: Sequence[int] = (),
    glitched: Sequence[int] = (),
    edge_lines: int = 0,
) -> bytes:
    """:func:`looping_frames` (same arguments) encoded by :func:`encode_mp4` at ``fps``: an offline take."""
    frames = looping_frames(
        count, period=period, width=width, height=height, blurred=blurred, glitched=glitched, edge_lines=edge_lines
    )
    return encode_mp4(frames, fps)


def audio_only_mp4(seconds: float = 1.0) -> bytes:
    """An MP4 with one AAC audio stream of silence and no video stream."""
    rate = 16_000
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=rate)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, int(rate * seconds)), np.float32), format="fltp", layout="mono")
        frame.sample_rate = rate
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def png_pixels(png: bytes) -> np.ndarray:
    """The HxWx3 uint8 RGB pixels of a PNG."""
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
