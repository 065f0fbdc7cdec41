"""LINE animated emoji: APNG 180x180, 5-20 frames, whole-second loops within 4 s, 300 KB, 8-40 per set.

Package: ``001.png`` ... in set order, and the 96x74 chat tab image ``tab.png``, in one ZIP of at most 20 MB. LINE
takes no main image file for emoji: four of the uploaded emoji are chosen as the main images after upload.
"""

from __future__ import annotations

from collections.abc import Sequence

from activities.export.platforms.base import EmojiFrames, Package, PackageFile, Target
from activities.export.platforms.packaging import fitted_files, require_set_size, still_png, validated, zipped
from activities.export.platforms.rules import Rules, SizeRule

NAME = "line-emoji"
RULES = Rules(
    platform="LINE animated emoji",
    guideline="https://creator.line.me/en/guideline/animationemoji/",
    container="apng",
    size=SizeRule(180, 180, exact=True),
    max_bytes=300 * 1000,
    frames=(5, 20),
    loop_seconds=frozenset({1, 2, 3, 4}),
    max_total_s=4.0,
    plays=(1, 4),
    per_set=frozenset(range(8, 41)),
    max_package_bytes=20 * 1000 * 1000,
)
TAB_SIZE = (96, 74)


def package(emojis: Sequence[EmojiFrames]) -> Package:
    """``001.png`` ... in set order and ``tab.png`` (the first emoji's first frame), zipped."""
    require_set_size(RULES, len(emojis))
    files = fitted_files(RULES, emojis, lambda position, _: f"{position:03d}.png")
    everything = [*files, PackageFile("tab.png", still_png(emojis[0], TAB_SIZE))]
    return validated(RULES, files, Package(NAME, everything, zipped(everything)))


TARGET = Target(NAME, RULES, package)
