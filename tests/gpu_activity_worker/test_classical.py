"""The classical pipeline (floodfill + defringe) on synthetic cartoon frames whose alpha is known exactly.

The frames are built from anti-aliased shapes (coverage = clip(0.5 - signed distance, 0, 1)): a body with a dark
outline, an arm, white eyes with pupils, a mouth, a 1 px antenna, an outline-free pink blob and a pale yellow
sparkle, composited over plain, tinted and graded backgrounds, with noise or JPEG compression.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from PIL import Image

from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import MatteState, UnsupportedImageError
from gpu_activity_worker.engines.classical import FloodFillStep, fit_background
from gpu_activity_worker.pipeline import Pipelines
from testkit import matting_metrics as metrics

PIPELINES = Pipelines(builtin_steps())
"""The built-in steps with the default context: each pipeline is built once for the whole module."""
SIZE = 256
DARK = (0.15, 0.1, 0.12)
ORANGE = (1.0, 0.6, 0.2)
WHITE = (1.0, 1.0, 1.0)
BLACK = (0.0, 0.0, 0.0)
PINK = (1.0, 0.35, 0.55)
PALE_YELLOW = (1.0, 0.95, 0.45)
CENTRE = SIZE / 2
EYES = [(CENTRE - 10, CENTRE - 28), (CENTRE - 10, CENTRE + 28)]
ANTENNA = ((CENTRE - 69, CENTRE + 3), (CENTRE - 110, CENTRE + 30))


@dataclass(frozen=True)
class Scene:
    """A subject with its exact alpha and straight foreground colour."""

    foreground: np.ndarray
    alpha: np.ndarray


def _coverage(distance: np.ndarray) -> np.ndarray:
    return np.clip(0.5 - distance, 0.0, 1.0)


def _segment_distance(
    yy: np.ndarray, xx: np.ndarray, start: tuple[float, float], end: tuple[float, float]
) -> np.ndarray:
    (y0, x0), (y1, x1) = start, end
    dy, dx = y1 - y0, x1 - x0
    t = np.clip(((yy - y0) * dy + (xx - x0) * dx) / (dy * dy + dx * dx), 0.0, 1.0)
    return np.hypot(yy - y0 - t * dy, xx - x0 - t * dx)


def cartoon(shift: tuple[float, float] = (0.0, 0.0), lift: float = 0.0) -> Scene:
    """The test character, moved by ``shift`` pixels (sub-pixel moves make an animation), its body ``lift`` lower."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    yy -= shift[0]
    xx -= shift[1]

    def disc(cy: float, cx: float, radius: float) -> np.ndarray:
        return _coverage(np.hypot(yy - cy, xx - cx) - radius)

    def stroke(start: tuple[float, float], end: tuple[float, float], half_width: float) -> np.ndarray:
        return _coverage(_segment_distance(yy, xx, start, end) - half_width)

    arm = ((CENTRE + 10, CENTRE + 60), (CENTRE + 40, CENTRE + 100))
    body = CENTRE + 8 + lift
    layers = [
        (stroke(*arm, 10), DARK),
        (stroke(*arm, 6), ORANGE),
        (disc(body, CENTRE, 78), DARK),
        (disc(body, CENTRE, 74), ORANGE),
        *[(disc(y, x, 13), WHITE) for y, x in EYES],
        *[(disc(y + 2, x + 2, 5), BLACK) for y, x in EYES],
        (stroke((CENTRE + 35, CENTRE - 20), (CENTRE + 35, CENTRE + 20), 1.5), DARK),
        (stroke(*ANTENNA, 0.5), DARK),
        (disc(40, 40, 14), PINK),
        (disc(40, 212, 5), PALE_YELLOW),
    ]
    premultiplied = np.zeros((SIZE, SIZE, 3))
    alpha = np.zeros((SIZE, SIZE))
    for coverage, colour in layers:
        premultiplied = premultiplied * (1 - coverage[..., None]) + coverage[..., None] * np.array(colour)
        alpha = alpha * (1 - coverage) + coverage
    foreground = premultiplied / np.maximum(alpha, 1e-9)[..., None]
    return Scene(foreground, alpha)


def donut() -> Scene:
    """An outline-free orange ring: the background shows through the hole in its middle."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    radius = np.hypot(yy - CENTRE, xx - CENTRE)
    alpha = _coverage(radius - 90) * (1 - _coverage(radius - 35))
    return Scene(np.broadcast_to(np.array(ORANGE), (SIZE, SIZE, 3)), alpha)


def soft_shaded(softness: float) -> Scene:
    """A shaded face with no outline and edges blurred over ``softness`` pixels, like rendered 3D emoji."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)

    def disc(cy: float, cx: float, radius: float) -> np.ndarray:
        return np.clip(0.5 - (np.hypot(yy - cy, xx - cx) - radius) / softness, 0.0, 1.0)

    shade = np.clip(np.hypot(yy - 80, xx - 90) / 170, 0.0, 1.0)[..., None]
    face = np.array([1.0, 0.93, 0.55]) * (1 - shade) + np.array([0.93, 0.55, 0.08]) * shade
    layers = [
        (disc(CENTRE + 4, CENTRE, 100), face),
        *[(disc(y, x, 12), np.broadcast_to(np.array([0.25, 0.15, 0.1]), face.shape)) for y, x in EYES],
    ]
    premultiplied = np.zeros((SIZE, SIZE, 3))
    alpha = np.zeros((SIZE, SIZE))
    for coverage, colour in layers:
        premultiplied = premultiplied * (1 - coverage[..., None]) + coverage[..., None] * colour
        alpha = alpha * (1 - coverage) + coverage
    return Scene(premultiplied / np.maximum(alpha, 1e-9)[..., None], alpha)


def backdrop(kind: str) -> np.ndarray:
    """A HxWx3 background: ``white``, ``tinted`` (light blue) or ``gradient`` (peach to light blue, left to right)."""
    if kind == "white":
        colour = np.ones((SIZE, SIZE, 3))
    elif kind == "tinted":
        colour = np.broadcast_to(np.array([0.86, 0.93, 1.0]), (SIZE, SIZE, 3))
    else:
        x = np.linspace(0.0, 1.0, SIZE)[None, :, None]
        ramp = np.array([1.0, 0.88, 0.72]) * (1 - x) + np.array([0.72, 0.86, 1.0]) * x
        colour = np.broadcast_to(ramp, (SIZE, SIZE, 3))
    return colour


def render(scene: Scene, kind: str, *, noise: float = 0.0, jpeg: int | None = None, seed: int = 0) -> np.ndarray:
    """The scene over a background as uint8 RGB, with Gaussian noise (in 0..255 units) or JPEG at ``jpeg`` quality."""
    a = scene.alpha[..., None]
    image = scene.foreground * a + backdrop(kind) * (1 - a)
    image = image + np.random.default_rng(seed).normal(0.0, noise / 255, image.shape)
    rgb = np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)
    if jpeg is not None:
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format="JPEG", quality=jpeg)
        rgb = np.asarray(Image.open(buffer).convert("RGB"))
    return rgb


def true_rgba(scene: Scene) -> np.ndarray:
    return np.dstack([scene.foreground, scene.alpha])


@pytest.fixture(scope="module")
def scene() -> Scene:
    return cartoon()


# (background, noise, jpeg quality) -> (max SAD, max MSE, min pixel accuracy, max halo)
CASES = {
    ("white", 0.0, None): (0.03, 1e-4, 0.999, 1.0),
    ("tinted", 0.0, None): (0.03, 1e-4, 0.999, 1.0),
    ("gradient", 0.0, None): (0.03, 1e-4, 0.999, 1.0),
    ("white", 3.0, None): (0.08, 2e-4, 0.999, 3.0),
    ("gradient", 3.0, None): (0.08, 2e-4, 0.999, 3.0),
    ("white", 0.0, 90): (0.15, 5e-4, 0.999, 8.0),
    ("tinted", 0.0, 90): (0.15, 5e-4, 0.999, 8.0),
}


@pytest.mark.parametrize(("kind", "noise", "jpeg"), list(CASES))
def test_classical_pipeline_quality(scene: Scene, kind: str, noise: float, jpeg: int | None) -> None:
    max_sad, max_mse, min_accuracy, max_halo = CASES[(kind, noise, jpeg)]
    result = PIPELINES.build("classical").run(render(scene, kind, noise=noise, jpeg=jpeg))

    assert metrics.sad(result.alpha, scene.alpha) <= max_sad
    assert metrics.mse(result.alpha, scene.alpha) <= max_mse
    assert metrics.pixel_accuracy(result.alpha, scene.alpha) >= min_accuracy
    assert metrics.halo_score(result.rgba, true_rgba(scene)) <= max_halo


@pytest.mark.parametrize("softness", [1.0, 2.0])
@pytest.mark.parametrize("kind", ["white", "tinted", "gradient"])
def test_soft_shaded_subject(kind: str, softness: float) -> None:
    scene = soft_shaded(softness)
    result = PIPELINES.build("classical").run(render(scene, kind))

    assert metrics.sad(result.alpha, scene.alpha) <= 0.03
    assert metrics.pixel_accuracy(result.alpha, scene.alpha) >= 0.999
    assert metrics.halo_score(result.rgba, true_rgba(scene)) <= 1.0


@pytest.mark.parametrize("kind", ["white", "gradient"])
def test_white_eyes_stay_opaque_and_the_frame_border_is_transparent(scene: Scene, kind: str) -> None:
    alpha = PIPELINES.build("classical").run(render(scene, kind)).alpha

    for y, x in EYES:  # white like the background, but enclosed by the body
        assert alpha[round(y) - 6, round(x) - 6 : round(x) + 7].min() == 1.0
    ring = np.ones_like(alpha, dtype=bool)
    ring[3:-3, 3:-3] = False
    assert alpha[ring].max() == 0.0


@pytest.mark.parametrize(
    ("kind", "noise", "jpeg"), [("tinted", 0.0, None), ("gradient", 3.0, None), ("tinted", 0.0, 90)]
)
def test_hole_through_the_subject_shows_a_coloured_background(kind: str, noise: float, jpeg: int | None) -> None:
    scene = donut()  # art rarely paints in a tinted background's exact colour: the enclosed area is a hole

    alpha = PIPELINES.build("classical").run(render(scene, kind, noise=noise, jpeg=jpeg)).alpha

    assert alpha[round(CENTRE) - 25 : round(CENTRE) + 26, round(CENTRE)].max() == 0.0
    if jpeg is None:
        assert metrics.sad(alpha, scene.alpha) <= 0.03


def test_hole_over_white_stays_opaque() -> None:
    """Over white the enclosed white could as well be paint (a white eye): the classical engine keeps it."""
    scene = donut()

    alpha = PIPELINES.build("classical").run(render(scene, "white")).alpha

    assert alpha[round(CENTRE) - 25 : round(CENTRE) + 26, round(CENTRE)].min() == 1.0


def test_thin_line_and_pale_details_are_kept(scene: Scene) -> None:
    alpha = PIPELINES.build("classical").run(render(scene, "white")).alpha
    (y0, x0), (y1, x1) = ANTENNA
    along = [(round(y0 + t * (y1 - y0)), round(x0 + t * (x1 - x0))) for t in np.linspace(0.1, 0.9, 9)]

    for y, x in along:  # no pixel of a 1 px line is fully covered: the alpha comes out a little high, not lost
        assert alpha[y, x - 2 : x + 3].sum() == pytest.approx(scene.alpha[y, x - 2 : x + 3].sum(), abs=0.25)
    assert alpha[40, 212] == 1.0  # the pale yellow sparkle on white


def test_pale_subject_keeps_an_opaque_edge() -> None:
    """A light grey disc over white: its colour is past the background tolerance but not by two tolerances, so no
    strong colour is near its edge to measure the edge alpha against; past the outermost ring it stays opaque."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    scene = Scene(np.full((SIZE, SIZE, 3), 0.95), _coverage(np.hypot(yy - CENTRE, xx - CENTRE) - 60))

    alpha = PIPELINES.build("classical").run(render(scene, "white")).alpha

    row, left = round(CENTRE), round(CENTRE) - 60
    assert alpha[row, left + 2 : left + 61].min() == 1.0
    assert metrics.pixel_accuracy(alpha, scene.alpha) >= 0.99


def test_animation_does_not_flicker() -> None:
    frames = [cartoon(shift=(3 * np.sin(t * np.pi / 3), 0.37 * t)) for t in range(6)]
    pipeline = PIPELINES.build("classical")
    alphas = [pipeline.run(render(frame, "gradient", seed=t)).alpha for t, frame in enumerate(frames)]

    assert metrics.dtssd(alphas, [frame.alpha for frame in frames]) <= 1.0


def test_subject_cut_by_the_frame_is_matted() -> None:
    scene = cartoon(lift=60)  # the body runs off the bottom of the frame
    assert scene.alpha[-1].max() == 1.0

    alpha = PIPELINES.build("classical").run(render(scene, "gradient")).alpha

    assert metrics.sad(alpha, scene.alpha) <= 0.03
    assert alpha[0].max() == 0.0
    assert alpha[-1, SIZE // 2] == 1.0


def test_hard_mask_and_background_of_the_coarse_step(scene: Scene) -> None:
    rgb = render(scene, "gradient")
    state = FloodFillStep().apply(MatteState(image=rgb.astype(np.float32) / 255))

    assert state.alpha is not None and state.background is not None
    assert set(np.unique(state.alpha)) == {0.0, 1.0}
    assert metrics.pixel_accuracy(state.alpha, scene.alpha) >= 0.99
    assert np.abs(state.background.colour - backdrop("gradient")).max() <= 2 / 255


@pytest.mark.parametrize(
    ("surface", "order"),
    [
        (lambda y, x: 0.0 * x + 0.9, 0),
        (lambda y, x: 0.5 + 0.4 * x - 0.1 * y, 1),
        (lambda y, x: 0.9 - 0.3 * (x * x + y * y), 2),
    ],
)
def test_fit_background_picks_the_lowest_order_that_fits(
    surface: Callable[[np.ndarray, np.ndarray], np.ndarray], order: int
) -> None:
    y, x = np.meshgrid(np.linspace(-1, 1, 64), np.linspace(-1, 1, 64), indexing="ij")
    image = np.repeat(surface(y, x)[..., None], 3, axis=2).astype(np.float32)
    samples = np.ones((64, 64), dtype=bool)
    samples[20:44, 20:44] = False
    image[20:44, 20:44] = 0.0  # the subject, not sampled: the surface is extrapolated behind it

    fit = fit_background(image, samples)

    assert fit.order == order
    assert fit.inlier_fraction == 1.0
    assert np.abs(fit.background.colour - surface(y, x)[..., None]).max() <= 1e-4


def test_plain_image_gives_an_empty_cut_out() -> None:
    result = PIPELINES.build("classical").run(np.full((64, 64, 3), 200, dtype=np.uint8))

    assert result.alpha.max() == 0.0


@pytest.mark.parametrize("texture", ["noise", "stripes"])
def test_textured_background_is_refused_clearly(scene: Scene, texture: str) -> None:
    rng = np.random.default_rng(1)
    if texture == "noise":
        background = rng.uniform(0.0, 1.0, (SIZE, SIZE, 3))
    else:
        background = np.repeat(rng.uniform(0.0, 1.0, (1, 16, 3)), 16, axis=1).repeat(SIZE, axis=0)
    a = scene.alpha[..., None]
    rgb = np.rint((scene.foreground * a + background * (1 - a)) * 255).astype(np.uint8)

    with pytest.raises(UnsupportedImageError, match="plain background"):
        PIPELINES.build("classical").run(rgb)
