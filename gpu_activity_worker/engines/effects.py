"""The refiner ``effects``: restore the small effects drawn around a character that a coarse step dropped.

Emoji animations draw effects beside the character: motion lines, sparks and sparkles, sweat drops, hearts, zzz.
Segmentation models (BiRefNet, rembg) keep the character and drop these small separated blobs; the original product
restored them with a "rescue" step. This step does the same against the known background, with no weights:

* Background: the coarse step's (``floodfill``), else a smooth surface fitted to the pixels well outside the coarse
  silhouette (:func:`~gpu_activity_worker.engines.defringe.background_around`). When there is no plain background
  (a texture, a photo) nothing can be told apart from it and the step changes nothing.
* Candidates: the 8-connected blobs of pixels outside the silhouette (alpha < 0.5) that differ from the background by
  more than its tolerance, compared in :data:`~gpu_activity_worker.engines.defringe.LUMA_WEIGHTED` space (luma at
  full weight, chroma at half), which codecs smear least.
* A candidate is restored when it is an effect and not compression noise or edge matter:

  - contrast: at least :data:`MIN_CORE` of the frame's pixels of it stand :data:`EFFECT_CONTRAST` tolerances off
    the background *and* lie more than :data:`EDGE_BAND` pixels from the silhouette. Codec noise on a plain
    background is weak, and the strong ringing of H.264 and JPEG hugs edges; the anti-aliased fringe a tight model
    mask leaves outside the subject is within the band too, and is the ``defringe`` step's business;
  - size: at least :data:`MIN_AREA` of the frame (a speck is noise) and at most :data:`MAX_SUBJECT_SHARE` of the
    subject's area (a large dropped region is a second subject the model chose to leave out, not an effect);
  - distance: within :data:`MAX_DISTANCE` of the frame's side from the silhouette (effects are drawn around the
    character; a blob far from it is a stray mark);
  - it does not touch the frame border (the dark edge lines some video decoders leave are not effects).

* Restored blobs get alpha 1. Run ``defringe`` after this step (``birefnet+effects+defringe``): it re-estimates the
  alpha of every edge of the silhouette, the restored blobs' included, and unmixes their colours, so they get the same
  anti-aliased, halo-free edge as the character. Before ``defringe`` rather than after for that reason; after the
  coarse step because it needs its silhouette.

After ``floodfill`` the step finds nothing to restore (the flood fill keeps every blob that is not background), which
is why the weight-free ``classical`` alias does not include it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import ndimage

from gpu_activity_worker.engines.base import Background, MatteState, StepContext
from gpu_activity_worker.engines.defringe import LUMA_WEIGHTED, background_around

EFFECT_CONTRAST = 3.0
"""How many background tolerances an effect's core pixels stand off the background."""

EDGE_BAND = 3.0
"""Pixels within this distance of the silhouette do not count towards an effect's core (codec ringing, fringe)."""

MIN_CORE = 6e-5
"""Fewest core pixels of an effect, as a share of the frame (4 pixels at 256x256)."""

MIN_AREA = 1.5e-4
"""Smallest effect, as a share of the frame (10 pixels at 256x256)."""

MAX_SUBJECT_SHARE = 0.25
"""Largest effect, as a share of the coarse silhouette's area."""

MAX_DISTANCE = 0.2
"""Farthest an effect may be from the silhouette, as a share of the frame's longer side (51 pixels at 256)."""

_EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


def _contrast(image: np.ndarray, background: Background) -> np.ndarray:
    """Distance of every pixel from the background in :data:`LUMA_WEIGHTED` space (HxW)."""
    difference = np.einsum("...c,dc->...d", image - background.colour, LUMA_WEIGHTED)
    return np.sqrt(np.einsum("...d,...d->...", difference, difference))


def effect_blobs(image: np.ndarray, alpha: np.ndarray, background: Background) -> np.ndarray:
    """The pixels of the effects the coarse alpha left out (see the module docstring for the rules).

    Args:
        image: float32 HxWx3 in [0, 1].
        alpha: float32 HxW in [0, 1], the coarse alpha; its silhouette is ``alpha >= 0.5``.
        background: The background behind the image.

    Returns:
        bool HxW, True on the restored effects' pixels (all outside the silhouette).
    """
    mask = alpha >= 0.5
    if not mask.any():
        return np.zeros_like(mask)
    contrast = _contrast(image, background)
    tolerance = background.tolerance
    weak = (contrast > tolerance) & ~mask
    if not weak.any():
        return np.zeros_like(mask)
    distance = ndimage.distance_transform_edt(~mask)
    core = weak & (contrast > EFFECT_CONTRAST * tolerance) & (distance > EDGE_BAND)
    if not core.any():
        return np.zeros_like(mask)
    labels, count = ndimage.label(weak, structure=_EIGHT_CONNECTED)
    area = np.bincount(labels.ravel(), minlength=count + 1)
    cores = np.bincount(labels[core], minlength=count + 1)
    nearest = np.full(count + 1, np.inf)
    np.minimum.at(nearest, labels[weak], distance[weak])
    border = np.zeros(count + 1, dtype=bool)
    border[np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])] = True
    pixels = alpha.size
    effect = (
        (cores >= MIN_CORE * pixels)
        & (area >= MIN_AREA * pixels)
        & (area <= MAX_SUBJECT_SHARE * np.count_nonzero(mask))
        & (nearest <= MAX_DISTANCE * max(alpha.shape))
        & ~border
    )
    effect[0] = False
    return effect[labels]


class EffectsStep:
    """Refiner: restore the effects a coarse step dropped (see the module docstring)."""

    device = "cpu"
    precision = "fp32"

    def apply(self, state: MatteState) -> MatteState:
        """Set ``alpha`` to 1 on the restored effects, and ``background`` when it had to be fitted here."""
        if state.alpha is None:
            raise ValueError("effects needs an alpha from a coarse step before it")
        background = state.background or background_around(state.image, state.alpha)
        if background is None:
            return state
        blobs = effect_blobs(state.image, state.alpha, background)
        alpha = np.where(blobs, np.float32(1.0), state.alpha).astype(np.float32) if blobs.any() else state.alpha
        return replace(state, alpha=alpha, background=background)


def create_step(variant: str | None, context: StepContext) -> EffectsStep:
    """The step factory: the effects step has no variants and no weights, so it ignores both arguments."""
    return EffectsStep()
