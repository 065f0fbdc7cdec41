"""Where model engines run: CUDA when present (``auto``), else the CPU; and at which precision.

torch and onnxruntime are imported only here and only when asked, so the weight-free engines never load them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from gpu_activity_worker.vocabulary import Device, MattingError, Precision

AUTOCAST = {"fp16": "float16", "bf16": "bfloat16"}
"""The precisions a torch engine computes in through autocast, by the torch dtype's name (fp32 runs without it)."""


def torch_device(setting: Device) -> str:
    """``cuda`` or ``cpu`` for a torch engine.

    Raises:
        MattingError: ``cuda`` was asked for and torch sees no CUDA device.
    """
    import torch

    available = torch.cuda.is_available()
    if setting == "cuda" and not available:
        raise MattingError("POPCON_MATTING_DEVICE=cuda but torch sees no CUDA device")
    return "cuda" if setting != "cpu" and available else "cpu"


def torch_precision(device: str, setting: Precision = "auto") -> str:
    """The precision a torch engine computes in on ``device``: the configured one, or for ``auto`` fp16 autocast on
    CUDA (the published speed figures use it) and fp32 on the CPU (CPU half precision is slow and lossy).

    Raises:
        MattingError: bf16 was asked for on a GPU without it (before Ampere).
    """
    if setting == "auto":
        return "fp16" if device == "cuda" else "fp32"
    if setting == "bf16" and device == "cuda":
        import torch

        if not torch.cuda.is_bf16_supported():
            raise MattingError("POPCON_MATTING_PRECISION=bf16 but this GPU has no bf16 (Ampere or newer has)")
    return setting


def autocast(device: str, precision: str) -> AbstractContextManager[Any]:
    """The autocast context a forward pass of a torch engine runs in: fp16 or bf16, or none for fp32."""
    import torch

    dtype = getattr(torch, AUTOCAST.get(precision, "float16"))
    return torch.autocast(device_type=device, dtype=dtype, enabled=precision in AUTOCAST)


def onnx_providers(setting: Device) -> tuple[str, list[str]]:
    """(device, onnxruntime providers): CUDA first when onnxruntime has it, always the CPU as fallback.

    Raises:
        MattingError: ``cuda`` was asked for and onnxruntime has no CUDA provider.
    """
    import onnxruntime

    cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    if setting == "cuda" and not cuda:
        raise MattingError("POPCON_MATTING_DEVICE=cuda but onnxruntime has no CUDAExecutionProvider")
    if setting != "cpu" and cuda:
        return "cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return "cpu", ["CPUExecutionProvider"]
