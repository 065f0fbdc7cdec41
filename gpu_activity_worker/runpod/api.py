"""A small client for RunPod's hosted queue API: submit, poll, cancel jobs of one endpoint.

It speaks the hosted API with httpx directly: the SDK's ``AsyncioEndpoint.run`` cannot send an execution policy, and
its ``Job.output()`` hides a FAILED job's error.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from core.redact import redact, register_secret


class JobStatus(StrEnum):
    """A RunPod job's state."""

    IN_QUEUE = "IN_QUEUE"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    @property
    def finished(self) -> bool:
        return self not in (JobStatus.IN_QUEUE, JobStatus.IN_PROGRESS)


class JobReport(BaseModel):
    """What ``/run``, ``/status`` and ``/cancel`` say about a job (RunPod adds fields; they are ignored)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    status: JobStatus
    delay_ms: float | None = Field(default=None, alias="delayTime", description="Time in the queue.")
    execution_ms: float | None = Field(default=None, alias="executionTime", description="Time on a worker.")
    output: Any = None
    error: Any = None


class RunPodApiError(Exception):
    """A request to RunPod failed: ``status`` is the HTTP status, None for a network error."""

    def __init__(self, message: str, *, status: int | None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        """Network errors, throttling (429) and RunPod's own errors (5xx) pass; other refusals do not."""
        return self.status is None or self.status == 429 or self.status >= 500


class JobNotFoundError(RunPodApiError):
    """RunPod does not know the job (never submitted here, or its result expired)."""


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class RunPodApi:
    """The queue operations of one endpoint: ``{base_url}/{endpoint_id}/run | status | cancel | health``.

    Args:
        base_url: e.g. ``https://api.runpod.ai/v2``.
        endpoint_id: The endpoint's id.
        api_key: Sent as a Bearer token; never logged or put in an error message (it is registered with
            :func:`core.redact.register_secret`, and RunPod's answers are redacted before they become one).
        timeout_s: Per-request timeout.
    """

    def __init__(self, base_url: str, endpoint_id: str, api_key: SecretStr, *, timeout_s: float = 30.0) -> None:
        register_secret(api_key)
        self._http = httpx.AsyncClient(
            base_url=f"{base_url.rstrip('/')}/{endpoint_id}",
            headers={"Authorization": f"Bearer {api_key.get_secret_value()}"},
            timeout=timeout_s,
        )

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, names_job: bool = False
    ) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.TransportError as err:
            raise RunPodApiError(f"RunPod {method} {path}: {type(err).__name__}: {err}", status=None) from err
        if response.is_success:
            payload: dict[str, Any] = response.json()
            return payload
        message = f"RunPod {method} {path} answered {response.status_code}: {redact(response.text)[:300]}"
        error = JobNotFoundError if response.status_code == 404 and names_job else RunPodApiError
        raise error(message, status=response.status_code, retry_after_s=_retry_after(response))

    async def run(self, job_input: dict[str, Any], *, execution_timeout_ms: int, ttl_ms: int) -> JobReport:
        """Submit a job (``POST /run``) with its execution policy; RunPod answers at once with its id."""
        policy = {"executionTimeout": execution_timeout_ms, "ttl": ttl_ms}
        return JobReport.model_validate(await self._call("POST", "/run", {"input": job_input, "policy": policy}))

    async def status(self, job_id: str) -> JobReport:
        """A job's state, with its output or error once it has finished (``GET /status/{id}``).

        Raises:
            JobNotFoundError: RunPod does not know the job.
        """
        return JobReport.model_validate(await self._call("GET", f"/status/{job_id}", names_job=True))

    async def cancel(self, job_id: str) -> JobReport:
        """Cancel a job, queued or running (``POST /cancel/{id}``)."""
        return JobReport.model_validate(await self._call("POST", f"/cancel/{job_id}", names_job=True))

    async def health(self) -> dict[str, Any]:
        """Job and worker counts of the endpoint (``GET /health``)."""
        return await self._call("GET", "/health")

    async def aclose(self) -> None:
        await self._http.aclose()
