"""Keys for tests that store sources and matte them: a matting request writes only a frame candidate's cut-out
(``sets/<set>/<action>/frame-NNN/candidate-NN.matte.png``), in the set its sources are stored in."""

from __future__ import annotations

from workflows.keys import candidate_key, matte_version_key, stabilised_key

SET = "test-set"
"""The set of a test that needs only one."""


def source_key(name: str, set_id: str = SET) -> str:
    """Where a test stores a source image of ``set_id``."""
    return f"sets/{set_id}/sources/{name}"


def matte_key(candidate: int, *, set_id: str = SET, action: str = "wave", frame: int = 0) -> str:
    """A frame slot candidate's cut-out key."""
    return candidate_key(set_id, action, frame, candidate, "matte.png")


def version_key(candidate: int, version: int = 2, *, set_id: str = SET, frame: int = 0) -> str:
    """A refined cut-out's key."""
    return matte_version_key(set_id, "wave", frame, candidate, version)


def stable_key(frame: int, *, set_id: str = SET) -> str:
    """A stabilised frame's key."""
    return stabilised_key(set_id, "wave", "0" * 16, frame)
