"""The temporal stabiliser: still parts stop flickering, moving parts are left alone, bad input is refused clearly.

Frames are drawn here: an anti-aliased disc on white (its exact alpha is the truth) whose matte flickers the way
per-frame matting does (a random alpha jitter at the edge, a speck found in one frame only), and a moving bar whose
alpha must stay each frame's own; a ring round a gap that some frames' mattes keep opaque, beside a painted white eye
(a hole and white paint look alike through a codec). H.264 noise comes from a real libx264 round trip (the
benchmark's encoder).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.matting_quality import h264
from core.artifacts import FileArtifactStore
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.matting import encode_png
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.temporal import (
    CHANGE_RADIUS,
    FramesMismatchError,
    open_holes,
    reconcile_with_track,
    sam2_consistent,
    stabilise_alphas,
    stabilise_emoji,
    unchanged_runs,
)
from gpu_activity_worker.vocabulary import CorruptImageError, UnsupportedImageError
from testkit import matting_metrics as metrics
from testkit.set_keys import source_key, stable_key
from workflows.contract import EmojiSetInput, StabiliseEmojiInput, TemporalMode

SIZE = 64
FRAMES = 6


def _disc(radius: float, centre: tuple[float, float], shape: tuple[int, int] = (SIZE, SIZE)) -> np.ndarray:
    yy, xx = np.indices(shape, dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - centre[0], xx - centre[1]) - radius), 0.0, 1.0)


def _bar(left: float) -> np.ndarray:
    """A vertical bar from ``left`` (fractional: an anti-aliased edge) to 10 px right of it, rows 44-60."""
    xx = np.arange(SIZE, dtype=np.float64)
    columns = np.clip(np.minimum(xx + 1 - left, left + 10 - xx), 0.0, 1.0)
    alpha = np.zeros((SIZE, SIZE))
    alpha[44:60] = columns
    return alpha


def _over_white(alpha: np.ndarray, colour: tuple[float, float, float] = (0.8, 0.2, 0.1)) -> np.ndarray:
    image = np.array(colour) * alpha[..., None] + (1 - alpha[..., None])
    return np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)


def _scene(shifts: list[float]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A still disc (top) and a bar moving by ``shifts`` (bottom): the frames and their true alphas."""
    truths, images = [], []
    for left in shifts:
        truth = np.maximum(_disc(14, (20, 24)), _bar(left))
        truths.append(truth)
        images.append(_over_white(truth))
    return images, truths


def _flickering(truths: list[np.ndarray], seed: int = 0) -> list[np.ndarray]:
    """Per-frame mattes of the truths: the disc's edge jitters, and frame 2 keeps a speck of background."""
    rng = np.random.default_rng(seed)
    edge = (truths[0] > 0) & (truths[0] < 1)
    ring = np.zeros_like(edge)
    ring[:40] = (_disc(15.5, (20, 24))[:40] > 0) & (_disc(12.5, (20, 24))[:40] < 1)
    mattes = []
    for t, truth in enumerate(truths):
        matte = truth.copy()
        jitter = rng.uniform(-0.3, 0.3, truth.shape) * ring
        matte = np.clip(matte + jitter, 0.0, 1.0)
        if t == 2:
            matte[4:7, 50:53] = 1.0  # a speck of white background, kept in one frame only
        mattes.append(matte.astype(np.float32))
    assert edge.any()
    return mattes


STILL = [3.0] * FRAMES
MOVING = [3.0 + 2.5 * t for t in range(FRAMES)]


def test_still_flicker_is_removed() -> None:
    images, truths = _scene(STILL)
    mattes = _flickering(truths)

    stable = stabilise_alphas(images, mattes)

    before, after = metrics.dtssd(mattes, truths), metrics.dtssd(stable, truths)
    assert after < 0.2 * before, (before, after)
    assert all(alpha.dtype == np.float32 and alpha.shape == (SIZE, SIZE) for alpha in stable)
    # The speck of one frame is outvoted by the others; the median of the jitter is closer to the truth.
    assert (stable[2][4:7, 50:53] == 0).all()
    assert np.mean([metrics.sad(a, t) for a, t in zip(stable, truths, strict=True)]) < np.mean(
        [metrics.sad(a, t) for a, t in zip(mattes, truths, strict=True)]
    )


def test_a_moving_edge_is_not_smeared() -> None:
    images, truths = _scene(MOVING)
    mattes = _flickering(truths)

    stable = stabilise_alphas(images, mattes)

    bottom = slice(40, SIZE)
    for alpha, matte in zip(stable, mattes, strict=True):
        np.testing.assert_array_equal(alpha[bottom], matte[bottom])  # the moving bar keeps each frame's own alpha
    assert metrics.dtssd([a[:36] for a in stable], [t[:36] for t in truths]) < 0.2 * metrics.dtssd(
        [m[:36] for m in mattes], [t[:36] for t in truths]
    )


def test_a_change_reaches_its_neighbourhood() -> None:
    """A pixel whose own colour stood still but whose neighbour moved keeps its alpha: the matting steps look
    around a pixel, so its alpha may rightly change."""
    images, truths = _scene(MOVING)
    labels = unchanged_runs(images, truths)
    moved = np.abs(images[1].astype(int) - images[0]).max(axis=2) > 0
    ys, xs = np.nonzero(moved)
    near = np.zeros_like(moved)
    for y, x in zip(ys, xs, strict=True):
        near[max(0, y - CHANGE_RADIUS) : y + CHANGE_RADIUS + 1, max(0, x - CHANGE_RADIUS) : x + CHANGE_RADIUS + 1] = (
            True
        )
    assert (labels[1][near] != labels[0][near]).all()
    assert (labels[1][:30] == labels[0][:30]).all()  # the still disc is linked


@pytest.mark.parametrize("crf", [18, 28])
def test_compression_noise_is_tolerated(crf: int) -> None:
    images, truths = _scene(STILL)
    noisy = h264(images, crf)
    assert any(not np.array_equal(a, b) for a, b in zip(noisy[1:], noisy[:-1], strict=False))
    mattes = _flickering(truths)

    stable = stabilise_alphas(noisy, mattes)

    assert metrics.dtssd(stable, truths) < 0.3 * metrics.dtssd(mattes, truths)


def test_a_changed_frame_splits_the_run() -> None:
    """The disc turns blue in frames 3 onwards: each half takes its own median, never the other's."""
    _, truths = _scene(STILL)
    images = [_over_white(t, (0.8, 0.2, 0.1) if i < 3 else (0.1, 0.2, 0.8)) for i, t in enumerate(truths)]
    mattes = [t.astype(np.float32) for t in truths]
    mattes[3:] = [np.clip(m * 0.5, 0, 1) for m in mattes[3:]]  # the blue disc's matte is half as opaque

    stable = stabilise_alphas(images, mattes)

    disc = truths[0][:40] == 1
    assert all((s[:40][disc] == 1).all() for s in stable[:3])
    assert all((s[:40][disc] == 0.5).all() for s in stable[3:])


def test_single_frames_and_bad_shapes_are_refused() -> None:
    images, truths = _scene(STILL[:2])
    with pytest.raises(FramesMismatchError, match="at least 2 consecutive frames"):
        stabilise_alphas(images[:1], truths[:1])
    with pytest.raises(FramesMismatchError, match="2 source frames but 1 alphas"):
        stabilise_alphas(images, truths[:1])
    with pytest.raises(FramesMismatchError, match="frame 1: source frames must be uint8 HxWx3 of one size"):
        stabilise_alphas([images[0], images[1][:32]], truths)
    with pytest.raises(FramesMismatchError, match="frame 1: source frames must be uint8"):
        stabilise_alphas([images[0], images[1].astype(np.float32)], truths)
    with pytest.raises(FramesMismatchError, match=r"frame 0: alpha is \(32, 64\)"):
        stabilise_alphas(images, [truths[0][:32], truths[1]])
    assert issubclass(FramesMismatchError, UnsupportedImageError)  # reported as UnsupportedImage: not retried


def test_reconcile_with_a_track_fills_a_hole_of_one_frame() -> None:
    """The ``sam2`` path's rule: a tracked silhouette overrules a hole one frame's matte punched, keeps the edge."""
    images, truths = _scene(STILL)
    mattes = [t.astype(np.float32) for t in truths]
    mattes[2] = mattes[2].copy()
    mattes[2][16:24, 20:28] = 0.0  # a hole in the disc in frame 2 only
    masks = [t > 0.5 for t in truths]

    reconciled = reconcile_with_track(mattes, masks)

    assert (reconciled[2][16:24, 20:28] == 1).all()
    np.testing.assert_array_equal(reconciled[0], mattes[0])
    calls = []

    def track(frames: list[np.ndarray], first: np.ndarray) -> list[np.ndarray]:
        calls.append((len(frames), first.dtype))
        return masks

    stable = sam2_consistent(images, mattes, track)
    assert calls == [(FRAMES, np.bool_)] and (stable.alphas[2][16:24, 20:28] == 1).all()
    with pytest.raises(UnsupportedImageError, match="first frame"):
        sam2_consistent(images, [np.zeros_like(m) for m in mattes], track)
    with pytest.raises(FramesMismatchError, match="tracked masks"):
        reconcile_with_track(mattes, masks[:2])


def _paint(image: np.ndarray, alpha: np.ndarray, colour: tuple[float, float, float]) -> np.ndarray:
    return np.array(colour) * alpha[..., None] + image * (1 - alpha[..., None])


FOUND = (0, 2, 3, 5)
"""The frames whose matte found the ring's gap: frames 1 and 4 (MISSED), which kept it opaque, lie between two that
found it."""
MISSED = (1, 4)
BLOCK = (slice(40, 60), slice(4, 28))
SPECK = (slice(48, 50), slice(14, 16))
"""In the middle of the block, under the smallest hole area of a 64x64 frame."""


def _ring_scene(
    found: tuple[int, ...] = FOUND, jumping_eye: bool = False
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """A red ring round a white gap, a black disc painted with a white eye and a pupil, and a grey block with a 2x2
    white speck in it, over white: the frames (uint8), their true alphas and what per-frame matting gives through a
    codec, where a hole and white paint look alike. The mattes of the frames in ``found`` found the gap (a hole); the
    others kept it opaque. The speck is a hole in frames 0 and 2 (found there), paint in the others. With
    ``jumping_eye`` the eye jumps 32 px up and down, so that its white lies on its neighbours' open background."""
    frames, truths, mattes = [], [], []
    for t in range(FRAMES):
        ring = np.clip(_disc(13, (22, 22)) - _disc(7, (22, 22)), 0.0, 1.0)
        centre = (14.0 + 32 * (t % 2), 50.0) if jumping_eye else (22.0, 48.0)
        disc, white, pupil = _disc(9, centre), _disc(5, centre), _disc(2, centre)
        image = _paint(np.ones((SIZE, SIZE, 3)), ring, (0.8, 0.2, 0.1))
        image[BLOCK] = (0.6, 0.6, 0.6)
        image = _paint(_paint(_paint(image, disc, (0.1, 0.1, 0.1)), white, (1.0, 1.0, 1.0)), pupil, (0.1, 0.1, 0.1))
        image[SPECK] = 1.0
        truth = np.maximum(ring, disc)
        truth[BLOCK] = 1.0
        truth[SPECK] = 0.0 if t in (0, 2) else 1.0
        frames.append(np.clip(np.rint(image * 255), 0, 255).astype(np.uint8))
        truths.append(truth)
        mattes.append((truth if t in found else np.maximum(truth, _disc(7.5, (22, 22)))).astype(np.float32))
    return frames, truths, mattes


def _gap(alpha: np.ndarray) -> np.ndarray:
    """The core of the ring's gap (away from its rim)."""
    return alpha[19:26, 19:26]


def test_a_hole_kept_between_two_frames_that_show_it_is_opened() -> None:
    """Frames 1 and 4 kept the gap opaque between two frames that found it. The eye's white, as background-coloured,
    lies on no neighbour's hole and stays; the frames that found the gap are left as they are."""
    images, truths, mattes = _ring_scene()

    opened = open_holes(h264(images, 23), mattes)

    for t in MISSED:
        alpha, patch = opened.alphas[t], opened.patches[t]
        assert (_gap(alpha) < 0.05).all() and (_gap(mattes[t]) == 1).all()
        assert patch is not None and patch.region[22, 22] and not patch.region[22, 48]
        np.testing.assert_array_equal(alpha[:, 38:], mattes[t][:, 38:])  # the eye is untouched
    for t in FOUND:
        assert opened.patches[t] is None
        np.testing.assert_array_equal(opened.alphas[t], mattes[t])
    before = np.mean([metrics.sad(m, t) for m, t in zip(mattes, truths, strict=True)])
    after = np.mean([metrics.sad(a, t) for a, t in zip(opened.alphas, truths, strict=True)])
    assert after < 0.5 * before, (before, after)


@pytest.mark.parametrize("finder", [2, 1])
def test_one_frames_finding_does_not_spread(finder: int) -> None:
    """Only one frame's matte found the gap: its neighbours have it on one side only (frame 0 has no other side), so
    nothing is opened (per-frame matting also cuts white paint now and then, and that must not spread)."""
    images, _, mattes = _ring_scene(found=(finder,))

    opened = open_holes(h264(images, 23), mattes)

    assert opened.patches == [None] * FRAMES


def test_a_speck_smaller_than_a_hole_is_not_opened() -> None:
    """The speck lies on holes of frames 0 and 2 in frame 1, but is too small to be a hole worth opening
    (:data:`~gpu_activity_worker.engines.classical.HOLE_MIN_AREA`): paint, as it is there, stays."""
    images, _, mattes = _ring_scene()

    opened = open_holes(h264(images, 18), mattes)

    assert (opened.alphas[1][SPECK] == 1).all()


def test_paint_moving_onto_the_open_background_stays() -> None:
    """The eye jumps, so its white lies on its neighbours' open background: only a neighbour's holes (background the
    subject encloses) are evidence, never where the subject merely was not."""
    images, _, mattes = _ring_scene(jumping_eye=True)

    opened = open_holes(h264(images, 23), mattes)

    for alpha, matte in zip(opened.alphas, mattes, strict=True):
        np.testing.assert_array_equal(alpha[:, 38:], matte[:, 38:])


def test_a_clean_frame_keeps_its_own_hole_decision() -> None:
    """Without a codec's noise the matte's own hole test is exact: nothing is opened."""
    images, _, mattes = _ring_scene()

    opened = open_holes(images, mattes)

    assert opened.patches == [None] * FRAMES
    for alpha, matte in zip(opened.alphas, mattes, strict=True):
        np.testing.assert_array_equal(alpha, matte)


def _to_alpha8(alpha: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(alpha * 255), 0, 255).astype(np.uint8)


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def test_stabilise_emoji_reads_and_stores_refs(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    images, truths = _scene(STILL[:4])
    mattes = _flickering(truths)
    sources = [store.put(source_key(f"src-{t}.png"), _png(image), "image/png") for t, image in enumerate(images)]
    cutouts = []
    for t, (image, matte) in enumerate(zip(images, mattes, strict=True)):
        rgba = np.dstack([image, _to_alpha8(matte)])
        cutouts.append(store.put(source_key(f"matte-{t}.png"), encode_png(rgba), "image/png"))
    request = StabiliseEmojiInput(
        mode=TemporalMode.STABILISE,
        sources=sources,
        mattes=cutouts,
        output_keys=[stable_key(t) for t in range(4)],
    )

    output = stabilise_emoji(request, store, Pipelines(builtin_steps()))

    assert [ref.uri.endswith(stable_key(t)) for t, ref in enumerate(output.mattes)] == [True] * 4
    assert output.changed_pixels > 0
    stored = [np.asarray(Image.open(io.BytesIO(store.get(ref)))) for ref in output.mattes]
    for rgba, image in zip(stored, images, strict=True):
        assert rgba.shape == (SIZE, SIZE, 4)
        np.testing.assert_array_equal(rgba[..., :3], image)  # the cut-outs keep their colours
    flicker = [s[..., 3] / 255 for s in stored]
    assert metrics.dtssd(flicker, truths) < 0.3 * metrics.dtssd(mattes, truths)
    # The same request gives the same bytes (a retry overwrites its own output).
    again = stabilise_emoji(request, store, Pipelines(builtin_steps()))
    assert [ref.sha256 for ref in again.mattes] == [ref.sha256 for ref in output.mattes]

    broken = request.model_copy(
        update={"mattes": [sources[0], store.put(source_key("bad.png"), b"not a png", "image/png"), *cutouts[2:]]}
    )
    with pytest.raises(CorruptImageError):
        stabilise_emoji(broken, store, Pipelines(builtin_steps()))


def test_stabilise_emoji_opens_a_missed_hole_and_repaints_its_edge(tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    images, _, mattes = _ring_scene()
    frames = h264(images, 23)
    sources = [store.put(source_key(f"src-{t}.png"), _png(frame), "image/png") for t, frame in enumerate(frames)]
    cutouts = [
        store.put(source_key(f"matte-{t}.png"), encode_png(np.dstack([frame, _to_alpha8(matte)])), "image/png")
        for t, (frame, matte) in enumerate(zip(frames, mattes, strict=True))
    ]
    request = StabiliseEmojiInput(
        mode=TemporalMode.STABILISE,
        sources=sources,
        mattes=cutouts,
        output_keys=[stable_key(t) for t in range(FRAMES)],
    )

    output = stabilise_emoji(request, store, Pipelines(builtin_steps()))

    stored = [np.asarray(Image.open(io.BytesIO(store.get(ref)))) for ref in output.mattes]
    for t in MISSED:
        rgba, frame = stored[t], frames[t]
        assert (_gap(rgba[..., 3]) <= 12).all()
        repainted = (rgba[..., :3] != frame).any(axis=2)
        assert repainted[10:35, 10:35].any() and not repainted[:, 40:].any()  # around the gap only, not the eye


def test_the_request_refuses_none_and_unpaired_lists() -> None:
    ref = {"uri": "file:///x.png", "sha256": "0" * 64, "size_bytes": 1, "media_type": "image/png"}
    with pytest.raises(ValueError, match="none stabilises nothing"):
        StabiliseEmojiInput(
            mode=TemporalMode.NONE, sources=[ref] * 2, mattes=[ref] * 2, output_keys=[stable_key(0), stable_key(1)]
        )
    with pytest.raises(ValueError, match="2 sources, 3 mattes and 2 output keys"):
        StabiliseEmojiInput(
            mode=TemporalMode.STABILISE, sources=[ref] * 2, mattes=[ref] * 3, output_keys=[stable_key(0), stable_key(1)]
        )
    with pytest.raises(ValueError, match="at least 2"):
        StabiliseEmojiInput(mode=TemporalMode.STABILISE, sources=[ref], mattes=[ref], output_keys=[stable_key(0)])
    with pytest.raises(ValueError, match="Input should be 'none', 'stabilise' or 'sam2'"):
        EmojiSetInput(character_prompt="a cat", temporal="blur")
