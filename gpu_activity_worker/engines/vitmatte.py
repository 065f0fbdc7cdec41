"""The ViTMatte refiner ``vitmatte``: re-predict the alpha in a band around the coarse step's edge.

ViTMatte (Yao et al. 2023, arXiv 2305.15272) is a trimap-based matting model: a plain ViT backbone (ViTDet, windowed
plus global attention) with a light convolutional detail branch. Given the image and a trimap it predicts a fine
alpha where the trimap says "unknown": hair, fur, soft or semi-transparent edges. It runs through transformers'
native ``VitMatteForImageMatting``, loaded offline from ``<model_dir>/vitmatte-small`` or ``vitmatte-base``.

1. Trimap (:func:`make_trimap`). Definite foreground is the coarse alpha at or above :data:`FOREGROUND_MIN`, eroded;
   definite background is the alpha at or below :data:`BACKGROUND_MAX` (i.e. ``1 - alpha`` high), eroded; the rest
   is the unknown band. The erosion radius (:func:`band_width`) is about 2% of the image's short side, at least
   :data:`MIN_BAND` pixels, so the band spans that many pixels on each side of a hard edge whatever the resolution.
   Only the coarse edge erodes the regions, not the frame, so a subject cut by the frame stays definite there.
2. Model. The image processor normalises the image, appends the trimap as a fourth channel and pads the bottom and
   right to a multiple of its ``size_divisor`` (32); the predicted alpha is cropped back to the image.
3. Merge. The coarse alpha is kept exactly in the definite regions and the model's alpha used only in the band, so
   the refiner can never punch holes into a solid subject or add specks to the background.

A coarse alpha with no unknown band (empty, full, or no edge) has nothing to refine: the state comes back unchanged.
ViTMatte estimates alpha only: the foreground colours are left as they are (run ``defringe`` after it to unmix them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy import ndimage
from transformers import VitMatteForImageMatting, VitMatteImageProcessor

from gpu_activity_worker.device import autocast, torch_device, torch_precision
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.vocabulary import InvalidPipelineError, UnsupportedImageError
from gpu_activity_worker.weights import require

WEIGHTS = {"small": "vitmatte-small", "base": "vitmatte-base"}
"""Weight set (``popcon models fetch`` name) of each variant."""

DEFAULT_VARIANT = "small"

FOREGROUND_MIN = 0.95
"""Coarse alpha at or above which a pixel counts as foreground before erosion."""

BACKGROUND_MAX = 0.05
"""Coarse alpha at or below which a pixel counts as background before erosion."""

BAND_FRACTION = 0.02
"""Erosion radius as a share of the image's short side: the band grows with the resolution of the edge detail."""

MIN_BAND = 3
"""Smallest erosion radius in pixels, so small images still get a band the model can work in."""

MAX_PIXELS = 1536 * 1536
"""Largest image refined. Each global-attention block of the backbone builds a (pixels / 256)^2 matrix per head: at
this size about 1 GB for ViTMatte-S in fp16 (2 GB for -B; twice that in fp32 on the CPU), growing with the square of
the pixel count."""

TRIMAP_BACKGROUND = 0
TRIMAP_UNKNOWN = 128
TRIMAP_FOREGROUND = 255
"""Trimap values, as in the ViTMatte demo trimaps (8-bit grey, which the image processor rescales to [0, 1])."""


def band_width(shape: tuple[int, ...]) -> int:
    """Erosion radius in pixels for an image of ``shape`` (H, W, ...): 2% of the short side, at least 3."""
    return max(MIN_BAND, round(BAND_FRACTION * min(shape[0], shape[1])))


def _eroded(mask: np.ndarray, radius: int) -> np.ndarray:
    """``mask`` eroded by a disc of ``radius`` pixels, without eroding from the frame border."""
    if mask.all():
        return mask.copy()
    return np.asarray(ndimage.distance_transform_edt(mask) > radius)


def make_trimap(alpha: np.ndarray, band: int | None = None) -> np.ndarray:
    """The trimap ViTMatte refines from, made from a coarse alpha.

    Args:
        alpha: float HxW in [0, 1], the coarse alpha.
        band: Erosion radius in pixels; ``None`` uses :func:`band_width`.

    Returns:
        uint8 HxW: :data:`TRIMAP_FOREGROUND` where the alpha is at least :data:`FOREGROUND_MIN` more than ``band``
        pixels deep, :data:`TRIMAP_BACKGROUND` likewise for at most :data:`BACKGROUND_MAX`, :data:`TRIMAP_UNKNOWN`
        elsewhere (the band around the edge, and every in-between alpha).
    """
    radius = band_width(alpha.shape) if band is None else band
    trimap = np.full(alpha.shape, TRIMAP_UNKNOWN, dtype=np.uint8)
    trimap[_eroded(alpha <= BACKGROUND_MAX, radius)] = TRIMAP_BACKGROUND
    trimap[_eroded(alpha >= FOREGROUND_MIN, radius)] = TRIMAP_FOREGROUND
    return trimap


@dataclass(frozen=True)
class _Job:
    """One image to refine.

    Attributes:
        coarse: The coarse alpha (HxW).
        unknown: The trimap's unknown band (bool HxW), where the model's alpha is used.
        pixel_values: The model input, 1 x 4 x padded H x padded W.
    """

    coarse: np.ndarray
    unknown: np.ndarray
    pixel_values: torch.Tensor

    def merged(self, predicted: np.ndarray) -> np.ndarray:
        """The coarse alpha with the model's alpha (cropped out of the padding) in the unknown band."""
        height, width = self.unknown.shape
        model_alpha = np.clip(predicted[:height, :width], 0.0, 1.0)
        return np.where(self.unknown, model_alpha, self.coarse).astype(np.float32)


class VitMatteStep:
    """Refiner: ViTMatte alpha in the band around the coarse edge (see the module docstring).

    Thread-safe: the model runs under a lock (one forward pass at a time; a GPU serialises them anyway and on the CPU
    torch already uses every core), and nothing else is shared between calls.
    """

    def __init__(self, model: torch.nn.Module, processor: VitMatteImageProcessor, device: str, precision: str) -> None:
        self._model = model
        self._processor = processor
        self._lock = threading.Lock()
        self.device = device
        self.precision = precision

    def apply(self, state: MatteState) -> MatteState:
        """Refine ``alpha`` in the band around its edge.

        Raises:
            ValueError: No coarse step ran before this one.
            UnsupportedImageError: The image is larger than :data:`MAX_PIXELS`.
        """
        return self.apply_batch([state])[0]

    def apply_batch(self, states: Sequence[MatteState]) -> list[MatteState]:
        """:meth:`apply` for several images, with one forward pass per padded size.

        Images of the same padded size get the same zero padding whether alone or batched, so the results equal
        :meth:`apply`'s up to floating-point summation order.

        Raises:
            ValueError: No coarse step ran before this one.
            UnsupportedImageError: An image is larger than :data:`MAX_PIXELS`.
        """
        jobs = [self._job(state) for state in states]
        groups: dict[tuple[int, ...], list[tuple[int, _Job]]] = {}
        for index, job in enumerate(jobs):
            if job is not None:
                groups.setdefault(tuple(job.pixel_values.shape[2:]), []).append((index, job))
        refined: dict[int, np.ndarray] = {}
        for group in groups.values():
            batch = torch.cat([job.pixel_values for _, job in group])
            for (index, job), predicted in zip(group, self._predict(batch), strict=True):
                refined[index] = job.merged(predicted)
        return [
            replace(state, alpha=refined[index]) if index in refined else state for index, state in enumerate(states)
        ]

    def _job(self, state: MatteState) -> _Job | None:
        """The model input for ``state``, or ``None`` when its alpha has no unknown band."""
        if state.alpha is None:
            raise ValueError("vitmatte needs an alpha from a coarse step before it")
        trimap = make_trimap(state.alpha)
        unknown = trimap == TRIMAP_UNKNOWN
        if not unknown.any():
            return None
        height, width = trimap.shape
        if height * width > MAX_PIXELS:
            raise UnsupportedImageError(
                f"vitmatte refines images up to {MAX_PIXELS / 1e6:.1f} megapixels, this one is {width}x{height}: "
                "downscale it first"
            )
        # The processor takes 8-bit images (it rescales by 1/255); pipeline images come from 8-bit, so this is exact.
        rgb = np.clip(np.rint(state.image * 255), 0, 255).astype(np.uint8)
        inputs = self._processor.preprocess(
            images=rgb, trimaps=trimap, return_tensors="pt", input_data_format="channels_last"
        )
        return _Job(state.alpha, unknown, inputs["pixel_values"])

    def _predict(self, pixel_values: torch.Tensor) -> np.ndarray:
        """Alphas (N x padded H x padded W, float32) for a batch of model inputs of one padded size."""
        with self._lock, torch.inference_mode(), autocast(self.device, self.precision):
            alphas = self._model(pixel_values=pixel_values.to(self.device)).alphas
        return np.asarray(alphas[:, 0].float().cpu().numpy())


def create_step(variant: str | None, context: StepContext) -> VitMatteStep:
    """The step factory: load the variant's weights (``small`` by default) once, offline, onto the context's device.

    Raises:
        InvalidPipelineError: Unknown variant.
        WeightsMissingError: The weights are not in the model folder (the message names the fetch command).
        MattingError: ``cuda`` was asked for and there is none.
    """
    chosen = variant or DEFAULT_VARIANT
    if chosen not in WEIGHTS:
        raise InvalidPipelineError(f"step 'vitmatte' has no variant {chosen!r} (variants: {sorted(WEIGHTS)})")
    folder = require(context.model_dir, WEIGHTS[chosen], must_contain="config.json")
    device = torch_device(context.device)
    # Typed as a plain module: transformers wraps ``to`` in a way mypy cannot follow.
    model: torch.nn.Module = VitMatteForImageMatting.from_pretrained(folder, local_files_only=True)
    model.to(device).eval()
    processor = VitMatteImageProcessor.from_pretrained(folder, local_files_only=True)
    return VitMatteStep(model, processor, device, torch_precision(device, context.precision))
