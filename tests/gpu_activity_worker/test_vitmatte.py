"""The ViTMatte refiner, with a tiny randomly initialised ViTMatte saved in the layout production loads from."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage

from gpu_activity_worker.engines import builtin_steps, vitmatte
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.engines.vitmatte import (
    TRIMAP_BACKGROUND,
    TRIMAP_FOREGROUND,
    TRIMAP_UNKNOWN,
    VitMatteStep,
    band_width,
    create_step,
    make_trimap,
)
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import InvalidPipelineError, UnsupportedImageError
from gpu_activity_worker.weights import WeightsMissingError
from testkit.model_folders import vitmatte_folder, vitmatte_model
from testkit.weights import unpinned


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Other test runs share the CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", autouse=True)
def stand_in_weights_are_unpinned() -> Iterator[None]:
    with unpinned("vitmatte"):
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder holding ``vitmatte-small`` as ``popcon models fetch`` lays it out (config, weights, processor)."""
    root = tmp_path_factory.mktemp("models")
    vitmatte_folder(root, "toy", scale=0.5)
    return root


@pytest.fixture(scope="module")
def step(model_dir: Path) -> VitMatteStep:
    return create_step(None, StepContext(device="cpu", model_dir=model_dir))


def _disc(shape: tuple[int, int], radius: float) -> np.ndarray:
    """A soft-edged disc alpha, centred."""
    yy, xx = np.indices(shape, dtype=np.float64)
    distance = np.hypot(yy - (shape[0] - 1) / 2, xx - (shape[1] - 1) / 2)
    return np.clip(radius + 0.5 - distance, 0.0, 1.0).astype(np.float32)


def _image(shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    """A random 8-bit image as the pipeline holds it (float32 in [0, 1])."""
    return (np.random.default_rng(seed).integers(0, 256, (*shape, 3)) / 255).astype(np.float32)


def _state(shape: tuple[int, int], seed: int = 0) -> MatteState:
    """A random image with a disc alpha across half of its short side."""
    return MatteState(image=_image(shape, seed), alpha=_disc(shape, min(shape) / 4))


def test_band_width_scales_with_the_short_side() -> None:
    assert band_width((64, 64)) == 3
    assert band_width((100, 40, 3)) == 3
    assert band_width((500, 1000)) == 10
    assert band_width((2048, 1024, 3)) == 20


def test_trimap_regions_of_a_hard_edge() -> None:
    alpha = (_disc((96, 96), 30) >= 0.5).astype(np.float32)
    trimap = make_trimap(alpha, band=4)
    inside, outside = alpha == 1, alpha == 0
    assert set(np.unique(trimap)) == {TRIMAP_BACKGROUND, TRIMAP_UNKNOWN, TRIMAP_FOREGROUND}
    np.testing.assert_array_equal(trimap == TRIMAP_FOREGROUND, ndimage.distance_transform_edt(inside) > 4)
    np.testing.assert_array_equal(trimap == TRIMAP_BACKGROUND, ndimage.distance_transform_edt(outside) > 4)
    # Along the middle row the band is 4 px on either side of each crossing of the edge.
    row = trimap[48] == TRIMAP_UNKNOWN
    assert row.sum() == 2 * 2 * 4
    # Definite regions are only ever the alpha's own side of the edge.
    assert np.all(alpha[trimap == TRIMAP_FOREGROUND] == 1)
    assert np.all(alpha[trimap == TRIMAP_BACKGROUND] == 0)


def test_trimap_in_between_alpha_is_unknown_and_the_frame_does_not_erode() -> None:
    alpha = np.zeros((64, 64), dtype=np.float32)
    alpha[32:, :] = 1.0  # a subject cut by the bottom of the frame
    alpha[10, 40] = 0.5  # a lone semi-transparent pixel in the background
    trimap = make_trimap(alpha, band=3)
    assert np.all(trimap[-1] == TRIMAP_FOREGROUND)
    assert np.all(trimap[0] == TRIMAP_BACKGROUND)
    assert trimap[10, 40] == TRIMAP_UNKNOWN
    assert trimap[10, 44] == TRIMAP_BACKGROUND
    assert np.all(trimap[29:35, :] == TRIMAP_UNKNOWN)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_trimap_of_a_uniform_alpha_has_no_band(value: float) -> None:
    trimap = make_trimap(np.full((40, 40), value, dtype=np.float32))
    assert not np.any(trimap == TRIMAP_UNKNOWN)


def test_trimap_default_band_follows_the_image_size() -> None:
    alpha = (_disc((200, 300), 60) >= 0.5).astype(np.float32)
    np.testing.assert_array_equal(make_trimap(alpha), make_trimap(alpha, band=band_width(alpha.shape)))
    assert band_width(alpha.shape) == 4


def test_processor_pads_bottom_right_to_a_multiple_of_32(step: VitMatteStep) -> None:
    """What cropping the prediction back relies on: the image sits at the top left of the padded input."""
    rgb = np.random.default_rng(1).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    trimap = make_trimap(_disc((50, 70), 15))
    processor = step._processor
    pixels = processor.preprocess(images=rgb, trimaps=trimap, return_tensors="pt", input_data_format="channels_last")
    values = pixels["pixel_values"]
    assert tuple(values.shape) == (1, 4, 64, 96)
    expected = torch.from_numpy(rgb).permute(2, 0, 1).float() / 255 * 2 - 1
    torch.testing.assert_close(values[0, :3, :50, :70], expected)
    torch.testing.assert_close(values[0, 3, :50, :70], torch.from_numpy(trimap).float() / 255)
    assert torch.all(values[0, :, 50:, :] == 0) and torch.all(values[0, :, :, 70:] == 0)


def test_refined_alpha_shape_range_and_reporting(step: VitMatteStep) -> None:
    image, alpha = _image((50, 70)), _disc((50, 70), 12)
    state = MatteState(image=image.copy(), alpha=alpha.copy())
    refined = step.apply(state)
    assert refined.alpha is not None
    assert refined.alpha.shape == (50, 70) and refined.alpha.dtype == np.float32
    assert refined.alpha.min() >= 0.0 and refined.alpha.max() <= 1.0
    assert refined.image is state.image and refined.foreground is None
    np.testing.assert_array_equal(state.image, image)
    np.testing.assert_array_equal(state.alpha, alpha)
    assert (step.device, step.precision) == ("cpu", "fp32")


def test_definite_regions_keep_the_coarse_alpha_exactly(step: VitMatteStep) -> None:
    disc = _disc((64, 80), 16)
    coarse = np.where(disc >= 0.5, 0.97, 0.02).astype(np.float32)
    coarse[disc == 0] = 0.01
    trimap = make_trimap(coarse)
    refined = step.apply(MatteState(image=_image((64, 80), seed=2), alpha=coarse)).alpha
    assert refined is not None
    definite = trimap != TRIMAP_UNKNOWN
    np.testing.assert_array_equal(refined[definite], coarse[definite])
    assert not np.allclose(refined[~definite], coarse[~definite])


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_nothing_to_refine_returns_the_state_unchanged(step: VitMatteStep, value: float) -> None:
    state = MatteState(image=np.zeros((32, 32, 3), np.float32), alpha=np.full((32, 32), value, np.float32))
    assert step.apply(state) is state


def test_needs_a_coarse_alpha(step: VitMatteStep) -> None:
    with pytest.raises(ValueError, match="coarse step"):
        step.apply(MatteState(image=np.zeros((32, 32, 3), np.float32)))


def test_batch_equals_apply_with_one_pass_per_padded_size(step: VitMatteStep) -> None:
    states = [
        _state((40, 40), seed=3),
        _state((70, 50), seed=4),
        _state((48, 60), seed=5),  # pads to 64x64 like the first
        MatteState(image=np.zeros((40, 40, 3), np.float32), alpha=np.zeros((40, 40), np.float32)),
    ]
    single = [step.apply(state) for state in states]
    batch_sizes: list[int] = []
    hook = step._model.register_forward_hook(
        lambda module, args, kwargs, output: batch_sizes.append(len(kwargs["pixel_values"])), with_kwargs=True
    )
    try:
        batched = step.apply_batch(states)
    finally:
        hook.remove()
    assert sorted(batch_sizes) == [1, 2]  # two padded sizes: two forward passes, not three
    assert batched[3] is states[3]
    for alone, together in zip(single, batched, strict=True):
        assert alone.alpha is not None and together.alpha is not None
        np.testing.assert_allclose(together.alpha, alone.alpha, atol=1e-5)


def test_concurrent_applies_equal_sequential_ones(step: VitMatteStep) -> None:
    states = [_state((48, 48), seed=seed) for seed in range(4)]
    expected = [step.apply(state).alpha for state in states]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(step.apply, states))
    for want, got in zip(expected, results, strict=True):
        assert got.alpha is not None and want is not None
        np.testing.assert_array_equal(got.alpha, want)


def test_too_large_an_image_is_unsupported(step: VitMatteStep, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vitmatte, "MAX_PIXELS", 40 * 40)
    with pytest.raises(UnsupportedImageError, match="megapixels"):
        step.apply(_state((41, 40)))


def test_base_variant_loads_a_pickled_checkpoint(model_dir: Path, tmp_path: Path, step: VitMatteStep) -> None:
    """The Hub's vitmatte-base-composition-1k ships ``pytorch_model.bin`` only (no safetensors)."""
    folder = tmp_path / "vitmatte-base"
    folder.mkdir()
    for name in ("config.json", "preprocessor_config.json"):
        (folder / name).write_bytes((model_dir / "vitmatte-small" / name).read_bytes())
    torch.save(vitmatte_model("toy", scale=0.5).state_dict(), folder / "pytorch_model.bin")
    base = create_step("base", StepContext(device="cpu", model_dir=tmp_path))
    state = _state((40, 48), seed=6)
    np.testing.assert_array_equal(base.apply(state).alpha, step.apply(state).alpha)


@pytest.mark.parametrize(("variant", "name"), [(None, "vitmatte-small"), ("base", "vitmatte-base")])
def test_missing_weights_name_the_fetch_command(tmp_path: Path, variant: str | None, name: str) -> None:
    with pytest.raises(WeightsMissingError, match=f"popcon models fetch {name}"):
        create_step(variant, StepContext(device="cpu", model_dir=tmp_path))


def test_unknown_variant_is_rejected() -> None:
    with pytest.raises(InvalidPipelineError, match="variant 'large'"):
        Pipelines(builtin_steps()).parse("floodfill+vitmatte:large")
    with pytest.raises(InvalidPipelineError, match="variant 'large'"):
        create_step("large", StepContext(device="cpu"))


def test_floodfill_vitmatte_defringe_pipeline(model_dir: Path) -> None:
    rgb = np.full((96, 96, 3), 255, dtype=np.uint8)
    rgb[_disc((96, 96), 30) >= 0.5] = (200, 60, 40)
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir))
    result = pipelines.build("floodfill+vitmatte+defringe").run(rgb)
    assert result.rgba.shape == (96, 96, 4) and result.rgba.dtype == np.uint8
    assert result.rgba[48, 48, 3] == 255 and result.rgba[0, 0, 3] == 0
    assert (result.device, result.precision) == ("cpu", "fp32")


def test_defringe_colour_keeps_the_refined_alpha(model_dir: Path) -> None:
    """`defringe` would re-estimate (and so discard) ViTMatte's edge alpha; `defringe:colour` only unmixes colours."""
    rgb = np.full((96, 96, 3), 255, dtype=np.uint8)
    rgb[_disc((96, 96), 30) >= 0.5] = (200, 60, 40)
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir))
    refined = pipelines.build("floodfill+vitmatte").run(rgb)
    unmixed = pipelines.build("floodfill+vitmatte+defringe:colour").run(rgb)
    np.testing.assert_array_equal(unmixed.alpha, refined.alpha)
