"""Slack custom emoji: GIF 128x128, at most 128 KB and 50 frames, looping.

Package: one ``<emoji>.gif`` per emoji (uploaded one by one, or with the admin API).
"""

from __future__ import annotations

from collections.abc import Sequence

from activities.export.platforms.base import EmojiFrames, Package, Target
from activities.export.platforms.packaging import fitted_files, validated
from activities.export.platforms.rules import Rules, SizeRule

NAME = "slack"
RULES = Rules(
    platform="Slack custom emoji",
    guideline="https://slack.com/help/articles/206870177-Add-custom-emoji-and-aliases-to-your-workspace",
    container="gif",
    size=SizeRule(128, 128, exact=True),
    max_bytes=128 * 1000,
    frames=(1, 50),
)


def package(emojis: Sequence[EmojiFrames]) -> Package:
    """One ``<emoji>.gif`` per emoji; no archive (the platform takes them one by one)."""
    files = fitted_files(RULES, emojis, lambda _, emoji: f"{emoji.name}.gif")
    return validated(RULES, files, Package(NAME, files))


TARGET = Target(NAME, RULES, package)
