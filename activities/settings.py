"""Settings of the orchestration worker and of its generators."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.redact import RegisteredSecret
from core.settings import PopconSettings
from workflows.contract import TemporalMode


class OrchestrationSettings(PopconSettings):
    """The orchestration worker: the workflow and the CPU activities."""

    orchestration_activity_concurrency: int = Field(default=8, ge=1)
    default_temporal: TemporalMode = Field(
        default=TemporalMode.STABILISE,
        description="The temporal mode of a set that names none: stabilise (weight-free, less flicker where the "
        "picture holds still, moving parts untouched), sam2 (every GPU worker needs the SAM 2 weights) or none.",
    )


class PaidGenerationSettings(PopconSettings):
    """The generator calls' own task queue (``emoji-paid``), served by the orchestration worker process: how fast
    and how many at once (see docs/dashscope.md, "Paid calls").

    The defaults follow DashScope's documented limits of a Wan model (per model, per Alibaba Cloud account): task
    submission 2 requests per second, 2 tasks processed at once, the others queued by the service.
    """

    paid_calls_per_second: float = Field(
        default=2.0,
        gt=0,
        description="Generator calls started per second on the paid queue across the whole deployment: Temporal's "
        "server enforces it (the worker's max_task_queue_activities_per_second). A retried call counts again.",
    )
    paid_concurrency: int = Field(
        default=4,
        ge=1,
        description="Generator calls one worker process runs at once (its max_concurrent_activities on the paid "
        "queue); a call holds its slot while its task runs. N processes run N times this.",
    )


class DashScopeSettings(PopconSettings):
    """The DashScope (Alibaba Cloud Model Studio) generator; read only when a set uses it (see docs/dashscope.md).

    The API key, base URL and models must belong to the same region: the default is Singapore (``dashscope-intl``).
    """

    dashscope_api_key: RegisteredSecret | None = Field(
        default=None, description="Never logged; missing = refused at use."
    )
    dashscope_base_url: str = "https://dashscope-intl.aliyuncs.com/api/v1"
    dashscope_character_model: str = Field(default="wan2.2-t2i-flash", description="Text-to-image: the character.")
    dashscope_start_frame_model: str = Field(
        default="wan2.5-i2i-preview", description="Image edit: the character in an action's pose."
    )
    dashscope_edit_frame_model: str = Field(
        default="wan2.5-i2i-preview", description="Image edit: one extracted frame with a custom prompt."
    )
    dashscope_clip_model: str = Field(default="wan2.6-i2v-flash", description="Image-to-video: the clip.")
    dashscope_clip_resolution: Literal["480P", "720P", "1080P"] = "720P"
    dashscope_poll_interval_s: float = Field(default=2.0, gt=0, description="First pause between two task polls.")
    dashscope_poll_max_interval_s: float = Field(
        default=15.0, gt=0, description="Longest pause between polls (the activity heartbeats every second meanwhile)."
    )
    dashscope_image_timeout_s: float = Field(default=300.0, gt=0, description="How long one image call waits.")
    dashscope_clip_timeout_s: float = Field(default=900.0, gt=0, description="How long one clip call waits.")
    dashscope_throttle_wait_s: float = Field(
        default=180.0,
        ge=0,
        description="How long one call waits in all, backing off, while the service answers it 429 / Throttling "
        "before it fails as throttled (then the workflow's retry policy waits); with the task timeouts it stays "
        "below the activities' start-to-close timeouts (10 min images, 30 min clips).",
    )
