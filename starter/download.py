"""Copy a finished set's exported files out of the artifact store into a folder."""

from __future__ import annotations

from pathlib import Path

from core.artifacts import open_store
from core.settings import ArtifactSettings
from workflows.contract import ArtifactRef, EmojiSetResult


def download_result(result: EmojiSetResult, out: Path, settings: ArtifactSettings) -> list[Path]:
    """Write every exported file of ``result`` under ``out`` (checked against its sha256); returns the paths."""
    store = open_store(settings)
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
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, ref in files:
        path = out / name
        path.write_bytes(store.get(ref))
        written.append(path)
    return written
