"""The weight-free click segmenter ``clicks``: region growing from the clicks, bounded by edges.

The region is segmented on the pristine source frame, never on the cut-out, so a region the matting dropped can be
found again.

1. Colours. Each foreground click reads the colour of its region as the median of the 3x3 pixels around it (a click
   on an anti-aliased edge still reads the region's colour). A pixel may join the region when its RGB distance to
   the colour of some foreground click is at most :data:`COLOUR_TOLERANCE`; the clicked pixels always may.
2. Edges. The region grows between 4-neighbours only where their colours differ by at most :data:`EDGE_STEP`: a
   hard edge stops it even between two colours close enough to join (a dark outline stops it anyway, its colour is
   far from the region's).
3. Background clicks are seeds of a competing region that grows the same way. Every pixel goes to the nearer of the
   two (geodesic distance: each step costs one pixel plus :data:`CONTRAST_COST` per unit of colour difference, so
   the two meet where the colour changes), so a background click on the far side of a thin bridge stops the region
   leaking through it.

The region is what the foreground clicks reach and win. :func:`fringe` adds the mixed, anti-aliased pixels around it
(erasing a blob then leaves no faint ring).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import InvalidRefineError
from workflows.contract import RefineMode, RefinePoint

COLOUR_TOLERANCE = 0.25
"""Largest RGB distance (channels in [0, 1]) from a foreground click's colour at which a pixel may join its region:
shading within a flat cartoon area stays well within it, the next area's colour is usually beyond it."""
EDGE_STEP = 0.12
"""Largest colour difference between two neighbouring pixels the region grows across."""
CONTRAST_COST = 100.0
"""Geodesic cost per unit of colour difference along a path, in pixels of flat travel."""
SPECKLE_SHARE = 1.5e-3
MIN_SPECKLE = 4
"""Enclosed gaps of the region up to SPECKLE_SHARE of the frame, or MIN_SPECKLE pixels, are filled (6 pixels at
64x64, 98 at 256x256): codec specks, not the eyes or buttons a click on a face should leave alone."""

FRINGE_PIXELS = 1
"""Width of the anti-aliased fringe :func:`fringe` adds around a region."""


def seed_colours(image: np.ndarray, points: Sequence[RefinePoint]) -> np.ndarray:
    """float (N, 3): the median colour of the 3x3 pixels around each point (clipped at the frame)."""
    height, width = image.shape[:2]
    windows = [image[max(0, p.y - 1) : min(height, p.y + 2), max(0, p.x - 1) : min(width, p.x + 2)] for p in points]
    colours = [np.median(window.reshape(-1, 3), axis=0) for window in windows]
    return np.array(colours, dtype=np.float64).reshape(-1, 3)


def _flat(points: Sequence[RefinePoint], width: int) -> np.ndarray:
    return np.array([p.y * width + p.x for p in points], dtype=np.int64)


def segment(image: np.ndarray, points: Sequence[RefinePoint]) -> np.ndarray:
    """The region the foreground clicks point at (see the module docstring).

    Args:
        image: uint8 HxWx3, the pristine source frame.
        points: The clicks, all inside the frame; at least one foreground.

    Returns:
        bool HxW, the region (empty when there is no foreground click).
    """
    height, width = image.shape[:2]
    foreground = [p for p in points if p.foreground]
    background = [p for p in points if not p.foreground]
    if not foreground:
        return np.zeros((height, width), dtype=bool)
    colours = image.astype(np.float64) / 255
    seeds = seed_colours(colours, foreground)
    distance = np.linalg.norm(colours[:, :, None, :] - seeds[None, None, :, :], axis=-1).min(axis=-1)
    allowed = (distance <= COLOUR_TOLERANCE).ravel()
    fg, bg = _flat(foreground, width), _flat(background, width)
    allowed[fg] = True
    allowed[bg] = True
    graph = _graph(colours, allowed)
    to_fg = np.asarray(dijkstra(graph, directed=False, indices=fg, min_only=True))
    to_bg = np.asarray(dijkstra(graph, directed=False, indices=bg, min_only=True)) if bg.size else np.inf
    region = np.isfinite(to_fg) & (to_fg < to_bg)
    return _without_speckles(np.asarray(region.reshape(height, width)))


def _without_speckles(region: np.ndarray) -> np.ndarray:
    """``region`` with its small enclosed gaps filled (:data:`SPECKLE_SHARE`): pixels a codec pushed past the colour
    tolerance inside a flat area, which an erase would otherwise leave behind as specks."""
    gaps, count = ndimage.label(ndimage.binary_fill_holes(region) & ~region)
    if not count:
        return region
    sizes = np.bincount(gaps.ravel(), minlength=count + 1)
    small = sizes <= max(MIN_SPECKLE, SPECKLE_SHARE * region.size)
    small[0] = False
    return region | small[gaps]


def _graph(colours: np.ndarray, allowed: np.ndarray) -> coo_matrix:
    """The 4-neighbour grid between allowed pixels whose colours differ by at most EDGE_STEP, weighted by the
    geodesic step cost."""
    height, width = colours.shape[:2]
    index = np.arange(height * width).reshape(height, width)
    flat = colours.reshape(-1, 3)
    starts, ends = [], []
    for a, b in ((index[:, :-1], index[:, 1:]), (index[:-1, :], index[1:, :])):
        starts.append(a.ravel())
        ends.append(b.ravel())
    start, end = np.concatenate(starts), np.concatenate(ends)
    step = np.linalg.norm(flat[start] - flat[end], axis=1)
    keep = allowed[start] & allowed[end] & (step <= EDGE_STEP)
    weights = 1.0 + CONTRAST_COST * step[keep]  # always positive: a zero weight would not be an edge
    size = height * width
    return coo_matrix((weights, (start[keep], end[keep])), shape=(size, size))


def fringe(image: np.ndarray, region: np.ndarray, points: Sequence[RefinePoint]) -> np.ndarray:
    """``region`` with the pixels around it (up to :data:`FRINGE_PIXELS`) whose colour is too far from every
    foreground click's to be in it: its anti-aliased edge, mixed with what lies beyond."""
    if not region.any():
        return region
    colours = image.astype(np.float64) / 255
    seeds = seed_colours(colours, [p for p in points if p.foreground])
    far = np.linalg.norm(colours[:, :, None, :] - seeds[None, None, :, :], axis=-1).min(axis=-1) > COLOUR_TOLERANCE
    grown = ndimage.binary_dilation(region, structure=np.ones((3, 3), dtype=bool), iterations=FRINGE_PIXELS)
    return np.asarray(region | (grown & far))


class ClickSegmenter:
    """The ``clicks`` segmenter: region growing on each frame from the same clicks. Stateless, thread-safe."""

    name = "clicks"
    device = "cpu"
    precision = "fp32"
    uses_gpu = False

    def segment(self, image: np.ndarray, points: Sequence[RefinePoint], mode: RefineMode) -> np.ndarray:
        """The clicked region of one frame (:func:`segment`); to erase, with its :func:`fringe`."""
        region = segment(image, points)
        return fringe(image, region, points) if mode is RefineMode.ERASE else region

    def carry(
        self,
        first_image: np.ndarray,
        first: np.ndarray,
        images: Sequence[np.ndarray],
        points: Sequence[RefinePoint],
        mode: RefineMode,
    ) -> list[np.ndarray]:
        """The region on each of the following ``images``: the same clicks segmented again on each."""
        return [self.segment(image, points, mode) for image in images]


def create_segmenter(variant: str | None, pipelines: Pipelines) -> ClickSegmenter:
    """The factory: ``clicks`` has no variants and needs nothing of the worker's pipelines.

    Raises:
        InvalidRefineError: A variant was given.
    """
    if variant is not None:
        raise InvalidRefineError(f"the clicks refiner has no variant {variant!r}")
    return ClickSegmenter()
