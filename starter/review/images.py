"""Which stored image an image address means: by role and indices, through the set's current state.

An address never carries a path, a key or a URI: ``/sets/<id>/img/start/<action>/<candidate>`` is looked up in the
set's state, and only an :class:`ArtifactRef` found there is read from the store. Anything else is ``None`` (404).
"""

from __future__ import annotations

import re
from typing import Literal

from workflows.contract import ArtifactRef, Candidate, EmojiSetState, FrameState

SET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
"""Set ids the app addresses (what :func:`starter.client.new_set_id` and backends make; no slashes, no '..')."""
ACTION = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
"""An action's name, as the contract's ``ActionId``."""
SHA256 = re.compile(r"^[0-9a-f]{64}$")
VERSION_CHARS = 16
"""Hex digits of the sha256 put in image addresses (``?v=``): an address that names its content is cached forever."""

Kind = Literal["source", "matte"]


def valid_set_id(set_id: str) -> bool:
    return SET_ID.fullmatch(set_id) is not None and ".." not in set_id


def valid_action(name: str) -> bool:
    return ACTION.fullmatch(name) is not None


def character_image(state: EmojiSetState, candidate: int) -> ArtifactRef | None:
    found = next((c for c in state.character.candidates if c.index == candidate), None)
    return found.image if found is not None else None


def start_frame_image(state: EmojiSetState, action: str, candidate: int) -> ArtifactRef | None:
    found = state.action(action)
    if found is None:
        return None
    start = next((c for c in found.start_frames if c.index == candidate), None)
    return start.image if start is not None else None


def frame_slot(state: EmojiSetState, action: str, frame: int) -> FrameState | None:
    found = state.action(action)
    if found is None or not 0 <= frame < len(found.frames):
        return None
    return found.frames[frame]


def frame_candidate(state: EmojiSetState, action: str, frame: int, candidate: int) -> Candidate | None:
    slot = frame_slot(state, action, frame)
    return slot.candidate(candidate) if slot is not None else None


def matte_versions(candidate: Candidate) -> list[ArtifactRef]:
    """The candidate's cut-outs still in its undo history, oldest first (``Candidate.versions``, which refine_frame
    adds to and undo_refine takes back from), the current one last; empty before it is matted."""
    if candidate.matte is None:
        return []
    return [*(version.matte for version in candidate.versions), candidate.matte]


def frame_image(
    state: EmojiSetState, action: str, frame: int, candidate: int, kind: Kind, version: int | None = None
) -> ArtifactRef | None:
    found = frame_candidate(state, action, frame, candidate)
    if found is None:
        return None
    if kind == "source":
        return found.source
    if version is None:
        return found.matte
    versions = matte_versions(found)
    return versions[version] if 0 <= version < len(versions) else None


def version_tag(ref: ArtifactRef) -> str:
    """The ``?v=`` of an image address: the first hex digits of its sha256."""
    return ref.sha256[:VERSION_CHARS]


def is_image(ref: ArtifactRef) -> bool:
    return ref.media_type.startswith("image/")
