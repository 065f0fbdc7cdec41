"""``python -m gpu_activity_worker.check_image PIPELINE ...``: the GPU image's last build step, which fails the build
unless the image can run what it serves.

1. onnxruntime is the CUDA build: its providers include ``CUDAExecutionProvider`` (the CPU wheel, ``onnxruntime``, has
   none: every rembg step of a ``cuda`` endpoint would fail), built for the CUDA major torch is built for.
2. The CUDA libraries that provider loads by name are found and load (from the ``nvidia-*`` wheels, through the
   image's ``LD_LIBRARY_PATH``); the driver's ``libcuda.so.1`` is not checked: the NVIDIA container runtime mounts
   it when a container starts on a GPU host.
3. Each served pipeline builds from the baked weights (``POPCON_MODEL_DIR``; every file checked against its pinned
   sha256, nothing downloaded) and cuts the smoke frame's subject out, on the CPU: a build has no GPU.

Prints one line per check; exits 1 when any failed.
"""

from __future__ import annotations

import ctypes
import io
import sys
import time
from collections.abc import Sequence

import numpy as np
from PIL import Image

from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.smoke_frame import cut_out_problem, smoke_frame
from gpu_activity_worker.vocabulary import MattingError

CUDA_LIBRARIES = (
    "libcudart.so.13",
    "libcublas.so.13",
    "libcublasLt.so.13",
    "libcurand.so.10",
    "libcufft.so.12",
    "libnvrtc.so.13",
    "libcudnn.so.9",
)
"""What onnxruntime-gpu's CUDA provider loads by name (its ``NEEDED`` entries, and the libraries of its ``cuda`` and
``cudnn`` extras), CUDA 13 and cuDNN 9."""


def onnxruntime_problem() -> str | None:
    """Why this onnxruntime cannot run rembg on CUDA with torch's CUDA, or ``None`` when it can."""
    import onnxruntime
    import torch
    from onnxruntime.capi import build_and_package_info

    providers = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        return (
            f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider (providers: {', '.join(providers)}): "
            "it is the CPU build; install onnxruntime-gpu (the gpu extra)"
        )
    built_for = getattr(build_and_package_info, "cuda_version", "") or "unknown"
    torch_cuda = torch.version.cuda or "none"
    if built_for.split(".")[0] != torch_cuda.split(".")[0]:
        return f"onnxruntime-gpu is built for CUDA {built_for}, torch for CUDA {torch_cuda}: one image needs one major"
    return None


def missing_libraries(names: Sequence[str] = CUDA_LIBRARIES) -> list[str]:
    """The libraries of ``names`` the dynamic loader cannot load, each with its error."""
    missing = []
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError as err:
            missing.append(f"{name} ({err})")
    return missing


def pipeline_problem(pipelines: Pipelines, name: str) -> str | None:
    """Why pipeline ``name`` cannot cut the smoke frame out with the baked weights, or ``None`` when it can."""
    with Image.open(io.BytesIO(smoke_frame())) as image:
        rgb = np.asarray(image.convert("RGB"))
    try:
        result = pipelines.build(name).run(rgb)
    except MattingError as err:
        return f"{type(err).__name__}: {err}"
    return cut_out_problem(result.rgba[..., 3])


def check(names: Sequence[str]) -> list[tuple[str, str | None]]:
    """Every check: (what was checked, why it failed or ``None``)."""
    import onnxruntime

    missing = missing_libraries()
    results: list[tuple[str, str | None]] = [
        (f"onnxruntime {onnxruntime.__version__} runs on CUDA", onnxruntime_problem()),
        ("the CUDA libraries load", f"not found: {'; '.join(missing)}" if missing else None),
    ]
    pipelines = Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=GpuWorkerSettings().model_dir))
    for name in names:
        started = time.monotonic()
        problem = pipeline_problem(pipelines, name)
        results.append((f"pipeline {name} cuts the smoke frame out ({time.monotonic() - started:.1f} s)", problem))
    return results


def main(names: Sequence[str]) -> int:
    failed = False
    for what, problem in check(names):
        print(f"{what}: {'ok' if problem is None else 'FAILED: ' + problem}")
        failed = failed or problem is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
