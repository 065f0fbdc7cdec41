"""The BiRefNet engine, on the CPU with a tiny remote-code stand-in saved in the layout of the Hub repository."""

from __future__ import annotations

import itertools
import json
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
from gpu_activity_worker.engines.base import InvalidPipelineError, MatteState, StepContext
from gpu_activity_worker.engines.birefnet import BiRefNetStep, create_step, load_model
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.weights import WeightsMissingError
from testkit.weights import unpinned

CONFIG_SOURCE = """
from transformers import PretrainedConfig


class BiRefNetConfig(PretrainedConfig):
    model_type = "SegformerForSemanticSegmentation"

    def __init__(self, bb_pretrained=False, **kwargs):
        self.bb_pretrained = bb_pretrained
        super().__init__(**kwargs)
"""

MODEL_SOURCE = '''
import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel

from .BiRefNet_config import BiRefNetConfig


class Settings:
    """Stands in for BiRefNet's own plain Config class."""

    width = 6


class BiRefNet(PreTrainedModel):
    """BiRefNet's interface: a list of logits maps, coarse to fine, the last one at the input's resolution."""

    config_class = BiRefNetConfig

    def __init__(self, bb_pretrained=True, config=BiRefNetConfig()):
        super().__init__(config)
        width = Settings.width
        self.encoder = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.coarse = nn.Conv2d(width, 1, 1)
        self.fine = nn.Conv2d(width + 3, 1, 3, padding=1)
        {init_tail}

    def forward(self, x):
        features = torch.relu(self.encoder(x))
        upsampled = F.interpolate(features, size=x.shape[2:], mode="bilinear", align_corners=True)
        return [self.coarse(features), self.fine(torch.cat([upsampled, x], dim=1))]
'''

INIT_TAILS = {
    "post_init": "self.post_init()",
    # BiRefNet's remote code before its transformers-5 fix: no post_init().
    "skips_post_init": "pass",
    # Older copies of it (e.g. RMBG-2.0) also replace self.config with a plain settings object.
    "plain_config": "self.config = Settings()",
}

CONFIG_JSON = {
    "model_type": "SegformerForSemanticSegmentation",
    "architectures": ["BiRefNet"],
    "auto_map": {"AutoConfig": "BiRefNet_config.BiRefNetConfig", "AutoModelForImageSegmentation": "birefnet.BiRefNet"},
    "bb_pretrained": False,
}


_SERIAL = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def stand_in_weights_are_unpinned() -> Iterator[None]:
    with unpinned("birefnet"):
        yield


def make_weights(model_dir: Path, name: str, init_tail: str = "post_init") -> Path:
    """A tiny BiRefNet stand-in saved as its Hub snapshot is: remote code, config.json, fp16 model.safetensors.

    transformers names a remote-code module by its folder's name and its source's hash, and maps a config class to
    the model class first loaded with it; a serial number in the config source keeps stand-ins of the same name in
    different test folders apart, as different repositories' code is (and the module cache bounded across runs).
    """
    folder = model_dir / name
    folder.mkdir(parents=True)
    (folder / "BiRefNet_config.py").write_text(f"# stand-in {next(_SERIAL)}{CONFIG_SOURCE}")
    (folder / "birefnet.py").write_text(MODEL_SOURCE.replace("{init_tail}", INIT_TAILS[init_tail]))
    (folder / "config.json").write_text(json.dumps(CONFIG_JSON))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
    model_class = get_class_from_dynamic_module("birefnet.BiRefNet", folder, local_files_only=True)
    torch.manual_seed(0)
    state = model_class(config).state_dict()
    save_file({key: value.half().contiguous() for key, value in state.items()}, folder / "model.safetensors")
    return folder


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
    make_weights(tmp_path, "birefnet-general")
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
    make_weights(tmp_path, "birefnet-lite")
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
    folder = make_weights(tmp_path, "birefnet-general", init_tail)
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
    folder = make_weights(tmp_path, "birefnet-general", init_tail)
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
