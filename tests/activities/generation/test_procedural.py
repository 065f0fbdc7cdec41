"""The procedural generator: deterministic, exact alpha, cartoon features, motion that loops, inside the margin."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image

from activities.generation import builtin_generators
from activities.generation.procedural import (
    MARGIN,
    WHITE,
    Accessory,
    CandidateLook,
    CharacterSpec,
    Kind,
    Pose,
    ProceduralGenerator,
    character_for,
    render_frame,
    render_layers,
)
from workflows.contract import GenerateFrameInput
from workflows.presets import PRESETS, Motion

CAT = "a round orange cat with a blue scarf"
TALL = "a pink bunny with a top hat, headphones and a scarf"


def request(
    pose: str = "wave",
    *,
    prompt: str = CAT,
    frame: int = 0,
    frame_count: int = 8,
    size: int = 128,
    seed: int = 7,
    first_candidate: int = 0,
    count: int = 1,
    custom: str | None = None,
) -> GenerateFrameInput:
    preset = PRESETS[pose]
    return GenerateFrameInput(
        set_id="set-1",
        pose=preset,
        character_prompt=prompt,
        style="flat cartoon sticker",
        prompt=f"{prompt}, {custom or preset.prompt}",
        frame=frame,
        frame_count=frame_count,
        first_candidate=first_candidate,
        count=count,
        generator="procedural",
        image_size=size,
        seed=seed,
    )


def fractional(alpha: NDArray[np.floating]) -> NDArray[np.bool_]:
    return (alpha > 0.0) & (alpha < 1.0)


def covers_margin(alpha: NDArray[np.floating]) -> bool:
    """Whether anything is drawn in the band of ``MARGIN`` (rounded down to whole pixels) along the frame edge."""
    size = alpha.shape[0]
    margin = math.floor(MARGIN * size)
    band = np.ones_like(alpha, dtype=bool)
    band[margin : size - margin, margin : size - margin] = False
    return bool(np.any(alpha[band] > 0.0))


# --- Reading the prompt ------------------------------------------------------------------------------------------


def test_prompt_gives_kind_body_colour_and_coloured_accessories() -> None:
    spec = CharacterSpec.from_prompt("A Round ORANGE cat with a blue scarf and a bow tie", seed=0)

    assert spec.kind is Kind.CAT
    assert spec.body == (255.0, 150.0, 60.0)
    assert dict(spec.accessories)[Accessory.SCARF] == (85.0, 150.0, 235.0)
    assert Accessory.BOWTIE in dict(spec.accessories)


def test_only_the_last_named_head_top_accessory_is_worn() -> None:
    spec = CharacterSpec.from_prompt("a bear with a red hat, then a crown, and glasses", seed=0)

    assert [accessory for accessory, _ in spec.accessories] == [Accessory.CROWN, Accessory.GLASSES]


def test_unknown_words_fall_back_deterministically() -> None:
    first = CharacterSpec.from_prompt("a mysterious zorblax", seed=3)

    assert first == CharacterSpec.from_prompt("a mysterious zorblax", seed=3)
    assert first.kind in Kind
    assert first.accessories == ()


def test_custom_prompt_refines_the_character() -> None:
    custom = request(custom="now as a purple bunny wearing a crown")

    spec = character_for(custom)

    assert spec.kind is Kind.BUNNY
    assert spec.body == (165.0, 115.0, 220.0)
    assert {accessory for accessory, _ in spec.accessories} == {Accessory.SCARF, Accessory.CROWN}
    assert character_for(request("heart")) == CharacterSpec.from_prompt(CAT, seed=7)


def test_background_is_uniform_and_far_from_the_body() -> None:
    for body in ((246.0, 246.0, 246.0), (255.0, 150.0, 60.0), (62.0, 60.0, 72.0)):
        spec = CharacterSpec(Kind.GHOST, body)
        for candidate in range(6):
            background = CandidateLook.for_candidate(spec, seed=1, candidate=candidate).background
            assert math.dist(background, body) >= 70.0
            assert min(background) >= 150.0 or background == WHITE


# --- Determinism, shapes, exact alpha ----------------------------------------------------------------------------


def test_same_request_gives_identical_bytes() -> None:
    generator = ProceduralGenerator()

    first = generator.generate_now(request(count=2))
    second = generator.generate_now(request(count=2))

    assert first == second


def test_seed_and_candidate_change_the_image() -> None:
    base, _ = render_frame(request(), 0)

    assert not np.array_equal(base, render_frame(request(), 1)[0])
    assert not np.array_equal(base, render_frame(request(seed=8), 0)[0])


@pytest.mark.parametrize("size", [64, 256])
def test_shapes_dtypes_and_ranges(size: int) -> None:
    rgb, alpha = render_frame(request(size=size), 0)

    assert rgb.shape == (size, size, 3) and rgb.dtype == np.uint8
    assert alpha.shape == (size, size) and alpha.dtype == np.float32
    assert alpha.min() >= 0.0 and alpha.max() <= 1.0
    assert alpha.max() == 1.0


@pytest.mark.parametrize("pose", ["wave", "sleep", "angry"])
def test_alpha_is_exactly_the_compositing_coverage(pose: str) -> None:
    frame = render_layers(request(pose, size=160), 2)
    rgb, alpha = render_frame(request(pose, size=160), 2)
    background = np.asarray(frame.background, dtype=np.float64)
    opaque, clear = alpha == 1.0, alpha == 0.0

    assert np.array_equal(alpha, frame.alpha)
    assert np.array_equal(rgb[opaque], np.rint(frame.premultiplied[opaque]).astype(np.uint8))
    assert np.all(rgb[clear] == np.rint(background).astype(np.uint8))
    recomposed = frame.premultiplied.astype(np.float64) + (1.0 - alpha.astype(np.float64))[..., None] * background
    assert np.abs(rgb - recomposed).max() <= 0.5 + 1e-3
    assert opaque.sum() > 0.2 * alpha.size
    border = np.concatenate([alpha[0], alpha[-1], alpha[:, 0], alpha[:, -1]])
    assert np.all(border == 0.0)


def test_edges_are_antialiased_in_a_thin_band() -> None:
    _, alpha = render_frame(request("heart", size=256), 0)
    soft = fractional(alpha)
    padded = np.pad(soft, 1)
    neighbours = [padded[1 + dy : 257 + dy, 1 + dx : 257 + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1)]

    assert soft.sum() > 200
    assert soft.sum() < 0.12 * (alpha > 0.0).sum()
    assert not np.any(np.logical_and.reduce(neighbours)), "a fractional pixel surrounded by fractional pixels"


# --- Every preset: margin, white interiors, motion that loops ----------------------------------------------------


@pytest.mark.parametrize("size", [64, 256])
@pytest.mark.parametrize("pose", sorted(PRESETS))
def test_every_preset_stays_inside_the_margin(pose: str, size: int) -> None:
    for frame in (0, 1, 2, 4, 6):
        _, alpha = render_frame(request(pose, prompt=TALL, frame=frame, size=size), frame % 3)
        assert not covers_margin(alpha), f"{pose} frame {frame}"


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_stays_inside_the_margin_at_its_biggest(kind: Kind) -> None:
    prompt = f"a {kind.value} with a top hat, headphones, glasses and a scarf"
    for pose, frame in (("laugh", 4), ("thumbs-up", 1), ("think", 2), ("sleep", 6)):
        _, alpha = render_frame(request(pose, prompt=prompt, frame=frame, size=64), 0)
        assert not covers_margin(alpha), f"{pose} frame {frame}"


@pytest.mark.parametrize("pose", sorted(PRESETS))
def test_white_interior_areas_are_drawn(pose: str) -> None:
    rgb, alpha = render_frame(request(pose, size=128), 0)
    near_white = (alpha == 1.0) & (rgb.min(axis=2) >= 235)

    assert near_white.sum() >= 12


@pytest.mark.parametrize("pose", sorted(PRESETS))
def test_frames_move_and_loop(pose: str) -> None:
    frames = [render_frame(request(pose, frame=f, frame_count=12, size=96), 0)[0].astype(np.int16) for f in range(13)]
    steps = [np.abs(frames[f + 1] - frames[f]).mean() for f in range(11)]
    seam = np.abs(frames[0] - frames[11]).mean()

    assert min(steps) > 0.0, "consecutive frames are identical"
    assert np.array_equal(frames[12], frames[0])
    assert seam <= 1.5 * max(steps)


@pytest.mark.parametrize("motion", list(Motion))
def test_pose_is_periodic(motion: Motion) -> None:
    start, end = dataclasses.astuple(Pose.at(motion, 0.0, 1.1)), dataclasses.astuple(Pose.at(motion, 1.0, 1.1))

    assert start == pytest.approx(end, abs=1e-9)


# --- The generator -----------------------------------------------------------------------------------------------


async def test_generate_returns_count_pngs_of_the_rendered_frames() -> None:
    generator = builtin_generators().create("procedural")
    frame_request = request("heart", size=96, first_candidate=3, count=3)

    images = await generator.generate(frame_request)

    assert generator.name == "procedural"
    assert len(images) == 3
    for candidate, image in enumerate(images, start=3):
        rgb, _ = render_frame(frame_request, candidate)
        decoded = Image.open(io.BytesIO(image.data))
        assert image.media_type == "image/png" and (image.width, image.height) == (96, 96)
        assert decoded.mode == "RGB" and decoded.size == (96, 96)
        assert np.array_equal(np.asarray(decoded), rgb)
