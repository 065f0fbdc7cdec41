"""Settings of the orchestration worker and of its generators."""

from __future__ import annotations

from pydantic import Field, SecretStr

from core.settings import PopconSettings


class OrchestrationSettings(PopconSettings):
    """The orchestration worker: the workflow and the CPU activities."""

    orchestration_activity_concurrency: int = Field(default=8, ge=1)


class DashScopeSettings(PopconSettings):
    """The DashScope (Alibaba Cloud Model Studio) image generator; read only when a set uses it."""

    dashscope_api_key: SecretStr | None = None
    dashscope_base_url: str = "https://dashscope-intl.aliyuncs.com/api/v1"
    dashscope_model: str = "wan2.2-t2i-flash"
    dashscope_poll_interval_s: float = Field(default=2.0, gt=0)
    dashscope_timeout_s: float = Field(default=300.0, gt=0)
