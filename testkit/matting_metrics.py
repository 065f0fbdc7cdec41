"""Matting quality metrics, for tests and benchmarks.

Conventions follow Rhemann et al. 2009 and Deep Image Matting (Composition-1k): alphas are float arrays in [0, 1],
scored over the **whole image** (there is no trimap here), with SAD, gradient and connectivity errors divided by 1000
as usually reported. MSE is returned as is (not multiplied by 1e3).

The aggregation helpers at the end (:class:`FrameScore`, :class:`ClipScore`, :func:`summarize`, :func:`summarize_by`,
:func:`worst_clips`, :func:`check_goals`) turn per-frame scores into the benchmark's per-setting means, its worst
clips and its goal checks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from scipy import ndimage

GRADIENT_SIGMA = 1.4
CONNECTIVITY_STEP = 0.1
CONNECTIVITY_MIN_DIFF = 0.15
HALO_BAND = 3
"""Pixels within this distance of the true edge make up the band the halo score looks at."""


def sad(alpha: np.ndarray, truth: np.ndarray) -> float:
    """Sum of absolute differences, / 1000."""
    return float(np.abs(alpha.astype(np.float64) - truth).sum() / 1000)


def mse(alpha: np.ndarray, truth: np.ndarray) -> float:
    """Mean squared error."""
    return float(np.mean((alpha.astype(np.float64) - truth) ** 2))


def _gradient_magnitude(alpha: np.ndarray) -> np.ndarray:
    values = alpha.astype(np.float64)
    gy = ndimage.gaussian_filter(values, GRADIENT_SIGMA, order=(1, 0))
    gx = ndimage.gaussian_filter(values, GRADIENT_SIGMA, order=(0, 1))
    return np.hypot(gx, gy)


def gradient_error(alpha: np.ndarray, truth: np.ndarray) -> float:
    """Sum of squared differences of the gradient magnitudes (Gaussian derivative filters, sigma 1.4), / 1000."""
    return float(((_gradient_magnitude(alpha) - _gradient_magnitude(truth)) ** 2).sum() / 1000)


def _connectivity_levels(alpha: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per pixel, the highest threshold at which it is still 4-connected to the main body of both alphas.

    For each threshold t = 0.1 .. 1.0, the main body is the largest 4-connected component of the pixels that are >= t
    in both alphas; a pixel's level is the last threshold before it drops out of the main body (1 if it never does).
    """
    levels = np.full(alpha.shape, -1.0)
    thresholds = np.arange(1, round(1 / CONNECTIVITY_STEP) + 1) * CONNECTIVITY_STEP
    for previous, threshold in zip(np.concatenate([[0.0], thresholds[:-1]]), thresholds, strict=True):
        labels, count = ndimage.label((alpha >= threshold) & (truth >= threshold))
        if count:
            sizes = np.bincount(labels.ravel())
            sizes[0] = 0
            body = labels == int(np.argmax(sizes))
        else:
            body = np.zeros(alpha.shape, dtype=bool)
        levels[(levels == -1) & ~body] = previous
    levels[levels == -1] = 1.0
    return levels


def connectivity_error(alpha: np.ndarray, truth: np.ndarray) -> float:
    """Connectivity error (Rhemann et al. 2009), / 1000.

    ``phi = 1 - d * [d >= 0.15]`` with ``d = alpha - level`` (see :func:`_connectivity_levels`); the error is the sum
    of ``|phi(alpha) - phi(truth)|``.
    """
    a = alpha.astype(np.float64)
    t = truth.astype(np.float64)
    levels = _connectivity_levels(a, t)
    d_alpha, d_truth = a - levels, t - levels
    phi_alpha = 1 - d_alpha * (d_alpha >= CONNECTIVITY_MIN_DIFF)
    phi_truth = 1 - d_truth * (d_truth >= CONNECTIVITY_MIN_DIFF)
    return float(np.abs(phi_alpha - phi_truth).sum() / 1000)


def pixel_accuracy(alpha: np.ndarray, truth: np.ndarray) -> float:
    """Share of pixels on the same side of 0.5 in both alphas (foreground vs background)."""
    return float(np.mean((alpha > 0.5) == (truth > 0.5)))


def dtssd(alphas: Sequence[np.ndarray], truths: Sequence[np.ndarray]) -> float:
    """Temporal flicker of a sequence: mean over consecutive frame pairs of
    ``100 * sqrt(sum(((a_t - a_t-1) - (a*_t - a*_t-1))^2) / N)``, N the number of pixels.

    Raises:
        ValueError: Fewer than two frames, or sequences of different lengths.
    """
    if len(alphas) != len(truths) or len(alphas) < 2:
        raise ValueError("dtSSD needs two sequences of the same length, at least 2 frames")
    values = []
    for t in range(1, len(alphas)):
        change = alphas[t].astype(np.float64) - alphas[t - 1]
        true_change = truths[t].astype(np.float64) - truths[t - 1]
        values.append(100 * np.sqrt(np.sum((change - true_change) ** 2) / change.size))
    return float(np.mean(values))


def edge_band(truth: np.ndarray, width: int = HALO_BAND) -> np.ndarray:
    """Pixels within ``width`` pixels of the true edge: the fractional pixels and the 0.5 contour (bool HxW)."""
    solid = truth > 0.5
    edge = ((truth > 0) & (truth < 1)) | (solid ^ ndimage.binary_erosion(solid))
    return ndimage.distance_transform_edt(~edge) <= width


ERROR_REGIONS = ("outer edge", "holes", "elsewhere")
"""Where an alpha error lies, by the true alpha (see :func:`error_regions`)."""

REGION_BAND = 3
"""Pixels within this distance of the true silhouette count as its edge (the width of a codec's ringing)."""

_FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)


def _near(mask: np.ndarray, distance: float) -> np.ndarray:
    """Pixels at most ``distance`` from ``mask`` (the mask included); none when the mask is empty."""
    if not mask.any():
        return np.zeros_like(mask)
    return ndimage.distance_transform_edt(~mask) <= distance


def error_regions(truth: np.ndarray) -> np.ndarray:
    """Each pixel's region, as an index into :data:`ERROR_REGIONS` (int8 HxW).

    * holes: background the subject encloses (not 4-connected to the frame border, as the gap between a raised arm
      and the body) and the pixels within :data:`REGION_BAND` of it, on either side;
    * outer edge: the other pixels within :data:`REGION_BAND` of the outer silhouette, on either side;
    * elsewhere: the subject's inside and the open background.
    """
    subject = truth > 0.5
    labels, _ = ndimage.label(~subject, structure=_FOUR_CONNECTED)
    border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    outer = np.isin(labels, border[border > 0])
    regions = np.full(truth.shape, 2, dtype=np.int8)
    regions[_near(outer, REGION_BAND) & _near(~outer, REGION_BAND)] = 0
    regions[_near(~subject & ~outer, REGION_BAND)] = 1
    return regions


def region_errors(alpha: np.ndarray, truth: np.ndarray, regions: np.ndarray | None = None) -> np.ndarray:
    """The absolute and squared alpha errors summed per region (:func:`error_regions`): len(ERROR_REGIONS) x 2.

    Summed over a clip's frames and divided as :func:`sad` and :func:`mse` divide, the rows add up to them.
    """
    where = (error_regions(truth) if regions is None else regions).ravel()
    error = (alpha.astype(np.float64) - truth).ravel()
    count = len(ERROR_REGIONS)
    return np.stack(
        [np.bincount(where, np.abs(error), minlength=count), np.bincount(where, error**2, minlength=count)], axis=1
    )


def halo_score(rgba: np.ndarray, true_rgba: np.ndarray, band: np.ndarray | None = None) -> float:
    """How much wrong colour shows at the edge of a cut-out, in 0..255 units (0 is perfect).

    Both cut-outs are composited over black and over white. For each, the score is the mean absolute difference of
    the two composites over the pixels and channels of the edge band (:func:`edge_band` of the true alpha); the halo
    score is the larger of the two. A background halo (old background colour left in the edge) shows on one of the
    two, whatever its colour; so does a too-wide or too-narrow alpha. Only premultiplied colour enters, so the RGB
    of fully transparent pixels does not matter.

    Args:
        rgba: Straight RGBA, uint8 HxWx4 or float HxWx4 in [0, 1].
        true_rgba: The ground truth, in the same form.
        band: :func:`edge_band` of the true alpha, if it is known already (it depends on the truth alone).
    """
    if band is None:
        band = edge_band(_unit(true_rgba)[..., 3])
    predicted, truth = _unit(rgba[band]), _unit(true_rgba[band])  # the band's pixels only
    worst = 0.0
    for backdrop in (0.0, 1.0):
        over_pred = predicted[:, :3] * predicted[:, 3:] + backdrop * (1 - predicted[:, 3:])
        over_true = truth[:, :3] * truth[:, 3:] + backdrop * (1 - truth[:, 3:])
        worst = max(worst, float(np.abs(over_pred - over_true).mean()) * 255)
    return worst


def _unit(rgba: np.ndarray) -> np.ndarray:
    return rgba.astype(np.float64) / 255 if rgba.dtype == np.uint8 else rgba.astype(np.float64)


@dataclass(frozen=True)
class AlphaMetrics:
    """The per-frame alpha metrics of one prediction."""

    sad: float
    mse: float
    gradient: float
    connectivity: float
    pixel_accuracy: float


def alpha_metrics(alpha: np.ndarray, truth: np.ndarray) -> AlphaMetrics:
    """Every per-frame alpha metric of ``alpha`` against ``truth`` (float HxW in [0, 1])."""
    return AlphaMetrics(
        sad=sad(alpha, truth),
        mse=mse(alpha, truth),
        gradient=gradient_error(alpha, truth),
        connectivity=connectivity_error(alpha, truth),
        pixel_accuracy=pixel_accuracy(alpha, truth),
    )


# --- aggregation --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameScore:
    """One pipeline's scores on one frame (the gradient and connectivity errors only where they were measured)."""

    sad: float
    mse: float
    pixel_accuracy: float
    halo: float
    ms: float
    """CPU milliseconds of the pipeline's run."""
    wall_ms: float
    gradient: float | None = None
    connectivity: float | None = None
    failed: bool = False
    """The pipeline refused the frame; it is scored as an empty cut-out."""


@dataclass(frozen=True)
class ClipScore:
    """One pipeline's scores on every frame of one clip (a still or an animation) under one setting."""

    name: str
    frames: tuple[FrameScore, ...]
    dtssd: float | None = None
    """The clip's temporal flicker (:func:`dtssd`); None for a still."""

    def mean(self, key: str) -> float:
        """The mean of a :class:`FrameScore` field over the clip's frames (``dtssd``: the clip's own)."""
        if key == "dtssd":
            return math.nan if self.dtssd is None else self.dtssd
        return float(np.mean([getattr(frame, key) for frame in self.frames]))

    @property
    def worst_frame(self) -> int:
        """The index of the frame with the highest SAD (the first of equals)."""
        return int(np.argmax([frame.sad for frame in self.frames]))


HIGHER_IS_BETTER = frozenset({"pixel_accuracy"})


def worst_clips(clips: Iterable[ClipScore], count: int = 5, key: str = "sad") -> list[ClipScore]:
    """The ``count`` worst clips by their mean ``key`` (highest first; for pixel accuracy, lowest first).

    Ties are broken by name, so the choice does not depend on the order the clips were scored in.
    """
    sign = 1.0 if key in HIGHER_IS_BETTER else -1.0
    return sorted(clips, key=lambda clip: (sign * clip.mean(key), clip.name))[:count]


@dataclass(frozen=True)
class Summary:
    """One pipeline under one setting over a dataset: means over all frames (dtSSD: over the animated clips), the
    median CPU and wall milliseconds, and the worst clips by SAD."""

    clips: int
    frames: int
    sad: float
    mse: float
    pixel_accuracy: float
    halo: float
    gradient: float
    """NaN where the gradient error was not measured."""
    connectivity: float
    dtssd: float
    """NaN for a dataset of stills."""
    ms: float
    wall_ms: float
    failures: int
    worst: tuple[ClipScore, ...]

    @property
    def worst_sad(self) -> float:
        """The highest mean SAD of a clip."""
        return self.worst[0].mean("sad") if self.worst else math.nan


def _mean(values: Sequence[float | None]) -> float:
    known = [value for value in values if value is not None]
    return float(np.mean(known)) if known else math.nan


def summarize(clips: Sequence[ClipScore], worst: int = 5) -> Summary:
    """The :class:`Summary` of one pipeline's clips under one setting.

    Raises:
        ValueError: No clips, or a clip without frames.
    """
    frames = [frame for clip in clips for frame in clip.frames]
    if not clips or any(not clip.frames for clip in clips):
        raise ValueError("a summary needs at least one clip, and every clip at least one frame")
    return Summary(
        clips=len(clips),
        frames=len(frames),
        sad=_mean([frame.sad for frame in frames]),
        mse=_mean([frame.mse for frame in frames]),
        pixel_accuracy=_mean([frame.pixel_accuracy for frame in frames]),
        halo=_mean([frame.halo for frame in frames]),
        gradient=_mean([frame.gradient for frame in frames]),
        connectivity=_mean([frame.connectivity for frame in frames]),
        dtssd=_mean([clip.dtssd for clip in clips]),
        ms=float(np.median([frame.ms for frame in frames])),
        wall_ms=float(np.median([frame.wall_ms for frame in frames])),
        failures=sum(frame.failed for frame in frames),
        worst=tuple(worst_clips(clips, worst)),
    )


K = TypeVar("K", bound=Hashable)


def summarize_by(scores: Iterable[tuple[K, ClipScore]], worst: int = 5) -> dict[K, Summary]:
    """A :class:`Summary` per key (e.g. (dataset, pipeline, setting)) of ``(key, clip score)`` pairs, the keys in the
    order they first appear."""
    groups: dict[K, list[ClipScore]] = {}
    for key, clip in scores:
        groups.setdefault(key, []).append(clip)
    return {key: summarize(clips, worst) for key, clips in groups.items()}


@dataclass(frozen=True)
class Goal:
    """A limit on one :class:`Summary` figure (``sad``, ``mse``, ``pixel_accuracy``, ``dtssd``, ``ms``,
    ``worst_sad`` ...)."""

    metric: str
    limit: float
    scales: bool = True
    """Whether a setting's slack loosens the limit (a time budget does not)."""

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def limit_with(self, slack: float) -> float:
        """The limit loosened by ``slack`` (x1.5: 1.5 times the error; for accuracy, 1.5 times 1 - accuracy)."""
        if not self.scales:
            return self.limit
        return 1 - (1 - self.limit) * slack if self.higher_is_better else self.limit * slack


@dataclass(frozen=True)
class GoalCheck:
    """One goal checked against one summary."""

    goal: Goal
    value: float
    limit: float

    @property
    def met(self) -> bool:
        """Whether the value is within the limit (a figure that was not measured, NaN, is not)."""
        if math.isnan(self.value):
            return False
        return self.value >= self.limit if self.goal.higher_is_better else self.value <= self.limit

    def __str__(self) -> str:
        sign = ">=" if self.goal.higher_is_better else "<="
        return f"{'PASS' if self.met else 'MISS'} {self.goal.metric} {self.value:.4g} {sign} {self.limit:.4g}"


def check_goals(summary: Summary, goals: Sequence[Goal], slack: float = 1.0) -> list[GoalCheck]:
    """Each goal checked against ``summary``, its limit loosened by ``slack``."""
    return [GoalCheck(goal, float(getattr(summary, goal.metric)), goal.limit_with(slack)) for goal in goals]


def all_met(checks: Mapping[str, Sequence[GoalCheck]]) -> bool:
    """Whether every check of every group passed."""
    return all(check.met for group in checks.values() for check in group)
