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


def test_halo_score_with_the_band_given_is_the_same() -> None:
    truth_alpha = _disc()
    truth = np.dstack([np.broadcast_to(np.array([0.9, 0.2, 0.1]), (SIZE, SIZE, 3)), truth_alpha])
    wide = truth.copy()
    wide[..., 3] = ndimage.grey_dilation(truth_alpha, size=5)

    assert metrics.halo_score(wide, truth, metrics.edge_band(truth_alpha)) == metrics.halo_score(wide, truth)


def _frame(sad: float, *, acc: float = 1.0, ms: float = 10.0, gradient: float | None = None) -> metrics.FrameScore:
    return metrics.FrameScore(
        sad=sad, mse=sad / 100, pixel_accuracy=acc, halo=2 * sad, ms=ms, wall_ms=ms + 1, gradient=gradient
    )


def _clip(name: str, *sads: float, dtssd: float | None = 1.0, acc: float = 1.0) -> metrics.ClipScore:
    return metrics.ClipScore(name, tuple(_frame(sad, acc=acc) for sad in sads), dtssd)


def test_a_clip_score_averages_its_frames_and_knows_its_worst_frame() -> None:
    clip = _clip("a", 0.1, 0.5, 0.3, dtssd=2.5)

    assert clip.mean("sad") == pytest.approx(0.3)
    assert clip.mean("halo") == pytest.approx(0.6)
    assert clip.mean("dtssd") == 2.5
    assert clip.worst_frame == 1
    assert np.isnan(_clip("still", 0.2, dtssd=None).mean("dtssd"))


def test_worst_clips_are_the_highest_mean_sad_first_ties_by_name() -> None:
    clips = [_clip("c", 0.2), _clip("a", 0.9, 0.1), _clip("e", 0.6), _clip("b", 0.5), _clip("d", 0.7), _clip("f", 0.1)]

    worst = metrics.worst_clips(clips)

    assert [clip.name for clip in worst] == ["d", "e", "a", "b", "c"]  # a and b tie at 0.5: by name
    assert [clip.name for clip in metrics.worst_clips(reversed(clips))] == [clip.name for clip in worst]
    assert [clip.name for clip in metrics.worst_clips(clips, 2)] == ["d", "e"]
    assert len(metrics.worst_clips(clips[:3])) == 3


def test_worst_clips_by_accuracy_are_the_lowest_first() -> None:
    clips = [_clip("good", 0.1, acc=0.999), _clip("bad", 0.1, acc=0.99), _clip("fine", 0.1, acc=0.998)]

    assert [clip.name for clip in metrics.worst_clips(clips, 2, key="pixel_accuracy")] == ["bad", "fine"]


def test_a_summary_pools_frames_and_takes_dtssd_over_animations() -> None:
    animation = metrics.ClipScore("anim", (_frame(0.1, ms=10), _frame(0.3, ms=30, gradient=4.0)), dtssd=3.0)
    still = metrics.ClipScore("still", (_frame(0.8, acc=0.5, ms=20),), None)

    summary = metrics.summarize([animation, still])

    assert (summary.clips, summary.frames) == (2, 3)
    assert summary.sad == pytest.approx((0.1 + 0.3 + 0.8) / 3), "a mean over frames, not over clips"
    assert summary.pixel_accuracy == pytest.approx((1 + 1 + 0.5) / 3)
    assert summary.dtssd == 3.0, "the still has no flicker to count"
    assert summary.gradient == 4.0, "only the frames where it was measured"
    assert summary.ms == 20.0 and summary.wall_ms == 21.0, "medians"
    assert summary.worst_sad == pytest.approx(0.8)
    assert [clip.name for clip in summary.worst] == ["still", "anim"]
    stills = metrics.summarize([still])
    assert np.isnan(stills.dtssd) and np.isnan(stills.gradient)
    with pytest.raises(ValueError, match="at least one clip"):
        metrics.summarize([])


def test_summaries_by_setting_keep_each_settings_clips_apart() -> None:
    scores = [
        (("fluent", "white"), _clip("a", 0.1)),
        (("fluent", "white+crf23"), _clip("a", 0.4)),
        (("fluent", "white"), _clip("b", 0.3)),
        (("fluent", "white+crf23"), _clip("b", 0.2)),
        (("stills", "white"), _clip("s", 0.9, dtssd=None)),
    ]

    summaries = metrics.summarize_by(scores, worst=1)

    assert list(summaries) == [("fluent", "white"), ("fluent", "white+crf23"), ("stills", "white")]
    assert summaries[("fluent", "white")].sad == pytest.approx(0.2)
    assert summaries[("fluent", "white+crf23")].sad == pytest.approx(0.3)
    assert [clip.name for clip in summaries[("fluent", "white")].worst] == ["b"]
    assert [clip.name for clip in summaries[("fluent", "white+crf23")].worst] == ["a"]
    assert summaries[("stills", "white")].clips == 1


def test_goals_loosen_with_slack_except_the_time_budget() -> None:
    summary = metrics.summarize([_clip("a", 0.3, 0.3, dtssd=2.5, acc=0.996)])
    goals = [
        metrics.Goal("sad", 0.25),
        metrics.Goal("pixel_accuracy", 0.997),
        metrics.Goal("dtssd", 2.0),
        metrics.Goal("worst_sad", 1.0),
        metrics.Goal("ms", 5.0, scales=False),
    ]

    strict = metrics.check_goals(summary, goals)
    loose = metrics.check_goals(summary, goals, slack=1.5)

    assert [check.met for check in strict] == [False, False, False, True, False]
    assert [check.met for check in loose] == [True, True, True, True, False]
    assert [check.limit for check in loose] == pytest.approx([0.375, 0.9955, 3.0, 1.5, 5.0])
    assert str(strict[0]) == "MISS sad 0.3 <= 0.25" and str(loose[1]) == "PASS pixel_accuracy 0.996 >= 0.9955"
    assert not metrics.all_met({"strict": strict, "loose": loose})
    assert metrics.all_met({"loose": loose[:4]})


def test_a_goal_on_a_figure_that_was_not_measured_is_missed() -> None:
    stills = metrics.summarize([_clip("s", 0.0, dtssd=None)])

    (check,) = metrics.check_goals(stills, [metrics.Goal("dtssd", 2.0)])

    assert not check.met


def _ring() -> np.ndarray:
    """A ring: a disc of radius 20 with a hole of radius 8 through it."""
    return _disc(20.0) - _disc(8.0)


def test_error_regions_tell_the_outer_edge_from_a_hole_and_the_rest() -> None:
    regions = metrics.error_regions(_ring())
    outer, hole, elsewhere = range(3)

    assert regions[32, 32] == hole  # the hole's middle
    assert regions[32, 32 + 8] == hole  # the hole's rim, on the subject's side
    assert regions[32, 32 + 20] == outer  # the outer rim
    assert regions[32, 32 + 22] == outer  # just past it, in the background
    assert regions[32, 32 + 14] == elsewhere  # inside the ring, away from both rims
    assert regions[0, 0] == elsewhere  # the open background
    assert set(np.unique(metrics.error_regions(_disc()))) == {outer, elsewhere}  # no hole, no hole region


def test_region_errors_add_up_to_sad_and_mse() -> None:
    truth = _ring()
    alpha = np.clip(truth + _disc(9.0), 0.0, 1.0)  # the hole left opaque, and the rest exact
    alpha[:4, :4] = 0.5  # an error in the open background

    sums = metrics.region_errors(alpha, truth)

    assert sums[:, 0].sum() / 1000 == pytest.approx(metrics.sad(alpha, truth))
    assert sums[:, 1].sum() / SIZE**2 == pytest.approx(metrics.mse(alpha, truth))
    assert sums[0, 0] == 0.0  # nothing wrong at the outer edge
    assert sums[1, 0] == pytest.approx(np.abs(alpha - truth)[metrics.error_regions(truth) == 1].sum())
    assert sums[2, 0] == pytest.approx(16 * 0.5)
