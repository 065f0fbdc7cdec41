"""DashScope's asynchronous task API, which every role uses: submit a task, poll it until it ends, download results.

- Submit: ``POST {base_url}/services/aigc/<task>/<function>`` with ``Authorization: Bearer <key>``,
  ``X-DashScope-Async: enable`` (HTTP calls are asynchronous only) and a JSON body; the answer carries
  ``output.task_id``, valid 24 hours. The docs ask not to create duplicate tasks but to poll the one created.
- Poll: ``GET {base_url}/tasks/{task_id}``; ``output.task_status`` is ``PENDING``, ``RUNNING``, ``SUCCEEDED``,
  ``FAILED``, ``CANCELED`` or ``UNKNOWN`` (an id older than 24 hours, or none at all).
- Errors: ``{"code", "message", "request_id"}`` with the HTTP status (``400 InvalidParameter``,
  ``400 DataInspectionFailed``, ``400 Arrearage``, ``401 InvalidApiKey``, ``429 Throttling...``, ``500
  InternalError``...); a failed task says ``code`` and ``message`` in its ``output``.
- Results are URLs on Alibaba Cloud OSS, another host, valid 24 hours: they are fetched without the API key. An
  expired signed URL answers ``403 AccessDenied`` "Request has expired" with the error code ``0002-00000069``.

Sources:
https://www.alibabacloud.com/help/en/model-studio/text-to-image-v2-api-reference (submit, poll, task statuses),
https://www.alibabacloud.com/help/en/model-studio/image-to-video-api-reference (task ids valid 24 hours, no
duplicate tasks), https://www.alibabacloud.com/help/en/model-studio/developer-reference/error-code (error codes),
https://help.aliyun.com/zh/oss/support/0002-00000069 (an expired signed URL).

Inside a Temporal activity a task is heartbeated as ``{"role": <role>, "task_id": <id>}`` (:class:`TaskHeartbeat`),
so a retried attempt of the same activity polls the task it already paid for instead of submitting another.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from temporalio import activity

from activities.generation.base import GenerationError, GenerationRefused, GenerationThrottled
from core.redact import redact, register_secret

API_KEY_ENV = "POPCON_DASHSCOPE_API_KEY"
IN_PROGRESS = frozenset({"PENDING", "RUNNING", "SUSPENDED"})
"""Task statuses that may still end well; SUSPENDED is known to the DashScope SDK, not to the docs."""
REFUSAL_CODES = (
    "DataInspectionFailed",
    "IPInfringementSuspect",
    "InvalidParameter",
    "BadRequest",
    "InvalidApiKey",
    "AccessDenied",
    "Arrearage",
)
"""Error code prefixes that the same request would get again (content policy, parameters, key, account)."""
OSS_EXPIRED_CODE = "0002-00000069"
"""OSS's error code for a signed URL past its expiry time (also sent as the ``x-oss-ec`` header)."""
POLL_BACKOFF = 1.5
"""Each pause between two polls of a task is this much longer than the one before, up to the configured maximum."""


class ResultExpired(GenerationError):
    """A finished task's result URL no longer serves its file (results live 24 hours).

    Retryable, and the task is forgotten first: the next attempt submits a new task, which costs a second task. That
    cannot be avoided: a task's results exist only behind these URLs, and a finished task is never run again.
    """


@dataclass(frozen=True)
class Polling:
    """How a task is polled: first pause, then longer ones up to ``max_interval_s``.

    Attributes:
        interval_s: The first pause between two polls.
        max_interval_s: The longest pause; keep it well below the activity's heartbeat timeout, as every poll
            heartbeats.
    """

    interval_s: float
    max_interval_s: float


@dataclass(frozen=True)
class TaskHeartbeat:
    """The task one role call is waiting for, kept in the activity's heartbeat details.

    Outside an activity (plain calls, tests) it does nothing and :meth:`resumed` finds nothing.

    Attributes:
        role: The generator role (``character``, ``start_frame``, ``edit_frame``, ``clip``); a heartbeat of another
            role is not resumed.
    """

    role: str

    def resumed(self) -> str | None:
        """The task id a previous attempt of this activity heartbeated for this role, if any."""
        if not activity.in_activity():
            return None
        details = activity.info().heartbeat_details
        last = details[-1] if details else None
        if not isinstance(last, Mapping) or last.get("role") != self.role:
            return None
        task_id = last.get("task_id")
        return task_id if isinstance(task_id, str) and task_id else None

    def record(self, task_id: str | None) -> None:
        """Heartbeat the task being waited for; ``None`` forgets it, so that a retry submits a new task."""
        if activity.in_activity():
            activity.heartbeat({"role": self.role} if task_id is None else {"role": self.role, "task_id": task_id})


class TaskClient:
    """Submits, polls and downloads, mapping every DashScope answer to a result or a :class:`GenerationError`.

    Every text of DashScope's that goes into an error message is scrubbed of secrets first (:func:`quoted`): an
    answer may quote the key it refused.

    Args:
        api_key: The Model Studio API key; ``None`` or empty makes every call fail as refused (not retryable). It is
            registered with :func:`core.redact.register_secret`.
        base_url: The API root of the key's region, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``.
        polling: How tasks are polled.
    """

    def __init__(self, *, api_key: SecretStr | None, base_url: str, polling: Polling) -> None:
        register_secret(api_key)
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._polling = polling
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def submit(self, path: str, body: Mapping[str, Any]) -> str:
        """Create a task; returns its id.

        Args:
            path: The endpoint below the base URL, e.g. ``/services/aigc/text2image/image-synthesis``.
            body: The JSON body: ``model``, ``input``, ``parameters``.

        Raises:
            GenerationRefused: No API key, or the service refused the request (a 4xx answer but 408 and 429, in
                JSON or not).
            GenerationThrottled: The service is rate-limiting.
            GenerationError: Anything a retry may fix (server or network errors, a 2xx or 5xx answer that is not JSON,
                JSON without a task id).
        """
        answer = await self._call("POST", path, body)
        task_id = _output(answer).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise GenerationError(f"DashScope answered a submit to {path} without a task id: {quoted(answer, 300)}")
        return task_id

    async def wait(self, task_id: str, *, timeout_s: float, on_poll: Callable[[], None]) -> Mapping[str, Any]:
        """Poll a task until it ended, with growing pauses; returns its ``output`` whatever its final status.

        Args:
            task_id: The task.
            timeout_s: How long to wait before giving up (retryably: the task goes on, a retry polls it again).
            on_poll: Called after every poll (the caller heartbeats there).

        Raises:
            GenerationError: The task did not end in time, a poll answered without a ``task_status``, or polling
                failed (a refused, throttled or failed poll as for :meth:`submit`).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pause = self._polling.interval_s
        while True:
            output = _output(await self._call("GET", f"/tasks/{task_id}"))
            on_poll()
            status = output.get("task_status")
            if not isinstance(status, str) or not status:
                # Not an end of the task: the task is kept, and the retry polls it again.
                raise GenerationError(
                    f"DashScope answered a poll of task {task_id} without a task_status: {quoted(output, 300)}"
                )
            if status not in IN_PROGRESS:
                return output
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise GenerationError(f"DashScope task {task_id} is still {status} after {timeout_s:g}s")
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * POLL_BACKOFF, self._polling.max_interval_s)

    async def download(self, url: str, *, what: str, max_bytes: int) -> bytes:
        """Fetch one result URL without the API key, streamed and checked against its ``Content-Length``.

        Args:
            url: The signed result URL (another host).
            what: What is downloaded, for messages (e.g. ``"the clip of task ..."``).
            max_bytes: The most this download may be.

        Raises:
            ResultExpired: The URL answers 403 or 404, or OSS's expiry code.
            GenerationError: The download was cut short, failed, or is larger than ``max_bytes``.
        """
        if urlsplit(url).scheme not in ("http", "https"):
            raise GenerationError(f"DashScope gave {what} an URL that is not HTTP(S): {url[:100]!r}")
        try:
            async with self._client.stream("GET", url) as response:
                if response.is_error:
                    await _raise_download_error(response, what)
                declared = _content_length(response)
                if declared is not None and declared > max_bytes:
                    raise GenerationError(f"{what} is {declared} bytes, more than the {max_bytes} allowed")
                chunks: list[bytes] = []
                received = 0
                async for chunk in response.aiter_bytes():
                    received += len(chunk)
                    if received > max_bytes:
                        raise GenerationError(f"{what} is more than the {max_bytes} bytes allowed")
                    chunks.append(chunk)
                raw = response.num_bytes_downloaded
        except httpx.RemoteProtocolError as exc:
            raise GenerationError(f"downloading {what} was cut short: {exc}") from exc
        except httpx.HTTPError as exc:
            raise GenerationError(f"downloading {what} failed: {type(exc).__name__}: {exc}") from exc
        if declared is not None and raw != declared:
            raise GenerationError(f"downloading {what} was cut short: {raw} of {declared} bytes")
        return b"".join(chunks)

    def _key(self) -> str:
        key = self._api_key.get_secret_value() if self._api_key is not None else ""
        if not key:
            raise GenerationRefused(f"no DashScope API key: set the {API_KEY_ENV} environment variable (or .env)")
        return key

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._key()}"}
        if method == "POST":
            headers["X-DashScope-Async"] = "enable"
        try:
            response = await self._client.request(method, self._base_url + path, headers=headers, json=body)
        except httpx.HTTPError as exc:
            raise GenerationError(f"DashScope {method} {path} failed: {type(exc).__name__}: {exc}") from exc
        retry_after_s = _retry_after_s(response)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            if response.status_code == 429:
                raise GenerationThrottled(f"DashScope {method} {path}: HTTP 429", retry_after_s=retry_after_s)
            content_type = response.headers.get("Content-Type", "no Content-Type")
            text = (
                f"DashScope {method} {path} answered HTTP {response.status_code} with a body that is not a JSON "
                f"object ({content_type}): {quoted(response.text, 200)!r}"
            )
            # A 4xx page (a wrong base URL, a gateway refusing the request) answers the same request the same way,
            # as a 4xx error in JSON does (see service_error); a 5xx or 2xx page may be a passing fault.
            if 400 <= response.status_code < 500 and response.status_code != 408:
                raise GenerationRefused(text)
            raise GenerationError(text)
        if response.is_error or (answer.get("code") and "output" not in answer):
            raise service_error(
                str(answer.get("code") or f"HTTP{response.status_code}"),
                str(answer.get("message") or response.reason_phrase),
                status=response.status_code if response.is_error else None,
                request_id=answer.get("request_id"),
                retry_after_s=retry_after_s,
            )
        return answer


def quoted(said: object, limit: int | None = None) -> str:
    """What DashScope said, as text for an error message: secrets redacted (:func:`core.redact.redact`), then cut to
    ``limit`` characters (after redacting, so that no cut leaves part of a secret unrecognised)."""
    return redact(str(said))[:limit]


def task_error(task_id: str, output: Mapping[str, Any]) -> GenerationError:
    """The error for a task that ended without succeeding (FAILED, CANCELED, UNKNOWN)."""
    status = output.get("task_status")
    if status == "FAILED":
        code, message = str(output.get("code") or "TaskFailed"), str(output.get("message") or "")
        return service_error(code, message, task_id=task_id)
    if status == "CANCELED":
        return GenerationError(f"DashScope task {task_id} was cancelled")
    if status == "UNKNOWN":
        return GenerationError(f"DashScope task {task_id} is UNKNOWN: its id expired (24 hours) or never existed")
    return GenerationError(f"DashScope task {task_id} ended as {status!r}")


def service_error(
    code: str,
    message: str,
    *,
    status: int | None = None,
    request_id: object = None,
    task_id: str | None = None,
    retry_after_s: float | None = None,
) -> GenerationError:
    """Map a DashScope error to its exception: throttling first, then by HTTP status when there is one, else by
    code."""
    where = ", ".join(
        part
        for part in (
            f"HTTP {status}" if status is not None else "",
            f"task {task_id}" if task_id else "",
            f"request {request_id}" if request_id else "",
        )
        if part
    )
    text = quoted(f"DashScope {code}: {message}" + (f" ({where})" if where else ""))
    if status == 429 or code.startswith("Throttling"):
        return GenerationThrottled(text, retry_after_s=retry_after_s)
    if status is not None and 400 <= status < 500 and status != 408:
        return GenerationRefused(text)
    if status is None and code.startswith(REFUSAL_CODES):
        return GenerationRefused(text)
    return GenerationError(text)


def _output(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    output = answer.get("output")
    if not isinstance(output, Mapping):
        raise GenerationError(f"DashScope answered without an output: {quoted(answer, 300)}")
    return output


async def _raise_download_error(response: httpx.Response, what: str) -> NoReturn:
    detail = ""
    async for chunk in response.aiter_bytes():
        detail += chunk.decode("utf-8", "replace")
        if len(detail) >= 2000:
            break
    expired = (
        response.status_code in (403, 404)
        or OSS_EXPIRED_CODE in detail
        or response.headers.get("x-oss-ec") == OSS_EXPIRED_CODE
    )
    text = f"downloading {what} answered HTTP {response.status_code}: {' '.join(detail.split())[:200]!r}"
    if expired:
        raise ResultExpired(f"{text}; the result URL expired (results live 24 hours), a new task is needed")
    raise GenerationError(text)


def _content_length(response: httpx.Response) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.isdigit() else None


def _retry_after_s(response: httpx.Response) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), ``None`` when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
