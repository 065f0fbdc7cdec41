"""Frame extraction from clips: the loop found, the slots spread over it, neighbour candidates, quality scores, the
edge crop and every refusal, on H.264 clips made in code."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.testing import ActivityEnvironment

from activities import clips
from activities.clips import (
    MAX_FRAMES,
    ClipError,
    Extraction,
    candidates,
    choose_loop,
    extract_frames,
    spread,
)
from activities.production import ProductionActivities
from core.artifacts import FileArtifactStore
from testkit.clips import (
    audio_only_mp4,
    encode_mp4,
    looping_clip,
    looping_frames,
    png_pixels,
    with_matroska_duration,
)
from workflows.calls import failure_reason
from workflows.contract import ExtractFramesInput, FailureType


def extract(data: bytes, frames: int = 12, neighbours: int = 2, size: int = 128) -> Extraction:
    return extract_frames(data, frames=frames, neighbours=neighbours, size=size)


def qualities(extraction: Extraction) -> dict[int, float]:
    """Every candidate's quality by its source frame."""
    return {frame.source_frame: frame.quality for slot in extraction.slots for frame in slot}


def grey(frames: list[np.ndarray]) -> np.ndarray:
    """Grey thumbnails of RGB frames, as :func:`choose_loop` takes them."""
    return np.stack([frame.mean(axis=-1) for frame in frames])


def flat_frames(count: int, edge: int = 64, width: int | None = None) -> list[np.ndarray]:
    """Frames of one grey level each, cheap to encode in the thousands (``edge`` high, ``width`` or ``edge`` wide)."""
    return [np.full((edge, width or edge, 3), (index * 7) % 256, np.uint8) for index in range(count)]


def empty_mp4() -> bytes:
    """An MP4 whose header was written for an H.264 stream that never got a frame."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("libx264", rate=24)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        output.start_encoding()
    return buffer.getvalue()


def damaged(data: bytes) -> bytes:
    """``data`` with 4000 bytes of its frames (``mdat``) zeroed: more than the H.264 decoder can conceal."""
    start = data.find(b"mdat") + 1000
    return data[:start] + bytes(4000) + data[start + 4000 :]


@pytest.fixture(scope="module")
def one_loop() -> Extraction:
    return extract(looping_clip(48))


# --- The loop ----------------------------------------------------------------------------------------------------


def test_a_clip_made_as_one_loop_plays_whole(one_loop: Extraction) -> None:
    assert one_loop.loop == (0, 48)
    assert one_loop.source_frames == 48
    assert one_loop.fps == 24.0


def test_a_clip_whose_motion_repeats_at_two_thirds_loops_there() -> None:
    extraction = extract(looping_clip(48, period=32))
    assert extraction.loop == (0, 32)
    assert [slot[0].source_frame for slot in extraction.slots] == [0, 3, 5, 8, 11, 13, 16, 19, 21, 24, 27, 29]


def test_a_loop_starts_after_an_intro_that_does_not_come_back() -> None:
    # Five plain grey frames, then the motion, repeating every 30 frames: [5, 35) closes perfectly, as do the loops
    # starting up to 4 frames later; of these ties (all 30 frames long) the earliest wins.
    frames = [np.full((256, 256, 3), 120, np.uint8)] * 5 + looping_frames(45, period=30)
    assert choose_loop(grey(frames), 12) == (5, 35)


def test_the_longest_of_near_ties_wins() -> None:
    # One cycle, then the pose of its start held for 20 frames: every end in the hold closes the loop as well as any
    # other; the longest, the whole clip, wins.
    frames = looping_frames(30) + looping_frames(20, period=1e9)
    assert choose_loop(grey(frames), 12) == (0, 50)


def test_the_whole_clip_is_no_loop_when_its_ends_do_not_meet() -> None:
    # A fade from black to white: every seam jumps, the smallest jump is the shortest loop allowed (starts before
    # frame 8, ends from frame 24 on). The whole clip, whose ends are furthest apart, is not taken for a loop.
    fade = np.linspace(0, 255, 40)[:, None, None] * np.ones((40, 8, 8))
    assert choose_loop(fade, 12) == (7, 24)


def test_the_loop_has_at_least_as_many_frames_as_the_emoji() -> None:
    # The motion repeats every 6 frames, but a 12-frame emoji needs 12 frames: the whole clip.
    assert choose_loop(grey(looping_frames(12, period=6)), 12) == (0, 12)


# --- Slots and candidates ----------------------------------------------------------------------------------------


def test_slots_are_spread_evenly_over_the_loop_in_order(one_loop: Extraction) -> None:
    assert [slot[0].source_frame for slot in one_loop.slots] == list(range(0, 48, 4))
    assert spread((0, 6), 4) == [0, 2, 3, 5]  # halves round up
    assert spread((10, 40), 12) == [10, 13, 15, 18, 20, 23, 25, 28, 30, 33, 35, 38]


def test_each_slot_has_its_chosen_frame_first_then_its_neighbours(one_loop: Extraction) -> None:
    slot = one_loop.slots[3]
    assert [(frame.source_frame, frame.offset) for frame in slot] == [(12, 0), (11, -1), (13, 1), (10, -2), (14, 2)]


def test_neighbours_are_clamped_to_the_clip() -> None:
    assert candidates(0, 2, 48) == [0, 1, 2]
    assert candidates(47, 2, 48) == [47, 46, 45]
    assert candidates(1, 3, 3) == [1, 0, 2]
    assert candidates(5, 0, 48) == [5]
    extraction = extract(looping_clip(12), neighbours=2)
    assert [frame.offset for frame in extraction.slots[0]] == [0, 1, 2]
    assert [frame.offset for frame in extraction.slots[-1]] == [0, -1, -2]
    assert [frame.source_frame for frame in extraction.slots[-1]] == [11, 10, 9]


def test_a_frame_shared_by_two_slots_is_encoded_once(one_loop: Extraction) -> None:
    after, before = one_loop.slots[0][-1], one_loop.slots[1][-2]
    assert after.source_frame == before.source_frame == 2
    assert after.png is before.png


def test_frames_are_square_rgb_pngs_of_the_clip(one_loop: Extraction) -> None:
    pixels = png_pixels(one_loop.slots[0][0].png)
    image = Image.open(io.BytesIO(one_loop.slots[0][0].png))
    assert (image.format, image.mode, image.size) == ("PNG", "RGB", (128, 128))
    assert pixels[0, 0].min() > 245  # the white background
    assert np.abs(pixels.astype(int) - [230, 90, 30]).sum(axis=-1).min() < 30  # the disc


# --- Quality -----------------------------------------------------------------------------------------------------


def test_a_blurred_and_a_glitched_frame_score_low_and_the_rest_about_one() -> None:
    scores = qualities(extract(looping_clip(48, blurred=[10], glitched=[30])))
    assert scores[10] < 0.2
    assert scores[30] < 0.2
    normal = [score for frame, score in scores.items() if frame not in (10, 30)]
    assert min(normal) > 0.95
    assert scores[29] == scores[31] == 1.0  # a glitch leaves its neighbours' scores alone


def test_a_normal_clip_scores_one_throughout(one_loop: Extraction) -> None:
    assert set(qualities(one_loop).values()) == {1.0}


def test_fast_motion_in_a_mostly_still_clip_is_no_glitch() -> None:
    # Still, then one quick circle in 12 frames (the disc moving most of its radius a frame), then still again.
    frames = looping_frames(30, period=1e9) + looping_frames(12) + looping_frames(6, period=1e9)
    assert set(qualities(extract(encode_mp4(frames, 24))).values()) == {1.0}


def test_a_glitched_first_frame_scores_low() -> None:
    scores = qualities(extract(looping_clip(48, glitched=[0])))
    assert scores[0] < 0.2
    assert min(score for frame, score in scores.items() if frame) > 0.95


# --- Cropping and size -------------------------------------------------------------------------------------------


def test_the_edge_crop_removes_black_lines_along_the_edges() -> None:
    extraction = extract(looping_clip(24, edge_lines=3), frames=4, neighbours=0, size=256)
    for slot in extraction.slots:
        pixels = png_pixels(slot[0].png)
        edges = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
        assert edges.min() > 235


def test_a_720p_clip_becomes_square_frames_of_the_size_asked() -> None:
    extraction = extract(encode_mp4(looping_frames(24, width=1280, height=720), 30), frames=6, size=200)
    assert extraction.fps == 30.0
    for slot in extraction.slots:
        for frame in slot:
            assert Image.open(io.BytesIO(frame.png)).size == (200, 200)
    # The square is the middle of the frame: the disc, circling the centre, is cut by neither side.
    pixels = png_pixels(extraction.slots[0][0].png).astype(int)
    orange = np.abs(pixels - [230, 90, 30]).sum(axis=-1) < 40
    columns = np.nonzero(orange.any(axis=0))[0]
    assert columns.min() > 0 and columns.max() < 199


# --- Refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("clip", "message"),
    [
        (lambda: b"", "the clip is 0 bytes"),
        (lambda: b"this is a text file, not a clip\n" * 20, "the clip is not a video FFmpeg can read"),
        (audio_only_mp4, "the clip has no video stream (streams: audio)"),
        (lambda: encode_mp4(flat_frames(24, edge=32), 24), "the clip's frames are 32x32 px; a clip needs at least 64"),
        (lambda: encode_mp4(flat_frames(24), 1000), "the clip runs at 1000 fps; a clip must run at 1 to 240 fps"),
        (lambda: encode_mp4(flat_frames(24), 0.5), "the clip runs at 0.5 fps"),
        (lambda: encode_mp4(flat_frames(62), 1), "the clip lasts 62.0 s; at most 60 s are accepted"),
        (lambda: encode_mp4(flat_frames(MAX_FRAMES + 1), 60), "the clip has 3001 frames; at most 3000 are accepted"),
        (lambda: np.random.default_rng(0).bytes(50_000), "the clip is not a video FFmpeg can read (50000 bytes)"),
        (empty_mp4, "the clip has no video stream (streams: none)"),
        (lambda: damaged(looping_clip(48)), "the clip cannot be decoded: "),
        (lambda: encode_mp4(flat_frames(24), 10_000), "the clip runs at 10000 fps; a clip must run at 1 to 240 fps"),
        (
            lambda: with_matroska_duration(encode_mp4(flat_frames(24), 24, container="matroska"), 3 * 3600),
            "the clip lasts 10800.0 s; at most 60 s are accepted",
        ),
        (
            lambda: encode_mp4(flat_frames(2, width=4160), 24),
            "the clip's frames are 4160x64 px; a clip may have at most 4096 px a side and 8,847,360 pixels a frame",
        ),
        (lambda: encode_mp4(flat_frames(1, edge=3008), 24), "the clip's frames are 3008x3008 px; a clip may have"),
    ],
    ids=[
        "empty",
        "text",
        "audio-only",
        "tiny",
        "1000-fps",
        "half-fps",
        "62-s",
        "3001-frames",
        "random-bytes",
        "no-frames",
        "damaged-frames",
        "10000-fps",
        "3-hours-stated",
        "too-wide",
        "too-many-pixels",
    ],
)
def test_a_clip_is_refused(clip: Callable[[], bytes], message: str) -> None:
    with pytest.raises(ClipError, match=re.escape(message)):
        extract(clip())


def test_a_clip_with_too_few_frames_is_refused() -> None:
    with pytest.raises(ClipError) as refused:
        extract(looping_clip(7), frames=12)
    assert str(refused.value) == "the clip has 7 frames; an emoji of 12 frames needs at least 12"


def test_a_picture_is_no_clip() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (128, 128), "white").save(buffer, format="PNG")
    with pytest.raises(ClipError, match="the clip has 1 frame; an emoji of 12 frames"):
        extract(buffer.getvalue())


def test_a_truncated_clip_is_refused() -> None:
    data = looping_clip(48)
    with pytest.raises(ClipError, match="the clip is not a video FFmpeg can read"):  # its index was at the end
        extract(data[: len(data) // 2])


@pytest.mark.parametrize("kept", [0.5, 0.8, 0.98])
def test_a_streamable_clip_cut_short_is_refused_though_its_first_frames_decode(kept: float) -> None:
    data = encode_mp4(looping_frames(48), 24, faststart=True)
    assert data.find(b"moov") < data.find(b"mdat"), "the index comes first"
    with pytest.raises(ClipError, match=r"the clip is truncated or damaged: its header states 48 frames, only \d+ "):
        extract(data[: int(len(data) * kept)], frames=6)
    assert extract(data, frames=6).source_frames == 48


def test_the_pixels_of_all_frames_are_bounded_before_and_while_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clips, "MAX_CLIP_PIXELS", 40 * 64 * 64)
    with pytest.raises(ClipError, match=re.escape("the clip has 48 frames of 64x64 px (196,608 pixels); at most")):
        extract(encode_mp4(flat_frames(48), 24))
    # Matroska states no frame count: the pixels are counted while decoding.
    with pytest.raises(ClipError, match=re.escape("the clip's frames hold more than 163,840 pixels (after 41 frames")):
        extract(encode_mp4(flat_frames(48), 24, container="matroska"))


def shown_to_people(error: ApplicationError) -> str:
    """What the workflow records for an activity's failure (a take's error): its innermost cause, read back from the
    failure Temporal carries (workflows.calls.failure_reason)."""
    converter = DataConverter.default
    failure = Failure()
    converter.failure_converter.to_failure(error, converter.payload_converter, failure)
    back = converter.failure_converter.from_failure(failure, converter.payload_converter)
    assert isinstance(back, FailureError)
    return failure_reason(back)


async def test_the_activity_reports_a_bad_clip_as_invalid_clip_not_retryable(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    clip = store.put("sets/s/wave/take-0.mp4", b"<html>502 Bad Gateway</html>", "video/mp4")
    request = ExtractFramesInput(set_id="s", action="wave", take=0, clip=clip, frames=4, neighbours=1, size=64)

    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(ProductionActivities(store).extract_frames, request)

    assert refused.value.type == FailureType.INVALID_CLIP.value and refused.value.non_retryable
    assert refused.value.message.startswith("wave take 0: the clip is not a video FFmpeg can read (28 bytes)")
    shown = shown_to_people(refused.value)
    assert shown.startswith("InvalidClip: wave take 0: the clip is not a video FFmpeg can read (28 bytes)")


def test_a_stream_without_a_frame_count_is_counted_while_decoding() -> None:
    data = encode_mp4(flat_frames(MAX_FRAMES + 1), 60, container="matroska")
    with pytest.raises(ClipError, match="more than 3000 frames"):
        extract(data)


def test_a_stream_without_a_length_is_timed_after_decoding() -> None:
    # A raw H.264 stream states neither its length nor its frame count: 1550 frames at 25 fps, counted, last 62 s.
    data = encode_mp4(flat_frames(1550), 25, container="h264")
    with pytest.raises(ClipError, match=re.escape("lasts 62.0 s")):
        extract(data)


def test_arguments_out_of_range_are_a_callers_mistake() -> None:
    with pytest.raises(ValueError, match="frames >= 1"):
        extract(looping_clip(12), frames=0)
    with pytest.raises(ValueError, match="size >= 16"):
        extract(looping_clip(12), size=8)
    with pytest.raises(ValueError, match="a loop of 13 frames does not fit in 12"):
        choose_loop(np.zeros((12, 8, 8)), 13)
