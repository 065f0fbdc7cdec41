"""Copy a finished set's exported files out of the artifact store into a folder."""

from __future__ import annotations

from pathlib import Path

from core.artifacts import open_store
from core.settings import ArtifactSettings
from workflows.contract import ArtifactRef, EmojiSetResult, PackageOutput


def package_files(packages: list[PackageOutput]) -> list[tuple[str, ArtifactRef]]:
    """(path under the output folder, file) of every package: ``<target>/<name>`` and ``<target>.zip``."""
    files = []
    for package in packages:
        files += [(f"{package.target.value}/{file.name}", file.file) for file in package.files]
        if package.archive is not None:
            files.append((f"{package.target.value}.zip", package.archive))
    return files


def download_result(result: EmojiSetResult, out: Path, settings: ArtifactSettings) -> list[Path]:
    """Write every exported file of ``result`` under ``out`` (checked against its sha256); returns the paths."""
    files: list[tuple[str, ArtifactRef]] = []
    for emoji in result.emojis:
        files += [
            (f"{emoji.pose}.webp", emoji.webp),
            (f"{emoji.pose}.apng", emoji.apng),
            (f"{emoji.pose}.gif", emoji.gif),
            (f"{emoji.pose}-sprite.png", emoji.sprite_sheet),
            (f"{emoji.pose}-sprite.json", emoji.sprite_layout),
        ]
    if result.contact_sheet is not None:
        files.append(("contact-sheet.png", result.contact_sheet))
    files += package_files(result.packages)
    return _write(files, out, settings)


def download_packages(packages: list[PackageOutput], out: Path, settings: ArtifactSettings) -> list[Path]:
    """Write every file of ``packages`` under ``out`` (checked against its sha256); returns the paths."""
    return _write(package_files(packages), out, settings)


def _write(files: list[tuple[str, ArtifactRef]], out: Path, settings: ArtifactSettings) -> list[Path]:
    store = open_store(settings)
    written = []
    for name, ref in files:
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(ref))
        written.append(path)
    return written
