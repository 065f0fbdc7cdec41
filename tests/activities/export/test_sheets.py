"""Sprite sheets and contact sheets: decode the PNGs and check their layout and pixels."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from activities.export.sheets import CHECKER_DARK, CHECKER_LIGHT, TEXT_COLOUR, contact_sheet, sprite_sheet

RED = (230, 20, 20)


def make_frames(count: int, size: tuple[int, int] = (64, 48)) -> list[Image.Image]:
    """Distinct transparent frames, each with an opaque square whose colour encodes its index."""
    frames = []
    for index in range(count):
        frame = Image.new("RGBA", size, (0, 0, 0, 0))
        frame.paste((10 * index, 100, 200, 255), (8, 8, 24, 24))
        frames.append(frame)
    return frames


def solid(alpha: int, size: tuple[int, int] = (64, 64)) -> Image.Image:
    return Image.new("RGBA", size, (*RED, alpha))


def open_png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.load()
    return image


def count(image: Image.Image, colour: tuple[int, int, int]) -> int:
    return int((np.asarray(image.convert("RGB")) == colour).all(axis=-1).sum())


# --- Sprite sheets -----------------------------------------------------------------------------------------------


def test_sprite_sheet_defaults_to_a_near_square_grid() -> None:
    frames = make_frames(12)
    data, layout = sprite_sheet(frames)
    sheet = open_png(data)

    assert sheet.mode == "RGBA"
    assert sheet.size == (4 * 64, 3 * 48)
    assert (layout["columns"], layout["rows"]) == (4, 3)
    assert (layout["width"], layout["height"], layout["frame_width"], layout["frame_height"]) == (256, 144, 64, 48)
    assert layout["frames"][5] == {"x": 64, "y": 48, "w": 64, "h": 48}
    for frame, rect in zip(frames, layout["frames"], strict=True):
        cut = sheet.crop((rect["x"], rect["y"], rect["x"] + rect["w"], rect["y"] + rect["h"]))
        np.testing.assert_array_equal(np.asarray(cut), np.asarray(frame))


def test_sprite_sheet_single_row_and_partial_last_row() -> None:
    _, row = sprite_sheet(make_frames(5), columns=5)
    data, grid = sprite_sheet(make_frames(5))

    assert (row["columns"], row["rows"], row["width"], row["height"]) == (5, 1, 320, 48)
    assert (grid["columns"], grid["rows"]) == (3, 2)
    empty_cell = open_png(data).crop((128, 48, 192, 96))
    assert np.asarray(empty_cell.getchannel("A")).max() == 0


def test_sprite_sheet_uses_at_most_one_column_per_frame() -> None:
    _, layout = sprite_sheet(make_frames(3), columns=10)

    assert (layout["columns"], layout["width"]) == (3, 192)


def test_sprite_sheet_layout_is_json() -> None:
    _, layout = sprite_sheet(make_frames(4))

    assert json.loads(json.dumps(layout)) == layout


@pytest.mark.parametrize(
    ("frames", "columns", "message"),
    [([], None, "at least one frame"), (make_frames(2), 0, "columns must be a positive")],
)
def test_sprite_sheet_rejects_bad_input(frames: list[Image.Image], columns: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sprite_sheet(frames, columns)


# --- Contact sheets ----------------------------------------------------------------------------------------------


def test_contact_sheet_is_an_opaque_page_with_one_row_per_emoji() -> None:
    rows = [("wave", make_frames(12)), ("laugh", make_frames(2))]
    page = open_png(contact_sheet("Orange cat", rows, cell=96))
    short = open_png(contact_sheet("Orange cat", [("wave", make_frames(2)), ("laugh", make_frames(2))], cell=96))

    assert page.mode == "RGB"
    assert page.width >= 12 * 96 and page.height >= 2 * 96
    assert page.height == short.height
    assert page.width - short.width >= 10 * 96


def untitled(frame: Image.Image) -> Image.Image:
    """A one-frame page with no text, whose anti-aliased greys could match the checker colours."""
    return open_png(contact_sheet("", [("", [frame])], cell=96))


def test_checkerboard_shows_through_transparent_parts_only() -> None:
    transparent = untitled(solid(0))
    opaque = untitled(solid(255))

    assert count(transparent, CHECKER_LIGHT) == count(transparent, CHECKER_DARK) == 96 * 96 // 2
    assert count(opaque, RED) == 96 * 96
    assert count(opaque, CHECKER_LIGHT) == count(opaque, CHECKER_DARK) == 0


def test_half_transparent_frame_is_blended_over_both_checker_colours() -> None:
    page = np.asarray(untitled(solid(128)))
    colours = {tuple(int(c) for c in rgb) for rgb in page.reshape(-1, 3)}

    for checker in (CHECKER_LIGHT, CHECKER_DARK):
        blended = tuple(round((r * 128 + c * 127) / 255) for r, c in zip(RED, checker, strict=True))
        assert any(all(abs(a - b) <= 1 for a, b in zip(colour, blended, strict=True)) for colour in colours)


def test_frames_are_scaled_to_fit_the_cell() -> None:
    up = untitled(solid(255, (64, 64)))
    wide = untitled(solid(255, (200, 100)))

    assert count(up, RED) == 96 * 96
    assert count(wide, RED) == 96 * 48
    assert count(wide, CHECKER_LIGHT) + count(wide, CHECKER_DARK) == 96 * 48


def test_title_is_drawn_even_with_characters_the_font_lacks() -> None:
    page = open_png(contact_sheet("Café — 😀 set", [("wave", make_frames(1))], cell=32))

    top = np.asarray(page)[:20]
    assert (top == TEXT_COLOUR).all(axis=-1).any()


@pytest.mark.parametrize(
    ("rows", "cell", "message"),
    [
        ([], 96, "at least one row"),
        ([("wave", [])], 96, "row 'wave': an animation needs at least one frame"),
        ([("wave", make_frames(1))], 4, "cell must be at least 8"),
    ],
)
def test_contact_sheet_rejects_bad_input(rows: list[tuple[str, list[Image.Image]]], cell: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        contact_sheet("t", rows, cell=cell)
