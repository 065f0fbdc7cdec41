"""The APNG / GIF ladder: least loss first, stopping at the first file that fits, timing kept or made legal."""

from __future__ import annotations

import dataclasses
import io
import struct

import av
import numpy as np
import pytest
from PIL import Image

from activities.export.platforms import discord, line_emoji, slack
from activities.export.platforms.base import DoesNotFitError
from activities.export.platforms.fitting import (
    encode_apng,
    evenly_spaced,
    fit,
    on_canvas,
    reduced_counts,
    shared_palette,
)
from testkit.emoji_frames import procedural_emoji


@pytest.fixture(scope="module")
def wave() -> list[np.ndarray]:
    return on_canvas(procedural_emoji("wave", size=128).frames, line_emoji.RULES.size.canvas())


def plays_of(apng: bytes) -> int:
    """``num_plays`` of the acTL chunk, read from the bytes."""
    at = apng.index(b"acTL")
    return int(struct.unpack(">II", apng[at + 4 : at + 12])[1])


def test_the_first_rung_that_fits_wins(wave: list[np.ndarray]) -> None:
    roomy = fit(wave, 1.0, line_emoji.RULES)
    lossless_bytes = len(roomy.data)
    tight = fit(wave, 1.0, dataclasses.replace(line_emoji.RULES, max_bytes=lossless_bytes - 1))

    assert roomy.rung == "lossless" and roomy.colours is None
    assert roomy.ssim_white == pytest.approx(1.0) and roomy.ssim_dark == pytest.approx(1.0)
    assert tight.rung == "palette-256" and len(tight.data) <= lossless_bytes - 1
    assert 0.98 < tight.ssim_white < 1.0


def test_fewer_frames_come_after_fewer_colours_and_keep_the_loop_length(wave: list[np.ndarray]) -> None:
    limit = len(encode_apng(shared_palette(wave, 32), 1.0, 4)) - 1  # below the last full-frames rung
    fitted = fit(wave, 1.0, dataclasses.replace(line_emoji.RULES, max_bytes=limit))

    assert "-frames-" in fitted.rung and fitted.frames < 12
    assert fitted.loop_s == 1.0 and len(fitted.data) <= limit
    with av.open(io.BytesIO(fitted.data), mode="r", format="apng") as file:
        delays = [float((frame.duration or 0) * (frame.time_base or 0)) for frame in file.decode(video=0)]
    assert len(delays) == fitted.frames and sum(delays) == pytest.approx(1.0, abs=0.002)


def test_nothing_fits_names_the_rule_and_the_smallest_file(wave: list[np.ndarray]) -> None:
    with pytest.raises(DoesNotFitError, match=r"max_bytes: .*300 bytes; the smallest file reached was [\d,]+ bytes"):
        fit(wave, 1.0, dataclasses.replace(line_emoji.RULES, max_bytes=300))


def test_line_timing_is_whole_seconds_within_four(wave: list[np.ndarray]) -> None:
    one_second = fit(wave, 0.996, line_emoji.RULES)
    three_seconds = fit(wave, 2.6, line_emoji.RULES)

    assert (one_second.loop_s, one_second.plays, plays_of(one_second.data)) == (1.0, 4, 4)
    assert (three_seconds.loop_s, three_seconds.plays, plays_of(three_seconds.data)) == (3.0, 1, 1)


def test_too_many_frames_are_thinned_evenly_and_too_few_are_refused() -> None:
    many = on_canvas(procedural_emoji("laugh", frames=30, size=96).frames, line_emoji.RULES.size.canvas())
    fitted = fit(many, 2.0, line_emoji.RULES)
    assert fitted.frames == 20 and fitted.loop_s == 2.0

    with pytest.raises(DoesNotFitError, match="frames: LINE animated emoji needs at least 5 frames, the emoji has 3"):
        fit(many[:3], 1.0, line_emoji.RULES)


def test_discord_and_slack_loop_forever() -> None:
    frames = procedural_emoji("heart", size=96).frames
    sticker = fit(on_canvas(frames, discord.RULES.size.canvas()), 0.996, discord.RULES)
    emoji = fit(on_canvas(frames, slack.RULES.size.canvas()), 0.996, slack.RULES)

    assert plays_of(sticker.data) == 0 and (sticker.width, sticker.height) == (320, 320)
    with Image.open(io.BytesIO(emoji.data)) as gif:
        assert (gif.format, gif.info.get("loop"), gif.size) == ("GIF", 0, (128, 128))
    assert emoji.rung.startswith("palette-")


def test_even_spacing_and_reduction_steps() -> None:
    assert evenly_spaced(12, 6) == [0, 2, 4, 6, 8, 10]
    assert evenly_spaced(12, 5) == [0, 2, 5, 7, 10]
    assert reduced_counts(12, 5) == [9, 7, 5]
    assert reduced_counts(5, 5) == []


def test_a_shared_palette_keeps_alpha_and_uses_at_most_its_colours(wave: list[np.ndarray]) -> None:
    remapped = shared_palette(wave, 32)
    colours = {tuple(pixel) for frame in remapped for pixel in frame.reshape(-1, 4)}

    assert len(colours) <= 32
    assert {0, 255} <= {alpha for *_, alpha in colours}
