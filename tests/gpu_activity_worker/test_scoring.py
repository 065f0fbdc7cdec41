"""The auto-pick score ranks clear cases the way a reviewer would."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from gpu_activity_worker.scoring import score_matte

SIZE = 128


def _disc(cy: float, cx: float, radius: float) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - cy, xx - cx) - radius), 0.0, 1.0).astype(np.float32)


def _fragments() -> np.ndarray:
    alpha = np.zeros((SIZE, SIZE), dtype=np.float32)
    for cy, cx in [(30, 30), (30, 90), (64, 60), (95, 25), (95, 95), (60, 105)]:
        alpha = np.maximum(alpha, _disc(cy, cx, 9))
    return alpha


CASES = {
    "clean disc": _disc(64, 64, 40),
    "disc touching the frame": _disc(84, 64, 44),
    "scattered fragments": _fragments(),
    "empty": np.zeros((SIZE, SIZE), dtype=np.float32),
}


def test_clear_cases_rank_as_expected() -> None:
    scores = [score_matte(alpha)[0] for alpha in CASES.values()]

    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == len(scores)
    assert scores[0] == 1.0
    assert scores[-1] == 0.0


@pytest.mark.parametrize("name", list(CASES))
def test_score_and_parts_are_in_range(name: str) -> None:
    score, parts = score_matte(CASES[name])

    assert set(parts) == {"coverage", "connected", "inside", "crisp"}
    assert all(0.0 <= value <= 1.0 for value in [score, *parts.values()])
    assert score == pytest.approx(float(np.prod(list(parts.values()))))


def test_each_part_catches_its_failure() -> None:
    touching, cut = score_matte(_disc(84, 64, 44))[1]["inside"], score_matte(_disc(100, 64, 40))[1]["inside"]
    assert 0.0 < cut < touching < 1.0
    assert score_matte(_fragments())[1]["connected"] <= 0.25
    assert score_matte(np.ones((SIZE, SIZE), dtype=np.float32))[1]["coverage"] == 0.0
    halo = ndimage.gaussian_filter(ndimage.grey_dilation(_disc(64, 64, 40), size=7), 4.0)
    assert score_matte(halo)[1]["crisp"] < 0.5


def test_uint8_alpha_scores_like_float() -> None:
    alpha = _disc(84, 64, 44)

    assert score_matte(np.rint(alpha * 255).astype(np.uint8)) == score_matte(alpha)
