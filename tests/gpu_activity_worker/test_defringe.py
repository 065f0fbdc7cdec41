"""The defringe refiner after a coarse step that gave a too-wide, too-soft alpha (as model engines often do)."""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
import pytest
from scipy import ndimage

from gpu_activity_worker.engines import defringe as defringe_module
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.engines.defringe import DefringeStep, blur_fusion_foreground, create_step, defringe
from testkit import matting_metrics as metrics

SIZE = 128
OUTLINE = np.array([0.2, 0.1, 0.3])
FILL = np.array([0.3, 0.7, 0.4])
EYE = (52.0, 64.0)


def _disc(radius: float, centre: tuple[float, float] = (64.0, 64.0)) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - centre[0], xx - centre[1]) - radius), 0.0, 1.0)


def _subject() -> tuple[np.ndarray, np.ndarray]:
    """A disc with a 4 px dark outline and a white eye: straight foreground colour and exact alpha."""
    inner, eye = _disc(36)[..., None], _disc(8, EYE)[..., None]
    colour = OUTLINE * (1 - inner) + FILL * inner
    return colour * (1 - eye) + eye, _disc(40)


def _backdrop(kind: str) -> np.ndarray:
    if kind == "white":
        return np.ones((SIZE, SIZE, 3))
    if kind == "gradient":
        x = np.linspace(0.0, 1.0, SIZE)[None, :, None]
        return np.broadcast_to(np.array([1.0, 0.9, 0.7]) * (1 - x) + np.array([0.7, 0.85, 1.0]) * x, (SIZE, SIZE, 3))
    return np.random.default_rng(3).uniform(0.0, 1.0, (SIZE, SIZE, 3))


def _image(foreground: np.ndarray, alpha: np.ndarray, kind: str) -> np.ndarray:
    a = alpha[..., None]
    return (np.rint((foreground * a + _backdrop(kind) * (1 - a)) * 255) / 255).astype(np.float32)


def _too_wide(alpha: np.ndarray, grow: int) -> np.ndarray:
    """What a coarse model often returns: the alpha dilated by ``grow`` pixels and blurred."""
    return ndimage.gaussian_filter(ndimage.grey_dilation(alpha, size=2 * grow + 1), 1.0).astype(np.float32)


@pytest.mark.parametrize("grow", [2, 4])
@pytest.mark.parametrize("kind", ["white", "gradient"])
def test_too_wide_alpha_loses_its_halo(kind: str, grow: int) -> None:
    foreground, alpha = _subject()
    image = _image(foreground, alpha, kind)
    wide = _too_wide(alpha, grow)
    truth = np.dstack([foreground, alpha])

    refined, colours = defringe(image, wide, None)

    naive_halo = metrics.halo_score(np.dstack([image, wide]), truth)
    assert naive_halo >= 30
    assert metrics.halo_score(np.dstack([colours, refined]), truth) <= 1.5
    assert metrics.sad(refined, alpha) <= 0.01 < metrics.sad(wide, alpha) / 50
    assert metrics.pixel_accuracy(refined, alpha) >= 0.999


def test_lighter_rim_is_shading_not_transparency() -> None:
    """A fill that lightens towards its edge (a rim light), over white: the light rim mixes the fill colour towards
    the background colour, but it does not ramp up to opaque inward the way a blurred edge does, so it stays opaque."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    radius = np.hypot(yy - 64, xx - 64)
    rim = np.clip((radius - 28) / 12, 0.0, 1.0)[..., None]
    foreground = FILL * (1 - 0.6 * rim) + 0.6 * rim
    alpha = _disc(40)

    refined, colours = defringe(_image(foreground, alpha, "white"), _too_wide(alpha, 2), None)

    assert refined[(alpha == 1.0) & (radius <= 38)].min() == 1.0
    assert metrics.sad(refined, alpha) <= 0.04
    assert metrics.halo_score(np.dstack([colours, refined]), np.dstack([foreground, alpha])) <= 6.0


def test_white_eye_on_white_background_stays_opaque() -> None:
    foreground, alpha = _subject()

    refined, _ = defringe(_image(foreground, alpha, "white"), _too_wide(alpha, 3), None)

    assert refined[round(EYE[0]) - 5 : round(EYE[0]) + 6, round(EYE[1])].min() == 1.0


def test_transparent_pixels_carry_the_foreground_colour() -> None:
    foreground, alpha = _subject()

    refined, colours = defringe(_image(foreground, alpha, "white"), _too_wide(alpha, 2), None)

    just_outside = (ndimage.distance_transform_edt(alpha == 0) <= 3) & (refined == 0)
    assert just_outside.sum() > 100
    assert np.abs(colours[just_outside] - OUTLINE).max() <= 0.05  # the outline colour, not the white background


def test_textured_background_keeps_the_alpha_and_estimates_colours() -> None:
    foreground, alpha = _subject()
    image = _image(foreground, alpha, "texture")
    soft = ndimage.gaussian_filter(alpha, 1.5).astype(np.float32)

    refined, colours = defringe(image, soft, None)

    assert np.array_equal(refined, soft)
    edge = (soft > 0.2) & (soft < 0.8)
    naive_error = np.abs(image[edge] - OUTLINE).mean()
    assert np.abs(colours[edge] - OUTLINE).mean() < 0.7 * naive_error


def test_blur_fusion_recovers_a_flat_colour_over_a_texture() -> None:
    alpha = _disc(30).astype(np.float32)
    soft = ndimage.gaussian_filter(alpha, 1.0).astype(np.float32)
    image = _image(np.broadcast_to(FILL, (SIZE, SIZE, 3)), soft, "texture")

    colours = blur_fusion_foreground(image, soft)

    edge = (soft > 0.3) & (soft < 0.9)
    assert np.abs(colours[edge] - FILL).mean() <= 0.08


def test_empty_alpha_stays_empty() -> None:
    image = np.ones((32, 32, 3), dtype=np.float32)

    refined, colours = defringe(image, np.zeros((32, 32), dtype=np.float32), None)

    assert refined.max() == 0.0
    assert colours.shape == image.shape


def test_step_needs_a_coarse_alpha() -> None:
    with pytest.raises(ValueError, match="coarse step"):
        DefringeStep().apply(MatteState(image=np.ones((8, 8, 3), dtype=np.float32)))


@pytest.mark.parametrize("kind", ["white", "gradient"])
def test_colour_variant_keeps_a_fine_alpha_and_removes_the_halo(kind: str) -> None:
    """After an edge refiner (vitmatte) the alpha is already right: defringe:colour only unmixes the colours."""
    foreground, alpha = _subject()
    soft = ndimage.gaussian_filter(alpha, 1.5).astype(np.float32)  # a fine, soft edge the refiner estimated
    image = _image(foreground, soft, kind)
    truth = np.dstack([foreground, soft])

    state = create_step("colour", StepContext()).apply(MatteState(image=image, alpha=soft))

    np.testing.assert_array_equal(state.alpha, soft)  # kept as the previous step made it
    assert state.foreground is not None
    halo_before = metrics.halo_score(np.dstack([image, soft]), truth)
    halo_after = metrics.halo_score(np.dstack([state.foreground, soft]), truth)
    assert halo_after < halo_before / 4


def _h264(image: np.ndarray, crf: int) -> np.ndarray:
    """A float image through libx264 (yuv420p) at ``crf`` and back."""
    rgb = np.rint(image * 255).astype(np.uint8)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=12, options={"crf": str(crf), "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = SIZE, SIZE, "yuv420p"
        stream.codec_context.thread_count = 1
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts, frame.time_base = 0, Fraction(1, 12)
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(io.BytesIO(buffer.getvalue()), mode="r") as container:
        decoded = next(container.decode(container.streams.video[0])).to_ndarray(format="rgb24")
    return (decoded / 255).astype(np.float32)


@pytest.mark.parametrize("crf", [18, 23, 28])
def test_codec_ringing_beside_the_edge_does_not_become_alpha(crf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """H.264 echoes the dark outline a few pixels out on white; the dead zone widens with the ringing it measures."""
    foreground, alpha = _subject()
    image = _h264(_image(foreground, alpha, "white"), crf)
    coarse = (alpha >= 0.5).astype(np.float32)
    beside = (ndimage.distance_transform_edt(alpha == 0.0) >= 2) & (ndimage.distance_transform_edt(alpha == 0.0) <= 5)

    refined, _ = defringe(image, coarse, None)
    monkeypatch.setattr(defringe_module, "RINGING_DEAD_ZONE", 0.0)
    fixed_dead_zone, _ = defringe(image, coarse, None)

    assert refined[beside].sum() < 0.5 * fixed_dead_zone[beside].sum()
    assert metrics.sad(refined, alpha) < metrics.sad(fixed_dead_zone, alpha)


def test_a_clean_drawing_measures_no_ringing() -> None:
    foreground, alpha = _subject()
    image = _image(foreground, alpha, "white")
    white = defringe_module.background_around(image, alpha)
    assert white is not None
    depth = defringe_module._signed_depth(alpha >= 0.5)

    assert defringe_module._ringing(image, white, depth) == 0.0
    assert defringe_module._ringing(_h264(image, 23), white, depth) > 0.05


# --- one test per rule that no test above pins down (each fails with its rule switched off) -------------------------

TINT = np.array([0.9, 0.95, 1.0])
RED = np.array([0.85, 0.15, 0.2])


def _over_tint(foreground: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha[..., None]
    return (np.rint((foreground * a + TINT * (1 - a)) * 255) / 255).astype(np.float32)


def _soft_disc(radius: float, softness: float) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - 64, xx - 64) - radius) / softness, 0.0, 1.0)


def test_through_the_codec_the_edge_alpha_leans_on_luma(monkeypatch: pytest.MonkeyPatch) -> None:
    """yuv420p bleeds a red disc's chroma a pixel out over a pale tint: with chroma at CODEC_CHROMA_WEIGHT on a frame
    the codec gauge marks, the edge alpha follows luma and comes closer to the truth than at the clean frames' half
    weight."""
    alpha = _disc(40)
    image = _h264(_over_tint(np.broadcast_to(RED, (SIZE, SIZE, 3)), alpha), 23)
    coarse = (alpha >= 0.5).astype(np.float32)

    refined, _ = defringe(image, coarse, None)
    monkeypatch.setattr(defringe_module, "CODEC_CHROMA_WEIGHT", 0.5)
    half_weight, _ = defringe(image, coarse, None)

    assert metrics.sad(refined, alpha) < 0.9 * metrics.sad(half_weight, alpha)


def test_the_codec_gauge_tells_h264_from_a_clean_soft_edge() -> None:
    """A clean drawing with a soft edge (alpha fading over 3 px) gauges below CODEC_GAUGE, over a tint and over a
    gradient: the ring it reads starts past the fading pixels (CODEC_NEAR_RING) and is compared with the background
    further out (CODEC_FAR_RING), which the gradient's rounding puts as far off the fit; through H.264 it gauges
    above."""
    alpha = _soft_disc(40, 3.0)
    image = _over_tint(np.broadcast_to(RED, (SIZE, SIZE, 3)), alpha)
    depth = defringe_module._signed_depth(alpha >= 0.5)
    graded = _image(np.broadcast_to(RED, (SIZE, SIZE, 3)), alpha, "gradient")  # off the fit by its rounding
    for clean in (image, graded):
        background = defringe_module.background_around(clean, alpha)
        assert background is not None
        assert defringe_module._codec_gauge(clean, background, depth) < defringe_module.CODEC_GAUGE
        assert defringe_module._codec_gauge(_h264(clean, 18), background, depth) >= defringe_module.CODEC_GAUGE


def test_a_pale_border_beside_a_dark_part_keeps_its_opacity() -> None:
    """A yellow coin's border lies beside its dark blue face: the blue is further from the white background, but not
    on the yellow's mixing line (RELATIVE_COLLINEARITY), so it is no reference for the border's alpha."""
    alpha, face = _disc(40), _disc(36)[..., None]
    foreground = np.array([1.0, 0.95, 0.3]) * (1 - face) + np.array([0.1, 0.15, 0.5]) * face

    refined, _ = defringe(_image(foreground, alpha, "white"), (alpha >= 0.5).astype(np.float32), None)

    assert metrics.sad(refined, alpha) <= 0.01  # measured 0.002; 0.33 with any purer colour as the reference


def test_a_background_of_two_colours_keeps_the_alpha() -> None:
    """Outside the silhouette, half the frame is white and half blue: no smooth surface fits MIN_FIT_INLIERS of it, so
    the alpha is kept and only the colours are estimated."""
    foreground, alpha = _subject()
    split = np.ones((SIZE, SIZE, 3))
    split[:, SIZE // 2 :] = [0.3, 0.6, 0.9]
    a = alpha[..., None]
    image = (np.rint((foreground * a + split * (1 - a)) * 255) / 255).astype(np.float32)
    wide = _too_wide(alpha, 2)

    refined, _ = defringe(image, wide, None)

    np.testing.assert_array_equal(refined, wide)


def test_faint_edge_pixels_take_their_reference_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below MIN_UNMIX_ALPHA, unmixing divides the noise by a small alpha: the reference colour is closer to the truth
    for the faint pixels of a soft, noisy edge."""
    alpha = _soft_disc(40, 4.0)
    red = np.broadcast_to(RED, (SIZE, SIZE, 3))
    noise = np.random.default_rng(0).normal(0.0, 3 / 255, (SIZE, SIZE, 3))
    image = np.clip(_image(red, alpha, "white") + noise, 0.0, 1.0).astype(np.float32)
    coarse = (alpha >= 0.5).astype(np.float32)
    below = defringe_module.MIN_UNMIX_ALPHA

    def faint_colour_error() -> float:
        refined, colours = defringe(image, coarse, None)
        faint = (refined > 0.03) & (refined < below)
        assert faint.sum() >= 100
        return float(np.abs(colours[faint] - RED).mean())

    kept = faint_colour_error()
    monkeypatch.setattr(defringe_module, "MIN_UNMIX_ALPHA", 1e-6)
    assert kept < 0.97 * faint_colour_error()


def test_blur_fusion_takes_a_coarse_pass_before_the_fine_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a texture, the coarse pass (BLUR_FUSION_RADII) gives the fine one better local means to start from."""
    soft = ndimage.gaussian_filter(_disc(30), 1.0).astype(np.float32)
    image = _image(np.broadcast_to(FILL, (SIZE, SIZE, 3)), soft, "texture")
    edge = (soft > 0.3) & (soft < 0.9)

    two_passes = np.abs(blur_fusion_foreground(image, soft)[edge] - FILL).mean()
    monkeypatch.setattr(defringe_module, "BLUR_FUSION_RADII", defringe_module.BLUR_FUSION_RADII[-1:])
    fine_only = np.abs(blur_fusion_foreground(image, soft)[edge] - FILL).mean()

    assert two_passes < 0.98 * fine_only
