"""The SAM2 refiner ``sam2``: SAM 2.1, prompted by the coarse alpha, fixes the silhouette.

SAM 2 (Ravi et al. 2024, arXiv 2408.00714) segments the object a prompt (box, points, mask) points at, in images and
across the frames of a video. A coarse step knows roughly where the subject is but can punch holes in it (white
eyes taken for background), miss thin parts (antennae, whiskers) or keep stray blobs; SAM2, asked about that subject,
usually gets the silhouette right but its edge is coarse (it predicts a 256x256 mask for its 1024x1024 input). So
this step takes the silhouette from SAM2 and the edge from the coarse step.

1. Prompts (:func:`prompts_from_alpha`), from the coarse mask ``alpha > 0.5``: its bounding box widened by
   :data:`BOX_MARGIN`; positive points at the deepest pixels of the subject (distance-transform maxima, spread out,
   so every part wider than the edge band, detached ones included, gets a point); negative points at the background
   pixels farthest from the subject.
2. Mask. One mask (``multimask_output=False``): SAM2 is trained to give its three ambiguity masks only for a single
   click and its single mask for several prompts (``multimask_max_pt_num: 1`` in its configs; a box counts as two
   points), and its builders' default post-processing falls back to the best-scoring of the three when the single
   mask is unstable. A box plus points is not ambiguous, so the model's own choice is used.
3. Combination (:func:`refine_alpha`). Where SAM2 and the coarse mask agree, or disagree only within
   :func:`edge_band` pixels of the coarse edge (SAM2's edge is that coarse), the coarse alpha with its soft edge is
   kept. Disagreeing pixels farther from the coarse edge (a missing part, a wrongly kept region), with the
   disagreeing pixels up to the band's width around them (so a restored antenna joins the body again), and whole
   regions of the coarse mask that SAM2 overrules (a hole it fills, a blob it drops) take SAM2's verdict: alpha 1
   or 0; so does the coarse alpha's soft fringe (up to the band's width) next to them, so that a dropped blob leaves
   no faint ring and a filled hole no half-transparent rim.
   Run ``defringe`` after this step to turn the new edges into soft alpha and clean colours. When SAM2 would change
   more than :data:`MAX_CHANGE` of the subject's area, it has most likely misread the prompt: the coarse alpha stays.

The model is loaded once per step with ``build_sam2_video_predictor``: a ``SAM2VideoPredictor`` is a ``SAM2Base``
that overrides nothing ``SAM2ImagePredictor`` uses, so one copy of the weights serves images (:class:`Sam2Step`) and
videos (:func:`propagate_masks`). Thread safety: SAM2's predictors keep per-image (per-video) state, the model keeps
none that a forward pass changes, so each call makes its own predictor (about 5 ms) or inference state around the
shared model and concurrent calls need no lock. ``apply_batch`` embeds the images with ``set_image_batch`` in one
backbone pass and decodes each with ``predict_batch``: on the CPU its masks equal ``apply``'s bit for bit.
"""

from __future__ import annotations

import logging
import math
import pickle
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sam2.build_sam import build_sam2_video_predictor
from sam2.sam2_image_predictor import SAM2ImagePredictor
from sam2.sam2_video_predictor import SAM2VideoPredictor
from scipy import ndimage

from gpu_activity_worker.device import autocast, torch_device, torch_precision
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.vocabulary import InvalidPipelineError, UnsupportedImageError
from gpu_activity_worker.weights import WeightsMissingError, require

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variant:
    """One SAM 2.1 model size.

    Attributes:
        weights: The weight set's name (``popcon models fetch`` name and folder under the model dir).
        config: The Hydra config shipped inside the ``sam2`` package.
        checkpoint: The checkpoint file in the weight set's folder.
    """

    weights: str
    config: str
    checkpoint: str


VARIANTS = {
    "tiny": Variant("sam2.1-hiera-tiny", "configs/sam2.1/sam2.1_hiera_t.yaml", "sam2.1_hiera_tiny.pt"),
    "small": Variant("sam2.1-hiera-small", "configs/sam2.1/sam2.1_hiera_s.yaml", "sam2.1_hiera_small.pt"),
    "base-plus": Variant("sam2.1-hiera-base-plus", "configs/sam2.1/sam2.1_hiera_b+.yaml", "sam2.1_hiera_base_plus.pt"),
    "large": Variant("sam2.1-hiera-large", "configs/sam2.1/sam2.1_hiera_l.yaml", "sam2.1_hiera_large.pt"),
}

DEFAULT_VARIANT = "tiny"

LOW_RES_SIDE = 256
"""Side of SAM2's predicted mask (a quarter of its 1024 input), upsampled to the image afterwards."""

EDGE_BAND_CELLS = 2.0
MIN_EDGE_BAND = 2
"""SAM2's edge is trusted to within this many of its mask cells (at least MIN_EDGE_BAND pixels): closer to the coarse
edge, a disagreement is SAM2's coarse resolution, not a correction."""

BOX_MARGIN = 0.1
"""The box prompt is the coarse mask's bounding box widened by this share of its size on each side (SAM2 is trained
with boxes jittered by about as much), so a thin part the coarse step missed can still be inside it."""

POSITIVE_POINTS = 6
NEGATIVE_POINTS = 3
"""Most positive and negative point prompts."""

POINT_CLEARANCE = 2.0
"""Points stand at least this many edge bands from the coarse edge (all but the deepest positive one, which is always
given): never on an edge SAM2 may draw differently, and a speck of the coarse mask gets no point of its own."""

MAX_CHANGE = 0.5
"""Largest area SAM2 may change, as a share of the coarse subject's area, before its mask is taken as a misreading."""


def edge_band(shape: tuple[int, ...]) -> int:
    """Pixels around the coarse edge within which SAM2's disagreement is taken as its own edge imprecision.

    Two of SAM2's 256 mask cells across the image's longer side, at least :data:`MIN_EDGE_BAND`.
    """
    return max(MIN_EDGE_BAND, math.ceil(EDGE_BAND_CELLS * max(shape[0], shape[1]) / LOW_RES_SIDE))


@dataclass(frozen=True)
class Prompts:
    """SAM2 prompts for one image, in pixel coordinates.

    Attributes:
        box: float32 (4,), x0, y0, x1, y1.
        points: float32 (N, 2), x, y of each point (pixel centres).
        labels: int32 (N,), 1 for a positive (subject) point, 0 for a negative (background) one.
    """

    box: np.ndarray
    points: np.ndarray
    labels: np.ndarray


def _part_centres(subject: np.ndarray, depth: np.ndarray, minimum: float) -> list[tuple[int, int]]:
    """The deepest pixel (y, x) of each 8-connected part of ``subject`` at least ``minimum`` deep, deepest first.

    The deepest part always counts, however thin.
    """
    labels, _ = ndimage.label(subject, structure=ndimage.generate_binary_structure(2, 2))
    parts: list[tuple[float, int, int]] = []
    for label, box in enumerate(ndimage.find_objects(labels), start=1):
        part_depth = np.where(labels[box] == label, depth[box], -1.0)
        y, x = np.unravel_index(int(np.argmax(part_depth)), part_depth.shape)
        parts.append((float(part_depth[y, x]), int(y) + box[0].start, int(x) + box[1].start))
    parts.sort(key=lambda part: -part[0])
    return [(y, x) for rank, (value, y, x) in enumerate(parts) if rank == 0 or value >= minimum]


def _spread_maxima(
    depth: np.ndarray, count: int, minimum: float, start: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """Up to ``count`` points (y, x): ``start``, then maxima of ``depth`` of at least ``minimum``, deepest first.

    Each point's inscribed disc (radius = its depth) is excluded before the next maximum is taken, so the points
    spread along the subject's medial axis instead of clustering at one spot.
    """
    remaining = depth.astype(np.float64)
    found: list[tuple[int, int]] = []
    candidates = list(start)
    while len(found) < count:
        if candidates:
            y, x = candidates.pop(0)
        else:
            y, x = (int(v) for v in np.unravel_index(int(np.argmax(remaining)), depth.shape))
            if remaining[y, x] <= 0 or remaining[y, x] < minimum:
                break
        found.append((y, x))
        radius = float(depth[y, x])
        top, left = max(0, y - math.floor(radius)), max(0, x - math.floor(radius))
        window = remaining[top : y + math.floor(radius) + 1, left : x + math.floor(radius) + 1]
        rows, cols = np.ogrid[top : top + window.shape[0], left : left + window.shape[1]]
        window[(rows - y) ** 2 + (cols - x) ** 2 <= radius**2] = 0.0
    return found


def prompts_from_alpha(alpha: np.ndarray) -> Prompts:
    """The box and point prompts for the subject of a coarse alpha (see the module docstring).

    Args:
        alpha: float HxW in [0, 1]; the subject is ``alpha > 0.5``, which must not be empty.

    Returns:
        The box; positive points at the deepest pixel of each separate part of the subject, then at further
        spread-out maxima of the depth (the frame counts as an edge); negative points at the background pixels
        farthest from the subject. Points keep :data:`POINT_CLEARANCE` edge bands from the edge, except the deepest
        positive one, which is always given.
    """
    subject = alpha > 0.5
    height, width = subject.shape
    band = edge_band(subject.shape)
    ys, xs = np.nonzero(subject)
    margin_x = max(band, BOX_MARGIN * (xs.max() + 1 - xs.min()))
    margin_y = max(band, BOX_MARGIN * (ys.max() + 1 - ys.min()))
    box = np.array(
        [
            max(0.0, xs.min() - margin_x),
            max(0.0, ys.min() - margin_y),
            min(float(width), xs.max() + 1 + margin_x),
            min(float(height), ys.max() + 1 + margin_y),
        ],
        dtype=np.float32,
    )
    clearance = POINT_CLEARANCE * band
    inside = ndimage.distance_transform_edt(np.pad(subject, 1))[1:-1, 1:-1]
    parts = _part_centres(subject, inside, clearance)
    positive = _spread_maxima(inside, POSITIVE_POINTS, clearance, parts)
    negative = _spread_maxima(_distance_to(subject), NEGATIVE_POINTS, clearance)
    points = np.array([(x + 0.5, y + 0.5) for y, x in positive + negative], dtype=np.float32)
    labels = np.array([1] * len(positive) + [0] * len(negative), dtype=np.int32)
    return Prompts(box, points, labels)


def _distance_to(target: np.ndarray) -> np.ndarray:
    """Distance of every pixel to the nearest ``target`` pixel; infinite when there is none."""
    if not target.any():
        return np.full(target.shape, np.inf)
    return np.asarray(ndimage.distance_transform_edt(~target))


def _whole_regions_overruled(region: np.ndarray, disagree: np.ndarray, structure: np.ndarray) -> np.ndarray:
    """The connected parts of ``region`` in which every pixel is in ``disagree``."""
    labels, count = ndimage.label(region, structure=structure)
    agreeing = np.bincount(labels.ravel(), weights=(~disagree).ravel(), minlength=count + 1)
    overruled = agreeing == 0
    overruled[0] = False
    return np.asarray(overruled[labels])


def refine_alpha(alpha: np.ndarray, sam_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Combine a coarse alpha with SAM2's mask of the same subject (the rule is in the module docstring).

    Args:
        alpha: float HxW in [0, 1], the coarse alpha.
        sam_mask: bool HxW, SAM2's mask.

    Returns:
        The refined alpha (float32 HxW) and where SAM2 overruled the coarse alpha (bool HxW; the refined alpha is 1
        where ``sam_mask`` is set there, else 0). Nothing is overruled when SAM2 would change more than
        :data:`MAX_CHANGE` of the subject's area.
    """
    subject = alpha > 0.5
    disagree = subject != sam_mask
    overruled = np.zeros_like(disagree)
    if disagree.any():
        band = edge_band(alpha.shape)
        eight, four = ndimage.generate_binary_structure(2, 2), ndimage.generate_binary_structure(2, 1)
        from_edge = np.where(subject, _distance_to(~subject), _distance_to(subject))
        seeds = disagree & (from_edge > band)
        if seeds.any():
            # Grown back by the band within the disagreement: a restored part reaches the body again, while SAM2's
            # imprecise edge next to it changes only within the band.
            overruled = ndimage.binary_dilation(seeds, structure=eight, iterations=band, mask=disagree)
        # 8-connected subject parts and 4-connected background parts, so a hole touching the outside background
        # only diagonally, through the outline, counts as enclosed.
        overruled |= _whole_regions_overruled(subject, disagree, eight)
        overruled |= _whole_regions_overruled(~subject, disagree, four)
        # The coarse alpha's soft fringe next to an overruled region goes with it (no faint ring is left around a
        # dropped blob, no half-transparent rim inside a filled hole).
        soft = (alpha > 0) & (alpha < 1)
        for verdict in (sam_mask, ~sam_mask):
            region = overruled & verdict
            if region.any():
                overruled |= ndimage.binary_dilation(
                    region, structure=eight, iterations=band, mask=region | (soft & verdict)
                )
    changed = int(overruled.sum())
    if changed > MAX_CHANGE * int(subject.sum()):
        logger.warning(
            "sam2 would change %d pixels, more than %.0f%% of the coarse subject's %d: kept the coarse alpha",
            changed,
            MAX_CHANGE * 100,
            int(subject.sum()),
        )
        overruled = np.zeros_like(disagree)
    refined = np.where(overruled, sam_mask, alpha).astype(np.float32)
    return refined, overruled


class Sam2Step:
    """Refiner: SAM2's silhouette with the coarse step's edge (see the module docstring). Thread-safe.

    Attributes:
        model: The loaded SAM2 model (also what :func:`propagate_masks` runs).
        device: ``cpu`` or ``cuda``.
        precision: ``fp32``, ``fp16`` or ``bf16`` (autocast): see :func:`~gpu_activity_worker.device.torch_precision`.
    """

    def __init__(self, model: SAM2VideoPredictor, device: str, precision: str) -> None:
        self.model = model
        self.device = device
        self.precision = precision

    def apply(self, state: MatteState) -> MatteState:
        """Fix the silhouette of ``alpha``; where pixels become subject, ``foreground`` becomes the image colour.

        Raises:
            ValueError: No coarse step ran before this one.
            UnsupportedImageError: The coarse alpha has no subject (nothing above 0.5).
        """
        return self.apply_batch([state])[0]

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        """:meth:`apply` for several images (of any sizes), embedded in one backbone pass; results equal ``apply``'s.

        Raises:
            ValueError: No coarse step ran before this one.
            UnsupportedImageError: A coarse alpha has no subject.
        """
        alphas = [_coarse_alpha(state) for state in states]
        prompts = [prompts_from_alpha(alpha) for alpha in alphas]
        predictor = SAM2ImagePredictor(self.model)
        with torch.inference_mode(), autocast(self.device, self.precision):
            # Float images in [0, 1] go in as they are: SAM2's ToTensor rescales only uint8 input.
            predictor.set_image_batch([state.image for state in states])
            masks, _, _ = predictor.predict_batch(
                point_coords_batch=[p.points for p in prompts],
                point_labels_batch=[p.labels for p in prompts],
                box_batch=[p.box for p in prompts],
                multimask_output=False,
            )
        return [_refined(state, alpha, mask[0] > 0.5) for state, alpha, mask in zip(states, alphas, masks, strict=True)]


def _coarse_alpha(state: MatteState) -> np.ndarray:
    """The coarse alpha of ``state``, which must hold a subject."""
    if state.alpha is None:
        raise ValueError("sam2 needs an alpha from a coarse step before it")
    if not (state.alpha > 0.5).any():
        raise UnsupportedImageError(
            "sam2 refines the subject of the coarse alpha, and the coarse step found none (no pixel with alpha "
            "above 0.5): use a coarse step that finds the subject in this image"
        )
    return state.alpha


def _refined(state: MatteState, alpha: np.ndarray, mask: np.ndarray) -> MatteState:
    """``state`` with the refined alpha, and the image colour as foreground where pixels became subject."""
    refined, overruled = refine_alpha(alpha, mask)
    foreground = state.foreground
    if foreground is not None:
        foreground = np.where((overruled & mask)[..., None], state.image, foreground).astype(np.float32)
    return replace(state, alpha=refined, foreground=foreground)


def create_step(variant: str | None, context: StepContext) -> Sam2Step:
    """The step factory: load the variant's checkpoint (``tiny`` by default) once, offline, onto the context's device.

    Raises:
        InvalidPipelineError: Unknown variant.
        WeightsMissingError: The checkpoint is not in the model folder, or is not this variant's SAM 2.1 checkpoint
            (the message names the fetch command).
        MattingError: ``cuda`` was asked for and there is none.
    """
    chosen = variant or DEFAULT_VARIANT
    if chosen not in VARIANTS:
        raise InvalidPipelineError(f"step 'sam2' has no variant {chosen!r} (variants: {sorted(VARIANTS)})")
    spec = VARIANTS[chosen]
    checkpoint = require(context.model_dir, spec.weights, must_contain=spec.checkpoint) / spec.checkpoint
    device = torch_device(context.device)
    try:
        model = build_sam2_video_predictor(spec.config, ckpt_path=str(checkpoint), device=device)
    except (RuntimeError, KeyError, pickle.UnpicklingError) as err:
        # torch lists every missing key: the first line says what went wrong.
        detail = (str(err).splitlines() or [""])[0][:200]
        raise WeightsMissingError(
            f"{checkpoint} is not a SAM 2.1 hiera {chosen} checkpoint ({type(err).__name__}: {detail}): "
            f"run `popcon models fetch {spec.weights}` again"
        ) from err
    return Sam2Step(model, device, torch_precision(device, context.precision))


def propagate_masks(
    step_or_model: Sam2Step | SAM2VideoPredictor, frames: list[np.ndarray], first_mask: np.ndarray
) -> list[np.ndarray]:
    """Carry the subject's mask on the first frame through the other frames with SAM2's video memory.

    Matting each frame of an animated emoji on its own lets the silhouette flicker; SAM2 tracks the masked object
    from frame to frame (attending to the first frame and up to 6 recent ones), so the per-frame masks stay
    consistent. The frames are written as JPEGs (quality 95, no chroma subsampling) to a temporary folder, which is
    what SAM2's ``init_state`` reads.

    Args:
        step_or_model: A :class:`Sam2Step`, or a ``SAM2VideoPredictor`` (its device sets the precision).
        frames: uint8 HxWx3 frames of one animation, all the same size.
        first_mask: HxW mask of the subject on ``frames[0]``: bool, or an alpha in [0, 1] (subject where above 0.5).

    Returns:
        One bool HxW mask per frame (the first is SAM2's reading of ``first_mask``).

    Raises:
        ValueError: No frames, frames that are not uint8 HxWx3 of one size, or a mask of another size.
        UnsupportedImageError: ``first_mask`` is empty.
    """
    if not frames:
        raise ValueError("propagate_masks needs at least one frame")
    shape = frames[0].shape
    if any(f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3 or f.shape != shape for f in frames):
        raise ValueError(f"frames must be uint8 HxWx3 arrays of one size; the first is {frames[0].dtype} {shape}")
    if first_mask.shape != shape[:2]:
        raise ValueError(f"first_mask is {first_mask.shape}, the frames are {shape[:2]}")
    mask = first_mask if first_mask.dtype == np.bool_ else first_mask > 0.5
    if not mask.any():
        raise UnsupportedImageError("propagate_masks needs a subject in first_mask, and it is empty")
    if isinstance(step_or_model, Sam2Step):
        model, device, precision = step_or_model.model, step_or_model.device, step_or_model.precision
    else:
        model = step_or_model
        device = model.device.type
        precision = torch_precision(device)
    masks: dict[int, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="popcon-sam2-") as folder:
        for index, frame in enumerate(frames):
            Image.fromarray(frame).save(Path(folder) / f"{index:05d}.jpg", quality=95, subsampling=0)
        with torch.inference_mode(), autocast(device, precision):
            video = model.init_state(folder, offload_video_to_cpu=True)
            model.add_new_mask(video, frame_idx=0, obj_id=1, mask=mask)
            for index, _, logits in model.propagate_in_video(video):
                masks[index] = (logits[0, 0] > 0).cpu().numpy()
    return [masks[index] for index in range(len(frames))]
