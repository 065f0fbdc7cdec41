"""The classical coarse step ``floodfill``: cut a subject out of a plain background, with no model weights.

1. Background model. The outer ring of the frame is fitted, per channel, with a smooth surface in (x, y): a constant,
   a plane or a quadratic, the lowest order that fits about as well as the quadratic. The fit is robust: ring pixels
   far from it (the subject touching the frame) are dropped and the fit repeated. The median distance of the kept
   pixels from the surface is the background noise, which sets the colour tolerance
   (:attr:`~gpu_activity_worker.engines.base.Background.tolerance`), so noisy or JPEG backgrounds get a wider one.
   If too few ring pixels fit, or the noise is high (a texture or a photo), the image is not for this engine and
   :class:`~gpu_activity_worker.engines.base.UnsupportedImageError` says so.
2. Coarse mask. A pixel is background-coloured when within tolerance of the surface; the background is the
   background-coloured pixels 4-connected to the frame border, everything else is the subject. So enclosed areas of
   background colour (white eyes, teeth) stay opaque, and 4-connectivity keeps the fill from leaking diagonally
   through a thin anti-aliased outline.
3. A graded background's surface is refitted on the whole background region found, all around the subject, which
   estimates it behind the subject much better than the ring alone, and the mask is recomputed with it.

The alpha of this step is the hard mask; the ``defringe`` step then turns its edge into fractional alpha and clean
foreground colours against the background estimated here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from gpu_activity_worker.engines.base import (
    NOISE_TO_TOLERANCE,
    TOLERANCE_FLOOR,
    Background,
    MatteState,
    StepContext,
    UnsupportedImageError,
)

RING_WIDTH = 2
"""Width in pixels of the frame border the background is first fitted on."""

MIN_RING_INLIERS = 0.65
"""Smallest share of the ring that must fit the background surface (the rest may be the subject cut by the frame)."""

MAX_NOISE = 0.04
"""Largest median distance (about 10/255) of background pixels from the surface; above it the background is a
texture, not a plain colour with noise."""

ORDER_INLIER_SLACK = 0.02
ORDER_NOISE_FACTOR = 1.25
ORDER_NOISE_SLACK = 1 / 255
"""A lower polynomial order is chosen when its inlier share is within ORDER_INLIER_SLACK of order 2's and its noise
at most ORDER_NOISE_FACTOR times order 2's plus ORDER_NOISE_SLACK."""

_FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)


@dataclass(frozen=True)
class SurfaceFit:
    """A background surface fitted to sample pixels.

    Attributes:
        background: The surface evaluated at every pixel, with the noise of the samples that fit it.
        inlier_fraction: Share of the samples within tolerance of the surface.
        order: Polynomial order used: 0 (uniform), 1 (linear gradient) or 2.
    """

    background: Background
    inlier_fraction: float
    order: int


def _basis(ys: np.ndarray, xs: np.ndarray, shape: tuple[int, int], order: int) -> np.ndarray:
    """Polynomial terms up to ``order`` in coordinates scaled to [-1, 1], one row per pixel."""
    y = ys * (2.0 / max(shape[0] - 1, 1)) - 1.0
    x = xs * (2.0 / max(shape[1] - 1, 1)) - 1.0
    terms = [np.ones_like(x)]
    if order >= 1:
        terms += [x, y]
    if order >= 2:
        terms += [x * x, x * y, y * y]
    return np.stack(terms, axis=1)


def _robust_fit(
    terms: np.ndarray, colours: np.ndarray, keep: np.ndarray, coef: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares with outlier rejection: refit on the samples within tolerance until the set stops changing.

    Args:
        terms: N x K polynomial terms.
        colours: N x 3 sample colours.
        keep: Initial inliers (used when ``coef`` is not given).
        coef: Initial coefficients, K x 3, instead of a first fit on ``keep``.

    Returns:
        Coefficients (K x 3), the final inliers, and the noise (median residual distance of the inliers).
    """
    if coef is None:
        coef = np.linalg.lstsq(terms[keep], colours[keep], rcond=None)[0]
    for _ in range(6):
        residual = np.linalg.norm(colours - terms @ coef, axis=1)
        inliers = residual <= max(TOLERANCE_FLOOR, NOISE_TO_TOLERANCE * float(np.median(residual[keep])))
        if np.array_equal(inliers, keep) or inliers.sum() <= terms.shape[1]:
            break
        keep = inliers
        coef = np.linalg.lstsq(terms[keep], colours[keep], rcond=None)[0]
    noise = float(np.median(residual[keep]))
    return coef, keep, noise


def _simplest_order(fits: list[tuple[np.ndarray, np.ndarray, float]]) -> int:
    """The lowest order whose fit keeps about as many inliers, about as tightly, as the highest order's.

    Fewer terms extrapolate more safely behind the subject, where there are no samples.
    """
    _, best_inliers, best_noise = fits[-1]
    return next(
        k
        for k, (_, inliers, noise) in enumerate(fits)
        if inliers.mean() >= best_inliers.mean() - ORDER_INLIER_SLACK
        and noise <= ORDER_NOISE_FACTOR * best_noise + ORDER_NOISE_SLACK
    )


def fit_background(image: np.ndarray, samples: np.ndarray, order: int | None = None) -> SurfaceFit:
    """Fit a smooth background surface to the ``samples`` pixels of ``image`` and evaluate it everywhere.

    Args:
        image: float32 HxWx3 in [0, 1].
        samples: bool HxW, the pixels believed to be background (outliers among them are rejected).
        order: Polynomial order; ``None`` picks the lowest of 0, 1, 2 that fits about as well as order 2.

    Returns:
        The fitted surface, its noise and the share of samples that fit it.
    """
    ys, xs = np.nonzero(samples)
    colours = image[ys, xs].astype(np.float64)
    median = np.median(colours, axis=0, keepdims=True)
    # Order 0 starts from the median, robust to up to half the samples being the subject; each higher order starts
    # from the inliers of the order below, so the subject never drags a first least-squares fit.
    keep = np.ones(len(ys), dtype=bool)
    fits: list[tuple[np.ndarray, np.ndarray, float]] = []
    for k in range(3) if order is None else [order]:
        terms = _basis(ys, xs, image.shape[:2], k)
        start = median if k == 0 else None
        fits.append(_robust_fit(terms, colours, keep, start))
        keep = fits[-1][1]
    fitted_order = order if order is not None else _simplest_order(fits)
    coef, inliers, noise = fits[0] if order is not None else fits[fitted_order]
    grid_y, grid_x = np.indices(image.shape[:2])
    surface = _basis(grid_y.ravel(), grid_x.ravel(), image.shape[:2], fitted_order) @ coef
    colour = np.clip(surface, 0.0, 1.0).reshape(image.shape).astype(np.float32)
    return SurfaceFit(Background(colour, noise), float(inliers.mean()), fitted_order)


def _border_connected_background(image: np.ndarray, background: Background) -> np.ndarray:
    """Background-coloured pixels 4-connected to the frame border (bool HxW)."""
    distance = np.linalg.norm(image - background.colour, axis=2)
    labels, _ = ndimage.label(distance <= background.tolerance, structure=_FOUR_CONNECTED)
    edge = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    touching = np.unique(edge[edge > 0])
    return np.isin(labels, touching)


def _ring(shape: tuple[int, int], width: int) -> np.ndarray:
    ring = np.ones(shape, dtype=bool)
    ring[width:-width, width:-width] = False
    return ring


def flood_fill_matte(image: np.ndarray) -> tuple[np.ndarray, Background]:
    """The coarse subject mask of an image on a plain background, and that background.

    Args:
        image: float32 HxWx3 in [0, 1].

    Returns:
        The mask (bool HxW, True on the subject) and the background fitted around it.

    Raises:
        UnsupportedImageError: The frame border is not a plain (uniform or smoothly graded) background.
    """
    ring_fit = fit_background(image, _ring(image.shape[:2], RING_WIDTH))
    noise = ring_fit.background.noise
    if ring_fit.inlier_fraction < MIN_RING_INLIERS or noise > MAX_NOISE:
        raise UnsupportedImageError(
            "the classical engine needs a plain background (one colour or a smooth gradient, with little noise): "
            f"{ring_fit.inlier_fraction:.0%} of the frame border fits one (at least {MIN_RING_INLIERS:.0%} must), "
            f"with noise {noise * 255:.1f}/255 (at most {MAX_NOISE * 255:.0f}/255); use a model pipeline for this image"
        )
    region = _border_connected_background(image, ring_fit.background)
    if ring_fit.order > 0:
        # Subsample the region: a smooth surface needs few samples, and least squares on all of them costs time.
        sparse = np.zeros_like(region)
        sparse[::2, ::2] = region[::2, ::2]
        background = fit_background(image, sparse, ring_fit.order).background
        region = _border_connected_background(image, background)
    else:
        background = ring_fit.background
    return ~region, background


class FloodFillStep:
    """Coarse step: the hard flood-fill mask and the fitted background (see the module docstring)."""

    device = "cpu"
    precision = "fp32"

    def apply(self, state: MatteState) -> MatteState:
        """Set ``alpha`` to the hard subject mask and ``background`` to the fitted background."""
        mask, background = flood_fill_matte(state.image)
        return replace(state, alpha=mask.astype(np.float32), background=background)


def create_step(variant: str | None, context: StepContext) -> FloodFillStep:
    """The step factory: the classical engine has no variants and no weights, so it ignores both arguments."""
    return FloodFillStep()
