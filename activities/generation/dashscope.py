"""DashScope (Alibaba Cloud Model Studio) image generation: Wan text-to-image models through the asynchronous task API.

One frame's candidates are asked for in tasks of at most four images: ``POST {base_url}/services/aigc/text2image/
image-synthesis`` with ``X-DashScope-Async: enable`` creates a task, ``GET {base_url}/tasks/{task_id}`` is polled until
it ends, then every result URL (valid 24 hours, on another host: the API key is never sent there) is downloaded and
scaled to the frame size. Inside a Temporal activity the task ids are heartbeated as ``{"task_ids": {offset: id}}``
(offset = index of the task's first image in the request), and a retried attempt polls those tasks again instead of
paying for new ones; a task that ended in failure is dropped from the heartbeat first, so the retry submits afresh.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import io
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from PIL import Image
from pydantic import SecretStr
from temporalio import activity

from activities.generation.base import GeneratedImage, GenerationError, GenerationRefused, GenerationThrottled
from activities.settings import DashScopeSettings
from workflows.contract import GenerateFrameInput

logger = logging.getLogger(__name__)

SUBMIT_PATH = "/services/aigc/text2image/image-synthesis"
MAX_IMAGES_PER_TASK = 4
"""``parameters.n`` accepts 1 to 4."""
MAX_SEED = 2**31 - 1
"""``parameters.seed`` accepts 0 to 2147483647; image ``i`` of a task uses ``seed + i``."""
DEFAULT_EDGE, MAX_EDGE = 1024, 1440
"""1024*1024 is the service default; Wan 2.2 / 2.1 accept widths and heights in [512, 1440]."""
MAX_PROMPT_CHARS = 500
"""The Wan 2.x prompt limit; the service silently cuts longer prompts at the end."""
HEARTBEAT_KEY = "task_ids"

API_KEY_ENV = "POPCON_DASHSCOPE_API_KEY"
BACKGROUND_PROMPT = (
    "One single character, centred, whole body fully inside the frame with a wide margin, "
    "isolated on a plain solid pure white background, no scenery, no shadow on the background."
)
NEGATIVE_PROMPT = (
    "background scenery, busy background, gradient background, patterned background, clutter, extra objects, "
    "multiple characters, text, letters, words, caption, watermark, signature, logo, frame, border, "
    "cropped, cut off, out of frame, partial body, blurry, low quality, deformed"
)
_IN_PROGRESS = frozenset({"PENDING", "RUNNING", "SUSPENDED"})  # SUSPENDED: known to the DashScope SDK, not the docs
_REFUSAL_CODES = (
    "DataInspectionFailed",
    "IPInfringementSuspect",
    "InvalidParameter",
    "BadRequest",
    "InvalidApiKey",
    "AccessDenied",
    "Arrearage",
)
"""Error code prefixes that the same request would get again (content policy, parameters, account)."""


def candidate_seed(seed: int, frame: int, candidate: int) -> int:
    """The service seed of one candidate: a per-frame base hashed from the set seed, plus the candidate index.

    Consecutive candidates get consecutive seeds, as the service gives image ``i`` of a task ``seed + i``.
    """
    digest = hashlib.sha256(f"popcon-dashscope:{seed}:{frame}".encode()).digest()
    return (int.from_bytes(digest[:4], "big") + candidate) % (MAX_SEED + 1)


def generation_edge(image_size: int) -> int:
    """The square edge to ask the model for: its 1024 default, or the frame size when larger, at most 1440."""
    return min(max(image_size, DEFAULT_EDGE), MAX_EDGE)


def build_prompt(request: GenerateFrameInput) -> str:
    """The frame prompt, then the style and the plain-background instruction, cut to the service's length limit.

    The frame prompt is what gets shortened, so the background instruction the matting relies on always survives.
    """
    suffix = (f" Style: {request.style}." if request.style else "") + f" {BACKGROUND_PROMPT}"
    room = max(MAX_PROMPT_CHARS - len(suffix), 0)
    return (request.prompt.strip()[:room].rstrip() + suffix)[:MAX_PROMPT_CHARS]


@dataclass(frozen=True)
class _Batch:
    """One task's share of a request: images ``offset`` to ``offset + n - 1``."""

    offset: int
    n: int


def _batches(count: int) -> dict[int, _Batch]:
    return {
        offset: _Batch(offset, min(MAX_IMAGES_PER_TASK, count - offset))
        for offset in range(0, count, MAX_IMAGES_PER_TASK)
    }


class DashScopeGenerator:
    """Image generator backed by DashScope's Wan text-to-image task API.

    Args:
        api_key: The Model Studio API key; ``None`` makes every ``generate`` fail as refused (not retryable).
        base_url: API root of the region, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``.
        model: Text-to-image model name, e.g. ``wan2.2-t2i-flash``.
        poll_interval_s: Pause between two polls of the running tasks.
        timeout_s: How long one ``generate`` call waits for its tasks before failing (retryably).
    """

    name: ClassVar[str] = "dashscope"

    def __init__(
        self, *, api_key: SecretStr | None, base_url: str, model: str, poll_interval_s: float, timeout_s: float
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._model = model
        self._poll_interval_s = poll_interval_s
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))

    @classmethod
    def from_settings(cls, settings: DashScopeSettings) -> DashScopeGenerator:
        """Build the generator from the ``POPCON_DASHSCOPE_*`` settings."""
        return cls(
            api_key=settings.dashscope_api_key,
            base_url=settings.dashscope_base_url,
            model=settings.dashscope_model,
            poll_interval_s=settings.dashscope_poll_interval_s,
            timeout_s=settings.dashscope_timeout_s,
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def generate(self, request: GenerateFrameInput) -> list[GeneratedImage]:
        """Return ``request.count`` candidates, candidate ``i`` being ``request.first_candidate + i``.

        Raises:
            GenerationRefused: No API key, or the service refused the request (content, parameters, key, account).
            GenerationThrottled: The service is rate-limiting (``retry_after_s`` set when it says when).
            GenerationError: Anything retrying can fix: server errors, network errors, failed, cancelled, unknown or
                partially failed tasks, and the overall timeout.
        """
        key = self._require_key()
        batches = _batches(request.count)
        task_ids = {offset: task_id for offset, task_id in _heartbeated_task_ids().items() if offset in batches}
        if task_ids:
            logger.info(
                "resuming DashScope tasks %s for %s/%s frame %d",
                task_ids,
                request.set_id,
                request.pose.name,
                request.frame,
            )
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        for offset, batch in batches.items():
            if offset not in task_ids:
                task_ids[offset] = await self._submit(key, request, batch)
                _heartbeat(task_ids)
        urls = await self._wait(key, request, batches, task_ids, deadline)
        return [await self._download(url, request.image_size) for offset in sorted(urls) for url in urls[offset]]

    def _require_key(self) -> str:
        key = self._api_key.get_secret_value() if self._api_key is not None else ""
        if not key:
            raise GenerationRefused(f"no DashScope API key: set the {API_KEY_ENV} environment variable (or .env)")
        return key

    async def _submit(self, key: str, request: GenerateFrameInput, batch: _Batch) -> str:
        edge = generation_edge(request.image_size)
        body = {
            "model": self._model,
            "input": {"prompt": build_prompt(request), "negative_prompt": NEGATIVE_PROMPT},
            "parameters": {
                "size": f"{edge}*{edge}",
                "n": batch.n,
                "seed": candidate_seed(request.seed, request.frame, request.first_candidate + batch.offset),
                "prompt_extend": False,
                "watermark": False,
            },
        }
        answer = await self._call("POST", SUBMIT_PATH, key, body)
        task_id = _output(answer).get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise GenerationError(f"DashScope answered a submit without a task id: {answer}")
        logger.info(
            "submitted DashScope task %s (%s, %d image(s)) for %s/%s frame %d",
            task_id,
            self._model,
            batch.n,
            request.set_id,
            request.pose.name,
            request.frame,
        )
        return task_id

    async def _wait(
        self,
        key: str,
        request: GenerateFrameInput,
        batches: dict[int, _Batch],
        task_ids: dict[int, str],
        deadline: float,
    ) -> dict[int, list[str]]:
        """Poll the tasks until all succeeded; a task that ended otherwise leaves the heartbeat, then raises."""
        urls: dict[int, list[str]] = {}
        loop = asyncio.get_running_loop()
        while True:
            for offset in sorted(set(task_ids) - set(urls)):
                output = _output(await self._call("GET", f"/tasks/{task_ids[offset]}", key))
                if output.get("task_status") in _IN_PROGRESS:
                    continue
                try:
                    urls[offset] = _result_urls(
                        output, task_ids[offset], request.first_candidate + offset, batches[offset].n
                    )
                except GenerationError:
                    del task_ids[offset]
                    _heartbeat(task_ids)
                    raise
            if len(urls) == len(task_ids):
                return urls
            _heartbeat(task_ids)
            if loop.time() + self._poll_interval_s > deadline:
                pending = sorted(task_ids[offset] for offset in set(task_ids) - set(urls))
                raise GenerationError(f"DashScope task(s) {pending} not finished after {self._timeout_s:g}s")
            await asyncio.sleep(self._poll_interval_s)

    async def _call(self, method: str, path: str, key: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        if method == "POST":
            headers["X-DashScope-Async"] = "enable"
        try:
            response = await self._client.request(method, self._base_url + path, headers=headers, json=body)
        except httpx.HTTPError as exc:
            raise GenerationError(f"DashScope {method} {path} failed: {type(exc).__name__}: {exc}") from exc
        try:
            answer = response.json()
        except ValueError:
            answer = {"message": response.text[:200]}
        if not isinstance(answer, dict):
            answer = {"message": str(answer)[:200]}
        if response.is_error or (answer.get("code") and "output" not in answer):
            raise _service_error(
                str(answer.get("code") or f"HTTP{response.status_code}"),
                str(answer.get("message") or response.reason_phrase),
                status=response.status_code if response.is_error else None,
                request_id=answer.get("request_id"),
                retry_after_s=_retry_after_s(response),
            )
        return answer

    async def _download(self, url: str, size: int) -> GeneratedImage:
        try:
            response = await self._client.get(url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise GenerationError(f"downloading a DashScope image failed: {type(exc).__name__}: {exc}") from exc
        data = await asyncio.to_thread(_frame_png, response.content, size)
        return GeneratedImage(data=data, media_type="image/png", width=size, height=size)


def _output(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    output = answer.get("output")
    if not isinstance(output, Mapping):
        raise GenerationError(f"DashScope answered without an output: {answer}")
    return output


def _result_urls(output: Mapping[str, Any], task_id: str, first_candidate: int, n: int) -> list[str]:
    """The ``n`` image URLs of an ended task, or the error saying why the task did not make them all."""
    status = output.get("task_status")
    if status == "FAILED":
        code, message = str(output.get("code") or "TaskFailed"), str(output.get("message") or "")
        raise _service_error(code, message, task_id=task_id)
    if status != "SUCCEEDED":
        raise GenerationError(f"DashScope task {task_id} is {status} (cancelled, expired or unknown)")
    results = output.get("results")
    items = list(results)[:n] if isinstance(results, list) else []
    items += [{}] * (n - len(items))
    urls = [item.get("url") if isinstance(item, Mapping) else None for item in items]
    failures = [
        (first_candidate + i, str(item.get("code") or "NoResult"), str(item.get("message") or "no image returned"))
        for i, (item, url) in enumerate(zip(items, urls, strict=True))
        if not isinstance(url, str) or not url
    ]
    if not failures:
        return [url for url in urls if isinstance(url, str)]
    described = "; ".join(f"candidate {index}: {code}: {message}" for index, code, message in failures)
    text = f"DashScope task {task_id} made {n - len(failures)} of {n} image(s); {described}"
    if all(code.startswith(_REFUSAL_CODES) for _, code, _ in failures):
        raise GenerationRefused(text)
    raise GenerationError(text)


def _service_error(
    code: str,
    message: str,
    *,
    status: int | None = None,
    request_id: object = None,
    task_id: str | None = None,
    retry_after_s: float | None = None,
) -> GenerationError:
    """Map a DashScope error to its exception: by HTTP status when there is one, else by code."""
    where = ", ".join(
        part
        for part in (
            f"HTTP {status}" if status is not None else "",
            f"task {task_id}" if task_id else "",
            f"request {request_id}" if request_id else "",
        )
        if part
    )
    text = f"DashScope {code}: {message}" + (f" ({where})" if where else "")
    if status == 429 or code.startswith("Throttling"):
        return GenerationThrottled(text, retry_after_s=retry_after_s)
    if status is not None and 400 <= status < 500 and status != 408:
        return GenerationRefused(text)
    if status is None and code.startswith(_REFUSAL_CODES):
        return GenerationRefused(text)
    return GenerationError(text)


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


def _frame_png(data: bytes, size: int) -> bytes:
    try:
        with Image.open(io.BytesIO(data)) as image:
            frame = image.convert("RGB").resize((size, size), Image.Resampling.LANCZOS)
    except (OSError, Image.DecompressionBombError) as exc:
        raise GenerationError(f"DashScope returned an unreadable image: {exc}") from exc
    out = io.BytesIO()
    frame.save(out, format="PNG")
    return out.getvalue()


def _heartbeated_task_ids() -> dict[int, str]:
    """The task ids a previous attempt of this activity heartbeated, by offset; empty outside an activity."""
    if not activity.in_activity():
        return {}
    details = activity.info().heartbeat_details
    last = details[0] if details else None
    ids = last.get(HEARTBEAT_KEY) if isinstance(last, Mapping) else None
    if not isinstance(ids, Mapping):
        return {}
    return {
        int(offset): task_id
        for offset, task_id in ids.items()
        if str(offset).isdigit() and isinstance(task_id, str) and task_id
    }


def _heartbeat(task_ids: Mapping[int, str]) -> None:
    if activity.in_activity():
        activity.heartbeat({HEARTBEAT_KEY: {str(offset): task_id for offset, task_id in sorted(task_ids.items())}})


def create_dashscope_generator() -> DashScopeGenerator:
    """Registry factory: the DashScope backend from the ``POPCON_DASHSCOPE_*`` settings (the API key is checked at
    generate time)."""
    return DashScopeGenerator.from_settings(DashScopeSettings())
