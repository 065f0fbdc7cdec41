"""The refiner ``defringe``: a clean edge after any coarse step, with no background halo.

A halo is background colour left in the cut-out: an alpha that is too wide or too soft at the edge, and edge pixels
whose colour still mixes in the old background. Colour estimation alone cannot fix a too-wide alpha, so when the
background is known this step re-estimates the alpha itself near the edge:

* Background: taken from the coarse step when it fitted one (``floodfill``), else fitted here as a smooth surface to
  the pixels well outside the coarse silhouette (alpha >= 0.5). When even that fails (a textured background), only
  the colours are fixed, with blur-fusion foreground estimation (Forte & Pitie 2021), and the alpha is kept.
* Snap: background-coloured pixels reachable from outside the silhouette, up to :data:`SNAP` pixels in, are dropped
  from it, so the edge band sits on the real colour edge even when a model's alpha is several pixels too wide.
* Band: the pixels within :data:`BAND` pixels of the silhouette edge, on both sides.
* Alpha: a band pixel is ``I = a F + (1 - a) B`` with B known. F is the pixel's reference colour: among the pixels of
  its window inside the silhouette and at least as deep as it, whose colour lies on the line from B through I (within
  a tolerance), the one farthest from B, i.e. the purest sample of the colour being mixed with the background (the
  pixel itself when nothing is purer). Then ``a = (I - B).(F - B) / |F - B|^2``, clipped to [0, 1] and snapped to 0
  or 1 within noise of either end; that dead zone widens with the codec ringing measured just outside the silhouette
  (:data:`RINGING_DEAD_ZONE`), so the faint echoes H.264 and JPEG leave beside a dark edge do not become alpha.
  Looking only inward keeps an inner edge (an outline meeting the fill) from being mistaken for a mix with the
  background. Colours are compared in :data:`LUMA_WEIGHTED` space, which resists JPEG, and with chroma weighing
  less still on a frame a video codec touched (:data:`CODEC_CHROMA_WEIGHT`).
  A reference must stand clearly off the background (:data:`STRONG_FOREGROUND`), except inside a pale part of the
  subject, where no such colour is near. Past the outermost ring an alpha that does not ramp up towards 1 inward is
  shading, not transparency, and becomes 1 (:data:`PLATEAU_RISE`).
* Colours: unmixed, ``F = B + (I - B) / a``, where ``a`` is large enough for the division to be stable, else the
  reference colour.
* Outside the band the alpha is the silhouette, hard; wherever the alpha is 0 the colour is that of the nearest
  visible pixel, so resampling or a straight-alpha viewer never shows the old background.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from gpu_activity_worker.engines.base import Background, MatteState, StepContext
from gpu_activity_worker.engines.classical import MAX_NOISE, fit_background

BAND = 3
"""Half-width in pixels of the edge band where alpha is re-estimated."""

SNAP = 2 * BAND
"""How far inside a coarse silhouette background-coloured pixels are trimmed before the band is placed."""

WINDOW = 2
"""Radius of the square window searched for a band pixel's foreground colour."""

RELATIVE_COLLINEARITY = 0.15
"""How far (relative to |I - B|) a pixel may lie off the line from B to its foreground colour."""

STRONG_FOREGROUND = 2.0
"""A foreground colour reference must differ from the background by this many tolerances; weaker pixels are mostly
background plus noise or compression ringing, and would inflate the alpha of pixels compared with them. Past the
outermost ring of the silhouette (:data:`INNER_DEPTH`), a pixel with no such reference in its window belongs to a
pale part of the subject, and any reference past the tolerance stands in."""

MIN_UNMIX_ALPHA = 0.25
"""Below this alpha the unmixing division amplifies noise too much: the reference colour is used instead."""

DEAD_ZONE = 0.5
"""Alpha snaps to 0 (to 1) where the pixel is within this many tolerances of the background (of its reference), on a
clean image."""

RINGING_RING = (2.0, 3.0)
RINGING_NOISE_SHARE = 1.5
RINGING_DEAD_ZONE = 3.5
MAX_DEAD_ZONE = 1.25
"""Codec ringing (H.264, JPEG) leaves faint copies of a dark edge a few pixels out on a plain background, which read as
a little alpha all around the subject. Its strength is gauged by the mean distance from the background of the pixels
RINGING_RING pixels outside the snapped silhouette, less RINGING_NOISE_SHARE times the background noise (which the
tolerance already allows for), in tolerances: exactly 0 on a clean drawing, 0.1-0.2 on H.264 at CRF 18-28. The dead
zone grows by RINGING_DEAD_ZONE times that, up to MAX_DEAD_ZONE tolerances.
Measured on procedural clips at CRF 23 and 28 it cuts the SAD by 8-9%, on Fluent emoji over white with JPEG (quality
90) by 9%, and it leaves clean drawings alone (a clean render resized with Lanczos rings a little too: OpenMoji stills
move by 1%)."""

INNER_DEPTH = 1.4
INNER_OPAQUE = 0.5
PLATEAU_RISE = 0.6
"""A band pixel at least INNER_DEPTH pixels inside the silhouette (past its outermost ring, diagonals included), with
an alpha of at least INNER_OPAQUE, is opaque when its deeper neighbours close, on average, less than PLATEAU_RISE of
its gap to alpha 1. A blurred edge ramps up to 1 over a few pixels; a colour that stays between the background and a
deeper colour without ramping up (a lighter rim, shading that runs to the edge) is shading, not transparency.
Measured on rendered emoji over white, pixels two pixels inside the flood-fill edge have a true alpha of 0.997 on
average; the colour estimate alone gave them 0.94."""

MIN_FIT_INLIERS = 0.8
"""Share of the far-outside pixels that must fit a smooth surface to trust it as the background."""

BLUR_FUSION_RADII = (90, 6)
"""Box radii of the two blur-fusion passes (coarse, then fine), as in Forte & Pitie 2021."""

_YCBCR = np.array([[0.299, 0.587, 0.114], [-0.169, -0.331, 0.5], [0.5, -0.419, -0.081]])


def _weighted_space(chroma_weight: float) -> np.ndarray:
    """YCbCr with unit rows and chroma at ``chroma_weight``: a 3x3 matrix from RGB."""
    return (_YCBCR / np.linalg.norm(_YCBCR, axis=1, keepdims=True) * [[1.0], [chroma_weight], [chroma_weight]]).astype(
        np.float32
    )


LUMA_WEIGHTED = _weighted_space(0.5)
"""Colour space of the edge alpha estimate: YCbCr with unit rows, chroma at half weight. Codecs (JPEG) keep chroma
at half resolution, so at an edge chroma is smeared over a few pixels while luma stays sharp; leaning on luma makes
the estimate follow the sharp signal. For an exact mix of two colours any such linear space gives the same alpha."""

CODEC_NEAR_RING = (2.0, 6.0)
CODEC_FAR_RING = (8.0, 14.0)
CODEC_GAUGE = 0.2 / 255
CODEC_CHROMA_WEIGHT = 0.2
"""A frame went through a video codec when the background just outside the silhouette (more than 2 and at most 6
pixels out, CODEC_NEAR_RING) is, on average, at least CODEC_GAUGE further from the fitted background than the
background further out (CODEC_FAR_RING): H.264 rings beside every edge, a clean composite does not, and a graded
background's fitting error is alike in both rings. Measured on the tune part: clean frames 0.00-0.10/255 (Fluent's
soft alpha tails included), H.264 at CRF 18-28 0.34/255 and more, over white, a tint and a gradient. On such a frame
the edge alpha is estimated with chroma at CODEC_CHROMA_WEIGHT instead of :data:`LUMA_WEIGHTED`'s half: yuv420p keeps
chroma at half resolution in both directions, so the subject's chroma bleeds a pixel out over the background and the
background's in, putting a chroma-led edge too far out, while luma is at full resolution. Luma leads only where it
differs: for a colour of the background's luma the estimate is all chroma, as before. Measured on 30 animations of
the tune part (Fluent over a tint at CRF 23) the SAD fell from 0.247 to 0.198; clean frames keep half weight (with 0.2
there the SAD over a tint rose by 8%)."""

_FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)


def _signed_depth(mask: np.ndarray) -> np.ndarray:
    """Distance to the silhouette edge: >= 1 inside the mask, <= -1 outside."""
    inside = ndimage.distance_transform_edt(mask)
    outside = ndimage.distance_transform_edt(~mask)
    return (inside - outside).astype(np.float32)


def _background_from_alpha(image: np.ndarray, depth: np.ndarray) -> Background | None:
    """Fit the background to the pixels well outside the silhouette; ``None`` when it is not smooth."""
    far = depth <= -(BAND + 2)
    sparse = np.zeros_like(far)
    sparse[::2, ::2] = far[::2, ::2]
    if sparse.sum() < 50:
        return None
    fit = fit_background(image, sparse)
    if fit.inlier_fraction < MIN_FIT_INLIERS or fit.background.noise > MAX_NOISE:
        return None
    return fit.background


def background_around(image: np.ndarray, alpha: np.ndarray) -> Background | None:
    """The background behind a coarse alpha: a smooth surface fitted to the pixels well outside its silhouette.

    Args:
        image: float32 HxWx3 in [0, 1].
        alpha: float32 HxW in [0, 1]; the silhouette is ``alpha >= 0.5``.

    Returns:
        The background, or ``None`` when the pixels outside are not a plain (uniform or smoothly graded) one.
    """
    return _background_from_alpha(image, _signed_depth(alpha >= 0.5))


def _box_blur(values: np.ndarray, radius: int) -> np.ndarray:
    size = (2 * radius + 1, 2 * radius + 1, 1) if values.ndim == 3 else 2 * radius + 1
    return ndimage.uniform_filter(values, size=size, mode="nearest")


def blur_fusion_foreground(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Foreground colours where the background is unknown: blur-fusion estimation (Forte & Pitie 2021).

    Each pass blurs the alpha-weighted foreground and the (1 - alpha)-weighted background estimates into smooth
    local means, then corrects the foreground so that ``a F + (1 - a) B`` reproduces the image. A coarse pass is
    followed by a fine one.

    Args:
        image: float32 HxWx3 in [0, 1].
        alpha: float32 HxW in [0, 1].

    Returns:
        float32 HxWx3 straight foreground colour.
    """
    a = alpha[..., None]
    foreground, background = image, image
    for radius in BLUR_FUSION_RADII:
        blurred_alpha = _box_blur(a, radius)
        blurred_fg = _box_blur(foreground * a, radius) / (blurred_alpha + 1e-5)
        background = _box_blur(background * (1 - a), radius) / (1 - blurred_alpha + 1e-5)
        foreground = np.clip(blurred_fg + a * (image - a * blurred_fg - (1 - a) * background), 0.0, 1.0)
    return foreground.astype(np.float32)


def _offsets() -> list[tuple[int, int]]:
    span = range(-WINDOW, WINDOW + 1)
    return [(dy, dx) for dy in span for dx in span if (dy, dx) != (0, 0)]


def _snap_to_colour_edge(image: np.ndarray, mask: np.ndarray, depth: np.ndarray, background: Background) -> np.ndarray:
    """Drop from a too-wide silhouette the background-coloured pixels reachable from outside it.

    Only pixels within :data:`SNAP` pixels of the silhouette edge can go, so a band centred on the snapped edge
    reaches the true edge even when a model's alpha is several pixels too wide, while background-coloured parts deep
    inside the subject (white eyes) stay.
    """
    plain = np.linalg.norm(image - background.colour, axis=2) <= background.tolerance
    reachable = ~mask | (plain & (depth <= SNAP))
    outside = ndimage.binary_propagation(~mask, structure=_FOUR_CONNECTED, mask=reachable)
    return mask & ~outside


def _ringing(image: np.ndarray, background: Background, depth: np.ndarray) -> float:
    """Codec ringing beside the silhouette, in background tolerances (see :data:`RINGING_DEAD_ZONE`)."""
    ring = (depth <= -RINGING_RING[0]) & (depth >= -RINGING_RING[1])
    if not ring.any():
        return 0.0
    difference = np.einsum("nc,dc->nd", image[ring] - background.colour[ring], LUMA_WEIGHTED)
    distance = float(np.sqrt(np.einsum("nd,nd->n", difference, difference)).mean())
    return max(0.0, distance - RINGING_NOISE_SHARE * background.noise) / background.tolerance


def _codec_gauge(image: np.ndarray, background: Background, depth: np.ndarray) -> float:
    """How much further from the background the pixels beside the silhouette are than those further out (see
    :data:`CODEC_GAUGE`): RGB distance, 0 where the frame has no background that far out."""
    distance = np.linalg.norm(image - background.colour, axis=2)
    near = (depth < -CODEC_NEAR_RING[0]) & (depth >= -CODEC_NEAR_RING[1])
    far = (depth < -CODEC_FAR_RING[0]) & (depth >= -CODEC_FAR_RING[1])
    if not near.any() or not far.any():
        return 0.0
    return float(distance[near].mean() - distance[far].mean())


def _band_alpha(
    image: np.ndarray,
    background: Background,
    depth: np.ndarray,
    ys: np.ndarray,
    xs: np.ndarray,
    dead_zone: float = DEAD_ZONE,
    space: np.ndarray = LUMA_WEIGHTED,
) -> tuple[np.ndarray, np.ndarray]:
    """Alpha and reference foreground colour of the band pixels (see the module docstring).

    ``dead_zone`` is the width, in tolerances, of the zones next to the background and the reference where the alpha
    snaps to 0 or 1; ``space`` the colour space the colours are compared in (:data:`LUMA_WEIGHTED`, or a codec frame's,
    :data:`CODEC_CHROMA_WEIGHT`).

    Returns:
        Alpha (N) and reference colour (N x 3, RGB) of the pixels at ``ys, xs``; the reference is the pixel's own
        colour where no purer one was found.
    """
    weighted = np.einsum("...c,dc->...d", image, space)  # einsum, not BLAS: see classical._least_squares
    bg = np.einsum("nc,dc->nd", background.colour[ys, xs], space)
    diff = weighted[ys, xs] - bg
    diff2 = np.einsum("ij,ij->i", diff, diff)
    tolerance2 = background.tolerance**2
    # The window is read from flat copies of the padded image and depth: one index shift per offset.
    padded = np.pad(weighted, ((WINDOW, WINDOW), (WINDOW, WINDOW), (0, 0)), mode="edge")
    stride = padded.shape[1]
    flat = padded.reshape(-1, 3)
    flat_depth = np.pad(depth, WINDOW, mode="constant", constant_values=-np.inf).ravel()
    own_depth = depth[ys, xs]
    own = (ys + WINDOW) * stride + xs + WINDOW
    window = _Window(flat, flat_depth, stride, own, own_depth, diff, diff2, bg, tolerance2)
    best_v2, best_proj, reference = window.purest(np.arange(len(ys)), (STRONG_FOREGROUND * background.tolerance) ** 2)
    # A pale part of the subject (within STRONG_FOREGROUND tolerances of the background, but not background) has no
    # strong colour to compare with: inside the silhouette, the purest colour above the tolerance stands in.
    pale = np.nonzero((best_v2 == 0) & (own_depth >= INNER_DEPTH) & (diff2 > tolerance2))[0]
    best_v2[pale], best_proj[pale], reference[pale] = window.purest(pale, tolerance2)
    alpha = np.divide(best_proj, best_v2, out=np.zeros_like(best_proj), where=best_v2 > 0)
    # Within the dead zone of either end the difference from pure background or pure foreground is noise-sized.
    length = np.sqrt(best_v2)
    dead = dead_zone * background.tolerance
    alpha[alpha * length <= dead] = 0.0
    alpha[(best_v2 > 0) & ((1 - alpha) * length <= dead)] = 1.0
    alpha = np.clip(alpha, 0.0, 1.0)
    inner = np.nonzero((own_depth >= INNER_DEPTH) & (alpha >= INNER_OPAQUE) & (alpha < 1.0))[0]
    axis = flat[reference[inner]] - bg[inner]
    plateau = _on_plateau(weighted, depth, ys[inner], xs[inner], alpha[inner], axis / best_v2[inner, None])
    alpha[inner[plateau]] = 1.0
    return alpha, image[reference // stride - WINDOW, reference % stride - WINDOW]


@dataclass(frozen=True)
class _Window:
    """The band pixels and their windows, for the search of a reference colour (see the module docstring).

    Attributes:
        flat: The padded image in the weighted colour space, flattened to N x 3.
        flat_depth: The padded signed depth, flattened (``-inf`` in the padding).
        stride: Row length of the padded image.
        own: Flat index of each band pixel.
        own_depth: Signed depth of each band pixel.
        diff: ``I - B`` of each band pixel.
        diff2: ``|I - B|^2`` of each band pixel.
        bg: ``B`` of each band pixel.
        tolerance2: The background tolerance, squared.
    """

    flat: np.ndarray
    flat_depth: np.ndarray
    stride: int
    own: np.ndarray
    own_depth: np.ndarray
    diff: np.ndarray
    diff2: np.ndarray
    bg: np.ndarray
    tolerance2: float

    def purest(self, subset: np.ndarray, floor2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the band pixels ``subset``, the window pixel at least as deep, on the line from B through I, farthest
        from B and farther than ``sqrt(floor2)``; the pixel itself counts when it is that far.

        Returns:
            ``|F - B|^2`` (0 where there is no such pixel), ``(I - B).(F - B)`` and the flat index of F.
        """
        diff, diff2, bg, own, own_depth = (
            self.diff[subset],
            self.diff2[subset],
            self.bg[subset],
            self.own[subset],
            self.own_depth[subset],
        )
        best_v2 = np.where(diff2 > floor2, diff2, 0.0)
        best_proj = best_v2.copy()
        reference = own.copy()
        # The line test: squared distance of I - B from the line through F - B is diff2 - proj^2 / v2.
        slack2 = np.maximum(self.tolerance2, RELATIVE_COLLINEARITY**2 * diff2)
        for dy, dx in _offsets():
            neighbour = own + (dy * self.stride + dx)
            v = np.take(self.flat, neighbour, axis=0) - bg
            v2 = np.einsum("ij,ij->i", v, v)
            proj = np.einsum("ij,ij->i", diff, v)
            inward = np.take(self.flat_depth, neighbour)
            better = (inward >= own_depth) & (inward > 0) & (v2 > np.maximum(best_v2, floor2)) & (proj > 0)
            better &= diff2 * v2 - proj * proj <= slack2 * v2
            best_v2 = np.where(better, v2, best_v2)
            best_proj = np.where(better, proj, best_proj)
            reference = np.where(better, neighbour, reference)
        return best_v2, best_proj, reference


def _on_plateau(
    weighted: np.ndarray, depth: np.ndarray, ys: np.ndarray, xs: np.ndarray, alpha: np.ndarray, gauge: np.ndarray
) -> np.ndarray:
    """Whether each pixel's alpha fails to ramp up towards 1 at its deeper 8-neighbours (see :data:`PLATEAU_RISE`).

    Args:
        weighted: The image in the weighted colour space.
        depth: Signed depth of every pixel.
        ys, xs: The pixels.
        alpha: Their alpha.
        gauge: Per pixel ``(F - B) / |F - B|^2`` for its reference colour F: a colour difference dotted with it is
            the alpha difference along the pixel's own mixing line.
    """
    rise = np.zeros(len(ys))
    deeper = np.zeros(len(ys))
    own_depth = depth[ys, xs]
    height, width = depth.shape
    for dy, dx in [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]:
        qy, qx = np.clip(ys + dy, 0, height - 1), np.clip(xs + dx, 0, width - 1)
        is_deeper = depth[qy, qx] >= own_depth + 0.5
        rise += np.where(is_deeper, np.einsum("ij,ij->i", weighted[qy, qx] - weighted[ys, xs], gauge), 0.0)
        deeper += is_deeper
    return rise < PLATEAU_RISE * (1.0 - alpha) * deeper


def _extend_colours(foreground: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Give every invisible pixel the colour of the nearest visible one."""
    visible = alpha > 0.5 / 255
    if not visible.any():
        return foreground
    nearest = ndimage.distance_transform_edt(~visible, return_distances=False, return_indices=True)
    return foreground[nearest[0], nearest[1]]


def defringe(image: np.ndarray, alpha: np.ndarray, background: Background | None) -> tuple[np.ndarray, np.ndarray]:
    """Re-estimate the edge alpha against the background and unmix the edge colours.

    Args:
        image: float32 HxWx3 in [0, 1].
        alpha: float32 HxW in [0, 1], the coarse alpha (hard or soft, possibly too wide).
        background: The known background, or ``None`` to fit one around the silhouette.

    Returns:
        The refined alpha (float32 HxW) and straight foreground colour (float32 HxWx3). When no smooth background
        can be found, the alpha is returned unchanged and the colours come from :func:`blur_fusion_foreground`.
    """
    mask = alpha >= 0.5
    depth = _signed_depth(mask)
    if background is None:
        background = _background_from_alpha(image, depth)
        if background is None:
            return alpha, blur_fusion_foreground(image, alpha)
    snapped = _snap_to_colour_edge(image, mask, depth, background)
    if not np.array_equal(snapped, mask):
        mask, depth = snapped, _signed_depth(snapped)
    ys, xs = np.nonzero(np.abs(depth) <= BAND)
    dead_zone = min(DEAD_ZONE + RINGING_DEAD_ZONE * _ringing(image, background, depth), MAX_DEAD_ZONE)
    codec = _codec_gauge(image, background, depth) >= CODEC_GAUGE
    space = _weighted_space(CODEC_CHROMA_WEIGHT) if codec else LUMA_WEIGHTED
    band_alpha, reference = _band_alpha(image, background, depth, ys, xs, dead_zone, space)
    refined = mask.astype(np.float32)
    refined[ys, xs] = band_alpha
    unmixed = (
        background.colour[ys, xs]
        + (image[ys, xs] - background.colour[ys, xs]) / np.maximum(band_alpha, MIN_UNMIX_ALPHA)[:, None]
    )
    foreground = image.copy()
    foreground[ys, xs] = np.where((band_alpha >= MIN_UNMIX_ALPHA)[:, None], np.clip(unmixed, 0.0, 1.0), reference)
    return refined, _extend_colours(foreground, refined)


def unmix_colours(image: np.ndarray, alpha: np.ndarray, background: Background | None) -> np.ndarray:
    """Halo-free colours for an alpha that is kept as it is (after an edge refiner such as ViTMatte).

    Unmixes ``F = B + (I - B) / a`` against the known (or fitted) background where ``a`` is large enough for the
    division to be stable, uses blur-fusion estimates where it is not or where no smooth background is found, and
    gives invisible pixels the nearest visible colour.

    Returns:
        float32 HxWx3 straight foreground colour.
    """
    if background is None:
        background = _background_from_alpha(image, _signed_depth(alpha >= 0.5))
    estimate = blur_fusion_foreground(image, alpha)
    if background is not None:
        a = alpha[..., None]
        unmixed = np.clip(background.colour + (image - background.colour) / np.maximum(a, MIN_UNMIX_ALPHA), 0.0, 1.0)
        estimate = np.where(a >= MIN_UNMIX_ALPHA, unmixed, estimate).astype(np.float32)
    return _extend_colours(estimate, alpha)


@dataclass(frozen=True)
class DefringeStep:
    """Refiner: clean edge alpha and halo-free colours (see the module docstring).

    Attributes:
        keep_alpha: The ``colour`` variant: leave the alpha as the previous step made it and only unmix the colours,
            for pipelines whose previous step already estimated a fine alpha (``vitmatte``).
    """

    keep_alpha: bool = False
    device = "cpu"
    precision = "fp32"

    def apply(self, state: MatteState) -> MatteState:
        """Refine ``alpha`` (unless ``keep_alpha``) and set ``foreground``."""
        if state.alpha is None:
            raise ValueError("defringe needs an alpha from a coarse step before it")
        if self.keep_alpha:
            return replace(state, foreground=unmix_colours(state.image, state.alpha, state.background))
        alpha, foreground = defringe(state.image, state.alpha, state.background)
        return replace(state, alpha=alpha, foreground=foreground)


def create_step(variant: str | None, context: StepContext) -> DefringeStep:
    """The step factory: no weights; the ``colour`` variant keeps the incoming alpha."""
    return DefringeStep(keep_alpha=variant == "colour")
