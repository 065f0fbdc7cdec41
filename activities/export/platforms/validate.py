"""Re-read exported files with readers independent of the encoders, and check them against their rule table.

:func:`read_file` reads a file back: APNG frames and delays through FFmpeg's ``apng`` demuxer and decoder (PyAV), the
loop count and colour type from the PNG chunks themselves; GIF timing and loops with Pillow and its frames with PyAV;
WebM with PyAV and the libvpx VP9 decoder (FFmpeg's native one drops the alpha plane). :func:`check_file` holds one
file to the per-file rules, :func:`check_set` a whole set to the set rules. Each :class:`Violation` names its rule
and the figure found, e.g. ``max_bytes: 312,400 bytes, the limit is 300,000 (LINE animated emoji)``.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import av
import numpy as np
from PIL import Image

from activities.export.platforms.rules import Container, Rules

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
EBML_MAGIC = b"\x1a\x45\xdf\xa3"
TOLERANCE_S = 0.001
"""How far a length read back may be from an allowed one (delays are stored as fractions, read back rounded)."""
PNG_COLOUR_TYPES = {0: "greyscale", 2: "RGB", 3: "palette", 4: "greyscale with alpha", 6: "RGB with alpha"}
GREYSCALE_COLOUR_TYPES = frozenset({0, 4})


@dataclass(frozen=True)
class Violation:
    """One rule a file or a set breaks.

    Attributes:
        rule: The rule's short id, e.g. ``max_bytes``.
        message: The rule, the figure found and the limit, e.g.
            ``max_bytes: 312,400 bytes, the limit is 300,000 (LINE animated emoji)``.
    """

    rule: str
    message: str


@dataclass(frozen=True)
class FileReport:
    """What a file holds, as read back independently of the encoder.

    Attributes:
        container: The format it was read as.
        width: Canvas width in pixels.
        height: Canvas height in pixels.
        frames: Frames decoded.
        loop_s: Length of one loop (APNG, GIF) or of the whole video (WebM), in seconds.
        plays: How often the loop plays, 0 = forever. A WebM states no loop count: players loop it, so 0.
        fps: Frames per second: frames over the loop for APNG and GIF, the stream's average rate for WebM; None
            when unknown (a loop of no length, a stream without a rate).
        bytes: Size of the file.
        has_alpha: The first frame has a pixel with alpha below 255 (a WebM needs its alpha plane for that).
        rgba_frames: The decoded frames, composited onto the full canvas, straight RGBA uint8 (height x width x 4).
        colour_type: The PNG colour type from IHDR (0 greyscale, 2 RGB, 3 palette, 4 greyscale with alpha, 6 RGB
            with alpha); None for GIF and WebM.
        audio_streams: Audio streams in the file (only a WebM can have any).
    """

    container: Container
    width: int
    height: int
    frames: int
    loop_s: float
    plays: int
    fps: float | None
    bytes: int
    has_alpha: bool
    rgba_frames: list[np.ndarray] = field(repr=False, compare=False)
    colour_type: int | None = None
    audio_streams: int = 0


def read_file(data: bytes, container: Container) -> FileReport:
    """Read ``data`` back as a ``container`` file.

    Raises:
        ValueError: The bytes are not a readable file of that format; the message says what was found.
    """
    readers = {"apng": _read_apng, "gif": _read_gif, "webm": _read_webm}
    try:
        return readers[container](data)
    except (ValueError, OSError, EOFError, av.FFmpegError) as err:
        raise ValueError(f"not a readable {container} file: {err}") from err


def check_file(rules: Rules, data: bytes) -> list[Violation]:
    """Every per-file rule of ``rules`` that ``data`` breaks; [] when the file fits.

    A file that cannot be read as the rules' container breaks ``container`` (and ``max_bytes`` when it is too big);
    nothing else about it can be told.
    """
    try:
        report = read_file(data, rules.container)
    except ValueError as err:
        return [_violation(rules, "container", str(err)), *_bytes_violations(rules, data)]
    size = rules.size.violation(report.width, report.height)
    return [
        *([] if size is None else [_violation(rules, "size", size)]),
        *_bytes_violations(rules, data),
        *_frame_violations(rules, report),
        *_timing_violations(rules, report),
        *_look_violations(rules, report),
    ]


def check_set(
    rules: Rules,
    files: Sequence[tuple[str, bytes]],
    names: Sequence[str] | None = None,
    package_bytes: int | None = None,
) -> list[Violation]:
    """Every set rule of ``rules`` that the set breaks; [] when it fits.

    Args:
        rules: The target's rule table.
        files: The set's emoji files as (file name, data), in set order.
        names: The file names the platform expects, in set order (the target module knows its naming scheme); when
            given, each file must carry its expected name.
        package_bytes: Size of the upload package, checked against ``rules.max_package_bytes`` when both are known.

    Files that cannot be read are left to :func:`check_file`, which names them; they are skipped here. One file is
    decoded at a time, so a large set does not hold every file's frames at once.
    """
    found = []
    if rules.per_set is not None and len(files) not in rules.per_set:
        found.append(_violation(rules, "set_count", f"{len(files)} files, allowed {_allowed(rules.per_set)}"))
    found += _name_violations(rules, [name for name, _ in files], names)
    seen: dict[str, str] = {}
    for name, data in files:
        try:
            report = read_file(data, rules.container)
        except ValueError:
            continue
        if int(report.rgba_frames[0][..., 3].max()) == 0:
            found.append(_violation(rules, "first_frame_blank", f"{name}: the first frame is fully transparent"))
        digest = _digest(report.rgba_frames)
        if digest in seen:
            found.append(_violation(rules, "duplicate_emoji", f"{name} shows the same frames as {seen[digest]}"))
        seen.setdefault(digest, name)
    limit = rules.max_package_bytes
    if package_bytes is not None and limit is not None and package_bytes > limit:
        found.append(_violation(rules, "package_bytes", f"{package_bytes:,} bytes, the limit is {limit:,}"))
    return found


def _violation(rules: Rules, rule: str, text: str) -> Violation:
    return Violation(rule, f"{rule}: {text} ({rules.platform})")


def _allowed(values: frozenset[int]) -> str:
    ordered = sorted(values)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]} to {ordered[-1]}"
    return ", ".join(map(str, ordered))


def _times(count: int) -> str:
    return f"{count} time" if count == 1 else f"{count} times"


def _bytes_violations(rules: Rules, data: bytes) -> list[Violation]:
    if len(data) <= rules.max_bytes:
        return []
    return [_violation(rules, "max_bytes", f"{len(data):,} bytes, the limit is {rules.max_bytes:,}")]


def _frame_violations(rules: Rules, report: FileReport) -> list[Violation]:
    found = []
    if rules.frames is not None and not rules.frames[0] <= report.frames <= rules.frames[1]:
        low, high = rules.frames
        found.append(_violation(rules, "frames", f"{report.frames} frames, allowed {low} to {high}"))
    animated = rules.frames is not None and rules.frames[0] >= 2
    if animated and report.frames >= 2 and len({_digest([frame]) for frame in report.rgba_frames}) == 1:
        found.append(_violation(rules, "all_frames_identical", f"all {report.frames} frames are identical"))
    return found


def _timing_violations(rules: Rules, report: FileReport) -> list[Violation]:
    found = []
    if rules.loop_seconds is not None and all(abs(report.loop_s - s) > TOLERANCE_S for s in rules.loop_seconds):
        found.append(
            _violation(
                rules,
                "loop_seconds",
                f"one loop lasts {report.loop_s:.3f} s, allowed {_allowed(rules.loop_seconds)} whole seconds",
            )
        )
    if rules.max_total_s is not None:
        found += _total_violations(rules, report, rules.max_total_s)
    if rules.plays is None and report.plays != 0:
        found.append(_violation(rules, "plays", f"the loop plays {_times(report.plays)}, it must loop forever"))
    elif rules.plays is not None and not rules.plays[0] <= report.plays <= rules.plays[1]:
        played = "forever (num_plays 0)" if report.plays == 0 else _times(report.plays)
        found.append(
            _violation(rules, "plays", f"the loop plays {played}, allowed {rules.plays[0]} to {rules.plays[1]} times")
        )
    if rules.max_fps is not None and report.fps is not None and report.fps > rules.max_fps + TOLERANCE_S:
        found.append(_violation(rules, "fps", f"{report.fps:g} frames per second, the limit is {rules.max_fps:g}"))
    return found


def _total_violations(rules: Rules, report: FileReport, limit: float) -> list[Violation]:
    """A loop played ``plays`` times lasts that many loops; a loop played forever is held to the limit on its own."""
    total = report.loop_s * report.plays if report.plays else report.loop_s
    if total <= limit + TOLERANCE_S:
        return []
    if report.container == "webm":
        figure = f"the video lasts {total:.3f} s"
    elif report.plays:
        figure = f"{report.loop_s:.3f} s x {report.plays} plays = {total:.3f} s"
    else:
        figure = f"one loop, played forever, lasts {total:.3f} s"
    return [_violation(rules, "total_seconds", f"{figure}, the limit is {limit:g} s")]


def _look_violations(rules: Rules, report: FileReport) -> list[Violation]:
    found = []
    if not report.has_alpha:
        lowest = int(report.rgba_frames[0][..., 3].min())
        found.append(
            _violation(rules, "alpha", f"no transparent pixel in the first frame (lowest alpha {lowest}), needs one")
        )
    if report.colour_type in GREYSCALE_COLOUR_TYPES:
        kind = PNG_COLOUR_TYPES[report.colour_type]
        found.append(_violation(rules, "colour", f"PNG colour type {report.colour_type} ({kind}), needs RGB colour"))
    if report.audio_streams:
        found.append(_violation(rules, "audio", f"{report.audio_streams} audio stream(s), allowed none"))
    return found


def _name_violations(rules: Rules, actual: Sequence[str], expected: Sequence[str] | None) -> list[Violation]:
    found = [
        _violation(rules, "file_name", f"{name!r} is the name of {count} files")
        for name, count in Counter(actual).items()
        if count > 1
    ]
    if expected is None:
        return found
    if len(expected) != len(actual):
        return [*found, _violation(rules, "file_name", f"{len(actual)} files for {len(expected)} expected names")]
    return found + [
        _violation(rules, "file_name", f"file {position} is named {name!r}, expected {wanted!r}")
        for position, (name, wanted) in enumerate(zip(actual, expected, strict=True), start=1)
        if name != wanted
    ]


def _digest(frames: Sequence[np.ndarray]) -> str:
    """A fingerprint of what the frames show: the colour under fully transparent pixels does not count."""
    digest = hashlib.sha256()
    for frame in frames:
        visible = np.where(frame[..., 3:] == 0, 0, frame)
        digest.update(repr(visible.shape).encode())
        digest.update(visible.tobytes())
    return digest.hexdigest()


def _kind(data: bytes) -> str:
    """What the bytes look like, for messages."""
    if data.startswith(PNG_SIGNATURE):
        return "a PNG file"
    if data.startswith(GIF_SIGNATURES):
        return "a GIF file"
    if data.startswith(EBML_MAGIC):
        return "an EBML (Matroska or WebM) file"
    return f"unknown bytes starting {data[:8]!r}"


def _png_chunks(data: bytes) -> tuple[int, tuple[int, int]]:
    """(IHDR colour type, acTL (num_frames, num_plays)) from the chunks before the image data."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"the bytes are {_kind(data)}, not a PNG")
    position, colour_type, actl = len(PNG_SIGNATURE), None, None
    while position + 8 <= len(data):
        length = int.from_bytes(data[position : position + 4], "big")
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        if len(body) < length:
            raise ValueError(f"the {kind!r} chunk is cut off")
        if kind == b"IHDR" and length == 13:
            colour_type = body[9]
        elif kind == b"acTL" and length == 8:
            actl = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:], "big")
        elif kind == b"IDAT":
            break
        position += 12 + length
    if colour_type is None:
        raise ValueError("no IHDR chunk")
    if actl is None:
        raise ValueError("no acTL chunk before the image data: a still PNG, not an APNG")
    return colour_type, actl


def _read_apng(data: bytes) -> FileReport:
    colour_type, (announced, plays) = _png_chunks(data)
    with av.open(io.BytesIO(data), mode="r", format="apng") as file:
        stream = file.streams.video[0]
        time_base = stream.time_base
        if time_base is None:
            raise ValueError("the frames have no time base")
        decoded = [(frame.to_ndarray(format="rgba"), frame.duration * time_base) for frame in file.decode(stream)]
    if len(decoded) != announced:
        raise ValueError(f"acTL announces {announced} frames, {len(decoded)} decode")
    frames = [pixels for pixels, _ in decoded]
    loop_s = float(sum(delay for _, delay in decoded))
    return _report("apng", data, frames, loop_s, plays, colour_type=colour_type)


def _read_gif(data: bytes) -> FileReport:
    """Pillow reads the timing and the loop count: no NETSCAPE extension plays once, its count 0 loops forever, and a
    count n repeats the animation n times after the first play (as browsers read it), n + 1 plays in all."""
    if not data.startswith(GIF_SIGNATURES):
        raise ValueError(f"the bytes are {_kind(data)}, not a GIF")
    with Image.open(io.BytesIO(data), formats=["GIF"]) as image:
        count, loop = getattr(image, "n_frames", 1), image.info.get("loop")
        delays_ms = []
        for index in range(count):
            image.seek(index)
            delays_ms.append(image.info.get("duration", 0))
    with av.open(io.BytesIO(data), mode="r", format="gif") as file:
        frames = [frame.to_ndarray(format="rgba") for frame in file.decode(video=0)]
    if len(frames) != count:
        raise ValueError(f"Pillow counts {count} frames, {len(frames)} decode")
    plays = 1 if loop is None else 0 if loop == 0 else loop + 1
    return _report("gif", data, frames, sum(delays_ms) / 1000, plays)


def _read_webm(data: bytes) -> FileReport:
    doc_type = _ebml_doc_type(data)
    if doc_type != "webm":
        raise ValueError(f"the EBML doc type is {doc_type!r}, not 'webm'")
    with av.open(io.BytesIO(data), mode="r", format="matroska") as file:
        if not file.streams.video:
            raise ValueError("no video stream")
        stream = file.streams.video[0]
        if stream.codec_context.name != "vp9":
            raise ValueError(f"the video codec is {stream.codec_context.name}, not VP9")
        if file.duration is None:
            raise ValueError("no duration stated")
        decoder = av.codec.CodecContext.create("libvpx-vp9", "r")  # FFmpeg's native vp9 decoder drops the alpha
        decoded = [frame for packet in file.demux(stream) for frame in decoder.decode(packet)]
        alpha_mode = stream.metadata.get("alpha_mode") == "1"
        rate, duration_s, audio = stream.average_rate, file.duration / 1e6, len(file.streams.audio)
    if not decoded:
        raise ValueError("no frame decodes")
    frames = [vp9_rgba(frame) for frame in decoded]
    has_alpha = alpha_mode and decoded[0].format.name == "yuva420p" and int(frames[0][..., 3].min()) < 255
    fps = None if rate is None else float(rate)
    return _report("webm", data, frames, duration_s, 0, fps=fps, has_alpha=has_alpha, audio_streams=audio)


def vp9_rgba(frame: av.VideoFrame) -> np.ndarray:
    """A decoded VP9 frame as straight RGBA: the colour converted to RGB, the alpha copied from its plane (or 255).

    Not ``to_ndarray(format="rgba")``: FFmpeg's yuv(a)420p to rgba conversion garbles the right edge of frames whose
    width is not a multiple of 16, e.g. Telegram's 100 px emoji (PyAV 18.1.0 with FFmpeg 8.1.2).
    """
    rgb = frame.to_ndarray(format="rgb24")
    if frame.format.name != "yuva420p":
        return np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
    plane = frame.planes[3]
    alpha = np.frombuffer(bytes(plane), np.uint8).reshape(plane.height, plane.line_size)[:, : plane.width]
    return np.dstack([rgb, alpha])


def _ebml_doc_type(data: bytes) -> str:
    """The DocType of the EBML header (``webm`` or ``matroska``)."""
    if not data.startswith(EBML_MAGIC):
        raise ValueError(f"the bytes are {_kind(data)}, not an EBML file")
    size, position = _ebml_size(data, len(EBML_MAGIC))
    end = position + size
    while position < end:
        id_length = 9 - data[position].bit_length()
        element, position = data[position : position + id_length], position + id_length
        size, position = _ebml_size(data, position)
        if element == b"\x42\x82":
            return data[position : position + size].decode("ascii", "replace")
        position += size
    raise ValueError("the EBML header names no doc type")


def _ebml_size(data: bytes, position: int) -> tuple[int, int]:
    """An EBML variable-length size at ``position``: (value, position after it)."""
    if position >= len(data) or data[position] == 0:
        raise ValueError("the EBML header is cut off or malformed")
    length = 9 - data[position].bit_length()
    value = data[position] & (0xFF >> length)
    for byte in data[position + 1 : position + length]:
        value = value << 8 | byte
    return value, position + length


def _report(
    container: Container,
    data: bytes,
    frames: list[np.ndarray],
    loop_s: float,
    plays: int,
    *,
    fps: float | None = None,
    has_alpha: bool | None = None,
    colour_type: int | None = None,
    audio_streams: int = 0,
) -> FileReport:
    """The report of decoded frames; ``fps`` defaults to frames over the loop, ``has_alpha`` to the first frame's."""
    if not frames:
        raise ValueError("no frame decodes")
    height, width = frames[0].shape[:2]
    if fps is None and container != "webm" and loop_s > 0:
        fps = len(frames) / loop_s
    if has_alpha is None:
        has_alpha = int(frames[0][..., 3].min()) < 255
    return FileReport(
        container=container,
        width=width,
        height=height,
        frames=len(frames),
        loop_s=loop_s,
        plays=plays,
        fps=fps,
        bytes=len(data),
        has_alpha=has_alpha,
        rgba_frames=frames,
        colour_type=colour_type,
        audio_streams=audio_streams,
    )
