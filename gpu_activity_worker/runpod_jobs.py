"""RunPod Serverless jobs: what a matting job carries, and a small client for RunPod's hosted queue API.

The job input wraps the Temporal activities' own contract (:class:`MatteFrameInput`, :class:`DescribePipelineInput`),
so the handler validates exactly what the activity would. When the artifact store is not shared with RunPod (a
``file://`` root on the dispatcher's machine), the image travels inline: base64 in the job, the base64 PNG matte in the
output, each under a size limit well below RunPod's 10 MB ``/run`` payload limit.

A failed job's error is ``"<Type>: <message>"`` with the type of :func:`gpu_activity_worker.matting.failure_type`, so
the dispatcher tells the failures a retry cannot fix from those it can.

The client speaks the hosted API with httpx directly: the SDK's ``AsyncioEndpoint.run`` cannot send an execution
policy, and its ``Job.output()`` hides a FAILED job's error.
"""

from __future__ import annotations

import base64
import binascii
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter

from gpu_activity_worker.engines.base import UnsupportedImageError
from gpu_activity_worker.matting import NON_RETRYABLE_TYPES, CorruptImageError
from workflows.contract import DescribePipelineInput, MatteFrameInput, MatteFrameOutput

INVALID_REQUEST = "InvalidRequest"
"""Error type of a job whose input does not fit the contract."""

JOB_NON_RETRYABLE_TYPES = (*NON_RETRYABLE_TYPES, INVALID_REQUEST)
"""Failure types of a FAILED job that a new job would repeat."""

_ERROR = re.compile(r"(?P<kind>[A-Za-z_][A-Za-z0-9_]*): (?P<message>.*)", re.DOTALL)


class _JobModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MatteJob(_JobModel):
    """Cut one candidate out: the ``matte_frame`` activity's input, plus the source image when it travels inline."""

    op: Literal["matte"]
    request: MatteFrameInput
    inline_source: str | None = Field(default=None, description="The source image, base64, if the store is not shared.")


class DescribeJob(_JobModel):
    """Build a pipeline on an endpoint worker (loading its weights) and say where it runs."""

    op: Literal["describe"]
    request: DescribePipelineInput


JOB_INPUT: TypeAdapter[MatteJob | DescribeJob] = TypeAdapter(
    Annotated[MatteJob | DescribeJob, Field(discriminator="op")]
)
"""Validates a job's ``input``."""


class MatteJobOutput(_JobModel):
    """A matte job's output: the activity's own result, plus the matte itself when it travels inline."""

    result: MatteFrameOutput
    inline_matte: str | None = Field(default=None, description="The RGBA PNG, base64, if the store is not shared.")


class InlineTooLargeError(UnsupportedImageError):
    """An image too large to travel inside a job: the endpoint needs a shared (s3://) artifact store for it."""


def encode_inline(data: bytes, limit: int, what: str) -> str:
    """``data`` as base64 for a job's input or output.

    Raises:
        InlineTooLargeError: The encoded image is over ``limit`` bytes.
    """
    text = base64.b64encode(data).decode("ascii")
    if len(text) > limit:
        raise InlineTooLargeError(
            f"{what} is {len(text)} bytes in base64, over the {limit}-byte inline limit "
            "(POPCON_RUNPOD_INLINE_MAX_BYTES); give the dispatcher and the endpoint a shared s3:// artifact store"
        )
    return text


def decode_inline(text: str, limit: int, what: str) -> bytes:
    """The bytes of a base64 image from a job.

    Raises:
        InlineTooLargeError: ``text`` is over ``limit`` bytes.
        CorruptImageError: ``text`` is not base64.
    """
    if len(text) > limit:
        raise InlineTooLargeError(f"{what} is {len(text)} bytes in base64, over the {limit}-byte inline limit")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise CorruptImageError(f"{what} is not valid base64 ({err})") from err


def job_error(kind: str, message: str) -> dict[str, str]:
    """A handler's failure result: RunPod marks the job FAILED and keeps the string as its ``error``."""
    return {"error": f"{kind}: {message}"}


def parse_job_error(error: object) -> tuple[str, str]:
    """(type, message) of a FAILED job's error; ``RunPodJobFailed`` when it is not one of our typed errors (e.g. the
    SDK's JSON report of an exception that escaped the handler)."""
    text = str(error)
    match = _ERROR.fullmatch(text)
    return (match["kind"], match["message"]) if match else ("RunPodJobFailed", text)


# --- The hosted queue API ---------------------------------------------------------------------------------------


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
        api_key: Sent as a Bearer token; never logged or put in an error message.
        timeout_s: Per-request timeout.
    """

    def __init__(self, base_url: str, endpoint_id: str, api_key: SecretStr, *, timeout_s: float = 30.0) -> None:
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
        message = f"RunPod {method} {path} answered {response.status_code}: {response.text[:300]}"
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
