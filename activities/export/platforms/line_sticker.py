"""LINE animated stickers: APNG within 320x270 (longer side at least 270), 5-20 frames, within 4 s, 300 KB, 8/16/24.

Package: ``01.png`` ... in set order, the 240x240 APNG main image ``main.png`` and the 96x74 tab image ``tab.png``,
in one ZIP of at most 20 MB.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from activities.export.platforms.base import EmojiFrames, Package, PackageFile, Target
from activities.export.platforms.fitting import fit, on_canvas
from activities.export.platforms.packaging import fitted_files, require_set_size, still_png, validated, zipped
from activities.export.platforms.rules import Rules, SizeRule

NAME = "line-sticker"
RULES = Rules(
    platform="LINE animated stickers",
    guideline="https://creator.line.me/en/guideline/animationsticker/",
    container="apng",
    size=SizeRule(320, 270, min_long_side=270),
    max_bytes=300 * 1000,
    frames=(5, 20),
    loop_seconds=frozenset({1, 2, 3, 4}),
    max_total_s=4.0,
    plays=(1, 4),
    per_set=frozenset({8, 16, 24}),
    max_package_bytes=20 * 1000 * 1000,
)
MAIN_SIZE = (240, 240)
TAB_SIZE = (96, 74)

MAIN_RULES = dataclasses.replace(
    RULES, platform="LINE animated sticker main image", size=SizeRule(*MAIN_SIZE, exact=True), per_set=None
)


def package(emojis: Sequence[EmojiFrames]) -> Package:
    """``01.png`` ... in set order, ``main.png`` (the first sticker, animated, 240x240) and ``tab.png``, zipped."""
    require_set_size(RULES, len(emojis))
    files = fitted_files(RULES, emojis, lambda position, _: f"{position:02d}.png")
    first = emojis[0]
    main = fit(on_canvas(first.frames, MAIN_SIZE), first.loop_s, MAIN_RULES)
    everything = [
        *files,
        PackageFile("main.png", main.data, first.name, main),
        PackageFile("tab.png", still_png(first, TAB_SIZE)),
    ]
    return validated(RULES, files, Package(NAME, everything, zipped(everything)))


TARGET = Target(NAME, RULES, package)
