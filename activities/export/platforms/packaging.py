"""What the platform modules share when they lay out a package: fitted files, still images, validation, the ZIP."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Sequence

from PIL import Image

from activities.export.platforms import validate
from activities.export.platforms.base import DoesNotFitError, EmojiFrames, Package, PackageFile
from activities.export.platforms.fitting import fit, on_canvas
from activities.export.platforms.rules import Rules


def require_set_size(rules: Rules, emojis: int) -> None:
    """Refuse a set of ``emojis`` emoji when the platform does not take sets of that size, before any encoding."""
    if rules.per_set is not None and emojis not in rules.per_set:
        allowed = sorted(rules.per_set)
        shown = ", ".join(map(str, allowed)) if len(allowed) <= 4 else f"{allowed[0]} to {allowed[-1]}"
        raise DoesNotFitError(f"set_count: {rules.platform} takes sets of {shown} emoji, this one has {emojis}")


def fitted_files(
    rules: Rules, emojis: Sequence[EmojiFrames], name: Callable[[int, EmojiFrames], str]
) -> list[PackageFile]:
    """Each emoji fitted to ``rules`` at the rules' canvas, named ``name(position from 1, emoji)``."""
    files = []
    for position, emoji in enumerate(emojis, start=1):
        try:
            fitted = fit(on_canvas(emoji.frames, rules.size.canvas()), emoji.loop_s, rules)
        except DoesNotFitError as err:
            raise DoesNotFitError(f"{emoji.name}: {err}") from err
        files.append(PackageFile(name(position, emoji), fitted.data, emoji.name, fitted))
    return files


def still_png(emoji: EmojiFrames, size: tuple[int, int]) -> bytes:
    """The emoji's first frame (the one platforms show as its still image), fitted into ``size``, as a PNG."""
    [canvas] = on_canvas([emoji.frames[0]], size)
    out = io.BytesIO()
    Image.fromarray(canvas, "RGBA").save(out, format="PNG", optimize=True)
    return out.getvalue()


def validated(rules: Rules, files: Sequence[PackageFile], package: Package) -> Package:
    """``package`` once every emoji file and the set pass the validator; else the first rule broken, named.

    Raises:
        DoesNotFitError: A file or the set breaks a rule (an invalid file is never handed out as valid).
    """
    violations = [
        f"{file.name} ({file.emoji}): {violation.message}"
        for file in files
        for violation in validate.check_file(rules, file.data)
    ]
    violations += [
        violation.message
        for violation in validate.check_set(
            rules,
            [(file.name, file.data) for file in files],
            names=[file.name for file in files],
            package_bytes=None if package.archive is None else len(package.archive),
        )
    ]
    if violations:
        raise DoesNotFitError("; ".join(violations))
    return package


def zipped(files: Sequence[PackageFile]) -> bytes:
    """The files in one ZIP, at its root, in order (PNG and WebM are compressed already: stored, not deflated)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for file in files:
            archive.writestr(zipfile.ZipInfo(file.name, date_time=(2026, 1, 1, 0, 0, 0)), file.data)
    return out.getvalue()
