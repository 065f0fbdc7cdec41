"""The SAM2 refiner: prompts and the combination rule as pure functions, then the model path with random weights.

A random-weight hiera-tiny is built offline and saved as a checkpoint in the layout production loads
(``<model_dir>/sam2.1-hiera-tiny/sam2.1_hiera_tiny.pt``, ``{"model": state_dict}``). Its masks are arbitrary, so the
model tests check shapes, ranges and batching, not quality. SAM2 embeds every image at 1024x1024 (seconds per image
on a CPU), so the model tests share one step and use few images.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from core.artifacts import FileArtifactStore
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.engines.sam2 import (
    POINT_CLEARANCE,
    VARIANTS,
    Sam2Step,
    create_step,
    edge_band,
    prompts_from_alpha,
    propagate_masks,
    refine_alpha,
)
from gpu_activity_worker.matting import describe, encode_png
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.temporal import stabilise_emoji
from gpu_activity_worker.vocabulary import InvalidPipelineError, UnsupportedImageError
from gpu_activity_worker.weights import WeightsMissingError
from testkit.model_folders import sam2_folder
from testkit.set_keys import source_key, stable_key
from testkit.weights import unpinned
from workflows.contract import DescribePipelineInput, StabiliseEmojiInput, TemporalMode

SIZE = 96


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The CPU is shared: one torch thread for this module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", autouse=True)
def stand_in_weights_are_unpinned() -> Iterator[None]:
    with unpinned("sam2"):
        yield


def _disc(radius: float, centre: tuple[float, float], shape: tuple[int, int] = (SIZE, SIZE)) -> np.ndarray:
    """Anti-aliased disc alpha."""
    yy, xx = np.indices(shape, dtype=np.float64)
    return np.clip(0.5 - (np.hypot(yy - centre[0], xx - centre[1]) - radius), 0.0, 1.0)


BODY = _disc(28, (56, 48))
SPARKLE = _disc(5, (14, 82))
EYE = _disc(6, (50, 40))
SPECK = _disc(3, (88, 8))
ANTENNA = np.zeros((SIZE, SIZE))
ANTENNA[6:30, 47:49] = 1.0
COARSE = np.maximum(np.minimum(np.maximum(BODY, SPARKLE), 1 - EYE), SPECK).astype(np.float32)
"""A coarse alpha with the usual faults: a hole where the white eye is, no antenna, a stray speck."""

SAM_MASK = np.maximum.reduce([_disc(29, (56, 48)), SPARKLE, ANTENNA]) > 0.5
"""The true silhouette, as SAM2 would give it: whole, with an edge one pixel off the coarse one."""


def test_prompts_cover_the_subject_and_its_separate_parts() -> None:
    prompts = prompts_from_alpha(COARSE)
    subject = COARSE > 0.5
    ys, xs = np.nonzero(subject)
    x0, y0, x1, y1 = prompts.box
    assert 0 <= x0 < xs.min() and 0 <= y0 < ys.min() and xs.max() + 1 < x1 <= SIZE and ys.max() + 1 < y1 <= SIZE

    cols, rows = (prompts.points - 0.5).astype(int).T
    positive, negative = prompts.labels == 1, prompts.labels == 0
    assert positive.sum() >= 2 and negative.sum() >= 1
    assert subject[rows[positive], cols[positive]].all()
    assert not subject[rows[negative], cols[negative]].any()
    clearance = POINT_CLEARANCE * edge_band(COARSE.shape)
    for row, col in zip(rows[negative], cols[negative], strict=True):
        assert np.hypot(ys - row, xs - col).min() >= clearance
    # The first point is the body's deepest, the detached sparkle gets one, the speck (too thin) none.
    assert BODY[rows[0], cols[0]] == 1 and EYE[rows[0], cols[0]] == 0
    assert (SPARKLE[rows[positive], cols[positive]] > 0.5).any()
    assert not (SPECK[rows[positive], cols[positive]] > 0).any()


def test_prompts_for_a_subject_filling_the_frame() -> None:
    prompts = prompts_from_alpha(np.ones((40, 50), dtype=np.float32))
    np.testing.assert_array_equal(prompts.box, [0, 0, 50, 40])
    assert (prompts.labels == 1).all()
    cols, rows = (prompts.points - 0.5).astype(int).T
    assert np.minimum.reduce([rows[0] + 1, cols[0] + 1, 40 - rows[0], 50 - cols[0]]) == 20


def test_edge_band_follows_sams_mask_resolution() -> None:
    assert edge_band((64, 64)) == 2
    assert edge_band((1024, 512)) == 8


def test_sam_fixes_the_silhouette_and_the_coarse_edge_stays() -> None:
    refined, overruled = refine_alpha(COARSE, SAM_MASK)

    assert refined.dtype == np.float32
    np.testing.assert_array_equal(refined[overruled], SAM_MASK[overruled])
    assert (refined[EYE > 0] == 1).all()
    assert (refined[SPECK > 0] == 0).all()
    assert (refined[ANTENNA == 1] > 0.5).all()
    band = edge_band(COARSE.shape)
    assert (refined[6 : 28 - band - 1, 47:49] == 1).all()
    # Everywhere else the coarse alpha, soft edge included, is kept exactly: SAM2's edge is a pixel off.
    yy, xx = np.indices(COARSE.shape)
    near_antenna = (np.abs(xx - 47.5) <= 1 + 2 * band) & (yy < 40)
    elsewhere = ~(near_antenna | (EYE > 0) | (SPECK > 0))
    np.testing.assert_array_equal(refined[elsewhere], COARSE[elsewhere])
    assert ((COARSE[elsewhere] > 0) & (COARSE[elsewhere] < 1)).sum() > 100


def test_sam_agreeing_changes_nothing() -> None:
    refined, overruled = refine_alpha(COARSE, COARSE > 0.5)
    np.testing.assert_array_equal(refined, COARSE)
    assert not overruled.any()


def test_a_mask_that_changes_too_much_is_ignored() -> None:
    refined, overruled = refine_alpha(COARSE, np.ones_like(SAM_MASK))
    np.testing.assert_array_equal(refined, COARSE)
    assert not overruled.any()


def test_registry_and_pipeline_names() -> None:
    steps = builtin_steps()
    spec = steps.spec("sam2")
    assert spec.role is StepRole.REFINER
    assert spec.variants == frozenset(VARIANTS)
    pipelines = Pipelines(steps)
    assert [str(ref) for ref in pipelines.parse("floodfill+sam2:base-plus+defringe")] == [
        "floodfill",
        "sam2:base-plus",
        "defringe",
    ]
    with pytest.raises(InvalidPipelineError, match="no variant 'huge'"):
        pipelines.parse("floodfill+sam2:huge")
    with pytest.raises(InvalidPipelineError, match="refiner"):
        pipelines.parse("sam2")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder holding a random-weight SAM 2.1 hiera-tiny checkpoint in the official format."""
    root = tmp_path_factory.mktemp("models")
    sam2_folder(root, "tiny")
    return root


@pytest.fixture(scope="module")
def step(model_dir: Path) -> Sam2Step:
    return create_step(None, StepContext(device="cpu", model_dir=model_dir))


def _emoji(height: int, width: int) -> MatteState:
    """A filled, outlined disc on white, with its exact alpha as the coarse alpha and a foreground colour."""
    alpha = _disc(0.35 * min(height, width), (height / 2, width / 2), (height, width))
    inner = _disc(0.35 * min(height, width) - 3, (height / 2, width / 2), (height, width))[..., None]
    colour = np.array([0.2, 0.1, 0.3]) * (1 - inner) + np.array([1.0, 0.8, 0.2]) * inner
    image = (colour * alpha[..., None] + (1 - alpha[..., None])).astype(np.float32)
    return MatteState(image=image, alpha=alpha.astype(np.float32), foreground=colour.astype(np.float32))


def test_step_loads_on_the_cpu_in_fp32(step: Sam2Step) -> None:
    assert (step.device, step.precision) == ("cpu", "fp32")


def test_apply_and_apply_batch(step: Sam2Step) -> None:
    """One image alone and in a batch with another of a different size (images cost seconds each: three in all)."""
    first, second = _emoji(64, 80), replace(_emoji(96, 64), foreground=None)

    single = step.apply(first)
    batched = step.apply_batch([first, second])

    for state, result in zip([first, second], batched, strict=True):
        assert result.alpha is not None
        assert result.alpha.shape == state.image.shape[:2] and result.alpha.dtype == np.float32
        assert result.alpha.min() >= 0.0 and result.alpha.max() <= 1.0
        assert result.image is state.image
    assert single.alpha is not None and batched[0].alpha is not None
    np.testing.assert_array_equal(batched[0].alpha, single.alpha)
    assert single.foreground is not None and single.foreground.shape == first.image.shape
    np.testing.assert_array_equal(batched[0].foreground, single.foreground)
    assert batched[1].foreground is None


def test_an_empty_coarse_alpha_is_unsupported(step: Sam2Step) -> None:
    state = _emoji(32, 32)
    with pytest.raises(UnsupportedImageError, match=r"no pixel with alpha above 0\.5"):
        step.apply(replace(state, alpha=np.zeros((32, 32), dtype=np.float32)))
    with pytest.raises(ValueError, match="coarse step"):
        step.apply(replace(state, alpha=None))


def test_missing_weights_name_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissingError, match=r"popcon models fetch sam2\.1-hiera-tiny"):
        create_step(None, StepContext(device="cpu", model_dir=tmp_path))


def test_a_broken_checkpoint_names_the_fetch_command(tmp_path: Path) -> None:
    folder = tmp_path / "sam2.1-hiera-small"
    folder.mkdir()
    torch.save({"model": {}}, folder / "sam2.1_hiera_small.pt")
    with pytest.raises(WeightsMissingError, match=r"not a SAM 2\.1 hiera small checkpoint.*fetch sam2\.1-hiera-small"):
        create_step("small", StepContext(device="cpu", model_dir=tmp_path))


def test_unknown_variant(tmp_path: Path) -> None:
    with pytest.raises(InvalidPipelineError, match="no variant 'huge'"):
        create_step("huge", StepContext(device="cpu", model_dir=tmp_path))


def test_floodfill_sam2_defringe_pipeline(model_dir: Path) -> None:
    state = _emoji(96, 96)
    rgb = np.clip(np.rint(state.image * 255), 0, 255).astype(np.uint8)

    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir))
    pipeline = pipelines.build("floodfill+sam2+defringe")
    result = pipeline.run(rgb)

    assert pipeline.step_names == ["floodfill", "sam2", "defringe"]
    assert result.rgba.shape == (96, 96, 4) and result.rgba.dtype == np.uint8
    assert result.alpha.shape == (96, 96) and result.alpha.min() >= 0.0 and result.alpha.max() <= 1.0
    assert (result.device, result.precision) == ("cpu", "fp32")


def test_propagate_masks_through_frames(step: Sam2Step) -> None:
    frames = []
    for shift in range(3):
        state = _emoji(48, 64)
        frames.append(np.clip(np.rint(np.roll(state.image, 2 * shift, axis=1) * 255), 0, 255).astype(np.uint8))
    first = _emoji(48, 64).alpha
    assert first is not None

    masks = propagate_masks(step, frames, first)

    assert len(masks) == 3
    for mask in masks:
        assert mask.shape == (48, 64) and mask.dtype == np.bool_


def test_propagate_masks_checks_its_input(step: Sam2Step) -> None:
    frame = np.zeros((16, 16, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="at least one frame"):
        propagate_masks(step, [], np.ones((16, 16), dtype=bool))
    with pytest.raises(ValueError, match="one size"):
        propagate_masks(step, [frame, np.zeros((16, 8, 3), dtype=np.uint8)], np.ones((16, 16), dtype=bool))
    with pytest.raises(ValueError, match="first_mask"):
        propagate_masks(step, [frame], np.ones((8, 8), dtype=bool))
    with pytest.raises(UnsupportedImageError, match="empty"):
        propagate_masks(step, [frame], np.zeros((16, 16), dtype=np.float32))


def test_temporal_sam2_tracks_an_emojis_frames(model_dir: Path, tmp_path: Path) -> None:
    """``temporal = sam2``: the worker's sam2 step (behind its micro-batcher) tracks the first frame's subject and
    each stored cut-out is reconciled with it, inside the GPU turn; random weights, so shapes and flow only."""
    store = FileArtifactStore(tmp_path)
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir, max_batch=2))
    assert pipelines.step("sam2") is pipelines.step("sam2")
    sources, mattes = [], []
    for shift in range(3):
        state = _emoji(48, 64)
        assert state.alpha is not None
        rgb = np.clip(np.rint(np.roll(state.image, 2 * shift, axis=1) * 255), 0, 255).astype(np.uint8)
        alpha = np.clip(np.rint(np.roll(state.alpha, 2 * shift, axis=1) * 255), 0, 255).astype(np.uint8)
        opaque = np.dstack([rgb, np.full_like(alpha, 255)])
        sources.append(store.put(source_key(f"source-{shift}.png"), encode_png(opaque), "image/png"))
        mattes.append(store.put(source_key(f"matte-{shift}.png"), encode_png(np.dstack([rgb, alpha])), "image/png"))
    turns = []

    @contextlib.contextmanager
    def gpu_turn() -> Iterator[None]:
        turns.append("taken")
        yield

    request = StabiliseEmojiInput(
        mode=TemporalMode.SAM2, sources=sources, mattes=mattes, output_keys=[stable_key(i) for i in range(3)]
    )
    output = stabilise_emoji(request, store, pipelines, gpu_turn())

    assert turns == ["taken"] and len(output.mattes) == 3
    for ref in output.mattes:
        assert (ref.width, ref.height) == (64, 48)


def test_temporal_sam2_without_weights_fails_the_check_step(tmp_path: Path) -> None:
    """``describe_pipeline`` loads SAM 2 for ``temporal = sam2``, so missing weights fail the set before any work."""
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=tmp_path))
    plain = describe(DescribePipelineInput(pipeline="classical", temporal=TemporalMode.STABILISE), pipelines)
    assert plain.steps == ["floodfill", "defringe", "temporal:stabilise"]
    with pytest.raises(WeightsMissingError, match=r"popcon models fetch sam2\.1-hiera-tiny"):
        describe(DescribePipelineInput(pipeline="classical", temporal=TemporalMode.SAM2), pipelines)
