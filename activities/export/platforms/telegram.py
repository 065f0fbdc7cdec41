"""Telegram video stickers and custom emoji: WebM, VP9 with alpha, no audio, at most 3 s, 30 fps and 256 KB.

Stickers have one side exactly 512 px (the other at most 512); custom emoji are exactly 100x100. Telegram takes no
ZIP: files are sent one by one to @Stickers (or the Bot API), so the package is a folder of ``stickers/<emoji>.webm``
and ``emoji/<emoji>.webm``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from activities.export.platforms.base import DoesNotFitError, EmojiFrames, Package, PackageFile, Target
from activities.export.platforms.fitting import on_canvas
from activities.export.platforms.packaging import require_set_size, validated
from activities.export.platforms.quality import ssim_over_backgrounds
from activities.export.platforms.rules import Rules, SizeRule
from activities.export.platforms.webm import fit_webm

NAME = "telegram"
GUIDELINE = "https://core.telegram.org/stickers"
STICKER_RULES = Rules(
    platform="Telegram video sticker",
    guideline=GUIDELINE,
    container="webm",
    size=SizeRule(512, 512, one_side_exactly=True),
    max_bytes=256 * 1024,
    max_total_s=3.0,
    max_fps=30.0,
    per_set=frozenset(range(1, 121)),
)
EMOJI_RULES = dataclasses.replace(
    STICKER_RULES,
    platform="Telegram video custom emoji",
    size=SizeRule(100, 100, exact=True),
    per_set=frozenset(range(1, 201)),
)
RULES = STICKER_RULES


def _videos(rules: Rules, emojis: Sequence[EmojiFrames], folder: str) -> list[PackageFile]:
    files = []
    for emoji in emojis:
        try:
            fitted = fit_webm(
                on_canvas(emoji.frames, rules.size.canvas()), emoji.loop_s, rules, quality=ssim_over_backgrounds
            )
        except DoesNotFitError as err:
            raise DoesNotFitError(f"{emoji.name}: {err}") from err
        files.append(PackageFile(f"{folder}/{emoji.name}.webm", fitted.data, emoji.name, fitted))
    return files


def package(emojis: Sequence[EmojiFrames]) -> Package:
    """``stickers/<emoji>.webm`` (512 px) and ``emoji/<emoji>.webm`` (100 px) per emoji; no archive."""
    require_set_size(STICKER_RULES, len(emojis))
    stickers = _videos(STICKER_RULES, emojis, "stickers")
    custom = _videos(EMOJI_RULES, emojis, "emoji")
    validated(EMOJI_RULES, custom, Package(NAME, custom))
    return validated(STICKER_RULES, stickers, Package(NAME, [*stickers, *custom]))


TARGET = Target(NAME, RULES, package)
