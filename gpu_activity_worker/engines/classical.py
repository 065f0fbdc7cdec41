"""The classical coarse step ``floodfill``: cut a subject out of a plain background, with no model weights.

1. Background model. The outer ring of the frame is fitted, per channel, with a smooth surface in (x, y): a constant,
   a plane or a quadratic, the lowest order that fits about as well as the quadratic. The fit is robust: ring pixels
   far from it (the subject touching the frame) are dropped and the fit repeated. The median distance of the kept
   pixels from the surface is the background noise, which sets the colour tolerance
   (:attr:`~gpu_activity_worker.engines.base.Background.tolerance`), so noisy or JPEG backgrounds get a wider one.
   If too few ring pixels fit, or the noise is high (a texture or a photo), the image is not for this engine and
   :class:`~gpu_activity_worker.vocabulary.UnsupportedImageError` says so.
2. Coarse mask. A pixel is background-coloured when within tolerance of the surface; the background is the
   background-coloured pixels 4-connected to the frame border, everything else is the subject. 4-connectivity keeps
   the fill from leaking diagonally through a thin anti-aliased outline. An enclosed background-coloured area is
   either a hole through the subject (the gap between raised arms, the inside of a ring or a handle) or paint of the
   background's colour (white eyes, teeth, highlights); :func:`_holes` decides, and holes join the background:

   - on a tinted or graded background, paint rarely matches the background exactly: an enclosed area whose mean
     colour is the background's is a hole;
   - over white, an enclosed area is a hole only when it is the background seen through the subject: large enough,
     of the background's exact colour, holding no floating part of the subject (a pupil), with no outline of its
     own, in art whose outer silhouette has none either, and with an edge that meets the subject as sharply as the
     outer silhouette does (:func:`_white_holes`). A white eye, tooth or highlight inside a dark outline stays opaque,
     and so does every enclosed white area of outlined art, where holes are outlined too and cannot be told apart;
   - over black, enclosed black areas stay opaque.

   Parts of the subject that touch the outline and match the background (a white stroke with no outline of its own)
   are flooded away: that needs a model. Where a codec (H.264, JPEG) left the background beside the subject noisy,
   the background also takes the off-colour chroma blocks next to it (:data:`CODEC_GROWTH`), so the mask does not
   grow blocky bumps.
3. A graded background's surface is refitted on the whole background region found, all around the subject, which
   estimates it behind the subject much better than the ring alone, and the mask is recomputed with it.

The alpha of this step is the hard mask; the ``defringe`` step then turns its edge into fractional alpha and clean
foreground colours against the background estimated here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from gpu_activity_worker.engines.base import NOISE_TO_TOLERANCE, TOLERANCE_FLOOR, Background, MatteState, StepContext
from gpu_activity_worker.vocabulary import UnsupportedImageError

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
"""Pixels at the rim of an enclosed background-coloured area (anti-aliasing, codec ringing) left out of its mean. Not
more: the shading that tells white paint from the background is often only near the paint's rim (a googly eye's
white is pure white in its middle)."""

HOLE_BIAS = 3 / 255
"""Largest distance of an enclosed area's mean colour from a tinted or graded background for it to be a hole (see
:func:`_holes`)."""

HOLE_MIN_AREA = 1e-3
"""Smallest enclosed white area, as a share of the frame (65 pixels at 256x256), that may be a hole over white."""

WHITE_HOLE_BIAS = 0.5 / 255
"""Largest distance of an enclosed white area's mean colour (over its core) from a white background for it to be a
hole, measured from the background's own mean offset over the border-connected background (so that noise clipped at
white cancels). Measured on Fluent emoji over white: holes 0.0-0.3/255, painted whites 0.7/255 and more. Under JPEG
or H.264 both move to 1.5-7/255 and overlap (a hole's core takes in the ringing of its rim, as near-white paint does),
and a limit that followed the codec noise measured beside the subject turned big, pure-white googly eyes transparent
at CRF 23-28. So this limit holds for clean frames only; on a frame a codec has touched a hole is judged against the
background at the same distances from the subject instead (:data:`CODEC_WHITE_HOLE_BIAS`)."""

CODEC_WHITE_HOLE_BIAS = 0.75 / 255
HOLE_MATCH_DISTANCE = 16
"""On a frame a codec has touched (the background beside the subject is noisy: :data:`CODEC_NOISE_GATE`), an enclosed
white area's offset is measured against the border-connected background at the same distances from the subject
(per whole pixel of distance, up to HOLE_MATCH_DISTANCE), not against its overall mean, and may be up to
CODEC_WHITE_HOLE_BIAS: the codec rings beside every edge and the ringing fades with the distance from it, so a hole's
core, close to edges all round, is off white by more than the open background far from the subject, and the matched
reference takes most of that out. Measured on the tune part at H.264 CRF 23 (Fluent over white), holes left opaque
before (arms raised over the head, a wheelchair's wheels: SAD 1.1-1.6 a clip) were cut, the mean SAD fell from 0.28
to 0.20 on one sample of 30 and from 0.32 to 0.30 on another, with no painted white lost; a looser limit (1.5/255 and
more) cut painted whites. Clean frames keep :data:`WHITE_HOLE_BIAS` against the overall mean: with a wider limit there,
large painted whites went too (Fluent over white: mean SAD 0.095 -> 0.110)."""

EDGE_NOISE_RING = (2.0, 6.0)
"""Distances (pixels) from the subject of the background pixels whose colour error gauges the codec's ringing."""

RIM_RING = (1.0, 3.0)
"""Distances (pixels, past the first anti-aliased one) of the subject pixels around a white area that tell whether it
is outlined and how sharply it meets the subject, compared with the same ring inside the outer silhouette."""

ISLAND_CONTRAST = 3.0
"""Tolerances off the background that a part of the subject floating inside a white area must reach for the area to
be paint around it (an eye's white around its pupil), see :func:`_around_islands`."""

BEYOND_RING = (3.0, 9.0)
"""Distances (pixels) of the subject pixels beyond an outline, which an outline is darker than."""

INK_LUMA = 0.35
OUTLINED_SHARE = 0.5
OUTLINE_CONTRAST = 0.15
"""A rim ring is an outline when at least OUTLINED_SHARE of its pixels are darker than INK_LUMA (luma in [0, 1]) and
its mean luma is at least OUTLINE_CONTRAST below that of the ring beyond it: a thin dark line, not a dark part of
the subject (a dark sleeve or handle beside a hole)."""

BLACK_INK_LUMA = 0.1
OUTLINED_ART_SHARE = 0.3
"""Outlined art (OpenMoji-style line art) draws its silhouette in black ink: at least OUTLINED_ART_SHARE of the outer
rim ring's pixels have a luma below BLACK_INK_LUMA. Measured over white: 0.52-1.0 on OpenMoji, at most 0.08 on Fluent
emoji, whose dark parts (dark skin, tyres, hair) are shaded colours well above black; with :data:`INK_LUMA` instead, a
bicycle's dark tyres made the Fluent cyclists count as outlined, and their wheels stayed opaque (SAD 7.8)."""

EDGE_MATCH = 0.75
"""An edge's sharpness is the mean distance from the background of its rim ring (:data:`RIM_RING`) over that of the
ring beyond (:data:`BEYOND_RING`): about 1 where the subject's colour is reached within a pixel or two, well below 1
where a highlight fades out over several. A white area's sharpness must be at least EDGE_MATCH times the outer
silhouette's."""

CODEC_NOISE_GATE = 0.5 / 255
CODEC_GROWTH = 4
CODEC_CHROMA_SLACK = 2.5
"""H.264 and JPEG keep chroma at half resolution and quantise it coarsely: beside the subject, blocks of a plain
background come out off-colour, mostly in chroma, past the tolerance (most on tints at CRF 23-28), and the mask grows
ragged bumps. Where a uniform background beside the subject is noisy (:func:`_edge_noise` at least CODEC_NOISE_GATE;
a clean drawing stays below it), the background also takes pixels up to CODEC_GROWTH pixels from it whose luma is the
background's (within the tolerance) and whose colour is within CODEC_CHROMA_SLACK tolerances. The ``defringe`` band
still re-estimates the alpha of pixels next to the edge. On a drawing over a tint at CRF 28 this cut the SAD from 0.34
to 0.26 and it leaves clean frames alone. Graded backgrounds are left out: beside the subject a fitted gradient is off
by about the gate even on clean frames, and growing there ate pale parts of Fluent emoji (lost alpha 0.15% -> 0.20%
of the frame)."""

_LUMA = np.array([0.299, 0.587, 0.114])

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


def _border_connected_background(image: np.ndarray, background: Background, holes: bool = True) -> np.ndarray:
    """Background-coloured pixels 4-connected to the frame border, and (with ``holes``) enclosed ones that are holes
    (bool HxW)."""
    distance = np.linalg.norm(image - background.colour, axis=2)
    labels, count = ndimage.label(distance <= background.tolerance, structure=_FOUR_CONNECTED)
    edge = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    outside = np.zeros(count + 1, dtype=bool)
    outside[edge] = True
    outside[0] = False
    return (outside | _holes(image, background, labels, outside))[labels] if holes else outside[labels]


def _holes(image: np.ndarray, background: Background, labels: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """Which enclosed background-coloured components (by label) are holes through the subject, not paint.

    An enclosed component's mean colour is taken over its core, away from its anti-aliased rim (:data:`HOLE_RIM`), so
    noise cancels while the slight shading of paint that is merely close to the background does not.

    * On a background of a colour art rarely paints in (a tint, a gradient), an enclosed area whose mean colour is
      within :data:`HOLE_BIAS` of the background is a hole (a gap between an arm and the body) and joins it.
    * Over white, art paints white eyes, teeth and highlights, so an enclosed white area must also look like the
      background seen through the subject (:func:`_white_holes`).
    * Over black, an enclosed black area stays opaque (pupils and outlines are black).

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
    everywhere = np.ones(len(label), dtype=bool)
    core = ndimage.binary_erosion(inside, iterations=HOLE_RIM)[inside]
    # A component too thin to have a core (a slit between two strokes) is judged on all its pixels.
    has_core = np.bincount(label[core], minlength=len(outside)) > 0
    # Offsets are measured from the background's own mean offset over the border-connected background: noise clipped
    # at white pulls both means down alike, and a surface fitted through it does not.
    outer = outside[labels]
    own = (image[outer] - background.colour[outer]).mean(axis=0) if outer.any() else np.zeros(3)
    bias = np.linalg.norm(
        np.where(
            has_core[:, None],
            _component_means(label, core, offset, len(outside)),
            _component_means(label, everywhere, offset, len(outside)),
        )
        - own,
        axis=1,
    )
    mean_colour = _component_means(label, everywhere, colour, len(outside))
    white = np.linalg.norm(mean_colour - 1.0, axis=1) <= background.tolerance
    black = np.linalg.norm(mean_colour, axis=1) <= background.tolerance
    holes = enclosed & ~white & ~black & (bias <= HOLE_BIAS)
    on_white = enclosed & white
    if on_white.any():
        holes |= _white_holes(image, background, labels, outside, on_white, bias)
    return holes


def _component_sums(label: np.ndarray, where: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """Per component (by label), the sums of ``values`` (N x C) over the pixels ``where``: count x C."""
    return np.stack(
        [np.bincount(label[where], weights=values[where, c], minlength=count) for c in range(values.shape[1])],
        axis=1,
    )


def _component_means(label: np.ndarray, where: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """Per component (by label), the mean of ``values`` (N x C) over the pixels ``where``: count x C."""
    pixels = np.bincount(label[where], minlength=count)
    return _component_sums(label, where, values, count) / np.maximum(pixels, 1)[:, None]


def _white_holes(
    image: np.ndarray,
    background: Background,
    labels: np.ndarray,
    outside: np.ndarray,
    candidates: np.ndarray,
    bias: np.ndarray,
) -> np.ndarray:
    """Which enclosed white components (by label) over a white background are holes rather than white paint.

    A hole shows the background itself through the subject; white paint merely looks like it. A component is a hole
    when all of these hold:

    * it holds no floating part of the subject (:func:`_around_islands`): an eye's white holds its pupil;
    * it is not small: at least :data:`HOLE_MIN_AREA` of the frame (eye whites, teeth and glints are small, and a
      small hole left opaque costs little);
    * its colour is exactly the background's: its mean offset is within :data:`WHITE_HOLE_BIAS` (painted whites are a
      little off-white or shaded); on a frame a codec has touched, its offset against the background at the same
      distances from the subject is within :data:`CODEC_WHITE_HOLE_BIAS` (:func:`_distance_matched_bias`; where the
      codec's noise still hides the difference, the area stays opaque);
    * it has no outline of its own, and neither has the outer silhouette. In the ring just past a rim's
      anti-aliased pixel (:data:`RIM_RING`), the outer silhouette is outlined art when at least
      :data:`OUTLINED_ART_SHARE` of its pixels are black ink (:data:`BLACK_INK_LUMA`): outlined art outlines its
      holes too, so they cannot be told from an outlined white eye, and in such art nothing is cut out. An enclosed
      area is outlined when at least :data:`OUTLINED_SHARE` of its ring is dark ink (:data:`INK_LUMA`) and the ring is
      also darker than the subject beyond it (:data:`BEYOND_RING`, :data:`OUTLINE_CONTRAST`): a thin dark line,
      not a dark part of the subject such as a sleeve or a handle beside a hole;
    * its edge blends into the subject as the outer silhouette does: it is about as sharp (:data:`EDGE_MATCH`), so a
      highlight whose soft edge fades into white is not a hole.

    Args:
        image: float32 HxWx3.
        background: The background.
        labels: The background-coloured components (0 is the subject).
        outside: Per label, whether the component touches the frame border.
        candidates: Per label, the enclosed components over white.
        bias: Per label, the distance of the component's mean colour from the background.

    Returns:
        bool array indexed by label.
    """
    area = np.bincount(labels.ravel(), minlength=len(outside))
    candidates = candidates & (area >= HOLE_MIN_AREA * labels.size)
    if not candidates.any():
        return candidates
    if touched_by_codec(image, background, outside[labels]):
        candidates &= _distance_matched_bias(image, background, labels, outside, candidates) <= CODEC_WHITE_HOLE_BIAS
    else:
        candidates &= bias <= WHITE_HOLE_BIAS
    if not candidates.any():
        return candidates
    candidates &= ~_around_islands(image, background, labels, candidates)
    if not candidates.any():
        return candidates
    depth, nearest = ndimage.distance_transform_edt(labels == 0, return_indices=True)
    rim = _ring_features(image, background, labels, outside, depth, nearest, RIM_RING)
    beyond = _ring_features(image, background, labels, outside, depth, nearest, BEYOND_RING)
    if rim[0, 3] >= OUTLINED_ART_SHARE:
        return np.zeros_like(candidates)
    outlined = (rim[:, 0] >= OUTLINED_SHARE) & (beyond[:, 2] - rim[:, 2] >= OUTLINE_CONTRAST)
    # How far the edge has risen from the background just past its rim, as a share of how far it rises beyond.
    sharpness = rim[:, 1] / np.maximum(beyond[:, 1], 1e-6)
    sharp = sharpness >= EDGE_MATCH * sharpness[0]
    return candidates & (rim[:, 4] > 0) & (beyond[:, 4] > 0) & ~outlined & sharp


def _distance_matched_bias(
    image: np.ndarray, background: Background, labels: np.ndarray, outside: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """Per label, how far a candidate component's mean offset from the background (over its core, as in
    :func:`_holes`) is from that of the border-connected background at the same distances from the subject (see
    :data:`CODEC_WHITE_HOLE_BIAS`); 0 for the other labels."""
    distance = np.minimum(np.ceil(ndimage.distance_transform_edt(labels != 0)), HOLE_MATCH_DISTANCE).astype(np.intp)
    offset = image - background.colour
    outer = outside[labels]
    every = np.ones(int(outer.sum()), dtype=bool)
    reference = _component_means(distance[outer], every, offset[outer], HOLE_MATCH_DISTANCE + 1)
    inside = candidates[labels]
    label = labels[inside]
    core = ndimage.binary_erosion(inside, iterations=HOLE_RIM)[inside]
    has_core = np.bincount(label[core], minlength=len(outside)) > 0
    residual = offset[inside] - reference[distance[inside]]
    means = _component_means(label, core | ~has_core[label], residual, len(outside))
    return np.where(candidates, np.linalg.norm(means, axis=1), 0.0)


def _around_islands(
    image: np.ndarray, background: Background, labels: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """Which candidate components (by label) surround a part of the subject that stands clearly off the background.

    The background seen through a hole does not hold a floating piece of the subject, while an eye's white holds its
    pupil; the part must differ from the background by :data:`ISLAND_CONTRAST` tolerances somewhere, so codec noise
    inside a hole does not count.
    """
    region = candidates[labels]
    islands = ndimage.binary_fill_holes(region) & ~region
    found = np.zeros_like(candidates)
    if not islands.any():
        return found
    island_labels, count = ndimage.label(islands, structure=_FOUR_CONNECTED)
    inside = np.nonzero(islands)
    contrast = np.linalg.norm(image[inside] - background.colour[inside], axis=1)
    strong = np.zeros(count + 1, dtype=bool)
    strong[island_labels[inside][contrast > ISLAND_CONTRAST * background.tolerance]] = True
    strong[0] = False
    rim = ndimage.binary_dilation(strong[island_labels], structure=_FOUR_CONNECTED) & region
    found[labels[rim]] = True
    return found


def _ring_features(
    image: np.ndarray,
    background: Background,
    labels: np.ndarray,
    outside: np.ndarray,
    depth: np.ndarray,
    nearest: np.ndarray,
    ring: tuple[float, float],
) -> np.ndarray:
    """What the subject looks like at a range of distances from each background-coloured component.

    Args:
        image: float32 HxWx3.
        background: The background.
        labels: The background-coloured components (0 is the subject).
        outside: Per label, whether the component touches the frame border; these count as one, label 0.
        depth: Per subject pixel, the distance to the nearest background-coloured pixel.
        nearest: The indices of that pixel (as from ``distance_transform_edt``).
        ring: The distances (lo, hi] of the subject pixels to look at.

    Returns:
        Per label (row 0: the outer silhouette), the share of dark ink (luma below :data:`INK_LUMA`), the mean
        distance from the background, the mean luma, the share of black ink (luma below :data:`BLACK_INK_LUMA`), and
        the number of pixels.
    """
    ys, xs = np.nonzero((depth > ring[0]) & (depth <= ring[1]))
    owner = labels[nearest[0][ys, xs], nearest[1][ys, xs]]
    owner = np.where(outside[owner], 0, owner)
    colour = image[ys, xs]
    luma = np.einsum("nc,c->n", colour, _LUMA)
    contrast = np.linalg.norm(colour - background.colour[ys, xs], axis=1)
    values = np.stack([luma < INK_LUMA, contrast, luma, luma < BLACK_INK_LUMA], axis=1).astype(np.float64)
    every = np.ones(len(owner), dtype=bool)
    count = np.bincount(owner, minlength=len(outside))
    return np.column_stack([_component_means(owner, every, values, len(outside)), count])


def _within(mask: np.ndarray, ring: tuple[float, float]) -> np.ndarray:
    """Pixels outside ``mask`` whose distance from it is in the half-open ``ring`` (lo, hi]."""
    distance = ndimage.distance_transform_edt(~mask)
    return (distance > ring[0]) & (distance <= ring[1])


def _edge_noise(image: np.ndarray, background: Background, region: np.ndarray) -> float:
    """Mean colour distance from the background of the background pixels beside the subject (:data:`EDGE_NOISE_RING`):
    near 0 on a clean drawing, about 1/255 and more where a codec rings around the edges."""
    beside = region & _within(~region, EDGE_NOISE_RING)
    if not beside.any():
        return 0.0
    return float(np.linalg.norm(image[beside] - background.colour[beside], axis=1).mean())


def touched_by_codec(image: np.ndarray, background: Background, region: np.ndarray) -> bool:
    """Whether a codec (H.264, JPEG) has touched the frame: the background beside the subject is noisy
    (:func:`_edge_noise` at least :data:`CODEC_NOISE_GATE`).

    Args:
        image: float32 HxWx3 in [0, 1].
        background: The frame's plain background.
        region: bool HxW, the background around the subject.
    """
    return _edge_noise(image, background, region) >= CODEC_NOISE_GATE


def _absorb_codec_noise(image: np.ndarray, background: Background, region: np.ndarray) -> np.ndarray:
    """The background region grown over the codec's chroma noise beside the subject (see :data:`CODEC_GROWTH`)."""
    if not touched_by_codec(image, background, region):
        return region
    offset = image - background.colour
    luma = np.abs(np.einsum("...c,c->...", offset, _LUMA))
    chroma_noise = (luma <= background.tolerance / np.sqrt(3)) & (
        np.linalg.norm(offset, axis=2) <= CODEC_CHROMA_SLACK * background.tolerance
    )
    near = ndimage.binary_dilation(region, structure=_FOUR_CONNECTED, iterations=CODEC_GROWTH)
    return ndimage.binary_propagation(region, structure=_FOUR_CONNECTED, mask=region | (chroma_noise & near))


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
    region = _border_connected_background(image, ring_fit.background, holes=ring_fit.order == 0)
    if ring_fit.order > 0:
        # Subsample the region: a smooth surface needs few samples, and least squares on all of them costs time.
        sparse = np.zeros_like(region)
        sparse[::2, ::2] = region[::2, ::2]
        background = fit_background(image, sparse, ring_fit.order).background
        region = _border_connected_background(image, background)
    else:
        background = ring_fit.background
        region = _absorb_codec_noise(image, background, region)
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
