"""VP9-with-alpha WebM: round trips through the forced libvpx decoder, file facts read back with PyAV, the ladder."""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Sequence

import av
import numpy as np
import pytest

from activities.export.platforms.base import DoesNotFitError
from activities.export.platforms.telegram import EMOJI_RULES, STICKER_RULES
from activities.export.platforms.webm import LADDER, decode_webm, encode_webm, fit_webm


def disc_frames(count: int, size: int) -> list[np.ndarray]:
    """An opaque orange disc moving left to right inside a fixed half-transparent blue ring, on transparency."""
    y, x = np.mgrid[:size, :size]
    ring = (np.hypot(x - size / 2, y - size / 2) >= 0.36 * size) & (np.hypot(x - size / 2, y - size / 2) < 0.46 * size)
    frames = []
    for index in range(count):
        pixels = np.zeros((size, size, 4), np.uint8)
        pixels[ring] = (30, 90, 220, 128)
        pixels[np.hypot(x - size * (0.35 + 0.3 * index / count), y - size / 2) < 0.15 * size] = (240, 130, 20, 255)
        frames.append(pixels)
    return frames


def perfect(source: Sequence[np.ndarray], decoded: Sequence[np.ndarray]) -> tuple[float, float]:
    assert len(source) == len(decoded)
    return 1.0, 1.0


def test_round_trip_keeps_alpha_and_frames() -> None:
    frames = disc_frames(12, 64)

    decoded = decode_webm(encode_webm(frames, 12, crf=30))

    assert len(decoded) == 12
    for index, (source, frame) in enumerate(zip(frames, decoded, strict=True)):
        assert frame.shape == (64, 64, 4) and frame.dtype == np.uint8
        assert frame[0, 0, 3] == 0 and frame[32, 2, 3] == 0
        centre = round(64 * (0.35 + 0.3 * index / 12))
        assert frame[32, centre, 3] == 255
        assert np.abs(frame[32, centre, :3].astype(int) - source[32, centre, :3]).max() <= 12
        assert abs(int(frame[32, 61, 3]) - 128) <= 8  # the ring, at its right


def test_odd_sides_round_trip() -> None:
    frames = [frame[:63, :65] for frame in disc_frames(4, 66)]

    decoded = decode_webm(encode_webm(frames, 10, crf=30))

    assert [frame.shape for frame in decoded] == [(63, 65, 4)] * 4


def test_file_has_fps_duration_alpha_and_no_audio() -> None:
    data = encode_webm(disc_frames(12, 64), 12, crf=30)

    with av.open(io.BytesIO(data), "r") as container:
        assert container.format.name == "matroska,webm"
        assert len(container.streams.audio) == 0 and len(container.streams) == 1
        stream = container.streams.video[0]
        assert stream.codec_context.name == "vp9"
        assert stream.average_rate == 12
        assert stream.metadata["alpha_mode"] == "1"
        assert container.duration == 1_000_000


def test_same_input_gives_same_bytes() -> None:
    frames = disc_frames(3, 32)

    assert encode_webm(frames, 12, crf=30) == encode_webm(frames, 12, crf=30)


@pytest.mark.parametrize(
    "frames",
    [[], [np.zeros((8, 8, 4), np.uint8), np.zeros((8, 10, 4), np.uint8)], [np.zeros((8, 8, 3), np.uint8)]],
)
def test_refuses_frames_it_cannot_encode(frames: list[np.ndarray]) -> None:
    with pytest.raises(ValueError):
        encode_webm(frames, 12, crf=30)


def test_ladder_runs_from_least_to_most_loss() -> None:
    assert [rung for rung, _, _ in LADDER] == [
        *(f"crf-{crf}" for crf in (18, 24, 30, 36, 42, 48, 56, 63)),
        *(f"bitrate-{rate}k" for rate in (256, 128, 64, 32, 16)),
    ]


def test_fit_takes_the_first_rung_that_fits() -> None:
    frames = disc_frames(6, 512)

    fitted = fit_webm(frames, 0.5, STICKER_RULES, quality=perfect)

    assert fitted.rung == "crf-18" and len(fitted.data) <= STICKER_RULES.max_bytes
    assert (fitted.frames, fitted.loop_s, fitted.plays, fitted.colours) == (6, 0.5, 0, None)
    assert (fitted.width, fitted.height, fitted.ssim_white, fitted.ssim_dark) == (512, 512, 1.0, 1.0)
    crf_24 = encode_webm(frames, 12, crf=24)
    assert len(crf_24) < len(fitted.data)

    tight = fit_webm(frames, 0.5, dataclasses.replace(STICKER_RULES, max_bytes=len(crf_24)), quality=perfect)

    assert (tight.rung, tight.data) == ("crf-24", crf_24)


def test_fit_refuses_a_limit_nothing_meets() -> None:
    with pytest.raises(DoesNotFitError, match=r"max_bytes is 100 B, the smallest WebM \([a-z]+-\d+k?\) is \d+ B"):
        fit_webm(disc_frames(6, 32), 0.5, dataclasses.replace(EMOJI_RULES, max_bytes=100), quality=perfect)


def test_fit_retimes_a_long_loop_to_the_longest_playback() -> None:
    fitted = fit_webm(disc_frames(12, 32), 4.0, EMOJI_RULES, quality=perfect)

    assert (fitted.frames, fitted.loop_s) == (12, 3.0)
    with av.open(io.BytesIO(fitted.data), "r") as container:
        assert container.streams.video[0].average_rate == 4
        assert container.duration == 3_000_000


@pytest.mark.parametrize(("count", "loop_s", "kept", "played_s"), [(60, 1.0, 30, 1.0), (150, 5.0, 90, 3.0)])
def test_fit_drops_frames_evenly_above_the_highest_frame_rate(
    count: int, loop_s: float, kept: int, played_s: float
) -> None:
    frames = disc_frames(count, 16)
    seen: list[Sequence[np.ndarray]] = []

    def record(source: Sequence[np.ndarray], decoded: Sequence[np.ndarray]) -> tuple[float, float]:
        seen.append(source)
        return perfect(source, decoded)

    fitted = fit_webm(frames, loop_s, EMOJI_RULES, quality=record)

    assert (fitted.frames, fitted.loop_s) == (kept, played_s)
    positions = [next(i for i, frame in enumerate(frames) if frame is source) for source in seen[0]]
    assert positions[0] == 0 and {b - a for a, b in itertools.pairwise(positions)} <= {1, 2}
    assert len(decode_webm(fitted.data)) == kept
    with av.open(io.BytesIO(fitted.data), "r") as container:
        assert container.streams.video[0].average_rate == 30
        assert container.duration == played_s * 1_000_000
