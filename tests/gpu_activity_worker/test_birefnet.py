"""The BiRefNet engine, on the CPU with a tiny remote-code stand-in saved in the layout of the Hub repository."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForImageSegmentation
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from gpu_activity_worker.engines import birefnet, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.engines.birefnet import BiRefNetStep, create_step, load_model
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import InvalidPipelineError
from gpu_activity_worker.weights import CATALOGUE, WeightsMissingError
from testkit.model_folders import birefnet_folder
from testkit.weights import unpinned


@pytest.fixture(scope="module", autouse=True)
def stand_in_weights_are_unpinned() -> Iterator[None]:
    with unpinned("birefnet"):
        yield


def disc(height: int = 48, width: int = 40) -> np.ndarray:
    """float32 HxWx3: a red disc with a dark outline on white."""
    yy, xx = np.indices((height, width))
    radius = np.hypot(yy - height / 2, xx - width / 2)
    image = np.ones((height, width, 3), dtype=np.float32)
    image[radius < min(height, width) / 3] = (0.9, 0.1, 0.1)
    image[np.abs(radius - min(height, width) / 3) < 1.5] = (0.1, 0.05, 0.05)
    return image


def assert_holds_the_saved_weights(model: torch.nn.Module, folder: Path) -> None:
    """``model`` is in eval mode and holds exactly the folder's (fp16) weights, in fp32."""
    assert not model.training
    saved = load_file(folder / "model.safetensors")
    loaded = model.state_dict()
    assert loaded.keys() == saved.keys()
    for key, value in saved.items():
        assert loaded[key].dtype == torch.float32
        assert torch.equal(loaded[key].cpu(), value.float())


def alpha_of(state: MatteState) -> np.ndarray:
    """The alpha a coarse step set."""
    assert state.alpha is not None
    return state.alpha


@pytest.fixture(autouse=True)
def small_and_single_threaded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 32 px model input and one torch thread: the CPU is shared with other test runs."""
    monkeypatch.setattr(BiRefNetStep, "input_size", 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model folder holding a stand-in for birefnet-general."""
    birefnet_folder(tmp_path, "birefnet-general")
    return tmp_path


def test_loads_offline_and_mattes_on_the_cpu(model_dir: Path) -> None:
    step = create_step(None, StepContext(device="cpu", model_dir=model_dir))
    image = disc()
    state = MatteState(image=image.copy())

    result = step.apply(state)

    assert (step.device, step.precision) == ("cpu", "fp32")
    assert_holds_the_saved_weights(step._model, model_dir / "birefnet-general")
    assert result.alpha is not None
    assert result.alpha.shape == (48, 40) and result.alpha.dtype == np.float32
    assert 0.0 <= result.alpha.min() < result.alpha.max() <= 1.0
    assert state.alpha is None and np.array_equal(state.image, image)  # the input state is untouched


def test_alpha_is_the_sigmoid_of_the_last_output_resized_back(model_dir: Path) -> None:
    step = create_step(None, StepContext(device="cpu", model_dir=model_dir))
    image = disc(32, 32)  # already the model size: no resizing either way

    alpha = alpha_of(step.apply(MatteState(image=image)))

    mean = torch.tensor(birefnet.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(birefnet.IMAGENET_STD).view(1, 3, 1, 1)
    x = (torch.from_numpy(image).permute(2, 0, 1).unsqueeze(0) - mean) / std
    with torch.inference_mode():
        expected = step._model(x)[-1].sigmoid()[0, 0].numpy()
    np.testing.assert_allclose(alpha, expected, atol=1e-6)


def test_each_variant_loads_its_own_weights(tmp_path: Path) -> None:
    birefnet_folder(tmp_path, "birefnet-lite")
    context = StepContext(device="cpu", model_dir=tmp_path)

    step = create_step("lite", context)

    assert step.apply(MatteState(image=disc())).alpha is not None
    with pytest.raises(WeightsMissingError, match=r"popcon models fetch birefnet-general"):
        create_step(None, context)
    with pytest.raises(InvalidPipelineError, match="no variant 'huge'"):
        create_step("huge", context)
    with pytest.raises(InvalidPipelineError, match="no variant 'huge'"):
        Pipelines(builtin_steps()).parse("birefnet:huge")
    parsed = Pipelines(builtin_steps()).parse("birefnet:lite+defringe")
    assert [str(ref) for ref in parsed] == ["birefnet:lite", "defringe"]


def test_missing_weights_name_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissingError, match=r"popcon models fetch birefnet-general"):
        create_step("general", StepContext(device="cpu", model_dir=tmp_path))


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        ("config.json is not JSON", "not a valid JSON file"),
        ("config.json has no auto_map", "model_type"),
        ("the model code is missing", "birefnet.py"),
        ("the weights file is missing", "model.safetensors"),
    ],
)
def test_a_broken_folder_is_a_clear_error(model_dir: Path, breakage: str, reason: str) -> None:
    folder = model_dir / "birefnet-general"
    if breakage == "config.json is not JSON":
        (folder / "config.json").write_text("{not json")
    elif breakage == "config.json has no auto_map":
        (folder / "config.json").write_text(json.dumps({"architectures": ["BiRefNet"]}))
    elif breakage == "the model code is missing":
        (folder / "birefnet.py").unlink()
    else:
        (folder / "model.safetensors").unlink()

    with pytest.raises(WeightsMissingError, match="cannot be loaded") as caught:
        create_step(None, StepContext(device="cpu", model_dir=model_dir))

    assert reason in str(caught.value)
    assert "popcon models fetch birefnet-general" in str(caught.value)


@pytest.mark.parametrize("init_tail", ["skips_post_init", "plain_config"])
def test_remote_code_that_transformers_5_cannot_load_is_built_directly(tmp_path: Path, init_tail: str) -> None:
    folder = birefnet_folder(tmp_path, "birefnet-general", init_tail)
    with pytest.raises(AttributeError):  # the stand-in really reproduces the incompatibility
        AutoModelForImageSegmentation.from_pretrained(folder, trust_remote_code=True, local_files_only=True)

    model = load_model(folder, "birefnet-general")

    assert_holds_the_saved_weights(model, folder)


@pytest.mark.parametrize("init_tail", ["post_init", "plain_config"])
@pytest.mark.parametrize(
    ("breakage", "reason"),
    [("a tensor is missing", r"1 missing .*fine\.weight"), ("a tensor has the wrong shape", r"size mismatch")],
)
def test_weights_that_do_not_fit_the_code_are_refused(
    tmp_path: Path, init_tail: str, breakage: str, reason: str
) -> None:
    folder = birefnet_folder(tmp_path, "birefnet-general", init_tail)
    state = load_file(folder / "model.safetensors")
    if breakage == "a tensor is missing":
        del state["fine.weight"]
    else:
        state["fine.weight"] = torch.zeros(1, 2, 3, 3, dtype=torch.float16)
    save_file(state, folder / "model.safetensors")

    with pytest.raises(WeightsMissingError, match=rf"(?s)do not fit the model code: .*{reason}"):
        load_model(folder, "birefnet-general")


def test_a_batch_equals_one_image_at_a_time(model_dir: Path) -> None:
    step = create_step(None, StepContext(device="cpu", model_dir=model_dir))
    states = [MatteState(image=disc(48, 40)), MatteState(image=disc(20, 36)), MatteState(image=disc(64, 64))]

    batched = step.apply_batch(states)
    alone = [step.apply(state) for state in states]

    assert step.apply_batch([]) == []
    for one, other in zip(batched, alone, strict=True):
        assert one.alpha is not None and other.alpha is not None
        assert one.alpha.shape == other.alpha.shape
        assert np.abs(one.alpha - other.alpha).max() <= 1e-5
        assert np.array_equal(np.rint(one.alpha * 255), np.rint(other.alpha * 255))


def test_concurrent_calls_get_their_own_results(model_dir: Path) -> None:
    step = create_step(None, StepContext(device="cpu", model_dir=model_dir))
    images = [disc(24 + 8 * k, 40) for k in range(6)]
    expected = [alpha_of(step.apply(MatteState(image=image))) for image in images]

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda image: alpha_of(step.apply(MatteState(image=image))), images))

    for result, alpha in zip(results, expected, strict=True):
        np.testing.assert_allclose(result, alpha, atol=1e-6)


def test_birefnet_then_defringe_through_the_pipeline(model_dir: Path) -> None:
    rgb = np.rint(disc(64, 56) * 255).astype(np.uint8)

    context = StepContext(device="cpu", model_dir=model_dir)
    built = Pipelines(builtin_steps(), context).build("birefnet+defringe")
    result = built.run(rgb)

    assert built.step_names == ["birefnet", "defringe"]
    assert result.rgba.shape == (64, 56, 4) and result.rgba.dtype == np.uint8
    assert (result.device, result.precision) == ("cpu", "fp32")


# --- toonout --------------------------------------------------------------------------------------------------------


class NotATensor:
    """A pickled object a weights-only load must refuse."""


def make_toonout(model_dir: Path, prefix: str = "module._orig_mod.") -> Path:
    """A stand-in ToonOut checkpoint as published: a raw fp32 state dict of the stand-in model, keys prefixed as DDP +
    torch.compile saved them, with no code of its own (it loads into birefnet-general's)."""
    code = model_dir / "birefnet-general"
    if not code.exists():
        birefnet_folder(model_dir, "birefnet-general")
    config = AutoConfig.from_pretrained(code, trust_remote_code=True, local_files_only=True)
    model_class = get_class_from_dynamic_module("birefnet.BiRefNet", code, local_files_only=True)
    torch.manual_seed(1)  # other weights than birefnet-general's
    state = {f"{prefix}{key}": value for key, value in model_class(config).state_dict().items()}
    folder = model_dir / "birefnet-toonout"
    folder.mkdir()
    torch.save(state, folder / birefnet.TOONOUT_FILE)
    return folder / birefnet.TOONOUT_FILE


@pytest.mark.parametrize("prefix", ["module._orig_mod.", "module.", ""])
def test_toonout_loads_its_checkpoint_into_the_general_code(tmp_path: Path, prefix: str) -> None:
    checkpoint = make_toonout(tmp_path, prefix)

    step = create_step("toonout", StepContext(device="cpu", model_dir=tmp_path))

    assert not step._model.training and step.on_grey
    saved = {key.removeprefix(prefix): value for key, value in torch.load(checkpoint, weights_only=True).items()}
    loaded = step._model.state_dict()
    assert loaded.keys() == saved.keys()
    for key, value in saved.items():
        assert loaded[key].dtype == torch.float32 and torch.equal(loaded[key], value)
    general = load_file(tmp_path / "birefnet-general" / "model.safetensors")
    assert not torch.equal(loaded["fine.weight"], general["fine.weight"].float())  # ToonOut's, not general's
    assert step.apply(MatteState(image=disc())).alpha is not None


def test_every_variant_has_a_birefnet_catalogue_entry() -> None:
    assert all(CATALOGUE[name].engine == "birefnet" for name in birefnet.WEIGHTS.values())
    assert CATALOGUE[birefnet.TOONOUT_CODE].engine == "birefnet"


def model_inputs(step: BiRefNetStep) -> list[torch.Tensor]:
    """Every batch the step's model receives from now on."""
    seen: list[torch.Tensor] = []
    step._model.register_forward_pre_hook(lambda _module, args: seen.append(args[0].detach().clone()))
    return seen


def test_toonout_gives_the_model_the_frame_on_grey(tmp_path: Path) -> None:
    make_toonout(tmp_path)
    context = StepContext(device="cpu", model_dir=tmp_path)
    toonout, general = create_step("toonout", context), create_step("general", context)
    toonout_inputs, general_inputs = model_inputs(toonout), model_inputs(general)
    image = disc(32, 32)  # the model size: no resizing

    toonout.apply(MatteState(image=image))
    general.apply(MatteState(image=image))

    mean = torch.tensor(birefnet.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(birefnet.IMAGENET_STD).view(1, 3, 1, 1)
    grey = birefnet.onto_grey(image)
    seen = toonout_inputs[0] * std + mean  # back to pixels
    torch.testing.assert_close(seen, torch.from_numpy(grey).permute(2, 0, 1).unsqueeze(0), atol=1e-5, rtol=0)
    np.testing.assert_allclose(seen[0, :, 0, 0].numpy(), [128 / 255] * 3, atol=1e-5)  # the corner: #808080
    np.testing.assert_allclose(seen[0, :, 16, 16].numpy(), [0.9, 0.1, 0.1], atol=1e-5)  # the red disc
    np.testing.assert_allclose((general_inputs[0] * std + mean)[0, :, 0, 0].numpy(), [1.0] * 3, atol=1e-5)


def test_onto_grey_replaces_only_the_white_background() -> None:
    image = np.ones((40, 40, 3), dtype=np.float32)
    image[8:32, 8:32] = (0.1, 0.05, 0.05)  # a dark outline ...
    image[12:28, 12:28] = 1.0  # ... enclosing white (an eye)
    image[16:24, 16:24] = (0.2, 0.6, 0.9)  # a blue pupil
    image[8:32, 7] = (0.55, 0.525, 0.525)  # the outline's anti-aliased edge: half outline, half white

    grey = birefnet.onto_grey(image)

    assert grey.dtype == np.float32 and grey.shape == image.shape
    assert np.array_equal(np.rint(grey[0, 0] * 255), [128, 128, 128])  # background: #808080
    np.testing.assert_allclose(grey[0, 0], [128 / 255] * 3, atol=1e-6)
    np.testing.assert_array_equal(grey[10, 10], image[10, 10])  # the outline
    np.testing.assert_array_equal(grey[14, 14], image[14, 14])  # the enclosed white stays white
    np.testing.assert_array_equal(grey[20, 20], image[20, 20])
    # The edge, half outline over white, becomes half outline over grey (unmixed at its least opacity, 0.475).
    np.testing.assert_allclose(grey[20, 7], image[20, 7] - 0.525 * (1 - 128 / 255), atol=1e-6)


def test_toonout_needs_the_general_code_and_says_so(tmp_path: Path) -> None:
    make_toonout(tmp_path)
    shutil.rmtree(tmp_path / "birefnet-general")

    with pytest.raises(WeightsMissingError, match=r"popcon models fetch birefnet-general"):
        create_step("toonout", StepContext(device="cpu", model_dir=tmp_path))


def test_toonout_without_its_checkpoint_names_the_fetch_command(tmp_path: Path) -> None:
    birefnet_folder(tmp_path, "birefnet-general")
    with pytest.raises(WeightsMissingError, match=r"popcon models fetch birefnet-toonout"):
        create_step("toonout", StepContext(device="cpu", model_dir=tmp_path))


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        ("truncated", "not a loadable PyTorch checkpoint"),
        ("pickled code", "not a loadable PyTorch checkpoint"),
        ("not tensors", "not a state dict of tensors"),
        ("a tensor is missing", r"1 missing .*fine\.weight"),
        ("a tensor has the wrong shape", "size mismatch"),
    ],
)
def test_a_broken_toonout_checkpoint_is_a_clear_error(tmp_path: Path, breakage: str, reason: str) -> None:
    checkpoint = make_toonout(tmp_path)
    state = torch.load(checkpoint, weights_only=True)
    if breakage == "truncated":
        checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    elif breakage == "pickled code":
        torch.save({**state, "extra": NotATensor()}, checkpoint)
    elif breakage == "not tensors":
        torch.save({"epoch": 245}, checkpoint)
    elif breakage == "a tensor is missing":
        del state["module._orig_mod.fine.weight"]
        torch.save(state, checkpoint)
    else:
        state["module._orig_mod.fine.weight"] = torch.zeros(1, 2, 3, 3)
        torch.save(state, checkpoint)

    with pytest.raises(WeightsMissingError, match=rf"(?s)cannot be loaded .*{reason}") as caught:
        create_step("toonout", StepContext(device="cpu", model_dir=tmp_path))

    assert "popcon models fetch birefnet-toonout birefnet-general" in str(caught.value)
