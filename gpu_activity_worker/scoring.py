"""The auto-pick score of a cut-out: how usable an alpha looks as an emoji, in [0, 1], from the alpha alone.

The workflow picks, per frame, the candidate with the highest score. A good emoji cut-out is one subject, whole,
inside the frame, with a clean edge. Four parts measure that, each in [0, 1] with 1 the best, on the silhouette
S = {alpha >= 0.5}:

``coverage``
    Share f of the frame inside S: 1 for f in [0.05, 0.85], falling linearly to 0 at f = 0 and at f = 1. Empty
    means nothing was found; the whole frame means the background was kept.
``connected``
    Share of S in its largest 8-connected component. A subject is one piece; kept background blobs or a shattered
    subject lower it.
``inside``
    exp(-n / (5% of the frame perimeter)), where n counts frame-edge pixels in S. Opaque pixels on the frame edge
    mean the subject is cut off by the frame (or background was kept along it); the longer the cut, the lower, but
    never 0, so frames where every candidate is cut still rank.
``crisp``
    Ratio r of semi-transparent pixels (0.05 < alpha < 0.95) to the edge length of S (pixels of S with a 4-neighbour
    outside it): 1 for r <= 4, falling linearly to 0 at r = 10. Anti-aliasing gives r of about 1 to 2; a too-soft or
    too-wide alpha (the usual halo) gives much more.

score = coverage * connected * inside * crisp

A product, so one failure sinks a candidate whatever the other parts say.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

COVERAGE_RANGE = (0.05, 0.85)
CUT_SCALE = 0.05
"""Frame-edge pixels in the silhouette, as a share of the frame perimeter, at which ``inside`` falls to 1/e."""
SOFT_RANGE = (0.05, 0.95)
CRISP_RATIO = (4.0, 10.0)
"""Semi-transparent pixels per edge pixel: full marks up to the first, none from the second."""

_EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


def _ramp(value: float, zero: float, one: float) -> float:
    """Linear from 0 at ``zero`` to 1 at ``one`` (either order), clipped to [0, 1]."""
    return float(np.clip((value - zero) / (one - zero), 0.0, 1.0))


def _coverage(solid: np.ndarray) -> float:
    share = float(solid.mean())
    low, high = COVERAGE_RANGE
    return min(_ramp(share, 0.0, low), _ramp(share, 1.0, high))


def _connected(solid: np.ndarray) -> float:
    labels, count = ndimage.label(solid, structure=_EIGHT_CONNECTED)
    if count == 0:
        return 0.0
    sizes = np.bincount(labels.ravel())[1:]
    return float(sizes.max() / sizes.sum())


def _inside(solid: np.ndarray) -> float:
    frame_edge = np.concatenate([solid[0], solid[-1], solid[1:-1, 0], solid[1:-1, -1]])
    return float(np.exp(-frame_edge.sum() / (CUT_SCALE * frame_edge.size)))


def _crisp(alpha: np.ndarray, solid: np.ndarray) -> float:
    soft = int(((alpha > SOFT_RANGE[0]) & (alpha < SOFT_RANGE[1])).sum())
    edge = int((solid & ~ndimage.binary_erosion(solid, border_value=1)).sum())
    ratio = soft / max(edge, 1)
    return _ramp(ratio, CRISP_RATIO[1], CRISP_RATIO[0])


def score_matte(alpha: np.ndarray) -> tuple[float, dict[str, float]]:
    """Score a cut-out's alpha for automatic picking (see the module docstring).

    Args:
        alpha: HxW alpha in [0, 1] (float) or 0..255 (uint8).

    Returns:
        The score in [0, 1] and its parts ``coverage``, ``connected``, ``inside`` and ``crisp``, each in [0, 1].
    """
    values = alpha.astype(np.float32) / 255 if alpha.dtype == np.uint8 else alpha.astype(np.float32)
    solid = values >= 0.5
    parts = {
        "coverage": _coverage(solid),
        "connected": _connected(solid),
        "inside": _inside(solid),
        "crisp": _crisp(values, solid),
    }
    return float(np.prod(list(parts.values()))), parts
