"""Deterministic artifact keys: the same set, action, take, frame and candidate always map to the same key.

A retried activity therefore overwrites its own output instead of adding a second copy. Pure string work, safe in
workflow code.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def key_segment(text: str) -> str:
    """Make ``text`` (a workflow id, a pose name) one safe path segment.

    Unsafe text gets a hash suffix, so two ids that sanitise alike still get different keys.
    """
    safe = _UNSAFE.sub("_", text)
    if safe != text or safe in {"", ".", ".."}:
        safe = f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return safe


def set_prefix(set_id: str) -> str:
    return f"sets/{key_segment(set_id)}"


def character_key(set_id: str, candidate: int) -> str:
    """Key of a character candidate (candidate 0 of an upload is the cleaned upload)."""
    return f"{set_prefix(set_id)}/character/candidate-{candidate:02d}.png"


def upload_key(sha256: str) -> str:
    """Key of an uploaded picture as the client stored it: by content, so uploading it twice stores it once."""
    return f"uploads/{sha256}"


def start_frame_key(set_id: str, action: str, candidate: int) -> str:
    return f"{set_prefix(set_id)}/{key_segment(action)}/start-frame/candidate-{candidate:02d}.png"


def clip_key(set_id: str, action: str, take: int) -> str:
    return f"{set_prefix(set_id)}/{key_segment(action)}/take-{take:02d}/clip.mp4"


def clip_frame_key(set_id: str, action: str, take: int, source_frame: int) -> str:
    """Key of one frame extracted from a take's clip (shared by the slots that offer it as a candidate)."""
    return f"{set_prefix(set_id)}/{key_segment(action)}/take-{take:02d}/frame-{source_frame:04d}.png"


def candidate_key(set_id: str, action: str, frame: int, candidate: int, kind: str) -> str:
    """Key of a frame slot candidate's file; ``kind`` is ``source.png`` (a frame edit) or ``matte.png``."""
    return f"{set_prefix(set_id)}/{key_segment(action)}/frame-{frame:03d}/candidate-{candidate:02d}.{kind}"


def picks_digest(mode: str, mattes: list[str]) -> str:
    """A short digest of an emoji's picked cut-outs (their sha256s, in frame order) and the temporal mode: the same
    picks always give the same digest, other picks another."""
    return hashlib.sha256("\n".join([mode, *mattes]).encode()).hexdigest()[:16]


def stabilised_key(set_id: str, action: str, digest: str, frame: int) -> str:
    """Key of a frame's cut-out stabilised with the emoji's other picks (:func:`picks_digest`): picks changed by a
    reviewer get new keys, so a stabilisation still in flight for the old picks never overwrites the new ones."""
    return f"{set_prefix(set_id)}/{key_segment(action)}/stabilised/{digest}/frame-{frame:03d}.png"


def matte_version_key(set_id: str, action: str, frame: int, candidate: int, version: int) -> str:
    """Key of a refined cut-out of a candidate: version 2 is its first refinement (``candidate-01.matte.v2.png``),
    version 1 the matting's own ``candidate-01.matte.png``. Versions are never reused, undone ones included."""
    if version < 2:
        raise ValueError(f"version {version}: refined cut-outs start at version 2")
    matte = candidate_key(set_id, action, frame, candidate, "matte.png")
    return f"{matte.removesuffix('.png')}.v{version}.png"


def package_key(set_id: str, target: str, name: str) -> str:
    """Key of a file of a platform package, e.g. ``line-emoji`` and ``001.png`` or ``line-emoji.zip``."""
    return f"{set_prefix(set_id)}/packages/{key_segment(target)}/{name}"


def export_key(set_id: str, name: str) -> str:
    """Key of an exported file of the set, e.g. ``wave.webp`` or ``contact-sheet.png``."""
    return f"{set_prefix(set_id)}/export/{name}"
