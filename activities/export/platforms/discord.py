"""Discord stickers: APNG 320x320, at most 512 KiB, animations within 5 s, looping.

Package: one ``<emoji>.png`` per sticker (uploaded one by one in the server settings).
"""

from __future__ import annotations

from collections.abc import Sequence

from activities.export.platforms.base import EmojiFrames, Package, Target
from activities.export.platforms.packaging import fitted_files, validated
from activities.export.platforms.rules import Rules, SizeRule

NAME = "discord"
RULES = Rules(
    platform="Discord sticker",
    guideline="https://discord.com/developers/docs/resources/sticker",
    container="apng",
    size=SizeRule(320, 320, exact=True),
    max_bytes=512 * 1024,
    max_total_s=5.0,
)


def package(emojis: Sequence[EmojiFrames]) -> Package:
    """One ``<emoji>.png`` per emoji; no archive (the platform takes them one by one)."""
    files = fitted_files(RULES, emojis, lambda _, emoji: f"{emoji.name}.png")
    return validated(RULES, files, Package(NAME, files))


TARGET = Target(NAME, RULES, package)
