"""The GPU image's build check (``python -m gpu_activity_worker.check_image``), outside an image.

The CPU wheel of onnxruntime is refused, and so is a CUDA build for another CUDA major than torch's; a missing CUDA
library is named; a served pipeline must build from the baked weights and cut the smoke frame out. The rembg weights
here are tiny ONNX models made by the test (a 1x1 convolution and a sigmoid, as tests/gpu_activity_worker/test_rembg.py
makes them), laid out as ``popcon models fetch`` lays out the published ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi import build_and_package_info

from gpu_activity_worker import check_image
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.pipeline import Pipelines
from testkit.weights import unpinned


@pytest.fixture
def onnxruntime_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """This onnxruntime and torch, as the test says they were built (providers, CUDA versions)."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    yield monkeypatch


def _say(patch: pytest.MonkeyPatch, providers: list[str], cuda_version: str) -> None:
    patch.setattr(onnxruntime, "get_available_providers", lambda: providers)
    patch.setattr(build_and_package_info, "cuda_version", cuda_version, raising=False)


def test_the_cpu_build_of_onnxruntime_fails_the_check(onnxruntime_build: pytest.MonkeyPatch) -> None:
    _say(onnxruntime_build, ["CPUExecutionProvider"], "")
    problem = check_image.onnxruntime_problem()
    assert problem is not None and "has no CUDAExecutionProvider (providers: CPUExecutionProvider)" in problem
    assert "it is the CPU build; install onnxruntime-gpu (the gpu extra)" in problem


def test_a_cuda_build_for_another_cuda_than_torchs_fails_the_check(onnxruntime_build: pytest.MonkeyPatch) -> None:
    _say(onnxruntime_build, ["CUDAExecutionProvider", "CPUExecutionProvider"], "12.8")
    assert check_image.onnxruntime_problem() == (
        "onnxruntime-gpu is built for CUDA 12.8, torch for CUDA 13.0: one image needs one major"
    )
    _say(onnxruntime_build, ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], "13.0")
    assert check_image.onnxruntime_problem() is None


def test_a_cuda_library_that_does_not_load_is_named() -> None:
    [missing] = check_image.missing_libraries(["libcudart-of-no-release.so.99"])
    assert missing.startswith("libcudart-of-no-release.so.99 (") and "cannot open shared object file" in missing


def _rembg_model(model_dir: Path, session: str, *, darkness: bool) -> None:
    """A 320-px U^2-Net-shaped model: ``darkness`` grows with how dark a pixel is, else with how far from white."""
    image = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 320, 320])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 320, 320])
    weight = numpy_helper.from_array(np.full((1, 3, 1, 1), -2.0, dtype=np.float32), "weight")
    bias = numpy_helper.from_array(np.array([0.0 if darkness else 13.5], dtype=np.float32), "bias")
    nodes = [
        helper.make_node("Conv", ["input", "weight", "bias"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["mask"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "mask", [image], [mask], [weight, bias]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 10
    folder = model_dir / f"rembg-{session}"
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / f"{session}.onnx")


@pytest.fixture
def pipelines(tmp_path: Path) -> Iterator[Pipelines]:
    with unpinned("rembg"):
        yield Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=tmp_path / "models"))


def test_a_served_pipeline_must_cut_the_smoke_frame_out_with_the_baked_weights(
    pipelines: Pipelines, tmp_path: Path
) -> None:
    assert check_image.pipeline_problem(pipelines, "classical") is None

    missing = check_image.pipeline_problem(pipelines, "rembg:u2netp")
    assert missing is not None and missing.startswith("WeightsMissingError: weights 'rembg-u2netp' are not in")

    _rembg_model(tmp_path / "models", "u2netp", darkness=False)
    _rembg_model(tmp_path / "models", "u2net", darkness=True)
    assert check_image.pipeline_problem(pipelines, "rembg:u2netp") is None
    wrong = check_image.pipeline_problem(pipelines, "rembg:u2net")
    assert wrong is not None and wrong.startswith("the matte does not cut the test subject out: centre alpha")


def test_the_command_prints_each_check_and_fails_when_one_fails(
    onnxruntime_build: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    onnxruntime_build.setenv("POPCON_MODEL_DIR", str(tmp_path / "models"))
    onnxruntime_build.setattr(check_image, "missing_libraries", lambda: [])
    _say(onnxruntime_build, ["CUDAExecutionProvider", "CPUExecutionProvider"], "13.0")
    assert check_image.main(["classical"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"onnxruntime {onnxruntime.__version__} runs on CUDA: ok", "the CUDA libraries load: ok"]
    assert lines[2].startswith("pipeline classical cuts the smoke frame out (") and lines[2].endswith(" s): ok")

    _say(onnxruntime_build, ["CPUExecutionProvider"], "")
    assert check_image.main(["classical"]) == 1
    assert "runs on CUDA: FAILED: onnxruntime" in capsys.readouterr().out
