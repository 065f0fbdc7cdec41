"""Settings of the RunPod Serverless path: the dispatcher, the endpoint's handler, and provisioning."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from core.redact import RegisteredSecret
from core.settings import PopconSettings
from gpu_activity_worker.runpod.api import RESULT_RETENTION, ApiRetry
from gpu_activity_worker.runpod.disk import IMAGE_SIZE_GB, container_disk_needed_gb
from workflows.contract import MAX_CANDIDATES_PER_FRAME_TOTAL


class RunPodSettings(PopconSettings):
    """The endpoint and its queue (dispatcher, handler), and what ``popcon runpod deploy`` creates."""

    runpod_api_key: RegisteredSecret | None = None
    runpod_endpoint_id: str = ""
    runpod_base_url: str = "https://api.runpod.ai/v2"
    runpod_poll_interval_s: float = Field(default=0.5, gt=0, description="Job status poll interval.")
    runpod_execution_timeout_ms: int = Field(default=120_000, ge=5_000, le=7 * 86_400_000)
    runpod_ttl_ms: int = Field(
        default=3_600_000,
        ge=10_000,
        le=7 * 86_400_000,
        description="Job lifespan from submission, queue included: at least the execution timeout plus RunPod's 30 min "
        "result retention, so that an activity's retry finds a finished job's result instead of paying for a new job.",
    )
    runpod_api_attempts: int = Field(
        default=ApiRetry.attempts,
        ge=1,
        le=10,
        description="Tries of one call to the queue API: network errors, 429 and 5xx are tried again in place, with "
        "back-off or RunPod's Retry-After, before the activity fails for a retry.",
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
    runpod_pipelines: list[str] = Field(
        default=["classical", "rembg:isnet-anime"],
        min_length=1,
        description="The matting pipelines the image bakes (docker/gpu.Dockerfile PIPELINES): `popcon runpod smoke` "
        "sends one job to each.",
    )

    # Provisioning (`popcon runpod deploy`): the endpoint's template, GPUs and scaling (max = runpod_workers)
    runpod_rest_url: str = Field(default="https://api.runpod.io/v2", description="RunPod REST API v2 (management).")
    runpod_image: str = Field(default="", description="The GPU image the endpoint runs (docker/gpu.Dockerfile).")
    runpod_template_name: str = "popcon-gpu"
    runpod_endpoint_name: str = "popcon-matting"
    runpod_gpu_pools: list[str] = Field(
        default=["AMPERE_24", "ADA_24"],
        min_length=1,
        description="Serverless GPU pool ids, the catalogue's `pool` (24 GB cards by default: AMPERE_24 is L4, "
        "A5000 and 3090; ADA_24 is 4090).",
    )
    runpod_gpu_excluded_types: list[str] | None = Field(
        default=None,
        description="GPU type ids taken out of the pools, the catalogue's `id` (e.g. 'NVIDIA L4'): pools "
        '["AMPERE_24"] without "NVIDIA L4" and "NVIDIA GeForce RTX 3090" pin the RTX A5000. Unset = keep the '
        "exclusions the endpoint has (e.g. set in the console); [] = none.",
    )
    runpod_min_cuda_version: str = Field(
        default="13.0", pattern=r"^\d+\.\d+$", description="Lowest host CUDA: the image's torch wheels are CUDA 13."
    )
    runpod_min_workers: int = Field(default=0, ge=0)
    runpod_idle_timeout_s: int = Field(default=30, ge=1, le=3600)
    runpod_flashboot: bool = True
    runpod_image_size_gb: float = Field(
        default=IMAGE_SIZE_GB,
        gt=0,
        description="The GPU image unpacked (python -m benchmarks.image_packages --installed, plus base and weights).",
    )
    runpod_container_disk_gb: int | None = Field(
        default=None,
        ge=1,
        description="The workers' container disk: holds the image, room to work, and the 10% RunPod's SDK wants free. "
        "Unset = the least that does, from runpod_image_size_gb.",
    )

    runpod_s3_secret_name: str = Field(
        default="", description="RunPod secret holding the S3 secret key; empty = send the key itself (redacted)."
    )

    def container_disk_gb(self) -> int:
        """The container disk to deploy with: the setting, or the least the image needs."""
        needed = container_disk_needed_gb(self.runpod_image_size_gb)
        return needed if self.runpod_container_disk_gb is None else self.runpod_container_disk_gb

    @model_validator(mode="after")
    def _jobs_outlive_their_results(self) -> Self:
        needed_ms = self.runpod_execution_timeout_ms + int(RESULT_RETENTION.total_seconds() * 1000)
        if self.runpod_ttl_ms < needed_ms:
            raise ValueError(
                f"POPCON_RUNPOD_TTL_MS is {self.runpod_ttl_ms} ms; it must be at least the execution timeout plus "
                f"RunPod's 30 min result retention, {needed_ms} ms: RunPod deletes a job at its ttl, and a retry that "
                "comes after that submits the work again, and pays for it again"
            )
        return self
