"""The validator: files read back by independent readers, each rule broken one at a time and named in the refusal."""

from __future__ import annotations

import dataclasses
import io

import apng as apng_reader
import av
import numpy as np
import pytest
from PIL import Image

from activities.export.platforms import discord, line_emoji, slack, telegram
from activities.export.platforms.fitting import encode_apng
from activities.export.platforms.rules import Rules
from activities.export.platforms.validate import Violation, check_file, check_set, read_file
from activities.export.platforms.webm import encode_webm


def moving_disc(size: int, frames: int, *, shade: int = 0) -> list[np.ndarray]:
    """A disc crossing a transparent canvas: every frame different, alpha 0 outside, 255 inside."""
    yy, xx = np.indices((size, size))
    out = []
    for i in range(frames):
        rgba = np.zeros((size, size, 4), np.uint8)
        cx = size * (0.3 + 0.4 * i / max(frames - 1, 1))
        rgba[np.hypot(yy - size / 2, xx - cx) < size / 5] = (240, 120 + shade, 40, 255)
        out.append(rgba)
    return out


def apng(frames: list[np.ndarray], loop_s: float = 1.0, plays: int = 4) -> bytes:
    return encode_apng(frames, loop_s, plays)


def gif(frames: list[np.ndarray], duration_ms: int = 80, loop: int | None = 0) -> bytes:
    images = [Image.fromarray(frame, "RGBA").convert("P", palette=Image.Palette.ADAPTIVE) for frame in frames]
    out = io.BytesIO()
    extra = {} if loop is None else {"loop": loop}
    images[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=duration_ms,
        transparency=0,
        disposal=2,
        **extra,
    )
    return out.getvalue()


def unmerged_apng(frames: list[np.ndarray]) -> bytes:
    """An APNG by FFmpeg's encoder, which (unlike apngasm and Pillow) stores identical frames as they are."""
    out = io.BytesIO()
    with av.open(out, "w", format="apng") as file:
        stream = file.add_stream("apng", rate=len(frames))
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "rgba"
        for frame in frames:
            file.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgba")))
        file.mux(stream.encode())
    return out.getvalue()


def grey_apng(frames: list[np.ndarray]) -> bytes:
    """The frames as a greyscale-with-alpha APNG (Pillow's writer keeps mode LA): not RGB."""
    images = [Image.fromarray(frame, "RGBA").convert("LA") for frame in frames]
    out = io.BytesIO()
    images[0].save(out, format="PNG", save_all=True, append_images=images[1:], duration=1000 / len(images), loop=4)
    return out.getvalue()


def webm_with_audio(frames: list[np.ndarray]) -> bytes:
    """A VP9 WebM with alpha that also carries a silent Opus track."""
    out = io.BytesIO()
    with av.open(out, "w", format="webm") as file:
        video = file.add_stream("libvpx-vp9", rate=12)
        video.width, video.height, video.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuva420p"
        audio = file.add_stream("libopus", rate=48000)
        for frame in frames:
            file.mux(video.encode(av.VideoFrame.from_ndarray(frame, format="rgba")))
        file.mux(video.encode())
        silence = av.AudioFrame.from_ndarray(np.zeros((1, 960), np.int16), format="s16", layout="mono")
        silence.sample_rate = 48000
        file.mux(audio.encode(silence))
        file.mux(audio.encode())
    return out.getvalue()


LINE = line_emoji.RULES
VALID_LINE = apng(moving_disc(180, 6))


def rules_of(violations: list[Violation]) -> list[str]:
    return [violation.rule for violation in violations]


def test_valid_files_of_every_target_pass() -> None:
    assert check_file(LINE, VALID_LINE) == []
    assert check_file(discord.RULES, encode_apng(moving_disc(320, 6), 1.0, 0)) == []
    assert check_file(slack.RULES, gif(moving_disc(128, 6))) == []
    assert check_file(telegram.STICKER_RULES, encode_webm(moving_disc(512, 12), 12, crf=40)) == []
    assert check_file(telegram.EMOJI_RULES, encode_webm(moving_disc(100, 12), 12, crf=40)) == []


@pytest.mark.parametrize(
    ("rule", "rules", "data", "figure"),
    [
        ("size", LINE, apng(moving_disc(160, 6)), "exactly 180x180, is 160x160"),
        ("max_bytes", dataclasses.replace(LINE, max_bytes=1000), VALID_LINE, "the limit is 1,000"),
        ("frames", LINE, apng(moving_disc(180, 4)), "4 frames, allowed 5 to 20"),
        ("frames", LINE, apng(moving_disc(180, 21)), "21 frames, allowed 5 to 20"),
        ("loop_seconds", LINE, apng(moving_disc(180, 6), loop_s=1.5, plays=2), "one loop lasts 1.500 s"),
        ("total_seconds", LINE, apng(moving_disc(180, 6), loop_s=2.0, plays=3), "plays 6.000 s in all"),
        ("plays", LINE, apng(moving_disc(180, 6), plays=0), "plays forever times, allowed 1 to 4"),
        ("plays", discord.RULES, encode_apng(moving_disc(320, 6), 1.0, 2), "allowed forever (0)"),
        (
            "alpha",
            LINE,
            apng([np.dstack([f[..., :3], np.full((180, 180), 255, np.uint8)]) for f in moving_disc(180, 6)]),
            "no transparent pixel",
        ),
        ("all_frames_identical", LINE, unmerged_apng(moving_disc(180, 1) * 6), "all 6 frames are identical"),
        ("container", LINE, b"not a png at all", "LINE animated emoji takes apng"),
        ("colour", LINE, grey_apng(moving_disc(180, 6)), "a greyscale PNG"),
        ("audio", telegram.EMOJI_RULES, webm_with_audio(moving_disc(100, 12)), "1 audio stream(s)"),
        (
            "fps",
            dataclasses.replace(telegram.EMOJI_RULES, max_fps=10.0),
            encode_webm(moving_disc(100, 12), 12, crf=40),
            "12.00 frames per second",
        ),
        ("size", telegram.STICKER_RULES, encode_webm(moving_disc(100, 12), 12, crf=40), "one side must be exactly 512"),
        ("total_seconds", telegram.EMOJI_RULES, encode_webm(moving_disc(100, 48), 12, crf=40), "plays 4.000 s in all"),
        ("plays", slack.RULES, gif(moving_disc(128, 6), loop=None), "allowed forever"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 24 else "",
)
def test_each_rule_broken_alone_is_refused_by_name(rule: str, rules: Rules, data: bytes, figure: str) -> None:
    violations = check_file(rules, data)

    assert rules_of(violations) == [rule], violations
    assert violations[0].message.startswith(f"{rule}: ") and figure in violations[0].message


def test_the_set_rules() -> None:
    first, second = apng(moving_disc(180, 6)), apng(moving_disc(180, 6, shade=40))
    blank = apng([np.zeros((180, 180, 4), np.uint8), *moving_disc(180, 5)])
    good = [(f"{i:03d}.png", first if i % 2 else second) for i in range(1, 9)]
    names = [name for name, _ in good]
    distinct = [(name, apng(moving_disc(180, 6, shade=i * 10))) for i, name in enumerate(names)]

    assert check_set(LINE, distinct, names=names, package_bytes=1_000_000) == []
    assert rules_of(check_set(LINE, distinct[:7])) == ["set_count"]
    assert "duplicate_emoji" in rules_of(check_set(LINE, good))
    assert rules_of(check_set(LINE, [*distinct[:7], ("008.png", blank)])) == ["first_frame_blank"]
    assert rules_of(check_set(LINE, distinct, names=["1.png", *names[1:]])) == ["file_name"]
    assert rules_of(check_set(LINE, distinct, package_bytes=21_000_000)) == ["package_bytes"]


def test_read_back_by_independent_readers() -> None:
    frames = moving_disc(180, 6)
    line = read_file(apng(frames, loop_s=2.0, plays=2), "apng")
    video = read_file(encode_webm(moving_disc(100, 12), 12, crf=30), "webm")
    animated = read_file(gif(moving_disc(128, 5), duration_ms=100), "gif")

    assert (line.frames, line.plays, line.width, line.height) == (6, 2, 180, 180)
    assert line.loop_s == pytest.approx(2.0, abs=0.001) and line.has_alpha
    assert all(np.array_equal(read, made) for read, made in zip(line.rgba_frames, frames, strict=True))
    assert (video.frames, video.fps, video.audio_streams, video.colour) == (12, 12.0, 0, "yuva420p")
    assert video.loop_s == pytest.approx(1.0) and video.rgba_frames[0][0, 0, 3] == 0 and video.has_alpha
    assert (animated.frames, animated.plays, animated.loop_s) == (5, 0, pytest.approx(0.5))


def test_apng_timing_and_loops_agree_in_pillow_and_in_a_chunk_parser() -> None:
    """Two more readers than the validator's own: Pillow's decoder and pyAPNG's chunk parser."""
    data = apng(moving_disc(180, 6), loop_s=2.0, plays=2)
    with Image.open(io.BytesIO(data)) as image:
        durations = []
        frames = getattr(image, "n_frames", 1)
        for index in range(frames):
            image.seek(index)
            durations.append(image.info["duration"])
        assert (frames, image.info["loop"]) == (6, 2)
    parsed = apng_reader.APNG.from_bytes(data)

    assert sum(durations) == pytest.approx(2000, abs=1)
    assert parsed.num_plays == 2 and len(parsed.frames) == 6
    assert sum(control.delay / (control.delay_den or 100) for _, control in parsed.frames) == pytest.approx(2.0)


def test_garbage_is_not_readable() -> None:
    with pytest.raises(ValueError, match="not a readable webm file"):
        read_file(b"\x1aE\xdf\xa3 nothing", "webm")
