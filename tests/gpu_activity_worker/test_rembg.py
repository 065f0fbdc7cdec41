"""The rembg coarse step, through rembg's real session code on tiny ONNX models built here.

Each model is a 1x1 convolution and a sigmoid at the input size its session feeds (320 px for U^2-Net, 1024 px for
IS-Net and BiRefNet), saved where production reads it: ``<model_dir>/rembg-<session>/<session>.onnx``. Its output
grows as the pixel gets darker, so a dark disc on white gives a disc mask. Any download attempt fails loudly.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pooch
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines import rembg as engine
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import InvalidPipelineError, MattingError
from gpu_activity_worker.weights import CATALOGUE, UrlFile, WeightsMissingError
from testkit.weights import unpinned

DISC_COLOUR = np.array([0.2, 0.1, 0.3])


class NetworkUsed(AssertionError):
    """Raised by the patched download and socket functions."""


@pytest.fixture(scope="module", autouse=True)
def stand_in_weights_are_unpinned() -> Iterator[None]:
    with unpinned("rembg"):
        yield


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Fail any download or connection loudly (and record it); one onnxruntime thread; rembg's own homes in tmp."""
    attempts: list[str] = []

    def retrieve(url: str, *args: object, **kwargs: object) -> str:
        attempts.append(url)
        raise NetworkUsed(f"rembg tried to download {url}")

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(str(address))
        raise NetworkUsed(f"tried to connect to {address}")

    monkeypatch.setattr(pooch, "retrieve", retrieve)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # rembg.new_session sizes onnxruntime's thread pools from it
    monkeypatch.delenv("U2NET_HOME", raising=False)
    for variable in ("HOME", "REMBG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(variable, str(tmp_path / "homes" / variable.lower()))
    yield attempts
    assert attempts == []
    assert not (tmp_path / "homes").exists()


def _input_side(session: str) -> int:
    return 320 if session.startswith("u2net") else 1024


def _write_model(model_dir: Path, session: str) -> Path:
    """A darkness detector saved as ``session``'s weights, laid out like production."""
    side = _input_side(session)
    image = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, side, side])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, side, side])
    weight = numpy_helper.from_array(np.full((1, 3, 1, 1), -2.0, dtype=np.float32), "weight")
    nodes = [helper.make_node("Conv", ["input", "weight"], ["logit"]), helper.make_node("Sigmoid", ["logit"], ["mask"])]
    graph = helper.make_graph(nodes, "darkness", [image], [mask], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    folder = model_dir / engine.weights_name(session)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.onnx"
    onnx.save(model, path)
    return path


def _disc_image(height: int = 96, width: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """A dark anti-aliased disc on white: (uint8 RGB, true alpha)."""
    yy, xx = np.indices((height, width), dtype=np.float64)
    alpha = np.clip(0.5 - (np.hypot(yy - height / 2, xx - width / 2) - min(height, width) / 4), 0.0, 1.0)
    rgb = DISC_COLOUR * alpha[..., None] + (1 - alpha[..., None])
    return np.rint(rgb * 255).astype(np.uint8), alpha


def _state(rgb: np.ndarray) -> MatteState:
    return MatteState(image=rgb.astype(np.float32) / 255)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return tmp_path / "models"


def test_registered_variants_are_the_commercial_sessions() -> None:
    spec = builtin_steps().spec("rembg")

    assert spec.role is StepRole.COARSE
    assert spec.variants == engine.SESSIONS
    assert "bria-rmbg" not in engine.SESSIONS
    assert engine.DEFAULT_SESSION == "isnet-anime"
    for session in engine.SESSIONS:
        weights = CATALOGUE.get(engine.weights_name(session))
        if weights is not None:
            assert weights.engine == "rembg"
            assert isinstance(weights.source, UrlFile)
            assert weights.source.filename == f"{session}.onnx"


@pytest.mark.parametrize("session", sorted(engine.SESSIONS))
def test_each_session_loads_and_masks_the_dark_subject(model_dir: Path, session: str) -> None:
    _write_model(model_dir, session)
    rgb, truth = _disc_image(48, 80)
    state = _state(rgb)

    step = engine.create_step(session, StepContext(device="cpu", model_dir=model_dir))
    result = step.apply(state)

    assert (step.session, step.device, step.precision) == (session, "cpu", "fp32")
    assert result.alpha is not None
    assert result.alpha.shape == (48, 80)
    assert result.alpha.dtype == np.float32
    assert result.alpha.min() >= 0.0
    assert result.alpha.max() <= 1.0
    assert result.alpha[truth == 1].mean() > 0.9
    assert result.alpha[truth == 0].mean() < 0.1
    assert result.image is state.image
    assert state.alpha is None


def test_no_variant_means_isnet_anime(model_dir: Path) -> None:
    _write_model(model_dir, "isnet-anime")
    context = StepContext(device="cpu", model_dir=model_dir)

    assert engine.create_step(None, context).session == "isnet-anime"
    assert Pipelines(builtin_steps(), context).build("rembg").step_names == ["rembg"]


@pytest.mark.parametrize("variant", ["bria-rmbg", "sam", "u2net_custom", "nope"])
def test_other_sessions_are_refused_before_anything_loads(model_dir: Path, variant: str) -> None:
    with pytest.raises(InvalidPipelineError, match=f"no variant '{variant}'"):
        Pipelines(builtin_steps()).parse(f"rembg:{variant}+defringe")
    with pytest.raises(InvalidPipelineError, match=f"no variant '{variant}'"):
        Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir)).build(f"rembg:{variant}")
    with pytest.raises(InvalidPipelineError, match=f"no variant '{variant}'"):
        engine.create_step(variant, StepContext(device="cpu", model_dir=model_dir))


def test_missing_weights_name_the_fetch_command_and_download_nothing(model_dir: Path, no_network: list[str]) -> None:
    (model_dir / "rembg-isnet-anime").mkdir(parents=True)  # a folder without the model file is not enough
    (model_dir / "rembg-isnet-anime" / "isnetis.onnx").write_bytes(b"")

    with pytest.raises(WeightsMissingError, match="`popcon models fetch rembg-isnet-anime`"):
        engine.create_step(None, StepContext(device="cpu", model_dir=model_dir))
    with pytest.raises(WeightsMissingError, match="POPCON_MODEL_DIR"):
        engine.create_step("isnet-anime", StepContext(device="cpu"))

    assert sorted(path.name for path in model_dir.rglob("*")) == ["isnetis.onnx", "rembg-isnet-anime"]
    assert "U2NET_HOME" not in os.environ


def test_rembg_alone_would_download_a_missing_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    """Why the step checks the file itself: rembg's session downloads whatever it does not find."""
    import rembg

    monkeypatch.setenv("U2NET_HOME", str(tmp_path / "empty"))
    with pytest.raises(NetworkUsed):
        rembg.new_session("isnet-anime", providers=["CPUExecutionProvider"])
    assert no_network == ["https://github.com/danielgatis/rembg/releases/download/v0.0.0/isnet-anime.onnx"]
    no_network.clear()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "broken graph"])
def test_a_damaged_model_file_says_to_fetch_again(model_dir: Path, damage: str) -> None:
    path = _write_model(model_dir, "isnet-anime")
    model = onnx.load(path)
    model.graph.node[1].input[0] = "nothing"
    data = path.read_bytes()
    damaged = {
        "garbage": b"<html>not found</html>",
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "broken graph": model.SerializeToString(),
    }
    path.write_bytes(damaged[damage])

    with pytest.raises(WeightsMissingError, match="not a usable ONNX model") as caught:
        engine.create_step("isnet-anime", StepContext(device="cpu", model_dir=model_dir))
    assert "`popcon models fetch rembg-isnet-anime`" in str(caught.value)


def test_the_rembg_home_is_restored(model_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write_model(model_dir, "u2netp")
    engine.create_step("u2netp", StepContext(device="cpu", model_dir=model_dir))
    assert "U2NET_HOME" not in os.environ

    monkeypatch.setenv("U2NET_HOME", str(tmp_path / "elsewhere"))
    engine.create_step("u2netp", StepContext(device="cpu", model_dir=model_dir))
    assert os.environ["U2NET_HOME"] == str(tmp_path / "elsewhere")


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")
def test_cuda_that_falls_back_to_the_cpu_is_reported_or_refused(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime runs on the CPU when its CUDA provider cannot start; the step says so, or refuses when required."""
    _write_model(model_dir, "u2netp")
    monkeypatch.setattr(engine, "onnx_providers", lambda setting: ("cuda", ["CUDAExecutionProvider"]))

    with pytest.warns(RuntimeWarning):
        step = engine.create_step("u2netp", StepContext(device="auto", model_dir=model_dir))
    assert step.device == "cpu"
    with pytest.warns(RuntimeWarning), pytest.raises(MattingError, match="could not start CUDA"):
        engine.create_step("u2netp", StepContext(device="cuda", model_dir=model_dir))


def test_concurrent_calls_equal_single_calls(model_dir: Path) -> None:
    _write_model(model_dir, "u2net")
    step = engine.create_step("u2net", StepContext(device="cpu", model_dir=model_dir))
    states = [_state(_disc_image(*size)[0]) for size in [(64, 64), (40, 72), (80, 56)]]

    single = [step.apply(state).alpha for state in states]
    with ThreadPoolExecutor(3) as pool:
        concurrent = [state.alpha for state in pool.map(step.apply, states * 2)]

    for expected, got in zip(single * 2, concurrent, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_isnet_anime_then_defringe_cuts_out_the_disc(model_dir: Path) -> None:
    _write_model(model_dir, "isnet-anime")
    rgb, truth = _disc_image()

    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=model_dir))
    built = pipelines.build("rembg:isnet-anime+defringe")
    result = built.run(rgb)

    assert built.step_names == ["rembg:isnet-anime", "defringe"]
    assert (result.device, result.precision) == ("cpu", "fp32")
    assert result.rgba.shape == (96, 96, 4)
    assert result.rgba.dtype == np.uint8
    assert np.abs(result.alpha - truth).mean() < 0.005
    colours = result.rgba[truth == 1][:, :3] / 255
    assert np.abs(colours - DISC_COLOUR).max() < 0.01
