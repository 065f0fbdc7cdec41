"""Exported APNGs read by two more readers than the validator's own: Pillow's decoder and pyAPNG's chunk parser."""

from __future__ import annotations

import io

import apng as apng_reader
import numpy as np
import pytest
from PIL import Image

from activities.export.platforms import line_emoji
from activities.export.platforms.fitting import fit, on_canvas
from testkit.emoji_frames import procedural_emoji


@pytest.fixture(scope="module")
def exported() -> tuple[bytes, list[np.ndarray]]:
    canvases = on_canvas(procedural_emoji("laugh", frames=10, size=128).frames, line_emoji.RULES.size.canvas())
    return fit(canvases, 2.2, line_emoji.RULES).data, canvases


def visible(rgba: np.ndarray) -> np.ndarray:
    """The pixels as seen: the colour under a fully transparent pixel does not count."""
    return np.where(rgba[..., 3:] == 0, 0, rgba)


def test_pillow_sees_the_frames_timing_loops_and_alpha(exported: tuple[bytes, list[np.ndarray]]) -> None:
    data, canvases = exported
    with Image.open(io.BytesIO(data)) as image:
        frames = getattr(image, "n_frames", 1)
        durations, first = [], np.asarray(image.convert("RGBA"))
        for index in range(frames):
            image.seek(index)
            durations.append(image.info["duration"])
        loop = image.info["loop"]

    assert (frames, loop) == (10, 2), "a 2 s loop, twice within LINE's 4 s"
    assert sum(durations) == pytest.approx(2000, abs=1)
    assert first[0, 0, 3] == 0, "a transparent background"
    assert np.array_equal(visible(first), visible(canvases[0])), "the first frame itself (the fit was lossless)"


def test_a_chunk_parser_sees_the_same_plays_and_delays(exported: tuple[bytes, list[np.ndarray]]) -> None:
    parsed = apng_reader.APNG.from_bytes(exported[0])

    assert parsed.num_plays == 2 and len(parsed.frames) == 10
    assert sum(control.delay / (control.delay_den or 100) for _, control in parsed.frames) == pytest.approx(2.0)
