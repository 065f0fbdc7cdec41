"""What every platform target shares: the emoji going in, the files and report coming out, and the refusal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from PIL import Image

from activities.export.platforms.rules import Rules


@dataclass(frozen=True)
class EmojiFrames:
    """One approved emoji: its name (the pose) and its matted frames, straight RGBA of one size, looping."""

    name: str
    frames: Sequence[Image.Image]
    frame_duration_ms: int

    @property
    def loop_s(self) -> float:
        return len(self.frames) * self.frame_duration_ms / 1000


@dataclass(frozen=True)
class Fitted:
    """One encoded file that fits its rules, and how it got there.

    Attributes:
        data: The file.
        rung: The ladder rung that first fitted, e.g. ``lossless``, ``palette-64``, ``palette-32-frames-8``, ``crf-34``.
        frames: Frames in the file.
        colours: Palette size, or None for full colour.
        loop_s: Length of one loop in seconds.
        plays: How often the loop plays (0 = forever).
        width: Canvas width.
        height: Canvas height.
        ssim_white: SSIM of the decoded frames against the lossless source, both composited over white.
        ssim_dark: The same over a dark chat background.
    """

    data: bytes
    rung: str
    frames: int
    colours: int | None
    loop_s: float
    plays: int
    width: int
    height: int
    ssim_white: float
    ssim_dark: float


@dataclass(frozen=True)
class PackageFile:
    """One file of an upload package, named as the platform expects; ``emoji`` is None for tab or main images."""

    name: str
    data: bytes
    emoji: str | None = None
    fitted: Fitted | None = None


@dataclass(frozen=True)
class Package:
    """One target's upload package: its files in the platform's layout, and the ZIP when the platform takes one."""

    target: str
    files: list[PackageFile] = field(default_factory=list)
    archive: bytes | None = None


class DoesNotFitError(ValueError):
    """The set cannot meet a rule of the target; the message names the rule and the closest figure reached."""


@dataclass(frozen=True)
class Target:
    """A platform export: one module each in this package, each with its rule table and its package layout.

    Attributes:
        name: The target's name in ``export_targets``, e.g. ``line-emoji``.
        rules: The rule table its emoji files are held to.
        package: The upload package for a set's emoji, every file fitted and validated; raises
            :class:`DoesNotFitError` when a file or the set cannot meet a rule.
    """

    name: str
    rules: Rules
    package: Callable[[Sequence[EmojiFrames]], Package]
