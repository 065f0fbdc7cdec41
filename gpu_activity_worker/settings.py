"""Settings of matting: the GPU worker, and the engines wherever they run (the RunPod handler too)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from core.settings import DEFAULT_DATA_DIR, PopconSettings
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.vocabulary import Precision


class GpuWorkerSettings(PopconSettings):
    """A GPU worker's capacity, and the device, batching and weights folder of its engines."""

    gpu_concurrency: int = Field(default=3, ge=1, description="Frames one GPU worker mattes at once.")
    gpu_prefetch: int | None = Field(
        default=None, ge=0, description="Frames a GPU worker takes ahead while its GPU is full; None = gpu_concurrency."
    )
    matting_device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto = CUDA when present.")
    matting_precision: Precision = Field(
        default="auto", description="Torch engines: auto = fp16 autocast on CUDA, fp32 on the CPU; or fp32, fp16, bf16."
    )
    matting_max_batch: int = Field(default=1, ge=1, le=64, description="Micro-batch size on the GPU; 1 = off.")
    matting_batch_wait_ms: float = Field(default=5.0, ge=0, le=1000, description="Longest wait to fill a batch.")
    model_dir: Path = Field(default=DEFAULT_DATA_DIR / "models", description="Offline model weights folder.")
    gpu_journal_dir: str | None = Field(
        default=None,
        description="Where a GPU worker journals the activities it runs, so the next one started on this machine "
        "brings a lost worker's back at once (gpu_activity_worker.recovery); unset = <data_dir>/gpu-journal, "
        "empty = off.",
    )

    @field_validator("gpu_prefetch", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        """``POPCON_GPU_PREFETCH=`` (empty, as compose passes an unset variable) means the default."""
        return None if value == "" else value

    def journal_folder(self, data_dir: Path) -> Path | None:
        """The folder of the running-activity journals (:mod:`gpu_activity_worker.recovery`); ``None`` when off.

        Args:
            data_dir: The process's data folder (``ArtifactSettings.data_dir``): unset, the journals live under it.
        """
        if self.gpu_journal_dir is None:
            return data_dir / "gpu-journal"
        return Path(self.gpu_journal_dir) if self.gpu_journal_dir else None

    def gpu_prefetch_frames(self) -> int:
        return self.gpu_concurrency if self.gpu_prefetch is None else self.gpu_prefetch

    def step_context(self, *, max_batch: int | None = None) -> StepContext:
        """The engines' device, weights folder and batching; ``max_batch`` caps the configured batch size."""
        batch = self.matting_max_batch if max_batch is None else min(self.matting_max_batch, max_batch)
        return StepContext(
            device=self.matting_device,
            model_dir=self.model_dir,
            max_batch=batch,
            max_batch_wait_ms=self.matting_batch_wait_ms,
            precision=self.matting_precision,
        )
