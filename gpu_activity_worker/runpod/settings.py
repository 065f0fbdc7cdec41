"""Settings of the RunPod Serverless path: the dispatcher, the endpoint's handler, and provisioning."""

from __future__ import annotations

from pydantic import Field

from core.redact import RegisteredSecret
from core.settings import PopconSettings
from workflows.contract import MAX_CANDIDATES_PER_FRAME_TOTAL


class RunPodSettings(PopconSettings):
    """The endpoint and its queue (dispatcher, handler), and what ``popcon runpod deploy`` creates."""

    runpod_api_key: RegisteredSecret | None = None
    runpod_endpoint_id: str = ""
    runpod_base_url: str = "https://api.runpod.ai/v2"
    runpod_poll_interval_s: float = Field(default=0.5, gt=0, description="Job status poll interval.")
    runpod_execution_timeout_ms: int = Field(default=120_000, ge=5_000, le=7 * 86_400_000)
    runpod_ttl_ms: int = Field(
        default=1_200_000, ge=10_000, le=7 * 86_400_000, description="Job lifespan from submission, queue included."
    )
    runpod_workers: int = Field(default=3, ge=1, description="The endpoint's max workers.")
    runpod_handler_concurrency: int = Field(
        default=3,
        ge=1,
        le=64,
        description="Jobs one endpoint worker holds, one on its GPU and the others waiting: RunPod's worker loop "
        "pauses 1 s whenever a worker holds this many, so the waiting ones should cover it ((this - 1) x frames per "
        "job x latency per frame >= 1 s). The dispatcher keeps max workers x this many jobs in flight.",
    )
    runpod_frames_per_job: int = Field(
        default=5,
        ge=1,
        le=MAX_CANDIDATES_PER_FRAME_TOTAL,
        description="Candidates of a frame slot in one job (by reference; inline jobs carry one): more pay RunPod's "
        "round trips once for several frames, fewer spread a few slots over many workers.",
    )
    runpod_inline_max_bytes: int = Field(
        default=4_000_000, ge=1, le=9_000_000, description="Largest base64 image inside a job (RunPod /run: 10 MB)."
    )
    runpod_preload_pipeline: str = Field(default="classical", description="Built when an endpoint worker starts.")

    # Provisioning (`popcon runpod deploy`): the endpoint's template, GPUs and scaling (max = runpod_workers)
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
