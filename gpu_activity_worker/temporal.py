"""Temporal consistency of an emoji's frames: the alpha stops flickering where the picture did not change, and a hole
kept opaque in one frame between two that show it is opened.

Each frame of an emoji is matted on its own, so where nothing moved, the alpha of consecutive frames still differs a
little (a codec's noise moves an edge pixel across a threshold, a hole is found in one frame and not the next): the
animation shimmers at its still edges, which dtSSD measures. Two remedies, chosen by ``EmojiSetInput.temporal``:

``stabilise`` (:func:`open_holes`, then :func:`stabilise_alphas`; weight-free, numpy and scipy only)
    0. Holes (:func:`open_holes`). Through a codec, a hole through the subject (the background seen between an arm
       and the body) and white paint look alike in one frame, so per-frame matting finds a hole in some frames and
       keeps it opaque in others, and the hole flickers. An area a frame's matte keeps opaque that is coloured like
       the background (within its tolerance), is not small (``classical``'s ``HOLE_MIN_AREA`` of the frame) and lies
       for most of its area (:data:`HOLE_OVERLAP`) on a hole of the frame before and on a hole of the frame after
       (background the subject encloses there) is a hole too: it is cut out and its edge re-estimated by
       ``defringe``. Both neighbours must show it, so one frame's finding never spreads: per-frame matting also cuts
       white paint now and then, and carried along the clip such a cut took an emoji's big white eyes out of every
       frame. A neighbour's open background is no evidence either: where the subject moved, its paint lies where the
       background was. Only frames a codec touched are opened
       (:func:`~gpu_activity_worker.engines.classical.touched_by_codec`): on a clean frame the matte's own test is
       exact.
    1. Change. For each pair of consecutive frames, the per-pixel RGB distance of the sources, averaged over 3x3
       (:data:`NOISE_WINDOW`, which averages a codec's independent noise down and keeps an edge's move), is compared
       with a threshold: the larger of :data:`CHANGE_FLOOR` (above 99.9% of what H.264 at CRF 18-28 leaves on still
       pixels, edges included, measured on the benchmark's clips) and :data:`NOISE_TO_THRESHOLD` times the 99th
       percentile of that distance over the pixels both mattes call background, :data:`NOISE_CLEARANCE` away from
       the subject (a noisier clip raises it).
    2. Reach. A matte's alpha at a pixel depends on the picture around it (the defringe band, the flood fill's
       connectivity), so a changed pixel counts as changed for every pixel within :data:`CHANGE_RADIUS`: a pixel is
       unchanged only when its whole neighbourhood is.
    3. Runs. Per pixel, the frames are cut into runs of consecutive frames linked by unchanged pairs. Within a run of
       two or more frames each frame takes the run's temporal median of the alpha; everything that moved, and a
       neighbourhood around it, keeps its own alpha exactly, so a moving edge is never smeared.
    Linear, not cyclic: the pair (last, first) of a looping emoji is not linked.

``sam2`` (:func:`sam2_consistent`)
    SAM 2's video memory tracks the subject's mask of the first frame through the others
    (:func:`gpu_activity_worker.engines.sam2.propagate_masks`), and each frame's alpha is reconciled with its tracked
    mask by the ``sam2`` refiner's rule (:func:`gpu_activity_worker.engines.sam2.refine_alpha`): the frame's own soft
    edge stays within the edge band, the tracked silhouette wins beyond it (a hole found in one frame only, a blob
    kept in one frame only). Then the weight-free ``stabilise`` runs on the result.

:func:`stabilise_emoji` is the GPU activity's core: read the picked frames' sources and mattes, stabilise, store the
mattes (their alpha replaced, their RGB kept except where a hole was opened) under the keys asked for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from core.artifacts import ArtifactStore, get_in_set
from gpu_activity_worker.engines.base import Background
from gpu_activity_worker.engines.classical import HOLE_MIN_AREA, touched_by_codec
from gpu_activity_worker.engines.defringe import BAND, SNAP, background_around, defringe
from gpu_activity_worker.matting import SAM2_STEP, decode_rgb, decode_rgba, encode_png
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import UnsupportedImageError
from workflows.contract import StabiliseEmojiInput, StabiliseEmojiOutput, TemporalMode

_FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)

NOISE_WINDOW = 3
"""Side of the square the sources' per-pixel change is averaged over before it is compared with the threshold."""
CHANGE_FLOOR = 8 / 255
"""Smallest averaged RGB distance (RGB in [0, 1]) that counts as a change. Still pixels of the benchmark's clips
after H.264 (CRF 18 / 23 / 28, edges and ringing included) stay below 4.4 / 6.0 / 8.3 in 99.9% of cases (max 21, in
isolated spots that a single window holds)."""
NOISE_TO_THRESHOLD = 3.0
"""Threshold per unit of the 99th percentile of the background's averaged change."""
CHANGE_RADIUS = 3
"""Pixels around a change that count as changed too (the reach of the matting steps' neighbourhoods)."""
NOISE_CLEARANCE = 8
"""Background pixels the noise is measured on are at least this far from any pixel either matte calls subject, so a
moving edge's change, spread by the averaging window, never counts as noise."""

HOLE_OVERLAP = 0.5
"""Smallest share of an opaque, background-coloured area that must lie on a hole of each neighbouring frame for the
area to be a hole too (see the module docstring). Measured with ``classical`` at H.264 CRF 23 on the first 120 of the
tune part's 210 animations (8 frames each), against ``stabilise`` without this step: over white SAD 0.2057 -> 0.2021,
MSE 1.43e-3 -> 1.37e-3; over a tint SAD 0.2223 -> 0.2210; clean frames unchanged. Carrying a finding from frame to
frame instead (one neighbour's hole enough, holes opened so counting for the next frame) gave 0.177 over white on the
same animations, and on the held-out part cut both big white eyes of a face with rolling eyes (1f644) out of every
frame, because one frame's matte had cut them (SAD 0.75 -> 6.15). The other limits came from cases: with a
neighbour's open background as evidence, a pale cloud over a tint lost the bite one frame's matte had taken out of
it in every frame; without the area floor, more paint went over the tint (928 pixels against 462, chained); on clean
frames, where the matte's own test is exact, paint went over the tint (SAD 0.1078 -> 0.1081, chained)."""


class FramesMismatchError(UnsupportedImageError, ValueError):
    """An emoji's frames cannot be stabilised together: fewer than two, or not the same size (reported as
    ``UnsupportedImage``: the same frames fail again)."""


def _check(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> tuple[int, int]:
    if len(images) != len(alphas):
        raise FramesMismatchError(f"{len(images)} source frames but {len(alphas)} alphas")
    if len(images) < 2:
        raise FramesMismatchError(f"stabilising needs at least 2 consecutive frames, got {len(images)}")
    shape = images[0].shape
    for index, (image, alpha) in enumerate(zip(images, alphas, strict=True)):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or image.shape != shape:
            raise FramesMismatchError(
                f"frame {index}: source frames must be uint8 HxWx3 of one size; frame 0 is {shape}, "
                f"frame {index} is {image.dtype} {image.shape}"
            )
        if alpha.shape != shape[:2]:
            raise FramesMismatchError(f"frame {index}: alpha is {alpha.shape}, its source {shape[:2]}")
    return shape[0], shape[1]


def change_threshold(change: np.ndarray, background: np.ndarray) -> float:
    """The averaged RGB distance above which a pixel changed between two frames (see the module docstring).

    Args:
        change: float HxW, the sources' RGB distance averaged over :data:`NOISE_WINDOW`.
        background: bool HxW, where the noise is measured: plain background in both frames, away from the subject.
    """
    if not background.any():
        return CHANGE_FLOOR
    return max(CHANGE_FLOOR, NOISE_TO_THRESHOLD * float(np.quantile(change[background], 0.99)))


def changed_between(before: np.ndarray, after: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Where the picture changed from ``before`` to ``after`` (uint8 HxWx3), its reach included (bool HxW)."""
    distance = np.sqrt(((after.astype(np.float32) - before.astype(np.float32)) ** 2).sum(axis=2)) / 255
    change = ndimage.uniform_filter(distance, NOISE_WINDOW, mode="nearest")
    clear = ndimage.binary_erosion(background, iterations=NOISE_CLEARANCE, border_value=1)
    changed = change > change_threshold(change, clear)
    if not changed.any():
        return changed
    reach = ndimage.generate_binary_structure(2, 2)
    return np.asarray(ndimage.binary_dilation(changed, structure=reach, iterations=CHANGE_RADIUS))


def unchanged_runs(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> np.ndarray:
    """Per pixel, which run of unchanged consecutive frames each frame belongs to: int (T, H, W), counting up from 0;
    frames t-1 and t share a run at a pixel exactly when the picture did not change there (:func:`changed_between`).
    """
    _check(images, alphas)
    labels = np.zeros((len(images), *images[0].shape[:2]), dtype=np.int32)
    for t in range(1, len(images)):
        background = (alphas[t - 1] <= 0) & (alphas[t] <= 0)
        labels[t] = labels[t - 1] + changed_between(images[t - 1], images[t], background)
    return labels


def stabilise_alphas(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each frame's alpha, with the temporal median of its run of unchanged frames where the picture stood still.

    Args:
        images: The frames' sources in order, uint8 HxWx3, one size.
        alphas: Their alphas, float HxW in [0, 1].

    Returns:
        float32 HxW alphas, one per frame; a pixel that changed (or is within :data:`CHANGE_RADIUS` of a change)
        between a frame and both its neighbours keeps that frame's alpha exactly.

    Raises:
        FramesMismatchError: Fewer than two frames, or frames and alphas not all of one size.
    """
    _check(images, alphas)
    labels = unchanged_runs(images, alphas)
    stack = np.stack([np.asarray(alpha, dtype=np.float32) for alpha in alphas])
    varies = stack.max(axis=0) != stack.min(axis=0)  # elsewhere every median is the alpha itself
    stabilised = []
    for t in range(len(alphas)):
        same = labels == labels[t]
        shared = varies & (same.sum(axis=0) > 1)
        out = stack[t].copy()
        if shared.any():
            values = np.where(same[:, shared], stack[:, shared], np.nan)
            out[shared] = np.nanmedian(values, axis=0)
        stabilised.append(out)
    return stabilised


def _to_uint8(values: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class ColourPatch:
    """Where :func:`open_holes` re-estimated a frame's cut-out, and the straight colours it found there."""

    region: np.ndarray
    """bool HxW."""
    colours: np.ndarray
    """float32 HxWx3 in [0, 1], meaningful inside ``region``."""

    def paint(self, rgb: np.ndarray) -> np.ndarray:
        """A cut-out's colours (uint8 HxWx3) with this patch's painted over them."""
        return np.where(self.region[..., None], _to_uint8(self.colours), rgb)


@dataclass(frozen=True)
class ConsistentFrames:
    """An emoji's frames made consistent: their alphas, and per frame where its colours changed too."""

    alphas: list[np.ndarray]
    """float32 HxW, in frame order."""
    patches: list[ColourPatch | None]
    """Per frame, where :func:`open_holes` re-estimated its cut-out (``None``: only the alpha may have changed)."""


def _enclosed(background: np.ndarray) -> np.ndarray:
    """The parts of a background (bool HxW) that do not touch the frame border: the holes through the subject."""
    labels, count = ndimage.label(background, structure=_FOUR_CONNECTED)
    border = np.zeros(count + 1, dtype=bool)
    border[np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])] = True
    border[0] = True
    return ~border[labels]


def _missed_holes(
    image: np.ndarray, opaque: np.ndarray, before: np.ndarray, after: np.ndarray
) -> tuple[np.ndarray, Background | None]:
    """The areas of one frame that are holes its matte kept opaque (bool HxW), and the background around its subject.

    They are the opaque areas coloured like the plain background (within its tolerance), of at least ``classical``'s
    ``HOLE_MIN_AREA`` of the frame, that lie on the holes ``before`` and on the holes ``after`` (the neighbouring
    frames') for at least :data:`HOLE_OVERLAP` of their area; none where the background is not plain or no codec
    touched the frame.
    """
    picture = image.astype(np.float32) / 255
    background = background_around(picture, opaque.astype(np.float32))
    if background is None or not touched_by_codec(picture, background, ~opaque):
        return np.zeros_like(opaque), background
    coloured = np.linalg.norm(picture - background.colour, axis=2) <= background.tolerance
    labels, count = ndimage.label(coloured & opaque, structure=_FOUR_CONNECTED)
    area = np.maximum(np.bincount(labels.ravel(), minlength=count + 1), 1)
    shares = [
        np.bincount(labels.ravel(), weights=holes.ravel(), minlength=count + 1) / area for holes in (before, after)
    ]
    missed = (area >= HOLE_MIN_AREA * labels.size) & (np.minimum(*shares) >= HOLE_OVERLAP)
    missed[0] = False
    return missed[labels], background


def open_holes(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> ConsistentFrames:
    """Each frame's alpha with the holes its matte missed and both neighbouring frames show opened (see the module
    docstring), the edge around them re-estimated by ``defringe``. The first and last frames have one neighbour and are
    left as they are.

    Args:
        images: The frames' sources in order, uint8 HxWx3, one size.
        alphas: Their alphas, float HxW in [0, 1].

    Raises:
        FramesMismatchError: Fewer than two frames, or frames and alphas not all of one size.
    """
    _check(images, alphas)
    opaque = [np.asarray(alpha) >= 0.5 for alpha in alphas]
    holes = [_enclosed(~mask) for mask in opaque]
    opened = [np.asarray(alpha, dtype=np.float32) for alpha in alphas]
    patches: list[ColourPatch | None] = [None] * len(alphas)
    for t in range(1, len(alphas) - 1):
        if not (holes[t - 1].any() and holes[t + 1].any()):
            continue  # most emoji have no hole: no background to fit
        missed, background = _missed_holes(images[t], opaque[t], holes[t - 1], holes[t + 1])
        if not missed.any():
            continue
        refined, colours = defringe(
            images[t].astype(np.float32) / 255, (opaque[t] & ~missed).astype(np.float32), background
        )
        # The edge band may move by up to SNAP pixels and spans BAND on either side: beyond that nothing changed.
        region = ndimage.binary_dilation(missed, iterations=SNAP + BAND)
        opened[t] = np.where(region, refined, opened[t])
        patches[t] = ColourPatch(region, colours)
    return ConsistentFrames(opened, patches)


def stabilise(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> ConsistentFrames:
    """The ``stabilise`` mode: :func:`open_holes`, then :func:`stabilise_alphas`.

    Args:
        images: The frames' sources in order, uint8 HxWx3, one size.
        alphas: Their alphas, float HxW in [0, 1].

    Raises:
        FramesMismatchError: Fewer than two frames, or frames and alphas not all of one size.
    """
    opened = open_holes(images, alphas)
    return ConsistentFrames(stabilise_alphas(images, opened.alphas), opened.patches)


def reconcile_with_track(alphas: Sequence[np.ndarray], masks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each frame's alpha reconciled with its tracked silhouette by the ``sam2`` refiner's rule
    (:func:`~gpu_activity_worker.engines.sam2.refine_alpha`, which is numpy: imported here without torch)."""
    from gpu_activity_worker.engines.sam2 import refine_alpha

    if len(alphas) != len(masks):
        raise FramesMismatchError(f"{len(alphas)} alphas but {len(masks)} tracked masks")
    return [
        refine_alpha(np.asarray(alpha, dtype=np.float32), mask)[0] for alpha, mask in zip(alphas, masks, strict=True)
    ]


Tracker = Callable[[list[np.ndarray], np.ndarray], list[np.ndarray]]
"""Tracks the first frame's mask (bool HxW) through the frames (uint8 HxWx3): one bool mask per frame."""


def sam2_consistent(images: Sequence[np.ndarray], alphas: Sequence[np.ndarray], track: Tracker) -> ConsistentFrames:
    """The alphas made consistent with the subject tracked from the first frame, then stabilised (:func:`stabilise`).

    Args:
        images: The frames' sources in order, uint8 HxWx3, one size.
        alphas: Their alphas, float HxW in [0, 1].
        track: The tracker, e.g. SAM 2's video propagation (:func:`sam2_tracker`).

    Raises:
        FramesMismatchError: As for :func:`stabilise`.
        UnsupportedImageError: The first frame's alpha holds no subject.
    """
    _check(images, alphas)
    first = np.asarray(alphas[0]) > 0.5
    if not first.any():
        raise UnsupportedImageError("sam2 tracks the subject of the first frame, and its matte has none")
    masks = track(list(images), first)
    return stabilise(images, reconcile_with_track(alphas, masks))


def sam2_tracker(pipelines: Pipelines, variant: str | None = None) -> Tracker:
    """SAM 2's video propagation with the worker's ``sam2`` step (built once, shared with the pipelines using it)."""
    from gpu_activity_worker.engines.sam2 import Sam2Step, propagate_masks

    name = SAM2_STEP if variant is None else f"{SAM2_STEP}:{variant}"
    built = pipelines.step(name)
    step = getattr(built, "step", built)  # behind a micro-batcher when the worker batches
    if not isinstance(step, Sam2Step):
        raise TypeError(f"step {name!r} is {type(step).__name__}, not the SAM2 step")

    def track(frames: list[np.ndarray], first: np.ndarray) -> list[np.ndarray]:
        return propagate_masks(step, frames, first)

    return track


def stabilise_emoji(
    request: StabiliseEmojiInput,
    store: ArtifactStore,
    pipelines: Pipelines,
    gpu_slot: contextlib.AbstractContextManager[object] | None = None,
) -> StabiliseEmojiOutput:
    """Read an emoji's picked frames (sources and mattes, in order), make their alpha consistent, store the new
    mattes (each matte's RGB kept, except around an opened hole) under ``request.output_keys``. Blocking: run it in
    a thread.

    Args:
        gpu_slot: Held while SAM 2 tracks the subject (``sam2`` mode only; the weight-free stabiliser needs no GPU).

    Raises:
        ArtifactError: A source or matte is missing or does not match its reference, or a matte could not be stored.
        CorruptImageError: A source or matte is not a readable image.
        FramesMismatchError: The frames are not all of one size.
        UnsupportedImageError: ``sam2``: the first frame's matte has no subject.
    """
    started = time.perf_counter()
    within = request.output_keys[0]  # every output key lies in this one set (the contract checks it)
    images = [decode_rgb(get_in_set(store, source, within), source.uri) for source in request.sources]
    mattes = [decode_rgba(get_in_set(store, matte, within), matte.uri) for matte in request.mattes]
    alphas = [matte[..., 3].astype(np.float32) / 255 for matte in mattes]
    if request.mode is TemporalMode.SAM2:
        track = sam2_tracker(pipelines)
        with gpu_slot or contextlib.nullcontext():
            consistent = sam2_consistent(images, alphas, track)
    else:
        consistent = stabilise(images, alphas)
    refs, changed = [], 0
    for key, matte, alpha, patch in zip(
        request.output_keys, mattes, consistent.alphas, consistent.patches, strict=True
    ):
        new_alpha = _to_uint8(alpha)
        changed += int((new_alpha != matte[..., 3]).sum())
        rgb = matte[..., :3] if patch is None else patch.paint(matte[..., :3])
        rgba = np.dstack([rgb, new_alpha])
        height, width = new_alpha.shape
        refs.append(store.put(key, encode_png(rgba), "image/png", width=width, height=height))
    return StabiliseEmojiOutput(
        mattes=refs,
        changed_pixels=changed,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )
