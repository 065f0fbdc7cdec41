"""Where model engines run: CUDA when present (``auto``), else the CPU; and at which precision.

torch and onnxruntime are imported only here and only when asked, so the weight-free engines never load them.
"""

from __future__ import annotations

from gpu_activity_worker.engines.base import Device, MattingError


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


def torch_precision(device: str) -> str:
    """fp16 autocast on CUDA (the published speed figures use it), fp32 on the CPU (CPU fp16 is slow and lossy)."""
    return "fp16" if device == "cuda" else "fp32"


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
