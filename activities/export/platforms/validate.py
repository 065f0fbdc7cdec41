"""The validator: every exported file read back by independent readers and checked against its target's rules.

Independent of the encoders: APNG and GIF frames come from PyAV's decoders (FFmpeg), an APNG's loop count and colour
type from its own chunks; WebM through a forced ``libvpx-vp9`` decoder (FFmpeg's native VP9 decoder drops alpha).
Each broken rule is a :class:`Violation` naming the rule and the figure found; an empty list means the file fits.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np

from activities.export.platforms.rules import Container, Rules

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RGB_COLOUR_TYPES = {2: "RGB", 3: "palette", 6: "RGBA"}
"""PNG colour types in the RGB colour space (0 and 4 are greyscale)."""
IHDR_COLOUR_TYPE = 25
"""Offset of the colour type: after the signature (8), IHDR's length and name (8), width, height (8), depth (1)."""
TIMING_TOLERANCE_S = 0.001


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` is its id (e.g. ``max_bytes``), ``message`` names it and the figure found."""

    rule: str
    message: str


@dataclass(frozen=True)
class FileReport:
    """What a file holds, as read back.

    Attributes:
        container: ``apng``, ``gif`` or ``webm``.
        width: Canvas width.
        height: Canvas height.
        frames: Decoded frames.
        loop_s: Length of one loop (the sum of the frame delays; a WebM's duration).
        plays: How often the loop plays (0 = forever); a WebM has no loop count and counts as 0.
        fps: Frames per second of one loop.
        bytes: File size.
        colour: The colour type (``RGB``, ``RGBA``, ``palette``, ``greyscale``) or pixel format.
        audio_streams: Audio streams in the file (WebM).
        rgba_frames: The decoded frames, composited on the full canvas, straight RGBA uint8.
    """

    container: Container
    width: int
    height: int
    frames: int
    loop_s: float
    plays: int
    fps: float
    bytes: int
    colour: str
    audio_streams: int
    rgba_frames: list[np.ndarray]

    @property
    def has_alpha(self) -> bool:
        """Whether the first frame has transparent pixels (a transparent background)."""
        return bool(self.rgba_frames) and bool((self.rgba_frames[0][..., 3] < 255).any())


def read_file(data: bytes, container: Container) -> FileReport:
    """Read a file back with readers independent of the encoders.

    Raises:
        ValueError: The bytes are not a readable file of that container.
    """
    try:
        if container == "webm":
            return _read_webm(data)
        return _read_animation(data, container)
    except (av.error.FFmpegError, struct.error, IndexError, EOFError) as err:
        raise ValueError(f"not a readable {container} file ({len(data):,} bytes): {err}") from err


def _read_animation(data: bytes, container: Container) -> FileReport:
    container_format: str = container
    if container == "apng":
        if not data.startswith(PNG_SIGNATURE):
            raise ValueError(f"not a readable apng file ({len(data):,} bytes): no PNG signature")
        colour_type = data[IHDR_COLOUR_TYPE]
        colour = RGB_COLOUR_TYPES.get(colour_type, "greyscale")
        at = data.find(b"acTL")
        plays = struct.unpack(">I", data[at + 8 : at + 12])[0] if at >= 0 else 1
        if at < 0:  # a still PNG: no animation control chunk (e.g. every frame was the same and got merged)
            container_format = "png_pipe"
    else:
        if not data.startswith((b"GIF87a", b"GIF89a")):
            raise ValueError(f"not a readable gif file ({len(data):,} bytes): no GIF signature")
        colour, plays = "palette", _gif_plays(data)
    frames, delays = [], []
    with av.open(io.BytesIO(data), mode="r", format=container_format) as file:
        stream = file.streams.video[0]
        for frame in file.decode(stream):
            frames.append(frame.to_ndarray(format="rgba"))
            delays.append(float((frame.duration or 0) * (frame.time_base or stream.time_base or 0)))
    if not frames:
        raise ValueError(f"not a readable {container} file ({len(data):,} bytes): no frames")
    loop_s = sum(delays)
    height, width = frames[0].shape[:2]
    fps = len(frames) / loop_s if loop_s > 0 else float("inf")
    return FileReport(container, width, height, len(frames), loop_s, plays, fps, len(data), colour, 0, frames)


def _gif_plays(data: bytes) -> int:
    """A GIF's loop count: the NETSCAPE2.0 extension's (0 = forever, n = n more after the first), 1 without it."""
    at = data.find(b"NETSCAPE2.0")
    if at < 0:
        return 1
    repeats = struct.unpack("<H", data[at + 13 : at + 15])[0]
    return 0 if repeats == 0 else repeats + 1


def _read_webm(data: bytes) -> FileReport:
    with av.open(io.BytesIO(data), mode="r") as file:
        if not file.streams.video:
            raise ValueError(f"not a readable webm file ({len(data):,} bytes): no video stream")
        stream = file.streams.video[0]
        codec = stream.codec_context.name
        if "webm" not in file.format.name or codec != "vp9":
            raise ValueError(f"not a VP9 WebM file: {file.format.name} with {codec}")
        decoder = av.codec.CodecContext.create("libvpx-vp9", "r")
        frames = [frame.to_ndarray(format="rgba") for packet in file.demux(stream) for frame in decoder.decode(packet)]
        duration = (file.duration or 0) / 1_000_000
        fps = float(stream.average_rate or 0)
        audio = len(file.streams.audio)
        alpha = "yuva420p" if stream.metadata.get("alpha_mode") == "1" else str(stream.codec_context.pix_fmt)
    if not frames:
        raise ValueError(f"not a readable webm file ({len(data):,} bytes): no frames")
    height, width = frames[0].shape[:2]
    return FileReport("webm", width, height, len(frames), duration, 0, fps, len(data), alpha, audio, frames)


def check_file(rules: Rules, data: bytes) -> list[Violation]:
    """Every rule of ``rules`` the file breaks; empty when it fits."""
    try:
        report = read_file(data, rules.container)
    except ValueError as err:
        return [Violation("container", f"container: {err}; {rules.platform} takes {rules.container}")]
    found = []

    def broken(rule: str, message: str) -> None:
        found.append(Violation(rule, f"{rule}: {message} ({rules.platform})"))

    if (size := rules.size.violation(report.width, report.height)) is not None:
        broken("size", f"the canvas {size}")
    if report.bytes > rules.max_bytes:
        broken("max_bytes", f"{report.bytes:,} bytes, the limit is {rules.max_bytes:,}")
    if rules.frames is not None and not rules.frames[0] <= report.frames <= rules.frames[1]:
        broken("frames", f"{report.frames} frames, allowed {rules.frames[0]} to {rules.frames[1]}")
    if rules.loop_seconds is not None and all(
        abs(report.loop_s - allowed) > TIMING_TOLERANCE_S for allowed in rules.loop_seconds
    ):
        broken("loop_seconds", f"one loop lasts {report.loop_s:.3f} s, allowed {sorted(rules.loop_seconds)} s")
    total = report.loop_s * report.plays if report.plays else report.loop_s if report.container == "webm" else None
    if rules.max_total_s is not None and total is not None and total > rules.max_total_s + TIMING_TOLERANCE_S:
        broken("total_seconds", f"plays {total:.3f} s in all, the limit is {rules.max_total_s:g} s")
    if report.container != "webm":
        low, high = rules.plays or (0, 0)
        if not low <= report.plays <= high:
            wanted = "forever (0)" if high == 0 else f"{low} to {high} times"
            broken("plays", f"the loop plays {report.plays or 'forever'} times, allowed {wanted}")
    if rules.max_fps is not None and report.fps > rules.max_fps + 0.01:
        broken("fps", f"{report.fps:.2f} frames per second, the limit is {rules.max_fps:g}")
    if not report.has_alpha:
        broken("alpha", "no transparent pixel in the first frame: the background must be transparent")
    if rules.container == "apng" and report.colour == "greyscale":
        broken("colour", "a greyscale PNG: the colour space must be RGB")
    if report.audio_streams:
        broken("audio", f"{report.audio_streams} audio stream(s): the file must have none")
    if rules.frames is not None and rules.frames[0] >= 2 and _all_identical(report.rgba_frames):
        broken("all_frames_identical", f"all {report.frames} frames are identical: an animation must move")
    return found


def check_set(
    rules: Rules,
    files: Sequence[tuple[str, bytes]],
    names: Sequence[str] | None = None,
    package_bytes: int | None = None,
) -> list[Violation]:
    """The set's rules: its size, no two identical emoji, no blank first frame, the names, the package size.

    Args:
        rules: The target's rules.
        files: (name, data) of every emoji file of the set, in order.
        names: The names the platform expects, in order (e.g. ``001.png`` ...), or None not to check names.
        package_bytes: Size of the upload package (the ZIP), or None when there is none.
    """
    found = []

    def broken(rule: str, message: str) -> None:
        found.append(Violation(rule, f"{rule}: {message} ({rules.platform})"))

    if rules.per_set is not None and len(files) not in rules.per_set:
        broken("set_count", f"the set has {len(files)} files, allowed {min(rules.per_set)} to {max(rules.per_set)}")
    if names is not None:
        given = [name for name, _ in files]
        if given != list(names):
            broken("file_name", f"the files are named {given}, expected {list(names)}")
        if len(set(given)) != len(given):
            broken("file_name", "two files have the same name")
    seen: dict[bytes, str] = {}
    for name, data in files:
        try:
            report = read_file(data, rules.container)
        except ValueError:
            continue  # check_file reports it
        if not report.rgba_frames[0][..., 3].any():
            broken("first_frame_blank", f"{name}: the first frame (the still image) is fully transparent")
        fingerprint = b"".join(frame.tobytes() for frame in report.rgba_frames)
        if fingerprint in seen:
            broken("duplicate_emoji", f"{name} shows the same frames as {seen[fingerprint]}")
        seen.setdefault(fingerprint, name)
    if rules.max_package_bytes is not None and package_bytes is not None and package_bytes > rules.max_package_bytes:
        broken("package_bytes", f"the package is {package_bytes:,} bytes, the limit is {rules.max_package_bytes:,}")
    return found


def _all_identical(frames: Sequence[np.ndarray]) -> bool:
    return len(frames) > 1 and all(np.array_equal(frames[0], frame) for frame in frames[1:])
