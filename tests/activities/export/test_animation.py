"""Animated sticker encoders: decode every output with Pillow and check frames, timing, alpha and disposal."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from PIL import Image, ImageChops, ImageDraw, ImageSequence

from activities.export.animation import (
    GIF_MATTE,
    decode_rgba_png,
    encode_apng,
    encode_gif,
    encode_png,
    encode_webp,
    gif_delays_ms,
    resize_premultiplied,
)

Encoder = Callable[..., bytes]
ENCODERS: dict[str, Encoder] = {"webp": encode_webp, "apng": encode_apng, "gif": encode_gif}
LOSSLESS: dict[str, Encoder] = {"webp": encode_webp, "apng": encode_apng}

SIZE = 64
SEMI = (57, 5)
"""A pixel of the semi-transparent white block every test frame has (alpha 192)."""


def make_frame(x: int) -> Image.Image:
    """A transparent frame: a moving opaque orange square at column ``x``, a fixed opaque centre, a 75% white block."""
    pixels = np.zeros((SIZE, SIZE, 4), np.uint8)
    pixels[24:40, x : x + 16] = (255, 140, 0, 255)
    pixels[28:36, 28:36] = (20, 20, 200, 255)
    pixels[4:8, 56:60] = (255, 255, 255, 192)
    return Image.fromarray(pixels)


def make_frames(count: int = 12) -> list[Image.Image]:
    return [make_frame(4 + 4 * i) for i in range(count)]


@dataclass
class Decoded:
    frames: list[Image.Image]
    durations: list[float]
    loop: int | None


def decode(data: bytes) -> Decoded:
    """Play the file frame by frame as a viewer would, composited to full RGBA canvases."""
    with Image.open(io.BytesIO(data)) as image:
        frames, durations = [], []
        for frame in ImageSequence.Iterator(image):
            frames.append(frame.convert("RGBA"))  # loads the frame, which sets WebP's duration
            durations.append(frame.info.get("duration", 0))  # a still PNG has none
        return Decoded(frames, durations, image.info.get("loop"))


def alpha(image: Image.Image) -> np.ndarray:
    return np.asarray(image.getchannel("A"))


def pixel(image: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    return tuple(int(value) for value in np.asarray(image)[xy[1], xy[0]])


@pytest.mark.parametrize("name", ENCODERS)
def test_frames_timing_and_loop(name: str) -> None:
    decoded = decode(ENCODERS[name](make_frames(12), 80))

    assert len(decoded.frames) == 12
    assert decoded.durations == [80] * 12
    assert decoded.loop == 0
    assert all(frame.size == (SIZE, SIZE) for frame in decoded.frames)


@pytest.mark.parametrize("name", ENCODERS)
def test_transparent_corner_and_opaque_centre_in_every_frame(name: str) -> None:
    for frame in decode(ENCODERS[name](make_frames(6), 100)).frames:
        assert pixel(frame, (0, 0))[3] == 0
        assert pixel(frame, (31, 31)) == (20, 20, 200, 255)


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_formats_keep_every_visible_pixel_exactly(name: str) -> None:
    source = make_frames(6)
    for got, want in zip(decode(LOSSLESS[name](source, 100)).frames, source, strict=True):
        assert pixel(got, SEMI) == (255, 255, 255, 192)
        np.testing.assert_array_equal(alpha(got), alpha(want))
        visible = alpha(want) > 0
        np.testing.assert_array_equal(np.asarray(got)[visible], np.asarray(want)[visible])


@pytest.mark.parametrize("name", ENCODERS)
def test_frames_do_not_accumulate(name: str) -> None:
    source = make_frames(3)
    uncovered = (alpha(source[0]) == 255) & (alpha(source[1]) == 0)
    assert uncovered.any()

    decoded = decode(ENCODERS[name](source, 100)).frames

    assert (alpha(decoded[1])[uncovered] == 0).all()
    for got, want in zip(decoded, source, strict=True):
        assert (alpha(got)[alpha(want) == 0] == 0).all()


def test_lossy_webp_keeps_alpha_exact_and_colours_close() -> None:
    source = make_frames(6)
    decoded = decode(encode_webp(source, 100, quality=80))

    assert len(decoded.frames) == 6
    for got, want in zip(decoded.frames, source, strict=True):
        np.testing.assert_array_equal(alpha(got), alpha(want))
        error = np.abs(np.asarray(got, np.int16) - np.asarray(want, np.int16))[alpha(want) == 255]
        assert error.mean() < 20  # YUV 4:2:0 smears colour a few pixels across the hard orange/blue edges


@pytest.mark.parametrize("quality", [-1, 101])
def test_webp_quality_out_of_range(quality: int) -> None:
    with pytest.raises(ValueError, match="WebP quality must be from 0 to 100"):
        encode_webp(make_frames(2), 100, quality=quality)


@pytest.mark.parametrize("name", ENCODERS)
def test_identical_frames_keep_the_loop_time(name: str) -> None:
    first, second = make_frames(2)
    decoded = decode(ENCODERS[name]([first, first, first, second], 60))

    assert sum(decoded.durations) == 240
    np.testing.assert_array_equal(alpha(decoded.frames[-1]) > 0, alpha(second) >= 128)


@pytest.mark.parametrize("name", ENCODERS)
def test_single_frame_is_a_still_image(name: str) -> None:
    decoded = decode(ENCODERS[name]([make_frame(10)], 100))

    assert len(decoded.frames) == 1
    assert pixel(decoded.frames[0], (31, 31)) == (20, 20, 200, 255)


@pytest.mark.parametrize("name", ENCODERS)
def test_max_size_scales_down_and_keeps_small_frames(name: str) -> None:
    assert decode(ENCODERS[name](make_frames(2), 100, max_size=32)).frames[0].size == (32, 32)
    assert decode(ENCODERS[name](make_frames(2), 100, max_size=512)).frames[0].size == (SIZE, SIZE)


@pytest.mark.parametrize("name", ENCODERS)
@pytest.mark.parametrize(
    ("frames", "duration", "max_size", "message"),
    [
        ([], 100, None, "at least one frame"),
        ([make_frame(4), make_frame(4).resize((32, 32))], 100, None, "frame 1 is 32x32"),
        ([make_frame(4).convert("RGB")], 100, None, "frame 0 is mode 'RGB'"),
        ([make_frame(4)], 0, None, "positive number of milliseconds"),
        ([make_frame(4)], -5, None, "positive number of milliseconds"),
        ([make_frame(4)], 100, 0, "max_size must be a positive"),
    ],
)
def test_invalid_input_is_a_value_error(
    name: str, frames: list[Image.Image], duration: int, max_size: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ENCODERS[name](frames, duration, max_size=max_size)


# --- GIF specifics -----------------------------------------------------------------------------------------------


@dataclass
class GifBlocks:
    """What a GIF file says, read straight from its blocks (Pillow's decoder hides some of it)."""

    global_palette_size: int
    controls: list[tuple[int, bool, int, int]]
    """Per frame: disposal method, transparency flag, delay in centiseconds, transparent index."""
    local_palettes: int


def read_gif_blocks(data: bytes) -> GifBlocks:
    flags = data[10]
    assert flags & 0x80, "no global colour table"
    palette_size = 2 << (flags & 7)
    pos = 13 + 3 * palette_size
    controls: list[tuple[int, bool, int, int]] = []
    local_palettes = 0
    while data[pos] != 0x3B:
        if data[pos] == 0x21:
            if data[pos + 1] == 0xF9:
                packed, delay, index = struct.unpack("<BHB", data[pos + 3 : pos + 7])
                controls.append(((packed >> 2) & 7, bool(packed & 1), delay, index))
            pos += 2
        else:
            assert data[pos] == 0x2C
            image_flags = data[pos + 9]
            pos += 10
            if image_flags & 0x80:
                local_palettes += 1
                pos += 3 * (2 << (image_flags & 7))
            pos += 1  # LZW minimum code size
        while data[pos]:
            pos += data[pos] + 1
        pos += 1
    return GifBlocks(palette_size, controls, local_palettes)


def test_gif_uses_one_palette_a_transparent_index_and_disposal_2() -> None:
    blocks = read_gif_blocks(encode_gif(make_frames(12), 80))

    assert len(blocks.controls) == 12
    assert blocks.local_palettes == 0
    indices = {index for _, _, _, index in blocks.controls}
    assert len(indices) == 1
    assert indices.pop() < blocks.global_palette_size
    assert all(disposal == 2 and transparent for disposal, transparent, _, _ in blocks.controls)
    assert [delay for _, _, delay, _ in blocks.controls] == [8] * 12


def test_gif_delays_keep_the_loop_time_in_centiseconds() -> None:
    blocks = read_gif_blocks(encode_gif(make_frames(12), 45))

    delays = [delay for _, _, delay, _ in blocks.controls]
    assert sum(delays) == 54
    assert set(delays) == {4, 5}


@pytest.mark.parametrize(
    ("count", "duration", "expected"),
    [(4, 45, [50, 40, 50, 40]), (3, 100, [100, 100, 100]), (3, 33, [30, 40, 30]), (2, 10, [20, 20])],
)
def test_gif_delays(count: int, duration: int, expected: list[int]) -> None:
    assert gif_delays_ms(count, duration) == expected


def test_gif_thresholds_alpha_and_composites_edges_on_the_matte() -> None:
    pixels = np.zeros((8, 8, 4), np.uint8)
    pixels[..., :3] = 255
    pixels[:, 0:2, 3] = 255
    pixels[:, 2:4, 3] = 192
    pixels[:, 4:6, 3] = 127
    frame = decode(encode_gif([Image.fromarray(pixels)], 100)).frames[0]

    assert pixel(frame, (0, 0)) == (255, 255, 255, 255)
    kept = pixel(frame, (2, 0))
    expected = round(0.75 * 255 + 0.25 * GIF_MATTE[0])
    assert kept[3] == 255 and all(abs(c - expected) <= 1 for c in kept[:3])
    assert pixel(frame, (4, 0))[3] == 0
    assert pixel(frame, (7, 0))[3] == 0


def test_gif_with_many_colours_keeps_the_transparency_mask() -> None:
    rng = np.random.default_rng(7)
    frames = []
    for _ in range(3):
        pixels = rng.integers(0, 256, (SIZE, SIZE, 4), dtype=np.uint8)
        frames.append(Image.fromarray(pixels))

    decoded = decode(encode_gif(frames, 100)).frames

    for got, want in zip(decoded, frames, strict=True):
        np.testing.assert_array_equal(alpha(got) == 255, alpha(want) >= 128)
        visible = alpha(want) >= 128
        error = np.abs(np.asarray(got, np.int16)[..., :3] - np.asarray(want, np.int16)[..., :3])[visible]
        assert error.mean() < 40  # 255 colours for random noise: coarse, but each pixel gets a near colour


# --- Resizing ----------------------------------------------------------------------------------------------------


def white_disc(size: int = 128) -> Image.Image:
    """A white anti-aliased disc on transparent black: straight resizing pulls the black into its edge."""
    big = Image.new("L", (size * 4, size * 4), 0)
    ImageDraw.Draw(big).ellipse((size // 2, size // 2, size * 7 // 2, size * 7 // 2), fill=255)
    mask = big.resize((size, size), Image.Resampling.BOX)
    disc = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    disc.paste((255, 255, 255, 255), mask=mask)
    return disc


def straight_resize(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    return Image.merge("RGBA", [band.resize(size, Image.Resampling.LANCZOS) for band in image.split()])


def test_premultiplied_resize_has_no_dark_fringe() -> None:
    disc = white_disc()
    resized = np.asarray(resize_premultiplied(disc, (37, 37)))
    naive = np.asarray(straight_resize(disc, (37, 37)))

    edge = (resized[..., 3] > 0) & (resized[..., 3] < 255)
    assert edge.sum() > 20
    assert resized[..., :3][resized[..., 3] > 0].min() >= 254
    assert naive[..., :3][(naive[..., 3] > 0) & (naive[..., 3] < 255)].min() < 200  # the fringe this test guards


def test_premultiplied_resize_keeps_foreground_colour_under_zero_alpha() -> None:
    orange = Image.new("RGBA", (64, 64), (255, 140, 0, 0))
    orange.paste((255, 140, 0, 255), (16, 16, 48, 48))

    resized = resize_premultiplied(orange, (16, 16))

    assert pixel(resized, (0, 0)) == (255, 140, 0, 0)
    assert pixel(resized, (8, 8)) == (255, 140, 0, 255)


def test_encoders_resize_in_premultiplied_space() -> None:
    frames = [white_disc(), ImageChops.offset(white_disc(), 5, 0)]
    for name in LOSSLESS:
        for frame in decode(LOSSLESS[name](frames, 100, max_size=37)).frames:
            pixels = np.asarray(frame)
            assert pixels[..., :3][pixels[..., 3] > 0].min() >= 254


# --- PNG helpers -------------------------------------------------------------------------------------------------


def test_png_round_trip_keeps_rgba() -> None:
    frame = make_frame(8)

    decoded = decode_rgba_png(encode_png(frame))

    assert decoded.mode == "RGBA"
    np.testing.assert_array_equal(np.asarray(decoded), np.asarray(frame))


def test_decode_converts_other_png_modes_to_rgba() -> None:
    decoded = decode_rgba_png(encode_png(Image.new("RGB", (4, 4), (1, 2, 3))))

    assert decoded.mode == "RGBA"
    assert pixel(decoded, (0, 0)) == (1, 2, 3, 255)


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, format="JPEG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a readable PNG"),
        (b"definitely not an image", "not a readable PNG"),
        (encode_png(make_frame(8))[:60], "not a readable PNG"),
        (_jpeg(), "expected a PNG image, got JPEG"),
    ],
    ids=["empty", "garbage", "truncated", "jpeg"],
)
def test_decode_rejects_bad_bytes(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_rgba_png(data)


def test_decode_rejects_corrupt_png_data() -> None:
    data = bytearray(encode_png(make_frame(8)))
    data[60:70] = bytes(10)  # inside the IDAT chunk: the CRC no longer matches

    with pytest.raises(ValueError, match="not a readable PNG"):
        decode_rgba_png(bytes(data))
