"""A local stand-in for DashScope's asynchronous Wan APIs, for tests: text-to-image, image edit, image-to-video.

Real HTTP servers on 127.0.0.1 (ephemeral ports) that answer like the documented service (docs/dashscope.md):

- ``POST /api/v1/services/aigc/text2image/image-synthesis``, ``.../image2image/image-synthesis`` and
  ``.../video-generation/video-synthesis`` (Bearer key, ``X-DashScope-Async: enable``, a JSON body of ``model``,
  ``input``, ``parameters``, checked as the docs describe: sizes, ``n``, seeds, input images as base64 data URIs of at
  most 10 MB without transparency and with sides in range, each video model's durations and resolutions) create a
  task;
- ``GET /api/v1/tasks/{task_id}`` reports it PENDING, then RUNNING, then SUCCEEDED with ``output.results[].url`` (one
  PNG per image, drawn at the requested size) or ``output.video_url`` (a small real H.264 MP4 of a coloured disc on
  white); unknown ids answer UNKNOWN;
- the result URLs point at a second server (another origin, like the service's OSS storage), served without
  authentication; an expired one answers like OSS: 403 ``AccessDenied`` "Request has expired." with EC
  ``0002-00000069``.

Errors are ``{"code", "message", "request_id"}`` with the HTTP status; a wrong key answers 401 ``InvalidApiKey``,
quoting the key it was given when ``quote_refused_key`` is set (as the service may). Every request is recorded (so
tests count the submissions), and every submit in :attr:`FakeDashScope.submit_log` with its monotonic time, model,
what it asks for and how it was answered (benchmarks count from it).

``submits_per_second`` limits submits as DashScope's per-second limits do (one limit for every submit: the strictest
case, all roles calling one model): a token bucket of that rate holding at most ``max(1, rate)`` submits; a submit
past it answers ``429`` ``Throttling.RateQuota`` "Requests rate limit exceeded, please try again later." with
``Retry-After`` (whole seconds until a submit would pass) and creates no task. :meth:`FakeDashScope.hold` makes the
requests to an endpoint wait until :meth:`FakeDashScope.release` (a test catches the generator between two steps);
:meth:`FakeDashScope.lose_answers` creates a task and closes the connection without answering (a lost answer).

Failures are scripted: :meth:`FakeDashScope.script_error` (e.g. refused or throttled submits, with headers such as
``Retry-After``), :meth:`FakeDashScope.script_not_json` (an HTML error page, or any
other body that is not JSON), :meth:`FakeDashScope.script_answer` (JSON without the fields the docs promise), and per
task :meth:`FakeDashScope.script_task` with a :class:`TaskScript` (ends FAILED, never finishes, results expired,
downloads cut short: the full ``Content-Length`` is announced and half the body sent, succeeds without result URLs,
results that are not images or videos).
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

import av
from PIL import Image, ImageDraw

API_PREFIX = "/api/v1"
TEXT_TO_IMAGE_PATH = f"{API_PREFIX}/services/aigc/text2image/image-synthesis"
IMAGE_EDIT_PATH = f"{API_PREFIX}/services/aigc/image2image/image-synthesis"
IMAGE_TO_VIDEO_PATH = f"{API_PREFIX}/services/aigc/video-generation/video-synthesis"
TASKS_PREFIX = f"{API_PREFIX}/tasks/"
RESULTS_PREFIX = "/results/"
BACKGROUND = (255, 255, 255)
SIZE_PATTERN = re.compile(r"^(\d+)\*(\d+)$")
DATA_URI = re.compile(r"^data:(image/(?:png|jpeg|jpg|bmp|webp));base64,(.+)$", re.DOTALL)
MAX_INPUT_BYTES = 10_000_000
CLIP_EDGE, CLIP_FRAMES, CLIP_FPS = 96, 12, 12
RATE_QUOTA_MESSAGE = "Requests rate limit exceeded, please try again later."
NOT_JSON_MESSAGE = "the request body must be JSON (Content-Type: application/json)"

Kind = Literal["text2image", "image2image", "video"]
Endpoint = Literal["submit", "task"]
SUBMIT_PATHS: dict[str, Kind] = {
    TEXT_TO_IMAGE_PATH: "text2image",
    IMAGE_EDIT_PATH: "image2image",
    IMAGE_TO_VIDEO_PATH: "video",
}
VIDEO_MODELS: dict[str, tuple[frozenset[int], frozenset[str]]] = {
    "wan2.6-i2v-flash": (frozenset(range(2, 16)), frozenset({"720P", "1080P"})),
    "wan2.6-i2v": (frozenset({5, 10, 15}), frozenset({"720P", "1080P"})),
    "wan2.5-i2v-preview": (frozenset({5, 10}), frozenset({"480P", "720P", "1080P"})),
    "wan2.2-i2v-flash": (frozenset({5}), frozenset({"480P", "720P", "1080P"})),
    "wan2.2-i2v-plus": (frozenset({5}), frozenset({"480P", "1080P"})),
    "wanx2.1-i2v-plus": (frozenset({5}), frozenset({"720P"})),
    "wanx2.1-i2v-turbo": (frozenset({3, 4, 5}), frozenset({"480P", "720P"})),
}
"""Durations and resolution tiers of the documented image-to-video models."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer; ``content_length`` overrides the announced length (a body cut short)."""

    status: int
    headers: dict[str, str]
    body: bytes
    content_length: int | None = None


LOST = Reply(0, {}, b"")
"""No answer: the connection is closed once the request was read (a reset after the request was sent)."""


def seed_colour(seed: int) -> tuple[int, int, int]:
    """The fill colour of the disc drawn for the image or clip generated with ``seed`` (tests tell them apart)."""
    return (seed * 67 + 40) % 200, (seed * 131 + 90) % 200, (seed * 29 + 150) % 200


@functools.lru_cache(maxsize=32)
def clip_mp4(seed: int) -> bytes:
    """The MP4 served for a clip task of ``seed``: a disc of :func:`seed_colour` crossing a white square."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=CLIP_FPS)
        stream.width = stream.height = CLIP_EDGE
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, CLIP_FPS)
        for index in range(CLIP_FRAMES):
            image = Image.new("RGB", (CLIP_EDGE, CLIP_EDGE), BACKGROUND)
            x = CLIP_EDGE * (0.15 + 0.4 * index / CLIP_FRAMES)
            ImageDraw.Draw(image).ellipse(
                (x, CLIP_EDGE * 0.3, x + CLIP_EDGE * 0.4, CLIP_EDGE * 0.7), fill=seed_colour(seed)
            )
            frame = av.VideoFrame.from_image(image)
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


@dataclass(frozen=True)
class RecordedRequest:
    """One request a server received; header names are lower-case, ``body`` is the parsed JSON or ``None``."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


SubmitOutcome = Literal["accepted", "throttled", "refused"]


@dataclass(frozen=True)
class SubmitRecord:
    """One submit as the stand-in answered it.

    Attributes:
        at: When it arrived, ``time.monotonic()`` of this process.
        kind: The endpoint: text-to-image, image edit or image-to-video.
        model: ``model`` of the body ("" without one).
        outcome: ``accepted`` (a task was created), ``throttled`` (429 past ``submits_per_second``) or ``refused``
            (any other error answer, scripted ones included).
        images: ``parameters.n`` of an accepted image task (0 otherwise).
        seconds: ``parameters.duration`` of an accepted video task (the default 5 when not sent; 0 otherwise).
        task_id: The task created, if accepted.
    """

    at: float
    kind: Kind
    model: str
    outcome: SubmitOutcome
    images: int = 0
    seconds: int = 0
    task_id: str | None = None


class TokenBucket:
    """DashScope-like requests-per-second limit: ``rate`` tokens a second, holding at most ``max(1, rate)``."""

    def __init__(self, rate: float, now: float | None = None) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self._tokens = self.capacity
        self._at = time.monotonic() if now is None else now

    def take(self, now: float) -> float | None:
        """Take a token at ``now``: ``None`` if one was there, else the seconds until one will be."""
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / self.rate


@dataclass(frozen=True)
class TaskScript:
    """How one task misbehaves; :meth:`FakeDashScope.script_task` queues it for the next task submitted.

    Attributes:
        failed: The task ends FAILED with this ``(code, message)``.
        never_finish: The task stays RUNNING.
        expired: Its result URLs answer like an expired OSS signature (403, ``0002-00000069``).
        cut_short: This many downloads of its results send half the body under the full ``Content-Length``.
        image_failures: Image index within the task -> the ``(code, message)`` given instead of its URL.
        no_results: The task ends SUCCEEDED without ``output.results`` or ``output.video_url``.
        garbled_results: Its result URLs serve an HTML page (200, ``text/html``) instead of the PNG or MP4.
    """

    failed: tuple[str, str] | None = None
    never_finish: bool = False
    expired: bool = False
    cut_short: int = 0
    image_failures: dict[int, tuple[str, str]] = field(default_factory=dict)
    no_results: bool = False
    garbled_results: bool = False


@dataclass
class FakeTask:
    """A submitted task, what it makes, and how often it was polled and downloaded."""

    task_id: str
    kind: Kind
    model: str
    prompt: str
    width: int
    height: int
    n: int
    seed: int
    script: TaskScript
    seconds: int = 0
    """A video task's ``parameters.duration`` (5 when not sent), what its usage answers and DashScope bills."""
    polls: int = 0
    downloads: int = 0
    cut_short_left: int = 0


class FakeDashScope:
    """The stand-in. Use as a context manager; ``base_url`` is what the generator needs.

    Args:
        api_key: The only key accepted.
        pending_polls: Polls answered PENDING before a task runs.
        running_polls: Polls answered RUNNING before a task ends.
        quote_refused_key: A wrong key's 401 quotes the key given (``Invalid API-key provided: <key>``).
        submits_per_second: Throttle submits past this rate (see the module's docstring); ``None``: no limit.
    """

    def __init__(
        self,
        *,
        api_key: str = "sk-fake-dashscope-key",
        pending_polls: int = 1,
        running_polls: int = 1,
        quote_refused_key: bool = False,
        submits_per_second: float | None = None,
    ):
        self.api_key = api_key
        self.quote_refused_key = quote_refused_key
        self.pending_polls = pending_polls
        self.running_polls = running_polls
        self.requests: list[RecordedRequest] = []
        self.submit_log: list[SubmitRecord] = []
        self.tasks: dict[str, FakeTask] = {}
        self._bucket = None if submits_per_second is None else TokenBucket(submits_per_second)
        self._answers: dict[Endpoint, deque[Reply]] = {"submit": deque(), "task": deque()}
        self._task_scripts: deque[TaskScript] = deque()
        self._answers_to_lose = 0
        self._lock = threading.Lock()
        self._gates: dict[Endpoint, threading.Event] = {"submit": threading.Event(), "task": threading.Event()}
        for gate in self._gates.values():
            gate.set()
        self._waiting: dict[Endpoint, int] = {"submit": 0, "task": 0}
        self._api = _Server(self)
        self._results = _Server(self)
        self._threads = [
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
            for server, name in ((self._api, "fake-dashscope"), (self._results, "fake-dashscope-results"))
        ]

    @property
    def base_url(self) -> str:
        """The API root, as ``POPCON_DASHSCOPE_BASE_URL`` would give it."""
        return _origin(self._api) + API_PREFIX

    @property
    def results_origin(self) -> str:
        """``http://127.0.0.1:<port>`` of the result server (another origin than the API)."""
        return _origin(self._results)

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for gate in self._gates.values():
            gate.set()
        for server in (self._api, self._results):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join()

    def script_error(
        self,
        endpoint: Endpoint,
        status: int,
        code: str,
        message: str,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests to ``endpoint`` (a submit of any kind, or a task poll) with this error."""
        with self._lock:
            self._answers[endpoint].extend([_error(status, code, message, headers)] * times)

    def script_not_json(
        self,
        endpoint: Endpoint,
        *,
        status: int = 502,
        times: int = 1,
        body: bytes | None = None,
        content_type: str = "text/html",
    ) -> None:
        """Answer the next ``times`` requests to ``endpoint`` with an HTML page, as a gateway in front would (or with
        ``body`` of ``content_type``)."""
        page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
        reply = Reply(status, {"Content-Type": content_type}, page if body is None else body)
        with self._lock:
            self._answers[endpoint].extend([reply] * times)

    def script_answer(self, endpoint: Endpoint, payload: Any, *, status: int = 200, times: int = 1) -> None:
        """Answer the next ``times`` requests to ``endpoint`` with ``payload`` as JSON, whatever its shape (e.g. an
        answer without ``output``, an output without ``task_id`` or ``task_status``, a JSON array)."""
        reply = Reply(status, {"Content-Type": "application/json"}, json.dumps(payload).encode())
        with self._lock:
            self._answers[endpoint].extend([reply] * times)

    def script_task(self, script: TaskScript) -> None:
        """Make the next submitted task misbehave as ``script`` says (scripts queue up, one per task)."""
        with self._lock:
            self._task_scripts.append(script)

    def lose_answers(self, times: int = 1) -> None:
        """The next ``times`` submits that create a task close the connection instead of answering (the task exists,
        the caller never learns its id)."""
        with self._lock:
            self._answers_to_lose += times

    def hold(self, endpoint: Endpoint) -> None:
        """Make requests to ``endpoint`` wait, unanswered, until :meth:`release` (or the stand-in stops)."""
        self._gates[endpoint].clear()

    def release(self, endpoint: Endpoint) -> None:
        """Answer the requests held at ``endpoint``, and the next ones at once."""
        self._gates[endpoint].set()

    def waiting(self, endpoint: Endpoint) -> int:
        """How many requests to ``endpoint`` are held now."""
        with self._lock:
            return self._waiting[endpoint]

    def forget_tasks(self) -> None:
        """Expire every task, as the service does after 24 hours: their ids answer UNKNOWN, their URLs 404."""
        with self._lock:
            self.tasks.clear()

    def submits(self, kind: Kind | None = None) -> list[RecordedRequest]:
        """The task submissions received (of one kind, or all), in order."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == "POST" and r.path in SUBMIT_PATHS and kind in (None, SUBMIT_PATHS[r.path])
            ]

    def polls(self) -> list[RecordedRequest]:
        """The task polls received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith(TASKS_PREFIX)]

    def downloads(self) -> list[RecordedRequest]:
        """The result downloads received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith(RESULTS_PREFIX)]

    def handle(self, server: _Server, method: str, target: str, headers: dict[str, str], raw_body: bytes) -> Reply:
        """Answer one request (called by the HTTP handler threads)."""
        path = target.split("?", 1)[0]
        self._pass_gate(server, method, path)
        with self._lock:
            body = _parse_json(raw_body)
            self.requests.append(RecordedRequest(method, path, headers, body))
            if server is self._results:
                if method == "GET" and path.startswith(RESULTS_PREFIX):
                    return self._result(path.removeprefix(RESULTS_PREFIX))
                return Reply(404, {"Content-Type": "text/plain"}, b"NoSuchKey")
            if method == "POST" and path in SUBMIT_PATHS:
                return self._submit(SUBMIT_PATHS[path], headers, body)
            if method == "GET" and path.startswith(TASKS_PREFIX):
                return self._poll(headers, path.removeprefix(TASKS_PREFIX))
            return _error(404, "InvalidURL", "Invalid URL provided in your request.")

    def _pass_gate(self, server: _Server, method: str, path: str) -> None:
        """Wait while the endpoint of this request is held."""
        if server is not self._api:
            return
        endpoint: Endpoint | None = (
            "submit" if method == "POST" and path in SUBMIT_PATHS else "task" if path.startswith(TASKS_PREFIX) else None
        )
        if endpoint is None or self._gates[endpoint].is_set():
            return
        with self._lock:
            self._waiting[endpoint] += 1
        self._gates[endpoint].wait()
        with self._lock:
            self._waiting[endpoint] -= 1

    def _scripted(self, endpoint: Endpoint) -> Reply | None:
        return self._answers[endpoint].popleft() if self._answers[endpoint] else None

    def _unauthorized(self, headers: dict[str, str]) -> Reply | None:
        given = headers.get("authorization", "")
        if given == f"Bearer {self.api_key}":
            return None
        quoted = f": {given.removeprefix('Bearer ')}" if self.quote_refused_key else "."
        return _error(401, "InvalidApiKey", f"Invalid API-key provided{quoted}")

    def _submit(self, kind: Kind, headers: dict[str, str], body: Any) -> Reply:
        now = time.monotonic()
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        reply, task = self._created(kind, headers, body, now)
        if task is not None:
            video = task.kind == "video"
            record = SubmitRecord(
                now,
                kind,
                model,
                "accepted",
                images=0 if video else task.n,
                seconds=task.seconds,
                task_id=task.task_id,
            )
        else:
            record = SubmitRecord(now, kind, model, "throttled" if reply.status == 429 else "refused")
        self.submit_log.append(record)
        return reply

    def _created(self, kind: Kind, headers: dict[str, str], body: Any, now: float) -> tuple[Reply, FakeTask | None]:
        refused = self._scripted("submit") or self._unauthorized(headers)
        if refused:
            return refused, None
        if headers.get("x-dashscope-async") != "enable":
            return _error(403, "AccessDenied", "current user api does not support synchronous calls"), None
        if headers.get("content-type", "").split(";")[0].strip() != "application/json" or body is None:
            return _error(400, "InvalidParameter", NOT_JSON_MESSAGE), None
        if self._bucket is not None:
            wait_s = self._bucket.take(now)
            if wait_s is not None:
                retry_after = {"Retry-After": str(max(1, math.ceil(wait_s)))}
                return _error(429, "Throttling.RateQuota", RATE_QUOTA_MESSAGE, retry_after), None
        task = _validated_task(kind, body)
        if isinstance(task, tuple):
            return _error(400, *task), None
        script = self._task_scripts.popleft() if self._task_scripts else TaskScript()
        task.script, task.cut_short_left = script, script.cut_short
        self.tasks[task.task_id] = task
        if self._answers_to_lose > 0:
            self._answers_to_lose -= 1
            return LOST, task
        answer = {"output": {"task_status": "PENDING", "task_id": task.task_id}, "request_id": _request_id()}
        return _json(200, answer), task

    def _poll(self, headers: dict[str, str], task_id: str) -> Reply:
        refused = self._scripted("task") or self._unauthorized(headers)
        if refused:
            return refused
        task = self.tasks.get(task_id)
        if task is None:
            return _json(200, {"request_id": _request_id(), "output": {"task_id": task_id, "task_status": "UNKNOWN"}})
        task.polls += 1
        output: dict[str, Any] = {"task_id": task_id, "submit_time": "2025-01-08 16:03:59.840"}
        if task.polls <= self.pending_polls:
            return _json(200, {"request_id": _request_id(), "output": {**output, "task_status": "PENDING"}})
        output["scheduled_time"] = "2025-01-08 16:03:59.863"
        if task.script.never_finish or task.polls <= self.pending_polls + self.running_polls:
            return _json(200, {"request_id": _request_id(), "output": {**output, "task_status": "RUNNING"}})
        output["end_time"] = "2025-01-08 16:04:10.660"
        if task.script.failed is not None:
            code, message = task.script.failed
            failed = {**output, "task_status": "FAILED", "code": code, "message": message}
            return _json(200, {"request_id": _request_id(), "output": failed})
        signature = "?Expires=1736337850&OSSAccessKeyId=fake&Signature=fake"
        if task.script.no_results:
            return _json(200, {"request_id": _request_id(), "output": {**output, "task_status": "SUCCEEDED"}})
        if task.kind == "video":
            url = f"{self.results_origin}{RESULTS_PREFIX}{task_id}/video.mp4{signature}"
            succeeded = {**output, "task_status": "SUCCEEDED", "orig_prompt": task.prompt, "video_url": url}
            usage = {"duration": task.seconds, "video_count": 1}
            return _json(200, {"request_id": _request_id(), "output": succeeded, "usage": usage})
        results: list[dict[str, str]] = []
        for index in range(task.n):
            if index in task.script.image_failures:
                code, message = task.script.image_failures[index]
                results.append({"code": code, "message": message})
            else:
                url = f"{self.results_origin}{RESULTS_PREFIX}{task_id}/{index}.png{signature}"
                results.append({"orig_prompt": task.prompt, "url": url})
        made = sum(1 for result in results if "url" in result)
        metrics = {"TOTAL": task.n, "SUCCEEDED": made, "FAILED": task.n - made}
        succeeded = {**output, "task_status": "SUCCEEDED", "results": results, "task_metrics": metrics}
        return _json(200, {"request_id": _request_id(), "output": succeeded, "usage": {"image_count": made}})

    def _result(self, name: str) -> Reply:
        task_id, _, file_name = name.partition("/")
        task = self.tasks.get(task_id)
        if task is None:
            return _oss_error(404, "NoSuchKey", "The specified key does not exist.")
        if task.script.expired:
            return _oss_error(403, "AccessDenied", "Request has expired.", ec="0002-00000069")
        if task.script.garbled_results:
            task.downloads += 1
            return Reply(200, {"Content-Type": "text/html"}, b"<html><body><h1>Service Unavailable</h1></body></html>")
        if task.kind == "video" and file_name == "video.mp4":
            payload, media_type = clip_mp4(task.seed), "video/mp4"
        else:
            index = file_name.removesuffix(".png")
            if task.kind == "video" or not index.isdigit() or int(index) >= task.n:
                return _oss_error(404, "NoSuchKey", "The specified key does not exist.")
            payload, media_type = _draw(task.width, task.height, task.seed + int(index)), "image/png"
        task.downloads += 1
        if task.cut_short_left > 0:
            task.cut_short_left -= 1
            return Reply(200, {"Content-Type": media_type}, payload[: len(payload) // 2], content_length=len(payload))
        return Reply(200, {"Content-Type": media_type}, payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeDashScope) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        raw_body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.fake.handle(self.server, method, self.path, headers, raw_body)
        if reply is LOST:
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header(
            "Content-Length", str(len(reply.body) if reply.content_length is None else reply.content_length)
        )
        self.end_headers()
        self.wfile.write(reply.body)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


def _validated_task(kind: Kind, body: Any) -> FakeTask | tuple[str, str]:
    """The task a submit body asks for, or the ``(code, message)`` saying what is wrong with it."""
    if not isinstance(body, dict) or not body.get("model"):
        return "BadRequest.EmptyModel", 'Required parameter "model" missing from request.'
    model = str(body["model"])
    prompt_input = body.get("input")
    if not isinstance(prompt_input, dict) or not isinstance(prompt_input.get("prompt"), str):
        return "BadRequest.EmptyInput", "Required input parameter missing from request."
    if not prompt_input["prompt"].strip():
        return "InvalidParameter", "prompt must not be empty."
    if not isinstance(prompt_input.get("negative_prompt", ""), str):
        return "InvalidParameter", "negative_prompt must be a string."
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        return "InvalidParameter", "parameters must be an object."
    seed = parameters.get("seed", 0)
    if type(seed) is not int or not 0 <= seed <= 2**31 - 1:
        return "InvalidParameter", "seed must be an integer in [0, 2147483647]."
    if any(not isinstance(parameters.get(flag, False), bool) for flag in ("prompt_extend", "watermark", "audio")):
        return "InvalidParameter", "prompt_extend, watermark and audio must be booleans."
    if kind == "video":
        return _validated_video(model, prompt_input, parameters, seed)
    if kind == "image2image":
        images = prompt_input.get("images")
        if not isinstance(images, list) or not 1 <= len(images) <= 3:
            return "InvalidParameter", "images must be a list of 1 to 3 images."
        for image in images:
            problem = _image_problem(image, 384, 5000)
            if problem:
                return "InvalidParameter", problem
    default_size = "1280*1280" if kind == "image2image" else "1024*1024"
    size = SIZE_PATTERN.match(str(parameters.get("size", default_size)))
    if size is None:
        return "InvalidParameter", "size must be W*H."
    width, height = (int(edge) for edge in size.groups())
    if kind == "text2image" and not (512 <= width <= 1440 and 512 <= height <= 1440):
        return "InvalidParameter", "size must be W*H with each side in [512, 1440]."
    if kind == "image2image" and not 768 * 768 <= width * height <= 1440 * 1440:
        return "InvalidParameter", "size must have a total of 768*768 to 1440*1440 pixels."
    n = parameters.get("n", 4)
    if type(n) is not int or not 1 <= n <= 4:
        return "InvalidParameter", "n must be an integer in [1, 4]."
    return FakeTask(str(uuid.uuid4()), kind, model, prompt_input["prompt"], width, height, n, seed, TaskScript())


def _validated_video(
    model: str, prompt_input: dict[str, Any], parameters: dict[str, Any], seed: int
) -> FakeTask | tuple[str, str]:
    known = VIDEO_MODELS.get(model)
    if known is None:
        return "InvalidParameter", f"Model not exist: {model}"
    durations, resolutions = known
    problem = _image_problem(prompt_input.get("img_url"), 360, 2000)
    if problem:
        return "InvalidParameter", f"img_url: {problem}"
    duration = parameters.get("duration", 5)
    if type(duration) is not int or duration not in durations:
        return "InvalidParameter", f"duration must be one of {sorted(durations)} for {model}."
    if parameters.get("resolution", sorted(resolutions)[-1]) not in resolutions:
        return "InvalidParameter", f"resolution must be one of {sorted(resolutions)} for {model}."
    return FakeTask(
        str(uuid.uuid4()), "video", model, prompt_input["prompt"], 0, 0, 1, seed, TaskScript(), seconds=duration
    )


def _image_problem(image: Any, min_edge: int, max_edge: int) -> str | None:
    """What is wrong with an input image (a public URL, or a base64 data URI checked as the docs say), or None."""
    if isinstance(image, str) and image.startswith(("http://", "https://")):
        return None
    match = DATA_URI.match(image) if isinstance(image, str) else None
    if match is None:
        return "an image must be an HTTP(S) URL or data:{MIME_type};base64,{base64_data}."
    try:
        data = base64.b64decode(match.group(2), validate=True)
    except binascii.Error:
        return "the base64 data is invalid."
    if len(data) > MAX_INPUT_BYTES:
        return "the image file must be at most 10MB."
    try:
        with Image.open(io.BytesIO(data)) as decoded:
            mode, (width, height) = decoded.mode, decoded.size
    except OSError:
        return "the image cannot be decoded."
    if mode in ("RGBA", "LA", "PA"):
        return "PNG images with a transparent channel are not supported."
    if not (min_edge <= width <= max_edge and min_edge <= height <= max_edge):
        return f"the image width and height must be in [{min_edge}, {max_edge}] pixels."
    return None


def _draw(width: int, height: int, seed: int) -> bytes:
    image = Image.new("RGB", (width, height), BACKGROUND)
    ImageDraw.Draw(image).ellipse(
        (width * 0.2, height * 0.2, width * 0.8, height * 0.8), fill=seed_colour(seed), outline=(0, 0, 0), width=8
    )
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _origin(server: _Server) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


def _parse_json(raw_body: bytes) -> Any:
    try:
        return json.loads(raw_body) if raw_body else None
    except ValueError:
        return None


def _request_id() -> str:
    return str(uuid.uuid4())


def _json(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode())


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    return _json(status, {"code": code, "message": message, "request_id": _request_id()}, headers)


def _oss_error(status: int, code: str, message: str, *, ec: str = "0003-00000001") -> Reply:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error>\n'
        f"  <Code>{code}</Code>\n  <Message>{message}</Message>\n  <RequestId>{uuid.uuid4().hex}</RequestId>\n"
        f"  <HostId>dashscope-result.oss-ap-southeast-1.aliyuncs.com</HostId>\n  <EC>{ec}</EC>\n</Error>\n"
    )
    return Reply(status, {"Content-Type": "application/xml", "x-oss-ec": ec}, body.encode())
