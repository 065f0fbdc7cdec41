"""Deterministic artifact keys: the same set, action, take, frame and candidate always map to the same key.

A retried activity therefore overwrites its own output instead of adding a second copy. Pure string work, safe in
workflow code.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

_SEGMENT = r"[A-Za-z0-9._-]*[A-Za-z0-9_-][A-Za-z0-9._-]*"
"""One path segment of a key: safe characters only, and not only dots (never ``.`` or ``..``). No look-around: the
contract's patterns using it are compiled by pydantic's Rust regex too."""
_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
MAX_KEY_LENGTH = 1024
"""S3's own limit on an object key."""
_SET_PART = rf"sets/{_SEGMENT}/{_SEGMENT}"
MATTE_KEY_PATTERN = rf"^{_SET_PART}/frame-[0-9]{{3,}}/candidate-[0-9]{{2,}}\.matte\.png$"
"""The only keys a matting request may write to: a frame slot candidate's cut-out (:func:`candidate_key`)."""
MATTE_VERSION_KEY_PATTERN = rf"^{_SET_PART}/frame-[0-9]{{3,}}/candidate-[0-9]{{2,}}\.matte\.v[0-9]+\.png$"
"""The only keys a refinement may write to: a candidate's refined cut-out (:func:`matte_version_key`)."""
STABILISED_KEY_PATTERN = rf"^{_SET_PART}/stabilised/[0-9a-f]{{16}}/frame-[0-9]{{3,}}\.png$"
"""The only keys a stabilisation may write to (:func:`stabilised_key`)."""


def key_segment(text: str) -> str:
    """Make ``text`` (a workflow id, a pose name) one safe path segment.

    Unsafe text gets a hash suffix, so two ids that sanitise alike still get different keys.
    """
    safe = _UNSAFE.sub("_", text)
    if safe != text or not safe.strip("."):
        safe = f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return safe


def is_key(key: str) -> bool:
    """Whether either store accepts ``key``: relative, at most :data:`MAX_KEY_LENGTH` characters, segments of
    ``[A-Za-z0-9._-]`` that are not only dots (so never ``.`` or ``..``), no empty segment."""
    return len(key) <= MAX_KEY_LENGTH and all(
        _SAFE_SEGMENT.fullmatch(segment) and segment.strip(".") for segment in key.split("/")
    )


def check_key(key: str) -> str:
    """``key`` itself when a store may hold it (:func:`is_key`).

    Raises:
        ValueError: ``key`` is absolute, has an empty, ``.`` or ``..`` segment, or a character outside
            ``[A-Za-z0-9._-]``: it could name a place outside its set, or outside the store.
    """
    if not is_key(key):
        raise ValueError(f"artifact key {key[:200]!r} is not a relative key of safe segments (no '.', '..', '/' start)")
    return key


def set_of_key(key: str) -> str | None:
    """The set segment of a key under ``sets/<set>/``, or None for a key outside every set (an upload)."""
    top, _, rest = key.partition("/")
    set_segment, slash, _ = rest.partition("/")
    return set_segment if top == "sets" and slash and is_key(set_segment) else None


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
    """Key of a file of a platform package, e.g. ``line-emoji`` and ``001.png`` or ``line-emoji.zip``.

    Raises:
        ValueError: ``name`` is not one safe segment (a pose that tries to climb out of the set).
    """
    return check_key(f"{set_prefix(set_id)}/packages/{key_segment(target)}/{_one_segment(name)}")


def export_key(set_id: str, name: str) -> str:
    """Key of an exported file of the set, e.g. ``wave.webp`` or ``contact-sheet.png``.

    Raises:
        ValueError: ``name`` is not one safe segment.
    """
    return check_key(f"{set_prefix(set_id)}/export/{_one_segment(name)}")


def _one_segment(name: str) -> str:
    if "/" in name:
        raise ValueError(f"{name!r} is not one file name")
    return name
