"""Sprite sheets (one emoji's frames in a grid) and contact sheets (a whole set on one page for review)."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from typing import TypedDict

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from activities.export.animation import encode_png, fit_size, resize_premultiplied, validate_frames

PAGE_COLOUR = (255, 255, 255)
TEXT_COLOUR = (33, 33, 33)
CHECKER_LIGHT = (224, 224, 224)
CHECKER_DARK = (64, 64, 64)
"""The two checkerboard colours behind contact sheet frames: a halo shows up against one or the other."""

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


class FrameRect(TypedDict):
    """Where one frame sits in a sprite sheet, in pixels."""

    x: int
    y: int
    w: int
    h: int


class SpriteSheetLayout(TypedDict):
    """A JSON-able description of a sprite sheet: its grid and every frame's rectangle, in frame order."""

    width: int
    height: int
    frame_width: int
    frame_height: int
    columns: int
    rows: int
    frames: list[FrameRect]


def sprite_sheet(frames: Sequence[Image.Image], columns: int | None = None) -> tuple[bytes, SpriteSheetLayout]:
    """Lay one emoji's frames out in a grid, row by row, as an RGBA PNG.

    The default grid is near-square (``ceil(sqrt(n))`` columns), which keeps both sides within GPU texture limits
    even for 48 large frames; pass ``columns=len(frames)`` for a single row. There is no padding between frames, so
    frame ``i`` is at ``(i % columns * w, i // columns * h)``: what CSS ``steps()`` animation, Godot's
    ``hframes``/``vframes`` and grid slicers expect. Frames keep their transparent border, so filtering does not
    bleed neighbours in.

    Args:
        frames: Straight RGBA frames, all the same size.
        columns: Frames per row; at most ``len(frames)`` are used.

    Returns:
        The PNG file and its layout.

    Raises:
        ValueError: Invalid frames, or ``columns`` not positive.
    """
    width, height = validate_frames(frames)
    if columns is not None and columns <= 0:
        raise ValueError(f"columns must be a positive number, got {columns}")
    count = len(frames)
    cols = min(columns or math.ceil(math.sqrt(count)), count)
    rows = math.ceil(count / cols)
    sheet = Image.new("RGBA", (cols * width, rows * height), (0, 0, 0, 0))
    rects: list[FrameRect] = []
    for index, frame in enumerate(frames):
        x, y = index % cols * width, index // cols * height
        sheet.paste(frame, (x, y))
        rects.append({"x": x, "y": y, "w": width, "h": height})
    layout: SpriteSheetLayout = {
        "width": sheet.width,
        "height": sheet.height,
        "frame_width": width,
        "frame_height": height,
        "columns": cols,
        "rows": rows,
        "frames": rects,
    }
    return encode_png(sheet), layout


def contact_sheet(title: str, rows: Sequence[tuple[str, Sequence[Image.Image]]], cell: int = 96) -> bytes:
    """Draw a whole set on one opaque RGB PNG page for review.

    A title line, then one row per emoji: its label, then its frames scaled to fit ``cell`` x ``cell`` (in
    premultiplied space) over a light/dark checkerboard, so transparent areas and halos on either kind of background
    are visible. Text is drawn with Pillow's built-in font, which has ASCII glyphs only.

    Args:
        title: The page title.
        rows: ``(label, frames)`` per emoji, e.g. the pose name and its straight RGBA frames.
        cell: Edge of the square each frame is drawn in, in pixels.

    Returns:
        The PNG file.

    Raises:
        ValueError: No rows, a row with invalid frames, or ``cell`` too small.
    """
    if not rows:
        raise ValueError("a contact sheet needs at least one row, got none")
    if cell < 8:
        raise ValueError(f"cell must be at least 8 pixels, got {cell}")
    for label, frames in rows:
        try:
            validate_frames(frames)
        except ValueError as error:
            raise ValueError(f"row {label!r}: {error}") from error
    title = _ascii(title)
    rows = [(_ascii(label), frames) for label, frames in rows]

    pad, gap = max(8, cell // 6), max(2, cell // 24)
    title_font, label_font = _font(max(14, cell // 4)), _font(max(12, cell // 6))
    title_w, title_h = _text_size(title, title_font)
    label_w = max(_text_size(label, label_font)[0] for label, _ in rows) + pad
    frames_w = max(len(frames) for _, frames in rows) * (cell + gap) - gap
    width = 2 * pad + max(title_w, label_w + frames_w)
    top = 2 * pad + title_h
    height = top + len(rows) * (cell + gap) - gap + pad

    page = Image.new("RGB", (width, height), PAGE_COLOUR)
    draw = ImageDraw.Draw(page)
    _draw_text(draw, (pad, pad), title, title_font)
    checker = checkerboard(cell)
    for row, (label, frames) in enumerate(rows):
        y = top + row * (cell + gap)
        _draw_text(draw, (pad, y + (cell - _text_size(label, label_font)[1]) // 2), label, label_font)
        for column, frame in enumerate(frames):
            page.paste(_frame_cell(frame, checker), (pad + label_w + column * (cell + gap), y))
    return encode_png(page)


def checkerboard(cell: int) -> Image.Image:
    """A ``cell`` x ``cell`` RGB checkerboard of :data:`CHECKER_LIGHT` and :data:`CHECKER_DARK`, 8 squares a side."""
    square = max(1, cell // 8)
    ys, xs = np.indices((cell, cell))
    dark = (ys // square + xs // square) % 2 == 1
    pixels = np.where(dark[..., None], np.array(CHECKER_DARK, np.uint8), np.array(CHECKER_LIGHT, np.uint8))
    return Image.fromarray(pixels)


def _frame_cell(frame: Image.Image, checker: Image.Image) -> Image.Image:
    """The frame scaled to fit the checkerboard, centred, composited over it."""
    cell = checker.width
    size = fit_size(frame.size, cell)
    scaled = frame if frame.size == size else resize_premultiplied(frame, size)
    backdrop = checker.convert("RGBA")
    backdrop.alpha_composite(scaled, ((cell - size[0]) // 2, (cell - size[1]) // 2))
    return backdrop.convert("RGB")


def _ascii(text: str) -> str:
    """Pillow's built-in font only has ASCII glyphs: drop accents (e.g. e-acute to e), other characters become '?'."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch if ch.isascii() else "?" for ch in decomposed if not unicodedata.combining(ch))


def _font(size: int) -> Font:
    return ImageFont.load_default(size=size)


def _text_size(text: str, font: Font) -> tuple[int, int]:
    left, top, right, bottom = font.getbbox(text)
    return math.ceil(right - left), math.ceil(bottom - top)


def _draw_text(draw: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, font: Font) -> None:
    """Draw ``text`` with its ink box's top-left corner at ``xy`` (font bearings differ between fonts)."""
    left, top, _, _ = font.getbbox(text)
    draw.text((xy[0] - left, xy[1] - top), text, font=font, fill=TEXT_COLOUR)
