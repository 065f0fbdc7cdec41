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

**Throttling.** A ``429`` or a ``Throttling*`` code (``Throttling.RateQuota``: over the model's requests per second;
``Throttling.AllocationQuota``...) is waited out inside the call (:class:`Throttling`): ``Retry-After`` when the
answer has one (plus a little spread, so that calls throttled together do not come back together), else exponential
back-off with full jitter; the call gives up (:class:`~activities.generation.base.GenerationThrottled`, the
workflow's retry policy then waits) only once its waits would pass ``max_wait_s`` in all. A throttled submit created
no task; a throttled poll keeps its task.

**The window left for a duplicate paid task.** After a submit is answered, the task id is heartbeated twice: through
the worker (``activity.heartbeat``: throttled by the SDK, which sends the first heartbeat of an activity at once but
holds a later one until ``max_heartbeat_throttle_interval``, 1 s, has passed since the last one sent; nothing an
activity can call flushes it early) and directly, with ``RecordActivityTaskHeartbeat`` through the worker's client,
which the call awaits before it polls (:meth:`TaskHeartbeat.record_now`). What remains:

1. *A worker lost between the provider creating the task and that heartbeat reaching the server*: the time the
   submit's answer takes to come back plus one heartbeat round trip to Temporal (milliseconds on a healthy network).
   A retry then submits again.
2. *A submit whose answer is lost* (a read timeout or a connection reset after the request was sent; perhaps also a
   ``5xx`` answer): DashScope may have created the task, and nothing tells this call its id. DashScope documents no
   idempotency key, client token or caller-chosen id for a submit; its batch task query (``GET {base_url}/tasks``)
   selects tasks by time range, model, API key and status only, and promises no field of a listed task that would
   tie it to one submit, so a retry could narrow its task down to "a task of this model created in these seconds",
   which another worker's call may be as well; adopting a wrong one would give a set another set's images. Such a
   call is logged as a warning and fails retryably; the retry submits again (a second task may be billed).
3. If the direct heartbeat fails (Temporal unreachable), the worker's own heartbeat carries the id within 1 s.

Sources: https://www.alibabacloud.com/help/en/model-studio/rate-limit and
https://www.alibabacloud.com/help/en/model-studio/rate-limiting-best-practices (rate limits per model and account,
``Requests rate limit exceeded``), https://www.alibabacloud.com/help/en/model-studio/manage-asynchronous-tasks (the
task query, batch query and cancel APIs), the SDK's task list (``dashscope/client/base_api.py``, ``list``:
``start_time``, ``end_time``, ``model_name``, ``api_key_id``, ``status``, ``page_no``, ``page_size``), Temporal's
sdk-core ``activity_heartbeat_manager.rs`` (heartbeat throttling).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from temporalio import activity
from temporalio.client import AsyncActivityCancelledError
from temporalio.service import RPCError

from activities.generation.base import GenerationError, GenerationRefused, GenerationThrottled
from core.redact import redact, register_secret

logger = logging.getLogger(__name__)
T = TypeVar("T")

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
RECORD_TIMEOUT = timedelta(seconds=10)
"""How long the direct heartbeat of a new task id may take before the worker's own heartbeat is relied on."""
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
"""Transport errors raised before a request left: a submit that failed so created no task."""


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
class Throttling:
    """How a call waits while DashScope throttles it (429, ``Throttling*``), before it gives up.

    Attributes:
        max_wait_s: The most one call waits in all over one run of throttled answers (a submit, or the polls
            between two answered ones); a wait that would pass it is not started, the call raises
            :class:`~activities.generation.base.GenerationThrottled` instead. 0: never wait.
        first_backoff_s: Without ``Retry-After``, the first wait is random up to this; each later one up to twice
            the one before (full jitter). With ``Retry-After``, the wait is it plus a random spread up to this.
        max_backoff_s: The longest a wait without ``Retry-After`` may be drawn up to.
    """

    max_wait_s: float
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def delay(self, retry_after_s: float | None, waits_before: int, rng: random.Random) -> float:
        """The wait after a throttled answer, ``waits_before`` waits into the run."""
        if retry_after_s is not None:
            return retry_after_s + rng.uniform(0.0, self.first_backoff_s)
        ceiling = min(self.max_backoff_s, self.first_backoff_s * 2.0**waits_before)
        return rng.uniform(0.0, ceiling)


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
        """Heartbeat the task being waited for; ``None`` forgets it, so that a retry submits a new task.

        The heartbeat goes through the worker, which may hold it up to its heartbeat throttle interval (1 s) when
        another was sent just before: a new task id goes with :meth:`record_now` instead."""
        if activity.in_activity():
            activity.heartbeat(self._details(task_id))

    async def record_now(self, task_id: str) -> None:
        """Heartbeat a task just created and return once Temporal's server has it.

        The id is heartbeated through the worker (:meth:`record`: every later heartbeat, the worker's own
        included, repeats it) and sent directly with the worker's client (``RecordActivityTaskHeartbeat``), which
        the worker's heartbeat throttle does not hold back. Outside an activity, or without a client (a test's
        ActivityEnvironment), only :meth:`record` happens. If the direct call fails, a warning is logged and the
        worker's heartbeat carries the id within its throttle interval.
        """
        self.record(task_id)
        if not activity.in_activity():
            return
        try:
            client = activity.client()
        except RuntimeError:
            return
        handle = client.get_async_activity_handle(task_token=activity.info().task_token)
        try:
            await handle.heartbeat(self._details(task_id), rpc_timeout=RECORD_TIMEOUT)
        except AsyncActivityCancelledError:
            pass  # recorded; the cancellation reaches the activity through the worker's own heartbeat
        except RPCError as err:
            logger.warning(
                "DashScope %s task %s: recording it on the Temporal server failed (%s); the worker's next heartbeat "
                "carries it",
                self.role,
                task_id,
                err,
            )

    def _details(self, task_id: str | None) -> dict[str, str]:
        return {"role": self.role} if task_id is None else {"role": self.role, "task_id": task_id}


class TaskClient:
    """Submits, polls and downloads, mapping every DashScope answer to a result or a :class:`GenerationError`.

    Every text of DashScope's that goes into an error message is scrubbed of secrets first (:func:`quoted`): an
    answer may quote the key it refused.

    Args:
        api_key: The Model Studio API key; ``None`` or empty makes every call fail as refused (not retryable). It is
            registered with :func:`core.redact.register_secret`.
        base_url: The API root of the key's region, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``.
        polling: How tasks are polled.
        throttling: How throttled submits and polls wait.
    """

    def __init__(self, *, api_key: SecretStr | None, base_url: str, polling: Polling, throttling: Throttling) -> None:
        register_secret(api_key)
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._polling = polling
        self._throttling = throttling
        self._random = random.Random()
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def submit(
        self, path: str, body: Mapping[str, Any], *, what: str = "", on_wait: Callable[[], None] = lambda: None
    ) -> str:
        """Create a task; returns its id. A throttled submit is tried again after a wait (see :class:`Throttling`).

        Args:
            path: The endpoint below the base URL, e.g. ``/services/aigc/text2image/image-synthesis``.
            body: The JSON body: ``model``, ``input``, ``parameters``.
            what: What the task makes, for logs.
            on_wait: Called before every wait for throttling (the caller heartbeats there).

        Raises:
            GenerationRefused: No API key, or the service refused the request (a 4xx answer but 408 and 429, in
                JSON or not).
            GenerationThrottled: The service was still rate-limiting after the longest wait allowed.
            GenerationError: Anything a retry may fix (server or network errors, a 2xx or 5xx answer that is not JSON,
                JSON without a task id).
        """
        answer = await self._unthrottled(
            lambda: self._call("POST", path, body), f"the submit of {what or path}", on_wait
        )
        task_id = _output(answer).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise GenerationError(f"DashScope answered a submit to {path} without a task id: {quoted(answer, 300)}")
        return task_id

    async def wait(self, task_id: str, *, timeout_s: float, on_poll: Callable[[], None]) -> Mapping[str, Any]:
        """Poll a task until it ended, with growing pauses; returns its ``output`` whatever its final status.

        Args:
            task_id: The task.
            timeout_s: How long to wait before giving up (retryably: the task goes on, a retry polls it again).
            on_poll: Called after every poll, and before every wait for throttling (the caller heartbeats there).

        Raises:
            GenerationError: The task did not end in time, a poll answered without a ``task_status``, or polling
                failed (a refused or failed poll as for :meth:`submit`; a throttled one once the waits allowed, or
                the time left, ran out).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pause = self._polling.interval_s
        while True:
            answer = await self._unthrottled(
                lambda: self._call("GET", f"/tasks/{task_id}"), f"the polls of task {task_id}", on_poll, deadline
            )
            output = _output(answer)
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

    async def _unthrottled(
        self,
        call: Callable[[], Awaitable[T]],
        what: str,
        on_wait: Callable[[], None],
        deadline: float | None = None,
    ) -> T:
        """``call``'s answer, waiting and calling again while it is throttled: one INFO line when a run of throttled
        answers begins and one when it ends, the waits between at DEBUG.

        Raises:
            GenerationThrottled: The next wait would pass :attr:`Throttling.max_wait_s` (or ``deadline``, on the
                event loop's clock); ``retry_after_s`` is the service's last ``Retry-After``.
        """
        loop = asyncio.get_running_loop()
        began = loop.time()
        give_up_at = began + self._throttling.max_wait_s
        if deadline is not None:
            give_up_at = min(give_up_at, deadline)
        throttled = 0
        while True:
            try:
                answer = await call()
            except GenerationThrottled as err:
                delay = self._throttling.delay(err.retry_after_s, throttled, self._random)
                waited = loop.time() - began
                if loop.time() + delay > give_up_at:
                    if throttled:
                        logger.info(
                            "DashScope still throttles %s after %d answer(s) and %.1f s: giving up",
                            what,
                            throttled + 1,
                            waited,
                        )
                    raise GenerationThrottled(
                        f"{err} (throttled {throttled + 1} time(s) in {waited:.1f} s; a call waits at most "
                        f"{self._throttling.max_wait_s:g} s)",
                        retry_after_s=err.retry_after_s,
                    ) from err
                if throttled == 0:
                    logger.info(
                        "DashScope throttles %s (%s); backing off %.1f s, for up to %g s in all",
                        what,
                        err,
                        delay,
                        self._throttling.max_wait_s,
                    )
                else:
                    logger.debug("DashScope throttles %s again; backing off %.1f s", what, delay)
                throttled += 1
                on_wait()
                await asyncio.sleep(delay)
                continue
            if throttled:
                logger.info(
                    "DashScope took %s after %d throttled answer(s) and %.1f s", what, throttled, loop.time() - began
                )
            return answer

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
        except NOT_SENT as exc:
            raise GenerationError(f"DashScope {method} {path} failed: {type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            text = f"DashScope {method} {path} failed: {type(exc).__name__}: {exc}"
            if method == "POST":
                # Sent, answer lost: the service may have made a task nothing here can find (see the module's notes).
                text += "; the request was sent, so DashScope may have created (and may bill) a task left unknown"
                logger.warning("%s", text)
            raise GenerationError(text) from exc
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
