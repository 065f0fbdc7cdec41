"""How much an encoded emoji lost: SSIM against the lossless source, composited over white and over a dark chat.

Scoring RGBA directly would let the transparent background inflate the score; what a person sees is the emoji on a
chat background, so both are composited first, once on white (light themes) and once on :data:`DARK` (dark themes).
SSIM is the usual Gaussian-window form (sigma 1.5, Wang et al. 2004), per colour channel and averaged; it matches
scikit-image's ``structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=False)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import ndimage

WHITE = (255, 255, 255)
DARK = (31, 31, 31)
"""A dark chat background (the dark themes of LINE, Telegram and Discord are near #1F1F1F)."""

_C1 = (0.01 * 255) ** 2
_C2 = (0.03 * 255) ** 2


def composite(rgba: np.ndarray, background: tuple[int, int, int]) -> np.ndarray:
    """Straight RGBA uint8 (HxWx4) shown over ``background``, as float RGB (HxWx3)."""
    colour = rgba[..., :3].astype(np.float64)
    alpha = rgba[..., 3:4].astype(np.float64) / 255.0
    return colour * alpha + np.asarray(background, dtype=np.float64) * (1.0 - alpha)


def ssim(first: np.ndarray, second: np.ndarray) -> float:
    """SSIM of two float RGB images (HxWx3, 0-255) of one size."""
    if first.shape != second.shape:
        raise ValueError(f"SSIM needs images of one size, got {first.shape} and {second.shape}")
    scores = []
    for channel in range(first.shape[2]):
        x, y = first[..., channel], second[..., channel]
        blur = lambda image: ndimage.gaussian_filter(image, sigma=1.5, truncate=3.5)  # noqa: E731
        mx, my = blur(x), blur(y)
        vx, vy, cov = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
        index = ((2 * mx * my + _C1) * (2 * cov + _C2)) / ((mx * mx + my * my + _C1) * (vx + vy + _C2))
        border = 5  # half the 11-pixel window (truncate 3.5 x sigma 1.5): pixels nearer the edge see a cut window
        scores.append(float(index[border:-border, border:-border].mean()))
    return float(np.mean(scores))


def ssim_over_backgrounds(source: Sequence[np.ndarray], decoded: Sequence[np.ndarray]) -> tuple[float, float]:
    """Mean SSIM of decoded frames against their source frames, over white and over :data:`DARK`.

    Args:
        source: The lossless frames the file was made from (straight RGBA uint8, at the file's size), one per
            decoded frame: when a rung drops frames, the source frames it kept.
        decoded: The frames read back from the file.

    Returns:
        (SSIM over white, SSIM over dark), each averaged over the frames.
    """
    if len(source) != len(decoded):
        raise ValueError(f"{len(decoded)} decoded frames for {len(source)} source frames")
    over = {
        background: float(
            np.mean(
                [ssim(composite(s, background), composite(d, background)) for s, d in zip(source, decoded, strict=True)]
            )
        )
        for background in (WHITE, DARK)
    }
    return over[WHITE], over[DARK]
