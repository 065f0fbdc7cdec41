"""The CUDA code paths, run for real on a CUDA device: device selection, fp16 / bf16 autocast, batching on the device,
SAM2's video propagation, onnxruntime's CUDA provider and the GPU worker's slots. Without a CUDA device every test here
is skipped with that reason (never passed). ``pytest -m cuda`` on a GPU machine runs them (docs/gpu.md).

The engines load random-weight models in the published layouts (testkit/model_folders.py): their masks are arbitrary,
so the checks are shapes, ranges, finiteness, agreement between precisions and with the CPU, and that the work ran on
the device.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from PIL import Image
from temporalio.testing import ActivityEnvironment

from core.artifacts import FileArtifactStore
from gpu_activity_worker.activities import MattingActivities
from gpu_activity_worker.device import onnx_providers, torch_device, torch_precision
from gpu_activity_worker.engines import birefnet, builtin_steps, sam2, vitmatte
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.vocabulary import Precision
from testkit.model_folders import birefnet_folder, sam2_folder, vitmatte_folder
from testkit.set_keys import matte_key, source_key
from testkit.weights import unpinned
from workflows.contract import MatteSlotInput, MatteSlotOutput

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none here)"),
]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "bf16")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("models")
    sam2_folder(root, "tiny")
    vitmatte_folder(root, "small")
    birefnet_folder(root)
    with unpinned("sam2"), unpinned("vitmatte"), unpinned("birefnet"):
        yield root


def _states(count: int = 3, size: int = 256) -> list[MatteState]:
    states = []
    for index in range(count):
        yy, xx = np.indices((size, size))
        alpha = np.clip(size / 3 + 0.5 - np.hypot(yy - size / 2, xx - size / 2 - 4 * index), 0, 1)
        image = np.where(alpha[..., None] > 0.5, (0.95, 0.55, 0.15), (0.97, 0.96, 0.94))
        states.append(MatteState(image=image.astype(np.float32), alpha=alpha.astype(np.float32)))
    return states


def test_auto_selects_the_gpu_in_fp16() -> None:
    assert torch_device("auto") == "cuda" and torch_device("cuda") == "cuda"
    assert torch_precision("cuda") == "fp16"


@pytest.mark.parametrize("engine", [sam2, vitmatte, birefnet], ids=["sam2", "vitmatte", "birefnet"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_engine_runs_a_batch_on_the_gpu_in_each_precision(
    model_dir: Path, engine: ModuleType, precision: Precision
) -> None:
    step = engine.create_step(None, StepContext(device="cuda", model_dir=model_dir, precision=precision))
    on_cpu = engine.create_step(None, StepContext(device="cpu", model_dir=model_dir))
    states = _states()

    batched = step.apply_batch(states)
    alone = [step.apply(state) for state in states]
    reference = on_cpu.apply_batch(states)

    assert (step.device, step.precision) == ("cuda", precision)
    tolerance = 1e-3 if precision == "fp32" else 0.1
    for mine, one, cpu in zip(batched, alone, reference, strict=True):
        assert mine.alpha is not None and one.alpha is not None and cpu.alpha is not None
        assert mine.alpha.dtype == np.float32 and np.isfinite(mine.alpha).all()
        assert mine.alpha.min() >= 0.0 and mine.alpha.max() <= 1.0
        assert np.abs(mine.alpha - one.alpha).max() < tolerance, "a batch equals one image at a time"
        assert np.abs(mine.alpha - cpu.alpha).max() < tolerance, "the GPU agrees with the CPU"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sam2_propagates_a_mask_through_a_clip_on_the_gpu(model_dir: Path, precision: Precision) -> None:
    step = sam2.create_step("tiny", StepContext(device="cuda", model_dir=model_dir, precision=precision))
    frames = [(state.image * 255).astype(np.uint8) for state in _states(6)]
    first = _states(1)[0].alpha
    assert first is not None

    masks = sam2.propagate_masks(step, frames, first > 0.5)

    assert len(masks) == 6 and all(mask.shape == (256, 256) and mask.dtype == np.bool_ for mask in masks)


def test_onnxruntime_runs_on_the_gpu() -> None:
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has no CUDAExecutionProvider: the rembg engines would run on the CPU")
    assert onnx_providers("cuda") == ("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_the_gpu_workers_slots_matte_on_the_gpu(model_dir: Path, tmp_path: Path) -> None:
    store = FileArtifactStore(tmp_path)
    requests = []
    for slot in range(4):
        sources = []
        for candidate, state in enumerate(_states(3)):
            buffer = io.BytesIO()
            Image.fromarray((state.image * 255).astype(np.uint8)).save(buffer, format="PNG")
            sources.append(
                store.put(
                    source_key(f"c{candidate}.png", f"s{slot}"), buffer.getvalue(), "image/png", width=256, height=256
                )
            )
        requests.append(
            MatteSlotInput(
                pipeline="classical+sam2:tiny+defringe",
                candidates=sources,
                output_keys=[matte_key(c, set_id=f"s{slot}") for c in range(3)],
            )
        )
    context = StepContext(device="cuda", model_dir=model_dir, max_batch=3)
    matting = MattingActivities(store, Pipelines(builtin_steps(), context), capacity=2, prefetch=0, batch=3)

    async def matte_all() -> list[MatteSlotOutput]:
        return list(await asyncio.gather(*(ActivityEnvironment().run(matting.matte_slot, r) for r in requests)))

    try:
        outputs = asyncio.run(matte_all())
    finally:
        matting.close()

    done = [result.output for output in outputs for result in output.results if result.output is not None]
    assert len(done) == 12, outputs
    assert {output.device for output in done} == {"cpu+cuda"}
    assert matting.gate.busy_seconds() > 0
