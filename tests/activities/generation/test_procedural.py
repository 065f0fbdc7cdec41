"""The procedural generator's four roles: characters and start frames on white, clips that decode to the drawn frames
with their true alpha and deterministic defects, frame edits; the upload path; custom actions; determinism."""

from __future__ import annotations

import dataclasses
import io
import itertools
import math

import av
import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image
from scipy import ndimage

from activities.generation import builtin_generators
from activities.generation.base import GenerationRefused
from activities.generation.drawing import Affine, Canvas
from activities.generation.procedural import (
    DESIGN_SIZE,
    FRAMING,
    MARGIN,
    Accessory,
    CharacterSpec,
    Defect,
    DefectKind,
    Kind,
    Pose,
    ProceduralGenerator,
    StartFrameNote,
    Variation,
    action_scene,
    character_images,
    character_scene,
    clip_frames,
    clip_mp4,
    custom_words,
    defect_schedule,
    edited_frames,
    infer_staging,
    key_white,
    render,
    render_clip,
    staging_for,
    start_frame_images,
    start_frame_variation,
)
from activities.generation.procedural.painter import CharacterPainter
from activities.generation.procedural.upload import KEY_FLOOR
from workflows.contract import (
    ActionSpec,
    ArtifactRef,
    CharacterRef,
    CustomAction,
    EditFrameInput,
    GenerateCharacterInput,
    GenerateClipInput,
    GenerateStartFrameInput,
)
from workflows.presets import PRESETS, Expression, Motion, Prop

CAT = "a round orange cat with a blue scarf"
TALL = "a pink bunny with a top hat, headphones and a scarf"
STYLE = "flat cartoon sticker"
SEED = 7
REF = ArtifactRef(uri="memory://artifact", sha256="0" * 64, size_bytes=1, media_type="image/png")


def action(name: str = "wave") -> ActionSpec:
    return ActionSpec.of_preset(PRESETS[name])


def drawn(candidate: int = 1, prompt: str = CAT) -> CharacterRef:
    return CharacterRef(image=REF, prompt=prompt, candidate=candidate)


UPLOADED = CharacterRef(image=REF)


def character_request(*, size: int = 96, first: int = 0, count: int = 2, prompt: str = CAT) -> GenerateCharacterInput:
    return GenerateCharacterInput(
        set_id="set-1",
        prompt=prompt,
        style=STYLE,
        first_candidate=first,
        count=count,
        generator="procedural",
        size=size,
        seed=SEED,
    )


def start_frame_request(
    act: ActionSpec | None = None,
    *,
    character: CharacterRef | None = None,
    prompt: str | None = None,
    size: int = 96,
    first: int = 0,
    count: int = 2,
) -> GenerateStartFrameInput:
    act = act or action()
    return GenerateStartFrameInput(
        set_id="set-1",
        action=act,
        character=character or drawn(),
        prompt=act.pose_prompt if prompt is None else prompt,
        style=STYLE,
        first_candidate=first,
        count=count,
        generator="procedural",
        size=size,
        seed=SEED,
    )


def clip_request(
    act: ActionSpec | None = None,
    *,
    character: CharacterRef | None = None,
    take: int = 0,
    seconds: float = 2.0,
    fps: int = 24,
    size: int = 96,
) -> GenerateClipInput:
    act = act or action()
    return GenerateClipInput(
        set_id="set-1",
        action=act,
        character=character or drawn(),
        start_frame=REF,
        motion_prompt=act.motion_prompt,
        take=take,
        seconds=seconds,
        fps=fps,
        generator="procedural",
        size=size,
        seed=SEED,
    )


def edit_request(
    act: ActionSpec | None = None,
    *,
    character: CharacterRef | None = None,
    prompt: str = "cleaner lines",
    frame: int = 3,
    frames: int = 12,
    size: int = 96,
    count: int = 2,
) -> EditFrameInput:
    return EditFrameInput(
        set_id="set-1",
        action=act or action(),
        character=character or drawn(),
        frame=frame,
        frames=frames,
        source=REF,
        prompt=prompt,
        style=STYLE,
        first_candidate=0,
        count=count,
        generator="procedural",
        size=size,
        seed=SEED,
    )


def start_frame(request: GenerateStartFrameInput, character: bytes = b"", index: int = 0) -> bytes:
    return start_frame_images(request, character)[index].data


def pixels(data: bytes) -> NDArray[np.uint8]:
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == "RGB"
        return np.asarray(image)


def decoded(mp4: bytes) -> tuple[NDArray[np.uint8], float, tuple[int, int]]:
    """Every frame of an MP4 as RGB, its frame rate and (width, height)."""
    with av.open(io.BytesIO(mp4), mode="r") as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]).astype(np.uint8)
        assert stream.average_rate is not None
        return frames, float(stream.average_rate), (stream.codec_context.width, stream.codec_context.height)


def yuv420p(rgb: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """``rgb`` through the clip's pixel format and back, without compression."""
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    return np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)


def mean_error(video: NDArray[np.uint8], frames: NDArray[np.uint8]) -> NDArray[np.float64]:
    """The mean absolute difference of each frame of ``video`` from the same frame of ``frames``."""
    return np.abs(video.astype(np.int16) - frames).mean(axis=(1, 2, 3))


def border(image: NDArray[np.generic]) -> NDArray[np.generic]:
    return np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])


def covers_margin(alpha: NDArray[np.floating]) -> bool:
    """Whether anything is drawn in the band of ``MARGIN`` (rounded down to whole pixels) along the frame edge."""
    size = alpha.shape[0]
    margin = math.floor(MARGIN * size)
    band = np.ones_like(alpha, dtype=bool)
    band[margin : size - margin, margin : size - margin] = False
    return bool(np.any(alpha[band] > 0.0))


def sharpness(rgb: NDArray[np.uint8]) -> float:
    return float(np.abs(ndimage.laplace(rgb.astype(np.float32).mean(axis=2))).mean())


def picture_on_white(size: int = 96) -> NDArray[np.uint8]:
    """An uploaded character as the upload module leaves it: a red blob with a white eye, on white."""
    y, x = np.mgrid[0:size, 0:size] + 0.5
    blob = np.clip(size * 0.3 - np.hypot(x - size / 2, y - size * 0.55) + 0.5, 0.0, 1.0)
    eye = np.clip(size * 0.07 - np.hypot(x - size * 0.45, y - size * 0.5) + 0.5, 0.0, 1.0)
    red = np.array([220.0, 60.0, 70.0])
    colour = red[None, None] * (1.0 - eye[..., None]) + 255.0 * eye[..., None]
    image = colour * blob[..., None] + 255.0 * (1.0 - blob[..., None])
    return np.rint(image).astype(np.uint8)


def _forehead(size: int) -> tuple[int, int]:
    x, y = FRAMING.apply(128.0, 120.0)
    return math.floor(y * size / DESIGN_SIZE), math.floor(x * size / DESIGN_SIZE)


FOREHEAD = _forehead(96)
"""A pixel of the body's colour, between the ears and above the eyes, in a 96 px frame."""


def png(rgb: NDArray[np.uint8]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


# --- Reading the prompts -----------------------------------------------------------------------------------------


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


def test_custom_words_are_what_a_reviewer_added() -> None:
    pose = PRESETS["wave"].pose_prompt

    assert custom_words(pose, pose) == ""
    assert custom_words(f"{pose.upper()}, now as a purple bunny", pose) == ", now as a purple bunny"
    refined = CharacterSpec.from_prompt(CAT, SEED).refined(
        custom_words(f"{pose}, as a purple bunny with a crown", pose)
    )
    assert refined.kind is Kind.BUNNY and refined.body == (165.0, 115.0, 220.0)
    assert {accessory for accessory, _ in refined.accessories} == {Accessory.SCARF, Accessory.CROWN}


@pytest.mark.parametrize(
    ("pose", "motion", "staging"),
    [
        ("waving both hands", "the hand goes side to side", (Motion.WAVE, Expression.HAPPY, Prop.NONE)),
        ("crouching", "jumps up and lands, laughing", (Motion.BOUNCE, Expression.LAUGH, Prop.NONE)),
        ("bowing deeply", "the body bows forward", (Motion.NOD, Expression.HAPPY, Prop.NONE)),
        ("furious with steam", "trembling with rage", (Motion.SHAKE, Expression.ANGRY, Prop.STEAM)),
        ("asleep", "slow breathing, drifting", (Motion.FLOAT, Expression.SLEEP, Prop.ZZZ)),
        ("holding a heart", "it beats", (Motion.PULSE, Expression.LOVE, Prop.HEART)),
        ("winking with sparkles", "a quick pop", (Motion.POP, Expression.WINK, Prop.SPARKLE)),
        ("standing", "looking around", (Motion.SWAY, Expression.HAPPY, Prop.NONE)),
    ],
)
def test_a_custom_actions_staging_is_read_from_its_prompts(pose: str, motion: str, staging: tuple[str, ...]) -> None:
    custom = ActionSpec.of_custom(CustomAction(name="mine", pose_prompt=pose, motion_prompt=motion))

    assert (custom.motion, custom.expression, custom.prop) == (None, None, None)
    assert dataclasses.astuple(staging_for(custom)) == staging
    assert infer_staging(f"{pose} {motion}") == staging_for(custom)


def test_a_presets_staging_is_its_own() -> None:
    for preset in PRESETS.values():
        staging = staging_for(ActionSpec.of_preset(preset))
        assert (staging.motion, staging.expression, staging.prop) == (preset.motion, preset.expression, preset.prop)


# --- Motion ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("motion", list(Motion))
def test_pose_is_periodic(motion: Motion) -> None:
    for t in (0.0, 0.13, 0.5):
        start, later = dataclasses.astuple(Pose.at(motion, t, 1.1)), dataclasses.astuple(Pose.at(motion, t + 1.0, 1.1))
        assert start == pytest.approx(later, abs=1e-9)


def test_nod_dips_twice_per_loop_and_comes_back_upright() -> None:
    heights = [Pose.at(Motion.NOD, t / 16).transform().apply(128.0, 92.0)[1] for t in range(17)]

    assert heights[0] == pytest.approx(92.0) and heights[8] == pytest.approx(92.0) and heights[16] == heights[0]
    assert heights[4] > 92.0 + 5.0 and heights[12] > 92.0 + 5.0, "the top of the head dips at t = 1/4 and 3/4"
    assert heights[4] == pytest.approx(heights[12])
    assert Pose.at(Motion.NOD, 0.25).transform().apply(128.0, 218.0) == pytest.approx((128.0, 218.0)), "feet stay"


def test_a_takes_swell_leaves_the_start_pose_and_the_loop_alone() -> None:
    take = Variation(amplitude=0.95, lean=0.01).for_take(SEED, "wave", 3)

    assert take.swell != 0.0 and abs(take.swell) <= 0.12
    assert take.amplitude_at(0.0) == 0.95 and take.amplitude_at(1.0) == pytest.approx(0.95)
    assert take == Variation(amplitude=0.95, lean=0.01).for_take(SEED, "wave", 3)


@pytest.mark.parametrize("size", [64, 256])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_action_stays_inside_the_margin_at_its_widest(name: str, size: int) -> None:
    for lean in (-0.03, 0.03):
        widest = Variation(amplitude=1.1, lean=lean, swell=0.12)
        scene = action_scene(TALL, 2, action(name), custom="", style=STYLE, seed=SEED, variation=widest)
        for phase in range(0, 12, 2):
            assert not covers_margin(render(scene, size, phase / 12).alpha), f"{name} at {phase}/12, lean {lean}"


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_stays_inside_the_margin(kind: Kind) -> None:
    prompt = f"a {kind.value} with a top hat, headphones, glasses and a scarf"
    for name, t in (("laugh", 0.5), ("thumbs-up", 0.1), ("think", 0.25), ("sleep", 0.5), ("nod", 0.25)):
        scene = action_scene(prompt, 0, action(name), custom="", style=STYLE, seed=SEED, variation=Variation(1.1))
        assert not covers_margin(render(scene, 64, t).alpha), f"{name} at {t}"


@pytest.mark.parametrize("name", ["wave", "no", "wink", "surprised", "sleep"])
def test_effects_around_the_character_are_drawn_apart_with_their_own_alpha(name: str) -> None:
    """Motion lines, sweat drops, sparkles, bursts, zzz: separate blobs, whose coverage the frame keeps apart."""
    scene = action_scene(CAT, 0, action(name), custom="", style=STYLE, seed=SEED, variation=Variation())
    apart = []
    for phase in range(12):
        frame = render(scene, 128, phase / 12)
        alone = Canvas(128, FRAMING.then(Affine.scaling(0.5, 0.5)))
        CharacterPainter(alone, scene, phase / 12).paint_character()
        assert frame.effect_alpha is not None
        assert np.allclose(frame.alpha - frame.effect_alpha, alone.alpha, atol=1e-6), "the character alone"
        assert frame.effect_alpha.min() >= 0.0 and np.all(frame.effect_alpha <= frame.alpha + 1e-6)
        near = ndimage.binary_dilation(alone.alpha > 0.0, iterations=2)
        apart.append(np.count_nonzero((frame.effect_alpha >= 0.5) & ~near))
    assert max(apart) >= 10, "at some phase an effect stands clear of the character"
    assert render(scene, 128, 0.25).alpha.tobytes() == render(scene, 128, 0.25).alpha.tobytes(), "deterministic"


def test_an_action_without_effects_has_no_effect_alpha() -> None:
    scene = action_scene(CAT, 0, action("nod"), custom="", style=STYLE, seed=SEED, variation=Variation())
    for phase in range(0, 12, 3):
        effect_alpha = render(scene, 64, phase / 12).effect_alpha
        assert effect_alpha is not None and not effect_alpha.any()


def test_clip_effect_alpha_is_the_drawings_and_zero_for_an_upload() -> None:
    chosen = start_frame(start_frame_request(action("no")))
    clip = render_clip(clip_request(action("no"), seconds=0.5), chosen)
    assert clip.effect_alpha.shape == clip.alpha.shape and clip.effect_alpha.dtype == np.float32
    assert clip.effect_alpha.max() > 0.5

    upload = start_frame(start_frame_request(action("no"), character=UPLOADED), png(picture_on_white()))
    uploaded = render_clip(clip_request(action("no"), character=UPLOADED, seconds=0.5), upload)
    assert not uploaded.effect_alpha.any()


# --- Characters --------------------------------------------------------------------------------------------------


def test_character_candidates_stand_at_rest_on_white() -> None:
    request = character_request(size=96, first=2, count=3)

    images = character_images(request)

    assert len(images) == 3 and images == character_images(request)
    drawings = [pixels(image.data) for image in images]
    for candidate, (image, rgb) in enumerate(zip(images, drawings, strict=True), start=2):
        assert image.media_type == "image/png" and (image.width, image.height) == (96, 96)
        assert np.all(border(rgb) == 255)
        drawing = render(character_scene(CAT, STYLE, SEED, candidate), 96, 0.0)
        assert np.array_equal(rgb, drawing.composite())
        assert np.all(rgb[drawing.alpha == 0.0] == 255) and (drawing.alpha == 1.0).mean() > 0.2
    assert not np.array_equal(drawings[0], drawings[1]) and not np.array_equal(drawings[1], drawings[2])


def test_a_drawings_alpha_is_exactly_its_compositing_coverage() -> None:
    scene = action_scene(CAT, 0, action("sleep"), custom="", style=STYLE, seed=SEED, variation=Variation())
    frame = render(scene, 160, 0.3)
    rgb, alpha = frame.composite(), frame.alpha

    assert alpha.dtype == np.float32 and alpha.min() == 0.0 and alpha.max() == 1.0
    recomposed = frame.premultiplied.astype(np.float64) + 255.0 * (1.0 - alpha.astype(np.float64))[..., None]
    assert np.abs(rgb - recomposed).max() <= 0.5 + 1e-3
    assert np.all(rgb[alpha == 0.0] == 255)
    assert np.all(border(alpha) == 0.0)


# --- Start frames ------------------------------------------------------------------------------------------------


def test_start_frames_are_the_action_at_phase_zero_and_differ_by_candidate() -> None:
    request = start_frame_request(action("heart"), first=1, count=2)

    images = start_frame_images(request, b"")

    assert images == start_frame_images(request, b"")
    for candidate, image in enumerate(images, start=1):
        rgb = pixels(image.data)
        scene = action_scene(
            CAT,
            1,
            request.action,
            custom="",
            style=STYLE,
            seed=SEED,
            variation=start_frame_variation(SEED, "heart", candidate),
        )
        assert np.array_equal(rgb, render(scene, 96, 0.0).composite())
        assert np.all(border(rgb) == 255)
        assert StartFrameNote.read(image.data) == StartFrameNote(request.prompt, STYLE, candidate)
    assert not np.array_equal(pixels(images[0].data), pixels(images[1].data))
    at_rest = pixels(character_images(character_request(first=1, count=1))[0].data)
    assert not np.array_equal(pixels(images[0].data), at_rest), "the heart and the loving face are drawn"


def test_start_frames_differ_even_where_the_motion_starts_at_rest() -> None:
    blob = drawn(prompt="a plain blue blob")
    request = start_frame_request(action("happy"), character=blob, count=3)

    frames = [pixels(image.data) for image in start_frame_images(request, b"")]

    assert (
        Pose.at(Motion.SWAY, 0.0) == Pose() and CharacterSpec.from_prompt("a plain blue blob", SEED).accessories == ()
    )
    for one, other in itertools.combinations(frames, 2):
        assert 0.0 < np.abs(one.astype(int) - other).mean() < 8.0, "slightly"


def test_a_custom_pose_prompt_changes_the_character() -> None:
    own = start_frame_request(count=1)
    green = start_frame_request(count=1, prompt=f"{own.prompt}, as a green cat")
    r, g, _ = pixels(start_frame(green))[FOREHEAD].astype(int)
    r_own, g_own, _ = pixels(start_frame(own))[FOREHEAD].astype(int)

    assert g > r + 40 and r_own > g_own + 40


# --- Clips -------------------------------------------------------------------------------------------------------


def test_the_same_clip_request_gives_the_same_bytes() -> None:
    first = start_frame(start_frame_request())
    request = clip_request(seconds=1.0, fps=12)

    assert clip_mp4(request, first) == clip_mp4(request, first)
    assert clip_mp4(clip_request(seconds=1.0, fps=12, take=1), first) != clip_mp4(request, first)


@pytest.mark.parametrize(("seconds", "fps", "size", "frames", "edge"), [(2.0, 24, 96, 48, 96), (1.5, 10, 65, 15, 66)])
def test_the_clip_decodes_to_its_frames_at_the_asked_rate_and_size(
    seconds: float, fps: int, size: int, frames: int, edge: int
) -> None:
    request = clip_request(action("laugh"), seconds=seconds, fps=fps, size=size)
    first = start_frame(start_frame_request(action("laugh"), size=size))

    video, rate, dimensions = decoded(clip_mp4(request, first))
    rendered = render_clip(request, first)

    assert video.shape == (frames, edge, edge, 3) and rendered.rgb.shape == video.shape
    assert rate == fps and dimensions == (edge, edge) and rendered.fps == fps
    in_yuv420p = np.stack([yuv420p(frame) for frame in rendered.rgb])
    assert mean_error(video, in_yuv420p).max() < 3.5, "each decoded frame is its composite, to within H.264 error"
    assert mean_error(video, rendered.rgb).max() < 6.5, "... and yuv420p's halved chroma"
    quarter = np.roll(rendered.rgb, -(frames // 4), axis=0)
    assert mean_error(video, rendered.rgb).mean() < 0.6 * mean_error(video, quarter).mean(), "in order"


def test_clip_frame_zero_is_the_start_frame_and_the_motion_loops() -> None:
    chosen = start_frame(start_frame_request(action("wave")), index=1)

    clip = render_clip(clip_request(action("wave"), take=2), chosen)

    assert np.array_equal(clip.rgb[0], pixels(chosen)) and 0 not in clip.defects
    clean = clip.clean.astype(np.int16)
    steps = [np.abs(clean[i + 1] - clean[i]).mean() for i in range(len(clean) - 1)]
    assert min(steps) > 0.0, "consecutive frames are not identical"
    assert np.abs(clean[-1] - clean[0]).mean() <= 1.5 * max(steps), "the last frame leads back to the first"


def test_clip_alpha_is_the_true_alpha_of_the_undamaged_drawing() -> None:
    request = clip_request(action("angry"), take=1, seconds=1.0)
    chosen = start_frame(start_frame_request(action("angry")), index=1)
    variation = start_frame_variation(SEED, "angry", 1).for_take(SEED, "angry", 1)
    scene = action_scene(CAT, 1, request.action, custom="", style=STYLE, seed=SEED, variation=variation)

    clip = render_clip(request, chosen)

    assert clip.alpha.dtype == np.float32 and clip.alpha.shape == clip.rgb.shape[:3]
    for index in (0, 5, 17):
        frame = render(scene, 96, index / 24)
        assert np.array_equal(clip.alpha[index], frame.alpha)
        assert np.array_equal(clip.clean[index], frame.composite())
    assert np.all(clip.clean[clip.alpha == 0.0] == 255)
    for index in set(range(24)) - set(clip.defects):
        assert np.array_equal(clip.rgb[index], clip.clean[index])


def test_a_take_varies_the_motion_but_not_its_start() -> None:
    chosen = start_frame(start_frame_request(action("jump")))

    one, other = (render_clip(clip_request(action("jump"), take=take), chosen) for take in (0, 1))

    assert np.array_equal(one.clean[0], other.clean[0])
    assert not np.array_equal(one.clean[12], other.clean[12])
    assert np.abs(one.alpha[12] - other.alpha[12]).mean() < 0.05, "slightly"


def test_defects_are_about_one_in_ten_never_first_never_adjacent_and_deterministic() -> None:
    for frames in (24, 48, 100, 240):
        schedule = defect_schedule(frames, SEED, "wave", 0)
        indices = sorted(schedule)
        assert schedule == defect_schedule(frames, SEED, "wave", 0)
        assert 0 not in schedule and all(b - a > 1 for a, b in itertools.pairwise(indices))
        assert abs(len(indices) - frames / 10) <= 1
    assert defect_schedule(48, SEED, "wave", 1) != defect_schedule(48, SEED, "wave", 0)
    kinds = {defect.kind for take in range(6) for defect in defect_schedule(48, SEED, "wave", take).values()}
    assert kinds == set(DefectKind)


def test_the_clips_defects_are_where_the_schedule_says() -> None:
    request = clip_request(action("cry"), take=3)
    chosen = start_frame(start_frame_request(action("cry")))

    clip = render_clip(request, chosen)

    assert clip.defects == defect_schedule(48, SEED, "cry", 3)
    for index, defect in clip.defects.items():
        assert np.array_equal(clip.rgb[index], defect.apply(clip.clean[index]))
        assert not np.array_equal(clip.rgb[index], clip.clean[index])


@pytest.mark.parametrize("strength", [0.0, 0.99])
def test_each_kind_of_defect_measurably_damages_a_frame(strength: float) -> None:
    scene = action_scene(CAT, 0, action("wave"), custom="", style=STYLE, seed=SEED, variation=Variation())
    clean = render(scene, 128, 0.2).composite()
    rows_changed = lambda damaged: np.flatnonzero(np.any(damaged != clean, axis=(1, 2)))  # noqa: E731

    blurred = Defect(DefectKind.BLUR, strength, 0.5).apply(clean)
    assert sharpness(blurred) < 0.6 * sharpness(clean)

    for kind in (DefectKind.BAND, DefectKind.SMEAR):
        damaged = Defect(kind, strength, 0.45).apply(clean)
        rows = rows_changed(damaged)
        assert 3 <= len(rows) <= 0.4 * 128 and rows[-1] - rows[0] == len(rows) - 1, f"{kind}: one band of rows"
        assert np.abs(damaged[rows].astype(int) - clean[rows]).mean() > 8.0

    flashed = Defect(DefectKind.FLASH, strength, 0.1).apply(clean)
    assert np.abs(flashed.astype(int) - clean).mean() > 20.0
    assert len(rows_changed(flashed)) == 128


# --- Uploaded characters -----------------------------------------------------------------------------------------


def test_keying_against_white_keeps_enclosed_white_and_gives_the_picture_back() -> None:
    picture = picture_on_white()

    layers = key_white(picture)

    assert np.all(border(layers.alpha) == 0.0)
    assert layers.alpha[48, 48] == 1.0, "the red body"
    assert layers.alpha[48, 43] == 1.0, "the white eye, enclosed by the body"
    assert 0 < np.count_nonzero((layers.alpha > 0.0) & (layers.alpha < 1.0)) < 0.05 * picture.shape[0] ** 2
    assert np.abs(layers.composite().astype(int) - picture).max() <= KEY_FLOOR + 1


def test_an_uploaded_characters_start_frames_are_the_picture_posed_on_white() -> None:
    picture = picture_on_white()
    request = start_frame_request(action("happy"), character=UPLOADED, count=3)

    images = start_frame_images(request, png(picture))

    frames = [pixels(image.data) for image in images]
    assert images == start_frame_images(request, png(picture))
    assert [StartFrameNote.read(image.data) for image in images] == [
        StartFrameNote(request.prompt, STYLE, candidate) for candidate in range(3)
    ]
    for rgb in frames:
        assert rgb.shape == picture.shape and np.all(border(rgb) == 255)
        assert 0.0 < np.abs(rgb.astype(int) - picture).mean() < 6.0, "the picture, leaning slightly"
    assert not np.array_equal(frames[0], frames[1]) and not np.array_equal(frames[1], frames[2])


def test_an_upload_is_resized_and_anything_else_is_refused() -> None:
    big = np.asarray(Image.fromarray(picture_on_white(96)).resize((200, 200), Image.Resampling.LANCZOS))

    (image,) = start_frame_images(start_frame_request(character=UPLOADED, count=1), png(big))

    assert (image.width, image.height) == (96, 96) and pixels(image.data).shape == (96, 96, 3)
    with pytest.raises(GenerationRefused, match="character picture is not a readable picture"):
        start_frame_images(start_frame_request(character=UPLOADED, count=1), b"not a picture")


@pytest.mark.parametrize("name", ["jump", "happy", "nod"])
def test_an_uploaded_characters_clip_warps_its_start_frame(name: str) -> None:
    chosen = start_frame(start_frame_request(action(name), character=UPLOADED), png(picture_on_white()), index=1)
    request = clip_request(action(name), character=UPLOADED)

    clip = render_clip(request, chosen)
    video, rate, dimensions = decoded(clip_mp4(request, chosen))

    assert np.abs(clip.rgb[0].astype(int) - pixels(chosen)).max() <= KEY_FLOOR + 1
    assert video.shape == (48, 96, 96, 3) and rate == 24 and dimensions == (96, 96)
    assert mean_error(video, clip.rgb).max() < 6.5
    frames = list(clip_frames(request, chosen))
    for frame in frames:
        assert np.array_equal(frame.clean, frame.layers.composite()) and np.all(border(frame.clean) == 255)
    motion = [np.abs(clip.alpha[i] - clip.alpha[0]).mean() for i in range(48)]
    assert max(motion) > 0.01, "the picture moves"
    assert clip.defects == defect_schedule(48, SEED, name, 0)


def test_a_drawn_start_frame_without_its_note_is_animated_from_its_pixels() -> None:
    chosen = pixels(start_frame(start_frame_request(action("jump"))))

    clip = render_clip(clip_request(action("jump")), png(chosen))

    assert np.abs(clip.rgb[0].astype(int) - chosen).max() <= KEY_FLOOR + 1
    assert np.abs(clip.alpha[12] - clip.alpha[0]).mean() > 0.01


# --- Frame edits -------------------------------------------------------------------------------------------------


def test_a_drawn_frame_edit_redraws_the_slots_phase_cleanly() -> None:
    request = edit_request(action("wave"), frame=3, frames=12)
    source = png(np.zeros((96, 96, 3), np.uint8))

    images = edited_frames(request, source)

    assert len(images) == 2 and images == edited_frames(request, source)
    for candidate, image in enumerate(images):
        variation = Variation.pick("edit", SEED, "wave", 3, candidate)
        scene = action_scene(
            CAT, 1, request.action, custom="cleaner lines", style=STYLE, seed=SEED, variation=variation
        )
        assert np.array_equal(pixels(image.data), render(scene, 96, 0.25).composite())
    assert not np.array_equal(pixels(images[0].data), pixels(images[1].data))


def test_a_colour_word_in_a_frame_edit_changes_the_colour() -> None:
    (plain,) = edited_frames(edit_request(count=1, frame=0), b"")
    (green,) = edited_frames(edit_request(count=1, frame=0, prompt="make the cat green"), b"")

    r, g, _ = pixels(green.data)[FOREHEAD].astype(int)
    r_plain, g_plain, _ = pixels(plain.data)[FOREHEAD].astype(int)
    assert g > r + 40 and r_plain > g_plain + 40


def test_an_uploaded_characters_frame_edit_cleans_up_the_source() -> None:
    clean = key_white(picture_on_white()).composite()
    rng = np.random.default_rng(0)
    speckled = clean.copy()
    hits = rng.random(clean.shape[:2]) < 0.03
    speckled[hits] = rng.integers(0, 256, (int(hits.sum()), 3), dtype=np.uint8)
    blurred = Defect(DefectKind.BLUR, 0.5, 0.5).apply(clean)
    request = edit_request(character=UPLOADED, count=2)

    despeckled = [pixels(image.data) for image in edited_frames(request, png(speckled))]
    sharpened = pixels(edited_frames(request, png(blurred))[0].data)

    for image in despeckled:
        assert np.abs(image.astype(int) - clean).mean() < 0.5 * np.abs(speckled.astype(int) - clean).mean()
    assert not np.array_equal(despeckled[0], despeckled[1])
    assert sharpness(sharpened) > sharpness(blurred)


# --- The generator -----------------------------------------------------------------------------------------------


async def test_the_generator_plays_the_four_roles_off_the_event_loop() -> None:
    generator = builtin_generators().create("procedural")
    assert isinstance(generator, ProceduralGenerator) and generator.name == "procedural"
    characters = character_request(count=2)
    start = start_frame_request(count=2)
    clip = clip_request(seconds=1.0, fps=12)
    edit = edit_request(count=1)

    assert await generator.character(characters) == character_images(characters)
    frames = await generator.start_frame(start, (await generator.character(characters))[1].data)
    assert frames == start_frame_images(start, b"")
    take = await generator.clip(clip, frames[0].data)
    assert take.media_type == "video/mp4" and take.task_id is None
    assert take.data == clip_mp4(clip, frames[0].data)
    assert await generator.edit_frame(edit, b"") == edited_frames(edit, b"")
