"""Settings of every popcon process, from the environment (``POPCON_*``) or a ``.env`` file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_DIR = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """One flat settings object; each process reads the part it needs."""

    model_config = SettingsConfigDict(env_prefix="POPCON_", env_file=".env", extra="ignore")

    # Temporal
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    temporal_ui_url: str = Field(default="http://localhost:8233", description="Base URL of the Web UI, for links.")

    # Embedded dev server (make dev / popcon demo)
    data_dir: Path = PROJECT_DIR / ".popcon"
    dev_server_port: int = 7233
    dev_server_ui_port: int = 8233

    # Artifacts
    artifact_root: str = Field(
        default="", description="file:///path or s3://bucket/prefix; empty = <data_dir>/artifacts."
    )
    s3_endpoint_url: str | None = Field(default=None, description="Any S3-compatible service; None = AWS.")
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_region: str | None = None

    # Workers
    orchestration_activity_concurrency: int = Field(default=8, ge=1)
    gpu_concurrency: int = Field(default=3, ge=1, description="Frames one GPU worker mattes at once.")
    gpu_prefetch: int | None = Field(
        default=None, ge=0, description="Frames a GPU worker takes ahead while its GPU is full; None = gpu_concurrency."
    )
    matting_device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto = CUDA when present.")
    matting_max_batch: int = Field(default=1, ge=1, le=64, description="Micro-batch size on the GPU; 1 = off.")
    matting_batch_wait_ms: float = Field(default=5.0, ge=0, le=1000, description="Longest wait to fill a batch.")
    model_dir: Path = Field(default=PROJECT_DIR / ".popcon" / "models", description="Offline model weights folder.")
    metrics_bind: str = Field(default="", description="host:port for Prometheus /metrics; empty = off.")
    log_level: str = "INFO"

    # RunPod Serverless: the dispatcher on the GPU queue, and the handler on the endpoint's workers
    runpod_api_key: SecretStr | None = None
    runpod_endpoint_id: str = ""
    runpod_base_url: str = "https://api.runpod.ai/v2"
    runpod_poll_interval_s: float = Field(default=0.5, gt=0, description="Job status poll interval.")
    runpod_execution_timeout_ms: int = Field(default=120_000, ge=5_000, le=7 * 86_400_000)
    runpod_ttl_ms: int = Field(
        default=1_200_000, ge=10_000, le=7 * 86_400_000, description="Job lifespan from submission, queue included."
    )
    runpod_workers: int = Field(default=3, ge=1, description="The endpoint's max workers.")
    runpod_handler_concurrency: int = Field(default=1, ge=1, le=64, description="Jobs one endpoint worker runs.")
    runpod_inline_max_bytes: int = Field(
        default=4_000_000, ge=1, le=9_000_000, description="Largest base64 image inside a job (RunPod /run: 10 MB)."
    )
    runpod_preload_pipeline: str = Field(default="classical", description="Built when an endpoint worker starts.")

    # RunPod provisioning (`popcon runpod deploy`): the endpoint's template, GPUs and scaling (max = runpod_workers)
    runpod_rest_url: str = Field(default="https://api.runpod.io/v2", description="RunPod REST API v2 (management).")
    runpod_image: str = Field(default="", description="The GPU image the endpoint runs (docker/gpu.Dockerfile).")
    runpod_template_name: str = "popcon-gpu"
    runpod_endpoint_name: str = "popcon-matting"
    runpod_gpu_pools: list[str] = Field(
        default=["AMPERE_24", "ADA_24"], min_length=1, description="Serverless GPU pool ids (24 GB cards by default)."
    )
    runpod_min_cuda_version: str = Field(
        default="13.0", pattern=r"^\d+\.\d+$", description="Lowest host CUDA: the image's torch wheels are CUDA 13."
    )
    runpod_min_workers: int = Field(default=0, ge=0)
    runpod_idle_timeout_s: int = Field(default=30, ge=1, le=3600)
    runpod_flashboot: bool = True
    runpod_container_disk_gb: int = Field(default=20, ge=1)
    runpod_s3_secret_name: str = Field(
        default="", description="RunPod secret holding the S3 secret key; empty = send the key itself (redacted)."
    )

    # DashScope (Alibaba Cloud Model Studio) image generation
    dashscope_api_key: SecretStr | None = None
    dashscope_base_url: str = "https://dashscope-intl.aliyuncs.com/api/v1"
    dashscope_model: str = "wan2.2-t2i-flash"
    dashscope_poll_interval_s: float = Field(default=2.0, gt=0)
    dashscope_timeout_s: float = Field(default=300.0, gt=0)

    @field_validator("gpu_prefetch", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        """``POPCON_GPU_PREFETCH=`` (empty, as compose passes an unset variable) means the default."""
        return None if value == "" else value

    def gpu_prefetch_frames(self) -> int:
        return self.gpu_concurrency if self.gpu_prefetch is None else self.gpu_prefetch

    def artifact_root_uri(self) -> str:
        return self.artifact_root or (self.data_dir / "artifacts").resolve().as_uri()
