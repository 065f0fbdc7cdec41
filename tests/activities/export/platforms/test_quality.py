"""SSIM over white and over a dark chat background, against the lossless source."""

from __future__ import annotations

import numpy as np
import pytest

from activities.export.platforms.quality import DARK, WHITE, composite, ssim, ssim_over_backgrounds


def disc(edge_alpha: int = 255, size: int = 48) -> np.ndarray:
    yy, xx = np.indices((size, size))
    radius = np.hypot(yy - size / 2, xx - size / 2)
    rgba = np.zeros((size, size, 4), np.uint8)
    rgba[radius < size / 3] = (240, 120, 40, 255)
    rgba[(radius >= size / 3) & (radius < size / 3 + 2)] = (240, 120, 40, edge_alpha)
    return rgba


def test_transparent_pixels_show_the_background() -> None:
    clear = np.zeros((4, 4, 4), np.uint8)
    assert np.all(composite(clear, WHITE) == 255) and np.all(composite(clear, DARK) == 31)


def test_ssim_is_one_for_the_same_image_and_lower_for_a_changed_one() -> None:
    image = composite(disc(), WHITE)
    noisy = np.clip(image + np.random.default_rng(1).normal(0, 12, image.shape), 0, 255)

    assert ssim(image, image) == pytest.approx(1.0)
    assert 0.5 < ssim(image, noisy) < 0.99
    assert ssim(image, noisy) == pytest.approx(ssim(noisy, image))


def test_a_lost_soft_edge_shows_over_one_background_more_than_the_other() -> None:
    """A half-transparent edge made opaque: invisible change over a matching background, visible over the other."""
    source, hard = disc(edge_alpha=128), disc(edge_alpha=255)
    white, dark = ssim_over_backgrounds([source, source], [hard, hard])

    assert white < 1.0 and dark < 1.0 and white != dark


def test_frames_are_compared_one_to_one() -> None:
    with pytest.raises(ValueError, match="1 decoded frames for 2 source frames"):
        ssim_over_backgrounds([disc(), disc()], [disc()])
