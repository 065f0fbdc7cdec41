"""What a platform accepts: one rule table per target, and the checks every exported file is held to.

The figures come from each platform's published guideline (``docs/platforms.md`` cites them). A rule table knows
nothing about encoding: :mod:`.fitting` makes files that fit it, :mod:`.validate` re-reads a file and checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Container = Literal["apng", "gif", "webm"]


@dataclass(frozen=True)
class SizeRule:
    """Allowed canvas sizes, in pixels.

    Attributes:
        max_width: Widest allowed canvas.
        max_height: Tallest allowed canvas.
        exact: Both sides must equal the maxima (LINE emoji, Discord, Slack, Telegram emoji).
        min_long_side: The longer side must be at least this (LINE stickers: 270).
        one_side_exactly: One side must be exactly the maximum (Telegram stickers: 512).
    """

    max_width: int
    max_height: int
    exact: bool = False
    min_long_side: int | None = None
    one_side_exactly: bool = False

    def canvas(self, aspect: float = 1.0) -> tuple[int, int]:
        """The largest allowed canvas of ``aspect`` (width / height): where an emoji is drawn for this target."""
        if self.exact:
            return self.max_width, self.max_height
        width, height = self.max_width, round(self.max_width / aspect)
        if height > self.max_height:
            width, height = round(self.max_height * aspect), self.max_height
        return width, height

    def violation(self, width: int, height: int) -> str | None:
        """Why ``width`` x ``height`` is not allowed, or None."""
        if self.exact and (width, height) != (self.max_width, self.max_height):
            return f"must be exactly {self.max_width}x{self.max_height}, is {width}x{height}"
        if width > self.max_width or height > self.max_height:
            return f"must fit within {self.max_width}x{self.max_height}, is {width}x{height}"
        if self.min_long_side is not None and max(width, height) < self.min_long_side:
            return f"its longer side must be at least {self.min_long_side} px, is {width}x{height}"
        if self.one_side_exactly and self.max_width not in (width, height):
            return f"one side must be exactly {self.max_width} px, is {width}x{height}"
        return None


@dataclass(frozen=True)
class Rules:
    """One target's rule table.

    Attributes:
        platform: What the files are, e.g. ``LINE animated emoji``.
        guideline: Where the figures come from (the platform's published guideline).
        container: The file format.
        size: Allowed canvas sizes.
        max_bytes: Largest file.
        frames: Fewest and most frames of one file, or None for any.
        loop_seconds: Allowed lengths of one loop in seconds (LINE: whole seconds 1 to 4), or None for any.
        max_total_s: Longest playback: one loop times the plays (LINE), or the whole video (Telegram).
        plays: Fewest and most plays of an APNG's loop (``num_plays``; 0 = forever), or None for forever only.
        max_fps: Highest frame rate, or None.
        per_set: Allowed counts of files in one set, or None for any.
        max_package_bytes: Largest upload package (ZIP), or None.
    """

    platform: str
    guideline: str
    container: Container
    size: SizeRule
    max_bytes: int
    frames: tuple[int, int] | None = None
    loop_seconds: frozenset[int] | None = None
    max_total_s: float | None = None
    plays: tuple[int, int] | None = None
    max_fps: float | None = None
    per_set: frozenset[int] | None = None
    max_package_bytes: int | None = None

    def frame_count_for(self, frames: int) -> int:
        """How many frames an animation of ``frames`` frames gets here (at most the maximum, at least the minimum)."""
        if self.frames is None:
            return frames
        low, high = self.frames
        return max(low, min(frames, high))

    def timing_for(self, loop_s: float) -> tuple[float, int]:
        """(loop length in seconds, plays) for an animation whose loop lasts ``loop_s``.

        The loop keeps its length where the platform allows it; LINE's whole seconds round to the nearest allowed one,
        and the loop plays as often as the total playback allows (0 = forever where that is allowed).
        """
        if self.loop_seconds is not None:
            loop_s = float(min(self.loop_seconds, key=lambda allowed: (abs(allowed - loop_s), allowed)))
        if self.max_total_s is not None and loop_s > self.max_total_s:
            loop_s = self.max_total_s
        if self.plays is None:
            return loop_s, 0
        low, high = self.plays
        if low == 0:
            return loop_s, 0
        fits = int(self.max_total_s // loop_s) if self.max_total_s else high
        return loop_s, max(low, min(high, fits))
