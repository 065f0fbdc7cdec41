"""Where torch engines run and in which precision: the setting, its default per device, and each engine built
through its own factory in bf16 on the CPU (autocast runs there too; the CUDA paths are in test_cuda.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from gpu_activity_worker.device import autocast, torch_precision
from gpu_activity_worker.engines import birefnet, vitmatte
from gpu_activity_worker.engines.base import MatteState, StepContext
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.vocabulary import MattingError
from testkit.model_folders import birefnet_folder, vitmatte_folder
from testkit.weights import unpinned


def test_auto_is_fp16_on_cuda_and_fp32_on_the_cpu_and_a_setting_wins() -> None:
    assert (torch_precision("cuda"), torch_precision("cpu")) == ("fp16", "fp32")
    assert torch_precision("cpu", "bf16") == "bf16" and torch_precision("cpu", "fp16") == "fp16"
    assert torch_precision("cuda", "fp32") == "fp32"


def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(MattingError, match="POPCON_MATTING_PRECISION=bf16 but this GPU has no bf16"):
        torch_precision("cuda", "bf16")


def test_the_setting_reaches_the_step_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_MATTING_PRECISION", "bf16")
    assert GpuWorkerSettings(_env_file=None).step_context().precision == "bf16"
    monkeypatch.setenv("POPCON_MATTING_PRECISION", "fp8")
    with pytest.raises(ValueError, match="matting_precision"):
        GpuWorkerSettings(_env_file=None)


@pytest.mark.parametrize(("precision", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_autocast_computes_in_the_precision_and_fp32_without_it(precision: str, dtype: torch.dtype) -> None:
    layer = torch.nn.Linear(4, 4)
    with autocast("cpu", precision):
        assert layer(torch.ones(1, 4)).dtype == dtype
    with autocast("cpu", "fp32"):
        assert layer(torch.ones(1, 4)).dtype == torch.float32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("models")
    vitmatte_folder(root, "toy", scale=0.5)
    birefnet_folder(root)
    with unpinned("vitmatte"), unpinned("birefnet"):
        yield root


def _disc_state(size: int = 48) -> MatteState:
    yy, xx = np.indices((size, size))
    alpha = np.clip(size / 3 + 0.5 - np.hypot(yy - size / 2, xx - size / 2), 0, 1).astype(np.float32)
    image = np.where(alpha[..., None] > 0.5, (0.9, 0.4, 0.1), (1.0, 1.0, 1.0)).astype(np.float32)
    return MatteState(image=image, alpha=alpha)


@pytest.mark.parametrize("engine", [vitmatte, birefnet])
def test_each_engine_built_in_bf16_computes_in_it_and_stays_close_to_fp32(model_dir: Path, engine: ModuleType) -> None:
    factory = engine.create_step
    half = factory(None, StepContext(device="cpu", model_dir=model_dir, precision="bf16"))
    full = factory(None, StepContext(device="cpu", model_dir=model_dir))
    state = _disc_state()

    [with_half], [with_full] = half.apply_batch([state]), full.apply_batch([state])

    assert (half.precision, full.precision) == ("bf16", "fp32")
    assert with_half.alpha is not None and with_full.alpha is not None
    assert with_half.alpha.dtype == np.float32 and np.isfinite(with_half.alpha).all()
    assert np.abs(with_half.alpha - with_full.alpha).max() < 0.1
