"""The demo's hand pick: a sharp, clean candidate next to the automatic pick, never a blurred or glitched one."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from core.artifacts import FileArtifactStore
from starter.demo import HandPick, choose_hand_pick, measure_sharpness, sharpness
from workflows.contract import Candidate, CandidateStatus, FrameState

SIZE = 48


def cutout(*, blurred: bool = False, flat: bool = False) -> bytes:
    """An opaque textured disc on transparency (a cut-out); ``blurred``: Gaussian-blurred (sigma 2), ``flat``: one
    colour."""
    rng = np.random.default_rng(7)
    rgb = np.full((SIZE, SIZE, 3), 200.0) if flat else rng.integers(0, 256, (SIZE, SIZE, 3)).astype(np.float64)
    if blurred:
        rgb = ndimage.gaussian_filter(rgb, sigma=(2.0, 2.0, 0.0))
    yy, xx = np.indices((SIZE, SIZE))
    alpha = np.where(np.hypot(yy - SIZE / 2, xx - SIZE / 2) < SIZE / 3, 255, 0)
    buffer = io.BytesIO()
    Image.fromarray(np.dstack([rgb, alpha]).astype(np.uint8), "RGBA").save(buffer, format="PNG")
    return buffer.getvalue()


def slot(
    store: FileArtifactStore, index: int, cutouts: list[bytes], *, qualities: list[float] | None = None
) -> FrameState:
    """A frame slot whose candidate 0 is the automatic pick."""
    candidates = []
    for number, data in enumerate(cutouts):
        ref = store.put(f"slot-{index}/{number}.png", data, "image/png", width=SIZE, height=SIZE)
        quality = 1.0 if qualities is None else qualities[number]
        candidates.append(
            Candidate(index=number, source=ref, matte=ref, score=1.0, quality=quality, status=CandidateStatus.READY)
        )
    return FrameState(index=index, candidates=candidates, pick=0)


def test_sharpness_tells_a_blurred_cutout_and_leaves_out_the_cut_edge() -> None:
    assert sharpness(cutout()) > 3 * sharpness(cutout(blurred=True)) > 0
    assert sharpness(cutout(flat=True)) == 0.0, "the disc's edge against transparency is not counted"


def test_the_hand_pick_is_the_sharp_candidate_not_the_first_other_one(tmp_path: Path) -> None:
    """Slot 0's only other candidate is blurred (the clip analysis missed it: quality 1), as in the demo's set: the
    first usable other candidate (the old rule) would be it. Slot 1 has a blurred one first, then a sharp one."""
    store = FileArtifactStore(tmp_path)
    sharp, blurred = cutout(), cutout(blurred=True)
    frames = [slot(store, 0, [sharp, blurred]), slot(store, 1, [sharp, blurred, sharp])]

    measured = measure_sharpness(frames, store)

    assert choose_hand_pick(frames, measured) == HandPick(slot=1, candidate=2, gain=1.0)
    assert measured[0][1] < measured[0][0] / 3


def test_a_glitched_or_lone_candidate_is_never_picked(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    sharp = cutout()
    glitched = [slot(store, 0, [cutout(blurred=True), sharp], qualities=[1.0, 0.0])]
    alone = [slot(store, 1, [sharp])]

    assert choose_hand_pick(glitched, measure_sharpness(glitched, store)) is None
    assert choose_hand_pick(alone, measure_sharpness(alone, store)) is None
