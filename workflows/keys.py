"""Deterministic artifact keys: the same set, emoji, frame and candidate always map to the same key.

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


def candidate_key(set_id: str, pose: str, frame: int, candidate: int, kind: str) -> str:
    """Key of a candidate's file; ``kind`` is ``source.png`` or ``matte.png``."""
    return f"{set_prefix(set_id)}/{key_segment(pose)}/frame-{frame:03d}/candidate-{candidate:02d}.{kind}"


def package_key(set_id: str, target: str, name: str) -> str:
    """Key of a file of a platform package, e.g. ``line-emoji`` and ``001.png`` or ``line-emoji.zip``."""
    return f"{set_prefix(set_id)}/packages/{key_segment(target)}/{name}"


def export_key(set_id: str, name: str) -> str:
    """Key of an exported file of the set, e.g. ``wave.webp`` or ``contact-sheet.png``."""
    return f"{set_prefix(set_id)}/export/{name}"
