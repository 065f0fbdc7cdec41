"""The procedural generator's clips: one loop of the action's motion from the approved start frame, as an H.264 MP4.

A clip has ``N = round(seconds * fps)`` source frames; frame ``i`` is the phase ``t = i / N`` of one loop, so a frame
``N`` would be frame 0 again. How the frames are made depends on the start frame:

- a drawn character's start frame is drawn again at every phase from the scene its :class:`.stills.StartFrameNote`
  names, with the take's :meth:`.motion.Variation.for_take` swell, which leaves the phase 0 pose alone: frame 0 is the
  start frame, pixel for pixel (at an even size), and every frame's alpha is the drawing's exact coverage;
- an uploaded character's start frame (or one without a note) is keyed against white and warped by the affine part of
  the pose at each phase, relative to the pose at phase 0 (the one the note's candidate was put in): frame 0 is the
  start frame to within the keying floor, and every frame's alpha is the warped key's, exactly the coverage used to
  composite it.

Then about one frame in ten is damaged (:mod:`.defects`), as real clips are, and the frames are encoded with libx264
(yuv420p, CRF 20, on one thread, so that the same request gives the same bytes on any machine) at the requested rate,
``request.size`` square (rounded up to an even edge). :func:`render_clip` returns the frames themselves, with their
true alpha and defects, for quality tests and benchmarks.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from numpy.typing import NDArray

from activities.generation.procedural.defects import Defect, defect_schedule
from activities.generation.procedural.keywords import staging_for
from activities.generation.procedural.motion import Variation
from activities.generation.procedural.prompt import custom_words
from activities.generation.procedural.render import RenderedFrame, render
from activities.generation.procedural.scene import action_scene
from activities.generation.procedural.stills import StartFrameNote, start_frame_variation
from activities.generation.procedural.upload import PicturePose, decode_rgb, key_white, warped
from workflows.contract import GenerateClipInput

X264_OPTIONS = {"crf": "20", "preset": "veryfast", "x264-params": "no-mbtree=1"}
"""libx264's options: CRF 20 (visually near-lossless, about what hosted models deliver), a fast preset, and no
macroblock-tree rate control (its SIMD float propagation made the same frames encode to different bytes now and then,
which a retried activity must not see)."""


@dataclass(frozen=True)
class SourceFrame:
    """One source frame of a clip.

    Attributes:
        index: Its index among the clip's source frames.
        layers: The undamaged frame: premultiplied colour and true alpha.
        clean: The undamaged frame over white (uint8 RGB).
        rgb: The frame as encoded: ``clean``, damaged by ``defect`` if it has one.
        defect: How the frame is damaged, or None.
    """

    index: int
    layers: RenderedFrame
    clean: NDArray[np.uint8]
    rgb: NDArray[np.uint8]
    defect: Defect | None


@dataclass(frozen=True)
class RenderedClip:
    """Every source frame of a clip, before encoding.

    Attributes:
        rgb: The frames as encoded, defects included (N x H x W x 3, uint8).
        clean: The same frames undamaged (N x H x W x 3, uint8).
        alpha: The true alpha of the undamaged frames (N x H x W, float32, 0..1).
        effect_alpha: The part of ``alpha`` that the effects around the character add (sparkles, sweat drops,
            motion lines; N x H x W, float32, 0..1): ``alpha - effect_alpha`` is the character alone. Zero for an
            uploaded character's clip, whose frames are a warped picture.
        defects: The damaged frames' defects, by frame index.
        fps: The frame rate.
    """

    rgb: NDArray[np.uint8]
    clean: NDArray[np.uint8]
    alpha: NDArray[np.float32]
    effect_alpha: NDArray[np.float32]
    defects: dict[int, Defect]
    fps: int


def source_frame_count(seconds: float, fps: int) -> int:
    """How many source frames a clip of ``seconds`` at ``fps`` has (at least 2)."""
    return max(2, round(seconds * fps))


def clip_edge(size: int) -> int:
    """The clip's edge for a requested ``size``: the size, rounded up to even (yuv420p needs even dimensions)."""
    return size + size % 2


def clip_frames(request: GenerateClipInput, start_frame: bytes) -> Iterator[SourceFrame]:
    """The clip's source frames in order, made one at a time.

    Raises:
        GenerationRefused: ``start_frame`` is not a picture.
    """
    count = source_frame_count(request.seconds, request.fps)
    defects = defect_schedule(count, request.seed, request.action.name, request.take)
    for index, layers in enumerate(_undamaged(request, start_frame, count)):
        clean = layers.composite()
        defect = defects.get(index)
        yield SourceFrame(index, layers, clean, clean if defect is None else defect.apply(clean), defect)


def _undamaged(request: GenerateClipInput, start_frame: bytes, count: int) -> Iterator[RenderedFrame]:
    """The undamaged frames: drawn again from the start frame's scene, or its picture warped."""
    action, character, edge = request.action, request.character, clip_edge(request.size)
    note = StartFrameNote.read(start_frame)
    start = Variation() if note is None else start_frame_variation(request.seed, action.name, note.candidate)
    variation = start.for_take(request.seed, action.name, request.take)
    if character.prompt is not None and note is not None:
        scene = action_scene(
            character.prompt,
            character.candidate,
            action,
            custom=custom_words(note.prompt, action.pose_prompt),
            style=note.style,
            seed=request.seed,
            variation=variation,
        )
        for index in range(count):
            yield render(scene, edge, index / count)
        return
    layers = key_white(decode_rgb(start_frame, edge, "start frame"))
    motion = staging_for(action).motion
    first = variation.pose(motion, 0.0)
    picture = PicturePose.of(layers, first)
    yield layers
    for index in range(1, count):
        yield warped(layers, picture.between(first, variation.pose(motion, index / count)))


def render_clip(request: GenerateClipInput, start_frame: bytes) -> RenderedClip:
    """Every source frame of the clip :func:`clip_mp4` encodes, with its true alpha and defects.

    Raises:
        GenerationRefused: ``start_frame`` is not a picture.
    """
    frames = list(clip_frames(request, start_frame))
    return RenderedClip(
        rgb=np.stack([frame.rgb for frame in frames]),
        clean=np.stack([frame.clean for frame in frames]),
        alpha=np.stack([frame.layers.alpha for frame in frames]).astype(np.float32),
        effect_alpha=np.stack([_effect_alpha(frame.layers) for frame in frames]).astype(np.float32),
        defects={frame.index: frame.defect for frame in frames if frame.defect is not None},
        fps=request.fps,
    )


def _effect_alpha(layers: RenderedFrame) -> NDArray[np.float32]:
    """The alpha the frame's effects add, zero when it has none apart."""
    if layers.effect_alpha is None:
        return np.zeros_like(layers.alpha)
    return layers.effect_alpha


def encode_mp4(frames: Iterable[NDArray[np.uint8]], edge: int, fps: int) -> bytes:
    """``edge`` x ``edge`` RGB frames (uint8; ``edge`` even) as an H.264 MP4 at ``fps``, deterministically."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps, options=X264_OPTIONS)
        stream.width = stream.height = edge
        stream.pix_fmt = "yuv420p"
        # One thread (x264's output depends on its thread count), and the conversion to yuv420p done here: the one
        # PyAV's encode() makes does not always give the same bytes for the same frame.
        stream.codec_context.thread_count = 1
        stream.codec_context.thread_type = "NONE"
        for index, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def clip_mp4(request: GenerateClipInput, start_frame: bytes) -> bytes:
    """The clip as the MP4 a hosted image-to-video model returns, its frames made and encoded one at a time.

    Raises:
        GenerationRefused: ``start_frame`` is not a picture.
    """
    frames = (frame.rgb for frame in clip_frames(request, start_frame))
    return encode_mp4(frames, clip_edge(request.size), request.fps)
