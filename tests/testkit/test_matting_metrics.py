"""Matting metrics on small alphas whose errors are known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from testkit import matting_metrics as metrics

SIZE = 64


def _disc(radius: float = 20.0, cx: float = 32.0) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - 32, xx - cx) - radius), 0.0, 1.0)


def test_a_perfect_alpha_scores_zero_error() -> None:
    truth = _disc()

    scores = metrics.alpha_metrics(truth, truth)

    assert scores == metrics.AlphaMetrics(sad=0.0, mse=0.0, gradient=0.0, connectivity=0.0, pixel_accuracy=1.0)


def test_sad_mse_and_pixel_accuracy_of_a_known_error() -> None:
    truth = np.zeros((SIZE, SIZE))
    alpha = truth.copy()
    alpha[:10, :10] = 1.0  # 100 pixels wrong by 1
    alpha[20:30, :] = 0.2  # 640 pixels wrong by 0.2, still on the right side of 0.5

    assert metrics.sad(alpha, truth) == pytest.approx((100 + 640 * 0.2) / 1000)
    assert metrics.mse(alpha, truth) == pytest.approx((100 + 640 * 0.04) / SIZE**2)
    assert metrics.pixel_accuracy(alpha, truth) == pytest.approx(1 - 100 / SIZE**2)


def test_gradient_error_grows_with_blur() -> None:
    truth = _disc()
    slightly, badly = ndimage.gaussian_filter(truth, 1.0), ndimage.gaussian_filter(truth, 3.0)

    assert 0 < metrics.gradient_error(slightly, truth) < metrics.gradient_error(badly, truth)


def test_connectivity_error_counts_a_detached_blob() -> None:
    truth = _disc(12, cx=20)
    blob = truth.copy()
    blob[40:50, 45:55] = 0.6  # a detached, half-transparent blob the truth does not have

    # Off the main body the blob is measured against level 0: phi = 1 - 0.6, against 1 for the truth's zeros.
    assert metrics.connectivity_error(blob, truth) == pytest.approx(100 * 0.6 / 1000)
    assert metrics.connectivity_error(truth, truth) == 0.0


def test_dtssd_measures_flicker_not_motion() -> None:
    truths = [np.roll(_disc(), shift, axis=1) for shift in range(4)]
    flicker = [truth + (0.1 if t % 2 else 0.0) for t, truth in enumerate(truths)]

    assert metrics.dtssd(truths, truths) == 0.0  # motion that the truth has too is not flicker
    assert metrics.dtssd(flicker, truths) == pytest.approx(100 * 0.1)
    with pytest.raises(ValueError, match="at least 2 frames"):
        metrics.dtssd(truths[:1], truths[:1])


def test_edge_band_follows_the_true_edge() -> None:
    band = metrics.edge_band(_disc())
    distance = np.abs(np.hypot(*np.indices((SIZE, SIZE)) - 32.0) - 20)

    assert band[distance <= 2].all()
    assert not band[distance >= 5].any()


def test_halo_score_sees_background_left_in_the_edge() -> None:
    truth_alpha = _disc()
    colour = np.broadcast_to(np.array([0.9, 0.2, 0.1]), (SIZE, SIZE, 3))
    truth = np.dstack([colour, truth_alpha])
    image = colour * truth_alpha[..., None] + (1 - truth_alpha[..., None])  # over white
    wide = ndimage.grey_dilation(truth_alpha, size=5)

    assert metrics.halo_score(truth, truth) == 0.0
    assert metrics.halo_score(np.rint(truth * 255).astype(np.uint8), truth) < 1.0
    unmixed_but_wide = metrics.halo_score(np.dstack([colour, wide]), truth)
    naive = metrics.halo_score(np.dstack([image, wide]), truth)
    assert 0 < unmixed_but_wide < naive
    assert naive > 50
