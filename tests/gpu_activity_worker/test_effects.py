"""The ``effects`` refiner: effects a model's mask dropped come back, compression noise and stray marks do not.

A stand-in model (``dropper``) keeps the character and drops everything drawn around it, as segmentation models do,
and gives no background, so ``effects`` fits one itself. Scenes are anti-aliased drawings with exact alpha: a synthetic
character with a sparkle, a sweat drop, motion lines and a heart, and the procedural generator's clips, whose
renderer keeps the effects' alpha apart. Compression is H.264 through PyAV, as the generator encodes its clips.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

import av
import numpy as np
import pytest
from scipy import ndimage

from activities.generation.procedural import RenderedClip, render_clip, start_frame_images
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import Background, MatteState, StepContext, StepRole
from gpu_activity_worker.engines.effects import EffectsStep, effect_blobs
from gpu_activity_worker.pipeline import Pipelines
from testkit import matting_metrics as metrics
from workflows.contract import ActionSpec, ArtifactRef, CharacterRef, GenerateClipInput, GenerateStartFrameInput
from workflows.presets import PRESETS

SIZE = 256
CENTRE = SIZE / 2
DARK = (0.17, 0.12, 0.18)
ORANGE = (1.0, 0.6, 0.2)
YELLOW = (1.0, 0.84, 0.27)
BLUE = (0.55, 0.8, 0.98)
RED = (0.92, 0.24, 0.32)


@dataclass(frozen=True)
class Drawing:
    """A frame's colour over white (uint8), its alpha, and the character's own alpha (both float HxW)."""

    rgb: np.ndarray
    alpha: np.ndarray
    character: np.ndarray

    @property
    def effects(self) -> np.ndarray:
        """The effect pixels a model drops: mostly an effect, not the character (bool HxW)."""
        return (self.alpha >= 0.5) & (self.character < 0.5)


def _coverage(distance: np.ndarray) -> np.ndarray:
    return np.clip(0.5 - distance, 0.0, 1.0)


def _disc(cy: float, cx: float, radius: float) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    return _coverage(np.hypot(yy - cy, xx - cx) - radius)


def _stroke(start: tuple[float, float], end: tuple[float, float], half_width: float) -> np.ndarray:
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    (y0, x0), (y1, x1) = start, end
    dy, dx = y1 - y0, x1 - x0
    t = np.clip(((yy - y0) * dy + (xx - x0) * dx) / (dy * dy + dx * dx), 0.0, 1.0)
    return _coverage(np.hypot(yy - y0 - t * dy, xx - x0 - t * dx) - half_width)


def _star(cy: float, cx: float, radius: float) -> np.ndarray:
    """A four-pointed sparkle: two thin crossed diamonds."""
    yy, xx = np.indices((SIZE, SIZE), dtype=np.float64)
    u, v = np.abs(yy - cy), np.abs(xx - cx)
    diamond = np.minimum(u / radius + v / (0.3 * radius), v / radius + u / (0.3 * radius))
    return _coverage((diamond - 1.0) * 0.3 * radius)


Layer = tuple[np.ndarray, tuple[float, float, float]]


def _paint(layers: list[Layer]) -> tuple[np.ndarray, np.ndarray]:
    """Premultiplied colour and alpha of the layers painted back to front."""
    premultiplied, alpha = np.zeros((SIZE, SIZE, 3)), np.zeros((SIZE, SIZE))
    for coverage, colour in layers:
        premultiplied = premultiplied * (1 - coverage[..., None]) + coverage[..., None] * np.array(colour)
        alpha = alpha * (1 - coverage) + coverage
    return premultiplied, alpha


def _outlined(
    coverage_of: Callable[..., np.ndarray], colour: tuple[float, float, float], *args: float, width: float = 2.0
) -> list[Layer]:
    """A shape (a function of its place and, last, its size) with a dark outline ``width`` pixels wide."""
    *place, size = args
    return [(coverage_of(*place, size + width), DARK), (coverage_of(*place, size), colour)]


def character_layers() -> list[Layer]:
    return [*_outlined(_disc, ORANGE, CENTRE + 10, CENTRE, 70)]


def effect_layers() -> list[Layer]:
    """A sparkle, a sweat drop, two motion lines and a heart-ish blob around the character."""
    lines = [(_stroke((CENTRE - 18, x), (CENTRE + 12, x), 1.3), DARK) for x in (28, 36)]
    return [
        *_outlined(_star, YELLOW, 42, 46, 12),
        *_outlined(_disc, BLUE, 58, 205, 6),
        *lines,
        *_outlined(_disc, RED, 222, 214, 8),
    ]


def drawing(with_effects: bool = True) -> Drawing:
    """The character with (or without) its effects, over white."""
    _, character = _paint(character_layers())
    premultiplied, alpha = _paint(character_layers() + (effect_layers() if with_effects else []))
    rgb = np.rint((premultiplied + (1 - alpha[..., None])) * 255).astype(np.uint8)
    return Drawing(rgb, alpha, character)


@dataclass(frozen=True)
class Dropper:
    """A stand-in segmentation model: the character's hard mask, its effects dropped, no background."""

    character: np.ndarray
    device: str = "cpu"
    precision: str = "fp32"

    def apply(self, state: MatteState) -> MatteState:
        return replace(state, alpha=(self.character >= 0.5).astype(np.float32))


def _pipeline(character: np.ndarray) -> Pipelines:
    """The built-in steps and ``dropper``, which keeps ``character``."""
    registry: StepRegistry = builtin_steps()
    registry.register(StepSpec("dropper", StepRole.COARSE, lambda variant, context: Dropper(character)))
    return Pipelines(registry)


def run(rgb: np.ndarray, character: np.ndarray, name: str = "dropper+effects+defringe") -> np.ndarray:
    """The alpha of pipeline ``name`` whose coarse step keeps only ``character``."""
    return _pipeline(character).build(name).run(rgb).alpha


def h264(frames: list[np.ndarray], crf: int) -> list[np.ndarray]:
    """Frames through libx264 (yuv420p) at ``crf`` and back, as the procedural generator encodes its clips."""
    buffer = io.BytesIO()
    height, width = frames[0].shape[:2]
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=12, options={"crf": str(crf), "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.thread_count = 1
        for index, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = index, Fraction(1, 12)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(io.BytesIO(buffer.getvalue()), mode="r") as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(container.streams.video[0])]


def recall(alpha: np.ndarray, effects: np.ndarray) -> float:
    """Share of the effect pixels the alpha keeps (>= 0.5)."""
    return float((alpha[effects] >= 0.5).mean())


def false_alpha(alpha: np.ndarray, truth: np.ndarray, before: np.ndarray | None = None) -> float:
    """Share of the frame made opaque where the truth is transparent (beyond what ``before`` already had)."""
    extra = (alpha >= 0.5) & (truth < 0.5)
    if before is not None:
        extra &= before < 0.5
    return float(extra.mean())


# --- synthetic drawings ---------------------------------------------------------------------------------------------


def test_dropped_effects_come_back_with_clean_edges() -> None:
    scene = drawing()
    assert scene.effects.sum() > 400

    without = run(scene.rgb, scene.character, "dropper+defringe")
    alpha = run(scene.rgb, scene.character)

    assert recall(without, scene.effects) < 0.05
    assert recall(alpha, scene.effects) >= 0.98
    assert false_alpha(alpha, scene.alpha) <= 5e-4  # a few anti-aliased pixels at the sparkle's tips
    assert metrics.sad(alpha, scene.alpha) <= 0.05  # defringe after effects gives the restored blobs soft edges


@pytest.mark.parametrize("crf", [18, 23, 28])
def test_effects_survive_h264(crf: int) -> None:
    scene = drawing()
    (rgb,) = h264([scene.rgb], crf)

    alpha = run(rgb, scene.character)

    assert recall(alpha, scene.effects) >= 0.9
    assert false_alpha(alpha, scene.alpha, before=scene.character) <= 1e-3


@pytest.mark.parametrize("crf", [18, 23, 28])
def test_compression_noise_is_never_restored(crf: int) -> None:
    """The character alone, through H.264: its ringing hugs the edge and is too weak to be an effect."""
    scene = drawing(with_effects=False)
    (rgb,) = h264([scene.rgb], crf)
    state = MatteState(image=rgb.astype(np.float32) / 255, alpha=(scene.character >= 0.5).astype(np.float32))

    restored = EffectsStep().apply(state)

    assert restored.alpha is not None
    assert not np.any((restored.alpha >= 0.5) & (scene.character < 0.5))


@pytest.mark.parametrize("noise", [0.0, 2.0])
def test_a_plain_white_clip_gets_no_alpha(noise: float) -> None:
    """White (with faint noise) through H.264 at CRF 23: neither the classical pipeline nor effects finds anything."""
    rng = np.random.default_rng(3)
    frames = [np.clip(np.rint(255 + rng.normal(0, noise, (SIZE, SIZE, 3))), 0, 255).astype(np.uint8) for _ in range(4)]
    pipelines = _pipeline(np.zeros((SIZE, SIZE)))

    for rgb in h264(frames, 23):
        assert pipelines.build("classical").run(rgb).alpha.max() == 0.0
        assert pipelines.build("floodfill+effects+defringe").run(rgb).alpha.max() == 0.0


def _with_blob(blob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The character and one extra blue blob over white, and the character's alpha."""
    _, character = _paint(character_layers())
    premultiplied, alpha = _paint([*character_layers(), (blob, BLUE)])
    return np.rint((premultiplied + (1 - alpha[..., None])) * 255).astype(np.uint8), character


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (_disc(40, 40, 1.2), "a speck is noise"),
        (_disc(44, 44, 40), "too big: a second subject"),
        (_disc(8, 8, 5), "too far from the subject, and touching the frame border"),
        (_disc(14, 230, 7), "too far from the subject"),
        (_stroke((0, 30), (SIZE - 1, 30), 1.5), "an edge line of the frame"),
    ],
)
def test_what_is_not_an_effect_stays_out(blob: np.ndarray, why: str) -> None:
    rgb, character = _with_blob(blob)
    coarse = (character >= 0.5).astype(np.float32)

    restored = EffectsStep().apply(MatteState(image=rgb.astype(np.float32) / 255, alpha=coarse))

    assert restored.alpha is not None
    assert np.array_equal(restored.alpha, coarse), why


def test_a_faint_blob_is_not_an_effect() -> None:
    """A blob off white by under three tolerances (2.5 here) is as faint as codec noise: not an effect."""
    rgb, character = _with_blob(_disc(40, 60, 8) * 0.3)
    coarse = (character >= 0.5).astype(np.float32)

    restored = EffectsStep().apply(MatteState(image=rgb.astype(np.float32) / 255, alpha=coarse))

    assert restored.alpha is not None
    assert np.array_equal(restored.alpha, coarse)


def test_after_floodfill_there_is_nothing_to_restore() -> None:
    """The flood fill keeps every blob that is not background, so ``effects`` adds nothing to ``classical``."""
    scene = drawing()
    pipelines = _pipeline(scene.character)

    classical = pipelines.build("classical").run(scene.rgb).alpha
    with_effects = pipelines.build("floodfill+effects+defringe").run(scene.rgb).alpha

    assert np.array_equal(classical, with_effects)
    assert recall(classical, scene.effects) >= 0.98


def test_the_step_needs_a_coarse_alpha_and_a_plain_background() -> None:
    scene = drawing()
    image = scene.rgb.astype(np.float32) / 255
    with pytest.raises(ValueError, match="coarse step"):
        EffectsStep().apply(MatteState(image=image))

    texture = np.random.default_rng(1).uniform(0.0, 1.0, image.shape).astype(np.float32)
    textured = np.where((scene.alpha >= 0.5)[..., None], image, texture)
    state = MatteState(image=textured, alpha=(scene.character >= 0.5).astype(np.float32))
    assert EffectsStep().apply(state) is state  # nothing can be told from a texture

    fitted = EffectsStep().apply(replace(state, image=image))
    assert isinstance(fitted.background, Background)  # fitted once here, then passed on to defringe


def test_blobs_are_found_against_a_given_background() -> None:
    scene = drawing()
    white = Background(np.ones((SIZE, SIZE, 3), dtype=np.float32), 0.0)

    blobs = effect_blobs(scene.rgb.astype(np.float32) / 255, scene.character.astype(np.float32), white)

    assert blobs[scene.effects].mean() >= 0.95
    assert not blobs[scene.character >= 0.5].any()
    assert ndimage.label(blobs, structure=np.ones((3, 3)))[1] == 5  # star, drop, two lines, blob


def test_the_factory_builds_the_step() -> None:
    step = builtin_steps().spec("effects").load_factory()(None, StepContext())
    assert isinstance(step, EffectsStep)
    assert (step.device, step.precision) == ("cpu", "fp32")


# --- procedural clips -----------------------------------------------------------------------------------------------

REF = ArtifactRef(uri="memory://artifact", sha256="0" * 64, size_bytes=1, media_type="image/png")


def procedural_clip(action: str, prompt: str = "a round orange cat with a blue scarf", seed: int = 7) -> RenderedClip:
    """One second at 12 fps of ``action``, 256 px, drawn by the procedural generator."""
    spec = ActionSpec.of_preset(PRESETS[action])
    character = CharacterRef(image=REF, prompt=prompt, candidate=0)
    start = GenerateStartFrameInput(
        set_id="set",
        action=spec,
        character=character,
        prompt=spec.pose_prompt,
        style="flat cartoon sticker",
        first_candidate=0,
        count=1,
        generator="procedural",
        size=SIZE,
        seed=seed,
    )
    request = GenerateClipInput(
        set_id="set",
        action=spec,
        character=character,
        start_frame=REF,
        motion_prompt=spec.motion_prompt,
        take=0,
        seconds=1.0,
        fps=12,
        generator="procedural",
        size=SIZE,
        seed=seed,
    )
    return render_clip(request, start_frame_images(start, b"")[0].data)


@pytest.fixture(scope="module")
def clips() -> dict[str, RenderedClip]:
    """Clips whose effects are separate blobs: motion lines and a sweat drop, sparkles and a burst, zzz."""
    return {action: procedural_clip(action) for action in ("wave", "no", "wink", "sleep")}


@pytest.mark.parametrize("crf", [0, 23])
def test_procedural_effects_are_restored(clips: dict[str, RenderedClip], crf: int) -> None:
    """Recall of the effect pixels at least 0.9 (clean and H.264 CRF 23), false alpha at most 0.1%."""
    kept, total, false = 0, 0, []
    for clip in clips.values():
        frames = list(clip.clean) if crf == 0 else h264(list(clip.clean), crf)
        for index in range(0, len(frames), 3):
            character = clip.alpha[index] - clip.effect_alpha[index]
            effects = (clip.effect_alpha[index] >= 0.5) & (character < 0.5)
            alpha = run(frames[index], character)
            kept += int((alpha[effects] >= 0.5).sum())
            total += int(effects.sum())
            false.append(false_alpha(alpha, clip.alpha[index], before=character))
    assert total > 2000
    assert kept / total >= 0.9
    assert max(false) <= 1e-3
