"""Refining a cut-out with clicks: the weight-free ``clicks`` segmenter on synthetic frames, applying its region to a
cut-out, the whole ``refine_matte`` (read, segment, carry, store, score) and the refiner registry."""

from __future__ import annotations

import asyncio
import io
import itertools
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from core.artifacts import FileArtifactStore
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.matting import decode_rgba
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import InvalidRefineError, Refiners, refine_matte, refined
from gpu_activity_worker.refine.clicks import ClickSegmenter, segment
from gpu_activity_worker.runpod.api import RunPodApi
from gpu_activity_worker.runpod.dispatcher import RunPodDispatcher
from gpu_activity_worker.runpod.settings import RunPodSettings
from testkit.set_keys import source_key, version_key
from workflows.contract import (
    ArtifactRef,
    RefineMatteInput,
    RefineMode,
    RefinePoint,
    RefineTarget,
)

WHITE = (255, 255, 255)
ORANGE = (240, 140, 30)
GREEN = (40, 170, 60)
DARK = (30, 20, 40)
SIZE = 64


def _frame(*shapes: tuple[tuple[int, int, int], np.ndarray]) -> np.ndarray:
    """A white frame with each (colour, mask) painted in order."""
    image = np.full((SIZE, SIZE, 3), WHITE, dtype=np.uint8)
    for colour, mask in shapes:
        image[mask] = colour
    return image


def _disc(cy: float, cx: float, radius: float) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE))
    return np.asarray(np.hypot(yy - cy, xx - cx) <= radius)


def _box(y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
    mask = np.zeros((SIZE, SIZE), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


BODY = _disc(36, 28, 16)
BLOB = _disc(10, 52, 6)
SOURCE = _frame((ORANGE, BODY), (GREEN, BLOB))
"""An orange body and, apart from it, a green blob the matting kept by mistake."""


def _cutout(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.dstack([image, np.where(alpha, 255, 0).astype(np.uint8)])


def _at(x: int, y: int, foreground: bool = True) -> RefinePoint:
    return RefinePoint(x=x, y=y, foreground=foreground)


def test_a_click_segments_exactly_the_flat_region_it_is_on() -> None:
    np.testing.assert_array_equal(segment(SOURCE, [_at(52, 10)]), BLOB)
    np.testing.assert_array_equal(segment(SOURCE, [_at(28, 36)]), BODY)


def test_codec_specks_inside_the_region_are_taken_eyes_are_not() -> None:
    """Single pixels a codec pushed off the body's colour go with it; an eye, far larger, stays out."""
    eye = _disc(30, 22, 3)
    specks = np.zeros((SIZE, SIZE), dtype=bool)
    specks[[40, 44, 38], [30, 24, 34]] = True
    image = _frame((ORANGE, BODY), (DARK, eye), ((120, 200, 90), specks))

    region = segment(image, [_at(28, 46)])

    assert region[specks].all()
    assert not region[eye].any()
    np.testing.assert_array_equal(region, BODY & ~eye)


def test_erase_removes_exactly_the_clicked_blob() -> None:
    matte = _cutout(SOURCE, BODY | BLOB)
    region = ClickSegmenter().segment(SOURCE, [_at(50, 12)], RefineMode.ERASE)

    result = refined(SOURCE, matte, region, RefineMode.ERASE)

    np.testing.assert_array_equal(result[..., 3] > 0, BODY)
    np.testing.assert_array_equal(result[..., :3], matte[..., :3])


def test_erase_takes_the_anti_aliased_rim_too() -> None:
    """A blob with a one-pixel rim half way to white: erasing it leaves no faint ring."""
    rim = _disc(10, 52, 7) & ~BLOB
    source = _frame((ORANGE, BODY), (GREEN, BLOB), ((148, 212, 158), rim))
    alpha = np.where(BODY | BLOB, 255, np.where(rim, 128, 0)).astype(np.uint8)
    matte = np.dstack([source, alpha])

    region = ClickSegmenter().segment(source, [_at(52, 10)], RefineMode.ERASE)
    result = refined(source, matte, region, RefineMode.ERASE)

    np.testing.assert_array_equal(result[..., 3] > 0, BODY)


def test_restore_brings_back_a_region_from_the_source() -> None:
    """The matting dropped the blob and left colours of its own there: restore takes the source's, opaque."""
    matte = _cutout(SOURCE, BODY)
    matte[BLOB, :3] = 0
    region = ClickSegmenter().segment(SOURCE, [_at(52, 10)], RefineMode.RESTORE)

    result = refined(SOURCE, matte, region, RefineMode.RESTORE)

    np.testing.assert_array_equal(result[..., 3] == 255, BODY | BLOB)
    np.testing.assert_array_equal(result[BLOB, :3], SOURCE[BLOB])
    np.testing.assert_array_equal(result[~BLOB], matte[~BLOB])


def test_an_edge_bounds_the_growth_between_close_colours() -> None:
    """Two areas close enough in colour to join, but meeting at a hard edge: the region stops at the edge."""
    left, right = _box(8, 56, 8, 32), _box(8, 56, 32, 56)
    source = _frame(((200, 120, 40), left), ((220, 145, 60), right))
    assert np.linalg.norm(np.subtract((200, 120, 40), (220, 145, 60)) / 255) < 0.25

    np.testing.assert_array_equal(segment(source, [_at(16, 30)]), left)


def test_an_outline_bounds_the_growth_within_one_colour() -> None:
    """One orange area split by a dark line: only the clicked side."""
    line = _box(8, 56, 31, 33)
    area = _box(8, 56, 8, 56)
    source = _frame((ORANGE, area), (DARK, line))

    np.testing.assert_array_equal(segment(source, [_at(12, 20)]), _box(8, 56, 8, 31))


def test_a_background_click_stops_a_leak_through_a_bridge() -> None:
    """A green blob joined to a large green area by a thin bridge: alone, the click takes both; a background click
    in the large area keeps the region to the blob's side of the bridge."""
    blob, bridge, area = _disc(12, 12, 8), _box(11, 14, 18, 40), _box(4, 60, 40, 60)
    source = _frame((GREEN, blob | bridge | area))

    leaked = segment(source, [_at(12, 12)])
    bounded = segment(source, [_at(12, 12), _at(50, 30, foreground=False)])

    assert leaked[area].all()
    assert bounded[blob].all() and not bounded[area].any()
    assert not bounded[bridge].all() and bounded[bridge].any(), "the split falls within the bridge"


def test_no_foreground_click_is_an_empty_region() -> None:
    assert not segment(SOURCE, [_at(5, 5, foreground=False)]).any()


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGBA" if pixels.shape[2] == 4 else "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


_FRAMES = itertools.count()
"""Each target a frame of its own in the one test set."""


def _target(store: FileArtifactStore, source: np.ndarray, matte: np.ndarray) -> RefineTarget:
    frame = next(_FRAMES)
    height, width = source.shape[:2]
    return RefineTarget(
        source=store.put(source_key(f"{frame}/source.png"), _png(source), "image/png"),
        matte=store.put(source_key(f"{frame}/matte.png"), _png(matte), "image/png", width=width, height=height),
        output_key=version_key(0, frame=frame),
    )


@pytest.fixture
def store(tmp_path: Path) -> FileArtifactStore:
    return FileArtifactStore(tmp_path)


@pytest.fixture
def refiners() -> Refiners:
    return Refiners(Pipelines(builtin_steps(), StepContext(device="cpu")))


def _stored(store: FileArtifactStore, ref: ArtifactRef) -> np.ndarray:
    return decode_rgba(store.get(ref), ref.uri)


def test_refine_matte_stores_scores_and_carries_the_clicks_through_following_frames(
    store: FileArtifactStore, refiners: Refiners
) -> None:
    moved_blob = _disc(11, 51, 6)
    moved = _frame((ORANGE, BODY), (GREEN, moved_blob))
    targets = [
        _target(store, SOURCE, _cutout(SOURCE, BODY | BLOB)),
        _target(store, moved, _cutout(moved, BODY | moved_blob)),
    ]
    request = RefineMatteInput(frames=targets, points=[_at(52, 10)], mode=RefineMode.ERASE)

    output = refine_matte(request, store, refiners)

    assert output.refiner == "clicks" and len(output.frames) == 2
    first, second = (_stored(store, frame.matte) for frame in output.frames)
    np.testing.assert_array_equal(first[..., 3] > 0, BODY)
    np.testing.assert_array_equal(second[..., 3] > 0, BODY, "the moved blob is erased by the same click")
    for frame, target in zip(output.frames, targets, strict=True):
        assert frame.matte.uri.endswith(target.output_key)
        assert (frame.matte.width, frame.matte.height) == (SIZE, SIZE)
        assert 0.0 <= frame.score <= 1.0 and set(frame.score_parts) == {"coverage", "connected", "inside", "crisp"}
        assert (frame.pipeline, frame.device) == ("refine:clicks", "cpu")
    assert output.frames[0].score_parts["connected"] == 1.0, "the stray blob no longer splits the silhouette"


def test_points_outside_the_frame_are_refused(store: FileArtifactStore, refiners: Refiners) -> None:
    request = RefineMatteInput(
        frames=[_target(store, SOURCE, _cutout(SOURCE, BODY))], points=[_at(64, 3)], mode=RefineMode.ERASE
    )
    with pytest.raises(InvalidRefineError, match=r"points outside the 64x64 frame: \(64, 3\)"):
        refine_matte(request, store, refiners)


def test_a_cut_out_of_another_size_than_its_source_is_refused(store: FileArtifactStore, refiners: Refiners) -> None:
    target = _target(store, SOURCE, _cutout(SOURCE, BODY)[:32])
    with pytest.raises(InvalidRefineError, match="64x32, its source 64x64"):
        refine_matte(RefineMatteInput(frames=[target], points=[_at(3, 3)], mode=RefineMode.ERASE), store, refiners)


def test_sam2_without_its_weights_falls_back_to_clicks(tmp_path: Path) -> None:
    refiners = Refiners(Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=tmp_path)))
    assert refiners.get("sam2").name == "clicks"
    assert refiners.get("clicks") is refiners.get("sam2")


def test_unknown_refiners_and_variants_are_refused(refiners: Refiners) -> None:
    with pytest.raises(InvalidRefineError, match="unknown refiner 'magic'; refiners: clicks, sam2"):
        refiners.get("magic")
    with pytest.raises(InvalidRefineError, match="no variant 'fast'"):
        refiners.get("clicks:fast")


def test_the_activity_refines_and_a_bad_request_fails_for_good(store: FileArtifactStore) -> None:
    matting = MattingActivities(store, Pipelines(builtin_steps()), capacity=1, prefetch=0)
    try:
        good = RefineMatteInput(
            frames=[_target(store, SOURCE, _cutout(SOURCE, BODY))], points=[_at(52, 10)], mode=RefineMode.RESTORE
        )
        output = asyncio.run(ActivityEnvironment().run(matting.refine_matte, good))
        assert (_stored(store, output.frames[0].matte)[..., 3] > 0).sum() == (BODY | BLOB).sum()

        bad = good.model_copy(update={"refiner": "magic"})
        with pytest.raises(ApplicationError) as failure:
            asyncio.run(ActivityEnvironment().run(matting.refine_matte, bad))
        assert (failure.value.type, failure.value.non_retryable) == ("InvalidRequest", True)
    finally:
        matting.close()


def test_the_runpod_dispatcher_refines_in_its_own_process_with_clicks(store: FileArtifactStore) -> None:
    """No endpoint job and no model: whatever the set asks for, the dispatcher runs the weight-free segmenter."""
    api = RunPodApi("http://127.0.0.1:9", "no-endpoint", SecretStr("unused"))
    dispatcher = RunPodDispatcher(api, store, RunPodSettings(_env_file=None), inline=True)
    request = RefineMatteInput(
        frames=[_target(store, SOURCE, _cutout(SOURCE, BODY | BLOB))],
        points=[_at(52, 10)],
        mode=RefineMode.ERASE,
        refiner="sam2:small",
    )

    output = asyncio.run(ActivityEnvironment().run(dispatcher.refine_matte, request))

    assert output.refiner == "clicks"
    np.testing.assert_array_equal(_stored(store, output.frames[0].matte)[..., 3] > 0, BODY)
    with pytest.raises(ApplicationError) as failure:
        asyncio.run(
            ActivityEnvironment().run(dispatcher.refine_matte, request.model_copy(update={"points": [_at(70, 1)]}))
        )
    assert (failure.value.type, failure.value.non_retryable) == ("InvalidRequest", True)
    asyncio.run(dispatcher.aclose())
