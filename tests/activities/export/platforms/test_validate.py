"""The validator: files read back by independent readers, each rule broken one at a time and named in the refusal.

The files are made here with the libraries directly (Pillow's APNG and GIF writers, FFmpeg's APNG and VP9 encoders
through PyAV), not with the project's encoders, so the validator is checked against files it did not help to make.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Literal

import av
import numpy as np
import pytest
from PIL import Image

from activities.export.platforms import discord, line_emoji, line_sticker, slack, telegram
from activities.export.platforms.rules import Container, Rules
from activities.export.platforms.validate import check_file, check_set, read_file

ORANGE = (240, 130, 20, 255)
WHITE = (255, 255, 255, 255)
LINE_TARGETS = [(line_emoji.RULES, (180, 180)), (line_sticker.RULES, (270, 180))]


def disc(size: tuple[int, int], count: int, *, shade: int = 0, opaque: bool = False) -> list[np.ndarray]:
    """An orange disc crossing the canvas, on transparency (or on white): every frame differs."""
    width, height = size
    y, x = np.mgrid[:height, :width]
    frames = []
    for index in range(count):
        pixels = np.zeros((height, width, 4), np.uint8)
        if opaque:
            pixels[...] = WHITE
        centre = width * (0.3 + 0.4 * index / count)
        pixels[np.hypot(x - centre, y - height / 2) < height / 5] = (ORANGE[0], ORANGE[1] + shade, ORANGE[2], 255)
        frames.append(pixels)
    return frames


def noise(size: tuple[int, int], count: int) -> list[np.ndarray]:
    """Random RGBA frames: they do not compress."""
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8) for _ in range(count)]


def pillow_apng(frames: Sequence[np.ndarray], delay_ms: int | list[int], plays: int, mode: str = "RGBA") -> bytes:
    """An APNG by Pillow's writer (default dispose and blend), ``plays`` loops (0 = forever)."""
    images = [Image.fromarray(frame, "RGBA").convert(mode) for frame in frames]
    out = io.BytesIO()
    images[0].save(
        out, format="PNG", save_all=True, append_images=images[1:], duration=delay_ms, loop=plays, compress_level=1
    )
    return out.getvalue()


def ffmpeg_apng(frames: Sequence[np.ndarray], fps: int, plays: int) -> bytes:
    """An APNG by FFmpeg's encoder, which (unlike Pillow's writer) keeps identical frames as they are."""
    out = io.BytesIO()
    with av.open(out, "w", format="apng", options={"plays": str(plays)}) as file:
        stream = file.add_stream("apng", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "rgba"
        for frame in frames:
            file.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgba")))
        file.mux(stream.encode())
    return out.getvalue()


GIF_PALETTE = bytes([0, 0, 0, *ORANGE[:3], *WHITE[:3]] + [0] * (3 * 253))
"""Index 0 transparent (black), 1 the orange disc, 2 white."""


def pillow_gif(
    indices: Sequence[np.ndarray], palette: bytes, delay_ms: int | list[int], loop: int | None, transparent: bool = True
) -> bytes:
    """A GIF of palette frames by Pillow's writer; index 0 is transparent when ``transparent``; no loop = plays once."""
    images = []
    for frame in indices:
        image = Image.fromarray(frame, "P")
        image.putpalette(palette)
        images.append(image)
    options: dict[str, int] = {} if loop is None else {"loop": loop}
    if transparent:
        options["transparency"] = 0
    out = io.BytesIO()
    images[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=delay_ms,
        disposal=2,
        optimize=False,
        **options,
    )
    return out.getvalue()


def disc_indices(size: tuple[int, int], count: int, *, opaque: bool = False) -> list[np.ndarray]:
    """:func:`disc` as indices of :data:`GIF_PALETTE`: 0 transparent (2 white when opaque), 1 the orange disc."""
    return [
        np.where(frame[..., 3] == 0, 0, np.where(frame[..., 1] == 255, 2, 1)).astype(np.uint8)
        for frame in disc(size, count, opaque=opaque)
    ]


def gif_noise(size: tuple[int, int], count: int) -> bytes:
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, (size[1], size[0]), dtype=np.uint8) for _ in range(count)]
    return pillow_gif(frames, rng.integers(0, 256, 768, dtype=np.uint8).tobytes(), 100, 0)


def vp9_webm(
    frames: Sequence[np.ndarray],
    fps: int,
    *,
    pix_fmt: str = "yuva420p",
    options: dict[str, object] | None = None,
    codec: Literal["libvpx-vp9", "libvpx"] = "libvpx-vp9",
    format: str = "webm",
    audio: bool = False,
) -> bytes:
    """A WebM by PyAV as in the research notes: VP9 with alpha unless told otherwise, optionally a silent Opus track."""
    out = io.BytesIO()
    with av.open(out, "w", format=format) as file:
        video = file.add_stream(codec, rate=fps)
        video.width, video.height, video.pix_fmt = frames[0].shape[1], frames[0].shape[0], pix_fmt
        video.options = {"crf": "30", "b": "0"} if options is None else options
        sound = file.add_stream("libopus", rate=48000) if audio else None
        for frame in frames:
            file.mux(video.encode(av.VideoFrame.from_ndarray(frame, format="rgba")))
        file.mux(video.encode())
        if sound is not None:
            silence = av.AudioFrame.from_ndarray(np.zeros((1, 960), np.int16), format="s16", layout="mono")
            silence.sample_rate = 48000
            file.mux(sound.encode(silence))
            file.mux(sound.encode())
    return out.getvalue()


def still_png(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.fromarray(disc(size, 1)[0], "RGBA").save(out, format="PNG")
    return out.getvalue()


def line_valid(size: tuple[int, int], count: int = 5, shade: int = 0) -> bytes:
    """A LINE file: ``count`` frames in one 1 s loop, played twice."""
    return pillow_apng(disc(size, count, shade=shade), 1000 // count, 2)


VALID: list[tuple[Rules, Callable[[], bytes]]] = [
    (line_emoji.RULES, lambda: line_valid((180, 180))),
    (line_emoji.RULES, lambda: pillow_apng(disc((180, 180), 20), 200, 1)),  # 20 frames over 4 s, once
    (line_emoji.RULES, lambda: pillow_apng(disc((180, 180), 5), 200, 1, mode="P")),  # palette + tRNS is RGB
    (line_sticker.RULES, lambda: line_valid((270, 180))),
    (line_sticker.RULES, lambda: pillow_apng(disc((320, 270), 8), 500, 1)),
    (discord.RULES, lambda: pillow_apng(disc((320, 320), 4), 100, 0)),
    (slack.RULES, lambda: pillow_gif(disc_indices((128, 128), 4), GIF_PALETTE, 100, 0)),
    (telegram.STICKER_RULES, lambda: vp9_webm(disc((512, 64), 6), 30)),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 6), 30)),
]


@pytest.mark.parametrize(("rules", "build"), VALID, ids=[f"{rules.platform}-{i}" for i, (rules, _) in enumerate(VALID)])
def test_a_file_that_fits_passes(rules: Rules, build: Callable[[], bytes]) -> None:
    assert check_file(rules, build()) == []


def line_breaks(rules: Rules, size: tuple[int, int]) -> list[tuple[Rules, Callable[[], bytes], str, str]]:
    """One file per LINE rule, each breaking only that rule."""
    return [
        (rules, lambda: pillow_apng(noise(size, 5), 200, 1), "max_bytes", "{bytes} bytes, the limit is 300,000"),
        (rules, lambda: pillow_apng(disc(size, 4), 250, 2), "frames", "4 frames, allowed 5 to 20"),
        (rules, lambda: pillow_apng(disc(size, 25), 40, 2), "frames", "25 frames, allowed 5 to 20"),
        (rules, lambda: pillow_apng(disc(size, 5), 300, 1), "loop_seconds", "one loop lasts 1.500 s, allowed 1 to 4"),
        (rules, lambda: pillow_apng(disc(size, 5), 400, 3), "total_seconds", "2.000 s x 3 plays = 6.000 s, the limit"),
        (rules, lambda: pillow_apng(disc(size, 5), 200, 0), "plays", "plays forever (num_plays 0), allowed 1 to 4"),
        (rules, lambda: pillow_apng(disc(size, 5, opaque=True), 200, 2), "alpha", "(lowest alpha 255)"),
        (rules, lambda: pillow_apng(disc(size, 5), 200, 2, mode="LA"), "colour", "colour type 4 (greyscale with"),
        (rules, lambda: ffmpeg_apng(disc(size, 1) * 5, 5, 1), "all_frames_identical", "all 5 frames are identical"),
        (rules, lambda: pillow_gif(disc_indices(size, 5), GIF_PALETTE, 200, 1), "container", "are a GIF file, not"),
        (rules, lambda: still_png(size), "container", "no acTL chunk"),
    ]


BROKEN: list[tuple[Rules, Callable[[], bytes], str, str]] = [
    *[case for rules, size in LINE_TARGETS for case in line_breaks(rules, size)],
    (line_emoji.RULES, lambda: line_valid((160, 160)), "size", "must be exactly 180x180, is 160x160"),
    (line_sticker.RULES, lambda: line_valid((260, 180)), "size", "longer side must be at least 270 px, is 260x180"),
    (line_sticker.RULES, lambda: line_valid((330, 270)), "size", "must fit within 320x270, is 330x270"),
    (discord.RULES, lambda: pillow_apng(disc((300, 300), 4), 100, 0), "size", "exactly 320x320, is 300x300"),
    (discord.RULES, lambda: pillow_apng(noise((320, 320), 4), 100, 0), "max_bytes", "{bytes} bytes, the limit is 524"),
    (discord.RULES, lambda: pillow_apng(disc((320, 320), 3), 2000, 0), "total_seconds", "forever, lasts 6.000 s"),
    (discord.RULES, lambda: pillow_apng(disc((320, 320), 4), 100, 2), "plays", "plays 2 times, it must loop forever"),
    (discord.RULES, lambda: pillow_apng(disc((320, 320), 4, opaque=True), 100, 0), "alpha", "(lowest alpha 255)"),
    (discord.RULES, lambda: pillow_apng(disc((320, 320), 4), 100, 0, mode="LA"), "colour", "PNG colour type 4"),
    (discord.RULES, lambda: vp9_webm(disc((320, 320), 4), 30), "container", "(Matroska or WebM) file, not a PNG"),
    (slack.RULES, lambda: pillow_gif(disc_indices((100, 100), 4), GIF_PALETTE, 100, 0), "size", "is 100x100"),
    (slack.RULES, lambda: gif_noise((128, 128), 8), "max_bytes", "{bytes} bytes, the limit is 128,000"),
    (slack.RULES, lambda: pillow_gif(disc_indices((128, 128), 51), GIF_PALETTE, 20, 0), "frames", "51 frames"),
    (slack.RULES, lambda: pillow_gif(disc_indices((128, 128), 4), GIF_PALETTE, 100, None), "plays", "plays 1 time,"),
    (slack.RULES, lambda: pillow_gif(disc_indices((128, 128), 4), GIF_PALETTE, 100, 1), "plays", "plays 2 times"),
    (
        slack.RULES,
        lambda: pillow_gif(disc_indices((128, 128), 4, opaque=True), GIF_PALETTE, 100, 0, transparent=False),
        "alpha",
        "(lowest alpha 255)",
    ),
    (slack.RULES, lambda: line_valid((128, 128)), "container", "not a readable gif file: the bytes are a PNG file"),
    (telegram.STICKER_RULES, lambda: vp9_webm(disc((256, 256), 6), 30), "size", "exactly 512 px, is 256x256"),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((96, 96), 6), 30), "size", "exactly 100x100, is 96x96"),
    (
        telegram.EMOJI_RULES,
        lambda: vp9_webm(noise((100, 100), 12), 30, options={"lossless": "1"}),
        "max_bytes",
        "{bytes} bytes, the limit is 262,144",
    ),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 4), 1), "total_seconds", "the video lasts 4.000 s"),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 6), 60), "fps", "60 frames per second, the limit is 30"),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 6), 30, pix_fmt="yuv420p"), "alpha", "lowest alpha 255"),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 6, opaque=True), 30), "alpha", "lowest alpha 255"),
    (telegram.EMOJI_RULES, lambda: vp9_webm(disc((100, 100), 6), 30, audio=True), "audio", "1 audio stream(s)"),
    (
        telegram.EMOJI_RULES,
        lambda: vp9_webm(disc((100, 100), 6), 30, codec="libvpx", pix_fmt="yuv420p", options={}),
        "container",
        "the video codec is vp8, not VP9",
    ),
    (
        telegram.EMOJI_RULES,
        lambda: vp9_webm(disc((100, 100), 6), 30, format="matroska"),
        "container",
        "the EBML doc type is 'matroska', not 'webm'",
    ),
    (telegram.STICKER_RULES, lambda: line_valid((512, 512)), "container", "the bytes are a PNG file, not an EBML"),
]


@pytest.mark.parametrize(
    ("rules", "build", "rule", "figure"),
    BROKEN,
    ids=[f"{rules.platform}-{rule}-{index}" for index, (rules, _, rule, _) in enumerate(BROKEN)],
)
def test_each_rule_broken_alone_is_refused_by_name(
    rules: Rules, build: Callable[[], bytes], rule: str, figure: str
) -> None:
    data = build()

    violations = check_file(rules, data)

    assert [violation.rule for violation in violations] == [rule], violations
    message = violations[0].message
    assert message.startswith(f"{rule}: ") and message.endswith(f"({rules.platform})"), message
    assert figure.format(bytes=f"{len(data):,}") in message, message


def line_set(count: int) -> list[tuple[str, bytes]]:
    return [(f"{position:03d}.png", line_valid((180, 180), shade=position)) for position in range(1, count + 1)]


EIGHT = line_set(8)
NAMES = [name for name, _ in EIGHT]
SAME_FRAMES_OTHER_BYTES = pillow_apng(disc((180, 180), 5, shade=1), 200, 2, mode="P")
BLANK_FIRST = pillow_apng([np.zeros((180, 180, 4), np.uint8), *disc((180, 180), 4)], 200, 2)
SET_BREAKS: list[tuple[Rules, list[tuple[str, bytes]], list[str] | None, int | None, str, str]] = [
    (line_emoji.RULES, EIGHT[:7], None, None, "set_count", "7 files, allowed 8 to 40"),
    (line_emoji.RULES, line_set(41), None, None, "set_count", "41 files, allowed 8 to 40"),
    (line_sticker.RULES, line_set(10), None, None, "set_count", "10 files, allowed 8, 16, 24"),
    (
        line_emoji.RULES,
        [*EIGHT[:7], ("008.png", SAME_FRAMES_OTHER_BYTES)],
        None,
        None,
        "duplicate_emoji",
        "008.png shows the same frames as 001.png",
    ),
    (line_emoji.RULES, [*EIGHT[:7], ("008.png", BLANK_FIRST)], None, None, "first_frame_blank", "008.png: the first"),
    (line_emoji.RULES, [("1.png", EIGHT[0][1]), *EIGHT[1:]], NAMES, None, "file_name", "file 1 is named '1.png'"),
    (line_emoji.RULES, [*EIGHT[:7], ("001.png", EIGHT[7][1])], None, None, "file_name", "'001.png' is the name of 2"),
    (line_emoji.RULES, EIGHT, NAMES[:7], None, "file_name", "8 files for 7 expected names"),
    (line_emoji.RULES, EIGHT, NAMES, 20_000_001, "package_bytes", "20,000,001 bytes, the limit is 20,000,000"),
]


def test_a_set_that_fits_passes() -> None:
    assert check_set(line_emoji.RULES, EIGHT, names=NAMES, package_bytes=20_000_000) == []
    assert check_set(telegram.EMOJI_RULES, [("a.webm", vp9_webm(disc((100, 100), 6), 30))], names=["a.webm"]) == []


@pytest.mark.parametrize(
    ("rules", "files", "names", "package_bytes", "rule", "figure"),
    SET_BREAKS,
    ids=[f"{rule}-{index}" for index, (*_, rule, _) in enumerate(SET_BREAKS)],
)
def test_each_set_rule_broken_alone_is_refused_by_name(
    rules: Rules,
    files: list[tuple[str, bytes]],
    names: list[str] | None,
    package_bytes: int | None,
    rule: str,
    figure: str,
) -> None:
    violations = check_set(rules, files, names=names, package_bytes=package_bytes)

    assert [violation.rule for violation in violations] == [rule], violations
    message = violations[0].message
    assert message.startswith(f"{rule}: ") and message.endswith(f"({rules.platform})") and figure in message, message


def test_an_unreadable_file_is_left_to_the_file_check() -> None:
    files = [*EIGHT[:7], ("008.png", b"not a png")]

    assert check_set(line_emoji.RULES, files, names=NAMES) == []
    assert [violation.rule for violation in check_file(line_emoji.RULES, files[-1][1])] == ["container"]


def test_apng_is_read_back_exactly() -> None:
    frames = disc((100, 60), 6)

    report = read_file(pillow_apng(frames, [100, 200, 300, 100, 200, 100], 3), "apng")

    assert (report.container, report.width, report.height, report.frames, report.plays) == ("apng", 100, 60, 6, 3)
    assert report.loop_s == pytest.approx(1.0, abs=1e-9) and report.fps == pytest.approx(6.0)
    assert report.has_alpha and report.colour_type == 6 and report.audio_streams == 0
    assert all(np.array_equal(read, made) for read, made in zip(report.rgba_frames, frames, strict=True))


def test_palette_apng_is_read_back_exactly() -> None:
    frames = disc((100, 60), 5)

    report = read_file(pillow_apng(frames, 250, 0, mode="P"), "apng")

    assert (report.frames, report.plays, report.loop_s, report.colour_type) == (5, 0, 1.25, 3)
    for read, made in zip(report.rgba_frames, frames, strict=True):
        assert np.array_equal(read[..., 3], made[..., 3])
        assert np.array_equal(read[made[..., 3] > 0], made[made[..., 3] > 0])  # the colour under alpha 0 is moot


@pytest.mark.parametrize(("loop", "plays"), [(0, 0), (None, 1), (3, 4)])
def test_gif_is_read_back_exactly(loop: int | None, plays: int) -> None:
    indices = disc_indices((100, 60), 3)
    made = [np.array([(0, 0, 0, 0), ORANGE, WHITE], np.uint8)[index] for index in indices]

    report = read_file(pillow_gif(indices, GIF_PALETTE, [100, 50, 150], loop), "gif")

    assert (report.container, report.width, report.height, report.frames) == ("gif", 100, 60, 3)
    assert (report.loop_s, report.plays, report.fps, report.has_alpha) == (0.3, plays, pytest.approx(10.0), True)
    for read, frame in zip(report.rgba_frames, made, strict=True):
        assert np.array_equal(read[..., 3], frame[..., 3])
        assert np.array_equal(read[frame[..., 3] > 0], frame[frame[..., 3] > 0])


def test_webm_is_read_back_with_its_alpha() -> None:
    frames = disc((100, 100), 6)

    report = read_file(vp9_webm(frames, 30), "webm")

    assert (report.container, report.width, report.height, report.frames, report.plays) == ("webm", 100, 100, 6, 0)
    assert report.loop_s == pytest.approx(0.2, abs=0.001) and report.fps == 30.0
    assert report.has_alpha and report.audio_streams == 0 and report.colour_type is None
    for read, made in zip(report.rgba_frames, frames, strict=True):
        assert read.shape == (100, 100, 4) and read.dtype == np.uint8
        inside, outside = made[..., 3] == 255, made[..., 3] == 0
        assert (read[inside, 3] >= 250).mean() > 0.95 and (read[outside, 3] <= 5).mean() > 0.95  # lossy: the rim blurs
        assert np.abs(read[inside, :3].astype(int) - ORANGE[:3]).mean() < 6
        assert (read[:, 96:, 3] == 0).all()  # the right edge past a multiple of 16 px is read right too


@pytest.mark.parametrize("container", ["apng", "gif", "webm"])
@pytest.mark.parametrize(
    "data",
    [b"", b"garbage bytes, not an image", b"\x89PNG\r\n\x1a\n" + b"\0" * 40, b"GIF89a" + b"\0" * 40, b"\x1aE\xdf\xa3"],
    ids=["empty", "text", "png-signature", "gif-signature", "ebml-magic"],
)
def test_garbage_is_not_readable(container: Container, data: bytes) -> None:
    with pytest.raises(ValueError, match=f"^not a readable {container} file: "):
        read_file(data, container)


def test_a_cut_off_apng_is_not_readable() -> None:
    data = line_valid((180, 180))

    with pytest.raises(ValueError, match="not a readable apng file"):
        read_file(data[: len(data) // 2], "apng")
