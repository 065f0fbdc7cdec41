"""Frames from an image-to-video clip: decode, choose a loop that closes smoothly, spread the emoji's frames over it
and keep each frame's neighbours in the clip as its candidates, each scored for how clean it is.

Pure: bytes in, PNGs out; the ``extract_frames`` activity stores them. The clip is decoded twice (H.264 decodes far
faster than frames are resized): a first pass keeps only a 64x64 grey thumbnail (4 KB) and a sharpness figure per
frame for the analysis, a second pass crops, resizes and encodes just the frames the slots use. No full frame is held
longer than it takes to convert it, whatever the clip's resolution.

What the container states is checked before anything is decoded (frame rate, length, frame count, frame size, the
pixels all frames hold), and again while decoding, so a clip whose header lies is refused as soon as it does: no
clip makes the worker allocate or decode more than a bounded amount. A clip whose frames end before its header's
frame count (a download cut short, a damaged file) is refused too.

Every frame is cut the same way: 2% off each edge (generated clips often carry black lines along their edges, the
original product's fix), then the centred square, resized to the emoji's edge with Lanczos.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter
from PIL import Image
from scipy import ndimage

EDGE_CROP = 0.02
"""Fraction cut off each edge before the centred square is taken."""
MIN_EDGE = 64
"""The smallest frame side a clip may have, in pixels."""
MAX_EDGE = 4096
"""The longest frame side a clip may have, in pixels (image-to-video models make 480p to 1080p)."""
MAX_FRAME_PIXELS = 4096 * 2160
"""The most pixels one clip frame may have (4K)."""
MIN_SIZE = 16
"""The smallest output edge :func:`extract_frames` makes, in pixels."""
MIN_FPS, MAX_FPS = 1.0, 240.0
MAX_SECONDS = 60.0
MAX_FRAMES = 3000
MAX_CLIP_PIXELS = MAX_FRAMES * 1920 * 1080
"""The most pixels all of a clip's frames together may hold: 3000 frames of 1080p, 750 of 4K."""
THUMBNAIL = 64
"""Edge of the grey thumbnails the loop and glitch analysis compare, in pixels."""
LOOP_STARTS = Fraction(1, 5)
"""A loop starts within the first 20% of the clip's frames."""
LOOP_ENDS = Fraction(2, 5)
"""A loop ends within the last 40% of the clip's frames (its end, exclusive, may be the clip's end)."""
LOOP_TIE = 0.25
"""Loops whose cost is within this fraction of a typical frame step of the best are near-ties: the longest wins."""
NOISE_FLOOR = 1.0
"""The smallest typical frame step, in grey levels (0-255) of mean absolute difference: below it a clip is still and
its differences are compression noise."""
SHARP_OK, SHARP_BAD = 0.75, 0.35
"""Sharpness relative to the clip's median at and above which a frame is sharp (1), at and below which blurred (0)."""
GLITCH_GRID = 4
"""The glitch score looks at the thumbnail in this many blocks a side (16 x 16 px blocks of a 64 px thumbnail)."""
GLITCH_OK, GLITCH_BAD = 1.25, 2.75
"""Detour of a frame's worst block (in frame steps) at and below which the frame is in line with its neighbours (1),
at and above which it is a glitch (0)."""
OUTLIER_LEVELS = 24.0
"""A pixel brighter or darker than its neighbours in time by more than this many grey levels is an outlier."""
OUTLIER_WINDOW = 3
"""Frames either side whose outlier shares make the clip's local norm (motion gives every frame a few outliers)."""
OUTLIER_OK, OUTLIER_BAD = 4.0, 8.0
"""Outlier share relative to the norm at and below which a frame is in line with the clip (1), at and above which
it is damaged (0)."""
OUTLIER_EPSILON = 0.002
"""The smallest norm, a share of the thumbnail: below it a still clip's compression noise would count."""
SHARPNESS_EPSILON = 0.05
"""Added to sharpness figures before their ratio is taken, so a clip of blank frames scores 1 throughout."""


class ClipError(Exception):
    """The clip cannot give an emoji's frames (not a video, undecodable, too short, absurd): the activity reports
    ``FailureType.INVALID_CLIP``. The message says what is wrong with the clip."""


@dataclass(frozen=True)
class ExtractedFrame:
    """One clip frame offered as a slot's candidate.

    Attributes:
        source_frame: Index of the frame in the clip (decode order, from 0).
        offset: ``source_frame`` minus the slot's chosen frame (0 for the chosen frame itself).
        png: The frame, cropped and resized, as an RGB PNG. Slots sharing a frame share these bytes.
        quality: How clean the frame is, 0 to 1 (see :func:`frame_quality`); 1 for a normal frame.
    """

    source_frame: int
    offset: int
    png: bytes
    quality: float


@dataclass(frozen=True)
class Extraction:
    """What :func:`extract_frames` found in a clip.

    Attributes:
        slots: Per frame slot, in order: its chosen frame first, then its neighbours (offsets -1, +1, -2, +2 ...).
        source_frames: Frames decoded from the clip.
        fps: The clip's frame rate.
        loop: The frames ``[start, end)`` the emoji plays: frame ``end - 1`` is followed by frame ``start``.
    """

    slots: list[list[ExtractedFrame]]
    source_frames: int
    fps: float
    loop: tuple[int, int]


def extract_frames(data: bytes, *, frames: int, neighbours: int, size: int) -> Extraction:
    """An emoji's frames from a clip: ``frames`` slots spread evenly over the smoothest loop, each with its chosen
    clip frame and up to ``neighbours`` clip frames either side as candidates.

    Args:
        data: The encoded clip (an MP4 or any container and codec FFmpeg reads).
        frames: Frame slots of the emoji (at least 1).
        neighbours: Clip frames either side of each chosen frame kept as candidates (at least 0).
        size: Edge of the square output frames, in pixels (at least :data:`MIN_SIZE`).

    Raises:
        ClipError: The clip is empty, not a video, has no video stream, cannot be decoded, is truncated (fewer
            frames decode than its header states), has fewer frames than ``frames``, frames under :data:`MIN_EDGE`
            or over :data:`MAX_EDGE` px a side or :data:`MAX_FRAME_PIXELS` pixels, or an absurd frame rate, length,
            frame count or number of pixels in all (:data:`MAX_CLIP_PIXELS`).
        ValueError: ``frames``, ``neighbours`` or ``size`` out of range (a caller's mistake, not the clip's).
    """
    if frames < 1 or neighbours < 0 or size < MIN_SIZE:
        raise ValueError(
            f"need frames >= 1, neighbours >= 0 and size >= {MIN_SIZE}, got {frames}, {neighbours} and {size}"
        )
    thumbnails, sharpness, fps = _analyse(data, size)
    count = len(thumbnails)
    if count < frames:
        raise ClipError(
            f"the clip has {count} frame{'s' * (count != 1)}; an emoji of {frames} frames needs at least {frames}"
        )
    loop = choose_loop(thumbnails, frames)
    indices = [candidates(chosen, neighbours, count) for chosen in spread(loop, frames)]
    quality = frame_quality(thumbnails, sharpness)
    pngs = _render(data, {index for slot in indices for index in slot}, size)
    slots = [
        [ExtractedFrame(index, index - slot[0], pngs[index], float(quality[index])) for index in slot]
        for slot in indices
    ]
    return Extraction(slots=slots, source_frames=count, fps=fps, loop=loop)


def choose_loop(thumbnails: np.ndarray, frames: int) -> tuple[int, int]:
    """The loop ``[start, end)`` whose seam, frame ``end - 1`` followed by frame ``start``, is least visible.

    Candidates: every start ``s < ceil(0.2 N)`` and end ``e >= ceil(0.6 N)`` (``e <= N``, exclusive) of an ``N``
    frame clip with at least ``frames`` frames between them. With ``d`` the mean absolute difference of two
    thumbnails, the seam costs

    - ``d(e, s)`` when frame ``e`` exists (``e < N``): the seam is perfect when the frame after the loop is its first;
    - ``d(N - 1, s - 1)`` when the loop runs to the clip's end (``e = N``, ``s >= 1``): perfect when the frame before
      the loop is its last;
    - ``max(0, d(N - 1, 0) - (d(0, 1) + d(N - 2, N - 1)) / 2)`` for the whole clip (``s = 0``, ``e = N``), where
      neither frame exists: the seam is as good as a step no larger than the clip's steps around it. A clip made as
      one loop (frame ``i`` at phase ``i / N``) costs about 0 there and is played whole.

    Among the loops within :data:`LOOP_TIE` typical steps (the median ``d`` of consecutive frames, at least
    :data:`NOISE_FLOOR`) of the cheapest, the longest wins, then the earliest start.

    Args:
        thumbnails: N x H x W (or N x P) grey thumbnails of the clip's frames, grey levels 0-255.
        frames: The fewest frames a loop may have.

    Raises:
        ValueError: ``frames`` is more than N.
    """
    count = len(thumbnails)
    if frames > count:
        raise ValueError(f"a loop of {frames} frames does not fit in {count}")
    if count < 2:
        return 0, count
    grey = thumbnails.reshape(count, -1).astype(np.float32)
    steps = _distance(grey[1:], grey[:-1])
    starts = np.arange(math.ceil(LOOP_STARTS * count))
    ends = np.arange(math.ceil((1 - LOOP_ENDS) * count), count + 1)
    later = grey[ends[:-1]]
    inside = np.stack([_distance(later, grey[start]) for start in starts])
    to_end = _distance(grey[starts[1:] - 1], grey[count - 1])
    whole = max(0.0, float(_distance(grey[count - 1], grey[0])) - (steps[0] + steps[-1]) / 2)
    cost = np.column_stack([inside, np.concatenate([[whole], to_end])])
    lengths = ends[None, :] - starts[:, None]
    cost[lengths < frames] = np.inf
    tie = LOOP_TIE * max(float(np.median(steps)), NOISE_FLOOR)
    near = cost <= cost.min() + tie
    longest = np.where(near, lengths, -1).max()
    row, column = np.argwhere(near & (lengths == longest))[0]
    return int(starts[row]), int(ends[column])


def spread(loop: tuple[int, int], frames: int) -> list[int]:
    """The chosen clip frame of each of ``frames`` slots spread evenly over ``loop``: slot ``k`` gets
    ``start + round(k * (end - start) / frames)``, rounding halves up."""
    start, end = loop
    length = end - start
    return [start + (2 * k * length + frames) // (2 * frames) for k in range(frames)]


def candidates(chosen: int, neighbours: int, count: int) -> list[int]:
    """A slot's candidate frames: ``chosen`` first, then ``chosen`` -1, +1, -2, +2 ... up to ``neighbours`` either
    side, leaving out those outside the clip's ``count`` frames."""
    offsets = [0, *(sign * step for step in range(1, neighbours + 1) for sign in (-1, 1))]
    return [chosen + offset for offset in offsets if 0 <= chosen + offset < count]


def frame_quality(thumbnails: np.ndarray, sharpness: np.ndarray) -> np.ndarray:
    """How clean each clip frame is, 0 to 1: the product of a sharpness score and a glitch score, 1 for a normal frame.

    - Sharpness: ``r = (sharpness + eps) / (median sharpness + eps)``, scored 1 at ``r >= 0.75`` falling linearly to
      0 at ``r <= 0.35`` (a blurred frame). ``sharpness`` is the mean absolute Laplacian of the frame at output size.
    - Glitch: how far a frame lies off the path between its neighbours, in the worst block of a
      :data:`GLITCH_GRID` x :data:`GLITCH_GRID` grid over the thumbnail (a glitch is often local: a band of rows
      slipped sideways, a strip of smeared macroblocks). With ``d`` the mean absolute difference of a block in two
      frames, frame ``i``'s detour there is ``(d(i-1, i) + d(i, i+1) - d(i-1, i+1)) / 2``: about 0 for a block on the
      way from one neighbour to the other, about the size of the difference for a block unlike both. A glitched
      frame's neighbours stay clean (unlike the distance to the mean of the neighbours, which a glitch next door
      raises too). The first frame's detour is ``max(0, d(0, 1) - d(1, 2))``, the last frame's alike. A detour is
      measured against the motion around it: the largest of half ``d(i-1, i+1)`` (``d(1, 2)`` for the first frame),
      ``d(i-2, i-1)`` and ``d(i+1, i+2)`` over the block and the blocks next to it, or the block's typical step (its
      median ``d`` of consecutive frames, at least :data:`NOISE_FLOOR`) if that is larger. So a part moving into the
      next block, or turning back, is no glitch, nor is fast motion in a mostly still clip. The worst block's ratio
      scores 1 up to 1.25, falling linearly to 0 at 2.75.
    - Outliers: the share of the thumbnail's pixels outside the range of both the neighbouring frames and the frames
      two steps away by more than :data:`OUTLIER_LEVELS` (motion moves a pixel from one neighbour's value towards
      the other's; a slipped band, a smear or a flash puts it outside both), against a norm: the median share of the
      :data:`OUTLIER_WINDOW` frames either side, or the clip's median share over frames that have outliers at all if
      larger (turning points of fast motion have a few). It catches local damage the block detour averages away.
      Scored 1 up to 4 times the norm, falling to 0 at 8; the glitch score is the lower of the two.

    Args:
        thumbnails: N x H x W grey thumbnails of the clip's frames, grey levels 0-255 (a margin of rows and columns
            that do not fill the grid is left out).
        sharpness: N sharpness figures of the same frames.
    """
    ratio = (sharpness + SHARPNESS_EPSILON) / (np.median(sharpness) + SHARPNESS_EPSILON)
    sharp = np.clip((ratio - SHARP_BAD) / (SHARP_OK - SHARP_BAD), 0.0, 1.0)
    clean = np.clip((GLITCH_BAD - _worst_detour(thumbnails)) / (GLITCH_BAD - GLITCH_OK), 0.0, 1.0)
    in_range = np.clip((OUTLIER_BAD - _outlier_ratio(thumbnails)) / (OUTLIER_BAD - OUTLIER_OK), 0.0, 1.0)
    return np.asarray(sharp * np.minimum(clean, in_range), np.float64)


def _outlier_ratio(thumbnails: np.ndarray) -> np.ndarray:
    """Per frame, its share of outlier pixels against the clip around it (see :func:`frame_quality`)."""
    count = len(thumbnails)
    if count < 3:
        return np.zeros(count)
    grey = thumbnails.astype(np.float32)
    padded = np.concatenate([grey[:1], grey, grey[-1:]])

    def outside(step: int) -> np.ndarray:
        before, after = padded[2 - step : len(padded) - 2 - step], padded[2 + step : len(padded) - 2 + step]
        low, high = np.minimum(before, after), np.maximum(before, after)
        return np.maximum(low - grey[1:-1], 0.0) + np.maximum(grey[1:-1] - high, 0.0)

    # Outside the range of the frames one step away and of those two steps away: a damaged neighbour narrows the
    # first range of a clean frame, never the second.
    share = (np.minimum(outside(1), outside(2)) > OUTLIER_LEVELS).mean(axis=(1, 2))
    share = np.concatenate([share[:1], share, share[-1:]])
    moving = share[share > 0]
    floor = max(float(np.median(moving)) if len(moving) else 0.0, OUTLIER_EPSILON)
    ratio = np.empty(count)
    for index in range(count):
        around = np.delete(
            share[max(0, index - OUTLIER_WINDOW) : index + OUTLIER_WINDOW + 1], min(index, OUTLIER_WINDOW)
        )
        ratio[index] = share[index] / max(float(np.median(around)), floor)
    return ratio


def _worst_detour(thumbnails: np.ndarray) -> np.ndarray:
    """Per frame, the detour of its worst block against the motion around it (see :func:`frame_quality`)."""
    count, height, width = thumbnails.shape
    if count < 3:
        return np.zeros(count)
    rows, columns = height // GLITCH_GRID, width // GLITCH_GRID
    blocks = (
        thumbnails[:, : rows * GLITCH_GRID, : columns * GLITCH_GRID]
        .astype(np.float32)
        .reshape(count, GLITCH_GRID, rows, GLITCH_GRID, columns)
        .transpose(0, 1, 3, 2, 4)
        .reshape(count, GLITCH_GRID**2, rows * columns)
    )
    steps = _distance(blocks[1:], blocks[:-1])
    skips = _distance(blocks[2:], blocks[:-2])
    detour = np.empty((count, GLITCH_GRID**2))
    detour[1:-1] = (steps[:-1] + steps[1:] - skips) / 2
    detour[0] = np.maximum(0.0, steps[0] - steps[1])
    detour[-1] = np.maximum(0.0, steps[-1] - steps[-2])
    motion = np.concatenate([steps[1:2], skips / 2, steps[-2:-1]])
    motion[2:] = np.maximum(motion[2:], steps[:-1])  # the step before the frame's previous one
    motion[:-2] = np.maximum(motion[:-2], steps[1:])  # the step after its next one
    motion = ndimage.maximum_filter(motion.reshape(count, GLITCH_GRID, GLITCH_GRID), size=(1, 3, 3), mode="nearest")
    typical = np.maximum(np.median(steps, axis=0), NOISE_FLOOR)
    return np.asarray((detour / np.maximum(motion.reshape(count, -1), typical)).max(axis=1))


def _distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean absolute difference over the last axis (broadcasting)."""
    return np.abs(a - b).mean(axis=-1)


def _analyse(data: bytes, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    """First pass: (N x THUMBNAIL x THUMBNAIL uint8 grey thumbnails, N sharpness figures, fps) of every frame."""
    thumbnails = []
    sharpness = []
    pixels_decoded = 0
    with _open(data) as container:
        stream = container.streams.video[0]
        fps = _frame_rate(container, stream)
        stated = stream.frames
        for index, frame in enumerate(_decode(container, stream)):
            if index == MAX_FRAMES:
                raise ClipError(f"the clip has more than {MAX_FRAMES} frames; at most {MAX_FRAMES} are accepted")
            pixels_decoded += frame.shape[0] * frame.shape[1]
            if pixels_decoded > MAX_CLIP_PIXELS:
                raise ClipError(
                    f"the clip's frames hold more than {MAX_CLIP_PIXELS:,} pixels (after {index + 1} frames of "
                    f"{frame.shape[1]}x{frame.shape[0]} px); at most {MAX_CLIP_PIXELS:,} are decoded"
                )
            grey = _square(frame).convert("L").resize((size, size), Image.Resampling.BOX)
            pixels = np.asarray(grey, np.float32)
            laplacian = (
                4 * pixels[1:-1, 1:-1] - pixels[:-2, 1:-1] - pixels[2:, 1:-1] - pixels[1:-1, :-2] - pixels[1:-1, 2:]
            )
            sharpness.append(float(np.abs(laplacian).mean()))
            thumbnails.append(np.asarray(grey.resize((THUMBNAIL, THUMBNAIL), Image.Resampling.BOX)))
    if len(thumbnails) < stated:
        raise ClipError(
            f"the clip is truncated or damaged: its header states {stated} frames, only {len(thumbnails)} decode"
        )
    if len(thumbnails) / fps > MAX_SECONDS:
        raise ClipError(
            f"the clip lasts {len(thumbnails) / fps:.1f} s ({len(thumbnails)} frames at {fps:g} fps); "
            f"at most {MAX_SECONDS:g} s are accepted"
        )
    shape = (0, THUMBNAIL, THUMBNAIL)
    return (np.stack(thumbnails) if thumbnails else np.zeros(shape, np.uint8)), np.array(sharpness), fps


def _render(data: bytes, wanted: set[int], size: int) -> dict[int, bytes]:
    """Second pass: the ``wanted`` frames, cropped and resized to ``size`` with Lanczos, as RGB PNGs by index."""
    pngs: dict[int, bytes] = {}
    last = max(wanted)
    with _open(data) as container:
        stream = container.streams.video[0]
        for index, frame in enumerate(_decode(container, stream)):
            if index in wanted:
                image = _square(frame).resize((size, size), Image.Resampling.LANCZOS)
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
                pngs[index] = buffer.getvalue()
            if index == last:
                break
    return pngs


def _open(data: bytes) -> av.container.InputContainer:
    """The clip opened for decoding, checked to have a video stream."""
    if not data:
        raise ClipError("the clip is 0 bytes")
    try:
        container = av.open(io.BytesIO(data), "r")
    except av.FFmpegError as exc:
        raise ClipError(f"the clip is not a video FFmpeg can read ({len(data)} bytes): {exc}") from exc
    if not container.streams.video:
        kinds = ", ".join(stream.type for stream in container.streams) or "none"
        container.close()
        raise ClipError(f"the clip has no video stream (streams: {kinds})")
    container.streams.video[0].thread_type = "AUTO"
    return container


def _frame_rate(container: av.container.InputContainer, stream: av.VideoStream) -> float:
    """The stream's frame rate, after checking the rate, the stated length, frame count, frame size and pixels in
    all are not absurd (nothing is decoded yet)."""
    rate = stream.average_rate or stream.guessed_rate
    if rate is None:
        raise ClipError("the clip states no frame rate")
    fps = float(rate)
    if not MIN_FPS <= fps <= MAX_FPS:
        raise ClipError(f"the clip runs at {fps:g} fps; a clip must run at {MIN_FPS:g} to {MAX_FPS:g} fps")
    if container.duration is not None and container.duration / av.time_base > MAX_SECONDS:
        raise ClipError(
            f"the clip lasts {container.duration / av.time_base:.1f} s; at most {MAX_SECONDS:g} s are accepted"
        )
    if stream.frames > MAX_FRAMES:
        raise ClipError(f"the clip has {stream.frames} frames; at most {MAX_FRAMES} are accepted")
    width, height = stream.codec_context.width, stream.codec_context.height
    if width and height:
        _check_size(width, height)
        if stream.frames * width * height > MAX_CLIP_PIXELS:
            raise ClipError(
                f"the clip has {stream.frames} frames of {width}x{height} px ({stream.frames * width * height:,} "
                f"pixels); at most {MAX_CLIP_PIXELS:,} are decoded"
            )
    return fps


def _check_size(width: int, height: int) -> None:
    """Refuse a frame size outside :data:`MIN_EDGE` to :data:`MAX_EDGE` px a side or over :data:`MAX_FRAME_PIXELS`."""
    if min(width, height) < MIN_EDGE:
        raise ClipError(f"the clip's frames are {width}x{height} px; a clip needs at least {MIN_EDGE} px on each side")
    if max(width, height) > MAX_EDGE or width * height > MAX_FRAME_PIXELS:
        raise ClipError(
            f"the clip's frames are {width}x{height} px; a clip may have at most {MAX_EDGE} px a side and "
            f"{MAX_FRAME_PIXELS:,} pixels a frame"
        )


def _decode(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[np.ndarray]:
    """The stream's frames in order as HxWx3 uint8 RGB, each checked for its size (:func:`_check_size`: a stream may
    change its size midway)."""
    reformatter = VideoReformatter()  # one for all frames: it keeps FFmpeg's conversion context between them
    try:
        for frame in container.decode(stream):
            _check_size(frame.width, frame.height)
            yield reformatter.reformat(frame, format="rgb24").to_ndarray()
    except av.FFmpegError as exc:
        raise ClipError(f"the clip cannot be decoded: {exc}") from exc


def _square(pixels: np.ndarray) -> Image.Image:
    """HxWx3 RGB ``pixels`` with :data:`EDGE_CROP` cut off each edge, then their centred square."""
    height, width = pixels.shape[:2]
    top, left = math.ceil(EDGE_CROP * height), math.ceil(EDGE_CROP * width)
    inner_height, inner_width = height - 2 * top, width - 2 * left
    side = min(inner_height, inner_width)
    top += (inner_height - side) // 2
    left += (inner_width - side) // 2
    return Image.fromarray(np.ascontiguousarray(pixels[top : top + side, left : left + side]))
