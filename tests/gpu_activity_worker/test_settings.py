"""The GPU worker's settings from the environment: its prefetch, whose default follows its capacity."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpu_activity_worker.settings import GpuWorkerSettings


def test_prefetch_defaults_to_the_gpu_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_GPU_CONCURRENCY", "12")
    monkeypatch.delenv("POPCON_GPU_PREFETCH", raising=False)
    assert GpuWorkerSettings(_env_file=None).gpu_prefetch_frames() == 12


@pytest.mark.parametrize(("value", "frames"), [("", 3), ("0", 0), ("5", 5)])
def test_prefetch_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, frames: int) -> None:
    """Empty is what compose passes for an unset variable: it means the default."""
    monkeypatch.delenv("POPCON_GPU_CONCURRENCY", raising=False)
    monkeypatch.setenv("POPCON_GPU_PREFETCH", value)
    assert GpuWorkerSettings(_env_file=None).gpu_prefetch_frames() == frames


def test_negative_prefetch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPCON_GPU_PREFETCH", "-1")
    with pytest.raises(ValidationError, match="gpu_prefetch"):
        GpuWorkerSettings(_env_file=None)
