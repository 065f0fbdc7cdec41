"""A small client for RunPod's hosted queue API: submit, poll, cancel jobs of one endpoint.

It speaks the hosted API with httpx directly: the SDK's ``AsyncioEndpoint.run`` cannot send an execution policy, and
its ``Job.output()`` hides a FAILED job's error.

Every call rides out a blip of the hosted API in place, as RunPod's documentation asks of clients: a network error,
429 or 5xx answer is retried after an exponential back-off with jitter, or after the ``Retry-After`` RunPod sent
(:class:`ApiRetry`). ``POST /run`` is the exception: it creates a paid job and RunPod has no idempotency key, so it
is tried again in place only when no job can exist (429, or a connection that was never made). A refusal that names
the deployment's own configuration (401, 403, or 404 for the endpoint) is raised at once as
:class:`EndpointMisconfiguredError`, whose message names the setting to fix.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from core.redact import redact, register_secret

logger = logging.getLogger(__name__)

RESULT_RETENTION = timedelta(minutes=30)
"""How long RunPod keeps an asynchronous (``/run``) job's result after the job ended."""


class JobStatus(StrEnum):
    """A RunPod job's state."""

    IN_QUEUE = "IN_QUEUE"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    UNKNOWN = "UNKNOWN"
    """Any state this client does not know (RunPod's state list is longer than the job-states page, e.g.
    ``RUNNING``): the job has not finished as far as this client can tell, so it is polled again."""

    @classmethod
    def _missing_(cls, value: object) -> JobStatus:
        return cls.UNKNOWN

    @property
    def finished(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT)


class JobReport(BaseModel):
    """What ``/run``, ``/status`` and ``/cancel`` say about a job (RunPod adds fields; they are ignored)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    status: JobStatus
    reported_status: str = Field(default="", description="The state as RunPod wrote it (``status`` may be UNKNOWN).")
    delay_ms: float | None = Field(default=None, alias="delayTime", description="Time in the queue.")
    execution_ms: float | None = Field(default=None, alias="executionTime", description="Time on a worker.")
    output: Any = None
    error: Any = None

    @model_validator(mode="before")
    @classmethod
    def _keep_the_reported_status(cls, data: Any) -> Any:
        if isinstance(data, dict) and "status" in data:
            return {**data, "reported_status": str(data["status"])}
        return data


class RunPodApiError(Exception):
    """A request to RunPod failed: ``status`` is the HTTP status, None for a network error; ``unsent``: the request
    never reached RunPod (no connection was made), so sending it again cannot repeat anything."""

    def __init__(
        self, message: str, *, status: int | None, retry_after_s: float | None = None, unsent: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.unsent = unsent

    @property
    def retryable(self) -> bool:
        """Network errors, throttling (429) and RunPod's own errors (5xx) pass; other refusals do not."""
        return self.status is None or self.status == 429 or self.status >= 500


class JobNotFoundError(RunPodApiError):
    """RunPod does not know the job (never submitted here, or its result expired)."""


class EndpointMisconfiguredError(RunPodApiError):
    """RunPod refused the deployment's own configuration (the API key, the endpoint id): no job of this endpoint
    can run until an operator changes a setting, which the message names."""


@dataclass(frozen=True)
class ApiRetry:
    """How a call rides out a blip of the hosted API in place (network errors, 429, 5xx).

    Attempt ``n`` (from 1) that fails waits RunPod's ``Retry-After`` when it sent one, else an exponential back-off
    with jitter, ``first_delay_s x 2^(n-1)`` capped at ``max_delay_s``, half of it random (so the jobs of many slots
    throttled together do not come back together). A ``Retry-After`` longer than ``max_retry_after_s`` is not waited
    here: the error goes up with it, and the activity's retry honours it (Temporal's ``next_retry_delay``).

    Attributes:
        attempts: Tries of one call, the first included.
        first_delay_s: The first back-off.
        max_delay_s: The longest back-off.
        max_retry_after_s: The longest ``Retry-After`` waited in place.
    """

    attempts: int = 5
    first_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 30.0

    def delay_s(self, attempt: int, err: RunPodApiError, *, repeatable: bool = True) -> float | None:
        """Seconds to wait before trying again after ``attempt`` failed with ``err``; None: give up in place.

        A call that is not ``repeatable`` (one that creates a job) is tried again only when RunPod cannot have acted
        on it: it throttled the call (429), or the connection was never made.
        """
        if not err.retryable or attempt >= self.attempts:
            return None
        if not repeatable and not (err.status == 429 or err.unsent):
            return None
        if err.retry_after_s is not None:
            return err.retry_after_s if err.retry_after_s <= self.max_retry_after_s else None
        backoff = min(self.max_delay_s, self.first_delay_s * 2 ** (attempt - 1))
        return backoff / 2 + random.uniform(0, backoff / 2)


def _retry_after(response: httpx.Response) -> float | None:
    """RunPod's ``Retry-After`` in seconds (the delay form; RunPod's API does not send the HTTP-date form); a delay of
    0 or less is no delay at all, so the back-off applies instead."""
    try:
        delay = float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None
    return delay if delay > 0 else None


class RunPodApi:
    """The queue operations of one endpoint: ``{base_url}/{endpoint_id}/run | status | cancel | health``.

    Args:
        base_url: e.g. ``https://api.runpod.ai/v2``.
        endpoint_id: The endpoint's id.
        api_key: Sent as a Bearer token; never logged or put in an error message (it is registered with
            :func:`core.redact.register_secret`, and RunPod's answers are redacted before they become one).
        timeout_s: Per-request timeout.
        retry: How a call rides out network errors, 429 and 5xx in place.
    """

    def __init__(
        self,
        base_url: str,
        endpoint_id: str,
        api_key: SecretStr,
        *,
        timeout_s: float = 30.0,
        retry: ApiRetry | None = None,
    ) -> None:
        register_secret(api_key)
        self._base_url = base_url.rstrip("/")
        self._endpoint_id = endpoint_id
        self._retry = retry or ApiRetry()
        self._http = httpx.AsyncClient(
            base_url=f"{self._base_url}/{endpoint_id}",
            headers={"Authorization": f"Bearer {api_key.get_secret_value()}"},
            timeout=timeout_s,
        )

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        names_job: bool = False,
        repeatable: bool = True,
    ) -> dict[str, Any]:
        """One call, tried again in place after a network error, 429 or 5xx (see :class:`ApiRetry`); a call that is
        not ``repeatable`` only after a 429 or a connection never made."""
        attempt = 1
        while True:
            try:
                return await self._call_once(method, path, body, names_job=names_job)
            except RunPodApiError as err:
                delay_s = self._retry.delay_s(attempt, err, repeatable=repeatable)
                if delay_s is None:
                    raise
                logger.warning(
                    "RunPod call failed, trying again in place",
                    extra={
                        "call": f"{method} {path}",
                        "attempt": attempt,
                        "delay_s": round(delay_s, 2),
                        "error": str(err),
                    },
                )
                await asyncio.sleep(delay_s)
                attempt += 1

    async def _call_once(
        self, method: str, path: str, body: dict[str, Any] | None, *, names_job: bool
    ) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.TransportError as err:
            unsent = isinstance(err, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
            message = f"RunPod {method} {path}: {type(err).__name__}: {err}"
            raise RunPodApiError(message, status=None, unsent=unsent) from err
        if response.is_success:
            payload: dict[str, Any] = response.json()
            return payload
        status = response.status_code
        answer = redact(response.text)[:300]
        if status in (401, 403) or (status == 404 and not names_job):
            raise EndpointMisconfiguredError(self._misconfigured(method, path, status, answer), status=status)
        message = f"RunPod {method} {path} answered {status}: {answer}"
        error = JobNotFoundError if status == 404 and names_job else RunPodApiError
        raise error(message, status=status, retry_after_s=_retry_after(response))

    def _misconfigured(self, method: str, path: str, status: int, answer: str) -> str:
        """What an operator must change after RunPod refused the key or does not know the endpoint."""
        endpoint = self._endpoint_id
        if status == 401:
            fix = (
                f"RunPod refused the API key: set POPCON_RUNPOD_API_KEY to a valid key of the account that owns "
                f"endpoint {endpoint}"
            )
        elif status == 403:
            fix = (
                f"the API key may not use endpoint {endpoint}: give the key of POPCON_RUNPOD_API_KEY read/write "
                "access to Serverless endpoints, or use one that has it"
            )
        else:
            fix = (
                f"RunPod knows no endpoint {endpoint} at {redact(self._base_url)}: set POPCON_RUNPOD_ENDPOINT_ID to "
                "the id `popcon runpod deploy` printed (and POPCON_RUNPOD_BASE_URL to RunPod's queue API, "
                "https://api.runpod.ai/v2)"
            )
        return f"{fix} (RunPod {method} {path} answered {status}: {answer})"

    async def run(self, job_input: dict[str, Any], *, execution_timeout_ms: int, ttl_ms: int) -> JobReport:
        """Submit a job (``POST /run``) with its execution policy; RunPod answers at once with its id.

        Tried again in place only when RunPod cannot have queued the job (429, no connection). After a 5xx or a lost
        answer the job may exist, and RunPod has no idempotency key: the error goes up, and the activity's retry
        submits once more. That is the window left for a duplicate, paid job: one per activity attempt whose
        submission's answer was lost; a duplicate runs once, unwatched.
        """
        policy = {"executionTimeout": execution_timeout_ms, "ttl": ttl_ms}
        body = {"input": job_input, "policy": policy}
        return JobReport.model_validate(await self._call("POST", "/run", body, repeatable=False))

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
