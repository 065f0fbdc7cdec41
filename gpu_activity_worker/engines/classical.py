"""The classical coarse step ``floodfill``: cut a subject out of a plain background, with no model weights.

1. Background model. The outer ring of the frame is fitted, per channel, with a smooth surface in (x, y): a constant,
   a plane or a quadratic, the lowest order that fits about as well as the quadratic. The fit is robust: ring pixels
   far from it (the subject touching the frame) are dropped and the fit repeated. The median distance of the kept
   pixels from the surface is the background noise, which sets the colour tolerance
   (:attr:`~gpu_activity_worker.engines.base.Background.tolerance`), so noisy or JPEG backgrounds get a wider one.
   If too few ring pixels fit, or the noise is high (a texture or a photo), the image is not for this engine and
   :class:`~gpu_activity_worker.engines.base.UnsupportedImageError` says so.
2. Coarse mask. A pixel is background-coloured when within tolerance of the surface; the background is the
   background-coloured pixels 4-connected to the frame border, everything else is the subject. 4-connectivity keeps
   the fill from leaking diagonally through a thin anti-aliased outline. Enclosed areas of a white (or black)
   background's colour stay opaque: art paints white eyes and teeth, and a hole through the subject (the gap between
   an arm and the body) cannot be told from them. On any other background an enclosed area whose mean colour is the
   background's is a hole and joins the background (:func:`_holes`). Parts of the subject that touch the outline
   and match the background (a white stroke with no outline of its own) are flooded away: that needs a model.
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

HOLE_RIM = 2
"""Pixels at the rim of an enclosed background-coloured area (anti-aliasing, codec ringing) left out of its mean."""

HOLE_BIAS = 3 / 255
"""Largest distance of an enclosed area's mean colour from the background for it to be a hole (see :func:`_holes`)."""

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


def _scaled(coordinates: np.ndarray, length: int) -> np.ndarray:
    """Pixel coordinates along an axis of ``length`` pixels, scaled to [-1, 1]."""
    return coordinates * (2.0 / max(length - 1, 1)) - 1.0


def _basis(ys: np.ndarray, xs: np.ndarray, shape: tuple[int, int], order: int) -> np.ndarray:
    """Polynomial terms up to ``order`` in coordinates scaled to [-1, 1], one row per pixel."""
    y, x = _scaled(ys, shape[0]), _scaled(xs, shape[1])
    terms = [np.ones_like(x)]
    if order >= 1:
        terms += [x, y]
    if order >= 2:
        terms += [x * x, x * y, y * y]
    return np.stack(terms, axis=1)


def _least_squares(terms: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """Least-squares coefficients (K x 3) through the normal equations.

    The terms are at most quadratic in coordinates scaled to [-1, 1], so the K x K system is well conditioned. Sums
    are taken with einsum rather than BLAS: a multi-threaded BLAS wakes worker threads that spin on these tiny
    problems and cost several times the work's own CPU time.
    """
    gram = np.einsum("ik,il->kl", terms, terms)
    return np.linalg.solve(gram, np.einsum("ik,ic->kc", terms, colours))


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
        coef = _least_squares(terms[keep], colours[keep])
    for _ in range(6):
        residual = np.linalg.norm(colours - np.einsum("ik,kc->ic", terms, coef), axis=1)
        inliers = residual <= max(TOLERANCE_FLOOR, NOISE_TO_TOLERANCE * float(np.median(residual[keep])))
        if np.array_equal(inliers, keep) or inliers.sum() <= terms.shape[1]:
            break
        keep = inliers
        coef = _least_squares(terms[keep], colours[keep])
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
    colour = np.clip(_evaluate(coef, image.shape[:2], fitted_order), 0.0, 1.0)
    return SurfaceFit(Background(colour, noise), float(inliers.mean()), fitted_order)


def _evaluate(coef: np.ndarray, shape: tuple[int, int], order: int) -> np.ndarray:
    """The polynomial surface with coefficients ``coef`` (K x 3, terms as in :func:`_basis`) at every pixel.

    Separable terms are broadcast from a row and a column, which is far cheaper than a K-column basis per pixel.
    """
    y = _scaled(np.arange(shape[0], dtype=np.float32), shape[0])[:, None]
    x = _scaled(np.arange(shape[1], dtype=np.float32), shape[1])[None, :]
    terms = [np.ones((1, 1), dtype=np.float32)]
    if order >= 1:
        terms += [x, y]
    if order >= 2:
        terms += [x * x, x * y, y * y]
    surface = np.zeros((*shape, 3), dtype=np.float32)
    for term, weights in zip(terms, coef.astype(np.float32), strict=True):
        surface += term[..., None] * weights
    return surface


def _border_connected_background(image: np.ndarray, background: Background) -> np.ndarray:
    """Background-coloured pixels 4-connected to the frame border, and enclosed ones that are holes (bool HxW)."""
    distance = np.linalg.norm(image - background.colour, axis=2)
    labels, count = ndimage.label(distance <= background.tolerance, structure=_FOUR_CONNECTED)
    edge = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    outside = np.zeros(count + 1, dtype=bool)
    outside[edge] = True
    outside[0] = False
    return (outside | _holes(image, background, labels, outside))[labels]


def _holes(image: np.ndarray, background: Background, labels: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """Which enclosed background-coloured components (by label) are holes through the subject, not paint.

    Art often paints in white or black, so an enclosed area of a white (or black) background's colour may be paint
    (white eyes) and stays opaque. Paint rarely matches any other background colour exactly: there an enclosed area
    whose mean colour, away from its anti-aliased rim, is within :data:`HOLE_BIAS` of the background is a hole (a gap
    between an arm and the body) and becomes transparent. The mean, not each pixel, is compared, so noise cancels
    while the slight shading of paint that is merely close to the background does not.

    Returns:
        bool array indexed by label.
    """
    enclosed = np.zeros_like(outside)
    enclosed[1:] = ~outside[1:]
    inside = enclosed[labels]
    if not inside.any():
        return enclosed
    label = labels[inside]
    colour = background.colour[inside]
    offset = image[inside] - colour

    def mean(values: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Mean of ``values`` (N x 3) per component over the pixels ``where``."""
        count = np.bincount(label[where], minlength=len(outside))
        sums = [np.bincount(label[where], weights=values[where, c], minlength=len(outside)) for c in range(3)]
        return np.stack(sums, axis=1) / np.maximum(count, 1)[:, None]

    everywhere = np.ones(len(label), dtype=bool)
    core = ndimage.binary_erosion(inside, iterations=HOLE_RIM)[inside]
    # A component too thin to have a core (a slit between two strokes) is judged on all its pixels.
    has_core = np.bincount(label[core], minlength=len(outside)) > 0
    bias = np.linalg.norm(np.where(has_core[:, None], mean(offset, core), mean(offset, everywhere)), axis=1)
    mean_colour = mean(colour, everywhere)
    extreme = np.minimum(np.linalg.norm(mean_colour - 1.0, axis=1), np.linalg.norm(mean_colour, axis=1))
    return enclosed & (bias <= HOLE_BIAS) & (extreme > background.tolerance)


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
